# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The small writes of the toolkit module, each compared first and done only where the host differs: a directory
with its mode, a file with its content and mode (written atomically, the replaced file kept where asked), a
symbolic link with its target. Each returns the change it made (or would make in check mode) as one sentence, or
None when the host already matched; the diffs go to a list the module returns under ``--diff``.

Owner and group are root:root where the module runs as root (the role's file/copy/template tasks said so); a
run as another user (the unit tests) leaves ownership alone.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic


def _as_root():
    return os.geteuid() == 0


def _owner_change(path, st, follow=True):
    """'owner of PATH uid:gid -> 0:0' when running as root and PATH is not root's, else None."""
    if not _as_root() or (st.st_uid, st.st_gid) == (0, 0):
        return None
    if follow:
        os.chown(path, 0, 0)
    else:
        os.lchown(path, 0, 0)
    return "owner of %s %d:%d -> 0:0" % (path, st.st_uid, st.st_gid)


class Writer(object):
    """The module's writes: check_mode says whether they only report; ``changes`` and ``diffs`` collect what was
    (or would be) done, in order; ``backup(path) -> str`` keeps a file before it is replaced (AnsibleModule's
    backup_local: NAME.<pid>.<stamp>~ beside it)."""

    def __init__(self, check_mode=False, backup=None):
        self.check_mode = check_mode
        self.backup = backup
        self.changes = []
        self.diffs = []

    def _note(self, change):
        if change:
            self.changes.append(change)
        return change

    def directory(self, path, mode):
        """``path`` a directory with ``mode`` (missing parents made 0755, as the file module makes them)."""
        if os.path.lexists(path) and not os.path.isdir(path):
            raise OSError("%s exists and is not a directory" % path)
        if not os.path.isdir(path):
            if not self.check_mode:
                os.makedirs(path, 0o755)
                os.chmod(path, mode)
                if _as_root():
                    os.chown(path, 0, 0)
            return self._note("created the directory %s (mode %04o)" % (path, mode))
        return self._attributes(path, os.stat(path), mode)

    def _attributes(self, path, st, mode):
        """An existing directory's or unchanged file's mode (and, as root, owner root:root) set right; ``st`` its
        stat. Returns the change, or None."""
        notes = []
        if stat.S_IMODE(st.st_mode) != mode:
            notes.append("mode of %s %04o -> %04o" % (path, stat.S_IMODE(st.st_mode), mode))
            if not self.check_mode:
                os.chmod(path, mode)
        if _as_root() and (st.st_uid, st.st_gid) != (0, 0):
            notes.append("owner of %s %d:%d -> 0:0" % (path, st.st_uid, st.st_gid))
            if not self.check_mode:
                os.chown(path, 0, 0)
        return self._note("; ".join(notes)) if notes else None

    def file(self, path, content, mode=0o644, backup=False, keep_existing=False, what=None):
        """``path`` with ``content`` (text) and ``mode``. ``keep_existing``: a file already there is left as it is,
        whatever it holds (copy's force: false - the first original kept is the one kept). ``backup``: the file
        replaced is kept beside it first. Returns the change, or None."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        what = what or path
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise OSError("%s is a directory, not a file" % path)
        if st is not None and keep_existing:
            return None
        before = None
        if st is not None:
            with open(path, "rb") as handle:
                before = handle.read()
        if before == data:
            return self._attributes(path, st, mode)
        self.diffs.append({"before_header": path, "after_header": path,
                           "before": (before or b"").decode("utf-8", "replace"),
                           "after": data.decode("utf-8", "replace")})
        if not self.check_mode:
            if backup and before is not None and self.backup is not None:
                self.backup(path)
            write_atomic(path, data, mode=mode, prefix="." + os.path.basename(path) + ".", root_owned=True)
        return self._note("%s %s" % ("wrote" if before is not None else "created", what))

    def link(self, path, target):
        """``path`` a symbolic link to ``target`` (its text): created, or replaced when it is a link elsewhere (a
        temporary link renamed over it, so the name always resolves). A real file or directory there is refused
        (the role never deletes one)."""
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None and not stat.S_ISLNK(st.st_mode):
            raise OSError("%s is a real %s, not a link; it is not replaced"
                          % (path, "directory" if stat.S_ISDIR(st.st_mode) else "file"))
        if st is not None and os.readlink(path) == target:
            if self.check_mode:
                return None
            return self._note(_owner_change(path, st, follow=False))
        old = os.readlink(path) if st is not None else None
        if not self.check_mode:
            tmp = os.path.join(os.path.dirname(path), ".%s.tmp-link" % os.path.basename(path))
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(target, tmp)
            if _as_root():
                os.lchown(tmp, 0, 0)
            os.rename(tmp, path)
        if old is None:
            return self._note("linked %s -> %s" % (path, target))
        return self._note("linked %s -> %s (was -> %s)" % (path, target, old))
