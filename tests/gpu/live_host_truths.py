# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU-machine truths behind the sandboxed unit and the live-host memory plan (run by live_host_truths.sh).

One CUDA process does what an SGLang rank does at start (CUDA context, a large device allocation, pinned host
memory as HiCache allocates it, a one-rank NCCL communicator and an all-reduce), then, while it holds all of it,
prints as JSON:
- which device nodes it has open (the unit's DeviceAllow= list must cover them), with /proc/devices names;
- its own PID, its cgroup, and what `nvidia-smi --query-compute-apps` reports for it (the live-host plan adds back
  the memory of the unit's own PIDs: the PIDs must match, or the plan must say it cannot tell);
- the memory lock limit it ran under and whether pinning worked (LimitMEMLOCK in the unit).
Holds for HOLD_SECONDS (default 0) after printing, so a caller can look at it from outside.
"""
import json
import os
import resource
import subprocess
import sys
import time


def fds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("/dev/"):
            out.setdefault(target, 0)
            out[target] += 1
    return out


def dev_numbers(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))


def proc_devices():
    names = {}
    section = None
    with open("/proc/devices") as fh:
        for line in fh:
            line = line.strip()
            if line.endswith("devices:"):
                section = line.split()[0].lower()
                continue
            parts = line.split()
            if len(parts) == 2 and section == "character":
                names[parts[0]] = parts[1]
    return names


def main():
    result = {"pid": os.getpid(), "uid": os.getuid()}
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    result["rlimit_memlock"] = [soft, hard]
    with open("/proc/self/cgroup") as fh:
        result["cgroup"] = fh.read().strip()
    import torch
    import torch.distributed as dist

    torch.cuda.init()
    dev = torch.device("cuda", 0)
    held = torch.empty(int(float(os.environ.get("DEVICE_GIB", "8")) * (1 << 30)), dtype=torch.uint8, device=dev)
    held.fill_(1)
    pinned_gib = float(os.environ.get("PINNED_GIB", "4"))
    try:
        pinned = torch.empty(int(pinned_gib * (1 << 30)), dtype=torch.uint8, pin_memory=True)
        pinned.fill_(2)
        result["pinned"] = {"gib": pinned_gib, "ok": bool(pinned.is_pinned())}
    except Exception as exc:  # the point is to see what CUDA says under a small memlock limit
        result["pinned"] = {"gib": pinned_gib, "ok": False, "error": str(exc)[:400]}
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
        t = torch.ones(1 << 20, device=dev)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        result["nccl"] = {"ok": True, "sum0": float(t[0].item())}
    except Exception as exc:
        result["nccl"] = {"ok": False, "error": str(exc)[:400]}
    torch.cuda.synchronize()
    names = proc_devices()
    opened = fds()
    result["device_nodes_open"] = {}
    for path, count in sorted(opened.items()):
        num = dev_numbers(path)
        major = num.split(":")[0] if num else None
        result["device_nodes_open"][path] = {"fds": count, "dev": num, "proc_devices_name": names.get(major)}
    result["proc_devices_nvidia"] = {k: v for k, v in names.items() if "nvidia" in v}
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, check=False)
    result["nvidia_smi_compute_apps"] = q.stdout.strip().splitlines()
    result["nvidia_smi_sees_own_pid"] = any(line.split(",")[0].strip() == str(os.getpid()) for line in result["nvidia_smi_compute_apps"])
    print("LIVE_HOST_TRUTHS " + json.dumps(result, sort_keys=True), flush=True)
    time.sleep(float(os.environ.get("HOLD_SECONDS", "0")))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
