# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's preflight (issue 47) through its real play: ONE task, the action plugin of
gpuserve.sglang.sglang_host_facts (server_preflight), against a fake SGLang venv on this machine. Here, not under
tests/unit/plugins: it runs the role with the ansible.posix JSON callback, which the controller matrix's plugin
unit tests do not install."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import make_standin_model, run_play_batch


FAKE_SERVER_ARGS = '''
class ServerArgs:
    """What the fake SGLang's parser knows: one flag with choices; every other flag is let through."""
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--hicache-write-policy", choices=["write_back", "write_through"])
        parser.parse_args = lambda argv=None: parser.parse_known_args(argv)[0]
'''

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Preflight only
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: preflight.yml
    - name: Say what the preflight found
      ansible.builtin.debug:
        msg: "FOUND refusals={{ _server_host.refusals }} parser={{ _server_host.parser.rc | default('skipped') }}
          account_ok={{ _server_host.account_ok }}"
"""


def test_the_preflight_refuses_through_the_action_plugin(tmp_path):
    """On this machine (connection local): a fake SGLang in a venv (its parser knows one flag's choices), a model,
    a unit directory with a drop-in. Each refusal fires with its message before anything changes; the parser runs
    only where SGLang is installed and sglang_check_args is on; a fine preflight refuses nothing."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    os.makedirs(os.path.join(site, "sglang", "srt"))
    for name, text in (("__init__.py", "__version__ = '0.0.0'\n"), ("srt/__init__.py", ""),
                       ("srt/server_args.py", FAKE_SERVER_ARGS)):
        with open(os.path.join(site, "sglang", name), "w", encoding="utf-8") as handle:
            handle.write(text)
    model = make_standin_model("kimi", tmp_path / "model")
    draft = make_standin_model("eagle3", tmp_path / "draft")
    units, dropped = tmp_path / "units", tmp_path / "dropped"
    units.mkdir()
    (dropped / "sglang-kimi.service.d").mkdir(parents=True)
    (dropped / "sglang-kimi.service.d" / "x.conf").write_text("[Service]\nExecStart=\nExecStart=/bin/true\n")
    base = {"sglang_python": str(venv / "bin" / "python"), "sglang_model_path": model, "sglang_draft_model_path": draft,
            "sglang_user": "", "sglang_unit_dir": str(units), "sglang_config_dir": str(tmp_path / "etc")}
    cases = {
        "fine": {},
        "parser": {"sglang_args": {"hicache-write-policy": "bogus"}},
        "parser off": {"sglang_args": {"hicache-write-policy": "bogus"}, "sglang_check_args": False},
        "missing": {"sglang_model_path": str(tmp_path / "gone")},
        "dropins": {"sglang_unit_dir": str(dropped)},
        "dropins allowed": {"sglang_unit_dir": str(dropped), "sglang_allow_dropin_overrides": True},
        "account": {"sglang_user": "root"},
    }
    out = run_play_batch(tmp_path, PLAY, dict((name, dict(base, **case)) for name, case in cases.items()))
    for name in ("fine", "parser off", "dropins allowed", "account"):
        assert out[name][0] == 0, out[name][1][-3000:]
        assert "FOUND refusals=[] parser=%s" % ("skipped" if name == "parser off" else "0") in out[name][1], name
    assert "account_ok=True" in out["account"][1] and "account_ok=False" in out["fine"][1]
    assert "drop-ins override the managed unit (allowed)" in out["dropins allowed"][1]
    text = dict((name, " ".join(out[name][1].split())) for name in ("parser", "missing", "dropins"))
    assert out["parser"][0] == 1 and "FOUND" not in text["parser"]
    assert ("the installed SGLang's parser rejects the command line (nothing was changed): sglang.launch_server: "
            "error: argument --hicache-write-policy: invalid choice: 'bogus'") in text["parser"], text["parser"][-3000:]
    assert out["missing"][0] == 1
    assert re.search(r"not on case\d \(nothing was changed\): model \(--model-path\) %s" % re.escape(
        str(tmp_path / "gone")), text["missing"]), text["missing"][-3000:]
    assert out["dropins"][0] == 1
    assert "drop-ins override the managed unit (nothing was changed): " in text["dropins"], text["dropins"][-3000:]
    assert not (tmp_path / "etc").exists()
