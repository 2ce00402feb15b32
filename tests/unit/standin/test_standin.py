# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in SGLang server (a test fixture) prints SGLang 0.5.9's texts, serves /health as SGLang does,
drains on SIGTERM, and fails in the documented ways. The module's log catalogue must read it."""
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import LogWatch
from conftest import STANDIN, free_port


def start(args, **env):
    full = dict(os.environ, STANDIN_LOAD_SECONDS="0.6", STANDIN_WARMUP_SECONDS="0.6")
    full.update({k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, STANDIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=full)


def health(port):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def run_to_end(args, **env):
    proc = start(args, **env)
    out = proc.communicate(timeout=120)[0]   # a hang guard only
    return proc.returncode, out.splitlines()


def test_startup_health_sequence_and_drain():
    port = free_port()
    proc = start(["--tp", "8", "--port", str(port), "--enable-hierarchical-cache", "--hicache-ratio", "2",
                  "--some-unknown-flag", "x"], STANDIN_DRAIN_SECONDS="4", STANDIN_HEALTH_503_SECONDS="3")
    seen = []
    deadline = time.time() + 60
    while time.time() < deadline:
        code = health(port)
        if not seen or seen[-1] != code:
            seen.append(code)
        if code == 200:
            break
        time.sleep(0.05)
    assert seen[0] is None and 503 in seen and seen[-1] == 200   # refused, 503, 200 in that order
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    # polled, not slept: the drain (4 s) is long enough to be seen on a busy machine
    deadline = time.time() + 60
    while time.time() < deadline and health(port) == 200:
        time.sleep(0.05)
    assert health(port) == 503                                   # draining
    out = proc.communicate(timeout=120)[0]
    assert time.time() - t0 >= 3.9                               # drained for STANDIN_DRAIN_SECONDS
    assert proc.returncode == -signal.SIGKILL                    # SGLang SIGKILLs its own tree at the end
    lines = out.splitlines()
    watch = LogWatch()
    for line in lines:
        watch.feed(line)
    assert watch.fatal == []
    assert watch.ready_line and watch.hicache_summary(8)["ranks_seen"] == list(range(8))
    assert watch.hicache_summary(8)["host_pool_gb_per_rank"] == 22.39
    assert watch.kv_summary()["tokens_per_rank"] == 159277 and watch.kv_summary()["gb_per_rank"] == 10.42
    assert any(line.endswith("] SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
               for line in lines)
    assert any(line.endswith("Gracefully exiting... Remaining number of requests 0. Remaining requests "
                             "remaining_rids=[].") for line in lines)


@pytest.mark.parametrize("args, gb", [
    (["--hicache-ratio", "4"], 44.77), (["--hicache-size", "30"], 30.00),
])
def test_host_pool_sizes(args, gb):
    proc = start(["--tp", "2", "--port", str(free_port()), "--enable-hierarchical-cache"] + args)
    deadline = time.time() + 60
    found = None
    while time.time() < deadline and found is None:
        line = proc.stdout.readline()
        if "host memory for hierarchical KV cache" in line:
            found = line
    proc.kill()
    proc.communicate()
    assert "Allocating %.2f GB host memory for hierarchical KV cache." % gb in found


@pytest.mark.parametrize("fail, text", [
    ("host_memory", "ValueError: Not enough host memory available. Requesting 22.39 GB but only have 8.12 GB free. "
                    "Please reduce the size of the hierarchical cache."),
    ("kv_memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory."),
    ("crash", "Rank 0 scheduler is dead. Please check if there are relevant logs."),
])
def test_failure_modes_print_real_texts_and_die(fail, text):
    rc, lines = run_to_end(["--tp", "2", "--port", str(free_port()), "--enable-hierarchical-cache"], STANDIN_FAIL=fail)
    assert rc != 0
    watch = LogWatch()
    for line in lines:
        watch.feed(line)
    assert text in watch.failed_line
    assert watch.ready_line is None


def test_missing_ranks_and_exit_early():
    proc = start(["--tp", "8", "--port", str(free_port()), "--enable-hierarchical-cache"], STANDIN_MISSING_RANKS=1)
    watch = LogWatch()
    deadline = time.time() + 60
    while time.time() < deadline and watch.ready_line is None:
        watch.feed(proc.stdout.readline().rstrip("\n"))
    proc.kill()
    proc.communicate()
    assert watch.hicache_summary(8)["ranks_seen"] == list(range(7))
    rc, lines = run_to_end(["--port", "0"], STANDIN_FAIL="exit_early")
    assert rc == 1 and len(lines) == 1 and "server_args=ServerArgs(" in lines[0]


def test_sglang_argument_errors():
    rc, lines = run_to_end(["--port", "0", "--enable-hierarchical-cache", "--disable-radix-cache"])
    assert rc == 1 and any("mutually exclusive" in line for line in lines)
    rc, lines = run_to_end(["--port", "0", "--enable-hierarchical-cache", "--hicache-ratio", "1"])
    assert rc != 0 and any("The host memory should be larger than the device memory" in line for line in lines)


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_a_hybrid_model_directory_makes_the_mamba_pool_lines_the_module_reads(tmp_path, release):
    """issue 24: the stand-in reads config.json of --model-path (a stand-in model in the real formats); a hybrid
    model gets the release's Mamba state pool line per rank (and on 0.5.23 with HiCache the Mamba host pool)."""
    from conftest import make_standin_model
    from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import texts_for
    model = make_standin_model("qwen35", tmp_path / "qwen")
    proc = start(["--tp", "4", "--port", str(free_port()), "--model-path", model, "--speculative-algorithm", "NEXTN",
                  "--enable-hierarchical-cache", "--hicache-ratio", "2"],
                 STANDIN_SGLANG_RELEASE=release, STANDIN_MISSING_MAMBA_RANKS=1)
    watch = LogWatch()
    watch.use_texts(texts_for(release))
    deadline = time.time() + 60
    lines = []
    while time.time() < deadline and watch.ready_line is None:
        lines.append(proc.stdout.readline().rstrip("\n"))
        watch.feed(lines[-1])
    proc.kill()
    proc.communicate()
    summary = watch.hybrid_summary(4)
    assert summary["ranks_seen"] == [0, 1, 2] and summary["ranks_missing"] == [3]
    if release == "0.5.23":   # HiCache for the Mamba state exists from this release: every rank's host pool
        assert summary["host_pool_ranks_seen"] == [0, 1, 2, 3]
    else:
        assert "host_pool_ranks_seen" not in summary
    assert any("type=Qwen3_5MoeForConditionalGeneration" in line for line in lines)
