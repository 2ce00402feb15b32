#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Restart downtime of a REAL SGLang 0.5.17 server restarted THROUGH THE COLLECTION (the server role, under the GPU
# lane's real systemd 252) for a config change (--hicache-ratio 2 <-> 3), with a random bf16 Llama of 31.9 GB made
# on the GPU (make_model.py; nothing carried). Needs the lane's carry (.gpu-carry/, tests/gpu/real_server/
# build-carry.sh) and, frozen when the first call is sent, the collection (snapshot.sh). On the GPU machine, from
# the repo root:
#   bash benchmarks/restart_downtime/run.sh      (stages resume: a second call goes on where the first stopped,
#                                                 while the machine is still the same one)
# BENCH_BUDGET_S: seconds this call may spend before it leaves the rest to the next call (exit 3, the stages left
# named; default 540, the device's per-call limit is 600). BENCH_CONFIGS: the measured restarts, in order
# (default below; the daemon's configurations last: a server of today's unit beside the daemon would not fit the
# GPU at --mem-fraction-static 0.5, and a client's weights are the daemon's memory). Each is ONE role run that changes the ratio (2 -> 3 or 3 -> 2: each restart starts from the
# last) and the features:
#   baseline_warm  today's unit, the checkpoint in the page cache
#   predicted      today's unit, page cache warm, after the same role run in --check (ansible-playbook --check):
#                  the module's restart.predicted_downtime from the restarts recorded so far, beside the real one
#   baseline_cold  today's unit, the page cache dropped first (echo 3 > /proc/sys/vm/drop_caches)
#   prefetch_cold  --weight-loader-prefetch-checkpoints, the page cache dropped first
#   cachedir       SGLANG_CACHE_DIR=/var/cache/sglang/sglang-cache/<release>/<model>/<GPU> through sglang_env
#   daemon_first   the standalone Weight Cache Daemon started (its own unit), the server switched to
#                  --weight-cache-mode client (the first start that reads the daemon)
#   daemon         the same, a config change between two client-mode processes
#   all            daemon + prefetch + SGLANG_CACHE_DIR, the page cache dropped first
# Results: $STATE/results.jsonl (benchmarks/restart_downtime/timeline.py: the downtime from a probe that asks for
# one token every 50 ms, and its phases from the unit's journal), packed into $OUT after every call.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tests/gpu/lib.sh
. "$HERE/../../tests/gpu/lib.sh"
# shellcheck source=tests/gpu/real_server/setup.sh
. "$HERE/../../tests/gpu/real_server/setup.sh"
export GPU_KEEP_WORK=1
gpu_lib_init restart_downtime
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
CARRY="${GPU_CARRY:-$REPO/.gpu-carry}"
STATE=/var/tmp/gpuserve-restart-downtime
LOGS="$STATE/logs"; mkdir -p "$LOGS"
SITE=/opt/sglang-site
MODEL=/srv/models/llama-32g
OUTDIR="${OUT:-/tmp/gpu-out}"; mkdir -p "$OUTDIR"
BUDGET=${BENCH_BUDGET_S:-540}
CONFIGS=${BENCH_CONFIGS:-baseline_warm predicted baseline_cold prefetch_cold daemon_first daemon all}
RESULTS="$STATE/results.jsonl"
WC_DIR=/run/sglang-weight-cache
WC_SOCK=$WC_DIR/sglang_weight_cache_rank0.sock
T0=$SECONDS
el() { echo "$((SECONDS - T0))s"; }
done_stage() { [ -f "$STATE/done.$1" ]; }
mark() { touch "$STATE/done.$1"; echo "--- stage $1 done at $(el)"; }
STAGES="setup model deploy $CONFIGS"
pack() {  # what this call leaves in $OUT: the results, the table, every log so far (one archive)
  [ -s "$RESULTS" ] && cp "$RESULTS" "$OUTDIR/results.jsonl" && "${PY0:-python3}" "$HERE/timeline.py" table "$RESULTS" > "$OUTDIR/table.md"
  tar -C "$STATE" -cJf "$OUTDIR/logs.tar.xz" logs 2>/dev/null
}
# The time left does not cover the next stage: say what is left, pack, exit 3 (never "ALL PASSED" with stages left).
need() {  # SECONDS
  [ $((SECONDS - T0 + $1)) -le "$BUDGET" ] && return 0
  local left=() st
  for st in $STAGES; do done_stage "$st" || left+=("$st"); done
  echo "=== out of this call's time at $(el) (BENCH_BUDGET_S=$BUDGET, next needs ~$1 s): ${#left[@]} stage(s) left: ${left[*]}; call again to resume ==="
  pack; exit 3
}

# ---------------------------------------------------------------------------------------------------------------
step "setup: the GPU lane's systemd, SGLang 0.5.17, ansible-core ($(el))"
if ! done_stage setup; then
  # the model is written meanwhile, by the image's own torch and transformers (started before SGLang's site is put
  # on the path): the setup and the write overlap
  if ! done_stage model; then
    mkdir -p "$(dirname $MODEL)"
    ( python3 "$HERE/make_model.py" $MODEL 18 > "$LOGS/model.log" 2>&1; echo $? > "$STATE/model.rc" ) &
    MODEL_JOB=$!
  fi
  if ! real_setup; then bad "systemd or CUDA_HOME missing"; gpu_lib_finish; fi
  # The collection as it was when the first call was sent ($CARRY/collection.tar.xz, made by snapshot.sh
  # here): every call of the run then restarts through the same code, whatever the checkout holds later.
  if [ -s "$CARRY/collection.tar.xz" ]; then
    rm -rf "$STATE/collection"; mkdir -p "$STATE/collection"; tar -C "$STATE/collection" -xJf "$CARRY/collection.tar.xz"
  fi
  mark setup
fi
if [ -d "$STATE/collection/roles" ]; then
  ln -sfn "$STATE/collection" "$WORK/ansible_collections/gpuserve/sglang"; COLL="$STATE/collection"
  echo "collection: the snapshot in $CARRY/collection.tar.xz ($(cat "$STATE/collection/SNAPSHOT" 2>/dev/null))"
else COLL="$REPO"; echo "collection: the checkout $REPO"; fi
# The Weight Cache Daemon: the server role's own feature (sglang_weight_cache) where the collection has it, else a
# unit this script writes (BENCH_WEIGHT_CACHE=role|unit chooses; a failed role feature falls back to the unit).
[ -s "$STATE/wc_mode" ] || { if [ -n "${BENCH_WEIGHT_CACHE:-}" ]; then echo "$BENCH_WEIGHT_CACHE";
  elif grep -q '^sglang_weight_cache:' "$COLL/roles/server/defaults/main.yml"; then echo role; else echo unit; fi; } > "$STATE/wc_mode"
echo "weight cache daemon through: $(cat "$STATE/wc_mode")"
# shellcheck disable=SC1091
. "$STATE/env"
ns() { nsenter -t "$SD" -a "$@"; }
play() { ns env PYTHONPATH=/tmp/ans "$PY0" -m ansible playbook -i localhost, -c local -e "ansible_python_interpreter=$PY0" "$@"; }
KEY_FILE="$STATE/key"; [ -s "$KEY_FILE" ] || head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/sk-bench-/' > "$KEY_FILE"
chmod 0600 "$KEY_FILE"

step "model: a random bf16 Llama of ~32 GB, written from the GPU ($(el))"
if ! done_stage model; then
  if [ -n "${MODEL_JOB:-}" ]; then wait "$MODEL_JOB"; else
    need 150; mkdir -p "$(dirname $MODEL)"
    "$PY0" "$HERE/make_model.py" $MODEL 18 > "$LOGS/model.log" 2>&1; echo $? > "$STATE/model.rc"
  fi
  if [ "$(cat "$STATE/model.rc" 2>/dev/null)" = 0 ]; then
    tail -1 "$LOGS/model.log"; chmod -R a+rX /srv/models; mark model
  else bad "model"; tail -20 "$LOGS/model.log"; pack; gpu_lib_finish; fi
fi
df -h /srv/models | tail -1; du -sh $MODEL

RELEASE=$("$PY0" -c 'import sglang; print(sglang.__version__)' 2>/dev/null)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -c 'A-Za-z0-9.\n-' '-')
CACHE_DIR="/var/cache/sglang/sglang-cache/$RELEASE/$(basename $MODEL)/$GPU"

vars() {  # RATIO PREFETCH(0/1) CACHEDIR(0/1) CLIENT(0/1) WEIGHT_CACHE_ROLE(0/1)
  {
    cat <<YAML
sglang_profile: custom
sglang_python: $PY0
sglang_model_path: $MODEL
sglang_draft_model_path: ""
cuda_home: $CH
sglang_nvidia_smi_dir: $SMI_DIR
sglang_api_key: "{{ lookup('file', '$KEY_FILE') }}"
sglang_unit_sandbox: true
sglang_restart_timeout: 900
sglang_unit_timeout_start_sec: 900
sglang_answers_gate: false
sglang_bench_gate: false
YAML
    grep -q '^sglang_weight_cache:' "$COLL/roles/server/defaults/main.yml" && echo "sglang_weight_cache: $([ "${5:-0}" = 1 ] && echo true || echo false)"
    cat <<YAML
sglang_args:
  attention-backend: triton
  sampling-backend: pytorch
  enable-hierarchical-cache: true
  hicache-ratio: $1
  hicache-write-policy: write_through
  hicache-io-backend: kernel
  mem-fraction-static: 0.5
  max-total-tokens: 65536
  cuda-graph-max-bs-decode: 8
YAML
    [ "$2" = 1 ] && echo "  weight-loader-prefetch-checkpoints: true"
    [ "$4" = 1 ] && printf '  weight-cache-mode: client\n  weight-cache-socket: %s\n' "$WC_SOCK"
    cat <<YAML
sglang_env:
  PYTHONUNBUFFERED: "1"
  HF_HUB_OFFLINE: "1"
  TRANSFORMERS_OFFLINE: "1"
  TVM_FFI_GPU_BACKEND: cuda
  NCCL_NVLS_ENABLE: "0"
  TORCH_SYMM_MEM_DISABLE_MULTICAST: "1"
  NVSHMEM_DISABLE_NVLS: "1"
YAML
    [ "$3" = 1 ] && echo "  SGLANG_CACHE_DIR: $CACHE_DIR"
  } > "$WORK/bench-vars.yml"
  real_role_playbook "$WORK/deploy.yml"
}
show() { ns systemctl show sglang-kimi -p InvocationID -p ActiveState -p SubState -p MainPID -p ExecMainStatus -p Result --value | tr '\n' ' '; }
cache_files() {  # files per compiler cache under the unit's CacheDirectory (kept across restarts)
  # shellcheck disable=SC2016  # expanded by the inner bash
  ns bash -c 'cd /var/cache/sglang 2>/dev/null && for d in */; do printf "%s=%s " "${d%/}" "$(find "$d" -type f | wc -l)"; done'
}
cached_gb() { awk '/^Cached:/ {printf "%.1f", $2 / 1048576}' /proc/meminfo; }
drop_caches() {  # -> DROP: what happened, quoted
  local before; before=$(cached_gb); sync
  if DROP_ERR=$( { echo 3 > /proc/sys/vm/drop_caches; } 2>&1 ); then
    DROP="dropped: page cache ${before} GiB -> $(cached_gb) GiB"
  else DROP="echo 3 > /proc/sys/vm/drop_caches failed: $DROP_ERR"; fi
  echo "$DROP"
}
role() {  # NAME RATIO PREFETCH CACHEDIR CLIENT WEIGHT_CACHE_ROLE -> RC, ROLE_S
  vars "$2" "$3" "$4" "$5" "${6:-0}"
  local s=$SECONDS
  rm -f "$LOGS/result-$1.json"
  play -e "@$WORK/bench-vars.yml" -e "result_file=$LOGS/result-$1.json" "$WORK/deploy.yml" > "$LOGS/$1.log" 2>&1; RC=$?
  ROLE_S=$((SECONDS - s))
  echo "role run $1 (ratio $2, prefetch $3, cache dir $4, weight cache client flags $5, sglang_weight_cache ${6:-0}): rc=$RC in $ROLE_S s; unit: $(show)"
  grep -E '^localhost +:' "$LOGS/$1.log" | tail -1
  grep -E 'fatal:|FAILED!|"msg":|^ *msg:' "$LOGS/$1.log" | cut -c1-600 | head -6
}

# ---------------------------------------------------------------------------------------------------------------
step "deploy: the server role at --hicache-ratio 2, first start on this machine (kernels compiled) ($(el))"
if ! done_stage deploy; then
  need 360
  s=$(date +%s.%N)
  role deploy 2 0 0 0
  echo 2 > "$STATE/ratio"
  ns journalctl --no-pager -o short-precise -u sglang-kimi > "$LOGS/journal-deploy.txt" 2>&1
  ns journalctl --no-pager -o json -u sglang-kimi > "$LOGS/journal-deploy.json" 2>&1
  echo "compiler caches after the first start: $(cache_files)"
  grep -E 'Load weight end|KV Cache is allocated|host pool|Engine startup timings|fired up' "$LOGS/journal-deploy.txt" | cut -c1-300
  ns systemctl cat sglang-kimi > "$LOGS/unit.txt" 2>&1
  if [ $RC -eq 0 ] && [ "$(ns systemctl is-active sglang-kimi)" = active ]; then
    ok "deployed (first start) in $ROLE_S s"
    printf '{"name": "first_start", "label": "first start on a fresh machine (role run, kernels compiled)", "role_s": %s, "rc": %s}\n' "$ROLE_S" "$RC" >> "$STATE/starts.jsonl"
    mark deploy
  else bad "deploy (rc=$RC)"; tail -60 "$LOGS/deploy.log"; ns journalctl --no-pager -o cat -u sglang-kimi -n 60; pack; gpu_lib_finish; fi
fi

# ---------------------------------------------------------------------------------------------------------------
daemon_unit() {
  ns mkdir -p $WC_DIR; ns chown sglang:sglang $WC_DIR
  ns tee /etc/systemd/system/sglang-weight-cache.service > /dev/null <<UNIT
# Hand-written by benchmarks/restart_downtime/run.sh: the standalone SGLang Weight Cache Daemon. Its socket path is
# fixed under /tmp (0.5.17); /tmp here is $WC_DIR, where the server unit (PrivateTmp) connects.
[Unit]
Description=SGLang Weight Cache Daemon (restart_downtime benchmark)
Before=sglang-kimi.service
[Service]
Type=simple
User=sglang
Group=sglang
Environment=HOME=/var/lib/sglang PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TVM_FFI_GPU_BACKEND=cuda
Environment=NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_HOME=$CH
Environment=PATH=$CH/bin:$SMI_DIR:/usr/local/bin:/usr/bin:/bin
BindPaths=$WC_DIR:/tmp
ExecStart=$PY0 -m sglang.srt.weight_cache.daemon --model-path $MODEL --gpu-id 0 --tp-size 1 --tp-rank 0 --dist-init-method tcp://127.0.0.1:29571
TimeoutStopSec=60
UNIT
  ns systemctl daemon-reload
  local s=$SECONDS
  ns systemctl start sglang-weight-cache
  for _ in $(seq 1 300); do
    ns test -e $WC_DIR/sglang_weight_cache_rank0.ready && break
    [ "$(ns systemctl is-active sglang-weight-cache)" = active ] || break
    sleep 1
  done
  WC_S=$((SECONDS - s))
  ns journalctl --no-pager -o short-precise -u sglang-weight-cache > "$LOGS/journal-weight-cache.txt" 2>&1
  if ns test -e $WC_DIR/sglang_weight_cache_rank0.ready; then
    ok "weight cache daemon ready in $WC_S s: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
    printf '{"name": "weight_cache_daemon_start", "seconds": %s}\n' "$WC_S" >> "$STATE/starts.jsonl"
  else bad "weight cache daemon not ready after $WC_S s"; tail -40 "$LOGS/journal-weight-cache.txt"; fi
}

measure() {  # NAME: one measured restart
  local name=$1 cur new prefetch=0 cachedir=0 client=0 drop=0 label
  case $name in
    baseline_warm) label="today's unit, page cache warm";;
    predicted) label="today's unit, page cache warm, predicted by --check first";;
    baseline_cold) label="today's unit, page cache dropped"; drop=1;;
    prefetch_cold) label="checkpoint prefetch, page cache dropped"; prefetch=1; drop=1;;
    cachedir) label="SGLANG_CACHE_DIR kept per release/model/GPU (first start with it)"; cachedir=1;;
    daemon_first) label="weight cache daemon, first client start (from today's unit)"; client=1;;
    daemon) label="weight cache daemon (client to client)"; client=1;;
    all) label="all together (daemon, prefetch, SGLANG_CACHE_DIR), page cache dropped"; prefetch=1; cachedir=1; client=1; drop=1;;
    *) bad "unknown configuration $name"; return;;
  esac
  cur=$(cat "$STATE/ratio"); new=$([ "$cur" = 2 ] && echo 3 || echo 2)
  local mode wcr=0 cl=$client; mode=$(cat "$STATE/wc_mode")
  if [ $client = 1 ] && [ "$mode" = role ]; then wcr=1; cl=0; fi
  if [ $client = 1 ] && [ "$mode" = unit ] && [ "$(ns systemctl is-active sglang-weight-cache 2>/dev/null)" != active ]; then daemon_unit; fi
  local check=()
  if [ "$name" = predicted ]; then  # the same run in --check first: what the module predicts, from the records so far
    vars "$new" $prefetch $cachedir $cl $wcr
    play --check -e "@$WORK/bench-vars.yml" -e "result_file=$LOGS/check-$name.json" "$WORK/deploy.yml" > "$LOGS/check-$name.log" 2>&1
    echo "--check (rc $?): $(real_result "$LOGS/check-$name.json" restart.predicted_downtime.msg)"
    check=("check=$LOGS/check-$name.json")
  fi
  DROP="kept"; [ $drop = 1 ] && drop_caches
  local probe="$LOGS/probe-$name.jsonl" stopf="$STATE/probe-stop"; rm -f "$stopf"
  "$PY0" "$HERE/probe.py" http://127.0.0.1:30000 "$KEY_FILE" "$probe" "$stopf" 0.05 &
  local ppid=$! t_from c_before; sleep 2; t_from=$(date +%s.%N); c_before=$(cache_files)
  role "$name" "$new" $prefetch $cachedir $cl $wcr
  echo "compiler cache files before: $c_before; after: $(cache_files)"
  sleep 2; local t_to; t_to=$(date +%s.%N); touch "$stopf"; wait $ppid
  [ $RC -eq 0 ] && echo "$new" > "$STATE/ratio"
  ns journalctl --no-pager -o json -u sglang-kimi --since "@${t_from%.*}" > "$LOGS/journal-$name.json" 2>&1
  ns journalctl --no-pager -o short-precise -u sglang-kimi --since "@${t_from%.*}" > "$LOGS/journal-$name.txt" 2>&1
  [ $client = 1 ] && ns journalctl --no-pager -o short-precise -u sglang-kimi-weight-cache -u sglang-weight-cache \
    --since "@$(( ${t_from%.*} - 600 ))" > "$LOGS/journal-$name-daemon.txt" 2>&1
  "$PY0" "$HERE/timeline.py" restart "$name" "$probe" "$LOGS/journal-$name.json" "$t_from" "$t_to" \
    "label=$label" "ratio=$cur->$new" "weight_cache_through=$([ $client = 1 ] && echo "$mode" || echo -)" "role_rc=$RC" "role_s=$ROLE_S" "page_cache=$DROP" \
    "gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "release=$RELEASE" \
    "model_bytes=$(du -sb $MODEL | cut -f1)" "caches_before=$c_before" "caches_after=$(cache_files)" "module=$LOGS/result-$name.json" "${check[@]}" > "$STATE/r.json" 2> "$LOGS/timeline-$name.err" \
    && cat "$STATE/r.json" >> "$RESULTS"
  "$PY0" -c "import json,sys; r=json.load(open(sys.argv[1])); d=r.get('downtime') or {}; print('downtime', d.get('seconds'), 's; phases:', '; '.join('%s %.1f' % (p['phase'], p['seconds']) for p in r.get('phases', []))); print('SGLang:', r.get('sglang_startup_timings')); print('sum vs downtime', r.get('phases_vs_downtime_pct'), '%;', r.get('kv_line'), '|', r.get('host_pool_line'))" "$STATE/r.json" 2>&1 | cut -c1-900
  grep -iE 'weight.cache|ipc' "$LOGS/journal-$name.txt" | cut -c1-300 | tail -5
  if [ $RC -eq 0 ]; then ok "$name: restarted and verified through the role"; else bad "$name (rc=$RC)"; tail -40 "$LOGS/$name.log"; fi
  if [ $RC -ne 0 ] && [ $wcr = 1 ]; then  # the role's weight cache failed: quoted above; the hand-written unit next
    echo "--- sglang_weight_cache failed; its unit: $(ns systemctl list-units --all --no-legend 'sglang-kimi-weight-cache*' | tr '\n' ' ')"
    ns journalctl --no-pager -o cat -u sglang-kimi-weight-cache.service -n 30 2>&1 | cut -c1-300
    ns systemctl stop sglang-kimi-weight-cache.service 2>/dev/null
    echo unit > "$STATE/wc_mode"; rm -f "$STATE/done.$name"; RETRY=1
  fi
  LAST_S=$ROLE_S
}

LAST_S=${BENCH_RESTART_EST_S:-170}
for c in $CONFIGS; do
  step "restart $c ($(el))"
  done_stage "$c" && continue
  est=$((LAST_S + 30)); case $c in daemon_first) est=$((LAST_S + 120));; *_cold|all) est=$((LAST_S + 60));; esac
  need $est
  RETRY=0; measure "$c"
  if [ $RETRY = 1 ]; then need $((LAST_S + 120)); RETRY=0; measure "$c"; fi
  mark "$c"
  pack
done

step "results ($(el))"
"$PY0" "$HERE/timeline.py" table "$RESULTS" 2>&1
cat "$STATE/starts.jsonl" 2>/dev/null
hits=$(k=$(cat "$KEY_FILE"); { ns journalctl --no-pager -o cat; cat "$LOGS"/*.log "$LOGS"/*.json; } 2>/dev/null | grep -c -F "$k")
if [ "$hits" = 0 ]; then ok "the API key is in 0 journal lines and role logs"; else bad "the API key appears $hits times"; fi
pack
echo "benchmark time in this call: $(el)"
gpu_lib_finish
