# SPDX-License-Identifier: GPL-3.0-or-later
"""The group's verdict in a real play (issue 47): the server role's module task (roles/server/tasks/run.yml, taken
from the file) over a two-node inventory on this machine, each node's previous phase result given. The action
plugin of gpuserve.sglang.sglang_server reads hostvars and ansible_play_batch as Ansible hands them, refuses the
restart phase on every node with the same message and no module run (the rescue sees it as ansible_failed_result),
and due.yml's tasks after the read answer "any node due" (the rules: tests/unit/plugins/plugin_utils/
test_server_group.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT

NODES = ["gpu-a1", "gpu-a2"]
PREPARED = {"phase": "prepare", "changed": True, "restart_due": True, "group_state": {"open": {}, "kept_group": ""}}


def _tasks(name):
    with open(os.path.join(ROOT, "roles", "server", "tasks", name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _run(tmp_path, given, tasks):
    """One play over gpu-a1 and gpu-a2 (connection local): each node's ``given[node]`` registered as sglang_server
    (as its last phase did), then ``tasks``. Returns (rc, output, {node: what it wrote to out/<node>.json})."""
    out = tmp_path / "out"
    out.mkdir()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": dict((node, {"given": given[node]}) for node in NODES),
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": MODULE_PYTHON,
                 "sglang_server_nodes": NODES, "sglang_service_name": "sglang-kimi", "sglang_restart_forced": False,
                 "out_dir": str(out)}}}))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "The node's last phase result", "ansible.builtin.set_fact": {"sglang_server": "{{ given }}"}}] + tasks}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_FORKS="10")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           str(play)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    wrote = dict((node, json.loads((out / ("%s.json" % node)).read_text()))
                 for node in NODES if (out / ("%s.json" % node)).exists())
    return proc.returncode, proc.stdout + proc.stderr, wrote


def _keep(content):
    return {"name": "Keep what this node sees", "ansible.builtin.copy": {
        "content": content, "dest": "{{ out_dir }}/{{ inventory_hostname }}.json", "mode": "0644"}}


def test_the_restart_phase_is_refused_on_every_node_with_no_module_run(tmp_path):
    task = _tasks("run.yml")[0]
    assert task["register"] == "sglang_server"
    # the role's own task; its inputs need the whole role (the payload runs only where the verdict passes: a
    # module run would fail here on the options it lacks, with another message)
    task = dict(task, vars={"_server_phase": "restart"})
    task["gpuserve.sglang.sglang_server"] = dict(task["gpuserve.sglang.sglang_server"],
                                                 role_inputs={"host": {}, "unit": "", "launcher": ""})
    given = {"gpu-a1": PREPARED, "gpu-a2": {"phase": "prepare", "failed": True, "msg": "ranks missing: TP7"}}
    rc, out, wrote = _run(tmp_path, given, [{"name": "The restart phase", "block": [task], "rescue": [
        _keep("{{ {'msg': ansible_failed_result.msg, 'registered': sglang_server} | to_json }}")]}])
    assert rc == 0, out[-4000:]
    message = ("sglang_server_nodes: not every node of this server (gpu-a1, gpu-a2) is ready: gpu-a2 (node 1): failed: "
               "ranks missing: TP7. Nothing was stopped or restarted on any node")
    assert set(wrote) == set(NODES), out[-4000:]
    for node in NODES:
        assert wrote[node]["msg"] == message, out[-4000:]
        # the refusal keeps what the verdict reads of the node's prepare result (the rescue's decision)
        assert wrote[node]["registered"]["group_refused"] == "restart"
        assert wrote[node]["registered"].get("group_state") == given[node].get("group_state")


def test_due_is_any_nodes_due_through_due_yml(tmp_path):
    """due.yml's tasks after its read (the read's answers given): gpu-a1 has nothing due, gpu-a2 has; both are
    due, and gpu-a1 says why."""
    tasks = [t for t in _tasks("due.yml") if "ansible.builtin.import_tasks" not in t]
    given = {"gpu-a1": {"phase": "converge", "due": False, "reasons": []},
             "gpu-a2": {"phase": "converge", "due": True, "reasons": ["unit would change"]}}
    rc, out, wrote = _run(tmp_path, given, tasks + [_keep(
        "{{ {'due': sglang_server_restart_due, 'reasons': sglang_server_restart_reasons} | to_json }}")])
    assert rc == 0, out[-4000:]
    assert wrote["gpu-a2"] == {"due": True, "reasons": ["unit would change"]}
    assert wrote["gpu-a1"] == {"due": True, "reasons": [
        "a restart is due on gpu-a2 (node 1 of this server, which restarts as one): unit would change"]}
