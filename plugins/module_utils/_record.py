# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment record (Markdown) and its JSON twin, written as one unit, and their history (issue 22).

The one owner of ``sglang_record_file``, ``sglang_record_json_file`` and ``sglang_record_history_dir``:

* the pair is rewritten only when either differs; both new files are written to temporary files beside them first,
  then renamed into place (a kill before the renames leaves the old pair; a full disk fails before any rename);
* the pair it replaces goes to the history first, named by the HOST's clock and a unique suffix
  (``<service>-<YYYYmmddTHHMMSSZ>-<6 hex>.md|json``): two controllers with different clocks, or two runs within
  one second, never overwrite or misorder each other's copies. A previous pair with one file missing (an
  operator's ``rm``, a pair written by hand) is kept as it is and reported, never an error;
* the history keeps the newest ``keep`` pairs by the host's modification times (``keep: 0`` keeps none); history
  files named ``<service>-<stamp>.json`` (without the unique suffix) are pruned by the same rule.

``deploy_record`` is the server's record after a verified start or restart: it reads on the host what only the
host knows (the last record's twin, the install record, the last-good manifest, the NCCL values of the running
process and nothing else of its environment, the versions, the NCCL environment file), builds the twin
(``record_data``; its ``invocation_id`` and ``verified`` are a copy of the unit's state file, ``_state_file.reference``,
the one record of which invocation is verified) and the Markdown (``markdown``; every secret-named value masked by the one rule of ``_secrets``,
the keys' values never read) and writes them. The module sglang_server calls it after the keep
(``_server/machine.py``), and on any run whose twin names another invocation than the state file
(``recorded_invocation``: a run killed before its record); the module sglang_record writes a pair of any text with ``write_record``.

Standard library only (runs on the GPU host).
"""

from __future__ import annotations

import binascii
import json
import os
import re
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good, _nvidia_smi, _proc, _secrets, _state_file
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

STAMP = "%Y%m%dT%H%M%SZ"


def record_json(data):
    """The twin's text, as Ansible's to_nice_json wrote it before (indent 4, sorted keys, ASCII)."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def history_re(service):
    return re.compile(r"^%s-(?P<stamp>[0-9]{8}T[0-9]{6}Z|unknown)(?:-(?P<unique>[0-9a-f]{6}))?\.(?P<ext>md|json)$"
                      % re.escape(service))


def history_sets(history_dir, service):
    """{base name: [paths]} of the kept copies, oldest first by (newest mtime of the set, name)."""
    pattern = history_re(service)
    sets = {}
    try:
        names = os.listdir(history_dir)
    except (IOError, OSError):
        return []
    for name in names:
        match = pattern.match(name)
        if match:
            sets.setdefault(name.rsplit(".", 1)[0], []).append(os.path.join(history_dir, name))

    def age(item):
        mtimes = []
        for path in item[1]:
            try:
                mtimes.append(os.stat(path).st_mtime)
            except OSError:
                mtimes.append(0)
        return (max(mtimes), item[0])

    return sorted(sets.items(), key=age)


def write_record(md_path, json_path, markdown, data, history_dir, service, keep, mode=0o640, now=time.time,
                 unique=None, check_mode=False):
    """Returns {"changed", "history" (the copies written), "pruned", "missing_previous"}."""
    result = {"changed": False, "history": [], "pruned": [], "missing_previous": [], "md_path": md_path,
              "json_path": json_path}
    new_md = markdown.encode("utf-8")
    new_json = record_json(data).encode("utf-8")
    old_md, old_json = _read(md_path), _read(json_path)
    if old_md == new_md and old_json == new_json:
        return result
    result["changed"] = True
    if check_mode:
        return result
    previous = [(old_md, "md", md_path), (old_json, "json", json_path)]
    if any(text is not None for text, dummy, dummy2 in previous):
        if not os.path.isdir(history_dir):
            os.makedirs(history_dir, 0o755)
        base = "%s-%s-%s" % (service, time.strftime(STAMP, time.gmtime(now())),
                             unique or binascii.hexlify(os.urandom(3)).decode("ascii"))
        for text, ext, path in previous:
            if text is None:
                result["missing_previous"].append(path)
                continue
            dest = os.path.join(history_dir, "%s.%s" % (base, ext))
            write_atomic(dest, text, mode=mode, prefix=".%s." % service, root_owned=True)
            result["history"].append(dest)
    # both new files first as temporary files, then both renames: never a new JSON beside a half-written record
    staged = []
    try:
        for dest, text in ((json_path, new_json), (md_path, new_md)):
            directory = os.path.dirname(dest) or "."
            tmp = os.path.join(directory, ".%s.new" % os.path.basename(dest))
            write_atomic(tmp, text, mode=mode, prefix=".%s." % service, root_owned=True)
            staged.append((tmp, dest))
        for tmp, dest in staged:
            os.rename(tmp, dest)
    finally:
        for tmp, dummy in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
    sets = history_sets(history_dir, service)
    old = sets[:-keep] if keep > 0 else sets
    for dummy, paths in old:
        for path in paths:
            os.unlink(path)
            result["pruned"].append(path)
    return result


# ---------------------------------------------------------------------------------------------------------------
# What the record holds, read on the host after a verified start or restart, and its Markdown text. The keys of
# the twin are a format: the next run reads its ``baseline`` (_bench.gate) and the textfile writer reads it
# (roles/server/files/sglang_textfile.py); tests/unit/plugins/module_utils/test_record.py checks them.

WHEN_JSON = "%Y-%m-%dT%H:%M:%SZ"
WHEN_MD = "%Y-%m-%d %H:%M:%S"
# the figures of a benchmark result kept in the record (and so in the next run's baseline)
BENCH_KEYS = ("output_throughput", "request_throughput", "ttft_ms", "itl_ms", "accept_length", "errors", "completed",
              "num_requests", "concurrency", "input_len", "output_len", "api", "duration_s", "summary")
INSTALL_RECORD_NAME = "gpuserve-install-record.json"
VERSION_SCRIPT = ("import importlib.metadata as m\ntry:\n print(m.version('sglang'))\n"
                  "except m.PackageNotFoundError:\n print('not installed')")
NVCC_RE = re.compile(r"release [0-9.]+, V[0-9.]+")
NCCL_ENTRY_RE = re.compile(r"NCCL_\w+=")
COMMENT_OR_BLANK_RE = re.compile(r"\s*(#|$)")
MANAGED = "Ansible managed"
PROC_ENVIRON = "/proc/%d/environ"


def run_command(argv, timeout=120):
    """``argv`` run without a shell (the collection's one command runner, _proc.run) -> (rc, stdout, stderr),
    LC_ALL=C; a missing program is rc 127, a hang past ``timeout`` seconds rc 124 (the record must not wait forever
    on a wedged driver)."""
    rc, out, err = _proc.run(argv, timeout=timeout, env={"LC_ALL": "C"})
    return rc, out, err


def read_json(path):
    """A JSON object from ``path``; {} when the file is missing, unreadable or not a JSON object."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recorded_invocation(json_path):
    """The invocation the twin at ``json_path`` names as verified (its ``verified`` copy of the state file, or its
    ``invocation_id`` in a twin written before that copy); "" for a missing or unreadable twin. The state machine
    compares it with the state file's verified invocation and rewrites a record that names another one."""
    data = read_json(json_path) if json_path else {}
    ref = data.get("verified") if isinstance(data.get("verified"), dict) else {}
    return str(ref.get("invocation_id") or data.get("invocation_id") or "")


def read_text(path):
    """The text of ``path``, None when it cannot be read."""
    raw = _read(path)
    return None if raw is None else raw.decode("utf-8", "replace")


def nccl_values(environ):
    """The NCCL_* variables of a process environment (``/proc/<pid>/environ``: NUL-separated, bytes or text) and
    nothing else of it: the environment may hold secrets (HF_TOKEN)."""
    if isinstance(environ, bytes):
        environ = environ.decode("utf-8", "replace")
    values = {}
    for entry in (environ or "").split("\0"):
        if NCCL_ENTRY_RE.match(entry):
            name, dummy, value = entry.partition("=")
            values[name] = value
    return values


def venv_of(python):
    """The venv of an interpreter path (``<venv>/bin/python`` -> ``<venv>``)."""
    return os.path.dirname(os.path.dirname(python))


def sglang_version(python, run):
    """SGLang's version in the interpreter's environment, 'not installed' or 'unknown'."""
    dummy, out, dummy2 = run([python, "-c", VERSION_SCRIPT])
    return (out or "").strip() or "unknown"


def cuda_version(cuda_home, run, fallback="not found"):
    """'release X, VY' of ``<cuda_home>/bin/nvcc --version``, else ``fallback`` (the cuda role's cuda_version)."""
    dummy, out, dummy2 = run([os.path.join(cuda_home or "", "bin", "nvcc"), "--version"])
    match = NVCC_RE.search(out or "")
    return match.group(0) if match else (fallback or "not found")


def driver_version(nvidia_smi, run):
    """'<driver>, <GPU name>' for each distinct pair (joined by '; '), or 'not found'."""
    if not nvidia_smi:
        return "not found"
    rc, out, dummy = run([nvidia_smi] + _nvidia_smi.QUERY_GPU_ARGS)
    if rc != 0:
        return "not found"
    try:
        gpus = _nvidia_smi.parse_query_gpu(out)
    except _nvidia_smi.NvidiaSmiParseError:
        return "not found"
    pairs = []
    for gpu in gpus:
        pair = "%s, %s" % (gpu.get("driver_version"), gpu.get("name"))
        if pair not in pairs:
            pairs.append(pair)
    return "; ".join(pairs) or "not found"


def env_lines(text):
    """The lines of an environment file without comments and blank lines; [] when it is absent."""
    if text is None:
        return []
    return [line for line in text.splitlines() if not COMMENT_OR_BLANK_RE.match(line)]


def bench_record(bench):
    """The figures of a benchmark result that the record keeps; {} when no benchmark ran."""
    if not bench or "output_throughput" not in bench:
        return {}
    return dict((key, bench[key]) for key in BENCH_KEYS if key in bench)


def read_host(params, verified, python, run=run_command):
    """What the record reads on the host: the last record's twin, the install record (the running venv's, else the
    host's), the last-good manifest's files, the NCCL values of the running process, the versions, the NCCL
    environment file's lines."""
    # each versioned venv keeps its own install record; an unversioned one has only the host's
    venv_record = os.path.join(venv_of(python), INSTALL_RECORD_NAME)
    install = read_json(venv_record if os.path.exists(venv_record) else params.get("install_record") or "")
    manifest = {}
    if params.get("backup_dir"):
        directory = _last_good.unit_dir(params["backup_dir"], params.get("service") or "")
        if not os.path.isdir(directory):   # a record written before the per-unit layout's move (issue 47)
            directory = os.path.join(params["backup_dir"], _last_good.LEGACY_DIR)
        manifest = _last_good.load_manifest(directory)[0]
    main_pid = _int(verified.get("main_pid"))
    environ = _read(PROC_ENVIRON % main_pid) if main_pid > 0 else None
    return {
        "previous": read_json(params["record_json_path"]),
        "install": install,
        "inputs": manifest.get("files") or {},
        "nccl_process": nccl_values(environ) if environ is not None else {},
        "sglang": sglang_version(python, run),
        "cuda": cuda_version(params.get("cuda_home"), run, params.get("cuda_version") or "not found"),
        "driver": driver_version(params.get("nvidia_smi"), run),
        "nccl_lines": env_lines(read_text(params["nccl_env_file"]) if params.get("nccl_env_file") else None),
    }


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def record_data(params, verified, bench, bench_gate, python, host, when):
    """The twin's content (the keys the next run reads: baseline, baseline_when, baseline_invocation_id, bench).

    ``host`` is what read_host read; ``when`` the UTC time of this record (seconds since the epoch)."""
    previous = host["previous"]
    bench = bench_record(bench)
    install = host["install"]
    memory_plan = params.get("memory_plan") or {}
    stamp = time.strftime(WHEN_JSON, time.gmtime(when))
    return {
        "service": params["service"],
        "host": params.get("host", ""),
        "when": stamp,
        "change_reason": params.get("change_reason", ""),
        "action": verified.get("action", ""),
        "invocation_id": verified.get("invocation_id", ""),
        # which invocation is verified is the state file's record (_state_file): the twin refers to it, one copy
        "verified": _state_file.reference((verified.get("state_file") or {}).get("path", ""),
                                          verified.get("invocation_id", ""), verified),
        "main_pid": verified.get("main_pid", 0),
        "profile": params.get("profile", ""),
        "args": _secrets.mask_mapping(params.get("args") or {}),
        "cmdline": params.get("cmdline", ""),
        "sglang_version": host["sglang"],
        "venv": venv_of(python),
        "cuda": host["cuda"],
        "driver": host["driver"],
        "install": dict((key, value) for key, value in install.items() if key != "patches"),
        "patches": install.get("patches") or {},
        "nccl_process": host["nccl_process"],
        # the files the process read at its start (path -> exists, sha256): what it has, not what a role meant
        "inputs": host["inputs"],
        "memory_plan": {"summary": memory_plan.get("summary", ""),
                        "kv_tokens_per_rank": memory_plan.get("kv_tokens_per_rank"),
                        "host_pool_gb_per_rank": memory_plan.get("host_pool_gb_per_rank")} if memory_plan else {},
        "kv_cache": verified.get("kv_cache") or {},
        "hicache": verified.get("hicache") or {},
        # the restart's phases and downtime (_timeline.py); the next --check predicts from these (restart_records)
        "timeline": verified.get("timeline") or {},
        "hicache_expected": bool(params.get("hicache_expected")),
        "bench": bench,
        "bench_gate": (bench_gate or {}) if bench else {},
        "bench_previous": previous.get("bench") or previous.get("bench_previous"),
        # the next run's baseline: this run's benchmark, else the one carried by the last record
        "baseline": bench or previous.get("baseline"),
        "baseline_when": stamp if bench else previous.get("baseline_when"),
        "baseline_invocation_id": (verified.get("invocation_id", "") if bench
                                   else previous.get("baseline_invocation_id")),
    }


def _text(value):
    """A value as the template printed it: None as nothing, anything else as Python's str (True, 1.5)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _bench_row(label, bench):
    ttft, itl = bench.get("ttft_ms") or {}, bench.get("itl_ms") or {}
    accept = bench.get("accept_length")
    cells = [label, bench.get("output_throughput"), bench.get("request_throughput"),
             " / ".join(_text(ttft.get(key)) for key in ("p50", "p90", "p99")),
             " / ".join(_text(itl.get(key)) for key in ("p50", "p90", "p99")),
             accept if accept is not None else "-", bench.get("errors"),
             "%s req, concurrency %s, in %s, out %s" % tuple(
                 _text(bench.get(key)) for key in ("num_requests", "concurrency", "input_len", "output_len"))]
    return "| " + " | ".join(_text(cell) for cell in cells) + " |"


def command_line(params):
    """ExecStart as the record shows it: the secrets file and which keys it sets, never their values."""
    keys = [key for key in params.get("secret_keys") or () if key]
    if not keys:
        return params.get("cmdline", "")
    return "%s --config %s (keys: %s, values not shown)" % (params.get("cmdline", ""), params.get("secrets_file", ""),
                                                            ", ".join(keys))


def env_file_values(params):
    """The environment file's variables as the record shows them: every secret-named value masked by the one rule
    of _secrets (the API key is not among them: it is in the secrets file only)."""
    return _secrets.mask_mapping(dict(params.get("env") or {}))


def markdown(data, params, verified=None, nccl_lines=None, python=""):
    """The record's text: the verified invocation, HiCache, the command line, the environment (secrets masked),
    versions, the reason, the benchmark, NCCL of the process, the files it read, patches, the memory plan."""
    verified = verified or {}
    hicache, kv_cache = verified.get("hicache"), verified.get("kv_cache")
    out = ["<!-- %s -->" % MANAGED,
           "# %s on %s" % (params["service"], params.get("host", "")),
           "",
           "Rewritten by `gpuserve.sglang.server` after each verified start or restart; do not edit.",
           "",
           "## Last verified %s" % ("restart" if verified.get("action", "") == "restart" else "start"),
           "- when (UTC): %s" % data["when"].replace("T", " ").rstrip("Z"),
           "- invocation: %s (previous %s), main PID %s" % (
               _text(verified.get("invocation_id", "?")), _text(verified.get("previous_invocation_id", "") or "none"),
               _text(verified.get("main_pid", "?"))),
           "- timeline (s): " + ", ".join("%s %s" % (_text(k), _text(v))
                                          for k, v in (verified.get("timeline") or {}).items()
                                          if not isinstance(v, (dict, list))),
           downtime_line(verified.get("timeline") or {}),
           "- ready line: `%s`" % _text(verified.get("ready_line", "")),
           "- health: %s -> %s" % (params.get("health_url", ""), _text(verified.get("health_status", "?"))),
           "",
           "## HiCache (from this invocation's journal)"]
    out = [line for line in out if line is not None]
    if hicache:
        out += ["- ranks seen: " + ", ".join(_text(rank) for rank in hicache.get("ranks_seen", [])),
                "- host pool per rank: %s GB, total pinned %s GB" % (
                    _text(hicache.get("host_pool_gb_per_rank", "?")), _text(hicache.get("host_pool_gb_total", "?")))]
    else:
        out.append("- off")
    if kv_cache:
        out.append("- GPU KV cache: %s tokens, %s GB per rank" % (
            _text(kv_cache.get("tokens_per_rank", "?")), _text(kv_cache.get("gb_per_rank", "?"))))
    out += ["",
            "## Command line (ExecStart)",
            "```",
            command_line(params),
            "```",
            "Profile `%s`; flags over it (sglang_args): %s" % (params.get("profile", ""),
                                                               json.dumps(data.get("args") or {})),
            "",
            "## Environment (secrets masked)",
            "Unit:"]
    out += ["- %s=%s" % (k, _text(v)) for k, v in _secrets.mask_mapping(params.get("unit_environment") or {}).items()]
    out.append("%s:" % params.get("env_file", ""))
    out += ["- %s=%s" % (k, _text(v)) for k, v in env_file_values(params).items()] or ["- (empty)"]
    out.append("%s:" % params.get("nccl_env_file", ""))
    out += ["- %s" % line for line in nccl_lines or ()] or ["- (absent)"]
    out += ["",
            "## Versions",
            "- SGLang: %s (%s -m %s)" % (data["sglang_version"], python, params.get("launcher", "")),
            "- CUDA: %s" % data["cuda"],
            "- NVIDIA driver: %s" % data["driver"],
            "- venv: %s" % data["venv"],
            "",
            "## Why this configuration",
            params.get("change_reason") or "(no reason given: sglang_change_reason)",
            "",
            "## Benchmark (gpuserve.sglang.sglang_bench)"]
    if data.get("bench") or data.get("bench_previous"):
        out += ["| | output tok/s | req/s | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | accept length | errors "
                "| settings |",
                "|---|---|---|---|---|---|---|---|"]
        if data.get("bench"):
            out.append(_bench_row("this configuration", data["bench"]))
        if data.get("bench_previous"):
            out.append(_bench_row("previous", data["bench_previous"]))
        gate = data.get("bench_gate")
        if gate:
            change = gate.get("change_pct")
            out += ["",
                    "Gate: baseline %s tok/s (%s), change %s %%, allowed -%s %%." % (
                        _text(gate.get("baseline_tok_s")), _text(gate.get("baseline_source")),
                        _text(change if change is not None else "n/a"), _text(gate.get("threshold_pct")))]
    else:
        out.append("- not benchmarked (sglang_bench_gate is off)")
    out += ["",
            "## NCCL values of the running process (/proc/%s/environ)" % _text(data.get("main_pid", "?"))]
    out += ["- %s=%s" % (k, v) for k, v in sorted((data.get("nccl_process") or {}).items())] or ["- (none)"]
    out += ["",
            "## Files this process read when it started (sha256 at the verified start; a rollback puts them back)"]
    for path, entry in sorted((data.get("inputs") or {}).items()):
        out.append("- %s: %s" % (path, ("sha256 %s" % _text(entry["sha256"])) if "sha256" in entry else
                                 ("present (secret, no hash)" if entry.get("exists") else "absent")))
    if not data.get("inputs"):
        out.append("- (not recorded)")
    out += ["",
            "## Patches applied (%s)" % params.get("install_record", "")]
    out += ["- %s sha256 %s" % (name, _text(sha)) for name, sha in (data.get("patches") or {}).items()] or [
        "- (none recorded)"]
    out += ["",
            "## Memory plan"]
    summary = (data.get("memory_plan") or {}).get("summary", "")
    out.append(_text(summary) if summary else "- no plan in this run (gpuserve.sglang.preflight's sglang_memory_plan); "
               "the journal's figures are above")
    out += ["",
            "Machine-readable twin: %s; earlier records: %s (last %s)." % (
                params["record_json_path"], params["record_history_dir"], _text(params.get("keep", 10)))]
    return "\n".join(out) + "\n"


def downtime_line(timeline):
    """The record's downtime line: the total time no request was answered and its phases (_timeline.PHASES)."""
    if timeline.get("downtime_s") is None:
        return None
    phases = ", ".join("%s %s" % (name, _text(value)) for name, value in (timeline.get("phases") or {}).items())
    words = "- downtime: %s s (restart asked to the new invocation ready): %s" % (_text(timeline["downtime_s"]), phases)
    if timeline.get("gates_s") is not None:
        words += "; then the gates %s s (serving)" % _text(timeline["gates_s"])
    if timeline.get("sglang_startup"):
        reported = timeline["sglang_startup"]
        words += "; SGLang's own timings: %s" % ", ".join(
            "%s %s" % (key, _text(value)) for key, value in sorted(reported.items()) if not isinstance(value, dict))
    return words


def restart_records(json_path, history_dir, service):
    """The record's twin and every twin in its history (the restarts this host recorded), each a dict; the ones
    that cannot be read are left out. For --check's downtime prediction (_timeline.predict)."""
    records = []
    current = read_json(json_path) if json_path else {}
    if current:
        records.append(current)
    if history_dir:
        for _base, paths in history_sets(history_dir, service):
            for path in paths:
                if path.endswith(".json"):
                    data = read_json(path)
                    if data:
                        records.append(data)
    return records


def _scrub(value, secrets):
    """``value`` (text, or a structure of them) with every known secret value replaced by the mask (the one
    rule's ``_secrets.scrub`` in its known-values form): a last guard, the record's own fields never carry one."""
    return _secrets.scrub(value, secrets, rule=False)


def deploy_record(params, verified, bench, bench_gate, python, run=run_command, now=time.time, check_mode=False):
    """The deployment record after a verified start or restart: read the host (read_host), build the twin
    (record_data) and the Markdown (markdown), write both and their history (write_record).

    ``params``: what only the controller knows (see the module's ``record`` option); ``verified``: the
    ServiceRunner result of the verified invocation; ``bench`` / ``bench_gate``: the gate's ``bench`` and ``gate``
    ({} or None when no benchmark ran); ``python``: the interpreter the unit runs. Returns write_record's result
    and ``data`` (the twin)."""
    verified = verified or {}
    host = read_host(params, verified, python, run)
    when = now()
    data = record_data(params, verified, bench, bench_gate, python, host, when)
    text = markdown(data, params, verified, host["nccl_lines"], python)
    secrets = [secret for secret in params.get("secrets_to_mask") or () if isinstance(secret, str) and secret]
    if secrets:
        text, data = _scrub(text, secrets), _scrub(data, secrets)
    result = write_record(params["record_md_path"], params["record_json_path"], text, data,
                          params["record_history_dir"], params["service"], int(params.get("keep", 10)),
                          now=lambda: when, check_mode=check_mode)
    result["data"] = data
    return result
