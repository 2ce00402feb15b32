#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Router-aware rollout benchmark: 4 stand-in workers (test fixture) behind one sglang-router 0.3.2, a bounded load
# (streaming chat completions, concurrency 8, 40 tokens at 20 ms each) through the router during a rolling HiCache
# ratio change of all 4 workers, with the drain (playbooks/restart.yml behind routers) and without it
# (sglang_rollout_drain=false). It runs the molecule scenario `router` (which asserts the same things) and keeps
# its numbers: failed requests, p50/p99 latency of the successful ones, rollout time.
#   benchmarks/router_rollout/bench.sh            -> benchmarks/router_rollout/results.json + a Markdown table
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
out="$ROOT/.cache/router-bench"
mkdir -p "$out"
rm -f "$out"/run.*.json
ROUTER_BENCH_OUT="$out/run" make molecule S=router
.venv/bin/python benchmarks/router_rollout/table.py "$out"/run.drain.json "$out"/run.nodrain.json \
  --json benchmarks/router_rollout/results.json
