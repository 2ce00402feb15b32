# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What stopping the running server gives back: GPU memory of its own processes, its HiCache pool, its cgroup.

Private to the collection. A redeploy of a host that serves is planned on the host "after the stop": the
memory the unit's own processes hold is added back to what nvidia-smi and /proc/meminfo say is free now.

- GPU: each nvidia-smi compute app whose PID is in the unit's cgroup (``cgroup.procs`` of its ControlGroup,
  or ``/proc/<pid>/cgroup`` naming that group) AND whose ``/proc/<pid>`` is the process nvidia-smi names
  (comm / argv[0] / exe) is the server's: its ``used_memory`` comes back. A PID that is not in this host's
  /proc, or whose process here has another name, belongs to another PID namespace (a host in a container
  sees the PIDs of the host): it is ``unverified`` - neither the server's (nothing is added back) nor a
  foreign process to kill; it is reported as seen.
- Host RAM: the pinned HiCache pool (the running invocation's ``Allocating X GB host memory`` lines, one per
  rank, 10^9 bytes) and the cgroup's memory (``memory.current`` less its page cache, ``memory.stat`` file,
  which MemAvailable already counts as reclaimable). Pinned pages may or may not be charged to the cgroup
  (cudaHostAlloc'd memory is allocated by the driver), so the two are not added: the larger one counts.
  That never over-states what the stop frees.
- Weights per GPU: the largest ``mem usage=`` of the invocation's ``Load weight end`` lines (GiB).

Pure functions over text; ``gather`` takes ``run(argv) -> (rc, out, err)`` and ``read_file(path) -> str|None``.
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc
from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import unit_name  # re-exported  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import parse_show

GIB = 1 << 30
GB = 1000 ** 3
MIB = 1 << 20

# model_executor/model_runner.py (SGLang 0.5.9), once per rank:
# "Load weight end. elapsed=412.53 s, type=..., dtype=torch.bfloat16, avail mem=21.83 GB, mem usage=72.30 GB."
RUNNING_STATES = ("active", "reloading")
SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "MainPID", "InvocationID", "ControlGroup")
CGROUP_ROOT = "/sys/fs/cgroup"
# The plan needs the start-up lines (Load weight end, the HiCache pool), which come first in an invocation's
# journal; a server that has run for months may have millions of lines after them. Read the first ones only.
JOURNAL_MAX_LINES = 20000
JOURNAL_TIMEOUT = 60.0


def cgroup2_root(mounts_text):
    """Where the cgroup v2 hierarchy is mounted (/proc/self/mounts), /sys/fs/cgroup when not found.

    systemd's ControlGroup is relative to it: /sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified in
    systemd's hybrid mode (where the memory controller stays in v1 and memory.current is absent).
    """
    for line in (mounts_text or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return fields[1]
    return CGROUP_ROOT


def parse_pids(text):
    """``cgroup.procs`` (one PID a line) -> set of ints."""
    pids = set()
    for line in (text or "").split():
        if line.isdigit():
            pids.add(int(line))
    return pids


def parse_memory_stat(text):
    """``memory.stat`` (``key value`` lines) -> dict of ints."""
    values = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    return values


def cgroup_path_of(proc_cgroup_text):
    """The cgroup v2 path of a process (``0::/system.slice/x.service`` -> ``/system.slice/x.service``)."""
    for line in (proc_cgroup_text or "").splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return None


def weights_from_lines(lines, texts=None):
    """{rank: GiB} of the ``Load weight end ... mem usage=X GB`` lines (SGLang prints GiB, labelled GB); texts: a
    release's (_sglang_logs.texts_for), every known release's by default."""
    texts = texts or logs.ALL_TEXTS
    found = {}
    for line in lines:
        rank, msg = logs.parse_line(line)
        match = logs.match_any(texts.load_weight_end, msg)
        if match:
            found.setdefault(rank if rank is not None else 0, float(match.group("mem_gb")))
    return found


def hicache_from_lines(lines, texts=None):
    """{rank: GB (10^9)} of the HiCache KV host pool lines (the target model's; not the draft's)."""
    texts = texts or logs.ALL_TEXTS
    found = {}
    for line in lines:
        rank, msg = logs.parse_line(line)
        match = logs.match_any(texts.hicache, msg)
        if match and not (match.groupdict().get("pool") or "").strip().startswith("draft"):
            found.setdefault(rank if rank is not None else 0, float(match.group("gb")))
    return found


def _base(name):
    """``/opt/venv/bin/python3.12`` -> ``python``: the program, without directory and version digits."""
    name = os.path.basename((name or "").strip())
    return re.sub(r"[0-9.]+$", "", name) or name


def name_matches(process_name, identity):
    """Whether the process seen in /proc is the one nvidia-smi names (comm, argv[0] or exe)."""
    wanted = _base(process_name)
    if not wanted:
        return False
    comm = (identity.get("comm") or "").strip()
    candidates = [_base(comm), _base(identity.get("argv0")), _base(identity.get("exe"))]
    if wanted in candidates:
        return True
    # comm is cut to 15 characters
    return len(comm) == 15 and os.path.basename(process_name.strip()).startswith(comm)


def identity_of(pid, read_file, readlink=None):
    """What this host's /proc says about ``pid``: None when there is no such process here."""
    status = read_file("/proc/%d/status" % pid)
    if status is None:
        return None
    cmdline = read_file("/proc/%d/cmdline" % pid) or ""
    comm = read_file("/proc/%d/comm" % pid)
    exe = None
    if readlink is not None:
        try:
            exe = readlink("/proc/%d/exe" % pid)
        except (IOError, OSError):
            exe = None
    return {
        "comm": (comm or "").strip(),
        "argv0": cmdline.split("\0")[0],
        "exe": exe,
        "cgroup": cgroup_path_of(read_file("/proc/%d/cgroup" % pid)),
    }


def classify(processes, unit_pids, control_group, identities):
    """Sort nvidia-smi's compute apps into the server's, foreign ones and unverified ones.

    ``processes``: nvidia_gpu_info's ``processes`` (gpu_index, pid, process_name, used_memory_mib).
    ``unit_pids``: PIDs of the unit's cgroup.procs. ``identities``: pid -> identity_of(...) or None.
    Each returned entry is the process plus ``owner`` (``server``, ``foreign``, ``unverified``) and ``why``.
    """
    result = []
    for proc in processes:
        entry = dict(proc)
        pid = proc.get("pid")
        identity = identities.get(pid)
        in_group = pid in unit_pids or bool(
            control_group and identity and identity.get("cgroup")
            and (identity["cgroup"] == control_group or identity["cgroup"].startswith(control_group + "/")))
        if identity is None:
            entry["owner"] = "unverified"
            entry["why"] = ("pid %s is not a process of this host's /proc: nvidia-smi sees another PID namespace "
                            "(this host runs in a container) or it just exited" % pid)
        elif not name_matches(proc.get("process_name"), identity):
            entry["owner"] = "unverified"
            entry["why"] = ("pid %s here is %r, nvidia-smi names %r: another PID namespace's process"
                            % (pid, identity.get("comm") or identity.get("argv0"), proc.get("process_name")))
        elif in_group:
            entry["owner"] = "server"
            entry["why"] = "pid %s is in the unit's cgroup %s" % (pid, control_group)
        else:
            entry["owner"] = "foreign"
            entry["why"] = "pid %s is %s, in cgroup %s, not the unit's" % (
                pid, identity.get("comm") or proc.get("process_name"), identity.get("cgroup"))
        result.append(entry)
    return result


def gpu_after_stop(gpus, classified):
    """Per GPU: free now, what the server's processes hold, what unverified ones hold, free after the stop (MiB)."""
    rows = []
    for gpu in sorted(gpus, key=lambda g: g.get("index", 0)):
        mine = [p for p in classified if p.get("gpu_index") == gpu.get("index")]
        server = sum(p.get("used_memory_mib") or 0 for p in mine if p["owner"] == "server")
        unknown_size = [p["pid"] for p in mine if p["owner"] == "server" and p.get("used_memory_mib") is None]
        unverified = sum(p.get("used_memory_mib") or 0 for p in mine if p["owner"] == "unverified")
        free = gpu.get("memory_free_mib")
        rows.append({
            "index": gpu.get("index"),
            "memory_free_mib_now": free,
            "server_mib": server,
            "server_pids_without_size": unknown_size,
            "unverified_mib": unverified,
            "memory_free_mib_after_stop": None if free is None else free + server,
        })
    return rows


def host_after_stop(mem_available_bytes, hicache_gb_by_rank, memory_current, memory_stat):
    """What the stop gives back in host RAM, in bytes, and the arithmetic as text."""
    pool = int(round(sum(hicache_gb_by_rank.values()) * GB)) if hicache_gb_by_rank else 0
    cgroup_anon = None
    if memory_current is not None:
        cgroup_anon = max(0, memory_current - (memory_stat or {}).get("file", 0))
    freed = max(pool, cgroup_anon or 0)
    after = None if mem_available_bytes is None else mem_available_bytes + freed
    source = "HiCache pool" if pool >= (cgroup_anon or 0) else "cgroup memory"
    return {
        "hicache_pool_bytes": pool,
        "hicache_ranks": sorted(hicache_gb_by_rank or {}),
        "cgroup_memory_current_bytes": memory_current,
        "cgroup_memory_not_cache_bytes": cgroup_anon,
        "freed_bytes": freed,
        "freed_from": source if freed else "nothing",
        "mem_available_bytes_now": mem_available_bytes,
        "mem_available_bytes_after_stop": after,
    }


def describe(server, gpu_rows, host, tp):
    """Both views with the arithmetic, one line each, for humans."""
    lines = []
    used = sorted(gpu_rows, key=lambda r: r["index"])[:tp] if tp else gpu_rows
    if used:
        now = min(r["memory_free_mib_now"] for r in used if r["memory_free_mib_now"] is not None)
        after = min(r["memory_free_mib_after_stop"] for r in used if r["memory_free_mib_after_stop"] is not None)
        lines.append(
            "GPU now: smallest memory.free of GPUs %s = %d MiB (%.2f GiB); after the stop of %s: + the server's own "
            "processes (%s) = %d MiB (%.2f GiB)"
            % (",".join(str(r["index"]) for r in used), now, now / 1024.0, server["unit"],
               ", ".join("GPU %d %d MiB" % (r["index"], r["server_mib"]) for r in used), after, after / 1024.0))
    if host.get("mem_available_bytes_now") is not None:
        lines.append(
            "RAM now: MemAvailable %.1f GB (%.1f GiB); after the stop: + %.1f GB (the larger of: HiCache pool %.1f GB "
            "over %d rank(s), cgroup memory less cache %s) = %.1f GB (%.1f GiB)"
            % (host["mem_available_bytes_now"] / float(GB), host["mem_available_bytes_now"] / float(GIB),
               host["freed_bytes"] / float(GB), host["hicache_pool_bytes"] / float(GB),
               len(host["hicache_ranks"]),
               "%.1f GB" % (host["cgroup_memory_not_cache_bytes"] / float(GB))
               if host["cgroup_memory_not_cache_bytes"] is not None else "not readable",
               host["mem_available_bytes_after_stop"] / float(GB), host["mem_available_bytes_after_stop"] / float(GIB)))
    return lines


def read_unit(run, unit, systemctl="systemctl"):
    """``systemctl show`` of the unit -> dict of the properties above ({} when systemctl fails)."""
    rc, out, _err = run([systemctl, "show", unit, "--property=" + ",".join(SHOW_PROPERTIES)])
    if rc != 0:
        return {}
    return parse_show(out)


def bounded_run(argv):
    """Run a journal read with a time limit and at most JOURNAL_MAX_LINES lines kept (the reader stops there)."""
    return _proc.run(argv, timeout=JOURNAL_TIMEOUT, max_lines=JOURNAL_MAX_LINES)


def read_invocation_lines(run, invocation_id, journalctl="journalctl"):
    """(the first lines the running invocation printed (``-o cat``, oldest first) or None when journalctl fails,
    whether the read stopped at its cap). With ``run=bounded_run`` it stops after JOURNAL_MAX_LINES lines."""
    result = run([journalctl, "--no-pager", "--quiet", "-o", "cat", "_SYSTEMD_INVOCATION_ID=" + invocation_id])
    if result[0] != 0:
        return None, False
    return result[1].splitlines(), getattr(result, "truncated", False)


def gather(run, read_file, unit, gpu_info, readlink=None, systemctl="systemctl", journalctl="journalctl",
           journal_run=None):
    """Everything the plan needs about the running unit; ``{"running": False, ...}`` when it is not running.

    ``gpu_info``: nvidia_gpu_info's result (``gpus`` and ``processes``), or None on a host without GPUs.
    ``journal_run``: how the invocation's journal is read (default ``run``; the module gives ``bounded_run``).
    """
    props = read_unit(run, unit, systemctl)
    state = props.get("ActiveState", "")
    server = {
        "unit": unit,
        "active_state": state or "unknown",
        "running": state in RUNNING_STATES,
        "main_pid": int(props["MainPID"]) if props.get("MainPID", "").isdigit() else 0,
        "invocation_id": props.get("InvocationID", ""),
        "control_group": props.get("ControlGroup", ""),
        "notes": [],
    }
    if not server["running"]:
        return server
    group = server["control_group"]
    unit_pids = set()
    memory_current = None
    memory_stat = {}
    if group:
        base = cgroup2_root(read_file("/proc/self/mounts")).rstrip("/") + group
        procs = read_file(base + "/cgroup.procs")
        unit_pids = parse_pids(procs)
        if procs is None:
            server["notes"].append("cannot read %s/cgroup.procs" % base)
        current = read_file(base + "/memory.current")
        if current and current.strip().isdigit():
            memory_current = int(current.strip())
        else:
            server["notes"].append("no memory.current in %s (no memory controller): the cgroup's memory is not "
                                   "counted" % base)
        memory_stat = parse_memory_stat(read_file(base + "/memory.stat"))
    else:
        server["notes"].append("systemd gives no ControlGroup for %s" % unit)
    server["unit_pids"] = sorted(unit_pids)
    server["memory_current_bytes"] = memory_current
    server["memory_stat_file_bytes"] = memory_stat.get("file")

    lines, truncated = None, False
    if server["invocation_id"]:
        lines, truncated = read_invocation_lines(journal_run or run, server["invocation_id"], journalctl)
    if lines is None:
        server["notes"].append("cannot read the journal of invocation %s: HiCache pool and weights unknown"
                               % (server["invocation_id"] or "?"))
        lines = []
    elif truncated:
        server["notes"].append("read the first %d lines of invocation %s's journal only (start-up lines come first)"
                               % (len(lines), server["invocation_id"]))
    weights = weights_from_lines(lines)
    server["weights_gb_by_rank"] = weights
    server["weights_gb_per_gpu"] = max(weights.values()) if weights else None
    server["hicache_gb_by_rank"] = hicache_from_lines(lines)

    processes = list((gpu_info or {}).get("processes") or [])
    identities = dict((p["pid"], identity_of(p["pid"], read_file, readlink)) for p in processes)
    server["processes"] = classify(processes, unit_pids, group, identities)
    unverified = [p for p in server["processes"] if p["owner"] == "unverified"]
    if unverified:
        server["notes"].append(
            "nvidia-smi lists %d process(es) this host cannot tie to a process it sees (%s): their memory is not "
            "added back and they are not stopped" % (
                len(unverified), "; ".join("GPU %s pid %s %s %s MiB" % (
                    p.get("gpu_index"), p["pid"], p.get("process_name"),
                    p.get("used_memory_mib") if p.get("used_memory_mib") is not None else "?") for p in unverified)))
    return server


def views(running, base, total_now, mem_now, after_stop, host, plan):
    """Add the "now" plan and the arithmetic of both views to the running server's report.

    ``base``: make_plan's arguments "after the stop"; ``plan``: that plan.
    """
    if not running["running"]:
        running["views"] = ["%s is %s: nothing to add back" % (running["unit"], running["active_state"])]
        return running
    running["gpus"] = after_stop or []
    running["host"] = host
    lines = describe(running, after_stop or [], host, base["tp"])
    if not after_stop:
        lines.insert(0, "GPU: %s (nothing added back)" % (
            "given as gpu_memory_gb" if total_now == base["total_gib"] else "no per-process memory"))
    try:
        now = mp.make_plan(**dict(base, total_gib=total_now, mem_available_bytes=mem_now))
        running["plan_now"] = {"fits": now["fits"], "problems": now["problems"], "summary": now["summary"],
                               "kv_tokens_per_rank": now["kv_tokens_per_rank"],
                               "ram_left_after_pinning_gb": now.get("ram_left_after_pinning_gb")}
    except mp.PlanError as exc:
        running["plan_now"] = {"fits": False, "problems": [str(exc)], "summary": str(exc)}
    lines.append("Now: %s. After the stop: %s" % (
        "fits" if running["plan_now"]["fits"] else "does not fit (%s)" % "; ".join(running["plan_now"]["problems"]),
        "fits" if plan["fits"] else "does not fit"))
    running["views"] = lines + running["notes"]
    return running
