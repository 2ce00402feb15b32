# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart / start / verify an SGLang unit and decide readiness from ITS OWN invocation.

The state machine (see docs/sglang_service.md):

1. Read ``systemctl show`` (ActiveState, SubState, MainPID, InvocationID, NRestarts, Result, ExecStart, Job).
2. restarted: queue exactly one ``systemctl restart --no-block``, unless a stop/restart job is already in
   flight or the unit is deactivating: then wait for that instead of queueing another. started: start only
   when not active; when deactivating, wait for the stop, then start. verified: change nothing.
3. Phase ``stopping`` until the InvocationID differs from the one before; then ``starting`` (new
   invocation, no line yet), ``loading`` (lines), ``warming up`` (the HTTP server is up), until the ready
   line of THIS invocation (and HTTP 200 from health_url) with one HiCache allocation line per rank
   before it.
4. Fail fast: a fail pattern in this invocation (the line is quoted); the unit failed, entered
   auto-restart, NRestarts grew or the InvocationID changed again (a crash loop); the main process is gone;
   the deadline (the phase it was stuck in is named).
"""

from __future__ import annotations

import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._journal import JournalError, JournalReader
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import FATAL_PATTERNS, READY_PATTERN, LogWatch
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import STOP_JOB_TYPES, SystemdError, exec_start_facts

from urllib.error import HTTPError, URLError
from urllib.request import ProxyHandler, Request, build_opener

EXPECT_GRACE_SECONDS = 10.0
SETTLE_SECONDS = 0.3          # after a fatal line or a dead process: one more read for the lines after it
NO_INVOCATION_GRACE = 3.0     # job gone, unit down, no new invocation: give systemd this long
AUTO_RESTART_WAIT_MAX = 10.0  # to see NRestarts grow after a crash under Restart= (capped by RestartUSec + 2 s)


class ServiceFailure(Exception):
    pass


def http_status(url, timeout):
    """GET url (no proxy): the HTTP status code, or None when no answer (connection refused, timeout)."""
    opener = build_opener(ProxyHandler({}))
    try:
        response = opener.open(Request(url, method="GET"), timeout=timeout)
        try:
            return response.getcode()
        finally:
            response.close()
    except HTTPError as exc:
        return exc.code
    except (URLError, OSError, ValueError):
        return None


class ServiceRunner(object):
    def __init__(self, systemctl, run, unit, state="verified", timeout=1800, health_url=None,
                 ready_pattern=None, hicache=None, ranks=None, expect=None, fail_patterns=None,
                 extra_fail_patterns=None, poll_interval=0.5, check_mode=False, journalctl="journalctl",
                 health=http_status, clock=time.monotonic, wall=time.time, sleep=time.sleep):
        self.systemctl = systemctl
        self.run = run
        self.unit = unit
        self.state = state
        self.timeout = float(timeout)
        self.health_url = health_url
        self.hicache = hicache
        self.ranks = ranks
        self.poll_interval = float(poll_interval)
        self.check_mode = check_mode
        self.journalctl = journalctl
        self.health = health
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        patterns = list(FATAL_PATTERNS if fail_patterns is None else fail_patterns) + list(extra_fail_patterns or [])
        # Built now, so that bad regexes fail before the host changes.
        self.watch = LogWatch(ready_pattern or READY_PATTERN, patterns, expect or [])
        self.journal = None
        self.result = {"changed": False, "unit": unit, "state": state, "action": "none",
                       "invocation_id": None, "previous_invocation_id": None, "main_pid": 0, "n_restarts": 0,
                       "timeline": {}, "hicache": {}, "kv_cache": {}, "ready_line": None, "matched": {},
                       "health_status": None, "commands": []}
        self.phase = "reading the unit"
        self.last_health = None
        self.t0 = None
        self.wall0 = None
        self.t_new = None
        self.t_ready = None
        self.hicache_settled = False

    # ---- helpers -------------------------------------------------------------------------------
    def elapsed(self):
        return self.clock() - self.t0

    def remaining(self):
        return self.timeout - self.elapsed()

    def wall_rel(self, ts):
        return None if ts is None else max(0.0, ts - self.wall0)

    def fail(self, msg):
        raise ServiceFailure(msg)

    def check_deadline(self):
        if self.remaining() <= 0:
            detail = self.phase
            if self.phase.startswith("warming up") and self.health_url and self.watch.ready_line:
                detail += " (ready line seen, %s answered %s)" % (
                    self.health_url, self.last_health if self.last_health is not None else "nothing")
            self.fail("timeout after %.0f s while %s" % (self.timeout, detail))

    def pause(self):
        self.sleep(max(0.0, min(self.poll_interval, self.remaining())))

    def note_state(self, st):
        self.result["main_pid"] = st.main_pid
        self.result["n_restarts"] = st.n_restarts
        self.result["active_state"] = st.active_state
        self.result["sub_state"] = st.sub_state
        self.result["unit_result"] = st.result

    # ---- main ------------------------------------------------------------------------------------
    def execute(self):
        """Returns (ok, result). On failure result has msg and journal_tail."""
        self.t0 = self.clock()
        self.wall0 = self.wall()
        try:
            self._execute()
            ok = True
        except (ServiceFailure, SystemdError, JournalError) as exc:
            ok = False
            self.result["msg"] = str(exc)
            self._collect_failure()
        self._finish()
        return ok, self.result

    def _collect_failure(self):
        tail = list(self.journal.tail) if self.journal else []
        self.result["journal_tail"] = tail
        self.result["phase"] = self.phase

    def _finish(self):
        watch = self.watch
        expected = self.expected_ranks() if self.hicache_on() else None
        self.result["hicache"] = watch.hicache_summary(expected) if self.hicache_on() or watch.hicache else {}
        self.result["kv_cache"] = watch.kv_summary()
        self.result["ready_line"] = watch.ready_line
        matched = {}
        if watch.ready_line:
            matched[watch.ready_re.pattern] = watch.ready_line
        matched.update(watch.expect_matched)
        self.result["matched"] = matched
        if watch.fatal:
            self.result["fatal_lines"] = watch.fatal_lines[:20]
        self.result["health_status"] = self.last_health
        self.result["commands"] = list(self.systemctl.commands)
        self.result["timeline"] = self.timeline()
        if self.journal:
            self.result["journal_reads"] = self.journal.reads
            self.result["journal_entries_read"] = self.journal.entries_read

    def timeline(self):
        total = round(self.elapsed(), 3)
        stopping = round(self.t_new - self.t0, 3) if self.t_new is not None else None
        first = self.wall_rel(self.watch.first_line_ts)
        http = self.wall_rel(self.watch.http_start_ts)
        ready = None
        if self.t_ready is not None:
            ready = self.t_ready - self.t0
        timeline = {"stopping": stopping, "starting": None, "loading": None, "warming_up": None, "total": total}
        if self.state == "verified" or self.result["action"] == "none":
            # The invocation began before this run: only the durations the journal proves.
            timeline["stopping"] = 0.0
            if self.watch.first_line_ts and self.watch.http_start_ts:
                timeline["loading"] = round(self.watch.http_start_ts - self.watch.first_line_ts, 3)
            if self.watch.http_start_ts and self.watch.ready_ts:
                timeline["warming_up"] = round(max(0.0, self.watch.ready_ts - self.watch.http_start_ts), 3)
            return timeline
        if stopping is not None and first is not None:
            timeline["starting"] = round(max(0.0, first - stopping), 3)
        if first is not None:
            end_loading = http if http is not None else (self.wall_rel(self.watch.ready_ts) if ready else None)
            if end_loading is not None:
                timeline["loading"] = round(max(0.0, end_loading - first), 3)
        if ready is not None:
            start_warm = http if http is not None else first
            if start_warm is not None:
                timeline["warming_up"] = round(max(0.0, ready - start_warm), 3)
        return timeline

    def hicache_on(self):
        return bool(self.hicache)

    def expected_ranks(self):
        return self.ranks or 1

    def _execute(self):
        st = self.systemctl.show(self.unit)
        if st.load_state == "not-found":
            self.fail("unit %s not found (LoadState=not-found)" % self.unit)
        facts = exec_start_facts(st.exec_start)
        if self.hicache is None:
            self.hicache = facts["hicache"]
        if self.ranks is None:
            self.ranks = facts["tp"] or 1
        self.result["previous_invocation_id"] = st.invocation_id or None
        self.result["before"] = st.as_dict()
        self.note_state(st)
        job_type = self.systemctl.job_type(self.unit, st.job_id) if st.job_id else ""
        self.result["job_in_flight"] = job_type or None
        plan = self.plan(st, job_type)
        self.result["action"] = plan
        if plan in ("restart", "start", "start_after_stop"):
            self.result["changed"] = True
        if self.check_mode:
            if plan == "none":
                return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=False)
            self.result["msg"] = "check mode: would %s %s (now %s)" % (
                {"restart": "restart", "start": "start", "start_after_stop": "wait for the stop, then start",
                 "join": "wait for the %s job in flight" % (job_type or "stop")}[plan], self.unit, st.describe())
            return None
        if plan == "restart":
            self.systemctl.restart_no_block(self.unit)
        elif plan == "start":
            self.systemctl.start_no_block(self.unit)
        if plan == "none":
            return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=False)
        return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=True,
                           start_after_stop=(plan == "start_after_stop"))

    def plan(self, st, job_type):
        if self.state == "verified":
            if st.down:
                self.fail("unit %s is not running: %s" % (self.unit, st.describe()))
            return "none"
        stop_in_flight = job_type in STOP_JOB_TYPES or st.stopping
        if self.state == "restarted":
            if job_type in ("restart", "try-restart", "reload-or-restart", "try-reload-or-restart"):
                return "join"
            if stop_in_flight:
                return "start_after_stop"
            return "restart"
        # started
        if stop_in_flight:
            return "start_after_stop"
        if st.active_state in ("active", "activating", "reloading") or job_type == "start":
            return "none"
        return "start"

    # ---- following one invocation ------------------------------------------------------------------
    def follow(self, st, old_id, baseline, expect_new, start_after_stop=False):
        current = None if expect_new else old_id
        if not expect_new and not old_id:
            self.fail("unit %s has no InvocationID (%s)" % (self.unit, st.describe()))
        self.phase = "stopping (invocation %s)" % old_id if expect_new else "starting"
        down_since = None
        new_state = None
        main_pid_seen = 0
        expect_wait_from = None
        if current:
            self.t_new = self.t0
            self.journal = JournalReader(self.run, current, self.journalctl)
        while True:
            if current is None:
                st = self.systemctl.show(self.unit)
                self.note_state(st)
                if st.invocation_id and st.invocation_id != old_id:
                    current = st.invocation_id
                    self.t_new = self.clock()
                    self.journal = JournalReader(self.run, current, self.journalctl)
                    self.phase = "starting"
                    new_state = st
                    # A manual start of a failed/inactive unit resets NRestarts: count from here.
                    baseline = st.n_restarts
                else:
                    if st.down and not st.job_id:
                        if start_after_stop:
                            self.systemctl.start_no_block(self.unit)
                            start_after_stop = False
                            self.phase = "starting (start queued after the stop)"
                        else:
                            down_since = self.clock() if down_since is None else down_since
                            if self.clock() - down_since >= NO_INVOCATION_GRACE:
                                self.fail("the unit stopped and no new invocation started: %s" % st.describe())
                    self.check_deadline()
                    self.pause()
                    continue
            st = new_state or self.systemctl.show(self.unit)
            new_state = None
            self.note_state(st)
            self.result["invocation_id"] = current
            self.read_journal()
            if self.watch.fatal:
                self.settle()
                self.fail("fatal line in invocation %s: %s" % (current, self.watch.failed_line))
            problem = self.unit_problem(st, current, baseline)
            if problem and st.sub_state == "auto-restart" and st.n_restarts <= baseline:
                st = self.await_auto_restart(st, baseline)
                problem = self.unit_problem(st, current, baseline)
            if problem:
                self.settle()
                if self.watch.fatal:
                    self.fail("fatal line in invocation %s: %s (%s)" % (current, self.watch.failed_line, problem))
                self.fail(problem)
            if st.main_pid:
                main_pid_seen = st.main_pid
            if self.watch.lines_seen and self.phase.startswith("starting"):
                self.phase = "loading"
            if self.watch.http_start_ts is not None and self.phase == "loading":
                self.phase = "warming up"
            if self.watch.ready_line:
                self.check_hicache()
                if self.health_ok():
                    missing = self.watch.expect_missing()
                    if not missing:
                        self.t_ready = self.clock() if self.t_ready is None else self.t_ready
                        self.result["main_pid"] = st.main_pid or main_pid_seen
                        return None
                    expect_wait_from = self.clock() if expect_wait_from is None else expect_wait_from
                    self.phase = "waiting for expected lines %s" % missing
                    if self.clock() - expect_wait_from >= EXPECT_GRACE_SECONDS:
                        self.fail("ready, but these expected patterns did not match any line of invocation %s "
                                  "within %.0f s: %s" % (current, EXPECT_GRACE_SECONDS, ", ".join(missing)))
                else:
                    self.phase = "warming up (ready line seen, waiting for HTTP 200 from %s, last answer: %s)" % (
                        self.health_url, self.last_health if self.last_health is not None else "none")
            self.check_deadline()
            self.pause()

    def await_auto_restart(self, st, baseline):
        """A crash under Restart=: let systemd count the automatic restart (bounded), so NRestarts shows it."""
        wait = min(AUTO_RESTART_WAIT_MAX, (st.restart_sec or 0.1) + 2.0, max(0.0, self.remaining()))
        end = self.clock() + wait
        while self.clock() < end:
            self.sleep(min(self.poll_interval, max(0.0, end - self.clock())))
            nxt = self.systemctl.show(self.unit)
            if nxt.n_restarts > baseline or nxt.sub_state != "auto-restart":
                self.note_state(nxt)
                return nxt
        return st

    def read_journal(self):
        for entry in self.journal.read():
            if entry.from_manager:
                continue
            self.watch.feed(entry.message, entry.realtime)

    def settle(self):
        self.sleep(min(SETTLE_SECONDS, max(0.0, self.remaining())))
        self.read_journal()

    def unit_problem(self, st, current, baseline):
        if st.n_restarts > baseline:
            return ("crash loop: the main process of invocation %s exited and systemd restarted %s (Restart=%s): "
                    "NRestarts grew from %d to %d" % (current, self.unit, st.restart, baseline, st.n_restarts))
        if st.invocation_id and st.invocation_id != current:
            return ("invocation %s ended and %s began (the unit was restarted while starting), NRestarts=%d"
                    % (current, st.invocation_id, st.n_restarts))
        if st.active_state == "failed":
            return "unit %s failed: %s, ExecMainCode=%s ExecMainStatus=%s" % (
                self.unit, st.describe(), st.exec_main_code, st.exec_main_status)
        if st.sub_state == "auto-restart":
            return ("crash loop: unit %s is in auto-restart (Restart=%s), NRestarts=%d, the main process exited "
                    "(Result=%s, ExecMainStatus=%s)" % (self.unit, st.restart, st.n_restarts, st.result,
                                                        st.exec_main_status))
        if st.active_state in ("inactive", "deactivating"):
            return "the main process of %s is gone: %s (ExecMainCode=%s, ExecMainStatus=%s)" % (
                self.unit, st.describe(), st.exec_main_code, st.exec_main_status)
        if st.active_state == "active" and not st.main_pid and st.sub_state != "exited":
            return "the main process of %s is gone: %s" % (self.unit, st.describe())
        return None

    def check_hicache(self):
        if not self.hicache_on():
            return
        expected = self.expected_ranks()
        seen = sorted(self.watch.hicache)
        if len([rank for rank in seen if rank < expected]) >= expected:
            return
        if not self.hicache_settled:
            # Lines of other processes/streams may arrive a moment later: one more read before judging.
            self.hicache_settled = True
            self.settle()
            return self.check_hicache()
        missing = [rank for rank in range(expected) if rank not in self.watch.hicache]
        where = ""
        if self.watch.hicache_late:
            where = "; lines after the ready line do not count (ranks %s)" % sorted(self.watch.hicache_late)
        self.fail("HiCache not initialised in invocation %s: the ready line came with %d of %d host-allocation "
                  "lines ('Allocating ... GB host memory for hierarchical KV cache.'), ranks missing: %s%s"
                  % (self.result["invocation_id"], len(seen), expected,
                     ", ".join("TP%d" % rank for rank in missing), where))

    def health_ok(self):
        if not self.health_url:
            return True
        self.last_health = self.health(self.health_url, max(0.5, min(5.0, self.remaining())))
        return self.last_health == 200
