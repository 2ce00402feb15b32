#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""A bounded load generator: a fixed number of streaming chat completions at a fixed concurrency, to ONE URL.

Used by molecule/router and benchmarks/router_rollout (it runs on the router test host, against the router on
127.0.0.1). Standard library only. A request counts as ok only with HTTP 200 and a stream that ends with
``data: [DONE]``; anything else (no answer, reset, 5xx, a stream cut before [DONE]) is failed.

  python3 load.py --url http://127.0.0.1:30000 --count 2000 --concurrency 8 --max-tokens 50 \
      --stop-file /tmp/stop --out /tmp/load.json

--stop-file: once the file exists no new request starts (those in flight finish); the count stays the upper
bound. The result (JSON): requests, ok, failed, errors (by kind, with a few samples), latency p50/p99 of the
ok ones, seconds, and failures per second of the run (when they happened).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

try:
    from http.client import HTTPConnection, HTTPException
except ImportError:  # pragma: no cover
    raise

ALLOWED_HOSTS = ("127.0.0.1", "localhost", "::1")


def percentile(values, pct):
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(pct / 100.0 * (len(ordered) - 1)))))
    return round(ordered[index], 4)


def one_request(host, port, path, body, headers, timeout):
    """(ok, kind of error or None, seconds)."""
    start = time.monotonic()
    conn = HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return False, "http %d" % resp.status, time.monotonic() - start
        text = resp.read().decode("utf-8", "replace")
        if "data: [DONE]" not in text:
            return False, "stream cut before [DONE]", time.monotonic() - start
        return True, None, time.monotonic() - start
    except (HTTPException, OSError, HTTPError, URLError) as exc:
        return False, type(exc).__name__, time.monotonic() - start
    finally:
        conn.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--api-key", default=os.environ.get("LOAD_API_KEY", ""))
    parser.add_argument("--allow-host", action="append", default=[],
                        help="another host name the URL may point at (default: loopback only)")
    args = parser.parse_args(argv)
    url = urlsplit(args.url)
    if url.hostname not in ALLOWED_HOSTS + tuple(args.allow_host):
        parser.error("the load goes to test hosts only: %s is not loopback nor --allow-host" % url.hostname)
    if not (0 < args.count <= 100000 and 0 < args.concurrency <= 256):
        parser.error("--count must be 1..100000 and --concurrency 1..256")
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer %s" % args.api_key

    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "failed": 0, "errors": {}, "latencies": [], "fail_times": []}
    t0 = time.monotonic()

    def worker():
        rnd = random.Random()
        while True:
            with lock:
                if state["next"] >= args.count or (args.stop_file and os.path.exists(args.stop_file)):
                    return
                state["next"] += 1
                n = state["next"]
            prompt = "request %d %08x: tell me about the fleet" % (n, rnd.getrandbits(32))
            body = json.dumps({"model": "default", "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": args.max_tokens, "stream": True}).encode()
            ok, kind, seconds = one_request(url.hostname, url.port or 80, "/v1/chat/completions", body, headers,
                                            args.timeout)
            with lock:
                if ok:
                    state["ok"] += 1
                    state["latencies"].append(seconds)
                else:
                    state["failed"] += 1
                    state["errors"][kind] = state["errors"].get(kind, 0) + 1
                    state["fail_times"].append(round(time.monotonic() - t0, 1))

    threads = [threading.Thread(target=worker) for dummy in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {
        "url": args.url, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "requests": state["ok"] + state["failed"], "ok": state["ok"], "failed": state["failed"],
        "errors": state["errors"], "p50_s": percentile(state["latencies"], 50),
        "p99_s": percentile(state["latencies"], 99), "seconds": round(time.monotonic() - t0, 2),
        "fail_times_s": state["fail_times"][:50],
    }
    text = json.dumps(result, sort_keys=True)
    if args.out:
        with open(args.out + ".tmp", "w") as handle:
            handle.write(text + "\n")
        os.rename(args.out + ".tmp", args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
