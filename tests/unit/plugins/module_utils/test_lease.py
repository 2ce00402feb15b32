# SPDX-License-Identifier: GPL-3.0-or-later
"""The host lease (module_utils/_lease.py, module sglang_lease): one run at a time changes a unit's life on a
host (issue 22). Real files, real flock, real processes racing for it; a fake clock where time matters."""
from __future__ import annotations

import glob
import json
import multiprocessing
import os
import re
import stat
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_lease.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
UNIT = "sglang-kimi.service"
ALICE = {"controller": "ops-1", "user": "alice", "play": "Deploy SGLang"}
BOB = {"controller": "ops-2", "user": "bob", "play": "Rolling restart"}


class Clock(object):
    """A host clock the test moves; sleep() moves it and runs what the test scheduled at that time."""

    def __init__(self, now=1764687600.0):
        self.now = now
        self.at = []  # (time, callable)
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        for when, action in list(self.at):
            if when <= self.now:
                self.at.remove((when, action))
                action()


def make(tmp_path, clock=None):
    clock = clock or Clock()
    return _lease.Lease(str(tmp_path / "leases"), clock=clock, sleep=clock.sleep, poll=2.0), clock


def test_free_lease_is_taken_root_only_with_its_owner(tmp_path):
    lease, clock = make(tmp_path)
    got = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    assert got["result"] == "acquired" and got["previous"] is None and got["waited"] == 0
    record = json.loads((tmp_path / "leases" / (UNIT + ".lease")).read_text())
    assert record["id"] == "run-a" and record["owner"] == ALICE and record["unit"] == UNIT
    assert record["acquired_at"] == clock.now and record["expires_at"] == clock.now + 600
    assert stat.S_IMODE(os.stat(tmp_path / "leases").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "leases" / (UNIT + ".lease")).st_mode) == 0o600


def test_the_same_run_renews_and_keeps_its_start(tmp_path):
    lease, clock = make(tmp_path)
    first = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)["lease"]
    clock.now += 500
    got = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    assert got["result"] == "renewed"
    assert got["lease"]["acquired_at"] == first["acquired_at"]
    assert got["lease"]["expires_at"] == clock.now + 600


def test_a_live_lease_of_another_run_is_refused_by_name_after_the_wait(tmp_path):
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=3600, wait=0)
    with pytest.raises(_lease.LeaseHeld) as err:
        lease.acquire(UNIT, "run-b", BOB, ttl=3600, wait=30)
    message = str(err.value)
    assert "alice@ops-1" in message and "play 'Deploy SGLang'" in message and "Waited 30 s" in message
    assert "sglang_lease_break: true" in message and "nothing was changed" in message
    assert sum(clock.sleeps) == 30
    # alice's lease is untouched
    assert lease.read(UNIT)["id"] == "run-a"


def test_a_waiting_run_takes_the_lease_when_the_holder_gives_it_back(tmp_path):
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=3600, wait=0)
    clock.at.append((clock.now + 9, lambda: lease.release(UNIT, "run-a")))
    got = lease.acquire(UNIT, "run-b", BOB, ttl=3600, wait=900)
    assert got["result"] == "acquired" and got["lease"]["owner"] == BOB
    assert 9 <= got["waited"] <= 11


def test_the_lease_of_a_dead_run_expires_and_is_reported(tmp_path):
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    clock.now += 601
    got = lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)
    assert got["result"] == "expired" and got["previous"]["id"] == "run-a"
    assert "expired 1 s ago" in _lease.describe(got["previous"], clock.now)


def test_force_breaks_a_live_lease_and_reports_it(tmp_path):
    lease, _clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=3600, wait=0)
    got = lease.acquire(UNIT, "run-b", BOB, ttl=3600, wait=0, force=True)
    assert got["result"] == "broken" and got["previous"]["owner"]["user"] == "alice"
    assert lease.read(UNIT)["id"] == "run-b"


@pytest.mark.parametrize("content", [b"", b"not json", b'{"id": 3}', b"[1, 2]"])
def test_an_unreadable_lease_file_counts_as_expired(tmp_path, content):
    lease, _clock = make(tmp_path)
    (tmp_path / "leases").mkdir(mode=0o700)
    (tmp_path / "leases" / (UNIT + ".lease")).write_bytes(content)
    got = lease.acquire(UNIT, "run-b", BOB, ttl=60, wait=0)
    assert got["result"] == "expired" and "not a lease" in got["previous"]["error"]


def test_release_gives_back_only_its_own_lease(tmp_path):
    lease, _clock = make(tmp_path)
    assert lease.release(UNIT, "run-a")["result"] == "not held"
    lease.acquire(UNIT, "run-a", ALICE, ttl=60, wait=0)
    assert lease.release(UNIT, "run-b")["result"] == "held by another"
    assert lease.read(UNIT)["id"] == "run-a"
    assert lease.release(UNIT, "run-a")["result"] == "released"
    assert lease.read(UNIT) is None


def test_check_mode_writes_nothing_and_reports_the_holder(tmp_path):
    lease, _clock = make(tmp_path)
    assert lease.acquire(UNIT, "run-a", ALICE, ttl=60, wait=0, check_mode=True)["result"] == "free"
    assert not (tmp_path / "leases").exists()
    lease.acquire(UNIT, "run-a", ALICE, ttl=60, wait=0)
    got = lease.acquire(UNIT, "run-b", BOB, ttl=60, wait=900, check_mode=True)
    assert got["result"] == "held" and got["lease"]["id"] == "run-a"
    assert lease.release(UNIT, "run-b", check_mode=True)["result"] == "held by another"
    assert lease.read(UNIT)["id"] == "run-a"


def test_hostile_owner_text_stays_on_one_line(tmp_path):
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", {"controller": "a\nb", "user": "$(rm -rf /)", "play": "x'\"\r;y"}, ttl=60, wait=0)
    message = _lease.refusal(UNIT, lease.read(UNIT), 0, clock.now)
    assert "\n" not in message and "\r" not in message
    assert "$(rm -rf /)@a?b" in message


@pytest.mark.parametrize("unit", ["", "sglang kimi.service", "../x.service", "a\n.service", "sglang-kimi"])
def test_bad_unit_names_are_refused(tmp_path, unit):
    lease, _clock = make(tmp_path)
    with pytest.raises(ValueError):
        lease.acquire(unit, "run-a", ALICE, ttl=60, wait=0)


def _race(directory, lease_id, barrier, results):
    lease = _lease.Lease(directory)
    barrier.wait()
    try:
        results.put((lease_id, lease.acquire(UNIT, lease_id, {"user": lease_id}, ttl=600, wait=0)["result"]))
    except _lease.LeaseHeld:
        results.put((lease_id, "held"))


def test_runs_racing_for_a_free_lease_exactly_one_wins(tmp_path):
    context = multiprocessing.get_context("fork")
    for round_ in range(10):
        directory = str(tmp_path / ("round%d" % round_))
        barrier, results = context.Barrier(4), context.Queue()
        procs = [context.Process(target=_race, args=(directory, "run-%d" % n, barrier, results)) for n in range(4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(60)
        outcome = dict(results.get(timeout=10) for proc in procs)
        winners = [lease_id for lease_id, result in outcome.items() if result == "acquired"]
        assert len(winners) == 1, outcome
        assert _lease.Lease(directory).read(UNIT)["id"] == winners[0]


def run_module(tmp_path, args, check_mode=False):
    payload = dict(args, directory=str(tmp_path / "leases"))
    if check_mode:
        payload["_ansible_check_mode"] = True
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False)
    return json.loads(proc.stdout)


def test_module_takes_refuses_and_gives_back_never_changed(tmp_path):
    took = run_module(tmp_path, {"unit": UNIT, "id": "run-a", "owner": ALICE})
    assert took["result"] == "acquired" and took["changed"] is False, took
    assert (took["taken"], took["contended"]) == (True, False)
    renewed = run_module(tmp_path, {"unit": UNIT, "id": "run-a", "owner": ALICE})
    assert renewed["result"] == "renewed" and (renewed["taken"], renewed["contended"]) == (False, False)
    refused = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "owner": BOB, "wait": 0})
    assert refused["failed"] is True and "alice@ops-1" in refused["msg"] and refused["result"] == "held"
    assert (refused["taken"], refused["contended"]) == (False, True)
    check = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "owner": BOB}, check_mode=True)
    assert check["result"] == "held" and "alice@ops-1" in check["message"]
    assert (check["taken"], check["contended"]) == (False, True)
    left = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "state": "released"})
    assert left["result"] == "held by another" and (left["taken"], left["contended"]) == (False, True)
    broke = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "owner": BOB, "force": True})
    assert broke["result"] == "broken" and "BROKE" in broke["message"] and broke["changed"] is False
    assert (broke["taken"], broke["contended"]) == (True, True)
    # a contended acquire warns (the run's recap shows it); a free or renewed one does not
    # (ansible-core 2.19+ wraps a warning in a WarningSummary; the text is the message either way)
    for warned in (broke, check):
        assert len(warned["warnings"]) == 1 and json.dumps(warned["message"])[1:-1] in json.dumps(warned["warnings"])
    assert not took.get("warnings") and not renewed.get("warnings")
    gone = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "state": "released"})
    assert gone["result"] == "released" and gone["changed"] is False
    assert (gone["taken"], gone["contended"]) == (False, False)
    free = run_module(tmp_path, {"unit": UNIT, "id": "run-c", "owner": BOB}, check_mode=True)
    assert free["result"] == "free" and (free["taken"], free["contended"]) == (True, False)
    bad = run_module(tmp_path, {"unit": "x;y", "id": "run-b"})
    assert bad["failed"] is True and "unit name" in bad["msg"]


def test_the_owner_keeps_the_controller_pid_and_names_it(tmp_path):
    """A later run of the same controller tells a dead holder by this pid (roles/_common/tasks/lease.yml)."""
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", dict(ALICE, pid="4242", extra="dropped"), ttl=60, wait=0)
    holder = lease.read(UNIT)
    assert holder["owner"] == dict(ALICE, pid="4242")
    assert "alice@ops-1 (ansible-playbook pid 4242), play 'Deploy SGLang'" in _lease.describe(holder, clock.now)


@pytest.mark.parametrize("result, taken, contended", [
    ("acquired", True, False), ("renewed", False, False), ("expired", True, True), ("broken", True, True),
    ("free", True, False), ("held", False, True), ("released", False, False), ("not held", False, False),
    ("held by another", False, True)])
def test_each_result_says_whether_the_run_took_the_lease_and_whether_another_held_it(result, taken, contended):
    """The roles and playbooks read these two, never a list of results of their own (lease.yml, lease_held.yml,
    the server and router roles, deploy.yml, restart.yml): a renewed lease is not this call's to give back."""
    assert _lease.meaning(result) == {"taken": taken, "contended": contended}


def test_no_task_lists_lease_results_of_its_own():
    """The two meanings live in _lease.py; a task that lists results again drifts from it (issue 22's review)."""
    listed = re.compile(r"result\s*(\|\s*default\([^)]*\)\s*)?in\s*\[")
    offenders = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
                       + glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))):
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                if "lease" in line and listed.search(line):
                    offenders.append("%s:%d" % (os.path.relpath(path, ROOT), number))
    assert not offenders
