# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The group's verdict: ONE function over the phases' results of the nodes of one server over several hosts
(issue 47). The YAML (roles/server/tasks/group.yml) only sequences the module's phases with Ansible's own
keywords; the action plugin of gpuserve.sglang.sglang_server asks this function what the group decided before
each phase (plugins/plugin_utils/_server_group.py), and refuses a phase the verdict says no to.

The protocol, a two-phase commit whose decision is recorded on the nodes before any acts on it:

1. ``prepare`` on every node: lands what differs, restarts nothing; a node with a group change an earlier run left
   open reports it (``group_state.open``) and lands nothing.
2. verdict: every node prepared, none has an open group change; else no node stops, and the rescue finishes
   the open change as it was decided (3-5 of that run) and puts back what this run landed.
3. ``restart`` on every node where a restart is ``due`` anywhere (a node restarted alone cannot join the others'
   ranks); node 0 runs the gates. verdict: every node restarted and verified, the gates passed.
4. ``decide`` on every node: the decision (keep) written into each node's open change.
5. ``commit`` on every node. A node that fails any step after 4 is never restored alone: the rescue retries its
   commit; a run killed anywhere is finished by the next run: kept on every node where ANY node recorded the
   decision or kept the set under that group change, else rolled back on every node (presumed abort).
"""

from __future__ import annotations


def _why_not(result, phase):
    if not isinstance(result, dict) or not result:
        return "no result (it did not run this step)"
    if result.get("unreachable"):
        return "unreachable"
    if result.get("failed"):
        return "failed: %s" % (str(result.get("msg") or "").splitlines() or [""])[0][:300]
    if result.get("skipped"):
        return "skipped"
    if result.get("phase") != phase:
        return "no result of the %s step in this run" % phase
    return ""


def _truth(value):
    return value is True or str(value).lower() in ("true", "yes", "1")


def node_due(result):
    """Whether a node's result says a restart is due there: a prepare's ``restart_due``, else a read's ``due``
    (state due: the rollout's question before it drains)."""
    result = result if isinstance(result, dict) else {}
    return _truth(result.get("restart_due", result.get("due", False)))


def verdict(nodes, results, play_hosts, phase, group=""):
    """The group's verdict on ``phase`` (prepare, restart) from ``results`` ({node: that node's last result of
    the module}), ``play_hosts`` (Ansible drops a failed or unreachable host) and ``group`` (this run's group
    change). Returns:

    - ``problems``: one line per node that is not fine (not in the play, failed, skipped, not this step's result)
      and per node with an open group change of an earlier run;
    - ``due``: a restart is due on some node (then on every node);
    - ``group``: this run's group change (what the phases record);
    - ``open``: the nodes with an earlier run's open group change;
    - ``decision``: what the rescue does on every node: ``{"group": id, "keep": bool}``: the earlier run's open
      change when there is one (the one decided or kept on a node, where nodes hold different ones), else this
      run's; kept where any node recorded the decision (decide, commit) or kept its set under that change, else
      restored (presumed abort)."""
    if not nodes or isinstance(nodes, str):
        return {"problems": [], "due": False, "open": [], "group": "", "decision": {"group": "", "keep": False}}
    play_hosts = list(play_hosts or [])
    problems, opened, due = [], [], False
    states = {}
    for index, node in enumerate(nodes):
        where = "%s (node %d)" % (node, index)
        result = results.get(node) if isinstance(results, dict) else None
        result = result if isinstance(result, dict) else {}
        if node_due(result):
            due = True
        state = result.get("group_state") if isinstance(result.get("group_state"), dict) else {}
        states[node] = (state, result)
        if state.get("open"):
            opened.append(node)
        if node not in play_hosts:
            problems.append("%s is not in the play any more (it failed, was refused or is unreachable)" % where)
            continue
        why = _why_not(result, phase)
        if why:
            problems.append("%s: %s" % (where, why))
        elif state.get("open"):
            problems.append("%s: an earlier run's change of this server (group change %s, phase %s) is open: it is "
                            "finished on every node as it was decided, and this run's change is not applied"
                            % (where, state["open"].get("id") or "?", state["open"].get("phase") or "?"))
    target = group
    if opened:
        # the change to finish: the one decided (or already kept on a node), never merely the first node's: a node
        # that had closed that change may have landed a later run's before that run died (only one change can have
        # been decided: a run is decided only where its prepare found no change open)
        ids = [states[node][0]["open"].get("id") or "" for node in opened]
        decided = [ident for node, ident in zip(opened, ids) if states[node][0]["open"].get("decision") == "commit"]
        kept_by = set(states.get(node, ({}, {}))[0].get("kept_group") for node in nodes)
        kept = [ident for ident in ids if ident and ident in kept_by]
        target = (decided + kept + ids)[0]
    keep = False
    for node in nodes:
        state, result = states.get(node, ({}, {}))
        open_change = state.get("open") or {}
        if open_change and (open_change.get("id") or "") == target and open_change.get("decision") == "commit":
            keep = True
        if opened and target and state.get("kept_group") == target:
            keep = True
        if not opened and result.get("group_decision") == "commit":
            keep = True
    return {"problems": problems, "due": due, "open": opened, "group": group,
            "decision": {"group": target, "keep": keep}}
