# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What is on the host: the state of each file the server reads (``_last_good.file_state`` with its sha256), the
directories, the unit's state (``systemctl show --timestamp=unix``), the last-good manifest, the open transaction
(txn.py) and the open restore (``_last_good.open_restore``). One read, no write: plan.py decides from it."""

from __future__ import annotations

import os
import stat as stat_mod

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import (
    READ_ATTEMPTS, SystemdError, Systemctl, parse_show)

UNIT_PROPERTIES = ("LoadState", "ActiveState", "SubState", "InvocationID", "ActiveEnterTimestamp", "UnitFileState",
                   "MainPID")
TEXT_LIMIT = 1 << 20      # a file larger than this shows no text in the diff
RUNNING = ("active", "activating", "reloading")


class HostSystemctl(Systemctl):
    """``_systemd.Systemctl`` with what the lifecycle needs besides the service runner's calls: the unit's state
    with unix timestamps (compared with file mtimes), a blocking stop (a rollback's first step cancels systemd's
    auto-restart of the failing configuration), enable."""

    def show_props(self, unit, properties=UNIT_PROPERTIES):
        argv = [self.bin, "show", unit, "--timestamp=unix", "--property=" + ",".join(properties)]
        rc, out, err = self._read(argv)[:3]
        if rc != 0:
            raise SystemdError("systemctl show %s failed %d times (rc=%s): %s"
                               % (unit, READ_ATTEMPTS, rc, (err or out).strip()))
        return parse_show(out)

    def stop(self, unit):
        self._change([self.bin, "stop", unit], "systemctl stop %s" % unit)

    def enable(self, unit):
        self._change([self.bin, "enable", unit], "systemctl enable %s" % unit)


def active_since(unit_state):
    """When the running invocation became active, whole seconds since the epoch; 0 when it is not active (today's
    stale.yml: ``ActiveEnterTimestamp`` as ``@<seconds>``)."""
    if unit_state.get("ActiveState") != "active":
        return 0
    text = str(unit_state.get("ActiveEnterTimestamp") or "").strip().lstrip("@")
    try:
        return max(0, int(float(text)))
    except ValueError:
        return 0


def dir_state(path):
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"exists": False, "isdir": False}
    state = _last_good.file_state(path)
    state["isdir"] = stat_mod.S_ISDIR(info.st_mode)
    return state


class OnHost(object):
    """One reading of the host."""

    def __init__(self, files, texts, dirs, unit, manifest, manifest_problem, txn, restore_open, copies_missing,
                 links=None):
        self.files = files                  # {path: file_state(checksum=True) + "islnk"}
        self.texts = texts                  # {path: bytes} of the landed, non-secret files (for the diff)
        self.dirs = dirs                    # {path: state + isdir}
        self.unit = unit                    # systemctl show's properties
        self.manifest = manifest            # the last-good manifest ({} when none)
        self.manifest_problem = manifest_problem
        self.txn = txn                      # the open transaction ({} when none)
        self.restore_open = restore_open    # the open restore ({} when none)
        self.copies_missing = copies_missing
        self.links = links or {}            # {path: {"exists", "islnk", "isdir", "target"}} (the venv link)

    @property
    def active_state(self):
        return self.unit.get("ActiveState", "")

    @property
    def invocation_id(self):
        return self.unit.get("InvocationID", "")

    @property
    def active_since(self):
        return active_since(self.unit)


def link_state(path):
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"exists": False, "islnk": False, "isdir": False, "target": ""}
    islnk = stat_mod.S_ISLNK(info.st_mode)
    return {"exists": True, "islnk": islnk, "isdir": os.path.isdir(path) and not islnk,
            "target": os.readlink(path) if islnk else ""}


def read_host(desired, systemctl, directory=None):
    """Read everything plan.py needs. ``systemctl``: a HostSystemctl (or a fake with ``show_props``);
    ``directory``: the unit's state directory (``desired.last_good_dir`` unless a check run reads the legacy one)."""
    directory = directory or desired.last_good_dir
    files, texts = {}, {}
    landed = dict((spec.path, spec) for spec in desired.files)
    for path in desired.input_files:
        state = _last_good.file_state(path, checksum=True)
        state["islnk"] = state["exists"] and os.path.islink(path)
        files[path] = state
        spec = landed.get(path)
        if spec is not None and not spec.secret and state.get("sha256") and spec.content is not None:
            try:
                if os.path.getsize(path) <= TEXT_LIMIT:
                    with open(path, "rb") as handle:
                        texts[path] = handle.read()
            except OSError:
                pass
    dirs = dict((spec.path, dir_state(spec.path)) for spec in desired.dirs)
    unit = systemctl.show_props(desired.unit)
    manifest, problem = _last_good.load_manifest(directory)
    entries = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    missing = [entry["kept_at"] for entry in entries.values()
               if isinstance(entry, dict) and isinstance(entry.get("kept_at"), str)
               and not os.path.lexists(entry["kept_at"])]
    links = {desired.venv_link: link_state(desired.venv_link)} if desired.venv_link else {}
    return OnHost(files, texts, dirs, unit, manifest, problem, txn_mod.load(directory),
                  _last_good.open_restore(directory), missing, links)
