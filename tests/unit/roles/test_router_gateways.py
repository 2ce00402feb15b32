# SPDX-License-Identifier: GPL-3.0-or-later
"""router role, issue 23: two gateways, sglang-router 0.3.2 and SMG 1.13.0, each release as data read from its
wheel (files/gateways, scripts/gen-gateway-data.py) with its hash lock (files/locks); the unit runs the release's
own module from the gateway's own venv; preflight refuses an unknown gateway, a release without data, a flag the
release's parser does not know, before the host changes (the role's preflight on this machine, one
ansible-playbook)."""
from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from conftest import run_play_batch
from test_router_inputs import PLAY  # pylint: disable=import-error
from test_router_role import ROLE, ROUTER_IN, _render_unit, _settings  # pylint: disable=import-error

VARS = yaml.safe_load(open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8"))
PINS = VARS["_router_gateway_pins"]


def _data(release):
    with open(os.path.join(ROLE, "files", "gateways", release + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def _lock(release):
    with open(os.path.join(ROLE, "files", "locks", release + ".txt"), encoding="utf-8") as handle:
        return handle.read()


def test_both_gateways_are_pinned_with_data_and_a_hash_lock_that_holds_the_wheel():
    assert PINS == {"sglang-router": "0.3.2", "smg": "1.13.0"}
    for gateway, version in PINS.items():
        release = "%s-%s" % (gateway, version)
        data, lock = _data(release), _lock(release)
        assert data["package"] == gateway and data["version"] == version
        assert re.fullmatch(r"[0-9a-f]{64}", data["wheel_sha256"])
        # the wheel the data was read from is one the lock lets pip install
        assert "--hash=sha256:" + data["wheel_sha256"] in lock
        assert re.search(r"^%s==%s " % (re.escape(gateway), re.escape(version)), lock, re.M)
        # every line of the lock is pinned with at least one hash (pip --require-hashes)
        for requirement in re.split(r"\n(?=\S)", lock.split("\n", 2)[2].strip()):
            assert re.match(r"[A-Za-z0-9._-]+==\S+", requirement) and "--hash=sha256:" in requirement, requirement
    assert _data("smg-1.13.0")["module"] == "smg.launch_router"
    assert _data("sglang-router-0.3.2")["module"] == "sglang_router.launch_router"


@pytest.mark.parametrize("release", ["sglang-router-0.3.2", "smg-1.13.0"])
def test_every_flag_the_role_passes_is_one_the_release_parser_accepts(release):
    flags = _data(release)["flags"]
    missing = [flag for flag in VARS["_router_managed_flags"] if flag not in flags]
    assert missing == [], "%s's parser lacks %s" % (release, missing)
    for flag in VARS["_router_managed_flags"]:
        # each is passed with a value, but the PD mode's switch (issue 25: --pd-disaggregation, no value)
        assert flags[flag]["value"] is (flag != "pd-disaggregation"), flag
    assert "cache_aware" in flags["policy"]["choices"]   # the role's default policy


def _unit(gateway, venv=""):
    version = PINS[gateway]
    release = "%s-%s" % (gateway, version)
    venv = venv or "/opt/%s/venv" % gateway
    router_in = dict(ROUTER_IN, release=release, gateway=_data(release), venv=venv, python=venv + "/bin/python")
    return _render_unit(sglang_router_gateway=gateway, _router_in=router_in)


def test_the_unit_runs_the_release_module_from_the_gateways_own_venv():
    smg = _settings(_unit("smg"))
    assert smg["ExecStart"][0].startswith("/opt/smg/venv/bin/python /usr/local/lib/gpuserve-sglang/sglang_router_launch.py --host ")
    assert "SGLANG_ROUTER_MODULE=smg.launch_router" in smg["Environment"]
    assert smg["Description"] == ["smg-1.13.0 (SGLang gateway) in front of 2 worker(s)"]
    router = _settings(_unit("sglang-router"))
    assert router["ExecStart"][0].startswith("/opt/sglang-router/venv/bin/python ")
    assert "SGLANG_ROUTER_MODULE=sglang_router.launch_router" in router["Environment"]
    # the wheel's hash is in the unit: another release (or wheel) is another unit, so a restart
    assert _data("smg-1.13.0")["wheel_sha256"] in _unit("smg")


BASE = {"sglang_router_worker_urls": ["http://10.0.0.1:30000"]}
CASES = {
    "nginx": ({"sglang_router_gateway": "nginx"}, "sglang_router_gateway must be one of sglang-router, smg, got \"nginx\""),
    "no-data": ({"sglang_router_version": "9.9.9"},
                "the role has no data or hash lock for sglang-router 9.9.9 (releases it knows: sglang-router-0.3.2, smg-1.13.0)"),
    "smg-no-data": ({"sglang_router_gateway": "smg", "sglang_router_version": "1.12.0"},
                    "the role has no data or hash lock for smg 1.12.0"),
    "unknown-flag-smg": ({"sglang_router_gateway": "smg", "sglang_router_extra_args": {"no-such-flag": True}},
                         "flags smg 1.13.0 does not know (sglang_router_extra_args): no-such-flag"),
    # a flag SMG has and sglang-router 0.3.2 has not: refused on one gateway, passed on the other
    "wasm-on-router": ({"sglang_router_extra_args": {"enable-wasm": True}},
                       "flags sglang-router 0.3.2 does not know (sglang_router_extra_args): enable-wasm"),
    # SMG's model alias (clients that ask for "default", docs/fleet.md): sglang-router 0.3.2 has no such flag
    "model-alias-on-router": ({"sglang_router_extra_args": {"model-alias": "default=/models/Kimi-K2.5-INT4"}},
                              "flags sglang-router 0.3.2 does not know (sglang_router_extra_args): model-alias"),
    # issue 41 defect 5 (passed on 59633b9, the secret landed in ExecStart): a secret through extra_args
    "secret-control-plane-keys": ({"sglang_router_gateway": "smg",
                                   "sglang_router_extra_args": {"control-plane-api-keys": "admin:s3cr3t-cp-value"}},
                                  "sglang_router_extra_args may not carry secrets: control-plane-api-keys would land"),
    "secret-tenant-and-oracle": ({"sglang_router_gateway": "smg",
                                  "sglang_router_extra_args": {"tenant-api-key": "s3cr3t-tenant-value",
                                                               "oracle-password": "s3cr3t-oracle-value"}},
                                 "may not carry secrets: oracle-password, tenant-api-key would land"),
    "secret-on-router": ({"sglang_router_extra_args": {"oracle-password": "s3cr3t-oracle-value"}},
                         "may not carry secrets: oracle-password would land in the unit's ExecStart"),
    "venv-newline": ({"sglang_router_venv": "/opt/smg/venv\nExecStartPre=/bin/sh"},
                     "sglang_router_venv must be an absolute path without spaces or control characters"),
    "venv-relative": ({"sglang_router_venv": "opt/venv"}, "sglang_router_venv must be an absolute path"),
    "gateway-path": ({"sglang_router_gateway": "../../etc", "sglang_router_version": "1.0"},
                     "sglang_router_gateway must be one of"),
}
PASSING = {
    "smg": {"sglang_router_gateway": "smg"},
    "smg-pinned": {"sglang_router_gateway": "smg", "sglang_router_version": "1.13.0"},
    "wasm-on-smg": {"sglang_router_gateway": "smg", "sglang_router_extra_args": {"enable-wasm": True}},
    "model-alias-on-smg": {"sglang_router_gateway": "smg",
                           "sglang_router_extra_args": {"model-alias": "default=/models/Kimi-K2.5-INT4"}},
    "router-known-flag": {"sglang_router_extra_args": {"cb-failure-threshold": 5}},
    "router-own-venv": {"sglang_router_venv": "/srv/gw/venv"},
    # a key's file path and a token count are no secrets
    "smg-key-path-and-token-rate": {"sglang_router_gateway": "smg",
                                    "sglang_router_extra_args": {"tls-key-path": "/etc/smg/tls.key",
                                                                 "rate-limit-tokens-per-second": 100}},
    "router-with-key": {"sglang_router_api_key": "k-123"},
    "smg-with-key": {"sglang_router_gateway": "smg", "sglang_router_api_key": "k-123"},
}


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    cases = {name: dict(BASE, **variables) for name, (variables, _msg) in CASES.items()}
    cases.update({name: dict(BASE, **variables) for name, variables in PASSING.items()})
    return run_play_batch(tmp_path_factory.mktemp("router-gateways"), PLAY, cases)


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_before_the_host_changes_naming_the_reason(preflight, case):
    rc, out = preflight[case]
    assert rc != 0 and "PASSED" not in out
    assert CASES[case][1] in out, out[-3000:]
    assert "s3cr3t" not in out


@pytest.mark.parametrize("case", sorted(PASSING))
def test_known_gateways_releases_and_flags_pass(preflight, case):
    rc, out = preflight[case]
    assert rc == 0 and "PASSED" in out, out[-3000:]


def test_each_install_read_registers_its_own_variable():
    """A skipped task registers too: the read after pip (skipped when pip changed nothing) overwrote the read before
    it, and the second run of molecule/router failed 'sglang-router None in /opt/sglang-router/venv'."""
    with open(os.path.join(ROLE, "tasks", "install.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    registers = [t["register"] for t in tasks if "register" in t]
    assert len(registers) == len(set(registers)), registers
    # the read after pip runs exactly where the check does (not in check mode, not where pip was skipped because
    # the venv met the lock): it never leaves a skipped result for the check
    again = next(t for t in tasks if t["name"] == "Read the installed gateway's version again")
    pinned = next(t for t in tasks if t["name"] == "The installed version is the pinned one")
    assert again["when"] == pinned["when"] == "not ansible_check_mode and _router_pip is not skipped"
