# SPDX-License-Identifier: GPL-3.0-or-later
"""The host lease (module_utils/_lease.py, module sglang_lease and its action plugin): one run at a time changes a
unit's life on a host (issues 22, 39). Real files, real flock, real processes racing for it, a real PID namespace
(unshare); a fake clock where time matters (the wall clock and the boot-time clock move apart on purpose)."""
from __future__ import annotations

import glob
import json
import multiprocessing
import os
import re
import stat
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import run_play

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_lease.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
UNIT = "sglang-kimi.service"
ALICE = {"controller": "ops-1", "user": "alice", "play": "Deploy SGLang"}
BOB = {"controller": "ops-2", "user": "bob", "play": "Rolling restart"}


class Clock(object):
    """A host's clocks the test moves: the wall clock (``now``) and the boot-time clock (``boot``), which
    advance() and sleep() move together and a wall-clock step moves apart; sleep() runs what the test scheduled."""

    def __init__(self, now=1764687600.0):
        self.now = now
        self.boot = 5000.0
        self.boot_id = "boot-1"
        self.at = []  # (time, callable)
        self.sleeps = []

    def __call__(self):
        return self.now

    def boottime(self):
        return self.boot

    def advance(self, seconds):
        self.now += seconds
        self.boot += seconds

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.advance(seconds)
        for when, action in list(self.at):
            if when <= self.now:
                self.at.remove((when, action))
                action()


def make(tmp_path, clock=None):
    clock = clock or Clock()
    return _lease.Lease(str(tmp_path / "leases"), clock=clock, sleep=clock.sleep, poll=2.0,
                        monotonic=clock.boottime, boot_id=lambda: clock.boot_id), clock


def test_free_lease_is_taken_root_only_with_its_owner(tmp_path):
    lease, clock = make(tmp_path)
    got = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    assert got["result"] == "acquired" and got["previous"] is None and got["waited"] == 0
    record = json.loads((tmp_path / "leases" / (UNIT + ".lease")).read_text())
    assert record["id"] == "run-a" and record["owner"] == ALICE and record["unit"] == UNIT
    assert record["acquired_at"] == clock.now and record["expires_at"] == clock.now + 600
    assert record["host_boot_id"] == "boot-1" and record["renewed_boottime"] == clock.boot and record["ttl"] == 600
    assert stat.S_IMODE(os.stat(tmp_path / "leases").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "leases" / (UNIT + ".lease")).st_mode) == 0o600


def test_the_same_run_renews_and_keeps_its_start(tmp_path):
    lease, clock = make(tmp_path)
    first = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)["lease"]
    clock.advance(500)
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
    clock.advance(601)
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
    """A later run of the same controller tells a dead holder by this pid (the action plugin sglang_lease)."""
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
    """The roles and playbooks read these two, never a list of results of their own (the lease tasks of
    the server and router roles, deploy.yml, restart.yml): a renewed lease is not this call's to give back."""
    assert _lease.meaning(result) == {"taken": taken, "contended": contended,
                                      "holds": result in ("acquired", "renewed", "expired", "broken", "free")}


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


# --- Issue 39: expiry on the boot-time clock, renewal, the holder's identity, compare and swap -------------------

def test_a_wall_clock_step_forward_does_not_expire_a_live_lease(tmp_path):
    """Defect 8: expiry followed the wall clock; an NTP step of 2 h forward made a live run's lease 'expired'.
    (Old code: result expired.)"""
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    clock.now += 7200            # the wall clock steps; 10 s really passed
    clock.advance(10)
    with pytest.raises(_lease.LeaseHeld) as err:
        lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)
    assert "expires in 590 s" in str(err.value)
    assert lease.read(UNIT)["id"] == "run-a"
    # and a step back does not keep a dead run's lease: 601 s on the boot-time clock expire it
    clock.now -= 9000
    clock.boot += 591
    assert lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)["result"] == "expired"


def test_on_another_boot_the_wall_clock_decides(tmp_path):
    """A lease directory that survived a reboot (not the default tmpfs): the boot-time reading of another boot
    means nothing, expires_at does."""
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    clock.boot_id, clock.boot = "boot-2", 30.0
    with pytest.raises(_lease.LeaseHeld):
        lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)
    clock.now += 601
    assert lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)["result"] == "expired"


def test_renew_extends_this_runs_lease_and_never_takes_another(tmp_path):
    """Defect 8: no heartbeat (old code: no renew())."""
    lease, clock = make(tmp_path)
    first = lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)["lease"]
    clock.advance(500)
    got = lease.renew(UNIT, "run-a", ttl=600)
    assert got["result"] == "renewed" and got["lease"]["acquired_at"] == first["acquired_at"]
    assert got["lease"]["owner"] == ALICE and got["lease"]["renewed_boottime"] == clock.boot
    clock.advance(500)           # 1,000 s after the take, 500 after the renewal: still live
    with pytest.raises(_lease.LeaseHeld):
        lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0)
    assert lease.renew(UNIT, "run-b", ttl=600)["result"] == "held by another"
    assert lease.read(UNIT)["id"] == "run-a"
    lease.release(UNIT, "run-a")
    assert lease.renew(UNIT, "run-a", ttl=600)["result"] == "not held" and lease.read(UNIT) is None


def test_the_ttl_covers_two_restarts_and_the_gates():
    """Defect 8: one fixed 7,200 s whatever sglang_restart_timeout (3,600 s for a 500 GB model)."""
    assert _lease.ttl_for(7200) == 7200
    assert _lease.ttl_for(7200, restart_timeout=3600, gate_timeout=1800) == 2 * 3600 + 1800 + _lease.TTL_MARGIN
    assert _lease.ttl_for(7200, restart_timeout=60) == 7200


def test_the_module_takes_the_ttl_from_the_restart_timeout_and_renews(tmp_path):
    took = run_module(tmp_path, {"unit": UNIT, "id": "run-a", "owner": ALICE, "ttl": 600, "restart_timeout": 3600,
                                 "gate_timeout": 1200})
    assert took["lease"]["ttl"] == 2 * 3600 + 1200 + 900, took
    renewed = run_module(tmp_path, {"unit": UNIT, "id": "run-a", "state": "renewed", "ttl": 600})
    assert renewed["result"] == "renewed" and renewed["changed"] is False and renewed["lease"]["ttl"] == 600
    lost = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "state": "renewed", "ttl": 600})
    assert lost["failed"] is True and "no longer this run's" in lost["msg"] and "alice@ops-1" in lost["msg"]


def _identity_of(proc):
    return dict(_lease.process_identity(proc.pid), controller="ops-1", user="alice")


def test_a_holder_is_gone_only_when_provably_gone(tmp_path):
    """Defect 1: 'gone' was hostname + 'ps -p PID'. Now: same boot, same PID namespace, and the pid gone or
    another process."""
    here = _lease.controller_identity()
    if not here.get("start"):
        pytest.skip("this machine's /proc does not tell boot id, PID namespace and start times")
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        owner = _identity_of(child)
        assert owner["boot_id"] == here["boot_id"] and owner["pidns"] == here["pidns"]
        assert _lease.holder_gone(owner, here) is False                       # alive
        assert _lease.holder_gone(dict(owner, start=str(int(owner["start"]) + 1)), here) is True   # pid reused
        assert _lease.holder_gone(dict(owner, pidns="1"), here) is False      # another namespace: TTL only
        assert _lease.holder_gone(dict(owner, boot_id="x"), here) is False    # another boot or machine: TTL only
        assert _lease.holder_gone({"controller": "ops-1", "pid": owner["pid"]}, here) is False   # no identity
    finally:
        child.stdin.close()
        child.wait(60)
    assert _lease.holder_gone(owner, here) is True                            # exited


HOLDER = textwrap.dedent('''
    import json, os, socket, sys
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease
    with open("/proc/self/stat") as handle:
        stat = handle.read()
    with open("/proc/sys/kernel/random/boot_id") as handle:
        boot_id = handle.read().strip()
    # what a run's ansible-playbook in this namespace records, written out here (not _lease's helpers)
    owner = {"controller": socket.gethostname(), "user": "ci", "play": "Deploy SGLang", "pid": str(os.getpid()),
             "boot_id": boot_id, "pidns": str(os.stat("/proc/self/ns/pid").st_ino),
             "start": stat[stat.rindex(")") + 2:].split()[19]}
    _lease.Lease(sys.argv[1]).acquire(sys.argv[2], "run-in-a-container", owner, ttl=3600, wait=0)
    print(json.dumps(owner), flush=True)
    sys.stdin.read()
''')


@pytest.fixture
def holder_in_another_pid_namespace(tmp_path):
    """A live run in another PID namespace of this machine, with this machine's hostname (a container with host
    networking, a hostNetwork pod, a CI runner container), holding the lease on UNIT."""
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("no unshare(1) on this machine")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip("unshare --pid --fork --mount-proc is not permitted here: %s" % probe.stderr.strip())
    directory = str(tmp_path / "leases")
    proc = subprocess.Popen([unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", HOLDER, directory,
                             UNIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    try:
        owner = json.loads(proc.stdout.readline())
        yield directory, owner, proc
    finally:
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)


def test_a_live_holder_in_another_pid_namespace_is_not_judged_gone(holder_in_another_pid_namespace):
    """Defect 1 in module_utils: its pid means nothing in this namespace."""
    directory, owner, proc = holder_in_another_pid_namespace
    assert owner["controller"] == socket.gethostname() and owner["pidns"] != _lease.pid_namespace()
    assert _lease.holder_gone(owner) is False
    assert proc.poll() is None


def test_the_role_does_not_break_a_live_lease_of_another_pid_namespace(tmp_path, holder_in_another_pid_namespace):
    """Defect 1, end to end (the server role's lease entry point, as deploy.yml and restart.yml take it): the old
    lease_held.yml judged the holder by `uname -n` and `ps -p PID` and broke it ("BROKE the live host lease"); now
    this run waits (sglang_lease_wait 0 here) and refuses naming it, and the holder keeps its lease."""
    directory, owner, proc = holder_in_another_pid_namespace
    play = textwrap.dedent('''
        - hosts: all
          gather_facts: false
          tasks:
            - name: Take the host lease on the server unit
              ansible.builtin.include_role:
                name: gpuserve.sglang.server
                tasks_from: lease
              vars:
                sglang_lease_state: acquired
    ''')
    rc, out = run_play(tmp_path, play, ["sglang_service_name=sglang-kimi", "sglang_lease_wait=0",
                                        "sglang_lease_dir=" + directory])
    assert rc != 0 and "is held by another run: ci@%s" % owner["controller"] in out, out[-4000:]
    assert "BROKE" not in out and "taking it over" not in out
    assert json.loads((tmp_path / "leases" / (UNIT + ".lease")).read_text())["id"] == "run-in-a-container"
    assert proc.poll() is None


def test_a_takeover_breaks_only_the_holder_judged_gone_never_a_third_run(tmp_path):
    """Defect 5: run B judged run A gone on its first read; run C took the (expired) lease in between; B's takeover
    must not break C. The takeover is compare and swap on A's id under the lease's lock (old code: no replace=,
    its force broke whoever held the lease at the second call)."""
    lease, clock = make(tmp_path)
    lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    judged = lease.read(UNIT)                                     # B reads: A holds it; B finds A gone
    # ... meanwhile A's lease expires and C, alive, takes it
    clock.advance(601)
    assert lease.acquire(UNIT, "run-c", {"user": "carol"}, ttl=600, wait=0)["result"] == "expired"
    with pytest.raises(_lease.LeaseHeld) as err:
        lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0, replace=judged["id"])
    assert "carol@" in str(err.value)
    assert lease.read(UNIT)["id"] == "run-c"
    # while A still holds it, the same call takes it over from A, and says so
    lease.release(UNIT, "run-c")
    lease.acquire(UNIT, "run-a", ALICE, ttl=600, wait=0)
    got = lease.acquire(UNIT, "run-b", BOB, ttl=600, wait=0, replace="run-a")
    assert got["result"] == "gone" and got["previous"]["id"] == "run-a" and lease.read(UNIT)["id"] == "run-b"
    assert _lease.meaning("gone") == {"taken": True, "contended": True, "holds": True}


def test_the_module_takes_over_only_by_compare_and_swap(tmp_path):
    run_module(tmp_path, {"unit": UNIT, "id": "run-a", "owner": ALICE})
    run_module(tmp_path, {"unit": UNIT, "id": "run-c", "owner": BOB, "force": True})   # C now holds it
    stale = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "owner": BOB, "wait": 0, "replace": "run-a"})
    assert stale["failed"] is True and stale["result"] == "held" and stale["lease"]["id"] == "run-c"
    swapped = run_module(tmp_path, {"unit": UNIT, "id": "run-b", "owner": BOB, "wait": 0, "replace": "run-c"})
    assert swapped["result"] == "gone" and "gone from its controller" in swapped["message"], swapped
    assert (swapped["taken"], swapped["contended"]) == (True, True) and len(swapped["warnings"]) == 1


def test_the_run_id_is_one_per_run_and_never_shared():
    """Defect 2: the rollout id was rollout-<hostname>-<pid>, the pid empty without procps: every run the same id.
    The run's id comes from its ansible-playbook's identity: the same in each of its workers, another for another
    run (old code: no run_id())."""
    here = _lease.controller_identity()
    assert _lease.run_id(here) == _lease.run_id(dict(here)) == _lease.run_id(_lease.controller_identity())
    other = dict(here, pid=str(int(here["pid"]) + 1))
    assert _lease.run_id(other) != _lease.run_id(here)
    assert _lease.run_id(dict(here, boot_id="another-boot")) != _lease.run_id(here)
    assert _lease.run_id({"controller": "ops-1", "pid": "1"}) != _lease.run_id({"controller": "ops-1", "pid": "2"})
    assert re.match(r"^run-[0-9a-f]{32}$", _lease.run_id(here))


ROLLOUT_PLAY = textwrap.dedent('''
    - hosts: all
      gather_facts: false
      vars:
        sglang_rollout_router_group: all
      tasks:
        - name: The routers' leases, taken
          ansible.builtin.include_role:
            name: gpuserve.sglang.router
            tasks_from: rollout_lease
          vars:
            _router_rollout_lease_state: acquired

        - name: Hold them until the test says so (a batch being restarted)
          ansible.builtin.wait_for:
            path: "{{ go }}"
            timeout: 600
          when: go | length > 0

        - name: The routers' leases, given back
          ansible.builtin.include_role:
            name: gpuserve.sglang.router
            tasks_from: rollout_lease
          vars:
            _router_rollout_lease_state: released
''')


def test_two_concurrent_rollouts_never_share_the_routers_lease(tmp_path):
    """Defect 2, end to end: a rollout holds the lease on the router unit under its run's own id; a second,
    concurrent run finds it held by another run (waits, here 0 s, and stops), never 'renews' it; the first run
    gives it back. (Old code: with no `ps` both ids are rollout-<hostname>- and the second run renews.)"""
    directory = str(tmp_path / "leases")
    lease_file = tmp_path / "leases" / "sglang-router.service.lease"
    common = ["sglang_lease_dir=" + directory, "sglang_lease_wait=0", "sglang_router_service_name=sglang-router"]
    first_dir, second_dir, go = tmp_path / "one", tmp_path / "two", tmp_path / "go"
    first_dir.mkdir()
    second_dir.mkdir()
    (first_dir / "play.yml").write_text(ROLLOUT_PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + sys.executable, "-e", "go=" + str(go)]
    for item in common:
        cmd += ["-e", item]
    first = subprocess.Popen(cmd + [str(first_dir / "play.yml")], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        for _attempt in range(600):
            if lease_file.exists() or first.poll() is not None:
                break
            time.sleep(0.5)
        held = json.loads(lease_file.read_text())
        assert re.match(r"^run-[0-9a-f]{32}$", held["id"]) and held["owner"].get("start")
        rc, out = run_play(second_dir, ROLLOUT_PLAY, common + ["go="])
        assert rc != 0 and "is held by another run" in out, out[-4000:]
        assert "gone from its controller" not in out and json.loads(lease_file.read_text())["id"] == held["id"]
    finally:
        go.write_text("")
        out, _err = first.communicate(timeout=600)
    assert first.returncode == 0, out[-4000:]
    assert not lease_file.exists()
