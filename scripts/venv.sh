#!/usr/bin/env bash
# Create .venv with the pinned controller and test tools (idempotent: reinstalls only when
# requirements-dev.txt changed).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
cd "$ROOT"
stamp=".venv/.requirements.sha256"
want="$(sha256sum requirements-dev.txt | cut -d' ' -f1)"
if [[ -x .venv/bin/python && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "venv: .venv is up to date"
  exit 0
fi
echo "venv: creating .venv with $($PY --version) (a few minutes the first time)"
"$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
echo "$want" > "$stamp"
echo "venv: ready"
