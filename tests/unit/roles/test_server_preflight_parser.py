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

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT, make_standin_model

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
    make_standin_model("kimi", tmp_path / "model")
    make_standin_model("eagle3", tmp_path / "draft")
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
    assert "Read this host and refuse what SGLang, systemd or the host would refuse" in out


def test_preflight_refuses_a_model_the_installed_release_would_not_load(tmp_path):
    """issue 24: the model preflight in the role's one host read, judged by the release the interpreter reports
    (the 0.5.9 parser venv): a shard gone and the Qwen3.5 NVFP4 profile over the Kimi INT4 model, both named in
    one refusal, before anything is written."""
    make_standin_model("kimi", tmp_path / "model")
    os.remove(str(tmp_path / "model" / "model-00002-of-00004.safetensors"))
    proc = run_preflight(tmp_path, ["sglang_profile=qwen35_397b_a17b_nvfp4", "sglang_check_args=false",
                                    "sglang_config_dir=" + str(tmp_path / "etc")])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "model preflight on localhost (nothing was changed; sglang_model_check: false skips it)" in out
    assert ("the profile expects modelopt_fp4 weights, config.json text_config says compressed_tensors" in out), out[-3000:]
    assert "1 of the 4 weight files model.safetensors.index.json names are missing: model-00002-of-00004.safetensors" in out
    assert "the profile needs hf_quant_config.json, missing" in out
    assert not (tmp_path / "etc").exists()
