#!/usr/bin/env bash
# .venv with the pinned controller and test tools. The venv itself is made once per machine for each
# requirements-dev.txt and interpreter, in the cache outside the checkout ($GPUSERVE_CACHE, default
# ~/.cache/gpuserve-sglang/venv-<12 hex>), and .venv links to it: a fresh clone (CI) reuses it instead of
# installing everything again. GPUSERVE_VENV_IN_TREE=1 makes .venv a plain venv in the checkout, as before.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# Python 3.12: ansible-core 2.21 (requirements-dev.txt) needs 3.12 or newer on the controller; PATH or pyenv's.
PY="${PYTHON:-$("$ROOT/scripts/find-python.sh" 3.12)}" || { echo "venv: the development controller needs Python 3.12" >&2; exit 1; }
cd "$ROOT"
want="$( (sha256sum requirements-dev.txt | cut -d' ' -f1; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
if [[ "${GPUSERVE_VENV_IN_TREE:-0}" == 1 ]]; then
  VENV="$ROOT/.venv"
else
  CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
  VENV="$CACHE/venv-${want:0:12}"
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.venv.lock"   # one build at a time per machine
  flock 9
fi
stamp="$VENV/.requirements.sha256"
link() {
  [[ "$VENV" != "$ROOT/.venv" ]] || return 0
  if [[ -d .venv && ! -L .venv ]]; then rm -rf .venv; fi   # a venv of the layout before, in the checkout
  ln -sfn "$VENV" .venv
}
# The test controller's compile caches (tests/testcontroller/gpuserve_test_ctl.py, a test fixture): a .pth line
# loads it at every start of the venv's interpreter; it does nothing unless GPUSERVE_TEST_CTL_CACHE names a
# directory (scripts/test.sh and scripts/molecule-all.sh set it for their run).
test_ctl() {
  local site
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  if ! cmp -s tests/testcontroller/gpuserve_test_ctl.py "$site/gpuserve_test_ctl.py"; then
    cp tests/testcontroller/gpuserve_test_ctl.py "$site/gpuserve_test_ctl.py.tmp"
    mv -f "$site/gpuserve_test_ctl.py.tmp" "$site/gpuserve_test_ctl.py"
  fi
  [[ -f "$site/gpuserve-test-ctl.pth" ]] || echo 'import gpuserve_test_ctl' >"$site/gpuserve-test-ctl.pth"
}
if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  test_ctl
  link
  echo "venv: .venv is up to date ($VENV)"
  exit 0
fi
echo "venv: creating $VENV with $($PY --version) (a few minutes the first time)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r requirements-dev.txt
echo "$want" > "$stamp"
test_ctl
link
echo "venv: ready"
