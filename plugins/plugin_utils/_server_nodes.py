# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One server over several hosts (sglang_server_nodes, issue 47): what its nodes must share, computed on the
controller by the action plugin of gpuserve.sglang.sglang_host_facts.

- ``fingerprint``: in the server role's preflight (``server_preflight``), what this node must share with the
  others, returned as the host read's ``node`` (so every node's is ``hostvars[node]._server_host.node``);
- ``check``: in the role's nodes step (``server_nodes``), after every node's preflight: the refusal naming each
  node that differs or has no preflight in this play, else what this node must reach of node 0 (``reach``).

tests/unit/plugins/plugin_utils/test_server_nodes.py.
"""

from __future__ import annotations

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_nodes

REGISTER = "_server_host"   # the preflight's registered result on each node
REFUSAL = "sglang_server_nodes: the nodes of this server differ (nothing was changed): "


def fingerprint(host, profile, args):
    """What one node must share with the others (filter sglang_node_fingerprint's dict)."""
    return sglang_nodes.sglang_node_fingerprint(host, profile, args)


def _node_of(hostvars, name):
    try:
        host = hostvars[name].get(REGISTER) if name in hostvars else None
    except KeyError:
        return None
    return host.get("node") if isinstance(host, dict) else None


def check(nodes, hostvars, host, port):
    """{"failed": bool, "msg": the refusal, "mismatches": [...], "reach": {node0, address, ports} or {}} for
    ``host``: the mismatches of every other node's fingerprint (``hostvars[node]._server_host.node``) with this
    host's; ``reach`` only when there are none."""
    nodes = list(nodes or [])
    mine = dict((name, {"fp": _node_of(hostvars, name)}) for name in nodes + [host])
    mismatches = sglang_nodes.sglang_node_mismatches(nodes, mine, host, "fp")
    if mismatches:
        return {"failed": True, "msg": REFUSAL + "; ".join(mismatches), "mismatches": mismatches, "reach": {}}
    return {"failed": False, "mismatches": [], "reach": sglang_nodes.sglang_node_probe(nodes, hostvars, host, port)}
