# SPDX-License-Identifier: GPL-3.0-or-later
"""install role, supply chain (issue 14): the lock generator (scripts/gen-sglang-lock.py) and the shipped lock as
pip reads it. The refusals of the role's inputs are tested on module_utils/_install.py
(tests/unit/plugins/module_utils/test_install.py) and through the module's action plugin (test_install_role.py)."""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import ROOT, load_file

from ansible_collections.gpuserve.sglang.plugins.module_utils import _install

ROLE = os.path.join(ROOT, "roles", "install")
LOCK = os.path.join(ROLE, "files", "locks", "sglang-0.5.9.txt")
SGLANG_WHEEL_SHA256 = "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"


def _gen_lock_module():
    return load_file("gen_sglang_lock", os.path.join(ROOT, "scripts", "gen-sglang-lock.py"))


def _report(*items):
    return {"install": [{"metadata": {"name": n, "version": v},
                         "download_info": {"archive_info": {"hashes": {"sha256": h}}}} for n, v, h in items]}


def test_lock_generator_merges_reports_per_python(tmp_path):
    gen = _gen_lock_module()
    reports = {
        "3.10": _report(("sglang", "0.5.9", "1" * 64), ("numpy", "2.2.6", "2" * 64), ("tomli", "2.0", "5" * 64)),
        "3.12": _report(("sglang", "0.5.9", "1" * 64), ("numpy", "2.5.5", "3" * 64)),
    }
    args = ["--version", "0.5.9", "-o", str(tmp_path / "lock.txt")]
    for python, report in reports.items():
        path = tmp_path / ("r%s.json" % python)
        path.write_text(json.dumps(report))
        args += ["--report", "%s:%s" % (path, python)]
    assert gen.main(args) == 0
    lines = (tmp_path / "lock.txt").read_text().replace("\\\n", " ").splitlines()
    reqs = [" ".join(line.split()) for line in lines if not line.startswith("#")]
    assert reqs == [
        'numpy==2.2.6 ; python_version == "3.10" --hash=sha256:' + "2" * 64,
        'numpy==2.5.5 ; python_version == "3.12" --hash=sha256:' + "3" * 64,
        "sglang==0.5.9 --hash=sha256:" + "1" * 64,
        'tomli==2.0 ; python_version == "3.10" --hash=sha256:' + "5" * 64,
    ]
    # the install accepts what the generator writes (with a base Python the lock has wheels for: 3.12, this venv's;
    # the install refuses a base Python the lock has no wheel set for)
    p = {"package": "sglang", "version": "0.5.9", "deps": True, "index_url": "", "extra_args": [], "extra_packages": [],
         "require_hashes": True, "pip_lock": str(tmp_path / "lock.txt"), "patches": [], "files_dir": ROLE + "/files",
         "shipped_patches": {}, "wheel_dir": "", "base_python": sys.executable, "host_name": "h",
         "venv": "/opt/sglang/venv", "versions_dir": "/opt/sglang/versions", "keep": 3}
    p.update(_install.read_controller_files(p["files_dir"], "sglang", "0.5.9", p["pip_lock"], True, []))
    _install.Install(p).preflight()


def test_lock_generator_refuses_a_report_without_the_release(tmp_path):
    gen = _gen_lock_module()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(("sglang", "0.5.8", "1" * 64))))
    with pytest.raises(SystemExit, match="does not pin sglang==0.5.9"):
        gen.main(["--version", "0.5.9", "--report", "%s:3.12" % path, "-o", str(tmp_path / "lock.txt")])


def test_shipped_lock_is_what_pip_reads_as_pinned_and_hashed():
    """pip's own requirements parser: every entry pinned with ==, every entry with sha256 hashes, sglang 0.5.9 with
    the sha256 of the wheel on PyPI, torch pinned (SGLang 0.5.9 asks for 2.9.1)."""
    from pip._internal.network.session import PipSession  # pylint: disable=import-outside-toplevel
    from pip._internal.req.req_file import parse_requirements  # pylint: disable=import-outside-toplevel
    entries = list(parse_requirements(LOCK, session=PipSession()))
    assert len(entries) > 150
    names = {}
    for entry in entries:
        name, _sep, version = entry.requirement.split(";")[0].strip().partition("==")
        assert version and not set("<>~!*,") & set(version), entry.requirement
        hashes = entry.options.get("hashes", {}).get("sha256", [])
        assert hashes and all(len(h) == 64 for h in hashes), entry.requirement
        names.setdefault(name, []).append((version, hashes))
    assert names["sglang"] == [("0.5.9", [SGLANG_WHEEL_SHA256])]
    assert [v for v, _path in names["torch"]] == ["2.9.1"]
