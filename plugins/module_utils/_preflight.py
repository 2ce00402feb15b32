# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight role's read-only checks of an SGLang host, computed in one module run (gpuserve.sglang.sglang_preflight):

- paths: the model and draft directories exist; the log directory's filesystem (the longest device-backed mount
  point above it, as Ansible's mount facts list them: a container's overlay root is none) has the free space;
- gpus: nvidia-smi's answer (_nvidia_smi.read_host): at least tp GPUs, a driver new enough, no process on the GPUs
  that is not the server unit's;
- memory: the KV cache and HiCache plan (_memory_plan_host.plan, SGLang's formulas) fits, planned for after the stop
  of the server's unit when it runs.

check() returns the problems (the role's one assert fails with them, the messages the role has always given), the
notes (what the role shows: the plan, GPUs it could not tie to a process of this host, a check it could not make)
and the facts the role sets (sglang_gpu_info, sglang_memory_plan). Nothing on the host changes. Standard library
only; nvidia-smi, systemctl and journalctl are started through the injected ``run_command``.
Tests: tests/unit/plugins/module_utils/test_preflight.py."""

from __future__ import annotations

import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan_host import plan as memory_plan
from ansible_collections.gpuserve.sglang.plugins.module_utils._nvidia_smi import read_host
from ansible_collections.gpuserve.sglang.plugins.module_utils._proc import read_text

CHECKS = ("paths", "gpus", "memory")
GIB = 1073741824
GEOMETRY_KEYS = ("attention", "kv_lora_rank", "qk_rope_head_dim", "num_layers", "num_kv_heads", "head_dim",
                 "model_dtype")
_OCTAL = re.compile(r"\\([0-7]{3})")


# --- paths and disk -------------------------------------------------------------------------------------------------

def path_problems(model_path, draft_model_path, host):
    """The model path is set, and the model and draft directories exist (one message for the directories)."""
    problems = []
    if not model_path:
        problems.append("sglang_preflight_model_path is empty (set it, or sglang_model_path; or set "
                        "sglang_preflight_check_paths: false to plan from sglang_preflight_model_geometry alone)")
    missing = []
    for label, path in (("Model", model_path), ("Draft model", draft_model_path)):
        if path and not os.path.isdir(path):
            missing.append("%s directory %s %s" % (label, path, "is not a directory" if os.path.lexists(path)
                                                   else "does not exist"))
    if missing:
        problems.append("%s on %s" % ("; ".join(missing), host))
    return problems


def device_mounts(mounts_text):
    """The mount points Ansible's mount facts list (device-backed or network filesystems), from /proc/mounts."""
    points = []
    for line in mounts_text.splitlines():
        fields = [_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field) for field in line.split()]
        if len(fields) < 3:
            continue
        device, mount, fstype = fields[0], fields[1], fields[2]
        if not device.startswith(("/", "\\")) and ":/" not in device or fstype == "none":
            continue
        points.append(mount)
    return points


def log_filesystem(log_dir, points):
    """The longest mount point that is a parent of ``log_dir`` ('/' when none is), and whether it is among
    ``points`` (the device-backed ones): the filesystem a directory that need not exist yet will be on."""
    best = "/"
    target = os.path.normpath(log_dir) + "/"
    for point in points:
        if target.startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best = point
    return best, best in points


def disk_check(log_dir, min_free_gb, mounts_text, statvfs=os.statvfs):
    """(problem or None, note or None) of the free disk for logs."""
    mount, known = log_filesystem(log_dir, device_mounts(mounts_text))
    if not known:
        return None, ("Free disk for the log directory %s not checked: its filesystem is not backed by a device "
                      "(e.g. a container's overlay root)." % log_dir)
    try:
        st = statvfs(mount)
    except OSError as exc:
        return None, "Free disk for the log directory %s not checked: %s" % (log_dir, exc)
    available = st.f_frsize * st.f_bavail
    if available >= int(float(min_free_gb) * GIB):
        return None, None
    return ("Only %.1f GiB free on %s (the filesystem of the log directory %s), %s GiB needed"
            % (available / float(GIB), mount, log_dir, min_free_gb)), None


# --- GPUs -----------------------------------------------------------------------------------------------------------

def _listed(processes, with_unit=True):
    """'GPU <i>: pid <pid> <name> (<MiB> MiB[, unit <unit>])' for each process, joined by '; '."""
    items = []
    for q in processes:
        mib = "?" if q.get("used_memory_mib") is None else q["used_memory_mib"]
        unit = ", unit %s" % (q.get("unit") or "none") if with_unit else ""
        items.append("GPU %s: pid %s %s (%s MiB%s)" % (q.get("gpu_index"), q.get("pid"), q.get("process_name"),
                                                       mib, unit))
    return "; ".join(items)


def _companions(info, p):
    """nvidia-smi's processes of the units in ``p["companion_units"]`` (the Weight Cache Daemon's)."""
    units = set(p.get("companion_units") or [])
    return [q for q in info.get("processes") or [] if units and q.get("unit") in units]


def gpu_checks(info, p, host):
    """(problems, notes) of nvidia-smi's answer ``info`` against the role's variables ``p``."""
    problems, notes = [], []
    if info["count"] == 0 and not p["require_gpus"]:
        notes.append("No GPUs on %s (%s); sglang_preflight_require_gpus is false, so the GPU checks are skipped and "
                     "the memory plan uses the given numbers." % (host, info["reason"]))
    if p["require_gpus"] and info["count"] < p["tp"]:
        found = (" (%s)" % info["reason"] if info["reason"]
                 else ": %s" % ", ".join(str(g.get("name")) for g in info["gpus"]))
        problems.append("%s has %d GPU(s)%s, --tp %d needs %d" % (host, info["count"], found, p["tp"], p["tp"]))
    if info["count"] > 0 and int(info.get("driver_major") or 0) < p["min_driver"]:
        needs = "13.0 needs >= 580" if p["min_driver"] == 580 else "needs >= %d" % p["min_driver"]
        problems.append("NVIDIA driver %s on %s is older than %d (CUDA %s); the driver reports CUDA %s"
                        % (info["driver_version"], host, p["min_driver"], needs, info["cuda_version"]))
    service = p["service_name"]
    unit = service if service.endswith(".service") else service + ".service"
    companions = _companions(info, p)
    if companions:
        notes.append("The server's companion units hold GPU memory (the Weight Cache Daemon: the weights the server "
                     "maps): %s" % _listed(companions))
    own = set([unit] + list(p.get("companion_units") or []))
    # pid_here false: a PID of another PID namespace (this host is a container); neither foreign nor the server's
    foreign = [q for q in info["processes"] if q.get("unit") not in own and q.get("pid_here") is not False]
    unverified = [q for q in info["processes"] if q.get("pid_here") is False]
    if unverified:
        notes.append("nvidia-smi on %s lists PIDs that are not this host's processes (another PID namespace: a "
                     "container?): %s. They are not counted as foreign, not stopped, and their memory is not counted "
                     "as the server's." % (host, _listed(unverified, with_unit=False)))
    text = _listed(foreign)
    if foreign and not p["allow_foreign_gpu_processes"]:
        problems.append("%d process(es) on the GPUs of %s are not %s: %s. Stop them, or set "
                        "sglang_preflight_allow_foreign_gpu_processes: true" % (len(foreign), host, service, text))
    elif foreign:
        notes.append("Foreign GPU processes (allowed): %s" % text)
    return problems, notes


# --- memory ---------------------------------------------------------------------------------------------------------

def plan_params(p, gpus):
    """sglang_memory_plan's options from the role's variables (an empty string or mapping is not given)."""
    geometry = p["model_geometry"] or None
    if geometry:
        unknown = sorted(set(geometry) - set(GEOMETRY_KEYS))
        if unknown:
            raise mp.PlanError("sglang_preflight_model_geometry: unknown keys %s (known: %s)"
                               % (", ".join(unknown), ", ".join(GEOMETRY_KEYS)))
        geometry = dict({"model_dtype": "bfloat16"}, **geometry)
    if not p["model_path"] and not geometry:
        raise mp.PlanError("one of the following is required: model_path, geometry")
    return dict(tp=p["tp"], mem_fraction_static=p["mem_fraction_static"], hicache=p["hicache"],
                ratio=p["hicache_ratio"], size_gb=p["hicache_size_gb"], page_size=p["page_size"],
                kv_dtype=p["kv_dtype"], model_path=p["model_path"] or None, geometry=geometry,
                release=p["release"] or None, draft_model_path=p["draft_model_path"] or None, hybrid=p["hybrid"],
                gpus=gpus, gpu_memory_gb=p["gpu_memory_gb"], gpu_overhead_gb=p["gpu_overhead_gb"],
                weights_gb_per_gpu=p["weights_gb_per_gpu"], mem_available_gb=p["mem_available_gb"],
                compare=p["compare"], running_service=p["service_name"] if p["plan_after_stop"] else None)


def memory_checks(info, p, host, run_command, warn=None, read=read_text):
    """(problems, notes, plan or None) of the memory plan."""
    if info["count"] == 0 and p["gpu_memory_gb"] is None:
        return ["No GPUs on %s (%s) and sglang_preflight_gpu_memory_gb is not set: give the free GiB per GPU to plan "
                "for (an idle 96 GB RTX PRO 6000 Blackwell has about 95.0)" % (host, info["reason"])], [], None
    said = []
    try:
        params = plan_params(p, info["gpus"])
    except mp.PlanError as exc:
        return [str(exc)], said, None
    if p.get("companion_units"):
        if _companions(info, p) and params["weights_gb_per_gpu"] is not None:
            pass   # the weights per GPU as given
        elif _companions(info, p):
            # resident in the daemon: nvidia-smi's memory.free is already without them
            params["weights_gb_per_gpu"] = 0.0
            said.append("Memory plan: the weights are the Weight Cache Daemon's (%s), already out of memory.free; "
                        "not counted again" % ", ".join(p["companion_units"]))
        else:
            params["gpu_overhead_gb"] = params["gpu_overhead_gb"] * 2
            said.append("Memory plan: the Weight Cache Daemon (%s) is not running yet: it loads the weights the server "
                        "maps and holds one more CUDA context (%.2f GiB overhead per GPU in all)"
                        % (", ".join(p["companion_units"]), params["gpu_overhead_gb"]))
    try:
        plan = memory_plan(params, run_command, read=read, warn=warn)
    except mp.PlanError as exc:
        return [str(exc)], said, None
    running = plan.get("running_server") or {}
    views = running.get("views") or [] if running.get("running") else []
    notes = said + list(views) + [plan["summary"]] + list(plan["compare_table"])
    if plan["fits"]:
        return [], notes, plan
    stop = (" even after the stop of %s (%s)" % (running["unit"], "; ".join(views))) if running.get("running") else ""
    return ["Memory plan for %s does not fit%s: %s" % (host, stop, "; ".join(plan["problems"]))], notes, plan


# --- the whole preflight --------------------------------------------------------------------------------------------

def check(p, run_command, nvidia_run, get_bin_path, host, warn=None, read=read_text, mounts_path="/proc/mounts",
          statvfs=os.statvfs):
    """Every check ``p["checks"]`` selects: {problems, notes, gpu_info, memory_plan} (the last two {} when not run).
    ``run_command`` starts systemctl and journalctl (the running unit), ``nvidia_run`` nvidia-smi (argv -> rc, out,
    err), ``get_bin_path`` finds nvidia-smi."""
    problems, notes, gpu_info, plan = [], [], {}, {}
    checks = p["checks"]
    if "paths" in checks:
        if p["check_paths"]:
            problems += path_problems(p["model_path"], p["draft_model_path"], host)
        problem, note = disk_check(p["log_dir"], p["min_free_disk_gb"], read(mounts_path) or "", statvfs)
        problems += [problem] if problem else []
        notes += [note] if note else []
    if "gpus" in checks or "memory" in checks:
        gpu_info = read_host(p["nvidia_smi"], get_bin_path, nvidia_run, read)
        for problem in gpu_info.get("problems") or []:
            if warn is not None:
                warn(problem)
    if "gpus" in checks:
        found, said = gpu_checks(gpu_info, p, host)
        problems += found
        notes += said
    if "memory" in checks:
        found, said, plan = memory_checks(gpu_info, p, host, run_command, warn=warn, read=read)
        problems += found
        notes += said
    return {"problems": problems, "notes": notes, "gpu_info": gpu_info, "memory_plan": plan or {}}
