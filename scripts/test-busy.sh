#!/usr/bin/env bash
# `make test-busy`: the whole `make test` beside a competing CPU load (issue 20: no result may depend on how busy
# the machine is). stress-ng (Debian's package, installed when absent) keeps BUSY_CPUS cores (default 1 of this
# machine's 2) at 100 % for as long as the suite runs; it is stopped when the suite ends, whatever its result.
# The suite's own result is the exit code. Its time is not a budget figure (docs/development.md, "A busy machine").
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
cpus="${BUSY_CPUS:-1}"
[[ "$cpus" =~ ^[1-9][0-9]*$ ]] || { echo "test-busy: BUSY_CPUS must be a positive integer" >&2; exit 2; }
if ! command -v stress-ng >/dev/null 2>&1; then
  echo "test-busy: installing stress-ng from Debian"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng >/dev/null 2>&1 \
    || { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng >/dev/null; }; } \
    || { echo "test-busy: stress-ng could not be installed" >&2; exit 1; }
fi
mkdir -p .cache
# nice 0, as the suite: the load competes as an equal, not as a background job.
stress-ng --cpu "$cpus" --cpu-method matrixprod --metrics-brief >.cache/stress-ng.log 2>&1 &
load_pid=$!
trap 'kill "$load_pid" 2>/dev/null; wait "$load_pid" 2>/dev/null' EXIT
echo "test-busy: stress-ng --cpu $cpus running (pid $load_pid) beside make test"
scripts/test.sh
rc=$?
echo "test-busy: make test beside stress-ng --cpu $cpus: $([[ $rc == 0 ]] && echo green || echo RED) (load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
exit $rc
