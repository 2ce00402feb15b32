# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's preflight of a server over several hosts (issue 25): every node but node 0 connects to node 0's
dist port and the five after it before anything stops, and refuses naming the node and the ports when they are
not reachable. The role's own node check and probe (taken from roles/server/tasks/nodes.yml by name) run in one
play over a two-node inventory on this machine (each node's preflight result, _server_host.node, given)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import yaml

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT

NAMES = ("Refuse nodes of one server that differ", "Connect to node 0's dist port and the five after it")
NODE = {"sglang_release": "0.5.9", "profile": "p", "gpus": 8, "compute_caps": ["9.0"] * 8, "tp": "8",
        "model_config_sha256": "", "model_index_sha256": "", "model_weight_files": 0, "model_weight_bytes": 0}


def _role_tasks():
    # preflight.yml includes nodes.yml for a server over several hosts (sglang_server_nodes)
    with open(os.path.join(ROOT, "roles", "server", "tasks", "preflight.yml"), encoding="utf-8") as handle:
        include = [t for t in yaml.safe_load(handle) if t.get("ansible.builtin.include_tasks") == "nodes.yml"]
    assert include and include[0]["when"] == "sglang_server_nodes | length > 0"
    with open(os.path.join(ROOT, "roles", "server", "tasks", "nodes.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    picked = [t for t in tasks if t.get("name") in NAMES]
    assert [t["name"] for t in picked] == list(NAMES)
    # the probe's result, for the checks below (the role itself needs none: the module fails with fail_msg)
    return [picked[0], dict(picked[1], register="_server_node_reach")]


def _run(tmp_path, node0_address, port, node2=None):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"gpu-a1": {"ansible_host": node0_address}, "gpu-a2": {"ansible_host": "127.0.0.1"}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": MODULE_PYTHON,
                 "sglang_server_nodes": ["gpu-a1", "gpu-a2"], "sglang_dist_init_port": port,
                 "sglang_dist_probe_timeout": 2, "_server_host": {"node": NODE}}}}))
    if node2 is not None:
        text = yaml.safe_load(inventory.read_text())
        text["all"]["hosts"]["gpu-a2"]["_server_host"] = {"node": node2}
        inventory.write_text(yaml.safe_dump(text))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": _role_tasks() + [
        {"name": "Say what was probed", "ansible.builtin.debug": {
            "msg": "PROBED {{ _server_node_reach.ports | default('nothing') | to_json }}"}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                           str(play)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_ports_that_answer_pass_and_node0_probes_nothing(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    if port > 65530:
        port = 40000
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    try:
        rc, out = _run(tmp_path, "127.0.0.1", port)
    finally:
        listener.close()
    assert rc == 0, out[-3000:]
    assert '"%d": "open"' % port in out, out[-3000:]           # gpu-a2 probed node 0: one port listens
    assert '"%d": "refused"' % (port + 5) in out, out[-3000:]  # nothing listens there yet: reachable
    assert 'PROBED "nothing"' in out, out[-3000:]              # gpu-a1 is node 0


def test_a_node_that_cannot_reach_node0_is_refused_by_name(tmp_path):
    rc, out = _run(tmp_path, "gpuserve-no-such-node.invalid", 50000)
    assert rc != 0
    assert "sglang_server_nodes: gpu-a2 cannot reach node 0 (gpu-a1, gpuserve-no-such-node.invalid) on TCP " \
           "50000, 50001, 50002, 50003, 50004, 50005" in " ".join(out.split())
    assert "unresolved" in out and "nothing was changed" in " ".join(out.split())


def test_nodes_that_differ_are_refused_before_any_probe(tmp_path):
    """Each node refuses naming the node that differs and both values (the nodes step's action plugin, issue 47)."""
    rc, out = _run(tmp_path, "gpuserve-no-such-node.invalid", 50000, node2=dict(NODE, tp="16"))
    text = " ".join(out.split())
    assert rc != 0
    assert ("sglang_server_nodes: the nodes of this server differ (nothing was changed): gpu-a2 differs from gpu-a1 "
            "in --tp: 16 there, 8 here") in text, text[-3000:]
    assert "gpu-a1 differs from gpu-a2 in --tp: 8 there, 16 here" in text and "cannot reach" not in text
