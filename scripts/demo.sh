#!/usr/bin/env bash
# `make demo`: the full deploy against a local systemd test host (a Debian 12 container with systemd as
# PID 1). The GPU server is replaced by the STAND-IN server (tests/standin/sglang_standin.py), which speaks
# SGLang 0.5.9's log texts, /health and shutdown; everything else is the product as it runs in production.
#   scripts/demo.sh          deploy (first time: HiCache ratio 2, then the 2 -> 4 change; again: no change)
#   scripts/demo.sh --clean  remove the demo host (and stop the Docker engine if the demo started it)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
HOST=gpuserve-demo
IMAGE="${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}"
LOG="$ROOT/.cache/demo"
mkdir -p "$LOG"
t0=$SECONDS
say() { printf '\n==> %s\n' "$*"; }

if [[ "${1:-}" == "--clean" ]]; then
  docker rm -f "$HOST" >/dev/null 2>&1 && echo "demo: removed $HOST" || echo "demo: no $HOST to remove"
  scripts/docker-engine.sh down
  exit 0
fi

say "Controller venv (pinned ansible-core, collections from the 'ansible' package)"
scripts/venv.sh
scripts/collection-link.sh
export PATH="$ROOT/.venv/bin:$PATH"
say "Docker engine and the systemd host image"
scripts/docker-engine.sh up
scripts/systemd-image.sh

first_run=0
if ! docker container inspect "$HOST" >/dev/null 2>&1; then
  first_run=1
  say "Starting the demo host $HOST (systemd as PID 1)"
  docker run -d --name "$HOST" --hostname "$HOST" \
    --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=private --tmpfs /run --tmpfs /run/lock --tmpfs /sys/fs/cgroup --stop-signal SIGRTMIN+3 \
    -v /etc/ssl/certs/ca-certificates.crt:/usr/local/share/gpuserve/host-ca-bundle.crt:ro \
    "$IMAGE" /lib/systemd/systemd >/dev/null
elif [[ "$(docker container inspect -f '{{.State.Running}}' "$HOST")" != "true" ]]; then
  docker start "$HOST" >/dev/null
fi
docker exec "$HOST" systemctl is-system-running --wait >/dev/null || true
# What a real GPU host has and the test host lacks: pip trusting this network's CA, the model
# directories, and the STAND-IN server (outside the product's venv, on the unit's PYTHONPATH).
docker exec "$HOST" sh -c 'printf "[global]\ncert = /usr/local/share/gpuserve/host-ca-bundle.crt\n" > /etc/pip.conf'
docker exec "$HOST" mkdir -p /opt/sglang-standin /srv/models/Kimi-K2.5-INT4 /srv/models/Kimi-K2.5-EAGLE3
docker cp tests/standin/sglang_standin.py "$HOST":/opt/sglang-standin/sglang_standin.py >/dev/null
docker cp -L tests/standin/sglang_standin_releases.py "$HOST":/opt/sglang-standin/sglang_standin_releases.py >/dev/null
# Stand-in weights in the real formats (safetensors shards and their index: the server role's model preflight
# reads them), then Kimi-K2.5's published config.json over the stand-in's (the memory plan reads its geometry).
docker cp tests/standin/make_standin_model.py "$HOST":/opt/sglang-standin/make_standin_model.py >/dev/null
docker exec "$HOST" python3 /opt/sglang-standin/make_standin_model.py kimi /srv/models/Kimi-K2.5-INT4
docker exec "$HOST" python3 /opt/sglang-standin/make_standin_model.py eagle3 /srv/models/Kimi-K2.5-EAGLE3
docker cp tests/fixtures/models/kimi-k2.5/config.json "$HOST":/srv/models/Kimi-K2.5-INT4/config.json >/dev/null

run_deploy() {
  local ratio="$1" log="$2" rc
  # Stream only what changed (task name + host) and failures; the whole output is in $log.
  set +e
  ansible-playbook -i inventory/demo playbooks/deploy.yml -e "demo_hicache_ratio=$ratio" > "$log" 2>&1 &
  local pid=$!
  tail -n +1 -F --pid="$pid" "$log" 2>/dev/null | awk '
    /^(TASK|RUNNING HANDLER) \[/ { task = $0; sub(/^(TASK|RUNNING HANDLER) \[/, "", task); sub(/\] \**$/, "", task); next }
    /^changed: / { printf "  changed   %s\n", task; fflush(); next }
    /^(fatal|failed): / { printf "  FAILED    %s\n", task; fflush(); next }'
  wait "$pid"; rc=$?
  set -e
  # The memory plan, the summary and the recap.
  awk '/^TASK \[gpuserve.sglang.preflight : Show the plan\]/ {p=1; print "  -- memory plan (preflight) --"; next}
       /^TASK \[Summary\]/ {p=1; print "  -- summary --"; next}
       /^TASK / {p=0} /^PLAY RECAP/ {p=1} p && !/^ok: |^$/ {print "  " $0}' "$log"
  if [[ $rc -ne 0 ]]; then
    echo "demo: the deploy failed (exit $rc); the whole output is in $log"
    grep -E -A25 '^fatal: ' "$log" | head -60
    exit "$rc"
  fi
}

if [[ $first_run == 1 ]]; then
  say "Deploy 1/2: preflight, CUDA 13.0 (pip wheels), SGLang 0.5.9, NCCL tuning, the sglang-kimi unit, HiCache ratio 2.0"
  run_deploy 2.0 "$LOG/deploy-ratio2.log"
  say "Deploy 2/2: the HiCache ratio 2.0 -> 4.0 change: one restart through 'deactivating', verified"
  run_deploy 4.0 "$LOG/deploy-ratio4.log"
else
  say "Deploy (the host exists already): the same configuration, so nothing should change or restart"
  run_deploy 4.0 "$LOG/deploy-again.log"
fi

say "Summary"
docker exec "$HOST" cat /etc/sglang/sglang-kimi.md 2>/dev/null | sed -n '1,60p' || true
cat <<MSG

demo: done in $((SECONDS - t0)) s. The GPU server was replaced by the STAND-IN server (a test fixture that
      speaks SGLang 0.5.9's log texts, /health and shutdown); everything else is the product.
      Logs of each deploy:      $LOG/
      Deployment record:        docker exec $HOST cat /etc/sglang/sglang-kimi.md
      Reach the host:           docker exec -it $HOST bash
      The unit and its journal: docker exec $HOST systemctl status sglang-kimi
                                docker exec $HOST journalctl -u sglang-kimi -b --no-pager | tail -40
      Health:                   docker exec $HOST python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:30000/health').status)"
      Run it again (no change): make demo
      Remove the host:          make demo-clean
MSG
