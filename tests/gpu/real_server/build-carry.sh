#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Make what tests/gpu/real_server.sh carries to the GPU machine (no network there), on a machine with PyPI and
# Debian 12's apt sources, into .gpu-carry/ (ignored by git):
#   site.tar.xz  SGLang 0.5.17 and every package its server start imports that the GPU image (Python 3.12, torch
#                2.11.0+cu130) lacks or has at a version 0.5.17 cannot use, as a `pip install --target` tree, without
#                the libraries an sm90 start never loads; about 51 MiB (one call carries at most 64 MiB in all)
#   debs/        Debian 12's systemd 252 and the libraries the image lacks (about 5.3 MB)
#   wheels/      the development controller's ansible-core and resolvelib (the image has jinja2, PyYAML, packaging)
# Why 0.5.17: the newest release whose kernel
# package loads on that torch (docs/validation.md, "A real SGLang server").
# Usage: tests/gpu/real_server/build-carry.sh [PYTHON3.12]
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY312=${1:-python3.12}
C=.gpu-carry; W=.cache/real-sglang-site
grep -qx '/.gpu-carry/' .git/info/exclude 2>/dev/null || echo '/.gpu-carry/' >> .git/info/exclude
mkdir -p "$C/debs" "$W/wheels"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
# `uv pip compile sglang==0.5.17 --exclude-newer 2026-08-09` (its release date), kept to what the start path
# imports, minus what the image has (transformers and tokenizers: the image's 5.17 breaks 0.5.17's import).
PKGS=(sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 transformers==5.12.1 tokenizers==0.22.2
      xgrammar==0.2.1 apache-tvm-ffi==0.1.11 fastapi==0.141.1 starlette==1.6.0 uvicorn==0.52.1
      python-multipart==0.0.32 pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.8.0 typing-inspection==0.4.2
      orjson==3.11.9 pybase64==1.5.0 msgspec==0.21.1 pyzmq==27.1.0 setproctitle==1.3.7 dill==0.4.1 openai==2.6.1
      distro==1.9.0 sniffio==1.3.1 partial-json-parser==0.2.1.1.post7 compressed-tensors==0.18.0 loguru==0.7.3
      gguf==0.19.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.6.3
      soundfile==0.13.1 cffi==2.1.1 ipython==9.16.1 traitlets==5.16.1 stack-data==0.6.3 executing==2.2.1
      asttokens==3.0.2 pure-eval==0.2.3 prompt-toolkit==3.0.53 wcwidth==0.8.2)
if [ ! -s "$C/site.tar.xz" ]; then
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W/wheels" "${PKGS[@]}"
  rm -rf "$W/site"; mkdir -p "$W/site"
  "$PY312" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" "$W"/wheels/*.whl
  rm -f "$W"/site/sgl_kernel/flash_ops.abi3.so "$W"/site/sgl_kernel/flashmla_ops.abi3.so "$W"/site/sgl_kernel/infllm_ops*.so
  rm -rf "$W/site/sgl_kernel/sm100"; rm -f "$W/site/xgrammar/lib/libxgrammar.a"
  # the diffusion runtime (sglang.multimodal_gen, 13 MB): nothing under sglang.srt imports it (issue 49: the carry
  # and the checkout were 7.7 KB over the 64 MiB a call carries)
  rm -rf "$W/site/sglang/multimodal_gen"
  # debug sections only (xgrammar's bindings are 53 MB with DWARF, 3 MB without: 8.4 MB less in the xz): the loader
  # never reads them, and the carry plus the checkout were 1.1 MiB over the 64 MiB a call carries (issue 49)
  find "$W/site" -name '*.so*' -type f -exec strip --strip-debug {} + 2>/dev/null || true
  tar -C "$W/site" -cf - . | xz -9 -T0 > "$C/site.tar.xz"
fi
(cd "$C/debs" && apt-get download systemd libsystemd-shared libkmod2 libip4tc2 libcryptsetup12 libdevmapper1.02.1 \
   libargon2-1 libjson-c5 libfdisk1 libapparmor1 2>/dev/null)
mkdir -p "$C/wheels"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$C/wheels" ansible-core=="$(sed -n 's/^ansible-core==//p' requirements-dev.txt)" resolvelib==1.0.1
du -sh "$C"
# What one device call carries: the tracked files and untracked, not ignored ones (the checkout) plus this folder;
# refused above 64 MiB. Counted as disk usage (4 KiB blocks): on 2026-12-07 the device tool refused a tree of
# 66,577,470 bytes of files (68,247,552 bytes in blocks) as larger than 64 MiB.
checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -c -B1 --files0-from=- 2>/dev/null | tail -1 | cut -f1)
carry=$(du -s -B1 "$C" | cut -f1)
limit=$((64 * 1024 * 1024))
echo "checkout $checkout + $C $carry = $((checkout + carry)) bytes on disk of $limit ($(( (limit - checkout - carry) / 1024 )) KiB left)"
[ $((checkout + carry)) -le $limit ] || { echo "over the 64 MiB a device call carries" >&2; exit 1; }
