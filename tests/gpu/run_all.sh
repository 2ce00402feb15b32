#!/usr/bin/env bash
# Run every GPU-machine check (tests/gpu/*.sh) in one go on a lent GPU machine (no network there).
# ansible-core and its needs travel as wheels in .whl/ (made by tests/gpu/fetch-wheels.sh on a machine with
# PyPI). Output goes to stdout and, per check, to $OUT (when set) for docs/validation.md.
set -u
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
echo "### machine"; uname -a; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
python3 -c 'import ansible, sys; print("ansible-core", ansible.__version__ if hasattr(ansible, "__version__") else "?", "python", sys.version.split()[0])' 2>/dev/null \
  || python3 -m ansible --version | head -1
OUTDIR="${OUT:-/tmp/gpu-out}"; mkdir -p "$OUTDIR"
rc=0
for check in tests/gpu/*.sh; do
  case "$(basename "$check")" in run_all.sh | fetch-wheels.sh | real_server.sh | lib.sh) continue ;; esac
  name="$(basename "$check" .sh)"
  echo; echo "######## $name ($(date -u +%FT%TZ))"
  start=$SECONDS
  bash "$check" 2>&1 | tee "$OUTDIR/$name.log"
  st=${PIPESTATUS[0]}
  echo "######## $name: exit $st after $((SECONDS - start)) s"
  [[ $st -eq 0 ]] || rc=1
done
exit $rc
