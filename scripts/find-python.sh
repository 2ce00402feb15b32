#!/usr/bin/env bash
# find-python.sh X.Y -> the path of a Python X.Y interpreter: python<X.Y> on PATH, else pyenv's
# (${PYENV_ROOT:-~/.pyenv}/versions/X.Y.*; this machine kind has 3.11, 3.12 and 3.13 there). Exit 1, saying so,
# when there is none. Used by scripts/venv.sh (the development controller), scripts/controller-matrix.sh and
# tests/sglang_parser/setup-venv.sh, each of which needs a given version.
set -uo pipefail
want="${1:?usage: find-python.sh X.Y}"
[[ "$want" =~ ^3\.[0-9]+$ ]] || { echo "find-python: want X.Y, not $want" >&2; exit 2; }
for cand in "$(command -v "python$want" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want"; do
  [[ -n "$cand" && -x "$cand" ]] || continue
  if [[ "$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$want" ]]; then
    echo "$cand"; exit 0
  fi
done
echo "find-python: no Python $want here (python$want on PATH, or pyenv's under ${PYENV_ROOT:-$HOME/.pyenv}/versions)" >&2
exit 1
