# SPDX-License-Identifier: GPL-3.0-or-later
"""The restart/verify state machine against a simulated systemd host (fake clock, systemctl, journalctl).

The simulated host behaves as systemd 252 did in the molecule test host: a restart job keeps the unit in
deactivating (stop-sigterm) while the server drains, then starts a new invocation with a new InvocationID;
a crash under Restart=on-failure goes through auto-restart and NRestarts grows; the journal answers by
_SYSTEMD_INVOCATION_ID and cursor. The log lines are SGLang 0.5.9's real texts.
"""
import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc as sr_proc
from ansible_collections.gpuserve.sglang.plugins.module_utils import _service_runner as sr
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import StateFile
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import Systemctl
from real_sglang_logs import journal_invocations

STAMP = "2026-11-29 17:54:36"
READY = "[%s] The server is fired up and ready to roll!" % STAMP
WALL0 = 1795974888.0


def server_script(tp=8, hicache_ranks=None, ready=True, fatal=None, exit_at=None, load=3.0):
    """(offset seconds, line) of one SGLang 0.5.9 start-up."""
    lines = [(0.2, "[%s] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=%d)" % (STAMP, tp))]
    for rank in range(tp):
        lines.append((1.0, "[%s TP%d] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" % (STAMP, rank)))
    if fatal:
        lines.append((1.5, "[%s TP0] Scheduler hit an exception: Traceback (most recent call last):" % STAMP))
        lines.append((1.5, fatal))
        lines.append((1.6, "[%s] Received sigquit from a child process. It usually means the child failed." % STAMP))
    for rank in (range(tp) if hicache_ranks is None else hicache_ranks):
        lines.append((load - 0.5, "[%s TP%d] Allocating 22.39 GB host memory for hierarchical KV cache."
                      % (STAMP, rank)))
    lines.append((load, "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"))
    if ready:
        lines.append((load + 1.0, READY))
    return {"lines": lines, "exit_at": exit_at}


class FakeHost(object):
    """systemd + journald + the server's /health, on a fake clock."""

    def __init__(self, scripts, drain=0.0, active=True, restart_policy="no", restart_sec=1.0, health=None,
                 timeout_stop=None,
                 exec_start="/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 --enable-hierarchical-cache",
                 release="0.5.9"):
        self.now = 0.0
        self.release = release            # what importlib.metadata says of ExecStart's interpreter ("" none)
        self.scripts = list(scripts)      # one script per invocation to come (the first is the running one)
        self.drain = drain
        self.timeout_stop = timeout_stop  # TimeoutStopSec: a longer drain ends with systemd's SIGKILL
        self.kill_at = None
        self.restart_policy = restart_policy
        self.restart_sec = restart_sec
        self.health_fn = health or (lambda inv_age: 200)
        self.exec_start = exec_start
        self.journal = []                 # dicts with __CURSOR, MESSAGE, _SYSTEMD_INVOCATION_ID, __REALTIME_TIMESTAMP
        self.invocations = []             # (id, start, script)
        self.n_restarts = 0
        self.stop_until = None            # deactivating until then
        self.pending = None               # ("start", at) after a stop
        self.external_job = None
        self.calls = []
        self.max_lines_seen = None
        self.show_count = 0
        self.failed = False
        self.stopped = False
        if active:
            self._start(-30.0)            # running since 30 s, its lines already in the journal

    # -- systemd --
    def _start(self, at):
        script = self.scripts.pop(0) if self.scripts else server_script()
        inv = "%032x" % (len(self.invocations) + 1)
        self.invocations.append((inv, at, script))
        self.failed = False
        self.stopped = False
        self.journal.append({"MESSAGE": "Started sglang-kimi.service.", "INVOCATION_ID": inv, "_t": at})
        for offset, line in script["lines"]:
            if script["exit_at"] is not None and offset > script["exit_at"]:
                break
            self.journal.append({"MESSAGE": line, "_SYSTEMD_INVOCATION_ID": inv, "_t": at + offset})
        # lines the process wrote before it exited that journald indexes only later (its stdout/stderr stream)
        for offset, line in script.get("late", []):
            self.journal.append({"MESSAGE": line, "_SYSTEMD_INVOCATION_ID": inv, "_t": at + offset})

    def current(self):
        return self.invocations[-1] if self.invocations else ()

    def advance(self):
        """Apply what happened up to now: stops ending, crashes, auto-restarts."""
        changed = True
        while changed:
            changed = False
            if self.stop_until is not None and self.now >= self.stop_until:
                at = self.stop_until
                self.stop_until = None
                self.kill_at = None
                if self.pending:
                    self.pending = None
                    self._start(at)
                    changed = True
                else:
                    self.stopped = True
            cur = self.current()
            if cur and self.stop_until is None and not self.failed:
                inv, start, script = cur
                if script["exit_at"] is not None and self.now >= start + script["exit_at"]:
                    crash_at = start + script["exit_at"]
                    if self.restart_policy == "on-failure" and self.now >= crash_at + self.restart_sec:
                        self.n_restarts += 1
                        self._start(crash_at + self.restart_sec)
                        changed = True

    def props(self):
        self.advance()
        cur = self.current()
        state, sub, pid, job = "inactive", "dead", 0, ""
        if cur:
            inv, start, script = cur
            if self.stopped:
                state, sub = "inactive", "dead"
            elif self.stop_until is not None:
                sub = "stop-sigkill" if self.kill_at is not None and self.now >= self.kill_at else "stop-sigterm"
                state, pid, job = "deactivating", 100 + len(self.invocations), "7"
            elif script["exit_at"] is not None and self.now >= start + script["exit_at"]:
                if self.restart_policy == "on-failure":
                    state, sub = "activating", "auto-restart"
                else:
                    state, sub = "failed", "failed"
            elif self.now >= start:
                state, sub, pid = "active", "running", 200 + len(self.invocations)
            else:
                state, sub = "activating", "start"
        if self.external_job:
            job = "9"
        return {"Id": "sglang-kimi.service", "LoadState": "loaded", "ActiveState": state, "SubState": sub,
                "MainPID": str(pid), "InvocationID": cur[0] if cur else "", "NRestarts": str(self.n_restarts),
                "Result": "exit-code" if sub in ("failed", "auto-restart") else "success",
                "ExecStart": "{ path=x ; argv[]=%s ; ignore_errors=no }" % self.exec_start, "Job": job,
                "ExecMainCode": "1", "ExecMainStatus": "1", "Restart": self.restart_policy,
                "RestartUSec": "%gs" % self.restart_sec}

    def run(self, argv, timeout=None, max_lines=None):
        self.calls.append(argv)
        cmd = argv[0].rsplit("/", 1)[-1]
        if cmd == "systemctl" and argv[1] == "show":
            self.show_count += 1
            return 0, "\n".join("%s=%s" % kv for kv in self.props().items()) + "\n", ""
        if cmd == "systemctl" and argv[1] == "list-jobs":
            return 0, ("9 sglang-kimi.service %s running\n" % self.external_job) if self.external_job else "", ""
        if cmd == "systemctl" and argv[1] == "restart":
            self.restart()
            return 0, "", ""
        if cmd == "systemctl" and argv[1] == "start":
            self.advance()
            if self.stop_until is not None:
                self.pending = ("start", None)   # systemd: a start queued behind a stop runs when the stop ends
                self.external_job = None
            else:
                self._start(self.now + 0.1)
            return 0, "", ""
        if cmd == "journalctl":
            text = self.journalctl(argv)
            if max_lines is not None and text.count("\n") + 1 > max_lines:
                return sr_proc.RunResult(0, "\n".join(text.split("\n")[:max_lines]), "", truncated=True)
            return 0, text, ""
        if argv[1:3] == ["-I", "-c"] and "importlib.metadata" in argv[3]:
            # the release probe: the version of the sglang distribution of ExecStart's interpreter
            return (0, self.release + "\n", "") if self.release else (0, "\n", "")
        raise AssertionError("unexpected command %r" % argv)

    def restart(self):
        self.advance()
        if self.current() and self.props()["ActiveState"] == "active":
            self.stop_until = self.now + self.drain
            if self.timeout_stop is not None and self.drain > self.timeout_stop:
                # systemd 252's own lines about the invocation it kills (INVOCATION_ID of that invocation)
                self.kill_at = self.now + self.timeout_stop
                self.stop_until = self.kill_at + 0.2
                inv = self.current()[0]
                for offset, text in ((0.0, "sglang-kimi.service: State 'stop-sigterm' timed out. Killing."),
                                     (0.0, "sglang-kimi.service: Killing process 101 (python3) with signal SIGKILL."),
                                     (0.1, "sglang-kimi.service: Main process exited, code=killed, status=9/KILL"),
                                     (0.2, "sglang-kimi.service: Failed with result 'timeout'.")):
                    self.journal.append({"MESSAGE": text, "INVOCATION_ID": inv, "_t": self.kill_at + offset})
            self.journal.append({"MESSAGE": "[%s] SIGTERM received. signum=None frame=None. Draining requests and "
                                            "shutting down..." % STAMP,
                                 "_SYSTEMD_INVOCATION_ID": self.current()[0], "_t": self.now})
            self.pending = ("start", None)
        else:
            self._start(self.now + 0.1)

    def journalctl(self, argv):
        self.advance()
        inv = [a.split("=", 1)[1] for a in argv if "INVOCATION_ID=" in a][0]
        service = any(a.startswith("_SYSTEMD_INVOCATION_ID=") for a in argv)
        manager = any(a.startswith("INVOCATION_ID=") for a in argv)
        after = [a.split("=", 1)[1] for a in argv if a.startswith("--after-cursor=")]
        lines = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--lines=")]
        visible = sorted((e for e in self.journal if e["_t"] <= self.now), key=lambda e: e["_t"])
        out = []
        for index, entry in enumerate(visible):
            cursor = "i=%d" % index
            if after and index <= int(after[0][2:]):
                continue
            if ((service and entry.get("_SYSTEMD_INVOCATION_ID") == inv) or
                    (manager and entry.get("INVOCATION_ID") == inv) or
                    (manager and entry.get("OBJECT_SYSTEMD_INVOCATION_ID") == inv)):
                data = dict((k, v) for k, v in entry.items() if k != "_t")
                if "INVOCATION_ID" in data:   # systemd's own line: journald's trusted fields name PID 1
                    for key, value in (("_PID", "1"), ("_COMM", "systemd"), ("_SYSTEMD_UNIT", "init.scope")):
                        data.setdefault(key, value)   # a forged record (a test's) keeps its own
                data["__CURSOR"] = cursor
                data["__REALTIME_TIMESTAMP"] = str(int((WALL0 + entry["_t"]) * 1e6))
                out.append(json.dumps(data))
        if lines:
            out = out[-lines[0]:]
        if self.max_lines_seen is not None:
            self.max_lines_seen.append(len(out))
        return "\n".join(out)

    # -- clock and health --
    def sleep(self, seconds):
        self.now += seconds

    def clock(self):
        return self.now

    def wall(self):
        return WALL0 + self.now

    def health(self, url, timeout):
        cur = self.current()
        if not cur or self.props()["ActiveState"] != "active":
            return None
        return self.health_fn(self.now - cur[1])

    def commands(self):
        return [a for a in self.calls if a[0].endswith("systemctl") and a[1] in ("restart", "start", "stop")]

    def vacuum(self):
        """journalctl --rotate && journalctl --vacuum-time=1s: every line written so far is gone."""
        self.journal = [entry for entry in self.journal if entry["_t"] > self.now]


def runner(host, **kw):
    kw.setdefault("timeout", 1800)
    return sr.ServiceRunner(Systemctl(host.run, "/usr/bin/systemctl"), host.run, "sglang-kimi.service",
                            journalctl="/usr/bin/journalctl", health=host.health, clock=host.clock, wall=host.wall,
                            sleep=host.sleep, **kw)


def test_restart_rides_through_a_slow_drain_with_one_restart():
    host = FakeHost([server_script(), server_script()], drain=25.0)
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert host.commands() == [["/usr/bin/systemctl", "restart", "--no-block", "sglang-kimi.service"]]
    assert res["changed"] is True and res["action"] == "restart"
    assert res["previous_invocation_id"] == "%032x" % 1
    assert res["invocation_id"] == "%032x" % 2
    assert res["timeline"]["stopping"] == pytest.approx(25.0, abs=0.6)
    assert res["timeline"]["loading"] == pytest.approx(2.8, abs=0.1)
    assert res["timeline"]["warming_up"] == pytest.approx(1.0, abs=0.6)
    assert res["hicache"]["ranks_seen"] == list(range(8))
    assert res["hicache"]["host_pool_gb_total"] == pytest.approx(179.12)
    assert res["kv_cache"]["tokens_per_rank"] == 159277
    assert res["ready_line"] == READY
    # detection: returned within one poll interval of the ready line
    assert host.now - (25.0 + 4.0) <= 0.5 + 1e-6


def test_restart_joins_a_restart_already_in_flight():
    host = FakeHost([server_script(), server_script()], drain=10.0)
    host.restart()                      # someone else's restart: the unit drains
    host.external_job = "restart"
    host.now = 1.0
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert host.commands() == []
    assert res["action"] == "join" and res["changed"] is False
    assert res["invocation_id"] == "%032x" % 2


@pytest.mark.parametrize("state", ["restarted", "started"])
def test_start_is_queued_at_once_behind_a_stop_in_flight(state):
    """A module that dies while the stop drains must not leave the unit down: the start is queued in systemd
    at once (old code waited for the stop to end before sending it)."""
    host = FakeHost([server_script(), server_script()], drain=8.0)
    host.restart()
    host.pending = None                 # a plain stop: nothing starts afterwards
    host.external_job = "stop"
    host.now = 0.5
    sent_at = []
    original_run = host.run

    def run(argv, **kw):
        if argv[0].endswith("systemctl") and argv[1] == "start":
            sent_at.append(host.now)
        return original_run(argv, **kw)
    host.run = run
    ok, res = runner(host, state=state).execute()
    assert ok, res.get("msg")
    assert [c[1] for c in host.commands()] == ["start"]
    assert res["action"] == "start_after_stop"
    assert sent_at == [0.5]             # at once, not after the 8 s drain
    assert res["invocation_id"] == "%032x" % 2


def test_hicache_lines_only_in_the_previous_invocation_fail():
    host = FakeHost([server_script(), server_script(hicache_ranks=[])])
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "0 of 8" in res["msg"] and "TP0" in res["msg"] and "TP7" in res["msg"]
    assert res["hicache"]["ranks_seen"] == []
    # the old invocation's lines were never read
    journal_calls = [c for c in host.calls if c[0].endswith("journalctl")]
    # service lines are read for the new invocation; of the old one only systemd's messages and, for the stop
    # report's ending, its last lines (a bounded tail, never fed to the new invocation's reader)
    old_reads = [c for c in journal_calls if "_SYSTEMD_INVOCATION_ID=%032x" % 1 in c]
    assert all("--lines=%d" % sr.STOP_SERVICE_TAIL in c and "INVOCATION_ID=%032x" % 1 not in c for c in old_reads)
    assert len(old_reads) == 1


def test_seven_of_eight_ranks_fail_naming_the_missing_rank():
    host = FakeHost([server_script(), server_script(hicache_ranks=range(7))])
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "7 of 8" in res["msg"] and "TP7" in res["msg"]
    assert res["hicache"]["ranks_missing"] == [7]


def test_ranks_and_hicache_options_override_exec_start():
    host = FakeHost([server_script(), server_script(tp=8, hicache_ranks=range(4))])
    ok, res = runner(host, state="restarted", ranks=4).execute()
    assert ok, res.get("msg")
    host = FakeHost([server_script(), server_script(hicache_ranks=[])])
    ok, res = runner(host, state="restarted", hicache=False).execute()
    assert ok, res.get("msg")


def test_host_memory_text_fails_fast_and_quotes_the_line():
    fatal = ("ValueError: Not enough host memory available. Requesting 41.70 GB but only have 30.02 GB free. "
             "Please reduce the size of the hierarchical cache.")
    host = FakeHost([server_script(), server_script(fatal=fatal, exit_at=1.7, ready=False)], drain=2.0)
    ok, res = runner(host, state="restarted", timeout=1800).execute()
    assert not ok
    assert fatal in res["msg"]
    assert host.now < 10
    assert any("Received sigquit" in line for line in res["journal_tail"])
    assert res["phase"] == "loading"


def test_fatal_line_failure_waits_for_the_dying_process_last_lines():
    """On a busy host SGLang's main process logs "Received sigquit ..." and exits seconds after the rank's
    exception: the failure's journal tail still ends with it (a fixed 0.3 s settle missed it), and it does not
    wait longer than the process takes."""
    fatal = "ValueError: Not enough host memory available. Requesting 41.70 GB but only have 30.02 GB free."
    slow = server_script(fatal=fatal, exit_at=4.6, ready=False)
    slow["lines"] = [(4.5 if "Received sigquit" in line else t, line) for t, line in slow["lines"]]
    host = FakeHost([server_script(), slow], drain=2.0)
    ok, res = runner(host, state="restarted", timeout=1800).execute()
    assert not ok
    assert fatal in res["msg"]
    assert any("Received sigquit" in line for line in res["journal_tail"])
    assert host.now < 2.0 + 4.6 + 3


def test_fatal_line_of_a_process_that_does_not_exit_fails_within_the_settle_bound():
    fatal = "ValueError: Not enough host memory available. Requesting 41.70 GB but only have 30.02 GB free."
    hung = server_script(fatal=fatal, ready=False)
    hung["lines"] = [(t, line) for t, line in hung["lines"] if "Received sigquit" not in line]
    host = FakeHost([server_script(), hung], drain=2.0)
    ok, res = runner(host, state="restarted", timeout=1800).execute()
    assert not ok
    assert fatal in res["msg"]
    assert host.now < 2.0 + 1.5 + 10.0 + 3


def test_crash_loop_under_restart_on_failure_reports_nrestarts():
    host = FakeHost([server_script()] + [server_script(exit_at=0.3, ready=False)] * 5, restart_policy="on-failure",
                    restart_sec=1.0)
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "crash loop" in res["msg"] and "NRestarts grew from 0 to 1" in res["msg"]
    assert res["n_restarts"] == 1
    assert host.now < 10


def test_main_process_gone_without_restart_policy():
    host = FakeHost([server_script(), server_script(exit_at=1.2, ready=False)])
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "failed" in res["msg"]
    assert host.now < 5


def test_ready_line_but_health_503_keeps_waiting_then_succeeds():
    host = FakeHost([server_script(), server_script()], health=lambda age: 200 if age > 14.0 else 503)
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert res["health_status"] == 200
    assert 14.0 <= host.now <= 15.0
    assert res["timeline"]["warming_up"] >= 10


def test_deadline_names_the_phase():
    host = FakeHost([server_script(), server_script()], drain=100.0)
    ok, res = runner(host, state="restarted", timeout=30).execute()
    assert not ok
    assert res["msg"].startswith("timeout after 30 s while stopping (invocation %032x" % 1)
    host = FakeHost([server_script(), server_script()], health=lambda age: 503)
    ok, res = runner(host, state="restarted", timeout=20, health_url="http://h/health").execute()
    assert not ok
    assert "warming up" in res["msg"] and "answered 503" in res["msg"]


def test_verified_on_a_healthy_unit_changes_nothing():
    host = FakeHost([server_script()])
    ok, res = runner(host, state="verified", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert res["changed"] is False and host.commands() == []
    assert res["invocation_id"] == res["previous_invocation_id"] == "%032x" % 1
    assert res["hicache"]["ranks_seen"] == list(range(8))
    assert res["timeline"]["loading"] == pytest.approx(2.8)


def test_verified_on_a_stopped_unit_fails_without_acting():
    host = FakeHost([], active=False)
    ok, res = runner(host, state="verified").execute()
    assert not ok and "not running" in res["msg"] and host.commands() == []


def test_started_on_active_unit_only_verifies_and_on_stopped_unit_starts():
    host = FakeHost([server_script()])
    ok, res = runner(host, state="started").execute()
    assert ok and res["changed"] is False and host.commands() == []
    host = FakeHost([server_script()], active=False)
    ok, res = runner(host, state="started").execute()
    assert ok, res.get("msg")
    assert res["changed"] is True and [c[1] for c in host.commands()] == ["start"]


def test_check_mode_changes_nothing_and_says_what_it_would_do():
    host = FakeHost([server_script(), server_script()], drain=5.0)
    ok, res = runner(host, state="restarted", check_mode=True).execute()
    assert ok
    assert host.commands() == []
    assert res["changed"] is True and res["action"] == "restart"
    assert "would restart" in res["msg"]
    assert host.now == 0.0


def test_expect_pattern_missing_fails_after_the_grace():
    host = FakeHost([server_script(), server_script()])
    ok, res = runner(host, state="restarted", expect=["Spec v2 is enabled"]).execute()
    assert not ok and "Spec v2 is enabled" in res["msg"]
    host = FakeHost([server_script(), server_script()])
    ok, res = runner(host, state="restarted", expect=[r"Allocating 22\.39 GB"]).execute()
    assert ok and r"Allocating 22\.39 GB" in res["matched"]


def test_extra_fail_pattern_is_added_to_the_defaults():
    script = server_script()
    script["lines"].insert(1, (0.5, "[%s] Overlap scheduler is disabled when spec v2 is off" % STAMP))
    host = FakeHost([server_script(), script])
    ok, res = runner(host, state="restarted", extra_fail_patterns=["Overlap scheduler is disabled"]).execute()
    assert not ok and "Overlap scheduler is disabled when spec v2 is off" in res["msg"]


def test_bad_regex_fails_before_any_command():
    host = FakeHost([server_script()])
    with pytest.raises(ValueError):
        runner(host, state="restarted", extra_fail_patterns=["(unclosed"])
    assert host.calls == []


def test_journal_reads_are_incremental():
    host = FakeHost([server_script(), server_script()], drain=5.0)
    ok, res = runner(host, state="restarted").execute()
    assert ok
    journal_calls = [c for c in host.calls if c[0].endswith("journalctl") and
                     "_SYSTEMD_INVOCATION_ID=%032x" % 2 in c]
    assert len(journal_calls) > 3
    assert not any(a.startswith("--after-cursor") for a in journal_calls[0])
    assert all(any(a.startswith("--after-cursor") for a in c) for c in journal_calls[-2:])
    # every entry of the invocation was read exactly once
    new_inv = "%032x" % 2
    expected = len([e for e in host.journal if new_inv in (e.get("_SYSTEMD_INVOCATION_ID"), e.get("INVOCATION_ID"))])
    assert res["journal_entries_read"] == expected


# ---- day 200: a server whose start-up lines left the journal (issue 12) --------------------------------------
def test_verified_after_the_journal_was_vacuumed_uses_the_state_file(tmp_path):
    """Old code: 'timeout after 60 s while starting' on a healthy server once its start-up lines were gone."""
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([server_script()])
    ok, first = runner(host, state="verified", health_url="http://x:1/health", state_store=store).execute()
    assert ok, first.get("msg")
    assert first["state_file"]["written"] is True
    # the record written says when (the copy the last-good manifest and the deployment record carry: issue 47)
    assert first["state_file"]["verified_at"] == store.read("sglang-kimi.service")["verified_at"]
    assert oct(os.stat(first["state_file"]["path"]).st_mode & 0o777) == "0o600"
    assert oct(os.stat(str(tmp_path / "state")).st_mode & 0o777) == "0o700"
    # a second verify of the same start rewrites nothing (idempotent)
    again = runner(host, state="verified", state_store=store).execute()[1]
    assert again["state_file"]["written"] is False
    assert again["state_file"]["verified_at"] == store.read("sglang-kimi.service")["verified_at"]
    host.now += 3600.0
    host.vacuum()
    ok, res = runner(host, state="verified", health_url="http://x:1/health", state_store=store,
                     timeout=60).execute()
    assert ok, res.get("msg")
    assert res["changed"] is False and host.commands() == []
    assert res["sources"]["start_up"].startswith("state_file")
    assert res["sources"]["unit"] == "live" and res["sources"]["health"] == "live"
    assert res["hicache"]["ranks_seen"] == list(range(8))
    assert res["kv_cache"]["tokens_per_rank"] == 159277
    assert res["ready_line"] == READY
    assert res["health_status"] == 200
    assert host.now - 3600.0 < 5          # no waiting out a timeout


def test_vacuumed_and_never_verified_is_reported_as_such_not_as_a_timeout(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([server_script()])
    host.now += 3600.0
    host.vacuum()
    ok, res = runner(host, state="verified", state_store=store, timeout=60).execute()
    assert not ok
    assert "never verified" in res["msg"] and "no longer in the journal" in res["msg"]
    assert "timeout" not in res["msg"]
    assert host.now - 3600.0 < 1


def test_state_file_of_another_invocation_does_not_count(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([server_script(), server_script()], drain=1.0)
    ok, res = runner(host, state="verified", state_store=store).execute()
    assert ok
    host.restart()            # someone restarts it by hand; the new invocation is never verified
    host.now += 3600.0
    host.props()
    host.vacuum()
    ok, res = runner(host, state="verified", state_store=store, timeout=60).execute()
    assert not ok and "never verified" in res["msg"] and "%032x" % 1 in res["msg"]


def test_state_file_verify_fails_when_the_main_process_changed_or_fatal_text_is_held(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([server_script()])
    assert runner(host, state="verified", state_store=store).execute()[0]
    host.now += 3600.0
    host.vacuum()
    record = store.read("sglang-kimi.service")
    record["main_pid"] = 4242
    store.write("sglang-kimi.service", record)
    ok, res = runner(host, state="verified", state_store=store, timeout=60).execute()
    assert not ok and "MainPID" in res["msg"]
    record["main_pid"] = 201
    store.write("sglang-kimi.service", record)
    host.journal.append({"MESSAGE": "[%s TP3] Scheduler hit an exception: Traceback (most recent call last):" % STAMP,
                         "_SYSTEMD_INVOCATION_ID": "%032x" % 1, "_t": host.now})
    ok, res = runner(host, state="verified", state_store=store, timeout=60).execute()
    assert not ok and "Scheduler hit an exception" in res["msg"]


def test_a_state_file_that_cannot_be_written_is_said_not_silent(tmp_path):
    """Issue 22: a full /var/lib left the state file unwritten without a word; the start itself stays verified."""
    class FullDisk(StateFile):
        def write(self, unit, record):
            raise OSError(28, "No space left on device")

    host = FakeHost([server_script()])
    ok, res = runner(host, state="verified", health_url="http://x:1/health",
                     state_store=FullDisk(str(tmp_path / "state"))).execute()
    assert ok, res.get("msg")
    assert res["state_file"]["written"] is False and "No space left" in res["state_file"]["error"]
    assert any("could not be written" in n and "No space left" in n and res["invocation_id"] in n
               for n in res["notices"])


def test_restart_writes_the_state_file_and_check_mode_does_not(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([server_script(), server_script()], drain=2.0)
    ok, res = runner(host, state="verified", state_store=store, check_mode=True).execute()
    assert ok and store.read("sglang-kimi.service") is None
    ok, res = runner(host, state="restarted", state_store=store).execute()
    assert ok, res.get("msg")
    record = store.read("sglang-kimi.service")
    assert record["invocation_id"] == res["invocation_id"] == "%032x" % 2
    assert record["hicache"]["ranks_seen"] == list(range(8))
    assert record["verified_by"] == "restart"


def test_first_read_of_a_long_invocation_is_bounded(monkeypatch):
    """Millions of request lines: the first read takes a bounded head and a bounded tail."""
    monkeypatch.setattr(sr, "HEAD_LIMIT", 50)
    monkeypatch.setattr(sr, "TAIL_SCAN", 20)
    host = FakeHost([server_script()])
    for index in range(500):
        host.journal.append({"MESSAGE": '[%s] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK' % STAMP,
                             "_SYSTEMD_INVOCATION_ID": "%032x" % 1, "_t": -20.0 + index * 0.01})
    ok, res = runner(host, state="verified").execute()
    assert ok, res.get("msg")
    assert res["journal_scan"] == {"head_entries": 50, "truncated": True, "tail_entries": 20}
    assert res["journal_entries_read"] <= 70


def test_stop_killed_by_systemd_is_reported_and_named_in_a_failure():
    fatal = ("ValueError: Not enough host memory available. Requesting 22.39 GB but only have 8.12 GB free. "
             "Please reduce the size of the hierarchical cache.")
    host = FakeHost([server_script(), server_script(fatal=fatal, exit_at=1.7, ready=False)], drain=90.0,
                    timeout_stop=60.0)
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert res["stop"]["killed"] is True and res["stop"]["result"] == "timeout"
    assert res["stop"]["seconds"] == pytest.approx(60.2, abs=0.6)
    assert "State 'stop-sigterm' timed out. Killing." in res["stop"]["systemd_lines"][0]
    assert "previous stop: result=timeout, killed=yes" in res["msg"]
    assert "pinned host memory" in res["msg"]
    assert res["stop"]["ending"] == "timeout_kill" and "TimeoutStopSec" in res["msg"]


def real_stop(host):
    """The host's restart ends the old invocation as the real SGLang 0.5.17 did under systemd 252 (collection run,
    invocation stopped for the ratio 3 change): its own lines from SIGTERM to kill_process_tree, then systemd's."""
    real = journal_invocations()[4]
    service = real["service"][next(i for i, line in enumerate(real["service"]) if "SIGTERM received" in line):]
    original = host.restart

    def restart():
        inv = host.current()[0]
        original()
        for line in service:
            host.journal.append({"MESSAGE": line, "_SYSTEMD_INVOCATION_ID": inv, "_t": host.stop_until - 0.2})
        for line in real["manager"][1:]:
            host.journal.append({"MESSAGE": line, "INVOCATION_ID": inv, "_t": host.stop_until})
    host.restart = restart
    return host


def test_sglangs_own_sigkill_after_sigterm_is_its_ending_not_a_crash_nor_a_kill():
    """Issue 40: the real server's stop, exit 137 after SIGTERM with SGLang's own kill_process_tree line."""
    fatal = ("ValueError: Not enough host memory available. Requesting 22.39 GB but only have 8.12 GB free. "
             "Please reduce the size of the hierarchical cache.")
    host = real_stop(FakeHost([server_script(), server_script(fatal=fatal, exit_at=1.7, ready=False)], drain=6.0,
                              timeout_stop=60.0))
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    stop = res["stop"]
    assert stop["ending"] == "sglang_sigkill" and stop["killed"] is False and stop["result"] == "signal"
    assert stop["exit_status"] == 137 and stop["main_exit"] == "code=killed, status=9"
    assert stop["sglang_lines"][0].endswith("SIGTERM received. signum=None frame=None. Draining requests and "
                                            "shutting down...")
    assert stop["sglang_lines"][1].endswith("kill_process_tree called: parent_pid=76, include_parent=True, pid=76")
    assert "killed=no" in res["msg"] and "SGLang's own ending" in res["msg"] and "pinned host memory" not in res["msg"]


def test_the_real_endings_are_told_apart():
    invs = journal_invocations()
    ending, facts = sr.stop_ending(invs[4]["manager"], invs[4]["service"])
    assert ending == "sglang_sigkill" and facts["exit_status"] == 137 and "leftovers_killed" not in facts
    # a start that died (a child's SIGQUIT: no ninja) and SGLang killed its tree: systemd swept what was left
    ending, facts = sr.stop_ending(invs[0]["manager"], invs[0]["service"])
    assert ending == "sglang_crash" and len(facts["leftovers_killed"]) == 2
    # the same sweep after a stop is not systemd's TimeoutStopSec kill (old code: killed=yes from the sweep lines)
    stopping = ["Stopping sglang-kimi.service - SGLang (real 0.5.17, tiny model) with HiCache..."]
    ending, facts = sr.stop_ending(invs[0]["manager"][:1] + stopping + invs[0]["manager"][1:], invs[0]["service"])
    assert ending == "sglang_sigkill" and facts["leftovers_killed"][0].endswith(
        "Killing process 271 (cuda00001800007) with signal SIGKILL.")
    # systemd's TimeoutStopSec kill, systemd 252's own lines, whatever SGLang printed before it
    timeout = ["sglang-kimi.service: State 'stop-sigterm' timed out. Killing.",
               "sglang-kimi.service: Killing process 101 (python3) with signal SIGKILL.",
               "sglang-kimi.service: Main process exited, code=killed, status=9/KILL",
               "sglang-kimi.service: Failed with result 'timeout'."]
    assert sr.stop_ending(stopping + timeout, invs[4]["service"])[0] == "timeout_kill"
    # an OOM kill, a plain SIGKILL from elsewhere, a clean exit
    oom = ["sglang-kimi.service: A process of this unit has been killed by the OOM killer.",
           "sglang-kimi.service: Main process exited, code=killed, status=9/KILL",
           "sglang-kimi.service: Failed with result 'oom-kill'."]
    assert sr.stop_ending(stopping + oom, invs[4]["service"])[0] == "oom_kill"
    assert sr.stop_ending(stopping + timeout[2:3] + ["sglang-kimi.service: Failed with result 'signal'."],
                          [])[0] == "signal"
    assert sr.stop_ending(invs[1]["manager"], invs[1]["service"])[0] == "exited"
    # 0.5.9 .. 0.5.12 print no kill_process_tree line: their SIGTERM line, then the SIGKILL exit, is the same end
    no_tree = [line for line in invs[4]["service"] if "kill_process_tree" not in line]
    ending, facts = sr.stop_ending(invs[4]["manager"], no_tree)
    assert ending == "sglang_sigkill" and facts["exit_status"] == 137 and len(facts["sglang_lines"]) == 1
    assert sr.stop_ending(invs[4]["manager"], [])[0] == "signal"      # no line of SGLang's: not told as its own


def test_the_sweep_after_sglangs_own_sigkill_is_not_reported_as_killed():
    """Old code: systemd's 'Killing process N (...) with signal SIGKILL' of what SGLang's own SIGKILL left was read
    as the TimeoutStopSec kill (killed=yes, and the next start's failure blamed on the stop)."""
    invs = journal_invocations()
    host = FakeHost([server_script(), server_script()], drain=4.0, timeout_stop=60.0)
    original = host.restart

    def restart():
        inv = host.current()[0]
        original()
        host.journal.append({"MESSAGE": invs[4]["service"][-1], "_SYSTEMD_INVOCATION_ID": inv,
                             "_t": host.stop_until - 0.2})
        for line in ["Stopping sglang-kimi.service - SGLang (real 0.5.17, tiny model) with HiCache..."] + \
                invs[0]["manager"][1:]:
            host.journal.append({"MESSAGE": line, "INVOCATION_ID": inv, "_t": host.stop_until})
    host.restart = restart
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["stop"]["killed"] is False and res["stop"]["ending"] == "sglang_sigkill"
    assert len(res["stop"]["leftovers_killed"]) == 2 and "systemd_lines" not in res["stop"]


def test_stop_that_ends_by_itself_is_not_called_killed():
    host = FakeHost([server_script(), server_script()], drain=5.0, timeout_stop=60.0)
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["stop"]["killed"] is False
    assert res["stop"]["seconds"] == pytest.approx(5.0, abs=0.6)


# ---- never leave the server down, never crash (issue 12) -------------------------------------------------------
@pytest.mark.parametrize("code", [401, 403, 404])
def test_health_401_403_404_fail_at_once(code):
    host = FakeHost([server_script(), server_script()], drain=1.0, health=lambda age: code)
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health", timeout=600).execute()
    assert not ok
    assert "answered HTTP %d" % code in res["msg"] and "fix health_url" in res["msg"]
    assert host.now < 15          # not the 600 s deadline


def test_a_non_http_listener_is_no_answer_not_a_traceback():
    import socket
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def serve():
        conn, _addr = server.accept()
        conn.recv(1024)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        conn.close()
    thread = threading.Thread(target=serve)
    thread.start()
    assert sr.http_status("http://127.0.0.1:%d/health" % port, 2.0) is None
    thread.join(5)
    server.close()


def test_an_unexpected_error_is_a_failure_with_phase_invocation_and_tail():
    def broken(url, timeout):
        raise RuntimeError("boom")
    host = FakeHost([server_script(), server_script()], drain=1.0)
    run = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health")
    run.health = broken
    ok, res = run.execute()
    assert not ok
    assert "unexpected error while warming up" in res["msg"] and "RuntimeError: boom" in res["msg"]
    assert res["phase"].startswith("warming up")
    assert res["invocation_id"] == "%032x" % 2 and res["journal_tail"]
    assert "Traceback" in res["exception"]


def test_need_daemon_reload_reloads_first_and_says_so():
    host = FakeHost([server_script(), server_script()], drain=1.0)
    original_props = host.props
    host.props = lambda: dict(original_props(), NeedDaemonReload="yes" if not host_reloaded else "no")
    host_reloaded = []
    original_run = host.run

    def run(argv, **kw):
        if argv[0].endswith("systemctl") and argv[1] == "daemon-reload":
            host_reloaded.append(True)
            host.calls.append(argv)
            return 0, "", ""
        return original_run(argv, **kw)
    host.run = run
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["commands"][:2] == ["/usr/bin/systemctl daemon-reload",
                                   "/usr/bin/systemctl restart --no-block sglang-kimi.service"]
    assert res["daemon_reload"] is True
    assert any("NeedDaemonReload=yes" in notice for notice in res["notices"])


def test_transient_systemctl_errors_are_retried_and_hung_calls_time_out():
    host = FakeHost([server_script()])
    original_run = host.run
    failures = [(1, "", "Failed to connect to bus: Connection refused"), (124, "", "systemctl timed out after 30 s")]
    timeouts = []

    def flaky(argv, **kw):
        timeouts.append(kw.get("timeout"))
        if argv[0].endswith("systemctl") and failures:
            return failures.pop(0)
        return original_run(argv, **kw)
    host.run = flaky
    ok, res = runner(host, state="verified").execute()
    assert ok, res.get("msg")
    assert res["systemctl_retries"] == 2
    assert all(timeout for timeout in timeouts)      # every call has a time limit


def test_proc_run_times_out_and_caps_lines():
    from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc
    rc, _out, err = _proc.run(["sleep", "5"], timeout=0.3)
    assert rc == 124 and "timed out" in err
    answer = _proc.run(["seq", "1", "1000000"], timeout=10, max_lines=5)
    assert answer[1].split() == ["1", "2", "3", "4", "5"] and answer.truncated


def test_secrets_are_masked_in_every_returned_line():
    fatal = "ValueError: Not enough host memory available. Requesting 22.39 GB but only have 8.12 GB free."
    script = server_script(fatal=fatal, exit_at=1.7, ready=False)
    script["lines"].insert(0, (0.1, "[%s] server_args=ServerArgs(api_key='sk-live-123', admin_api_key='adm-9')"
                                    % STAMP))
    script["lines"].insert(1, (0.15, "[%s TP0] Unauthorized key sk-live-123 Not enough host memory available. "
                                     "Requesting 1 GB but only have 0 GB free" % STAMP))
    host = FakeHost([server_script(), script], drain=1.0,
                    exec_start="/venv/bin/python -m sglang.launch_server --tp 8 --api-key sk-live-123")
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    text = json.dumps(res)
    assert "sk-live-123" not in text and "adm-9" not in text
    assert "********" in res["msg"]


def test_log_level_warning_without_health_url_is_refused_before_acting():
    host = FakeHost([server_script(), server_script()],
                    exec_start="/venv/bin/python -m sglang.launch_server --tp 8 --log-level warning")
    ok, res = runner(host, state="restarted").execute()
    assert not ok and "--log-level warning" in res["msg"] and "set health_url" in res["msg"]
    assert host.commands() == []


def test_log_level_warning_is_verified_over_http():
    quiet = {"lines": [], "exit_at": None}          # no info line at all
    host = FakeHost([server_script(), quiet], drain=1.0,
                    exec_start="/venv/bin/python -m sglang.launch_server --tp 8 --log-level warning "
                               "--enable-hierarchical-cache")
    asked = []

    def health(url, timeout):
        asked.append(url)
        return 200
    run = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health")
    run.health = health
    ok, res = run.execute()
    assert ok, res.get("msg")
    assert "http://127.0.0.1:30000/get_server_info" in asked
    assert "get_server_info" in res["sources"]["ready"]
    assert any("--log-level warning" in notice for notice in res["notices"])


def test_a_dead_process_last_lines_reach_the_tail_though_the_journal_indexes_them_late():
    """molecule/install on a loaded machine: the new venv lacks the server's module, the process exits at once,
    and its stderr ("No module named ...", through journald's stream) was indexed after systemd's own "Main
    process exited": a single 0.3 s settle failed with a tail of systemd lines only. The runner reads on until the
    journal is quiet (SETTLE_QUIET s), at most SETTLE_FATAL_MAX s."""
    late = server_script(exit_at=0.3, ready=False)
    late["late"] = [(1.8, "ModuleNotFoundError: No module named 'sglang_standin'")]
    host = FakeHost([server_script(), late], drain=2.0)
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert any("No module named 'sglang_standin'" in line for line in res["journal_tail"]), res["journal_tail"]
    assert host.now < 2.0 + 0.3 + 10.0 + 3


# ---------------------------------------------------------------------------------------------------- hybrid models
class _Values(dict):
    def __missing__(self, key):
        return 1


def _fill(release, family, want, **values):
    """SGLang's text of that family in that release (the table taken from its wheel), filled in."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES
    import string
    template = next(t for t in RELEASES[release]["texts"][family] if want in t)
    return string.Formatter().vformat(template, (), _Values(values))


def hybrid_script(release="0.5.9", tp=8, mamba_ranks=None, host_ranks=None):
    """A hybrid model's start (Qwen3.5): KV pool and Mamba state pool per rank, the HiCache Mamba host pool."""
    script = server_script(tp=tp, hicache_ranks=[])
    extra = []
    for rank in range(tp) if mamba_ranks is None else mamba_ranks:
        text = _fill(release, "mamba_pool", "ssm_state size: {_2:.2f}GB ", tokens=412, _1=0.5, _2=9.75)
        extra.append((1.1, "[%s TP%d] %s" % (STAMP, rank, text)))
    for rank in host_ranks or []:
        text = _fill(release, "hicache_mamba_host_pool", "Mamba", gb=20.5, tokens=824, layout="page_first")
        extra.append((2.0, "[%s TP%d] %s" % (STAMP, rank, text)))
    script["lines"] = sorted(script["lines"] + extra, key=lambda item: item[0])
    return script


def _hybrid_model(tmp_path):
    model = tmp_path / "qwen"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                                                   "text_config": {"full_attention_interval": 4}}))
    return str(model)


def test_a_hybrid_model_is_verified_by_its_mamba_pool_on_every_rank(tmp_path):
    """issue 24: the model's config.json (ExecStart's --model-path) says hybrid; each rank's Mamba pool line counts."""
    model = _hybrid_model(tmp_path)
    exec_start = "/opt/sglang/venv/bin/python -m sglang.launch_server --model-path %s --tp 8" % model
    host = FakeHost([server_script(), hybrid_script()], exec_start=exec_start)
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["hybrid"]["ranks_seen"] == list(range(8)) and res["hybrid"]["state_slots_per_rank"] == 412
    # TP5 printed no Mamba pool: named, with the family and the release's text
    host = FakeHost([server_script(), hybrid_script(mamba_ranks=[0, 1, 2, 3, 4, 6, 7])], exec_start=exec_start)
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert res["msg"].startswith("hybrid model's Mamba state pool not initialised in invocation ")
    assert "7 of 8 Mamba pool lines (text family mamba_pool: 'Mamba Cache is allocated. max_mamba_cache_size: " in res["msg"]
    assert "ranks missing: TP5 [phase: warming up]" in res["msg"]
    # a model that is not hybrid (Kimi) needs none; hybrid=False overrides config.json
    ok, res = runner(FakeHost([server_script(), server_script(hicache_ranks=[])],
                              exec_start=exec_start.replace(model, "/models/none")), state="restarted").execute()
    assert ok, res.get("msg")
    assert "hybrid" not in res
    ok, res = runner(FakeHost([server_script(), hybrid_script(mamba_ranks=[])], exec_start=exec_start),
                     state="restarted", hybrid=False).execute()
    assert ok, res.get("msg")


def test_a_hybrid_model_with_hicache_on_0_5_23_needs_the_mamba_host_pool_on_every_rank(tmp_path):
    model = _hybrid_model(tmp_path)
    exec_start = ("/opt/sglang/venv/bin/python -m sglang.launch_server --model-path %s --tp 2 "
                  "--enable-hierarchical-cache --hicache-ratio 2" % model)

    def script(host_ranks):
        base = hybrid_script(release="0.5.23", tp=2, host_ranks=host_ranks)
        text = _fill("0.5.23", "hicache_host_pool", "hierarchical KV host pool", tokens=318554, gb=20.85, pool="kv")
        kv = [(2.0, "[%s TP%d] %s" % (STAMP, rank, text)) for rank in range(2)]
        base["lines"] = sorted(base["lines"] + kv, key=lambda item: item[0])
        return base

    host = FakeHost([server_script(tp=2), script([0, 1])], exec_start=exec_start, release="0.5.23")
    ok, res = runner(host, state="restarted").execute()
    assert ok, res.get("msg")
    assert res["hybrid"]["host_pool_ranks_seen"] == [0, 1] and res["hybrid"]["host_pool_gb_per_rank"] == 20.5
    host = FakeHost([server_script(tp=2), script([0])], exec_start=exec_start, release="0.5.23")
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "HiCache of the hybrid model's Mamba state not initialised" in res["msg"]
    assert "1 of 2 host pool lines (text family hicache_mamba_host_pool: 'Allocating {gb:.2f} GB host memory for " \
        "hierarchical Mamba cache" in res["msg"]


# ---- a node of a server over several hosts (issue 25) -------------------------------------------------------------
NODE_EXEC = ("/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /m --nnodes 2 --node-rank %d "
             "--dist-init-addr gpu-a1:50000 --tp 16 --enable-hierarchical-cache --hicache-ratio 2")


def node_script(ranks, hicache_ranks=None, ready=False, load=3.0):
    """One node's start-up: its own global TP ranks' lines (SGLang's scheduler prefix), node 0 alone serves the API
    and prints the ready line; the others print nothing after their schedulers are up."""
    lines = [(0.2, "[%s] server_args=ServerArgs(model_path='/m', tp_size=16, nnodes=2)" % STAMP)]
    for rank in ranks:
        lines.append((1.0, "[%s TP%d] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" % (STAMP, rank)))
    for rank in (ranks if hicache_ranks is None else hicache_ranks):
        lines.append((load - 0.5, "[%s TP%d] Allocating 22.39 GB host memory for hierarchical KV cache."
                      % (STAMP, rank)))
    if ready:
        lines.append((load, "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)"))
        lines.append((load + 1.0, READY))
    return {"lines": lines, "exit_at": None}


def _health_after(seconds):
    """The node's health server: nothing listens before its schedulers are up, then a constant 200."""
    return lambda age: 200 if age >= seconds else None


def test_a_follower_node_is_proven_by_its_own_ranks_and_its_health_server():
    host = FakeHost([node_script(range(8, 16)), node_script(range(8, 16))], exec_start=NODE_EXEC % 1,
                    health=_health_after(3.0))
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert res["node"] == {"nnodes": 2, "node_rank": 1, "tp_ranks": list(range(8, 16)), "ranks_expected": 8}
    assert res["hicache"]["ranks_seen"] == list(range(8, 16))
    assert res["hicache"]["ranks_missing"] == []
    assert res["ready_line"] is None
    assert res["invocation_id"] == "%032x" % 2
    assert host.now >= 3.0              # not before its health server answered


def test_a_follower_node_missing_a_rank_of_its_own_fails_naming_it():
    host = FakeHost([node_script(range(8, 16)), node_script(range(8, 16), hicache_ranks=range(8, 15))],
                    exec_start=NODE_EXEC % 1, health=_health_after(3.0))
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert not ok
    assert "7 of 8 host-allocation lines" in res["msg"] and "ranks missing: TP15" in res["msg"]


def test_a_follower_node_with_the_ranks_of_node_0_fails():
    """Lines of ranks 0-7 on node 1 (a node rank typed wrong by hand, the old single-host unit): not its ranks."""
    host = FakeHost([node_script(range(8, 16)), node_script(range(8))], exec_start=NODE_EXEC % 1,
                    health=_health_after(3.0))
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert not ok
    assert "ranks missing: TP8, TP9" in res["msg"]


def test_a_follower_node_needs_a_health_url_and_nothing_is_queued_without_it():
    host = FakeHost([node_script(range(8, 16))], exec_start=NODE_EXEC % 1, health=_health_after(3.0))
    ok, res = runner(host, state="restarted").execute()
    assert not ok
    assert "node 1 of 2" in res["msg"] and "set health_url" in res["msg"]
    assert host.commands() == []


def test_node_0_expects_its_own_ranks_and_the_ready_line():
    host = FakeHost([node_script(range(8), ready=True), node_script(range(8), ready=True)],
                    exec_start=NODE_EXEC % 0)
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert res["node"]["tp_ranks"] == list(range(8))
    assert res["hicache"]["ranks_seen"] == list(range(8))
    assert res["ready_line"] == READY


def test_a_verified_follower_is_recorded_and_verified_again_from_the_state_file(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = FakeHost([node_script(range(8, 16)), node_script(range(8, 16))], exec_start=NODE_EXEC % 1,
                    health=_health_after(3.0))
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health", state_store=store).execute()
    assert ok, res.get("msg")
    assert store.read("sglang-kimi.service")["invocation_id"] == res["invocation_id"]
    host.now += 60.0
    host.vacuum()                       # its start-up lines rotated away
    ok, again = runner(host, state="verified", health_url="http://127.0.0.1:30000/health", state_store=store).execute()
    assert ok, again.get("msg")
    assert again["sources"]["start_up"].startswith("state_file")
    assert again["hicache"]["ranks_seen"] == list(range(8, 16))


# ---- a server of a prefill/decode pair (issue 25) -----------------------------------------------------------------
PD_EXEC = ("/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /m --tp 8 --host 10.0.0.7 "
           "--disaggregation-mode %s")
BOOT_023 = "[%s] CommonKVBootstrapServer started successfully on 10.0.0.7:%d"


def pd_script(boot_line=None):
    """A 0.5.9 start-up (or with a 0.5.23 bootstrap line) of a PD server: the bootstrap server starts before the
    schedulers (the tokenizer manager's start_disagg_service)."""
    script = server_script()
    if boot_line:
        script["lines"].insert(1, (0.3, boot_line))
    return script


def pd_host(mode, scripts, bootstrap_after=None, exec_extra="", release="0.5.9"):
    """health of the API as usual; the bootstrap URL answers 200 from bootstrap_after seconds (None: never)."""
    host = FakeHost(scripts, exec_start=(PD_EXEC % mode) + exec_extra, release=release)
    api = host.health
    asked = []

    def health(url, timeout):
        asked.append(url)
        if "/health" in url and ":30000" not in url:
            cur = host.current()
            if bootstrap_after is None or not cur:
                return None
            return 200 if host.now - cur[1] >= bootstrap_after else None
        return api(url, timeout)
    host.health = health
    host.asked = asked
    return host


def test_a_prefill_server_is_ready_only_once_its_bootstrap_server_answers():
    host = pd_host("prefill", [pd_script(), pd_script()], bootstrap_after=6.0)
    ok, res = runner(host, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert ok, res.get("msg")
    assert res["disaggregation"]["mode"] == "prefill"
    assert res["disaggregation"]["bootstrap_port"] == 8998          # the release's default, from its wheel
    assert res["disaggregation"]["bootstrap_url"] == "http://10.0.0.7:8998/health"
    assert res["disaggregation"]["bootstrap_status"] == 200
    assert "http://10.0.0.7:8998/health" in host.asked
    assert host.now >= 6.0              # not at the ready line (4 s): when the bootstrap server answered


def test_a_prefill_server_whose_bootstrap_server_never_answers_fails_naming_it():
    host = pd_host("prefill", [pd_script(), pd_script()], bootstrap_after=None,
                   exec_extra=" --disaggregation-bootstrap-port 9100")
    ok, res = runner(host, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert not ok
    assert "http://10.0.0.7:9100/health" in res["msg"] and "a prefill server must also prove" in res["msg"]


def test_a_prefill_server_of_a_release_that_prints_the_bootstrap_line_needs_it_on_its_port():
    good = pd_host("prefill", [pd_script(), pd_script(BOOT_023 % (STAMP, 8998))], bootstrap_after=0.0,
                   release="0.5.23")
    ok, res = runner(good, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert ok, res.get("msg")
    assert res["disaggregation"]["bootstrap_line"].endswith("on 10.0.0.7:8998")
    missing = pd_host("prefill", [pd_script(), pd_script()], bootstrap_after=0.0, release="0.5.23")
    ok, res = runner(missing, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert not ok
    assert "CommonKVBootstrapServer started successfully" in res["msg"]
    other = pd_host("prefill", [pd_script(), pd_script(BOOT_023 % (STAMP, 8999))], bootstrap_after=0.0,
                    release="0.5.23")
    ok, res = runner(other, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert not ok
    assert "another port than --disaggregation-bootstrap-port 8998" in res["msg"]


def test_a_decode_server_has_no_bootstrap_server_to_prove():
    host = pd_host("decode", [pd_script(), pd_script()], bootstrap_after=None)
    ok, res = runner(host, state="restarted", health_url="http://10.0.0.7:30000/health").execute()
    assert ok, res.get("msg")
    assert res["disaggregation"] == {"mode": "decode"}
    assert not [url for url in host.asked if ":8998" in url]


def test_a_verified_prefill_server_is_verified_again_with_its_bootstrap_server_live(tmp_path):
    store = StateFile(str(tmp_path / "state"))
    host = pd_host("prefill", [pd_script(), pd_script(BOOT_023 % (STAMP, 8998))], bootstrap_after=0.0,
                   release="0.5.23")
    ok, res = runner(host, state="restarted", health_url="http://10.0.0.7:30000/health", state_store=store).execute()
    assert ok, res.get("msg")
    host.now += 60.0
    host.vacuum()                       # its start-up lines rotated away: the bootstrap line is in the state file
    ok, again = runner(host, state="verified", health_url="http://10.0.0.7:30000/health", state_store=store).execute()
    assert ok, again.get("msg")
    assert again["disaggregation"]["bootstrap_line"].endswith(":8998")
    assert again["sources"]["start_up"].startswith("state_file")


def test_an_unexpected_error_s_traceback_is_masked(tmp_path):
    """Issue 39 defect 10: the traceback of an unexpected error was returned as it was (result "exception"), with
    whatever secret the failing code had in its message. Now masked by the one rule, with the keys of the --config
    file SGLang reads known too."""
    secrets = tmp_path / "sglang-kimi.secrets.yaml"
    secrets.write_text("api-key: sk-tb-0523\nadmin-api-key: adm-tb-0523\n")
    exec_start = ("/opt/sglang/venv/bin/python /usr/local/lib/gpuserve-sglang/sglang_launch.py -m "
                  "sglang.launch_server --tp 8 --config " + str(secrets))

    def broken(url, timeout):
        raise RuntimeError("refused: headers={'Authorization': 'Bearer sk-tb-0523'} api_key='sk-tb-0523' adm-tb-0523")
    host = FakeHost([server_script(), server_script()], drain=1.0, exec_start=exec_start)
    run = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health")
    run.health = broken
    ok, res = run.execute()
    assert not ok and "Traceback" in res["exception"] and "RuntimeError: refused" in res["exception"]
    for key in ("sk-tb-0523", "adm-tb-0523"):
        assert key not in res["exception"] and key not in res["msg"]


def test_forged_journal_records_reach_neither_the_tail_nor_the_stop_report_nor_the_dropped_count():
    """Issue 41 defect 8: INVOCATION_ID=, OBJECT_SYSTEMD_INVOCATION_ID= and N_DROPPED= are fields any local user can
    send to journald (systemd-cat, logger --journald). Records tied to the invocation only by them reached the
    failure's journal tail, the stop report (a forged "status=9/KILL" made a clean stop "killed") and the
    dropped-lines count. journald's trusted fields (_PID, _COMM, _TRANSPORT) now decide."""
    host = FakeHost([server_script(), server_script(ready=False)], drain=1.0)
    old = "%032x" % 1
    forged = {"_PID": "4242", "_COMM": "python3", "_SYSTEMD_UNIT": "user@1000.service"}
    host.journal.append(dict(forged, MESSAGE="sglang-kimi.service: Main process exited, code=killed, status=9/KILL",
                             INVOCATION_ID=old, _t=0.5))
    new = "%032x" % 2
    host.journal.append(dict(forged, MESSAGE="FORGED tail line api_key='x'", INVOCATION_ID=new, _t=3.0))
    host.journal.append(dict(forged, MESSAGE="Suppressed 999999 messages from sglang-kimi.service", N_DROPPED="999999",
                             OBJECT_SYSTEMD_INVOCATION_ID=new, _t=3.0))
    ok, res = runner(host, state="restarted", timeout=60, health_url="http://127.0.0.1:30000/health").execute()
    assert not ok
    assert not any("FORGED" in line or "Suppressed" in line for line in res["journal_tail"])
    assert "journal_lines_dropped" not in res and "suppressed" not in res["msg"]
    assert res["stop"]["killed"] is False and "systemd_lines" not in res["stop"]


def test_a_follower_nodes_last_hicache_line_indexed_late_still_counts():
    """molecule multinode on a loaded machine: node 1's health server answered before journald had indexed its
    last rank's host-pool line (1.2 s later). Old code read once more after 0.3 s and failed "3 of 4 host-allocation
    lines, ranks missing: TP7"; the runner now reads on until the journal is quiet (SETTLE_QUIET s) first."""
    late = node_script(range(8, 16), hicache_ranks=range(8, 15))
    late["late"] = [(4.2, "[%s TP15] Allocating 22.39 GB host memory for hierarchical KV cache." % STAMP)]
    host = FakeHost([node_script(range(8, 16)), late], exec_start=NODE_EXEC % 1, health=_health_after(3.0))
    ok, res = runner(host, state="restarted", health_url="http://127.0.0.1:30000/health").execute()
    assert ok, res.get("msg")
    assert res["hicache"]["ranks_seen"] == list(range(8, 16))
