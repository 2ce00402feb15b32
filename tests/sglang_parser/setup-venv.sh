#!/usr/bin/env bash
# Build (once) the test venvs that hold the REAL SGLang argument parsers (0.5.9, 0.5.23), without the GPU stack:
#   tests/sglang_parser/setup-venv.sh            -> .cache/sglang-parser-venv (0.5.9) and .cache/sglang-parser-venv-0.5.23
#                                                   (each reused while this script is unchanged)
#   tests/sglang_parser/setup-venv.sh --force    -> rebuild from scratch
#   SGLANG_PARSER_RELEASES="0.5.9" ...           -> only those releases
# The venv itself lives once per machine in the cache outside the checkout ($GPUSERVE_CACHE, default
# ~/.cache/gpuserve-sglang/sglang-parser-venv-<12 hex of this script and the interpreter>) and
# .cache/sglang-parser-venv links to it: a fresh clone (CI) reuses it instead of installing torch again
# (133 s of the static lane). SGLANG_PARSER_VENV=<dir> builds in <dir> itself, as before.
# Used by tests/unit/test_sglang_real_parser.py, which runs roles/server/files/sglang_check_args.py in it.
#
# What goes in, and why (0.5.9; 0.5.23 below):
# - torch 2.13.0, CPU build (pip takes torch-2.13.0+cpu from the machine's find-links; a CUDA build is refused below)
# - sglang==0.5.9 with --no-deps (its metadata pins torch 2.9.1, flashinfer, sgl-kernel, cuda-python...: not wanted)
# - torchvision 0.28.0 (the release paired with torch 2.13) and triton, both --no-deps: sglang.srt.server_args
#   imports them at module level (utils/common.py `import triton`; configs -> internvl_utils `import torchvision`)
# - the light packages that `import sglang.srt.server_args` needs, found by trial (see docs/server.md)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# Python 3.11: the machine kind keeps torch 2.13.0's CPU wheel for 3.11 on disk (another version would download a
# CUDA build of several GB); not the development controller's interpreter, which may be newer.
PY="${PYTHON:-$("$ROOT/scripts/find-python.sh" 3.11 || echo python3)}"
FORCE="${1:-}"

build() {
local RELEASE="$1" suffix="" want LINK="" VENV CACHE STAMP
[[ "$RELEASE" == "0.5.9" ]] || suffix="-$RELEASE"
want="$( (sha256sum "$0" | cut -d' ' -f1; echo "$RELEASE"; "$PY" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
if [[ -n "${SGLANG_PARSER_VENV:-}" ]]; then
  VENV="$SGLANG_PARSER_VENV$suffix"
else
  CACHE="${GPUSERVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuserve-sglang}"
  VENV="$CACHE/sglang-parser-venv$suffix-${want:0:12}"
  LINK="$ROOT/.cache/sglang-parser-venv$suffix"
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

if [[ "$FORCE" != "--force" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  link
  echo "sglang-parser-venv: $VENV ($RELEASE) is up to date${LINK:+ (linked from ${LINK#"$ROOT"/})}"
  return 0
fi

echo "sglang-parser-venv: building $VENV ($RELEASE) with $("$PY" --version 2>&1)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
pip_() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2>&1 | grep -vE "^WARNING: Location|dependency resolver|^sglang 0.5.[0-9]+ requires|^torchvision .* requires" || true; }

pip_ "torch==2.13.0"
if [[ "$RELEASE" == "0.5.9" ]]; then
  pip_ --no-deps "sglang==0.5.9" "torchvision==0.28.0" "triton==3.9.0"
  pip_ "numpy" "tqdm" "pybase64" "requests" "ipython" "pydantic" "aiohttp" "orjson" "pyzmq" "packaging" \
       "pillow" "starlette" "openai==2.6.1" "partial_json_parser" "huggingface_hub" "transformers==4.57.1" \
       "dill" "sentencepiece" "safetensors"
else
  # 0.5.23 (its arguments are dataclass fields, arg_groups/): sglang and triton --no-deps, torch's CPU build (the
  # release pins 2.14.1, a CUDA build; 2.13.0 builds the same parser), and the packages `import
  # sglang.srt.server_args` needs (found by trial), at the versions of the release's own hash lock
  local lock="$ROOT/roles/install/files/locks/sglang-$RELEASE.txt" pins=() name line
  for name in numpy tqdm pybase64 requests pydantic aiohttp orjson pyzmq packaging pillow starlette openai \
              partial-json-parser huggingface-hub transformers dill sentencepiece safetensors msgspec psutil ipython; do
    line="$(grep -E "^$name==" "$lock" | head -1 | cut -d' ' -f1)"
    [[ -n "$line" ]] || { echo "sglang-parser-venv: $name is not in $lock" >&2; exit 1; }
    pins+=("$line")
  done
  pip_ --no-deps "sglang==$RELEASE" "$(grep -E '^triton==' "$lock" | head -1 | cut -d' ' -f1)"
  pip_ "${pins[@]}"
fi

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
echo "sglang-parser-venv: $RELEASE ready ($(du -sh "$VENV" | cut -f1))"
}

for release in ${SGLANG_PARSER_RELEASES:-0.5.9 0.5.23}; do
  build "$release"
done
