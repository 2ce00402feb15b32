#!/usr/bin/env bash
# `make test`: lint, sanity, unit tests and every molecule scenario. Starts the Docker engine
# only when none answers, and stops only what it started.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
scripts/venv.sh || exit 1
scripts/collection-link.sh
export PATH="$ROOT/.venv/bin:$PATH"
started_engine=0
if ! docker info >/dev/null 2>&1; then started_engine=1; fi
cleanup() { if [[ $started_engine == 1 ]]; then scripts/docker-engine.sh down; fi; }
trap cleanup EXIT
scripts/docker-engine.sh up || exit 1
scripts/systemd-image.sh || exit 1
# ansible-test's shellcheck test needs shellcheck (Debian's package); without it that one test is skipped.
if ! command -v shellcheck >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "test: installing shellcheck from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null 2>&1 \
    || { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; } \
    || echo "test: shellcheck could not be installed; ansible-test will skip its shellcheck test"
fi
rc=0
step() {
  local name="$1"; shift
  local t=$SECONDS
  echo "##### $name"
  if "$@"; then echo "##### $name: ok ($((SECONDS - t)) s)"; else echo "##### $name: FAILED ($((SECONDS - t)) s)"; rc=1; fi
}
step lint    ansible-lint --profile production
step sanity  scripts/sanity.sh
step parser-venv tests/sglang_parser/setup-venv.sh
step reference python scripts/gen-reference.py --check
step unit    python -m pytest tests/unit -q -p no:cacheprovider
step molecule scripts/molecule-all.sh
exit $rc
