# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Incremental reader of ONE invocation of a unit in the journal.

``journalctl _SYSTEMD_INVOCATION_ID=<id> + INVOCATION_ID=<id> -o json --after-cursor <c>``: the match uses
journald's field index, and the cursor makes each read start where the last one stopped, so the cost
follows the lines of this invocation only, never the unit's history, and lines of earlier runs never
count. ``_SYSTEMD_INVOCATION_ID`` is on the lines the service printed; ``INVOCATION_ID`` on systemd's own
messages about this invocation (``Started ...``, ``Main process exited ...``), which are useful in a tail.
"""

from __future__ import annotations

import collections
import json

TAIL_LINES = 50
OUTPUT_FIELDS = "MESSAGE,_PID,_SYSTEMD_INVOCATION_ID,INVOCATION_ID,SYSLOG_IDENTIFIER"


class JournalError(Exception):
    """journalctl failed."""


class Entry(object):
    __slots__ = ("message", "realtime", "cursor", "from_manager", "pid")

    def __init__(self, message, realtime, cursor, from_manager, pid):
        self.message = message
        self.realtime = realtime  # seconds since the epoch (float)
        self.cursor = cursor
        self.from_manager = from_manager  # a message of systemd about the unit, not a line of the service
        self.pid = pid


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


def parse_json_lines(text):
    """``journalctl -o json`` output -> list of Entry (lines that are not JSON objects are skipped)."""
    entries = []
    for raw in text.splitlines():
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
        ))
    return entries


class JournalReader(object):
    """Reads new entries of one invocation on each call to ``read()``."""

    def __init__(self, run, invocation_id, journalctl="journalctl", include_manager=True, tail=TAIL_LINES):
        if not invocation_id:
            raise ValueError("an invocation id is needed")
        self.run = run
        self.invocation_id = invocation_id
        self.bin = journalctl
        self.include_manager = include_manager
        self.cursor = None
        self.tail = collections.deque(maxlen=tail)
        self.reads = 0
        self.entries_read = 0

    def command(self):
        argv = [self.bin, "--no-pager", "--quiet", "-o", "json", "--output-fields=" + OUTPUT_FIELDS]
        if self.cursor:
            argv.append("--after-cursor=" + self.cursor)
        argv.append("_SYSTEMD_INVOCATION_ID=" + self.invocation_id)
        if self.include_manager:
            argv.extend(["+", "INVOCATION_ID=" + self.invocation_id])
        return argv

    def read(self):
        rc, out, err = self.run(self.command())
        self.reads += 1
        if rc != 0:
            raise JournalError("journalctl failed (rc=%s): %s" % (rc, (err or out).strip()))
        entries = parse_json_lines(out)
        if entries:
            self.cursor = entries[-1].cursor or self.cursor
        self.entries_read += len(entries)
        for entry in entries:
            self.tail.append(entry.message)
        return entries
