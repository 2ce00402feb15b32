# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The router's on-host life on the server's one mechanism (issue 39): the same ``_server`` Desired, plan,
transaction, landing, last-good set and state machine (``machine.ServerLifecycle``) as the SGLang server, with a
router-specific runner injected instead of SGLang's ``ServiceRunner`` and no SGLang gates.

The runner (``RouterRunner``) restarts the unit ONCE (blocking ``systemctl restart``) or starts it when it is
down, then verifies it through ``_router.run`` - the module gpuserve.sglang.sglang_router_workers' logic: the
router's ``/readiness`` and every worker listed healthy, a healthy worker left out put back (the reconcile) unless
it is held out on purpose (the held-out file). While it waits it watches the unit: a router that exits (a flag
its release refuses), crash-loops or fails is reported at once with its journal, not after the whole timeout.
A restored set is verified as the role's former rollback did: the router answers its worker API again.

The environment file holds the workers' key (``SGLANG_ROUTER_API_KEY``): it is the router's secrets file, never
copied into the last-good set nor put back by a rollback (a rotated key is never undone), its text never in a
diff. The deployment record (markdown) is written after a verified start or restart, or when it is missing."""

from __future__ import annotations

import os
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import _router
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import (
    ENV, LAUNCHER, UNIT, Desired, DirSpec, FileSpec)
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import ServerLifecycle
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.onhost import HostSystemctl

WATCH_PROPERTIES = ("ActiveState", "SubState", "InvocationID", "NRestarts", "Result", "MainPID")
JOURNAL_LINES = 25
RECORD_MARK = "<!-- gpuserve: verification -->"
ACTION_WORDS = {"restarted": "restarted once (unit or environment changed)", "started": "started"}


class UnitDown(Exception):
    """The router's unit went down while it was verified (the message says how)."""


class RouterSystemctl(HostSystemctl):
    """``HostSystemctl`` with the blocking restart and start the router needs (its stop is its own drain,
    bounded by TimeoutStopSec)."""

    def restart(self, unit):
        self._change([self.bin, "restart", unit], "systemctl restart %s" % unit)

    def start(self, unit):
        self._change([self.bin, "start", unit], "systemctl start %s" % unit)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def down_reason(props, invocation, restarts):
    """Why the unit in ``props`` is no longer the invocation being verified, or '' while it runs."""
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if active == "failed":
        return "the unit failed (Result=%s)" % (props.get("Result") or "?")
    if sub == "auto-restart" or _int(props.get("NRestarts")) > restarts:
        return ("the router exited and systemd restarts it (NRestarts %s, Result=%s): a crash loop"
                % (props.get("NRestarts") or "?", props.get("Result") or "?"))
    if invocation and props.get("InvocationID") and props.get("InvocationID") != invocation:
        return "the unit started again on its own (invocation %s, then %s)" % (invocation, props["InvocationID"])
    if active in ("inactive", "deactivating"):
        return "the router stopped (%s/%s)" % (active, sub)
    return ""


class RouterRunner(object):
    """``restarted`` / ``started`` / ``verified`` for one router unit; ``execute() -> (ok, result)`` as the
    service runner's: ``changed``, ``invocation_id``, ``msg``, ``journal_tail``, and the verification's
    ``routers``, ``put_back``, ``held_out``. ``verify(state, sleep) -> dict`` is ``_router.run`` bound to this
    router's parameters (``state`` ``reconciled``, or ``status`` for a restored set); ``journal() -> [lines]``."""

    def __init__(self, systemctl, unit, state, verify, journal, restored=False, timeout=120.0, sleep=time.sleep,
                 clock=time.monotonic, check_mode=False):
        self.systemctl = systemctl
        self.unit = unit
        self.state = state
        self.verify = verify
        self.journal = journal
        self.restored = bool(restored)
        self.timeout = float(timeout)
        self.sleep = sleep
        self.clock = clock
        self.check_mode = bool(check_mode)
        self.invocation = ""
        self.restarts = 0

    def watch(self, seconds):
        """The verification's pause: the unit is read first, and a unit that went down ends the wait."""
        problem = down_reason(self.systemctl.show_props(self.unit, WATCH_PROPERTIES), self.invocation,
                              self.restarts)
        if problem:
            raise UnitDown(problem)
        self.sleep(seconds)

    def check(self):
        """The verification: ``reconciled`` (it waits for the router itself, within its timeout), or for a restored
        set ``status`` (the router answers its worker API), asked again each second until the timeout."""
        if not self.restored:
            return self.verify("reconciled", self.watch) or {}
        deadline = self.clock() + self.timeout
        while True:
            try:
                return self.verify("status", self.watch) or {}
            except _router.RouterError:
                if self.clock() >= deadline:
                    raise
                self.watch(1.0)

    def execute(self):
        result = {"changed": False, "state": self.state, "invocation_id": "", "msg": "", "journal_tail": [],
                  "action": "verified", "put_back": {}, "held_out": [], "routers": {}}
        try:
            before = self.systemctl.show_props(self.unit, WATCH_PROPERTIES)
            if self.check_mode:
                result["invocation_id"] = before.get("InvocationID", "")
                return True, result
            if self.state == "restarted":
                self.systemctl.restart(self.unit)
                result["changed"] = True
            elif self.state == "started" and before.get("ActiveState") not in ("active", "activating", "reloading"):
                self.systemctl.start(self.unit)
                result["changed"] = True
            if result["changed"]:
                result["action"] = self.state
            now = self.systemctl.show_props(self.unit, WATCH_PROPERTIES)
            self.invocation = now.get("InvocationID", "")
            self.restarts = _int(now.get("NRestarts"))
            result["invocation_id"] = self.invocation
            problem = down_reason(now, "", self.restarts)
            if problem:
                raise UnitDown(problem)
            checked = self.check()
            for key in ("routers", "put_back", "held_out"):
                result[key] = checked.get(key) or result[key]
            return True, result
        except (UnitDown, _router.RouterError, Exception) as exc:  # pylint: disable=broad-except
            result["msg"] = str(exc) or type(exc).__name__
            try:
                result["journal_tail"] = list(self.journal() or [])
            except Exception:  # pylint: disable=broad-except  # the failure is reported without it
                result["journal_tail"] = []
            return False, result


class RouterLifecycle(ServerLifecycle):
    """``ServerLifecycle`` for the router: its own rollback switch, a restored set verified by its runner with
    ``restored=True``, and the words of the role's former rollback."""

    ROLLBACK_SWITCH = "sglang_router_rollback"

    def restore_runner(self):
        return self.runner_factory("restarted", restored=True)

    def rollback_words(self, outcome):
        if not outcome["ok"]:
            return ServerLifecycle.rollback_words(self, outcome)
        res = outcome["result"]
        back = outcome["put_back"] + ["%s (removed)" % path for path in outcome["removed"]]
        words = ("Rolled back: the previous unit and environment run again and the router answers (invocation %s)."
                 "\nPut back: %s." % (res.get("invocation_id") or "?", ", ".join(back) or "nothing differed"))
        env = self.desired.env_path
        if env and any(spec.path == env for spec in (self.plan.land if self.plan else [])):
            words += (" %s holds the workers' key: it stays as this run wrote it (a rollback never undoes a key)."
                      % env)
        return words


def router_desired(params):
    """The module's options -> ``Desired``: the unit (0644, checked by systemd-analyze verify), the environment
    file (0600, the key: secret), the launcher (0644, run by the venv's interpreter), the directories."""
    files = [FileSpec(params["unit"]["path"], params["unit"]["content"], "0644", kind=UNIT, verify_unit=True),
             FileSpec(params["env"]["path"], params["env"]["content"], "0600", kind=ENV, secret=True)]
    launcher = params.get("launcher") or {}
    if launcher.get("path"):
        files.append(FileSpec(launcher["path"], launcher.get("content") or "", "0644", kind=LAUNCHER))
    dirs = [DirSpec(item["path"], item.get("mode") or "0755") for item in params.get("dirs") or []]
    record = params.get("record") or {}
    return Desired(params["name"], files, dirs, backup_dir=params["backup_dir"], backup_keep=params["backup_keep"],
                   rollback=params["rollback"], secrets_to_mask=[params.get("api_key") or ""],
                   record_path=record.get("path") or "", host_name=params.get("host_name") or "")


def record_text(template, verified, workers, router_url, clock=time.time):
    """The record: ``template`` (rendered by the role) with its line ``RECORD_MARK`` replaced by the verification
    (when, what was done, the invocation, each worker as the router listed it); the mark missing, appended."""
    listed = (verified.get("routers") or {}).get(router_url) or {}
    rows = ["| verified | %s |" % time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock())),
            "| action | %s |" % ACTION_WORDS.get(verified.get("action"), "verified"),
            "| invocation | %s |" % (verified.get("invocation_id") or ""),
            "", "## Workers (%d), as the router listed them when verified" % len(workers), "",
            "| worker | healthy | load |", "|---|---|---|"]
    for url in workers:
        entry = listed.get(_router.normalize_url(url)) or listed.get(url) or {}
        rows.append("| %s | %s | %s |" % (url, entry.get("is_healthy", "?"), entry.get("load", "?")))
    block = "\n".join(rows)
    if RECORD_MARK in template:
        return template.replace(RECORD_MARK, block, 1)
    return template.rstrip("\n") + "\n" + block + "\n"


def write_record(path, text, check_mode=False):
    """The record, 0644 root, written atomically when it differs. Returns {"changed", "path"}."""
    data = text.encode("utf-8")
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data and (os.stat(path).st_mode & 0o777) == 0o644
    except OSError:
        same = False
    if not same and not check_mode:
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        write_atomic(path, data, mode=0o644, prefix=".gpuserve-")
    return {"changed": not same, "path": path}
