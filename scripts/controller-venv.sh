#!/usr/bin/env bash
# controller-venv.sh CORE X.Y -> the path of a controller venv: ansible-core CORE (an exact release, or what
# scripts/ansible-core-version.py resolves: "latest" is the newest on PyPI, pre-releases included; "2.19" the newest
# 2.19.x) on Python X.Y (scripts/find-python.sh), with tests/controller-requirements.txt. Made once per machine in the
# cache outside the checkout ($GPUSERVE_CACHE, default ~/.cache/gpuserve-sglang/controller-<core>-py<X.Y>-<12 hex of
# what goes in and the interpreter>), under flock, as scripts/venv.sh makes .venv; a kept one is reused offline.
# Used by scripts/controller-matrix.sh and tests/unit/test_release_install.py. Exit 1, saying why, when the Python
# is missing or the release does not run on it (its Requires-Python on PyPI).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
spec="${1:?usage: controller-venv.sh CORE X.Y}" pyv="${2:?usage: controller-venv.sh CORE X.Y}"
CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
mkdir -p "$CACHE"
core="$(python3 "$ROOT/scripts/ansible-core-version.py" "$spec")" || { echo "controllers: no ansible-core for '$spec'" >&2; exit 1; }
py="$("$ROOT/scripts/find-python.sh" "$pyv" 2>/dev/null)" \
  || { echo "controllers: no Python $pyv here (python$pyv on PATH or pyenv)" >&2; exit 1; }
want="$( (sed "s/@CORE@/$core/" "$ROOT/tests/controller-requirements.txt"; "$py" -c 'import sys; print(sys.version)') \
         | sha256sum | cut -d' ' -f1)"
venv="$CACHE/controller-$core-py$pyv-${want:0:12}"
(
  exec 9>"$CACHE/.controller.lock"
  flock 9
  if [[ -x "$venv/bin/python" && "$(cat "$venv/.requirements.sha256" 2>/dev/null)" == "$want" ]]; then exit 0; fi
  # a release that does not run on this Python is told here, not as pip's "no matching distribution"
  rp="$(python3 "$ROOT/scripts/ansible-core-version.py" --requires-python "$core" 2>/dev/null)" || rp=""
  if [[ -n "$rp" ]] && ! "$py" - "$ROOT/scripts/ansible-core-version.py" "$pyv" "$rp" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("acv", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.exit(0 if mod.python_allowed(sys.argv[2], sys.argv[3]) else 1)
PY
  then
    echo "controllers: ansible-core $core needs Python $rp, not $pyv (tests/controllers.txt)" >&2; exit 1
  fi
  echo "controllers: creating $venv" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv" && "$venv/bin/python" -m pip install -q --upgrade pip >&2 \
    && sed "s/@CORE@/$core/" "$ROOT/tests/controller-requirements.txt" >"$venv/requirements.txt" \
    && "$venv/bin/python" -m pip install -q -r "$venv/requirements.txt" >&2 \
    && echo "$want" >"$venv/.requirements.sha256"
) || exit 1
echo "$venv"
