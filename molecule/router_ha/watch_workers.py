# SPDX-License-Identifier: GPL-3.0-or-later
"""Test tool (molecule/router_ha): poll one sglang-router's GET /workers until a stop file appears, then write a
summary as JSON: for each worker URL ever seen, the intervals [gone, back] during which the router did not list
it (back is null when it never came back) and those during which it was listed but not healthy, plus the last
list. Times are epoch seconds (the test hosts share the machine's clock)."""
import argparse
import json
import os
import time
import urllib.request


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--workers", nargs="+", required=True)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    absent = dict((w, []) for w in args.workers)
    unhealthy = dict((w, []) for w in args.workers)
    samples = errors = 0
    last = {}
    while not os.path.exists(args.stop_file):
        now = time.time()
        try:
            with opener.open(args.url.rstrip("/") + "/workers", timeout=2) as resp:
                listed = json.loads(resp.read().decode()).get("workers") or []
        except (OSError, ValueError):
            errors += 1
            time.sleep(args.interval)
            continue
        samples += 1
        last = dict((w.get("url", "").rstrip("/"), bool(w.get("is_healthy"))) for w in listed)
        for worker in args.workers:
            for store, bad in ((absent, worker not in last), (unhealthy, worker in last and not last[worker])):
                spans = store[worker]
                if bad and (not spans or spans[-1][1] is not None):
                    spans.append([now, None])
                elif not bad and spans and spans[-1][1] is None:
                    spans[-1][1] = now
        time.sleep(args.interval)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump({"samples": samples, "errors": errors, "absent": absent, "unhealthy": unhealthy,
                   "last": last}, handle)


if __name__ == "__main__":
    main()
