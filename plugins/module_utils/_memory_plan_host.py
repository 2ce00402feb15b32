# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The memory plan of one host, from what the host says: the model's geometry (its config.json or given), the GPU
memory (nvidia_gpu_info's gpus or given), the weights per GPU (given, the running invocation's journal, or the weight
files / tp), MemAvailable (given or /proc/meminfo) and, when the server's unit runs, what its stop gives back.

One function, plan(), shared by the module sglang_memory_plan (the plan alone) and the module sglang_preflight (the
preflight role's one module run): _memory_plan.make_plan does the arithmetic, _running_server reads the running
unit. Input it cannot plan from raises _memory_plan.PlanError with the message the module fails with. Standard
library only; ``run_command`` (systemctl, journalctl) and ``read`` are injectable."""

from __future__ import annotations

import os

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
from ansible_collections.gpuserve.sglang.plugins.module_utils import _running_server as rs
from ansible_collections.gpuserve.sglang.plugins.module_utils._proc import read_text

# The options of sglang_memory_plan that plan() reads, with the module's defaults (for callers that build params).
DEFAULTS = dict(tp=None, mem_fraction_static=None, hicache=True, ratio=mp.PLANNING_ASSUMPTIONS["hicache_ratio"],
                size_gb=0, page_size=mp.PLANNING_ASSUMPTIONS["page_size"], kv_dtype="auto", model_path=None,
                geometry=None, release=None, draft_model_path=None, draft_geometry=None, gpus=None,
                gpu_memory_gb=None, gpu_overhead_gb=1.0, weights_gb_per_gpu=None, mem_available_gb=None,
                compare=[], running_service=None, hybrid={})


def _gpu_memory(params, sources, warn, after_stop=None):
    """GiB SGLang starts from. ``after_stop``: rows of rs.gpu_after_stop (the running server's memory back)."""
    if params["gpu_memory_gb"] is not None:
        sources["gpu_memory"] = "given (gpu_memory_gb)"
        return params["gpu_memory_gb"] - params["gpu_overhead_gb"]
    if after_stop is not None:
        free_after = dict((r["index"], r["memory_free_mib_after_stop"]) for r in after_stop)
        params = dict(params)
        params["gpus"] = [dict(g, memory_free_mib=free_after.get(g.get("index"), g.get("memory_free_mib")))
                          for g in params["gpus"] or []]
    gpus = params["gpus"] or []
    if not gpus:
        raise mp.PlanError("no GPU memory to plan from: give gpu_memory_gb (GiB free per GPU) or gpus "
                           "(the gpus list of gpuserve.sglang.nvidia_gpu_info); this host reports no GPUs")
    gpus = sorted(gpus, key=lambda g: g.get("index", 0))[:params["tp"]]
    free = [g.get("memory_free_mib") for g in gpus if g.get("memory_free_mib") is not None]
    if not free:
        raise mp.PlanError("the gpus list has no memory_free_mib values")
    if len(gpus) < params["tp"] and warn is not None:
        warn("planning TP %d with the memory of %d GPUs" % (params["tp"], len(gpus)))
    sources["gpu_memory"] = "nvidia_gpu_info: smallest memory.free%s of GPUs %s = %d MiB, less %.2f GiB overhead" % (
        " after the stop" if after_stop is not None else "", ",".join(str(g.get("index")) for g in gpus), min(free),
        params["gpu_overhead_gb"])
    return min(free) / 1024.0 - params["gpu_overhead_gb"]


def _geometries(params, sources):
    """(geometry, draft geometry or None) from the given geometry or the models' config.json."""
    if params["geometry"]:
        geometry = mp.normalize_geometry(params["geometry"])
        sources["geometry"] = "given (geometry)"
    else:
        geometry = mp.geometry_from_config(mp.load_model_config(params["model_path"]))
        sources["geometry"] = "config.json of %s" % params["model_path"]
    draft_geometry = None
    if params["draft_geometry"]:
        draft_geometry = mp.normalize_geometry(params["draft_geometry"])
        sources["draft_geometry"] = "given (draft_geometry)"
    elif params["draft_model_path"] and mp.release_rules(params["release"])[0]["hicache_draft_host_pool"]:
        try:
            draft_geometry = mp.geometry_from_config(mp.load_model_config(params["draft_model_path"]))
            sources["draft_geometry"] = "config.json of %s" % params["draft_model_path"]
        except mp.PlanError as exc:
            sources["draft_geometry"] = "none: the draft model's host pool is not counted (%s)" % exc
    return geometry, draft_geometry


def _weights(params, running, sources):
    weights = params["weights_gb_per_gpu"]
    if weights is not None:
        sources["weights"] = "given (weights_gb_per_gpu)"
    elif running and running["running"] and running.get("weights_gb_per_gpu"):
        weights = running["weights_gb_per_gpu"]
        sources["weights"] = ("the running invocation's journal: Load weight end ... mem usage=%.2f GB (largest of "
                              "%d rank(s))" % (weights, len(running["weights_gb_by_rank"])))
    else:
        size = mp.model_files_bytes(params["model_path"])
        if not size:
            raise mp.PlanError("weights_gb_per_gpu not given and no weight files (*.safetensors, *.bin) under "
                               "model_path %r to estimate it from" % params["model_path"])
        weights = size / float(mp.GIB) / params["tp"]
        sources["weights"] = "estimated: %.1f GiB of weight files / tp %d" % (size / float(mp.GIB), params["tp"])
    return weights


def _mem_available(params, sources, meminfo_path):
    if params["mem_available_gb"] is not None:
        sources["mem_available"] = "given (mem_available_gb)"
        return int(params["mem_available_gb"] * mp.GIB)
    try:
        with open(meminfo_path) as handle:
            meminfo = mp.parse_meminfo(handle.read())
    except (IOError, OSError) as exc:
        raise mp.PlanError("cannot read /proc/meminfo (%s); give mem_available_gb" % exc)
    mem = meminfo.get("MemAvailable")
    if mem is None:
        raise mp.PlanError("/proc/meminfo has no MemAvailable; give mem_available_gb")
    sources["mem_available"] = "/proc/meminfo MemAvailable"
    return mem


def plan(params, run_command, read=read_text, warn=None, meminfo_path="/proc/meminfo"):
    """The module sglang_memory_plan's result (without ``changed``) for ``params`` (its options, DEFAULTS filled
    in). Raises mp.PlanError for input it cannot plan from."""
    params = dict(DEFAULTS, **params)
    sources = {}
    geometry, draft_geometry = _geometries(params, sources)
    running = None
    if params["running_service"]:
        try:
            unit = rs.unit_name(params["running_service"])
        except ValueError as exc:
            raise mp.PlanError("running_service: %s" % exc)
        processes = [p for g in params["gpus"] or [] for p in g.get("processes") or []]
        running = rs.gather(run_command, read, unit, {"processes": processes}, readlink=os.readlink,
                            journal_run=rs.bounded_run)
    after_stop = None
    if running and running["running"] and params["gpu_memory_gb"] is None and params["gpus"]:
        after_stop = rs.gpu_after_stop(params["gpus"], running["processes"])
    total_now = _gpu_memory(params, {}, warn)
    total_gib = _gpu_memory(params, sources, warn, after_stop)
    weights = _weights(params, running, sources)
    mem = mem_now = _mem_available(params, sources, meminfo_path)
    host = None
    if running and running["running"]:
        host = rs.host_after_stop(mem_now, running["hicache_gb_by_rank"], running["memory_current_bytes"],
                                  {"file": running["memory_stat_file_bytes"] or 0})
        mem = host["mem_available_bytes_after_stop"]
        sources["mem_available"] += " + what stopping %s frees (%s)" % (running["unit"], host["freed_from"])
    base = dict(tp=params["tp"], mem_fraction_static=params["mem_fraction_static"], geometry=geometry,
                total_gib=total_gib, weights_gib=weights, mem_available_bytes=mem, hicache=params["hicache"],
                ratio=params["ratio"], size_gb=params["size_gb"], kv_dtype=params["kv_dtype"],
                page_size=params["page_size"], release=params["release"], draft_geometry=draft_geometry,
                hybrid=params["hybrid"])
    result = mp.make_plan(**base)
    rows, plans, table = mp.compare(base, params["compare"])
    if running is not None:
        running = rs.views(running, base, total_now, mem_now, after_stop, host, result)
    result.pop("name", None)
    if running is not None:
        result["running_server"] = running
        if running["running"]:
            result["summary"] = "Planned for after the stop of %s (now: %s). %s" % (
                running["unit"], "fits" if running["plan_now"]["fits"] else "does not fit", result["summary"])
    result.update(sources=sources, compare=rows, compare_plans=plans, compare_table=table)
    return result
