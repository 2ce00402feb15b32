# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark gate (plugins/module_utils/_bench.py: gate, baseline, compare; formerly
roles/server/tasks/bench_gate.yml): which baseline counts, when a fall is a regression, and the texts that
molecule/bench_gate asserts on. The benchmark itself is a fake runner here; test_sglang_bench.py runs the real one
against a server of known pace."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _bench

SETTINGS = {"url": "http://127.0.0.1:30000", "api_key": "gate-secret", "num_requests": 8, "concurrency": 4,
            "input_len": 64, "output_len": 30, "prompt_file": "", "timeout": 60, "threshold_pct": 10,
            "baseline_tok_s": 0}


def result(tok_s, **over):
    """A result as _bench.run returns it."""
    bench = {"url": "http://127.0.0.1:30000", "model": "m", "api": "completions", "num_requests": 8,
             "concurrency": 4, "input_len": 64, "output_len": 30, "completed": 8, "errors": 0,
             "error_messages": [], "duration_s": 2.0, "output_tokens": 240, "prompt_tokens": 512,
             "output_throughput": tok_s, "request_throughput": 4.0,
             "ttft_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.5},
             "itl_ms": {"p50": 30.0, "p90": 31.0, "p99": 32.0, "mean": 30.2}, "accept_length": None,
             "summary": "8/8 requests at concurrency 4: %.1f output tok/s" % tok_s}
    bench.update(over)
    return bench


class Runner(object):
    def __init__(self, bench):
        self.bench = bench
        self.calls = []

    def __call__(self, settings):
        self.calls.append(dict(settings))
        return dict(self.bench)


def record(tmp_path, baseline=None, **extra):
    path = tmp_path / "sglang-kimi.json"
    data = {"baseline": baseline, "baseline_when": "2026-01-02T03:04:05Z", "baseline_invocation_id": "inv-1"}
    data.update(extra)
    path.write_text(json.dumps(data))
    return str(path)


def test_no_record_sets_the_baseline(tmp_path):
    out = _bench.gate(SETTINGS, str(tmp_path / "none.json"), False, runner=Runner(result(120.0)))
    assert out["ran"] is True and out["regression"] is False and out["msg"] == ""
    assert out["gate"] == {"baseline_tok_s": 0.0, "baseline_source": "none: this run sets the baseline",
                           "tok_s": 120.0, "threshold_pct": 10.0, "change_pct": None, "regression": False}
    assert out["summary_lines"][1] == ("baseline 0.0 tok/s (none: this run sets the baseline), change n/a %, "
                                       "allowed -10.0 %")


def test_recorded_baseline_with_the_same_settings_counts(tmp_path):
    path = record(tmp_path, result(100.0))
    out = _bench.gate(SETTINGS, path, False, runner=Runner(result(95.0)))
    assert out["gate"]["baseline_tok_s"] == 100.0
    assert out["gate"]["baseline_source"] == "recorded 2026-01-02T03:04:05Z (invocation inv-1)"
    assert out["gate"]["change_pct"] == -5.0 and out["regression"] is False
    assert out["bench"]["output_throughput"] == 95.0


@pytest.mark.parametrize("other", [{"concurrency": 30}, {"num_requests": 90}, {"input_len": None},
                                   {"output_len": 256}, {"api": "chat"}])
def test_recorded_baseline_with_other_settings_is_none(tmp_path, other):
    path = record(tmp_path, result(500.0, **other))
    out = _bench.gate(SETTINGS, path, False, runner=Runner(result(95.0)))
    assert out["gate"]["baseline_tok_s"] == 0.0 and out["gate"]["change_pct"] is None
    assert out["gate"]["baseline_source"] == ("none: this run sets the baseline (the recorded one used other "
                                              "benchmark settings)")
    assert out["regression"] is False


def test_a_recorded_baseline_without_a_setting_is_none(tmp_path):
    """A record written before the api setting existed: not the same settings (as the YAML compared)."""
    old = result(500.0)
    del old["api"]
    out = _bench.gate(SETTINGS, record(tmp_path, old), False, runner=Runner(result(95.0)))
    assert out["gate"]["baseline_source"].startswith("none: this run sets the baseline (the recorded one")


def test_given_baseline_wins_over_the_recorded_one(tmp_path):
    path = record(tmp_path, result(100.0))
    out = _bench.gate(dict(SETTINGS, baseline_tok_s=200), path, False, runner=Runner(result(150.0)))
    assert out["gate"]["baseline_tok_s"] == 200.0
    assert out["gate"]["baseline_source"] == "given (sglang_bench_baseline_tok_s)"
    assert out["gate"]["change_pct"] == -25.0 and out["regression"] is True


@pytest.mark.parametrize("tok_s, threshold, regression", [(90.0, 10, False), (89.9, 10, True), (120.0, 10, False),
                                                          (75.0, 25, False), (74.0, 25, True), (99.9, 0, True)])
def test_regression_is_a_fall_beyond_the_threshold(tmp_path, tok_s, threshold, regression):
    path = record(tmp_path, result(100.0))
    out = _bench.gate(dict(SETTINGS, threshold_pct=threshold), path, False, runner=Runner(result(tok_s)))
    assert out["regression"] is regression and out["gate"]["regression"] is regression
    assert bool(out["msg"]) is regression


def test_the_regression_message_and_summary_lines_are_the_roles(tmp_path):
    path = record(tmp_path, result(120.123))
    out = _bench.gate(SETTINGS, path, False, runner=Runner(result(24.5)))
    assert out["gate"]["change_pct"] == -79.6
    assert out["msg"] == (
        "benchmark regression: 24.5 output tok/s at concurrency 4 is 79.6 % below the baseline 120.123 tok/s "
        "(recorded 2026-01-02T03:04:05Z (invocation inv-1)); allowed 10.0 %. "
        "8/8 requests at concurrency 4: 24.5 output tok/s")
    assert out["summary_lines"] == [
        "8/8 requests at concurrency 4: 24.5 output tok/s",
        "baseline 120.123 tok/s (recorded 2026-01-02T03:04:05Z (invocation inv-1)), change -79.6 %, allowed -10.0 %"]


def test_an_unchanged_host_with_a_baseline_is_not_benchmarked(tmp_path):
    runner = Runner(result(1.0))
    out = _bench.gate(SETTINGS, record(tmp_path, result(100.0)), True, runner=runner)
    assert runner.calls == []
    assert out == {"ran": False, "bench": {}, "gate": {}, "regression": False, "msg": "", "summary_lines": []}


@pytest.mark.parametrize("baseline", [None, {}])
def test_an_unchanged_host_without_a_baseline_is_benchmarked(tmp_path, baseline):
    runner = Runner(result(100.0))
    out = _bench.gate(SETTINGS, record(tmp_path, baseline), True, runner=runner)
    assert len(runner.calls) == 1 and out["ran"] is True
    assert out["gate"]["baseline_source"] == "none: this run sets the baseline"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", ""])
def test_a_broken_twin_means_no_baseline_not_a_failure(tmp_path, text):
    path = tmp_path / "sglang-kimi.json"
    path.write_text(text)
    out = _bench.gate(SETTINGS, str(path), True, runner=Runner(result(100.0)))
    assert out["ran"] is True and out["gate"]["baseline_source"] == "none: this run sets the baseline"


def test_run_settings_passes_the_module_options(monkeypatch, tmp_path):
    seen = {}

    def fake_run(url, **kw):
        seen.update(kw, url=url)
        return result(10.0)

    monkeypatch.setattr(_bench, "run", fake_run)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("one\n\ntwo\n")
    _bench.run_settings(dict(SETTINGS, prompt_file=str(prompts), timeout="60"))
    assert seen["url"] == "http://127.0.0.1:30000" and seen["api_key"] == "gate-secret"
    assert (seen["num_requests"], seen["concurrency"], seen["input_len"], seen["output_len"]) == (8, 4, 64, 30)
    assert seen["prompt_file_lines"] == ["one", "two"] and seen["timeout"] == 60.0
    assert seen["api"] == "completions" and seen["metrics"] is True
    _bench.run_settings(SETTINGS)
    assert seen["prompt_file_lines"] is None


def test_run_settings_fails_as_the_module_does(monkeypatch, tmp_path):
    monkeypatch.setattr(_bench, "run", lambda url, **kw: result(10.0, errors=2, error_messages=["HTTP 500: x"] * 2))
    with pytest.raises(_bench.BenchError) as err:
        _bench.run_settings(SETTINGS)
    assert str(err.value) == "2 of 8 benchmark requests failed: HTTP 500: x; HTTP 500: x"
    assert err.value.result["errors"] == 2
    assert _bench.run_settings(dict(SETTINGS, max_errors=-1))["errors"] == 2
    with pytest.raises(_bench.BenchError, match="cannot read prompt_file /nonexistent"):
        _bench.run_settings(dict(SETTINGS, prompt_file="/nonexistent"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(_bench.BenchError, match="prompt_file .* has no prompts"):
        _bench.run_settings(dict(SETTINGS, prompt_file=str(empty)))


def test_a_benchmark_that_cannot_run_raises(tmp_path):
    def refused(settings):
        raise _bench.BenchError("the server at x refused the API key (HTTP 401 on /v1/models): wrong key")

    with pytest.raises(_bench.BenchError, match="refused the API key"):
        _bench.gate(SETTINGS, str(tmp_path / "none.json"), False, runner=refused)
