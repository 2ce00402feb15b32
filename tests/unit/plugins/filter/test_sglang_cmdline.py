# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's filter plugin: flags as data -> ExecStart, preflight problems, env file, masking."""
from __future__ import annotations

import shlex

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_cmdline as f

PREFIX = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]

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


# ---- sglang_argv / sglang_cmdline --------------------------------------------------------------------------------

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


def test_cmdline_plain_words_stay_unquoted():
    line = f.sglang_cmdline({"tp": 8, "hicache-ratio": 4.0, "enable-hierarchical-cache": True}, prefix=PREFIX)
    assert line == ("/opt/sglang/venv/bin/python -m sglang.launch_server --tp 8 --hicache-ratio 4.0 "
                    "--enable-hierarchical-cache")


@pytest.mark.parametrize("value, quoted", [
    ("/models/Kimi K2.5", '"/models/Kimi K2.5"'),
    ("price$HOME", '"price$$HOME"'),
    ("100%", '"100%%"'),
    ("%n", '"%%n"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("", '""'),
    (";", '";"'),
    ("it's", '"it\'s"'),
    ("a\tb", '"a\\tb"'),
])
def test_cmdline_quotes_for_systemd(value, quoted):
    line = f.sglang_cmdline({"served-model-name": value})
    assert line == "--served-model-name " + quoted


def test_cmdline_round_trips_every_word():
    args = {"model-path": "/models/Kimi K2.5 $x 100%", "served-model-name": 'a "b" \\c', "tp": 8,
            "json-model-override-args": {"rope scaling": {"factor": 2.0}}, "enable-metrics": True}
    line = f.sglang_cmdline(args, prefix=PREFIX)
    assert systemd_words(line) == PREFIX + f.sglang_argv(args)


def test_cmdline_takes_a_word_list():
    assert f.sglang_cmdline(["--x", "a b", 3]) == '--x "a b" 3'


def test_cmdline_refuses_scalar():
    with pytest.raises(AnsibleFilterError):
        f.sglang_cmdline("--tp 8")


def test_no_unescaped_dollar_or_percent_left():
    line = f.sglang_cmdline({"x": "$A ${B} %i %% $$"})
    stripped = line.replace("$$", "").replace("%%", "")
    assert "$" not in stripped and "%" not in stripped


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
                                      ("host", "sglang_host"), ("api_key", "sglang_api_key")])
def test_reserved_flags_in_user_args(key, var):
    problems = f.sglang_args_problems(KIMI, SPEC_V2, user_args={key: "x"})
    assert len(problems) == 1 and var in problems[0]


def test_numbers_and_env_names():
    problems = f.sglang_args_problems({"tp": "eight", "mem-fraction-static": 1.2}, {"BAD-NAME": "1"})
    assert any("--tp must be a number" in p for p in problems)
    assert any("between 0 and 1" in p for p in problems)
    assert any("BAD-NAME" in p for p in problems)


# ---- env file and masking ----------------------------------------------------------------------------------------

def test_envfile_lines_sorted_and_escaped():
    text = f.sglang_envfile({"B": 'x "y" \\z', "A": True, "C": None, "D": 4})
    assert text == 'A="true"\nB="x \\"y\\" \\\\z"\nD="4"\n'
    assert f.sglang_envfile({}) == ""


@pytest.mark.parametrize("bad", [{"A B": "1"}, {"A": "two\nlines"}])
def test_envfile_refuses(bad):
    with pytest.raises(AnsibleFilterError):
        f.sglang_envfile(bad)


def test_mask_env():
    masked = f.sglang_mask_env({"SGLANG_API_KEY": "s3cret", "HF_TOKEN": "hf_x", "NCCL_DEBUG": "WARN", "MY_PW": "p",
                                "EMPTY_KEY": ""}, extra_secret_keys=["MY_PW"])
    assert masked == {"SGLANG_API_KEY": "********", "HF_TOKEN": "********", "NCCL_DEBUG": "WARN",
                      "MY_PW": "********", "EMPTY_KEY": ""}


def test_filter_module_exposes_all():
    names = set(f.FilterModule().filters())
    assert {"sglang_args_merge", "sglang_cmdline", "sglang_argv", "sglang_args_problems",
            "sglang_envfile", "sglang_mask_env"} <= names
