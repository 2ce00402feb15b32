# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan: what a call does, a PURE function of (desired, on-host) - no I/O, tested without a host.

``action`` is one of:

- ``finish_restore``: an earlier run left a rollback (restore.json) or a change (txn.json) open - it is finished
  first, whatever this call was asked (the unit may be stopped on a mix of files);
- ``restart``: a file the server reads lands, or the running invocation is older than one of them (stale), and the
  unit is up, failed or stopping; ``start`` when it is down (a landed change that fails still rolls back);
- ``verify_only``: nothing lands and nothing is stale, but the running invocation is one no verified start knows
  (the unit's state file, ``_state_file.verified_ids``, the ONE record of which invocation is verified, names
  another: a killed run, a reboot, a crash restarted by systemd), or it is verified but the files it read are not
  the last-good set (``unkept_set``: it started outside this module on files no gate has judged);
- ``start``: not running, nothing lands;
- ``keep_only``: the running invocation is the verified one, but the manifest does not name exactly these files,
  a kept copy is gone, the manifest is of the layout before the state file owned the verified invocation, or a
  change verified and gated was killed before its keep (``txn_settled``): keep the set again, no restart;
- ``none``: nothing to do (a no-op: the running invocation is verified, nothing is written).

``reasons`` are the words of the role's former due.yml (the rollout asks them before it drains a worker); ``diff``
shows each file's before and after, never a secret file's text (``<not shown: it holds the keys>``) and the
environment file masked by the one masking rule."""

from __future__ import annotations

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import legacy_manifest, verified_ids
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import (
    CHANGE_WORDS, ENV, LAUNCHER)

SECRET_SHOWN = "<not shown: it holds the keys>"   # a text the masking rule leaves as it is
UP = ("active", "activating", "reloading")
RESTARTABLE = ("active", "activating", "reloading", "failed", "deactivating")
UNKNOWN_STATES = ("active", "activating", "reloading", "failed")
UNFINISHED = "an earlier run left its rollback unfinished"


class Plan(object):
    def __init__(self):
        self.land = []
        self.dirs = []
        self.enable = False
        self.daemon_reload = False
        self.stale = []
        self.action = "none"
        self.reasons = []
        self.diff = []
        self.unknown_invocation = False
        self.unkept_set = False
        self.verified = []
        self.keep_needed = False
        self.txn_settled = False

    @property
    def writes(self):
        """Anything to write before the restart (files, directories, the unit's enablement)."""
        return bool(self.land or self.dirs or self.enable)

    @property
    def due(self):
        return bool(self.reasons)

    @property
    def rollback_applies(self):
        """A failure of this action goes back to the last good set (a restart, a verification of an unknown
        invocation, a start onto landed files); a plain start of an unchanged stopped unit fails as it is."""
        return self.action in ("restart", "verify_only") or (self.action == "start" and bool(self.land))

    def as_dict(self):
        return {"action": self.action, "reasons": list(self.reasons), "land": [spec.path for spec in self.land],
                "dirs": [spec.path for spec in self.dirs], "enable": self.enable,
                "daemon_reload": self.daemon_reload, "stale": list(self.stale),
                "unknown_invocation": self.unknown_invocation, "unkept_set": self.unkept_set,
                "keep_needed": self.keep_needed}

    def running_verified(self, invocation):
        """Whether ``invocation`` (the running one) is verified and runs the last-good set: the one answer for
        "serves a verified set" (no second record is compared)."""
        return bool(invocation) and invocation in self.verified and not self.unkept_set


def file_differs(spec, state):
    """Would landing ``spec`` change the file in ``state`` (content, mode, owner, group; a link is replaced)?"""
    if spec.content is None:
        return bool(state.get("exists"))
    if not state.get("exists") or state.get("islnk"):
        return True
    if state.get("sha256") != spec.sha256:
        return True
    return (state.get("mode"), state.get("owner"), state.get("group")) != (spec.mode, spec.owner, spec.group)


def dir_differs(spec, state):
    if not state.get("exists") or not state.get("isdir"):
        return True
    return (state.get("mode"), state.get("owner"), state.get("group")) != (spec.mode, spec.owner, spec.group)


def stale_files(states, manifest, active_since, invocation_id, verified=None):
    """The files the running invocation does not have (``_last_good.read``'s rule): changed in or after the second
    after it became active (a change within that second counts as older: no spurious restart), or gone although
    the last good set had it and the running invocation is a verified one (``verified``: the state file's answer;
    None: the manifest names ``invocation_id``). [] when it is not running (``active_since`` 0)."""
    if active_since <= 0:
        return []
    newer = [path for path, state in states.items()
             if state.get("exists") and float(state.get("mtime") or 0) >= active_since + 1]
    removed = []
    if verified is None:
        verified = [manifest.get("invocation_id", "")]
    if invocation_id and invocation_id in verified:
        files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
        removed = [path for path, entry in files.items()
                   if isinstance(entry, dict) and entry.get("exists") and path in states
                   and not states[path].get("exists")]
    return list(dict.fromkeys(newer + removed))


def set_differs(manifest, states):
    """Whether the files on the host are not the set the manifest kept: a file it names exists where it did not (or
    the other way round), or has another sha256 (a secret file has none in the manifest: only its existence
    counts). Paths the manifest does not name are not compared (``keep_needed`` covers them)."""
    entries = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for path, entry in entries.items():
        state = states.get(path)
        if not isinstance(entry, dict) or state is None:
            continue
        if bool(entry.get("exists")) != bool(state.get("exists")):
            return True
        if entry.get("exists") and entry.get("sha256") and state.get("sha256") and entry["sha256"] != state["sha256"]:
            return True
    return False


def _attrs(state):
    return "mode %s, owner %s, group %s\n" % (state.get("mode"), state.get("owner"), state.get("group"))


def _text(data):
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")


def file_diff(spec, state, before_bytes, secrets=()):
    """One entry of Ansible's diff list for a file that changes."""
    entry = {"before_header": spec.path, "after_header": spec.path}
    exists = bool(state.get("exists"))
    if spec.secret:
        entry["before"] = (SECRET_SHOWN + "\n" + _attrs(state)) if exists else ""
        entry["after"] = (SECRET_SHOWN + "\n" + _attrs({"mode": spec.mode, "owner": spec.owner, "group": spec.group})
                          if spec.content is not None else "")
        return entry
    before = _text(before_bytes) if exists else ""
    after = _text(spec.content) if spec.content is not None else ""
    if spec.kind == ENV:
        before, after = _secrets.mask(before, secrets), _secrets.mask(after, secrets)
    if exists and spec.content is not None and state.get("sha256") == spec.sha256:
        # same content: the mode, owner or group change
        before, after = _attrs(state), _attrs({"mode": spec.mode, "owner": spec.owner, "group": spec.group})
    entry["before"], entry["after"] = before, after
    return entry


def plan(desired, onhost, own_txn=False):
    """The plan of one call. ``own_txn``: the open transaction is this run's own (a group's prepare left it open
    for its restart, commit or restore phase), not a killed run's."""
    result = Plan()
    for spec in desired.files:
        state = onhost.files.get(spec.path) or {"exists": False}
        if file_differs(spec, state):
            result.land.append(spec)
            result.diff.append(file_diff(spec, state, onhost.texts.get(spec.path), desired.secrets_to_mask))
    for spec in desired.dirs:
        state = onhost.dirs.get(spec.path) or {"exists": False}
        if dir_differs(spec, state):
            result.dirs.append(spec)
            result.diff.append({"before_header": spec.path, "after_header": spec.path,
                                "before": ("directory " + _attrs(state)) if state.get("isdir") else
                                ("a file, not a directory\n" if state.get("exists") else ""),
                                "after": "directory " + _attrs({"mode": spec.mode, "owner": spec.owner,
                                                                "group": spec.group})})
    unit_path = desired.unit_path
    result.daemon_reload = any(spec.path == unit_path for spec in result.land)
    result.enable = onhost.unit.get("UnitFileState", "") != "enabled"
    active = onhost.active_state
    invocation = onhost.invocation_id
    manifest = onhost.manifest or {}
    # which invocation is verified: the state file's answer (_state_file.verified_ids), never the manifest's copy
    # (a manifest of the layout before it is read as it was written, and the next keep writes the new layout)
    result.verified = verified = verified_ids(getattr(onhost, "state_record", None), manifest)
    result.stale = stale_files(onhost.files, manifest, onhost.active_since, invocation, verified)
    result.unknown_invocation = bool(verified and invocation and invocation not in verified
                                     and active in UNKNOWN_STATES)
    txn = onhost.txn or {}
    # a change verified and gated (its transaction's phase "verified") whose keep a kill cut short: kept now
    result.txn_settled = bool(txn and txn.get("phase") == "verified" and txn.get("invocation_id")
                              and txn.get("invocation_id") == invocation and invocation in verified)
    entries = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    differs = bool(entries) and set_differs(manifest, onhost.files)
    # verified, but on files no gate judged (started outside this module after a change by hand): gated again
    result.unkept_set = bool(differs and invocation in verified and not result.txn_settled
                             and active in UNKNOWN_STATES)
    result.keep_needed = (not entries or differs or sorted(entries) != sorted(desired.input_files)
                          or bool(onhost.copies_missing)
                          or bool(getattr(desired, "state_dir", "") and legacy_manifest(manifest)))
    txn_open = bool(txn) and not own_txn and not result.txn_settled
    if onhost.restore_open or txn_open:
        result.action = "finish_restore"
    elif result.land or result.stale:
        result.action = "restart" if active in RESTARTABLE else "start"
    elif result.unknown_invocation or result.unkept_set:
        result.action = "verify_only"
    elif active not in UP:
        result.action = "start"
    elif result.keep_needed:
        result.action = "keep_only"
    else:
        result.action = "none"
    reasons = []
    if onhost.restore_open or txn_open:
        reasons.append(UNFINISHED)
    if active != "active":
        reasons.append("not running")
    for spec in result.land:
        if spec.kind in CHANGE_WORDS:
            reasons.append(CHANGE_WORDS[spec.kind])
        elif spec.kind == LAUNCHER:
            reasons.append("launcher %s would change" % spec.path)
    if active == "active":
        reasons.extend("%s changed after the running invocation started" % path for path in result.stale)
    result.reasons = list(dict.fromkeys(reasons))
    return result
