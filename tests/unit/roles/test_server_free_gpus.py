# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's sglang_free_gpus step (tasks/free_gpus.yml) on this machine (connection local) with an
nvidia-smi test double that lists two real processes: one under its own name (this host's: stopped) and one
under another name (a PID of another PID namespace, as a host in a container sees: never stopped, named)."""
from __future__ import annotations

import json
import subprocess
import time

from conftest import fake_nvidia_smi, run_play

QUERY_GPU = ("0, GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, NVIDIA H200, 00000000:18:00.0, 143771, 9380, 133800, "
             "580.95.05, 9.0, Enabled, 700.00, 31\n")

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Free the GPUs as before a first start
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: free_gpus.yml
"""


def test_only_this_hosts_gpu_holder_is_stopped(tmp_path):
    mine = subprocess.Popen(["sleep", "600"])
    other = subprocess.Popen(["sleep", "600"])
    try:
        smi = fake_nvidia_smi(tmp_path, QUERY_GPU,
                              "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, %d, sleep, 1234\n"
                              "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, %d, /opt/sglang/venv/bin/python3, 8000\n"
                              % (mine.pid, other.pid), "CUDA Version: 13.0\n")
        rc, out = run_play(tmp_path, PLAY, [json.dumps({"sglang_nvidia_smi_dir": str(smi.parent)})])
        assert rc == 0, out
        deadline = time.time() + 30
        while mine.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert mine.poll() is not None, out             # this host's process under its own name: stopped
        assert other.poll() is None, out                # a PID nvidia-smi names otherwise: left alone
        assert "stopped GPU holder pid %d sleep" % mine.pid in out
        assert "not stopped: GPU 0 pid %d /opt/sglang/venv/bin/python3" % other.pid in out
        assert "another PID namespace" in out
    finally:
        for proc in (mine, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
