# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Land the planned files: the directories first, then each file through a temporary file and a rename
(``_atomic.write_atomic``) with its mode, owner and group - a kill leaves the old file or the new one.

A unit is checked first with ``systemd-analyze verify`` on a copy named ``<service>.service`` in a temporary
directory (the role's former validate script: refused when its output names ``<service>.service:`` or it exits
non-zero): a refused unit fails BEFORE any file lands. The unit it replaces is kept as
``<backup dir>/<service>.service.<UTC %Y%m%dT%H%M%S%fZ>`` (the ``backup_keep`` newest kept, newest by the host's
mtime) and, the first time it replaces a unit without the line ``# Deployment record: `` (a hand-made one),
as ``<backup dir>/<service>.service.orig``, never overwritten. Then ``systemctl enable`` when the unit is not
enabled, and ``daemon-reload`` when the unit landed."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import stat as stat_mod
import tempfile
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

RECORD_LINE_RE = re.compile(rb"(?m)^# Deployment record: ")


class LandError(Exception):
    """A file could not land; the message says what and whether anything was changed."""


def _ids(owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise LandError("user %r does not exist on this host" % owner)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise LandError("group %r does not exist on this host" % group)
    return uid, gid


def _own(path, uid, gid):
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) != (uid, gid):
        os.chown(path, uid, gid, follow_symlinks=False)


def verify_unit(service, content, run, systemd_analyze="systemd-analyze"):
    """systemd-analyze verify on a copy named ``<service>.service``: None when accepted, else the refusal text."""
    tmp = tempfile.mkdtemp(prefix="gpuserve-unit-")
    try:
        copy = os.path.join(tmp, service + ".service")
        with open(copy, "wb") as handle:
            handle.write(content)
        rc, out, err = run([systemd_analyze, "verify", copy])[:3]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = ((out or "") + (err or "")).strip()
    if rc != 0 or (service + ".service:") in text:
        return text or "systemd-analyze verify exited %s" % rc
    return None


def prune_copies(backup_dir, service, keep):
    """Remove the timestamped unit copies but the ``keep`` newest (by the host's mtime, then path); 0 keeps none."""
    prefix = service + ".service.2"
    try:
        names = [name for name in os.listdir(backup_dir) if name.startswith(prefix)]
    except OSError:
        return []
    paths = [os.path.join(backup_dir, name) for name in names]
    ordered = sorted(paths, key=lambda p: (os.lstat(p).st_mtime, p))
    old = ordered[:-keep] if keep > 0 else ordered
    for path in old:
        os.unlink(path)
    return old


def keep_unit(desired, clock=time.time):
    """The unit about to be replaced, kept in the backup directory (timestamped, and .orig once when hand-made).
    Returns the paths written."""
    unit_path = desired.unit_path
    if not unit_path or not os.path.isfile(unit_path):
        return []
    backup = desired.backup_dir
    if not os.path.isdir(backup):
        os.makedirs(backup, mode=0o700)
    with open(unit_path, "rb") as handle:
        content = handle.read()
    written = []
    orig = os.path.join(backup, desired.service + ".service.orig")
    if not RECORD_LINE_RE.search(content) and not os.path.lexists(orig):
        write_atomic(orig, content, mode=0o644, root_owned=True)
        written.append(orig)
    now = clock()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "%06dZ" % int(round((now % 1) * 1e6) % 1000000)
    copy = os.path.join(backup, "%s.service.%s" % (desired.service, stamp))
    write_atomic(copy, content, mode=0o644, root_owned=True)
    written.append(copy)
    written.extend("%s (removed)" % path for path in prune_copies(backup, desired.service, desired.backup_keep))
    return written


def land(plan, desired, run, check_mode=False, systemctl=None, clock=time.time, systemd_analyze="systemd-analyze"):
    """Write what ``plan`` says. Returns {"changed", "landed", "removed", "dirs", "backups", "enabled",
    "daemon_reload"}; raises LandError (nothing written when the unit is refused)."""
    result = {"changed": False, "landed": [], "removed": [], "dirs": [], "backups": [], "enabled": False,
              "daemon_reload": False}
    if check_mode:
        return result
    for spec in plan.land:
        if spec.verify_unit and spec.content is not None:
            refusal = verify_unit(desired.service, spec.content, run, systemd_analyze)
            if refusal is not None:
                raise LandError("systemd-analyze verify refused the new unit %s: %s. Nothing was changed."
                                % (spec.path, refusal))
    # every owner and group must exist before the first write
    ids = dict((spec.path, _ids(spec.owner, spec.group)) for spec in list(plan.land) + list(plan.dirs)
               if getattr(spec, "content", True) is not None)
    for spec in plan.dirs:
        uid, gid = ids[spec.path]
        mode = int(spec.mode, 8)
        if os.path.lexists(spec.path) and not os.path.isdir(spec.path):
            raise LandError("%s is not a directory" % spec.path)
        if not os.path.isdir(spec.path):
            os.makedirs(spec.path, mode=mode)
        if stat_mod.S_IMODE(os.stat(spec.path).st_mode) != mode:
            os.chmod(spec.path, mode)
        _own(spec.path, uid, gid)
        result["dirs"].append(spec.path)
    if desired.unit_path in [spec.path for spec in plan.land]:
        result["backups"] = keep_unit(desired, clock)
    for spec in plan.land:
        if spec.content is None:
            if os.path.lexists(spec.path):
                os.unlink(spec.path)
                result["removed"].append(spec.path)
            continue
        uid, gid = ids[spec.path]
        parent = os.path.dirname(spec.path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755)
        write_atomic(spec.path, spec.content, mode=int(spec.mode, 8), prefix=".gpuserve-")
        _own(spec.path, uid, gid)
        result["landed"].append(spec.path)
    if systemctl is not None:
        if plan.daemon_reload:
            systemctl.daemon_reload()
            result["daemon_reload"] = True
        if plan.enable:
            systemctl.enable(desired.unit)
            result["enabled"] = True
    result["changed"] = bool(result["landed"] or result["removed"] or result["dirs"] or result["enabled"])
    return result
