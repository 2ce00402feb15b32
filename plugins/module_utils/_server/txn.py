# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The write-ahead record of one change: ``<backup dir>/last-good/txn.json``, written atomically BEFORE the first
write of a change and removed once the change is verified and kept (or rolled back and verified).

It names every file the change will replace, whether it existed, its mode, owner and group, and where a copy of it
is kept (``<backup dir>/last-good/txn-<id>-<sha1 of the path>``, root 0600). The copies make a host WITHOUT a
last-good manifest restorable too (the first takeover of a hand-made unit): they replace the role's former
fallback pair ``<name>.service`` / ``<name>.env`` in the backup directory. A secret file is recorded but not
copied unless ``keep_secrets`` (a rollback never undoes a rotated key).

A call that finds a transaction open (a run killed while its change loaded) finishes it first: restore, reload,
restart, verify, close (machine.py)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

TXN = "txn.json"
COPY_PREFIX = "txn-"
DIR_MODE = 0o700
FILE_MODE = 0o600


def _ensure_dir(directory):
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=DIR_MODE)


def copy_name(directory, txn_id, path):
    return "%s/%s%s-%s" % (directory.rstrip("/"), COPY_PREFIX, txn_id, hashlib.sha1(path.encode("utf-8")).hexdigest())


def _write(directory, record):
    write_atomic(os.path.join(directory, TXN), (_last_good.manifest_text(record) + "\n").encode("utf-8"),
                 mode=FILE_MODE, prefix=".tmp-", root_owned=True)


def load(directory):
    """The open transaction, or {} when none. A record that cannot be read still counts as open (the change it
    belongs to was not verified): it says so in ``problem``."""
    data = _last_good.load_open_record(os.path.join(directory, TXN),
                                       {"id": "", "since": 0, "phase": "unknown", "service": "", "files": {}},
                                       "problem")
    if data and not isinstance(data.get("files"), dict):
        data["files"] = {}
    return _last_good.rebase(data, directory) if data else data


def begin(directory, service, paths, secret_paths=(), keep_secrets=False, clock=time.time, group="", removing=()):
    """Open the transaction of a change that will replace ``paths``: each existing file copied first (not a secret
    one unless ``keep_secrets``), then the record renamed into place. Returns the record."""
    _ensure_dir(directory)
    txn_id = uuid.uuid4().hex[:16]
    files = {}
    for path in paths:
        state = _last_good.file_state(path)
        entry = {"existed": bool(state["exists"])}
        if state["exists"]:
            entry.update(mode=state["mode"], owner=state["owner"], group=state["group"])
            # a secret file is not copied (a rollback never undoes a rotated key), unless this change removes it:
            # the unit a rollback puts back reads it (issue 47 defect 8); the copy goes with the transaction
            if path in secret_paths and not keep_secrets and path not in removing:
                entry["secret"] = True
            elif os.path.isfile(path):
                dest = copy_name(directory, txn_id, path)
                with open(path, "rb") as handle:
                    write_atomic(dest, handle.read(), mode=FILE_MODE, prefix=".tmp-", root_owned=True)
                entry["kept_at"] = dest
        files[path] = entry
    record = {"id": txn_id, "since": round(clock(), 3), "phase": "landing", "service": service, "files": files}
    if group:
        record["group"] = group    # the group change it belongs to (a server over several hosts, issue 47)
    _write(directory, record)
    return record


def set_phase(directory, record, phase, **extra):
    """The transaction's phase (landing, landed, restarting, gates, verified, restoring), rewritten atomically."""
    record = dict(record, phase=phase, **extra)
    _write(directory, record)
    return record


def close(directory, record=None):
    """The change is verified and kept, or rolled back and verified: the record goes first (a kill after it
    leaves only copies, removed by the next close), then every copy of a transaction."""
    path = os.path.join(directory, TXN)
    if os.path.lexists(path):
        os.unlink(path)
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if name.startswith(COPY_PREFIX):
                try:
                    os.unlink(os.path.join(directory, name))
                except FileNotFoundError:
                    pass


def restore(record, skip=(), check_mode=False):
    """Put back each file of the transaction as it was before the change (not those in ``skip``: the last-good
    manifest restored them; not a secret one that was not copied): a copy renamed into place with its mode and
    owner where it differs, a file that did not exist removed (_last_good.put_back_file, the one way a file goes
    back). Idempotent. Returns {put_back, removed, missing}."""
    done = {"put_back": [], "removed": [], "missing": []}
    for path, entry in sorted((record.get("files") or {}).items()):
        if path in skip or not isinstance(entry, dict) or entry.get("secret"):
            continue
        outcome = _last_good.put_back_file(path, entry.get("existed"), entry.get("kept_at"), entry, check_mode)
        if outcome:
            done[outcome].append(entry.get("kept_at") or path if outcome == "missing" else path)
    return done
