# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang 0.5.9's memory math, done ahead of time: KV cache per GPU, HiCache host pool, RAM check.

Private to the collection. The formulas are SGLang's own (see docs/memory-planning.md):

- KV tokens per rank (model_runner_kv_cache_mixin ``profile_max_num_token``):
  ``rest = available - total * (1 - mem_fraction_static)``; ``tokens = int(rest * 2**30) // cell_size``,
  then aligned down to the page size. ``total`` is the free GPU memory (GiB) SGLang measures before it
  loads weights, ``available`` the free memory after loading them.
- cell size: MLA ``(kv_lora_rank + qk_rope_head_dim) * layers * dtype_bytes`` (not divided by TP);
  MHA ``max(1, kv_heads // tp) * head_dim * layers * 2 * dtype_bytes``.
- KV pool bytes: ``(tokens + page_size) * cell_size`` (SGLang pads one page), printed in GiB as "KV size: X GB".
- HiCache host pool per rank (memory_pool_host ``HostKVCache``): ``int(hicache_size * 1e9 // cell)`` when a
  size is given, else ``int(tokens * ratio)``; then ``(size // page_size + 1) * page_size``; it must be larger
  than the device pool; ``requested = size * cell`` must be <= ``MemAvailable - 10 GiB`` (each rank checks
  alone); printed as ``requested / 1e9`` "GB".

Units: GPU-side inputs and KV results are GiB (2**30 bytes), which SGLang's logs label "GB". HiCache's
``size_gb`` and the ``*_gb`` host-pool results are 10**9 bytes, as SGLang's ``--hicache-size`` and its
"Allocating X GB host memory" line use them. Every size is also returned in bytes.
"""

from __future__ import annotations

import json
import math
import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

GIB = 1 << 30
GB = 1000 ** 3
# SGLang keeps this much host memory free when it sizes the HiCache pool ("preserve at least 10GB").
HICACHE_RESERVE_BYTES = 10 * GIB

# The collection's planning assumptions, named here once: the values a plan made before the start takes for the
# settings SGLang computes at start-up (None among its declared defaults in the release table, taken from each
# wheel: _sglang_releases.server_defaults). They are the collection's, not SGLang's: SGLang derives
# mem_fraction_static from the GPU's memory and the model, page_size from the attention backend, and from 0.5.18 the
# HiCache ratio (2.0, then its auto-sizing) when neither --hicache-ratio nor --hicache-size is given. 0.88 is the
# reference deployment's --mem-fraction-static (docs/memory-planning.md), 2.0 SGLang's declared ratio up to 0.5.17.
# The server role's flags (filter gpuserve.sglang.sglang_defaults, planning=true), the preflight role's defaults and
# this module's options read them from here.
PLANNING_ASSUMPTIONS = {
    "mem_fraction_static": 0.88,
    "page_size": 1,
    "hicache_ratio": 2.0,
}

DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
KV_DTYPES = ("auto",) + tuple(sorted(DTYPE_BYTES))


class PlanError(ValueError):
    """Input that cannot be planned (a clear message for the operator)."""


def _vkey(version):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", version or ""))


DEFAULT_RULES_RELEASE = "0.5.9"


def release_rules(release=None):
    """(rules, note) of how that SGLang release sizes HiCache's host pools, from its release table (taken from the
    wheel by scripts/gen-sglang-texts.py): ``hicache_budget`` (``each_rank_alone``: each rank's pool against
    MemAvailable - reserve, 0.5.9; ``per_rank_share``: (available - reserve) // ranks on the host, 0.5.23),
    ``hicache_reserve_bytes``, ``hicache_draft_host_pool`` (EAGLE's draft gets a host pool of the target's tokens),
    ``hicache_auto_size``. A release without a table: the newest older one's (or the oldest's); not given: 0.5.9's."""
    known = sorted(RELEASES, key=_vkey)
    if not release:
        chosen, note = DEFAULT_RULES_RELEASE, "release not given: SGLang %s's rules" % DEFAULT_RULES_RELEASE
    elif release in RELEASES:
        chosen, note = release, "SGLang %s's rules" % release
    else:
        older = [r for r in known if _vkey(r) <= _vkey(release)]
        chosen = older[-1] if older else known[0]
        note = "SGLang %s has no release table: %s's rules" % (release, chosen)
    rules = dict(RELEASES[chosen]["rules"])
    rules["from_release"] = chosen
    return rules, note


# ---------------------------------------------------------------------------------------------------------------------
# Model geometry
# ---------------------------------------------------------------------------------------------------------------------


def _text_config(config):
    """Multimodal configs (Kimi-K2.5, Qwen-VL ...) keep the language model under text_config."""
    for key in ("text_config", "language_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return sub
    return config


def geometry_from_config(config):
    """The KV geometry SGLang uses, from a HuggingFace config.json dict."""
    if not isinstance(config, dict):
        raise PlanError("config.json is not a JSON object")
    text = _text_config(config)
    layers = text.get("num_hidden_layers")
    if not layers:
        raise PlanError("config.json has no num_hidden_layers (looked in the top level and in text_config)")
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    geometry = {
        "num_layers": int(layers),
        "model_type": text.get("model_type") or config.get("model_type"),
        "architectures": config.get("architectures") or text.get("architectures") or [],
        "model_dtype": dtype if isinstance(dtype, str) else None,
    }
    if text.get("kv_lora_rank"):
        if text.get("qk_rope_head_dim") is None:
            raise PlanError("config.json has kv_lora_rank but no qk_rope_head_dim")
        geometry.update(
            attention="mla",
            kv_lora_rank=int(text["kv_lora_rank"]),
            qk_rope_head_dim=int(text["qk_rope_head_dim"]),
        )
        return geometry
    if is_hybrid(config):
        geometry.update(hybrid_geometry(text))
    heads = text.get("num_attention_heads")
    if not heads:
        raise PlanError("config.json has neither MLA fields (kv_lora_rank) nor num_attention_heads")
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim")
    if not head_dim:
        hidden = text.get("hidden_size")
        if not hidden:
            raise PlanError("config.json has no head_dim and no hidden_size to derive it from")
        head_dim = int(hidden) // int(heads)
    geometry.update(attention="mha", num_kv_heads=int(kv_heads), head_dim=int(head_dim))
    return geometry


HYBRID_KEYS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
               "linear_conv_kernel_dim")


def hybrid_geometry(text):
    """A hybrid Gated DeltaNet model's layers and state shape (Qwen3-Next / Qwen3.5, SGLang's configs/qwen3_next.py
    ``layers_block_type``: layer l is full attention when (l + 1) % full_attention_interval == 0, unless
    ``layer_types`` says otherwise). The KV pool counts the full-attention layers only; the state pool the rest."""
    layers = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for kind in types if kind == "full_attention")
    elif text.get("full_attention_interval"):
        interval = int(text["full_attention_interval"])
        full = sum(1 for layer in range(layers) if (layer + 1) % interval == 0)
    else:
        raise PlanError("hybrid config.json without layer_types or full_attention_interval: its layers cannot be "
                        "counted")
    missing = [key for key in HYBRID_KEYS if not text.get(key)]
    if missing:
        raise PlanError("hybrid config.json without %s: only Gated DeltaNet state (Qwen3-Next / Qwen3.5) is "
                        "modelled" % ", ".join(missing))
    geometry = dict((key, int(text[key])) for key in HYBRID_KEYS)
    geometry.update(hybrid=True, kv_layers=full, linear_layers=layers - full,
                    mamba_ssm_dtype=str(text.get("mamba_ssm_dtype") or "float32"),
                    context_len=int(text.get("max_position_embeddings") or 0) or None)
    return geometry


def is_hybrid(config):
    """config.json (or its text_config) of a hybrid linear-attention model (as the model preflight tells)."""
    return _model_check.is_hybrid(config)


def mamba_bytes_per_req(geometry, tp):
    """SGLang's ``mamba_cache_per_req`` per rank (configs/mamba_utils.py, identical in 0.5.9 and 0.5.23):
    Mamba2StateShape.create(tp, intermediate = value_head_dim x value_heads, n_groups = key_heads (extended to a
    multiple of tp), num_heads = value_heads, head_dim = value_head_dim, state_size = key_head_dim, conv_kernel);
    conv state (conv_dim / tp, kernel - 1) in bfloat16, temporal state (value_heads / tp, head_dim, state_size) in
    the SSM dtype (float32 unless config.json says mamba_ssm_dtype), times the linear layers."""
    groups = geometry["linear_num_key_heads"]
    if groups % tp:
        groups += tp - groups   # extra_groups_for_head_shards, as SGLang writes it
    intermediate = geometry["linear_value_head_dim"] * geometry["linear_num_value_heads"]
    conv_dim = intermediate + 2 * groups * geometry["linear_key_head_dim"]
    conv = (conv_dim // tp) * (geometry["linear_conv_kernel_dim"] - 1)
    temporal = (geometry["linear_num_value_heads"] // tp) * geometry["linear_value_head_dim"] * \
        geometry["linear_key_head_dim"]
    ssm_bytes = DTYPE_BYTES.get(geometry.get("mamba_ssm_dtype", "float32"), 4)
    return (conv * 2 + temporal * ssm_bytes) * geometry["linear_layers"]


def hybrid_state(rules, rest_gib, per_req, options):
    """(rest GiB left for the KV pool, facts) after the Mamba state pool, by the release's sizing rule.

    ratio_split (0.5.9, handle_max_mamba_cache): with speculative decoding first
    ``per_req x max_running_requests x draft_tokens`` for the intermediate states; then the pool is
    --max-mamba-cache-size, or --max-running-requests with the radix cache off, or
    ``int(rest x r / (1 + r) x 2**30) // per_req`` (r = --mamba-full-memory-ratio).
    joint_spec_solve (0.5.23, kv_cache_configurator._handle_max_mamba_cache, the standard path: one pipeline stage,
    no attention DP, no ReplaySSM, no fused draft state): budget = rest x r / (1 + r); with speculative decoding
    ``slots = int((budget - per_req (1 + D)) // (per_req (1 + D / ratio)))`` and
    ``per_req x (min(max_running, slots // ratio) + 1) x D`` for the intermediate states; without,
    ``slots = int((budget - per_req) // per_req)``; the pool holds slots + 1 (a padding slot).
    joint_solve (0.5.13-0.5.16, the same solve before the padding slot): with speculative decoding
    ``slots = int(budget // (per_req (1 + D / ratio)))`` and ``per_req x min(max_running, slots // ratio) x D``;
    without, ``slots = int(budget // per_req)``; the pool holds slots.
    ratio (state slots per running request) = 1 with the radix cache off, else the base (3) + extra_buffer's
    tracking slots (0.5.9: 1 with speculative decoding, else 2; 0.5.23: 2 with the overlap scheduler, else 1)."""
    spec_tokens = int(options.get("speculative_num_draft_tokens") or 0)
    given_running = options.get("max_running_requests")
    running = given_running or (rules["spec_max_running_requests_default"] if spec_tokens else None)
    r = float(options.get("mamba_full_memory_ratio") or rules["mamba_full_memory_ratio_default"])
    radix_off = bool(options.get("disable_radix_cache"))
    extra = bool(options.get("extra_buffer"))
    sizing = rules["hybrid_mamba_sizing"]
    base = rules["mamba_slots_per_request_base"]
    if sizing == "ratio_split":
        tracking = (1 if spec_tokens else 2) if extra else 0
    else:
        tracking = (2 if options.get("overlap", True) else 1) if extra else 0
    ratio = 1 if radix_off else base + tracking
    given_slots = options.get("max_mamba_cache_size")
    intermediate = 0
    if sizing == "ratio_split":
        if spec_tokens:
            intermediate = per_req * running * spec_tokens
            rest_gib -= intermediate / float(GIB)
        if given_slots:
            slots = int(given_slots)
        elif radix_off and running:
            slots = int(running)
        else:
            slots = int((rest_gib * r / (1 + r) * GIB) // per_req)
        state = slots * per_req
    else:
        pad = 0 if sizing == "joint_solve" else 1     # 0.5.17+ keeps a padding slot
        if given_slots:
            slots = int(given_slots)
        elif radix_off and running:
            slots = int(running)
        else:
            budget = rest_gib * r / (1 + r) * GIB
            if spec_tokens:
                slots = int((budget - pad * per_req * (1 + spec_tokens))
                            // (per_req * (1 + spec_tokens / float(ratio))))
            else:
                slots = int((budget - pad * per_req) // per_req)
        if spec_tokens:
            capped = slots if (radix_off and not given_slots) else min(max(1, int(running)), slots // ratio)
            intermediate = per_req * (capped + pad) * spec_tokens
            rest_gib -= intermediate / float(GIB)
        state = (slots + pad) * per_req
    rest_gib -= state / float(GIB)
    facts = {"sizing": sizing, "state_bytes_per_request": per_req, "state_slots": slots,
             "state_pool_bytes": state, "state_pool_gb": _r(state / float(GIB)),
             "spec_intermediate_bytes": intermediate, "spec_intermediate_gb": _r(intermediate / float(GIB)),
             "mamba_full_memory_ratio": r, "slots_per_running_request": ratio,
             "max_running_requests_given": given_running, "max_running_requests_assumed": running}
    if sizing == "joint_solve":
        facts["not_modelled"] = ("SGLang %s's joint solve is modelled on its standard path only (one pipeline "
                                 "stage, no attention DP); its extra_buffer slots and running-request cap as "
                                 "0.5.23's" % rules["from_release"])
    elif sizing != "ratio_split":
        facts["not_modelled"] = ("SGLang %s's joint solve is modelled on its standard path only (one pipeline "
                                 "stage, no attention DP, no ReplaySSM, no fused draft state)" % rules["from_release"])
    return rest_gib, facts


HYBRID_OPTIONS = {"speculative_num_draft_tokens": "int", "max_running_requests": "int", "max_mamba_cache_size": "int",
                  "mamba_full_memory_ratio": "float", "extra_buffer": "bool", "disable_radix_cache": "bool",
                  "context_len": "int", "overlap": "bool"}


def hybrid_options(options):
    """The hybrid option dict checked: known keys, numbers that are numbers (None / '' for "not given")."""
    out = {}
    for key, value in dict(options or {}).items():
        kind = HYBRID_OPTIONS.get(key)
        if kind is None:
            raise PlanError("hybrid.%s is not an option (%s)" % (key, ", ".join(sorted(HYBRID_OPTIONS))))
        if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
            continue
        if kind == "bool":
            out[key] = value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")
        elif kind == "int":
            out[key] = _checked("hybrid." + key, value, minimum=0, integer=True, maximum=1 << 40)
            out[key] = int(out[key])
        else:
            out[key] = float(_checked("hybrid." + key, value, minimum=0, maximum=1e6))
    return out


def running_cap(rules, tokens, facts, context_len, page_size=1):
    """The cap on running requests: 0.5.9 init_memory_pool (given, else min(max(tokens / context x 512, 2048),
    4096)); 0.5.23 resolve_max_num_reqs (given, else that estimate, both at most tokens // 2); then at most the
    state slots // slots per request."""
    given = facts["max_running_requests_assumed"]
    estimate = int(tokens / float(context_len or 1) * 512)
    if rules["hybrid_mamba_sizing"] == "ratio_split":
        cap = given if given else min(max(estimate, 2048), 4096)
    else:
        cap = min(max(1, given), tokens // 2) if given else min(max(min(estimate, 4096), 2048), tokens // 2)
    by_state = facts["state_slots"] // facts["slots_per_running_request"]
    return min(cap, by_state), by_state < cap


def load_model_config(model_path):
    """Read <model_path>/config.json (or model_path itself when it is the file)."""
    path = model_path
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise PlanError("no config.json at %s" % path)
    try:
        with open(path, "r") as handle:
            return json.load(handle)
    except ValueError as exc:
        raise PlanError("%s is not valid JSON: %s" % (path, exc))


def normalize_geometry(geometry):
    """Check an explicit geometry dict (from the module's ``geometry`` option)."""
    geometry = dict((k, v) for k, v in geometry.items() if v is not None)
    if "attention" not in geometry:
        geometry["attention"] = "mla" if geometry.get("kv_lora_rank") else "mha"
    if geometry["attention"] not in ("mla", "mha"):
        raise PlanError("geometry.attention must be mla or mha, not %r" % geometry["attention"])
    need = ("kv_lora_rank", "qk_rope_head_dim", "num_layers") if geometry["attention"] == "mla" else (
        "num_kv_heads", "head_dim", "num_layers")
    missing = [k for k in need if not geometry.get(k)]
    if missing:
        raise PlanError("geometry (%s) needs %s" % (geometry["attention"], ", ".join(missing)))
    for key in need:
        geometry[key] = _checked("geometry." + key, geometry[key], minimum=1, integer=True, maximum=1 << 24)
    if geometry.get("hybrid"):
        for key in HYBRID_KEYS + ("kv_layers", "linear_layers"):
            if not geometry.get(key):
                raise PlanError("geometry (hybrid) needs %s" % key)
            geometry[key] = _checked("geometry." + key, geometry[key], minimum=1, integer=True, maximum=1 << 24)
    return geometry


def dtype_bytes(kv_dtype, model_dtype=None):
    """Bytes per element of the KV cache. "auto" is the model's dtype (bf16 for the models we serve)."""
    kv_dtype = (kv_dtype or "auto").lower()
    if kv_dtype == "auto":
        return DTYPE_BYTES.get(str(model_dtype or "bfloat16").lower(), 2)
    if kv_dtype not in DTYPE_BYTES:
        raise PlanError("kv_dtype %r is not one of %s" % (kv_dtype, ", ".join(KV_DTYPES)))
    return DTYPE_BYTES[kv_dtype]


def cell_size(geometry, elem_bytes, tp):
    """Bytes of KV cache per token per rank, as SGLang's get_cell_size_per_token computes it."""
    layers = geometry.get("kv_layers") or geometry["num_layers"]   # a hybrid model: its full-attention layers
    if geometry["attention"] == "mla":
        return (geometry["kv_lora_rank"] + geometry["qk_rope_head_dim"]) * layers * elem_bytes
    kv_heads_per_rank = max(1, geometry["num_kv_heads"] // tp)
    return kv_heads_per_rank * geometry["head_dim"] * layers * 2 * elem_bytes


def describe_cell(geometry, elem_bytes, tp):
    if geometry["attention"] == "mla":
        return "MLA (%d + %d) x %d layers x %d bytes" % (
            geometry["kv_lora_rank"], geometry["qk_rope_head_dim"], geometry["num_layers"], elem_bytes)
    return "MHA %d KV heads/rank x %d head_dim x %d %slayers x 2 (K,V) x %d bytes" % (
        max(1, geometry["num_kv_heads"] // tp), geometry["head_dim"],
        geometry.get("kv_layers") or geometry["num_layers"], "full-attention " if geometry.get("hybrid") else "",
        elem_bytes)


# ---------------------------------------------------------------------------------------------------------------------
# Host facts
# ---------------------------------------------------------------------------------------------------------------------


def parse_meminfo(text):
    """/proc/meminfo -> dict of bytes (the kernel's "kB" is KiB)."""
    values = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, rest = line.split(":", 1)
        parts = rest.split()
        if not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[key.strip()] = number * 1024 if unit == "kb" else number
    return values


def model_files_bytes(model_path):
    """Total size of the weight files under a model directory (safetensors, else *.bin / *.pt)."""
    if not model_path or not os.path.isdir(model_path):
        return 0
    total = 0
    fallback = 0
    for root, _dirs, files in os.walk(model_path):
        for name in files:
            full = os.path.join(root, name)
            try:
                size = os.path.getsize(full)
            except OSError:
                continue
            if name.endswith(".safetensors"):
                total += size
            elif name.endswith((".bin", ".pt", ".pth")):
                fallback += size
    return total or fallback


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------


def device_tokens(total_gib, weights_gib, mem_fraction_static, cell, page_size):
    """SGLang's profile_max_num_token, then the page alignment of init_memory_pool."""
    available = total_gib - weights_gib
    rest = available - total_gib * (1 - mem_fraction_static)
    tokens = int(rest * (1 << 30)) // cell
    if tokens > 0:
        tokens = tokens // page_size * page_size
    return tokens, rest, available


def host_tokens(dev_tokens, cell, page_size, ratio=None, size_gb=0):
    """HostKVCache's pool size: from --hicache-size (GB, 1e9) when > 0, else device tokens x ratio."""
    if size_gb and size_gb > 0:
        size = int(size_gb * 1e9 // cell)
    else:
        size = int(dev_tokens * ratio)
    page_num = size // page_size + 1
    return page_num * page_size


def _largest_ratio(dev_tokens, cell, page_size, tp, budget):
    """The largest HiCache ratio (2 decimals) whose pools for all ranks fit in ``budget`` bytes."""
    if dev_tokens <= 0 or budget <= 0:
        return None
    pages = (budget // tp) // cell // page_size
    if pages <= 0:
        return None
    ratio = math.floor((pages * page_size - 1) / float(dev_tokens) * 100) / 100.0
    while ratio > 0 and tp * host_tokens(dev_tokens, cell, page_size, ratio=ratio) * cell > budget:
        ratio = round(ratio - 0.01, 2)
    return ratio if ratio > 0 else None


def _largest_size_gb(cell, page_size, tp, budget):
    """The largest integer --hicache-size (GB per rank) whose pools for all ranks fit in ``budget`` bytes."""
    size = int(budget // tp // GB)
    while size > 0 and tp * host_tokens(0, cell, page_size, size_gb=size) * cell > budget:
        size -= 1
    return size if size > 0 else None


def _r(value, digits=2):
    return None if value is None else round(value, digits)


def _checked(name, value, minimum=None, integer=False, allow_none=False, maximum=1e12):
    """value as a finite float (or int), else a PlanError that names the input and the value."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        raise PlanError("%s must be a number, not %r" % (name, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanError("%s must be a number, not %r" % (name, value))
    if not math.isfinite(number):
        raise PlanError("%s must be a finite number, not %r" % (name, value))
    if integer and number != int(number):
        raise PlanError("%s must be a whole number, not %r" % (name, value))
    if minimum is not None and number < minimum:
        raise PlanError("%s must be >= %s, not %r" % (name, minimum, value))
    if number > maximum:
        raise PlanError("%s %r is out of range (at most %g)" % (name, value, maximum))
    return int(number) if integer else number


def make_plan(tp, mem_fraction_static, geometry, total_gib, weights_gib, mem_available_bytes=None,
              hicache=True, ratio=PLANNING_ASSUMPTIONS["hicache_ratio"], size_gb=0, kv_dtype="auto",
              page_size=PLANNING_ASSUMPTIONS["page_size"], name=None, release=None,
              draft_geometry=None, hybrid=None):
    """One plan: a dict of numbers, ``fits``, ``problems`` and a one-paragraph ``summary``.

    Every bad number (not a number, NaN, infinite, negative, out of range) is a PlanError naming the input
    and its value, never a raw Python error.
    """
    tp = _checked("tp", tp, minimum=1, integer=True, maximum=65536)
    mem_fraction_static = _checked("mem_fraction_static", mem_fraction_static)
    page_size = _checked("page_size", page_size, minimum=1, integer=True, maximum=1 << 20)
    total_gib = _checked("the GPU memory SGLang starts from (GiB)", total_gib, allow_none=True, maximum=1 << 20)
    weights_gib = _checked("weights per GPU (GiB)", weights_gib, minimum=0, allow_none=True, maximum=1 << 20)
    ratio = _checked("hicache ratio", ratio, minimum=0, allow_none=True, maximum=1e4)
    size_gb = _checked("hicache size_gb", size_gb, minimum=0, allow_none=True, maximum=1e9) or 0
    mem_available_bytes = _checked("MemAvailable (bytes)", mem_available_bytes, minimum=0, allow_none=True,
                                   maximum=1e21)
    if int(tp) < 1:
        raise PlanError("tp must be >= 1, not %r" % tp)
    tp = int(tp)
    if not 0 < float(mem_fraction_static) < 1:
        raise PlanError("mem_fraction_static must be between 0 and 1 (exclusive), not %r" % mem_fraction_static)
    mem_fraction_static = float(mem_fraction_static)
    if int(page_size) < 1:
        raise PlanError("page_size must be >= 1, not %r" % page_size)
    page_size = int(page_size)
    if total_gib is None or total_gib <= 0:
        raise PlanError("the GPU memory SGLang starts from must be > 0 GiB, not %r" % total_gib)
    if weights_gib is None or weights_gib < 0:
        raise PlanError("weights per GPU must be >= 0 GiB, not %r" % weights_gib)
    if hicache and not (size_gb and size_gb > 0) and (ratio is None or float(ratio) <= 1):
        raise PlanError("HiCache ratio must be > 1 (SGLang: the host pool must be larger than the device pool), not %r"
                        % ratio)
    geometry = normalize_geometry(geometry)
    elem = dtype_bytes(kv_dtype, geometry.get("model_dtype"))
    cell = cell_size(geometry, elem, tp)
    rules, rules_note = release_rules(release)
    draft_cell = 0
    if draft_geometry and rules["hicache_draft_host_pool"]:
        draft_cell = cell_size(normalize_geometry(draft_geometry), elem, tp)

    tokens, rest, available = device_tokens(total_gib, weights_gib, mem_fraction_static, cell, page_size)
    problems = []
    hybrid_facts = None
    if geometry.get("hybrid"):
        # a hybrid model: the Mamba state pool comes out of the same rest before the KV pool (release's rule)
        per_req = mamba_bytes_per_req(geometry, tp)
        hybrid = hybrid_options(hybrid)
        kv_rest, hybrid_facts = hybrid_state(rules, rest, per_req, hybrid)
        tokens = int(kv_rest * (1 << 30)) // cell if kv_rest > 0 else 0
        if tokens > 0:
            tokens = tokens // page_size * page_size
        if hybrid_facts["state_slots"] <= 0:
            problems.append("no room for the hybrid model's state pool: %.2f GiB left after the weights and the "
                            "speculative reserve, %.1f MiB of state per request (SGLang: \"Not enough GPU memory "
                            "for hybrid (mamba/linear-attention) state cache\")"
                            % (kv_rest, per_req / float(1 << 20)))
        context = (hybrid or {}).get("context_len") or geometry.get("context_len") or 1
        cap, capped = running_cap(rules, max(tokens, 0), hybrid_facts, context, page_size)
        hybrid_facts.update(kv_rest_gb=_r(kv_rest, 3), running_request_cap=cap, capped_by_state=capped,
                            context_len=context)
    plan = {
        "name": name,
        "tp": tp,
        "mem_fraction_static": mem_fraction_static,
        "kv_dtype": kv_dtype,
        "kv_dtype_bytes": elem,
        "page_size": page_size,
        "geometry": geometry,
        "cell_size_bytes": cell,
        "cell_size_formula": describe_cell(geometry, elem, tp),
        "gpu_total_gb": _r(total_gib, 3),
        "weights_gb_per_gpu": _r(weights_gib, 3),
        "gpu_available_after_weights_gb": _r(available, 3),
        "gpu_reserved_gb": _r(total_gib * (1 - mem_fraction_static), 3),
        "kv_rest_gb": _r(rest, 3),
        "kv_tokens_per_rank": max(tokens, 0),
        "kv_bytes_per_rank": 0,
        "kv_gb_per_rank": 0.0,
        "hicache": bool(hicache),
        "hicache_ratio": float(ratio) if ratio is not None else None,
        "hicache_size_gb": size_gb or 0,
        "sglang_rules": dict(rules, note=rules_note, release=release or None),
    }
    if hybrid_facts is not None:
        plan["hybrid"] = hybrid_facts
    if tokens <= 0:
        problems.append(
            "no room for the KV cache: %.2f GiB free after %.2f GiB of weights, but mem_fraction_static %.2f keeps "
            "%.2f GiB back (SGLang: \"Not enough memory. Please try to increase --mem-fraction-static.\")"
            % (available, weights_gib, mem_fraction_static, total_gib * (1 - mem_fraction_static)))
    else:
        kv_bytes = (tokens + page_size) * cell
        plan["kv_bytes_per_rank"] = kv_bytes
        plan["kv_gb_per_rank"] = _r(kv_bytes / float(GIB))

    mem = mem_available_bytes
    plan["mem_available_bytes"] = mem
    plan["mem_available_gb"] = _r(mem / float(GB)) if mem is not None else None
    plan["mem_available_gib"] = _r(mem / float(GIB)) if mem is not None else None
    reserve = rules["hicache_reserve_bytes"]
    plan["hicache_reserve_bytes"] = reserve
    budget = (mem - reserve) if mem is not None else None
    share = rules["hicache_budget"] == "per_rank_share"

    if hicache and tokens > 0:
        htokens = host_tokens(tokens, cell, page_size, ratio=ratio, size_gb=size_gb)
        draft_requested = htokens * draft_cell      # the draft's host pool: the target's tokens (0.5.23 with EAGLE)
        requested = htokens * cell + draft_requested
        total_pinned = requested * tp
        effective_ratio = htokens / float(tokens)
        if draft_requested:
            plan.update(host_draft_pool_bytes_per_rank=draft_requested,
                        host_draft_pool_gb_per_rank=_r(draft_requested / float(GB)),
                        draft_cell_size_bytes=draft_cell)
        plan.update(
            host_tokens_per_rank=htokens,
            host_effective_ratio=_r(effective_ratio, 3),
            host_pool_bytes_per_rank=requested,
            host_pool_gb_per_rank=_r(requested / float(GB)),
            host_pool_gib_per_rank=_r(requested / float(GIB)),
            host_pool_bytes_total=total_pinned,
            host_pool_gb_total=_r(total_pinned / float(GB), 1),
            host_pool_gib_total=_r(total_pinned / float(GIB), 1),
        )
        if htokens <= tokens:
            problems.append(
                "the HiCache host pool (%d tokens) is not larger than the device pool (%d tokens); SGLang refuses it: "
                "\"The host memory should be larger than the device memory with the current protocol\""
                % (htokens, tokens))
        if budget is not None:
            # each_rank_alone (0.5.9): a rank checks its pool against the whole budget, so ranks together can
            # overcommit; per_rank_share (0.5.23): a rank may take budget // ranks on the host
            plan["rank_check_ok"] = requested <= (budget // tp if share else budget)
            plan["ram_fits"] = total_pinned <= budget and plan["rank_check_ok"]
            plan["ram_left_after_pinning_bytes"] = mem - total_pinned
            plan["ram_left_after_pinning_gb"] = _r((mem - total_pinned) / float(GB), 1)
            plan["ram_left_after_pinning_gib"] = _r((mem - total_pinned) / float(GIB), 1)
            plan["max_ratio"] = _largest_ratio(tokens, cell + draft_cell, page_size, tp, budget)
            plan["max_hicache_size_gb"] = _largest_size_gb(cell + draft_cell, page_size, tp, budget)
            if plan["max_ratio"] is not None and plan["max_ratio"] <= 1:
                plan["max_ratio"] = None
            if not plan["ram_fits"]:
                what = ("--hicache-size %s GB" % size_gb) if size_gb else ("ratio %s" % ratio)
                largest = ("the largest ratio that fits is %.2f (or --hicache-size %s per rank)"
                           % (plan["max_ratio"], plan["max_hicache_size_gb"])) if plan["max_ratio"] else \
                    "no HiCache ratio > 1 fits in this RAM"
                draft = (" (%.2f GB of it the draft model's host pool)" % (draft_requested / float(GB))
                         if draft_requested else "")
                problems.append(
                    "HiCache %s needs %.2f GB pinned per rank%s x %d ranks = %.1f GB, but MemAvailable is %.1f GB and "
                    "SGLang keeps %.0f GiB free: %.1f GB can be pinned%s; %s [%s]"
                    % (what, requested / float(GB), draft, tp, total_pinned / float(GB), mem / float(GB),
                       reserve / float(GIB), budget / float(GB),
                       (", %.1f GB per rank" % (budget // tp / float(GB))) if share else "", largest, rules_note))
        else:
            plan["rank_check_ok"] = None
            plan["ram_fits"] = None
            plan["max_ratio"] = None
            plan["max_hicache_size_gb"] = None
    plan["problems"] = problems
    plan["fits"] = not problems
    plan["summary"] = summarize(plan)
    return plan


def summarize(plan):
    """A one-paragraph human summary of a plan."""
    parts = []
    parts.append(
        "TP %d, mem_fraction_static %.2f, KV %s: each GPU starts from %.2f GiB, %.2f GiB of weights leave "
        "%.2f GiB, of which %.2f GiB stay outside the static pool."
        % (plan["tp"], plan["mem_fraction_static"], plan["kv_dtype"], plan["gpu_total_gb"],
           plan["weights_gb_per_gpu"], plan["gpu_available_after_weights_gb"], plan["gpu_reserved_gb"]))
    if plan["kv_tokens_per_rank"] > 0:
        parts.append(
            "KV cache per rank: %.2f GB (GiB, as SGLang prints it) = %s tokens at %s bytes per token (%s)."
            % (plan["kv_gb_per_rank"], "{:,}".format(plan["kv_tokens_per_rank"]),
               "{:,}".format(plan["cell_size_bytes"]), plan["cell_size_formula"]))
    if plan.get("hybrid"):
        h = plan["hybrid"]
        parts.append(
            "Hybrid model (%s): %.1f MiB of Gated DeltaNet state per request per rank; state pool %s slots = %.2f GB "
            "(GiB)%s; at most %d running requests (%d state slots each%s)."
            % (h["sizing"], h["state_bytes_per_request"] / float(1 << 20), "{:,}".format(h["state_slots"]),
               h["state_pool_gb"],
               (", speculative reserve %.2f GB" % h["spec_intermediate_gb"]) if h["spec_intermediate_bytes"] else "",
               h["running_request_cap"], h["slots_per_running_request"],
               ", the state pool is the limit" if h["capped_by_state"] else ""))
    if plan["hicache"] and "host_pool_bytes_per_rank" in plan:
        what = ("--hicache-size %s" % plan["hicache_size_gb"]) if plan["hicache_size_gb"] else \
            ("ratio %s" % plan["hicache_ratio"])
        draft = (" (%.2f GB of it the draft model's host pool)" % plan["host_draft_pool_gb_per_rank"]
                 if plan.get("host_draft_pool_gb_per_rank") else "")
        parts.append(
            "HiCache %s pins %.2f GB (%.2f GiB) per rank%s, %.1f GB (%.1f GiB) for %d ranks (%s)."
            % (what, plan["host_pool_gb_per_rank"], plan["host_pool_gib_per_rank"], draft, plan["host_pool_gb_total"],
               plan["host_pool_gib_total"], plan["tp"], plan["sglang_rules"]["note"]))
        if plan.get("mem_available_bytes") is not None:
            parts.append(
                "MemAvailable %.1f GB (%.1f GiB) less SGLang's 10 GiB reserve; %.1f GB would be left after pinning."
                % (plan["mem_available_gb"], plan["mem_available_gib"], plan["ram_left_after_pinning_gb"]))
            if plan.get("max_ratio"):
                parts.append("The largest ratio that fits is %.2f (--hicache-size %s per rank)."
                             % (plan["max_ratio"], plan["max_hicache_size_gb"]))
    elif not plan["hicache"]:
        parts.append("HiCache is off.")
    parts.append("Fits." if plan["fits"] else "Does NOT fit: " + "; ".join(plan["problems"]) + ".")
    return " ".join(parts)


COMPARE_KEYS = ("name", "tp", "mem_fraction_static", "ratio", "size_gb", "kv_dtype", "page_size", "hicache",
                "weights_gb_per_gpu", "hybrid")


def compare(base, alternatives):
    """Plans for ``alternatives`` (dicts overriding ``base``'s make_plan arguments), plus a text table.

    ``base`` holds make_plan's keyword arguments; an alternative may override name, tp, mem_fraction_static,
    ratio, size_gb (a ratio given alone clears size_gb), kv_dtype, page_size, hicache, weights_gb_per_gpu, and a
    hybrid model's settings (hybrid: a dict over the base's).
    """
    rows = []
    plans = []
    for number, alt in enumerate(alternatives, 1):
        unknown = sorted(set(alt) - set(COMPARE_KEYS))
        if unknown:
            raise PlanError("compare entry %d has unknown keys %s (allowed: %s)"
                            % (number, ", ".join(unknown), ", ".join(COMPARE_KEYS)))
        args = dict(base)
        for key, value in alt.items():
            if value is None:
                continue
            if key == "weights_gb_per_gpu":
                args["weights_gib"] = value
            elif key == "hybrid":
                # a hybrid model's settings: these keys over the base's (e.g. {max_running_requests: 128})
                args["hybrid"] = dict(base.get("hybrid") or {}, **dict(value))
            else:
                args[key] = value
        if alt.get("ratio") is not None and alt.get("size_gb") is None:
            args["size_gb"] = 0
        args["name"] = alt.get("name") or "alt%d" % number
        plan = make_plan(**args)
        plans.append(plan)
        rows.append(
            {
                "name": plan["name"],
                "kv_dtype": plan["kv_dtype"],
                "mem_fraction_static": plan["mem_fraction_static"],
                "hicache": (("size %sGB" % plan["hicache_size_gb"]) if plan["hicache_size_gb"]
                            else ("ratio %g" % plan["hicache_ratio"])) if plan["hicache"] else "off",
                "kv_tokens_per_rank": plan["kv_tokens_per_rank"],
                "kv_gb_per_rank": plan["kv_gb_per_rank"],
                "host_pool_gb_per_rank": plan.get("host_pool_gb_per_rank"),
                "host_pool_gb_total": plan.get("host_pool_gb_total"),
                "ram_left_after_pinning_gb": plan.get("ram_left_after_pinning_gb"),
                "fits": plan["fits"],
            }
        )
        if plan.get("hybrid"):
            rows[-1].update(state_slots=plan["hybrid"]["state_slots"], state_gb=plan["hybrid"]["state_pool_gb"],
                            running_cap=plan["hybrid"]["running_request_cap"])
    return rows, plans, format_table(rows)


def format_table(rows):
    """A fixed-width text table of compare rows (one line per alternative)."""
    columns = (
        ("name", "name"),
        ("kv_dtype", "kv dtype"),
        ("mem_fraction_static", "mem frac"),
        ("hicache", "hicache"),
        ("kv_tokens_per_rank", "KV tokens/rank"),
        ("kv_gb_per_rank", "KV GiB/rank"),
        ("host_pool_gb_per_rank", "host GB/rank"),
        ("host_pool_gb_total", "host GB total"),
        ("ram_left_after_pinning_gb", "RAM left GB"),
        ("fits", "fits"),
    )
    if any("state_slots" in row for row in rows):
        # a hybrid model: its state pool and the cap on running requests, side by side
        columns = columns[:6] + (("state_slots", "state slots"), ("state_gb", "state GiB"),
                                 ("running_cap", "max running")) + columns[6:]

    def cell(value):
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "NO"
        if isinstance(value, int):
            return "{:,}".format(value)
        return str(value)

    table = [[title for _key, title in columns]] + [[cell(row.get(key)) for key, _title in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = []
    for number, line in enumerate(table):
        lines.append("  ".join(text.ljust(widths[i]) if i == 0 else text.rjust(widths[i])
                               for i, text in enumerate(line)).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
