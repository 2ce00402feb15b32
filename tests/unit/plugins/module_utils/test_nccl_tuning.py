# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_nccl_tuning.py: the nccl_tuning module's whole run without a host (tmp_path as the
filesystem, a fake interpreter) - compare, change, no-op, check mode, absent byte for byte, each refusal, the
verification's messages - plus one run against a real venv, the managed block as ansible.builtin.blockinfile wrote it
for earlier releases (a real round trip), and the files in the bytes the role's templates gave them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _nccl_tuning
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_tuning import (
    MARKER, NcclTuning, Refused, VerifyFailed, block_state, insert_block, render_block, render_env_file, render_pth)

from conftest import run_play

BEGIN = "# BEGIN gpuserve.sglang.nccl_tuning MANAGED BLOCK\n"
END = "# END gpuserve.sglang.nccl_tuning MANAGED BLOCK\n"
ENV = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_B": 8, "NCCL_X": 1.5}


def _block(created, newline):
    return "%s# file-created-by-role: %s\n# newline-added-by-role: %s\nX = 1\n%s" % (
        BEGIN, "yes" if created else "no", "yes" if newline else "no", END)


# --- the block's state ----------------------------------------------------------------------------------------------

def test_no_file_is_created_by_the_role():
    state = block_state("", exists=False)
    assert state == {"present": False, "file_created": True, "newline_added": False, "text_without_block": "",
                     "restored_text": "", "remove_file": False}


def test_operator_file_without_a_trailing_newline_before_the_first_run():
    state = block_state("import os", exists=True)
    assert not state["present"] and not state["file_created"] and state["newline_added"]


def test_flags_come_from_the_block_on_later_runs():
    state = block_state("import os\n" + _block(created=False, newline=True))
    assert state["present"] and not state["file_created"] and state["newline_added"]
    assert state["text_without_block"] == "import os\n" and state["restored_text"] == "import os"
    assert not state["remove_file"]


def test_a_file_holding_only_the_roles_block_is_removed():
    state = block_state(_block(created=True, newline=False))
    assert state["remove_file"] and state["restored_text"] == ""


def test_created_by_the_role_but_written_into_since_is_kept():
    state = block_state(_block(created=True, newline=False) + "import site\n")
    assert state["present"] and state["file_created"] and not state["remove_file"]
    assert state["restored_text"] == "import site\n"


def test_operator_text_around_the_block_and_other_blocks_stay():
    other = "# BEGIN ANSIBLE MANAGED BLOCK\nY = 2\n# END ANSIBLE MANAGED BLOCK\n"
    text = "a = 1\n" + _block(False, False) + other + "b = 2\n"
    assert block_state(text)["restored_text"] == "a = 1\n" + other + "b = 2\n"


def test_an_end_marker_at_the_end_of_the_file_without_newline():
    state = block_state("a = 1\n" + _block(False, False)[:-1])
    assert state["present"] and state["restored_text"] == "a = 1\n"


def test_a_marker_in_the_middle_of_a_line_is_not_a_block():
    text = "x = '%s%s'\n" % (BEGIN.strip(), END.strip())
    state = block_state(text)
    assert not state["present"] and state["restored_text"] == text


@pytest.mark.parametrize("bad", [dict(text=3), dict(text="", marker="no mark here")])
def test_bad_input_refused(bad):
    with pytest.raises(ValueError):
        block_state(bad["text"], marker=bad.get("marker", MARKER))


# --- the block where blockinfile put it (hosts earlier releases tuned stay unchanged) ---------------------------------

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Write the block as the role's earlier releases did
      ansible.builtin.blockinfile:
        path: "{{ path }}"
        marker: "{{ marker }}"
        block: "{{ block }}"
        insertafter: EOF
        create: true
        mode: "0644"
"""


@pytest.mark.parametrize("original", ["import os\nprint('site')", "import os\n", None])
def test_insert_block_writes_what_blockinfile_wrote(tmp_path, original):
    path = tmp_path / "sitecustomize.py"
    if original is not None:
        path.write_text(original)
    state = block_state(original or "", exists=original is not None)
    block = render_block(ENV, "setdefault", "/etc/sglang/nccl.env", state["file_created"], state["newline_added"])
    rc, out = run_play(tmp_path, PLAY, [json.dumps({"path": str(path), "marker": MARKER, "block": block})])
    assert rc == 0, out[-3000:]
    written = path.read_text()
    assert insert_block(original or "", block) == written                  # first run: the same bytes
    assert insert_block(written, block) == written                         # later runs: unchanged
    changed = render_block(dict(ENV, NCCL_X=2), "force", "/etc/sglang/nccl.env", state["file_created"],
                           state["newline_added"])
    assert block_state(insert_block(written, changed)) == dict(block_state(written))   # replaced in place
    state = block_state(written)
    assert state["present"] and state["remove_file"] == (original is None)
    assert state["restored_text"] == (original or "")


# --- the files in the templates' bytes ------------------------------------------------------------------------------

def test_render_block_as_the_template_did():
    assert render_block(ENV, "setdefault", "/etc/sglang/nccl.env", True, False) == (
        "# NCCL settings for every Python start of this interpreter (gpuserve.sglang.nccl_tuning).\n"
        "# Policy setdefault: a value exported before Python starts wins.\n"
        '# The server unit reads the same values from "/etc/sglang/nccl.env" (EnvironmentFile=), so\n'
        "# they reach it even when this file is bypassed (python -S, another interpreter, a rebuilt venv).\n"
        "# file-created-by-role: yes\n# newline-added-by-role: no\n"
        "def _gpuserve_nccl_tuning():\n    import os\n    for key, value in (\n"
        '        ("NCCL_ALGO", "Ring"),\n        ("NCCL_B", "8"),\n        ("NCCL_PROTO", "LL"),\n'
        '        ("NCCL_X", "1.5"),\n    ):\n        os.environ.setdefault(key, value)\n\n\n'
        "_gpuserve_nccl_tuning()\ndel _gpuserve_nccl_tuning\n")
    assert "        os.environ[key] = value\n" in render_block(ENV, "force", "/e", False, True)


def test_render_env_file_and_pth_as_the_templates_did():
    site = "/opt/sglang/venv/lib/python3.11/site-packages"
    assert render_env_file(ENV, "/etc/sglang/nccl.env", site) == (
        "#\n# Ansible managed\n#\n"
        '# NCCL settings for the SGLang server unit (EnvironmentFile="/etc/sglang/nccl.env").\n'
        '# Same values as the gpuserve.sglang.nccl_tuning block in "%s/sitecustomize.py",\n'
        "# so the unit carries them even when sitecustomize is bypassed (python -S). KEY=VALUE, one a line.\n"
        "NCCL_ALGO=Ring\nNCCL_B=8\nNCCL_PROTO=LL\nNCCL_X=1.5\n" % site)
    assert render_pth(ENV, "force", site) == (
        'import os; [os.environ.update({k: v}) for k, v in (("NCCL_ALGO", "Ring"), ("NCCL_B", "8"), '
        '("NCCL_PROTO", "LL"), ("NCCL_X", "1.5"), )]  # gpuserve.sglang.nccl_tuning: sitecustomize.py of this venv '
        "is shadowed by another one, see %s/sitecustomize.py\n" % site)
    # Jinja's dictsort: case-insensitive, so _ sorts before letters
    assert render_env_file({"NCCL_IBX": 1, "NCCL_IB_HCA": "m"}, "/e", "/s").endswith("NCCL_IB_HCA=m\nNCCL_IBX=1\n")


@pytest.mark.parametrize("policy, want_proto", [("setdefault", "Simple"), ("force", "LL")])
def test_block_and_pth_honour_the_policy_in_a_real_interpreter(policy, want_proto):
    probe = "\nimport json, os\nprint(json.dumps({k: v for k, v in os.environ.items() if k.startswith('NCCL_')}))"
    want = dict({k: str(v) for k, v in ENV.items()}, NCCL_PROTO=want_proto)
    for code in (render_block(ENV, policy, "/e", False, False), render_pth(ENV, policy, "/s").split("  #")[0]):
        out = subprocess.run([sys.executable, "-S", "-c", code + probe], env={"PATH": "/usr/bin:/bin",
                             "NCCL_PROTO": "Simple"}, check=True, capture_output=True, text=True).stdout
        assert json.loads(out) == want


def test_a_path_cannot_inject_python(tmp_path):
    evil = "/etc/sglang/nccl.env\nimport os; open(os.environ['MARKER'], 'w').write('pwned')\n#"
    marker = tmp_path / "marker"
    subprocess.run([sys.executable, "-S", "-c", render_block(ENV, "setdefault", evil, False, False)],
                   env={"MARKER": str(marker), "PATH": "/usr/bin:/bin"}, check=True)
    assert not marker.exists()
    lines = [line for line in render_env_file(ENV, evil, evil).splitlines() if line and not line.startswith("#")]
    assert all(line.startswith("NCCL_") for line in lines), lines


# --- the whole run, with a fake interpreter ---------------------------------------------------------------------------

class FakePython(object):
    """Answers the probe's starts: inspect (site-packages, imported sitecustomize) and verify (what a start sees:
    the values written in the EnvironmentFile for -S, the wanted ones otherwise unless `sees` says otherwise)."""

    def __init__(self, site, imported=None, sees=None):
        self.site, self.imported, self.sees, self.calls = str(site), imported, sees, []

    def __call__(self, argv, env=None, **kwargs):
        self.calls.append(argv)
        if "sysconfig" in argv[-1]:
            answer = {"purelib": self.site, "sitecustomize": self.imported or self.site + "/sitecustomize.py"}
        else:
            keys = json.loads(argv[-1])
            if "-S" in argv:
                seen = {k: env[k] for k in keys if k in env}
            elif self.sees is not None:
                seen = {k: v for k, v in self.sees.items() if k in keys}
            else:
                seen = {k: env.get(k, str(WANT[k])) for k in keys}
            answer = {"env": seen, "sitecustomize_loaded": "-S" not in argv, "sitecustomize": self.imported}
        return subprocess.CompletedProcess(argv, 0, json.dumps(answer), "")


WANT = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}


@pytest.fixture
def host(tmp_path):
    site = tmp_path / "site-packages"
    site.mkdir(mode=0o755)
    os.chmod(site, 0o755)
    return {"site": site, "env_file": str(tmp_path / "etc" / "sglang" / "nccl.env"), "tmp": tmp_path}


def _params(host, **extra):
    params = dict(state="present", python=sys.executable, install_record="", venv="/nonexistent", env=dict(WANT),
                  network={}, policy="setdefault", env_file=host["env_file"], pth_hook="auto", configure=True,
                  verify=True)
    params.update(extra)
    return params


def _run(host, check_mode=False, fake=None, **extra):
    return NcclTuning(_params(host, **extra), check_mode=check_mode, run=fake or FakePython(host["site"])).converge()


def test_present_writes_then_changes_nothing(host):
    site, env_file = host["site"], host["env_file"]
    first = _run(host)
    assert first["changed"] and first["changes"] == [os.path.dirname(env_file), env_file, str(site / "sitecustomize.py")]
    assert oct(os.stat(env_file).st_mode & 0o7777) == "0o644"
    assert oct(os.stat(os.path.dirname(env_file)).st_mode & 0o7777) == "0o755"
    assert (site / "sitecustomize.py").read_text().startswith(BEGIN) and not (site / _nccl_tuning.PTH_NAME).exists()
    assert first["verified"]["clean"]["env"] == WANT and first["shadowed"] is False
    second = _run(host)
    assert not second["changed"] and second["changes"] == [] and second["diff"] == []


def test_a_changed_value_or_mode_is_changed_and_diffed(host):
    _run(host)
    os.chmod(host["env_file"], 0o600)
    result = _run(host, env=dict(WANT, NCCL_PROTO="Simple"), verify=False)
    assert result["changes"] == [host["env_file"], str(host["site"] / "sitecustomize.py")]
    assert "NCCL_PROTO=LL" in result["diff"][0]["before"] and "NCCL_PROTO=Simple" in result["diff"][0]["after"]
    assert oct(os.stat(host["env_file"]).st_mode & 0o7777) == "0o644"


def test_check_mode_reports_and_writes_nothing(host):
    fake = FakePython(host["site"])
    result = _run(host, check_mode=True, fake=fake)
    assert result["changed"] and len(result["diff"]) == 3 and result["verified"] == {}
    assert not os.path.exists(os.path.dirname(host["env_file"])) and os.listdir(str(host["site"])) == []
    assert len(fake.calls) == 1     # the inspect start only


def test_shadowed_sitecustomize_gets_the_pth_hook_and_absent_restores_the_operators_file(host):
    site = host["site"]
    operator = '"""The operator\'s."""\nimport os\nos.environ["OP"] = "ran"'          # no trailing newline
    (site / "sitecustomize.py").write_text(operator)
    os.chmod(site / "sitecustomize.py", 0o600)
    fake = FakePython(site, imported="/usr/lib/python3.11/sitecustomize.py")
    result = _run(host, fake=fake)
    assert result["shadowed"] and result["use_pth"] and str(site / _nccl_tuning.PTH_NAME) in result["changes"]
    assert result["notes"][0].endswith("(a one-line .pth hook, run by site for every start).")
    text = (site / "sitecustomize.py").read_text()
    assert text.startswith(operator + "\n" + BEGIN) and "# newline-added-by-role: yes" in text
    assert oct(os.stat(site / "sitecustomize.py").st_mode & 0o7777) == "0o644"
    assert not _run(host, fake=fake)["changed"]
    gone = _run(host, fake=fake, state="absent")
    assert gone["changed"] and (site / "sitecustomize.py").read_text() == operator
    assert not (site / _nccl_tuning.PTH_NAME).exists() and not os.path.exists(host["env_file"])
    assert not _run(host, fake=fake, state="absent")["changed"]


def test_absent_removes_a_file_the_role_created_and_skips_a_missing_interpreter(host):
    _run(host, pth_hook="always")
    assert (host["site"] / _nccl_tuning.PTH_NAME).exists()
    _run(host, state="absent")
    assert os.listdir(str(host["site"])) == []
    _run(host)
    result = _run(host, state="absent", python=str(host["tmp"] / "no" / "python"))
    assert result["changes"] == [host["env_file"]] and (host["site"] / "sitecustomize.py").exists()


def test_network_values_win_and_are_said(host):
    network = {"transport": "ib", "interface": "eth0", "hcas": ["mlx5_0"]}
    result = _run(host, env=dict(WANT, NCCL_IB_DISABLE="1"), network=network, verify=False)
    assert result["env"]["NCCL_IB_DISABLE"] == "0" and result["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert result["notes"] == ["nccl_tuning: nccl_network sets NCCL_IB_DISABLE=0 over nccl_env's 1"]


def test_the_interpreter_comes_from_the_install_record(host):
    record = host["tmp"] / "record.json"
    record.write_text(json.dumps({"venv": "/opt/sglang/venvs/0.5.9"}))
    with pytest.raises(Refused, match="nccl_python /opt/sglang/venvs/0.5.9/bin/python does not exist"):
        _run(host, python="", install_record=str(record))
    record.write_text("{not json")
    with pytest.raises(Refused, match="is not JSON.*nothing was changed"):
        _run(host, python="", install_record=str(record))


# --- refusals: every reason at once, nothing written ------------------------------------------------------------------

def _refused(host, match, fake=None, **extra):
    with pytest.raises(Refused, match=match) as caught:
        _run(host, fake=fake, **extra)
    assert not os.path.exists(host["env_file"]) and not (host["site"] / _nccl_tuning.PTH_NAME).exists()
    return str(caught.value)


def test_bad_input_is_refused_with_every_reason(host):
    msg = _refused(host, r"^nccl_tuning: bad input \(nothing was changed\): ", env={"NCCL_SOCKET_IFNAME": "eth0 eth1"},
                   env_file="etc/nccl.env", network={"transport": "socket", "interface": "eth0\nNCCL_DEBUG=TRACE"})
    assert "NCCL_SOCKET_IFNAME=eth0 eth1 is not usable" in msg
    assert 'nccl_tuning_env_file must be an absolute path without control characters, got "etc/nccl.env"' in msg
    assert "nccl_network.interface must be a network interface name" in msg
    _refused(host, "nccl_env must be a non-empty mapping", env={})


def test_a_site_packages_others_can_write_is_refused(host):
    os.chmod(host["site"], 0o775)
    msg = _refused(host, "must be owned by root and writable by nobody else")
    assert msg.startswith("nccl_tuning: %s is owned by root with mode 0775." % host["site"])
    _run(host, state="absent")      # absent does not judge the directory


def test_a_sitecustomize_that_is_no_file_and_a_missing_interpreter_are_refused(host):
    os.symlink("/etc/hostname", str(host["site"] / "sitecustomize.py"))
    _refused(host, "sitecustomize.py exists but is not a regular file")
    with pytest.raises(Refused, match="not a regular file"):
        _run(host, state="absent")
    _refused(host, "nccl_python /nope/python does not exist or is not executable", python="/nope/python")


# --- the verification's messages -------------------------------------------------------------------------------------

def test_a_shadowed_venv_without_the_hook_fails_verification(host):
    fake = FakePython(host["site"], imported="/usr/lib/python3.11/sitecustomize.py", sees={})
    with pytest.raises(VerifyFailed) as caught:
        _run(host, fake=fake, pth_hook="never")
    assert "does not set the NCCL values on start" in str(caught.value)
    assert "That file shadows %s/sitecustomize.py; set nccl_tuning_pth_hook: auto." % host["site"] in str(caught.value)


def test_a_policy_that_does_not_hold_fails_verification(host):
    fake = FakePython(host["site"], sees=dict(WANT))     # a start with a value exported still sees ours
    with pytest.raises(VerifyFailed, match="with NCCL_ALGO=gpuserve-exported exported and policy setdefault, the "
                                           "interpreter saw Ring, expected gpuserve-exported"):
        _run(host, fake=fake)


def test_absent_verification_names_what_is_left(host, monkeypatch):
    _run(host)
    monkeypatch.setattr(_nccl_tuning.Change, "apply", lambda self: None)
    with pytest.raises(VerifyFailed, match="still present: .*nccl.env"):
        _run(host, state="absent")


# --- a real venv ---------------------------------------------------------------------------------------------------

def test_a_real_venv_round_trip(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    host = {"site": None, "env_file": str(tmp_path / "nccl.env"), "tmp": tmp_path}
    params = _params(host, python=str(venv / "bin" / "python"), policy="force", pth_hook="always")
    first = NcclTuning(params).converge()
    assert first["changed"] and first["verified"]["policy"]["env"] == {"NCCL_ALGO": "Ring"}
    assert not NcclTuning(params).converge()["changed"]
    NcclTuning(dict(params, state="absent")).converge()
    assert not os.path.exists(first["sitecustomize"]) and not os.path.exists(host["env_file"])
