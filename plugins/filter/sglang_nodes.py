# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server over several hosts (issue 25): the hosts of the server in node-rank order, node 0 first
(role variable sglang_server_nodes), and what each host's command line gets from that list: --nnodes, --node-rank
and --dist-init-addr, derived here and never typed per host.

SGLang (entrypoints/engine.py) starts every node's schedulers with these three flags; only node 0 serves the HTTP
API. --dist-init-addr is node 0's address and a port: SGLang splits it at ':' (an IPv6 address in brackets,
utils.common.configure_ipv6) and uses that port and the five after it on node 0 (server_args.PortArgs)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import server_default
from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import unbracket, url_host

string_types = (str,)

# a DNS name or an IPv4 address, or an IPv6 address (brackets added here); nothing a shell or SGLang's split reads
_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]+$")
# SGLang uses the dist port and the five after it on node 0
PORTS_USED = 6


def _address(node, hostvars):
    hv = hostvars[node] if node in hostvars else {}
    return str(hv.get("sglang_node_address") or hv.get("ansible_host") or node).strip()


def _address_problem(node, address):
    address = unbracket(address)
    if ":" in address:
        return None if _IPV6_RE.match(address) and address.count(":") >= 2 else (
            "%s: node address %r is not an IPv6 address" % (node, address))
    return None if _NAME_RE.match(address) else (
        "%s: node address %r is not a host name or an IPv4 address (sglang_node_address or ansible_host)"
        % (node, address))


def _port(port):
    if isinstance(port, bool):
        return None
    try:
        port = int(str(port).strip())
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 - (PORTS_USED - 1) else None


def sglang_node_problems(nodes, hostvars, host, port=50000):
    """What is wrong with a multi-node server's definition, as messages naming the variable and the value ([] when
    nothing is, and always [] for a single-host server: nodes empty). Never raises: the preflight refuses."""
    if nodes is None or nodes == [] or nodes == "":
        return []
    if isinstance(nodes, string_types) or not isinstance(nodes, (list, tuple)):
        return ["sglang_server_nodes must be a list of inventory host names in node-rank order, not %r" % (nodes,)]
    problems = []
    names = []
    for node in nodes:
        if not isinstance(node, string_types) or not node.strip():
            problems.append("sglang_server_nodes: %r is not an inventory host name" % (node,))
            continue
        names.append(node)
        if node not in hostvars:
            problems.append("sglang_server_nodes: %s is not a host of the inventory" % node)
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        problems.append("sglang_server_nodes lists %s more than once" % ", ".join(duplicates))
    if len(names) < 2:
        problems.append("sglang_server_nodes: a server over several hosts needs at least two, got %d (leave it "
                        "empty for a server on one host)" % len(names))
    if host not in names:
        problems.append("sglang_server_nodes (%s) does not list this host, %s: set it in the group_vars of the "
                        "server's own group" % (", ".join(names), host))
    if _port(port) is None:
        problems.append("sglang_dist_init_port %r must be a port number 1-%d (SGLang also uses the %d after it on "
                        "node 0)" % (port, 65535 - (PORTS_USED - 1), PORTS_USED - 1))
    if names and names[0] in hostvars:
        problem = _address_problem(names[0], _address(names[0], hostvars))
        if problem:
            problems.append(problem)
    for node in names:
        if node in hostvars and hostvars[node].get("sglang_server_nodes") not in (None, list(nodes)):
            problems.append("%s has another sglang_server_nodes (%s): every node of the server must list the same "
                            "hosts in the same order" % (node, hostvars[node].get("sglang_server_nodes")))
    return list(dict.fromkeys(problems))


# What must be the same on every node of one server (sglang_node_fingerprint), with the words a refusal uses.
FINGERPRINT = (
    ("sglang_release", "the installed SGLang release"),
    ("profile", "sglang_profile"),
    ("gpus", "the number of GPUs"),
    ("compute_caps", "the GPUs' compute capabilities"),
    ("tp", "--tp"),
    ("model_config_sha256", "the model's config.json (sha256)"),
    ("model_index_sha256", "the model's weight index (sha256)"),
    ("model_weight_files", "the number of weight files"),
    ("model_weight_bytes", "the bytes of the weight files"),
)


def sglang_node_fingerprint(host_facts, profile, args):
    """What one node of a multi-node server must share with the others, from the server role's host read
    (gpuserve.sglang.sglang_host_facts: the SGLang release, and the model preflight's GPUs and model) and the
    effective flags. A check the host read did not make (sglang_model_check false) leaves its keys empty."""
    host_facts = host_facts if isinstance(host_facts, dict) else {}
    models = host_facts.get("models") if isinstance(host_facts.get("models"), dict) else {}
    model = next((m for m in models.get("models") or [] if isinstance(m, dict) and m.get("role", "model") == "model"),
                 {})
    weights = model.get("weights") if isinstance(model.get("weights"), dict) else {}
    caps = [str(cap) for cap in models.get("compute_caps") or []]
    args = args if isinstance(args, dict) else {}
    return {
        "sglang_release": str(host_facts.get("sglang_release") or ""),
        "profile": str(profile or ""),
        "gpus": len(caps),
        "compute_caps": sorted(caps),
        "tp": str(args.get("tp", server_default("tp_size", host_facts.get("sglang_release")))),
        "model_config_sha256": str(model.get("config_sha256") or ""),
        "model_index_sha256": str(weights.get("index_sha256") or ""),
        "model_weight_files": int(weights.get("files") or 0),
        "model_weight_bytes": int(weights.get("bytes") or 0),
    }


def sglang_node_mismatches(nodes, hostvars, host, fact="_server_node_fingerprint"):
    """Messages naming each other node of the server whose fingerprint (fact ``fact``, set by the server role's
    preflight on each node) differs from this host's, with both values, or that has none in this play (the nodes
    of one server are deployed together). [] for a server on one host."""
    if not nodes or isinstance(nodes, string_types):
        return []
    mine = (hostvars[host].get(fact) if host in hostvars else None) or {}
    problems = []
    for node in nodes:
        if node == host:
            continue
        theirs = hostvars[node].get(fact) if node in hostvars else None
        if not theirs:
            problems.append("%s has not run the server role's preflight in this play: the nodes of one server (%s) "
                            "are deployed together, in one play over all of them" % (node, ", ".join(nodes)))
            continue
        for key, what in FINGERPRINT:
            if mine.get(key) != theirs.get(key):
                problems.append("%s differs from %s in %s: %s there, %s here"
                                % (node, host, what, theirs.get(key), mine.get(key)))
    return problems


def sglang_node_args(nodes, hostvars, host, port=50000):
    """{'nnodes': N, 'node-rank': K, 'dist-init-addr': '<node 0>:<port>'} for this host of a multi-node server;
    {} for a server on one host (nodes empty). Raises on a definition sglang_node_problems refuses."""
    problems = sglang_node_problems(nodes, hostvars, host, port)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    if not nodes:
        return {}
    address = url_host(_address(nodes[0], hostvars))
    return {"nnodes": len(nodes), "node-rank": list(nodes).index(host),
            "dist-init-addr": "%s:%d" % (address, _port(port))}


def sglang_node_probe(nodes, hostvars, host, port=50000):
    """What this node must reach of node 0 before anything stops: {"address": node 0's address (no brackets),
    "ports": the dist port and the five after it}; {} on node 0 and for a server on one host. Raises on a
    definition sglang_node_problems refuses."""
    problems = sglang_node_problems(nodes, hostvars, host, port)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    if not nodes or list(nodes).index(host) == 0:
        return {}
    first = _port(port)
    return {"node0": nodes[0], "address": unbracket(_address(nodes[0], hostvars)),
            "ports": list(range(first, first + PORTS_USED))}


class FilterModule(object):
    """One SGLang server over several hosts."""

    def filters(self):
        return {
            "sglang_node_problems": sglang_node_problems,
            "sglang_node_args": sglang_node_args,
            "sglang_node_probe": sglang_node_probe,
            "sglang_node_fingerprint": sglang_node_fingerprint,
            "sglang_node_mismatches": sglang_node_mismatches,
        }
