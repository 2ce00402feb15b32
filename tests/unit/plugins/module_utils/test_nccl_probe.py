# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_nccl_probe.py: what the nccl_tuning role asks of the server's interpreter, one module run
per phase (issue 22), against a real venv whose sitecustomize.py sets NCCL values."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _nccl_probe

SITECUSTOMIZE = """import os
os.environ.setdefault("NCCL_B", "2")
os.environ["NCCL_A"] = "1"
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return python, purelib


def test_inspect_reports_the_interpreter_its_site_packages_and_sitecustomize(venv):
    python, purelib = venv
    before = _nccl_probe.inspect(python)
    assert before["python"] == {"exists": True, "executable": True}
    assert before["purelib"] == purelib and before["site_dir"]["isdir"]
    assert before["sitecustomize"]["exists"] is False
    with open(os.path.join(purelib, "sitecustomize.py"), "w") as handle:
        handle.write(SITECUSTOMIZE)
    try:
        after = _nccl_probe.inspect(python)
        assert after["sitecustomize"]["isreg"] and after["sitecustomize"]["text"] == SITECUSTOMIZE
        assert after["imported_sitecustomize"] == os.path.join(purelib, "sitecustomize.py")
    finally:
        os.unlink(os.path.join(purelib, "sitecustomize.py"))


def test_inspect_of_a_missing_interpreter_runs_nothing(tmp_path):
    calls = []
    out = _nccl_probe.inspect(str(tmp_path / "nope"), run=lambda *a, **k: calls.append(a))
    assert out["python"]["exists"] is False and out["purelib"] == "" and calls == []


def _answering(purelib):
    def run(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, json.dumps({"purelib": purelib, "sitecustomize": None}), "")
    return run


def test_inspect_judges_links_and_write_bits_as_stat_follow_false(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.chmod(real, 0o775)
    (real / "elsewhere.py").write_text("x = 1\n")
    os.symlink(real / "elsewhere.py", real / "sitecustomize.py")
    out = _nccl_probe.inspect(sys.executable, run=_answering(str(real)))
    assert out["site_dir"]["isdir"] and out["site_dir"]["wgrp"] and not out["site_dir"]["woth"]
    assert out["site_dir"]["mode"] == "0775"
    assert out["sitecustomize"] == {"exists": True, "isreg": False, "mode": "0777", "text": ""}
    os.symlink(real, tmp_path / "link")
    assert not _nccl_probe.inspect(sys.executable, run=_answering(str(tmp_path / "link")))["site_dir"]["isdir"]


def test_a_failing_or_silent_interpreter_is_an_error_naming_it(tmp_path):
    def fails(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 1, "", "ModuleNotFoundError: No module named 'encodings'")

    with pytest.raises(_nccl_probe.ProbeError, match="exited 1: ModuleNotFoundError"):
        _nccl_probe.inspect(sys.executable, run=fails)
    with pytest.raises(_nccl_probe.ProbeError, match="did not answer in JSON"):
        _nccl_probe.inspect(sys.executable, run=lambda argv, **k: subprocess.CompletedProcess(argv, 0, "hello", ""))


def test_verify_starts_the_interpreter_three_ways(venv, tmp_path):
    python, purelib = venv
    env_file = tmp_path / "nccl.env"
    env_file.write_text("# managed\nNCCL_A=1\nNCCL_B=2\nnot a line\n")
    sc = os.path.join(purelib, "sitecustomize.py")
    with open(sc, "w") as handle:
        handle.write(SITECUSTOMIZE)
    try:
        out = _nccl_probe.verify(python, ["NCCL_B", "NCCL_A"], str(env_file))
    finally:
        os.unlink(sc)
    assert out["first"] == "NCCL_A" and out["env_file_lines"] == 2
    assert out["clean"]["env"] == {"NCCL_A": "1", "NCCL_B": "2"} and out["clean"]["sitecustomize_loaded"]
    # NCCL_A is forced by this sitecustomize: the exported value does not survive
    assert out["policy"]["env"] == {"NCCL_A": "1"}
    assert out["nosite"] == {"env": {"NCCL_A": "1", "NCCL_B": "2"}, "sitecustomize_loaded": False,
                             "sitecustomize": None}


def test_verify_sees_what_is_missing(venv, tmp_path):
    python = venv[0]
    env_file = tmp_path / "nccl.env"
    env_file.write_text("NCCL_A=1\n")
    out = _nccl_probe.verify(python, ["NCCL_A", "NCCL_B"], str(env_file))
    assert out["clean"]["env"] == {} and not out["clean"]["sitecustomize_loaded"]
    assert out["policy"]["env"] == {"NCCL_A": "gpuserve-exported"}
    assert out["nosite"]["env"] == {"NCCL_A": "1"}
