# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the CUDA toolkit module reads of a host, in ONE call (issue 22: a no-op deploy in fewer host tasks).

The role used to make one module run per read: a stat of the CUDA home, of its nvcc, of the generic CUDA link, of
nvcc in the wheel tree, a find of /etc/ld.so.conf.d and a slurp of each entry. ``gather`` makes them all and
returns plain data with the names the role read from ansible.builtin.stat (exists, islnk, isdir, isreg,
executable, lnk_source, lnk_target), so the role's checks and messages stay as they were. Read-only; standard
library only.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat

LDCONFIG_DIR = "/etc/ld.so.conf.d"
LDCONFIG_PATTERN = "*.conf"
# lstat/stat errors that mean "nothing there" (a path under a file, a link that loops counts as not resolving)
_MISSING = (errno.ENOENT, errno.ENOTDIR)
_UNRESOLVED = _MISSING + (errno.ELOOP,)


class CudaFactsError(Exception):
    """A path the role asked for cannot be read (not absolute, or an error other than 'not there')."""


def _kind(st):
    mode = st.st_mode
    return {"isdir": stat.S_ISDIR(mode), "isreg": stat.S_ISREG(mode), "islnk": stat.S_ISLNK(mode)}


def path_facts(path):
    """ansible.builtin.stat's view of ``path`` (follow=false): {'exists': False} when there is nothing, else
    exists, path, islnk, isdir, isreg (of the path itself), executable (os.access X_OK, which follows links as
    stat's does), lnk_source (os.path.realpath) and lnk_target (os.readlink) for a link. Added: ``realpath``
    (os.path.realpath, also for a path that does not exist) and ``resolved``, the same fields after following
    links (stat with follow=true: {'exists': False} for a dangling or looping link)."""
    if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
        raise CudaFactsError("path %r is not an absolute path" % (path,))
    facts = {"realpath": os.path.realpath(path)}
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in _MISSING:
            facts.update(exists=False, resolved={"exists": False})
            return facts
        raise CudaFactsError("cannot read %s: %s" % (path, exc.strerror or exc))
    facts.update(exists=True, path=path, executable=os.access(path, os.X_OK), **_kind(st))
    if facts["islnk"]:
        facts["lnk_source"] = os.path.realpath(path)
        facts["lnk_target"] = os.readlink(path)
        try:
            target = os.stat(path)
        except OSError as exc:
            if exc.errno not in _UNRESOLVED:
                raise CudaFactsError("cannot read %s: %s" % (path, exc.strerror or exc))
            facts["resolved"] = {"exists": False}
        else:
            facts["resolved"] = dict(exists=True, path=path, executable=facts["executable"], **_kind(target))
    else:
        facts["resolved"] = dict(exists=True, path=path, executable=facts["executable"], **_kind(st))
    return facts


def ldconfig_entries(directory=LDCONFIG_DIR):
    """The loader entries as the role read them with find (``*.conf``, any file type, not hidden, not recursive)
    and one slurp each: ([{'path', 'content'}] sorted by path, [{'path', 'reason'}] of those that could not be read:
    a dangling link, a directory, an unreadable file - skipped, as the role's failed_when: false slurp skipped them).
    ``content`` is text (UTF-8, undecodable bytes replaced, as _cuda_toolkit.repo.cuda_stale_ldconfig decodes a
    slurp), so the list goes to that function as it is. A directory that does not exist gives ([], [])."""
    if not directory:
        return [], []
    try:
        names = os.listdir(directory)
    except OSError:
        return [], []
    entries, skipped = [], []
    for path in sorted(os.path.normpath(os.path.join(directory, name)) for name in names
                       if not name.startswith(".") and fnmatch.fnmatchcase(name, LDCONFIG_PATTERN)):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            skipped.append({"path": path, "reason": exc.strerror or str(exc)})
            continue
        entries.append({"path": path, "content": data.decode("utf-8", "replace")})
    return entries, skipped


def gather(paths=(), ldconfig_dir=LDCONFIG_DIR):
    """{'paths': {path: path_facts(path)}, 'ldconfig': [...], 'ldconfig_skipped': [...]} (see ldconfig_entries;
    an empty ``ldconfig_dir`` reads no loader entry)."""
    facts = {}
    for path in paths or ():
        facts[path] = path_facts(path)
    entries, skipped = ldconfig_entries(ldconfig_dir)
    return {"paths": facts, "ldconfig": entries, "ldconfig_skipped": skipped}
