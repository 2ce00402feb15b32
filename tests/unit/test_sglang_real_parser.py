# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The profiles' command lines through the REAL SGLang 0.5.9 argument parser.

SGLang 0.5.9 lives in .cache/sglang-parser-venv (built by tests/sglang_parser/setup-venv.sh: sglang without its
GPU dependencies, torch's CPU build). Each test runs roles/server/files/sglang_check_args.py there - the same
script the server role's preflight runs with the host's interpreter - on the argv the role's filter renders.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import types

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_args, sglang_secrets, server_inputs, systemd

# The server role's filters, by name (split by what they hold: flag rules, systemd quoting, secrets, inputs).
_FILTERS = {}
for _module in (sglang_args, systemd, sglang_secrets, server_inputs):
    _FILTERS.update(_module.FilterModule().filters())
f = types.SimpleNamespace(FilterModule=lambda: types.SimpleNamespace(filters=lambda: dict(_FILTERS)), **_FILTERS)

from conftest import ROOT

VENV = os.environ.get("SGLANG_PARSER_VENV", os.path.join(ROOT, ".cache", "sglang-parser-venv"))
VENV_PY = os.path.join(VENV, "bin", "python")
CHECKER = os.path.join(ROOT, "roles", "server", "files", "sglang_check_args.py")
PROFILES = os.path.join(ROOT, "roles", "server", "vars", "profiles")
READY = os.path.join(VENV, ".gpuserve-parser-venv")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(VENV_PY) and os.path.exists(READY)),
    reason="no SGLang parser venv at %s: build it with tests/sglang_parser/setup-venv.sh" % VENV)

DRAFT = "/models/Kimi-K2.5-EAGLE3"


def profile_args(name):
    """The profile's flags as the role merges them (model path first, draft path filled in), plus host/port."""
    with open(os.path.join(PROFILES, name + ".yml")) as handle:
        data = yaml.safe_load(handle)
    raw = dict(data["_server_profile_args"])
    for key, value in raw.items():
        if value == "{{ sglang_draft_model_path }}":
            raw[key] = DRAFT
    merged = f.sglang_args_merge(raw, {}, first={"model-path": "/models/x"})
    return merged, data["_server_profile_env"]


def run_parser(argv):
    """One command line, exactly as the role's preflight runs the checker (exit status, argparse's stderr)."""
    env = dict(os.environ, SGLANG_CHECK_ARGV=json.dumps(argv), PYTHONWARNINGS="ignore")
    return subprocess.run([VENV_PY, CHECKER], env=env, capture_output=True, text=True, timeout=3600, check=False)


def parsed(argv):
    proc = run_parser(argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["sglang_version"] == "0.5.9"
    return out["args"]


def run_batch(argvs):
    """Many command lines with one import of SGLang (importing it takes seconds)."""
    env = dict(os.environ, SGLANG_CHECK_ARGV_BATCH=json.dumps(argvs), PYTHONWARNINGS="ignore")
    proc = subprocess.run([VENV_PY, CHECKER], env=env, capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def argv_from_execstart(args):
    """The words systemd passes to the server: the ExecStart line read back (quotes, $$, %%)."""
    line = f.sglang_cmdline(f.sglang_argv(args) + ["--host", "127.0.0.1", "--port", "30000"],
                            prefix=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"])
    words = [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line)]
    assert words[:3] == ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    return words[3:]


def kimi_with(user):
    args, _env = profile_args("kimi_k25_int4_eagle3")
    return argv_from_execstart(f.sglang_args_merge(args, user))


def kimi_for_release(release, cpus=64):
    """The Kimi profile as the role renders it for a release: its flags for that release only on top."""
    with open(os.path.join(PROFILES, "kimi_k25_int4_eagle3.yml")) as handle:
        entries = yaml.safe_load(handle)["_server_profile_release_args"]
    args, _env = profile_args("kimi_k25_int4_eagle3")
    extra = f.sglang_release_args(entries, release=release, cpus=cpus, tp=args["tp"])
    return argv_from_execstart(f.sglang_args_merge(args, extra))


CASES = {
    "kimi": lambda: argv_from_execstart(profile_args("kimi_k25_int4_eagle3")[0]),
    "kimi_0.5.9": lambda: kimi_for_release("0.5.9"),
    "qwen": lambda: argv_from_execstart(profile_args("qwen35_397b_a17b_nvfp4")[0]),
    "quoted": lambda: kimi_with({"served-model-name": 'Kimi K2.5 "int4" $HOME 100%',
                                 "json-model-override-args": {"rope_scaling": {"factor": 2.0}}}),
    "unknown_flag": lambda: kimi_with({"hicache-ratoi": 4.0}),
    "wrong_type": lambda: ["--model-path", "/m", "--hicache-ratio", "four"],
}


@pytest.fixture(scope="module")
def results():
    names = list(CASES)
    outs = run_batch([CASES[n]() for n in names])
    assert len(outs) == len(names)
    return dict(zip(names, outs))


def ok(results, name):
    out = results[name]
    assert out["rc"] == 0, out["stderr"][-2000:]
    assert out["sglang_version"] == "0.5.9"
    return out["args"]


def test_kimi_on_0_5_9_loads_weights_multithreaded_and_the_real_parser_takes_it(results):
    """Issue 21: 0.5.9 loads shards one by one unless told (its loader's default, from the wheel); the profile
    turns multithreaded loading on with one thread per CPU of a rank's share, in the form the loader accepts
    (model_loader/loader.py: allowed keys enable_multithread_load, num_threads)."""
    ns = ok(results, "kimi_0.5.9")
    extra = json.loads(ns["model_loader_extra_config"])
    assert extra == {"enable_multithread_load": True, "num_threads": 8}
    assert set(extra) <= {"enable_multithread_load", "num_threads"}
    assert "--model-loader-extra-config" not in kimi_for_release("0.5.23")


def test_production_profile_parses_with_its_values(results):
    args, env = profile_args("kimi_k25_int4_eagle3")
    assert f.sglang_args_problems(args, env) == []
    ns = ok(results, "kimi")
    assert ns["tensor_parallel_size"] == 8          # --tp is argparse's unique prefix of --tp-size
    assert ns["speculative_algorithm"] == "EAGLE3"
    assert ns["speculative_draft_model_path"] == DRAFT
    assert (ns["speculative_num_steps"], ns["speculative_eagle_topk"], ns["speculative_num_draft_tokens"]) == (2, 1, 3)
    assert ns["cuda_graph_max_bs"] == 128
    assert ns["attention_backend"] == "flashinfer"
    assert ns["enable_flashinfer_allreduce_fusion"] is True
    assert ns["disable_custom_all_reduce"] is True
    assert ns["mem_fraction_static"] == 0.88
    assert ns["enable_hierarchical_cache"] is True
    assert ns["hicache_ratio"] == 4.0
    assert ns["hicache_write_policy"] == "write_through"
    assert ns["hicache_io_backend"] == "kernel"
    assert ns["model_path"] == "/models/x"
    assert (ns["host"], ns["port"]) == ("127.0.0.1", 30000)


def test_qwen_profile_parses_with_its_values(results):
    args, env = profile_args("qwen35_397b_a17b_nvfp4")
    assert f.sglang_args_problems(args, env) == []
    ns = ok(results, "qwen")
    assert ns["tensor_parallel_size"] == 8
    assert ns["quantization"] == "modelopt_fp4"
    assert ns["speculative_algorithm"] == "NEXTN"
    assert (ns["speculative_num_steps"], ns["speculative_eagle_topk"], ns["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert ns["mamba_scheduler_strategy"] == "extra_buffer"
    assert ns["reasoning_parser"] == "qwen3"
    assert ns["tool_call_parser"] == "qwen3_coder"
    assert ns["enable_hierarchical_cache"] is False


def test_quoted_values_reach_the_parser_intact(results):
    ns = ok(results, "quoted")
    assert ns["served_model_name"] == 'Kimi K2.5 "int4" $HOME 100%'
    assert json.loads(ns["json_model_override_args"]) == {"rope_scaling": {"factor": 2.0}}


def test_unknown_flag_is_rejected(results):
    assert results["unknown_flag"]["rc"] == 2
    assert "unrecognized arguments: --hicache-ratoi 4.0" in results["unknown_flag"]["stderr"]


def test_wrong_type_is_rejected(results):
    assert results["wrong_type"]["rc"] == 2
    assert "argument --hicache-ratio: invalid float value: 'four'" in results["wrong_type"]["stderr"]


def test_wrong_choice_is_rejected_with_argparse_error():
    """As the role's preflight runs it: exit status 2 and argparse's own error on stderr."""
    proc = run_parser(kimi_with({"hicache-write-policy": "bogus"}))
    assert proc.returncode == 2
    assert "error: argument --hicache-write-policy: invalid choice: 'bogus'" in proc.stderr
