# SPDX-License-Identifier: GPL-3.0-or-later
"""The opt-in hardening of docs/security.md (SystemCallFilter=@system-service + what CUDA/NCCL may need, and
MemoryDenyWriteExecute): off by default, given through sglang_unit_extra, rendered into the real unit template;
systemd 252 accepts the unit (systemd-analyze verify) and scores it lower (systemd-analyze security --offline).
Not proven on a GPU host: the recipe is documented as a starting point to test there."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from test_server_role import DEFAULTS, _render_unit, _settings  # pylint: disable=import-error

from conftest import ROOT

RECIPE_START = "<!-- opt-in hardening recipe -->"


def _recipe():
    """The sglang_unit_extra block documented in docs/security.md (the test renders exactly that text)."""
    with open(os.path.join(ROOT, "docs", "security.md"), encoding="utf-8") as handle:
        text = handle.read()
    block = text.split(RECIPE_START, 1)[1]
    block = re.search(r"```yaml\n(.*?)```", block, re.S).group(1)
    return yaml.safe_load(block)["sglang_unit_extra"]


def test_defaults_set_neither_setting():
    text = _render_unit()
    assert "SystemCallFilter" not in text and "MemoryDenyWriteExecute" not in text
    assert DEFAULTS["sglang_unit_extra"] == {}


def test_recipe_renders_as_directives():
    s = _settings(_render_unit(sglang_unit_extra=_recipe()))
    assert s["SystemCallFilter"][0] == "@system-service"
    assert len(s["SystemCallFilter"]) >= 2   # the additions for CUDA/NCCL, each a line of its own
    assert s["SystemCallErrorNumber"] == ["EPERM"]
    assert s["MemoryDenyWriteExecute"] == ["yes"]


def _analyze():
    tool = shutil.which("systemd-analyze")
    if not tool:
        pytest.skip("systemd-analyze is not installed")
    return tool


def _unit_file(tmp_path, **over):
    # an interpreter that exists here, so that verify judges the unit and not the missing venv
    text = _render_unit(_server_cmdline="/usr/bin/python3 -m sglang.launch_server --model-path /models/k", **over)
    path = tmp_path / "sglang-kimi.service"
    path.write_text(text)
    return path


def _exposure(tool, path):
    proc = subprocess.run([tool, "security", "--offline=yes", "--no-pager", str(path)], capture_output=True,
                          text=True, check=False)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", proc.stdout + proc.stderr)
    assert match, proc.stdout + proc.stderr
    return float(match.group(1))


def test_systemd_accepts_the_recipe_and_scores_it_lower(tmp_path):
    tool = _analyze()
    (tmp_path / "plain").mkdir()
    (tmp_path / "hardened").mkdir()
    plain = _unit_file(tmp_path / "plain")
    hardened = _unit_file(tmp_path / "hardened", sglang_unit_extra=_recipe())
    proc = subprocess.run([tool, "verify", str(hardened)], capture_output=True, text=True, check=False)
    unit_lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "sglang-kimi.service:" in line]
    assert unit_lines == [], unit_lines
    assert _exposure(tool, hardened) < _exposure(tool, plain)
