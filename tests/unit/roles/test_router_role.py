# SPDX-License-Identifier: GPL-3.0-or-later
"""The router role's structure and unit: argument_specs == defaults, phases with tags, the unit from data
(flags, sandboxing, the API key only as ${SGLANG_ROUTER_API_KEY}), secrets under no_log, and the fleet filters."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter import router_role, sglang_router, systemd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "router")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


DEFAULTS = _yaml("defaults", "main.yml")


def test_router_key_is_no_log_and_defaults_are_the_documented_ones():
    # defaults == argument_specs for every role: tests/unit/roles/test_role_defaults.py
    options = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["sglang_router_api_key"].get("no_log") is True
    assert DEFAULTS["sglang_router_policy"] == "cache_aware"
    # the release is the gateway's pin (roles/router/vars/main.yml, tests/unit/roles/test_router_gateways.py)
    assert DEFAULTS["sglang_router_gateway"] == "sglang-router" and DEFAULTS["sglang_router_version"] == ""


def test_phases_and_tags():
    top = _yaml("tasks", "main.yml")
    # the phases that change the host run inside the block that holds the host lease (lease.yml first)
    main = top[:1] + [t for t in top[1]["block"] if t["name"] in ("Install", "Configure and run")]
    # static imports: a phase costs no task of its own at run time (issue 20); its tags reach every task of it
    files = [t["ansible.builtin.import_tasks"] for t in main]
    assert files == ["preflight.yml", "install.yml", "run.yml"]
    assert [t["tags"] for t in main] == [["router_preflight"], ["router_install"], ["router_configure", "router_run"]]


def test_configure_and_run_is_one_module_call_with_no_restart_fact():
    """Issue 39: configure and run are ONE call of gpuserve.sglang.sglang_router_service (the server's mechanism);
    no handler, no fact that outlives the role (a second inclusion in one play restarted an unchanged router when
    a handler's fact did): whether a restart is due is the module's plan, read from the host each call."""
    assert not os.path.exists(os.path.join(ROLE, "handlers"))
    run = _yaml("tasks", "run.yml")
    assert [next(k for k in t if "." in k) for t in run] == [
        "gpuserve.sglang.sglang_router_service", "ansible.builtin.set_fact"]
    for name in os.listdir(os.path.join(ROLE, "tasks")):
        with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
            text = handle.read()
        assert "_router_restart_pending" not in text and "_router_backup_dir" not in text, name


ROUTER_IN = {
    "release": "sglang-router-0.3.2", "venv": "/opt/sglang-router/venv", "python": "/opt/sglang-router/venv/bin/python",
    "gateway": json.load(open(os.path.join(ROLE, "files", "gateways", "sglang-router-0.3.2.json"), encoding="utf-8")),
    "workers": ["http://w1:30000", "http://w2:30000"], "env": "/etc/sglang-router/sglang-router.env",
    "flags": {"host": "0.0.0.0", "port": 30000, "policy": "cache_aware",
              "worker-urls": ["http://w1:30000", "http://w2:30000"], "prometheus-port": 29000},
}


def _render_unit(**over):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    env.filters["hash"] = lambda text, kind: hashlib.new(kind, text.encode()).hexdigest()
    env.globals["lookup"] = lambda plugin, path: open(path, encoding="utf-8").read()
    for name, func in systemd.FilterModule().filters().items():
        env.filters["gpuserve.sglang." + name] = func
    variables = dict(DEFAULTS)
    variables.update({
        "ansible_managed": "Ansible managed", "role_path": ROLE, "_router_in": dict(ROUTER_IN),
    })
    variables.update(over)
    return env.get_template("sglang-router.service.j2").render(**variables)


def _settings(text):
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_unit_from_data_with_sandboxing():
    s = _settings(_render_unit())
    assert s["ExecStart"] == ["/opt/sglang-router/venv/bin/python /usr/local/lib/gpuserve-sglang/sglang_router_launch.py --host 0.0.0.0 "
                              "--port 30000 --policy cache_aware --worker-urls http://w1:30000 http://w2:30000 "
                              "--prometheus-port 29000"]
    assert s["User"] == ["sglang-router"] and s["EnvironmentFile"] == ["/etc/sglang-router/sglang-router.env"]
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateDevices", "yes"),
                       ("ProtectHome", "yes"), ("CapabilityBoundingSet", ""), ("RestrictSUIDSGID", "yes")]:
        assert s[key] == [value], key
    assert "DeviceAllow" not in s            # no GPU devices for the router


def test_api_key_only_through_the_environment_file_never_on_the_command_line():
    """issue 23: ``--api-key ${SGLANG_ROUTER_API_KEY}`` in ExecStart put the key into /proc/<pid>/cmdline (every
    local user reads it); the launcher hands it over inside the process. The unit names the launcher's sha256, so
    a changed launcher restarts the router."""
    text = _render_unit(sglang_router_api_key="s3cret-router-key")
    assert "s3cret-router-key" not in text
    assert "--api-key" not in _settings(text)["ExecStart"][0] and "${SGLANG_ROUTER_API_KEY}" not in text
    assert text == _render_unit()   # the unit does not depend on the key; the environment file holds it
    with open(os.path.join(ROLE, "files", "sglang_router_launch.py"), "rb") as handle:
        assert "Launcher sha256:\n# %s\nExecStart=" % hashlib.sha256(handle.read()).hexdigest() in text


LAUNCHER = os.path.join(ROLE, "files", "sglang_router_launch.py")
FAKE_ROUTER = """
import json, os, sys
with open('/proc/self/cmdline', 'rb') as handle:
    cmdline = handle.read().split(b'\\0')
print(json.dumps({'argv': sys.argv[1:], 'cmdline': [c.decode() for c in cmdline if c],
                  'env_key': os.environ.get('SGLANG_ROUTER_API_KEY'), 'name': __name__}))
"""


def _launch(tmp_path, args, key=None):
    (tmp_path / "fake_router.py").write_text(FAKE_ROUTER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), SGLANG_ROUTER_MODULE="fake_router")
    env.pop("SGLANG_ROUTER_API_KEY", None)
    if key is not None:
        env["SGLANG_ROUTER_API_KEY"] = key
    return subprocess.run([sys.executable, LAUNCHER] + args, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_launcher_hands_the_key_over_inside_the_process(tmp_path):
    proc = _launch(tmp_path, ["--host", "0.0.0.0", "--port", "30000"], key="sk-router-42")
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["name"] == "__main__"                      # run as python -m sglang_router.launch_router would
    assert seen["argv"] == ["--host", "0.0.0.0", "--port", "30000", "--api-key", "sk-router-42"]
    assert not any("sk-router-42" in part for part in seen["cmdline"])   # what every local user can read
    assert seen["env_key"] is None                          # not passed on to what the router starts
    proc = _launch(tmp_path, ["--port", "30000"])
    assert json.loads(proc.stdout)["argv"] == ["--port", "30000"]


def test_the_launcher_refuses_a_key_on_its_command_line(tmp_path):
    for args in (["--api-key", "visible"], ["--api-key=visible"]):
        proc = _launch(tmp_path, args)
        assert proc.returncode == 2 and "--api-key on the command line is refused" in proc.stderr


def test_secrets_never_logged():
    """The key reaches the host only in options the module never logs (the environment file's text, api_key)."""
    with open(os.path.join(ROOT, "plugins", "modules", "sglang_router_service.py"), encoding="utf-8") as handle:
        text = handle.read()
    assert 'content=dict(type="str", no_log=True)' in text
    assert 'api_key=dict(type="str", default="", no_log=True)' in text
    call = _yaml("tasks", "run.yml")[0]["gpuserve.sglang.sglang_router_service"]
    body = yaml.safe_dump(dict((k, v) for k, v in call.items() if k not in ("env", "api_key")))
    assert "sglang_router_api_key" not in body


def _inputs(**settings):
    base = dict((key[len("sglang_router_"):], value) for key, value in DEFAULTS.items())
    base.update(worker_urls=["http://w1:30000"], **settings)
    vars_ = _yaml("vars", "main.yml")
    return router_role.sglang_router_inputs(base, {}, {}, ROLE, vars_["_router_managed_flags"],
                                            vars_["_router_gateway_pins"])


def test_preflight_refuses_managed_flags_in_extra_args():
    managed = _yaml("vars", "main.yml")["_router_managed_flags"]
    assert {"worker-urls", "api-key", "port", "policy"} <= set(managed)
    # the extra flags' refusals are one Python function (managed, unknown, secrets: test_sglang_router_extra_args),
    # run by the preflight's one task over the role's managed flags (plugin_utils/_router_role.role_inputs)
    preflight = _yaml("tasks", "preflight.yml")
    assert [t["gpuserve.sglang.sglang_router_service"] for t in preflight] == [{"router_inputs": True}]
    assert _inputs()["problems"] == []
    assert any("may not set flags the role manages: port" in p for p in _inputs(extra_args={"port": 1})["problems"])


class _HV(dict):
    pass


def test_worker_and_router_urls_from_inventory():
    hv = _HV({"w1": {"sglang_host": "0.0.0.0"}, "w2": {"sglang_port": 31000, "sglang_router_worker_address": "10.0.0.2"},
              "w3": {"sglang_router_worker_address": "fd00::3"}, "gw": {"sglang_router_port": 8080}})
    assert sglang_router.sglang_worker_urls(["w1", "w2", "w3"], hv) == [
        "http://w1:30000", "http://10.0.0.2:31000", "http://[fd00::3]:30000"]
    assert sglang_router.sglang_router_urls(["gw", "w1"], hv) == ["http://gw:8080", "http://w1:30000"]
    assert sglang_router.sglang_worker_loopback(["w1", "w2", "w3"], hv) == ["w2", "w3"]
    with pytest.raises(AnsibleFilterError, match="not a port number"):
        sglang_router.sglang_worker_urls(["x"], _HV({"x": {"sglang_port": "http"}}))


def test_a_batch_is_drained_under_the_routers_lease_and_restart_yml_gives_it_back():
    """Issue 22: two rollouts at once could each drain a worker of a two-worker router past the last healthy one,
    and a router restart mid-drain lists the drained worker again. drain.yml takes the lease on every router of
    the group before the drain module runs; restart.yml gives it back in the block's always (a failed or stopped
    batch too); the id is the run's own, made by the module's action plugin (no id given), the same on every host
    (the host that gives it back need not be the one that took it; issue 39: never rollout-<hostname>-<pid>, the
    same for every run where the pid is empty)."""
    drain = _yaml("tasks", "drain.yml")
    names = [t["name"] for t in drain]
    lease_at = next(i for i, t in enumerate(drain) if t.get("ansible.builtin.include_tasks") == "rollout_lease.yml")
    drain_at = next(i for i, t in enumerate(drain) if "gpuserve.sglang.sglang_router_workers" in t)
    assert lease_at < drain_at, names
    assert drain[lease_at]["vars"] == {"_router_rollout_lease_state": "acquired"}

    lease = _yaml("tasks", "rollout_lease.yml")
    modules = [t for t in lease if "gpuserve.sglang.sglang_lease" in t]
    assert all("id" not in t["gpuserve.sglang.sglang_lease"] for t in modules)
    assert all(t["run_once"] and t["delegate_to"] for t in modules)
    assert [t["gpuserve.sglang.sglang_lease"]["unit"] for t in modules] == [
        "{{ hostvars[item].sglang_router_service_name | default(sglang_router_service_name) }}.service",
        "{{ hostvars[item.item].sglang_router_service_name | default(sglang_router_service_name) }}.service"]
    assert "ansible.builtin.fail" in lease[-1]
    # issue 47 defect 10: a fixed 7,200 s TTL; now it covers the batch's restart and its rollback restart
    assert all(t["gpuserve.sglang.sglang_lease"]["restart_timeout"] == "{{ sglang_restart_timeout | default(1800) }}"
               for t in modules)

    with open(os.path.join(ROOT, "playbooks", "restart.yml"), encoding="utf-8") as handle:
        play = yaml.safe_load(handle)[0]
    outer = play["tasks"][-1]                      # the lease block (the batch check of issue 25 before it)
    released = [t for t in outer["always"] if t.get("ansible.builtin.include_role", {}).get("tasks_from") == "rollout_lease"]
    assert len(released) == 1 and released[0]["vars"] == {"_router_rollout_lease_state": "released"}
    assert "_router_rollout_lease_tried | default(false) | bool" in released[0]["when"]


def test_systemd_never_kills_the_gateway_before_its_own_drain():
    """Issue 41: the gateway waits --shutdown-grace-period-secs for its requests on SIGTERM (both pinned releases,
    default 180 s); the unit's TimeoutStopSec was 30, so systemd's SIGKILL cut that drain short. The role manages
    the flag and the unit stops 15 s after it."""
    assert _settings(_render_unit())["TimeoutStopSec"] == [str(DEFAULTS["sglang_router_shutdown_grace_period_secs"] + 15)]
    assert _settings(_render_unit(sglang_router_shutdown_grace_period_secs=300))["TimeoutStopSec"] == ["315"]
    assert _inputs(shutdown_grace_period_secs="300")["flags"]["shutdown-grace-period-secs"] == 300
