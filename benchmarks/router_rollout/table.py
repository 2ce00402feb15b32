# SPDX-License-Identifier: GPL-3.0-or-later
"""Markdown table of the router rollout benchmark (the files molecule/router writes with ROUTER_BENCH_OUT)."""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--json", default="", help="also write the runs, together, to this file")
    args = parser.parse_args(argv)
    runs = [json.load(open(path)) for path in args.files]
    print("| rollout of 4 workers | gateway | requests | failed | errors | p50 | p99 | rollout time |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        label = "drain on (default)" if run["case"] == "drain" else "drain off (`sglang_rollout_drain=false`)"
        # one load per router host since the scenario runs both gateways; older files hold one "load"
        loads = run.get("loads") or {"router": run["load"]}
        for host, load in sorted(loads.items()):
            gateway = run.get("gateways", {}).get(host, "sglang-router")
            errors = ", ".join("%s: %d" % kv for kv in sorted(load["errors"].items())) or "none"
            print("| %s | %s | %d | **%d** | %s | %.2f s | %.2f s | %s |" % (
                label, gateway, load["requests"], load["failed"], errors, load["p50_s"] or 0, load["p99_s"] or 0,
                run["rollout_seconds"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(runs, handle, indent=1, sort_keys=True)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
