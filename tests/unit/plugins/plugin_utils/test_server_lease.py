# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's host lease (issue 47): the role's lease task passes its gates (option ``gates``) and the action
plugin of gpuserve.sglang.sglang_lease computes the gate timeout (plugin_utils/_server_lease.py). On b160abc the
task computed it in YAML with the published filter sglang_server_gate_seconds."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.action import sglang_lease as lease_action
from ansible_collections.gpuserve.sglang.plugins.filter import server_role as r
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_lease as s

from conftest import ROOT

GATES = {"bench": True, "requests": 8, "concurrency": 4, "timeout": 300, "answers": True}


@pytest.mark.parametrize("gates, seconds", [
    ({"bench": True, "requests": 8, "concurrency": 4, "timeout": 300, "answers": False}, 900),
    ({"bench": "true", "requests": "8", "concurrency": "0", "timeout": "300", "answers": "true"}, 2700 + 300),
    ({"bench": "no", "requests": 8, "concurrency": 4, "timeout": 300, "answers": "yes"}, 300),
    ({"bench": False, "answers": False, "timeout": 300}, 0),
    (None, 0)])
def test_gate_seconds_and_the_deprecated_filter_agree(gates, seconds):
    assert s.gate_seconds(gates) == seconds
    assert r.sglang_server_gate_seconds(gates) == seconds


class _Conn(object):
    class _shell(object):
        tmpdir = None


def _run(args, monkeypatch):
    action = lease_action.ActionModule.__new__(lease_action.ActionModule)
    action._task = type("T", (), {"args": args, "check_mode": False})()
    action._connection = _Conn()
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append(dict(module_args))
        return {"taken": True, "result": "taken"}
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action._execute_module = execute
    action._remove_tmp_path = lambda path: None
    action.run(task_vars={"inventory_hostname": "gpu-a1"})
    return calls


def test_the_action_turns_gates_into_the_gate_timeout(monkeypatch):
    calls = _run({"unit": "u.service", "id": "run-1", "gates": dict(GATES), "wait": 0}, monkeypatch)
    assert len(calls) == 1 and calls[0]["gate_timeout"] == 3 * 300 + 300
    assert "gates" not in calls[0]
    # a gate_timeout the task gives wins; no gates, none set
    assert _run({"unit": "u", "id": "r", "gates": dict(GATES), "gate_timeout": 5, "wait": 0},
                monkeypatch)[0]["gate_timeout"] == 5
    assert "gate_timeout" not in _run({"unit": "u", "id": "r", "wait": 0}, monkeypatch)[0]


def test_the_role_passes_its_gates_and_no_filter():
    with open(os.path.join(ROOT, "roles", "server", "tasks", "lease.yml"), encoding="utf-8") as handle:
        task = yaml.safe_load(handle)[0]
    options = task["gpuserve.sglang.sglang_lease"]
    assert "gate_timeout" not in options and "vars" not in task
    assert options["gates"] == {"bench": "{{ sglang_bench_gate }}", "requests": "{{ sglang_bench_requests }}",
                                "concurrency": "{{ sglang_bench_concurrency }}", "timeout": "{{ sglang_bench_timeout }}",
                                "answers": "{{ sglang_answers_gate }}"}
