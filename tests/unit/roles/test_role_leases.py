# SPDX-License-Identifier: GPL-3.0-or-later
"""The install, nccl_tuning and cuda roles change what the server's processes read (the venv, nccl.env,
sitecustomize.py, the CUDA toolkit): they take the host lease on the server unit after their read-only preflight,
as the server role does, and give it back only when they took it; inside a playbook that holds it (deploy.yml,
restart.yml) they join it and leave it to the playbook (issue 39 defect 7). The install role runs on this machine
(conftest.run_play_batch, connection local) with its paths in a temporary directory and a stand-in base interpreter
that passes the preflight and then fails to make the venv: far enough to show whether the role got past the lease."""
from __future__ import annotations

import json
import os

import pytest
import yaml

from conftest import ROOT, run_play_batch

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease

ROLES = {"install": "_install", "nccl_tuning": "_nccl_tuning", "cuda": "_cuda"}
UNIT = "sglang-kimi.service"
HOLDS = "sglang_lease.holds | default(false)"


def _tasks(role, name):
    with open(os.path.join(ROOT, "roles", role, "tasks", name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _file_of(task):
    for key in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"):
        if key in task:
            value = task[key]
            return value["file"] if isinstance(value, dict) else value
    return None


# the phases' file each role includes inside a run's lease, or from leased.yml under its own
PHASES = {"install": "install.yml", "nccl_tuning": "tuning.yml", "cuda": "toolkit.yml"}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_role_changes_the_host_only_under_the_lease_and_gives_back_only_what_it_took(role):
    """Old code: main.yml was the phases one after the other, no lease anywhere. Now main.yml ends in ONE include:
    the phases inside a lease this run holds (a playbook's: joined, nothing to give back), else leased.yml, which
    takes the lease, runs the same phases and gives it back however they end (a no-op deploy spends one task on
    the lease per role, not two skipped ones)."""
    prefix = ROLES[role]
    tasks = _tasks(role, "main.yml")
    # a read-only first step (the preflight, or the inputs alone where the module's preflight runs under the lease:
    # cuda), or none: the role's module reads and refuses first (nccl_tuning)
    assert [_file_of(task) for task in tasks[:-1]] in ([], ["preflight.yml"], ["inputs.yml"]), \
        "%s: preflight, then the one include" % role
    switch = tasks[-1]["ansible.builtin.include_tasks"]
    assert switch["file"] == "{{ '%s' if %s else 'leased.yml' }}" % (PHASES[role], HOLDS), role
    # the included tasks run whenever the include does (its own tags pick it; the module picks its phases by tag)
    assert switch["apply"] == {"tags": ["always"]}
    block = _tasks(role, "leased.yml")
    assert len(block) == 1
    take, phases = block[0]["block"][0], block[0]["block"][1:]
    assert _file_of(take) == "lease.yml" and take["vars"] == {prefix + "_lease_state": "acquired"}
    assert [_file_of(task) for task in phases] == [PHASES[role]]
    [give] = block[0]["always"]
    assert _file_of(give) == "lease.yml" and give["vars"] == {prefix + "_lease_state": "released"}
    assert give["when"] == prefix + "_lease_taken | default(false) | bool"
    lease = _tasks(role, "lease.yml")
    assert len(lease) == 2
    assert lease[0]["ansible.builtin.include_role"]["name"] == "gpuserve.sglang.server"
    assert lease[0]["ansible.builtin.include_role"]["tasks_from"] == "lease"
    assert lease[0]["vars"] == {"sglang_lease_state": "{{ %s_lease_state }}" % prefix}
    assert lease[1]["ansible.builtin.set_fact"] == {prefix + "_lease_taken": "{{ sglang_lease.taken }}"}


PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: A playbook's lease, taken first (as deploy.yml does)
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: lease
      when: playbook_takes | bool

    - name: The install role
      block:
        - name: The install role
          ansible.builtin.include_role:
            name: gpuserve.sglang.install
      rescue:
        - name: Say how it ended
          ansible.builtin.debug:
            msg: "ROLE FAILED: {{ ansible_failed_result.msg | default('') }}"

    - name: Say this run's lease id
      ansible.builtin.debug:
        msg: "LEASE ID {{ sglang_lease.lease.id | default('') }}"
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("role-leases")
    fake = tmp / "python3.12"
    fake.write_text("#!/bin/sh\necho 3.12.3\n")
    fake.chmod(0o755)
    cases = {}
    for case in ("held by another run", "alone", "inside a playbook's lease"):
        where = tmp / case.replace(" ", "-").replace("'", "")
        cases[case] = {"sglang_version": "0.5.23", "sglang_venv_base_python": str(fake),
                       "sglang_venv": str(where / "venv"), "sglang_venv_versions_dir": str(where / "versions"),
                       "sglang_install_record": str(where / "install-record.json"),
                       "sglang_lease_dir": str(where / "leases"),
                       "sglang_lease_wait": 1 if case == "held by another run" else 0,
                       "sglang_service_name": "sglang-kimi", "playbook_takes": case == "inside a playbook's lease"}
    holder = _lease.Lease(cases["held by another run"]["sglang_lease_dir"])
    holder.acquire(UNIT, "run-of-another-controller", {"controller": "ops-1", "user": "alice", "play": "Deploy SGLang"},
                   ttl=3600, wait=0)
    return cases, run_play_batch(tmp, PLAY, cases)


def _lease_file(cases, case):
    return os.path.join(cases[case]["sglang_lease_dir"], UNIT + ".lease")


def test_a_live_lease_of_another_run_stops_the_role_before_it_changes_anything(runs):
    """Defect 7: the role alone installed into the venv while another run held the lease (its restart under way);
    now it waits (sglang_lease_wait 1 here), saying for whom, and refuses naming the holder, and leaves that
    run's lease alone. The wait and what it says are one task (the lease's action plugin), not a task file."""
    cases, results = runs
    _rc, out = results["held by another run"]
    assert "waiting (at most 1 s) for the run that holds the lease on %s: alice@ops-1, play Deploy SGLang" % UNIT \
        in out, out[-4000:]
    assert "ROLE FAILED" in out and "is held by another run: alice@ops-1, play 'Deploy SGLang'" in out, out[-4000:]
    assert not os.path.exists(cases["held by another run"]["sglang_venv_versions_dir"]), "the host changed"
    with open(_lease_file(cases, "held by another run"), encoding="utf-8") as handle:
        assert json.load(handle)["id"] == "run-of-another-controller"


def test_the_role_alone_takes_the_lease_and_gives_it_back_however_it_ends(runs):
    cases, results = runs
    _rc, out = results["alone"]
    assert "took the host lease on %s" % UNIT in out or '"result": "acquired"' in out, out[-4000:]
    assert "ROLE FAILED" in out and os.path.isdir(cases["alone"]["sglang_venv_versions_dir"]), out[-4000:]
    assert not os.path.exists(_lease_file(cases, "alone")), "the role did not give its lease back"


def test_inside_a_playbooks_lease_the_role_joins_it_and_leaves_it_to_the_playbook(runs):
    cases, results = runs
    case = "inside a playbook's lease"
    _rc, out = results[case]
    assert "ROLE FAILED" in out and os.path.isdir(cases[case]["sglang_venv_versions_dir"]), out[-4000:]
    assert "held by another run" not in out
    with open(_lease_file(cases, case), encoding="utf-8") as handle:
        held = json.load(handle)["id"]
    assert "LEASE ID %s" % held in out, "the playbook's lease was given back or replaced"
