# SPDX-License-Identifier: GPL-3.0-or-later
"""install role: its tasks are a table of contents (the refusals, the lease, ONE call of sglang_install), and the
module's action plugin reads the controller's files - the shipped lock of the version, the list of shipped locks,
a bare patch name as one of the role's files/patches/, a missing patch file - so the refusals reach the play with
the role's messages (run here through ansible-playbook, connection local, in check mode: nothing is installed)."""
from __future__ import annotations

import os

import pytest
import yaml

from conftest import ROOT, run_play_batch

ROLE = os.path.join(ROOT, "roles", "install")
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: The role's preflight call
      gpuserve.sglang.sglang_install:
        state: checked
        version: "{{ sglang_version | default('0.5.9') }}"
        install_deps: false
        venv: /opt/sglang/venv
        patches: "{{ sglang_patches | default([]) }}"
        files_dir: "%s/files"
        shipped_patches: {sglang-0.5.9-kimi-k25-eagle3.patch: 6f6fcc932215c657018548d092a7917b34faf3f718835661d48014070e87c6b7}
        host_name: "{{ inventory_hostname }}"
    - ansible.builtin.debug:
        msg: PASSED
""" % ROLE


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_play_batch(tmp_path_factory.mktemp("install-role"), PLAY, {
        "shipped": {},
        "shipped patch": {"sglang_patches": ["sglang-0.5.9-kimi-k25-eagle3.patch"]},
        "missing patch": {"sglang_patches": ["/nonexistent/fix.patch"]},
        "0.5.9 patch on 0.5.23": {"sglang_version": "0.5.23", "sglang_patches": ["sglang-0.5.9-kimi-k25-eagle3.patch"]},
        "no lock": {"sglang_version": "0.5.8"},
    })


@pytest.mark.parametrize("case", ["shipped", "shipped patch"])
def test_the_shipped_lock_and_patch_pass(results, case):
    rc, out = results[case]
    assert rc == 0 and "PASSED" in out, out[-3000:]


@pytest.mark.parametrize("case, words", [
    ("missing patch", "Patch file /nonexistent/fix.patch does not exist on the controller"),
    ("0.5.9 patch on 0.5.23", "The shipped patch sglang-0.5.9-kimi-k25-eagle3.patch is for another SGLang release"),
    ("no lock", "this role ships locks for sglang 0.5.17, 0.5.23, 0.5.9, the supported releases"),
])
def test_refusals_reach_the_play_with_the_role_s_words(results, case, words):
    rc, out = results[case]
    assert rc == 1 and "PASSED" not in out and words in " ".join(out.split())


def test_the_role_is_a_table_of_contents():
    """A no-op run of the role under a playbook's lease is three task results (and the argument check): the
    preflight call, the include of install.yml (leased.yml when this run holds no lease), the install call (which
    installs patch(1) itself where patches are to be applied and the host has none). The preflight call (also the
    entry point tasks_from: preflight) passes the same inputs."""
    def load(name):
        with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    tasks = load("main.yml")
    assert tasks[0]["ansible.builtin.import_tasks"] == "preflight.yml"
    assert tasks[1]["ansible.builtin.include_tasks"]["file"] == \
        "{{ 'install.yml' if sglang_lease.holds | default(false) else 'leased.yml' }}"
    assert [t.get("ansible.builtin.import_tasks") for t in load("leased.yml")[0]["block"]] == [None, "install.yml"]
    flat = load("preflight.yml") + tasks[1:] + load("install.yml")
    assert len(flat) == 3
    calls = [t["gpuserve.sglang.sglang_install"] for t in flat if "gpuserve.sglang.sglang_install" in t]
    assert len(calls) == 2 and calls[0].pop("state") == "checked" and calls[0] == calls[1]
    assert sorted(os.listdir(os.path.join(ROLE, "tasks"))) == ["install.yml", "lease.yml", "leased.yml", "main.yml",
                                                               "preflight.yml"]
