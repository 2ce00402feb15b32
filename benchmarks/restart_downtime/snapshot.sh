#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The collection the benchmark restarts through, frozen when the first device call is sent: galaxy.yml, meta/,
# plugins/ and roles/ of the working tree (uncommitted changes included, named in SNAPSHOT) into
# .gpu-carry/collection.tar.xz (about 0.3 MB), which run.sh unpacks once per machine. Later calls of the same run
# then use the same code whatever the checkout holds by then.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-carry
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -a galaxy.yml meta plugins roles "$tmp/"
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
echo "$(git rev-parse --short HEAD) + $(git status --porcelain -- galaxy.yml meta plugins roles | wc -l) uncommitted path(s), $(date -u +%FT%TZ)" > "$tmp/SNAPSHOT"
tar -C "$tmp" -cf - . | xz -9 > .gpu-carry/collection.tar.xz
echo "collection snapshot: $(cat "$tmp/SNAPSHOT"), $(stat -c %s .gpu-carry/collection.tar.xz) bytes"
