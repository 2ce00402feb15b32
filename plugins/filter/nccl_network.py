# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""NCCL across hosts as data (issue 25), on the controller: nccl_network_env (the NCCL and gloo variables of an
nccl_network mapping) and nccl_network_problems (one message per bad entry). The logic is the module_utils the
module gpuserve.sglang.nccl_tuning runs on the host (plugins/module_utils/_nccl_network.py, where the keys are
described and tested), so the controller and the host judge a mapping the same way."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.module_utils import _nccl_network


def nccl_network_problems(network):
    """One message per bad entry of nccl_network, naming the key and the value ([] when good or empty)."""
    return _nccl_network.nccl_network_problems(network)


def nccl_network_env(network):
    """The NCCL (and gloo) variables of nccl_network, as strings; {} for an empty one. Raises on a bad one."""
    try:
        return _nccl_network.nccl_network_env(network)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """NCCL across hosts."""

    def filters(self):
        return {"nccl_network_env": nccl_network_env, "nccl_network_problems": nccl_network_problems}
