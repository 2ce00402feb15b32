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
    assert result["msg"].startswith("correctness gate: 6 of 6 greedy answers differ from the baseline recorded ")
    assert "first: prompt 0, round 1: expected " in result["msg"]
    assert "sgl-project/sglang#39830" in result["msg"]
    assert state.read_text() == before   # a failing run never replaces the baseline
    # a documented tolerance: up to N differing answers pass
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="1")) as url:
        assert not gate(url, state, allowed_mismatches=6)["failed"]


def test_a_new_model_or_release_records_its_own_baseline(tmp_path):
    state = tmp_path / "answers.json"
    with standin_server(env=FAST) as url:
        gate(url, state)
    with standin_server(env=dict(FAST, STANDIN_ANSWER_SHIFT="3")) as url:
        upgraded = gate(url, state, identity=dict(IDENTITY, release="0.5.23"))
        other_prompts = _answers.gate(url, PROMPTS[:2], str(state), identity=IDENTITY, max_tokens=8)
    assert upgraded["changed"] and not upgraded["failed"]
    assert other_prompts["changed"] and not other_prompts["failed"]
    assert len(json.loads(state.read_text())["baselines"]) == 3


def test_rounds_that_disagree_on_the_first_start_record_nothing(tmp_path):
    """The cached path answering otherwise than the uncached one is the reported bug: not a baseline."""
    state = tmp_path / "answers.json"
    answers = iter(["a", "b", "c", "a", "B", "c"])
    result = _answers.gate("http://127.0.0.1:9", PROMPTS, str(state), IDENTITY, max_tokens=8,
                           asker=lambda endpoint, prompt, n: next(answers))
    assert result["failed"] and result["mismatches"] == [{"prompt": 1, "round": 2, "expected": "b", "got": "B"}]
    assert "differ from the first answers (round 1)" in result["msg"]
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
