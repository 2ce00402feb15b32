# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's on-host life as one state machine (issue 39): compare, keep, land, restart, verify, gates, then
keep the new set and write the record, or restore EVERYTHING the change touched and verify the restored server.

Every collaborator is injected, so that the unit tests run it with fakes and a temporary directory:

- ``systemctl``: ``show_props(unit)``, ``stop(unit)``, ``enable(unit)``, ``daemon_reload()`` (onhost.HostSystemctl);
- ``run(argv) -> (rc, out, err)``: commands (``systemd-analyze verify``);
- ``runner_factory(state, read_only=False, restore=False)``: a ``_service_runner.ServiceRunner``-like object for
  ``restarted`` / ``started`` / ``verified`` with ``execute() -> (ok, result)``; ``read_only`` gives it a state
  store that writes nothing (``state: verified``);
- ``answers_gate(invocation_id) -> dict`` (``_answers.gate``'s result: ``failed``, ``msg``) and
  ``bench_gate(only_without_baseline) -> dict`` (``ran``, ``bench``, ``gate``, ``regression``, ``msg``), None when
  off; ``recorder(verified, bench_result) -> dict`` (the deployment record), None when off;
- ``stop_strays() -> [processes]`` and ``free_gpus() -> [processes]``, None when off;
- ``clock() -> seconds``.

Phases: ``converge`` (one host, all of it), or ``prepare`` / ``restart`` / ``commit`` / ``restore`` for a group
whose YAML takes the verdict across hosts, ``verified`` (writes nothing) and ``due`` (reads only). A failure
raises ``LifecycleFailure`` with the message of the role's former restart.yml and the result so far."""

from __future__ import annotations

import os
import re
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import (
    _last_good, _model_check, _record, _secrets, _state_file, _timeline, _weight_cache)
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import installed_release
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import layout
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.claim import inputs_claim
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.land import LandError, land
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.onhost import read_host
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.plan import plan as make_plan

HEAD_CHANGE = "the new configuration failed verification"
HEAD_UNKNOWN = "the running invocation, which no run had verified (a killed run left it), failed verification"
HEAD_UNFINISHED = ("an earlier run left its rollback unfinished; this run finished it and did NOT apply its own "
                   "change (run it again to apply it)")
RUNNER_STATE = {"restart": "restarted", "start": "started", "verify_only": "started", "none": "started",
                "keep_only": "started"}
NOT_STOPPING = ("active", "activating", "deactivating", "reloading")


class LifecycleFailure(Exception):
    """The call fails with ``msg``; ``result`` is the module's result so far."""

    def __init__(self, msg, result):
        Exception.__init__(self, msg)
        self.msg = msg
        self.result = result


class RollbackIncomplete(Exception):
    """A file of the last good set cannot be put back (its kept copy is gone, and the change kept none)."""


class Killed(BaseException):
    """Only for tests: a kill in the middle of a step (not caught by the machine's own handlers)."""


# Fixed texts of this module (the due reasons, the actions taken) hold words such as "secrets file" that the
# masking rule would take for a field: in them only the known secret values are replaced.
LITERAL_ONLY = ("reasons", "actions")


def mask_all(value, secrets, rule=True):
    """Every string in ``value`` through the one masking rule (_secrets.scrub; ``rule`` False: only the known
    secret values replaced; under LITERAL_ONLY keys too)."""
    return _secrets.scrub(value, secrets, rule, LITERAL_ONLY)


VENV_RELEASE_RE = re.compile(r"sglang-(\d+(?:\.\d+)+(?:\.post\d+)?)-[0-9a-f]{12}")


def release_of(python, venv=""):
    """The SGLang release a unit's interpreter runs: the versioned venv's name (``sglang-<release>-<12 hex>``),
    else the sglang distribution beside the interpreter (importlib.metadata), else ''."""
    for path in (venv, python):
        match = VENV_RELEASE_RE.search(path or "")
        if match:
            return match.group(1)
    if python and os.path.exists(python):
        return installed_release(python) or ""
    return ""


def _utc(seconds):
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(seconds or 0)))
    except (TypeError, ValueError):
        return "?"


class ServerLifecycle(object):
    # the role variable that turns the rollback off (named in "No rollback: ... is false")
    ROLLBACK_SWITCH = "sglang_rollback"

    def __init__(self, desired, systemctl, run, runner_factory, answers_gate=None, bench_gate=None, recorder=None,
                 stop_strays=None, free_gpus=None, gates_here=True, check_mode=False, clock=time.time,
                 force_restart=False, group=""):
        self.desired = desired
        self.systemctl = systemctl
        self.run = run
        self.runner_factory = runner_factory
        self.answers_gate = answers_gate
        self.bench_gate = bench_gate
        self.recorder = recorder
        self.stop_strays = stop_strays
        self.free_gpus = free_gpus
        self.gates_here = bool(gates_here)
        self.check_mode = bool(check_mode)
        self.clock = clock
        self.force_restart = bool(force_restart)
        self.group = group or ""    # the group change this call is a phase of (a server over several hosts)
        self.directory = None     # the unit's state directory, settled by the first read (_server/layout.py)
        self.moved = ""
        self.secrets = list(desired.secrets_to_mask)
        for spec in desired.files:
            if spec.secret and spec.content:
                self.secrets.extend(_secrets.config_secrets(spec.content.decode("utf-8", "replace")))
        self.result = {"changed": False, "action": "none", "reasons": [], "due": False, "diff": [], "actions": [],
                       "restart": {}, "bench": {}, "bench_gate": {}, "answers": {}, "record": {}, "inputs": {},
                       "rolled_back": False, "rollback": {}, "notices": [], "msg": ""}
        self.plan = None
        self.host = None

    # ---- small helpers ----------------------------------------------------------------------------------------
    def did(self, what, changed=True):
        self.result["actions"].append(what)
        if changed:
            self.result["changed"] = True

    def notice(self, text):
        self.result["notices"].append(text)

    def finish(self):
        return mask_all(self.result, self.secrets)

    def failure(self, msg):
        self.result["msg"] = msg
        self.result["serving_verified"] = self.serving_verified()
        return LifecycleFailure(_secrets.mask(msg, self.secrets), self.finish())

    def serving_verified(self):
        """Whether, after this failure, the unit serves a verified set: it was rolled back and the restored set
        verified, or this call never restarted nor verified anything and the running invocation is the one the last
        good set names. The one answer a rollout reads before it puts a worker back in the routers (issue 47)."""
        if self.result.get("rolled_back"):
            return True
        host = self.host
        if host is None or self.result.get("restart") or self.result.get("landed"):
            return False
        # the state file's answer (_state_file: the one record of the verified invocation), through the plan
        return host.active_state == "active" and self.plan is not None and self.plan.running_verified(host.invocation_id)

    def read(self, own_txn=False):
        if self.directory is None:
            self.directory, self.moved = layout.state_dir(self.desired, self.check_mode)
            if self.moved and not self.check_mode:
                self.did(self.moved)
        self.host = read_host(self.desired, self.systemctl, self.directory)
        # the ONE record of which invocation is verified (_state_file); the plan reads it, never the manifest's copy
        self.host.state_record = self.desired.verified_record()
        # the invocation the deployment record's twin names ("" when none): a record naming another invocation than
        # the state file is rewritten (commit_set), whatever run was killed before its recorder
        self.host.record_invocation = _record.recorded_invocation((self.desired.record or {}).get("record_json_path"))
        self.plan = make_plan(self.desired, self.host, own_txn=own_txn)
        self.result.update(action=self.plan.action, reasons=list(self.plan.reasons), due=self.plan.due,
                           diff=list(self.plan.diff), stale=list(self.plan.stale))
        return self.plan

    def reference(self, invocation, verified):
        """What the manifest carries of the state file (``_state_file.reference``), None for a unit without one."""
        if not self.desired.state_file:
            return None
        return _state_file.reference(self.desired.state_file, invocation, verified)

    def record_stale(self, invocation):
        """This run finishes a change an earlier run left open (its transaction, read with the host) and the
        deployment record's twin names another invocation than ``invocation``, the verified one (the state file's):
        that run was killed before its recorder (which runs before the close). A record left naming another
        invocation by a rollback or a restart outside the machine is no change to finish."""
        return bool(self.recorder is not None and invocation and self.host.txn
                    and (self.desired.record or {}).get("record_json_path")
                    and getattr(self.host, "record_invocation", "") != invocation)

    def txn_copies(self, record):
        entries = (record or {}).get("files", {}).values()
        return any(isinstance(entry, dict) and entry.get("kept_at") for entry in entries)

    def manifest_restorable(self, manifest=None):
        data = self.host.manifest if manifest is None else manifest
        files = data.get("files") if isinstance(data.get("files"), dict) else {}
        return [path for path, entry in files.items() if isinstance(entry, dict) and entry.get("restorable")]

    def can_restore(self):
        return bool(self.manifest_restorable() or self.txn_copies(txn_mod.load(self.directory)))

    # ---- the phases -------------------------------------------------------------------------------------------
    def due(self):
        """``state: due``: read and plan only."""
        self.read()
        return self.finish()

    def check(self):
        """Check mode: the plan and the diff, nothing written."""
        acts = ("restart", "start", "finish_restore", "keep_only")
        self.result["changed"] = self.plan.writes or self.plan.action in acts
        self.result["actions"] = ["would %s" % what for what in self.plan_words()]
        if self.moved:
            self.result["actions"].append(self.moved)
            self.result["changed"] = True
        if self.stop_strays is not None:
            # the stray servers a real run would stop (before_start; the check mode's stop_strays only lists them)
            strays = self.stop_strays() or []
            self.result["strays"] = strays
            self.result["actions"] += ["would stop pid %s %s" % (proc.get("pid"), proc.get("cmdline", ""))
                                       for proc in strays]
            self.result["changed"] = self.result["changed"] or bool(strays)
        running = self.host.invocation_id
        if self.plan.running_verified(running) and self.record_stale(running):
            self.result["actions"].append("would write the deployment record (it names another invocation than %s)"
                                          % running)
            self.result["changed"] = True
        if self.plan.action in ("restart", "start"):
            # what the change will cost in downtime, from this host's recorded restarts (issue 49)
            self.result["restart"] = {"predicted_downtime": self.predicted_downtime()}
        return self.finish()

    def predicted_downtime(self):
        """The downtime of the restart this run would make, predicted from this host's recorded restarts of the
        same release, model and flags (_timeline.predict over the record and its history), with why the weights
        cannot be kept across it (_weight_cache.refusals) and what loading them costs. Reads only."""
        record = getattr(self.desired, "record", None) or {}
        if not record.get("cmdline"):
            return {"basis": "no history", "downtime_s": None, "msg": "no history: no deployment record is kept"}
        try:
            release = release_of(record.get("python") or "", self.desired.venv_versioned)
            key = _timeline.restart_key(record["cmdline"], release)
            args = _timeline.flag_args(key["flags"])
            config = _model_check.read_config(key["model"]) if key["model"] else None
            refusals = [text.replace("sglang_weight_cache: ", "").split("; nothing was changed")[0]
                        for text in _weight_cache.refusals(release, args, config, model_path=key["model"])]
            records = _record.restart_records(record.get("record_json_path") or "",
                                              record.get("record_history_dir") or "", self.desired.service)
            return _timeline.predict(records, key, refusals)
        except Exception as exc:  # pylint: disable=broad-except  # a prediction never fails a check
            return {"basis": "unavailable", "downtime_s": None,
                    "msg": "the downtime could not be predicted: %s: %s" % (type(exc).__name__, exc)}

    def plan_words(self):
        words = ["land %s" % spec.path for spec in self.plan.land]
        words += ["create %s" % spec.path for spec in self.plan.dirs]
        if self.plan.daemon_reload:
            words.append("daemon-reload")
        if self.plan.enable:
            words.append("enable %s" % self.desired.unit)
        if self.plan.action != "none":
            words.append(self.plan.action.replace("_", " "))
        return words

    def verified(self):
        """``state: verified``: verify the running invocation; write NOTHING (not even the state file)."""
        ok, res = self.runner_factory("verified", read_only=True).execute()
        self.result["restart"] = res
        self.result["action"] = "verified"
        if not ok:
            raise self.failure("%s: the running server did not verify: %s" % (self.desired.service, res.get("msg", "")))
        return self.finish()

    def apply_force(self, why):
        """A restart asked although none is due here (a rolling restart, or due on another node of a group): a
        phase of this machine, rolled back like any restart."""
        if self.plan.action in ("none", "keep_only", "verify_only"):
            self.plan.action = "restart"
            self.result.update(action="restart", due=True)
            self.result["reasons"].append(why)

    def converge(self):
        """One host: everything, in one call."""
        self.read()
        if self.force_restart:
            self.apply_force("a restart was asked (force_restart: a rolling restart)")
        if self.check_mode:
            return self.check()
        self.settle_open()
        self.prepare_files()
        self.before_start()
        verified = self.start_and_verify(rollback=self.plan.rollback_applies)
        bench = self.gates(verified, rollback=self.plan.rollback_applies)
        self.commit_set(verified, bench)
        return self.finish()

    def group_state(self):
        """What the group's verdict (_server/group.py) needs of this node: its open group change (id, phase, the
        decision recorded) and the group change its last good set was kept by."""
        record = self.host.txn or {}
        state = {"kept_group": self.host.manifest.get("group") or ""}
        if record and "group" in record and not self.host.restore_open:
            state["open"] = {"id": record.get("group") or "", "phase": record.get("phase") or "",
                             "decision": record.get("decision") or ""}
        return state

    def prepare(self):
        """A group's first phase: plan, land, enable, reload; no restart. A group change an earlier run left open
        here is NOT settled by this node alone (it may have been kept on the others): it is reported, this run
        lands nothing, and the group's verdict finishes it on every node as it was decided."""
        self.read()
        self.result["group_state"] = self.group_state()
        if self.result["group_state"].get("open"):
            self.result["restart_due"] = False
            self.notice("%s: an earlier run's change of this server (group change %s, phase %s) is open on this "
                        "node: the group finishes it as it was decided before this run changes anything"
                        % (self.desired.service, self.result["group_state"]["open"]["id"] or "?",
                           self.result["group_state"]["open"]["phase"] or "?"))
            return self.finish()
        if self.check_mode:
            return self.check()
        self.settle_open()
        self.prepare_files()
        self.result["restart_due"] = self.plan.action in ("restart", "start", "verify_only") or self.force_restart
        return self.finish()

    def restart(self, force=False):
        """A group's second phase: restart (or start, or verify an unknown invocation) when due here or
        ``force`` (a restart due on one node is due on all), then the gates where ``gates_here``."""
        self.read(own_txn=True)
        if force:
            # due on another node: --check says so too (a node restarted alone cannot join the others' ranks)
            self.apply_force("a restart is due on another node of this server")
        if self.check_mode:
            return self.check()
        if self.plan.action == "finish_restore":
            raise self.failure("%s: an earlier run left its rollback unfinished: run the prepare phase first"
                               % self.desired.service)
        self.before_start()
        # nothing restarts here when no node is due: no transaction, so that a kill or a flaky gate now leaves
        # nothing the next run would take for a change to finish (issue 47 defect 5)
        restarting = self.plan.action not in ("none", "keep_only")
        if restarting:
            if not txn_mod.load(self.directory):
                # nothing landed here (a stale invocation, or a restart due on another node): a record all the
                # same, so that the commit phase can report this phase's restart
                txn_mod.begin(self.directory, self.desired.service, [], clock=self.clock, group=self.group)
            self.txn_phase("restarting")
        verified = self.start_and_verify(rollback=False)
        self.result["verified"] = True
        self.gates(verified, rollback=False)
        self.result["gates_passed"] = True
        if restarting:
            # the commit phase reports this restart as the group's (sglang_server_restart): kept with the change
            self.txn_phase("restarted", restart=dict((k, v) for k, v in verified.items() if k != "journal_tail"))
        return self.finish()

    def decide(self):
        """The group's verdict was a pass: the decision (keep) recorded in this node's open change, durably, before
        any node acts on it. A later run that finds this node's change open finishes it as kept on every node; a
        change with no decision recorded anywhere is rolled back (presumed abort)."""
        self.read(own_txn=True)
        self.result["group_decision"] = "commit"
        if self.check_mode:
            return self.check()
        self.record_keep(txn_mod.load(self.directory))
        return self.finish()

    def record_keep(self, record):
        """The decision (keep) written into this node's open change, where it is not there yet."""
        if record and record.get("decision") != "commit":
            txn_mod.set_phase(self.directory, record, record.get("phase") or "restarted", decision="commit",
                              group=record.get("group") or self.group)

    def finish_group(self, group, keep, reason=""):
        """The group's decision on group change ``group``, on this node: keep it (``commit``) where this node's
        open change is that one or none is open, else put back this node's files and verify (``restore_phase``).
        Idempotent: run again after a failure or a kill, it ends in the same state."""
        self.read(own_txn=True)
        record = self.host.txn or {}
        if keep and (not record or (record.get("group") or "") == (group or "")):
            result = self.commit()
            result["msg"] = ("%s: %s.\nThe group decided to KEEP its change %s: this node's commit is done (invocation "
                             "%s kept as the last good one); no node was restored."
                             % (self.desired.service, reason or "a step of the group failed", group or "?",
                                (self.result.get("inputs") or {}).get("invocation_id") or "?"))
            return result
        return self.restore_phase(reason or "the group's verdict on its change %s was a no" % (group or "?"))

    def commit(self):
        """A group's verdict was a pass: keep the set the verified invocation read, close the change, venv link,
        record, claim. The decision is recorded first where the decide phase did not (it ran before any commit)."""
        self.read(own_txn=True)
        self.result["group_decision"] = "commit"
        if self.check_mode:
            return self.check()
        record = txn_mod.load(self.directory)
        if record:
            # the set is kept under the group change it belongs to (an earlier run's, when this finishes it)
            self.group = record.get("group") or self.group
            self.record_keep(record)
        else:
            # nothing changed here in this group change: the kept set stays under the change that kept it, so that
            # a no-op run rewrites nothing
            self.group = self.host.manifest.get("group") or ""
        restarted = (txn_mod.load(self.directory) or {}).get("restart") or {}
        ok, res = self.runner_factory("verified").execute()
        # the restart phase's result, as a single host's converge reports its restart
        self.result["restart"] = restarted if restarted else res
        if not ok:
            raise self.failure("%s: the server to commit did not verify: %s. Nothing was kept."
                               % (self.desired.service, res.get("msg", "")))
        self.plan.keep_needed = True
        try:
            self.commit_set(res, None)
        except (OSError, ValueError) as exc:
            # the keep or the record failed here (a full /etc, a file in the way): the group decided to keep, so
            # this node is never restored alone; its change stays open, decided, and the next run finishes it
            words = (self.desired.service, self.group or "?", type(exc).__name__, exc)
            raise self.failure("%s: the group decided to KEEP its change %s, and this node's commit failed (%s: %s): "
                               "it serves the new configuration, verified; the next run finishes its commit (this "
                               "node is never restored alone)" % words)
        return self.finish()

    def restore_phase(self, reason):
        """A group's verdict was a no: restore this node's last good set and verify it. A node whose change
        landed but never restarted (the verdict before any restart was a no) only puts back the files its change
        replaced: its server never stopped and still runs what it read."""
        self.read(own_txn=True)
        if self.check_mode:
            return self.check()
        record = self.host.txn or {}
        if record.get("decision") == "commit":
            # the group decided to keep this change: this node's commit is retried, never restored alone
            raise self.failure("%s: %s. This node's change (group change %s) was decided KEPT for every node: it is "
                               "not restored alone (that would break the running group); the next run finishes "
                               "its commit." % (self.desired.service, reason, record.get("group") or "?"))
        if not self.host.restore_open and record.get("phase", "landing") in self.NOT_RESTARTED:
            undone = self.undo_landed(record)
            self.result["msg"] = ("%s: %s.\nNothing was stopped or restarted on %s: %s."
                                  % (self.desired.service, reason, self.desired.host_name or "this node",
                                     "the files this change had landed were put back (%s)"
                                     % ", ".join(undone) if undone else "this change had landed nothing"))
            return self.finish()
        if not self.desired.rollback:
            txn_mod.close(self.directory)
            raise self.failure("%s: %s. No rollback: %s is false."
                               % (self.desired.service, reason, self.ROLLBACK_SWITCH))
        if not self.can_restore():
            txn_mod.close(self.directory)
            raise self.failure("%s: %s. No rollback: there is no previous unit (first deployment)."
                               % (self.desired.service, reason))
        outcome = self.restore(reason)
        if not outcome["ok"]:
            raise self.failure("%s: %s.\n%s" % (self.desired.service, reason, self.rollback_words(outcome)))
        self.result["msg"] = "%s: %s.\n%s" % (self.desired.service, reason, self.rollback_words(outcome))
        return self.finish()

    # ---- the steps --------------------------------------------------------------------------------------------
    NOT_RESTARTED = ("landing", "landed")

    def undo_landed(self, record):
        """A change that landed files and never restarted the server: each file it replaced put back as it was
        (one it created removed), systemd reloaded, the transaction closed. Nothing stops. Returns the paths."""
        undone = []
        if record:
            outcome = txn_mod.restore(record)
            undone = outcome["put_back"] + ["%s (removed)" % path for path in outcome["removed"]]
            if undone:
                self.systemctl.daemon_reload()
                self.did("put back the files of a change that never restarted: %s" % ", ".join(undone))
        txn_mod.close(self.directory)
        self.result["rolled_back"] = bool(undone)
        return undone

    def settle_open(self):
        """An open transaction or restore of an earlier run is finished first (and the call fails saying so); a
        transaction already verified and kept is only closed; one with nothing to go back to (a first
        deployment) or under ``rollback: false`` is closed and this call goes on."""
        if self.plan.txn_settled:
            txn_mod.close(self.directory)
            self.did("closed the transaction of a change verified and kept", changed=True)
        if self.plan.action != "finish_restore":
            return
        record = self.host.txn
        if not self.host.restore_open and record and record.get("phase", "landing") in self.NOT_RESTARTED:
            # killed after it landed files and before any restart: the server still runs what it read; the files
            # go back and this call applies its own change
            undone = self.undo_landed(record)
            self.notice("%s: an earlier run's change (begun at %s) landed files and never restarted the server; "
                        "%s, and this run applies its own change"
                        % (self.desired.service, _utc(record.get("since")),
                           "they were put back (%s)" % ", ".join(undone) if undone else "nothing was to put back"))
            self.read()
            return
        if not self.host.restore_open and (not self.desired.rollback or not self.can_restore()):
            txn_mod.close(self.directory)
            self.notice("%s: an earlier run's change (begun at %s) did not finish; %s: its transaction is closed "
                        "and this run applies its own change"
                        % (self.desired.service, _utc(record.get("since")),
                           "%s is false" % self.ROLLBACK_SWITCH if not self.desired.rollback
                           else "there is nothing to go back to"))
            self.did("closed an unfinished transaction", changed=True)
            self.read()
            return
        if self.host.restore_open:
            opened = self.host.restore_open
            first = ("an earlier run's rollback of %s did not finish (begun at %s, back to the set of invocation %s; "
                     "%s): the last good set goes back now"
                     % (self.desired.service, _utc(opened.get("since")), opened.get("invocation_id") or "?",
                        opened.get("reason") or ""))
        else:
            first = ("an earlier run's change of %s did not finish (begun at %s, phase %s%s): the files it replaced "
                     "go back now" % (self.desired.service, _utc(record.get("since")), record.get("phase") or "?",
                                      ", " + record["problem"] if record.get("problem") else ""))
        self.did("finish the rollback an earlier run left open")
        outcome = self.restore("finishing an earlier run's unfinished rollback")
        raise self.failure("%s: %s: %s\n%s" % (self.desired.service, HEAD_UNFINISHED, first,
                                               self.rollback_words(outcome)))

    def txn_phase(self, phase, **extra):
        record = txn_mod.load(self.directory)
        if record and not self.check_mode:
            txn_mod.set_phase(self.directory, record, phase, **extra)

    def prepare_files(self):
        """Open the transaction, land, enable, reload."""
        plan = self.plan
        if not (plan.land or plan.dirs or plan.enable):
            return
        if plan.land or plan.dirs:
            txn_mod.begin(self.directory, self.desired.service, [spec.path for spec in plan.land],
                          self.desired.secret_paths, self.desired.keep_secrets, self.clock, group=self.group,
                          removing=[spec.path for spec in plan.land if spec.content is None])
        try:
            landed = land(plan, self.desired, self.run, systemctl=self.systemctl, clock=self.clock)
        except LandError as exc:
            # refused before any file landed (a unit systemd-analyze refuses, an owner that does not exist)
            txn_mod.close(self.directory)
            raise self.failure("%s: %s" % (self.desired.service, exc))
        self.result["landed"] = landed
        for path in landed["landed"]:
            self.did("landed %s" % path)
        for path in landed["removed"]:
            self.did("removed %s" % path)
        for path in landed["dirs"]:
            self.did("directory %s" % path)
        if landed["daemon_reload"]:
            self.did("daemon-reload")
        if landed["enabled"]:
            self.did("enabled %s" % self.desired.unit)
        self.txn_phase("landed")

    def before_start(self):
        """Stop the stray servers the operator named; free the GPUs before a start of a unit that is down."""
        if self.stop_strays is not None:
            processes = self.stop_strays() or []
            self.result["strays"] = processes
            for proc in processes:
                self.did("%s: pid %s %s" % (proc.get("result"), proc.get("pid"), proc.get("cmdline", "")),
                         changed=proc.get("result") in ("stopped", "killed"))
        if (self.free_gpus is not None and self.host.active_state not in NOT_STOPPING
                and self.plan.action in ("restart", "start", "verify_only")):
            try:
                freed = self.free_gpus() or []
            except Exception as exc:  # pylint: disable=broad-except
                raise self.failure("%s: the GPUs could not be freed before the start (%s); the server was not "
                                   "started%s" % (self.desired.service, exc,
                                                  "; the files this run landed go back with the next run"
                                                  if txn_mod.load(self.directory) else ""))
            self.result["gpus_freed"] = freed
            for proc in freed:
                self.did("stopped GPU holder pid %s %s: %s" % (proc.get("pid"), proc.get("process_name", ""),
                                                               proc.get("result")),
                         changed=proc.get("result") in ("stopped", "killed"))

    def head(self):
        return HEAD_UNKNOWN if self.plan.action == "verify_only" else HEAD_CHANGE

    def start_and_verify(self, rollback):
        """The restart, start or verification of this call through the service runner; on failure the restore
        (when ``rollback``) and the failure."""
        action = self.plan.action
        if action == "verify_only" and self.plan.unkept_set:
            self.notice("%s: the running invocation %s was verified (%s) but the files it read are not the last good "
                        "set (a restart outside this role after a change by hand?); gating it now, and putting the last "
                        "good configuration back if it fails"
                        % (self.desired.service, self.host.invocation_id, self.desired.state_file or "its start"))
        elif action == "verify_only":
            self.notice("%s: the running invocation %s was never verified by this role (the last verified one was %s: "
                        "a run killed during its restart, a reboot or a crash restarted by systemd); verifying it "
                        "now, and putting the last good configuration back if it fails"
                        % (self.desired.service, self.host.invocation_id,
                           " or ".join(self.plan.verified) or "none"))
        if action in ("restart", "start"):
            # from here on the server may have stopped or read the new files: a kill leaves a change to restore
            self.txn_phase("restarting")
        ok, res = self.runner_factory(RUNNER_STATE.get(action, "started")).execute()
        self.result["restart"] = res
        if res.get("changed"):
            self.did({"restart": "restarted", "start": "started"}.get(action, "started") + " " + self.desired.unit)
        else:
            self.did("verified %s" % self.desired.unit, changed=False)
        if not ok:
            self.fail_verification(res.get("msg", ""), res, rollback)
        return res

    def fail_verification(self, reason, failed, rollback):
        """The failure of a change (or of a gate after it): the restore when ``rollback`` applies, then the one
        message for every outcome."""
        head = self.head()
        if not rollback:
            if self.plan.action == "start" or self.plan.action in ("none", "keep_only"):
                raise self.failure("%s: %s%s" % (self.desired.service, reason, self.journal_words(failed)))
            raise self.failure("%s: %s: %s%s" % (self.desired.service, head, reason, self.journal_words(failed)))
        if not self.desired.rollback:
            txn_mod.close(self.directory)
            words = "No rollback: %s is false." % self.ROLLBACK_SWITCH
        elif not self.can_restore():
            txn_mod.close(self.directory)
            words = "No rollback: there is no previous unit (first deployment)."
        else:
            what = ("the running invocation failed verification" if self.plan.action == "verify_only"
                    else "the change failed verification")
            outcome = self.restore("%s on %s" % (what, self.desired.host_name or "this host"))
            words = self.rollback_words(outcome)
        raise self.failure("%s: %s: %s\n%s%s" % (self.desired.service, head, reason, words,
                                                 self.journal_words(failed)))

    JOURNAL_TAIL = 25

    def journal_words(self, failed):
        """The failed invocation's last journal lines: read again now (its own last lines - SGLang's "Received
        sigquit from a child process", the stop - may have come after the verification gave up, on a busy host or
        during the rollback's stop), else the runner's tail; masked."""
        if not failed:
            return ""
        tail = list(failed.get("journal_tail") or [])
        invocation = failed.get("invocation_id") or ""
        if invocation and not self.check_mode:
            try:
                rc, out, _err = tuple(self.run(["journalctl", "_SYSTEMD_INVOCATION_ID=%s" % invocation, "-n",
                                                str(self.JOURNAL_TAIL), "-o", "cat", "--no-pager"], timeout=30))[:3]
            except (OSError, ValueError, TypeError):
                rc, out = 1, ""
            if rc == 0 and out.strip():
                tail = out.splitlines()
        tail = [_secrets.mask(line, self.secrets) for line in tail]
        return "\nJournal of the failed invocation (last lines):\n" + "\n".join(tail)

    def rollback_words(self, outcome):
        if outcome.get("incomplete"):
            return ("ROLLBACK INCOMPLETE: %s. The restore stays open: the next run tries again." % outcome["msg"])
        if not outcome["ok"]:
            return ("ROLLBACK FAILED too: the previous configuration did not verify: %s\nThe restore stays open: the "
                    "next run puts the last good set back again and verifies it." % outcome.get("msg", ""))
        res = outcome["result"]
        words = ("Rolled back: the last good configuration serves again (invocation %s, /health %s)."
                 % (res.get("invocation_id"), res.get("health_status")))
        back = outcome["put_back"] + ["%s (removed)" % path for path in outcome["removed"]]
        if outcome["source"] == "manifest":
            words += "\nPut back as the last verified start had them: %s." % (", ".join(back) or "nothing differed")
        else:
            words += ("\nPut back: the files this change replaced, as they were before it (this host has no "
                      "last-good manifest yet): %s." % (", ".join(back) or "nothing differed"))
        if self.desired.venv_versioned:
            words += ("\nVenvs: the unit put back names the venv it ran; %s (the install record's) stays installed, "
                      "and the link %s was not switched." % (self.desired.venv_versioned, self.desired.venv_link))
        return words

    def restore_runner(self):
        """The runner that restarts and verifies the restored set (a subclass may verify it otherwise)."""
        return self.runner_factory("restarted", restore=True)

    def restore(self, reason):
        """Put back every file the change touched and verify the restored server: the restore opened first
        (restore.json: the next call finishes it if this one is killed), the unit stopped (no automatic restart of
        the failing configuration meanwhile), the last-good manifest's set put back (the secrets file only when
        it was kept), the transaction's copies for what the manifest does not cover, daemon-reload, restart,
        verify; on success the set kept under the rolled-back invocation (closes the restore) and the transaction
        closed. On failure both stay open."""
        outcome = {"ok": False, "result": {}, "put_back": [], "removed": [], "missing": [], "source": "manifest",
                   "msg": ""}
        self.result["rolled_back"] = False
        try:
            restorable = self.manifest_restorable(_last_good.load_manifest(self.directory)[0])
            if restorable:
                _last_good.begin_restore(self.directory, reason)
            else:
                outcome["source"] = "transaction"
            self.txn_phase("restoring")
            self.systemctl.stop(self.desired.unit)
            self.did("stopped %s (rollback)" % self.desired.unit)
            # a companion holding the failed set's weights on the GPUs (the Weight Cache Daemon) goes too: the
            # restored unit would load its own beside them; a restored client starts it again (its ExecStartPre)
            for unit in getattr(self.desired, "companion_units", []):
                self.systemctl.stop(unit)
                self.did("stopped %s (rollback: it holds GPU memory the restored set may need)" % unit)
            lost, kept_files = [], {}
            if restorable:
                back = _last_good.restore(self.directory, secret_paths=self.desired.secret_paths,
                                          redact=[self.desired.env_path])
                for key in ("put_back", "removed", "missing"):
                    outcome[key].extend(back[key])
                lost, kept_files = back["missing_paths"], back["manifest"].get("files") or {}
            record = txn_mod.load(self.directory)
            if record:
                # a file whose kept copy is gone goes back from this change's own copy (issue 47 defect 4)
                back = txn_mod.restore(record, skip=set(restorable) - set(lost))
                for key in ("put_back", "removed", "missing"):
                    outcome[key].extend(back[key])
            unrestored = [path for path in lost if path not in outcome["put_back"] + outcome["removed"]
                          and _last_good.file_state(path, checksum=True).get("sha256")
                          != (kept_files.get(path) or {}).get("sha256")]
            if unrestored:
                raise RollbackIncomplete(
                    "the kept copy of %s is gone and this change kept none: %s still hold%s the failed change's "
                    "content, so the last good set cannot be put back whole; the unit stays stopped (restore the "
                    "file%s by hand, or deploy a configuration that verifies)"
                    % (", ".join(unrestored), ", ".join(unrestored), "s" if len(unrestored) == 1 else "",
                       "" if len(unrestored) == 1 else "s"))
            self.systemctl.daemon_reload()
            ok, res = self.restore_runner().execute()
            outcome["result"] = res
            if not ok:
                outcome["msg"] = res.get("msg", "")
            else:
                _last_good.keep(self.directory, self.desired.input_files, self.desired.restorable,
                                secret_paths=self.desired.secret_paths, invocation_id=res.get("invocation_id") or "",
                                keep_secrets=self.desired.keep_secrets, group=self.group,
                                redact=[self.desired.env_path],
                                verified=self.reference(res.get("invocation_id") or "", res))
                txn_mod.close(self.directory)
                outcome["ok"] = True
        except RollbackIncomplete as exc:
            outcome["msg"] = str(exc)
            outcome["incomplete"] = True
        except Exception as exc:  # pylint: disable=broad-except  # the message says it; the restore stays open
            outcome["msg"] = "%s: %s" % (type(exc).__name__, exc)
        for path in outcome["put_back"]:
            self.did("put back %s" % path)
        for path in outcome["removed"]:
            self.did("removed %s (rollback)" % path)
        self.result["rolled_back"] = outcome["ok"]
        self.result["rollback"] = {"ok": outcome["ok"], "put_back": outcome["put_back"],
                                   "removed": outcome["removed"], "missing": outcome["missing"],
                                   "source": outcome["source"], "result": outcome["result"], "msg": outcome["msg"]}
        return outcome

    def gates(self, verified, rollback):
        """The gates where this host runs them: after a restart (a failure restores when ``rollback``) the
        benchmark then the answers; on a server this call did not restart the answers, then the benchmark only
        to set a missing baseline (or after a first start)."""
        if not self.gates_here:
            return None
        began = self.clock()
        bench = self._gates(verified, rollback)
        if isinstance(verified, dict) and isinstance(verified.get("timeline"), dict):
            # the gates run against a server that answers: their time is beside the downtime, not in it
            verified["timeline"]["gates_s"] = round(self.clock() - began, 3)
        return bench

    def _gates(self, verified, rollback):
        bench = None
        restarted = self.plan.action in ("restart", "verify_only") or rollback
        order = ("bench", "answers") if restarted else ("answers", "bench")
        for gate in order:
            if gate == "bench" and self.bench_gate is not None:
                self.txn_phase("gates")
                try:
                    bench = self.bench_gate(not restarted and not verified.get("changed")) or {}
                except Exception as exc:  # pylint: disable=broad-except
                    bench = {"ran": True, "regression": True, "msg": "benchmark gate: %s" % exc}
                self.result["bench"] = bench.get("bench") or {}
                self.result["bench_gate"] = bench.get("gate") or {}
                if bench.get("ran"):
                    self.did("benchmarked", changed=False)
                if bench.get("regression"):
                    self.fail_verification(bench.get("msg") or "benchmark regression", None, rollback)
            if gate == "answers" and self.answers_gate is not None:
                self.txn_phase("gates")
                try:
                    answers = self.answers_gate(verified.get("invocation_id") or "") or {}
                except Exception as exc:  # pylint: disable=broad-except
                    answers = {"failed": True, "msg": "correctness gate: %s" % exc}
                self.result["answers"] = answers
                if answers.get("changed"):
                    self.did("recorded the answers baseline")
                if answers.get("failed") and not restarted and not verified.get("changed"):
                    # a server this run did not change nor restart, under whatever traffic it serves: the gate
                    # reports, it never fails or rolls back a server nobody changed (issue 47 defect 10)
                    self.notice("%s: the correctness gate on the running server, which this run neither changed nor "
                                "restarted, found other answers (reported only; nothing was rolled back): %s"
                                % (self.desired.service, answers.get("msg") or "answers differ"))
                elif answers.get("failed"):
                    self.fail_verification(answers.get("msg") or "correctness gate failed", None, rollback)
        return bench

    def commit_set(self, verified, bench):
        """The verdict is a pass: keep the set (only where the manifest is not already this invocation's exact
        set), claim, venv link, record, then close the transaction: a run killed before its record leaves the change
        open, and the run that finishes it writes the record where it names another invocation (``record_stale``)."""
        plan = self.plan
        invocation = verified.get("invocation_id") or ""
        manifest = self.host.manifest
        # which invocation is verified is the state file's (plan.verified); the manifest's copy is never compared
        if plan.keep_needed or plan.action in ("restart", "start", "verify_only") or verified.get("changed"):
            self.txn_phase("verified", invocation_id=invocation)
            kept = _last_good.keep(self.directory, self.desired.input_files, self.desired.restorable,
                                   secret_paths=self.desired.secret_paths, invocation_id=invocation,
                                   keep_secrets=self.desired.keep_secrets, group=self.group,
                                   redact=[self.desired.env_path], verified=self.reference(invocation, verified))
            manifest = kept["manifest"]
            if kept["changed"]:
                self.did("kept the last good set of invocation %s" % invocation)
        claim = inputs_claim(manifest, self.desired.rendered(), self.desired.withheld())
        claim["invocation_id"] = invocation or claim["invocation_id"]
        self.result["inputs"] = claim
        if claim["mismatches"]:
            self.close_txn()
            raise self.failure(
                "NOT DEPLOYED on %s: the verified invocation %s of %s read %s with other content than this run "
                "rendered (or did not read it): another run or a hand edit replaced it before the start. This "
                "run's configuration is not what runs; run it again to apply it."
                % (self.desired.host_name or "this host", claim["invocation_id"], self.desired.service,
                   ", ".join(claim["mismatches"])))
        self.venv_link()
        if self.recorder is not None:
            started = plan.action in ("restart", "start", "verify_only") and verified.get("changed")
            missing = bool(self.desired.record_path) and not os.path.lexists(self.desired.record_path)
            ran = bool(bench and bench.get("ran"))
            # a run killed before its record, finished now (record_stale): on a single host or in a group's commit
            stale = self.record_stale(invocation)
            if started or missing or ran or stale or (plan.action in ("none", "keep_only") and verified.get("changed")):
                record = self.recorder(verified, bench) or {}
                self.result["record"] = record
                if record.get("changed"):
                    self.did("wrote the deployment record")
        # closed last: a run killed before it leaves the change open, and the next run finishes it, record included
        self.close_txn()

    def close_txn(self):
        if txn_mod.load(self.directory):
            txn_mod.close(self.directory)

    def venv_link(self):
        """Versioned venvs: the link follows the verified invocation's venv (a directory in its place is left and
        named)."""
        versioned, link = self.desired.venv_versioned, self.desired.venv_link
        if not versioned or not link:
            return
        state = (self.host.links or {}).get(link) or {}
        if state.get("isdir") and not state.get("islnk"):
            self.notice("%s is a directory (an unversioned venv from before gpuserve.sglang 0.2, or one made by hand): "
                        "it is no longer what the unit runs (%s is) and is left as it is. Remove it once you no longer "
                        "need it, and the next run makes %s a link to the running venv." % (link, versioned, link))
            return
        if state.get("islnk") and state.get("target") == versioned:
            return
        tmp = link + ".gpuserve-link"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(versioned, tmp)
        os.rename(tmp, link)
        self.did("linked %s -> %s" % (link, versioned))
