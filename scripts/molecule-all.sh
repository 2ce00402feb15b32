#!/usr/bin/env bash
# Run every molecule scenario (full sequence incl. idempotence), or the ones named.
#   scripts/molecule-all.sh              -> all scenarios, in order of molecule/ORDER
#   scripts/molecule-all.sh server cuda  -> just those
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-0}" PY_COLORS="${PY_COLORS:-0}"
if [[ $# -gt 0 ]]; then
  scenarios=("$@")
else
  mapfile -t scenarios < <(grep -vE '^\s*(#|$)' molecule/ORDER)
fi
failed=()
for s in "${scenarios[@]}"; do
  [[ -f "molecule/$s/molecule.yml" ]] || { echo "molecule: no scenario '$s'" >&2; exit 2; }
  echo "=== molecule test -s $s ($(date +%T))"
  start=$SECONDS
  if molecule test -s "$s"; then
    echo "=== scenario $s: passed in $((SECONDS - start)) s"
  else
    echo "=== scenario $s: FAILED after $((SECONDS - start)) s"
    failed+=("$s")
  fi
done
echo "molecule: $(( ${#scenarios[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
[[ ${#failed[@]} -eq 0 ]]
