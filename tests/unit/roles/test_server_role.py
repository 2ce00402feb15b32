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

from ansible_collections.gpuserve.sglang.plugins.filter import (
    server_inputs, server_role, sglang_args, sglang_secrets, systemd)
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags

# The server role's filters, by name (split by what they hold: flag rules, systemd quoting, secrets, inputs).
_FILTERS = {}
for _module in (sglang_args, systemd, sglang_secrets, server_inputs, server_role):
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
    # static import: the preflight costs no task of its own at run time (issue 20); its tag reaches every task of it
    assert top[0]["ansible.builtin.import_tasks"] == "preflight.yml" and top[0]["tags"] == ["server_preflight"]
    # the phases that change the host run inside the block that holds the host lease (lease.yml first), and give
    # it back in the block's always, under the same tags
    block = top[1]
    assert block["tags"] == ["server_install", "server_configure", "server_run"]
    assert block["block"][0]["ansible.builtin.import_tasks"] == "lease.yml"
    assert block["block"][0]["vars"] == {"sglang_lease_state": "acquired"}
    give_back = block["always"][0]["ansible.builtin.include_tasks"]
    assert give_back["file"] == "lease.yml" and give_back["apply"]["tags"] == block["tags"]
    steps = {t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.include_tasks"): t for t in block["block"]}
    # configure-and-run is ONE module call on one host (run.yml), its phases with the group's verdicts on several
    assert steps["run.yml"]["when"] == "sglang_server_nodes | length == 0"
    assert steps["group.yml"]["when"] == "sglang_server_nodes | length > 0"
    assert "ansible.builtin.import_tasks" in steps["run.yml"]
    run = _yaml("tasks", "run.yml")
    assert len(run) == 1 and "gpuserve.sglang.sglang_server" in run[0]


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
    # PATH: the resolved interpreter's bin (preflight's host read, _server_host.python), CUDA's bin, nvidia-smi's
    # Ansible's undefined lets `_server_host.python | default(...)` through before the preflight read the host
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters["dirname"] = os.path.dirname
    path = env.from_string(DEFAULTS["sglang_unit_environment"]["PATH"])
    common = {"sglang_cuda_home": "/usr/local/cuda-13.0", "sglang_nvidia_smi_dir": "/opt/nv", "sglang_python": "",
              "sglang_venv": "/opt/sglang/venv"}
    resolved = {"python": "/opt/sglang/versions/sglang-0.5.9-0123456789ab/bin/python"}
    assert path.render(_server_host=resolved, **common) == (
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
        "ansible_managed": "Ansible managed", "hostvars": {},
    })
    cmdline = over.pop("_server_cmdline", f.sglang_cmdline(
        {"model-path": "/models/k", "tp": 8}, prefix=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]))
    # HiCache from the effective flags (the template reads _server_flags.hicache), else SGLang's default: off
    hicache = over.pop("hicache", False)
    variables.update(over)
    # what the template reads (vars/main.yml _server_flags, computed by plugin_utils/_server_flags.py): the ExecStart
    # with SGLang's --config, the secrets file when a key is set, by the role's own expression
    config = _yaml("vars", "main.yml")["_server_in"]["config"]
    variables["_server_flags"] = {"exec_start": _server_flags.exec_start(cmdline, env.from_string(config).render(**variables)),
                                  "hicache": hicache}
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
    # the record is the module's (_record.deploy_record masks every value of secrets_to_mask: test_record.py); the
    # role's seam hands it both keys, and the record its environment and command line, never a key itself
    # (tests/unit/plugins/plugin_utils/test_server_payload.py)


def test_secrets_never_logged():
    """The keys travel only in the options of gpuserve.sglang.sglang_server that its argument spec marks no_log
    (the environment file's and the secrets file's content, api_key, secrets_to_mask); no other task of the role
    names a key, and the effective environment's fact is no_log when a value looks secret."""
    from ansible_collections.gpuserve.sglang.plugins.modules import sglang_server  # pylint: disable=import-outside-toplevel
    spec = {}

    class Stop(Exception):
        pass

    class Module:
        def __init__(self, argument_spec, **kwargs):
            spec.update(argument_spec)
            raise Stop()

    real = sglang_server.QuietModule
    sglang_server.QuietModule = Module
    try:
        with pytest.raises(Stop):
            sglang_server.main()
    finally:
        sglang_server.QuietModule = real
    assert spec["env"]["options"]["content"]["no_log"] is True
    assert spec["secrets"]["options"]["content"]["no_log"] is True
    assert spec["api_key"]["no_log"] is True and spec["secrets_to_mask"]["no_log"] is True
    # the key is in the secrets file's text only (the environment file holds none: a rollback restores that one):
    # the role's seam computes both (test_server_payload.py); the role's task names no key
    assert "api_key" not in yaml.safe_dump(_yaml("tasks", "run.yml"))
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _yaml("tasks", name) or []:
            for inner in [task] + task.get("block", []) + task.get("rescue", []) + task.get("always", []):
                body = yaml.safe_dump({k: v for k, v in inner.items() if k not in ("block", "rescue", "always")})
                if "api_key" in body and "gpuserve.sglang.sglang_server" not in inner:
                    assert inner.get("no_log") is True, "%s: %s" % (name, inner.get("name"))
    # the environment (secret-looking values of sglang_env among it) is a role var, never a fact a task prints:
    # no set_fact holds it (it did in flags.yml, masked by no_log there)
    assert "sglang_env" in _yaml("vars", "main.yml")["_server_env"]
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _yaml("tasks", name) or []:
            assert "_server_env" not in yaml.safe_dump(task.get("ansible.builtin.set_fact") or {}), name


def test_unit_template_timeout_stop_for_hicache_units():
    """HiCache units get the drain plus the time to free the pinned host pool (issue 12; docs/server.md)."""
    assert _settings(_render_unit())["TimeoutStopSec"] == ["60"]
    hicache = _settings(_render_unit(hicache=True))
    assert hicache["TimeoutStopSec"] == ["180"]


# The rollback's order (the failed invocation stopped before any file goes back), the verification of a running
# invocation no run verified inside the rollback's reach, and the restore a killed run left open being finished by
# the next run are the sglang_server module's (module_utils/_server/machine.py): tests/unit/plugins/module_utils/
# test_server_machine.py (test_a_rollback_killed_after_the_stop_is_finished_by_the_next_call_with_the_unit_stopped,
# test_an_unknown_invocation_is_verified_inside_the_rollbacks_reach, test_a_failing_gate_restores_every_file_...)
# and test_server_plan.py (test_an_open_restore_or_transaction_is_finished_first_also_when_stopped).
def test_the_lifecycle_is_the_modules_no_task_of_the_role_stops_restores_or_restarts():
    """No task of the role stops, starts or restarts the server, or copies a file back: a YAML rollback beside the
    module's would run outside its transaction (its restore record, its order)."""
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _yaml("tasks", name) or []:
            for inner in [task] + task.get("block", []) + task.get("rescue", []) + task.get("always", []):
                assert "gpuserve.sglang.sglang_last_good" not in inner, (name, inner.get("name"))
                assert "gpuserve.sglang.sglang_service" not in inner, (name, inner.get("name"))
                service = inner.get("ansible.builtin.systemd_service") or {}
                assert not service or "textfile" in service.get("name", ""), (name, inner.get("name"))


def test_every_read_of_a_file_that_can_hold_the_key_is_no_log():
    """A slurp of the process environment, the environment file or the secrets file puts its base64 in the
    output at -v (and in AWX job events): SGLANG_API_KEY decoded from it (issue 22). Every such read is no_log;
    the record's read of the running process's environment is the module's now (_record, masked: test_record.py)."""
    secret_sources = ("/environ", "sglang_env_file", "sglang_secrets_file")
    for name in sorted(os.listdir(os.path.join(ROLE, "tasks"))):
        for task in _yaml("tasks", name) or []:
            for inner in [task] + task.get("block", []) + task.get("rescue", []) + task.get("always", []):
                for read in ("ansible.builtin.slurp", "ansible.builtin.command", "ansible.builtin.shell"):
                    body = str(inner.get(read) or "")
                    if any(source in body for source in secret_sources):
                        assert inner.get("no_log") is True, "%s: %s" % (name, inner["name"])


# ---- a group moves as one; an interrupted rollback is finished (issue 39) ------------------------------------------
def _names(tasks):
    return [t.get("name") for t in tasks]


def _index(tasks, predicate):
    return next(i for i, t in enumerate(tasks) if predicate(t))


def test_a_node_missing_from_the_play_stops_the_group_before_any_node_stops():
    """Defect 3. Old code: nothing between the preflight and the restart looked at the other nodes: a node that
    dropped out after its preflight (lease held, configure failed, UNREACHABLE) left node 0 to restart alone.
    Now every node prepares (lands its files, stops nothing), and the restart phase's action plugin takes the
    group's verdict over ansible_play_batch before any node restarts (plugins/plugin_utils/_server_group.py; its
    rules and the refusal without a module run: tests/unit/plugins/plugin_utils/test_server_group.py). Issue 47:
    no assert and no filter in the YAML, the phases are four imports of run.yml."""
    block = _yaml("tasks", "group.yml")[0]
    steps = block["block"]
    assert [t.get("vars", {}).get("_server_phase") for t in steps] == ["prepare", "restart", "decide", "commit"]
    assert all(t.get("ansible.builtin.import_tasks") == "run.yml" for t in steps)
    # a node is "ready" only in this run: its preflight empties the result the verdicts read
    reset = _yaml("tasks", "nodes.yml")[0]["ansible.builtin.set_fact"]
    assert reset["sglang_server"] == {}
    assert _yaml("tasks", "run.yml")[0]["register"] == "sglang_server"
    # a restart due on one node is due on all (a node restarted alone cannot join the others' ranks): the action
    # plugin sets force_restart, group and decision from the group's verdict; the role passes none of them
    module = _yaml("tasks", "run.yml")[0]["gpuserve.sglang.sglang_server"]
    assert not set(module) & {"force_restart", "group", "decision"}
    assert "_server_verdict" not in _yaml("vars", "main.yml")
    assert module["phase"] == "{{ _server_phase | default('converge') | replace('due', 'converge') }}"


def test_the_gates_run_before_the_groups_verdict_and_no_node_keeps_before_it():
    """Defect 4. Old code: the gates ran after the all-nodes check, on node 0 only: a gate failure rolled back
    node 0 alone while nodes 1..N went on to keep the new configuration as their last good set. Now node 0 runs the
    gates inside its restart step, and the verdict "keep" over every node's restart (taken by the decide phase's
    action plugin) comes before any node commits; a no (or any failure in the block) restores every node."""
    block = _yaml("tasks", "group.yml")[0]
    steps = block["block"]
    restart, decide, commit = steps[1], steps[2], steps[3]
    assert restart["vars"]["_server_phase"] == "restart" and commit["vars"]["_server_phase"] == "commit"
    assert decide["vars"]["_server_phase"] == "decide"
    assert not [t for t in steps if "ansible.builtin.assert" in t]
    module = _yaml("tasks", "run.yml")[0]["gpuserve.sglang.sglang_server"]
    # node 0 alone runs the gates (the seam's gates_here: test_server_payload.py)
    rescue = block["rescue"]
    # the rescue carries out the group's ONE decision (module_utils/_server/group.py): keep or restore, every node
    assert rescue[0]["ansible.builtin.import_tasks"] == "run.yml" and rescue[0]["vars"]["_server_phase"] == "finish"
    assert "ansible.builtin.fail" in rescue[1] and "ansible_failed_result.msg" in rescue[1]["ansible.builtin.fail"]["msg"]
    # the restore is told why (the verdict's reason reaches the module's result and the record)
    assert module["reason"] == "{{ ansible_failed_result.msg | default('') }}"


def test_one_rollback_no_module_keeps_restores_or_records_beside_the_lifecycle():
    """Issue 39: one rollback. The modules sglang_last_good (keep, restore) and sglang_record (the deployment
    record) let a playbook keep, restore or record the server's set outside the state machine's transaction;
    they are gone. Only the lifecycle's two modules import the last-good set's and the record's owners."""
    modules = os.path.join(ROOT, "plugins", "modules")
    users = set()
    for name in sorted(n for n in os.listdir(modules) if n.endswith(".py")):
        with open(os.path.join(modules, name), encoding="utf-8") as handle:
            text = handle.read()
        # the state machine (module_utils/_server), the last-good set and the record, imported in any form
        if re.search(r"module_utils(\.\w+)* import [^\n]*\b(_last_good|_record|_server)\b", text) or \
                re.search(r"module_utils\.(_last_good|_record|_server)[.\w]* import", text):
            users.add(name)
    assert users == {"sglang_server.py", "sglang_router_service.py"}
    assert not os.path.exists(os.path.join(modules, "sglang_last_good.py"))
    assert not os.path.exists(os.path.join(modules, "sglang_record.py"))
