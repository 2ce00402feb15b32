# SPDX-License-Identifier: GPL-3.0-or-later
"""The nodes of a server over several hosts (issue 47): the preflight's action plugin records what each node must
share (_server_host.node) and the nodes step's (sglang_host_facts with server_nodes) compares them and returns what
this node must reach of node 0, in Python (plugin_utils/_server_nodes.py). On b160abc nodes.yml called the
published filters sglang_node_fingerprint, sglang_node_mismatches and sglang_node_probe."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.action import sglang_host_facts as facts_action
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_nodes as f
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_nodes as n

NODES = ["gpu-a1", "gpu-a2"]
HOST = {"sglang_release": "0.5.9", "models": {"compute_caps": ["9.0", "9.0"], "models": [
    {"role": "model", "config_sha256": "c" * 64, "weights": {"index_sha256": "i" * 64, "files": 3, "bytes": 30}}]}}


def _no_module(**kwargs):
    raise AssertionError("a module ran: %s" % kwargs.get("module_name"))


def _hostvars(**other):
    mine = n.fingerprint(HOST, "p", {"tp": 2})
    return {"gpu-a1": {"ansible_host": "10.0.0.11", "_server_host": {"node": mine}},
            "gpu-a2": {"ansible_host": "10.0.0.12", "_server_host": {"node": dict(mine, **other)}}}


def test_the_fingerprint_is_the_filters():
    assert n.fingerprint(HOST, "p", {"tp": 2}) == f.sglang_node_fingerprint(HOST, "p", {"tp": 2})
    assert n.fingerprint(HOST, "p", {"tp": 2})["gpus"] == 2


def test_nodes_that_agree_pass_and_every_other_node_reaches_node0():
    assert n.check(NODES, _hostvars(), "gpu-a1", 50000) == {"failed": False, "mismatches": [], "reach": {}}
    assert n.check(NODES, _hostvars(), "gpu-a2", 50000)["reach"] == {
        "node0": "gpu-a1", "address": "10.0.0.11", "ports": [50000, 50001, 50002, 50003, 50004, 50005]}


def test_a_node_that_differs_is_refused_with_the_former_message():
    got = n.check(NODES, _hostvars(sglang_release="0.5.23"), "gpu-a1", 50000)
    assert got["failed"] and got["reach"] == {}
    assert got["msg"] == ("sglang_server_nodes: the nodes of this server differ (nothing was changed): "
                          "gpu-a2 differs from gpu-a1 in the installed SGLang release: 0.5.23 there, 0.5.9 here")


def test_a_node_without_a_preflight_in_this_play_is_refused():
    hostvars = _hostvars()
    del hostvars["gpu-a2"]["_server_host"]
    hostvars["gpu-a3"] = {}
    got = n.check(NODES + ["gpu-a3", "gpu-a4"], hostvars, "gpu-a1", 50000)
    assert got["failed"] and [m.split(" ")[0] for m in got["mismatches"]] == ["gpu-a2", "gpu-a3", "gpu-a4"]
    assert "has not run the server role's preflight in this play" in got["msg"]


class _Conn(object):
    class _shell(object):
        tmpdir = None


def test_the_nodes_step_runs_no_module(monkeypatch):
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    action = facts_action.ActionModule.__new__(facts_action.ActionModule)
    action._task = type("T", (), {"args": {"server_nodes": True}, "check_mode": False})()
    action._connection = _Conn()
    action._templar = Templar(loader=DataLoader(), variables={})
    action._execute_module = _no_module
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    task_vars = {"sglang_server_nodes": NODES, "inventory_hostname": "gpu-a2", "sglang_dist_init_port": 50000,
                 "hostvars": _hostvars(tp="8")}
    got = action.run(task_vars=task_vars)
    assert got["failed"] and got["msg"].endswith("gpu-a1 differs from gpu-a2 in --tp: 2 there, 8 here")
    task_vars["hostvars"] = _hostvars()
    got = action.run(task_vars=task_vars)
    assert not got["failed"] and got["reach"]["ports"][0] == 50000 and got["changed"] is False


def test_the_preflight_records_the_node_only_for_a_server_over_several_hosts(monkeypatch):
    """The preflight's result carries ``node`` (hostvars[node]._server_host.node for the nodes step) when
    sglang_server_nodes is set and nothing was refused; the role's checks themselves are test_server_preflight's."""
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_preflight as p  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(p, "host_read_args", lambda read, hostvars=None: {})
    monkeypatch.setattr(p, "parser_argv", lambda read, host, hostvars=None, flags=None: None)
    monkeypatch.setattr(_server_flags, "flags", lambda read, hostvars=None: {"args": {"tp": 2}, "problem": ""})
    refusals = []
    monkeypatch.setattr(p, "verdict", lambda read, host, parser=None, hostvars=None, flags=None: {
        "refusals": list(refusals), "notes": [], "account_ok": True, "account_groups": []})
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action = facts_action.ActionModule.__new__(facts_action.ActionModule)
    action._task = type("T", (), {"args": {"server_preflight": True}, "check_mode": False})()
    action._connection = _Conn()
    action._templar = Templar(loader=DataLoader(), variables={})
    action._execute_module = lambda **kwargs: dict(HOST)
    action._remove_tmp_path = lambda path: None
    task_vars = {"sglang_server_nodes": NODES, "sglang_profile": "p", "inventory_hostname": "gpu-a1"}
    assert action.run(task_vars=task_vars)["node"] == n.fingerprint(HOST, "p", {"tp": 2})
    assert "node" not in action.run(task_vars=dict(task_vars, sglang_server_nodes=[]))
    refusals.append("no")
    assert "node" not in action.run(task_vars=task_vars)
