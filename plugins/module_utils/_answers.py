# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The correctness gate (issues 24, 41): a fixed set of prompts answered with greedy decoding after each verified
start, compared with the answers recorded for the same model, flags that change greedy output and prompts, carried
across SGLang releases.

The known failures of this model class are wrong answers at full speed (sgl-project/sglang#39830, Sep 2026: wrong
output from host-tier cache hits on a hybrid model on an RTX PRO 6000), which the throughput gate cannot see. So:

- each prompt is sent to SGLang's native ``/generate`` with ``temperature 0`` and ``max_new_tokens`` N, one request
  at a time, ``repeat`` times (default 2): the later rounds come through the radix cache (the GPU tier);
- with HiCache (``host_tier``) one more round reads HiCache's host tier: after the rounds above, distinct
  prefixes of ``evict_tokens`` tokens in all (default: 1.25 x the GPU KV pool, ``max_total_num_tokens`` read from
  the server's ``/get_server_info``) push the prompts' KV out of the GPU tier into the host tier, then the same
  prompts again (their prefixes are then loaded back from host memory: the path of the reported bug);
- mismatches are counted per prompt: a prompt whose answer differs in any round counts once against
  ``allowed_mismatches``;
- the baseline is keyed by what must give the same answers: the model (path, config.json fingerprint), the flags
  that change greedy output (OUTPUT_FLAGS: parallelism, KV-cache dtype, attention backends, quantization, dtype,
  MoE and sampling backends, deterministic mode, speculative decoding), the prompts and N; NOT the release. A new
  release is compared with the answers of the last release recorded under that key: a difference fails, unless the
  operator accepts it for exactly that release (``accept_release``), which records the new release's answers;
- greedy decoding is reproducible only when the gate's requests are not batched with others (or with SGLang's
  ``--enable-deterministic-inference``): ``conditions`` says under which the gate ran: ``drained`` (out of every
  router: the rolling restart), ``deterministic`` (the server runs SGLang's deterministic inference) or ``live``
  (clients may reach the server: the result and a failure say so, and a baseline recorded then is marked).

This file is the one owner of the on-host baselines file (JSON, written atomically, root-only): ``{"version": 2,
"baselines": {key: {"identity", "release", "prompts_sha256", "max_tokens", "answers", "when", "invocation_id",
"conditions", "previous_release", "accepted"}}}``. Version 1's entries (keyed with the release) are kept and no
longer matched: the first start after the upgrade records anew.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time

import http.client as http_client

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic
from ansible_collections.gpuserve.sglang.plugins.module_utils._bench import BenchError, Endpoint

VERSION = 2
SHOWN = 120   # characters of an answer shown in a failure
CONDITIONS = ("drained", "deterministic", "live")
# SGLang flags (as the server role names them) that legitimately change greedy output: part of the baseline's key
OUTPUT_FLAGS = ("tp-size", "tp", "pp-size", "dp-size", "dp", "ep-size", "enable-dp-attention", "kv-cache-dtype",
                "attention-backend", "prefill-attention-backend", "decode-attention-backend", "quantization",
                "dtype", "moe-runner-backend", "moe-a2a-backend", "sampling-backend",
                "enable-deterministic-inference", "speculative-algorithm", "speculative-draft-model-path",
                "speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens")
EVICT_FACTOR = 1.25      # distinct prefix tokens pushed through, in GPU KV pools, to evict the prompts' KV
FILLER_BASE = 1000       # filler token ids: FILLER_BASE .. FILLER_BASE + FILLER_SPAN (inside every model's vocabulary)
FILLER_SPAN = 20000


class AnswersError(Exception):
    """The gate could not be run (server unreachable, key refused, a state file it cannot read)."""


def output_flags(server_args):
    """The flags of server_args that change greedy output (OUTPUT_FLAGS), as strings, sorted by name."""
    out = {}
    for name in OUTPUT_FLAGS:
        value = (server_args or {}).get(name)
        if value is not None and value is not False and value != "":
            out[name] = value if isinstance(value, (bool, int)) else str(value)
    return out


def prompts_sha256(prompts, max_tokens):
    return hashlib.sha256(json.dumps({"prompts": list(prompts), "max_tokens": int(max_tokens)},
                                     sort_keys=True).encode("utf-8")).hexdigest()


def baseline_key(identity, prompts, max_tokens):
    """One key per (identity without the release, prompts, N): the sha256 of their canonical JSON, short."""
    keyed = dict((k, v) for k, v in (identity or {}).items() if k != "release")
    return hashlib.sha256(json.dumps({"identity": keyed, "prompts": prompts_sha256(prompts, max_tokens)},
                                     sort_keys=True).encode("utf-8")).hexdigest()[:24]


def _post_generate(endpoint, body):
    conn = endpoint.connection()
    try:
        conn.request("POST", endpoint.prefix + "/generate", body=json.dumps(body),
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
    return text


def ask(endpoint, prompt, max_tokens):
    """One greedy answer from /generate (the text SGLang returns)."""
    text = _post_generate(endpoint, {"text": prompt, "sampling_params": {"temperature": 0,
                                                                         "max_new_tokens": int(max_tokens)},
                                     "stream": False})
    try:
        answer = json.loads(text)
    except ValueError:
        raise AnswersError("%s/generate answered something that is not JSON: %r" % (endpoint.base_url, text[:200]))
    if isinstance(answer, list):   # /generate with a list of prompts answers a list
        answer = answer[0] if answer else {}
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise AnswersError("%s/generate answered without a text: %r" % (endpoint.base_url, text[:200]))
    return answer["text"]


def kv_pool_tokens(endpoint):
    """The GPU KV pool in tokens (max_total_num_tokens of /get_server_info, top level or internal_states[0])."""
    try:
        status, text = endpoint.get("/get_server_info")
        info = json.loads(text) if status == 200 else {}
    except (ValueError, BenchError):
        info = {}
    value = info.get("max_total_num_tokens") if isinstance(info, dict) else None
    if value is None and isinstance(info, dict) and info.get("internal_states"):
        first = info["internal_states"][0]
        value = first.get("max_total_num_tokens") if isinstance(first, dict) else None
    try:
        return int(value) if value else None
    except (TypeError, ValueError):
        return None


def evict(endpoint, tokens, chunk):
    """Push ``tokens`` tokens of distinct prefixes through the server, ``chunk`` per request (one at a time, one
    new token each): the radix cache keeps the newest, so the prompts' KV leaves the GPU tier (to HiCache's host
    tier). Returns the number of requests."""
    chunk = max(16, int(chunk))
    count = max(1, -(-int(tokens) // chunk))
    for index in range(count):
        start = (index * 7919) % FILLER_SPAN
        ids = [FILLER_BASE + (start + j) % FILLER_SPAN for j in range(chunk)]
        _post_generate(endpoint, {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 1},
                                  "stream": False})
    return count


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


def compare(expected, got_rounds, allowed_mismatches=0, names=None):
    """Mismatches [{prompt, round, expected, got}] of every round against the expected answers, and whether more
    PROMPTS than allowed differ (a prompt that differs in several rounds counts once)."""
    mismatches = []
    for round_no, got in enumerate(got_rounds, start=1):
        for index, (want, have) in enumerate(zip(expected, got)):
            if want != have:
                mismatches.append({"prompt": index, "round": names[round_no - 1] if names else round_no,
                                   "expected": _shown(want), "got": _shown(have)})
    return mismatches, len(set(m["prompt"] for m in mismatches)) > int(allowed_mismatches)


def gate(url, prompts, state_file, identity, api_key="", max_tokens=32, repeat=2, allowed_mismatches=0,
         invocation_id="", timeout=300.0, check_mode=False, clock=time.time, asker=ask, host_tier=False,
         evict_tokens=0, evict_chunk_tokens=1024, conditions="live", accept_release="", evicter=None):
    """Ask, compare with (or record) the baseline. Returns the module's result (``changed`` when a baseline was
    recorded, ``failed`` with ``msg`` when more prompts than allowed answer otherwise)."""
    if not prompts:
        raise AnswersError("no prompts")
    if conditions not in CONDITIONS:
        raise AnswersError("conditions must be one of %s, got %r" % (", ".join(CONDITIONS), conditions))
    endpoint = Endpoint(url, api_key=api_key, timeout=timeout)
    rounds = [[asker(endpoint, prompt, max_tokens) for prompt in prompts] for _round in range(max(1, int(repeat)))]
    names = list(range(1, len(rounds) + 1))
    result = {"changed": False, "failed": False, "identity": identity, "prompts": len(prompts),
              "max_tokens": int(max_tokens), "mismatches": [], "allowed_mismatches": int(allowed_mismatches),
              "state_file": state_file, "conditions": conditions, "host_tier_round": False}
    if host_tier:
        tokens = int(evict_tokens or 0)
        if tokens <= 0:
            pool = kv_pool_tokens(endpoint)
            if not pool:
                raise AnswersError("the host-tier round needs the GPU KV pool's size: %s/get_server_info gives no "
                                   "max_total_num_tokens; set evict_tokens (sglang_answers_evict_tokens)" % url)
            tokens = int(pool * EVICT_FACTOR)
        requests = (evicter or evict)(endpoint, tokens, evict_chunk_tokens)
        rounds.append([asker(endpoint, prompt, max_tokens) for prompt in prompts])
        names.append("host tier")
        result.update(host_tier_round=True, evicted_tokens=tokens, evict_requests=requests)
    result["repeat"] = len(rounds)
    release = str((identity or {}).get("release") or "")
    key = baseline_key(identity, prompts, max_tokens)
    state = read_state(state_file)
    recorded = state["baselines"].get(key)
    result.update(key=key, release=release,
                  answers_sha256=hashlib.sha256(json.dumps(rounds[0]).encode("utf-8")).hexdigest())

    def record(note, accepted=False):
        result["baseline"] = note
        result["changed"] = True
        if not check_mode:
            state["baselines"][key] = {
                "identity": identity, "release": release, "prompts_sha256": prompts_sha256(prompts, max_tokens),
                "max_tokens": int(max_tokens), "answers": rounds[0], "conditions": conditions,
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock())), "invocation_id": invocation_id,
                "previous_release": (recorded or {}).get("release") or "", "accepted": accepted}
            state["version"] = VERSION
            write_atomic(state_file, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode("utf-8"),
                         mode=0o600)

    # the rounds must agree among themselves (the cached paths answer as the uncached one)
    inner, too_many = compare(rounds[0], rounds[1:], allowed_mismatches, names[1:])
    if not recorded:
        result["mismatches"] = inner
        if too_many:
            result.update(failed=True, msg=_failure(result, "the first answers (round 1)", url))
            return result
        record("recorded now (the first verified start of this model, flags and prompts)")
        return result
    mismatches, too_many = compare(recorded.get("answers") or [], rounds, allowed_mismatches, names)
    result["mismatches"] = mismatches
    before = recorded.get("release") or ""
    result["baseline"] = "recorded %s%s (invocation %s)" % (
        recorded.get("when", "?"), " by release %s" % before if before else "", recorded.get("invocation_id") or "?")
    if too_many:
        inner_bad = compare(rounds[0], rounds[1:], allowed_mismatches, names[1:])[1]
        if release and before and release != before and release == str(accept_release or "") and not inner_bad:
            # the operator accepted this release's answers: they become the baseline
            result["accepted_release"] = release
            record("recorded now: release %s's answers accepted in place of release %s's (accept_release)"
                   % (release, before), accepted=True)
            return result
        result.update(failed=True, msg=_failure(result, "the baseline " + result["baseline"], url))
        return result
    if release and release != before:
        record("carried: release %s answers as release %s did (recorded %s)"
               % (release, before or "?", recorded.get("when", "?")))
    return result


def _failure(result, against, url):
    first = result["mismatches"][0]
    bad = len(set(m["prompt"] for m in result["mismatches"]))
    msg = ("correctness gate: %d of %d prompts answer otherwise than %s (%d answers over %d rounds differ), %d "
           "allowed (sglang_answers_allowed_mismatches); first: prompt %d, round %s: expected %r, got %r. Same model, "
           "output flags and prompts as the baseline: a change of answers is a wrong-output regression (e.g. "
           "sgl-project/sglang#39830, host-tier cache hits on a hybrid model)"
           % (bad, result["prompts"], against, len(result["mismatches"]), result["repeat"],
              result["allowed_mismatches"], first["prompt"], first["round"], first["expected"], first["got"]))
    release = result.get("release")
    if release and against.startswith("the baseline") and " by release " in against and \
            ("by release %s " % release) not in against:
        msg += ("; a new release: accept its answers with sglang_answers_accept_release: %r once they are judged "
                "right" % release)
    if result.get("conditions") == "live":
        msg += ("; the gate ran under possible live traffic (no router drained the server, no "
                "--enable-deterministic-inference): answers batched with clients' requests may differ")
    return msg + ". Server %s; baselines in %s (key %s)" % (url, result["state_file"], result["key"])
