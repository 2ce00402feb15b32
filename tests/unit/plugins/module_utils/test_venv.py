# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_venv.py: a venv, its parent directory and its site-packages in one module run (issue 22),
with the semantics of the three tasks it replaced (file root:root 0755, command creates:, command)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _venv

UID, GID = os.getuid(), os.getgid()


class Recorder:
    """subprocess.run that records each argv and runs it for real (or answers rc for the venv's creation)."""

    def __init__(self, fail_create=False, fail_purelib=False):
        self.calls, self.fail_create, self.fail_purelib = [], fail_create, fail_purelib

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        if self.fail_create and argv[1:3] == ["-m", "venv"]:
            return subprocess.CompletedProcess(argv, 1, "", "Error: ensurepip is not available")
        if self.fail_purelib and argv[1] == "-c":
            return subprocess.CompletedProcess(argv, 2, "", "boom")
        kwargs.pop("check", None)
        return subprocess.run(argv, check=False, **kwargs)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_parents_and_venv_once_then_only_reads(tmp_path):
    venv = str(tmp_path / "opt" / "sglang" / "venv")
    run = Recorder()
    first = _venv.ensure_venv(venv, sys.executable, run=run, uid=UID, gid=GID)
    assert first["changed"] and first["created"]
    assert first["changes"][:2] == ["created %s" % (tmp_path / "opt"), "created %s" % (tmp_path / "opt" / "sglang")]
    assert _mode(tmp_path / "opt") == 0o755 and _mode(tmp_path / "opt" / "sglang") == 0o755
    purelib = subprocess.run([venv + "/bin/python", "-c", _venv.PURELIB], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert first["site_packages"] == purelib and purelib.startswith(venv)
    run2 = Recorder()
    again = _venv.ensure_venv(venv, sys.executable, run=run2, uid=UID, gid=GID)
    assert again == {"changed": False, "changes": [], "created": False, "site_packages": purelib}
    assert [argv[1:3] for argv in run2.calls] == [["-c", _venv.PURELIB]]   # no second `-m venv`


def test_a_parent_with_another_mode_is_corrected_and_check_mode_only_says_so(tmp_path):
    parent = tmp_path / "opt"
    parent.mkdir(mode=0o700)
    os.chmod(parent, 0o700)
    venv = str(parent / "venv")
    check = _venv.ensure_venv(venv, sys.executable, check_mode=True, run=Recorder(), uid=UID, gid=GID)
    assert check["changed"] and check["created"] and check["site_packages"] == ""
    assert "mode of %s 0700 -> 0755" % parent in check["changes"]
    assert _mode(parent) == 0o700 and not os.path.exists(venv)   # check mode wrote nothing
    done = _venv.ensure_venv(venv, sys.executable, run=Recorder(), uid=UID, gid=GID)
    assert _mode(parent) == 0o755 and done["created"]


def test_check_mode_of_an_existing_venv_reads_its_site_packages(tmp_path):
    venv = str(tmp_path / "venv")
    _venv.ensure_venv(venv, sys.executable, run=Recorder(), uid=UID, gid=GID)
    os.chmod(tmp_path, 0o755)
    check = _venv.ensure_venv(venv, sys.executable, check_mode=True, run=Recorder(), uid=UID, gid=GID)
    assert not check["changed"] and check["site_packages"].startswith(venv)


def test_failures_name_the_command_and_its_output(tmp_path):
    with pytest.raises(RuntimeError, match=r"-m venv .* failed \(rc 1\): Error: ensurepip is not available"):
        _venv.ensure_venv(str(tmp_path / "a"), sys.executable, run=Recorder(fail_create=True), uid=UID, gid=GID)
    venv = str(tmp_path / "b")
    _venv.ensure_venv(venv, sys.executable, run=Recorder(), uid=UID, gid=GID)
    with pytest.raises(RuntimeError, match=r"could not say its site-packages \(rc 2\): boom"):
        _venv.ensure_venv(venv, sys.executable, run=Recorder(fail_purelib=True), uid=UID, gid=GID)


def test_a_parent_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "opt").write_text("not a directory")
    with pytest.raises(OSError, match="exists and is not a directory"):
        _venv.ensure_venv(str(tmp_path / "opt" / "venv"), sys.executable, run=Recorder(), uid=UID, gid=GID)
