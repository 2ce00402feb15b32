# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The router role's computations as filters. They are private helpers now (plugins/plugin_utils/_router_role.py),
called by the action plugins of gpuserve.sglang.sglang_router_service, sglang_router_workers and sglang_lease
(issue 47); the filters the role no longer calls are deprecated (meta/runtime.yml) and go in 3.0.0."""

from __future__ import annotations

from ansible_collections.gpuserve.sglang.plugins.plugin_utils._router_role import (
    sglang_router_batch, sglang_router_drained_words, sglang_router_envfile, sglang_router_inputs,
    sglang_router_lease_failures, sglang_router_lease_held, sglang_router_other_gateways, sglang_router_readd_kinds,
    sglang_router_rescue, sglang_router_worker_health)


class FilterModule(object):
    """The router role's computations."""

    def filters(self):
        return {
            "sglang_router_inputs": sglang_router_inputs,
            "sglang_router_envfile": sglang_router_envfile,
            "sglang_router_other_gateways": sglang_router_other_gateways,
            "sglang_router_drained_words": sglang_router_drained_words,
            "sglang_router_batch": sglang_router_batch,
            "sglang_router_readd_kinds": sglang_router_readd_kinds,
            "sglang_router_worker_health": sglang_router_worker_health,
            "sglang_router_lease_held": sglang_router_lease_held,
            "sglang_router_lease_failures": sglang_router_lease_failures,
            "sglang_router_rescue": sglang_router_rescue,
        }
