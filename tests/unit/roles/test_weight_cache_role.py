# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 49 in the units: the Weight Cache Daemon's unit (roles/weight_cache) rendered from the server's flags with
the server unit's quoting and sandbox, the server unit's side of it (the daemon wanted, its /tmp shared, started by
the server's own start after the old process is gone), and the compiler caches kept per release, model and GPU."""
from __future__ import annotations

import os
import shlex
import types

import jinja2
import jinja2.nativetypes
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import (
    server_inputs, server_role, sglang_args, sglang_secrets, systemd)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SERVER = os.path.join(ROOT, "roles", "server")
ROLE = os.path.join(ROOT, "roles", "weight_cache")
FILTERS = {}
for _module in (sglang_args, systemd, sglang_secrets, server_inputs, server_role):
    FILTERS.update(_module.FilterModule().filters())
f = types.SimpleNamespace(**FILTERS)


def _yaml(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


DEFAULTS = _yaml(SERVER, "defaults", "main.yml")
ARGS = {"model-path": "/models/llama", "tp": 8, "dtype": "bfloat16", "trust-remote-code": True,
        "mem-fraction-static": 0.85}


def _env(folder, native=False):
    cls = jinja2.nativetypes.NativeEnvironment if native else jinja2.Environment
    env = cls(loader=jinja2.FileSystemLoader(folder), keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    for name, func in FILTERS.items():
        env.filters["gpuserve.sglang." + name] = func
    return env


def _variables(**over):
    variables = dict(DEFAULTS)
    variables.update({
        "sglang_unit_environment": {"CUDA_HOME": "/usr/local/cuda-13.0", "PATH": "/opt/sglang/venv/bin:/usr/bin:/bin"},
        "sglang_env_file": "/etc/sglang/sglang.env", "sglang_record_file": "/etc/sglang/sglang.md",
        "sglang_nccl_env_file": "/etc/sglang/nccl.env", "sglang_unit_description": "SGLang",
        "sglang_service_name": "sglang", "sglang_weight_cache_service_name": "sglang-weight-cache",
        "sglang_cache_key": "sglang-0.5.17/llama-0123abcd/sm90",
        # what the server unit reads (roles/server/vars/main.yml _server_flags: plugin_utils/_server_flags.py)
        "_server_flags": {
            "exec_start": f.sglang_cmdline(ARGS, prefix=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]),
            "hicache": f.sglang_plan_inputs(ARGS, "0.5.17")["hicache"]},
        "_server_args": ARGS, "_server_host": {"python": "/opt/sglang/venv/bin/python"},
        "sglang_plan_inputs": f.sglang_plan_inputs(ARGS, "0.5.17"),
        "ansible_managed": "Ansible managed", "hostvars": {},
    })
    variables.update(over)
    return variables


def _server_unit(**over):
    return _env(os.path.join(SERVER, "templates")).get_template("sglang.service.j2").render(**_variables(**over))


def _daemon_unit(**over):
    variables = _variables(**over)
    native = _env(ROLE, native=True)
    role_vars = _yaml(ROLE, "vars", "main.yml")

    def resolve(value):
        if isinstance(value, dict):
            return dict((k, resolve(v)) for k, v in value.items())
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return native.from_string(value).render(**variables) if isinstance(value, str) and "{{" in value else value

    for name in ("_weight_cache_ranks", "_weight_cache_flags", "_weight_cache_unit"):
        variables[name] = resolve(role_vars[name])
    variables["_weight_cache_ready"] = resolve(role_vars["_weight_cache_ready"])
    return _env(os.path.join(ROLE, "templates")).get_template("sglang-weight-cache.service.j2").render(**variables)


def _settings(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_server_unit_is_unchanged_with_the_features_off():
    """Off by default (not yet shown on a real server): an existing unit gets no new line, so no restart."""
    text = _server_unit()
    assert "weight-cache" not in text and "JoinsNamespaceOf" not in text and "ExecStartPre" not in text
    assert "SGLANG_CACHE_DIR" not in text


def test_the_server_unit_starts_the_daemon_itself_and_shares_its_tmp():
    s = _settings(_server_unit(sglang_weight_cache=True))
    # neither Wants= nor ordering: a restart's transaction would start the daemon before the old server is gone
    assert s["Wants"] == ["network-online.target"] and s["After"] == ["network-online.target"]
    assert s["JoinsNamespaceOf"] == ["sglang-weight-cache.service"]
    assert len(s["ExecStartPre"]) == 1 and s["ExecStartPre"][0].startswith("+")   # as root: systemctl
    assert shlex.split(s["ExecStartPre"][0][1:].replace("$$", "$")) == [
        "/bin/sh", "-c", 'if [ -e "$1" ]; then rm -f "$1"; exec systemctl restart "$2"; fi; exec systemctl start "$2"',
        "sh", "/run/gpuserve-sglang/sglang-weight-cache.service.restart", "sglang-weight-cache.service"]
    # the server may wait for the daemon's load inside its start
    assert s["TimeoutStartSec"] == [str(int(DEFAULTS["sglang_unit_timeout_start_sec"]) + 1800)]


def test_the_daemon_unit_is_rendered_from_the_server_s_flags_with_the_server_s_sandbox():
    text = _daemon_unit(sglang_weight_cache=True)
    s = _settings(text)
    assert s["ExecStart"] == [
        "/opt/sglang/venv/bin/python -m sglang.srt.weight_cache.daemon --tp-size 8 --pp-size 1 --dp-size 1 "
        "--ep-size 1 --model-path /models/llama --dtype bfloat16 --trust-remote-code --timeout 1800"]
    assert "Before" not in s and "After" in s and "sglang.service" not in s["After"][0]
    # named in both units: systemd 252 shares the /tmp only from the unit that names the other, and the daemon may
    # start after the server (from its ExecStartPre; checked on a real systemd by molecule restart_inputs)
    assert s["JoinsNamespaceOf"] == ["sglang.service"]
    waits = " && ".join("[ -e /tmp/sglang_weight_cache_rank%d.ready ]" % rank for rank in range(8))
    assert s["ExecStartPost"] == ["/bin/sh -c 'until %s; do sleep 1; done'" % waits]
    assert s["TimeoutStartSec"] == ["1800"] and s["Restart"] == ["on-failure"]
    for key, value in [("PrivateTmp", "yes"), ("ProtectSystem", "strict"), ("NoNewPrivileges", "yes"),
                       ("DevicePolicy", "closed"), ("User", "sglang"), ("LimitMEMLOCK", "infinity")]:
        assert s[key] == [value], key
    assert s["WantedBy"] == ["multi-user.target"]
    assert s["EnvironmentFile"] == ["-/etc/sglang/nccl.env", "-/etc/sglang/sglang.env"]   # no secrets file
    assert "mem-fraction" not in text   # only what the daemon's cache key holds


def test_the_compiler_caches_are_kept_per_release_model_and_gpu_and_writable():
    s = _settings(_server_unit(sglang_cache_dir="/var/lib/sglang-cache"))
    cache = "/var/lib/sglang-cache/sglang-0.5.17/llama-0123abcd/sm90"
    env = dict(pair.split("=", 1) for line in s["Environment"] for pair in line.split(" "))
    assert env["SGLANG_CACHE_DIR"] == cache and env["TRITON_CACHE_DIR"] == cache + "/triton"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == cache + "/inductor" and env["SGLANG_DG_CACHE_DIR"] == cache + "/deep_gemm"
    assert env["FLASHINFER_WORKSPACE_BASE"] == cache and env["TVM_FFI_CACHE_DIR"] == cache + "/tvm-ffi"
    assert s["ReadWritePaths"] == ["-/var/lib/sglang-cache"]
    # made before the start as root for the service user; the first start of a new key says it is cold
    pre = s["ExecStartPre"][0]
    assert pre.startswith("+/bin/sh -c ") and pre.endswith(" sh " + cache)
    assert "compiler caches cold: $$1 is new" in pre and "install -d -m 0750 -o sglang -g sglang" in pre
    # the keyed variables come after the sandbox's own, so they win (systemd: the last assignment)
    text = _server_unit(sglang_cache_dir="/var/lib/sglang-cache")
    assert text.index("TRITON_CACHE_DIR=/var/cache/sglang/triton") < text.index("SGLANG_CACHE_DIR=")


def test_the_cache_key_holds_the_release_the_model_and_the_gpu():
    text = DEFAULTS["sglang_cache_key"]
    for part in ("_server_host.sglang_release", "sglang_model_path | basename", "hash('sha256')", "compute_caps"):
        assert part in text


def test_the_server_role_includes_the_weight_cache_role_once_before_its_module_call():
    tasks = _yaml(SERVER, "tasks", "main.yml")
    inner = next(t for t in tasks if "block" in t)["block"]
    names = [list(t)[1] if "name" in t else "" for t in inner]
    includes = [i for i, t in enumerate(inner) if t.get("ansible.builtin.include_role", {}).get("name") ==
                "gpuserve.sglang.weight_cache"]
    run = next(i for i, t in enumerate(inner) if t.get("ansible.builtin.import_tasks") == "run.yml")
    assert len(includes) == 1 and includes[0] < run, names
    role_tasks = _yaml(ROLE, "tasks", "main.yml")
    assert len(role_tasks) == 1 and "gpuserve.sglang.sglang_weight_cache" in role_tasks[0]


def test_the_flags_carry_the_client_and_the_prefetch_by_the_fact_and_the_user_s_flags_win():
    inputs = {"model_path": "/models/llama", "user": {"tp": 1}, "host": "h", "release": "0.5.17"}
    facts = {"h": {"sglang_server_features": {"weight_cache": True, "weight_cache_timeout": 600,
                                              "weight_prefetch": True}}}
    args = f.sglang_server_args(inputs, facts)
    assert args["weight-cache-mode"] == "client" and args["weight-cache-timeout"] == 600
    assert args["weight-cache-socket"] == "/tmp/sglang_weight_cache_rank0.sock"
    assert args["weight-loader-prefetch-checkpoints"] is True
    assert "weight-loader-drop-cache-after-load" not in args
    user = dict(inputs, user={"tp": 1, "weight-cache-timeout": 60})
    assert f.sglang_server_args(user, facts)["weight-cache-timeout"] == 60
    assert "weight-cache-mode" not in f.sglang_server_args(inputs, {})     # no fact: nothing added
    old = dict(inputs, release="0.5.10")
    assert "weight-loader-prefetch-checkpoints" not in f.sglang_server_args(old, facts)


def test_the_preflight_says_whether_the_prefetch_is_used_and_why():
    features = {"features": {"weight_prefetch": "auto"}, "args": {"model-path": "/m", "tp": 8},
                "plan": {"weights_gb_per_gpu": 68.4, "mem_available_bytes": 800 * 10 ** 9,
                         "host_pool_bytes_total": 358 * 10 ** 9}}
    notes = f.sglang_server_notes({"sglang_release": "0.5.17"}, False, features)
    assert len(notes) == 1 and "auto, not used" in notes[0] and "MemAvailable 800.0 GB" in notes[0]
    assert f.sglang_server_notes({"sglang_release": "0.5.17"}, False) == []
