# SPDX-License-Identifier: GPL-3.0-or-later
"""The correctness gate (module_utils/_answers.py, module sglang_answers; issue 24): over HTTP against the stand-in
server (tests/standin: greedy answers that follow from the prompt; STANDIN_ANSWER_SHIFT makes it answer
differently), the baselines file it owns, and the module's failure."""
from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import standin_server
from ansible_collections.gpuserve.sglang.plugins.module_utils import _answers

PROMPTS = ["The capital of France is", "def fibonacci(n):", "List the first five prime numbers:"]
IDENTITY = {"model": "/models/Kimi-K2.5-INT4", "release": "0.5.9", "config_sha256": "ab" * 32}
FAST = {"STANDIN_TOKEN_DELAY_SECONDS": "0"}


def gate(url, state, **kw):
    args = dict(identity=IDENTITY, max_tokens=8, repeat=2)
    args.update(kw)
    return _answers.gate(url, PROMPTS, str(state), **args)


def test_first_start_records_then_the_same_answers_pass(tmp_path):
    state = tmp_path / "sglang-kimi.answers.json"
    with standin_server(env=FAST) as url:
        first = gate(url, state, invocation_id="inv-1")
        second = gate(url, state, invocation_id="inv-2")
    assert first["changed"] and not first["failed"]
    assert first["baseline"].startswith("recorded now")
    assert not second["changed"] and not second["failed"] and second["mismatches"] == []
    assert second["baseline"].endswith("(invocation inv-1)")
    assert second["answers_sha256"] == first["answers_sha256"]
    data = json.loads(state.read_text())
    (entry,) = data["baselines"].values()
    assert entry["identity"] == IDENTITY and entry["invocation_id"] == "inv-1" and len(entry["answers"]) == 3
    assert len(set(entry["answers"])) == 3   # the stand-in's answers follow from the prompt
    assert stat.S_IMODE(os.stat(str(state)).st_mode) == 0o600


def test_changed_answers_fail_the_gate_naming_the_first(tmp_path):
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        gate(url, state)
    before = state.read_text()
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="1")) as url:
        result = gate(url, state)
    assert result["failed"] and not result["changed"]
    assert len(result["mismatches"]) == 6   # 3 prompts x 2 rounds
    assert result["msg"].startswith("correctness gate: 3 of 3 prompts answer otherwise than the baseline recorded ")
    assert "(6 answers over 2 rounds differ)" in result["msg"]
    assert "possible live traffic" in result["msg"]
    assert "first: prompt 0, round 1: expected " in result["msg"]
    assert "sgl-project/sglang#39830" in result["msg"]
    assert state.read_text() == before   # a failing run never replaces the baseline
    # a documented tolerance: up to N differing prompts pass
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="1")) as url:
        assert gate(url, state, allowed_mismatches=2)["failed"]
        assert not gate(url, state, allowed_mismatches=3)["failed"]


def test_a_new_model_flags_or_prompts_record_their_own_baseline(tmp_path):
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        gate(url, state)
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="3")) as url:
        other_model = gate(url, state, identity=dict(IDENTITY, config_sha256="cd" * 32))
        other_tp = gate(url, state, identity=dict(IDENTITY, flags=_answers.output_flags({"tp-size": 4})))
        other_prompts = _answers.gate(url, PROMPTS[:2], str(state), identity=IDENTITY, max_tokens=8)
    for result in (other_model, other_tp, other_prompts):
        assert result["changed"] and not result["failed"]
    assert len(json.loads(state.read_text())["baselines"]) == 4


def test_the_identity_holds_the_flags_that_change_greedy_output():
    args = {"model-path": "/m", "tp-size": 8, "kv-cache-dtype": "fp8_e4m3", "attention-backend": "fa3",
            "quantization": "fp8", "dtype": "bfloat16", "mem-fraction-static": 0.9, "hicache-ratio": 2,
            "enable-deterministic-inference": True, "enable-metrics": True}
    assert _answers.output_flags(args) == {"tp-size": 8, "kv-cache-dtype": "fp8_e4m3", "attention-backend": "fa3",
                                           "quantization": "fp8", "dtype": "bfloat16",
                                           "enable-deterministic-inference": True}
    base = dict(IDENTITY, flags=_answers.output_flags(args))
    for name, value in (("tp-size", 4), ("kv-cache-dtype", "auto"), ("attention-backend", "flashinfer"),
                        ("quantization", None), ("dtype", "float16")):
        changed = dict(base, flags=_answers.output_flags(dict(args, **{name: value})))
        assert _answers.baseline_key(changed, PROMPTS, 8) != _answers.baseline_key(base, PROMPTS, 8), name
    # a tuning flag (memory, HiCache ratio) keeps the key: its answers are compared
    tuned = dict(base, flags=_answers.output_flags(dict(args, **{"mem-fraction-static": 0.8, "hicache-ratio": 4})))
    assert _answers.baseline_key(tuned, PROMPTS, 8) == _answers.baseline_key(base, PROMPTS, 8)


def test_a_new_release_is_compared_with_the_last_releases_answers(tmp_path):
    """Issue 41 (fails on 59633b9: a new release recorded its own baseline on its first start, so a release that
    answers wrongly passed)."""
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        gate(url, state)
        carried = gate(url, state, identity=dict(IDENTITY, release="0.5.23"))
    assert not carried["failed"] and carried["changed"] and carried["baseline"].startswith("carried: release 0.5.23")
    (entry,) = json.loads(state.read_text())["baselines"].values()
    assert entry["release"] == "0.5.23" and entry["previous_release"] == "0.5.9"
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="3")) as url:
        wrong = gate(url, state, identity=dict(IDENTITY, release="0.5.24"))
        assert wrong["failed"] and "by release 0.5.23" in wrong["msg"]
        assert "sglang_answers_accept_release: '0.5.24'" in wrong["msg"]
        # accepting another release does not accept this one
        assert gate(url, state, identity=dict(IDENTITY, release="0.5.24"), accept_release="0.5.25")["failed"]
        accepted = gate(url, state, identity=dict(IDENTITY, release="0.5.24"), accept_release="0.5.24")
        assert not accepted["failed"] and accepted["changed"] and accepted["accepted_release"] == "0.5.24"
        assert not gate(url, state, identity=dict(IDENTITY, release="0.5.24"))["failed"]
    # the same release answering otherwise is never accepted (the bug class of the gate)
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="5")) as url:
        assert gate(url, state, identity=dict(IDENTITY, release="0.5.24"), accept_release="0.5.24")["failed"]


def test_one_flipped_answer_counts_once_over_the_rounds(tmp_path):
    """Issue 41 defect 3 (fails on 59633b9: (prompt, round) pairs were counted, so with 2 rounds one flipped answer
    counted twice and allowed_mismatches: 1 never tolerated one answer)."""
    state = tmp_path / "answers.json"
    good = iter(["a", "b", "c"] * 2)
    _answers.gate("http://127.0.0.1:9", PROMPTS, str(state), IDENTITY, asker=lambda e, p, n: next(good))
    flipped = iter(["a", "B", "c"] * 2)
    result = _answers.gate("http://127.0.0.1:9", PROMPTS, str(state), IDENTITY, allowed_mismatches=1,
                           asker=lambda e, p, n: next(flipped))
    assert not result["failed"] and len(result["mismatches"]) == 2


def test_the_host_tier_round_evicts_the_gpu_tier_then_asks_again(tmp_path):
    """Issue 41: with HiCache a round reads the host tier: distinct prefixes of 1.25 x the GPU KV pool (read from
    /get_server_info) pushed through after the rounds, then the same prompts; a wrong answer there fails."""
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        pool = _answers.kv_pool_tokens(_answers.Endpoint(url))
        seen = []
        result = gate(url, state, host_tier=True, evict_chunk_tokens=max(16, pool // 8),
                      evicter=lambda endpoint, tokens, chunk: seen.append((tokens, chunk)) or _answers.evict(
                          endpoint, min(tokens, 4 * chunk), chunk))
    assert pool and seen == [(int(pool * 1.25), max(16, pool // 8))]
    assert result["host_tier_round"] and result["repeat"] == 3 and not result["failed"]
    answers = iter(["a", "b", "c", "a", "b", "c", "a", "WRONG", "c"])
    bad = _answers.gate("http://127.0.0.1:9", PROMPTS, str(tmp_path / "b.json"), IDENTITY, host_tier=True,
                        evict_tokens=10, asker=lambda e, p, n: next(answers), evicter=lambda e, t, c: 1)
    assert bad["failed"] and bad["mismatches"] == [{"prompt": 1, "round": "host tier", "expected": "b", "got": "WRONG"}]


def test_the_result_says_under_which_conditions_the_gate_ran(tmp_path):
    with standin_server(env=FAST) as url:
        assert gate(url, tmp_path / "a.json", conditions="drained")["conditions"] == "drained"
        with pytest.raises(_answers.AnswersError, match="conditions must be one of"):
            gate(url, tmp_path / "a.json", conditions="quiet")


def test_rounds_that_disagree_on_the_first_start_record_nothing(tmp_path):
    """The cached path answering otherwise than the uncached one is the reported bug: not a baseline."""
    state = tmp_path / "answers.json"
    answers = iter(["a", "b", "c", "a", "B", "c"])
    result = _answers.gate("http://127.0.0.1:9", PROMPTS, str(state), IDENTITY, max_tokens=8,
                           asker=lambda endpoint, prompt, n: next(answers))
    assert result["failed"] and result["mismatches"] == [{"prompt": 1, "round": 2, "expected": "b", "got": "B"}]
    assert "answer otherwise than the first answers (round 1)" in result["msg"]
    assert not state.exists()


def test_check_mode_records_nothing(tmp_path):
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        result = gate(url, state, check_mode=True)
    assert result["changed"] and not state.exists()


def test_the_key_is_sent_and_a_wrong_key_is_named(tmp_path):
    state = tmp_path / "answers.json"
    with standin_server(args=["--api-key", "sk-answers-1"], env=FAST) as url:
        assert not gate(url, state, api_key="sk-answers-1")["failed"]
        with pytest.raises(_answers.AnswersError, match="refused the API key"):
            gate(url, state, api_key="wrong")


def test_a_foreign_baselines_file_is_refused_not_overwritten(tmp_path):
    state = tmp_path / "answers.json"
    state.write_text("[1, 2]")
    with standin_server(env=FAST) as url:
        with pytest.raises(_answers.AnswersError, match="not this collection's format"):
            gate(url, state)
    state.write_text("{")
    with standin_server(env=FAST) as url:
        with pytest.raises(_answers.AnswersError, match="not JSON"):
            gate(url, state)
    assert state.read_text() == "{"


def test_unreachable_server(tmp_path):
    with pytest.raises(_answers.AnswersError, match="cannot reach the server"):
        _answers.gate("http://127.0.0.1:9", PROMPTS, str(tmp_path / "a.json"), IDENTITY)
