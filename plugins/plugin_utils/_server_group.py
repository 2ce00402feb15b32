# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One server over several hosts (sglang_server_nodes, issue 47): the group's verdict between the phases of
gpuserve.sglang.sglang_server, taken by its action plugin from ``hostvars`` and ``ansible_play_batch`` through the
one verdict function (module_utils/_server/group.py). The role's YAML only sequences the phases.

- ``check``: before ``restart`` the prepare verdict, before ``decide`` the restart verdict; a no is a refusal
  (the module does not run on this node: nothing stops or restarts), with the message the rescue passes on;
- ``options``: ``force_restart`` (sglang_restart_forced, or a restart due on any node), ``group`` (this run's
  group change: node 0's host lease id) and ``decision`` (what the rescue's ``finish`` does on every node);
- ``due``: for ``state: due`` (the rolling playbooks' question), whether a restart is due on this node or on any
  node of its server, from each node's answer, and why.

tests/unit/plugins/plugin_utils/test_server_group.py.
"""

from __future__ import annotations

from ansible.plugins.filter.core import to_bool

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import group as _group

REGISTER = "sglang_server"   # what the role's run.yml registers the module's result under
LEASE = "sglang_lease"       # the host lease's result (lease.yml): node 0's lease id is the run's group change
# the verdict taken before a phase: the phase whose results it reads, and the refusal's message
CHECKS = {
    "restart": ("prepare", "sglang_server_nodes: not every node of this server (%s) is ready: %s. Nothing was stopped "
                           "or restarted on any node"),
    "decide": ("restart", "the group's verdict on this server (%s) is a no: %s. Every node goes back to its last "
                          "good configuration"),
}
# what a refusal keeps of this node's previous result: what the verdict reads (the rescue's decision, a later
# node's verdict), so a refusal changes no node's view of the group
CARRIED = ("phase", "restart_due", "due", "group_state", "group_decision")
REFUSED = "group_refused"    # a refusal's mark: the phase it refused


def registered_as(register):
    """The name a task registers its result under: Task.register as the running ansible-core holds it (a name; in
    2.21 and later a dict {name: what is kept}), REGISTER where the task registers none."""
    if isinstance(register, dict):
        register = next(iter(register), "")
    return str(register or "") or REGISTER


def result_of(hostvars, node, register):
    """``node``'s result registered under ``register`` (None where it has none); a refusal of the verdict reads as
    the result it carries."""
    try:
        facts = hostvars[node] if node in hostvars else {}
        result = facts.get(register)
    except (KeyError, TypeError, AttributeError):
        return None
    if isinstance(result, dict) and result.get(REFUSED):
        # a node refused by the verdict is seen as its previous result: the group's view stays that result's
        return dict((key, result[key]) for key in CARRIED if key in result)
    return result


def nodes_of(value):
    """sglang_server_nodes as a list ([] for a server on one host)."""
    return list(value) if isinstance(value, (list, tuple)) else []


def verdict(nodes, hostvars, play_hosts, phase, register=REGISTER, lease=LEASE):
    """The group's verdict on ``phase`` (module_utils/_server/group.verdict) over each node's result registered
    under ``register`` in ``hostvars`` (Ansible's lazy view: a node's variables are templated only when read), this
    run's group change the id of node 0's host lease (``lease``)."""
    nodes = nodes_of(nodes)
    results, group = {}, ""
    for index, node in enumerate(nodes):
        results[node] = result_of(hostvars, node, register)
        taken = result_of(hostvars, node, lease) if index == 0 else None
        if isinstance(taken, dict) and isinstance(taken.get("lease"), dict):
            group = str(taken["lease"].get("id") or "")
    return _group.verdict(nodes, results, play_hosts, phase, group)


def check(nodes, hostvars, play_hosts, phase, register=REGISTER, lease=LEASE):
    """(verdict, refusal message or ''): the verdict taken before ``phase`` (the prepare verdict before
    ``restart``, the restart verdict before ``decide``; before any other phase the prepare one, never refused)."""
    reads, message = CHECKS.get(phase, ("prepare", ""))
    taken = verdict(nodes, hostvars, play_hosts, reads, register, lease)
    if message and taken["problems"]:
        return taken, message % (", ".join(nodes_of(nodes)), "; ".join(taken["problems"]))
    return taken, ""


def options(taken, forced):
    """The module's ``force_restart``, ``group`` and ``decision`` from the verdict: restart where
    ``forced`` (sglang_restart_forced, Ansible's ``| bool``) or where a restart is due on any node."""
    return {"force_restart": bool(to_bool(forced)) or bool(taken["due"]), "group": taken["group"],
            "decision": taken["decision"]}


def refusal(message, phase, previous):
    """The refused phase's result: failed with ``message``, the module not run; it carries what the verdict reads
    of this node's ``previous`` result (so the rescue decides as the phases' results say)."""
    previous = previous if isinstance(previous, dict) else {}
    result = dict((key, previous[key]) for key in CARRIED if key in previous)
    result.update(failed=True, changed=False, msg=message)
    result[REFUSED] = phase
    return result


def due(nodes, hostvars, host, register=REGISTER):
    """{"due", "reasons"} of ``host``: its own answer to ``state: due`` (registered under ``register``), or, for a
    server over several hosts, a restart due on any node (the server restarts as one), each other node due named
    in the reasons."""
    nodes = nodes_of(nodes)
    results = dict((node, result_of(hostvars, node, register)) for node in nodes + [host])
    mine = results[host] if isinstance(results[host], dict) else {}
    reasons = list(mine.get("reasons") or [])
    for index, node in enumerate(nodes):
        if node != host and _group.node_due(results[node]):
            reasons.append("a restart is due on %s (node %d of this server, which restarts as one): %s" % (
                node, index, "; ".join(results[node].get("reasons") or []) or "?"))
    is_due = bool(mine.get("due")) or _group.verdict(nodes, results, nodes, "prepare")["due"]
    return {"due": is_due, "reasons": reasons}
