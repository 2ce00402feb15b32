# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's structure, profiles and templates: phases with tags, the
production unit rendered from the production profile, the API key kept out of the unit."""
from __future__ import annotations

import os
import re
import types

import jinja2
import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args, sglang_secrets, server_inputs, systemd

# The server role's filters, by name (split by what they hold: flag rules, systemd quoting, secrets, inputs).
_FILTERS = {}
for _module in (sglang_args, systemd, sglang_secrets, server_inputs):
    _FILTERS.update(_module.FilterModule().filters())
f = types.SimpleNamespace(FilterModule=lambda: types.SimpleNamespace(filters=lambda: dict(_FILTERS)), **_FILTERS)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "server")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


DEFAULTS = _yaml("defaults", "main.yml")


def test_api_key_is_no_log():
    # defaults == argument_specs for every role: tests/unit/roles/test_role_defaults.py
    options = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["sglang_api_key"].get("no_log") is True


def test_profile_choices_are_the_shipped_profiles():
    options = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    shipped = sorted(n[:-4] for n in os.listdir(os.path.join(ROLE, "vars", "profiles")))
    assert sorted(options["sglang_profile"]["choices"]) == shipped
    assert DEFAULTS["sglang_profile"] == "kimi_k25_int4_eagle3"


def test_phases_and_tags():
    top = _yaml("tasks", "main.yml")
    # the phases that change the host run inside the block that holds the host lease (lease.yml first)
    main = top[:1] + [t for t in top[1]["block"] if t["name"] in ("Install", "Configure", "Run")]
    # static imports: a phase costs no task of its own at run time (issue 20); its tags reach every task of it
    files = [t["ansible.builtin.import_tasks"] for t in main]
    assert files == ["preflight.yml", "install.yml", "configure.yml", "run.yml"]
    for task, phase in zip(main, ["preflight", "install", "configure", "run"]):
        assert task["tags"] == ["server_" + phase]


def test_production_defaults_of_the_unit():
    expected = {
        "sglang_service_name": "sglang-kimi", "sglang_venv": "/opt/sglang/venv", "sglang_python": "",
        "sglang_launcher": "sglang.launch_server", "sglang_host": "127.0.0.1", "sglang_port": 30000,
        "sglang_unit_restart": "on-failure", "sglang_unit_restart_sec": 30, "sglang_unit_timeout_start_sec": 900,
        "sglang_unit_timeout_stop_sec": 60, "sglang_unit_limit_nofile": 65536, "sglang_unit_limit_memlock": "infinity",
        "sglang_unit_kill_mode": "control-group", "sglang_unit_kill_signal": "SIGTERM",
        "sglang_unit_wanted_by": "multi-user.target", "sglang_rollback": True, "sglang_free_gpus": False,
    }
    assert {k: DEFAULTS[k] for k in expected} == expected
    # PATH: the resolved interpreter's bin (preflight's _server_python), CUDA's bin, nvidia-smi's directory
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["dirname"] = os.path.dirname
    path = env.from_string(DEFAULTS["sglang_unit_environment"]["PATH"])
    common = {"sglang_cuda_home": "/usr/local/cuda-13.0", "sglang_nvidia_smi_dir": "/opt/nv", "sglang_python": "",
              "sglang_venv": "/opt/sglang/venv"}
    assert path.render(_server_python="/opt/sglang/versions/sglang-0.5.9-0123456789ab/bin/python", **common) == (
        "/opt/sglang/versions/sglang-0.5.9-0123456789ab/bin:/usr/local/cuda-13.0/bin:/opt/nv:"
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    # before preflight resolved it (argument_specs validation evaluates the defaults): no error, sglang_venv's bin
    assert path.render(**common).startswith("/opt/sglang/venv/bin:/usr/local/cuda-13.0/bin:/opt/nv:")
    assert set(DEFAULTS["sglang_unit_environment"]) == {"CUDA_HOME", "PATH", "LD_LIBRARY_PATH"}


def test_production_profile_is_the_production_unit():
    profile = _yaml("vars", "profiles", "kimi_k25_int4_eagle3.yml")
    argv = f.sglang_argv(dict(profile["_server_profile_args"], **{"speculative-draft-model-path": "/d"}))
    assert " ".join(argv) == (
        "--tp 8 --speculative-algorithm EAGLE3 --speculative-draft-model-path /d --speculative-num-steps 2 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 3 --cuda-graph-max-bs 128 "
        "--attention-backend flashinfer --enable-flashinfer-allreduce-fusion --disable-custom-all-reduce "
        "--mem-fraction-static 0.88 --enable-hierarchical-cache --hicache-ratio 4.0 "
        "--hicache-write-policy write_through --hicache-io-backend kernel --enable-metrics")
    assert profile["_server_profile_env"] == {"SGLANG_ENABLE_SPEC_V2": "True"}


@pytest.mark.parametrize("name", ["kimi_k25_int4_eagle3", "qwen35_397b_a17b_nvfp4", "custom"])
def test_profiles_pass_the_preflight_rules(name):
    profile = _yaml("vars", "profiles", name + ".yml")
    args = dict(profile["_server_profile_args"])
    if "speculative-draft-model-path" in args:
        args["speculative-draft-model-path"] = "/d"
    assert f.sglang_args_problems(args, profile["_server_profile_env"]) == []


def _render_unit(**over):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    for name, func in f.FilterModule().filters().items():
        env.filters["gpuserve.sglang." + name] = func
    variables = dict(DEFAULTS)
    variables.update({
        "sglang_unit_environment": {"CUDA_HOME": "/usr/local/cuda-13.0",
                                    "PATH": "/opt/sglang/venv/bin:/usr/local/cuda-13.0/bin:/usr/bin:/bin",
                                    "LD_LIBRARY_PATH": "/usr/local/cuda-13.0/lib64"},
        "sglang_env_file": "/etc/sglang/sglang-kimi.env", "sglang_record_file": "/etc/sglang/sglang-kimi.md",
        "sglang_nccl_env_file": "/etc/sglang/nccl.env", "sglang_unit_description": "SGLang (kimi)",
        "_server_cmdline": f.sglang_cmdline({"model-path": "/models/k", "tp": 8},
                                            prefix=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]),
        "ansible_managed": "Ansible managed",
        # set by flags.yml before any unit is rendered (HiCache from the flags, else SGLang's default: off)
        "sglang_plan_inputs": {"hicache": False},
    })
    variables.update(over)
    return env.get_template("sglang.service.j2").render(**variables)


def _settings(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_unit_template_production_settings():
    text = _render_unit()
    assert text.startswith("#\n# Ansible managed\n#\n")
    s = _settings(text)
    assert s["ExecStart"] == ["/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/k --tp 8"]
    for key, value in [("Restart", "on-failure"), ("RestartSec", "30"), ("TimeoutStartSec", "900"),
                       ("TimeoutStopSec", "60"), ("LimitNOFILE", "65536"), ("LimitMEMLOCK", "infinity"),
                       ("KillMode", "control-group"), ("KillSignal", "SIGTERM"), ("WantedBy", "multi-user.target")]:
        assert s[key] == [value], key
    assert s["EnvironmentFile"] == ["-/etc/sglang/nccl.env", "/etc/sglang/sglang-kimi.env"]
    assert s["Environment"][:3] == ["CUDA_HOME=/usr/local/cuda-13.0",
                                    "PATH=/opt/sglang/venv/bin:/usr/local/cuda-13.0/bin:/usr/bin:/bin",
                                    "LD_LIBRARY_PATH=/usr/local/cuda-13.0/lib64"]
    # issue 14: by default the unit runs sandboxed as the system user sglang, with a writable cache for the JITs
    assert s["User"] == ["sglang"] and s["Group"] == ["sglang"]
    assert s["Environment"][3].startswith("HOME=/var/lib/sglang XDG_CACHE_HOME=/var/cache/sglang")
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                       ("PrivateTmp", "yes"), ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                       ("ProtectControlGroups", "yes"), ("RestrictSUIDSGID", "yes"), ("RestrictNamespaces", "yes"),
                       ("LockPersonality", "yes"), ("CapabilityBoundingSet", ""), ("UMask", "0077"),
                       ("DevicePolicy", "closed"), ("CacheDirectory", "sglang"), ("StateDirectory", "sglang")]:
        assert s[key] == [value], key
    # char-nvidia: major 195's /proc/devices name on driver 580 (docs/validation.md, an H200): without it under
    # DevicePolicy=closed the unit could not open /dev/nvidia0; char-nvidia-frontend is its name on older drivers.
    assert s["DeviceAllow"] == ["/dev/nvidiactl rw", "char-nvidia rw", "char-nvidia-frontend rw", "char-nvidia-uvm rw",
                                "char-nvidia-caps rw", "/dev/nvidia-modeset rw"]
    assert "PrivateDevices" not in s and "MemoryDenyWriteExecute" not in s  # they would hide the GPUs / break JIT
    assert len(_render_unit(sglang_unit_sandbox=False, sglang_user="").splitlines()) < 40  # short without it


def test_unit_template_overrides_user_and_api_key():
    text = _render_unit(sglang_user="sglang", sglang_api_key="s3cret-key", sglang_unit_restart="always",
                        sglang_unit_extra={"Nice": -5}, sglang_secrets_file="/etc/sglang/sglang-kimi.secrets.yaml")
    s = _settings(text)
    assert s["User"] == ["sglang"] and s["Group"] == ["sglang"]
    assert s["Restart"] == ["always"] and s["Nice"] == ["-5"]
    # issue 14: the key reaches SGLang through --config (a 0640 file), never on its command line
    assert s["ExecStart"][0].endswith(" --config /etc/sglang/sglang-kimi.secrets.yaml")
    assert "--api-key" not in text
    assert "s3cret-key" not in text


def test_unit_environment_values_are_quoted():
    text = _render_unit(sglang_unit_environment={"NCCL_DEBUG": "WARN", "X": "a b 100%"})
    assert 'Environment="X=a b 100%%"' in text.splitlines()


def test_env_file_and_record_mask_the_key():
    content = f.sglang_envfile({"SGLANG_ENABLE_SPEC_V2": "True", "SGLANG_API_KEY": "k"})
    assert content.splitlines() == ['SGLANG_API_KEY="k"', 'SGLANG_ENABLE_SPEC_V2="True"']
    with open(os.path.join(ROLE, "templates", "deployment-record.md.j2"), encoding="utf-8") as handle:
        record = handle.read()
    assert "sglang_mask_env" in record
    assert not re.search(r"sglang_api_key\s*}}", record)


def test_secrets_never_logged():
    for name in ("configure.yml", "files.yml"):
        tasks = _yaml("tasks", name)
        for task in tasks:
            body = yaml.safe_dump(task)
            if "_server_env_content" in body and ("copy" in body or "set_fact" in body):
                assert task.get("no_log") is True, task["name"]


def test_unit_template_timeout_stop_for_hicache_units():
    """HiCache units get the drain plus the time to free the pinned host pool (issue 12; docs/server.md)."""
    assert _settings(_render_unit())["TimeoutStopSec"] == ["60"]
    hicache = _settings(_render_unit(sglang_plan_inputs={"hicache": True}))
    assert hicache["TimeoutStopSec"] == ["180"]


def test_rollback_stops_the_failed_invocation_before_any_file_goes_back():
    """A failed start waits in auto-restart (Restart=on-failure, RestartSec): the rescue stops it before it puts
    any file back, so systemd cannot start the failing configuration again while the rollback runs (found by
    molecule/restart_inputs on a busy machine: three starts instead of two, the failing one twice)."""
    block = next(t for t in _yaml("tasks", "restart.yml") if "block" in t)
    rollback = next(t for t in block["rescue"] if t.get("name") == "Roll back to the last good configuration")
    first = rollback["block"][0]
    assert first["ansible.builtin.systemd_service"] == {"name": "{{ sglang_service_name }}.service", "state": "stopped"}
    host_changes = [i for i, t in enumerate(rollback["block"])
                    if "ansible.builtin.copy" in t or "ansible.builtin.file" in t]
    assert host_changes and min(host_changes) > 0


def test_every_read_of_a_file_that_can_hold_the_key_is_no_log():
    """A slurp of the process environment, the environment file or the secrets file puts its base64 in the
    output at -v (and in AWX job events): SGLANG_API_KEY decoded from it (issue 22). Every such read is no_log."""
    secret_sources = ("/environ", "sglang_env_file", "sglang_secrets_file")
    found = []
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _yaml("tasks", name) or []:
            for inner in [task] + task.get("block", []) + task.get("rescue", []):
                slurp = inner.get("ansible.builtin.slurp")
                if slurp and any(source in str(slurp.get("src", "")) for source in secret_sources):
                    found.append((name, inner["name"]))
                    assert inner.get("no_log") is True, "%s: %s" % (name, inner["name"])
    assert ("record.yml", "Read the environment of the running server process") in found


def test_an_unverified_running_invocation_is_verified_inside_the_rescue():
    """Issue 22: a run killed during its restart left its files and an invocation no run verified; run again,
    nothing is newer than it. run.yml routes it through restart.yml's block (state started: verify, no restart),
    so its failure takes the rollback; molecule/server kills a failing change mid-restart and runs it again."""
    run = _yaml("tasks", "run.yml")
    names = [t["name"] for t in run]
    mark = next(t for t in run if "_server_verify_only" in (t.get("ansible.builtin.set_fact") or {}))
    facts = mark["ansible.builtin.set_fact"]
    # one task marks both (issue 20): a restart when older than its files, else a verification of an unknown one
    assert "_server_unknown_invocation | bool" in facts["_server_restart_pending"]
    assert facts["_server_verify_only"].startswith("{{ not (_server_restart_pending | bool or _server_stale_invocation | bool)")
    conditions = mark["vars"]["_server_unknown_invocation"]
    assert "_server_inputs_now.manifest.invocation_id" in conditions and "InvocationID" in conditions
    assert "'failed'" in conditions and "'inactive'" not in conditions
    restart = next(t for t in run if (t.get("ansible.builtin.include_tasks") == "restart.yml"))
    assert names.index(mark["name"]) < names.index(restart["name"])
    block = next(t for t in _yaml("tasks", "restart.yml") if "block" in t)
    service = next(t for t in block["block"] if "gpuserve.sglang.sglang_service" in t)
    assert service["gpuserve.sglang.sglang_service"]["state"] == \
        "{{ 'started' if _server_verify_only | default(false) | bool else 'restarted' }}"
    assert "rescue" in block


# ---- a group moves as one; an interrupted rollback is finished (issue 39) ------------------------------------------
def _names(tasks):
    return [t.get("name") for t in tasks]


def _index(tasks, predicate):
    return next(i for i, t in enumerate(tasks) if predicate(t))


def test_a_node_missing_from_the_play_stops_the_group_before_any_node_stops():
    """Defect 3. Old code: nothing between the preflight and the restart looked at the other nodes: a node that
    dropped out after its preflight (lease held, configure failed, UNREACHABLE) left node 0 to restart alone.
    Now every node takes its group's verdict over ansible_play_batch before the strays, the GPUs or the unit are
    stopped, and any_errors_fatal ends the play for every host."""
    run = _yaml("tasks", "run.yml")
    verdict = _index(run, lambda t: "any_errors_fatal" in t and "ansible.builtin.assert" in t)
    task = run[verdict]
    assert task["any_errors_fatal"] is True
    assert "sglang_group_problems(hostvars, ansible_play_batch)" in task["vars"]["_server_group_problems"]
    ready = _index(run, lambda t: (t.get("ansible.builtin.set_fact") or {}).get("_server_node_ready") is True)
    assert ready < verdict
    for first_stop in ("strays.yml", "free_gpus.yml", "restart.yml"):
        assert verdict < _index(run, lambda t, f=first_stop: t.get("ansible.builtin.include_tasks") == f)
    # a node is "ready" only in this run: its preflight resets the facts the verdicts read
    reset = _yaml("tasks", "nodes.yml")[0]["ansible.builtin.set_fact"]
    assert reset["_server_node_ready"] is False and reset["_server_gates_passed"] is False and reset["_server_restart"] == {}


def test_the_gates_run_before_the_groups_verdict_and_no_node_keeps_before_it():
    """Defect 4. Old code: the gates ran after the all-nodes check, on node 0 only: a gate failure rolled back
    node 0 alone while nodes 1..N went on to keep the new configuration as their last good set."""
    block = next(t for t in _yaml("tasks", "restart.yml") if "block" in t)["block"]
    gates = [_index(block, lambda t, f=f: t.get("ansible.builtin.include_tasks") == f)
             for f in ("bench_gate.yml", "answers_gate.yml")]
    verdict = _index(block, lambda t: "gates='_server_gates_passed'" in str(t.get("vars", {})))
    passed = _index(block, lambda t: (t.get("ansible.builtin.set_fact") or {}).get("_server_gates_passed") is True)
    assert max(gates) < passed < verdict == len(block) - 1
    assert "result='_server_restart'" in block[verdict]["vars"]["_server_group_problems"]
    run = _yaml("tasks", "run.yml")
    keep = _index(run, lambda t: t.get("ansible.builtin.include_tasks") == "last_good.yml")
    check = [i for i, t in enumerate(run) if t.get("any_errors_fatal") is True]
    assert len(check) == 2 and check[1] < keep


def test_an_open_restore_is_opened_before_the_stop_and_finished_by_the_next_run():
    """Defect 6. Old code: nothing recorded a rollback in progress; killed after "Stop the failed invocation" or
    with one copy failed, the next run took the "start when not running" path and never rolled back."""
    restart = _yaml("tasks", "restart.yml")
    block = next(t for t in restart if "block" in t)
    opening = _index(block["rescue"], lambda t: (t.get("gpuserve.sglang.sglang_last_good") or {}).get("state") == "restoring")
    rollback = _index(block["rescue"], lambda t: t.get("name") == "Roll back to the last good configuration")
    assert opening < rollback
    inner = block["rescue"][rollback]["block"]
    assert "ansible.builtin.systemd_service" in inner[0]
    restored = _index(inner, lambda t: (t.get("gpuserve.sglang.sglang_last_good") or {}).get("state") == "restored")
    assert restored > 0
    # the next run, whatever the unit's state: an open restore makes the rescue's path due, first thing in the block
    first = block["block"][0]
    assert "ansible.builtin.fail" in first and first["when"] == "_server_inputs_now.restore_open | default({}) | length > 0"
    mark = next(t for t in _yaml("tasks", "run.yml") if "_server_verify_only" in (t.get("ansible.builtin.set_fact") or {}))
    assert "_server_restore_open" in mark["ansible.builtin.set_fact"]["_server_restart_pending"]
    assert "not _server_restore_open" in mark["ansible.builtin.set_fact"]["_server_verify_only"]
    assert "_server_restore_open" in mark["when"]
    assert "restore_open" in mark["vars"]["_server_restore_open"]
