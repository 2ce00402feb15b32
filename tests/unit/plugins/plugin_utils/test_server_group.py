# SPDX-License-Identifier: GPL-3.0-or-later
"""The group's verdict of a server over several hosts (issue 47): taken by the action plugin of
gpuserve.sglang.sglang_server before each phase (plugins/plugin_utils/_server_group.py, over the one function
module_utils/_server/group.py). Before the restart phase the prepare verdict, before decide the restart verdict; a
no fails the phase with no module run, with the message group.yml's asserts gave; force_restart, group and decision
are the action's. On a9ad6a5 group.yml asserted the verdict of the published filter sglang_group twice and run.yml
passed force_restart, group and decision from the variable _server_verdict (that filter again); due.yml asked it
for "any node due"."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.action import sglang_server as server_action
from ansible_collections.gpuserve.sglang.plugins.filter import server_role as r
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_group as g
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_payload

from conftest import ROOT, calls_in_roles_and_playbooks

NODES = ["gpu-a1", "gpu-a2", "gpu-a3"]
PREPARED = {"phase": "prepare", "changed": True, "restart_due": False, "group_state": {"open": {}, "kept_group": ""}}
RESTARTED = {"phase": "restart", "changed": True, "group_state": {"open": {}, "kept_group": ""}}
OPEN = {"open": {"id": "run-old", "phase": "restarted", "decision": "commit"}, "kept_group": ""}


def _hostvars(default, lease="run-abc", **results):
    hostvars = dict((node, {"sglang_server": results.get(node.replace("-", "_"), default)}) for node in NODES)
    hostvars["gpu-a1"]["sglang_lease"] = {"lease": {"id": lease}}
    return hostvars


# what the filter's callers saw: each verdict of these node results, on every step
CASES = [
    _hostvars(PREPARED),
    _hostvars(PREPARED, gpu_a3=dict(PREPARED, restart_due=True)),
    _hostvars(PREPARED, gpu_a2={"failed": True, "msg": "ranks missing: TP7\nmore", "phase": "prepare"}),
    _hostvars(PREPARED, gpu_a2={"unreachable": True, "msg": "ssh"}),
    _hostvars(PREPARED, gpu_a2=None),
    _hostvars(PREPARED, gpu_a2=dict(PREPARED, group_state=OPEN), gpu_a3=dict(PREPARED, group_state={"kept_group": "x"})),
    _hostvars(RESTARTED),
    _hostvars(RESTARTED, gpu_a1={"phase": "restart", "failed": True, "msg": "benchmark regression: 10 tok/s"}),
    _hostvars(RESTARTED, gpu_a2={"phase": "decide", "group_decision": "commit"}),
    _hostvars({"phase": "converge", "due": True, "reasons": ["not running"]}),
]


class _Conn(object):
    class _shell(object):
        tmpdir = None


class _Task(object):
    check_mode = False
    register = {"sglang_server": "_task.polymorphic_result"}   # ansible-core 2.21's Task.register

    def __init__(self, args):
        self.args = args


def _no_module(**kwargs):
    raise AssertionError("a module ran: %s" % kwargs.get("module_name"))


def _action(monkeypatch, args, module=_no_module):
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    # the payload is test_server_payload's: here only what the group's verdict adds
    monkeypatch.setattr(_server_payload, "payload", lambda *a, **k: {"unit": {"path": "/u", "content": ""}})
    action = server_action.ActionModule.__new__(server_action.ActionModule)
    action._task = _Task(dict(args))
    action._connection = _Conn()
    action._templar = Templar(loader=DataLoader(), variables={})
    action._execute_module = module
    action._remove_tmp_path = lambda path: None
    return action


def _task_vars(hostvars, host="gpu-a1", batch=None, **more):
    values = {"sglang_server_nodes": NODES, "inventory_hostname": host, "hostvars": hostvars,
              "ansible_play_batch": list(NODES if batch is None else batch), "sglang_restart_forced": False,
              "sglang_server": hostvars.get(host, {}).get("sglang_server")}
    values.update(more)
    return values


def _phase(phase):
    return {"name": "sglang-kimi", "state": "deployed", "phase": phase, "reason": "",
            "role_inputs": {"host": {}, "unit": "", "launcher": ""}}


# ---- the role calls no sglang_group, and the filter is deprecated -------------------------------------------------
def test_roles_and_playbooks_call_no_sglang_group():
    assert calls_in_roles_and_playbooks(("sglang_group", "_server_verdict")) == []


def test_the_filter_is_routed_with_a_deprecation_and_its_doc_says_so():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        routing = yaml.safe_load(handle)["plugin_routing"]["filter"]
    assert routing["sglang_group"]["deprecation"]["removal_version"] == "3.0.0"
    with open(os.path.join(ROOT, "plugins", "filter", "sglang_group.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["DOCUMENTATION"]["deprecated"]["removed_in"] == "3.0.0"


# ---- the same verdict and options as the filter -------------------------------------------------------------------
@pytest.mark.parametrize("hostvars", CASES)
@pytest.mark.parametrize("phase", ["prepare", "restart"])
@pytest.mark.parametrize("batch", [NODES, NODES[:2]])
def test_the_verdict_is_the_filters(hostvars, phase, batch):
    assert g.verdict(NODES, hostvars, batch, phase) == r.sglang_group(NODES, hostvars, batch, phase)


@pytest.mark.parametrize("hostvars", CASES)
@pytest.mark.parametrize("forced", [False, True, "yes", "false"])
def test_force_restart_group_and_decision_are_what_run_yml_computed(hostvars, forced):
    """run.yml passed force_restart: sglang_restart_forced | bool or _server_verdict.due, group and decision:
    _server_verdict's, _server_verdict the filter's prepare verdict."""
    old = r.sglang_group(NODES, hostvars, NODES, "prepare")
    taken, dummy = g.check(NODES, hostvars, NODES, "commit")
    assert g.options(taken, forced) == {"force_restart": forced in (True, "yes") or old["due"],
                                        "group": old["group"], "decision": old["decision"]}


@pytest.mark.parametrize("register, name", [
    ("sglang_server", "sglang_server"), ({"mine": "_task.polymorphic_result"}, "mine"), (None, "sglang_server")])
def test_the_register_name_as_each_ansible_core_holds_it(register, name):
    assert g.registered_as(register) == name


def test_a_server_on_one_host_has_no_verdict():
    taken, refused = g.check([], {}, ["gpu-a1"], "restart")
    assert refused == "" and g.options(taken, False) == {
        "force_restart": False, "group": "", "decision": {"group": "", "keep": False}}


# ---- the action refuses a phase the verdict says no to, without running the module -------------------------------
def test_the_restart_phase_is_refused_where_a_nodes_prepare_failed(monkeypatch):
    hostvars = _hostvars(PREPARED, gpu_a2={"failed": True, "msg": "ranks missing: TP7", "phase": "prepare"})
    got = _action(monkeypatch, _phase("restart")).run(task_vars=_task_vars(hostvars))
    assert got["failed"] is True and got["changed"] is False
    # the message of group.yml's first assert, word for word
    assert got["msg"] == ("sglang_server_nodes: not every node of this server (gpu-a1, gpu-a2, gpu-a3) is ready: "
                          "gpu-a2 (node 1): failed: ranks missing: TP7. Nothing was stopped or restarted on any node")
    # a node that left the play (its lease held, unreachable): the same
    got = _action(monkeypatch, _phase("restart")).run(task_vars=_task_vars(_hostvars(PREPARED), batch=NODES[:2]))
    assert "gpu-a3 (node 2) is not in the play any more" in got["msg"]
    # an earlier run's change open on a node: refused, and the refusal keeps this node's prepare result's group
    # state, so the rescue finishes that change as it was decided
    hostvars = _hostvars(PREPARED, gpu_a1=dict(PREPARED, group_state=OPEN))
    got = _action(monkeypatch, _phase("restart")).run(task_vars=_task_vars(hostvars))
    assert got["failed"] and "an earlier run's change of this server (group change run-old" in got["msg"]
    assert got["group_state"] == OPEN and got["group_refused"] == "restart"


def test_decide_is_refused_after_a_failed_restart_verdict(monkeypatch):
    hostvars = _hostvars(RESTARTED, gpu_a1={"phase": "restart", "failed": True, "msg": "benchmark regression"})
    got = _action(monkeypatch, _phase("decide")).run(task_vars=_task_vars(hostvars, host="gpu-a2"))
    assert got["failed"] is True
    assert got["msg"] == ("the group's verdict on this server (gpu-a1, gpu-a2, gpu-a3) is a no: gpu-a1 (node 0): "
                          "failed: benchmark regression. Every node goes back to its last good configuration")
    # the molecule scenario's words (molecule/multinode/verify.yml)
    assert re.search(r"verdict on this server \(gpu-a1, gpu-a2, gpu-a3\) is a no: gpu-a1 \(node 0\): failed", got["msg"])


def test_a_phase_the_verdict_passes_runs_the_module_with_the_verdicts_options(monkeypatch):
    calls = []

    def module(**kwargs):
        calls.append(kwargs["module_args"])
        return {"changed": True, "phase": kwargs["module_args"]["phase"]}

    hostvars = _hostvars(PREPARED, gpu_a3=dict(PREPARED, restart_due=True))
    got = _action(monkeypatch, _phase("restart"), module).run(task_vars=_task_vars(hostvars))
    assert got == {"changed": True, "phase": "restart"}
    assert calls[0]["force_restart"] is True and calls[0]["group"] == "run-abc"
    assert calls[0]["decision"] == {"group": "run-abc", "keep": False} and "role_inputs" not in calls[0]
    # decide after every node restarted; the other phases are never refused (the rescue's finish must run)
    _action(monkeypatch, _phase("decide"), module).run(task_vars=_task_vars(_hostvars(RESTARTED)))
    failed = _hostvars(PREPARED, gpu_a2={"failed": True, "msg": "x"})
    for phase in ("prepare", "commit", "finish", "converge"):
        _action(monkeypatch, _phase(phase), module).run(task_vars=_task_vars(failed))
    assert [c["phase"] for c in calls] == ["restart", "decide", "prepare", "commit", "finish", "converge"]
    # a task that sets the options itself keeps them; sglang_restart_forced restarts a server on one host
    _action(monkeypatch, dict(_phase("restart"), force_restart=False, group="mine"), module).run(
        task_vars=_task_vars(hostvars))
    assert calls[-1]["force_restart"] is False and calls[-1]["group"] == "mine"
    _action(monkeypatch, _phase("converge"), module).run(
        task_vars=_task_vars({}, sglang_server_nodes=[], sglang_restart_forced="yes"))
    assert calls[-1]["force_restart"] is True and calls[-1]["group"] == ""


def test_a_refusal_changes_no_other_nodes_view(monkeypatch):
    """Nodes take the verdict in parallel: one that reads a node's refusal (registered already) sees that node's
    previous result, so every node fails with the same message, and the rescue decides as before."""
    hostvars = _hostvars(PREPARED, gpu_a2={"failed": True, "msg": "ranks missing: TP7", "phase": "prepare"})
    before = g.check(NODES, hostvars, NODES, "restart")
    refused = _action(monkeypatch, _phase("restart")).run(task_vars=_task_vars(hostvars))
    hostvars["gpu-a1"]["sglang_server"] = refused
    assert g.check(NODES, hostvars, NODES, "restart") == before
    assert g.verdict(NODES, hostvars, NODES, "prepare")["decision"] == before[0]["decision"]


# ---- due: any node due makes the server due -----------------------------------------------------------------------
def test_due_from_answers_for_the_server_without_a_module(monkeypatch):
    answers = _hostvars({"phase": "converge", "due": False, "reasons": []},
                        gpu_a3={"phase": "converge", "due": True, "reasons": ["unit would change"]})
    args = {"name": "sglang-kimi", "state": "due", "due_from": "sglang_server"}
    got = _action(monkeypatch, args).run(task_vars=_task_vars(answers))
    assert got == {"changed": False, "due": True, "reasons": [
        "a restart is due on gpu-a3 (node 2 of this server, which restarts as one): unit would change"]}
    got = _action(monkeypatch, args).run(task_vars=_task_vars(answers, host="gpu-a3"))
    assert got == {"changed": False, "due": True, "reasons": ["unit would change"]}
    # nothing due anywhere; a server on one host answers its own
    quiet = _hostvars({"phase": "converge", "due": False, "reasons": []})
    assert _action(monkeypatch, args).run(task_vars=_task_vars(quiet))["due"] is False
    alone = {"gpu-a1": {"sglang_server": {"due": True, "reasons": ["not running"]}}}
    got = _action(monkeypatch, args).run(task_vars=_task_vars(alone, sglang_server_nodes=[]))
    assert got == {"changed": False, "due": True, "reasons": ["not running"]}


@pytest.mark.parametrize("hostvars", CASES)
def test_due_is_the_filters_any_node_due(hostvars):
    """due.yml set sglang_server_restart_due: sglang_server.due or _server_verdict.due."""
    for host in NODES:
        mine = hostvars[host]["sglang_server"] or {}
        old = bool(mine.get("due")) or r.sglang_group(NODES, hostvars, NODES, "prepare")["due"]
        assert g.due(NODES, hostvars, host)["due"] is old
