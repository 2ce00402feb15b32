# SPDX-License-Identifier: GPL-3.0-or-later
"""install role: the host directory of the patch files is named once (vars/main.yml) and every task that copies,
applies or records a patch uses that name."""
from __future__ import annotations

import glob
import os

import yaml

from conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "install")


def test_patch_dir_named_once():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        assert yaml.safe_load(handle)["_install_patch_dir"] == "{{ sglang_venv | dirname }}/patches"
    uses = 0
    for path in glob.glob(os.path.join(ROLE, "tasks", "*.yml")):
        with open(path) as handle:
            text = handle.read()
        assert "dirname }}/patches" not in text, path
        uses += text.count("{{ _install_patch_dir }}")
    assert uses == 6  # create the directory, copy, reverse dry-run, forward dry-run (-F0), apply, record


def test_the_install_record_names_the_lock_not_its_controller_path():
    """The server reads the install record: a record that names the lock by its path on the controller is
    rewritten by a run from another checkout or controller, and the server restarts for nothing (found by
    benchmarks/noop_deploy: a no-op deploy from a second checkout restarted the demo server)."""
    import jinja2
    with open(os.path.join(ROLE, "tasks", "record.yml")) as handle:
        task = next(t for t in yaml.safe_load(handle) if t["name"] == "Write the install record")
    expr = task["vars"]["_install_record"]["lock"]
    env = jinja2.Environment()
    env.filters["bool"] = bool
    env.filters["basename"] = os.path.basename

    lock_from = env.from_string(task["vars"]["_install_lock_from"])   # the task's var the expression reads

    def render(**variables):
        variables["_install_lock_from"] = lock_from.render(**variables)
        return env.from_string(expr).render(sglang_pip_require_hashes=True, **variables).strip()

    here = render(sglang_pip_lock="", _install_lock_file="/home/a/src/roles/install/files/locks/sglang-0.5.9.txt")
    there = render(sglang_pip_lock="", _install_lock_file="/srv/awx/project/roles/install/files/locks/sglang-0.5.9.txt")
    assert here == there == "gpuserve.sglang:locks/sglang-0.5.9.txt"
    assert render(sglang_pip_lock="/etc/ops/lock.txt", _install_lock_file="/etc/ops/lock.txt") == "lock.txt"
