# shellcheck shell=bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The shared header of the GPU-machine checks (tests/gpu/*.sh). Each check starts with
#   . "$(dirname "$0")/lib.sh"
#   gpu_lib_init NAME          # e.g. cuda_existing
# and ends with `gpu_lib_finish`. gpu_lib_init sets:
#   REPO   the checkout (this file's ../..)
#   WORK   a fresh work dir /tmp/gpuserve-NAME.XXXXXX (mode 0755), removed on exit unless GPU_KEEP_WORK=1;
#          the collection is linked at $WORK/ansible_collections/gpuserve/sglang
#   PY     python3 (or $PYTHON), the interpreter that imports ansible-core
#   FAILED the failed steps
# and exports ANSIBLE_COLLECTIONS_PATH=$WORK, Ansible's temp dirs under $WORK and plain, yaml-formatted output.
# A check that must clean up more (a background process) defines gpu_on_exit; it runs before WORK goes.
# step TEXT / ok TEXT / bad TEXT: labelled output; `bad` records the failure and the check goes on.
# gpu_play ARGS: ansible-playbook over a local connection with $PY as the interpreter.

gpu_lib_init() {
  GPU_CHECK="$1"
  REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  WORK="$(mktemp -d "/tmp/gpuserve-$GPU_CHECK.XXXXXX")"
  chmod 0755 "$WORK"
  trap _gpu_lib_exit EXIT
  mkdir -p "$WORK/ansible_collections/gpuserve" "$WORK/tmp"
  ln -s "$REPO" "$WORK/ansible_collections/gpuserve/sglang"
  export ANSIBLE_COLLECTIONS_PATH="$WORK" ANSIBLE_LOCAL_TEMP="$WORK/tmp" ANSIBLE_REMOTE_TEMP="$WORK/tmp"
  export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 ANSIBLE_RETRY_FILES_ENABLED=0 ANSIBLE_CALLBACK_RESULT_FORMAT=yaml
  PY="$(command -v "${PYTHON:-python3}")"
  FAILED=()
}

_gpu_lib_exit() {
  if declare -F gpu_on_exit >/dev/null; then gpu_on_exit; fi
  if [ "${GPU_KEEP_WORK:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}

step() { echo; echo "=== $GPU_CHECK: $* ==="; }
ok() { echo "--- RESULT: PASS: $*"; }
bad() { echo "--- RESULT: FAIL: $*"; FAILED+=("$*"); }

gpu_play() { "$PY" -m ansible playbook -i localhost, -c local -e "ansible_python_interpreter=$PY" "$@"; }

# gpu_info_playbook NAME < TASKS: a local playbook whose first task reads the GPUs into `info`
# (gpuserve.sglang.nvidia_gpu_info), followed by the tasks given on stdin (indented as list items of `tasks:`).
gpu_info_playbook() {
  printf -- '- name: %s\n  hosts: localhost\n  gather_facts: false\n  tasks:\n' "$1"
  printf -- '    - name: Read the GPUs\n      gpuserve.sglang.nvidia_gpu_info:\n      register: info\n'
  cat
}

# The summary line; exit 0 when no step failed, 1 otherwise.
gpu_lib_finish() {
  echo
  if [ ${#FAILED[@]} -eq 0 ]; then
    echo "=== $GPU_CHECK: ALL PASSED ==="
    exit 0
  fi
  echo "=== $GPU_CHECK: FAILED: ${FAILED[*]} ==="
  exit 1
}
