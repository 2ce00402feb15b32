# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server over several hosts (issue 25): sglang_server_nodes in node-rank order, and each host's
--nnodes, --node-rank and --dist-init-addr derived from it (filters sglang_node_args, sglang_node_problems), never
typed per host (sglang_args_problems refuses them), through the server role's flags entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_args_merge, sglang_args_problems
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_argv
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_nodes import sglang_node_args, sglang_node_fingerprint
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_nodes import sglang_node_mismatches, sglang_node_problems

NODES = ["gpu-a1", "gpu-a2", "gpu-a3"]
HOSTVARS = {"gpu-a1": {"ansible_host": "10.0.0.11", "sglang_server_nodes": NODES},
            "gpu-a2": {"sglang_server_nodes": NODES}, "gpu-a3": {}, "other": {}}


def test_each_node_gets_its_rank_and_node_0s_address():
    assert [sglang_node_args(NODES, HOSTVARS, host, 50000) for host in NODES] == [
        {"nnodes": 3, "node-rank": rank, "dist-init-addr": "10.0.0.11:50000"} for rank in range(3)]


def test_one_host_is_no_flags_at_all():
    assert sglang_node_args([], HOSTVARS, "gpu-a1") == {}
    assert sglang_node_problems([], HOSTVARS, "gpu-a1") == []
    assert sglang_node_problems(None, HOSTVARS, "gpu-a1") == []


@pytest.mark.parametrize("hostvars0, addr", [
    ({"sglang_node_address": "fd00::11", "ansible_host": "10.0.0.11"}, "[fd00::11]:50010"),
    ({"sglang_node_address": "[fd00::11]"}, "[fd00::11]:50010"),
    ({"ansible_host": "gpu-a1.example.org"}, "gpu-a1.example.org:50010"),
    ({}, "gpu-a1:50010"),
])
def test_node_0_address_in_the_form_sglang_parses(hostvars0, addr):
    hostvars = dict(HOSTVARS, **{"gpu-a1": hostvars0})
    assert sglang_node_args(NODES, hostvars, "gpu-a3", "50010")["dist-init-addr"] == addr


@pytest.mark.parametrize("nodes, host, port, hostvars0, fragment", [
    (["gpu-a1"], "gpu-a1", 50000, {}, "needs at least two, got 1"),
    (["gpu-a1", "gpu-a1"], "gpu-a1", 50000, {}, "lists gpu-a1 more than once"),
    (["gpu-a1", "nowhere"], "gpu-a1", 50000, {}, "nowhere is not a host of the inventory"),
    (["gpu-a1", "gpu-a2"], "gpu-a3", 50000, {}, "does not list this host, gpu-a3"),
    (NODES, "gpu-a1", 65533, {}, "sglang_dist_init_port 65533 must be a port number 1-65530"),
    (NODES, "gpu-a1", "x", {}, "sglang_dist_init_port 'x'"),
    (NODES, "gpu-a1", True, {}, "sglang_dist_init_port True"),
    (NODES, "gpu-a1", 50000, {"ansible_host": "10.0.0.11; reboot"}, "is not a host name or an IPv4 address"),
    (NODES, "gpu-a1", 50000, {"ansible_host": "a\nb"}, "is not a host name"),
    (NODES, "gpu-a1", 50000, {"sglang_node_address": "fd00::zz"}, "is not an IPv6 address"),
    (NODES, "gpu-a1", 50000, {"sglang_server_nodes": ["gpu-a2", "gpu-a1", "gpu-a3"]}, "has another sglang_server_nodes"),
    ("gpu-a1,gpu-a2", "gpu-a1", 50000, {}, "must be a list of inventory host names"),
    ([None, "gpu-a1"], "gpu-a1", 50000, {}, "None is not an inventory host name"),
])
def test_refusals_name_what_is_wrong(nodes, host, port, hostvars0, fragment):
    hostvars = dict(HOSTVARS, **{"gpu-a1": hostvars0})
    problems = sglang_node_problems(nodes, hostvars, host, port)
    assert any(fragment in p for p in problems), problems
    with pytest.raises(AnsibleFilterError, match="sglang_server_nodes|sglang_dist_init_port|node address"):
        sglang_node_args(nodes, hostvars, host, port)


@pytest.mark.parametrize("flag", ["nnodes", "node-rank", "dist-init-addr", "nccl-init-addr", "--node_rank"])
def test_the_node_flags_are_never_typed(flag):
    problems = sglang_args_problems({"model-path": "/m"}, {}, user_args={flag: 1})
    assert any("sglang_server_nodes" in p for p in problems), problems


def test_the_command_line_of_a_node():
    args = sglang_args_merge({"tp": 8}, {}, first=dict({"model-path": "/m"},
                                                       **sglang_node_args(NODES, HOSTVARS, "gpu-a2", 50000)))
    assert sglang_argv(args) == ["--model-path", "/m", "--nnodes", "3", "--node-rank", "1",
                                 "--dist-init-addr", "10.0.0.11:50000", "--tp", "8"]
    assert sglang_args_problems(args, {}, user_args={}) == []


def test_the_role_derives_them_per_host(tmp_path):
    """The server role's flags entry point on an inventory of two nodes: the second gets --node-rank 1 and node 0's
    ansible_host; a node list that does not name the host fails before anything, naming the variable."""
    from conftest import COLLECTIONS, ROOT  # pylint: disable=import-outside-toplevel
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"kimi_a": {
        "hosts": {"gpu-a1": {"ansible_host": "10.0.0.11"}, "gpu-a2": {"ansible_connection": "local"}},
        "vars": {"sglang_server_nodes": ["gpu-a1", "gpu-a2"], "ansible_python_interpreter": sys.executable}}}))
    out_file = tmp_path / "args.json"
    play = tmp_path / "play.yml"
    play.write_text("""
- hosts: gpu-a2
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: flags
        public: true   # the effective flags are a role var (_server_args), read here after the role
    - ansible.builtin.copy:
        content: "{{ _server_args | to_json }}"
        dest: %s
        mode: "0644"
""" % out_file)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")

    def run(*extra):
        return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                               str(play)] + list(extra), env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=3600, check=False)

    ok = run()
    assert ok.returncode == 0, ok.stdout + ok.stderr
    args = json.loads(out_file.read_text())
    assert (args["nnodes"], args["node-rank"], args["dist-init-addr"]) == (2, 1, "10.0.0.11:50000")
    assert list(args)[:4] == ["model-path", "nnodes", "node-rank", "dist-init-addr"]
    out_file.unlink()
    bad = run("-e", '{"sglang_server_nodes": ["gpu-a1", "gpu-a3"]}')
    assert bad.returncode != 0 and not out_file.exists()
    assert "does not list this host, gpu-a2" in bad.stdout + bad.stderr


def _host_read(release="0.5.9", caps=("12.0",) * 8, config="c" * 64, index="i" * 64, files=64, size=547 * 10 ** 9):
    return {"sglang_release": release, "models": {"compute_caps": list(caps), "models": [
        {"role": "model", "config_sha256": config, "weights": {"index_sha256": index, "files": files, "bytes": size}},
        {"role": "draft", "config_sha256": "d" * 64, "weights": {"index_sha256": "", "files": 1, "bytes": 10}}]}}


def test_the_fingerprint_of_a_node():
    fingerprint = sglang_node_fingerprint(_host_read(), "kimi_k25_int4_eagle3", {"tp": 8})
    assert fingerprint == {"sglang_release": "0.5.9", "profile": "kimi_k25_int4_eagle3", "gpus": 8,
                           "compute_caps": ["12.0"] * 8, "tp": "8", "model_config_sha256": "c" * 64,
                           "model_index_sha256": "i" * 64, "model_weight_files": 64,
                           "model_weight_bytes": 547 * 10 ** 9}
    # no model check, nothing installed: empty values, never an error
    assert sglang_node_fingerprint({}, "custom", {})["gpus"] == 0


@pytest.mark.parametrize("other, fragment", [
    (dict(release="0.5.23"), "the installed SGLang release: 0.5.23 there, 0.5.9 here"),
    (dict(caps=("12.0",) * 7), "the number of GPUs: 7 there, 8 here"),
    (dict(index="j" * 64), "the model's weight index (sha256)"),
    (dict(config="x" * 64), "the model's config.json (sha256)"),
    (dict(size=1), "the bytes of the weight files"),
])
def test_a_node_that_differs_is_named(other, fragment):
    fingerprints = {"gpu-a1": sglang_node_fingerprint(_host_read(), "p", {"tp": 8}),
                    "gpu-a2": sglang_node_fingerprint(_host_read(**other), "p", {"tp": 8})}
    hostvars = {name: {"_server_node_fingerprint": fp} for name, fp in fingerprints.items()}
    problems = sglang_node_mismatches(["gpu-a1", "gpu-a2"], hostvars, "gpu-a1")
    assert problems and all(p.startswith("gpu-a2 differs from gpu-a1 in ") for p in problems), problems
    assert any(fragment in p for p in problems), problems
    assert sglang_node_mismatches(["gpu-a1", "gpu-a2"], hostvars, "gpu-a2")[0].startswith("gpu-a1 differs from gpu-a2")


def test_nodes_that_agree_and_a_node_left_out_of_the_play():
    same = sglang_node_fingerprint(_host_read(), "p", {"tp": 8})
    hostvars = {"gpu-a1": {"_server_node_fingerprint": same}, "gpu-a2": {"_server_node_fingerprint": dict(same)},
                "gpu-a3": {}}
    assert sglang_node_mismatches(["gpu-a1", "gpu-a2"], hostvars, "gpu-a1") == []
    assert sglang_node_mismatches([], hostvars, "gpu-a1") == []
    problems = sglang_node_mismatches(["gpu-a1", "gpu-a2", "gpu-a3"], hostvars, "gpu-a1")
    assert problems == ["gpu-a3 has not run the server role's preflight in this play: the nodes of one server "
                        "(gpu-a1, gpu-a2, gpu-a3) are deployed together, in one play over all of them"]


def test_the_preflight_compares_the_nodes_before_anything_changes():
    import yaml  # pylint: disable=import-outside-toplevel
    from conftest import ROOT  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "roles", "server", "tasks", "preflight.yml"), encoding="utf-8") as handle:
        preflight = yaml.safe_load(handle)
    names = [t["name"] for t in preflight]
    # the node checks are one include for a server over several hosts (issue 20: one skipped task otherwise)
    include = next(t for t in preflight if t.get("ansible.builtin.include_tasks") == "nodes.yml")
    assert include["when"] == "sglang_server_nodes | length > 0"
    with open(os.path.join(ROOT, "roles", "server", "tasks", "nodes.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    # the preflight's action plugin records each node's fingerprint (_server_host.node); the nodes step's compares
    # them in Python (plugin_utils/_server_nodes.py), no filter of the role's (issue 47)
    refuse = next(t for t in tasks if t["name"] == "Refuse nodes of one server that differ")
    assert refuse["gpuserve.sglang.sglang_host_facts"] == {"server_nodes": True}
    assert refuse["register"] == "_server_nodes"
    assert len(tasks) <= 3
    # after the model preflight read the model, and in the preflight: before the lease and anything that writes
    assert names.index(
        "Read this host and refuse what SGLang, systemd or the host would refuse (nothing was changed)") < names.index(
        include["name"])


def test_probe_targets_node0s_dist_port_and_the_five_after_it_from_every_other_node():
    from ansible_collections.gpuserve.sglang.plugins.filter.sglang_nodes import sglang_node_probe
    hostvars = {"gpu-a1": {"ansible_host": "fd00::11"}, "gpu-a2": {"ansible_host": "10.0.0.12"}}
    nodes = ["gpu-a1", "gpu-a2"]
    assert sglang_node_probe(nodes, hostvars, "gpu-a1", 50000) == {}
    assert sglang_node_probe([], hostvars, "gpu-a1", 50000) == {}
    assert sglang_node_probe(nodes, hostvars, "gpu-a2", "50000") == {
        "node0": "gpu-a1", "address": "fd00::11", "ports": [50000, 50001, 50002, 50003, 50004, 50005]}
