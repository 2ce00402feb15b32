# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory plan of a hybrid model (issue 24): Qwen3.5-397B-A17B on 8 GPUs, each number derived by hand from
SGLang's source (the wheels of 0.5.9 and 0.5.23) and written here as a literal.

Per rank, tp 8 (configs/mamba_utils.py Mamba2StateShape.create, mamba_cache_per_req; the same in both releases):
  n_groups 16 (16 % 8 == 0: no extra groups), intermediate = 128 x 64 = 8192, conv_dim = 8192 + 2 x 16 x 128 = 12288
  conv state (12288 / 8, 4 - 1) = 4608 bfloat16 = 9216 bytes; temporal (64 / 8, 128, 128) = 131072 float32 = 524288
  per layer 533504 bytes x 45 Gated DeltaNet layers = 24,007,680 bytes per request
KV cell (full-attention layers only): max(1, 2 // 8) = 1 KV head x 256 x 15 layers x 2 (K, V) x 2 bytes = 15,360
GPU: 95 GiB at start, 29 GiB of weights, --mem-fraction-static 0.85: rest = (95 - 29) - 95 x 0.15 = 51.75 GiB
Speculative decoding NEXTN with 4 draft tokens, --max-running-requests not given: 48 (server_args / speculative_hook),
--mamba-radix-cache-strategy extra_buffer, --mamba-full-memory-ratio 0.9 (the default).

0.5.9 (model_runner_kv_cache_mixin.handle_max_mamba_cache, init_memory_pool):
  reserve 24,007,680 x 48 x 4 = 4,609,474,560 bytes -> rest 51.75 - 4.29290771484375 = 47.45709228515625 GiB
  slots = int(47.457... x 0.9 / 1.9 x 2**30) // 24,007,680 = 1005
  KV: (47.457... - 1005 x 24,007,680 / 2**30) GiB x 2**30 // 15,360 = 1,746,676 tokens
  slots per request 3 + 1 (extra_buffer with speculative decoding) = 4; cap min(48, 1005 // 4 = 251) = 48
0.5.23 (kv_cache_configurator._handle_max_mamba_cache, standard path; resolve_max_num_reqs):
  slots per request 3 + 2 (extra_buffer with the overlap scheduler) = 5
  budget = 51.75 x 0.9 / 1.9 GiB; slots = int((budget - 24,007,680 x 5) // (24,007,680 x (1 + 4 / 5))) = 606
  reserve 24,007,680 x (min(48, 606 // 5) + 1) x 4 = 4,705,505,280 bytes; pool (606 + 1) x 24,007,680 bytes
  KV: 2,362,498 tokens; cap min(min(48, 2,362,498 // 2), 606 // 5 = 121) = 48
"""
from __future__ import annotations

import json
import os

import pytest

from conftest import FIXTURES
from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp

QWEN = os.path.join(FIXTURES, "models", "qwen3.5-397b-a17b", "config.json")
OPTIONS = {"speculative_num_draft_tokens": 4, "extra_buffer": True}


def geometry():
    with open(QWEN) as handle:
        return mp.geometry_from_config(json.load(handle))


def plan(release, **over):
    args = dict(tp=8, mem_fraction_static=0.85, geometry=geometry(), total_gib=95.0, weights_gib=29.0,
                hicache=False, release=release, hybrid=dict(OPTIONS))
    args.update(over)
    return mp.make_plan(**args)


def test_the_geometry_of_qwen35():
    g = geometry()
    assert g["hybrid"] and g["kv_layers"] == 15 and g["linear_layers"] == 45
    assert (g["num_kv_heads"], g["head_dim"], g["context_len"]) == (2, 256, 262144)
    assert mp.mamba_bytes_per_req(g, 8) == 24007680
    assert mp.cell_size(g, 2, 8) == 15360


def test_qwen35_on_0_5_9_by_its_own_rules():
    p = plan("0.5.9")
    h = p["hybrid"]
    assert h["sizing"] == "ratio_split"
    assert h["spec_intermediate_bytes"] == 4609474560
    assert h["state_slots"] == 1005 and h["state_pool_bytes"] == 1005 * 24007680
    assert p["kv_tokens_per_rank"] == 1746676
    assert h["slots_per_running_request"] == 4
    assert h["running_request_cap"] == 48 and not h["capped_by_state"]
    assert p["fits"] and "Hybrid model (ratio_split): 22.9 MiB of Gated DeltaNet state per request" in p["summary"]
    assert "15 full-attention layers" in p["cell_size_formula"]


def test_qwen35_on_0_5_23_by_its_own_rules():
    p = plan("0.5.23")
    h = p["hybrid"]
    assert h["sizing"] == "joint_spec_solve" and "standard path only" in h["not_modelled"]
    assert h["state_slots"] == 606 and h["state_pool_bytes"] == 607 * 24007680
    assert h["spec_intermediate_bytes"] == 4705505280
    assert p["kv_tokens_per_rank"] == 2362498
    assert h["slots_per_running_request"] == 5 and h["running_request_cap"] == 48


def test_options_side_by_side_and_the_state_pool_as_the_limit():
    """--max-mamba-cache-size small enough to cap the running requests; the radix cache off (1 slot each)."""
    small = plan("0.5.9", hybrid=dict(OPTIONS, max_mamba_cache_size=100, max_running_requests=64))
    assert small["hybrid"]["state_slots"] == 100
    assert small["hybrid"]["running_request_cap"] == 25 and small["hybrid"]["capped_by_state"]
    assert "the state pool is the limit" in small["summary"]
    # a given pool leaves more for the KV cache than the default split
    assert small["kv_tokens_per_rank"] > plan("0.5.9")["kv_tokens_per_rank"]
    no_radix = plan("0.5.9", hybrid={"disable_radix_cache": True, "max_running_requests": 32})
    assert no_radix["hybrid"]["state_slots"] == 32 and no_radix["hybrid"]["slots_per_running_request"] == 1
    assert no_radix["hybrid"]["spec_intermediate_bytes"] == 0
    # a larger mamba_full_memory_ratio gives the state more and the KV less
    more_state = plan("0.5.9", hybrid=dict(OPTIONS, mamba_full_memory_ratio=2.0))
    assert more_state["hybrid"]["state_slots"] > 1005 and more_state["kv_tokens_per_rank"] < 1746676


def test_a_hybrid_model_without_room_for_its_state_does_not_fit():
    p = plan("0.5.9", mem_fraction_static=0.35)
    assert not p["fits"]
    assert any("no room for the hybrid model's state pool" in problem or "no room for the KV cache" in problem
               for problem in p["problems"])


def test_a_hybrid_config_without_the_state_shape_is_refused():
    with open(QWEN) as handle:
        config = json.load(handle)
    del config["text_config"]["linear_num_value_heads"]
    with pytest.raises(mp.PlanError, match="without linear_num_value_heads: only Gated DeltaNet"):
        mp.geometry_from_config(config)


def test_kimi_is_not_hybrid_and_unchanged():
    with open(os.path.join(FIXTURES, "models", "kimi-k2.5", "config.json")) as handle:
        g = mp.geometry_from_config(json.load(handle))
    assert not g.get("hybrid") and "hybrid" not in mp.make_plan(8, 0.88, g, 95.0, 71.0, hicache=False)


@pytest.mark.parametrize("options, message", [
    ({"max_running_requests": "many"}, "hybrid.max_running_requests must be a number, not 'many'"),
    ({"mamba_full_memory_ratio": float("nan")}, "hybrid.mamba_full_memory_ratio must be a finite number"),
    ({"max_mamba_cache_size": 1.5}, "hybrid.max_mamba_cache_size must be a whole number"),
    ({"typo": 1}, "hybrid.typo is not an option"),
])
def test_bad_hybrid_options_are_named(options, message):
    with pytest.raises(mp.PlanError, match=message.replace("(", r"\(")):
        plan("0.5.9", hybrid=options)


def test_options_as_the_role_templates_them():
    """sglang_plan_inputs.hybrid: numbers as strings, None for flags not given, booleans as strings."""
    p = plan("0.5.9", hybrid={"speculative_num_draft_tokens": "4", "max_running_requests": None,
                              "max_mamba_cache_size": "", "mamba_full_memory_ratio": None, "extra_buffer": "True",
                              "disable_radix_cache": False, "context_len": None})
    assert p["hybrid"]["state_slots"] == 1005 and p["kv_tokens_per_rank"] == 1746676


def test_options_side_by_side_in_the_compare_table():
    base = dict(tp=8, mem_fraction_static=0.85, geometry=geometry(), total_gib=95.0, weights_gib=29.0,
                hicache=False, release="0.5.23", hybrid=dict(OPTIONS))
    rows, _plans, table = mp.compare(base, [{"name": "profile"},
                                            {"name": "128 running", "hybrid": {"max_running_requests": 128}},
                                            {"name": "ratio 0.5", "hybrid": {"mamba_full_memory_ratio": 0.5}}])
    assert [row["state_slots"] for row in rows] == [606, 606, rows[2]["state_slots"]] and rows[2]["state_slots"] < 606
    assert [row["running_cap"] for row in rows] == [48, 121, 48]   # 606 // 5 = 121: the state pool is the limit
    assert "KV GiB/rank  state slots  state GiB  max running" in " ".join(table[0].split(" "))
