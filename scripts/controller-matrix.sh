#!/usr/bin/env bash
# The controller matrix (issues 23, 42): ansible-test sanity and the plugin unit tests (tests/unit/plugins: the
# modules, filters and action plugins, everything ansible-core runs of ours; module_utils' tests on the oldest
# controller only, below) on each controller of tests/controllers.txt:
# the oldest maintained ansible-core (meta/runtime.yml's lower bound) and the newest on PyPI, pre-releases included
# ("latest", resolved by scripts/ansible-core-version.py from PyPI's JSON, kept in the cache for offline runs).
# The development controller (.venv, 2.21) runs lint, the rest of the unit tests and the molecule scenarios.
# Each controller's venv is made once per machine in the cache outside the checkout by scripts/controller-venv.sh (as
# scripts/venv.sh does: named by the sha256 of what goes in and the interpreter, built under flock). The
# interpreter: python<X.Y> on PATH, else pyenv's (this machine kind has 3.11, 3.12 and 3.13 under ~/.pyenv/versions);
# a missing one fails the run.
#   scripts/controller-matrix.sh             -> every controller of tests/controllers.txt
#   scripts/controller-matrix.sh latest      -> that one (as tests/controllers.txt names it, or the release it is)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
mkdir -p "$CACHE"
scripts/collection-link.sh

dev_controller() {  # "<ansible-core> <X.Y>" of the development controller's venv (.venv), empty without one
  "$ROOT/.venv/bin/python" -c 'import sys, ansible.release as r; print(r.__version__, "%d.%d" % sys.version_info[:2])' \
    2>/dev/null || true
}

rc=0
first=1
while read -r spec pyv; do
  [[ -z "$spec" || "$spec" == \#* ]] && continue
  core="$(python3 scripts/ansible-core-version.py "$spec")" || { echo "##### controller $spec: FAILED (no release)"; rc=1; continue; }
  if [[ $# -gt 0 && " $* " != *" $core "* && " $* " != *" $spec "* ]]; then continue; fi
  t=$SECONDS
  venv="$(scripts/controller-venv.sh "$core" "$pyv")" || { echo "##### controller $core: FAILED (no venv)"; rc=1; continue; }
  echo "##### controller ansible-core $core on Python $pyv ($venv)"
  SANITY_VENV="$venv" scripts/sanity.sh || { echo "##### controller $core: sanity FAILED"; rc=1; }
  # make test's unit step runs tests/unit (plugins included) on the development controller (.venv): where this
  # controller is that one (same ansible-core, same Python), test.sh sets MATRIX_SKIP_DEV_UNIT=1 and the plugin
  # tests run once, not twice (issue 20). `make controllers` alone runs them on every controller.
  if [[ "${MATRIX_SKIP_DEV_UNIT:-0}" == 1 && "$(dev_controller)" == "$core $pyv" ]]; then
    echo "##### controller $core: plugin unit tests run by the unit step (the development controller is ansible-core $core on Python $pyv)"
  else
    # tests/unit/plugins/module_utils test code that runs on the managed host, under the host's Python: the first
    # (oldest) controller runs them on its Python 3.11, the oldest host Python of the scenarios, and the development
    # controller on 3.12; the newer controllers run the controller-side tests (modules, filters, action plugins,
    # plugin_utils, docs), which are what a new ansible-core can break (MATRIX_MODULE_UTILS=all: on every controller).
    only=()
    if [[ $first == 0 && "${MATRIX_MODULE_UTILS:-oldest}" != all ]]; then
      only=(--ignore=tests/unit/plugins/module_utils)
      echo "##### controller $core: module_utils tests run on the oldest controller and the development one"
    fi
    PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest tests/unit/plugins "${only[@]}" -q -p no:cacheprovider \
      || { echo "##### controller $core: plugin unit tests FAILED"; rc=1; }
  fi
  echo "##### controller $core: $((SECONDS - t)) s"
  first=0
done < tests/controllers.txt
exit $rc
