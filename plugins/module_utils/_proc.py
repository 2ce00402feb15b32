# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run ``systemctl`` / ``journalctl`` with a time limit and, for journal reads, a cap on the lines kept.

``run(argv, timeout=..., max_lines=None) -> (rc, stdout, stderr)``. A command that runs past its time limit is
killed and answers rc 124 (as coreutils' ``timeout``). With ``max_lines`` the reader stops after that many
stdout lines and kills the command, so that a first read of an invocation with millions of lines costs a
bounded amount of memory and time; the answer then carries rc 0 and a ``truncated`` marker (see
``RunResult.truncated``). Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import threading

TIMEOUT_RC = 124
DEFAULT_TIMEOUT = 30.0


class RunResult(tuple):
    """(rc, stdout, stderr) that also says whether the output was cut at max_lines."""

    def __new__(cls, rc, out, err, truncated=False):
        obj = tuple.__new__(cls, (rc, out, err))
        obj.truncated = truncated
        return obj


def run(argv, timeout=DEFAULT_TIMEOUT, max_lines=None, env=None):
    environ = dict(os.environ)
    environ.update(env or {})
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)  # pylint: disable=ansible-bad-function
    except OSError as exc:
        return RunResult(127, "", "%s: %s" % (argv[0], exc))
    timed_out = []

    def kill():
        timed_out.append(True)
        try:
            proc.kill()
        except OSError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    err_chunks = []

    def drain_err():
        err_chunks.append(proc.stderr.read())

    err_thread = threading.Thread(target=drain_err)
    err_thread.daemon = True
    err_thread.start()
    lines = []
    truncated = False
    try:
        for raw in iter(proc.stdout.readline, b""):
            lines.append(raw)
            if max_lines is not None and len(lines) >= max_lines:
                truncated = True
                proc.kill()
                break
        proc.stdout.close()
        rc = proc.wait()
    finally:
        timer.cancel()
    err_thread.join(5)
    out = b"".join(lines).decode("utf-8", "replace")
    err = b"".join(err_chunks).decode("utf-8", "replace")
    if truncated:
        return RunResult(0, out, err, truncated=True)
    if timed_out:
        return RunResult(TIMEOUT_RC, out, "%s timed out after %.0f s" % (argv[0], timeout))
    return RunResult(rc, out, err)


def read_text(path):
    """The text of a file (``/proc/<pid>/cgroup``, ``/proc/meminfo``, ...), or None when it cannot be read."""
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return None
