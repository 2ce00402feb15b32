#!/usr/bin/env bash
# The controller matrix (issue 23): ansible-test sanity and the plugin unit tests (tests/unit/plugins: the modules,
# module_utils and filters, everything ansible-core runs of ours) on each controller of tests/controllers.txt, the
# oldest and the newest ansible-core that meta/runtime.yml admits. The development controller (.venv, 2.21) runs
# lint, the rest of the unit tests and the molecule scenarios.
# Each controller's venv is made once per machine in the cache outside the checkout (as scripts/venv.sh does:
# named by the sha256 of what goes in and the interpreter, built under flock). The interpreter: python<X.Y> on PATH,
# else pyenv's (this machine kind has 3.11, 3.12 and 3.13 under ~/.pyenv/versions); a missing one fails the run.
#   scripts/controller-matrix.sh           -> every controller of tests/controllers.txt
#   scripts/controller-matrix.sh 2.21.5    -> that one
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
mkdir -p "$CACHE"
scripts/collection-link.sh

find_python() { "$ROOT/scripts/find-python.sh" "$1" 2>/dev/null; }   # X.Y -> a path to that interpreter

controller_venv() {  # core python -> prints the venv path (built when missing)
  local core="$1" pyv="$2" py want venv
  py="$(find_python "$pyv")" || { echo "controllers: no Python $pyv here (python$pyv on PATH or pyenv)" >&2; return 1; }
  want="$( (sed "s/@CORE@/$core/" tests/controller-requirements.txt; "$py" -c 'import sys; print(sys.version)') \
           | sha256sum | cut -d' ' -f1)"
  venv="$CACHE/controller-$core-py$pyv-${want:0:12}"
  (
    exec 9>"$CACHE/.controller.lock"
    flock 9
    if [[ -x "$venv/bin/python" && "$(cat "$venv/.requirements.sha256" 2>/dev/null)" == "$want" ]]; then exit 0; fi
    echo "controllers: creating $venv" >&2
    rm -rf "$venv"
    "$py" -m venv "$venv" && "$venv/bin/python" -m pip install -q --upgrade pip >&2 \
      && sed "s/@CORE@/$core/" tests/controller-requirements.txt >"$venv/requirements.txt" \
      && "$venv/bin/python" -m pip install -q -r "$venv/requirements.txt" >&2 \
      && echo "$want" >"$venv/.requirements.sha256"
  ) || return 1
  echo "$venv"
}

dev_controller() {  # "<ansible-core> <X.Y>" of the development controller's venv (.venv), empty without one
  "$ROOT/.venv/bin/python" -c 'import sys, ansible.release as r; print(r.__version__, "%d.%d" % sys.version_info[:2])' \
    2>/dev/null || true
}

rc=0
while read -r core pyv; do
  [[ -z "$core" || "$core" == \#* ]] && continue
  if [[ $# -gt 0 && " $* " != *" $core "* ]]; then continue; fi
  t=$SECONDS
  venv="$(controller_venv "$core" "$pyv")" || { echo "##### controller $core: FAILED (no venv)"; rc=1; continue; }
  echo "##### controller ansible-core $core on Python $pyv ($venv)"
  SANITY_VENV="$venv" scripts/sanity.sh || { echo "##### controller $core: sanity FAILED"; rc=1; }
  # make test's unit step runs tests/unit (plugins included) on the development controller (.venv): where this
  # controller is that one (same ansible-core, same Python), test.sh sets MATRIX_SKIP_DEV_UNIT=1 and the plugin
  # tests run once, not twice (issue 20). `make controllers` alone runs them on every controller.
  if [[ "${MATRIX_SKIP_DEV_UNIT:-0}" == 1 && "$(dev_controller)" == "$core $pyv" ]]; then
    echo "##### controller $core: plugin unit tests run by the unit step (the development controller is ansible-core $core on Python $pyv)"
  else
    PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest tests/unit/plugins -q -p no:cacheprovider \
      || { echo "##### controller $core: plugin unit tests FAILED"; rc=1; }
  fi
  echo "##### controller $core: $((SECONDS - t)) s"
done < tests/controllers.txt
exit $rc
