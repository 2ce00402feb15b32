# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the sglang_memory_plan module file as Ansible runs it, on the fixture configs and the operators' numbers."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_memory_plan.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
KIMI = os.path.join(ROOT, "tests", "fixtures", "models", "kimi-k2.5")


def run_module(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON: %s %s" % (proc.stdout, proc.stderr))


REFERENCE = dict(tp=8, mem_fraction_static=0.88, model_path=KIMI, gpu_memory_gb=97272 / 1024.0,
                 weights_gb_per_gpu=72.3, mem_available_gb=396)


def test_reference_plan_from_config(tmp_path):
    result = run_module(tmp_path, dict(REFERENCE, ratio=4))
    assert result["changed"] is False and result["fits"] is True
    assert result["cell_size_bytes"] == 70272
    assert abs(result["kv_tokens_per_rank"] - 159277) / 159277.0 < 0.02
    assert abs(result["kv_gb_per_rank"] - 10.42) / 10.42 < 0.02
    assert 4 < result["max_ratio"] < 5
    assert result["sources"]["geometry"].startswith("config.json of ")
    assert "Fits." in result["summary"]


def test_gpus_from_nvidia_gpu_info(tmp_path):
    gpus = [{"index": i, "memory_free_mib": 97272 - (100 if i == 5 else 0)} for i in range(8)]
    result = run_module(tmp_path, dict(REFERENCE, gpu_memory_gb=None, gpus=gpus))
    # the smallest free memory across the ranks wins, as in SGLang (distributed min)
    assert result["gpu_total_gb"] == round(97172 / 1024.0 - 1.0, 3)
    assert "GPUs 0,1,2,3,4,5,6,7 = 97172 MiB" in result["sources"]["gpu_memory"]


def test_no_gpu_memory_fails_clearly(tmp_path):
    result = run_module(tmp_path, dict(REFERENCE, gpu_memory_gb=None, gpus=[]))
    assert result["failed"] is True
    assert "give gpu_memory_gb" in result["msg"]


def test_weights_estimated_from_files(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    with open(os.path.join(KIMI, "config.json")) as handle:
        (model / "config.json").write_text(handle.read())
    with open(str(model / "model.safetensors"), "wb") as handle:
        handle.truncate(8 * (1 << 30))  # sparse: 8 GiB -> 1 GiB per GPU at tp 8
    result = run_module(tmp_path, dict(REFERENCE, model_path=str(model), weights_gb_per_gpu=None))
    assert result["weights_gb_per_gpu"] == 1.0
    assert result["sources"]["weights"].startswith("estimated")


def test_compare_in_module(tmp_path):
    result = run_module(tmp_path, dict(REFERENCE, compare=[{"name": "ratio2", "ratio": 2}, {"name": "ratio4", "ratio": 4},
                                                           {"name": "fp8", "kv_dtype": "fp8_e4m3"}]))
    assert [row["name"] for row in result["compare"]] == ["ratio2", "ratio4", "fp8"]
    assert len(result["compare_table"]) == 5
    assert result["compare_plans"][2]["cell_size_bytes"] == 35136


def test_ratio_not_fitting_is_reported_not_failed(tmp_path):
    result = run_module(tmp_path, dict(REFERENCE, ratio=8))
    assert result.get("failed") is not True
    assert result["fits"] is False
    assert "largest ratio that fits" in result["problems"][0]


def test_bad_input_fails(tmp_path):
    result = run_module(tmp_path, dict(REFERENCE, ratio=0.5))
    assert result["failed"] is True and "ratio must be > 1" in result["msg"]
    result = run_module(tmp_path, dict(REFERENCE, model_path=str(tmp_path)))
    assert result["failed"] is True and "no config.json" in result["msg"]


def test_explicit_geometry_and_meminfo(tmp_path):
    args = dict(REFERENCE, model_path=None, mem_available_gb=None,
                geometry={"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_layers": 61})
    result = run_module(tmp_path, args)
    assert result["cell_size_bytes"] == 70272
    assert result["sources"]["mem_available"] == "/proc/meminfo MemAvailable"
    assert result["mem_available_bytes"] > 0


def test_running_service_that_is_not_running_changes_nothing(tmp_path):
    # issue 13: the "after the stop" plan only adds back what a RUNNING unit holds
    plain = run_module(tmp_path, dict(REFERENCE, ratio=4))
    result = run_module(tmp_path, dict(REFERENCE, ratio=4, running_service="gpuserve-no-such-unit"))
    assert result["running_server"]["running"] is False
    assert result["running_server"]["views"][0].startswith("gpuserve-no-such-unit.service is ")
    assert (result["fits"], result["kv_tokens_per_rank"], result["summary"]) == (
        plain["fits"], plain["kv_tokens_per_rank"], plain["summary"])
    bad = run_module(tmp_path, dict(REFERENCE, running_service="a/b"))
    assert bad["failed"] and "running_service" in bad["msg"]


def test_release_0_5_23_counts_the_draft_host_pool_from_the_draft_config(tmp_path):
    """Issue 21: the plan uses the rules of the release being deployed (from its wheel) and says which."""
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLMEagle3"], "num_hidden_layers": 1, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}))
    old = run_module(tmp_path, dict(REFERENCE, ratio=4, draft_model_path=str(draft)))
    new = run_module(tmp_path, dict(REFERENCE, ratio=4, draft_model_path=str(draft), release="0.5.23"))
    assert old["sglang_rules"]["from_release"] == "0.5.9" and "draft_geometry" not in old["sources"]
    assert new["sglang_rules"]["from_release"] == "0.5.23" and new["sglang_rules"]["hicache_budget"] == "per_rank_share"
    assert new["sources"]["draft_geometry"] == "config.json of %s" % draft
    assert new["draft_cell_size_bytes"] == 1152
    assert new["host_pool_bytes_per_rank"] == old["host_pool_bytes_per_rank"] + new["host_draft_pool_bytes_per_rank"]
    assert new["max_ratio"] < old["max_ratio"]
    # a draft directory without config.json: planned without the draft pool, and said so (no failure)
    (draft / "config.json").unlink()
    bare = run_module(tmp_path, dict(REFERENCE, ratio=4, draft_model_path=str(draft), release="0.5.23"))
    assert bare["fits"] is True and "host_draft_pool_bytes_per_rank" not in bare
    assert bare["sources"]["draft_geometry"].startswith("none: the draft model's host pool is not counted")
