# SPDX-License-Identifier: GPL-3.0-or-later
"""The real SGLang 0.5.17 server's output (tests/fixtures/sglang/real/0.5.17-h200/, unedited), read for the tests:
a server log as its lines, and the collection run's journal (``journalctl -o short-precise``) as invocations."""
import os
import re

from conftest import FIXTURES

REAL = os.path.join(FIXTURES, "sglang", "real", "0.5.17-h200")
JOURNAL_RE = re.compile(r"^\w{3} \d\d \d\d:\d\d:\d\d\.\d{6} \S+ (?P<ident>[\w.-]+)\[(?P<pid>\d+)\]: (?P<msg>.*)$")


def real_path(*parts):
    return os.path.join(REAL, *parts)


def server_log(name):
    """serverA.log .. serverD.log: one whole invocation each (stdout and stderr), as lines."""
    with open(real_path(name), encoding="utf-8") as handle:
        return handle.read().splitlines()


def journal_invocations():
    """The unit's invocations in collection-run/journal.txt, in order: [{"manager": [...], "service": [...]}], each
    from systemd's ``Started`` line to the next (systemd's lines about a stop or exit go with the invocation that
    stopped). Service lines keep only the message (what journald's MESSAGE holds)."""
    invocations = []
    with open(real_path("collection-run", "journal.txt"), encoding="utf-8") as handle:
        for line in handle.read().splitlines():
            match = JOURNAL_RE.match(line)
            if not match:
                continue
            manager = match.group("ident") == "systemd" and match.group("pid") == "1"
            message = match.group("msg")
            if manager and message.startswith("Started "):
                invocations.append({"manager": [], "service": []})
            if invocations:
                invocations[-1]["manager" if manager else "service"].append(message)
    return invocations
