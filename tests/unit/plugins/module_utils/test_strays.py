# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_strays.py: find the operator's stray processes on a fake /proc, never the unit's own
processes nor this process's ancestors; stop a real child process (SIGTERM, SIGKILL after the timeout)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _strays as s

UNIT_CGROUP = "0::/system.slice/sglang-kimi.service\n"
SHELL_CGROUP = "0::/user.slice/user-0.slice/session-3.scope\n"


def fake_proc(tmp_path, procs):
    """procs: pid -> (argv list, ppid, cgroup text)."""
    root = tmp_path / "proc"
    root.mkdir()
    (root / "self").mkdir()
    for pid, (argv, ppid, cgroup) in procs.items():
        d = root / str(pid)
        d.mkdir()
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + (b"\0" if argv else b""))
        (d / "stat").write_text("%d (%s) S %d 1 1 0 -1" % (pid, (argv or ["kthread"])[0][-15:], ppid))
        (d / "cgroup").write_text(cgroup)
    return str(root)


PROCS = {
    1: (["/lib/systemd/systemd"], 0, "0::/init.scope\n"),
    2: ([], 0, ""),                                                               # kernel thread
    100: (["/root/ml-env/bin/python3", "-m", "sglang.launch_server", "--model-path", "/shared/kimi",
           "--api-key", "sk-secret-123"], 1, SHELL_CGROUP),                        # the nohup stray
    200: (["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/shared/kimi"],
          1, UNIT_CGROUP),                                                         # the managed unit
    201: (["/opt/sglang/venv/bin/python", "-c", "from multiprocessing.spawn import spawn_main; "
           "sglang.launch_server"], 200, "0::/system.slice/sglang-kimi.service/rank0\n"),
    300: (["/bin/sh", "-c", "ansible sglang.launch_server"], 1, SHELL_CGROUP),    # the connection (ancestor)
    301: (["/usr/bin/python3", "AnsiballZ_sglang_stop_processes.py"], 300, SHELL_CGROUP),
}


def test_find_matches_the_stray_only(tmp_path):
    root = fake_proc(tmp_path, PROCS)
    found = s.find(root, ["sglang.launch_server"], protect_unit="sglang-kimi.service", own_pid=301)
    assert [p["pid"] for p in found] == [100]
    assert found[0]["match"] == "sglang.launch_server"
    assert "sk-secret-123" not in found[0]["cmdline"] and "--api-key ********" in found[0]["cmdline"]


def test_without_a_protected_unit_the_units_processes_match_too(tmp_path):
    """So that the protection is what keeps them out (the test above fails without it)."""
    root = fake_proc(tmp_path, PROCS)
    found = s.find(root, ["sglang.launch_server"], protect_unit=None, own_pid=301)
    assert [p["pid"] for p in found] == [100, 200, 201]


def test_the_match_is_a_fixed_string_not_a_pattern(tmp_path):
    root = fake_proc(tmp_path, PROCS)
    assert s.find(root, ["sglang.launch.server"], own_pid=301) == []     # '.' is not a wildcard
    assert s.find(root, ["--model-path /shared/kimi --api-key"], own_pid=301)[0]["pid"] == 100


@pytest.mark.parametrize("match, problem", [
    ("", "shorter than 8"), ("python", "shorter than 8"), ("sglang\n.launch", "control character"),
    (7, "not a string"),
])
def test_unsafe_matches_are_refused(match, problem):
    assert problem in s.match_problems([match])[0]


def test_safe_match_has_no_problem():
    assert s.match_problems(["sglang.launch_server --port 30000"]) == []


def test_mask_hides_both_keys():
    assert s.mask("x --api-key=abc --admin-api-key def y") == "x --api-key=******** --admin-api-key ******** y"


def _child(code, **kwargs):
    return subprocess.Popen([sys.executable, "-c", code], **kwargs)


def test_stop_terminates_a_real_process_with_sigterm():
    child = _child("import time; time.sleep(60)")
    try:
        def alive(_pid):
            return child.poll() is None               # reaps the child, as init would
        assert s.stop(child.pid, 10, alive=alive) == "stopped"
        assert child.returncode == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()


def test_stop_kills_a_process_that_ignores_sigterm():
    child = _child("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)",
                   stdout=subprocess.PIPE)
    try:
        # The handler is in place once the child says so: a fixed sleep raced a busy machine
        # (CI of stop 32: SIGTERM reached the child before SIG_IGN, so it was "stopped").
        assert child.stdout.readline() == b"ready\n"

        def alive(_pid):
            return child.poll() is None
        assert s.stop(child.pid, 0.5, alive=alive) == "killed"
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()


def test_stop_of_a_gone_process_changes_nothing():
    sent = []
    assert s.stop(999999, 1, kill=lambda pid, sig: sent.append(sig), alive=lambda pid: False) == "gone"
    assert sent == []


def test_own_process_is_never_matched_on_the_real_proc():
    """On this machine's /proc: two processes hold the marker; the one that asks (own_pid) is skipped."""
    marker = "gpuserve-stray-marker-%d" % os.getpid()
    code = "import time; time.sleep(30)  # " + marker
    me, stray = _child(code), _child(code)
    try:
        import time
        for _attempt in range(100):                     # until both have exec'd (cmdline holds the marker)
            if all(marker in s.cmdline_of("/proc", c.pid) for c in (me, stray)):
                break
            time.sleep(0.05)
        found = s.find("/proc", [marker], own_pid=me.pid)
        assert [p["pid"] for p in found] == [stray.pid]
    finally:
        me.kill()
        stray.kill()
        me.wait()
        stray.wait()
