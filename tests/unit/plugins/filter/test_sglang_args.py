# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's flag rules (plugins/filter/sglang_args.py): merge, argv, preflight problems."""
from __future__ import annotations

import shlex

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args as f

# The production unit's flags, in the production order (roles/server/vars/profiles/kimi_k25_int4_eagle3.yml).
KIMI = {
    "tp": 8,
    "speculative-algorithm": "EAGLE3",
    "speculative-draft-model-path": "/models/Kimi-K2.5-eagle3",
    "speculative-num-steps": 2,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 3,
    "cuda-graph-max-bs": 128,
    "attention-backend": "flashinfer",
    "enable-flashinfer-allreduce-fusion": True,
    "disable-custom-all-reduce": True,
    "mem-fraction-static": 0.88,
    "enable-hierarchical-cache": True,
    "hicache-ratio": 4.0,
    "hicache-write-policy": "write_through",
    "hicache-io-backend": "kernel",
}


def systemd_words(line):
    """Read an ExecStart line back (the subset sglang_cmdline writes: double quotes, \\\\ \\" escapes, $$, %%)."""
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line, posix=True)]


# ---- sglang_args_merge ---------------------------------------------------------------------------------------

def test_merge_user_over_profile_keeps_profile_order():
    merged = f.sglang_args_merge(KIMI, {"hicache-ratio": 2.0, "enable-metrics": True})
    keys = list(merged)
    assert keys[: len(KIMI)] == list(KIMI)
    assert keys[-1] == "enable-metrics"
    assert merged["hicache-ratio"] == 2.0


def test_merge_false_and_null_drop_profile_flags():
    merged = f.sglang_args_merge(KIMI, {"disable-custom-all-reduce": False, "cuda-graph-max-bs": None})
    assert "disable-custom-all-reduce" not in merged
    assert "cuda-graph-max-bs" not in merged
    assert merged["enable-flashinfer-allreduce-fusion"] is True


def test_merge_normalises_names_and_folds_aliases():
    merged = f.sglang_args_merge({"tp": 8}, {"--tp-size": 4, "hicache_ratio": 3.0, "tensor_parallel_size": 2})
    assert merged == {"tp": 2, "hicache-ratio": 3.0}


def test_merge_first_goes_first():
    merged = f.sglang_args_merge(KIMI, {}, first={"model-path": "/m"})
    assert list(merged)[0] == "model-path"


@pytest.mark.parametrize("bad", [{"hicache ratio": 1}, {"": 1}, {"--Ü": 1}, {7: 1}])
def test_merge_refuses_bad_names(bad):
    with pytest.raises(AnsibleFilterError):
        f.sglang_args_merge({}, bad)


def test_merge_refuses_non_mapping():
    with pytest.raises(AnsibleFilterError, match="mapping"):
        f.sglang_args_merge({}, ["--tp", "8"])


# ---- sglang_argv ---------------------------------------------------------------------------------------------------

def test_argv_production_profile():
    assert f.sglang_argv(KIMI) == [
        "--tp", "8", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/Kimi-K2.5-eagle3",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
        "--cuda-graph-max-bs", "128", "--attention-backend", "flashinfer",
        "--enable-flashinfer-allreduce-fusion", "--disable-custom-all-reduce",
        "--mem-fraction-static", "0.88", "--enable-hierarchical-cache", "--hicache-ratio", "4.0",
        "--hicache-write-policy", "write_through", "--hicache-io-backend", "kernel",
    ]


def test_argv_value_kinds():
    argv = f.sglang_argv({"a": True, "b": False, "c": None, "d": [1, "x y"], "e": {"k": 1, "a": [2]}, "f": 1e-05})
    assert argv == ["--a", "--d", "1", "x y", "--e", '{"a":[2],"k":1}', "--f", "1e-05"]


# ---- sglang_args_problems ----------------------------------------------------------------------------------------

SPEC_V2 = {"SGLANG_ENABLE_SPEC_V2": "True"}


def test_production_profile_has_no_problem():
    assert f.sglang_args_problems(KIMI, SPEC_V2) == []


@pytest.mark.parametrize("ratio", [1, 1.0, 0.5, "1.0"])
def test_hicache_ratio_not_above_one(ratio):
    problems = f.sglang_args_problems(dict(KIMI, **{"hicache-ratio": ratio}), SPEC_V2)
    assert len(problems) == 1 and "ratio > 1" in problems[0]


def test_hicache_ratio_ignored_with_hicache_size_or_without_hicache():
    assert f.sglang_args_problems(dict(KIMI, **{"hicache-ratio": 1.0, "hicache-size": 40}), SPEC_V2) == []
    assert f.sglang_args_problems({"hicache-ratio": 0.5}) == []


def test_hicache_with_disable_radix_cache():
    problems = f.sglang_args_problems(dict(KIMI, **{"disable-radix-cache": True}), SPEC_V2)
    assert len(problems) == 1 and "mutually exclusive" in problems[0]


def test_spec_v2_with_topk_above_one():
    args = dict(KIMI, **{"speculative-eagle-topk": 4})
    problems = f.sglang_args_problems(args, SPEC_V2)
    assert len(problems) == 1 and "topk = 1" in problems[0]
    assert f.sglang_args_problems(args, {"SGLANG_ENABLE_SPEC_V2": "False"}) == []
    assert f.sglang_args_problems(args, {}) == []


@pytest.mark.parametrize("drop", ["speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens"])
def test_partial_speculative_settings(drop):
    args = dict(KIMI)
    del args[drop]
    problems = f.sglang_args_problems(args, SPEC_V2)
    assert len(problems) == 1 and "partial speculative settings" in problems[0] and "--" + drop in problems[0]


def test_speculative_without_algorithm_and_eagle_without_draft():
    args = dict(KIMI)
    del args["speculative-algorithm"]
    assert any("without --speculative-algorithm" in p for p in f.sglang_args_problems(args))
    args = dict(KIMI)
    del args["speculative-draft-model-path"]
    assert any("needs a draft model" in p for p in f.sglang_args_problems(args))


@pytest.mark.parametrize("key, var", [("model-path", "sglang_model_path"), ("port", "sglang_port"),
                                      ("host", "sglang_host"), ("api_key", "sglang_api_key"),
                                      ("admin-api-key", "sglang_admin_api_key")])
def test_reserved_flags_in_user_args(key, var):
    problems = f.sglang_args_problems(KIMI, SPEC_V2, user_args={key: "x"})
    assert len(problems) == 1 and var in problems[0]


def test_numbers_and_env_names():
    problems = f.sglang_args_problems({"tp": "eight", "mem-fraction-static": 1.2}, {"BAD-NAME": "1"})
    assert any("sglang_args: --tp must be a number" in p for p in problems)
    assert any("between 0 and 1" in p for p in problems)
    assert any("BAD-NAME" in p for p in problems)


# ---- injection and bad numbers (issue 14) ------------------------------------------------------------------------

def test_flag_name_with_trailing_newline_is_refused():
    # re.match('^...$') accepted 'tp\n' (the $ matches before a final newline)
    with pytest.raises(AnsibleFilterError, match="not an SGLang flag name"):
        f.sglang_args_merge({}, {"tp\n": 8})


@pytest.mark.parametrize("value", ["x\n", "a\rb", "a\x00", "a\tb", "\u2028", ["ok", "x\nExecStartPre=+/bin/sh"]])
def test_problems_refuse_control_characters_in_values(value):
    problems = f.sglang_args_problems({"lora-paths": value})
    assert len(problems) == 1 and "sglang_args: --lora-paths value" in problems[0] and "control" in problems[0]


def test_problems_refuse_control_characters_in_env_values():
    problems = f.sglang_args_problems({}, {"HF_HOME": "/x\nExecStartPre=+/bin/sh"})
    assert problems and "sglang_env: HF_HOME" in problems[0]


def test_problems_refuse_env_name_with_trailing_newline():
    assert any("'BAD\\n'" in p for p in f.sglang_args_problems({}, {"BAD\n": "1"}))


@pytest.mark.parametrize("flag, value", [("tp", 0), ("tp", -1), ("tp", 1.5), ("tp", "0"), ("dp-size", 0),
                                         ("ep-size", -2)])
def test_counts_below_one_refused(flag, value):
    problems = f.sglang_args_problems({flag: value})
    assert problems == ["sglang_args: --%s must be a whole number >= 1, got %r" % (flag, value)]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "nan", "inf"])
@pytest.mark.parametrize("flag", ["hicache-ratio", "hicache-size", "mem-fraction-static", "tp"])
def test_non_finite_numbers_refused(flag, value):
    problems = f.sglang_args_problems({"enable-hierarchical-cache": True, flag: value})
    assert any(p == "sglang_args: --%s must be a finite number, got %r" % (flag, value) for p in problems)


@pytest.mark.parametrize("flag", ["hicache-ratio", "hicache-size"])
def test_negative_sizes_refused(flag):
    problems = f.sglang_args_problems({flag: -1})
    assert "sglang_args: --%s must not be negative, got -1" % flag in problems


def test_problems_never_raise_on_odd_input():
    assert f.sglang_args_problems({"tp": object()})
    assert f.sglang_args_problems([1, 2]) and f.sglang_args_problems({}, ["A"])
    assert f.sglang_args_problems({}, user_args={7: 1})


def test_secret_env_value_is_not_shown_in_a_refusal():
    problems = f.sglang_args_problems({}, {"HF_TOKEN": "hf_s3cret\n"})
    assert problems == ["sglang_env: HF_TOKEN holds control characters (value not shown): refused"]


# ---- flags for some releases only (issue 21) -------------------------------------------------------------------
MULTITHREAD = [{"when": {"multithread_load_default": False},
                "args": {"model_loader_extra_config": {"enable_multithread_load": True, "num_threads": "cpus_per_rank"}}}]


def test_release_args_follow_the_release_table():
    from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_release_args
    assert sglang_release_args(MULTITHREAD, "0.5.9", cpus=64, tp=8) == {
        "model-loader-extra-config": {"enable_multithread_load": True, "num_threads": 8}}
    # multithreaded loading is 0.5.23's default (its loader, read from the wheel): nothing to add
    assert sglang_release_args(MULTITHREAD, "0.5.23", cpus=64, tp=8) == {}
    # no release known: 0.5.9's rules; fewer CPUs than ranks: one thread
    assert sglang_release_args(MULTITHREAD, "", cpus=4, tp=8)["model-loader-extra-config"]["num_threads"] == 1
    # the user's own flag (a false that drops it too) wins
    assert sglang_release_args(MULTITHREAD, "0.5.9", cpus=64, tp=8, present=["model-loader-extra-config"]) == {}
    assert sglang_release_args(None) == {}


def test_release_args_refuse_an_unknown_rule_or_a_bad_entry():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_release_args
    with pytest.raises(AnsibleFilterError, match="no rule no_such_rule in the release tables"):
        sglang_release_args([{"when": {"no_such_rule": True}, "args": {}}], "0.5.9")
    with pytest.raises(AnsibleFilterError, match="needs a 'when' and an 'args' mapping"):
        sglang_release_args([{"args": {}}], "0.5.9")
    with pytest.raises(AnsibleFilterError, match="whole numbers"):
        sglang_release_args(MULTITHREAD, "0.5.9", cpus="many")
