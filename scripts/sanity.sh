#!/usr/bin/env bash
# ansible-test sanity on the collection, offline-safe (see docs/development.md):
# ansible-test bootstraps pip in each test venv with a script from Ansible's CI file server,
# which is unreachable here; we put our own bootstrap script in its cache path. It runs
# ensurepip and installs the pip it asks for (truststore: uses the system CA store) from a local wheel.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${SANITY_VENV:-$ROOT/.venv}"
# The pip that this ansible-test bootstraps into its venvs (24.2 for 2.17-2.19, 25.2 for 2.21): read from it.
PIPVER="$("$VENV/bin/python" -c '
import os, re, ansible_test
text = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
match = re.search(r"pip=.([0-9.]+).", text)
print(match.group(1) if match else "24.2")')"
CACHE="$HOME/.ansible/test/cache"
WHEELS="$ROOT/.cache/pip-bootstrap"
mkdir -p "$CACHE" "$WHEELS"
if ! ls "$WHEELS"/pip-"$PIPVER"-*.whl >/dev/null 2>&1; then
  "$VENV/bin/python" -m pip download -q --no-deps -d "$WHEELS" "pip==$PIPVER"
fi
cat > "$CACHE/get_pip_${PIPVER//./_}.py" <<PY
# Offline stand-in for ansible-test's pip bootstrap script (written by scripts/sanity.sh).
import subprocess, sys
subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True,
               stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                "--no-index", "--find-links", "$WHEELS", "pip==$PIPVER"], check=True)
PY
# ansible-test resolves its working directory (a symlinked tree is not enough) and lists files through git:
# test a private copy of the files git knows (tracked, plus new files not ignored), laid out as
# ansible_collections/gpuserve/sglang, committed in a throwaway repository.
WORK="$(mktemp -d "$ROOT/.cache/sanity.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# ansible-test runs its pip bootstrap as a script in the temporary directory (python /tmp/ansible-test-XXXX-pip.py),
# which puts that directory first on sys.path: any attr.py, typing_extensions.py... left in the shared /tmp
# shadowed pip's own imports there and failed every venv it made. A temporary directory of this run's only.
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR"
TREE="$WORK/ansible_collections/gpuserve/sglang"
mkdir -p "$TREE"
# (files deleted but still tracked are skipped: cp reports them and the copy goes on)
(cd "$ROOT" && { git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$TREE" 2>/dev/null; true; })
(cd "$TREE" && git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm tree)
cd "$TREE"
PY="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
export PATH="$VENV/bin:$PATH"
# A sanity test whose requirements this ansible-test pins to a direct URL (2.22.0rc1's pylint: dill from a
# github.com archive) cannot be installed offline: skipped, saying so, when that host does not answer; it runs where
# it does, and on the other controllers of the matrix (issue 42).
skips=()
while read -r test host; do
  if ! "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen("https://" + sys.argv[1], timeout=10)' \
       "$host" >/dev/null 2>&1; then
    echo "sanity: skipping $test: ansible-test $("$VENV/bin/python" -c 'import ansible.release as r; print(r.__version__)') installs its requirements from https://$host, which does not answer here"
    skips+=(--skip-test "$test")
  fi
done < <("$VENV/bin/python" -c '
import glob, os, re, ansible_test
for path in sorted(glob.glob(os.path.join(os.path.dirname(ansible_test.__file__), "_data", "requirements", "sanity.*.txt"))):
    hosts = sorted(set(re.findall(r"^\S+ @ https?://([^/\s]+)/", open(path).read(), re.M)))
    if hosts:
        print(os.path.basename(path)[len("sanity."):-len(".txt")], hosts[0])')
ansible-test sanity --python "$PY" --color no "${skips[@]}" "$@"
