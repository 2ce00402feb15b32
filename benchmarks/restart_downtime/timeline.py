# SPDX-License-Identifier: GPL-3.0-or-later
"""A restart's downtime and its phases, from the probe's answers and the unit's journal.

  timeline.py restart NAME PROBE_JSONL JOURNAL_JSON T_FROM T_TO [KEY=VALUE ...]   one restart -> JSON on stdout
  timeline.py table RESULTS_JSONL                                                 the markdown table

The downtime is the longest gap between two answered probe requests in [T_FROM, T_TO]: from the last request the
old process answered to the first the new one answered. The phases cut that interval at the journal's timestamps
(systemd's messages about the unit and SGLang's own lines, in the order a start prints them), so they add up to it;
a marker that is missing merges its phase into the next. SGLang's `Engine startup timings (s)` line is kept as
printed."""
import json
import re
import sys

# (phase ending at this marker, marker name, test on a journal entry); in the order a restart passes them
MARKERS = [
    ("until SIGTERM", "sigterm", lambda m, e: "SIGTERM received" in m),
    ("drain and stop (to the last process reaped)", "stopped",
     lambda m, e: e.get("_PID") == "1" and ("Deactivated successfully" in m or "Failed with result" in m
                                            or m.startswith("Stopped "))),
    ("systemd: stopped to started", "started", lambda m, e: e.get("_PID") == "1" and m.startswith("Started ")),
    ("process start, imports, tokenizer", "dist_begin", lambda m, e: "Init torch distributed begin" in m),
    ("torch distributed, model init", "load_begin", lambda m, e: "Load weight begin" in m),
    ("weights loaded", "load_end", lambda m, e: "Load weight end" in m),
    ("KV pool allocated", "kv_end", lambda m, e: "Memory pool end" in m),
    ("CUDA graphs captured", "graph_end", lambda m, e: "CUDA graph end" in m),
    ("HiCache host pool allocated", "tree_init", lambda m, e: "Tree cache initialized" in m),
    ("HTTP server up", "http_up", lambda m, e: "Uvicorn running" in m or "Application startup complete" in m),
    ("warm-up request, ready", "ready", lambda m, e: "fired up and ready to roll" in m),
]
LAST = {"stopped", "graph_end"}  # the last of these (several graphs; stopped then deactivated) before the next marker


def _msg(e):
    m = e.get("MESSAGE", "")
    if isinstance(m, list):  # journalctl -o json writes a binary field as a list of bytes
        m = bytes(m).decode("utf-8", "replace")
    return m or ""


def load_jsonl(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def downtime(probes, t_from, t_to):
    oks = sorted(p["t1"] for p in probes if p.get("ok") and t_from <= p["t1"] <= t_to)
    if len(oks) < 2:
        return None
    gaps = [(b - a, a, b) for a, b in zip(oks, oks[1:])]
    g, a, b = max(gaps)
    failed = [p for p in probes if not p.get("ok") and a < p["t0"] < b]
    return {"last_old_answer": a, "first_new_answer": b, "seconds": round(g, 3), "failed_requests": len(failed),
            "answered_in_window": len(oks)}


def timings(text):
    """SGLang 0.5.17's `Engine startup timings (s): load_weight=.., kv_cache_allocation=.., scheduler_e2e=..,
    cuda_graph={prefill=.., decode=.., ...}, tokenizer_e2e=..` as numbers."""
    out = {}
    for k, v in re.findall(r"(\w+)=([0-9.]+)", text.split("timings (s):", 1)[-1]):
        out[k] = float(v)
    return out


def restart(name, probes, journal, t_from, t_to, extra=None):
    res = {"name": name, "t_from": t_from, "t_to": t_to}
    res.update(extra or {})
    d = downtime(probes, t_from, t_to)
    res["downtime"] = d
    if not d:
        res["error"] = "fewer than two answered requests in the window"
        return res
    entries = []
    for e in journal:
        try:
            t = int(e["__REALTIME_TIMESTAMP"]) / 1e6
        except (KeyError, ValueError):
            continue
        if d["last_old_answer"] - 1 <= t <= d["first_new_answer"] + 1:
            entries.append((t, _msg(e), e))
    entries.sort(key=lambda x: x[0])
    found, pos = {}, 0
    for i, (_label, key, test) in enumerate(MARKERS):
        later = [marker[2] for marker in MARKERS[i + 1:]]
        hit = None
        for j in range(pos, len(entries)):
            _when, m, e = entries[j]
            if test(m, e):
                hit = j
                if key not in LAST:
                    break
            elif key in LAST and hit is not None and any(tst(m, e) for tst in later):
                break
        if hit is not None:
            found[key] = entries[hit][0]
            pos = hit + 1
    for t, m, e in entries:
        if "Engine startup timings" in m:
            res["sglang_startup_timings"] = timings(m)
        if "Load weight end" in m:
            w = re.search(r"elapsed=([0-9.]+) s", m)
            if w:
                res["load_weight_line_s"] = float(w.group(1))
        if "Allocating kv hierarchical KV host pool" in m:
            res["host_pool_line"] = m.split("Allocating", 1)[-1].strip()[:120]
        if "KV Cache is allocated" in m:
            res["kv_line"] = m.split("KV Cache", 1)[-1].strip()[:120]
        if "weight cache" in m.lower() or ("ipc" in m.lower() and "weight" in m.lower()):
            res.setdefault("weight_cache_lines", []).append(m[-300:])
    phases, prev, merged = [], d["last_old_answer"], []
    for label, key, _test in MARKERS:
        t = found.get(key)
        if t is None or t < prev:
            merged.append(label)
            continue
        phases.append({"phase": " + ".join(merged + [label]), "seconds": round(t - prev, 3)})
        prev, merged = t, []
    phases.append({"phase": " + ".join(merged + ["ready to the first answered request"]),
                   "seconds": round(d["first_new_answer"] - prev, 3)})
    res["phases"] = phases
    res["markers"] = {k: round(v, 3) for k, v in found.items()}
    total = sum(p["seconds"] for p in phases)
    res["phases_sum_s"] = round(total, 3)
    res["phases_vs_downtime_pct"] = round(100.0 * (total - d["seconds"]) / d["seconds"], 2) if d["seconds"] else None
    if "ready" in found:
        res["ready_s"] = round(found["ready"] - d["last_old_answer"], 3)
    return res


def load_answer(path):
    """A module's answer saved as JSON: (answer, None), or (None, {"error": why}) where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), None
    except (OSError, ValueError) as exc:
        return None, {"error": str(exc)}


def module_view(path):
    r, err = load_answer(path)
    if err:
        return err
    rs = r.get("restart") or {}
    stop = rs.get("stop") or {}
    return {"action": r.get("action"), "changed": r.get("changed"), "failed": r.get("failed"),
            "msg": (r.get("msg") or "")[:600], "timeline": rs.get("timeline"), "kv_cache": rs.get("kv_cache"),
            "hicache": {k: v for k, v in (rs.get("hicache") or {}).items()
                        if k in ("host_pool_gb_per_rank", "host_pool_tokens_per_rank", "requested")},
            "stop": {k: stop.get(k) for k in ("result", "ending", "seconds", "killed")}}


def predicted_view(path):
    """The ``--check`` run's answer (the sglang_server module's): restart.predicted_downtime, without its record list."""
    r, err = load_answer(path)
    if err:
        return err
    p = (r.get("restart") or {}).get("predicted_downtime") or {}
    return {k: p.get(k) for k in ("basis", "match", "restarts", "downtime_s", "range_s", "weight_load_s",
                                  "weights_kept", "weights_not_kept", "msg")}


COLS = [("drain and stop", ("until SIGTERM", "drain and stop")), ("stopped -> started", ("systemd",)),
        ("start -> dist. init", ("process start",)), ("-> weights begin", ("torch distributed",)),
        ("weights", ("weights loaded",)), ("KV pool", ("KV pool",)), ("CUDA graphs", ("CUDA graphs",)),
        ("HiCache host pool", ("HiCache",)), ("HTTP + ready", ("HTTP server", "warm-up", "ready to the first"))]


def table(results):
    head = (["configuration", "downtime s"] + [col[0] for col in COLS]
            + ["SGLang load_weight", "SGLang cuda_graph", "module's downtime_s", "--check predicted s"])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        d = r.get("downtime") or {}
        label = r.get("label", r["name"])
        if str(r.get("role_rc", "0")) != "0":
            label += " (role run failed, rc %s)" % r.get("role_rc")
        row = [label, "%.1f" % d["seconds"] if d else "n/a"]
        for _col, keys in COLS:
            s = sum(p["seconds"] for p in r.get("phases", []) if p["phase"].split(" + ")[-1].startswith(keys))
            row.append("%.1f" % s)
        st = r.get("sglang_startup_timings", {})
        row.append("%.2f" % st["load_weight"] if "load_weight" in st else "")
        row.append("%.2f" % (st.get("prefill", 0) + st.get("decode", 0)) if st else "")
        mt = ((r.get("module") or {}).get("timeline") or {}).get("downtime_s")
        row.append("%.1f" % mt if isinstance(mt, (int, float)) else "")
        pr = r.get("predicted") or {}
        row.append("%.1f (%s)" % (pr["downtime_s"], pr.get("match")) if isinstance(pr.get("downtime_s"), (int, float))
                   else (pr.get("basis") or ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv):
    if argv[0] == "restart":
        name, probe, journal, t_from, t_to = argv[1:6]
        extra = dict(a.split("=", 1) for a in argv[6:])
        if "module" in extra:  # the sglang_server module's answer: its own timeline and stop report, beside ours
            extra["module"] = module_view(extra["module"])
        if "check" in extra:  # the same role run in --check first: what the module predicted for this restart
            extra["predicted"] = predicted_view(extra.pop("check"))
        print(json.dumps(restart(name, load_jsonl(probe), load_jsonl(journal), float(t_from), float(t_to), extra)))
    elif argv[0] == "table":
        print(table(load_jsonl(argv[1])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
