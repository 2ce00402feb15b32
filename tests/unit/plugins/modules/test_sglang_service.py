# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the sglang_service module file as Ansible runs it (an args file), with fake systemctl/journalctl on PATH
that answer with output captured from systemd 252 and SGLang 0.5.9's texts, and log every call."""
import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_service.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
INV = "78140f679af74fdba0aba4e5d4531774"

SHOW_ACTIVE = """\
Id=sglang-kimi.service
LoadState=loaded
ActiveState=active
SubState=running
MainPID=153
InvocationID=%s
NRestarts=0
Result=success
ExecStart={ path=/opt/sglang/venv/bin/python ; argv[]=/opt/sglang/venv/bin/python -m sglang_standin --tp 2 \
--enable-hierarchical-cache --port 30000 ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=153 }
Job=
Restart=no
RestartUSec=100ms
""" % INV

LINES = [
    ("Started sglang-kimi.service.", True),
    ("[2026-11-29 17:54:48] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=2)", False),
    ("[2026-11-29 17:54:49 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB", False),
    ("[2026-11-29 17:54:49 TP1] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB", False),
    ("[2026-11-29 17:54:50 TP0] Allocating 22.39 GB host memory for hierarchical KV cache.", False),
    ("[2026-11-29 17:54:50 TP1] Allocating 22.39 GB host memory for hierarchical KV cache.", False),
    ("INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)", False),
    ("[2026-11-29 17:54:51] The server is fired up and ready to roll!", False),
]


def journal_json(lines):
    out = []
    for index, (msg, manager) in enumerate(lines):
        entry = {"MESSAGE": msg, "__CURSOR": "s=1;i=%x" % index, "__REALTIME_TIMESTAMP": str(1795974888000000 + index)}
        entry["INVOCATION_ID" if manager else "_SYSTEMD_INVOCATION_ID"] = INV
        out.append(json.dumps(entry))
    return "\n".join(out) + "\n"


@pytest.fixture
def fakebin(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    (tmp_path / "show").write_text(SHOW_ACTIVE)
    (tmp_path / "journal").write_text(journal_json(LINES))
    scripts = {
        "systemctl": "#!/bin/sh\necho \"systemctl $*\" >> %(log)s\n"
                     "case \"$1\" in show) cat %(d)s/show ;; list-jobs) ;; *) exit 0 ;; esac\n",
        # like journalctl: --follow prints what is there and then waits for more (it never ends by itself; the
        # module kills it); a fake that exits made the follower's end a race (CI run of stop 17)
        "journalctl": "#!/bin/sh\necho \"journalctl $*\" >> %(log)s\n"
                      "case \"$*\" in *--after-cursor*) ;; *) cat %(d)s/journal ;; esac\n"
                      "case \"$*\" in *--follow*) exec sleep 120 ;; esac\n",
    }
    for name, body in scripts.items():
        path = bindir / name
        path.write_text(body % {"log": log, "d": tmp_path})
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def run_module(tmp_path, args, check_mode=False):
    payload = dict(args)
    payload.setdefault("state_dir", str(tmp_path / "state"))
    payload.setdefault("progress", False)
    if check_mode:
        payload["_ansible_check_mode"] = True
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS, PATH="%s:/usr/bin:/bin" % (tmp_path / "bin"))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True, env=env,
                          timeout=1800, check=False)
    return json.loads(proc.stdout)


def calls(tmp_path):
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_verified_reads_the_invocation_and_changes_nothing(fakebin):
    result = run_module(fakebin, {"name": "sglang-kimi", "timeout": 20})
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is False
    assert result["invocation_id"] == INV
    assert result["hicache"]["ranks_seen"] == [0, 1]          # --tp 2 and HiCache read from ExecStart
    assert result["hicache"]["host_pool_gb_total"] == pytest.approx(44.78)
    assert result["ready_line"].endswith("The server is fired up and ready to roll!")
    assert not any(" restart" in c or " start " in c for c in calls(fakebin))
    assert any("journalctl" in c and "_SYSTEMD_INVOCATION_ID=" + INV in c for c in calls(fakebin))


def test_check_mode_restart_queues_nothing(fakebin):
    result = run_module(fakebin, {"name": "sglang-kimi", "state": "restarted"}, check_mode=True)
    assert result["changed"] is True
    assert "would restart" in result["msg"]
    assert not any("restart" in c.split()[1:2] for c in calls(fakebin))
    assert all(c.split()[1] in ("show", "list-jobs") for c in calls(fakebin) if c.startswith("systemctl"))


@pytest.mark.parametrize("args, message", [
    ({"name": "sglang-kimi", "expect": ["("]}, "expect: invalid regular expression"),
    ({"name": "sglang-kimi", "extra_fail_patterns": ["[x"]}, "fail_patterns: invalid regular expression"),
    ({"name": "sglang-kimi", "timeout": 0}, "timeout must be a positive"),
    ({"name": "sglang-kimi", "poll_interval": 0}, "poll_interval"),
    ({"name": "sglang-kimi", "ranks": 0}, "ranks must be at least 1"),
    ({"name": "sglang-kimi", "health_url": "127.0.0.1:30000/health"}, "health_url must be an http"),
    # issue 12: these crashed with a traceback AFTER the restart was queued
    ({"name": "sglang-kimi", "health_url": "http://127.0.0.1:99999/health"}, "out of range"),
    ({"name": "sglang-kimi", "health_url": "http://127.0.0.1:3o000/health"}, "not a valid URL"),
    ({"name": "sglang-kimi", "health_url": "http://127.0.0.1:30000/he alth"}, "whitespace"),
    ({"name": "sglang-kimi", "health_url": "http:///health"}, "has no host"),
    ({"name": "sglang-kimi", "ready_pattern": "fired up ("}, "ready_pattern: invalid regular expression"),
    ({"name": "bad name"}, "not a unit name"),
    ({"name": "sglang-kimi", "state": "reloaded"}, "value of state must be one of"),
])
def test_bad_input_fails_before_touching_the_host(fakebin, args, message):
    result = run_module(fakebin, dict(args, state=args.get("state", "restarted")))
    assert result["failed"] is True
    assert message in result["msg"]
    assert calls(fakebin) == []


def test_restart_on_a_fake_host_that_never_changes_times_out_naming_the_phase(fakebin):
    result = run_module(fakebin, {"name": "sglang-kimi", "state": "restarted", "timeout": 2, "poll_interval": 0.2})
    assert result["failed"] is True
    assert "timeout after 2 s while stopping" in result["msg"]
    assert [c for c in calls(fakebin) if c.startswith("systemctl restart")] == [
        "systemctl restart --no-block sglang-kimi.service"]


def test_progress_command_is_returned(fakebin):
    result = run_module(fakebin, {"name": "sglang-kimi", "timeout": 20, "progress": True})
    assert result["progress_command"] == "journalctl -f -t gpuserve-sglang-service"
