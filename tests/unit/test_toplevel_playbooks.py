# SPDX-License-Identifier: GPL-3.0-or-later
"""The design card's command works from the repository root: ``ansible-playbook -i inventory/production deploy.yml``.

deploy.yml, plan.yml, restart.yml and verify.yml at the root import playbooks/<name>.yml: same plays, same tasks.
"""
import os
import subprocess

import pytest

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
