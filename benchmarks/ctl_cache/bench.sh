#!/usr/bin/env bash
# The test controller's compile caches (tests/testcontroller/gpuserve_test_ctl.py): the controller's CPU for one
# no-op run of the server role (molecule `server`'s idempotence step: its converge again on a served host), with
# the caches off and on, alternating, N runs each. CPU of molecule and everything it starts on the controller
# (ansible-playbook, its workers, the docker CLI), from getrusage; the host's CPU is not counted (the caches do
# not change what runs there). Needs the engine and the test images (make engine && scripts/test-images.sh).
# Usage: benchmarks/ctl_cache/bench.sh [runs] (default 5). Leaves nothing behind (molecule destroy at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
runs="${1:-5}"
export PATH="$ROOT/.venv/bin:$PATH" ANSIBLE_PIPELINING=True
image() { sed -n "s/^$1=//p" "$ROOT/.cache/test-images.env"; }   # scripts/test-images.sh wrote it
SYSTEMD_IMAGE="$(image standin)" SYSTEMD_IMAGE_DEBIAN13="$(image debian13)"
export SYSTEMD_IMAGE SYSTEMD_IMAGE_DEBIAN13
cache="$(mktemp -d)"
cleanup() { molecule destroy -s server >/dev/null 2>&1 || true; rm -rf "$cache"; }
trap cleanup EXIT
env -u GPUSERVE_TEST_CTL_CACHE molecule converge -s server >/dev/null 2>&1
measure() {  # $1: off|on -> "wall cpu"
  python3 - "$1" "$cache" <<'PY'
import os, resource, subprocess, sys, time
env = dict(os.environ)
env.pop("GPUSERVE_TEST_CTL_CACHE", None)
if sys.argv[1] == "on":
    env["GPUSERVE_TEST_CTL_CACHE"] = sys.argv[2]
t = time.monotonic()
subprocess.run(["molecule", "idempotence", "-s", "server"], env=env, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL, check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.2f %.2f" % (time.monotonic() - t, usage.ru_utime + usage.ru_stime))
PY
}
measure on >/dev/null   # fills the cache once
echo "| run | caches | wall s | controller CPU s | load at start |"
echo "|---|---|---:|---:|---:|"
for i in $(seq "$runs"); do
  for mode in off on; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    read -r wall cpu <<<"$(measure "$mode")"
    echo "| $i | $mode | $wall | $cpu | $load |"
  done
done
