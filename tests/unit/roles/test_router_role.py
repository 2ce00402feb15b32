# SPDX-License-Identifier: GPL-3.0-or-later
"""The router role's structure and unit: argument_specs == defaults, phases with tags, the unit from data
(flags, sandboxing, the API key only as ${SGLANG_ROUTER_API_KEY}), secrets under no_log, and the fleet filters."""
from __future__ import annotations

import os

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_router, systemd

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
    assert DEFAULTS["sglang_router_version"] == "0.3.2"


def test_phases_and_tags():
    top = _yaml("tasks", "main.yml")
    # the phases that change the host run inside the block that holds the host lease (lease.yml first)
    main = top[:1] + [t for t in top[1]["block"] if t["name"] in ("Install", "Configure", "Run")]
    files = [t["ansible.builtin.include_tasks"]["file"] for t in main]
    assert files == ["preflight.yml", "install.yml", "configure.yml", "run.yml"]
    for task, phase in zip(main, ["preflight", "install", "configure", "run"]):
        assert task["tags"] == ["router_" + phase]


def _render_unit(**over):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    for name, func in systemd.FilterModule().filters().items():
        env.filters["gpuserve.sglang." + name] = func
    variables = dict(DEFAULTS)
    variables.update({
        "ansible_managed": "Ansible managed",
        "_router_worker_urls": ["http://w1:30000", "http://w2:30000"],
        "_router_env_file": "/etc/sglang-router/sglang-router.env",
        "_router_flags": {"host": "0.0.0.0", "port": 30000, "policy": "cache_aware",
                          "worker-urls": ["http://w1:30000", "http://w2:30000"], "prometheus-port": 29000},
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
    assert s["ExecStart"] == ["/opt/sglang-router/venv/bin/python -m sglang_router.launch_router --host 0.0.0.0 "
                              "--port 30000 --policy cache_aware --worker-urls http://w1:30000 http://w2:30000 "
                              "--prometheus-port 29000"]
    assert s["User"] == ["sglang-router"] and s["EnvironmentFile"] == ["/etc/sglang-router/sglang-router.env"]
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateDevices", "yes"),
                       ("ProtectHome", "yes"), ("CapabilityBoundingSet", ""), ("RestrictSUIDSGID", "yes")]:
        assert s[key] == [value], key
    assert "DeviceAllow" not in s            # no GPU devices for the router


def test_api_key_only_through_the_environment_file():
    text = _render_unit(sglang_router_api_key="s3cret-router-key")
    assert "s3cret-router-key" not in text
    assert _settings(text)["ExecStart"][0].endswith(" --api-key ${SGLANG_ROUTER_API_KEY}")
    assert "--api-key" not in _render_unit()


def test_secrets_never_logged():
    tasks = _yaml("tasks", "configure.yml")
    for task in tasks:
        body = yaml.safe_dump(task)
        if "_router_env_content" in body and ("copy" in body or "set_fact" in body):
            assert task.get("no_log") is True, task["name"]


def test_preflight_refuses_managed_flags_in_extra_args():
    managed = _yaml("vars", "main.yml")["_router_managed_flags"]
    assert {"worker-urls", "api-key", "port", "policy"} <= set(managed)
    text = open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8").read()
    assert "sglang_router_extra_args.keys() | intersect(_router_managed_flags)" in text


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
