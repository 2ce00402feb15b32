# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_nccl_network.py: nccl_network (issue 25), the network between a multi-node server's hosts as
data -> NCCL's variables, and the refusals of the nccl_tuning inputs; the filters that wrap it."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import nccl_network as nccl_network_filter
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_network import (
    input_problems, nccl_env_problems, nccl_network_env, nccl_network_merge, nccl_network_problems, path_problems)


def test_nothing_for_one_host():
    assert nccl_network_env({}) == {} and nccl_network_env(None) == {} and nccl_network_problems({}) == []


def test_socket_transport_over_one_nic():
    assert nccl_network_env({"transport": "socket", "interface": "enp65s0"}) == {
        "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "enp65s0", "GLOO_SOCKET_IFNAME": "enp65s0"}


def test_infiniband_with_exact_hcas_and_an_excluded_interface_list():
    assert nccl_network_env({"transport": "ib", "interface": "^docker,lo", "hcas": ["mlx5_0", "mlx5_1:1"],
                             "hca_match": "exact"}) == {
        "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_IB_HCA": "=mlx5_0,mlx5_1:1"}


def test_roce_needs_its_gid_index():
    env = nccl_network_env({"transport": "roce", "interface": ["eth0", "eth1"], "hcas": ["mlx5_2"], "gid_index": 3})
    assert env == {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0,eth1", "NCCL_IB_HCA": "mlx5_2",
                   "NCCL_IB_GID_INDEX": "3"}
    assert any("gid_index must be the RoCE v2 GID index" in p
               for p in nccl_network_problems({"transport": "roce", "interface": "eth0", "hcas": ["mlx5_2"]}))


@pytest.mark.parametrize("network, words", [
    ({"transport": "tcp", "interface": "eth0"}, "transport must be one of"),
    ({"transport": "socket"}, "interface is required with transport socket"),
    ({"transport": "socket", "interface": "eth0; rm -rf /"}, "must be a network interface name"),
    ({"transport": "socket", "interface": "eth0\nNCCL_DEBUG=TRACE"}, "must be a network interface name"),
    ({"transport": "socket", "interface": "averyveryverylongname"}, "at most 15 characters"),
    ({"transport": "ib", "interface": "eth0"}, "hcas must list the HCAs"),
    ({"transport": "ib", "interface": "eth0", "hcas": ["mlx5_0 mlx5_1"]}, "hcas must list the HCAs"),
    ({"transport": "socket", "interface": "eth0", "hcas": ["mlx5_0"]}, "hcas is for transport ib or roce"),
    ({"transport": "ib", "interface": "eth0", "hcas": ["mlx5_0"], "gid_index": 3}, "gid_index is for transport roce"),
    ({"transport": "roce", "interface": "eth0", "hcas": ["mlx5_0"], "gid_index": True}, "gid_index must be"),
    ({"transport": "roce", "interface": "eth0", "hcas": ["mlx5_0"], "gid_index": 256}, "gid_index must be"),
    ({"transport": "ib", "interface": "eth0", "hcas": ["mlx5_0"], "hca_match": "regex"}, "hca_match must be"),
    ({"transport": "socket", "interface": "eth0", "ifname": "eth1"}, "unknown key 'ifname'"),
    (["socket"], "must be a mapping"),
])
def test_bad_input_is_named_before_the_host_changes(network, words):
    problems = nccl_network_problems(network)
    assert any(words in p for p in problems), problems
    with pytest.raises(ValueError):
        nccl_network_env(network)


def test_every_value_passes_the_roles_value_check():
    """The values go through nccl_tuning's own check of nccl_env values (no spaces, quotes, $ or newlines)."""
    env = nccl_network_env({"transport": "roce", "interface": "^docker0,lo", "hcas": ["mlx5_0:1"], "gid_index": 3,
                            "hca_match": "exclude"})
    assert nccl_env_problems(env) == [], env


def test_the_role_defaults_nccl_env_is_usable():
    import os
    import yaml
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))))
    with open(os.path.join(root, "roles", "nccl_tuning", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    assert nccl_env_problems(defaults["nccl_env"]) == []
    assert nccl_env_problems({"NCCL_P2P_LEVEL": "SYS", "NCCL_BUFFSIZE": 8388608, "NCCL_X": 1.5}) == []


@pytest.mark.parametrize("env, named", [
    ({"NCCL_SOCKET_IFNAME": "eth0 eth1"}, "NCCL_SOCKET_IFNAME=eth0 eth1 is not usable"),
    ({"NCCL_PROTO": "LL\n"}, "NCCL_PROTO=LL\n is not usable"),            # a trailing newline: full matches only
    ({"NCCL_PROTO": "LL\nNCCL_DEBUG=TRACE"}, "is not usable"),
    ({"NCCL_PROTO": "$(id)"}, "NCCL_PROTO=$(id) is not usable"),
    ({"NCCL_PROTO": "'LL'"}, "is not usable"),
    ({"NCCL_PROTO": ""}, "NCCL_PROTO= is not usable"),
    ({"NCCL_PROTO": ["LL"]}, "is not usable"),
    ({"NCCL_PROTO": {"a": 1}}, "is not usable"),
    ({"NCCL_PROTO": None}, "NCCL_PROTO=None is not usable"),
    ({"NCCL PROTO": "LL"}, "NCCL PROTO=LL is not usable"),
    ({"NCCL_PROTO\n": "LL"}, "is not usable"),
    ({"1NCCL": "LL"}, "1NCCL=LL is not usable"),
    ({1: "LL"}, "1=LL is not usable"),
    ({}, "nccl_env must be a non-empty mapping"),
    (["NCCL_PROTO=LL"], "nccl_env must be a non-empty mapping"),
])
def test_an_unusable_nccl_env_entry_is_named(env, named):
    problems = nccl_env_problems(env)
    assert len(problems) == 1 and named in problems[0], problems


def test_every_unusable_entry_is_named_at_once():
    problems = nccl_env_problems({"A": "ok", "B": "b b", "C": "c;c", "D": "d"})
    assert [p.split(" is not usable", maxsplit=1)[0] for p in problems] == ["nccl_env entry B=b b", "nccl_env entry C=c;c"]


def test_merge_says_which_nccl_env_values_it_replaced():
    base = {"NCCL_PROTO": "LL", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    out = nccl_network_merge(base, {"transport": "ib", "interface": "eth0", "hcas": ["mlx5_0"]})
    assert out["env"] == {"NCCL_PROTO": "LL", "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0",
                          "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0"}
    assert out["replaced"] == {"NCCL_IB_DISABLE": ["1", "0"]}          # the same eth0 is not "replaced"
    assert nccl_network_merge(base, {}) == {"env": base, "replaced": {}}
    assert base == {"NCCL_PROTO": "LL", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}   # not mutated


def test_path_problems_name_each_unusable_path_in_order():
    assert path_problems([("nccl_python", "/opt/v/bin/python"), ("nccl_tuning_env_file", "/etc/nccl.env")]) == []
    assert path_problems([("nccl_python", "bin/python"), ("nccl_tuning_env_file", "/etc/a\nb"), ("x", 3)]) == [
        'nccl_python must be an absolute path without control characters, got "bin/python"',
        'nccl_tuning_env_file must be an absolute path without control characters, got "/etc/a\\nb"',
        "x must be an absolute path without control characters, got 3"]


def test_input_problems_in_the_roles_order_env_paths_network():
    problems = input_problems({"A": "a a"}, [("nccl_python", "rel")], {"transport": "x"})
    assert [p.split(" ")[0] for p in problems] == ["nccl_env", "nccl_python", "nccl_network.transport"]


def test_the_filters_wrap_the_same_logic():
    network = {"transport": "socket", "interface": "eth0"}
    filters = nccl_network_filter.FilterModule().filters()
    assert filters["nccl_network_env"](network) == nccl_network_env(network)
    assert filters["nccl_network_problems"]({"transport": "x"}) == nccl_network_problems({"transport": "x"})
    with pytest.raises(AnsibleFilterError):
        filters["nccl_network_env"]({"transport": "x"})
