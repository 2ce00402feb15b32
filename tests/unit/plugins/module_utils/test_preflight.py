# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_preflight.py: the preflight role's checks computed without a host (the model directories in
tmp_path, fake mounts and statvfs, nvidia-smi's answers as data, the reference numbers for the plan) - each refusal
with the message the role gives, each note, the checks a tag selects - and the free-disk check on this machine."""
from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _preflight
from ansible_collections.gpuserve.sglang.plugins.module_utils._nvidia_smi import no_gpus

from conftest import ROOT

KIMI = os.path.join(ROOT, "tests", "fixtures", "models", "kimi-k2.5")
HOST = "gpu1"
# the reference host (8 x RTX PRO 6000 Blackwell, Kimi-K2.5 INT4), as the preflight molecule scenario plans it
PARAMS = dict(checks=["paths", "gpus", "memory"], tp=8, mem_fraction_static=0.88, hicache=True, hicache_ratio=4.0,
              hicache_size_gb=0, page_size=1, kv_dtype="auto", model_path=KIMI, draft_model_path="", check_paths=True,
              release="", hybrid={}, model_geometry={}, require_gpus=False, min_driver=580,
              allow_foreign_gpu_processes=False, service_name="sglang-kimi", nvidia_smi="", plan_after_stop=False,
              gpu_memory_gb=94.99, gpu_overhead_gb=1.0, weights_gb_per_gpu=72.3, mem_available_gb=396, compare=[],
              log_dir="/var/log/sglang", min_free_disk_gb=1)
MOUNTS = ("overlay / overlay rw 0 0\n/dev/sda1 /var rw,relatime ext4 0 0\n"
          "/dev/sdb1 /var/log/my\\040logs ext4 rw 0 0\nproc /proc proc rw 0 0\n")


class StatVfs(object):
    def __init__(self, free_bytes):
        self.f_frsize, self.f_bavail = 4096, free_bytes // 4096


def _gpus(count=8, driver="580.65.06", processes=()):
    return {"available": count > 0, "count": count, "reason": "" if count else "nvidia-smi not found",
            "gpus": [{"index": i, "name": "RTX PRO 6000", "memory_free_mib": 97272} for i in range(count)],
            "processes": list(processes), "driver_version": driver, "driver_major": int(driver.split(".")[0]),
            "cuda_version": "13.0"}


def _check(**extra):
    params = dict(PARAMS, **extra)
    seen = {}

    def statvfs(path):
        seen["statvfs"] = path
        return StatVfs(100 * _preflight.GIB)

    def read(path):
        return MOUNTS if path == "/proc/mounts" else None

    result = _preflight.check(params, lambda *a, **k: (1, "", ""), lambda argv: (1, "", ""),
                              lambda name, opt_dirs=None: None, HOST, read=read, statvfs=statvfs)
    return result, seen


# --- paths and disk -------------------------------------------------------------------------------------------------

def test_paths_empty_missing_and_not_a_directory(tmp_path):
    assert _preflight.path_problems(KIMI, "", HOST) == []
    (tmp_path / "file").write_text("x")
    assert _preflight.path_problems("", str(tmp_path / "nope"), HOST) == [
        "sglang_preflight_model_path is empty (set it, or sglang_model_path; or set sglang_preflight_check_paths: "
        "false to plan from sglang_preflight_model_geometry alone)",
        "Draft model directory %s does not exist on gpu1" % (tmp_path / "nope")]
    assert _preflight.path_problems(str(tmp_path / "file"), str(tmp_path / "nope"), HOST) == [
        "Model directory %s is not a directory; Draft model directory %s does not exist on gpu1"
        % (tmp_path / "file", tmp_path / "nope")]


def test_the_log_directorys_filesystem_is_its_longest_device_backed_mount_point():
    points = _preflight.device_mounts(MOUNTS)
    assert points == ["/var", "/var/log/my logs"]                       # overlay and proc are not devices
    assert _preflight.log_filesystem("/var/log/sglang", points) == ("/var", True)
    assert _preflight.log_filesystem("/var/log/my logs/a/b", points) == ("/var/log/my logs", True)
    assert _preflight.log_filesystem("/srv/logs", points) == ("/", False)
    assert _preflight.log_filesystem("/variable", points) == ("/", False)


def test_too_little_disk_is_refused_with_the_numbers_and_a_root_overlay_is_a_note():
    problem, note = _preflight.disk_check("/var/log/sglang", 20, MOUNTS, lambda path: StatVfs(int(5.26 * 2 ** 30)))
    assert problem == "Only 5.3 GiB free on /var (the filesystem of the log directory /var/log/sglang), 20 GiB needed"
    assert note is None
    assert _preflight.disk_check("/var/log/sglang", 1, MOUNTS, lambda path: StatVfs(2 * 2 ** 30)) == (None, None)
    problem, note = _preflight.disk_check("/srv/logs", 20, MOUNTS, lambda path: StatVfs(0))
    assert problem is None and note.startswith("Free disk for the log directory /srv/logs not checked")


def test_free_disk_on_this_machine(tmp_path):
    with open("/proc/mounts") as handle:
        mounts = handle.read()
    log_dir = str(tmp_path / "not" / "yet" / "logs")
    mount, known = _preflight.log_filesystem(log_dir, _preflight.device_mounts(mounts))
    if not known:
        pytest.skip("tmp_path is on a filesystem without a device here (%s)" % mount)
    problem, _where = _preflight.disk_check(log_dir, 1000000, mounts)
    assert "(the filesystem of the log directory %s), 1000000 GiB needed" % log_dir in problem
    shown = float(problem.split("Only ", 1)[1].split(" GiB", 1)[0])
    assert abs(shown - shutil.disk_usage(str(tmp_path)).free / 2 ** 30) < 1.0
    assert _preflight.disk_check(log_dir, 0.001, mounts) == (None, None)
    assert not os.path.exists(os.path.dirname(os.path.dirname(log_dir)))


# --- GPUs -----------------------------------------------------------------------------------------------------------

def _gpu_check(info, **extra):
    return _preflight.gpu_checks(info, dict(PARAMS, **extra), HOST)


def test_fewer_gpus_than_tp_and_an_old_driver_are_refused():
    problems, _notes = _gpu_check(_gpus(0), require_gpus=True)
    assert problems == ["gpu1 has 0 GPU(s) (nvidia-smi not found), --tp 8 needs 8"]
    problems, _notes = _gpu_check(_gpus(2, driver="575.1"), require_gpus=True)
    assert problems == ["gpu1 has 2 GPU(s): RTX PRO 6000, RTX PRO 6000, --tp 8 needs 8",
                        "NVIDIA driver 575.1 on gpu1 is older than 580 (CUDA 13.0 needs >= 580); the driver reports "
                        "CUDA 13.0"]
    assert _gpu_check(_gpus(8, driver="570.1"), min_driver=575)[0] == [
        "NVIDIA driver 570.1 on gpu1 is older than 575 (CUDA needs >= 575); the driver reports CUDA 13.0"]
    assert _gpu_check(_gpus(8), require_gpus=True) == ([], [])


def test_no_gpus_allowed_is_a_note():
    assert _gpu_check(_gpus(0)) == ([], [
        "No GPUs on gpu1 (nvidia-smi not found); sglang_preflight_require_gpus is false, so the GPU checks are "
        "skipped and the memory plan uses the given numbers."])


PROCS = [{"gpu_index": 0, "pid": 11, "process_name": "python3", "used_memory_mib": 90000, "unit": "sglang-kimi.service",
          "pid_here": True},
         {"gpu_index": 1, "pid": 12, "process_name": "train.py", "used_memory_mib": None, "unit": "", "pid_here": True},
         {"gpu_index": 7, "pid": 3999999, "process_name": "python3", "used_memory_mib": 512, "pid_here": False}]


def test_foreign_processes_are_refused_or_noted_and_other_namespaces_are_said():
    problems, notes = _gpu_check(_gpus(8, processes=PROCS), service_name="sglang-kimi")
    assert problems == ["1 process(es) on the GPUs of gpu1 are not sglang-kimi: GPU 1: pid 12 train.py (? MiB, unit "
                        "none). Stop them, or set sglang_preflight_allow_foreign_gpu_processes: true"]
    assert notes == ["nvidia-smi on gpu1 lists PIDs that are not this host's processes (another PID namespace: a "
                     "container?): GPU 7: pid 3999999 python3 (512 MiB). They are not counted as foreign, not "
                     "stopped, and their memory is not counted as the server's."]
    problems, notes = _gpu_check(_gpus(8, processes=PROCS), service_name="sglang-kimi.service",
                                 allow_foreign_gpu_processes=True)
    assert problems == [] and notes[1] == "Foreign GPU processes (allowed): GPU 1: pid 12 train.py (? MiB, unit none)"


# --- memory ---------------------------------------------------------------------------------------------------------

def _memory(info=None, **extra):
    return _preflight.memory_checks(info or _gpus(0), dict(PARAMS, **extra), HOST, lambda *a, **k: (1, "", ""))


def test_the_reference_plan_fits_and_is_shown():
    problems, notes, plan = _memory(compare=[{"name": "ratio2", "ratio": 2}])
    assert problems == [] and plan["fits"] and plan["cell_size_bytes"] == 70272
    assert notes[0] == plan["summary"] and notes[1:] == plan["compare_table"]


def test_a_plan_that_does_not_fit_names_the_numbers():
    problems, _notes, plan = _memory(hicache_ratio=6.0)
    assert not plan["fits"]
    assert problems[0].startswith("Memory plan for gpu1 does not fit: HiCache ratio 6.0 needs 67.0")
    assert "the largest ratio that fits is 4.6" in problems[0]


def test_no_gpu_memory_and_input_it_cannot_plan_are_problems():
    assert _memory(gpu_memory_gb=None) == (["No GPUs on gpu1 (nvidia-smi not found) and sglang_preflight_gpu_memory_gb "
                                            "is not set: give the free GiB per GPU to plan for (an idle 96 GB RTX PRO "
                                            "6000 Blackwell has about 95.0)"], [], None)
    problems, _notes, plan = _memory(hicache_ratio=1.0)
    assert plan is None and "ratio" in problems[0]
    assert _memory(model_path="", model_geometry={})[0] == ["one of the following is required: model_path, geometry"]
    assert "unknown keys layers" in _memory(model_geometry={"layers": 3})[0][0]
    geometry = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 61}
    problems, _notes, plan = _memory(model_path="", model_geometry=geometry)
    assert problems == [] and plan["cell_size_bytes"] == 70272


def test_gpus_from_nvidia_smi_feed_the_plan():
    problems, _notes, plan = _memory(_gpus(8), gpu_memory_gb=None)
    assert problems == [] and "97272 MiB" in plan["sources"]["gpu_memory"]


# --- the whole preflight --------------------------------------------------------------------------------------------

def test_every_check_at_once_and_the_facts():
    result, seen = _check(draft_model_path="/nope", log_dir="/var/log/sglang", require_gpus=True)
    assert result["problems"] == [
        "Draft model directory /nope does not exist on gpu1",
        "gpu1 has 0 GPU(s) (nvidia-smi not found on PATH or in /usr/bin, /usr/local/bin, /usr/local/nvidia/bin), "
        "--tp 8 needs 8"]
    assert seen["statvfs"] == "/var"
    assert result["gpu_info"] == no_gpus("nvidia-smi not found on PATH or in /usr/bin, /usr/local/bin, "
                                         "/usr/local/nvidia/bin")
    assert result["memory_plan"]["fits"] and result["notes"][0] == result["memory_plan"]["summary"]


def test_a_tag_runs_only_its_check():
    result, seen = _check(checks=["paths"], model_path="")
    assert result["problems"][0].startswith("sglang_preflight_model_path is empty")
    assert result["gpu_info"] == {} and result["memory_plan"] == {} and seen
    result, seen = _check(checks=["memory"], model_path="/nope", check_paths=True)
    assert result["problems"] == ["no config.json at /nope"] and not seen
    assert result["gpu_info"]["count"] == 0


# --- the Weight Cache Daemon beside the server (issue 49) -----------------------------------------------------------
DAEMON = {"gpu_index": 0, "pid": 21, "process_name": "python3", "used_memory_mib": 9470,
          "unit": "sglang-kimi-weight-cache.service", "pid_here": True}


def test_the_weight_cache_daemon_s_processes_are_the_server_s_not_foreign():
    """Old code: the daemon's unit is not the server's, so every deploy with sglang_weight_cache was refused."""
    problems, _notes = _gpu_check(_gpus(8, processes=[DAEMON]))
    assert problems and "are not sglang-kimi" in problems[0]
    problems, notes = _gpu_check(_gpus(8, processes=[DAEMON]), companion_units=["sglang-kimi-weight-cache.service"])
    assert problems == [] and "Weight Cache Daemon" in notes[0] and "9470 MiB" in notes[0]


def test_the_plan_counts_the_weights_once_whether_the_daemon_holds_them_or_will():
    units = ["sglang-kimi-weight-cache.service"]
    info = _gpus(8, processes=[DAEMON])
    _problems, notes, plan = _memory(info, gpu_memory_gb=None, weights_gb_per_gpu=None, companion_units=units)
    assert plan["weights_gb_per_gpu"] == 0 and "already out of memory.free" in notes[0]
    _problems, notes, plan = _memory(_gpus(8), gpu_memory_gb=None, companion_units=units)
    assert plan["weights_gb_per_gpu"] == 72.3 and "one more CUDA context (2.00 GiB" in notes[0]
