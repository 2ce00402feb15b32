# SPDX-License-Identifier: GPL-3.0-or-later
"""The design card's command works from the repository root: ``ansible-playbook -i inventory/production deploy.yml``.

deploy.yml, plan.yml, restart.yml and verify.yml at the root import playbooks/<name>.yml: same plays, same tasks.
"""
import os
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
INVENTORY = os.path.join("inventory", "production.example")


def playbook(*args):
    if not os.path.exists(PLAYBOOK):
        pytest.skip("ansible-playbook is not in .venv (make venv)")
    proc = subprocess.run([PLAYBOOK, "-i", INVENTORY] + list(args), cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def tasks(text):
    """The task lines of --list-tasks (the header names the playbook file, which differs)."""
    return [line.strip() for line in text.splitlines() if line.startswith("    ")]


@pytest.mark.parametrize("name", ["deploy", "plan", "restart", "verify"])
def test_root_playbook_is_the_collections(name):
    assert "playbook: %s.yml" % name in playbook("%s.yml" % name, "--syntax-check")
    root = tasks(playbook("%s.yml" % name, "--list-tasks"))
    inner = tasks(playbook(os.path.join("playbooks", "%s.yml" % name), "--list-tasks"))
    assert root and root == inner


def test_fqcn_form_works_from_the_root():
    out = playbook("gpuserve.sglang.deploy", "--syntax-check")
    assert os.path.join("gpuserve", "sglang", "playbooks", "deploy.yml") in out


# Modules that only read (or print); any other module in verify.yml must run in check mode.
READ_ONLY = {"ansible.builtin.debug", "ansible.builtin.assert", "ansible.builtin.set_fact", "ansible.builtin.uri",
             "ansible.builtin.slurp", "ansible.builtin.stat", "ansible.builtin.import_playbook"}


def test_verify_writes_nothing():
    """Issue 39 defect 9: verify.yml is documented read-only, but its sglang_service task ran with check_mode:
    false, so the first verify of an invocation wrote the verified-start state file (/var/lib/gpuserve-sglang),
    outside the host lease. Every task that is not a read-only module runs in check mode; systemd_service only
    reads the unit (no state, enabled, masked or daemon_reload)."""
    for path in ("verify.yml", os.path.join("playbooks", "verify.yml")):
        with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
            plays = yaml.safe_load(handle)
        for play in plays:
            for task in play.get("tasks", []):
                module = next(key for key in task if "." in key)
                if module == "ansible.builtin.systemd_service":
                    assert not set(task[module]) & {"state", "enabled", "masked", "daemon_reload", "daemon_reexec"}
                elif module not in READ_ONLY:
                    assert task.get("check_mode") is True, "%s: %s writes (check_mode: %s)" % (
                        path, task.get("name"), task.get("check_mode"))
    with open(os.path.join(ROOT, "playbooks", "verify.yml"), encoding="utf-8") as handle:
        assert "gpuserve.sglang.sglang_service" in handle.read()
