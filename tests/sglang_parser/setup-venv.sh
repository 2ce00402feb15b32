#!/usr/bin/env bash
# Build (once) the test venv that holds the REAL SGLang 0.5.9 argument parser, without SGLang's GPU stack:
#   tests/sglang_parser/setup-venv.sh            -> .cache/sglang-parser-venv (reused while this script is unchanged)
#   tests/sglang_parser/setup-venv.sh --force    -> rebuild from scratch
# The venv itself lives once per machine in the cache outside the checkout ($GPUSERVE_CACHE, default
# ~/.cache/gpuserve-sglang/sglang-parser-venv-<12 hex of this script and the interpreter>) and
# .cache/sglang-parser-venv links to it: a fresh clone (CI) reuses it instead of installing torch again
# (133 s of the static lane). SGLANG_PARSER_VENV=<dir> builds in <dir> itself, as before.
# Used by tests/unit/test_sglang_real_parser.py, which runs roles/server/files/sglang_check_args.py in it.
#
# What goes in, and why:
# - torch 2.13.0, CPU build (pip takes torch-2.13.0+cpu from the machine's find-links; a CUDA build is refused below)
# - sglang==0.5.9 with --no-deps (its metadata pins torch 2.9.1, flashinfer, sgl-kernel, cuda-python...: not wanted)
# - torchvision 0.28.0 (the release paired with torch 2.13) and triton, both --no-deps: sglang.srt.server_args
#   imports them at module level (utils/common.py `import triton`; configs -> internvl_utils `import torchvision`)
# - the light packages that `import sglang.srt.server_args` needs, found by trial (see docs/server.md)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${PYTHON:-python3}"
want="$( (sha256sum "$0" | cut -d' ' -f1; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
LINK=""
if [[ -n "${SGLANG_PARSER_VENV:-}" ]]; then
  VENV="$SGLANG_PARSER_VENV"
else
  CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
  VENV="$CACHE/sglang-parser-venv-${want:0:12}"
  LINK="$ROOT/.cache/sglang-parser-venv"
  mkdir -p "$CACHE" "$ROOT/.cache"
  # one build at a time per machine (two checkouts may run make test at once)
  exec 9>"$CACHE/.sglang-parser-venv.lock"
  flock 9
fi
STAMP="$VENV/.gpuserve-parser-venv"
link() {
  [[ -n "$LINK" ]] || return 0
  if [[ -d "$LINK" && ! -L "$LINK" ]]; then rm -rf "$LINK"; fi   # a venv of the layout before, in the checkout
  ln -sfn "$VENV" "$LINK"
}

if [[ "${1:-}" != "--force" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  link
  echo "sglang-parser-venv: $VENV is up to date${LINK:+ (linked from .cache/sglang-parser-venv)}"
  exit 0
fi

echo "sglang-parser-venv: building $VENV with $("$PY" --version 2>&1)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
pip_() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -vE "^WARNING: Location|dependency resolver|^sglang 0.5.9 requires|^torchvision .* requires" || true; }

pip_ "torch==2.13.0"
pip_ --no-deps "sglang==0.5.9" "torchvision==0.28.0" "triton==3.9.0"
pip_ "numpy" "tqdm" "pybase64" "requests" "ipython" "pydantic" "aiohttp" "orjson" "pyzmq" "packaging" \
     "pillow" "starlette" "openai==2.6.1" "partial_json_parser" "huggingface_hub" "transformers==4.57.1" \
     "dill" "sentencepiece" "safetensors"

# Refuse a CUDA torch (several GB) and prove the parser imports before calling the venv ready.
"$VENV/bin/python" - <<'PY'
import sys
import torch
if torch.version.cuda is not None:
    sys.exit("sglang-parser-venv: got torch %s with CUDA %s; the CPU build was expected" % (torch.__version__, torch.version.cuda))
PY
"$VENV/bin/python" -W ignore "$ROOT/roles/server/files/sglang_check_args.py" --model-path /nonexistent >/dev/null
echo "$want" > "$STAMP"
link
echo "sglang-parser-venv: ready ($(du -sh "$VENV" | cut -f1))"
