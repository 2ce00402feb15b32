#!/usr/bin/env bash
# GPU-machine check of gpuserve.sglang.nvidia_gpu_info, gpuserve.sglang.sglang_memory_plan and the preflight role,
# through a local connection. Expects: nvidia-smi, NVIDIA driver >= 580, ansible-core importable by python3;
# torch (CUDA build) for step 4 only. Run from the repo root: bash tests/gpu/gpu_info_and_plan.sh
# Each step is labelled; the script goes on past a failed step and exits non-zero if any step failed.
set -u

# shellcheck source=tests/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
gpu_lib_init gpu_info_and_plan
KIMI="$REPO/tests/fixtures/models/kimi-k2.5"
QWEN="$REPO/tests/fixtures/models/qwen2.5-7b-instruct"
play() { gpu_play "$@"; }

step "0. the machine"
"$PY" -c 'import ansible; print("ansible-core", ansible.__version__)' || bad "ansible-core not importable"
nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,driver_version,compute_cap --format=csv,noheader
nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader
grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "GPUs: $NGPU"

step "1. nvidia_gpu_info: the module's whole result"
gpu_info_playbook "nvidia_gpu_info on this GPU machine" > "$WORK/info.yml" <<'YAML'
    - name: Print the result
      ansible.builtin.debug:
        msg: "{{ info | to_nice_json }}"
    - name: Check it against nvidia-smi
      ansible.builtin.assert:
        that:
          - info is not changed
          - info.count == (ngpu | int)
          - info.count >= 1
          - info.driver_major >= 580
          - info.cuda_version is match('^13\.')
          - info.gpus[0].memory_total_mib > 0
          - info.gpus[0].uuid is match('^GPU-')
          - info.gpus | map(attribute='compute_cap') | select | list | length == info.count
YAML
play -e "ngpu=$NGPU" "$WORK/info.yml" > "$WORK/info.log" 2>&1; rc=$?
cat "$WORK/info.log"
if [ $rc -eq 0 ]; then ok "nvidia_gpu_info read $NGPU GPU(s), driver >= 580, CUDA 13"; else bad "nvidia_gpu_info (rc=$rc)"; fi

step "2. sglang_memory_plan with the real GPU memory: Kimi-K2.5 geometry (config.json fixture), TP = GPUs here"
gpu_info_playbook "sglang_memory_plan on this GPU machine" > "$WORK/plan.yml" <<'YAML'
    - name: Plan Kimi-K2.5 (MLA 512+64, 61 layers) with 72.3 GiB of weights per GPU and this host's MemAvailable
      gpuserve.sglang.sglang_memory_plan:
        tp: "{{ info.count }}"
        mem_fraction_static: 0.88
        ratio: 2
        model_path: "{{ kimi }}"
        gpus: "{{ info.gpus }}"
        weights_gb_per_gpu: 72.3
        compare:
          - {name: ratio2, ratio: 2}
          - {name: ratio4, ratio: 4}
          - {name: fp8-ratio4, kv_dtype: fp8_e4m3, ratio: 4}
          - {name: memfrac0.80, mem_fraction_static: 0.80}
      register: plan
    - name: Print the result
      ansible.builtin.debug:
        msg: "{{ plan | to_nice_json }}"
    - name: Print the summary and the table
      ansible.builtin.debug:
        msg: "{{ [plan.summary] + plan.compare_table }}"
    - name: Plan an MHA model (Qwen2.5-7B-Instruct config) with 7.1 GiB of weights per GPU
      gpuserve.sglang.sglang_memory_plan:
        tp: "{{ info.count }}"
        mem_fraction_static: 0.85
        ratio: 2
        model_path: "{{ qwen }}"
        gpus: "{{ info.gpus }}"
        weights_gb_per_gpu: 7.1
      register: plan_mha
    - name: Print the MHA summary
      ansible.builtin.debug:
        msg: "{{ plan_mha.summary }}"
    - name: Check the plans used the real GPUs and RAM
      ansible.builtin.assert:
        that:
          - plan.cell_size_bytes == 70272
          - plan.sources.gpu_memory is search('nvidia_gpu_info')
          - plan.sources.mem_available == '/proc/meminfo MemAvailable'
          - plan.kv_tokens_per_rank > 0
          - plan.compare | length == 4
          - plan_mha.geometry.attention == 'mha'
          - plan_mha.kv_tokens_per_rank > 0
YAML
play -e "kimi=$KIMI" -e "qwen=$QWEN" "$WORK/plan.yml" > "$WORK/plan.log" 2>&1; rc=$?
cat "$WORK/plan.log"
if [ $rc -eq 0 ]; then ok "plans from the real GPU memory and /proc/meminfo"; else bad "sglang_memory_plan (rc=$rc)"; fi

step "3. the preflight role: passes with TP = GPUs here; TP 8 fails with one clear message"
cat > "$WORK/preflight.yml" <<'YAML'
- name: Preflight on this GPU machine
  hosts: localhost
  gather_facts: false
  vars:
    common: &common
      sglang_preflight_require_gpus: true
      sglang_preflight_model_path: "{{ kimi }}"
      sglang_preflight_weights_gb_per_gpu: 72.3
      sglang_preflight_hicache_ratio: 2.0
      sglang_preflight_log_dir: /tmp/gpuserve-preflight-logs
      sglang_preflight_min_free_disk_gb: 1
      sglang_preflight_allow_foreign_gpu_processes: true
  tasks:
    - name: Preflight with TP = the GPUs of this machine
      ansible.builtin.include_role:
        name: gpuserve.sglang.preflight
      vars:
        <<: *common
        sglang_preflight_tp: "{{ ngpu | int }}"
    - name: Print the fact the role set
      ansible.builtin.debug:
        msg: "PLAN fits={{ sglang_memory_plan.fits }} kv_tokens_per_rank={{ sglang_memory_plan.kv_tokens_per_rank }} kv_gb_per_rank={{ sglang_memory_plan.kv_gb_per_rank }} gpu_total_gb={{ sglang_memory_plan.gpu_total_gb }} host_pool_gb_per_rank={{ sglang_memory_plan.host_pool_gb_per_rank }} max_ratio={{ sglang_memory_plan.max_ratio }}"
    - name: TP 8 on this machine must fail
      block:
        - name: Preflight with TP 8
          ansible.builtin.include_role:
            name: gpuserve.sglang.preflight
          vars:
            <<: *common
            sglang_preflight_tp: 8
        - name: Not reached
          ansible.builtin.set_fact:
            tp8_passed: true
      rescue:
        - name: Print the message
          ansible.builtin.debug:
            msg: "TP8 MESSAGE: {{ ansible_failed_result.msg }}"
        - name: Check the message
          ansible.builtin.assert:
            that: ansible_failed_result.msg is search('--tp 8 needs 8')
    - name: Check TP 8 did fail
      ansible.builtin.assert:
        that: not (tp8_passed | default(false))
YAML
if [ "$NGPU" -ge 8 ]; then echo "(this machine has 8+ GPUs: the TP 8 failure case will not fail)"; fi
# (PREFLIGHT_EXTRA_VARS: extra -e JSON for a dry run elsewhere, e.g. '{"sglang_preflight_mem_available_gb": 400}')
play -e "kimi=$KIMI" -e "ngpu=$NGPU" -e "${PREFLIGHT_EXTRA_VARS:-{\}}" "$WORK/preflight.yml" > "$WORK/preflight.log" 2>&1; rc=$?
cat "$WORK/preflight.log"
if [ $rc -eq 0 ]; then ok "preflight passed with TP $NGPU and refused TP 8"; else bad "preflight role (rc=$rc)"; fi
if [ -e /tmp/gpuserve-preflight-logs ]; then bad "the preflight created its log directory (it must change nothing)"; fi

step "4. what SGLang's 'total' is here: free memory after CUDA context + NCCL (gpu_overhead_gb, default 1.0)"
if "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  "$PY" "$REPO/tests/gpu/gpu_info_overhead.py" "$NGPU" > "$WORK/overhead.log" 2>&1; rc=$?
  cat "$WORK/overhead.log"
  if [ $rc -eq 0 ] && grep -q '^OVERHEAD ' "$WORK/overhead.log"; then ok "measured"; else bad "overhead measurement (rc=$rc)"; fi
else
  echo "torch with CUDA not importable: skipped"
fi

gpu_lib_finish
