#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# One device call of the benchmark. The first call starts run.sh in a session of its own (setsid: it runs on
# between calls while the machine stays warm, with no per-call budget cutting it at a stage boundary); every call
# then waits until run.sh has ended or DEVICE_WAIT_S (default 560; a command may run 600 s) has passed, copies what
# run.sh has packed so far (results.jsonl, table.md, logs.tar.xz) and its log into $OUT, and says whether it ended.
# Call it again at once (the machine goes back 30 s after a call) until it says "ended":
#   bash benchmarks/restart_downtime/device.sh
# Exit: 0 ended and passed, 1 ended with a failure, 3 still running.
set -u
cd "$(dirname "$0")/../.." || exit 1
STATE=/var/tmp/gpuserve-restart-downtime
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$STATE/out" "$OUT"
if [ ! -s "$STATE/pid" ]; then
  # shellcheck disable=SC2016  # expanded by the inner bash
  BENCH_BUDGET_S=${BENCH_BUDGET_S:-100000} OUT="$STATE/out" setsid nohup bash -c \
    'bash benchmarks/restart_downtime/run.sh; echo $? > "$1/rc"' _ "$STATE" > "$STATE/bench.log" 2>&1 < /dev/null &
  echo $! > "$STATE/pid"
  echo "started run.sh (pid $(cat "$STATE/pid")) at $(date -u +%T)"
fi
deadline=$((SECONDS + ${DEVICE_WAIT_S:-560}))
while [ $SECONDS -lt "$deadline" ] && [ ! -e "$STATE/rc" ]; do sleep 5; done
cp -r "$STATE/out/." "$OUT/" 2>/dev/null; cp "$STATE/bench.log" "$OUT/bench.log"
tail -c 10000 "$STATE/bench.log"
echo
if [ -e "$STATE/rc" ]; then
  echo "=== device.sh: run.sh ended, rc $(cat "$STATE/rc") ==="
  [ "$(cat "$STATE/rc")" = 0 ] && exit 0; exit 1
fi
echo "=== device.sh: run.sh still running at $(date -u +%T): call again now ==="
exit 3
