# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's preflight on this machine (connection local, nothing but reads), with sglang_python = the
test venv that holds the REAL SGLang 0.5.9 (tests/sglang_parser/setup-venv.sh): a flag SGLang's own parser
rejects fails the preflight quoting argparse's error; the production profile passes."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT

VENV = os.environ.get("SGLANG_PARSER_VENV", os.path.join(ROOT, ".cache", "sglang-parser-venv"))
VENV_PY = os.path.join(VENV, "bin", "python")
READY = os.path.join(VENV, ".gpuserve-parser-venv")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(VENV_PY) and os.path.exists(READY)),
    reason="no SGLang parser venv at %s: build it with tests/sglang_parser/setup-venv.sh" % VENV)

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Preflight only
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: preflight.yml
"""


def run_preflight(tmp_path, extra_vars):
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "draft").mkdir(exist_ok=True)
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    args = ["-e", "sglang_python=" + VENV_PY, "-e", "sglang_model_path=" + str(tmp_path / "model"),
            "-e", "sglang_draft_model_path=" + str(tmp_path / "draft")]
    for item in extra_vars:
        args += ["-e", item]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + MODULE_PYTHON, str(play)] + args
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)


def test_preflight_quotes_the_installed_parsers_error(tmp_path):
    proc = run_preflight(tmp_path, ['{"sglang_args": {"hicache-write-policy": "bogus"}}'])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "the installed SGLang's parser rejects the command line (nothing was changed)" in out
    assert "error: argument --hicache-write-policy: invalid choice: 'bogus'" in out


def test_preflight_passes_the_production_profile(tmp_path):
    proc = run_preflight(tmp_path, [])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Check the flags with the installed SGLang's own parser" in out
