#!/usr/bin/env bash
# GPU-machine check of gpuserve.sglang.cuda with cuda_install_method=existing, through a local connection.
# Expects: CUDA 13.0 at /usr/local/cuda-13.0, NVIDIA driver >= 580, ansible-core importable by python3.
# Run from the repo root: bash tests/gpu/cuda_existing.sh   (each step is labelled; exits non-zero if any step failed)
set -u

# shellcheck source=tests/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
gpu_lib_init cuda_existing

# Writing /etc/profile.d and /etc/ld.so.conf.d needs root; elsewhere verify only.
MANAGE=true
if [ "$(id -u)" != 0 ]; then MANAGE=false; fi

cat > "$WORK/play.yml" <<'YAML'
- name: CUDA role, existing method, on this GPU machine
  hosts: localhost
  gather_facts: false
  roles:
    - role: gpuserve.sglang.cuda
  post_tasks:
    - name: Show the facts the role set
      ansible.builtin.debug:
        msg: "FACTS cuda_home={{ cuda_home }} cuda_version={{ cuda_version }} cuda_bin={{ cuda_bin }} cuda_lib={{ cuda_lib }} cuda_nvcc_version={{ cuda_nvcc_version }} cuda_driver_version={{ cuda_driver_version }} cuda_gpu_count={{ cuda_gpu_count }}"
    - name: Check the facts against this machine
      ansible.builtin.assert:
        that:
          - cuda_home == '/usr/local/cuda-13.0'
          - cuda_version == '13.0'
          - cuda_nvcc_version is match('^13\.0\.')
          - cuda_gpu_count | int >= 1
          - (cuda_driver_version.split('.') | first | int) >= 580
YAML

play() {
  gpu_play -e cuda_install_method=existing -e "{\"cuda_manage_environment\": $MANAGE}" "$@" "$WORK/play.yml"
}

step "0. the machine"
echo "user=$(id -un) manage_environment=$MANAGE python=$PY"
"$PY" -c 'import ansible; print("ansible-core", ansible.__version__)' || bad "ansible-core not importable"
ls -ld /usr/local/*cuda*
ls /etc/ld.so.conf.d/
if ! nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; then
  bad "no working nvidia-smi: this is not the GPU machine; stopping before the role changes anything"
  gpu_lib_finish
fi

step "1. run the role (existing): nvcc release, driver >= 580, compile AND run the .cu test on the GPU"
play -v > "$WORK/run1.log" 2>&1; rc=$?
cat "$WORK/run1.log"
if [ $rc -eq 0 ] && grep -q 'gpuserve-cuda-ok sum=97920' "$WORK/run1.log" && grep -q 'FACTS cuda_home=/usr/local/cuda-13.0' "$WORK/run1.log"; then
  ok "role converged; the kernel ran on the GPU and returned the right sum"
else
  bad "first run (rc=$rc)"
fi

step "2. second run changes nothing (idempotence)"
play > "$WORK/run2.log" 2>&1; rc=$?
grep -E 'localhost +:' "$WORK/run2.log"
if [ $rc -eq 0 ] && grep -Eq 'localhost +: ok=[0-9]+ +changed=0 ' "$WORK/run2.log"; then
  ok "changed=0"
else
  cat "$WORK/run2.log"; bad "second run not idempotent (rc=$rc)"
fi

step "3. the environment the role left"
ls -l /usr/local/cuda
readlink -f /usr/local/cuda
cat /etc/profile.d/cuda.sh 2>/dev/null
cat /etc/ld.so.conf.d/cuda-gpuserve.conf 2>/dev/null
ldconfig -p | grep -E 'libcudart\.so' || true
if [ "$MANAGE" = true ]; then
  if [ "$(readlink -f /usr/local/cuda)" = "$(readlink -f /usr/local/cuda-13.0)" ] \
     && [ "$(bash -lc 'echo $CUDA_HOME')" = /usr/local/cuda-13.0 ] \
     && grep -qx /usr/local/cuda-13.0/lib64 /etc/ld.so.conf.d/cuda-gpuserve.conf; then
    ok "/usr/local/cuda resolves to 13.0, CUDA_HOME in login shells, loader entry for lib64"
  else
    bad "environment"
  fi
else
  echo "(not root: environment not managed)"
fi

step "4. a driver minimum above this driver fails with the numbers"
play -e "{\"cuda_manage_environment\": false, \"cuda_driver_min_version\": 999}" > "$WORK/run3.log" 2>&1; rc=$?
grep -E 'older than|msg' "$WORK/run3.log" | head -5
if [ $rc -ne 0 ] && grep -q 'is older than' "$WORK/run3.log" && grep -q '999, the minimum for CUDA 13.0' "$WORK/run3.log"; then
  ok "refused with the driver version and the minimum"
else
  cat "$WORK/run3.log"; bad "driver minimum check (rc=$rc)"
fi

step "5. a release this machine does not have fails with nvcc's numbers"
play -e "{\"cuda_manage_environment\": false, \"cuda_release\": \"13.1\", \"cuda_prefix\": \"/usr/local/cuda-13.0\"}" > "$WORK/run4.log" 2>&1; rc=$?
grep -E 'reports release' "$WORK/run4.log" | head -3
if [ $rc -ne 0 ] && grep -q 'reports release 13.0' "$WORK/run4.log"; then
  ok "refused: nvcc reports 13.0, not 13.1"
else
  cat "$WORK/run4.log"; bad "release check (rc=$rc)"
fi

gpu_lib_finish
