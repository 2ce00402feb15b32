#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The real-SGLang GPU lane (issue 40): the collection deploys a REAL SGLang server on a lent GPU machine, under a
# real systemd, and everything the stand-in only imitates is checked against it. Not run by run_all.sh: it needs
# the carried folder .gpu-carry/ that tests/gpu/real_server/build-carry.sh makes on a machine with PyPI
# (SGLang 0.5.17 and what its start imports, as a pip --target tree; Debian 12's systemd 252 packages; the
# development controller's ansible-core and resolvelib wheels: the image has the rest). Run from the repo root there:
#   bash tests/gpu/real_server.sh            (stages resume: a second call goes on where the first stopped)
# GPU_CARRY names the carried folder when the lane runs from a snapshot of the collection (git archive of a commit
# into another ignored folder: the checkout's uncommitted work then stays behind).
# What runs, in order (each stage labelled; the lane goes on past a failed step and exits 1 if any failed):
#   setup   systemd 252 as PID 1 of its own PID/mount/cgroup namespaces (the machine's PID 1 is not systemd;
#           real_setup in real_server/setup.sh: `unshare --pid --fork --mount --cgroup`, shared with the restart
#           benchmark); SGLang 0.5.17 put first on the path of the image's torch venv (a .pth); a tiny random Llama
#   plan    gpuserve.sglang.sglang_memory_plan for ratio 2 and 3 on this GPU (held against the printed sizes later)
#   deploy  the server role gpuserve.sglang.server (local connection, run INSIDE systemd's namespaces; the
#           playbook keeps the sglang_server module's answer, which the checks read) at --hicache-ratio 2: the unit,
#           the launcher with an API key, the first start (SGLang compiles its kernels), HiCache verified in that
#           invocation's journal, the answers and benchmark gates, the record
#   again   the same input again: nothing changes, nothing restarts (same invocation)
#   ratio3  --hicache-ratio 3: the restart through SGLang's own SIGKILL of its process group (exit 137), verified
#   fatal   --hicache-ratio 1000: "Not enough host memory" quoted, rolled back to ratio 3, the restored server verified
#   verify  verify.yml, read-only: nothing under /etc/sglang changes
set -u
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/gpu/real_server/setup.sh
. "$(dirname "$0")/real_server/setup.sh"
export GPU_KEEP_WORK=1
gpu_lib_init real_server
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
CARRY="${GPU_CARRY:-$REPO/.gpu-carry}"
STATE=/var/tmp/gpuserve-real          # stage markers and what later stages need (kept across calls)
mkdir -p "$STATE/logs"
LOGS="$STATE/logs"          # the role runs' logs (kept across calls)
SITE=/opt/sglang-site
MODEL=/srv/models/tiny-llama
OUTDIR="${OUT:-/tmp/gpu-out}"; mkdir -p "$OUTDIR"
# REAL_BUDGET_S: seconds this call may spend before it leaves the rest to the next call (exit 3, the stages left
# named); the device's per-call limit is 600 s, so the default leaves a minute for the carry and the output.
BUDGET=${REAL_BUDGET_S:-540}
T0=$SECONDS
el() { echo "$((SECONDS - T0))s"; }
late() { [ $((SECONDS - T0)) -gt "$1" ]; }
done_stage() { [ -f "$STATE/done.$1" ]; }
mark() { touch "$STATE/done.$1"; echo "--- stage $1 done at $(el)"; }
STAGES="setup plan deploy again ratio3 fatal verify"
# The call's time is spent with stages left: say how many, and exit 3 (never "ALL PASSED" with stages unrun).
out_of_time() {
  local left=() st
  for st in $STAGES; do done_stage "$st" || left+=("$st"); done
  echo "=== out of this call's time at $(el) (REAL_BUDGET_S=$BUDGET): ${#left[@]} stage(s) left: ${left[*]}; call again to resume ==="
  if [ ${#FAILED[@]} -ne 0 ]; then echo "=== $GPU_CHECK: FAILED so far: ${FAILED[*]} ==="; fi
  exit 3
}

# ---------------------------------------------------------------------------------------------------------------
step "setup ($(el))"
if ! done_stage setup; then
  if ! real_setup; then bad "systemd or CUDA_HOME missing"; gpu_lib_finish; fi
  mkdir -p "$(dirname $MODEL)"
  "$PY0" "$REPO/tests/gpu/real_server/make_tiny_model.py" $MODEL > /dev/null 2>&1 || bad "tiny model"
  chmod -R a+rX /srv/models
  mark setup
fi
# shellcheck disable=SC1091
. "$STATE/env"
ns() { nsenter -t "$SD" -a "$@"; }
play() { ns env PYTHONPATH=/tmp/ans "$PY0" -m ansible playbook -i localhost, -c local -e "ansible_python_interpreter=$PY0" "$@"; }
KEY_FILE="$STATE/key"; [ -s "$KEY_FILE" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/sk-real-/' > "$KEY_FILE"

# The role's input: SGLang 0.5.17 in the image's torch venv, the tiny model, HiCache in host RAM, an API key
# (so the launcher runs), both gates; a small --mem-fraction-static so that the host pool fits this machine's RAM.
vars() {  # RATIO
  cat > "$WORK/real-vars.yml" <<YAML
sglang_profile: custom
sglang_python: $PY0
sglang_model_path: $MODEL
sglang_draft_model_path: ""
cuda_home: $CH
sglang_nvidia_smi_dir: $SMI_DIR
sglang_api_key: "{{ lookup('file', '$KEY_FILE') }}"
sglang_unit_sandbox: $(cat "$STATE/sandbox" 2>/dev/null || echo true)
sglang_restart_timeout: 420
sglang_unit_timeout_start_sec: 420
sglang_args:
  attention-backend: triton
  sampling-backend: pytorch
  enable-hierarchical-cache: true
  hicache-ratio: $1
  hicache-write-policy: write_through
  hicache-io-backend: kernel
  mem-fraction-static: 0.1
  cuda-graph-max-bs-decode: 16
sglang_env:
  PYTHONUNBUFFERED: "1"
  HF_HUB_OFFLINE: "1"
  TRANSFORMERS_OFFLINE: "1"
  TVM_FFI_GPU_BACKEND: cuda
  NCCL_NVLS_ENABLE: "0"
  TORCH_SYMM_MEM_DISABLE_MULTICAST: "1"
  NVSHMEM_DISABLE_NVLS: "1"
sglang_answers_gate: true
sglang_answers_max_tokens: 16
sglang_bench_gate: true
sglang_bench_requests: 16
sglang_bench_concurrency: 4
sglang_bench_input_len: 128
sglang_bench_output_len: 32
sglang_bench_timeout: 120
sglang_bench_threshold_pct: 90
YAML
  real_role_playbook "$WORK/deploy.yml"
}
show() { ns systemctl show sglang-kimi -p InvocationID -p ActiveState -p SubState -p MainPID -p ExecMainStatus -p Result -p NRestarts --value | tr '\n' ' '; }
inv() { ns systemctl show sglang-kimi -p InvocationID --value; }
journal_inv() { ns journalctl --no-pager -o cat "_SYSTEMD_INVOCATION_ID=$1"; }
role() {  # NAME RATIO -> rc in $RC, log in $WORK/NAME.log
  vars "$2"
  local s=$SECONDS
  rm -f "$LOGS/result-$1.json"
  play -e "@$WORK/real-vars.yml" -e "result_file=$LOGS/result-$1.json" "$WORK/deploy.yml" > "$LOGS/$1.log" 2>&1; RC=$?
  echo "role run $1 (ratio $2): rc=$RC in $((SECONDS - s)) s; unit: $(show)"
  grep -E '^(PLAY RECAP|localhost +:)' -A1 "$LOGS/$1.log" | tail -1
  grep -E 'fatal:|FAILED!|"msg":' "$LOGS/$1.log" | cut -c1-600 | head -8
}
key_hits() { local k; k=$(cat "$KEY_FILE"); { ns journalctl --no-pager -o cat -u sglang-kimi; cat "$LOGS"/*.log "$LOGS"/*.json; ns systemctl cat sglang-kimi; } 2>/dev/null | grep -c -F "$k"; }

# ---------------------------------------------------------------------------------------------------------------
step "plan: sglang_memory_plan on this GPU, ratio 2 and 3 ($(el))"
if ! done_stage plan; then
  cat > "$WORK/plan.yml" <<YAML
- name: The memory plan of the lane's configuration on this GPU
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Read the GPUs
      gpuserve.sglang.nvidia_gpu_info:
      register: info
    - name: Plan tp 1, --mem-fraction-static 0.1, ratio 2 (and 3)
      gpuserve.sglang.sglang_memory_plan:
        tp: 1
        mem_fraction_static: 0.1
        ratio: 2
        model_path: $MODEL
        gpus: "{{ info.gpus }}"
        compare:
          - {name: ratio3, ratio: 3}
      register: plan
    - name: Keep it
      ansible.builtin.copy:
        content: "{{ plan | to_nice_json }}"
        dest: $STATE/plan.json
        mode: "0644"
YAML
  if play "$WORK/plan.yml" > "$LOGS/plan.log" 2>&1; then ok "memory plan computed"; else bad "memory plan"; tail -30 "$LOGS/plan.log"; fi
  "$PY0" -c "import json,sys; p=json.load(open(sys.argv[1])); print(json.dumps({k: p[k] for k in p if k not in ('invocation',)}, indent=1)[:3000])" "$STATE/plan.json" 2>&1
  mark plan
fi

step "deploy: the server role at --hicache-ratio 2 (first start: SGLang compiles its kernels) ($(el))"
if ! done_stage deploy; then
  role deploy 2
  if [ $RC -ne 0 ]; then
    echo "--- the first deploy failed: its log's end, the unit, its journal"; tail -60 "$LOGS/deploy.log"
    ns systemctl status sglang-kimi --no-pager -l 2>&1 | head -30; ns journalctl --no-pager -o short-precise -n 60 2>&1
    if grep -qE 'status=2[0-9][0-9]/|NAMESPACE|Failed to set up|BPF' <(ns journalctl --no-pager -n 200 2>&1); then
      echo "--- the unit's sandbox could not be set up in this machine's namespaces: the same deploy with sglang_unit_sandbox: false"
      echo false > "$STATE/sandbox"; role deploy-nosandbox 2
    fi
  fi
  I1=$(inv); echo "$I1" > "$STATE/inv.deploy"
  if [ $RC -eq 0 ] && [ "$(ns systemctl is-active sglang-kimi)" = active ]; then ok "deployed and verified (invocation $I1, sandbox $(cat "$STATE/sandbox" 2>/dev/null || echo true))"; else bad "deploy (rc=$RC)"; fi
  journal_inv "$I1" > "$OUTDIR/journal-deploy.txt"
  grep -E 'KV Cache is allocated|host pool|fired up|Tree cache' "$OUTDIR/journal-deploy.txt" | cut -c1-300
  ns systemctl cat sglang-kimi > "$OUTDIR/unit.txt" 2>&1
  grep -E 'TVM_FFI_CACHE_DIR|CUDA_HOME|ExecStart' "$OUTDIR/unit.txt" | cut -c1-400
  echo "JIT cache: $(find /var/cache/sglang/tvm-ffi -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) kernels in /var/cache/sglang/tvm-ffi"
  cp /etc/sglang/sglang-kimi.json "$STATE/record.deploy.json" 2>/dev/null
  mark deploy
fi
late "$BUDGET" && out_of_time

step "again: the same input, nothing changes or restarts ($(el))"
if ! done_stage again; then
  role again 2
  # what the sglang_server module returned (kept by the playbook), not the recap's text
  changed=$(real_result "$LOGS/result-again.json" changed); action=$(real_result "$LOGS/result-again.json" action)
  if [ $RC -eq 0 ] && [ "$changed" = false ] && [ "$action" = '"none"' ] && [ "$(inv)" = "$(cat "$STATE/inv.deploy")" ]; then
    ok "idempotent: the module changed nothing (action none), same invocation"; else bad "second run: rc=$RC changed=$changed action=$action"; fi
  mark again
fi
late "$BUDGET" && out_of_time

step "ratio3: --hicache-ratio 3, the restart through SGLang's own SIGKILL (exit 137) ($(el))"
if ! done_stage ratio3; then
  I1=$(cat "$STATE/inv.deploy")
  role ratio3 3
  I3=$(inv); echo "$I3" > "$STATE/inv.ratio3"
  echo "old invocation's end: $(ns journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$I1" | grep -E 'SIGTERM received|Gracefully exiting|kill_process_tree' | cut -c1-200 | tr '\n' '|')"
  ns journalctl --no-pager -o short-precise -u sglang-kimi | grep -E 'Main process exited|Deactivated|Failed with result|Consumed' | tail -4
  ending=$(real_result "$LOGS/result-ratio3.json" restart.stop.ending)
  echo "the module's stop report: $(real_result "$LOGS/result-ratio3.json" restart.stop | cut -c1-600)"
  journal_inv "$I3" > "$OUTDIR/journal-ratio3.txt"
  grep -E 'KV Cache is allocated|host pool' "$OUTDIR/journal-ratio3.txt" | cut -c1-300
  if [ $RC -eq 0 ] && [ "$I3" != "$I1" ] && [ -n "$I3" ] && [ "$ending" = '"sglang_sigkill"' ]; then
    ok "restarted onto ratio 3 and verified; the old invocation's ending read as SGLang's own (sglang_sigkill)"
  else bad "ratio 3 (rc=$RC, ending $ending)"; tail -60 "$LOGS/ratio3.log"; fi
  mark ratio3
fi
late "$BUDGET" && out_of_time

step "fatal: --hicache-ratio 1000 -> Not enough host memory, rolled back to ratio 3 ($(el))"
if ! done_stage fatal; then
  role fatal 1000
  I4=$(inv)
  grep -oE 'Not enough host memory[^"\\]{0,160}' "$LOGS/fatal.log" | head -2
  grep -iE 'roll|restor' "$LOGS/fatal.log" | cut -c1-300 | head -6
  ratio_now=$(ns systemctl cat sglang-kimi | grep -oE 'hicache-ratio [0-9.]+' | head -1)
  echo "after the failed change: unit has '$ratio_now', $(show)"
  if [ $RC -ne 0 ] && grep -q 'Not enough host memory' "$LOGS/fatal.log" && [ "$ratio_now" = "hicache-ratio 3" ] \
     && [ "$(ns systemctl is-active sglang-kimi)" = active ] && [ "$I4" != "$(cat "$STATE/inv.ratio3")" ]; then
    ok "the fatal start was quoted and rolled back to ratio 3 (a new, verified invocation)"
  else bad "fatal path (rc=$RC, $ratio_now)"; tail -80 "$LOGS/fatal.log"; fi
  mark fatal
fi

step "verify: verify.yml is read-only ($(el))"
if ! done_stage verify; then
  before=$(find /etc/sglang -type f -printf '%p %T@\n' 2>/dev/null | sort | md5sum)
  ns env PYTHONPATH=/tmp/ans "$PY0" -m ansible playbook -i localhost, -c local -e "ansible_python_interpreter=$PY0" \
    -e "@$WORK/real-vars.yml" -e sglang_verify_hosts=localhost "$REPO/verify.yml" > "$LOGS/verify.log" 2>&1; RC=$?
  after=$(find /etc/sglang -type f -printf '%p %T@\n' 2>/dev/null | sort | md5sum)
  grep -E '^localhost +:' "$LOGS/verify.log"
  # a play that matched no host checked nothing: the VERIFIED line must be there (issue 49: a false pass)
  if [ $RC -eq 0 ] && [ "$before" = "$after" ] && grep -q 'VERIFIED localhost' "$LOGS/verify.log"; then
    ok "verify.yml verified localhost and wrote nothing"; else bad "verify (rc=$RC, files changed: $([ "$before" = "$after" ] && echo no || echo yes))"; tail -30 "$LOGS/verify.log"; fi
  mark verify
fi

step "the API key ($(el))"
hits=$(key_hits); if [ "$hits" = 0 ]; then ok "the key is in 0 journal lines, role logs and unit text"; else bad "the key appears $hits times"; fi
step "the record and the plan against the printed sizes ($(el))"
# the plan (sglang_memory_plan's answer) against what the server printed, as the sglang_server module read it at
# ratio 2 (deploy) and 3 (ratio3): KV tokens per rank and the host pool's tokens, within 2 %
"$PY0" - "$STATE/plan.json" "$LOGS/result-deploy.json" "$LOGS/result-ratio3.json" <<'PY' || bad "plan vs printed"
import json, sys
plan = json.load(open(sys.argv[1]))
ratio3 = ([p for p in plan.get("compare_plans") or [] if p.get("name") == "ratio3"] or [{}])[0]
bad = []
for label, planned, path, key in (
        ("KV tokens per rank (ratio 2)", plan.get("kv_tokens_per_rank"), sys.argv[2], ("kv_cache", "tokens_per_rank")),
        ("host pool tokens per rank (ratio 2)", plan.get("host_tokens_per_rank"), sys.argv[2],
         ("hicache", "host_pool_tokens_per_rank")),
        ("host pool tokens per rank (ratio 3)", ratio3.get("host_tokens_per_rank"), sys.argv[3],
         ("hicache", "host_pool_tokens_per_rank"))):
    try:
        printed = json.load(open(path)).get("restart", {}).get(key[0], {}).get(key[1])
    except (OSError, ValueError):
        printed = None
    if not planned or not printed:
        bad.append("%s: planned %s, printed %s" % (label, planned, printed))
        continue
    err = 100.0 * (planned - printed) / printed
    print("%s: planned %s, printed %s (%+.2f %%)" % (label, planned, printed, err))
    if abs(err) > 2:
        bad.append("%s off by %+.2f %%" % (label, err))
if bad:
    print("plan vs printed: " + "; ".join(bad))
    sys.exit(1)
PY
ns journalctl --no-pager -o short-precise -u sglang-kimi > "$OUTDIR/journal-all.txt" 2>&1
cat "$LOGS"/deploy.log "$LOGS"/again.log "$LOGS"/ratio3.log "$LOGS"/fatal.log "$LOGS"/verify.log > "$OUTDIR/role-runs.log" 2>/dev/null
"$PY0" -c 'import json, sys; json.dump({p.rsplit("/", 1)[-1]: json.load(open(p)) for p in sys.argv[1:]}, sys.stdout, indent=1)' \
  "$LOGS"/result-*.json > "$OUTDIR/module-results.json" 2>/dev/null
echo "lane time in this call: $(el)"
gpu_lib_finish
