# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The last-good set of the server role, in one place: the files a verified invocation read at its start.

On the host: ``<backup dir>/<unit>.last-good/manifest.json`` names the verified invocation and, for each file it read,
whether it existed, its mode and owner, its sha256 (never for a secret file) and, for the restorable ones, the
kept copy ``<backup dir>/<unit>.last-good/<sha1 of the path>.<invocation>`` (root, 0600). Which invocation is
verified is not decided here: the unit's state file (``_state_file``) is that one record; the manifest refers to
it (``verified``: its path, invocation and time, ``_state_file.reference``) and names its set after it.

A secret file (the keys) is neither copied nor restored unless the operator asks (``keep_secrets``, the role's
``sglang_last_good_keeps_secrets``; the manifest then says ``"secrets_kept": true``): a deploy that rotates a
leaked key and then fails verification must not put the old key back. A manifest written before this rule named
the secret file restorable with a copy; ``restore`` still leaves it alone (a secret entry is one in
``secret_paths``, or one that existed and has no sha256, which only a secret lacks), and the next ``keep``
removes that copy.

The state machine ``_server/machine.py`` (modules gpuserve.sglang.sglang_server and sglang_router_service) is its
one user: no module exposes a keep or a restore of its own beside it (one rollback). The operations:

- ``read``: the state of each file (exists, mtime) and the manifest, and the files the running invocation does
  not have (written after it started, or gone although its own verified start had them);
- ``keep``: after a verified start, the set replaced as a whole: the copies under names of the new invocation,
  then the manifest renamed into place (the switch), then the copies of the old set removed. Every file goes
  through a temporary file and a rename, only where its content differs: a kill or a full disk at any point
  leaves the old set or the new one, never a mix of files that did not run together;
- ``begin_restore`` and ``restore``: a rollback, recorded before it starts (``restore.json``, below), then the
  kept copies put back as the verified start had them.
"""
from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import re
import stat as stat_mod
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import sha256_file, write_atomic

MANIFEST = "manifest.json"
LEGACY_DIR = "last-good"


def unit_dir(backup_dir, service):
    """The one home of a unit's state (issue 47): ``<backup dir>/<service>.last-good`` holds its last-good
    manifest and copies, its open transaction and its open restore; two units on one host never share it."""
    service = service[:-len(".service")] if service.endswith(".service") else service
    return "%s/%s.last-good" % (backup_dir.rstrip("/") or "", service)


FILE_MODE = 0o600
DIR_MODE = 0o700


COPY_RE = re.compile(r"^[0-9a-f]{40}(\.[0-9A-Za-z_-]+)?$")


# ---- the environment file's kept copy holds no secret value (issue 48) ------------------------------------------
# An HF_TOKEN in sglang_env is a line of the environment file, which the last good set keeps and a rollback puts
# back: its kept copy has each secret-named value (the one rule: _secrets.is_secret_name) replaced, and a restore
# puts the current file's line of that name back in its place (a name the current file lacks goes, with its value).
_ENV_LINE_RE = re.compile(rb"^(?P<lead>[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=)(?P<value>.*)$")
REDACTED = b"<gpuserve: redacted in the kept copy>"


def _secret_line(line):
    found = _ENV_LINE_RE.match(line)
    if not found or not found.group("value").strip() or found.group("value").strip() in (b'""', b"''"):
        return None
    name = found.group("name").decode("ascii")
    return name if _secrets.is_secret_name(name) else None


def redact_env(content):
    """An environment file's text with each secret-named value replaced (for its kept copy)."""
    out = []
    for line in content.split(b"\n"):
        name = _secret_line(line)
        out.append(_ENV_LINE_RE.match(line).group("lead") + REDACTED if name else line)
    return b"\n".join(out)


def merge_env(kept, current_path):
    """The kept copy's text with each redacted line replaced by the current file's line of that name (dropped when
    the current file has none)."""
    current = {}
    try:
        with open(current_path, "rb") as handle:
            for line in handle.read().split(b"\n"):
                name = _secret_line(line)
                if name:
                    current[name] = line
    except OSError:
        pass
    out = []
    for line in kept.split(b"\n"):
        found = _ENV_LINE_RE.match(line)
        if found and found.group("value") == REDACTED:
            name = found.group("name").decode("ascii")
            if name in current:
                out.append(current[name])
            continue
        out.append(line)
    return b"\n".join(out)


def copy_path(directory, path, generation=""):
    """Where the kept copy of ``path`` lives: ``<sha1 of the path>.<generation>`` (the verified invocation), so
    that a new set never overwrites the copies the current manifest names (``<sha1>`` alone: the layout before)."""
    name = hashlib.sha1(path.encode("utf-8")).hexdigest()
    if generation:
        name += "." + re.sub(r"[^0-9A-Za-z_-]", "_", generation)
    return "%s/%s" % (directory.rstrip("/"), name)


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def file_state(path, checksum=False):
    """What ansible.builtin.stat (follow: false) says of ``path``: exists, and for one that exists mtime, mode
    ('0644'), owner and group names, and with ``checksum`` the sha256 of a regular file."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"exists": False}
    state = {"exists": True, "mtime": info.st_mtime, "mode": "%04o" % stat_mod.S_IMODE(info.st_mode),
             "owner": _name(pwd.getpwuid, info.st_uid), "group": _name(grp.getgrgid, info.st_gid)}
    if checksum and stat_mod.S_ISREG(info.st_mode):
        state["sha256"] = sha256_file(path)
    return state


def manifest(states, invocation_id, restorable, directory, secret_paths=(), keep_secrets=False, group="",
             verified=None):
    """The manifest of a verified invocation from ``[(path, file_state(path, checksum=True))]``; the kept copies
    are named after the invocation (copy_path). A file of ``secret_paths`` is restorable (and copied) only with
    ``keep_secrets``. ``verified``: ``_state_file.reference`` of the unit's state file, the ONE record of which
    invocation is verified: the manifest refers to it (``verified``) and its ``invocation_id`` is that record's
    copy, only the name of the set and of its copies (no decision reads it)."""
    if isinstance(verified, dict) and verified.get("invocation_id"):
        invocation_id = verified["invocation_id"]
    files = {}
    for path, state in states:
        entry = {"exists": bool(state.get("exists"))}
        kept = path in restorable and (keep_secrets or path not in secret_paths)
        if entry["exists"]:
            entry.update(mode=state.get("mode"), owner=state.get("owner"), group=state.get("group"))
            if path not in secret_paths:
                entry["sha256"] = state.get("sha256")
            if kept:
                entry["kept_at"] = copy_path(directory, path, invocation_id or "unknown")
        if kept:
            entry["restorable"] = True
        files[path] = entry
    data = {"invocation_id": invocation_id or "", "files": files}
    if keep_secrets and any(path in secret_paths for path in files):
        data["secrets_kept"] = True
    if isinstance(verified, dict):
        data["verified"] = dict(verified)
    if group:
        # the group change this set was kept by: the evidence that the group's verdict on it was keep (issue 47)
        data["group"] = group
    return data


def manifest_text(data):
    """The manifest's text: Ansible's to_nice_json layout, so that a manifest already on a host in that layout
    reads as unchanged."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(",", ": "), ensure_ascii=False)


def load_manifest(directory):
    """(manifest or {}, problem or None)."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, "the last-good manifest %s could not be read (%s): it is written anew after the next verified start" % (path, exc)
    if not isinstance(data, dict):
        return {}, "the last-good manifest %s is not a JSON object: it is written anew after the next verified start" % path
    return rebase(data, directory), None


def rebase(data, directory):
    """Every kept copy lives in the directory of the record that names it: ``kept_at`` read as that directory
    plus the copy's name, so that a state directory moved whole (the per-unit layout, issue 47) keeps its copies."""
    files = data.get("files")
    if isinstance(files, dict):
        for entry in files.values():
            if isinstance(entry, dict) and isinstance(entry.get("kept_at"), str) and entry["kept_at"]:
                entry["kept_at"] = "%s/%s" % (directory.rstrip("/"), os.path.basename(entry["kept_at"]))
    return data


def read(directory, paths, active_since=0, invocation_id=""):
    """The files and the manifest, and ``stale``: the files the running invocation does not have.

    active_since: when the running invocation became active (whole seconds since the epoch; 0 = not running):
    a file changed in or after the second after it is newer than the process (a change within that second counts
    as older: no spurious restart). A file the manifest of THIS invocation had and that is gone counts too."""
    states = [(path, file_state(path)) for path in paths]
    data, problem = load_manifest(directory)
    newer = [path for path, state in states
             if state["exists"] and active_since > 0 and state["mtime"] >= active_since + 1]
    gone = [path for path, state in states if not state["exists"]]
    removed = []
    if invocation_id and data.get("invocation_id", "") == invocation_id:
        files = data.get("files") if isinstance(data.get("files"), dict) else {}
        removed = [path for path, entry in files.items()
                   if isinstance(entry, dict) and entry.get("exists") and path in gone]
    stale = list(dict.fromkeys(newer + removed)) if active_since > 0 else []
    entries = data.get("files") if isinstance(data.get("files"), dict) else {}
    # the kept copies the manifest names that are gone (an operator's rm): the set must be written again
    missing = [entry["kept_at"] for entry in entries.values()
               if isinstance(entry, dict) and isinstance(entry.get("kept_at"), str) and not os.path.lexists(entry["kept_at"])]
    return {"files": dict(states), "manifest": data, "stale": stale, "problem": problem, "copies_missing": missing,
            "restore_open": open_restore(directory)}


def _write_atomic(dest, data):
    """Write bytes to dest through a temporary file in its directory and a rename (root, 0600)."""
    write_atomic(dest, data, mode=FILE_MODE, prefix=".tmp-", root_owned=True)


def _needs_write(dest, data):
    try:
        info = os.lstat(dest)
    except (FileNotFoundError, NotADirectoryError):
        return True
    if not stat_mod.S_ISREG(info.st_mode) or stat_mod.S_IMODE(info.st_mode) != FILE_MODE:
        return True
    if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (0, 0):
        return True
    with open(dest, "rb") as handle:
        return handle.read() != data


def keep(directory, paths, restorable, secret_paths=(), invocation_id="", check_mode=False, keep_secrets=False,
         group="", redact=(), verified=None):
    """After a verified start: the set of this invocation, replaced as a whole. Each restorable file that exists
    is copied to a name of this invocation (the copies the current manifest names are not touched), then the
    manifest is renamed into place (the switch), then the copies no manifest names any more are removed. A kill
    or a full disk at any point leaves the old manifest with its own copies, or the new one with its own.
    Returns {"changed": bool, "written": [paths written, removed or to be], "manifest": dict}."""
    written = []
    if not os.path.isdir(directory):
        written.append(directory)
        if not check_mode:
            os.makedirs(directory, mode=DIR_MODE)
    elif not check_mode and stat_mod.S_IMODE(os.stat(directory).st_mode) != DIR_MODE:
        os.chmod(directory, DIR_MODE)
        written.append(directory)
    if not check_mode and os.geteuid() == 0:
        info = os.stat(directory)
        if (info.st_uid, info.st_gid) != (0, 0):
            os.chown(directory, 0, 0)
            written.append(directory)
    states = [(path, file_state(path, checksum=True)) for path in paths]
    data = manifest(states, invocation_id, restorable, directory, secret_paths, keep_secrets, group, verified)
    for path, entry in data["files"].items():
        if "kept_at" not in entry:
            continue
        with open(path, "rb") as handle:
            content = handle.read()
        if path in redact:
            content = redact_env(content)
        if _needs_write(entry["kept_at"], content):
            written.append(entry["kept_at"])
            if not check_mode:
                _write_atomic(entry["kept_at"], content)
    text = manifest_text(data).encode("utf-8")
    dest = os.path.join(directory, MANIFEST)
    if _needs_write(dest, text):
        written.append(dest)
        if not check_mode:
            _write_atomic(dest, text)
    if os.path.isdir(directory):
        named = {entry["kept_at"] for entry in data["files"].values() if "kept_at" in entry}
        for name in sorted(os.listdir(directory)):
            full = os.path.join(directory, name)
            # a temporary file of a write that was killed (an hour old: not one of a run in progress)
            try:
                stale_tmp = name.startswith(".tmp-") and os.lstat(full).st_mtime < time.time() - 3600
                if (COPY_RE.match(name) and full not in named) or stale_tmp:
                    written.append(full)
                    if not check_mode:
                        os.unlink(full)
            except FileNotFoundError:
                continue
    # the files on disk were verified just now: a restore left open by a rollback is finished
    if open_restore(directory):
        written.append(os.path.join(directory, RESTORE))
        if not check_mode:
            os.unlink(os.path.join(directory, RESTORE))
    return {"changed": bool(written), "written": list(dict.fromkeys(written)), "manifest": data}


# ---- a rollback in progress (the open restore) ------------------------------------------------------------------
# A rollback stops the failed invocation, puts the last-good set back file by file, restarts and verifies. Killed
# after the stop, or failing at one copy, it leaves the unit stopped on a mix of files. So it is recorded first:
# ``restore.json`` beside the manifest (the manifest's invocation and when the restore began), written before the
# failed invocation is stopped, removed only by ``keep`` after the restored set verified. A run that finds it open
# (``read``'s ``restore_open``) finishes the restore before anything else, also when the unit is stopped.
RESTORE = "restore.json"


def load_open_record(path, blank, why):
    """A record of work in progress (an open restore here, a transaction in _server/txn.py): its JSON object, {}
    when the file is missing, else ``blank`` with ``why`` saying what is wrong with it: a record that cannot be
    read, or an empty one, still counts as open (the work it belongs to did not finish)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return dict(blank, **{why: "unreadable record %s (%s)" % (path, exc)})
    return data if isinstance(data, dict) and data else dict(blank, **{why: "empty record"})


def open_restore(directory):
    """The open restore ({"invocation_id", "since", "reason"}), or {} when no rollback is in progress. A record
    that cannot be read still counts as open (the rollback it belongs to did not finish)."""
    return load_open_record(os.path.join(directory, RESTORE), {"invocation_id": "", "since": 0}, "reason")


def begin_restore(directory, reason="", check_mode=False):
    """Before the failed invocation is stopped: open the restore of the manifest's set (nothing is written when
    there is no manifest with a restorable file: no set to go back to, or one is open already).
    Returns {"changed", "written", "restore_open"}."""
    data, _problem = load_manifest(directory)
    files = data.get("files") if isinstance(data.get("files"), dict) else {}
    if not any(isinstance(entry, dict) and entry.get("restorable") for entry in files.values()):
        return {"changed": False, "written": [], "restore_open": open_restore(directory)}
    current = open_restore(directory)
    if current:
        return {"changed": False, "written": [], "restore_open": current}
    record = {"invocation_id": str(data.get("invocation_id") or ""), "since": round(time.time(), 3),
              "reason": str(reason or "")[:500]}
    dest = os.path.join(directory, RESTORE)
    if not check_mode:
        _write_atomic(dest, manifest_text(record).encode("utf-8"))
    return {"changed": True, "written": [dest], "restore_open": record}


def _owner_ids(entry):
    try:
        uid = pwd.getpwnam(entry.get("owner") or "root").pw_uid
    except KeyError:
        uid = 0
    try:
        gid = grp.getgrnam(entry.get("group") or "root").gr_gid
    except KeyError:
        gid = 0
    return uid, gid


def is_secret_entry(path, entry, secret_paths=()):
    """A manifest entry of a secret file: named in ``secret_paths``, or one that existed without a sha256 (the
    manifest never holds a secret's hash; every other file that existed has one)."""
    return path in secret_paths or (isinstance(entry, dict) and bool(entry.get("exists")) and "sha256" not in entry)


def restore(directory, check_mode=False, secret_paths=(), redact=()):
    """Put back every restorable file of the manifest as the last verified start had it: each kept copy renamed
    into place through a temporary file with the recorded mode and owner (only where content, mode or owner
    differ), each file it did not have removed. Idempotent: run again after a kill or a failed copy, it does
    what is left. The open restore stays open (``keep`` closes it after the restored set verified).
    Returns {"changed", "put_back", "removed", "missing", "manifest"}; ``missing`` names kept copies that are gone
    (those files cannot be put back). A secret file (is_secret_entry) is left as it is, whatever an older manifest
    says, unless the manifest was kept with ``keep_secrets`` (``secrets_kept``): a rotated key stays."""
    data, problem = load_manifest(directory)
    files = data.get("files") if isinstance(data.get("files"), dict) else {}
    put_back, removed, missing, missing_paths = [], [], [], []
    for path, entry in sorted(files.items()):
        if not isinstance(entry, dict) or not entry.get("restorable"):
            continue
        if data.get("secrets_kept") is not True and is_secret_entry(path, entry, secret_paths):
            continue
        merge = (lambda kept, current=path: merge_env(kept, current)) if path in redact else None
        outcome = put_back_file(path, entry.get("exists"), entry.get("kept_at"), entry, check_mode, merge)
        if outcome == "missing":
            missing.append(entry.get("kept_at") or path)
            missing_paths.append(path)
        elif outcome == "removed":
            removed.append(path)
        elif outcome == "put_back":
            put_back.append(path)
    return {"changed": bool(put_back or removed), "put_back": put_back, "removed": removed, "missing": missing,
            "missing_paths": missing_paths, "manifest": data, "problem": problem}


def put_back_file(path, existed, kept, entry, check_mode=False, transform=None):
    """One file of a set that goes back (the last-good set here, a transaction's in _server/txn.py): removed when it
    did not exist, else its kept copy renamed into place through a temporary file with the recorded mode and owner
    (``entry``: mode, owner, group), only where content, mode or owner differ. Returns what it did: "removed",
    "put_back", "missing" (the kept copy is gone: it cannot go back) or "" (already as it was)."""
    if not existed:
        if not os.path.lexists(path):
            return ""
        if not check_mode:
            os.unlink(path)
        return "removed"
    if not isinstance(kept, str) or not os.path.isfile(kept):
        return "missing"
    with open(kept, "rb") as handle:
        content = handle.read()
    if transform is not None:
        content = transform(content)
    mode = int(str(entry.get("mode") or "0600"), 8)
    uid, gid = _owner_ids(entry)
    try:
        info = os.lstat(path)
        same = (stat_mod.S_ISREG(info.st_mode) and stat_mod.S_IMODE(info.st_mode) == mode
                and (os.geteuid() != 0 or (info.st_uid, info.st_gid) == (uid, gid)))
        if same:
            with open(path, "rb") as handle:
                same = handle.read() == content
    except (FileNotFoundError, NotADirectoryError):
        same = False
    if same:
        return ""
    if not check_mode:
        write_atomic(path, content, mode=mode, prefix=".gpuserve-restore-")
        if os.geteuid() == 0:
            os.chown(path, uid, gid)
    return "put_back"
