# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host lease on a managed unit: one run at a time changes a unit's life on a host (issue 22).

A run of the server or router role, and a playbook that restarts (deploy.yml, restart.yml), holds the lease on
the unit from before it writes anything until after it verified (or rolled back). A second run waits a bounded
time, then refuses and names the holder. The lease is a small JSON file, ``<directory>/<unit>.lease``:

    {"version": 1, "unit": "sglang-kimi.service", "id": "<the run's lease id>",
     "owner": {"controller": "...", "user": "...", "play": "...", "pid": "<its ansible-playbook>"},
     "acquired_at": 1764657600.0, "renewed_at": 1764657700.0, "expires_at": 1764661300.0}

Times are the HOST's clock (two controllers with different clocks agree on it). Every read and change of a
lease happens under ``flock`` of ``<directory>/<unit>.guard``, held for the few milliseconds of one operation, so
two runs can never both take it; the file itself is written to a temporary file and renamed.

- A run that holds the lease again (same id: a playbook that took it, then a role that takes it) renews it: the
  expiry moves on, ``result`` is ``renewed``, and only the outer taker gives it back.
- A lease whose run died (a killed ``ansible-playbook``, a dropped SSH) expires at ``expires_at`` and is taken
  over with ``result`` ``expired``; ``force`` breaks a live one (``broken``). Both report the previous holder.
- A lease file that cannot be read (not JSON, not ours) is treated as expired, and reported.
- The controller side (roles/_common/tasks/lease.yml) asks once without waiting; when the holder is a run of the
  same controller whose ansible-playbook process is gone (Ctrl-C, a killed job), it takes the lease over at once
  (``force``) and says so; otherwise it waits.

The lease directory defaults to /run/gpuserve-sglang: tmpfs, so a reboot ends every lease (no run survives a
reboot of its host).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

LEASE_DIR = "/run/gpuserve-sglang"
VERSION = 1
POLL = 2.0  # seconds between two looks at a held lease
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.(service|target|timer)$")
OWNER_KEYS = ("controller", "user", "play", "pid")
# What a result means to the run that got it; module sglang_lease returns both, so no caller lists results.
# TAKEN: this call made the run the lease's first taker, the one that gives it back (in check mode: it was free).
# CONTENDED: another run held the lease when the call came: it still does (held, held by another), or it was taken
# over from a run that died (expired) or broken on purpose (broken).
TAKEN = frozenset(("acquired", "expired", "broken", "free"))
CONTENDED = frozenset(("expired", "broken", "held", "held by another"))


def meaning(result):
    """{"taken": ..., "contended": ...} of an acquire() or release() result (TAKEN, CONTENDED)."""
    return {"taken": result in TAKEN, "contended": result in CONTENDED}


class LeaseHeld(Exception):
    """The lease stayed held by another live run for the whole wait."""

    def __init__(self, unit, holder, waited, now):
        self.unit = unit
        self.holder = holder
        self.waited = waited
        self.now = now
        Exception.__init__(self, refusal(unit, holder, waited, now))


def clean(text, limit=200):
    """A string fit for a message: control characters replaced, length bounded."""
    text = "".join(char if ord(char) >= 32 and ord(char) != 127 else "?" for char in str(text))
    return text if len(text) <= limit else text[:limit] + "..."


def utc(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def describe(holder, now):
    """One line naming a holder: controller, user, play, since when, expiry."""
    if holder is None:
        return "nobody"
    if "error" in holder:
        return "an unreadable lease file (%s)" % clean(holder["error"])
    owner = holder.get("owner") or {}
    left = holder.get("expires_at", 0) - now
    pid = clean(owner.get("pid", ""), 16)
    return "%s@%s%s, play '%s', since %s (%s)" % (
        clean(owner.get("user", "?"), 64), clean(owner.get("controller", "?"), 128),
        (" (ansible-playbook pid %s)" % pid) if pid and pid != "?" else "", clean(owner.get("play", "?")),
        utc(holder.get("acquired_at", 0)),
        ("expires in %d s" % left) if left > 0 else ("expired %d s ago" % -left))


def refusal(unit, holder, waited, now):
    return ("the host lease on %s is held by another run: %s. Waited %d s (sglang_lease_wait); nothing was "
            "changed. Let that run finish; if it died (a killed ansible-playbook, a dropped connection), its "
            "lease expires by itself, or break it on purpose with sglang_lease_break: true"
            % (unit, describe(holder, now), waited))


def check_unit(unit):
    if not UNIT_RE.match(unit or ""):
        raise ValueError("unit name %r: letters, digits and :_.@- then .service, .target or .timer only" % (unit,))


class Lease(object):
    def __init__(self, directory=LEASE_DIR, clock=time.time, sleep=time.sleep, poll=POLL):
        self.directory = directory
        self.clock = clock
        self.sleep = sleep
        self.poll = poll

    def path(self, unit):
        return os.path.join(self.directory, unit + ".lease")

    def _guard(self, unit):
        """An fd holding flock on the unit's guard file; close it to let go."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.directory, unit + ".guard"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read(self, unit):
        """The holder's record, None when nobody holds it, {"error": ...} when the file cannot be read."""
        check_unit(unit)
        try:
            with open(self.path(unit), "rb") as handle:
                data = handle.read()
        except (IOError, OSError) as exc:
            if exc.errno == errno.ENOENT:
                return None
            return {"error": "%s: %s" % (self.path(unit), exc.strerror)}
        try:
            record = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return {"error": "%s is not a lease (not JSON)" % self.path(unit)}
        if not isinstance(record, dict) or not isinstance(record.get("id"), str) \
                or not isinstance(record.get("expires_at"), (int, float)):
            return {"error": "%s is not a lease (no id or expiry)" % self.path(unit)}
        return record

    def acquire(self, unit, lease_id, owner, ttl, wait, force=False, check_mode=False):
        """Take (or renew) the lease. Returns {"result", "lease", "previous", "waited"}; ``result`` is one of
        acquired, renewed, expired (taken over from a dead run), broken (``force``), free or held (check mode:
        what a real run would find, nothing written). Raises LeaseHeld when another live run kept it for the
        whole ``wait`` seconds (ValueError on bad input)."""
        check_unit(unit)
        if not lease_id or not isinstance(lease_id, str) or any(ord(char) < 32 for char in lease_id):
            raise ValueError("lease id: a non-empty string without control characters")
        if ttl < 1 or wait < 0:
            raise ValueError("ttl must be at least 1 s and wait at least 0 s")
        owner = dict((key, clean(owner[key])) for key in OWNER_KEYS
                     if isinstance(owner, dict) and owner.get(key) not in (None, ""))
        start = self.clock()
        while True:
            fd = None if check_mode else self._guard(unit)
            try:
                now = self.clock()
                holder = self.read(unit)
                live = holder is not None and "error" not in holder and holder["expires_at"] > now
                if holder is None or holder.get("id") == lease_id or not live or force:
                    if holder is None:
                        result = "acquired"
                    elif holder.get("id") == lease_id:
                        result = "renewed"
                    elif not live:
                        result = "expired"
                    else:
                        result = "broken"
                    if check_mode:
                        return {"result": "free" if result != "renewed" else "renewed", "lease": holder,
                                "previous": holder if result in ("expired", "broken") else None,
                                "waited": 0}
                    record = {
                        "version": VERSION, "unit": unit, "id": lease_id, "owner": owner,
                        "acquired_at": holder["acquired_at"] if result == "renewed" else now,
                        "renewed_at": now, "expires_at": now + ttl, "ttl": ttl,
                    }
                    write_atomic(self.path(unit), (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"),
                                 mode=0o600, prefix=".lease-")
                    return {"result": result, "lease": record,
                            "previous": holder if result in ("expired", "broken") else None,
                            "waited": int(now - start)}
                if check_mode:
                    return {"result": "held", "lease": holder, "previous": None, "waited": 0}
            finally:
                if fd is not None:
                    os.close(fd)
            waited = now - start
            if waited >= wait:
                raise LeaseHeld(unit, holder, waited, now)
            self.sleep(min(self.poll, wait - waited))

    def release(self, unit, lease_id, check_mode=False):
        """Give the lease back when ``lease_id`` holds it. Returns {"result", "lease"}: released, not held
        (nobody held it), or held by another (left alone: a run never removes another run's lease)."""
        check_unit(unit)
        if check_mode:
            holder = self.read(unit)
            return {"result": "released" if holder and holder.get("id") == lease_id else
                    ("not held" if holder is None else "held by another"), "lease": holder}
        fd = self._guard(unit)
        try:
            holder = self.read(unit)
            if holder is None:
                return {"result": "not held", "lease": None}
            if holder.get("id") != lease_id:
                return {"result": "held by another", "lease": holder}
            os.unlink(self.path(unit))
            return {"result": "released", "lease": holder}
        finally:
            os.close(fd)
