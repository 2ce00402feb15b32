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

``--all``: without it ``-o json`` writes ``null`` for a field over 4 KiB (SGLang's ``server_args=...`` line is
longer). Records are split on ``\n`` only: a U+2028 inside a message must not cut it.

The first read can be bounded (``read(limit=N)``: the reader kills journalctl after N records) and a tail read
(``read(tail=N)``: the last N records, ``-n N``) moves the cursor to the end, so a verify of an invocation with
millions of request lines reads a bounded head and a bounded tail, never the whole invocation.
"""

from __future__ import annotations

import collections
import json

TAIL_LINES = 50
OUTPUT_FIELDS = ("MESSAGE,_PID,_SYSTEMD_INVOCATION_ID,INVOCATION_ID,OBJECT_SYSTEMD_INVOCATION_ID,N_DROPPED,"
                 "SYSLOG_IDENTIFIER")
JOURNAL_TIMEOUT = 60.0


class JournalError(Exception):
    """journalctl failed."""


class Entry(object):
    __slots__ = ("message", "realtime", "cursor", "from_manager", "pid", "dropped")

    def __init__(self, message, realtime, cursor, from_manager, pid, dropped=0):
        self.message = message
        self.realtime = realtime  # seconds since the epoch (float)
        self.cursor = cursor
        self.from_manager = from_manager  # a message of systemd (or journald) about the unit, not a service line
        self.pid = pid
        self.dropped = dropped    # journald's "Suppressed N messages": N lines of this invocation were dropped


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


def _dropped(data):
    if "OBJECT_SYSTEMD_INVOCATION_ID" not in data or "_SYSTEMD_INVOCATION_ID" in data:
        return 0
    try:
        return int(data.get("N_DROPPED") or 0)
    except (TypeError, ValueError):
        return 0


def parse_json_lines(text):
    """``journalctl -o json`` output -> list of Entry (lines that are not JSON objects are skipped)."""
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
        entries.append(Entry(
            message=decode_message(data.get("MESSAGE")),
            realtime=realtime,
            cursor=data.get("__CURSOR"),
            from_manager="_SYSTEMD_INVOCATION_ID" not in data,
            pid=data.get("_PID"),
            dropped=_dropped(data),
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
        entries = parse_json_lines(out)
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
        self.entries_read += len(entries)
        for entry in entries:
            self.tail.append(entry.message)
        return entries
