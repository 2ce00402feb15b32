# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse what nvidia-smi prints: GPUs, their processes, the driver and CUDA versions.

Private to the collection (the leading underscore). Pure functions over text, so the unit tests feed
them the real output captured on a GPU host (tests/fixtures/gpu-host-texts/host.txt).
"""

from __future__ import annotations

import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils._running_server import identity_of, name_matches

# The --query-gpu fields, in the order we ask for them. The same order is what the fixture's
# "### query-gpu" section was captured with.
GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "driver_version",
    "compute_cap",
    "persistence_mode",
    "power.limit",
    "temperature.gpu",
)
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")

QUERY_GPU_ARGS = ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]
QUERY_APPS_ARGS = ["--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"]

# nvidia-smi writes these where a value does not apply to a device.
_MISSING = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]", "")

_CUDA_HEADER_RE = re.compile(r"CUDA Version:\s*([0-9]+(?:\.[0-9]+)*)")
_CUDA_Q_RE = re.compile(r"^\s*CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)\s*$", re.MULTILINE)
_DRIVER_HEADER_RE = re.compile(r"Driver Version:\s*([0-9]+(?:\.[0-9]+)*)")
_DRIVER_Q_RE = re.compile(r"^\s*Driver Version\s*:\s*([0-9]+(?:\.[0-9]+)*)\s*$", re.MULTILINE)


class NvidiaSmiParseError(ValueError):
    """A line of nvidia-smi output that does not have the expected shape."""


def _value(text):
    text = text.strip()
    return None if text in _MISSING else text


def _int(text):
    value = _value(text)
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def _float(text):
    value = _value(text)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _split_csv(line):
    # nvidia-smi's CSV never quotes; names do not contain ", " (they are like "NVIDIA H200").
    return [part.strip() for part in line.split(",")]


def parse_query_gpu(text):
    """Parse ``nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits``.

    Returns a list of dicts, one per GPU, sorted by index. Memory is in MiB (what nvidia-smi prints
    with nounits); ``memory_*_gib`` are the same numbers in GiB, the unit SGLang's logs call "GB".
    """
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = _split_csv(line)
        if len(parts) != len(GPU_FIELDS):
            raise NvidiaSmiParseError(
                "line %d of --query-gpu output has %d fields, expected %d (%s): %r"
                % (lineno, len(parts), len(GPU_FIELDS), ",".join(GPU_FIELDS), line)
            )
        raw = dict(zip(GPU_FIELDS, parts))
        index = _int(raw["index"])
        if index is None:
            raise NvidiaSmiParseError("line %d of --query-gpu output has no GPU index: %r" % (lineno, line))
        gpu = {
            "index": index,
            "uuid": _value(raw["uuid"]),
            "name": _value(raw["name"]),
            "pci_bus_id": _value(raw["pci.bus_id"]),
            "memory_total_mib": _int(raw["memory.total"]),
            "memory_used_mib": _int(raw["memory.used"]),
            "memory_free_mib": _int(raw["memory.free"]),
            "driver_version": _value(raw["driver_version"]),
            "compute_cap": _value(raw["compute_cap"]),
            "persistence_mode": _value(raw["persistence_mode"]),
            "power_limit_w": _float(raw["power.limit"]),
            "temperature_c": _int(raw["temperature.gpu"]),
        }
        for key in ("total", "used", "free"):
            mib = gpu["memory_%s_mib" % key]
            gpu["memory_%s_gib" % key] = None if mib is None else round(mib / 1024.0, 3)
        gpus.append(gpu)
    gpus.sort(key=lambda g: g["index"])
    return gpus


def parse_compute_apps(text):
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits``.

    Empty output (what nvidia-smi prints when no process holds a GPU) gives an empty list.
    ``used_memory_mib`` is None where the driver does not report it ("[N/A]", e.g. inside containers).
    """
    apps = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.lower().startswith("no running"):
            continue
        parts = _split_csv(line)
        if len(parts) < len(APP_FIELDS):
            raise NvidiaSmiParseError(
                "line %d of --query-compute-apps output has %d fields, expected %d: %r"
                % (lineno, len(parts), len(APP_FIELDS), line)
            )
        if len(parts) > len(APP_FIELDS):
            # a process name with ", " in it: glue the middle back together
            parts = [parts[0], parts[1], ", ".join(parts[2:-1]), parts[-1]]
        pid = _int(parts[1])
        if pid is None:
            raise NvidiaSmiParseError("line %d of --query-compute-apps output has no pid: %r" % (lineno, line))
        apps.append(
            {
                "gpu_uuid": _value(parts[0]),
                "pid": pid,
                "process_name": _value(parts[2]),
                "used_memory_mib": _int(parts[3]),
            }
        )
    return apps


def parse_cuda_version(text):
    """The CUDA version the driver supports, from the nvidia-smi table header or ``nvidia-smi -q``."""
    match = _CUDA_HEADER_RE.search(text) or _CUDA_Q_RE.search(text)
    return match.group(1) if match else None


def parse_driver_version(text):
    """The driver version from the nvidia-smi table header or ``nvidia-smi -q``."""
    match = _DRIVER_HEADER_RE.search(text) or _DRIVER_Q_RE.search(text)
    return match.group(1) if match else None


def driver_major(version):
    """580 for "580.159.04"; None when unknown."""
    if not version:
        return None
    match = re.match(r"^(\d+)", str(version))
    return int(match.group(1)) if match else None


def unit_of_cgroup(cgroup_text):
    """The systemd unit (``*.service``/``*.scope``) a process belongs to, from /proc/<pid>/cgroup.

    Returns None when the process is not in a unit (e.g. a shell in a container without systemd).
    """
    found = None
    for line in cgroup_text.splitlines():
        # "0::/system.slice/sglang-kimi.service" (v2) or "1:name=systemd:/system.slice/x.service" (v1)
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            if part.endswith(".service") or part.endswith(".scope"):
                found = part
        if found:
            return found
    return found


def _version_key(version):
    """(580, 159, 4) for "580.159.04", so that 1000.1 sorts after 580.65."""
    return tuple(int(part) if part.isdigit() else 0 for part in str(version).split("."))


def _min_of(gpus, key):
    values = [g[key] for g in gpus if g.get(key) is not None]
    return min(values) if values else None


def assemble(gpus, apps, cuda_version=None, units=None):
    """Attach each process to its GPU and build the module's result (without ``changed``).

    ``units`` maps pid -> systemd unit (or None) where known.
    """
    units = units or {}
    by_uuid = dict((g["uuid"], g) for g in gpus)
    processes = []
    for gpu in gpus:
        gpu["processes"] = []
    for app in apps:
        proc = dict(app)
        gpu = by_uuid.get(app["gpu_uuid"])
        proc["gpu_index"] = gpu["index"] if gpu else None
        proc["unit"] = units.get(app["pid"])
        processes.append(proc)
        if gpu is not None:
            gpu["processes"].append(proc)
    # the oldest driver counts (a host mid-upgrade may report two); compared as numbers, not as text
    drivers = sorted(set(g["driver_version"] for g in gpus if g.get("driver_version")), key=_version_key)
    driver = drivers[0] if drivers else None
    return {
        "available": bool(gpus),
        "count": len(gpus),
        "gpus": gpus,
        "processes": processes,
        "driver_version": driver,
        "driver_major": driver_major(driver),
        "cuda_version": cuda_version,
        "memory_total_mib_min": _min_of(gpus, "memory_total_mib"),
        "memory_free_mib_min": _min_of(gpus, "memory_free_mib"),
    }


def no_gpus(reason, nvidia_smi=None, failed=False):
    """The result when there is nothing to report: an empty list and the reason, never a traceback.

    ``failed``: nvidia-smi was found but failed or printed what could not be parsed (a driver problem,
    as opposed to a host without nvidia-smi or one where it lists no GPU).
    """
    return {
        "available": False,
        "count": 0,
        "gpus": [],
        "processes": [],
        "driver_version": None,
        "driver_major": None,
        "cuda_version": None,
        "memory_total_mib_min": None,
        "memory_free_mib_min": None,
        "reason": reason,
        "nvidia_smi": nvidia_smi,
        "nvidia_smi_failed": bool(failed),
    }


def gather(run, nvidia_smi, read_file=None):
    """Run nvidia-smi through ``run(argv) -> (rc, stdout, stderr)`` and return the result dict.

    ``read_file(path) -> str or None`` reads /proc/<pid>/cgroup to name the unit of each process.
    Failures of nvidia-smi (no driver, no device) give ``gpus: []`` and a ``reason``.
    """
    rc, out, err = run([nvidia_smi] + QUERY_GPU_ARGS)
    if rc != 0:
        message = (err or out or "").strip().splitlines()
        return no_gpus(
            "nvidia-smi %s failed (rc=%d): %s" % (QUERY_GPU_ARGS[0], rc, message[0] if message else "no output"),
            nvidia_smi,
            failed=True,
        )
    try:
        gpus = parse_query_gpu(out)
    except NvidiaSmiParseError as exc:
        return no_gpus("could not parse nvidia-smi output: %s" % exc, nvidia_smi, failed=True)
    if not gpus:
        return no_gpus("nvidia-smi lists no GPUs", nvidia_smi)

    warnings = []
    rc, out, err = run([nvidia_smi] + QUERY_APPS_ARGS)
    apps = []
    if rc == 0:
        try:
            apps = parse_compute_apps(out)
        except NvidiaSmiParseError as exc:
            warnings.append("could not parse the process list: %s" % exc)
    else:
        warnings.append("nvidia-smi --query-compute-apps failed (rc=%d): %s" % (rc, (err or out).strip()))

    rc, out, err = run([nvidia_smi])
    cuda = parse_cuda_version(out) if rc == 0 else None
    if cuda is None:
        rc, out, err = run([nvidia_smi, "-q"])
        cuda = parse_cuda_version(out) if rc == 0 else None

    units = {}
    here = {}
    if read_file is not None:
        for app in apps:
            text = read_file("/proc/%d/cgroup" % app["pid"])
            units[app["pid"]] = unit_of_cgroup(text) if text else None
            # A host in a container: nvidia-smi prints the PIDs of another PID namespace. A PID counts as this
            # host's process only when /proc has it under the name nvidia-smi gives (issue 13).
            identity = identity_of(app["pid"], read_file)
            here[app["pid"]] = bool(identity and name_matches(app["process_name"], identity))

    result = assemble(gpus, apps, cuda, units)
    for proc in result["processes"]:
        proc["pid_here"] = here.get(proc["pid"]) if read_file is not None else None
    result["nvidia_smi"] = nvidia_smi
    result["reason"] = None
    result["nvidia_smi_failed"] = False
    result["problems"] = warnings
    return result


SEARCH_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin"]


def read_host(wanted, get_bin_path, run, read_file=None):
    """What nvidia_gpu_info reports: nvidia-smi found (``wanted``: a path, or a name looked up with
    ``get_bin_path(name, opt_dirs=...)`` on PATH and SEARCH_DIRS; '' or None is nvidia-smi) and asked by gather(),
    or no_gpus() saying where it was looked for."""
    wanted = wanted or "nvidia-smi"
    if "/" in wanted:
        binary = wanted if os.path.isfile(wanted) and os.access(wanted, os.X_OK) else None
        where = "(no executable file there)"
    else:
        binary = get_bin_path(wanted, opt_dirs=SEARCH_DIRS)
        where = "on PATH or in %s" % ", ".join(SEARCH_DIRS)
    if not binary:
        return no_gpus("%s not found %s" % (wanted, where))
    return gather(run, binary, read_file)
