# SPDX-License-Identifier: GPL-3.0-or-later
"""nccl_tuning: the NCCL debug-output checker (tests/gpu/nccl_check.py) on real NCCL 2.28 texts, and the
EnvironmentFile the role writes read back by it. (The files the module writes, run by a real interpreter:
tests/unit/plugins/module_utils/test_nccl_tuning.py.)"""
from __future__ import annotations

import os
import sys

import yaml

from conftest import FIXTURES, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import nccl_check  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_tuning import render_env_file  # noqa: E402

ROLE = os.path.join(ROOT, "roles", "nccl_tuning")
TEXTS = os.path.join(FIXTURES, "gpu-host-texts")
# What the fixture run exported (see its README); the role's default adds NCCL_CUMEM_ENABLE=0.
FIXTURE_SET = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_IB_DISABLE": "1",
               "NCCL_MIN_NCHANNELS": "8", "NCCL_NVLS_ENABLE": "0"}


def _text(name):
    with open(os.path.join(TEXTS, name), encoding="utf-8") as f:
        return f.read()


def _defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_parse_tuned_run_per_process():
    parsed = nccl_check.parse(_text("nccl_tuned.txt"))
    assert parsed["versions"] == {"668": "2.28.9+cuda13.0", "669": "2.28.9+cuda13.0"}
    for pid in ("668", "669"):
        assert parsed["set_by_env"][pid] == FIXTURE_SET  # integer params end with '.', stripped
    assert parsed["choices"] == [{"pid": "668", "op": "AllReduce", "bytes": 4194304, "algo": "RING",
                                  "proto": "LL", "channels": (0, 23)}]


def test_tuned_run_passes():
    problems, report = nccl_check.check(nccl_check.parse(_text("nccl_tuned.txt")), FIXTURE_SET, procs=2)
    assert problems == []
    assert any("Algo RING proto LL" in line for line in report)


def test_default_run_fails_on_every_tuned_value_and_the_protocol():
    problems = nccl_check.check(nccl_check.parse(_text("nccl_default.txt")), FIXTURE_SET, procs=2)[0]
    missing = sorted(p.split("=")[0] for p in problems if "set by environment" in p)
    # NVLS_ENABLE=0 was exported in both runs (the machine needs it); the five tuning values were not.
    assert missing == ["NCCL_ALGO", "NCCL_IB_DISABLE", "NCCL_MIN_NCHANNELS", "NCCL_P2P_LEVEL", "NCCL_PROTO"]
    assert any("protocol SIMPLE, expected LL" in p for p in problems)


def test_role_default_set_is_strict_about_a_value_nccl_did_not_report():
    # The fixture run did not export NCCL_CUMEM_ENABLE: the role's full default set must not pass on it.
    problems = nccl_check.check(nccl_check.parse(_text("nccl_tuned.txt")), _defaults()["nccl_env"], procs=2)[0]
    assert len(problems) == 1 and problems[0].startswith("NCCL_CUMEM_ENABLE=0 not reported")


def test_one_process_missing_fails():
    text = "\n".join(line for line in _text("nccl_tuned.txt").splitlines() if not line.startswith("vm:669:"))
    problems = nccl_check.check(nccl_check.parse(text), FIXTURE_SET, procs=2)[0]
    assert any("expected NCCL output of 2 processes, found 1" in p for p in problems)


def test_missing_tuning_line_is_reported():
    text = "\n".join(line for line in _text("nccl_tuned.txt").splitlines() if "Bytes -> Algo" not in line)
    problems = nccl_check.check(nccl_check.parse(text), FIXTURE_SET, procs=2)[0]
    assert problems == ["no 'AllReduce: N Bytes -> Algo X proto Y' line (NCCL_DEBUG_SUBSYS needs TUNING)"]


def test_cli_exit_codes(tmp_path, capsys):
    env = tmp_path / "nccl.env"
    env.write_text("# comment\n" + "".join("%s=%s\n" % kv for kv in FIXTURE_SET.items()))
    assert nccl_check.main([os.path.join(TEXTS, "nccl_tuned.txt"), "--env-file", str(env)]) == 0
    assert "nccl_check: PASS" in capsys.readouterr().out
    assert nccl_check.main([os.path.join(TEXTS, "nccl_default.txt"), "--env-file", str(env)]) == 1
    assert "nccl_check: FAIL" in capsys.readouterr().out


def test_env_file_holds_the_role_default_set():
    text = render_env_file(_defaults()["nccl_env"], "/etc/sglang/nccl.env", "/opt/sglang/venv/lib/python3/site-packages")
    assert nccl_check.read_env_file(text) == _defaults()["nccl_env"]
    assert all(line.startswith("#") or "=" in line for line in text.splitlines() if line)
