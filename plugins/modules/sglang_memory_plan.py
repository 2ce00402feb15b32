#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_memory_plan
short_description: Plan SGLang's KV cache and HiCache host pool with SGLang's own formulas, before anything restarts
version_added: 0.1.0
description:
  - Computes, per tensor-parallel rank, the KV cache SGLang 0.5.9 will allocate (tokens and GiB), the HiCache
    host pool it will pin (per rank and in total, rounded to pages as SGLang does), the 10 GiB of host memory
    SGLang keeps free, the RAM left after pinning, whether it all C(fits), the largest HiCache ratio that fits,
    and a one-paragraph summary.
  - The model's KV geometry comes from its C(config.json) (MLA C(kv_lora_rank) + C(qk_rope_head_dim) and
    C(num_hidden_layers), or MHA heads and head dims; C(text_config) of multimodal configs is followed) or
    from an explicit O(geometry).
  - GPU memory comes from O(gpus) (the C(gpus) list of M(gpuserve.sglang.nvidia_gpu_info)) or
    O(gpu_memory_gb); host memory from C(/proc/meminfo) unless O(mem_available_gb) is given.
  - O(compare) plans several alternatives (HiCache ratio 2 vs 4, FP8 KV cache, ...) side by side in one table.
  - Changes nothing on the host; it never fails because a plan does not fit (see the C(fits) and C(problems) return values).
    It fails only on input it cannot plan (no geometry, no GPU memory, a ratio <= 1, ...).
  - See docs/memory-planning.md for the formulas and the units.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  tp:
    description: Tensor-parallel size (C(--tp)); one SGLang scheduler process and one HiCache pool per rank.
    type: int
    required: true
  mem_fraction_static:
    description:
      - SGLang's C(--mem-fraction-static). SGLang computes it at start-up when the flag is not given; the server
        role's C(sglang_plan_inputs) then carry the collection's planning assumption 0.88 (the reference
        deployment's value; docs/memory-planning.md).
    type: float
    required: true
  hicache:
    description:
      - Whether C(--enable-hierarchical-cache) is on. The default is the collection's (a plan of the host pool);
        SGLang's own default is off (filter gpuserve.sglang.sglang_default).
    type: bool
    default: true
  ratio:
    description:
      - C(--hicache-ratio), host pool / device pool; must be > 1. Ignored when O(size_gb) > 0.
      - The default is the collection's planning assumption, SGLang's declared default up to 0.5.17; from 0.5.18
        SGLang computes the ratio at start-up when neither C(--hicache-ratio) nor C(--hicache-size) is given.
    type: float
    default: 2.0
  size_gb:
    description: C(--hicache-size), GB (10^9 bytes) of host pool per rank; 0 means use O(ratio).
    type: int
    default: 0
  page_size:
    description:
      - SGLang's C(--page-size); pools are aligned to it.
      - The default is the collection's planning assumption; SGLang computes the page size at start-up when the
        flag is not given (by the attention backend).
    type: int
    default: 1
  kv_dtype:
    description:
      - C(--kv-cache-dtype). V(auto) is the model's dtype (bf16 for the models served here); the fp8 types
        halve the bytes per token.
    type: str
    default: auto
    choices: [auto, bf16, bfloat16, fp16, float16, half, fp32, float32, fp8, fp8_e4m3, fp8_e5m2]
  model_path:
    description:
      - Model directory (or its C(config.json)) on the managed host. Its C(config.json) gives the geometry
        and, when O(weights_gb_per_gpu) is not given, its C(*.safetensors) size / O(tp) estimates the weights.
      - One of O(model_path) or O(geometry) is required.
    type: path
  geometry:
    description:
      - Explicit KV geometry; overrides O(model_path)'s C(config.json).
    type: dict
    suboptions:
      attention:
        description: V(mla) or V(mha); guessed from the keys given when omitted.
        type: str
        choices: [mla, mha]
      kv_lora_rank:
        description: MLA latent rank (512 for DeepSeek-V3 / Kimi-K2.5).
        type: int
      qk_rope_head_dim:
        description: MLA rope head dim (64 for DeepSeek-V3 / Kimi-K2.5).
        type: int
      num_layers:
        description: Number of hidden layers that have a KV cache (C(num_hidden_layers)).
        type: int
      num_kv_heads:
        description: MHA/GQA key-value heads of the whole model (divided by O(tp), at least 1 per rank).
        type: int
      head_dim:
        description: MHA head dim.
        type: int
      model_dtype:
        description: The model's dtype, used by O(kv_dtype=auto).
        type: str
        default: bfloat16
  gpus:
    description:
      - The C(gpus) list returned by M(gpuserve.sglang.nvidia_gpu_info). The smallest C(memory_free_mib) of the
        first O(tp) GPUs, minus O(gpu_overhead_gb), is what SGLang starts from. Ignored when O(gpu_memory_gb)
        is given.
    type: list
    elements: dict
  gpu_memory_gb:
    description:
      - Free memory per GPU before SGLang starts, in GiB (2^30 bytes; nvidia-smi's memory.free MiB / 1024).
        For a host without GPUs, or to plan for other hardware. A 96 GB RTX PRO 6000 Blackwell reports
        97887 MiB total, about 95.0 GiB free when idle.
      - To plan from the value of an earlier run's log line C(Load weight begin. avail mem=X GB), give X here
        and O(gpu_overhead_gb=0).
    type: float
  gpu_overhead_gb:
    description:
      - GiB per GPU taken before SGLang measures its "total" (CUDA context, torch.distributed and NCCL buffers).
        Subtracted from the free memory. See docs/memory-planning.md for how 1.0 was derived.
    type: float
    default: 1.0
  weights_gb_per_gpu:
    description:
      - Weights per GPU in GiB (the C(mem usage=X GB) of SGLang's C(Load weight end) line).
        When omitted, estimated as the size of the model's weight files / O(tp).
    type: float
  mem_available_gb:
    description: Host MemAvailable in GiB (as C(free -g) shows it). Read from C(/proc/meminfo) when omitted.
    type: float
  compare:
    description:
      - Alternatives to plan side by side. Each is a dict overriding the options above, with keys
        C(name), C(tp), C(mem_fraction_static), C(ratio), C(size_gb), C(kv_dtype), C(page_size), C(hicache),
        C(weights_gb_per_gpu), and C(hybrid) (keys over those of O(hybrid), e.g. C(max_running_requests) 128); a hybrid
        model's table adds its state slots, state GiB and the cap on running requests.
    type: list
    elements: dict
    default: []
  release:
    description:
      - The SGLang release to plan for. Its rules of HiCache's host pools come from its wheel (C(_sglang_releases))
        - the reserve, whether each rank checks its pool against all of MemAvailable (0.5.9) or gets a share of it
        per rank on the host (0.5.23), and whether EAGLE's draft model gets a host pool of its own (0.5.23). The
        result's C(sglang_rules) says which rules were used.
      - Not given, SGLang 0.5.9's rules; a release without a table, the newest older table's.
    type: str
  draft_model_path:
    description:
      - The EAGLE draft model's directory (or its C(config.json)) on the managed host. On releases whose draft
        model has a HiCache host pool of its own, its geometry sizes that pool (the target's tokens). A directory
        without C(config.json) leaves the draft pool out of the plan, and the result says so.
    type: path
  draft_geometry:
    description:
      - Explicit KV geometry of the draft model, with the keys of O(geometry); overrides O(draft_model_path).
    type: dict
  hybrid:
    description:
      - A hybrid Gated DeltaNet model's serving settings, for its state pool (the geometry comes from C(config.json),
        its C(layer_types) / C(full_attention_interval) and C(linear_*)) - C(speculative_num_draft_tokens) (0 without
        speculative decoding), C(max_running_requests), C(max_mamba_cache_size), C(mamba_full_memory_ratio),
        C(extra_buffer) (C(--mamba-scheduler-strategy) / C(--mamba-radix-cache-strategy) V(extra_buffer)),
        C(disable_radix_cache), C(context_len) (C(--context-length), else the model's).
      - The state pool is sized by the release's rule from its wheel (C(hybrid_mamba_sizing)) and comes out of the
        memory left after the weights before the KV pool, which counts the full-attention layers only; the plan
        returns RV(hybrid) (state bytes per request, state slots, the speculative reserve, the cap on running
        requests).
    type: dict
    default: {}
  running_service:
    description:
      - The server's systemd unit (V(sglang-kimi) or V(sglang-kimi.service)). When it is running, the plan is made
        for the host "after the stop" - on each GPU the memory of the unit's own processes (nvidia-smi compute apps
        of O(gpus) whose PID is in the unit's cgroup and is the process nvidia-smi names) is added to the free
        memory, and in host RAM what the stop frees (the larger of the invocation's pinned HiCache pool, from its
        journal lines, and the cgroup's memory less page cache) is added to MemAvailable.
      - Without O(weights_gb_per_gpu), the weights are the running invocation's C(Load weight end ... mem usage=).
      - The invocation's journal is read from its start, at most its first 20,000 lines within 60 s (the start-up
        lines come first; a server that ran for months has millions after them); a read cut there is named in
        RV(running_server) C(notes).
      - PIDs nvidia-smi lists that this host cannot tie to one of its processes (another PID namespace, e.g. a
        host in a container) are reported and count neither way.
      - Both views are returned (RV(running_server)); RV(fits) is decided "after the stop". A unit that is not
        running changes nothing.
    type: str
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: Linux hosts (nvidia-smi, /proc).
seealso:
  - module: gpuserve.sglang.nvidia_gpu_info
"""

EXAMPLES = r"""
- name: Plan the reference host from its numbers (no GPU needed)
  gpuserve.sglang.sglang_memory_plan:
    tp: 8
    mem_fraction_static: 0.88
    ratio: 4
    geometry: {kv_lora_rank: 512, qk_rope_head_dim: 64, num_layers: 61}
    gpu_memory_gb: 95.0        # 97887 MiB card, idle
    weights_gb_per_gpu: 72.3   # "mem usage=72.30 GB" in the Load weight end line
    mem_available_gb: 396
  register: plan

- name: Say it
  ansible.builtin.debug:
    msg: "{{ plan.summary }}"

- name: Plan on a GPU host, ratio 2 vs 4 vs FP8 KV
  block:
    - name: Read the GPUs
      gpuserve.sglang.nvidia_gpu_info:
      register: gpu_info
    - name: Plan
      gpuserve.sglang.sglang_memory_plan:
        tp: 8
        mem_fraction_static: 0.88
        model_path: /models/Kimi-K2.5
        gpus: "{{ gpu_info.gpus }}"
        compare:
          - {name: ratio2, ratio: 2}
          - {name: ratio4, ratio: 4}
          - {name: fp8, kv_dtype: fp8_e4m3, ratio: 4}
      register: plan
    - name: Show the table
      ansible.builtin.debug:
        var: plan.compare_table
"""

RETURN = r"""
fits:
  description:
    - The KV cache has room, the host pool is larger than the device pool, and all ranks' pools fit in
      MemAvailable - 10 GiB.
  returned: always
  type: bool
  sample: true
problems:
  description: Why the plan does not fit, one sentence each with the numbers (empty when it fits).
  returned: always
  type: list
  elements: str
summary:
  description: One paragraph for humans.
  returned: always
  type: str
tp:
  description: Tensor-parallel size planned for.
  returned: always
  type: int
  sample: 8
cell_size_bytes:
  description: KV bytes per token per rank.
  returned: always
  type: int
  sample: 70272
cell_size_formula:
  description: How the cell size was computed.
  returned: always
  type: str
  sample: MLA (512 + 64) x 61 layers x 2 bytes
geometry:
  description: The KV geometry used (from config.json or the option).
  returned: always
  type: dict
gpu_total_gb:
  description: GiB per GPU SGLang starts from ("total" in its formula), the smallest across ranks.
  returned: always
  type: float
  sample: 94.0
weights_gb_per_gpu:
  description: Weights per GPU, GiB.
  returned: always
  type: float
  sample: 72.3
gpu_available_after_weights_gb:
  description: GiB free after the weights ("available" in SGLang's formula).
  returned: always
  type: float
gpu_reserved_gb:
  description: GiB kept outside the static pools, total * (1 - mem_fraction_static).
  returned: always
  type: float
kv_rest_gb:
  description: GiB left for the KV cache (SGLang's rest_memory).
  returned: always
  type: float
hybrid:
  description:
    - A hybrid model's state pool per rank - C(sizing) (the release's rule), C(state_bytes_per_request),
      C(state_slots), C(state_pool_bytes), C(state_pool_gb), C(spec_intermediate_bytes) (the speculative reserve),
      C(slots_per_running_request), C(running_request_cap), C(capped_by_state), C(kv_rest_gb), and
      C(not_modelled) where the release's rule is modelled on its standard path only.
  returned: when the model is hybrid
  type: dict
kv_tokens_per_rank:
  description: KV cache tokens per rank (SGLang's max_total_num_tokens before speculative headroom).
  returned: always
  type: int
  sample: 159215
kv_bytes_per_rank:
  description: Bytes of the KV pool per rank, with SGLang's one padding page.
  returned: always
  type: int
kv_gb_per_rank:
  description: KV pool per rank in GiB, as SGLang's C(KV size) line prints it.
  returned: always
  type: float
  sample: 10.42
host_tokens_per_rank:
  description: HiCache host pool tokens per rank (page-rounded).
  returned: when hicache is on and the KV cache has room
  type: int
  sample: 636861
host_effective_ratio:
  description: host tokens / device tokens after rounding.
  returned: when hicache is on and the KV cache has room
  type: float
host_pool_bytes_per_rank:
  description: Bytes SGLang pins per rank.
  returned: when hicache is on and the KV cache has room
  type: int
host_pool_gb_per_rank:
  description: GB (10^9 bytes) pinned per rank, as SGLang's "Allocating X GB host memory" line prints it.
  returned: when hicache is on and the KV cache has room
  type: float
  sample: 44.75
host_pool_gib_per_rank:
  description: The same in GiB.
  returned: when hicache is on and the KV cache has room
  type: float
  sample: 41.68
host_pool_bytes_total:
  description: Bytes pinned by all ranks together.
  returned: when hicache is on and the KV cache has room
  type: int
host_pool_gb_total:
  description: GB pinned by all ranks.
  returned: when hicache is on and the KV cache has room
  type: float
  sample: 358.0
host_pool_gib_total:
  description: GiB pinned by all ranks.
  returned: when hicache is on and the KV cache has room
  type: float
  sample: 333.4
mem_available_bytes:
  description: Host MemAvailable used, bytes.
  returned: always
  type: int
mem_available_gb:
  description: Host MemAvailable, GB (10^9 bytes).
  returned: always
  type: float
mem_available_gib:
  description: Host MemAvailable, GiB.
  returned: always
  type: float
rank_check_ok:
  description: One rank's pool fits in MemAvailable - 10 GiB (the check SGLang makes in each rank, alone).
  returned: when hicache is on and the KV cache has room
  type: bool
ram_fits:
  description: All ranks' pools together fit in MemAvailable - 10 GiB (the ranks do not coordinate their checks).
  returned: when hicache is on and the KV cache has room
  type: bool
ram_left_after_pinning_gb:
  description: MemAvailable - all pools, GB (negative when it does not fit).
  returned: when hicache is on and the KV cache has room
  type: float
ram_left_after_pinning_gib:
  description: The same in GiB.
  returned: when hicache is on and the KV cache has room
  type: float
max_ratio:
  description: The largest HiCache ratio (2 decimals) whose pools for all ranks fit; null when none > 1 fits.
  returned: when hicache is on and the KV cache has room
  type: float
  sample: 4.63
max_hicache_size_gb:
  description: The largest integer --hicache-size (GB per rank) that fits for all ranks.
  returned: when hicache is on and the KV cache has room
  type: int
  sample: 51
sources:
  description: Where each input came from (given, nvidia_gpu_info, /proc/meminfo, estimated from model files).
  returned: always
  type: dict
compare:
  description:
    - One row per O(compare) alternative, with the keys name, kv_dtype, mem_fraction_static, hicache,
      kv_tokens_per_rank, kv_gb_per_rank, host_pool_gb_per_rank, host_pool_gb_total, ram_left_after_pinning_gb, fits.
  returned: always
  type: list
  elements: dict
compare_plans:
  description: The full plan of each alternative (same keys as the top level).
  returned: always
  type: list
  elements: dict
compare_table:
  description: The rows as a fixed-width text table, one line per list item.
  returned: always
  type: list
  elements: str
running_server:
  description:
    - The running unit of O(running_service) and what its stop gives back. C(running) false when it is not
      running (then nothing else is added).
    - C(views) has the arithmetic, "now" and "after the stop", one line each; C(gpus) per GPU C(memory_free_mib_now),
      C(server_mib), C(unverified_mib), C(memory_free_mib_after_stop); C(host) the HiCache pool, the cgroup memory
      and MemAvailable now / after; C(processes) each nvidia-smi process with C(owner) (server, foreign,
      unverified) and C(why); C(notes) what could not be read or tied; C(plan_now) the plan on today's numbers
      (C(fits), C(problems), C(summary)).
  returned: when running_service is given
  type: dict
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp
from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan_host import plan


def main():
    geometry_spec = dict(
        attention=dict(type="str", choices=["mla", "mha"]),
        kv_lora_rank=dict(type="int"),
        qk_rope_head_dim=dict(type="int"),
        num_layers=dict(type="int"),
        num_kv_heads=dict(type="int"),
        head_dim=dict(type="int"),
        model_dtype=dict(type="str", default="bfloat16"),
    )
    module = QuietModule(
        argument_spec=dict(
            tp=dict(type="int", required=True),
            mem_fraction_static=dict(type="float", required=True),
            hicache=dict(type="bool", default=True),
            ratio=dict(type="float", default=mp.PLANNING_ASSUMPTIONS["hicache_ratio"]),
            size_gb=dict(type="int", default=0),
            page_size=dict(type="int", default=mp.PLANNING_ASSUMPTIONS["page_size"]),
            kv_dtype=dict(type="str", default="auto", choices=list(mp.KV_DTYPES)),
            model_path=dict(type="path"),
            geometry=dict(type="dict", options=geometry_spec),
            release=dict(type="str"),
            draft_model_path=dict(type="path"),
            draft_geometry=dict(type="dict"),
            gpus=dict(type="list", elements="dict"),
            gpu_memory_gb=dict(type="float"),
            gpu_overhead_gb=dict(type="float", default=1.0),
            weights_gb_per_gpu=dict(type="float"),
            mem_available_gb=dict(type="float"),
            compare=dict(type="list", elements="dict", default=[]),
            running_service=dict(type="str"),
            hybrid=dict(type="dict", default={}),
        ),
        required_one_of=[("model_path", "geometry")],
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    try:
        result = plan(module.params, module.run_command, warn=module.warn)
    except mp.PlanError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
