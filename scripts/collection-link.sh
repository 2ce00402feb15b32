#!/usr/bin/env bash
# Make the checkout visible to Ansible as the collection gpuserve.sglang.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$ROOT/.cache/collections/ansible_collections/gpuserve"
ln -sfn "$ROOT" "$ROOT/.cache/collections/ansible_collections/gpuserve/sglang"
