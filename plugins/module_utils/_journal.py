# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Incremental reader of ONE invocation of a unit in the journal.

``journalctl _SYSTEMD_INVOCATION_ID=<id> + INVOCATION_ID=<id> -o json --after-cursor <c>``: the match uses
journald's field index, and the cursor makes each read start where the last one stopped, so the cost
follows the lines of this invocation only, never the unit's history, and lines of earlier runs never
count. ``_SYSTEMD_INVOCATION_ID`` is on the lines the service printed; ``INVOCATION_ID`` on systemd's own
messages about this invocation (``Started ...``, ``Main process exited ...``), which are useful in a tail;
``OBJECT_SYSTEMD_INVOCATION_ID`` on journald's own ``Suppressed N messages from ...`` (rate limit), whose
``N_DROPPED`` says how many lines of this invocation were dropped.

Only journald's trusted fields (those starting with ``_``: journald sets them, a client cannot) tie a record to the
invocation. ``INVOCATION_ID``, ``OBJECT_SYSTEMD_INVOCATION_ID`` and ``N_DROPPED`` are fields any local process can
send with its own message, so a record matched only by them counts when journald vouches for its sender: systemd
itself (``_PID=1`` with ``_COMM=systemd`` or ``_SYSTEMD_UNIT=init.scope``) or journald's own driver
(``_TRANSPORT=driver``, the only source of ``N_DROPPED``). Any other such record is forged: it advances the
cursor and is counted (``forged``), but never reaches the tail, the stop report or the dropped-lines count.

``--all``: without it ``-o json`` writes ``null`` for a field over 4 KiB (SGLang's ``server_args=...`` line is
longer). Records are split on ``\n`` only: a U+2028 inside a message must not cut it.

The first read can be bounded (``read(limit=N)``: the reader kills journalctl after N records) and a tail read
(``read(tail=N)``: the last N records, ``-n N``) moves the cursor to the end, so a verify of an invocation with
millions of request lines reads a bounded head and a bounded tail, never the whole invocation.
"""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import time

TAIL_LINES = 50
OUTPUT_FIELDS = ("MESSAGE,_PID,_SYSTEMD_INVOCATION_ID,INVOCATION_ID,OBJECT_SYSTEMD_INVOCATION_ID,N_DROPPED,"
                 "SYSLOG_IDENTIFIER,_COMM,_SYSTEMD_UNIT,_TRANSPORT")
JOURNAL_TIMEOUT = 60.0


class JournalError(Exception):
    """journalctl failed."""


class Entry(object):
    __slots__ = ("message", "realtime", "cursor", "from_manager", "pid", "dropped", "forged")

    def __init__(self, message, realtime, cursor, from_manager, pid, dropped=0, forged=False):
        self.message = message
        self.realtime = realtime  # seconds since the epoch (float)
        self.cursor = cursor
        self.from_manager = from_manager  # a message of systemd (or journald) about the unit, not a service line
        self.pid = pid
        self.dropped = dropped    # journald's "Suppressed N messages": N lines of this invocation were dropped
        self.forged = forged      # tied to the invocation only by fields a client can set: never trusted


def decode_message(value):
    """MESSAGE is a string, or a list of byte values when it is not valid UTF-8, or null when too large."""
    if value is None:
        return ""
    if isinstance(value, list):
        try:
            return bytes(bytearray(value)).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return ""
    return str(value)


def from_systemd(data):
    """A record systemd itself (PID 1) wrote: journald's trusted fields say so."""
    return str(data.get("_PID")) == "1" and (data.get("_COMM") == "systemd" or data.get("_SYSTEMD_UNIT") == "init.scope")


def from_journald(data):
    """A record journald's own driver wrote (its "Suppressed N messages"): ``_TRANSPORT=driver``."""
    return data.get("_TRANSPORT") == "driver"


def _dropped(data):
    if "OBJECT_SYSTEMD_INVOCATION_ID" not in data or "_SYSTEMD_INVOCATION_ID" in data or not from_journald(data):
        return 0
    try:
        return int(data.get("N_DROPPED") or 0)
    except (TypeError, ValueError):
        return 0


def _kind(data, invocation_id=None):
    """"service" (a line of the invocation's own processes), "manager" (systemd's or journald's own record about
    it) or "forged" (tied to it only by fields a client can set)."""
    service = data.get("_SYSTEMD_INVOCATION_ID")
    if service is not None and (invocation_id is None or service == invocation_id):
        return "service"
    if from_systemd(data) or from_journald(data):
        return "manager"
    return "forged"


def parse_json_lines(text, invocation_id=None):
    """``journalctl -o json`` output -> list of Entry (lines that are not JSON objects are skipped). With
    ``invocation_id``, a service line is one whose trusted ``_SYSTEMD_INVOCATION_ID`` is that invocation's."""
    entries = []
    for raw in text.split("\n"):
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        try:
            realtime = int(data.get("__REALTIME_TIMESTAMP", "0")) / 1e6
        except (TypeError, ValueError):
            realtime = 0.0
        kind = _kind(data, invocation_id)
        entries.append(Entry(
            message=decode_message(data.get("MESSAGE")),
            realtime=realtime,
            cursor=data.get("__CURSOR"),
            from_manager=kind != "service",
            pid=data.get("_PID"),
            dropped=_dropped(data) if kind == "manager" else 0,
            forged=kind == "forged",
        ))
    return entries


class JournalReader(object):
    """Reads new entries of one invocation on each call to ``read()``.

    ``run(argv, **kw) -> (rc, out, err)``; ``kw`` holds ``max_lines`` for a bounded read (the answer may carry
    ``truncated``) and ``timeout``.
    """

    def __init__(self, run, invocation_id, journalctl="journalctl", include_manager=True, tail=TAIL_LINES,
                 service_lines=True, timeout=JOURNAL_TIMEOUT):
        if not invocation_id:
            raise ValueError("an invocation id is needed")
        self.run = run
        self.invocation_id = invocation_id
        self.bin = journalctl
        self.include_manager = include_manager
        self.service_lines = service_lines
        self.timeout = timeout
        self.cursor = None
        self.tail = collections.deque(maxlen=tail)
        self.reads = 0
        self.entries_read = 0
        self.truncated = False   # the last read stopped at its limit
        self.forged = 0          # records tied to the invocation only by client-set fields, left out

    def command(self, tail=None):
        argv = [self.bin, "--no-pager", "--quiet", "--all", "-o", "json", "--output-fields=" + OUTPUT_FIELDS]
        if tail is not None:
            argv.append("--lines=%d" % tail)
        elif self.cursor:
            argv.append("--after-cursor=" + self.cursor)
        matches = []
        if self.service_lines:
            matches.append("_SYSTEMD_INVOCATION_ID=" + self.invocation_id)
        if self.include_manager:
            matches.append("INVOCATION_ID=" + self.invocation_id)
            matches.append("OBJECT_SYSTEMD_INVOCATION_ID=" + self.invocation_id)
        for index, match in enumerate(matches):
            if index:
                argv.append("+")
            argv.append(match)
        return argv

    def read(self, limit=None, tail=None):
        """New entries since the last read; ``limit``: stop after that many; ``tail``: only the last N
        (and continue after them next time)."""
        kwargs = {"timeout": self.timeout}
        if limit is not None:
            kwargs["max_lines"] = limit
        answer = self.run(self.command(tail=tail), **kwargs)
        rc, out, err = answer[0], answer[1], answer[2]
        self.reads += 1
        if rc != 0:
            raise JournalError("journalctl failed (rc=%s): %s" % (rc, (err or out).strip()))
        entries = parse_json_lines(out, self.invocation_id)
        self.truncated = bool(getattr(answer, "truncated", False))
        if limit is not None and len(entries) >= limit:
            entries = entries[:limit]
            self.truncated = True   # as many as asked: there may be more
        if tail is not None and self.cursor:
            # Entries up to the cursor were read before: keep only the new ones.
            cursors = [entry.cursor for entry in entries]
            if self.cursor in cursors:
                entries = entries[cursors.index(self.cursor) + 1:]
        if entries:
            self.cursor = entries[-1].cursor or self.cursor
        return self._trusted(entries)

    def _trusted(self, entries):
        """The entries that are not forged (counted in ``forged``), added to the tail."""
        trusted = [entry for entry in entries if not entry.forged]
        self.forged += len(entries) - len(trusted)
        self.entries_read += len(trusted)
        for entry in trusted:
            self.tail.append(entry.message)
        return trusted


class JournalFollower(JournalReader):
    """A streaming reader: one ``journalctl --follow --no-tail -o json`` process for the invocation, whose output
    is read as journald writes it. ``wait(timeout)`` blocks (select) until a record arrives or the time is up, so
    the caller reacts to the ready line within journald's own delivery time instead of a poll interval.
    ``read()`` returns the complete records that arrived; ``read(limit=...)`` / ``read(tail=...)`` (bounded reads
    of an invocation that began before the task) use ``run`` as JournalReader does, and the follower starts after
    the cursor they reached."""

    def __init__(self, run, invocation_id, journalctl="journalctl", popen=None, env=None, **kwargs):
        JournalReader.__init__(self, run, invocation_id, journalctl, **kwargs)
        self.popen = popen
        self.env = env
        self.proc = None
        self.buffer = b""
        self.waits = 0
        self.peeks = 0
        self.seen = collections.OrderedDict()   # cursors consumed lately (a record can come from both paths)

    def _start(self):
        environ = dict(os.environ)
        environ.update(self.env or {})
        argv = self.command() + ["--follow", "--no-tail"]
        popen = self.popen or subprocess.Popen
        try:
            self.proc = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environ)  # pylint: disable=ansible-bad-function
        except OSError as exc:
            raise JournalError("journalctl --follow could not start: %s" % exc)
        os.set_blocking(self.proc.stdout.fileno(), False)

    def _pump(self, timeout):
        """Read what is there (waiting at most timeout for the first byte). True when data arrived."""
        if self.proc is None:
            self._start()
        fd = self.proc.stdout.fileno()
        ready, _w, _x = select.select([fd], [], [], max(0.0, timeout))
        if not ready:
            return False
        got = False
        while True:
            try:
                chunk = self.proc.stdout.read(65536)
            except (IOError, OSError):
                chunk = None
            if not chunk:
                if chunk == b"" and self.proc.poll() is not None and not got:
                    rc = self.proc.returncode
                    self.proc = None
                    raise JournalError("journalctl --follow ended (rc=%s)" % rc)
                break
            self.buffer += chunk
            got = True
        return got

    def wait(self, timeout):
        """Block until a complete record is available or timeout seconds passed."""
        self.waits += 1
        end = time.monotonic() + max(0.0, timeout)
        while b"\n" not in self.buffer:
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._pump(left)
        return True

    def _fresh(self, entries):
        out = []
        for entry in entries:
            if entry.cursor and entry.cursor in self.seen:
                continue
            if entry.cursor:
                self.seen[entry.cursor] = True
                if len(self.seen) > 5000:
                    self.seen.popitem(last=False)
            out.append(entry)
        return out

    def read(self, limit=None, tail=None, peek=False):
        """Records the follower delivered; with ``peek`` also a direct read after the cursor: journald tells
        followers about new records up to ~0.25 s late (it batches its change notifications), while a direct
        read sees a record as soon as it is written. The runner peeks only while the ready line is imminent."""
        if limit is not None or tail is not None:
            return self._fresh(JournalReader.read(self, limit=limit, tail=tail))   # trusted ones only
        self._pump(0.0)
        self.reads += 1
        entries = []
        cut = self.buffer.rfind(b"\n")
        if cut >= 0:
            text, self.buffer = self.buffer[:cut + 1], self.buffer[cut + 1:]
            entries = self._fresh(parse_json_lines(text.decode("utf-8", "replace"), self.invocation_id))
        if entries:
            self.cursor = entries[-1].cursor or self.cursor
        if peek and self.run is not None:
            self.peeks += 1
            answer = self.run(self.command(), timeout=self.timeout)
            if answer[0] == 0:
                more = self._fresh(parse_json_lines(answer[1], self.invocation_id))
                if more:
                    self.cursor = more[-1].cursor or self.cursor
                entries.extend(more)
        return self._trusted(entries)

    def close(self):
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(5)
            except (OSError, ValueError):
                pass
            self.proc = None
