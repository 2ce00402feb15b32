#!/usr/bin/env bash
# Real NCCL proof for gpuserve.sglang.nccl_tuning, on a machine with 2 GPUs (no systemd needed).
#
#   tests/gpu/nccl_proof.sh            (from the repo root; ansible-core importable by python3)
#
# 1. makes a throw-away venv with --system-site-packages (torch visible) and runs the ROLE into it over a
#    local connection (EnvironmentFile in the work dir instead of /etc/sglang);
# 2. runs a 2-process torch.distributed all-reduce with NCCL_DEBUG=INFO and NONE of the tuning variables
#    exported by this script: they can only come from what the role installed in the venv;
# 3. asserts from NCCL's own output that every value is "set by environment" in each process and that the
#    all-reduce chose the tuned algorithm and protocol (tests/gpu/nccl_check.py);
# 4. control: `python -S` (no site, no sitecustomize, no .pth) with only the EnvironmentFile's values, as
#    the systemd unit gets them: NCCL must still take every value;
# 5. the hole: `python -S` WITHOUT the EnvironmentFile: the check must fail (NCCL falls back to defaults);
# 6. removes the tuning again (state absent) and checks nothing is left.
# Keeps NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 set (this machine
# needs them). Every step is labelled; a failed step does not stop the others; exit 1 if any failed.
set -u
umask 022
# shellcheck source=tests/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
GPU_KEEP_WORK=1  # the logs stay for reading
gpu_lib_init nccl_proof
ROOT="$REPO"
cd "$ROOT" || exit 1
VENV="$WORK/venv"
ENVFILE="$WORK/etc/sglang/nccl.env"
CHECK="$PY $ROOT/tests/gpu/nccl_check.py"
run_step() {  # NAME FUNCTION ARGS...: run one step, record it as passed or failed
  local name="$1"; shift
  step "$name"
  if "$@"; then ok "$name"; else bad "$name"; fi
}
# The machine's own requirements stay exported; the tuning variables must NOT come from the caller.
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}" TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TUNING_KEYS="$("$PY" - "$ROOT/roles/nccl_tuning/defaults/main.yml" <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read().split("\nnccl_env:", 1)[1]
print(" ".join(re.findall(r"^  (NCCL_[A-Z0-9_]+):", text, re.M)))
PYEOF
)"
for k in $TUNING_KEYS; do [[ $k == NCCL_NVLS_ENABLE ]] || unset "$k"; done
NCCL_DEBUG_ENV=(NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV,TUNING")

machine() {
  echo "work dir: $WORK    user: $(id -un)    python: $(command -v "$PY") ($("$PY" -V 2>&1))"
  echo "role's tuning variables: $TUNING_KEYS"
  echo "caller exports: $(env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort | tr '\n' ' ')"
  nvidia-smi -L || return 1
  "$PY" -c 'import torch; n = torch.cuda.device_count(); print("torch", torch.__version__, "cuda", torch.version.cuda,
"nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", n); raise SystemExit(0 if n >= 2 else "need 2 GPUs")' || return 1
  "$PY" -c 'import ansible; print("ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "importable")' || return 1
  local k; for k in $TUNING_KEYS; do
    if [[ $k != NCCL_NVLS_ENABLE && -n "${!k+x}" ]]; then echo "caller still exports $k"; return 1; fi
  done
}

make_venv() {
  "$PY" -m venv --system-site-packages "$VENV" || return 1
  # When $PY is itself a venv (the GPU image's python3 is /opt/torch/.venv), --system-site-packages shows the
  # BASE interpreter's packages, not torch: add the directory that holds torch with a .pth file.
  local torch_dir venv_site
  torch_dir="$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')" || return 1
  venv_site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
  echo "$torch_dir" > "$venv_site/_gpuserve_proof_torch.pth"
  "$VENV/bin/python" -c 'import sys, sysconfig, torch; print("venv", sys.prefix, "site-packages", sysconfig.get_paths()["purelib"], "torch", torch.__version__)'
}

run_role() {  # $1 = present|absent
  mkdir -p "$WORK/ansible-home"
  cat > "$WORK/role.yml" <<YML
- name: nccl_tuning into the proof venv
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Run the role
      ansible.builtin.include_role:
        name: gpuserve.sglang.nccl_tuning
      vars:
        nccl_tuning_state: $1
        nccl_python: $VENV/bin/python
        nccl_tuning_env_file: $ENVFILE
YML
  LC_ALL=C.UTF-8 LANG=C.UTF-8 ANSIBLE_HOME="$WORK/ansible-home" ANSIBLE_NOCOLOR=1 \
    ANSIBLE_LOCAL_TEMP="$WORK/ansible-home/tmp" ANSIBLE_CALLBACK_RESULT_FORMAT=yaml \
    gpu_play "$WORK/role.yml" > "$WORK/role-$1.log" 2>&1
  local rc=$?
  grep -E '^(changed:|fatal:)|msg:|PLAY RECAP|localhost +:' "$WORK/role-$1.log" | tail -40
  [[ $rc -eq 0 ]] || { echo "--- role run failed (rc=$rc), last lines:"; tail -40 "$WORK/role-$1.log"; }
  return "$rc"
}

render_fallback() {  # only when the role could not run: the role's module logic, called directly (no Ansible run)
  echo "FALLBACK: running plugins/module_utils/_nccl_tuning.py directly (the role run failed; that step stays FAILED)"
  mkdir -p "$WORK/collections/ansible_collections/gpuserve"
  ln -sfn "$ROOT" "$WORK/collections/ansible_collections/gpuserve/sglang"
  PYTHONPATH="$WORK/collections" "$PY" - "$ROOT/roles/nccl_tuning" "$VENV/bin/python" "$ENVFILE" <<'PYEOF'
import os, sys
import yaml
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_tuning import NcclTuning
role, python, envfile = sys.argv[1:4]
d = yaml.safe_load(open(os.path.join(role, "defaults", "main.yml")))
os.makedirs(os.path.dirname(envfile), exist_ok=True)
result = NcclTuning({"state": "present", "python": python, "install_record": "", "venv": "", "env": d["nccl_env"],
                     "network": {}, "policy": d["nccl_env_policy"], "env_file": envfile, "pth_hook": "auto",
                     "configure": True, "verify": True}).converge()
print("written:", result["changes"], "(shadowed sitecustomize: %s)" % result["shadowed"])
PYEOF
}

show_installed() {
  local site; site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  ls -l "$site"/sitecustomize.py "$site"/gpuserve_nccl_tuning.pth "$ENVFILE" 2>&1
  echo "--- $ENVFILE"; cat "$ENVFILE" || return 1
  echo "--- $site/sitecustomize.py"; cat "$site/sitecustomize.py" || return 1
  [[ -f $site/gpuserve_nccl_tuning.pth ]] && { echo "--- $site/gpuserve_nccl_tuning.pth"; cat "$site/gpuserve_nccl_tuning.pth"; }
  echo "--- what the venv's python sees on a plain start"
  "$VENV/bin/python" - "$ENVFILE" <<'PYEOF'
import os, sys
want = dict(l.strip().split("=", 1) for l in open(sys.argv[1]) if l.strip() and not l.startswith("#"))
seen = {k: os.environ.get(k) for k in want}
print("sitecustomize imported:", getattr(sys.modules.get("sitecustomize"), "__file__", None))
for k in sorted(want):
    print("  %-20s %-6s %s" % (k, seen[k], "ok" if seen[k] == want[k] else "MISSING (want %s)" % want[k]))
sys.exit(0 if seen == want else 1)
PYEOF
}

nccl_lines() {  # what matters from a log, for the record
  grep -E 'NCCL version|set by environment|Bytes -> Algo|PROOF-|via P2P' "$1" | grep -vE 'Channel (0[1-9]|[1-9][0-9])/' | head -60
}

rank_lines_ok() {  # $1 log, $2 python expression on each PROOF-RANK record r
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
text = open(sys.argv[1], errors="replace").read()
dec = json.JSONDecoder()
recs = []
start = text.find("PROOF-RANK ")
while start >= 0:
    recs.append(dec.raw_decode(text, start + len("PROOF-RANK "))[0])
    start = text.find("PROOF-RANK ", start + 1)
ok = len(recs) == 2 and all(eval(sys.argv[2], {}, {"r": r}) for r in recs)
print("PROOF-RANK records: %d, condition `%s`: %s" % (len(recs), sys.argv[2], "holds" if ok else "FAILS"))
sys.exit(0 if ok else 1)
PYEOF
}

tuned_run() {
  env "${NCCL_DEBUG_ENV[@]}" timeout 240 "$VENV/bin/python" -m torch.distributed.run --nproc_per_node 2 \
    --master_port 29531 "$ROOT/tests/gpu/nccl_proof.py" > "$WORK/tuned.log" 2>&1
  local rc=$?; echo "torchrun rc=$rc (full log $WORK/tuned.log, $(wc -l < "$WORK/tuned.log") lines)"
  nccl_lines "$WORK/tuned.log"
  [[ $rc -eq 0 ]] || { tail -30 "$WORK/tuned.log"; return 1; }
  [[ $(grep -oE 'PROOF-SUM rank [0-9]+ sum [0-9.]+ expected [0-9.]+ ok' "$WORK/tuned.log" | wc -l) -eq 2 ]] || { echo "all-reduce sums not ok on both ranks"; return 1; }
  rank_lines_ok "$WORK/tuned.log" 'not r["no_site"]' || return 1
  $CHECK "$WORK/tuned.log" --env-file "$ENVFILE" --procs 2
}

system_site() {
  "$VENV/bin/python" -c 'import sys; print(":".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and not p.startswith(sys.prefix)))'
}

nosite_run() {  # python -S in every process, values only from the EnvironmentFile (what the unit gets)
  local pp; pp="$(system_site)${PYTHONPATH:+:$PYTHONPATH}"
  ( set -a; . "$ENVFILE"; set +a
    env "${NCCL_DEBUG_ENV[@]}" PYTHONPATH="$pp" timeout 240 "$VENV/bin/python" -S "$ROOT/tests/gpu/nccl_proof.py" --spawn 2 --port 29532
  ) > "$WORK/nosite.log" 2>&1
  local rc=$?; echo "python -S rc=$rc (full log $WORK/nosite.log)"
  nccl_lines "$WORK/nosite.log"
  [[ $rc -eq 0 ]] || { tail -30 "$WORK/nosite.log"; return 1; }
  rank_lines_ok "$WORK/nosite.log" 'r["no_site"] and r["sitecustomize"] is None' || return 1
  $CHECK "$WORK/nosite.log" --env-file "$ENVFILE" --procs 2
}

hole_run() {  # python -S WITHOUT the EnvironmentFile: the check must FAIL, or it proves nothing
  local pp; pp="$(system_site)${PYTHONPATH:+:$PYTHONPATH}"
  env "${NCCL_DEBUG_ENV[@]}" PYTHONPATH="$pp" timeout 240 "$VENV/bin/python" -S "$ROOT/tests/gpu/nccl_proof.py" --spawn 2 --port 29533 \
    > "$WORK/hole.log" 2>&1
  local rc=$?; echo "python -S without EnvironmentFile rc=$rc (full log $WORK/hole.log)"
  nccl_lines "$WORK/hole.log"
  [[ $rc -eq 0 ]] || { tail -30 "$WORK/hole.log"; return 1; }
  if $CHECK "$WORK/hole.log" --env-file "$ENVFILE" --procs 2; then
    echo "the check PASSED without the EnvironmentFile: the values come from somewhere else, the proof is void"; return 1
  fi
  echo "as expected: bypassing sitecustomize without the EnvironmentFile loses the tuning"
}

removed() {
  run_role absent || return 1
  local site; site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  local left=0 f
  for f in "$site/sitecustomize.py" "$site/gpuserve_nccl_tuning.pth" "$ENVFILE"; do
    if [[ -e $f ]]; then echo "still there: $f"; left=1; else echo "gone: $f"; fi
  done
  return "$left"
}

run_step "machine: 2 GPUs, torch, ansible-core, no tuning variable exported" machine
run_step "venv with --system-site-packages" make_venv
run_step "role gpuserve.sglang.nccl_tuning (present) into the venv, local connection" run_role present
[[ -f $ENVFILE ]] || run_step "fallback: the role's module logic called directly on the venv" render_fallback
run_step "installed files and the venv's python on a plain start" show_installed
run_step "NCCL all-reduce under the installed tuning (torchrun, 2 processes)" tuned_run
run_step "control: python -S + EnvironmentFile only (what the systemd unit gets)" nosite_run
run_step "the hole: python -S without EnvironmentFile must lose the tuning" hole_run
run_step "role (absent) removes everything it wrote" removed

gpu_lib_finish
