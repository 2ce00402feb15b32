# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The correctness gate (issue 24): a fixed set of prompts answered with greedy decoding after each verified start,
compared with the answers recorded at the first verified start of the same model and release.

The known failures of this model class are wrong answers at full speed (sgl-project/sglang#39830, Sep 2026: wrong
output from host-tier cache hits on a hybrid model on an RTX PRO 6000), which the throughput gate cannot see. So:

- each prompt is sent to SGLang's native ``/generate`` with ``temperature 0`` and ``max_new_tokens`` N, one request
  at a time (batch size 1: SGLang's greedy decoding is reproducible there without ``--enable-deterministic-inference``),
  and ``repeat`` times (default 2): the second answer comes through the radix cache (and HiCache's host tier where it
  holds the prefix), the path of the reported bug, and must match too;
- the baseline is keyed by what must give the same answers: the identity the role passes (model path, SGLang
  release, the model's config.json fingerprint) plus the prompts and N. A new model or release is a new key: its
  first verified start records it; a changed flag, HiCache ratio, NCCL or driver keeps the key and is compared;
- exact text match; ``allowed_mismatches`` (default 0) answers may differ (documented tolerance for operators who
  accept rare greedy ties flipping on long answers).

This file is the one owner of the on-host baselines file (JSON, written atomically, root-only): ``{"version": 1,
"baselines": {key: {"identity", "prompts_sha256", "max_tokens", "answers", "when", "invocation_id"}}}``.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time

from ansible.module_utils.six.moves import http_client

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic
from ansible_collections.gpuserve.sglang.plugins.module_utils._bench import Endpoint

VERSION = 1
SHOWN = 120   # characters of an answer shown in a failure


class AnswersError(Exception):
    """The gate could not be run (server unreachable, key refused, a state file it cannot read)."""


def prompts_sha256(prompts, max_tokens):
    return hashlib.sha256(json.dumps({"prompts": list(prompts), "max_tokens": int(max_tokens)},
                                     sort_keys=True).encode("utf-8")).hexdigest()


def baseline_key(identity, prompts, max_tokens):
    """One key per (identity, prompts, N): the sha256 of their canonical JSON, short."""
    return hashlib.sha256(json.dumps({"identity": identity, "prompts": prompts_sha256(prompts, max_tokens)},
                                     sort_keys=True).encode("utf-8")).hexdigest()[:24]


def ask(endpoint, prompt, max_tokens):
    """One greedy answer from /generate (the text SGLang returns)."""
    body = json.dumps({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": int(max_tokens)},
                       "stream": False})
    conn = endpoint.connection()
    try:
        conn.request("POST", endpoint.prefix + "/generate", body=body,
                     headers=endpoint.headers({"Content-Type": "application/json"}))
        resp = conn.getresponse()
        status, text = resp.status, resp.read().decode("utf-8", "replace")
    except (socket.error, http_client.HTTPException) as exc:
        raise AnswersError("cannot reach the server at %s/generate: %s" % (endpoint.base_url, exc))
    finally:
        conn.close()
    if status in (401, 403):
        raise AnswersError("the server at %s refused the API key (HTTP %d on /generate)" % (endpoint.base_url, status))
    if status != 200:
        raise AnswersError("HTTP %d on %s/generate: %s" % (status, endpoint.base_url, text[:200]))
    try:
        answer = json.loads(text)
    except ValueError:
        raise AnswersError("%s/generate answered something that is not JSON: %r" % (endpoint.base_url, text[:200]))
    if isinstance(answer, list):   # /generate with a list of prompts answers a list
        answer = answer[0] if answer else {}
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise AnswersError("%s/generate answered without a text: %r" % (endpoint.base_url, text[:200]))
    return answer["text"]


def read_state(path):
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return {"version": VERSION, "baselines": {}}
    except (IOError, OSError) as exc:
        raise AnswersError("cannot read the answers baselines %s: %s" % (path, exc.strerror))
    except (ValueError, UnicodeDecodeError):
        raise AnswersError("the answers baselines %s are not JSON: move it away to record new baselines" % path)
    if not isinstance(data, dict) or not isinstance(data.get("baselines"), dict):
        raise AnswersError("the answers baselines %s are not this collection's format: move it away" % path)
    return data


def _shown(text):
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def compare(expected, got_rounds, allowed_mismatches=0):
    """Mismatches [{prompt, round, expected, got}] of every round against the recorded answers."""
    mismatches = []
    for round_no, got in enumerate(got_rounds, start=1):
        for index, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                mismatches.append({"prompt": index, "round": round_no, "expected": _shown(want), "got": _shown(have)})
    return mismatches, len(mismatches) > int(allowed_mismatches)


def gate(url, prompts, state_file, identity, api_key="", max_tokens=32, repeat=2, allowed_mismatches=0,
         invocation_id="", timeout=300.0, check_mode=False, clock=time.time, asker=ask):
    """Ask, compare with (or record) the baseline. Returns the module's result (``changed`` when a baseline was
    recorded, ``failed`` with ``msg`` when more answers than allowed differ)."""
    if not prompts:
        raise AnswersError("no prompts")
    endpoint = Endpoint(url, api_key=api_key, timeout=timeout)
    rounds = [[asker(endpoint, prompt, max_tokens) for prompt in prompts] for _round in range(max(1, int(repeat)))]
    key = baseline_key(identity, prompts, max_tokens)
    state = read_state(state_file)
    recorded = state["baselines"].get(key)
    digest = hashlib.sha256(json.dumps(rounds[0]).encode("utf-8")).hexdigest()
    result = {"changed": False, "failed": False, "key": key, "identity": identity, "prompts": len(prompts),
              "repeat": len(rounds), "max_tokens": int(max_tokens), "answers_sha256": digest, "mismatches": [],
              "allowed_mismatches": int(allowed_mismatches), "state_file": state_file}
    # the rounds must agree among themselves (the cached path answers as the uncached one)
    if not recorded:
        inner, too_many = compare(rounds[0], rounds[1:], allowed_mismatches)
        result["mismatches"] = [dict(m, round=m["round"] + 1) for m in inner]
        if too_many:
            result.update(failed=True, msg=_failure(result, "the first answers (round 1)", url))
            return result
        result["baseline"] = "recorded now (the first verified start of this model and release)"
        result["changed"] = True
        if not check_mode:
            state["baselines"][key] = {"identity": identity, "prompts_sha256": prompts_sha256(prompts, max_tokens),
                                       "max_tokens": int(max_tokens), "answers": rounds[0],
                                       "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock())),
                                       "invocation_id": invocation_id}
            state["version"] = VERSION
            write_atomic(state_file, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode("utf-8"),
                         mode=0o600)
        return result
    mismatches, too_many = compare(recorded.get("answers") or [], rounds, allowed_mismatches)
    result["mismatches"] = mismatches
    result["baseline"] = "recorded %s (invocation %s)" % (recorded.get("when", "?"), recorded.get("invocation_id") or "?")
    if too_many:
        result.update(failed=True, msg=_failure(result, "the baseline " + result["baseline"], url))
    return result


def _failure(result, against, url):
    first = result["mismatches"][0]
    return ("correctness gate: %d of %d greedy answers differ from %s, %d allowed (sglang_answers_allowed_mismatches); "
            "first: prompt %d, round %d: expected %r, got %r. Same model, release and prompts as the baseline: a "
            "change of answers is a wrong-output regression (e.g. sgl-project/sglang#39830, host-tier cache hits on "
            "a hybrid model). Server %s; baselines in %s (key %s)"
            % (len(result["mismatches"]), result["prompts"] * result["repeat"], against, result["allowed_mismatches"],
               first["prompt"], first["round"], first["expected"], first["got"], url, result["state_file"],
               result["key"]))
