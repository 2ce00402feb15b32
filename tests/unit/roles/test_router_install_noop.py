# SPDX-License-Identifier: GPL-3.0-or-later
"""The router role's install runs pip only where the venv misses a requirement of the gateway's hash lock at its
pinned version: the venv's read (tasks/installed.yml, run here for real against a venv of this machine) names the
unmet ones, and the pip task, the read after it and the version check run only for one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from conftest import ROOT, run_play

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _router_role

VENV = os.path.dirname(os.path.dirname(sys.executable))


def _version(name):
    return subprocess.run([sys.executable, "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
                           name], capture_output=True, text=True, check=True).stdout.strip()


def test_the_venvs_read_names_the_locks_requirements_it_does_not_hold_at_their_pin(tmp_path):
    pins = {"Jinja2": _version("jinja2"), "requests": "0.0.1", "no-such-package-gpuserve": "1.0"}
    router_in = {"venv": VENV, "gateways": ["sglang-router", "smg"], "pins": pins}
    out_file = tmp_path / "read.json"
    play = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The read
      ansible.builtin.import_tasks: %s/roles/router/tasks/installed.yml
    - name: Keep it
      ansible.builtin.copy:
        content: "{{ _router_installed.stdout }}"
        dest: %s
        mode: "0644"
""" % (ROOT, out_file)
    rc, out = run_play(tmp_path, play, ["@" + _vars(tmp_path, router_in)])
    assert rc == 0, out
    read = json.loads(out_file.read_text())
    assert read["unmet"] == ["no-such-package-gpuserve", "requests"]
    assert read["found"] == {"sglang-router": None, "smg": None} and read["others"] == []


def _vars(tmp_path, router_in):
    path = tmp_path / "vars.json"
    path.write_text(json.dumps({"_router_in": router_in, "sglang_router_gateway": "sglang-router"}))
    return str(path)


def test_pip_and_the_check_after_it_run_only_for_an_unmet_requirement():
    with open(os.path.join(ROOT, "roles", "router", "tasks", "install.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    pip = next(t for t in tasks if "ansible.builtin.pip" in t)
    assert pip["register"] == "_router_pip" and ".unmet" in pip["when"]
    after = [t for t in tasks if t["name"] in ("Read the installed gateway's version again",
                                               "The installed version is the pinned one")]
    assert len(after) == 2 and all("_router_pip is not skipped" in t["when"] for t in after)


def test_the_pins_are_every_requirement_of_the_gateways_lock():
    locks = os.path.join(ROOT, "roles", "router", "files", "locks")
    for name in os.listdir(locks):
        pins = _router_role.lock_pins(os.path.join(locks, name))
        gateway, version = name[:-len(".txt")].rsplit("-", 1)
        assert pins[gateway] == version, name
        with open(os.path.join(locks, name), encoding="utf-8") as handle:
            lines = [line for line in handle if "==" in line and not line.startswith("#")]
        assert len(pins) == len(lines) > 1, name
