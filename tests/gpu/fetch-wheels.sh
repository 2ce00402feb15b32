#!/usr/bin/env bash
# Fill .whl/ with ansible-core and its needs for the GPU machine (Python 3.12, x86_64, no network there).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
plat=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for pkg in ansible-core==2.19.14 jinja2==3.1.6 MarkupSafe==3.0.2 PyYAML==6.0.2 cryptography==44.0.3 cffi==1.17.1 \
           pycparser==2.22 packaging==25.0 resolvelib==1.0.1; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .whl "$pkg"
done
ls .whl
