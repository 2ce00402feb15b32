# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the sglang_server module file as Ansible runs it (an args file), with a fake systemctl on PATH: bad input
fails before the host is touched, check mode and ``state: due`` write nothing and show no secret."""
import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_server.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
KEY = "sk-module-test-key-7"

SHOW_STOPPED = """\
LoadState=loaded
ActiveState=inactive
SubState=dead
InvocationID=
ActiveEnterTimestamp=
UnitFileState=disabled
MainPID=0
"""


@pytest.fixture
def fakebin(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    (tmp_path / "show").write_text(SHOW_STOPPED)
    for name, body in {
        "systemctl": "#!/bin/sh\necho \"systemctl $*\" >> %(log)s\n"
                     "case \"$1\" in show) cat %(d)s/show ;; *) exit 0 ;; esac\n",
        "journalctl": "#!/bin/sh\necho \"journalctl $*\" >> %(log)s\n",
        "systemd-analyze": "#!/bin/sh\necho \"systemd-analyze $*\" >> %(log)s\n",
    }.items():
        path = bindir / name
        path.write_text(body % {"log": log, "d": tmp_path})
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def args(tmp_path, **extra):
    etc = tmp_path / "etc"
    payload = {
        "name": "sglang-t",
        "unit": {"path": str(etc / "sglang-t.service"), "content": "[Service]\nExecStart=/bin/true\n"},
        "env": {"path": str(etc / "sglang-t.env"), "content": "SGLANG_API_KEY=%s\nA=1\n" % KEY},
        "secrets": {"path": str(etc / "sglang-t.secrets.yaml"), "content": "api-key: %s\n" % KEY},
        "reads": [str(etc / "nccl.env")],
        "backup_dir": str(tmp_path / "backup"),
        "secrets_to_mask": [KEY],
        "service": {"state_dir": str(tmp_path / "state"), "health_url": "http://127.0.0.1:30000/health"},
        "host_name": "node-a",
    }
    payload.update(extra)
    return payload


def run_module(tmp_path, payload, check_mode=False, diff=False):
    payload = dict(payload)
    if check_mode:
        payload["_ansible_check_mode"] = True
    if diff:
        payload["_ansible_diff"] = True
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, PATH="%s:/usr/bin:/bin" % (tmp_path / "bin"))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    out = json.loads(proc.stdout)
    # ansible-core 2.22 hands the module's no_log values to the controller, which masks them and never shows them
    out.pop("_ansible_new_secrets", None)
    assert KEY not in json.dumps(out) and KEY not in proc.stderr
    return out


def calls(tmp_path):
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("extra, message", [
    ({"name": "sglang-t.service"}, "without .service"),
    ({"name": "bad name"}, "not a unit name"),
    ({"backup_keep": -1}, "backup_keep must be 0 or more"),
    ({"stop_processes": {"match": ["sgl"]}}, "shorter than"),
    ({"service": {"health_url": "127.0.0.1:30000/health"}}, "health_url must be an http"),
    ({"dirs": [{"path": "/etc/sglang", "mode": "rwx"}]}, "not an octal mode"),
])
def test_bad_input_fails_before_touching_the_host(fakebin, extra, message):
    result = run_module(fakebin, args(fakebin, **extra))
    assert result["failed"] is True and message in result["msg"]
    assert result["msg"].startswith("nothing was changed: ")
    assert calls(fakebin) == []


def test_check_mode_plans_and_diffs_and_writes_nothing(fakebin):
    result = run_module(fakebin, args(fakebin), check_mode=True, diff=True)
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is True and result["action"] == "start"
    by_path = {entry["before_header"]: entry for entry in result["diff"]}
    assert by_path[str(fakebin / "etc" / "sglang-t.secrets.yaml")]["after"].startswith("<not shown")
    assert "A=1" in by_path[str(fakebin / "etc" / "sglang-t.env")]["after"]
    assert not (fakebin / "etc").exists() and not (fakebin / "backup").exists()
    assert [c.split()[1] for c in calls(fakebin)] == ["show"]


def test_state_due_reads_only_and_gives_the_reasons(fakebin):
    result = run_module(fakebin, args(fakebin, state="due"))
    assert result.get("failed") is not True, result.get("msg")
    assert result["due"] is True and result["changed"] is False
    assert result["reasons"] == ["not running", "unit would change", "environment file would change",
                                 "secrets file would change"]
    assert not (fakebin / "etc").exists()
    assert [c.split()[1] for c in calls(fakebin)] == ["show"]
