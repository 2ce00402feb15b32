# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""One call of the lifecycle at a time on a unit of this host.

The host lease (``_lease.py``) orders the RUNS: one ansible-playbook at a time changes a unit's life. But the
module's work happens on the host: when the controller of a run dies (Ctrl-C, a cancelled job, an SSH drop), the
module it started may go on to the end of its transaction (a restart, a verification, a rollback), while the
lease, judged by the controller's process, is already free for the next run. So every call that may change the
host also takes ``flock`` on ``<directory>/<unit>.work`` for its whole duration: a second call waits until the
first one is done (the kernel lets go of the lock when a call ends, however it ends, killed included), then reads
the host as the first one left it. The file holds the pid of the call that holds it, for the messages.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time


class WorkLockTimeout(Exception):
    """Another call still holds the unit after ``wait`` seconds."""


def _holder(fd):
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return ""


def acquire(directory, unit, wait, clock=time.monotonic, sleep=time.sleep, poll=1.0):
    """Take the unit's work lock, waiting up to ``wait`` seconds for a call that holds it. Returns
    (fd, waited_seconds, holder_pid_text): keep fd open for the call's duration. Raises WorkLockTimeout naming
    the holder."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    path = os.path.join(directory, "%s.work" % unit)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    start = clock()
    holder = ""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            holder = holder or _holder(fd)
            if clock() - start >= wait:
                os.close(fd)
                raise WorkLockTimeout(
                    "another call of gpuserve.sglang.sglang_server (pid %s) is still working on %s after %d s "
                    "(a restart, a verification or a rollback of a run whose controller may be gone); nothing was "
                    "changed" % (holder or "?", unit, int(wait)))
            sleep(poll)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, str(os.getpid()).encode("ascii"))
    return fd, clock() - start, holder
