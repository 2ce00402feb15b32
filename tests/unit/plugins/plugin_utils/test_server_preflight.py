# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's preflight (issue 47): ONE task, whose action plugin (gpuserve.sglang.sglang_host_facts with
server_preflight) reads the host, runs the installed SGLang's parser and fails with every refusal, computed in
Python (plugins/plugin_utils/_server_preflight.py; the role's real play: tests/unit/roles/test_server_preflight_play.py).
On b67a114 the preflight was three tasks whose YAML called the
published filters sglang_server_models, sglang_server_argv, sglang_server_refusals and sglang_server_notes."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import server_role as r
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_preflight as p

from conftest import ROOT, reader as _reader

ROLE = os.path.join(ROOT, "roles", "server")
# The filters the roles no longer call (deprecated in meta/runtime.yml, still published until 3.0.0).
DEPRECATED = ("sglang_server_models", "sglang_server_argv", "sglang_server_refusals", "sglang_server_notes",
              "sglang_server_account_ok", "sglang_server_gpu_groups",
              # the host lease's gates and the nodes of a server over several hosts (test_server_lease.py,
              # test_server_nodes.py)
              "sglang_server_gate_seconds", "sglang_node_fingerprint", "sglang_node_mismatches", "sglang_node_probe")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


IN = {"profile": {"tp": 8}, "user": {}, "model_path": "/models/m", "nodes": [], "host": "gpu-a1", "release": "0.5.17",
      "release_args": [], "listen_host": "0.0.0.0", "port": 30000, "python": "/opt/v/bin/python"}


def _values(**over):
    values = {"sglang_python": "", "sglang_install_record": "/opt/sglang/install-record.json",
              "sglang_venv": "/opt/sglang/venv", "sglang_service_name": "sglang-kimi",
              "sglang_unit_dir": "/etc/systemd/system", "sglang_cuda_home": "", "sglang_user": "sglang",
              "sglang_model_check": True, "sglang_model_check_timeout": 120, "sglang_model_check_deep": "no",
              "sglang_weight_cache_service_name": "sglang-weight-cache", "_server_in": dict(IN),
              "inventory_hostname": "gpu-a1", "_server_inputs": {"sglang_port": 30000}, "_server_env": {},
              "sglang_args": {}, "sglang_unit_sandbox": True, "sglang_allow_dropin_overrides": False,
              "sglang_user_groups": [], "sglang_check_args": True}
    values.update(over)
    return values


def test_the_role_calls_none_of_the_deprecated_filters():
    """No task, variable or template of any role names a filter the server role's preflight used to call."""
    found = []
    for top, dummy, files in os.walk(os.path.join(ROOT, "roles")):
        for name in files:
            path = os.path.join(top, name)
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            found += ["%s: %s" % (os.path.relpath(path, ROOT), f) for f in DEPRECATED if re.search(r"\b%s\b" % f, text)]
    assert found == []


def test_the_preflight_is_one_task_with_one_option():
    """The host read, the parser's check and every refusal: one task result (three on b67a114), one option."""
    tasks = _yaml("tasks", "preflight.yml")
    facts = [t for t in tasks if "gpuserve.sglang.sglang_host_facts" in t]
    assert len(facts) == 1 and facts[0]["gpuserve.sglang.sglang_host_facts"] == {"server_preflight": True}
    assert facts[0]["register"] == "_server_host" and facts[0]["check_mode"] is False
    assert not [t for t in tasks if "ansible.builtin.script" in t or "ansible.builtin.assert" in t]
    assert [t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.include_tasks") for t in tasks] == [
        "flags.yml", None, "nodes.yml"]


def test_every_deprecated_filter_is_routed_with_a_deprecation():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        routing = yaml.safe_load(handle)["plugin_routing"]["filter"]
    for name in DEPRECATED:
        assert routing[name]["deprecation"]["removal_version"] == "3.0.0", name
        with open(os.path.join(ROOT, "plugins", "filter", name + ".yml"), encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)["DOCUMENTATION"]
        assert doc["deprecated"]["removed_in"] == "3.0.0", name


@pytest.mark.parametrize("given, expected", [
    ({}, ""),                                                   # the module takes the CUDA facts file's home
    ({"cuda_home": "/usr/local/cuda-13.0"}, "/usr/local/cuda-13.0"),   # the cuda role's fact of this play
    ({"sglang_cuda_home": "/opt/cuda-13.0"}, "/opt/cuda-13.0"),  # the operator's: the unit's CUDA_HOME
])
def test_the_host_read_checks_the_cuda_home_the_unit_gets(given, expected):
    """sglang_cuda_home as the task's templar resolves it before this run's host read (_server_host is
    BEFORE_HOST_READ, never an earlier run's read): the operator's, else the cuda role's fact, else ""."""
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar, trust_as_template  # pylint: disable=import-outside-toplevel
    variables = {"sglang_cuda_home": trust_as_template(_yaml("defaults", "main.yml")["sglang_cuda_home"]),
                 "_server_host": dict(p.BEFORE_HOST_READ)}
    variables.update(given)
    templar = Templar(loader=DataLoader(), variables=variables)
    cuda_home = templar.template(trust_as_template(str(variables["sglang_cuda_home"])))
    assert p.host_read_args(_reader(_values(sglang_cuda_home=cuda_home)))["cuda_home"] == expected


def test_the_host_read_args_are_the_former_tasks():
    args = p.host_read_args(_reader(_values(_server_profile_model={"quantization": "int4", "files": ["a"]},
                                            sglang_version="0.5.17")))
    assert args == {
        "python": "", "install_record": "/opt/sglang/install-record.json", "venv": "/opt/sglang/venv",
        "cuda_fact_file": "/etc/ansible/facts.d/gpuserve_cuda.fact", "unit": "sglang-kimi",
        "unit_dir": "/etc/systemd/system", "paths": ["/models/m", "/etc/systemd/system/sglang-weight-cache.service"],
        "probe": True, "cuda_home": "", "user": "sglang", "unit_state": True,
        "models": {"items": r.sglang_server_models({"model-path": "/models/m"}, {"quantization": "int4", "files": ["a"]}),
                   "release": "0.5.17", "timeout": 120, "deep": False}}
    # an interpreter given: no install record; the draft model read too; the model check off: no items
    args = p.host_read_args(_reader(_values(
        sglang_python="/opt/x/bin/python", sglang_model_check="false",
        _server_in=dict(IN, user={"speculative-draft-model-path": "/models/d"}))))
    assert args["install_record"] == "" and args["python"] == "/opt/x/bin/python"
    assert args["paths"][:2] == ["/models/m", "/models/d"] and args["models"]["items"] == []


def test_the_parser_runs_only_where_sglang_is_installed_and_the_check_is_on():
    read = _reader(_values())
    assert p.parser_argv(read, {"sglang_installed": True}) == r.sglang_server_argv(IN)
    assert p.parser_argv(read, {"sglang_installed": False}) is None
    assert p.parser_argv(read, {}) is None
    assert p.parser_argv(_reader(_values(sglang_check_args="no")), {"sglang_installed": True}) is None


HOST = {"python": "/opt/v/bin/python", "python_exists": True, "sglang_release": "0.5.17", "dropin_overrides": [],
        "jit_problems": [], "models": {"problems": [], "notes": []}, "paths": {"/models/m": {"exists": True}},
        "account": {"exists": True, "group_exists": True, "groups": ["sglang", "video"], "device_groups": ["video"]}}


def test_the_verdict_is_the_former_asserts():
    """The same refusals, in the same order and words, as the filter the former assert called (its own tests hold
    them word for word against the YAML before it: tests/unit/plugins/filter/test_server_role_filters.py)."""
    read = _reader(_values())
    assert p.verdict(read, HOST) == {"refusals": [], "notes": [], "account_ok": True, "account_groups": ["video"]}
    host = dict(HOST, python="/home/x/bin/python", dropin_overrides=["d"], paths={},
                models={"problems": ["p"], "notes": ["n"]})
    parser = p.parser_result(2, "{}", "usage: x\nsglang.launch_server: error: argument --tp: invalid int value: 'x'\n")
    out = p.verdict(read, host, parser)
    check = {"host": host, "hostname": "gpu-a1", "inputs": {"sglang_port": 30000}, "args": r.sglang_server_args(IN),
             "env": {}, "user_args": {}, "sandbox": True, "allow_dropins": False, "parser": parser}
    assert out["refusals"] == r.sglang_server_refusals(check)
    assert [line.split(" (")[0] for line in out["refusals"]] == [
        "sglang_python /home/x/bin/python is under /root, /home or /run/user, which the unit's sandbox hides",
        "drop-ins override the managed unit", "not on gpu-a1", "model preflight on gpu-a1", "the installed SGLang's parser rejects the command line"]
    assert out["refusals"][-1].endswith("sglang.launch_server: error: argument --tp: invalid int value: 'x'")
    assert out["notes"] == ["model preflight, not checked: n"]
    assert "stdout" not in parser   # the parsed values are not handed on
    # allowed drop-ins are a note; a missing group of sglang_user_groups makes the account incomplete
    out = p.verdict(_reader(_values(sglang_allow_dropin_overrides=True, sglang_user_groups=["render"])),
                    dict(HOST, dropin_overrides=["a.conf: ExecStart"]))
    assert out == {"refusals": [], "notes": ["drop-ins override the managed unit (allowed): a.conf: ExecStart"],
                   "account_ok": False, "account_groups": ["video", "render"]}


def test_the_account_joins_the_named_gpu_device_groups_and_the_users():
    """The groups install.yml adds the account to (on b67a114 the filter sglang_server_gpu_groups over a find of
    /dev/nvidia* and getent group, two task results more): the device groups with a name, then sglang_user_groups."""
    host = dict(HOST, account={"exists": False, "device_groups": ["video", "1234", "render"]})
    out = p.verdict(_reader(_values(sglang_user_groups=["docker"])), host)
    assert out["account_groups"] == ["render", "video", "docker"] and out["account_ok"] is False
    assert p.verdict(_reader(_values()), dict(HOST, account=None))["account_groups"] == []
