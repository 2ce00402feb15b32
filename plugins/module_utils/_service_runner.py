# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
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
   the deadline (the phase it was stuck in is named); /health answering 401, 403 or 404.
5. Each proven start is recorded in a state file (``_state_file``: the one record of which invocation is
   verified, read by sglang_server's plan; ``_record`` below is its only writer); ``verified`` on the same
   invocation takes the start-up facts from it when journald no longer holds the start-up lines, and checks the
   live part now. The stop of the old invocation is reported (``stop: {result, killed, seconds}``).
"""

from __future__ import annotations

import re
import time
import traceback

from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check, _timeline
from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan import release_rules
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import config_file_secrets, register
from ansible_collections.gpuserve.sglang.plugins.module_utils._journal import JournalError, JournalReader
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import (
    ALL_TEXTS, RATIO_HALF_STEP, LogWatch, installed_release, mask_secrets, ranks_missing, texts_for)
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import (
    STOP_JOB_TYPES, SystemdError, exec_start_facts, node_scheduler_count, node_tp_ranks)

from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import ProxyHandler, Request, build_opener

EXPECT_GRACE_SECONDS = 10.0
SETTLE_SECONDS = 0.3          # after a fatal line or a dead process: one more read for the lines after it
SETTLE_FATAL_MAX = 10.0       # after a fatal line: wait at most this long for the main process to go (its last lines)
SETTLE_QUIET = 2.0            # after the main process is gone: read until no new line came for this long
NO_INVOCATION_GRACE = 3.0     # job gone, unit down, no new invocation: give systemd this long
AUTO_RESTART_WAIT_MAX = 10.0  # to see NRestarts grow after a crash under Restart= (capped by RestartUSec + 2 s)
HEAD_LIMIT = 20000            # first read of an invocation: at most this many records from its start
TAIL_SCAN = 2000              # ... and, when it held more, its last records (fatal texts, tail)
HEALTH_FATAL = (401, 403, 404)
PEEK_INTERVAL = 0.1           # while warming up (ready line imminent), a streaming reader also reads directly
QUIET_LOG_LEVELS = ("warning", "error", "critical")
STOP_KILLED_RE = re.compile(r"State '(?:stop-sigterm|final-sigterm|stop-post|stop)' timed out\. Killing\.|"
                            r"Killing process \d+ \(.*\) with signal SIGKILL|"
                            r"State '(?:stop-sigterm|final-sigterm)' timed out\. Skipping SIGKILL", re.S)
STOP_RESULT_RE = re.compile(r"Failed with result '([\w-]+)'")
KILL_SUBSTATES = ("stop-sigkill", "final-sigkill")
STOP_TIMEOUT_RE = re.compile(r"State '[\w-]+' timed out\. (?:Killing|Skipping SIGKILL)")
SWEEP_RE = re.compile(r"Killing process \d+ \(.*\) with signal SIGKILL")
MAIN_EXIT_RE = re.compile(r"Main process exited, code=(?P<code>\w+), status=(?P<status>\d+)(?:/(?P<name>\w+))?")
OOM_RE = re.compile(r"killed by the OOM killer|Failed with result 'oom-kill'")
# SGLang's own ending (0.5.9 .. 0.5.23, utils/common.py kill_process_tree, called by the main process after its
# SIGTERM drain or a child's SIGQUIT): it SIGKILLs its children, then itself: exit status 137. From 0.5.13 on
# (read in the 0.5.9, 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13, 0.5.17 and 0.5.23 wheels) it logs this line first.
SGLANG_KILL_TREE_RE = re.compile(r"kill_process_tree called: parent_pid=(?P<parent>\d+), include_parent=True, "
                                 r"pid=(?P<pid>\d+)")
SGLANG_SIGTERM_RE = re.compile(r"SIGTERM received\. signum=")
SGLANG_SIGQUIT_RE = re.compile(r"Received sigquit from a child process|SIGQUIT received\. signum=")
STOPPING_RE = re.compile(r"^Stopping ")
STOP_SERVICE_TAIL = 200       # the stopped invocation's own last lines read for its ending
ENDINGS = {
    "sglang_sigkill": "SGLang's own ending: after SIGTERM it SIGKILLed its own process tree (exit status 137)",
    "sglang_crash": "SGLang SIGKILLed its own process tree after a child process failed, before any stop",
    "timeout_kill": "killed by systemd: TimeoutStopSec ran out",
    "oom_kill": "killed by the kernel's OOM killer",
    "signal": "killed by a signal that was neither SGLang's own nor systemd's stop timeout",
    "exit_code": "exited with a non-zero status",
    "exited": "exited",
    "unknown": "not seen to end",
}


def stop_ending(manager_lines, service_lines):
    """How a stopped invocation ended, from systemd's lines about it and the invocation's own last lines:
    (ending, facts). SGLang SIGKILLs itself at the end of every stop (after SIGTERM: the drain, or a child's
    SIGQUIT under KillMode=control-group): the main process exits ``code=killed, status=9/KILL`` (137) right after
    its own ``kill_process_tree called: parent_pid=P, include_parent=True, pid=P``; systemd records
    Result=signal. That is ``sglang_sigkill``, not a crash and not an OOM kill. systemd's TimeoutStopSec kill
    (``State 'stop-sigterm' timed out. Killing.``, Result=timeout) is ``timeout_kill``; systemd's SIGKILL of
    processes left after a main process that killed itself is a sweep (``leftovers_killed``), not a timeout."""
    facts = {}
    main_exit = None
    exit_index = None
    for index, line in enumerate(manager_lines):
        match = MAIN_EXIT_RE.search(line)
        if match:
            main_exit, exit_index = match, index
    if main_exit:
        facts["main_exit"] = "code=%s, status=%s" % (main_exit.group("code"), main_exit.group("status"))
        if main_exit.group("code") == "killed":
            facts["exit_status"] = 128 + int(main_exit.group("status"))
        elif main_exit.group("code") == "exited":
            facts["exit_status"] = int(main_exit.group("status"))
    kill_tree = [line for line in service_lines if SGLANG_KILL_TREE_RE.search(line)]
    own = [line for line in kill_tree
           if SGLANG_KILL_TREE_RE.search(line).group("parent") == SGLANG_KILL_TREE_RE.search(line).group("pid")]
    sigterm = [line for line in service_lines if SGLANG_SIGTERM_RE.search(line)]
    sglang_lines = (sigterm[:1] + own[-1:])
    if sglang_lines:
        facts["sglang_lines"] = sglang_lines
    timeout = any(STOP_TIMEOUT_RE.search(line) for line in manager_lines)
    results = [m.group(1) for m in (STOP_RESULT_RE.search(line) for line in manager_lines) if m]
    if timeout or "timeout" in results:
        return "timeout_kill", facts
    if any(OOM_RE.search(line) for line in manager_lines):
        return "oom_kill", facts
    sigquit = [line for line in service_lines if SGLANG_SIGQUIT_RE.search(line)]
    if main_exit and main_exit.group("code") == "killed":
        # 0.5.13+ log kill_process_tree; 0.5.9 .. 0.5.12 end the same way without that line: their SIGTERM (or
        # SIGQUIT) line, then the main process's SIGKILL, is SGLang's own end too
        if main_exit.group("status") == "9" and (own or sigterm or sigquit):
            sweep = [line for line in manager_lines[exit_index + 1:] if SWEEP_RE.search(line)]
            if sweep:
                facts["leftovers_killed"] = sweep[:5]
            # the stop's SIGTERM: SGLang's own line (its tail may have scrolled it away) or systemd's "Stopping"
            stopped = sigterm or any(STOPPING_RE.search(line) for line in manager_lines[:exit_index])
            return ("sglang_sigkill" if stopped else "sglang_crash"), facts
        return "signal", facts
    if main_exit and main_exit.group("code") == "exited" and main_exit.group("status") != "0":
        return "exit_code", facts
    if any("Deactivated successfully" in line for line in manager_lines) or (main_exit and not results):
        return "exited", facts
    return ("unknown" if not results else "exit_code" if "exit-code" in results else "signal"), facts


def check_health_url(url):
    """Refuse a URL that can never answer, before the host changes (ValueError names the problem)."""
    if url is None:
        return None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError("health_url must be an http:// or https:// URL, got %r" % (url,))
    if any(ch.isspace() for ch in url):
        raise ValueError("health_url must not contain spaces or other whitespace, got %r" % (url,))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError("health_url %r is not a valid URL: %s" % (url, exc))
    if not parts.hostname:
        raise ValueError("health_url %r has no host" % (url,))
    if port is not None and not 0 < port < 65536:
        raise ValueError("health_url %r: port %s is out of range" % (url, port))
    return url


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
    except (URLError, OSError, ValueError, HTTPException):
        # refused, timed out, or a listener that does not speak HTTP (BadStatusLine...): no answer
        return None


class ServiceRunner(object):
    def __init__(self, systemctl, run, unit, state="verified", timeout=1800, health_url=None,
                 ready_pattern=None, hicache=None, ranks=None, expect=None, fail_patterns=None,
                 extra_fail_patterns=None, poll_interval=0.5, check_mode=False, journalctl="journalctl",
                 health=http_status, clock=time.monotonic, wall=time.time, sleep=time.sleep, state_store=None,
                 progress=None, secrets=(), journal_factory=None, release=None, hybrid=None):
        self.systemctl = systemctl
        self.run = run
        self.unit = unit
        self.state = state
        self.timeout = float(timeout)
        self.health_url = check_health_url(health_url)
        self.state_store = state_store
        # journal_factory(invocation_id) -> a reader (JournalFollower in the module: streaming); default: polling
        self.journal_factory = journal_factory or (lambda inv: JournalReader(self.run, inv, self.journalctl))
        self.progress = progress
        self.secrets = [secret for secret in secrets if secret]
        self.facts = {}
        self.saved = None          # the state-file record the start-up facts came from
        self.sources = {}
        self.stop_watch = None     # {"since": clock, "substates": set()} while the old invocation stops
        self.old_invocation = None
        self.stop_report = None
        self.journal_scan = None
        self.notices = []
        self.hicache = hicache
        self.hybrid = hybrid      # None: from the model's config.json (ExecStart's --model-path)
        self.hybrid_settled = False
        self.ranks = ranks
        self.rank_ids = None      # a node of a multi-node server: the global TP ranks it runs (ExecStart)
        self.pd = None            # a prefill or decode server of a PD pair: {"mode", "bootstrap_port", ...}
        self.poll_interval = float(poll_interval)
        self.check_mode = check_mode
        self.journalctl = journalctl
        self.health = health
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        # Built now, so that bad regexes fail before the host changes; the release's texts come once ExecStart
        # names the interpreter (_execute), every known release's until then.
        self.release_given = release or None
        self.watch = LogWatch(ready_pattern or None, fail_patterns, expect or [])
        self.watch.use_texts(ALL_TEXTS, list(extra_fail_patterns or []))
        self.journal = None
        self.result = {"changed": False, "unit": unit, "state": state, "action": "none",
                       "invocation_id": None, "previous_invocation_id": None, "main_pid": 0, "n_restarts": 0,
                       "timeline": {}, "hicache": {}, "kv_cache": {}, "ready_line": None, "matched": {},
                       "health_status": None, "commands": []}
        self._phase = "reading the unit"
        self.last_health = None
        self.t0 = None
        self.wall0 = None
        self.t_new = None
        self.t_ready = None
        self.hicache_settled = False
        self.woke_on_line = False
        self.peeking = False
        self.lines_fed = 0  # journal entries read so far (settle_quiet: has a new one come)
        self.phase_marks = {}  # systemd's events of this restart (_timeline: drain, reap, exec), wall seconds

    # ---- helpers -------------------------------------------------------------------------------
    @property
    def phase(self):
        return self._phase

    @phase.setter
    def phase(self, value):
        if value != self._phase and self.progress:
            self.progress("phase: %s" % value)
        self._phase = value

    def mask(self, text):
        return mask_secrets(text, self.secrets)

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
        wait = max(0.0, min(self.poll_interval, self.remaining()))
        self.woke_on_line = False
        self.peeking = False
        if self.journal is not None and hasattr(self.journal, "wait") and not self.watch.ready_line:
            # Streaming: wake up as soon as a line of the invocation arrives (at most poll_interval). After the
            # ready line only /health is awaited, whose own access-log lines must not make this spin. While
            # warming up (HTTP server up, ready line imminent) wake every PEEK_INTERVAL and read directly too:
            # journald notifies followers up to ~0.25 s after it wrote a record.
            if self.watch.http_start_ts is not None:
                self.peeking = True
                wait = min(wait, PEEK_INTERVAL)
            self.woke_on_line = bool(self.journal.wait(wait))
            return
        self.sleep(wait)

    def note_state(self, st):
        self.result["main_pid"] = st.main_pid
        self.result["n_restarts"] = st.n_restarts
        self.result["active_state"] = st.active_state
        self.result["sub_state"] = st.sub_state
        self.result["unit_result"] = st.result

        if self.stop_watch is not None and st.active_state == "deactivating":
            self.stop_watch["substates"].add(st.sub_state)

    # ---- main ------------------------------------------------------------------------------------
    def execute(self):
        """Returns (ok, result). On failure result has msg, phase, invocation_id and journal_tail."""
        self.t0 = self.clock()
        self.wall0 = self.wall()
        try:
            self._execute()
            ok = True
        except (ServiceFailure, SystemdError, JournalError) as exc:
            ok = False
            self.result["msg"] = str(exc)
        except Exception as exc:  # never a traceback: fail with what is known  # pylint: disable=broad-except
            ok = False
            self.result["msg"] = "unexpected error while %s: %s: %s" % (self.phase, type(exc).__name__, exc)
            self.result["exception"] = self.mask(traceback.format_exc())   # the one rule, as every result
        if self.journal is not None and hasattr(self.journal, "close"):
            self.journal.close()
        try:
            self._report_stop()
        except (SystemdError, JournalError) as exc:
            self.notices.append("the stop of the previous invocation could not be read: %s" % exc)
        if not ok:
            self._collect_failure()
        self._finish(ok)
        return ok, self.result

    def _collect_failure(self):
        tail = list(self.journal.tail) if self.journal else []
        self.result["journal_tail"] = [self.mask(line) for line in tail]
        self.result["phase"] = self.phase
        msg = self.result["msg"]
        inv = self.result.get("invocation_id") or self.result.get("previous_invocation_id")
        if inv and inv not in msg:
            msg += " [invocation %s]" % inv
        if "phase" not in msg:
            msg += " [phase: %s]" % self.phase
        stop = self.result.get("stop")
        if stop:
            msg += " [previous stop: result=%s, killed=%s, %s s, ending: %s%s]" % (
                stop["result"], "yes (SIGKILL by systemd)" if stop["killed"] else "no", stop["seconds"],
                stop.get("ending_means", "unknown"),
                "; its pinned host memory may not have been released when this start began" if stop["killed"]
                else "")
        if self.result.get("journal_lines_dropped"):
            msg += " [journald suppressed %d lines of this invocation (rate limit)]" % \
                self.result["journal_lines_dropped"]
        self.result["msg"] = self.mask(msg)
        if self.progress:
            self.progress("failed: %s" % self.result["msg"], priority=3)

    def _finish(self, ok):
        watch = self.watch
        saved = self.saved
        if saved:
            for key in ("hicache", "kv_cache", "ready_line", "timeline", "matched"):
                self.result[key] = saved.get(key)
            if saved.get("hybrid"):
                self.result["hybrid"] = saved["hybrid"]
            self.result["timeline"] = dict(saved.get("timeline") or {})
            self.result["timeline"]["total"] = round(self.elapsed(), 3)
            extra = dict(watch.expect_matched)
            self.result["matched"] = dict(saved.get("matched") or {}, **extra)
        else:
            expected = self.expected_ranks() if self.hicache_on() else None
            self.result["hicache"] = (self.hicache_summary(expected)
                                      if self.hicache_on() or watch.hicache else {})
            self.result["kv_cache"] = watch.kv_summary()
            if self.hybrid or watch.mamba:
                self.result["hybrid"] = watch.hybrid_summary(self.expected_ranks() if self.hybrid else None,
                                                             self.rank_ids)
            self.result["ready_line"] = self.mask(watch.ready_line)
            matched = {}
            if watch.ready_line:
                matched[watch.ready_re.pattern] = self.mask(watch.ready_line)
            matched.update((key, self.mask(line)) for key, line in watch.expect_matched.items())
            self.result["matched"] = matched
            self.result["timeline"] = self.timeline()
        if watch.fatal:
            self.result["fatal_lines"] = [self.mask(line) for line in watch.fatal_lines[:20]]
        if watch.dropped:
            self.result["journal_lines_dropped"] = watch.dropped
        self.result["health_status"] = self.last_health
        self.result["commands"] = list(self.systemctl.commands)
        if self.systemctl.retries:
            self.result["systemctl_retries"] = self.systemctl.retries
        if self.journal:
            self.result["journal_reads"] = self.journal.reads
            self.result["journal_entries_read"] = self.journal.entries_read
        if self.journal_scan:
            self.result["journal_scan"] = self.journal_scan
        if self.sources:
            self.result["sources"] = dict(self.sources)
        if self.notices:
            self.result["notices"] = list(self.notices)
        if ok:
            self._record()
            if self.progress:
                self.progress("ready: invocation %s (%s)" % (self.result.get("invocation_id"),
                                                             "facts from the state file" if saved else "proven now"))

    def _record(self):
        """Write the state file after a start proven from the journal (not in check mode)."""
        if self.state_store is None or self.check_mode or self.saved or not self.result.get("invocation_id"):
            return
        if not self.watch.ready_line and not self.facts.get("quiet") and not self.follower():
            return
        record = {
            "invocation_id": self.result["invocation_id"], "main_pid": self.result.get("main_pid"),
            "n_restarts": self.result.get("n_restarts"), "verified_at": round(self.wall(), 3),
            "verified_by": self.result.get("action"), "hicache": self.result.get("hicache"),
            "kv_cache": self.result.get("kv_cache"), "ready_line": self.result.get("ready_line"),
            "timeline": self.result.get("timeline"), "matched": self.result.get("matched"),
            "stop": self.result.get("stop"),
        }
        if self.result.get("hybrid"):
            record["hybrid"] = self.result["hybrid"]
        if self.pd and self.pd.get("bootstrap_line"):
            record["pd_bootstrap_line"] = self.pd["bootstrap_line"]
        existing = self.state_store.read(self.unit)
        if existing and existing.get("invocation_id") == record["invocation_id"] and not existing.get("error"):
            # Already recorded (a second verify of the same start): keep the first record, write nothing.
            self.result["state_file"] = {"path": self.state_store.path(self.unit), "written": False,
                                         "verified_at": existing.get("verified_at")}
            return
        try:
            path = self.state_store.write(self.unit, record)
            self.result["state_file"] = {"path": path, "written": True, "verified_at": record["verified_at"]}
        except (IOError, OSError) as exc:
            # Loud, not fatal: the server is proven now and must not be rolled back for a full /var/lib, but once
            # this start leaves the journal a later verify could only say "never verified" (issue 22).
            path = self.state_store.path(self.unit)
            self.result["state_file"] = {"path": path, "written": False, "error": str(exc)}
            self.result.setdefault("notices", []).append(
                "the state file %s could not be written (%s): invocation %s is verified now, but once its start-up "
                "lines leave the journal a later verify cannot prove it; free the space and run the verify again"
                % (path, exc, self.result["invocation_id"]))

    def hicache_summary(self, expected):
        facts = self.facts
        ratio = facts.get("hicache_ratio")
        size = facts.get("hicache_size")
        ratio_step = 0.0
        if not ratio and not size and self.hicache_on():
            # Neither given: releases with HiCache auto-sizing log the ratio they chose (3 decimals: the check
            # allows that rounding); 0.5.9's default is 2.0.
            if self.watch.hicache_auto_ratio:
                ratio = self.watch.hicache_auto_ratio
                ratio_step = RATIO_HALF_STEP
            elif not self.watch.texts.hicache_auto:
                ratio = 2.0
        return self.watch.hicache_summary(expected, ratio=ratio, size_gb=size, page_size=facts.get("page_size") or 1,
                                          rank_ids=self.rank_ids, ratio_step=ratio_step)

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
        timeline.update(self.phases_timeline())
        return timeline

    def phases_timeline(self):
        """The downtime of this run's restart or start per phase (_timeline.build): from the stop asked (the
        restart queued; a stop already in flight: this run's start) to the new invocation proven ready, with
        systemd's events of the stop and the start and the journal times of SGLang's start-up lines; the
        slowest rank's weight load and SGLang's own start-up timings (0.5.17+) as SGLang printed them."""
        out = {}
        watch = self.watch
        if watch.weight_load_s is not None:
            out["weight_load_s"] = watch.weight_load_s
        if watch.startup_reported:
            out["sglang_startup"] = dict(watch.startup_reported)
        if self.t_ready is None or self.result["action"] not in ("restart", "join", "start", "start_after_stop"):
            return out
        since = self.stop_watch["since"] if self.stop_watch is not None else self.t0
        start = self.wall0 + (since - self.t0)
        end = self.wall0 + (self.t_ready - self.t0)
        marks = dict(self.phase_marks)
        marks.update(watch.marks)
        out.update(_timeline.build(start, end, marks))
        return out

    def hicache_on(self):
        return bool(self.hicache)

    def choose_texts(self, argv):
        """The SGLang release whose texts this invocation is read with: given, else the version of the sglang
        distribution that ExecStart's interpreter has (importlib.metadata), else every known release's."""
        if self.release_given:
            release, how = self.release_given, "given (release option)"
        else:
            python = argv[0] if argv else None
            release = installed_release(python, run=lambda cmd: tuple(self.run(cmd, timeout=30)[:2]))
            how = ("importlib.metadata of %s" % python) if release else "no sglang distribution found for %s" % python
        texts = texts_for(release, how)
        self.watch.use_texts(texts)
        self.result["sglang_texts"] = dict(texts.info)
        if texts.info.get("note") and release:
            self.notices.append(texts.info["note"])

    def expected_ranks(self):
        return self.ranks or 1

    def ranks_complete(self, tags):
        """Every scheduler of this node printed that line: on a node of a multi-node server its own global ranks
        by name (lines of other ranks do not count), else as many as it runs."""
        tags = list(tags)
        if self.rank_ids:
            missing = ranks_missing(tags, self.expected_ranks(), self.rank_ids)
            if "ranks_missing" in missing:
                return not missing["ranks_missing"]
        return len(tags) >= self.expected_ranks()

    def ready_what(self):
        if self.watch.ready_line or not self.follower():
            return "the ready line"
        return "node %d's health server (its schedulers up; TP ranks %s expected here)" % (
            self.facts.get("node_rank") or 0, "-".join(str(r) for r in (self.rank_ids[0], self.rank_ids[-1]))
            if self.rank_ids else "?")

    def pd_facts(self, facts, rules):
        """A server of a prefill/decode pair (ExecStart's --disaggregation-mode): a prefill server (node 0 of it)
        serves the KV bootstrap server that every decode server reaches per request, on
        --disaggregation-bootstrap-port (the release's default when not given), on the server's --host. rules: the
        release's rules (read from its wheel)."""
        mode = (facts.get("disaggregation_mode") or "null").lower()
        if mode not in ("prefill", "decode"):
            return
        self.pd = {"mode": mode}
        if mode == "prefill" and not self.follower():
            port = facts.get("bootstrap_port") or rules["pd_bootstrap_port_default"]
            host = urlsplit(self.health_url).hostname if self.health_url else (facts.get("host") or "127.0.0.1")
            host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
            self.pd.update(bootstrap_port=port, bootstrap_url="http://%s:%d%s" % (
                "[%s]" % host if ":" in host else host, port, rules["pd_bootstrap_health_path"]),
                bootstrap_status=None, bootstrap_line=None)
        self.result["disaggregation"] = self.pd

    def pd_waiting(self):
        """None when this is not a prefill server's node 0, or its KV bootstrap server is proven: its health path
        answers 200 and, in a release that prints one, the invocation's "bootstrap server started" line names its
        port. Else what is still waited for."""
        pd = self.pd
        if not pd or "bootstrap_url" not in pd:
            return None
        pd["bootstrap_status"] = self.health(pd["bootstrap_url"], max(0.5, min(5.0, self.remaining())))
        if pd["bootstrap_status"] != 200:
            return "the KV bootstrap server at %s (a decode server reaches it per request; last answer: %s)" % (
                pd["bootstrap_url"], pd["bootstrap_status"] if pd["bootstrap_status"] is not None else "none")
        line = self.watch.pd_bootstrap_line or (self.saved or {}).get("pd_bootstrap_line")
        if self.watch.texts.pd_bootstrap:
            if not line:
                return "the release's bootstrap-server line (%s)" % " or ".join(
                    "'%s'" % t for t in self.watch.texts.families.get("pd_bootstrap_started", []))
            if not line.rstrip().endswith(":%d" % pd["bootstrap_port"]):
                self.fail("invocation %s started its KV bootstrap server on another port than "
                          "--disaggregation-bootstrap-port %d: %s"
                          % (self.result.get("invocation_id"), pd["bootstrap_port"], self.mask(line)))
        pd["bootstrap_line"] = self.mask(line) if line else None
        return None

    def follower(self):
        """A node other than node 0 of a server over several hosts (ExecStart's --nnodes N --node-rank K, K > 0):
        SGLang runs its schedulers there, no tokenizer and no HTTP API, prints no ready line, and once every
        scheduler of the node is up serves a health server whose /health is a constant 200 (entrypoints/engine.py,
        launch_dummy_health_check_server)."""
        return (self.facts.get("nnodes") or 1) > 1 and (self.facts.get("node_rank") or 0) > 0

    def ready_seen(self):
        """Node 0 (or one node): the ready line. A follower node: its health server answers (it starts only after
        every scheduler of the node reported ready, so its rank lines are in the journal by then)."""
        if self.watch.ready_line:
            return True
        return self.follower() and self.watch.lines_seen > 0 and self.health_ok()

    def _execute(self):
        st = self.systemctl.show(self.unit)
        if st.load_state == "not-found":
            self.fail("unit %s not found (LoadState=not-found)" % self.unit)
        facts = exec_start_facts(st.exec_start)
        self.facts = facts
        self.secrets.extend(value for value in (facts.get("api_key"), facts.get("admin_api_key")) if value)
        # the keys SGLang reads from its --config file (the role's secrets file): masked wherever they appear
        self.secrets.extend(config_file_secrets(st.exec_start))
        register(self.secrets)   # read on the host: registered with the core's masking API (2.22+) too
        self.choose_texts(st.exec_start)
        if self.hicache is None:
            self.hicache = facts["hicache"]
        if self.hybrid is None:
            config = _model_check.read_config(facts["model_path"]) if facts.get("model_path") else None
            self.hybrid = _model_check.is_hybrid(config)
        if self.ranks is None:
            self.ranks = node_scheduler_count(facts)
        # the release's rules (read from its wheel; the nearest older table's for a release without one)
        rules = release_rules(self.result.get("sglang_texts", {}).get("release"))[0]
        if (facts.get("nnodes") or 1) > 1:
            self.rank_ids = node_tp_ranks(facts, rules["node_tp_ranks"])
            self.result["node"] = {"nnodes": facts["nnodes"], "node_rank": facts.get("node_rank") or 0,
                                   "tp_ranks": self.rank_ids, "ranks_expected": self.expected_ranks()}
            if self.follower() and not self.health_url and not self.check_mode:
                # Refused before anything is queued: nothing in such a node's journal says its schedulers are up.
                self.fail("ExecStart of %s runs node %s of %s of a multi-node server (--node-rank): SGLang prints no "
                          "ready line there and serves only a health server once every scheduler of the node is up; "
                          "set health_url (http://<host>:<port>/health of this node)"
                          % (self.unit, facts.get("node_rank") or 0, facts["nnodes"]))
        self.pd_facts(facts, rules)
        if (facts.get("log_level") or "").lower() in QUIET_LOG_LEVELS:
            facts["quiet"] = True
            if not self.health_url:
                # Refused before anything is queued: at that level nothing in the journal can prove readiness.
                self.fail("ExecStart of %s has --log-level %s: SGLang does not print the info lines (ready line, "
                          "KV pool, HiCache) at that level, so readiness can only be proven over HTTP: set "
                          "health_url" % (self.unit, facts["log_level"]))
            self.notices.append(
                "ExecStart has --log-level %s: SGLang does not print the info lines (ready line, KV pool, HiCache "
                "allocation) at that level; readiness is proven with %s instead, and HiCache per rank cannot be "
                "checked" % (facts["log_level"], "HTTP 200 from health_url and /get_server_info"
                             if self.health_url else "the unit state only (set health_url)"))
        self.result["previous_invocation_id"] = st.invocation_id or None
        self.result["before"] = st.as_dict()
        self.note_state(st)
        job_type = self.systemctl.job_type(self.unit, st.job_id) if st.job_id else ""
        self.result["job_in_flight"] = job_type or None
        plan = self.plan(st, job_type)
        self.result["action"] = plan
        if plan in ("restart", "start", "start_after_stop"):
            self.result["changed"] = True
        if st.need_daemon_reload:
            self.result["need_daemon_reload"] = True
        if self.check_mode:
            if plan == "none":
                return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=False)
            self.result["msg"] = "check mode: would %s%s %s (now %s)" % (
                "run daemon-reload (the unit file changed on disk), then " if st.need_daemon_reload and
                plan != "join" else "",
                {"restart": "restart", "start": "start", "start_after_stop": "queue a start behind the stop in flight",
                 "join": "wait for the %s job in flight" % (job_type or "stop")}[plan], self.unit, st.describe())
            return None
        if st.need_daemon_reload and plan in ("restart", "start", "start_after_stop"):
            # The unit file changed on disk: a restart now would run the OLD definition. Reload first, say so.
            self.systemctl.daemon_reload()
            self.result["daemon_reload"] = True
            self.notices.append("the unit file of %s changed on disk (NeedDaemonReload=yes): ran systemctl "
                                "daemon-reload before the %s" % (self.unit, plan.replace("_", " ")))
        if plan in ("restart", "join", "start_after_stop") and st.invocation_id:
            self.old_invocation = st.invocation_id
            self.stop_watch = {"since": self.clock() if st.active_state != "deactivating" else self.t0,
                               "substates": set([st.sub_state]) if st.stopping else set(), "ended": None}
        if plan == "restart":
            self.phase = "stopping (invocation %s)" % st.invocation_id
            self.systemctl.restart_no_block(self.unit)
        elif plan in ("start", "start_after_stop"):
            # Queued at once, also behind a stop in flight: systemd runs it when the stop ends, so a module that
            # dies now (Ctrl-C, SSH drop, its own timeout) does not leave the unit down.
            self.systemctl.start_no_block(self.unit)
        if plan == "none":
            return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=False)
        return self.follow(st, st.invocation_id, baseline=st.n_restarts, expect_new=True)

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

    # ---- the stop of the previous invocation -----------------------------------------------------
    def _report_stop(self):
        """stop: {result, killed, ending, seconds} of the invocation this task replaced (from systemd's own lines
        about that invocation, the invocation's own last lines and the sub-states seen while it stopped). killed:
        systemd's SIGKILL at TimeoutStopSec (its timeout line, or a stop-sigkill / final-sigkill sub-state); SGLang's
        own SIGKILL of its process tree after SIGTERM is ending ``sglang_sigkill``, never killed."""
        if not self.old_invocation or self.stop_watch is None:
            return
        reader = JournalReader(self.run, self.old_invocation, self.journalctl, service_lines=False)
        entries = reader.read(tail=200)
        lines = [entry.message for entry in entries if entry.from_manager]
        self.phase_marks.update(_timeline.stop_marks([(entry.realtime, entry.message) for entry in entries
                                                      if entry.from_manager]))
        # the old invocation's own last lines: only for how it ended (its HiCache lines never count)
        own = JournalReader(self.run, self.old_invocation, self.journalctl, include_manager=False)
        service = [entry.message for entry in own.read(tail=STOP_SERVICE_TAIL) if not entry.from_manager]
        ending, facts = stop_ending(lines, service)
        substates = sorted(self.stop_watch["substates"])
        killed_lines = [line for line in lines if STOP_KILLED_RE.search(line) and
                        line not in facts.get("leftovers_killed", ())]
        killed = (bool(killed_lines) or any(sub in KILL_SUBSTATES for sub in substates)) and ending != "sglang_sigkill"
        result = None
        for line in lines:
            match = STOP_RESULT_RE.search(line)
            if match:
                result = match.group(1)
        if result is None:
            if any("Deactivated successfully" in line for line in lines):
                result = "success"
            elif any("code=killed" in line or "status=9/KILL" in line for line in lines):
                result = "signal"
            elif self.stop_watch["ended"] is None:
                result = "unknown"
            else:
                result = "success"
        ended = self.stop_watch["ended"]
        seconds = round((ended if ended is not None else self.clock()) - self.stop_watch["since"], 3)
        report = {"invocation_id": self.old_invocation, "result": result, "killed": killed, "seconds": seconds,
                  "substates_seen": substates, "ending": ending, "ending_means": ENDINGS[ending]}
        report.update((key, [self.mask(line) for line in value] if isinstance(value, list) else value)
                      for key, value in facts.items())
        if killed_lines:
            report["systemd_lines"] = killed_lines[:5]
        self.result["stop"] = report
        if killed and self.progress:
            self.progress("killed: systemd ended invocation %s with SIGKILL after %.1f s (result %s)"
                          % (self.old_invocation, seconds, result), priority=4)

    # ---- following one invocation ------------------------------------------------------------------
    def follow(self, st, old_id, baseline, expect_new):
        current = None if expect_new else old_id
        if not expect_new and not old_id:
            self.fail("unit %s has no InvocationID (%s)" % (self.unit, st.describe()))
        self.phase = "stopping (invocation %s)" % old_id if expect_new else "starting"
        down_since = None
        new_state = None
        last_show = None
        main_pid_seen = 0
        expect_wait_from = None
        if current:
            self.t_new = self.t0
            self.journal = self.journal_factory(current)
            if self.first_read(st, current):
                return None
        while True:
            if current is None:
                st = self.systemctl.show(self.unit)
                self.note_state(st)
                if st.invocation_id and st.invocation_id != old_id:
                    current = st.invocation_id
                    self.t_new = self.clock()
                    if self.stop_watch is not None and self.stop_watch["ended"] is None:
                        self.stop_watch["ended"] = self.t_new
                    self.journal = self.journal_factory(current)
                    self.phase = "starting (invocation %s)" % current
                    new_state = st
                    # A manual start of a failed/inactive unit resets NRestarts: count from here.
                    baseline = st.n_restarts
                else:
                    if st.down and not st.job_id:
                        if self.stop_watch is not None and self.stop_watch["ended"] is None:
                            self.stop_watch["ended"] = self.clock()
                        down_since = self.clock() if down_since is None else down_since
                        if self.clock() - down_since >= NO_INVOCATION_GRACE:
                            self.fail("the unit stopped and no new invocation started: %s" % st.describe())
                    self.check_deadline()
                    self.pause()
                    continue
            fresh = ((self.woke_on_line or self.peeking) and last_show is not None and
                     self.clock() - last_show[0] < self.poll_interval)
            if new_state is None and fresh:
                # Woken by a journal line: the unit state read less than poll_interval ago stands (a ready
                # line is then decided without another systemctl call; /health still proves the server).
                st = last_show[1]
            else:
                st = new_state or self.systemctl.show(self.unit)
                last_show = (self.clock(), st)
            new_state = None
            self.note_state(st)
            self.result["invocation_id"] = current
            self.read_journal()
            if self.watch.fatal:
                self.settle_fatal(current, baseline)
                self.fail("fatal line in invocation %s: %s" % (current, self.mask(self.watch.failed_line)))
            problem = self.unit_problem(st, current, baseline)
            if problem and st.sub_state == "auto-restart" and st.n_restarts <= baseline:
                st = self.await_auto_restart(st, baseline)
                problem = self.unit_problem(st, current, baseline)
            if problem:
                self.settle_quiet()
                if self.watch.fatal:
                    self.fail("fatal line in invocation %s: %s (%s)" % (
                        current, self.mask(self.watch.failed_line), problem))
                self.fail(problem)
            if st.main_pid:
                main_pid_seen = st.main_pid
            if self.watch.lines_seen and self.phase.startswith("starting"):
                self.phase = "loading"
            if self.phase == "loading" and self.watch.hicache:
                self.phase = "loading (HiCache ranks seen: %d of %d)" % (len(self.watch.hicache),
                                                                         self.expected_ranks())
            if self.watch.http_start_ts is not None and self.phase.startswith("loading"):
                self.phase = "warming up"
            if self.facts.get("quiet") and st.active_state == "active" and self.health_url:
                # --log-level warning+: no info lines to read; /health and /get_server_info decide.
                if self.health_ok() and self.server_info_ok():
                    self.t_ready = self.clock() if self.t_ready is None else self.t_ready
                    self.result["main_pid"] = st.main_pid or main_pid_seen
                    self.sources.update({"ready": "live: /health 200 and /get_server_info (log level %s)"
                                         % self.facts.get("log_level")})
                    return None
            if self.ready_seen():
                self.check_hicache()
                self.check_hybrid()
                if self.health_ok():
                    missing = self.watch.expect_missing()
                    pd_wait = None if missing else self.pd_waiting()
                    if pd_wait:
                        missing = [pd_wait]
                    if not missing:
                        self.t_ready = self.clock() if self.t_ready is None else self.t_ready
                        self.result["detected_at"] = round(self.wall(), 3)
                        self.result["main_pid"] = st.main_pid or main_pid_seen
                        self.sources.setdefault("start_up", "journal")
                        return None
                    expect_wait_from = self.clock() if expect_wait_from is None else expect_wait_from
                    self.phase = ("waiting for %s" % pd_wait) if pd_wait else "waiting for expected lines %s" % missing
                    if self.clock() - expect_wait_from >= EXPECT_GRACE_SECONDS:
                        if pd_wait:
                            self.fail("invocation %s is ready, but a prefill server must also prove %s within %.0f s"
                                      % (current, pd_wait, EXPECT_GRACE_SECONDS))
                        self.fail("ready, but these expected patterns did not match any line of invocation %s "
                                  "within %.0f s: %s" % (current, EXPECT_GRACE_SECONDS, ", ".join(missing)))
                else:
                    self.phase = "warming up (ready line seen, waiting for HTTP 200 from %s, last answer: %s)" % (
                        self.health_url, self.last_health if self.last_health is not None else "none")
            self.check_deadline()
            self.pause()

    def first_read(self, st, current):
        """First read of an invocation that began before this task: a bounded head (its start-up), and when it
        holds more, a bounded tail. Returns True when the invocation was verified from the state file."""
        head = self.journal.read(limit=HEAD_LIMIT)
        scan = {"head_entries": len(head), "truncated": self.journal.truncated}
        self._feed(head)
        start_lines = any(entry.from_manager and not entry.dropped for entry in head) or self.watch.server_args_seen
        if self.journal.truncated:
            tail = self.journal.read(tail=TAIL_SCAN)
            scan["tail_entries"] = len(tail)
            self._feed(tail)
        self.journal_scan = scan
        if self.watch.ready_line or self.facts.get("quiet"):
            return False
        saved = self.state_store.read(self.unit) if self.state_store is not None else None
        if saved and saved.get("error"):
            self.notices.append(saved["error"])
            saved = None
        if saved and saved.get("invocation_id") == current:
            self.verify_from_state(st, current, saved)
            return True
        if start_lines:
            return False  # still starting: follow it
        known = ""
        if saved:
            known = " (the state file records invocation %s, verified at %s)" % (
                saved.get("invocation_id"), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(saved.get("verified_at", 0))))
        where = self.state_store.path(self.unit) if self.state_store is not None else "no state file"
        self.fail(
            "invocation %s of %s was never verified by this module (%s has no record of it%s) and its start-up "
            "lines are no longer in the journal (rotated or vacuumed: the journal holds %d later lines of it, no "
            "ready line, no start message): its start (HiCache, KV pool, ready line) cannot be proven now. Restart "
            "it with state=restarted to prove a start, or check it by hand." % (
                current, self.unit, where, known, self.journal.entries_read))
        return False

    def verify_from_state(self, st, current, saved):
        """Start-up facts from the state file, the live part checked now."""
        self.saved = saved
        self.phase = "verifying the live state (start-up facts from the state file)"
        self.result["invocation_id"] = current
        self.result["state_file"] = {"path": self.state_store.path(self.unit), "written": False,
                                     "verified_at": saved.get("verified_at")}
        self.sources = {"start_up": "state_file (verified at %s)" % time.strftime(
            "%Y-%m-%d %H:%M:%S UTC", time.gmtime(saved.get("verified_at") or 0)),
            "unit": "live", "health": "live" if self.health_url else "not checked (no health_url)",
            "fatal_scan": "journal (%d lines of this invocation held)" % self.journal.entries_read}
        if self.watch.fatal:
            self.fail("fatal line in invocation %s: %s" % (current, self.mask(self.watch.failed_line)))
        if st.active_state != "active":
            self.fail("unit %s is not active: %s" % (self.unit, st.describe()))
        if st.n_restarts != saved.get("n_restarts"):
            self.fail("unit %s restarted since invocation %s was verified: NRestarts %s, recorded %s"
                      % (self.unit, current, st.n_restarts, saved.get("n_restarts")))
        if saved.get("main_pid") and st.main_pid != saved.get("main_pid"):
            self.fail("the main process of invocation %s changed since it was verified: MainPID %s, recorded %s"
                      % (current, st.main_pid, saved.get("main_pid")))
        missing = [regex.pattern for regex in self.watch.expect_res
                   if regex.pattern not in self.watch.expect_matched and regex.pattern not in (saved.get("matched") or {})]
        if missing:
            self.fail("these expected patterns match neither the recorded start of invocation %s nor the lines the "
                      "journal still holds: %s" % (current, ", ".join(missing)))
        while not self.health_ok():
            self.phase = "verifying the live state (waiting for HTTP 200 from %s, last answer: %s)" % (
                self.health_url, self.last_health if self.last_health is not None else "none")
            self.check_deadline()
            self.pause()
        while True:
            pd_wait = self.pd_waiting()
            if not pd_wait:
                break
            self.phase = "verifying the live state (waiting for %s)" % pd_wait
            self.check_deadline()
            self.pause()
        self.result["main_pid"] = st.main_pid

    def _feed(self, entries):
        for entry in entries:
            self.lines_fed += 1
            if entry.dropped:
                self.watch.dropped += entry.dropped
            if entry.from_manager:
                if "exec" not in self.phase_marks:
                    self.phase_marks.update(_timeline.start_mark([(entry.realtime, entry.message)]))
                continue
            had_ready = self.watch.ready_line is not None
            self.watch.feed(entry.message, entry.realtime)
            if not had_ready and self.watch.ready_line is not None:
                self.result["ready_read_at"] = round(self.wall(), 3)   # when this task read the ready line

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
        if self.peeking:
            self._feed(self.journal.read(peek=True))
        else:
            self._feed(self.journal.read())

    def settle(self):
        self.sleep(min(SETTLE_SECONDS, max(0.0, self.remaining())))
        self.read_journal()

    def settle_quiet(self):
        """The main process is gone (crash loop, failed, exited): its last lines (a Python traceback on stderr,
        "No module named ...") go through journald's stream and can be indexed after systemd's own "Main process
        exited" on a busy host. Read until SETTLE_QUIET s pass without a new line, at most SETTLE_FATAL_MAX s, so
        the failure's journal tail has them (a single 0.3 s settle missed them on a loaded machine)."""
        end = self.elapsed() + min(SETTLE_FATAL_MAX, max(0.0, self.remaining()))
        self.settle()
        seen, quiet_since = self.lines_fed, self.elapsed()
        while self.elapsed() < end and self.elapsed() - quiet_since < SETTLE_QUIET:
            self.pause()
            self.read_journal()
            if self.lines_fed != seen:
                seen, quiet_since = self.lines_fed, self.elapsed()

    def settle_fatal(self, current, baseline):
        """After a fatal line, while the main process still runs: read on until it is gone (SGLang's main process
        logs "Received sigquit from a child process" and kills its tree after a rank's exception), at most
        SETTLE_FATAL_MAX s, so the failure's journal tail ends with the process's own last lines however busy the
        host is (a fixed 0.3 s missed them on a loaded machine); then one more read."""
        end = self.elapsed() + min(SETTLE_FATAL_MAX, max(0.0, self.remaining()))
        while self.elapsed() < end and not self.unit_problem(self.systemctl.show(self.unit), current, baseline):
            self.pause()
            self.read_journal()
        self.settle()

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
        seen = list(self.watch.hicache)
        if self.ranks_complete(seen):
            self.check_hicache_request()
            return
        if not self.hicache_settled:
            # Lines of other processes/streams may arrive a moment later: read until none came for SETTLE_QUIET s
            # (at most SETTLE_FATAL_MAX) before judging; one 0.3 s read missed the last rank's line on a loaded
            # host (a node's health server came up before journald had indexed it)
            self.hicache_settled = True
            self.settle_quiet()
            return self.check_hicache()
        summary = self.hicache_summary(expected)
        if "ranks_missing" in summary:
            missing = ", ".join("TP%d" % rank for rank in summary["ranks_missing"])
        else:
            missing = "%d (ranks seen: %s)" % (summary.get("ranks_missing_count", 0), ", ".join(summary["ranks_seen"]))
        where = ""
        if self.watch.hicache_late:
            where = "; lines after the ready line do not count (ranks %s)" % summary.get("ranks_after_ready")
        if self.watch.dropped:
            where += ("; journald suppressed %d lines of this invocation (rate limit), the missing lines may be "
                      "among them: raise RateLimitBurst= in journald.conf or the unit's LogRateLimitBurst="
                      % self.watch.dropped)
        read_as = self.read_as()
        if self.watch.hicache_unread:
            unread = [self.mask(line) for line in self.watch.hicache_unread]
            where += "; seen instead, in no known form: %s" % " | ".join(unread)
        self.fail("HiCache not initialised in invocation %s: %s came with %d of %d host-allocation "
                  "lines (text family hicache_host_pool: %s; read as %s), ranks missing: %s%s"
                  % (self.result["invocation_id"], self.ready_what(), len(seen), expected,
                     " or ".join("'%s'" % text for text in self.watch.texts.hicache_texts), read_as, missing, where))

    def read_as(self):
        """Which release's texts the journal was read with, for a failure that names a text family."""
        info = self.watch.texts.info
        read_as = "SGLang %s, texts of %s" % (info.get("release") or "(release unknown)", ", ".join(info["tables"]))
        return read_as + (" (%s)" % info["note"] if info.get("note") else "")

    def check_hybrid(self):
        """A hybrid model (Gated DeltaNet / Mamba layers): the Mamba state pool on every rank before the ready
        line, and with HiCache the Mamba host pool on every rank where the release prints one (issue 24)."""
        if not self.hybrid:
            return
        expected = self.expected_ranks()
        texts = self.watch.texts
        want_host = self.hicache_on() and bool(texts.hicache_mamba)
        if self.ranks_complete(self.watch.mamba) and (not want_host or self.ranks_complete(self.watch.hicache_mamba)):
            return
        if not self.hybrid_settled:
            self.hybrid_settled = True
            self.settle()
            return self.check_hybrid()
        read_as = self.read_as()
        summary = self.watch.hybrid_summary(expected, self.rank_ids)
        if not self.ranks_complete(self.watch.mamba):
            missing = (", ".join("TP%d" % rank for rank in summary["ranks_missing"]) if "ranks_missing" in summary
                       else "%d" % summary.get("ranks_missing_count", 0))
            self.fail("hybrid model's Mamba state pool not initialised in invocation %s: %s came with %d "
                      "of %d Mamba pool lines (text family mamba_pool: %s; read as %s), ranks missing: %s"
                      % (self.result["invocation_id"], self.ready_what(), len(self.watch.mamba), expected,
                         " or ".join("'%s'" % t for t in texts.mamba_texts), read_as, missing))
        self.fail("HiCache of the hybrid model's Mamba state not initialised in invocation %s: %d of %d host pool "
                  "lines (text family hicache_mamba_host_pool: %s; read as %s)"
                  % (self.result["invocation_id"], len(self.watch.hicache_mamba), expected,
                     " or ".join("'%s'" % t for t in texts.hicache_mamba_texts), read_as))

    def check_hicache_request(self):
        check = self.hicache_summary(self.expected_ranks()).get("requested")
        if not check or not check["off"]:
            return
        asked = ("--hicache-size %s" % check["hicache_size_gb"] if "hicache_size_gb" in check
                 else "--hicache-ratio %s" % check["hicache_ratio"])
        self.fail("HiCache host pool of invocation %s does not match %s: %s" % (
            self.result["invocation_id"], asked, "; ".join(self._pool_off(item) for item in check["off"])))

    @staticmethod
    def _pool_off(item):
        """One rank's host pool that is not what was asked: on its tokens where the release prints them."""
        if "logged_tokens" in item:
            return ("%s logged %d tokens (%.2f GB), expected %s tokens (SGLang's int(%d KV tokens x ratio) plus one "
                    "page)" % (item["rank"], item["logged_tokens"], item["logged_gb"],
                               "..".join(str(n) for n in item["expected_tokens"]), item["kv_tokens"]))
        return ("%s logged %.2f GB, expected %.2f GB (%.3f..%.3f GB from the rounding of the sizes printed)"
                % (item["rank"], item["logged_gb"], item["expected_gb"], item["allowed_gb"][0], item["allowed_gb"][1]))

    def health_ok(self):
        if not self.health_url:
            return True
        self.last_health = self.health(self.health_url, max(0.5, min(5.0, self.remaining())))
        if self.last_health in HEALTH_FATAL:
            self.fail("%s answered HTTP %d: this URL will never answer 200 (wrong path, or it needs an API key); "
                      "fix health_url" % (self.health_url, self.last_health))
        return self.last_health == 200

    def server_info_ok(self):
        """With --log-level warning+: /get_server_info (same host and port as health_url) must answer 200."""
        parts = urlsplit(self.health_url)
        url = "%s://%s/get_server_info" % (parts.scheme, parts.netloc)
        status = self.health(url, max(0.5, min(5.0, self.remaining())))
        self.result["server_info_status"] = status
        if status in (401, 403):
            # --api-key protects it: /health 200 is what can be proven without the key.
            self.notices.append("%s answered %s (API key): readiness rests on /health only" % (url, status))
            return True
        return status == 200
