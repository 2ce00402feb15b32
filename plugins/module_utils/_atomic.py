# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""One way to write an on-host state file: a temporary file in the same directory, fsync, rename. A kill or a
full disk leaves the old file or the new one, never half of one. Used by _state_file (the verified-start record)
and _last_good (the last-good set)."""

from __future__ import annotations

import hashlib
import os
import tempfile


def write_atomic(dest, data, mode=0o600, prefix=".tmp-", root_owned=False):
    """Write bytes ``data`` to ``dest`` (mode ``mode``; owned by root:root when ``root_owned`` and running as
    root); the temporary file starts with ``prefix`` and is removed when anything fails."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=os.path.dirname(dest) or ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if root_owned and os.geteuid() == 0:
            os.chown(tmp, 0, 0)
        os.rename(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dest


def sha256_file(path):
    """The sha256 (hex) of the file ``path``, read in 1 MiB blocks (a multi-GB file never whole in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
