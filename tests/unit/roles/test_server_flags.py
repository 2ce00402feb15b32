# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's entry point `flags` (tasks_from: flags) on this machine (connection local, read-only):
its argument_specs refuse an unknown profile, and the one public fact sglang_plan_inputs holds the memory plan's
inputs read from the effective flags (profile under sglang_args, aliases folded, SGLang's defaults)."""
from __future__ import annotations

import json
import os
import re

import yaml

from conftest import ROOT, run_play, run_play_batch

ROLE = os.path.join(ROOT, "roles", "server")

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Flags only
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: flags
        public: true   # the effective flags are a role var (_server_args), read here after the role
    - name: Keep the plan inputs (or the effective flags)
      ansible.builtin.copy:
        content: "{{ (_server_args if out_what | default('') == 'args' else sglang_plan_inputs) | to_json }}"
        dest: "{{ out_file }}"
        mode: "0644"
"""


def run_flags(tmp_path, extra_vars):
    out_file = tmp_path / "inputs.json"
    rc, out = run_play(tmp_path, PLAY, ["out_file=" + str(out_file)] + list(extra_vars))
    return rc, out, (json.loads(out_file.read_text()) if out_file.exists() else None)


def test_flags_entry_point_has_the_profile_choices_of_main():
    specs = yaml.safe_load(open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8"))["argument_specs"]
    assert specs["flags"]["options"]["sglang_profile"] == specs["main"]["options"]["sglang_profile"]
    with open(os.path.join(ROLE, "tasks", "flags.yml"), encoding="utf-8") as handle:
        text = handle.read()
    for profile in specs["main"]["options"]["sglang_profile"]["choices"]:
        assert profile not in text  # the list of profiles lives in argument_specs only


def test_production_profile_plan_inputs(tmp_path):
    rc, out, inputs = run_flags(tmp_path, [])
    assert rc == 0, out[-3000:]
    assert inputs == {"tp": 8, "mem_fraction_static": 0.88, "hicache": True, "ratio": 4.0, "size_gb": 0,
                      "page_size": 1, "kv_dtype": "auto", "model_path": "/models/Kimi-K2.5-INT4",
                      "draft_model_path": "/models/Kimi-K2.5-EAGLE3", "hybrid": dict(NO_HYBRID, speculative_num_draft_tokens=3)}


NO_HYBRID = {"speculative_num_draft_tokens": 0, "max_running_requests": None, "max_mamba_cache_size": None,
             "mamba_full_memory_ratio": None, "extra_buffer": False, "disable_radix_cache": False, "context_len": None}


def test_qwen_profile_plan_inputs_carry_the_hybrid_settings(tmp_path):
    """issue 24: the hybrid model's serving settings reach the memory plan (option hybrid)."""
    rc, out, inputs = run_flags(tmp_path, ['{"sglang_profile": "qwen35_397b_a17b_nvfp4", "sglang_model_path": "/q",'
                                           ' "sglang_args": {"max-running-requests": 64, "mamba-full-memory-ratio": 0.5}}'])
    assert rc == 0, out[-3000:]
    assert inputs["hybrid"] == dict(NO_HYBRID, speculative_num_draft_tokens=4, extra_buffer=True,
                                    max_running_requests=64, mamba_full_memory_ratio=0.5)
    assert inputs["hicache"] is False and inputs["mem_fraction_static"] == 0.85


def test_custom_profile_aliases_and_defaults(tmp_path):
    rc, out, inputs = run_flags(tmp_path, ['{"sglang_profile": "custom", "sglang_model_path": "/m",'
                                           ' "sglang_args": {"tp-size": 2, "hicache-size": 30, "page_size": 64,'
                                           ' "enable-hierarchical-cache": true, "kv-cache-dtype": "fp8_e4m3"}}'])
    assert rc == 0, out[-3000:]
    assert inputs == {"tp": 2, "mem_fraction_static": 0.88, "hicache": True, "ratio": 2.0, "size_gb": 30,
                      "page_size": 64, "kv_dtype": "fp8_e4m3", "model_path": "/m", "draft_model_path": "",
                      "hybrid": NO_HYBRID}


BATCH_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Flags only
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: flags
    - name: Say the plan inputs
      ansible.builtin.debug:
        msg: "PLAN={{ sglang_plan_inputs | to_json }}"
"""


def test_a_flag_left_out_takes_sglang_s_default_for_the_release_and_the_planning_assumption_where_sglang_computes_it(
        tmp_path):
    """Issue 39 (one table of SGLang's defaults): tp, HiCache, the HiCache size, the KV dtype and the hybrid settings
    are SGLang's own for the host's release (else sglang_version's, else the newest table's: filter sglang_defaults);
    mem-fraction-static, page-size and (from 0.5.18) hicache-ratio, which SGLang computes at start-up, the
    collection's planning assumptions (0.88, 1, 2.0). The same numbers the literals gave for every release."""
    base = {"sglang_profile": "custom", "sglang_model_path": "/m"}
    cases = {"host 0.5.9": {"_server_host": {"sglang_release": "0.5.9"}},
             "host 0.5.17": {"_server_host": {"sglang_release": "0.5.17"}},
             "host 0.5.23": {"_server_host": {"sglang_release": "0.5.23"}},
             "no SGLang on the host, sglang_version 0.5.18": {"_server_host": {"sglang_release": ""},
                                                              "sglang_version": "0.5.18"},
             "nothing known": {}}
    results = run_play_batch(tmp_path, BATCH_PLAY, {case: dict(base, **extra) for case, extra in cases.items()})
    for case, (rc, text) in results.items():
        assert rc == 0, (case, text[-3000:])
        inputs = json.loads(re.search(r"^PLAN=(.*)$", text, re.M).group(1))
        assert inputs == {"tp": 1, "mem_fraction_static": 0.88, "hicache": False, "ratio": 2.0, "size_gb": 0,
                          "page_size": 1, "kv_dtype": "auto", "model_path": "/m", "draft_model_path": "",
                          "hybrid": NO_HYBRID}, case


def test_unknown_profile_refused_by_the_entry_points_argument_specs(tmp_path):
    rc, out, inputs = run_flags(tmp_path, ["sglang_profile=bogus"])
    assert rc != 0 and inputs is None
    assert "Validating arguments against arg spec 'flags'" in out
    assert "value of sglang_profile must be one of: kimi_k25_int4_eagle3, qwen35_397b_a17b_nvfp4, custom, got: bogus" in out


def test_secret_looking_env_value_stays_out_of_the_output_at_vvv(tmp_path, monkeypatch):
    """A token in sglang_env (HF_TOKEN) is passed to the server, but no task of the flags entry point prints it,
    even at -vvv (issue 14: secrets never reach logs)."""
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "3")
    secret = "hf-" + "verysecret-4242"
    rc, out, inputs = run_flags(tmp_path, [json.dumps({"sglang_env": {"HF_TOKEN": secret, "NCCL_DEBUG": "WARN"}})])
    assert rc == 0, out
    assert inputs is not None
    # the environment is a role var (_server_env), in no fact and no task's output
    assert "HF_TOKEN" not in out and secret not in out


def test_a_prefill_server_gets_its_mode_and_bootstrap_port_and_a_bad_mode_is_refused(tmp_path):
    """issue 25: the role's variables become SGLang's PD flags, first after the model; argument_specs refuse a mode
    SGLang does not have before anything is computed."""
    out_file = tmp_path / "args.json"
    rc, out = run_play(tmp_path, PLAY, ["out_file=" + str(out_file), "out_what=args", "sglang_disaggregation_mode=prefill",
                                        "sglang_disaggregation_bootstrap_port=9100"])
    assert rc == 0, out[-3000:]
    args = json.loads(out_file.read_text())
    assert list(args)[:3] == ["model-path", "disaggregation-mode", "disaggregation-bootstrap-port"]
    assert args["disaggregation-mode"] == "prefill" and args["disaggregation-bootstrap-port"] == 9100
    out_file.unlink()
    rc, out = run_play(tmp_path, PLAY, ["out_file=" + str(out_file), "out_what=args", "sglang_disaggregation_mode=both"])
    assert rc != 0 and not out_file.exists()
    assert "sglang_disaggregation_mode" in out and "prefill" in out, out[-3000:]


def test_a_secret_flag_value_reaches_the_flags_but_not_the_output(tmp_path, monkeypatch):
    """The entry point's task returns the effective flags (the role's _server_args read them); where a flag's
    value is a secret (a URL with a password), its result is not shown, even at -vvv, and the flags still hold it."""
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "3")
    secret = "pw" + "-verysecret-4242"
    out_file = tmp_path / "args.json"
    value = "redis://u:%s@cache:6379" % secret
    rc, out = run_play(tmp_path, PLAY, ["out_file=" + str(out_file), "out_what=args",
                                        json.dumps({"sglang_args": {"hicache-storage-backend-extra-config": value}})])
    assert rc == 0, out[-3000:]
    assert json.loads(out_file.read_text())["hicache-storage-backend-extra-config"] == value
    assert secret not in out.replace(str(out_file), "")


def test_a_flag_value_with_a_newline_still_gives_the_plan_inputs(tmp_path):
    """The entry point makes no command line of a word with control characters (the preflight refuses it, naming
    sglang_args' flag: molecule/server's bad input); the plan's inputs are there for the preflight role."""
    rc, out, inputs = run_flags(tmp_path, [json.dumps({"sglang_args": {"lora-paths": ["x\n", "ExecStartPre=+/bin/sh"]}})])
    assert rc == 0, out[-3000:]
    assert inputs["tp"] == 8
