# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each profile, as the role renders it for each release, through that release's REAL argument parser (issue 21).

The venvs come from tests/sglang_parser/setup-venv.sh (.cache/sglang-parser-venv for 0.5.9,
.cache/sglang-parser-venv-0.5.23). The role renders a profile's flags, then its flags for that release only
(_server_profile_release_args, by the rules of the release table taken from each wheel), as the server role's
preflight does with the release the unit's interpreter has.
"""
from __future__ import annotations

import json
import os
import subprocess
import types

import pytest
import yaml

from conftest import ROOT
from test_sglang_real_parser import CHECKER, PROFILES, argv_from_execstart, f, profile_args

VENVS = {"0.5.9": os.path.join(ROOT, ".cache", "sglang-parser-venv"),
         "0.5.23": os.path.join(ROOT, ".cache", "sglang-parser-venv-0.5.23")}
PROFILE_NAMES = ["kimi_k25_int4_eagle3", "qwen35_397b_a17b_nvfp4"]


def _batch(release, argvs):
    """Many command lines through one import of that release's SGLang (importing it takes seconds)."""
    python = os.path.join(VENVS[release], "bin", "python")
    if not (os.path.exists(python) and os.path.exists(os.path.join(VENVS[release], ".gpuserve-parser-venv"))):
        pytest.skip("no SGLang %s parser venv: build it with tests/sglang_parser/setup-venv.sh" % release)
    env = dict(os.environ, SGLANG_CHECK_ARGV_BATCH=json.dumps(argvs), PYTHONWARNINGS="ignore")
    proc = subprocess.run([python, CHECKER], env=env, capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


_CACHE = {}


def parse(release, argv):
    """(returncode, stderr, parsed output) of one command line, from one batch per release."""
    if release not in _CACHE:
        cases = [rendered(p, release, flags) for p in PROFILE_NAMES for flags in (True, False)]
        _CACHE[release] = dict((json.dumps(c), out) for c, out in zip(cases, _batch(release, cases)))
    key = json.dumps(argv)
    out = _CACHE[release][key] if key in _CACHE[release] else _batch(release, [argv])[0]
    return types.SimpleNamespace(returncode=out["rc"], stderr=out.get("stderr", ""),
                                 stdout=json.dumps({"sglang_version": out.get("sglang_version"), "args": out.get("args")}))


def rendered(profile, release, with_release_args=True, cpus=64):
    with open(os.path.join(PROFILES, profile + ".yml")) as handle:
        entries = yaml.safe_load(handle).get("_server_profile_release_args") or []
    args, _env = profile_args(profile)
    if with_release_args:
        args = f.sglang_args_merge(args, f.sglang_release_args(entries, release=release, cpus=cpus, tp=args["tp"]))
    return argv_from_execstart(args)


@pytest.mark.parametrize("release", sorted(VENVS))
@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_every_profile_parses_with_the_real_parser_of_every_release(profile, release):
    proc = parse(release, rendered(profile, release))
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = json.loads(proc.stdout)
    assert out["sglang_version"] == release
    args = out["args"]
    assert args.get("tp_size", args.get("tensor_parallel_size")) == 8   # 0.5.9 stores --tp as tensor_parallel_size
    if release == "0.5.23":
        # the split flag, with the profile's value
        assert args["cuda_graph_max_bs_decode"] == 128
    else:
        assert args["cuda_graph_max_bs"] == 128


def test_without_its_release_flags_0_5_23_refuses_the_profiles_cuda_graph_flag():
    """What the profiles did before: 0.5.23 exits at start-up on --cuda-graph-max-bs (ambiguous prefix)."""
    proc = parse("0.5.23", rendered("kimi_k25_int4_eagle3", "0.5.23", with_release_args=False))
    assert proc.returncode == 2
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode" in proc.stderr


def test_qwen_on_0_5_23_keeps_its_mamba_strategy_under_the_new_name():
    proc = parse("0.5.23", rendered("qwen35_397b_a17b_nvfp4", "0.5.23"))
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert json.loads(proc.stdout)["args"]["mamba_radix_cache_strategy"] == "extra_buffer"
    old = parse("0.5.23", rendered("qwen35_397b_a17b_nvfp4", "0.5.23", with_release_args=False))
    assert old.returncode == 2


def test_kimi_on_0_5_23_uses_the_fusion_backend_and_leaves_loading_to_the_release_default():
    proc = parse("0.5.23", rendered("kimi_k25_int4_eagle3", "0.5.23"))
    assert proc.returncode == 0, proc.stderr[-1500:]
    args = json.loads(proc.stdout)["args"]
    assert args["flashinfer_allreduce_fusion_backend"] == "auto" and args["enable_flashinfer_allreduce_fusion"] is False
    assert args["model_loader_extra_config"] == "{}"
    assert args["hicache_ratio"] == 4.0 and args["enable_hierarchical_cache"] is True
