# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers of nvidia-smi output, fed the real texts captured on a 2 x H200 host."""
import os
import re

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _nvidia_smi as smi

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu-host-texts")


def section(name):
    """One '### name' section of host.txt."""
    with open(os.path.join(FIXTURES, "host.txt")) as handle:
        text = handle.read()
    match = re.search(r"^### %s\n(.*?)(?=^### |\Z)" % re.escape(name), text, re.S | re.M)
    assert match, name
    return match.group(1)


def test_query_gpu_real_h200_output():
    gpus = smi.parse_query_gpu(section("query-gpu"))
    assert [g["index"] for g in gpus] == [0, 1]
    first = gpus[0]
    assert first["uuid"] == "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673"
    assert first["name"] == "NVIDIA H200"
    assert first["pci_bus_id"] == "00000000:00:06.0"
    assert (first["memory_total_mib"], first["memory_used_mib"], first["memory_free_mib"]) == (143771, 0, 143156)
    assert first["memory_free_gib"] == pytest.approx(143156 / 1024.0, abs=0.001)
    assert first["driver_version"] == "580.159.04"
    assert first["compute_cap"] == "9.0"
    assert first["persistence_mode"] == "Enabled"
    assert first["power_limit_w"] == 700.0
    assert first["temperature_c"] == 34
    assert gpus[1]["uuid"] == "GPU-35f881f8-a197-ce85-2d34-2cd7aa2255fc"
    assert gpus[1]["temperature_c"] == 32


def test_query_gpu_with_units_is_rejected_clearly():
    # The "query-gpu header" section was captured with 5 fields and units: not our format.
    with pytest.raises(smi.NvidiaSmiParseError, match="fields, expected 12"):
        smi.parse_query_gpu(section("query-gpu header").splitlines()[1])


def test_query_gpu_not_available_values():
    line = "3, GPU-x, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:17:00.0, 97887, 12, 97250, 580.95.05, 12.0, [N/A], [Not Supported], 40"
    gpu = smi.parse_query_gpu(line)[0]
    assert gpu["index"] == 3
    assert gpu["persistence_mode"] is None
    assert gpu["power_limit_w"] is None
    assert gpu["compute_cap"] == "12.0"
    assert gpu["memory_total_gib"] == pytest.approx(95.593, abs=0.001)


def test_compute_apps_empty_real_output():
    # The fixture shows rc=0 and no line at all when no process holds a GPU.
    text = section("query-compute-apps").replace("rc=0", "")
    assert smi.parse_compute_apps(text) == []


def test_compute_apps_lines():
    text = (
        "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673, 4242, sglang::scheduler_TP0, 130012\n"
        "GPU-35f881f8-a197-ce85-2d34-2cd7aa2255fc, 4243, /usr/bin/python3, [N/A]\n"
    )
    apps = smi.parse_compute_apps(text)
    assert apps[0] == {
        "gpu_uuid": "GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673",
        "pid": 4242,
        "process_name": "sglang::scheduler_TP0",
        "used_memory_mib": 130012,
    }
    assert apps[1]["used_memory_mib"] is None


def test_compute_apps_bad_line():
    with pytest.raises(smi.NvidiaSmiParseError, match="no pid"):
        smi.parse_compute_apps("GPU-1, notapid, x, 1\n")


def test_cuda_and_driver_from_header_and_q():
    assert smi.parse_cuda_version(section("nvidia-smi")) == "13.0"
    assert smi.parse_driver_version(section("nvidia-smi")) == "580.159.04"
    q = section("nvidia-smi -q (head)")
    assert smi.parse_cuda_version(q) == "13.0"
    assert smi.parse_driver_version(q) == "580.159.04"
    assert smi.parse_cuda_version("no version here") is None


def test_driver_major():
    assert smi.driver_major("580.159.04") == 580
    assert smi.driver_major("570.86.15") == 570
    assert smi.driver_major(None) is None


@pytest.mark.parametrize("text,unit", [
    ("0::/system.slice/sglang-kimi.service\n", "sglang-kimi.service"),
    ("12:pids:/system.slice/sglang-kimi.service\n1:name=systemd:/system.slice/sglang-kimi.service\n",
     "sglang-kimi.service"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
    ("0::/\n", None),
])
def test_unit_of_cgroup(text, unit):
    assert smi.unit_of_cgroup(text) == unit


def fake_runner(outputs):
    calls = []

    def run(argv):
        calls.append(argv)
        for key, value in outputs.items():
            if key in " ".join(argv[1:]) or (key == "" and len(argv) == 1):
                return value
        return 1, "", "unexpected call"
    return run, calls


def test_gather_real_texts_with_processes():
    apps = "GPU-35f881f8-a197-ce85-2d34-2cd7aa2255fc, 777, python3, 2048\n"
    run, calls = fake_runner({
        "--query-gpu": (0, section("query-gpu"), ""),
        "--query-compute-apps": (0, apps, ""),
        "": (0, section("nvidia-smi"), ""),
    })
    result = smi.gather(run, "/usr/bin/nvidia-smi", lambda path: "0::/system.slice/other.service\n")
    assert result["available"] is True
    assert result["count"] == 2
    assert result["driver_version"] == "580.159.04"
    assert result["driver_major"] == 580
    assert result["cuda_version"] == "13.0"
    assert result["memory_free_mib_min"] == 143156
    assert result["reason"] is None
    assert result["processes"] == [{
        "gpu_uuid": "GPU-35f881f8-a197-ce85-2d34-2cd7aa2255fc", "pid": 777, "process_name": "python3",
        "used_memory_mib": 2048, "gpu_index": 1, "unit": "other.service",
        # every /proc file here reads as the cgroup line: no process named python3 -> not this namespace's pid
        "pid_here": False}]
    assert result["gpus"][1]["processes"][0]["pid"] == 777
    assert result["gpus"][0]["processes"] == []
    assert calls[0][1].startswith("--query-gpu=index,uuid,name,pci.bus_id,memory.total")


def test_gather_driver_missing_gives_reason_not_traceback():
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
    run, _calls = fake_runner({"--query-gpu": (9, message, "")})
    result = smi.gather(run, "/usr/bin/nvidia-smi")
    assert result["gpus"] == [] and result["count"] == 0 and result["available"] is False
    assert "rc=9" in result["reason"] and "couldn't communicate" in result["reason"]


def test_gather_cuda_from_q_when_header_lacks_it():
    run, _calls = fake_runner({
        "--query-gpu": (0, section("query-gpu"), ""),
        "--query-compute-apps": (0, "", ""),
        "-q": (0, section("nvidia-smi -q (head)"), ""),
        "": (0, "no header", ""),
    })
    assert smi.gather(run, "nvidia-smi")["cuda_version"] == "13.0"


def test_no_gpus_shape():
    result = smi.no_gpus("nvidia-smi not found")
    assert result["gpus"] == [] and result["reason"] == "nvidia-smi not found"


def test_gather_mixed_drivers_reports_the_oldest_by_number():
    # a host mid-upgrade: GPU 0 on 575, GPU 1 on 580; and 1000.x must not sort before 580.x as text
    lines = section("query-gpu").strip().splitlines()
    mixed = lines[0].replace("580.159.04", "575.57.08") + "\n" + lines[1] + "\n"
    run, _calls = fake_runner({"--query-gpu": (0, mixed, ""), "--query-compute-apps": (0, "", ""), "": (0, "", "")})
    result = smi.gather(run, "/usr/bin/nvidia-smi")
    assert (result["driver_version"], result["driver_major"]) == ("575.57.08", 575)
    assert sorted(g["driver_version"] for g in result["gpus"]) == ["575.57.08", "580.159.04"]
    newer = lines[0].replace("580.159.04", "1000.10.1") + "\n" + lines[1] + "\n"
    run, _calls = fake_runner({"--query-gpu": (0, newer, ""), "--query-compute-apps": (0, "", ""), "": (0, "", "")})
    assert smi.gather(run, "/usr/bin/nvidia-smi")["driver_major"] == 580


def test_gather_failed_and_unparsable_are_flagged_but_no_gpus_is_not():
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    run, _calls = fake_runner({"--query-gpu": (9, message, "")})
    assert smi.gather(run, "/usr/bin/nvidia-smi")["nvidia_smi_failed"] is True
    # rc=0 but the text is not the CSV we asked for (what the cuda role refused before with its own parser)
    run, _calls = fake_runner({"--query-gpu": (0, message, "")})
    result = smi.gather(run, "/usr/bin/nvidia-smi")
    assert result["nvidia_smi_failed"] is True and "could not parse" in result["reason"]
    run, _calls = fake_runner({"--query-gpu": (0, "", "")})
    result = smi.gather(run, "/usr/bin/nvidia-smi")
    assert result["nvidia_smi_failed"] is False and result["reason"] == "nvidia-smi lists no GPUs"
    assert smi.no_gpus("nvidia-smi not found")["nvidia_smi_failed"] is False
    run, _calls = fake_runner({"--query-gpu": (0, section("query-gpu"), ""), "--query-compute-apps": (0, "", ""),
                               "": (0, section("nvidia-smi"), "")})
    assert smi.gather(run, "/usr/bin/nvidia-smi")["nvidia_smi_failed"] is False


def test_problems_are_not_returned_under_ansibles_own_warnings_key():
    # A result key named 'warnings' is Ansible's (deprecated in ansible-core 2.19: it printed a DEPRECATION
    # WARNING on every run with a GPU, seen on an H200): the module's own problems come back as 'problems'.
    run, _calls = fake_runner({
        "--query-gpu": (0, section("query-gpu"), ""),
        "--query-compute-apps": (9, "", "boom"),
        "": (0, section("nvidia-smi"), ""),
    })
    result = smi.gather(run, "/usr/bin/nvidia-smi", None)
    assert "warnings" not in result
    assert result["problems"] and "rc=9" in result["problems"][0]
