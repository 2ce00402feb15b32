# SPDX-License-Identifier: GPL-3.0-or-later
"""Journal reader, on `journalctl -o json` output captured from systemd 252 (Debian 12)."""
import json

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _journal as jr

INV = "78140f679af74fdba0aba4e5d4531774"
# Captured with: journalctl --no-pager -q -o json --output-fields=... _SYSTEMD_INVOCATION_ID=ID + INVOCATION_ID=ID
# (systemd's line with the trusted _COMM and _SYSTEMD_UNIT that the reader's output fields now include)
REAL = [
    '{"__MONOTONIC_TIMESTAMP":"558506488","__CURSOR":"s=2e3f;i=84;b=37c0;m=214a21f8;t=6616dfd39f908;x=b507",'
    '"_BOOT_ID":"37c0","_PID":"1","MESSAGE":"Started standin-a.service.","SYSLOG_IDENTIFIER":"systemd",'
    '"_COMM":"systemd","_SYSTEMD_UNIT":"init.scope",'
    '"INVOCATION_ID":"%s","__REALTIME_TIMESTAMP":"1795974888028424"}' % INV,
    '{"_BOOT_ID":"37c0","MESSAGE":"[2026-11-29 17:54:48] server_args=ServerArgs(model_path=\'moonshotai/Kimi-K2.5\')",'
    '"_PID":"153","__REALTIME_TIMESTAMP":"1795974888258111","__MONOTONIC_TIMESTAMP":"558736175",'
    '"SYSLOG_IDENTIFIER":"python3","__CURSOR":"s=2e3f;i=85;b=37c0;m=214da32f;t=6616dfd3d7a3f;x=4b37",'
    '"_SYSTEMD_INVOCATION_ID":"%s"}' % INV,
    '{"_BOOT_ID":"37c0","_SYSTEMD_INVOCATION_ID":"%s","MESSAGE":"[2026-11-29 17:54:48 TP0] Load weight begin. '
    'avail mem=94.13 GB","__CURSOR":"s=2e3f;i=86;b=37c0;m=2152a412;t=6616dfd427b21;x=d003","_PID":"153",'
    '"__MONOTONIC_TIMESTAMP":"559064082","__REALTIME_TIMESTAMP":"1795974888586017","SYSLOG_IDENTIFIER":"python3"}'
    % INV,
]


def test_parse_real_entries():
    entries = jr.parse_json_lines("\n".join(REAL) + "\n")
    assert [e.message for e in entries][0] == "Started standin-a.service."
    assert entries[0].from_manager is True
    assert entries[1].from_manager is False
    assert entries[2].message.endswith("Load weight begin. avail mem=94.13 GB")
    assert entries[2].realtime == pytest.approx(1795974888.586017)
    assert entries[2].cursor.startswith("s=2e3f;i=86")


def test_binary_and_null_messages():
    line = json.dumps({"MESSAGE": list(b"caf\xc3\xa9 \xff"), "__CURSOR": "c1", "_SYSTEMD_INVOCATION_ID": INV})
    null = json.dumps({"MESSAGE": None, "__CURSOR": "c2", "_SYSTEMD_INVOCATION_ID": INV})
    entries = jr.parse_json_lines(line + "\n-- cursor: c2\n" + null + "\nnot json\n")
    assert entries[0].message.startswith("caf\u00e9 ")
    assert entries[1].message == ""
    assert len(entries) == 2


class FakeJournalctl(object):
    """Answers like journalctl: entries after the cursor, of the matched invocation only."""

    def __init__(self, entries):
        self.entries = entries
        self.calls = []

    def __call__(self, argv, **_kw):
        self.calls.append(argv)
        after = [a.split("=", 1)[1] for a in argv if a.startswith("--after-cursor=")]
        inv = [a.split("=", 1)[1] for a in argv if a.startswith("_SYSTEMD_INVOCATION_ID=")][0]
        out = []
        seen_cursor = not after
        for entry in self.entries:
            if not seen_cursor:
                seen_cursor = entry["__CURSOR"] == after[0]
                continue
            if entry.get("_SYSTEMD_INVOCATION_ID") == inv or entry.get("INVOCATION_ID") == inv:
                out.append(json.dumps(entry))
        return 0, "\n".join(out), ""


def test_reader_is_incremental_and_filters_by_invocation():
    entries = [json.loads(line) for line in REAL]
    entries.insert(1, {"MESSAGE": "old run: The server is fired up and ready to roll!", "__CURSOR": "old",
                       "_SYSTEMD_INVOCATION_ID": "0ld"})
    fake = FakeJournalctl(entries)
    reader = jr.JournalReader(fake, INV, journalctl="/usr/bin/journalctl")
    first = reader.read()
    assert [e.message for e in first][1].endswith("server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5')")
    assert all("old run" not in e.message for e in first)
    argv = fake.calls[0]
    # --all: SGLang's server_args line is over 4 KiB and would be null without it
    assert argv[:6] == ["/usr/bin/journalctl", "--no-pager", "--quiet", "--all", "-o", "json"]
    assert argv[-5:] == ["_SYSTEMD_INVOCATION_ID=" + INV, "+", "INVOCATION_ID=" + INV, "+",
                         "OBJECT_SYSTEMD_INVOCATION_ID=" + INV]
    assert not any(a.startswith("--after-cursor") for a in argv)
    # nothing new: the second read starts after the last cursor and returns nothing
    assert reader.read() == []
    assert "--after-cursor=" + first[-1].cursor in fake.calls[1]
    fake.entries.append({"MESSAGE": "new line", "__CURSOR": "c9", "_SYSTEMD_INVOCATION_ID": INV})
    assert [e.message for e in reader.read()] == ["new line"]
    assert reader.entries_read == 4 and reader.reads == 3
    assert list(reader.tail)[-1] == "new line"


def test_tail_keeps_the_last_fifty():
    entries = [{"MESSAGE": "line %d" % i, "__CURSOR": "c%d" % i, "_SYSTEMD_INVOCATION_ID": INV} for i in range(80)]
    reader = jr.JournalReader(FakeJournalctl(entries), INV)
    reader.read()
    assert len(reader.tail) == 50 and reader.tail[0] == "line 30" and reader.tail[-1] == "line 79"


def test_errors():
    with pytest.raises(ValueError):
        jr.JournalReader(lambda argv, **_kw: (0, "", ""), "")
    reader = jr.JournalReader(lambda argv, **_kw: (1, "", "Failed to seek to cursor"), INV)
    with pytest.raises(jr.JournalError, match="Failed to seek"):
        reader.read()


def test_records_split_only_on_newline_and_u2028_is_kept():
    """Old code split with str.splitlines(): a U+2028 inside a MESSAGE cut the JSON record and dropped the line."""
    line = json.dumps({"MESSAGE": "[2026-11-29 17:54:36 TP0] prompt a\u2028b: Allocating 22.39 GB host memory for "
                                  "hierarchical KV cache.", "__CURSOR": "c1", "_SYSTEMD_INVOCATION_ID": INV},
                      ensure_ascii=False)
    entries = jr.parse_json_lines(line + "\n")
    assert len(entries) == 1 and "\u2028" in entries[0].message


def test_journald_suppressed_messages_are_counted():
    """journald's rate limit: 'Suppressed N messages from x.service' carries OBJECT_SYSTEMD_INVOCATION_ID."""
    line = json.dumps({"MESSAGE": "Suppressed 1234 messages from sglang-kimi.service", "N_DROPPED": "1234",
                       "OBJECT_SYSTEMD_INVOCATION_ID": INV, "_PID": "54", "SYSLOG_IDENTIFIER": "systemd-journald",
                       "_TRANSPORT": "driver", "_COMM": "systemd-journal",
                       "__CURSOR": "c1"})
    entries = jr.parse_json_lines(line + "\n")
    assert entries[0].dropped == 1234 and entries[0].from_manager is True


def test_bounded_read_and_tail_read():
    entries = [{"MESSAGE": "line %d" % i, "__CURSOR": "c%d" % i, "_SYSTEMD_INVOCATION_ID": INV} for i in range(100)]
    fake = FakeJournalctl(entries)

    def capped(argv, max_lines=None, **_kw):
        rc, out, err = fake(argv)
        lines = out.split("\n")
        tail = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--lines=")]
        if tail:
            lines = lines[-tail[0]:]
        return rc, "\n".join(lines[:max_lines] if max_lines else lines), err
    reader = jr.JournalReader(capped, INV)
    head = reader.read(limit=10)
    assert [e.message for e in head][-1] == "line 9" and reader.truncated
    tail = reader.read(tail=5)
    assert [e.message for e in tail] == ["line %d" % i for i in range(95, 100)]
    assert "--lines=5" in fake.calls[-1]
    assert reader.read() == []          # continues after the tail


def test_follower_streams_records_as_they_arrive(tmp_path):
    """The streaming reader (one journalctl --follow process) hands over each record as it is written."""
    import time
    log = tmp_path / "argv"
    first = json.dumps({"MESSAGE": "line 1", "__CURSOR": "c1", "_SYSTEMD_INVOCATION_ID": INV})
    second = json.dumps({"MESSAGE": "[2026-11-29 17:54:36] The server is fired up and ready to roll!",
                         "__CURSOR": "c2", "_SYSTEMD_INVOCATION_ID": INV})
    script = tmp_path / "journalctl"
    script.write_text("#!/bin/sh\necho \"$*\" > %s\nprintf '%%s\\n' '%s'\nsleep 0.4\nprintf '%%s' '%s'\nsleep 0.2\n"
                      "printf '\\n'\nexec sleep 30\n" % (log, first, second))
    script.chmod(0o755)
    follower = jr.JournalFollower(None, INV, str(script))
    try:
        t0 = time.monotonic()
        assert follower.wait(5.0)
        assert [e.message for e in follower.read()] == ["line 1"]
        assert follower.read() == []                 # the second record is not complete yet
        assert follower.wait(5.0)
        got = follower.read()
        while not got:
            follower.wait(5.0)
            got = follower.read()
        assert got[0].message.endswith("ready to roll!") and follower.cursor == "c2"
        assert time.monotonic() - t0 < 3.0           # as they arrive, not after the 30 s the process lives
        assert not follower.wait(0.2)                # nothing more: wait returns after its timeout
        argv = log.read_text()
        assert "--follow --no-tail" in argv and "_SYSTEMD_INVOCATION_ID=" + INV in argv and "--all" in argv
    finally:
        follower.close()
    assert follower.proc is None


def test_follower_peek_reads_before_the_notification_and_never_twice(tmp_path):
    """journald notifies followers late: a direct read (peek) gets the record first; the follower's later copy
    of the same record is dropped."""
    rec = [json.dumps({"MESSAGE": "line %d" % i, "__CURSOR": "c%d" % i, "_SYSTEMD_INVOCATION_ID": INV})
           for i in range(3)]
    script = tmp_path / "journalctl"
    # the follower delivers line 0 at once, lines 1-2 only after 1 s (a late notification)
    script.write_text("#!/bin/sh\nprintf '%%s\\n' '%s'\nsleep 1\nprintf '%%s\\n' '%s' '%s'\nexec sleep 30\n"
                      % tuple(rec))
    script.chmod(0o755)

    def run(argv, **_kw):
        assert "--after-cursor=c0" in argv
        return 0, "\n".join(rec[1:]) + "\n", ""
    follower = jr.JournalFollower(run, INV, str(script))
    try:
        assert follower.wait(5.0)
        assert [e.message for e in follower.read()] == ["line 0"]
        assert [e.message for e in follower.read(peek=True)] == ["line 1", "line 2"]
        assert follower.wait(5.0)                     # the follower's late copies arrive...
        assert follower.read() == []                  # ...and are dropped
        assert follower.entries_read == 3 and follower.cursor == "c2" and follower.peeks == 1
    finally:
        follower.close()


SYSTEMD = {"_PID": "1", "_COMM": "systemd", "_SYSTEMD_UNIT": "init.scope"}
FORGER = {"_PID": "4242", "_COMM": "systemd-cat", "_SYSTEMD_UNIT": "session-3.scope", "_TRANSPORT": "journal"}


def test_only_trusted_fields_tie_a_record_to_the_invocation():
    """Issue 41 defect 8: INVOCATION_ID=, OBJECT_SYSTEMD_INVOCATION_ID= and N_DROPPED= are client-settable; a
    record they alone tie to the invocation is forged unless journald vouches for systemd (PID 1) or its driver."""
    records = [
        dict(SYSTEMD, MESSAGE="Started x.service.", INVOCATION_ID=INV, __CURSOR="c1"),
        dict(FORGER, MESSAGE="Main process exited, code=killed, status=9/KILL", INVOCATION_ID=INV, __CURSOR="c2"),
        dict(FORGER, MESSAGE="Suppressed 999 messages", N_DROPPED="999", OBJECT_SYSTEMD_INVOCATION_ID=INV,
             __CURSOR="c3"),
        dict(MESSAGE="Suppressed 7 messages", N_DROPPED="7", OBJECT_SYSTEMD_INVOCATION_ID=INV, _PID="54",
             _COMM="systemd-journal", _TRANSPORT="driver", __CURSOR="c4"),
        # a process of another unit (its own trusted invocation) that adds INVOCATION_ID=<ours>
        dict(MESSAGE="ready to roll!", _SYSTEMD_INVOCATION_ID="0ther", INVOCATION_ID=INV, _PID="77", __CURSOR="c5"),
        # _PID=1 but not systemd: not enough
        dict(MESSAGE="pid one", _PID="1", _COMM="bash", INVOCATION_ID=INV, __CURSOR="c6"),
        dict(MESSAGE="a service line", _SYSTEMD_INVOCATION_ID=INV, _PID="153", __CURSOR="c7"),
    ]
    entries = jr.parse_json_lines("\n".join(json.dumps(r) for r in records) + "\n", INV)
    assert [e.forged for e in entries] == [False, True, True, False, True, True, False]
    assert [e.dropped for e in entries] == [0, 0, 0, 7, 0, 0, 0]
    assert [e.from_manager for e in entries if not e.forged] == [True, True, False]


def test_the_reader_leaves_forged_records_out_and_moves_past_them():
    entries = [dict(SYSTEMD, MESSAGE="Started x.service.", INVOCATION_ID=INV, __CURSOR="c1"),
               dict(MESSAGE="line 1", _SYSTEMD_INVOCATION_ID=INV, __CURSOR="c2"),
               dict(FORGER, MESSAGE="FORGED", INVOCATION_ID=INV, __CURSOR="c3")]
    reader = jr.JournalReader(FakeJournalctl(entries), INV)
    got = reader.read()
    assert [e.message for e in got] == ["Started x.service.", "line 1"]
    assert "FORGED" not in list(reader.tail) and reader.forged == 1
    assert reader.cursor == "c3" and reader.read() == []          # not read again
    assert "_TRANSPORT" in jr.OUTPUT_FIELDS and "_COMM" in jr.OUTPUT_FIELDS
