# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.9's memory math, checked against the operators' numbers of the reference host.

Reference host (docs/memory-planning.md): 8 x RTX PRO 6000 Blackwell (96 GB = 97,887 MiB), Kimi-K2.5 INT4,
mem_fraction_static 0.88, weights 72.3 GB per GPU -> KV 10.42 GB = 159,277 tokens per GPU; HiCache ratio 2 ~ 20 GB
per rank, ratio 4 ~ 40 GB per rank (~330 GB pinned), 396 GB free RAM.
"""
import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _memory_plan as mp

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "models")
GIB = 1 << 30
MLA = {"attention": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 61}
# nvidia-smi on an idle 96 GB card: 97,887 MiB total; the driver keeps ~615 MiB (as the H200 fixture shows:
# 143771 total, 0 used, 143156 free), so memory.free is ~97,272 MiB.
RTX_PRO_6000_FREE_GIB = 97272 / 1024.0


def reference(**kw):
    args = dict(tp=8, mem_fraction_static=0.88, geometry=MLA, total_gib=RTX_PRO_6000_FREE_GIB - 1.0,
                weights_gib=72.3, mem_available_bytes=396 * GIB, ratio=2.0)
    args.update(kw)
    return mp.make_plan(**args)


def within(value, expected, rel=0.02):
    return abs(value - expected) <= rel * expected


def test_cell_size_of_kimi_k25_from_config():
    geometry = mp.geometry_from_config(mp.load_model_config(os.path.join(MODELS, "kimi-k2.5")))
    assert geometry["attention"] == "mla"
    assert (geometry["kv_lora_rank"], geometry["qk_rope_head_dim"], geometry["num_layers"]) == (512, 64, 61)
    assert mp.cell_size(geometry, mp.dtype_bytes("auto", geometry["model_dtype"]), 8) == 70272
    # not divided by TP
    assert mp.cell_size(geometry, 2, 1) == 70272


def test_deepseek_v3_config_top_level():
    geometry = mp.geometry_from_config(mp.load_model_config(os.path.join(MODELS, "deepseek-v3", "config.json")))
    assert mp.cell_size(geometry, 2, 8) == (512 + 64) * 61 * 2


def test_mha_qwen_cell_size_divides_kv_heads_by_tp():
    geometry = mp.geometry_from_config(mp.load_model_config(os.path.join(MODELS, "qwen2.5-7b-instruct")))
    assert geometry == dict(geometry, attention="mha", num_kv_heads=4, head_dim=128, num_layers=28)
    assert mp.cell_size(geometry, 2, 1) == 4 * 128 * 28 * 2 * 2
    assert mp.cell_size(geometry, 2, 2) == 2 * 128 * 28 * 2 * 2
    # more ranks than KV heads: SGLang keeps at least one head per rank
    assert mp.cell_size(geometry, 2, 8) == 1 * 128 * 28 * 2 * 2


def test_operators_kv_numbers_within_2_percent():
    plan = reference()
    assert plan["cell_size_bytes"] == 70272
    assert within(plan["kv_gb_per_rank"], 10.42)
    assert within(plan["kv_tokens_per_rank"], 159277)
    assert plan["fits"] is True


def test_from_sglang_log_total_is_exact():
    # "Load weight begin. avail mem=94.00 GB" and "mem usage=72.30 GB": SGLang's own total and weights.
    plan = reference(total_gib=94.00)
    assert abs(plan["kv_tokens_per_rank"] - 159277) < 100
    assert plan["kv_tokens_per_rank"] == int((0.88 * 94.00 - 72.3) * GIB) // 70272
    # SGLang's KV pool has one padding page: (tokens + 1) * cell bytes, printed / 2**30
    assert plan["kv_bytes_per_rank"] == (plan["kv_tokens_per_rank"] + 1) * 70272
    assert plan["kv_gb_per_rank"] == 10.42


def test_operators_hicache_ratio_2_and_4():
    two = reference(ratio=2)
    four = reference(ratio=4)
    tokens = two["kv_tokens_per_rank"]
    # SGLang: int(tokens * ratio) // page_size + 1 pages (page_size 1: one extra token)
    assert two["host_tokens_per_rank"] == int(tokens * 2) + 1
    assert four["host_tokens_per_rank"] == int(tokens * 4) + 1
    assert four["host_pool_bytes_per_rank"] == four["host_tokens_per_rank"] * 70272
    # "about 20 GB per rank" and "about 40 GB per rank" are GiB: 2x and 4x the 10.42 GiB KV cache
    assert within(two["host_pool_gib_per_rank"], 2 * 10.42)
    assert within(four["host_pool_gib_per_rank"], 4 * 10.42)
    assert within(two["host_pool_gib_per_rank"], 20, rel=0.05)
    assert within(four["host_pool_gib_per_rank"], 40, rel=0.05)
    # "~330 GB pinned in all" for 8 ranks at ratio 4
    assert within(four["host_pool_gib_total"], 330)
    # SGLang's own line prints 1e9 bytes: "Allocating 44.7x GB host memory for hierarchical KV cache."
    assert four["host_pool_gb_per_rank"] == round(four["host_pool_bytes_per_rank"] / 1e9, 2)
    assert 44.6 < four["host_pool_gb_per_rank"] < 44.9
    assert four["fits"] and four["ram_fits"] and four["rank_check_ok"]


def test_largest_ratio_that_fits_396_gib():
    plan = reference(ratio=4)
    budget = 396 * GIB - 10 * GIB
    best = plan["max_ratio"]
    assert 4 < best < 5
    # exactly the boundary: best fits for all 8 ranks, best + 0.01 does not
    fits = reference(ratio=best)
    assert fits["ram_fits"] and fits["host_pool_bytes_total"] <= budget
    assert not reference(ratio=round(best + 0.01, 2))["ram_fits"]
    size = plan["max_hicache_size_gb"]
    assert reference(size_gb=size)["ram_fits"]
    assert not reference(size_gb=size + 1)["ram_fits"]


def test_ratio_too_big_fails_with_numbers_and_largest_ratio():
    plan = reference(ratio=6)
    assert plan["fits"] is False and plan["ram_fits"] is False
    message = plan["problems"][0]
    assert "ratio 6" in message
    assert "x 8 ranks" in message
    assert "largest ratio that fits is %.2f" % plan["max_ratio"] in message
    assert plan["ram_left_after_pinning_bytes"] < 0
    assert "Does NOT fit" in plan["summary"]


def test_rank_check_passes_while_the_total_overcommits():
    # each rank alone (SGLang's check) fits, all 8 together do not: the trap of uncoordinated checks
    plan = reference(ratio=5)
    assert plan["rank_check_ok"] is True
    assert plan["ram_fits"] is False


def test_hicache_size_overrides_ratio():
    plan = reference(size_gb=30, ratio=4)
    assert plan["host_tokens_per_rank"] == int(30 * 1e9 // 70272) + 1
    assert within(plan["host_pool_gb_per_rank"], 30, rel=0.001)


def test_hicache_size_smaller_than_device_pool_is_refused():
    plan = reference(size_gb=5)
    assert not plan["fits"]
    assert "host memory should be larger than the device memory" in plan["problems"][0]


def test_page_size_alignment():
    plan = reference(page_size=64)
    assert plan["kv_tokens_per_rank"] % 64 == 0
    assert plan["host_tokens_per_rank"] % 64 == 0
    assert plan["host_tokens_per_rank"] == (int(plan["kv_tokens_per_rank"] * 2) // 64 + 1) * 64
    assert plan["kv_bytes_per_rank"] == (plan["kv_tokens_per_rank"] + 64) * 70272


def test_fp8_kv_doubles_tokens_same_bytes():
    bf16 = reference()
    fp8 = reference(kv_dtype="fp8_e4m3")
    assert fp8["cell_size_bytes"] == 35136
    assert within(fp8["kv_tokens_per_rank"], 2 * bf16["kv_tokens_per_rank"], rel=0.0001)
    assert within(fp8["host_pool_bytes_per_rank"], bf16["host_pool_bytes_per_rank"], rel=0.0001)


def test_no_room_for_kv_cache():
    plan = reference(weights_gib=90)
    assert plan["kv_tokens_per_rank"] == 0
    assert not plan["fits"]
    assert "increase --mem-fraction-static" in plan["problems"][0]


def test_hicache_off_needs_no_ram():
    plan = reference(hicache=False, ratio=None)
    assert plan["fits"] and "host_pool_bytes_per_rank" not in plan
    assert "HiCache is off" in plan["summary"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(tp=0), "tp must be >= 1"),
    (dict(mem_fraction_static=1.2), "mem_fraction_static must be between"),
    (dict(ratio=1.0), "ratio must be > 1"),
    (dict(kv_dtype="int3"), "kv_dtype 'int3' is not one of"),
    (dict(total_gib=0), "must be > 0 GiB"),
    (dict(geometry={"kv_lora_rank": 512}), "needs qk_rope_head_dim, num_layers"),
    (dict(page_size=0), "page_size must be >= 1"),
])
def test_bad_input_is_refused_clearly(kwargs, message):
    with pytest.raises(mp.PlanError, match=message):
        reference(**kwargs)


def test_compare_table():
    base = dict(tp=8, mem_fraction_static=0.88, geometry=MLA, total_gib=94.0, weights_gib=72.3,
                mem_available_bytes=396 * GIB, ratio=2.0)
    rows, plans, table = mp.compare(base, [
        {"name": "ratio2", "ratio": 2}, {"name": "ratio4", "ratio": 4}, {"name": "ratio6", "ratio": 6},
        {"name": "fp8", "kv_dtype": "fp8_e4m3", "ratio": 4}])
    assert [r["name"] for r in rows] == ["ratio2", "ratio4", "ratio6", "fp8"]
    assert [r["fits"] for r in rows] == [True, True, False, True]
    assert rows[3]["kv_tokens_per_rank"] > 1.99 * rows[1]["kv_tokens_per_rank"]
    assert len(plans) == 4 and plans[2]["problems"]
    assert table[0].split()[0] == "name" and set(table[1]) <= {"-", " "}
    assert table[4].startswith("ratio6") and table[4].endswith("NO")
    assert "159,215" in table[2]


def test_compare_unknown_key():
    with pytest.raises(mp.PlanError, match="unknown keys colour"):
        mp.compare(dict(tp=8, mem_fraction_static=0.88, geometry=MLA, total_gib=94.0, weights_gib=72.3),
                   [{"colour": "red"}])


def test_meminfo_real_text():
    text = ("MemTotal:       263998500 kB\nMemFree:        262629760 kB\nMemAvailable:   263403392 kB\n"
            "HugePages_Total:       0\n")
    info = mp.parse_meminfo(text)
    assert info["MemAvailable"] == 263403392 * 1024
    assert info["HugePages_Total"] == 0


def test_model_files_bytes(tmp_path):
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"x" * 500)
    (tmp_path / "config.json").write_text(json.dumps({}))
    assert mp.model_files_bytes(str(tmp_path)) == 1500
    assert mp.model_files_bytes(str(tmp_path / "missing")) == 0


def test_config_errors(tmp_path):
    with pytest.raises(mp.PlanError, match="no config.json"):
        mp.load_model_config(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(mp.PlanError, match="not valid JSON"):
        mp.load_model_config(str(tmp_path))
    with pytest.raises(mp.PlanError, match="no num_hidden_layers"):
        mp.geometry_from_config({"model_type": "x"})


# ---- per release (issue 21): the rules come from the release table (taken from each wheel) -------------------
DRAFT = {"attention": "mla", "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 1}   # an EAGLE-3 head


@pytest.mark.parametrize("release,budget,draft,source,note", [
    (None, "each_rank_alone", False, "0.5.9", "release not given"),
    ("0.5.9", "each_rank_alone", False, "0.5.9", "SGLang 0.5.9's rules"),
    ("0.5.23", "per_rank_share", True, "0.5.23", "SGLang 0.5.23's rules"),
    ("0.5.15", "each_rank_alone", False, "0.5.15", "SGLang 0.5.15's rules"),
    ("0.5.19", "per_rank_share", True, "0.5.19", "SGLang 0.5.19's rules"),
    ("0.5.15.post2", "each_rank_alone", False, "0.5.15.post1", "no release table: 0.5.15.post1's rules"),
    ("0.6.0", "per_rank_share", True, "0.5.23", "no release table: 0.5.23's rules"),
])
def test_the_rules_of_each_release(release, budget, draft, source, note):
    rules, said = mp.release_rules(release)
    assert rules["hicache_budget"] == budget and rules["hicache_draft_host_pool"] is draft
    assert rules["hicache_reserve_bytes"] == 10 * GIB and rules["from_release"] == source and note in said


def pinned_case(release, mem_available_bytes):
    return reference(ratio=4.0, release=release, draft_geometry=DRAFT, mem_available_bytes=mem_available_bytes)


def test_ratio_4_on_0_5_23_pins_the_draft_pool_too_numbers_by_hand():
    """By hand, from SGLang's source, for this file's reference GPU (159,110 KV tokens a rank): host tokens =
    int(159110 x 4) + 1 = 636,441 (pool_host/base.py: size, then page_num = size // 1 + 1); target pool 636,441 x
    70,272 B = 44.72 GB; 0.5.23 gives the EAGLE draft a host pool of the same tokens (hybrid_pool_assembler.py:
    host_token_capacity=the target's logical size) at (512 + 64) x 1 layer x 2 B = 1,152 B a token = 0.73 GB;
    45.46 GB a rank, 363.7 GB for 8."""
    plan = pinned_case("0.5.23", 396 * GIB)
    assert plan["kv_tokens_per_rank"] == 159110
    assert plan["host_tokens_per_rank"] == 636441
    assert plan["draft_cell_size_bytes"] == 1152
    assert plan["host_draft_pool_bytes_per_rank"] == 636441 * 1152 and plan["host_draft_pool_gb_per_rank"] == 0.73
    assert plan["host_pool_bytes_per_rank"] == 636441 * (70272 + 1152)
    assert plan["host_pool_gb_total"] == 363.7
    assert plan["sglang_rules"]["from_release"] == "0.5.23" and "draft model's host pool" in plan["summary"]
    old = pinned_case("0.5.9", 396 * GIB)
    assert old["host_pool_bytes_per_rank"] == 636441 * 70272 and "host_draft_pool_bytes_per_rank" not in old


def test_a_host_where_ratio_4_fits_0_5_9_but_not_0_5_23():
    """"Can we do ratio 4?" has a different answer per release: 360 GB above the reserve holds 8 x 44.72 GB
    (0.5.9) but not 8 x 45.46 GB (0.5.23, the draft's host pool too)."""
    mem = int(360e9) + 10 * GIB
    old, new = pinned_case("0.5.9", mem), pinned_case("0.5.23", mem)
    assert old["fits"] and old["ram_fits"]
    assert not new["fits"] and not new["ram_fits"]
    problem = new["problems"][0]
    assert "of it the draft model's host pool" in problem and "SGLang 0.5.23's rules" in problem
    assert new["max_ratio"] is not None and new["max_ratio"] < 4.0 <= old["max_ratio"] + 0.01


def test_per_rank_share_refuses_what_one_rank_alone_would_pass():
    """0.5.9: each rank checks against all of MemAvailable - reserve (ranks together can overcommit, which
    ram_fits catches); 0.5.23: a rank gets (available - reserve) // ranks, so the rank check itself fails."""
    mem = int(300e9) + 10 * GIB
    old, new = pinned_case("0.5.9", mem), pinned_case("0.5.23", mem)
    assert old["rank_check_ok"] and not old["ram_fits"]
    assert not new["rank_check_ok"] and not new["ram_fits"]
