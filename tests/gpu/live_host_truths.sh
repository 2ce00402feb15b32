#!/usr/bin/env bash
# GPU-machine truths for the sandboxed unit (issue 14) and the live-host plan (issue 13), run by run_all.sh:
#   1. as root: the device nodes a CUDA + NCCL + pinned-memory process opens, and whether nvidia-smi reports that
#      process under its own PID (tests/gpu/live_host_truths.py);
#   2. while that process holds 8 GiB of GPU memory: gpuserve.sglang.nvidia_gpu_info's view of it;
#   3. as an unprivileged user under a 64 KiB memory-lock limit (what a unit without LimitMEMLOCK= gets), and
#      with an unlimited one: does pinning 4 GiB of host memory (HiCache's pool) work?
# Each step is labelled; the script goes on past a failed step and exits non-zero if any failed.
set -u
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
gpu_lib_init live_host_truths
gpu_on_exit() { if [ "${HOLDER:-0}" != 0 ]; then kill "$HOLDER" 2>/dev/null; fi; }  # never `kill 0` (the whole group)

step "1. device nodes, PIDs and cgroup of a CUDA + NCCL + pinned-memory process (root)"
HOLD_SECONDS=60 "$PY" "$REPO/tests/gpu/live_host_truths.py" >"$WORK/root.out" 2>"$WORK/root.err" &
HOLDER=$!
for _ in $(seq 1 120); do grep -q '^LIVE_HOST_TRUTHS ' "$WORK/root.out" 2>/dev/null && break; sleep 1; done
if grep -q '^LIVE_HOST_TRUTHS ' "$WORK/root.out"; then
  sed -n 's/^LIVE_HOST_TRUTHS //p' "$WORK/root.out" | "$PY" -m json.tool
  ok "the probe ran"
else
  tail -30 "$WORK/root.err"; bad "the probe did not report"
fi
ls -l /dev/nvidia* 2>&1
grep -i nvidia /proc/devices

step "2. nvidia_gpu_info while the probe holds its memory"
gpu_info_playbook "nvidia_gpu_info with a CUDA process running" > "$WORK/info.yml" <<'YAML'
    - name: Show the GPUs and their processes
      ansible.builtin.debug:
        var: info
YAML
if gpu_play "$WORK/info.yml"; then
  ok "nvidia_gpu_info ran with a process on the GPU"
else
  bad "nvidia_gpu_info"
fi
kill "$HOLDER" 2>/dev/null; wait "$HOLDER" 2>/dev/null; HOLDER=0

step "3. pinned host memory as an unprivileged user: 64 KiB memlock limit, then unlimited"
cp "$REPO/tests/gpu/live_host_truths.py" "$WORK/probe.py"; chmod 644 "$WORK/probe.py"
for lim in 65536 unlimited; do
  echo "--- RLIMIT_MEMLOCK=$lim, user nobody"
  if prlimit --memlock="$lim:$lim" setpriv --reuid=nobody --regid=nogroup --clear-groups \
       env HOME=/tmp DEVICE_GIB=1 PINNED_GIB=4 MASTER_PORT=29533 "$PY" "$WORK/probe.py" >"$WORK/u.out" 2>"$WORK/u.err"; then
    sed -n 's/^LIVE_HOST_TRUTHS //p' "$WORK/u.out" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({k: r[k] for k in ("uid","rlimit_memlock","pinned","nccl","device_nodes_open")}, indent=1, sort_keys=True))'
    ok "probe as nobody with memlock $lim"
  else
    tail -20 "$WORK/u.err"; bad "probe as nobody with memlock $lim"
  fi
done

gpu_lib_finish
