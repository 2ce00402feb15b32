# SPDX-License-Identifier: GPL-3.0-or-later
"""Prefill/decode servers behind a gateway in PD mode (issue 25): the gateway's flags and each worker's kind."""
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args as f
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import (
    DEFAULT_BOOTSTRAP_PORT, sglang_pd_args, sglang_worker_kinds)
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
HOSTVARS = {
    "pd-p1": {"sglang_disaggregation_mode": "prefill", "sglang_host": "0.0.0.0"},
    "pd-p2": {"sglang_disaggregation_mode": "prefill", "sglang_disaggregation_bootstrap_port": 9100,
              "sglang_router_worker_address": "10.0.0.2"},
    "pd-d1": {"sglang_disaggregation_mode": "decode", "sglang_port": 30001},
    "pd-d2": {"sglang_disaggregation_mode": "Decode"},
    "plain": {},
}


def test_the_gateway_flags_list_each_kind_and_the_prefill_bootstrap_ports():
    args = sglang_pd_args(["pd-p1", "pd-p2", "pd-d1", "pd-d2"], HOSTVARS)
    assert args == {"pd-disaggregation": True,
                    "prefill": [["http://pd-p1:30000", "8998"], ["http://10.0.0.2:30000", "9100"]],
                    "decode": [["http://pd-d1:30001"], ["http://pd-d2:30000"]]}
    # both gateways take --prefill URL BOOTSTRAP_PORT and --decode URL, each flag once per server
    assert f.sglang_argv(args) == ["--pd-disaggregation",
                                   "--prefill", "http://pd-p1:30000", "8998",
                                   "--prefill", "http://10.0.0.2:30000", "9100",
                                   "--decode", "http://pd-d1:30001", "--decode", "http://pd-d2:30000"]


def test_a_gateway_in_pd_mode_needs_both_kinds_and_no_plain_server():
    with pytest.raises(AnsibleFilterError, match="set no sglang_disaggregation_mode: http://plain:30000"):
        sglang_pd_args(["pd-p1", "pd-d1", "plain"], HOSTVARS)
    with pytest.raises(AnsibleFilterError, match="0 prefill and 2 decode"):
        sglang_pd_args(["pd-d1", "pd-d2"], HOSTVARS)


def test_each_worker_kind_for_the_re_add_and_the_safety_count():
    kinds = sglang_worker_kinds(["pd-p1", "pd-p2", "pd-d1", "plain"], HOSTVARS)
    assert kinds == {"http://pd-p1:30000": {"worker_type": "prefill", "bootstrap_port": 8998},
                     "http://10.0.0.2:30000": {"worker_type": "prefill", "bootstrap_port": 9100},
                     "http://pd-d1:30001": {"worker_type": "decode", "bootstrap_port": None},
                     "http://plain:30000": {"worker_type": "regular", "bootstrap_port": None}}


@pytest.mark.parametrize("bad", [{"sglang_disaggregation_mode": "both"},
                                 {"sglang_disaggregation_mode": "prefill", "sglang_disaggregation_bootstrap_port": 0},
                                 {"sglang_disaggregation_mode": "prefill",
                                  "sglang_disaggregation_bootstrap_port": "8998\nExecStartPre=/bin/sh"}])
def test_a_bad_mode_or_port_is_refused_naming_the_host(bad):
    with pytest.raises(AnsibleFilterError, match="^gpu-x: sglang_disaggregation_"):
        sglang_worker_kinds(["gpu-x"], {"gpu-x": bad})


def test_the_default_bootstrap_port_is_the_role_default_and_sglang_own():
    with open(os.path.join(ROOT, "roles", "server", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert defaults["sglang_disaggregation_bootstrap_port"] == DEFAULT_BOOTSTRAP_PORT
    assert set(table["rules"]["pd_bootstrap_port_default"] for table in RELEASES.values()) == {DEFAULT_BOOTSTRAP_PORT}


def test_one_server_pd_flags_and_they_are_refused_in_sglang_args():
    assert f.sglang_pd_server_args("null") == {}
    assert f.sglang_pd_server_args("decode", 9100) == {"disaggregation-mode": "decode"}
    assert f.sglang_pd_server_args("prefill", "9100") == {"disaggregation-mode": "prefill",
                                                          "disaggregation-bootstrap-port": 9100}
    for bad in (("both", 8998), ("prefill", 70000), ("prefill", "8998 --x")):
        with pytest.raises(AnsibleFilterError):
            f.sglang_pd_server_args(*bad)
    for key, var in (("disaggregation-mode", "sglang_disaggregation_mode"),
                     ("disaggregation_bootstrap_port", "sglang_disaggregation_bootstrap_port")):
        problems = f.sglang_args_problems({}, {}, user_args={key: "prefill"})
        assert len(problems) == 1 and var in problems[0]


def test_hicache_on_a_decode_server_is_refused_as_its_release_would():
    decode = {"disaggregation-mode": "decode", "enable-hierarchical-cache": True, "hicache-ratio": 2.0}
    # 0.5.9 forces the chunk cache on a decode server; 0.5.23 only with its decode radix cache flag
    assert any("decode server" in p and "0.5.9" in p for p in f.sglang_args_problems(decode, {}, release="0.5.9"))
    assert any("unless --disaggregation-decode-enable-radix-cache" in p
               for p in f.sglang_args_problems(decode, {}, release="0.5.23"))
    with_flag = dict(decode, **{"disaggregation-decode-enable-radix-cache": True})
    assert not [p for p in f.sglang_args_problems(with_flag, {}, release="0.5.23") if "decode server" in p]
    assert any("decode server" in p for p in f.sglang_args_problems(with_flag, {}, release="0.5.9"))
    prefill = dict(decode, **{"disaggregation-mode": "prefill"})
    assert not [p for p in f.sglang_args_problems(prefill, {}, release="0.5.9") if "decode server" in p]
