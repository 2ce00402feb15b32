# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the nvidia_gpu_info module file as Ansible runs it (an args file), with a fake nvidia-smi that prints
the real texts captured on the H200 host, and with no nvidia-smi at all."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import fake_nvidia_smi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "nvidia_gpu_info.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
HOST_TXT = os.path.join(ROOT, "tests", "fixtures", "gpu-host-texts", "host.txt")


def section(name):
    with open(HOST_TXT) as handle:
        text = handle.read()
    return re.search(r"^### %s\n(.*?)(?=^### |\Z)" % re.escape(name), text, re.S | re.M).group(1)


def run_module(tmp_path, args, path=None):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True, env=env, check=False)
    return json.loads(proc.stdout)


@pytest.fixture
def fake_smi(tmp_path):
    return fake_nvidia_smi(tmp_path, section("query-gpu"),
                           "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, %d, python3, 1234\n" % os.getpid(),
                           section("nvidia-smi"))


def test_module_reports_real_gpus(tmp_path, fake_smi):
    result = run_module(tmp_path, {"nvidia_smi": str(fake_smi)})
    assert result["changed"] is False
    assert result["count"] == 2
    assert result["cuda_version"] == "13.0"
    assert result["driver_major"] == 580
    assert result["gpus"][0]["memory_free_mib"] == 143156
    proc = result["processes"][0]
    assert proc["pid"] == os.getpid() and proc["gpu_index"] == 0
    assert result["gpus"][0]["processes"][0]["pid"] == os.getpid()
    # the unit of this test process, read from /proc/<pid>/cgroup (may be None outside systemd)
    assert "unit" in proc


def test_module_found_on_path(tmp_path, fake_smi):
    result = run_module(tmp_path, {}, path=str(fake_smi.parent) + ":/usr/bin:/bin")
    assert result["nvidia_smi"] == str(fake_smi)
    assert result["count"] == 2


def test_module_without_nvidia_smi(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_module(tmp_path, {}, path=str(empty))
    if os.path.exists("/usr/bin/nvidia-smi"):
        pytest.skip("this machine has nvidia-smi in /usr/bin")
    assert result.get("failed") is not True
    assert result["gpus"] == [] and result["count"] == 0
    assert "nvidia-smi not found" in result["reason"]


def test_module_with_failing_nvidia_smi(tmp_path):
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver.\"\nexit 9\n")
    script.chmod(0o755)
    result = run_module(tmp_path, {"nvidia_smi": str(script)})
    assert result.get("failed") is not True
    assert result["gpus"] == []
    assert "rc=9" in result["reason"]
    assert result["nvidia_smi_failed"] is True


def test_module_command_name_is_looked_up(tmp_path, fake_smi):
    # the cuda role passes a command name (cuda_nvidia_smi: nvidia-smi), not a path
    result = run_module(tmp_path, {"nvidia_smi": "nvidia-smi"}, path=str(fake_smi.parent) + ":/usr/bin:/bin")
    assert result["nvidia_smi"] == str(fake_smi)
    assert result["count"] == 2 and result["nvidia_smi_failed"] is False


def test_module_missing_path_is_no_gpus_not_a_failure(tmp_path):
    # the server role passes "{{ sglang_nvidia_smi_dir }}/nvidia-smi", absent on hosts without a driver
    missing = str(tmp_path / "nowhere" / "nvidia-smi")
    result = run_module(tmp_path, {"nvidia_smi": missing})
    assert result.get("failed") is not True
    assert result["gpus"] == [] and result["nvidia_smi_failed"] is False
    assert result["reason"] == missing + " not found (no executable file there)"
