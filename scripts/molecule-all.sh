#!/usr/bin/env bash
# Run every molecule scenario (full sequence incl. idempotence), or the ones named, several at once.
#   scripts/molecule-all.sh              -> all scenarios of molecule/ORDER
#   scripts/molecule-all.sh server cuda  -> just those
#   MOLECULE_JOBS=1 scripts/molecule-all.sh   -> one at a time (default: 3 at once)
#   MOLECULE_JOBS_LATER=4 MOLECULE_JOBS_LATER_WHEN=FILE -> 4 at once from the moment FILE exists (scripts/test.sh:
#   once its static lane has ended and left the cores to this lane, whose scenarios wait on systemd, pip and the
#   stand-in's drains, so three of them alone leave a core idle part of the time)
# Scenarios are independent (each has its own containers, named after the scenario, and its own molecule
# state directory), so they run concurrently; most of their time is spent waiting on systemd, pip and the
# stand-in's simulated load times, not on the CPU. molecule/ORDER lists the longest first so that the last
# one to start is a short one. Each scenario's output goes to .cache/molecule-logs/<scenario>.log; the log of
# a failed scenario is printed whole when it ends, a passed one prints one line (the log stays on disk).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-0}" PY_COLORS="${PY_COLORS:-0}"
# Pipelining: one `docker exec` per task instead of several (mkdir, put, run, rm). Measured here, 40 looped
# tasks against one container: 150 s wall / 9.0 s CPU without, 61 s / 3.4 s with (docs/performance.md).
export ANSIBLE_PIPELINING="${ANSIBLE_PIPELINING:-True}"
# The test controller's compile caches (tests/testcontroller/gpuserve_test_ctl.py): scripts/test.sh sets them for
# the whole run; a run of this script alone gets its own.
if [[ -z "${GPUSERVE_TEST_CTL_CACHE:-}" ]]; then
  export GPUSERVE_TEST_CTL_CACHE="$ROOT/.cache/ctl-cache"
  rm -rf "$GPUSERVE_TEST_CTL_CACHE"
fi
jobs_max="${MOLECULE_JOBS:-3}"
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || { echo "molecule: MOLECULE_JOBS must be a positive integer" >&2; exit 2; }
jobs_later="${MOLECULE_JOBS_LATER:-$jobs_max}"
[[ "$jobs_later" =~ ^[1-9][0-9]*$ ]] || { echo "molecule: MOLECULE_JOBS_LATER must be a positive integer" >&2; exit 2; }
jobs_now() {  # how many scenarios may run at once now
  if [[ -n "${MOLECULE_JOBS_LATER_WHEN:-}" && -e "$MOLECULE_JOBS_LATER_WHEN" ]]; then echo "$jobs_later"; else echo "$jobs_max"; fi
}
if [[ $# -gt 0 ]]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <(grep -vE '^\s*(#|$)' molecule/ORDER)
fi
for s in "${scenarios[@]}"; do
  [[ -f "molecule/$s/molecule.yml" ]] || { echo "molecule: no scenario '$s'" >&2; exit 2; }
done
logs="$ROOT/.cache/molecule-logs"
mkdir -p "$logs"
# The prepared host images (scripts/test-images.sh, cached per recipe) and which scenario runs on which
# (molecule/IMAGES): each scenario's SYSTEMD_IMAGE, the image every platform of molecule.yml names.
"$ROOT/scripts/test-images.sh" || { echo "molecule: the test host images could not be built" >&2; exit 1; }
declare -A image_of=()
while IFS='=' read -r kind image; do image_of[$kind]="$image"; done <"$ROOT/.cache/test-images.env"
image_for() {  # scenario -> image
  local kind
  kind="$(awk -v s="$1" '$1 == s {print $2}' "$ROOT/molecule/IMAGES")"
  echo "${image_of[${kind:-host}]:-${image_of[host]}}"
}

run_one() {  # runs in its own subshell (started with &)
  local s="$1" start=$SECONDS rc ctl hosts=0
  rm -f "$logs/$s.hostcpu" "$logs/$s.times"
  # Each line stamped with the time it arrived: scripts/test-times.py reads the step times from it.
  SYSTEMD_IMAGE="$(image_for "$s")" SYSTEMD_IMAGE_DEBIAN13="${image_of[debian13]}" \
    GPUSERVE_HOST_CPU_FILE="$logs/$s.hostcpu" \
    molecule test -s "$s" 2>&1 | python3 "$ROOT/scripts/stamp-lines.py" >"$logs/$s.log"
  rc=${PIPESTATUS[0]}
  # The scenario's CPU seconds (the suite is CPU-bound: docs/development.md, budget per scenario). The controller
  # side: molecule and every process it waited for, from this subshell's `times` (its second line: the children;
  # written to a file, as `times` in a command substitution would report that substitution's own subshell). The
  # hosts: their containers' cgroups, which scripts/molecule-hosts.py reads before it removes them.
  times >"$logs/$s.times"
  ctl="$(awk 'NR == 2 { split($1, u, "m"); split($2, k, "m"); printf "%.1f", u[1] * 60 + u[2] + k[1] * 60 + k[2] }' \
         "$logs/$s.times")"
  [[ -f "$logs/$s.hostcpu" ]] && hosts="$(awk '{ t += $1 } END { printf "%.1f", t }' "$logs/$s.hostcpu")"
  echo "$rc $((SECONDS - start)) ${ctl:-0} $hosts" >"$logs/$s.result"
  return "$rc"
}

declare -A pid_of=()
failed=()
report() {  # the scenario $1 has ended
  local s="$1" rc secs ctl hosts
  read -r rc secs ctl hosts <"$logs/$s.result" 2>/dev/null || { rc=1; secs='?'; }
  if [[ "$rc" == 0 ]]; then
    echo "=== scenario $s: passed in $secs s ($(date +%T); CPU: controller ${ctl:-?} s, hosts ${hosts:-?} s)"
  else
    echo "=== scenario $s: FAILED after $secs s ($(date +%T)); its log ($logs/$s.log):"
    sed 's/^/    | /' "$logs/$s.log"
    echo "=== end of scenario $s's log"
    failed+=("$s")
  fi
}
reap() {  # wait for any running scenario to end and report it; with `room`, also return once one more may start
  local s
  while true; do
    for s in "${!pid_of[@]}"; do
      if ! kill -0 "${pid_of[$s]}" 2>/dev/null; then
        wait "${pid_of[$s]}" 2>/dev/null
        unset "pid_of[$s]"
        report "$s"
        return
      fi
    done
    if [[ "${1:-}" == room && ${#pid_of[@]} -lt $(jobs_now) ]]; then return; fi
    sleep 1
  done
}

total_start=$SECONDS
for s in "${scenarios[@]}"; do
  while [[ ${#pid_of[@]} -ge $(jobs_now) ]]; do reap room; done
  rm -f "$logs/$s.result"
  echo "=== molecule test -s $s: started ($(date +%T))"
  run_one "$s" &
  pid_of[$s]=$!
done
while [[ ${#pid_of[@]} -gt 0 ]]; do reap; done
echo "molecule: ${#scenarios[@]} scenarios in $((SECONDS - total_start)) s, $jobs_max at once$( [[ $jobs_later != "$jobs_max" ]] && echo ", $jobs_later once $MOLECULE_JOBS_LATER_WHEN was there")"
[[ ${#failed[@]} -eq 0 ]] || echo "molecule: failed scenarios: ${failed[*]}"
echo "molecule: $(( ${#scenarios[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
[[ ${#failed[@]} -eq 0 ]]
