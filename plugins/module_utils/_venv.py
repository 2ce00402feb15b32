# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A venv on the host in one module run (issue 22: fewer round trips): its parent directory (root:root 0755, as
the file module made it), the venv itself when `<venv>/bin/python` is missing (as `command: creates:` did), and the
venv's site-packages (purelib) asked of its own interpreter. Standard library only; `run` is injectable for tests."""
from __future__ import annotations

import os
import stat
import subprocess

PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
DIR_MODE = 0o755


def _missing_dirs(path):
    """The directories of `path` that do not exist yet, outermost first."""
    missing = []
    while path and path != "/" and not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return list(reversed(missing))


def ensure_parent(parent, check_mode=False, uid=0, gid=0):
    """Make `parent` (and any missing directory above it) a directory owned uid:gid with mode 0755; report what was
    created or corrected. An existing non-directory fails, as the file module does."""
    changes = []
    if os.path.lexists(parent) and not os.path.isdir(parent):
        raise OSError("%s exists and is not a directory" % parent)
    created = _missing_dirs(parent)
    for path in created:
        changes.append("created %s" % path)
        if not check_mode:
            os.mkdir(path, DIR_MODE)
            os.chmod(path, DIR_MODE)
            os.chown(path, uid, gid)
    if not created:
        st = os.stat(parent)
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            changes.append("mode of %s %04o -> 0755" % (parent, stat.S_IMODE(st.st_mode)))
            if not check_mode:
                os.chmod(parent, DIR_MODE)
        if (st.st_uid, st.st_gid) != (uid, gid):
            changes.append("owner of %s %d:%d -> %d:%d" % (parent, st.st_uid, st.st_gid, uid, gid))
            if not check_mode:
                os.chown(parent, uid, gid)
    return changes


def ensure_venv(venv, python, check_mode=False, run=subprocess.run, uid=0, gid=0, timeout=600):
    """The venv `venv` made by `python -m venv` when it has no bin/python; returns a dict: changed, changes,
    created (bool), site_packages ('' when the venv does not exist in check mode). Raises RuntimeError naming the
    command and its output when a step fails."""
    changes = ensure_parent(os.path.dirname(venv.rstrip("/")), check_mode=check_mode, uid=uid, gid=gid)
    interpreter = os.path.join(venv, "bin", "python")
    created = False
    if not os.path.exists(interpreter):
        created = True
        changes.append("created the venv %s with %s" % (venv, python))
        if not check_mode:
            proc = run([python, "-m", "venv", venv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                       universal_newlines=True, timeout=timeout, check=False)
            if proc.returncode != 0:
                raise RuntimeError("%s -m venv %s failed (rc %d): %s" % (
                    python, venv, proc.returncode, (proc.stderr or proc.stdout or "").strip()[-2000:]))
    site_packages = ""
    if os.path.exists(interpreter):
        proc = run([interpreter, "-c", PURELIB], stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                   universal_newlines=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError("%s could not say its site-packages (rc %d): %s" % (
                interpreter, proc.returncode, (proc.stderr or proc.stdout or "").strip()[-2000:]))
        site_packages = proc.stdout.strip()
    return {"changed": bool(changes), "changes": changes, "created": created, "site_packages": site_packages}
