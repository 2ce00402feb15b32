# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's benchmark gate (tasks/bench_gate.yml) on this machine (connection local) against the stand-in
SGLang server (tests/standin, a test fixture; one token per 20 ms, so 2 requests in flight give at most 100 tok/s)
with a GIVEN baseline (sglang_bench_baseline_tok_s, e.g. the operators' 759): one far above the stand-in's
ceiling is a regression that fails naming the given baseline; one far below passes."""
from __future__ import annotations

import json

import yaml

from conftest import run_play, standin_server

KEY = "gate-secret-key"


def test_given_baseline_decides_the_gate(tmp_path):
    common = {"sglang_api_key": KEY, "sglang_bench_requests": 4, "sglang_bench_concurrency": 2,
              "sglang_bench_input_len": 8, "sglang_bench_output_len": 10, "sglang_bench_threshold_pct": 10,
              "sglang_record_json_file": str(tmp_path / "no-record.json")}
    gate = {"ansible.builtin.include_role": {"name": "gpuserve.sglang.server", "tasks_from": "bench_gate.yml"}}
    with standin_server(["--api-key", KEY], {"STANDIN_TOKEN_DELAY_SECONDS": "0.02"}) as url:
        tasks = [
            dict(gate, name="Gate with a baseline far below the stand-in", vars={"sglang_bench_baseline_tok_s": 1}),
            {"name": "Keep the first result", "ansible.builtin.copy": {
                "content": "{{ _server_bench_gate | to_json }}", "dest": str(tmp_path / "pass.json"), "mode": "0600"}},
            {"name": "A regression", "block": [
                dict(gate, name="Gate with a baseline far above the stand-in",
                     vars={"sglang_bench_baseline_tok_s": 100000})],
             "rescue": [{"name": "Keep the failure", "ansible.builtin.copy": {
                 "content": "{{ ansible_failed_result.msg }}", "dest": str(tmp_path / "fail.txt"), "mode": "0600"}}]},
        ]
        play = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                                "vars": dict(common, sglang_bench_url=url), "tasks": tasks}], sort_keys=False)
        rc, out = run_play(tmp_path, play)
    assert rc == 0, out
    passed = json.loads((tmp_path / "pass.json").read_text())
    assert passed["baseline_source"] == "given (sglang_bench_baseline_tok_s)"
    assert passed["baseline_tok_s"] == 1.0 and passed["regression"] is False and 0 < passed["tok_s"] <= 2 / 0.02 * 1.02
    failed = (tmp_path / "fail.txt").read_text()
    assert failed.startswith("benchmark regression: ")
    assert "below the baseline 100000.0 tok/s (given (sglang_bench_baseline_tok_s)); allowed 10.0 %" in failed
    assert KEY not in out
