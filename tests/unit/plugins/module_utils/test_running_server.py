# SPDX-License-Identifier: GPL-3.0-or-later
"""What stopping the running server gives back (issue 13): real nvidia-smi texts, SGLang 0.5.9's journal lines,
cgroup v2 files, and the reference host's "can we do ratio 4 while ratio 2 runs?"."""
import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
from ansible_collections.gpuserve.sglang.plugins.module_utils import _nvidia_smi as smi
from ansible_collections.gpuserve.sglang.plugins.module_utils import _running_server as rs

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu-host-texts")
GEOMETRY = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 61}
UNIT = "sglang-kimi.service"
GROUP = "/system.slice/sglang-kimi.service"
INVOCATION = "8f2d6c1e0a7b4c3d9e8f7a6b5c4d3e2f"
STAMP = "2026-11-29 17:54:36"


def section(name, fixture="running.txt"):
    with open(os.path.join(FIXTURES, fixture)) as handle:
        text = handle.read()
    match = re.search(r"^### %s\n(.*?)(?=^### |\Z)" % re.escape(name), text, re.S | re.M)
    assert match, name
    return match.group(1)


def journal(tp=8, hicache_gb=22.39, weights_gb=72.30):
    """``journalctl -o cat`` of one running invocation of the reference host (SGLang 0.5.9's texts)."""
    lines = ["[%s] server_args=ServerArgs(model_path='/models/Kimi-K2.5-INT4', tp_size=%d)" % (STAMP, tp)]
    for rank in range(tp):
        lines.append("[%s TP%d] Load weight end. elapsed=412.53 s, type=KimiK25ForConditionalGeneration, "
                     "dtype=torch.bfloat16, avail mem=21.83 GB, mem usage=%.2f GB." % (STAMP, rank, weights_gb))
        lines.append("[%s TP%d] Capture cuda graph end. Time elapsed: 38.20 s. mem usage=1.21 GB. avail mem=10.20 GB."
                     % (STAMP, rank))
    for rank in range(tp):
        lines.append("[%s TP%d] Allocating %.2f GB host memory for hierarchical KV cache." % (STAMP, rank, hicache_gb))
    lines.append("[%s] The server is fired up and ready to roll!" % STAMP)
    return "\n".join(lines) + "\n"


def reference_host(server_mib=95000, pids=None, extra_apps=""):
    """8 x RTX PRO 6000 Blackwell (97,887 MiB; 615 MiB reserved by the driver) with SGLang TP 8 on them."""
    pids = pids or [4101 + i for i in range(8)]
    gpu_lines = []
    app_lines = []
    for i in range(8):
        uuid = "GPU-00000000-0000-0000-0000-00000000000%d" % i
        used = 615 + server_mib
        gpu_lines.append("%d, %s, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:%02X:00.0, 97887, %d, %d, "
                         "580.159.04, 12.0, Enabled, 600.00, 40" % (i, uuid, 0x10 + i, used, 97887 - used))
        app_lines.append("%s, %d, /opt/sglang/venv/bin/python3, %d" % (uuid, pids[i], server_mib))
    gpus = smi.parse_query_gpu("\n".join(gpu_lines))
    apps = smi.parse_compute_apps("\n".join(app_lines) + "\n" + extra_apps)
    return smi.assemble(gpus, apps)


def fake_host(files, show, journal_text, journal_rc=0):
    """``run`` and ``read_file`` over fixed texts (the formats systemctl, journalctl and /proc, /sys print)."""
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0] == "systemctl":
            return 0, show, ""
        if argv[0] == "journalctl":
            return journal_rc, journal_text, ""
        return 127, "", "no such command"

    def read_file(path):
        return files.get(path)

    return run, read_file, calls


def server_files(pids, memory_current="31457280\n", file_bytes=20971520):
    files = {
        "/sys/fs/cgroup%s/cgroup.procs" % GROUP: "".join("%d\n" % pid for pid in pids),
        "/sys/fs/cgroup%s/memory.current" % GROUP: memory_current,
        "/sys/fs/cgroup%s/memory.stat" % GROUP: "anon 10485760\nfile %d\nkernel 1048576\n" % file_bytes,
    }
    for pid in pids:
        files["/proc/%d/status" % pid] = "Name:\tpython3\nPid:\t%d\n" % pid
        files["/proc/%d/comm" % pid] = "python3\n"
        files["/proc/%d/cmdline" % pid] = "/opt/sglang/venv/bin/python3\0-m\0sglang.launch_server\0"
        files["/proc/%d/cgroup" % pid] = "0::%s\n" % GROUP
    return files


SHOW = ("Id=%s\nLoadState=loaded\nActiveState=active\nSubState=running\nMainPID=4100\nInvocationID=%s\n"
        "ControlGroup=%s\n" % (UNIT, INVOCATION, GROUP))


def test_journal_numbers_of_the_running_invocation():
    lines = journal().splitlines()
    weights = rs.weights_from_lines(lines)
    assert len(weights) == 8 and set(weights.values()) == {72.30}
    # the CUDA graph's "mem usage=1.21 GB" is not the weights
    assert rs.weights_from_lines(["[%s TP0] Capture cuda graph end. Time elapsed: 38.20 s. mem usage=1.21 GB. "
                                  "avail mem=10.20 GB." % STAMP]) == {}
    pools = rs.hicache_from_lines(lines)
    assert round(sum(pools.values()), 2) == 179.12


def test_real_nvidia_smi_process_is_tied_to_its_unit_and_name():
    # The real H200 capture: pid 426 "python3" (exe /usr/bin/python3.12) holds 20,998 MiB of GPU 0.
    gpus = smi.parse_query_gpu(section("query-gpu (server running)"))
    apps = smi.parse_compute_apps(section("query-compute-apps (server running)").replace("rc=0", ""))
    info = smi.assemble(gpus, apps)
    assert [(p["pid"], p["process_name"], p["used_memory_mib"]) for p in info["processes"]] == [(426, "python3", 20998)]
    identity = {"comm": "python3", "argv0": "python3", "exe": "/usr/bin/python3.12", "cgroup": GROUP}
    mine = rs.classify(info["processes"], {426}, GROUP, {426: identity})
    assert mine[0]["owner"] == "server"
    rows = rs.gpu_after_stop(info["gpus"], mine)
    assert rows[0]["memory_free_mib_now"] == 122150
    assert rows[0]["memory_free_mib_after_stop"] == 122150 + 20998
    # the same PID in another cgroup: foreign (may be stopped by sglang_free_gpus)
    other = dict(identity, cgroup="/user.slice/user-0.slice/session-3.scope")
    assert rs.classify(info["processes"], set(), GROUP, {426: other})[0]["owner"] == "foreign"


def test_container_pids_are_neither_the_servers_nor_foreign():
    # A host in a container: nvidia-smi prints the PIDs of the host's namespace.
    info = reference_host(pids=[880001 + i for i in range(8)])
    # 880001 is not in this /proc; 880002 is, but it is a shell here: both unverified
    identities = {880002: {"comm": "bash", "argv0": "-bash", "exe": "/usr/bin/bash", "cgroup": GROUP}}
    classified = rs.classify(info["processes"], {880002}, GROUP, identities)
    assert [p["owner"] for p in classified] == ["unverified"] * 8
    assert "another PID namespace" in classified[0]["why"] and "another PID namespace" in classified[1]["why"]
    rows = rs.gpu_after_stop(info["gpus"], classified)
    assert all(r["server_mib"] == 0 and r["unverified_mib"] == 95000 for r in rows)
    assert all(r["memory_free_mib_after_stop"] == r["memory_free_mib_now"] for r in rows)


def test_name_match_rules():
    assert rs.name_matches("/opt/sglang/venv/bin/python3", {"comm": "python3", "argv0": "/root/ml-env/bin/python3"})
    assert rs.name_matches("python3", {"comm": "python3.12"})
    assert rs.name_matches("sglang::scheduler_TP0", {"comm": "sglang::schedul"})  # comm is cut to 15
    assert not rs.name_matches("python3", {"comm": "sleep", "argv0": "sleep", "exe": "/usr/bin/sleep"})
    assert not rs.name_matches("", {"comm": "python3"})


def test_host_gives_back_the_larger_of_pool_and_cgroup_memory():
    pools = dict((rank, 22.39) for rank in range(8))
    host = rs.host_after_stop(217 * mp.GIB, pools, 31457280, {"file": 20971520})
    assert host["hicache_pool_bytes"] == 179120000000
    assert host["cgroup_memory_not_cache_bytes"] == 10485760
    assert host["freed_bytes"] == 179120000000 and host["freed_from"] == "HiCache pool"
    # the pool charged to the cgroup (memory.current holds it): counted once, not twice
    charged = rs.host_after_stop(217 * mp.GIB, pools, 179120000000 + 3 * mp.GIB, {"file": mp.GIB})
    assert charged["freed_bytes"] == 179120000000 + 2 * mp.GIB and charged["freed_from"] == "cgroup memory"
    assert rs.host_after_stop(100, {}, None, {})["freed_bytes"] == 0


def test_reference_ratio4_while_ratio2_runs_is_planned_after_the_stop():
    """Issue 13's numbers: ratio 2 pins ~179 GB of 396 GiB, MemAvailable ~217 GiB, ratio 4 needs ~358 GB."""
    pids = [4101 + i for i in range(8)]
    info = reference_host(pids=pids)
    run, read_file, calls = fake_host(server_files(pids), SHOW, journal())
    server = rs.gather(run, read_file, rs.unit_name("sglang-kimi"), info)
    assert server["running"] and server["unit_pids"] == pids
    assert ["journalctl", "--no-pager", "--quiet", "-o", "cat", "_SYSTEMD_INVOCATION_ID=" + INVOCATION] in calls
    assert [p["owner"] for p in server["processes"]] == ["server"] * 8
    assert server["weights_gb_per_gpu"] == 72.30

    rows = rs.gpu_after_stop(info["gpus"], server["processes"])
    free_now = min(r["memory_free_mib_now"] for r in rows)
    free_after = min(r["memory_free_mib_after_stop"] for r in rows)
    assert (free_now, free_after) == (2272, 97272)  # the idle card's 97,272 MiB again
    host = rs.host_after_stop(217 * mp.GIB, server["hicache_gb_by_rank"], server["memory_current_bytes"],
                              {"file": server["memory_stat_file_bytes"]})
    base = dict(tp=8, mem_fraction_static=0.88, geometry=GEOMETRY, total_gib=free_after / 1024.0 - 1.0,
                weights_gib=server["weights_gb_per_gpu"], mem_available_bytes=host["mem_available_bytes_after_stop"],
                ratio=4.0)
    after = mp.make_plan(**base)
    assert after["fits"], after["problems"]
    assert abs(after["host_pool_gb_total"] - 357.7) < 1
    server = rs.views(server, base, free_now / 1024.0 - 1.0, 217 * mp.GIB, rows, host, after)
    # today's numbers refuse it: the GPUs are full and the pool is pinned
    assert server["plan_now"]["fits"] is False
    assert any("no room for the KV cache" in p for p in server["plan_now"]["problems"])
    text = "\n".join(server["views"])
    assert "GPU now: smallest memory.free of GPUs 0,1,2,3,4,5,6,7 = 2272 MiB" in text
    assert "= 97272 MiB (94.99 GiB)" in text
    assert "RAM now: MemAvailable 233.0 GB (217.0 GiB); after the stop: + 179.1 GB (the larger of: HiCache pool " \
           "179.1 GB over 8 rank(s), cgroup memory less cache 0.0 GB) = 412.1 GB (383.8 GiB)" in text
    assert "Now: does not fit (no room for the KV cache" in text and text.endswith("After the stop: fits")


def test_ram_alone_decides_after_the_stop():
    # GPUs given by hand (an idle card's number): the RAM view alone refuses now and passes after the stop
    base = dict(tp=8, mem_fraction_static=0.88, geometry=GEOMETRY, total_gib=97272 / 1024.0 - 1.0, weights_gib=72.3,
                ratio=4.0)
    now = mp.make_plan(**dict(base, mem_available_bytes=217 * mp.GIB))
    assert not now["fits"] and "MemAvailable is 233.0 GB" in now["problems"][0]
    host = rs.host_after_stop(217 * mp.GIB, dict((r, 22.39) for r in range(8)), None, {})
    assert mp.make_plan(**dict(base, mem_available_bytes=host["mem_available_bytes_after_stop"]))["fits"]


def test_a_unit_that_is_not_running_adds_nothing():
    show = "Id=%s\nActiveState=inactive\nSubState=dead\nMainPID=0\nInvocationID=\nControlGroup=\n" % UNIT
    run, read_file, calls = fake_host({}, show, "")
    server = rs.gather(run, read_file, UNIT, reference_host())
    assert server["running"] is False and server["active_state"] == "inactive"
    assert [argv[0] for argv in calls] == ["systemctl"]
    server = rs.views(server, {}, 1.0, 0, [], None, None)
    assert server["views"] == ["sglang-kimi.service is inactive: nothing to add back"]


def test_what_could_not_be_read_is_said():
    pids = [4101 + i for i in range(8)]
    files = server_files(pids)
    del files["/sys/fs/cgroup%s/memory.current" % GROUP]
    run, read_file, _calls = fake_host(files, SHOW, "", journal_rc=1)
    server = rs.gather(run, read_file, UNIT, reference_host(pids=pids, extra_apps=(
        "GPU-00000000-0000-0000-0000-000000000000, 777777, python3, 2048\n")))
    notes = " ".join(server["notes"])
    assert "no memory.current" in notes
    assert "cannot read the journal of invocation %s" % INVOCATION in notes
    assert "1 process(es) this host cannot tie to a process it sees (GPU 0 pid 777777 python3 2048 MiB)" in notes
    assert server["weights_gb_per_gpu"] is None and server["hicache_gb_by_rank"] == {}


def test_nvidia_gpu_info_says_which_pids_are_this_hosts():
    """gather() marks pid_here: the real capture's pid 426 "python3" is here; a host-namespace PID is not."""
    apps = section("query-compute-apps (server running)").replace("rc=0", "") + \
        "GPU-69251176-cd04-86e9-8be6-e34f4783896b, 3999999, python3, 512\n"
    outputs = {"--query-gpu": section("query-gpu (server running)"), "--query-compute-apps": apps,
               "": section("nvidia-smi (server running)")}

    def run(argv):
        for key, value in outputs.items():
            if (key and key in " ".join(argv[1:])) or (not key and len(argv) == 1):
                return 0, value, ""
        return 1, "", ""

    files = {"/proc/426/status": "Name:\tpython3\n", "/proc/426/comm": "python3\n",
             "/proc/426/cmdline": "python3\0hold.py\0", "/proc/426/cgroup": "0::/system.slice/sglang-kimi.service\n"}
    result = smi.gather(run, "/usr/bin/nvidia-smi", files.get)
    assert [(p["pid"], p["unit"], p["pid_here"]) for p in result["processes"]] == [
        (426, "sglang-kimi.service", True), (3999999, None, False)]


def test_cgroup2_mount_point():
    unified = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n"
    hybrid = ("tmpfs /sys/fs/cgroup tmpfs ro 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
              "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n")
    assert rs.cgroup2_root(unified) == "/sys/fs/cgroup"
    assert rs.cgroup2_root(hybrid) == "/sys/fs/cgroup/unified"
    assert rs.cgroup2_root(None) == "/sys/fs/cgroup"
    pids = [4101 + i for i in range(8)]
    files = dict((path.replace("/sys/fs/cgroup", "/sys/fs/cgroup/unified"), text)
                 for path, text in server_files(pids).items())
    files["/proc/self/mounts"] = hybrid
    run, read_file, _calls = fake_host(files, SHOW, journal())
    server = rs.gather(run, read_file, UNIT, reference_host(pids=pids))
    assert server["unit_pids"] == pids and server["memory_current_bytes"] == 31457280


def test_journal_of_a_long_running_server_is_read_bounded(tmp_path):
    """Day 200: the invocation's journal holds millions of lines after the start-up ones. The module reads it with
    rs.bounded_run: the first JOURNAL_MAX_LINES lines (start-up lines first), then journalctl is stopped; the plan
    still has the weights, and says it read part of the journal. (The old read waited for journalctl to end.)"""
    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\n"
                    "echo '[2026-12-01 10:00:00 TP0] Load weight end. elapsed=40.12 s, type=KimiK25ForConditionalGeneration,"
                    " dtype=torch.bfloat16, avail mem=20.50 GB, mem usage=72.30 GB.'\n"
                    "exec yes '[2026-12-01 10:05:00] Decode batch, #running-req: 30, #token: 100000'\n")
    fake.chmod(0o755)
    pids = [4101 + i for i in range(8)]
    run, read_file, calls = fake_host(server_files(pids), SHOW, "")
    server = rs.gather(run, read_file, rs.unit_name("sglang-kimi"), reference_host(pids=pids), journalctl=str(fake),
                       journal_run=rs.bounded_run)
    assert not [c for c in calls if c[0] == str(fake)]   # read by bounded_run, not by the module's run
    assert server["weights_gb_per_gpu"] == 72.30
    assert any("read the first %d lines" % rs.JOURNAL_MAX_LINES in note for note in server["notes"]), server["notes"]
