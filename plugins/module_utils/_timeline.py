# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The restart timeline (issue 49): where the downtime of a restart went, per phase, from systemd and the journal;
and the downtime a change will cost, predicted from this host's recorded restarts. Pure functions (the service
runner gathers the timestamps, ``_record`` reads the history); tests/unit/plugins/module_utils/test_timeline.py
reads the real 0.5.17 server's journal with them.

A phase is named by the event that ENDS it, and lasts from the event before it (the restart asked, for the first):

=================  ==========================================================================================
``drain``          SIGTERM, SGLang's drain and its own end: to "Main process exited" of the old invocation
``reap``           the old invocation's other processes reaped: to systemd's "Stopped" (its cgroup empty)
``exec``           systemd starts the new invocation: to its "Started"
``process_start``  interpreter, imports, tokenizer, scheduler processes, torch distributed: to the first rank's
                   ``Load weight begin``
``weights``        to the last rank's ``Load weight end``
``kv_pool``        to the last rank's device KV pool line (``KV Cache is allocated``)
``cuda_graphs``    to the last rank's last CUDA graph capture (``Capture ... graph end``)
``hicache_pool``   to the last rank's HiCache host pool line (pinned host memory)
``http_start``     to the HTTP server's start (``Uvicorn running on``)
``warm_up``        the warm-up request: to the ready line
``ready_check``    to this module's proof: the ready line read and ``/health`` 200
=================  ==========================================================================================

The events are sorted by time (a release allocates the HiCache host pool after the CUDA graphs, 0.5.17, or not);
one that did not happen (no HiCache, ``--log-level warning``) gives its time to the next one. Each phase is the
difference of two rounded offsets, so the phases add up to ``downtime_s`` exactly: the time from the restart asked
(the old server stops answering) to the new invocation proven ready (it answers again). The gates that follow run
against a server that answers; their time is ``gates_s``, outside the downtime.
"""

from __future__ import annotations

import re
import shlex

PHASES = ("drain", "reap", "exec", "process_start", "weights", "kv_pool", "cuda_graphs", "hicache_pool",
          "http_start", "warm_up", "ready_check")
PHASE_WORDS = {
    "drain": "SIGTERM, the drain, SGLang's own end (old main process exited)",
    "reap": "the old invocation's last process reaped (systemd: Stopped)",
    "exec": "systemd started the new invocation",
    "process_start": "imports, tokenizer, scheduler processes, torch distributed (to Load weight begin)",
    "weights": "weights loaded on every rank",
    "kv_pool": "device KV pool allocated on every rank",
    "cuda_graphs": "CUDA graphs captured on every rank",
    "hicache_pool": "HiCache host pool allocated on every rank",
    "http_start": "HTTP server started",
    "warm_up": "the warm-up request, to the ready line",
    "ready_check": "the ready line read and /health 200",
}
# systemd's own lines about a stopping invocation (systemd 252 .. 257)
MAIN_EXITED_RE = re.compile(r"Main process exited, code=")
STOPPED_RE = re.compile(r"^Stopped |: Deactivated successfully\.|: Failed with result '")
STARTED_RE = re.compile(r"^Started |^Starting ")
_NUM = re.compile(r"([\w]+)=(-?\d+(?:\.\d+)?)")


def stop_marks(manager_entries):
    """{"drain": t, "reap": t} from systemd's lines about the stopped invocation: ``(realtime, message)`` pairs.
    drain ends at "Main process exited"; reap at the last of "Stopped", "Deactivated successfully" and "Failed
    with result" (the unit left its stop: every process of its cgroup gone)."""
    marks = {}
    for realtime, message in manager_entries:
        if not realtime:
            continue
        if MAIN_EXITED_RE.search(message) and "drain" not in marks:
            marks["drain"] = realtime
        if STOPPED_RE.search(message):
            marks["reap"] = realtime
    if "reap" in marks and "drain" in marks and marks["reap"] < marks["drain"]:
        del marks["reap"]
    return marks


def start_mark(manager_entries):
    """{"exec": t} of systemd's "Started"/"Starting" line of the new invocation, {} without one."""
    for realtime, message in manager_entries:
        if realtime and STARTED_RE.search(message):
            return {"exec": realtime}
    return {}


def startup_timings(match):
    """SGLang's own ``Engine startup timings (s): ...`` line (0.5.17+), a match of the release's template ->
    {load_weight, kv_cache_allocation, scheduler_e2e, tokenizer_e2e, cuda_graph: {phase: s}} (seconds)."""
    values = match.groupdict()
    out = {}
    for key in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"):
        if values.get(key) is not None:
            out[key] = float(values[key])
    graphs = values.get("cuda_graph")
    if graphs is not None:
        out["cuda_graph"] = dict((name, float(value)) for name, value in _NUM.findall(graphs))
    return out


def build(start, end, marks):
    """The phases of one restart: ``start`` (wall seconds: the restart asked), ``end`` (the new invocation proven
    ready), ``marks`` {phase: wall seconds of the event that ends it}. -> {"phases": {phase: s} in time order,
    "downtime_s": s}. Marks outside [start, end] are clamped to it; a phase without a mark is left out (its time
    goes to the next phase). The phases add up to downtime_s (each is a difference of rounded offsets)."""
    if start is None or end is None:
        return {"phases": {}, "downtime_s": None}
    end = max(end, start)
    order = dict((name, index) for index, name in enumerate(PHASES))
    events = sorted(((min(max(t, start), end), order.get(name, len(PHASES)), name)
                     for name, t in marks.items() if t is not None and name != "ready_check"))
    events.append((end, len(PHASES), "ready_check"))
    phases = {}
    previous = 0.0
    for t, _index, name in events:
        offset = round(t - start, 3)
        phases[name] = round(offset - previous, 3)
        previous = offset
    return {"phases": phases, "downtime_s": round(end - start, 3)}


def phases_total(timeline):
    """The sum of a timeline's phases (rounded as the phases are): equal to its downtime_s."""
    return round(sum((timeline or {}).get("phases", {}).values()), 3)


# ---- the prediction ------------------------------------------------------------------------------------------

def restart_key(cmdline, release):
    """What a restart's cost depends on: {release, model, flags} of an ExecStart command line (the words from the
    first ``--`` option on, ``--model-path`` taken out as the model)."""
    try:
        words = shlex.split(cmdline or "")
    except ValueError:
        words = (cmdline or "").split()
    first = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    flags = words[first:]
    model = ""
    out = []
    skip = False
    for index, word in enumerate(flags):
        if skip:
            skip = False
            continue
        if word in ("--model-path", "--model"):
            model = flags[index + 1] if index + 1 < len(flags) else ""
            skip = True
            continue
        if word.startswith("--model-path="):
            model = word.split("=", 1)[1]
            continue
        out.append(word)
    # the record says "not installed" or "unknown" where it found no sglang distribution: no release
    release = release if re.match(r"^\d", release or "") else ""
    return {"release": release, "model": model, "flags": out}


def flag_args(flags):
    """A flag list (restart_key's) -> {name without dashes: value or True}."""
    args = {}
    index = 0
    while index < len(flags):
        word = flags[index]
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if eq:
                args[name] = value
            elif index + 1 < len(flags) and not flags[index + 1].startswith("--"):
                args[name] = flags[index + 1]
                index += 1
            else:
                args[name] = True
        index += 1
    return args


def _median(values):
    values = sorted(values)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else round((values[middle - 1] + values[middle]) / 2.0, 3)


def restarts_of(records):
    """The recorded restarts among deployment records (twins, any order): those with a timeline whose downtime was
    measured -> [{when, key, downtime_s, phases}], newest first."""
    found = []
    for record in records or ():
        if not isinstance(record, dict):
            continue
        timeline = record.get("timeline") or {}
        if not isinstance(timeline, dict) or not isinstance(timeline.get("downtime_s"), (int, float)):
            continue
        if record.get("action") not in ("restart", "join", "start_after_stop"):
            continue
        found.append({"when": record.get("when") or "", "downtime_s": float(timeline["downtime_s"]),
                      "phases": dict(timeline.get("phases") or {}),
                      "key": restart_key(record.get("cmdline") or "", record.get("sglang_version") or "")})
    unique = {}
    for item in found:
        unique.setdefault((item["when"], item["downtime_s"]), item)
    return sorted(unique.values(), key=lambda item: item["when"], reverse=True)


def predict(records, key, weights_refusals=None, keep=10):
    """The downtime a restart into ``key`` ({release, model, flags}: restart_key of the new ExecStart) will cost,
    from this host's recorded restarts (restarts_of): the median of the last ``keep`` restarts of the same
    release, model and flags (``match: same``); else of the same release and model with other flags (``match:
    release_model``, said so); else ``basis: no history``. ``weights_refusals``: why the weights cannot be kept
    across this restart (the Weight Cache Daemon's refusals for the release and flags); the cost named is the
    recorded ``weights`` phase (median), which a kept set of weights would save."""
    restarts = restarts_of(records)
    same = [r for r in restarts if r["key"] == key]
    match = "same"
    if not same:
        same = [r for r in restarts if r["key"]["release"] == key["release"] and r["key"]["model"] == key["model"]]
        match = "release_model"
    used = same[:keep]
    out = {"release": key.get("release") or None, "model": key.get("model") or None}
    flags = flag_args(key.get("flags") or [])
    kept_by_flags = str(flags.get("weight-cache-mode", "off")) == "client"
    refusals = list(weights_refusals or [])
    out["weights_kept"] = kept_by_flags and not refusals
    if refusals:
        out["weights_not_kept"] = refusals
    if not used:
        out.update(basis="no history", downtime_s=None, restarts=0,
                   msg="no history: this host has no recorded restart of SGLang %s with model %s%s" % (
                       key.get("release") or "(release unknown)", key.get("model") or "(unknown)",
                       "" if restarts else " (no restart recorded at all)"))
        return out
    downtimes = [r["downtime_s"] for r in used]
    names = []
    for item in used:
        names.extend(name for name in item["phases"] if name not in names)
    phases = dict((name, _median([r["phases"][name] for r in used if name in r["phases"]])) for name in names)
    out.update(basis="history", match=match, restarts=len(used), downtime_s=_median(downtimes),
               range_s=[min(downtimes), max(downtimes)], phases=phases, from_records=[r["when"] for r in used])
    weights = phases.get("weights")
    if weights is not None:
        out["weight_load_s"] = weights
    words = "%s s (median of %d recorded restart%s of %s, %s..%s s)" % (
        out["downtime_s"], len(used), "" if len(used) == 1 else "s",
        "the same release, model and flags" if match == "same" else
        "the same release and model with OTHER flags", min(downtimes), max(downtimes))
    if refusals and weights is not None:
        words += "; the weights cannot be kept across it (%s): their load costs %s s of it" % (
            "; ".join(refusals), weights)
    elif not out["weights_kept"] and weights is not None:
        words += "; the weights are loaded again (%s s of it)" % weights
    out["msg"] = "predicted downtime " + words
    return out
