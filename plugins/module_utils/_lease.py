# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host lease on a managed unit: one run at a time changes a unit's life on a host (issues 22, 39).

A run of the server or router role, of a role that changes what the server reads (install, nccl_tuning, cuda),
and a playbook that restarts (deploy.yml, restart.yml), holds the lease on the unit from before it writes anything
until after it verified (or rolled back). It orders runs; the module sglang_server's work lock
(``_server/worklock.py``) orders its calls on the host, whose controller may be gone. A second run waits a bounded
time, then refuses and names the holder. The lease is a small JSON file, ``<directory>/<unit>.lease``:

    {"version": 1, "unit": "sglang-kimi.service", "id": "<the run's lease id>",
     "owner": {"controller": "...", "user": "...", "play": "...", "pid": "<its ansible-playbook>",
               "boot_id": "<the controller's boot id>", "pidns": "<that process's PID namespace inode>",
               "start": "<its start time, clock ticks after boot>"},
     "acquired_at": 1764657600.0, "renewed_at": 1764657700.0, "expires_at": 1764661300.0, "ttl": 3600,
     "host_boot_id": "<the host's boot id>", "renewed_boottime": 5120.3}

Every read and change of a lease happens under ``flock`` of ``<directory>/<unit>.guard``, held for the few
milliseconds of one operation, so two runs can never both take it; the file itself is written to a temporary
file and renamed.

- A run that holds the lease again (same id: a playbook that took it, then a role that takes it) renews it: the
  expiry moves on, ``result`` is ``renewed``, and only the outer taker gives it back. ``renew()`` renews only.
- Expiry: ``ttl`` seconds after the last take or renewal, on the host's CLOCK_BOOTTIME (a monotonic clock that
  counts suspend) while the host's boot id is the one recorded, so a step of the wall clock neither expires a live
  lease nor keeps a dead one; on another boot (a lease directory that survived a reboot) on ``expires_at``, the
  host's wall clock. An expired lease is taken over with ``result`` ``expired``.
- A holder whose run is provably gone (``holder_gone()``, judged on the controller by the action plugin: same
  boot and PID namespace as the caller, and its ansible-playbook process no longer exists or is another process
  with the same pid) is taken over with ``result`` ``gone``, by compare and swap: ``replace=<its id>`` takes the
  lease only while that id still holds it, under the guard, so a third, live run that took it in between is
  never broken. A holder in another PID namespace, on another boot or another controller is judged by its TTL.
- ``force`` breaks a live one (``broken``). Every takeover reports the previous holder.
- A lease file that cannot be read (not JSON, not ours) is treated as expired, and reported.

The lease directory defaults to /run/gpuserve-sglang: tmpfs, so a reboot ends every lease (no run survives a
reboot of its host).
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import hashlib
import json
import os
import re
import socket
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

LEASE_DIR = "/run/gpuserve-sglang"
VERSION = 1
POLL = 2.0  # seconds between two looks at a held lease
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.(service|target|timer)$")
OWNER_KEYS = ("controller", "user", "play", "pid", "boot_id", "pidns", "start")
# The lease covers a restart, a rollback restart, the gates and the rest of the role: its TTL is at least
# 2 x the restart timeout + the gates' timeout + this margin (ttl_for()).
TTL_MARGIN = 900
# What a result means to the run that got it; module sglang_lease returns both, so no caller lists results.
# TAKEN: this call made the run the lease's first taker, the one that gives it back (in check mode: it was free).
# CONTENDED: another run held the lease when the call came: it still does (held, held by another), or it was taken
# over from a run that died (expired) or broken on purpose (broken).
# gone: taken over from a run provably gone from its controller (compare and swap on its id).
TAKEN = frozenset(("acquired", "expired", "gone", "broken", "free"))
CONTENDED = frozenset(("expired", "gone", "broken", "held", "held by another"))
# HOLDS: after this call the run holds the lease (taken, or its own renewed): a role inside a playbook that holds
# it joins it (install, nccl_tuning, cuda) instead of taking and giving back.
HOLDS = TAKEN | frozenset(("renewed",))


def meaning(result):
    """{"taken": ..., "contended": ..., "holds": ...} of an acquire() or release() result (TAKEN, CONTENDED, HOLDS)."""
    return {"taken": result in TAKEN, "contended": result in CONTENDED, "holds": result in HOLDS}


def read_boot_id(proc="/proc"):
    """This machine's boot id (random per boot), or None where there is none (not Linux)."""
    try:
        with open(os.path.join(proc, "sys", "kernel", "random", "boot_id")) as handle:
            return handle.read().strip() or None
    except (IOError, OSError):
        return None


def boottime():
    """Seconds since this machine booted, suspend included, never stepped by a change of the wall clock."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        with open("/proc/uptime") as handle:
            return float(handle.read().split()[0])


def start_ticks(pid, proc="/proc"):
    """Start time of process ``pid`` in clock ticks after boot (field 22 of /proc/PID/stat); None when no such
    process; raises OSError when /proc cannot tell."""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat")) as handle:
            stat = handle.read()
    except (IOError, OSError) as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            return None
        raise
    # the command name (field 2) is in parentheses and may hold spaces and parentheses: split after the last ')'
    return int(stat[stat.rindex(")") + 2:].split()[19])


def pid_namespace(proc="/proc"):
    """The PID namespace inode of this process, as a string, when ``proc`` is that namespace's /proc (the pids
    in it are ours); None otherwise (a /proc of another namespace, or none)."""
    try:
        if int(os.readlink(os.path.join(proc, "self"))) != os.getpid():
            return None
        return str(os.stat(os.path.join(proc, "self", "ns", "pid")).st_ino)
    except (IOError, OSError, ValueError):
        return None


def process_identity(pid, proc="/proc"):
    """What proves process ``pid`` (a run's ansible-playbook) alive: {"pid", "boot_id", "pidns", "start"}; the
    last three only where this machine's /proc tells them."""
    identity = {"pid": str(int(pid))}
    boot_id, pidns = read_boot_id(proc), pid_namespace(proc)
    try:
        start = start_ticks(pid, proc) if boot_id and pidns else None
    except (IOError, OSError, ValueError, IndexError):
        start = None
    if start is not None:
        identity.update(boot_id=boot_id, pidns=pidns, start=str(start))
    return identity


def controller_identity(proc="/proc"):
    """The owner of a lease taken by this controller's run: its name, user, and the identity of its
    ansible-playbook (the parent of the worker that runs the action plugin)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError, ImportError):
        user = str(os.getuid())
    return dict(process_identity(os.getppid(), proc), controller=socket.gethostname(), user=user)


def run_id(identity):
    """One id per ansible-playbook run, the same in every worker of that run, never the same for two runs that
    live at once: a digest of its boot id (random per boot), PID namespace, pid and start time. Without them (a
    controller with no /proc) of its name and pid."""
    parts = [identity.get(key) or "" for key in ("boot_id", "pidns", "pid", "start")]
    if not identity.get("start"):
        parts.append(identity.get("controller") or "")
    return "run-" + hashlib.sha256("/".join(parts).encode("utf-8")).hexdigest()[:32]


def holder_gone(owner, here=None, proc="/proc"):
    """True only when the run that holds a lease is provably gone: its owner's boot id and PID namespace are this
    controller's (``here``: controller_identity() by default) and its ansible-playbook pid does not exist or is
    another process (another start time). A holder in another PID namespace, of another boot or machine, or
    without an identity (an older lease) is never judged gone: its TTL decides."""
    if not isinstance(owner, dict):
        return False
    here = here if here is not None else controller_identity(proc)
    if not all(owner.get(key) for key in ("boot_id", "pidns", "pid", "start")):
        return False
    if not here.get("boot_id") or owner["boot_id"] != here.get("boot_id") \
            or not here.get("pidns") or owner["pidns"] != here.get("pidns"):
        return False
    try:
        now = start_ticks(owner["pid"], proc)
    except (IOError, OSError, ValueError, IndexError, TypeError):
        return False
    return now is None or str(now) != str(owner["start"])


def ttl_for(ttl, restart_timeout=0, gate_timeout=0):
    """The TTL a lease gets: ``ttl``, or longer where the steps it covers need it (a restart, a rollback restart,
    the gates, TTL_MARGIN for the rest)."""
    if restart_timeout <= 0 and gate_timeout <= 0:
        return ttl
    return max(ttl, 2 * max(restart_timeout, 0) + max(gate_timeout, 0) + TTL_MARGIN)


class LeaseHeld(Exception):
    """The lease stayed held by another live run for the whole wait."""

    def __init__(self, unit, holder, waited, now, left=None):
        self.unit = unit
        self.holder = holder
        self.waited = waited
        self.now = now
        Exception.__init__(self, refusal(unit, holder, waited, now, left))


def clean(text, limit=200):
    """A string fit for a message: control characters replaced, length bounded."""
    text = "".join(char if ord(char) >= 32 and ord(char) != 127 else "?" for char in str(text))
    return text if len(text) <= limit else text[:limit] + "..."


def utc(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def describe(holder, now, left=None):
    """One line naming a holder: controller, user, play, since when, expiry (``left``: seconds to its expiry,
    Lease.left(); by default from its expires_at and ``now``)."""
    if holder is None:
        return "nobody"
    if "error" in holder:
        return "an unreadable lease file (%s)" % clean(holder["error"])
    owner = holder.get("owner") or {}
    if left is None:
        left = holder.get("expires_at", 0) - now
    pid = clean(owner.get("pid", ""), 16)
    return "%s@%s%s, play '%s', since %s (%s)" % (
        clean(owner.get("user", "?"), 64), clean(owner.get("controller", "?"), 128),
        (" (ansible-playbook pid %s)" % pid) if pid and pid != "?" else "", clean(owner.get("play", "?")),
        utc(holder.get("acquired_at", 0)),
        ("expires in %d s" % left) if left > 0 else ("expired %d s ago" % -left))


def refusal(unit, holder, waited, now, left=None):
    return ("the host lease on %s is held by another run: %s. Waited %d s (sglang_lease_wait); nothing was "
            "changed. Let that run finish; if it died (a killed ansible-playbook, a dropped connection), its "
            "lease expires by itself, or break it on purpose with sglang_lease_break: true"
            % (unit, describe(holder, now, left), waited))


def check_unit(unit):
    if not UNIT_RE.match(unit or ""):
        raise ValueError("unit name %r: letters, digits and :_.@- then .service, .target or .timer only" % (unit,))


class Lease(object):
    def __init__(self, directory=LEASE_DIR, clock=time.time, sleep=time.sleep, poll=POLL, monotonic=boottime,
                 boot_id=read_boot_id):
        self.directory = directory
        self.clock = clock
        self.sleep = sleep
        self.poll = poll
        self.monotonic = monotonic
        self.boot_id = boot_id

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

    def left(self, holder, now=None):
        """Seconds until ``holder`` expires (negative: expired that long ago). On the host's boot-time clock when
        the lease was renewed in this boot, else on its wall-clock expires_at."""
        if not isinstance(holder, dict) or "error" in holder:
            return 0
        boot_id = self.boot_id()
        mark, ttl = holder.get("renewed_boottime"), holder.get("ttl")
        if boot_id and holder.get("host_boot_id") == boot_id and isinstance(mark, (int, float)) \
                and not isinstance(mark, bool) and isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
            return mark + ttl - self.monotonic()
        return holder.get("expires_at", 0) - (self.clock() if now is None else now)

    def _write(self, unit, lease_id, owner, ttl, now, acquired_at):
        record = {
            "version": VERSION, "unit": unit, "id": lease_id, "owner": owner,
            "acquired_at": acquired_at, "renewed_at": now, "expires_at": now + ttl, "ttl": ttl,
        }
        boot_id = self.boot_id()
        if boot_id:
            record.update(host_boot_id=boot_id, renewed_boottime=self.monotonic())
        write_atomic(self.path(unit), (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"),
                     mode=0o600, prefix=".lease-")
        return record

    def acquire(self, unit, lease_id, owner, ttl, wait, force=False, check_mode=False, replace=None):
        """Take (or renew) the lease. Returns {"result", "lease", "previous", "waited"}; ``result`` is one of
        acquired, renewed, expired (taken over from a dead run: its TTL passed), gone (taken over from the run
        ``replace`` names, judged gone on its controller, while it still held it: compare and swap), broken
        (``force``), free or held (check mode: what a real run would find, nothing written). Raises LeaseHeld
        when another live run kept it for the whole ``wait`` seconds (ValueError on bad input)."""
        check_unit(unit)
        for name, value in (("lease id", lease_id), ("replace", replace)):
            if (value is not None or name == "lease id") and \
                    (not value or not isinstance(value, str) or any(ord(char) < 32 for char in value)):
                raise ValueError("%s: a non-empty string without control characters" % name)
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
                left = self.left(holder, now)
                live = holder is not None and "error" not in holder and left > 0
                if holder is None:
                    result = "acquired"
                elif holder.get("id") == lease_id:
                    result = "renewed"
                elif not live:
                    result = "expired"
                elif replace is not None and holder.get("id") == replace:
                    result = "gone"
                elif force:
                    result = "broken"
                else:
                    result = "held"
                if result != "held":
                    previous = holder if result in ("expired", "gone", "broken") else None
                    if check_mode:
                        return {"result": "free" if result != "renewed" else "renewed", "lease": holder,
                                "previous": previous, "waited": 0}
                    record = self._write(unit, lease_id, owner, ttl, now,
                                         holder["acquired_at"] if result == "renewed" else now)
                    return {"result": result, "lease": record, "previous": previous, "waited": int(now - start)}
                if check_mode:
                    return {"result": "held", "lease": holder, "previous": None, "waited": 0}
            finally:
                if fd is not None:
                    os.close(fd)
            waited = now - start
            if waited >= wait:
                raise LeaseHeld(unit, holder, waited, now, left)
            self.sleep(min(self.poll, wait - waited))

    @staticmethod
    def _not_this_runs(holder, lease_id):
        """renew()'s and release()'s answer when ``lease_id`` does not hold the lease: not held (nobody does) or held
        by another (left alone: a run never renews or removes another run's lease); None when it does."""
        if holder is None:
            return {"result": "not held", "lease": None}
        if holder.get("id") != lease_id:
            return {"result": "held by another", "lease": holder}
        return None

    def renew(self, unit, lease_id, ttl, check_mode=False):
        """Move the expiry of ``lease_id``'s lease on (between long steps). Returns {"result", "lease"}: renewed,
        not held (nobody holds it) or held by another (this run lost it: left alone)."""
        check_unit(unit)
        if ttl < 1:
            raise ValueError("ttl must be at least 1 s")
        fd = None if check_mode else self._guard(unit)
        try:
            holder = self.read(unit)
            refused = self._not_this_runs(holder, lease_id)
            if refused:
                return refused
            if check_mode:
                return {"result": "renewed", "lease": holder}
            now = self.clock()
            written = self._write(unit, lease_id, holder.get("owner") or {}, ttl, now, holder.get("acquired_at", now))
            return {"result": "renewed", "lease": written}
        finally:
            if fd is not None:
                os.close(fd)

    def release(self, unit, lease_id, check_mode=False):
        """Give the lease back when ``lease_id`` holds it. Returns {"result", "lease"}: released, not held
        (nobody held it), or held by another (left alone: a run never removes another run's lease)."""
        check_unit(unit)
        if check_mode:
            holder = self.read(unit)
            return self._not_this_runs(holder, lease_id) or {"result": "released", "lease": holder}
        fd = self._guard(unit)
        try:
            holder = self.read(unit)
            refused = self._not_this_runs(holder, lease_id)
            if refused:
                return refused
            os.unlink(self.path(unit))
            return {"result": "released", "lease": holder}
        finally:
            os.close(fd)
