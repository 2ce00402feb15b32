# SPDX-License-Identifier: GPL-3.0-or-later
"""The model preflight (module_utils/_model_check.py, issue 24): each refusal on a directory made like the real
one (tests/standin/make_standin_model.py writes the real formats), judged by the release tables taken from the
wheels; the stand-in's safetensors files are read by the real safetensors library where a parser venv has it."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from ansible_collections.gpuserve.sglang.plugins.module_utils import _host_facts
from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check as mc
from ansible_collections.gpuserve.sglang.plugins.module_utils import _nvidia_smi
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

MAKER = os.path.join(ROOT, "tests", "standin", "make_standin_model.py")
RTX_PRO_6000 = ["12.0"] * 8   # compute capability of the reference host's GPUs (SM120)
H200 = ["9.0"] * 2            # tests/fixtures/gpu-host-texts: the lent H200s


def make(tmp_path, kind, name=None):
    path = str(tmp_path / (name or kind))
    subprocess.run(["python3", MAKER, kind, path], check=True)
    return path


def kimi_items(tmp_path):
    return [{"path": make(tmp_path, "kimi"), "role": "model", "quantization": "compressed_tensors"},
            {"path": make(tmp_path, "eagle3"), "role": "draft"}]


def test_the_stand_in_models_pass_on_both_releases(tmp_path):
    items = kimi_items(tmp_path)
    qwen = {"path": make(tmp_path, "qwen35"), "role": "model", "quantization": "modelopt_fp4",
            "files": ["hf_quant_config.json"]}
    for release in ("0.5.9", "0.5.23"):
        result = mc.check(items + [qwen], release=release, compute_caps=RTX_PRO_6000)
        assert result["problems"] == [], result
        assert result["notes"] == []
        assert [m["weights"]["headers_read"] for m in result["models"]] == [4, 1, 4]
        assert [m["quantization"] for m in result["models"]] == ["compressed_tensors", "", "modelopt_fp4"]
        assert result["table"] == "SGLang %s's table (from its wheel)" % release


def test_a_missing_shard_is_named(tmp_path):
    items = kimi_items(tmp_path)
    os.remove(os.path.join(items[0]["path"], "model-00003-of-00004.safetensors"))
    problems = mc.check(items, release="0.5.9", compute_caps=RTX_PRO_6000)["problems"]
    assert problems == ["model %s: 1 of the 4 weight files model.safetensors.index.json names are missing: "
                        "model-00003-of-00004.safetensors" % items[0]["path"]]


def test_many_missing_shards_are_counted_not_all_listed(tmp_path):
    path = make(tmp_path, "kimi")
    index = os.path.join(path, "model.safetensors.index.json")
    with open(index) as handle:
        data = json.load(handle)
    data["weight_map"].update({"t%d" % i: "model-%05d-of-00064.safetensors" % i for i in range(10)})
    with open(index, "w") as handle:
        json.dump(data, handle)
    (problem,) = mc.check([{"path": path}], release="0.5.9")["problems"]
    assert "10 of the 14 weight files" in problem and problem.endswith("and 5 more")


def test_a_truncated_shard_is_found_by_its_header(tmp_path):
    items = kimi_items(tmp_path)
    shard = os.path.join(items[0]["path"], "model-00002-of-00004.safetensors")
    size = os.path.getsize(shard)
    with open(shard, "r+b") as handle:
        handle.truncate(size - 4)
    (problem,) = mc.check(items, release="0.5.9")["problems"]
    assert "1 weight files are truncated or padded: model-00002-of-00004.safetensors (%d bytes, its header says %d)" \
        % (size - 4, size) in problem


def test_a_shard_without_the_tensors_the_index_puts_in_it(tmp_path):
    path = make(tmp_path, "kimi")
    # shard 1 replaced by shard 4's content: the right size for its own header, the wrong tensors
    shutil.copy(os.path.join(path, "model-00004-of-00004.safetensors"),
                os.path.join(path, "model-00001-of-00004.safetensors"))
    (problem,) = mc.check([{"path": path}], release="0.5.9")["problems"]
    assert "model-00001-of-00004.safetensors (lacks 2 tensors model.safetensors.index.json puts in it: " in problem


def test_an_empty_or_foreign_file_is_not_a_shard(tmp_path):
    path = make(tmp_path, "kimi")
    open(os.path.join(path, "model-00001-of-00004.safetensors"), "w").close()
    with open(os.path.join(path, "model-00002-of-00004.safetensors"), "w") as handle:
        handle.write("<html>404 from a proxy, saved as a shard</html>")
    problems = mc.check([{"path": path}], release="0.5.9")["problems"]
    assert any("1 weight files are empty: model-00001-of-00004.safetensors" in p for p in problems), problems
    assert any("model-00002-of-00004.safetensors (not a safetensors file" in p for p in problems), problems


def test_config_json_missing_or_broken(tmp_path):
    path = make(tmp_path, "kimi")
    os.rename(os.path.join(path, "config.json"), os.path.join(path, "config.json.bak"))
    assert mc.check([{"path": path}], release="0.5.9")["problems"] == ["model %s: config.json is missing" % path]
    with open(os.path.join(path, "config.json"), "w") as handle:
        handle.write("{")
    assert mc.check([{"path": path}], release="0.5.9")["problems"] == ["model %s: config.json is not JSON" % path]


def test_an_architecture_the_release_cannot_load(tmp_path):
    path = make(tmp_path, "kimi")
    config = os.path.join(path, "config.json")
    with open(config) as handle:
        data = json.load(handle)
    data["architectures"] = ["KimiK25ForConditionalGenerashun"]
    with open(config, "w") as handle:
        json.dump(data, handle)
    (problem,) = mc.check([{"path": path}], release="0.5.9")["problems"]
    assert ("architecture KimiK25ForConditionalGenerashun is not one SGLang 0.5.9 can load (%d model classes in "
            "its wheel; close: KimiK25ForConditionalGeneration" % len(RELEASES["0.5.9"]["architectures"])) in problem
    # the transformers backend loads what SGLang has no class for: not judged, said so
    result = mc.check([{"path": path, "model_impl": "transformers"}], release="0.5.9")
    assert result["problems"] == [] and "--model-impl transformers" in result["notes"][0]


def test_architectures_are_the_wheels_own():
    """Qwen3.5's causal-LM class arrived after 0.5.9 (both tables come from the wheels)."""
    assert "Qwen3_5MoeForConditionalGeneration" in RELEASES["0.5.9"]["architectures"]
    assert "Qwen3_5MoeForCausalLM" not in RELEASES["0.5.9"]["architectures"]
    assert "Qwen3_5MoeForCausalLM" in RELEASES["0.5.23"]["architectures"]
    assert "KimiK25ForConditionalGeneration" in RELEASES["0.5.9"]["architectures"]


def test_a_release_without_a_table_checks_what_it_can_and_says_so(tmp_path):
    items = kimi_items(tmp_path)
    with open(os.path.join(items[0]["path"], "config.json")) as handle:
        data = json.load(handle)
    data["architectures"] = ["SomeModelOf2027"]
    with open(os.path.join(items[0]["path"], "config.json"), "w") as handle:
        json.dump(data, handle)
    os.remove(os.path.join(items[0]["path"], "model-00001-of-00004.safetensors"))
    result = mc.check(items, release="0.5.99", compute_caps=H200)
    assert "has no release table" in result["table"]
    # the weights are still judged; the architecture is not (a newer release may load it)
    assert len(result["problems"]) == 1 and "missing: model-00001-of-00004.safetensors" in result["problems"][0]
    assert any("architecture SomeModelOf2027 not checked (no table for SGLang 0.5.99)" in n for n in result["notes"])


def test_the_quantization_the_profile_expects(tmp_path):
    qwen = make(tmp_path, "qwen35")
    (problem,) = mc.check([{"path": qwen, "quantization": "compressed_tensors"}], release="0.5.23")["problems"]
    assert problem == ("model %s: the profile expects compressed_tensors weights, hf_quant_config.json says "
                       "modelopt_fp4" % qwen)
    os.remove(os.path.join(qwen, "hf_quant_config.json"))
    problems = mc.check([{"path": qwen, "quantization": "modelopt_fp4", "files": ["hf_quant_config.json"]}],
                        release="0.5.23")["problems"]
    assert problems == ["model %s: the profile expects modelopt_fp4 weights, the model (no quantization config) "
                        "says unquantized" % qwen,
                        "model %s: the profile needs hf_quant_config.json, missing" % qwen]
    with open(os.path.join(qwen, "hf_quant_config.json"), "w") as handle:
        handle.write("not json")
    (problem,) = mc.check([{"path": qwen}], release="0.5.23")["problems"]
    assert problem == "model %s: hf_quant_config.json is not JSON" % qwen


def test_nvfp4_below_the_releases_minimum_capability(tmp_path):
    qwen = {"path": make(tmp_path, "qwen35"), "quantization": "modelopt_fp4"}
    # 0.5.9's ModelOptFp4Config.get_min_capability() is 100 (Blackwell): an H200 (9.0) is refused
    (problem,) = mc.check([qwen], release="0.5.9", compute_caps=H200)["problems"]
    assert "modelopt_fp4 needs GPUs of compute capability 10.0 or newer in SGLang 0.5.9" in problem
    assert "this host has 9.0" in problem
    # 0.5.23's is 80 (its wheel: emulated paths for older GPUs): the same H200 passes
    assert RELEASES["0.5.23"]["quant_min_capability"]["modelopt_fp4"] == 80
    assert mc.check([qwen], release="0.5.23", compute_caps=H200)["problems"] == []
    # compressed-tensors INT4 (Kimi) needs 7.0 in both
    kimi = {"path": make(tmp_path, "kimi")}
    assert mc.check([kimi], release="0.5.9", compute_caps=["6.1"])["problems"][0].endswith("this host has 6.1")


def test_nvfp4_on_sm120_needs_a_release_with_sm120_kernels(tmp_path):
    qwen = {"path": make(tmp_path, "qwen35"), "quantization": "modelopt_fp4"}
    assert RELEASES["0.5.9"]["rules"]["nvfp4_sm120"] is True
    entry = dict(RELEASES["0.5.9"], rules=dict(RELEASES["0.5.9"]["rules"], nvfp4_sm120=False))
    (problem,) = mc.check([qwen], release="0.5.9", entry=entry, compute_caps=RTX_PRO_6000)["problems"]
    assert "needs an SGLang release with SM120 kernels; SGLang 0.5.9 has none" in problem
    # the same release on Hopper+Blackwell datacenter parts (10.0) is not concerned
    assert mc.check([qwen], release="0.5.9", entry=entry, compute_caps=["10.0"])["problems"] == []


def test_no_gpus_seen_is_said(tmp_path):
    result = mc.check([{"path": make(tmp_path, "qwen35")}], release="0.5.23", compute_caps=[])
    assert result["problems"] == []
    assert result["notes"] == ["GPU compute capability not checked for modelopt_fp4: no GPUs seen (nvidia-smi)"]


def test_the_draft_model_is_checked(tmp_path):
    items = kimi_items(tmp_path)
    os.remove(os.path.join(items[1]["path"], "model.safetensors"))
    (problem,) = mc.check(items, release="0.5.9")["problems"]
    assert problem.startswith("draft model %s has no weights" % items[1]["path"])
    shutil.rmtree(items[1]["path"])
    (problem,) = mc.check(items, release="0.5.9")["problems"]
    assert problem == "Draft model directory %s does not exist" % items[1]["path"]


def test_an_index_naming_a_file_outside_the_directory(tmp_path):
    path = make(tmp_path, "kimi")
    index = os.path.join(path, "model.safetensors.index.json")
    with open(index) as handle:
        data = json.load(handle)
    data["weight_map"]["x"] = "../../etc/shadow"
    with open(index, "w") as handle:
        json.dump(data, handle)
    (problem,) = mc.check([{"path": path}], release="0.5.9")["problems"]
    assert "names a shard '../../etc/shadow' outside the directory" in problem


def test_past_the_deadline_the_rest_are_only_found_present(tmp_path):
    """Bounded in time: a fake clock that passes the deadline after two header reads."""
    path = make(tmp_path, "kimi")
    ticks = iter([0.0, 0.0, 50.0] + [500.0] * 10)   # deadline 100: 2 reads, then past it
    result = mc.check([{"path": path}], release="0.5.9", timeout=100, clock=lambda: next(ticks),
                      compute_caps=RTX_PRO_6000)
    assert result["problems"] == []
    assert result["models"][0]["weights"]["headers_read"] == 2
    assert result["notes"] == ["model %s: the headers of 2 of 4 safetensors files were read before the deadline "
                               "(sglang_model_check_timeout); the rest were only found present" % path]
    # a missing shard is still found past the deadline (every file is stat-checked)
    os.remove(os.path.join(path, "model-00004-of-00004.safetensors"))
    ticks = iter([0.0, 500.0] + [500.0] * 10)
    result = mc.check([{"path": path}], release="0.5.9", timeout=100, clock=lambda: next(ticks))
    assert "missing: model-00004-of-00004.safetensors" in result["problems"][0]


def test_deep_compares_with_hugging_faces_download_record(tmp_path):
    path = make(tmp_path, "kimi")
    meta = os.path.join(path, ".cache", "huggingface", "download")
    os.makedirs(meta)
    names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    for name in names:
        with open(os.path.join(path, name), "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        if name.startswith("model-00002"):
            digest = "0" * 64   # the download recorded another file
        with open(os.path.join(meta, name + ".metadata"), "w") as handle:
            handle.write("4b6e1f0ea5b0c1d6e0c0c7d0d7ab2a1f1d2c3b4a\n%s\n1764720000.0\n" % digest)
    os.remove(os.path.join(meta, names[3] + ".metadata"))
    result = mc.check([{"path": path}], release="0.5.9", deep=True, compute_caps=RTX_PRO_6000)
    (problem,) = result["problems"]
    assert "1 weight files differ from the sha256 Hugging Face's download recorded: model-00002-of-00004" in problem
    assert result["models"][0]["weights"]["deep"] == {"files_read": 4, "with_recorded_sha256": 3}
    assert "1 of 4 weight files have no recorded sha256" in result["notes"][0]
    # not deep: no file is read whole, nothing compared
    assert mc.check([{"path": path}], release="0.5.9")["problems"] == []


def test_host_facts_runs_the_check_with_the_installed_release(tmp_path, monkeypatch):
    """sglang_host_facts' one round trip: the release the interpreter reports judges; nvidia-smi's capabilities."""
    items = kimi_items(tmp_path)
    os.remove(os.path.join(items[0]["path"], "model-00001-of-00004.safetensors"))

    with open(os.path.join(ROOT, "tests", "fixtures", "gpu-host-texts", "host.txt")) as handle:
        text = handle.read()
    h200 = text.split("### query-gpu\n", 1)[1].split("###", 1)[0]   # the lent H200s' real query-gpu lines

    class Done:
        returncode, stdout, stderr = 0, h200.encode(), b""

    calls = []
    monkeypatch.setattr(_host_facts.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    result = _host_facts.model_check({"items": items + [{"path": "relative/path"}], "release": "0.5.9"}, "0.5.23",
                                     run=lambda argv, **kw: calls.append(argv) or Done())
    assert calls == [["/usr/bin/nvidia-smi"] + _nvidia_smi.QUERY_GPU_ARGS]   # nvidia_gpu_info's query and parser
    assert result["release"] == "0.5.23" and result["compute_caps"] == ["9.0", "9.0"]
    assert len(result["models"]) == 2   # a relative path is not read
    assert "missing: model-00001-of-00004.safetensors" in result["problems"][0]
    monkeypatch.setattr(_host_facts.shutil, "which", lambda name: None)
    assert _host_facts.model_check({"items": items}, "", run=None)["compute_caps"] == []


def _safetensors_python():
    for python in sorted(glob.glob(os.path.join(ROOT, ".cache", "sglang-parser-venv*", "bin", "python"))):
        if subprocess.run([python, "-c", "import safetensors, torch"], capture_output=True, check=False).returncode == 0:
            return python
    return None


def test_the_real_safetensors_library_agrees(tmp_path):
    """The stand-in's files load with the real safetensors library; the truncated one the check refuses, the
    library refuses too (the parser venvs of tests/sglang_parser have it, with torch's CPU build)."""
    python = _safetensors_python()
    if python is None:
        pytest.skip("no parser venv with safetensors: tests/sglang_parser/setup-venv.sh")
    path = make(tmp_path, "kimi")
    truncated = str(tmp_path / "truncated.safetensors")
    shutil.copy(os.path.join(path, "model-00002-of-00004.safetensors"), truncated)
    with open(truncated, "r+b") as handle:
        handle.truncate(os.path.getsize(truncated) - 4)
    code = ("import sys, safetensors\n"
            "for p in sys.argv[1:]:\n"
            " try:\n"
            "  with safetensors.safe_open(p, framework='pt') as f: print('ok', len(list(f.keys())))\n"
            " except Exception as e: print('refused', type(e).__name__)\n")
    shards = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    out = subprocess.run([python, "-c", code] + shards + [truncated], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["ok 2"] * 4 + ["refused SafetensorError"]
    assert mc.safetensors_header(shards[0])[0] == mc.safetensors_header(shards[0])[1]


def test_the_weight_index_is_fingerprinted(tmp_path):
    """Issue 25: the nodes of one server over several hosts must hold the same model; the index's sha256 is what
    sglang_node_fingerprint compares (with config.json's)."""
    import hashlib  # pylint: disable=import-outside-toplevel
    path = make(tmp_path, "kimi")
    with open(os.path.join(path, "model.safetensors.index.json"), "rb") as handle:
        expected = hashlib.sha256(handle.read()).hexdigest()
    found = mc.check([{"path": path, "role": "model"}], release="0.5.9", compute_caps=RTX_PRO_6000)["models"][0]
    assert found["weights"]["index_sha256"] == expected
    assert found["weights"]["files"] == 4
