# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's seam (issue 47): the role's one task hands the action plugin of gpuserve.sglang.sglang_server
a handful of options, and plugin_utils/_server_payload.py computes the module's payload once, after the host read.
On 4ce21e5 the role's task itself carried 86 options (nested ones counted) from two variable bags and six filters,
and the module file had 247 lines of code outside its documentation."""

from __future__ import annotations

import ast
import json
import os

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import entry
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags, _server_payload

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
ROLE = os.path.join(ROOT, "roles", "server")
KEY, ADMIN, TOKEN = "pay-load-key-1", "pay-load-admin-2", "hf_payloadcanary3"


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _values(**over):
    """Role variables as the task's templar would give them (the role's defaults' shapes)."""
    values = {name: "" for name in _server_payload.ROLE_VARS}
    values.update({
        "sglang_unit_dir": "/etc/systemd/system", "sglang_env_file": "/etc/sglang/sglang-kimi.env",
        "sglang_secrets_file": "/etc/sglang/sglang-kimi.secrets.yaml", "sglang_api_key": KEY,
        "sglang_admin_api_key": ADMIN, "sglang_user": "sglang", "sglang_launch_script": "/opt/sglang/bin/launch.py",
        "sglang_config_dir": "/etc/sglang", "sglang_backup_dir": "/etc/sglang/backup",
        "sglang_nccl_env_file": "/etc/sglang/nccl.env", "sglang_install_record": "/opt/sglang/install.json",
        "sglang_backup_keep": 5, "sglang_last_good_keeps_secrets": False, "sglang_rollback": True,
        "sglang_lease_dir": "/run/gpuserve-sglang", "sglang_restart_timeout": 1800,
        "sglang_health_url": "http://127.0.0.1:30000/health", "sglang_verify_expect": [],
        "sglang_verify_extra_fail_patterns": [], "sglang_stop_processes": [], "sglang_stop_processes_timeout": 30,
        "sglang_free_gpus": False, "sglang_nvidia_smi_dir": "/usr/bin", "sglang_server_nodes": [],
        "sglang_bench_gate": True, "sglang_bench_url": "http://127.0.0.1:30000", "sglang_bench_requests": 4,
        "sglang_bench_concurrency": 2, "sglang_bench_input_len": 8, "sglang_bench_output_len": 10,
        "sglang_bench_prompt_file": "", "sglang_bench_timeout": 60, "sglang_bench_threshold_pct": 10,
        "sglang_bench_baseline_tok_s": 1, "sglang_answers_gate": True, "sglang_answers_prompts": ["a"],
        "sglang_answers_host_tier": "auto", "sglang_record_history": 10, "sglang_args": {"tp": 8},
        "sglang_launcher": "sglang.launch_server", "sglang_unit_environment": {}, "sglang_venv": "/opt/sglang/venv",
        "inventory_hostname": "gpu1",
        "_server_in": {"profile": {}, "user": {"tp": 8}, "model_path": "/m", "nodes": [], "host": "gpu1",
                       "release": "0.5.9", "release_args": [], "python": "/opt/sglang/venv/bin/python",
                       "launcher": "sglang.launch_server", "listen_host": "127.0.0.1", "port": 30000,
                       "secret_keys": ["api-key", "admin-api-key"]},
        "_server_env": {"HF_TOKEN": TOKEN, "SGLANG_ENABLE_SPEC_V2": "True"},
    })
    values.update(over)
    return values


def _payload(host=None, **over):
    values = _values(**over)

    def read(name, default=None):
        if name == "_server_flags" and not values.get(name):
            # the role's _server_flags: the preflight's flags, from the same inputs (plugin_utils/_server_flags.py)
            return _server_flags.flags(lambda key, fallback=None: values.get(key, fallback))
        if name in values:
            return values[name]
        assert name in _server_payload.OPTIONAL_VARS, name
        return default
    host = {"python": "/opt/sglang/venv/bin/python", "purelib": "/opt/sglang/venv/lib/python3.12/site-packages",
            "sglang_release": "0.5.9"} if host is None else host
    return _server_payload.payload(read, "sglang-kimi", host, "[Service]\n", "print()\n")


def _module_call():
    return _yaml("tasks", "run.yml")[0]["gpuserve.sglang.sglang_server"]


def _count(options):
    """Options, nested ones counted (a dict written in the task counts each of its keys as well)."""
    return sum(1 + (_count(value) if isinstance(value, dict) else 0) for value in options.values())


def test_the_roles_call_takes_at_most_20_options():
    call = _module_call()
    assert _count(call) <= 20, _count(call)
    assert set(call["role_inputs"]) == {"host", "unit", "launcher"}


def test_the_module_file_is_documentation_and_a_short_main():
    path = os.path.join(ROOT, "plugins", "modules", "sglang_server.py")
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    tree = ast.parse(source)
    docs = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            docs.update(range(node.lineno, node.end_lineno + 1))
    code = [line for number, line in enumerate(source.splitlines(), 1)
            if number not in docs and line.strip() and not line.strip().startswith("#")]
    assert len(code) <= 150, len(code)
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main")
    assert main.end_lineno - main.lineno <= 5


def test_every_option_the_payload_sets_is_one_the_module_takes():
    assert set(_payload()) <= set(entry.ARGUMENT_SPEC)
    assert not entry.problems(dict(_payload(), name="sglang-kimi"))


def test_the_keys_reach_only_the_secrets_file_and_the_no_log_options():
    payload = _payload()
    assert KEY in payload["secrets"]["content"] and ADMIN in payload["secrets"]["content"]
    assert payload["secrets_to_mask"] == [KEY, ADMIN] and payload["api_key"] == KEY
    # the environment file holds the token (its one 0600 home besides the unit's process), never a key
    assert KEY not in payload["env"]["content"] and TOKEN in payload["env"]["content"]
    for option in ("record", "answers", "bench", "unit", "service", "dirs", "reads"):
        assert KEY not in json.dumps(payload[option]) and ADMIN not in json.dumps(payload[option]), option
    for path in (("env", "content"), ("secrets", "content")):
        spec = entry.ARGUMENT_SPEC[path[0]]["options"][path[1]]
        assert spec["no_log"] is True, path
    assert entry.ARGUMENT_SPEC["api_key"]["no_log"] and entry.ARGUMENT_SPEC["secrets_to_mask"]["no_log"]
    # the record names the keys, never their values; its env goes through the record's own scrub (_record.py)
    assert payload["record"]["secret_keys"] == ["api-key", "admin-api-key"]


def test_no_key_no_secrets_file_text():
    assert _payload(sglang_api_key="", sglang_admin_api_key="")["secrets"]["content"] == ""
    assert _payload(sglang_api_key="", sglang_admin_api_key="")["secrets_to_mask"] == []


def test_gates_run_on_node_0_or_on_a_server_of_one_host():
    assert _payload()["gates_here"] is True
    assert _payload(sglang_server_nodes=["gpu1", "gpu2"])["gates_here"] is True
    assert _payload(sglang_server_nodes=["gpu0", "gpu1"])["gates_here"] is False


def test_the_files_the_server_reads_and_the_install_record_come_from_the_host_read():
    payload = _payload()
    assert payload["reads"] == ["/etc/sglang/nccl.env",
                                "/opt/sglang/venv/lib/python3.12/site-packages/sitecustomize.py",
                                "/opt/sglang/venv/lib/python3.12/site-packages/gpuserve_nccl_tuning.pth"]
    assert payload["install_record"] == "/opt/sglang/install.json"
    versioned = _payload(host={"python": "/opt/sglang/venvs/0.5.9-abc/bin/python", "versioned_venv": "/opt/sglang/"
                               "venvs/0.5.9-abc"})
    assert versioned["install_record"] == "/opt/sglang/venvs/0.5.9-abc/gpuserve-install-record.json"
    assert versioned["venv_link"] == {"versioned": "/opt/sglang/venvs/0.5.9-abc", "link": "/opt/sglang/venv"}
    assert _payload(sglang_launch_script="")["launcher"] == {"path": "", "content": ""}


@pytest.mark.parametrize("release, hicache", [("0.5.9", False), ("0.5.23", True)])
def test_the_qwen_profiles_plan_inputs_follow_its_release_only_flags(release, hicache):
    """The Qwen profile turns HiCache on only from the release whose table says hicache_mamba: the answers gate's
    host-tier round and the record's expectation follow the ExecStart's flags on the host's release."""
    data = _yaml("vars", "profiles", "qwen35_397b_a17b_nvfp4.yml")
    inputs = dict(_values()["_server_in"], profile=data["_server_profile_args"], user={}, release=release,
                  release_args=data["_server_profile_release_args"])
    payload = _payload(_server_in=inputs)
    on = "--enable-hierarchical-cache" in payload["record"]["cmdline"]
    assert on is hicache
    assert payload["answers"]["hicache"] is hicache and payload["record"]["hicache_expected"] is hicache
    assert payload["answers"]["server_args"].get("enable-hierarchical-cache", False) is hicache


def test_the_weight_cache_daemon_is_the_servers_companion_and_its_load_in_the_timeout():
    off = _payload(sglang_weight_cache=False, sglang_weight_cache_service_name="sglang-kimi-weight-cache",
                   sglang_weight_cache_timeout=600)
    assert off["companion_units"] == [] and off["service"]["timeout"] == 1800
    on = _payload(sglang_weight_cache=True, sglang_weight_cache_service_name="sglang-kimi-weight-cache",
                  sglang_weight_cache_timeout=600)
    assert on["companion_units"] == ["sglang-kimi-weight-cache.service"] and on["service"]["timeout"] == 2400


def test_the_flags_are_the_preflights_never_computed_again():
    """The payload takes the effective flags, the plan's HiCache and the command line from _server_flags (computed
    once by the preflight for the host's release), even where _server_in would give other ones."""
    flags = {"args": {"tp": 3, "enable-hierarchical-cache": True}, "plan": {"hicache": True, "tp": 3},
             "cmdline": "/opt/sglang/venv/bin/python -m sglang.launch_server --tp 3 --enable-hierarchical-cache"}
    payload = _payload(_server_flags=flags)
    assert payload["record"]["cmdline"] == flags["cmdline"]
    assert payload["answers"]["server_args"] == flags["args"] and payload["answers"]["hicache"] is True
    assert payload["record"]["hicache_expected"] is True
