#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The collection the benchmark restarts through, frozen when the first device call is sent: galaxy.yml, meta/,
# plugins/ and roles/ of one commit (default HEAD; `snapshot.sh COMMIT`), never the working tree's uncommitted edits,
# into .gpu-carry/collection.tar.xz (about 0.3 MB), which run.sh unpacks once per machine. Later calls of the same
# run then use the same code whatever the checkout holds by then; SNAPSHOT names the commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=$(git rev-parse --verify "${1:-HEAD}^{commit}")
mkdir -p .gpu-carry
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git archive "$ref" galaxy.yml meta plugins roles | tar -C "$tmp" -xf -
echo "$(git rev-parse --short "$ref") ($(git log -1 --format=%cI "$ref")), snapshot $(date -u +%FT%TZ)" > "$tmp/SNAPSHOT"
tar -C "$tmp" -cf - . | xz -9 > .gpu-carry/collection.tar.xz
echo "collection snapshot: $(cat "$tmp/SNAPSHOT"), $(stat -c %s .gpu-carry/collection.tar.xz) bytes"
