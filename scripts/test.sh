#!/usr/bin/env bash
# `make test`: lint, sanity, unit tests and every molecule scenario. Starts the Docker engine
# only when none answers, and stops only what it started.
# Two lanes run at once: the static lane (lint, the controller matrix's sanity, parser venv, reference check, unit tests: CPU-bound,
# about 4 minutes) and the molecule lane (scripts/molecule-all.sh, several scenarios at once: mostly waiting on
# systemd, pip and the stand-in's simulated load times). Each step prints its time; the static lane's output is
# printed when it ends (its log stays in .cache/test-logs/static.log).
#   scripts/test.sh                  -> everything (make test, CI)
#   scripts/test.sh --fast SCENARIO  -> the inner loop: the same static lane, one molecule scenario (make test-fast S=...)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
t0=$SECONDS
only=()
if [[ "${1:-}" == --fast ]]; then
  [[ $# -eq 2 && -n "$2" ]] || { echo "test: --fast needs one scenario (make test-fast S=server)" >&2; exit 2; }
  [[ -f "molecule/$2/molecule.yml" ]] || { echo "test: no scenario '$2' (molecule/ORDER lists them)" >&2; exit 2; }
  only=("$2")
elif [[ $# -gt 0 ]]; then
  echo "test: unknown arguments: $* (scripts/test.sh [--fast SCENARIO])" >&2; exit 2
fi
scripts/venv.sh || exit 1
scripts/collection-link.sh
export PATH="$ROOT/.venv/bin:$PATH"
started_engine=0
if ! docker info >/dev/null 2>&1; then started_engine=1; fi
cleanup() { if [[ $started_engine == 1 ]]; then scripts/docker-engine.sh down; fi; }
trap cleanup EXIT
scripts/docker-engine.sh up || exit 1
scripts/systemd-image.sh || exit 1
# Debian packages some tests need: shellcheck (ansible-test's shellcheck test; skipped without it),
# promtool (the Prometheus rule tests) and the SSH client the molecule scenarios reach their hosts with
# (scripts/molecule-hosts.py), installed only when absent.
need=()
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
if [[ ${#need[@]} -gt 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "test: installing ${need[*]} from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } \
    || echo "test: ${need[*]} could not be installed; the tests that need them will say so"
  # Debian starts the prometheus service it installs: this machine needs only promtool.
  if [[ " ${need[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl stop prometheus prometheus-node-exporter >/dev/null 2>&1 || true
  fi
fi
echo "test: set-up took $((SECONDS - t0)) s"
# One fixed piece of CPU work before the lanes start: the seconds of two machines' runs compare only with it
# (the suite took 1927 s on one 2-core machine and, with this session's levers, 3467 s on another; docs/development.md).
echo "test: machine reference: $(python3 -c 'import time; t = time.process_time(); sum(i * i for i in range(3000000)); print("%.2f" % (time.process_time() - t))') s of CPU for a fixed loop (load average $(cut -d' ' -f1 /proc/loadavg))"

step() {
  local name="$1"; shift
  local t=$SECONDS
  echo "##### $name"
  if "$@"; then echo "##### $name: ok ($((SECONDS - t)) s)"; else echo "##### $name: FAILED ($((SECONDS - t)) s)"; return 1; fi
}
# The static lane runs at a lower CPU priority (nice, TEST_STATIC_NICE, default 5): the molecule lane is the
# longer one, and on two cores the run ends when it ends. The unit tests' waits poll conditions with generous
# bounds, so a slower static lane changes no result (docs/development.md, "A busy machine").
static_lane() {
  local rc=0
  renice -n "${TEST_STATIC_NICE:-5}" -p "$BASHPID" >/dev/null 2>&1 || true
  step lint    ansible-lint --profile production || rc=1
  # ansible-test sanity and the plugin unit tests on the oldest maintained ansible-core (meta/runtime.yml's lower bound)
  # and PyPI's newest, pre-releases included (tests/controllers.txt: 2.19 on Python 3.11, "latest" on Python 3.13). The
  # development controller (.venv, 2.21 on Python 3.12) runs lint, the unit tests and the molecule scenarios; `make
  # sanity` is its own sanity.
  step controllers env MATRIX_SKIP_DEV_UNIT=1 scripts/controller-matrix.sh || rc=1
  step parser-venv tests/sglang_parser/setup-venv.sh || rc=1
  step reference python scripts/gen-reference.py --check || rc=1
  # The junit report gives scripts/test-times.py the seconds of each test file.
  step unit    python -m pytest tests/unit -q -p no:cacheprovider --durations=15 \
    --junitxml=.cache/test-logs/unit.xml -o junit_family=xunit1 || rc=1
  # the cores' counters when this lane ends: the molecule lane may start one more scenario from now on
  cpu_stat >"$static_done"
  return $rc
}
cpu_stat() { echo "$SECONDS $(awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat)"; }   # s, busy and idle ticks
busy_pct() {  # "s busy idle" "s busy idle" -> "P % of the cores busy over S s"
  local s0 b0 i0 s1 b1 i1
  read -r s0 b0 i0 <<<"$1"; read -r s1 b1 i1 <<<"$2"
  echo "$(( (b1 - b0) * 100 / ((b1 - b0) + (i1 - i0) + 1) )) % of the cores busy over $((s1 - s0)) s"
}

# Logs of this run only: scripts/test-times.py reports what it finds there.
rm -rf .cache/test-logs .cache/molecule-logs
# The test controller's compile caches (Jinja templates, the collection's plugin code, AnsiballZ payloads;
# tests/testcontroller/gpuserve_test_ctl.py, keyed by everything each depends on) for every ansible-playbook,
# molecule and pytest of this run, in a directory of this run only.
export GPUSERVE_TEST_CTL_CACHE="$ROOT/.cache/ctl-cache"
rm -rf "$GPUSERVE_TEST_CTL_CACHE"
mkdir -p .cache/test-logs
# Three scenarios at once while the static lane runs, four once it has ended (MOLECULE_JOBS_LATER; docs/development.md,
# "The levers"): the lane's end is the file $static_done.
static_done="$ROOT/.cache/test-logs/static.done"
export MOLECULE_JOBS_LATER="${MOLECULE_JOBS_LATER:-4}" MOLECULE_JOBS_LATER_WHEN="$static_done"
cpu_start="$(cpu_stat)"
static_lane >.cache/test-logs/static.log 2>&1 &
static_pid=$!
rc=0
step molecule scripts/molecule-all.sh "${only[@]}" || rc=1
wait "$static_pid" || rc=1
echo "##### static lane (lint, controllers, parser venv, reference, unit):"
cat .cache/test-logs/static.log
python3 scripts/test-times.py --top 15 || true
cpu_end="$(cpu_stat)"
if [[ -s "$static_done" ]]; then
  echo "test: $(busy_pct "$cpu_start" "$(cat "$static_done")") while both lanes ran, $(busy_pct "$(cat "$static_done")" "$cpu_end") after the static lane"
fi
# A red run names what failed in its last lines (CI keeps only the tail of the output).
[[ $rc == 0 ]] || python3 scripts/test-times.py --failures || true
echo "test: $( [[ $rc == 0 ]] && echo green || echo RED ) after $((SECONDS - t0)) s"
exit $rc
