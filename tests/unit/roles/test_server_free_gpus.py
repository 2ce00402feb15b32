# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's sglang_free_gpus step, as the role wires it (the free_gpus option the role's seam
hands gpuserve.sglang.sglang_server, the module's free_gpus(): run by the state machine before a start of a unit that is
down) on this machine with an nvidia-smi test double that lists two real processes: one under its own name (this
host's: stopped) and one under another name (a PID of another PID namespace, as a host in a container sees: never
stopped, named)."""
from __future__ import annotations

import subprocess
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import entry as sglang_server
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_payload

from conftest import fake_nvidia_smi

QUERY_GPU = ("0, GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, NVIDIA H200, 00000000:18:00.0, 143771, 9380, 133800, "
             "580.95.05, 9.0, Enabled, 700.00, 31\n")


def test_the_role_passes_the_switch_and_nvidia_smi():
    values = {"sglang_free_gpus": True, "sglang_nvidia_smi_dir": "/opt/nv/bin"}

    def read(name, default=""):
        return values.get(name, {"_server_in": {}, "sglang_server_nodes": []}.get(name, default))
    payload = _server_payload.payload(read, "sglang-kimi", {}, "", "")
    assert payload["free_gpus"] == {"enabled": True, "nvidia_smi": "/opt/nv/bin/nvidia-smi"}
    assert sglang_server.free_gpus({"free_gpus": {"enabled": False, "nvidia_smi": "/usr/bin/nvidia-smi"}}) is None


def test_only_this_hosts_gpu_holder_is_stopped(tmp_path):
    mine = subprocess.Popen(["sleep", "600"])
    other = subprocess.Popen(["sleep", "600"])
    try:
        smi = fake_nvidia_smi(tmp_path, QUERY_GPU,
                              "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, %d, sleep, 1234\n"
                              "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, %d, /opt/sglang/venv/bin/python3, 8000\n"
                              % (mine.pid, other.pid), "CUDA Version: 13.0\n")
        free = sglang_server.free_gpus({"free_gpus": {"enabled": True, "nvidia_smi": str(smi)}})
        found = {proc["pid"]: proc for proc in free()}
        deadline = time.time() + 30
        while mine.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert mine.poll() is not None, found            # this host's process under its own name: stopped
        assert other.poll() is None, found               # a PID nvidia-smi names otherwise: left alone
        assert found[mine.pid]["result"] in ("stopped", "killed")
        assert found[other.pid]["result"].startswith("not stopped: ")
        assert found[other.pid]["process_name"] == "/opt/sglang/venv/bin/python3"
    finally:
        for proc in (mine, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_the_companion_units_processes_are_never_stopped(monkeypatch):
    """The Weight Cache Daemon's process holds the server's own weights: sglang_free_gpus leaves it alone (old code
    stopped every process of this host that held a GPU)."""
    daemon = subprocess.Popen(["sleep", "600"])
    try:
        info = {"processes": [{"pid": daemon.pid, "pid_here": True, "process_name": "python3",
                               "unit": "sglang-kimi-weight-cache.service"}]}
        monkeypatch.setattr(sglang_server._nvidia_smi, "gather", lambda *args, **kwargs: info)
        monkeypatch.setattr(sglang_server.os.path, "isfile", lambda path: True)
        monkeypatch.setattr(sglang_server.os, "access", lambda path, mode: True)
        free = sglang_server.free_gpus({"free_gpus": {"enabled": True, "nvidia_smi": "/usr/bin/nvidia-smi"},
                                        "companion_units": ["sglang-kimi-weight-cache.service"]})
        found = free()
        assert daemon.poll() is None
        assert found[0]["result"].startswith("not stopped: a process of sglang-kimi-weight-cache.service")
    finally:
        daemon.kill()
        daemon.wait()
