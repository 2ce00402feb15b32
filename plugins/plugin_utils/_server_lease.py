# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's host lease (issue 47): what the action plugin of gpuserve.sglang.sglang_lease computes from its
``gates`` option. tests/unit/plugins/plugin_utils/test_server_lease.py."""

from __future__ import annotations

from ansible.plugins.filter.core import to_bool


def _int(value):
    return int(value or 0)


def _bool(value):
    """Ansible's own ``| bool`` (the role's YAML used it)."""
    return bool(to_bool(value))


def gate_seconds(gates):
    """The longest the gates after a restart take, for the host lease's TTL (issue 39 defect 8): the benchmark
    gate's rounds (requests / concurrency, plus its warm-up round) times its timeout when it is on, plus one timeout
    for the answers gate when that is on. ``gates``: bench, requests, concurrency, timeout, answers."""
    gates = gates if isinstance(gates, dict) else {}
    timeout = _int(gates.get("timeout"))
    seconds = 0
    if _bool(gates.get("bench")):
        seconds += (_int(gates.get("requests")) // max(_int(gates.get("concurrency")), 1) + 1) * timeout
    if _bool(gates.get("answers")):
        seconds += timeout
    return seconds
