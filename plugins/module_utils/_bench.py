# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
"""A small serving benchmark against SGLang's OpenAI-compatible endpoint, in the standard library only.

Private to the collection (the module gpuserve.sglang.sglang_bench is a thin wrapper). It runs on the managed
host, so it needs nothing but Python there. What it measures follows SGLang's own ``bench_serving``:

- every request streams (``"stream": true``, ``"ignore_eos": true``, ``stream_options.include_usage``) and asks
  for exactly ``output_len`` tokens;
- TTFT: from sending the request to the first chunk that carries text;
- inter-token latency (ITL): the gaps between later text chunks (with speculative decoding one chunk can carry
  several tokens, as in bench_serving);
- output tokens of a request: ``usage.completion_tokens`` of its last chunk when the server sends it, else the
  number of text chunks;
- output tok/s = all output tokens / wall time of the run (first request sent to last request done);
  request/s = completed requests / wall time;
- acceptance length: the ``sglang:spec_accept_length`` gauge of ``/metrics`` after the run (SGLang exports it
  with ``--enable-metrics`` when speculative decoding is on), averaged over its label sets.

Errors of single requests are counted and the first few kept; a server that cannot be reached or refuses the
key fails the whole run with a clear message (``BenchError``) before any request is sent.

``gate`` is the server role's benchmark gate (sglang_bench_gate): one run compared with the baseline (given, or
the one the last deployment record carries with the same benchmark settings); a fall beyond the threshold is a
regression, which the caller rolls back.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time

import http.client as http_client
from urllib.parse import urlsplit

# The last deployment record's JSON twin as a dict ({} when there is none or it is not a JSON object: a broken
# twin must not fail every later deploy), read as the record's owner reads it.
from ansible_collections.gpuserve.sglang.plugins.module_utils._record import read_json as load_record

ERRORS_KEPT = 5


class BenchError(Exception):
    """The benchmark cannot run (server unreachable, key refused, bad input), or too many of its requests failed
    (``result`` then holds the run's figures)."""

    def __init__(self, message, result=None):
        super(BenchError, self).__init__(message)
        self.result = result


def percentile(values, pct):
    """Linear-interpolated percentile (numpy's default), ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stats_ms(values):
    out = {}
    for name, pct in (("p50", 50), ("p90", 90), ("p99", 99)):
        value = percentile(values, pct)
        out[name] = None if value is None else round(value * 1000.0, 3)
    out["mean"] = round(sum(values) / len(values) * 1000.0, 3) if values else None
    return out


class Endpoint(object):
    """Base URL + key; one new HTTP connection per request (as concurrent clients have)."""

    def __init__(self, base_url, api_key="", timeout=600.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BenchError("url %r is not an http(s) URL" % base_url)
        self.base_url = base_url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key or ""
        self.timeout = timeout

    def connection(self):
        cls = http_client.HTTPSConnection if self.scheme == "https" else http_client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def headers(self, extra=None):
        headers = {"Accept": "*/*"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        headers.update(extra or {})
        return headers

    def get(self, path):
        """GET path -> (status, body text). Raises BenchError when the server cannot be reached."""
        conn = self.connection()
        try:
            conn.request("GET", self.prefix + path, headers=self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        except (socket.error, http_client.HTTPException) as exc:
            raise BenchError("cannot reach the server at %s%s: %s" % (self.base_url, path, exc))
        finally:
            conn.close()


def check_server(endpoint):
    """Reachable, key accepted; returns the served model id from /v1/models ('' if none listed)."""
    status, body = endpoint.get("/v1/models")
    if status in (401, 403):
        raise BenchError("the server at %s refused the API key (HTTP %d on /v1/models): %s"
                         % (endpoint.base_url, status, "no key given" if not endpoint.api_key else "wrong key"))
    if status != 200:
        raise BenchError("the server at %s is not ready: HTTP %d on /v1/models: %s"
                         % (endpoint.base_url, status, body[:200]))
    try:
        models = json.loads(body).get("data") or []
    except ValueError:
        models = []
    return str(models[0].get("id", "")) if models else ""


def parse_metrics(text, name):
    """Values of one metric in Prometheus text format (any labels)."""
    values = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue  # a longer name with the same prefix
        if rest.startswith("{"):
            end = rest.find("}")
            rest = rest[end + 1:] if end >= 0 else ""
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if not math.isnan(value):
            values.append(value)
    return values


def accept_length(endpoint):
    """Mean of sglang:spec_accept_length over its label sets; None when /metrics has none (or is off)."""
    try:
        status, body = endpoint.get("/metrics")
    except BenchError:
        return None
    if status != 200:
        return None
    # without speculative decoding SGLang exports 0 (an acceptance length is at least 1): no value then
    values = [v for v in parse_metrics(body, "sglang:spec_accept_length") if v > 0]
    return round(sum(values) / len(values), 4) if values else None


def make_prompts(num_requests, input_len, prompt_file_lines=None):
    """The prompts, one per request: the file's lines in turn, or ``input_len`` words ("hello" is one token)."""
    if prompt_file_lines:
        return [prompt_file_lines[i % len(prompt_file_lines)] for i in range(num_requests)]
    return [" ".join(["hello"] * input_len) for dummy in range(num_requests)]


def one_request(endpoint, api, model, prompt, output_len, ignore_eos=True):
    """Send one streaming request; returns a dict with ttft, itl (list), output_tokens, error."""
    if api == "chat":
        path = "/v1/chat/completions"
        payload = {"messages": [{"role": "user", "content": prompt}]}
    else:
        path = "/v1/completions"
        payload = {"prompt": prompt}
    payload.update({"model": model, "max_tokens": output_len, "temperature": 0.0, "stream": True,
                    "ignore_eos": ignore_eos, "stream_options": {"include_usage": True}})
    body = json.dumps(payload).encode("utf-8")
    result = {"ttft": None, "itl": [], "output_tokens": 0, "prompt_tokens": None, "error": None}
    chunks = 0
    usage_tokens = None
    conn = endpoint.connection()
    start = time.perf_counter()
    last = None
    try:
        conn.request("POST", endpoint.prefix + path, body=body,
                     headers=endpoint.headers({"Content-Type": "application/json"}))
        resp = conn.getresponse()
        if resp.status != 200:
            result["error"] = "HTTP %d: %s" % (resp.status, resp.read(300).decode("utf-8", "replace").strip())
            return result
        while True:
            raw = resp.readline()
            if not raw:
                break
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                continue
            if event.get("error"):
                result["error"] = "stream error: %s" % event["error"]
                break
            usage = event.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                usage_tokens = int(usage["completion_tokens"])
                if usage.get("prompt_tokens") is not None:
                    result["prompt_tokens"] = int(usage["prompt_tokens"])
            text = ""
            for choice in event.get("choices") or []:
                text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            if not text:
                continue
            now = time.perf_counter()
            if last is None:
                result["ttft"] = now - start
            else:
                result["itl"].append(now - last)
            last = now
            chunks += 1
    except (socket.error, http_client.HTTPException) as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        conn.close()
    if result["error"] is None and last is None:
        result["error"] = "the stream carried no text"
    result["output_tokens"] = usage_tokens if usage_tokens is not None else chunks
    return result


def run(url, api_key="", model="", num_requests=60, concurrency=30, input_len=1024, output_len=256,
        prompt_file_lines=None, api="completions", timeout=600.0, ignore_eos=True, metrics=True):
    """The whole benchmark; returns the result dict (see the module's RETURN)."""
    if num_requests < 1 or concurrency < 1 or output_len < 1 or input_len < 1:
        raise BenchError("num_requests, concurrency, input_len and output_len must be >= 1")
    if api not in ("completions", "chat"):
        raise BenchError("api must be completions or chat, not %r" % api)
    endpoint = Endpoint(url, api_key, timeout)
    served = check_server(endpoint)
    model = model or served or "default"
    prompts = make_prompts(num_requests, input_len, prompt_file_lines)
    results = [None] * num_requests
    lock = threading.Lock()
    next_index = [0]

    def worker():
        while True:
            with lock:
                index = next_index[0]
                if index >= num_requests:
                    return
                next_index[0] += 1
            results[index] = one_request(endpoint, api, model, prompts[index], output_len, ignore_eos)

    threads = [threading.Thread(target=worker) for dummy in range(min(concurrency, num_requests))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    duration = time.perf_counter() - start

    done = [r for r in results if r["error"] is None]
    errors = [r["error"] for r in results if r["error"] is not None]
    output_tokens = sum(r["output_tokens"] for r in done)
    ttfts = [r["ttft"] for r in done]
    itls = [gap for r in done for gap in r["itl"]]
    prompt_tokens = [r["prompt_tokens"] for r in done if r["prompt_tokens"] is not None]
    result = {
        "url": endpoint.base_url,
        "model": model,
        "api": api,
        "num_requests": num_requests,
        "concurrency": concurrency,
        "input_len": input_len if not prompt_file_lines else None,
        "output_len": output_len,
        "completed": len(done),
        "errors": len(errors),
        "error_messages": errors[:ERRORS_KEPT],
        "duration_s": round(duration, 4),
        "output_tokens": output_tokens,
        "prompt_tokens": sum(prompt_tokens) if prompt_tokens else None,
        "output_throughput": round(output_tokens / duration, 3) if duration > 0 else 0.0,
        "request_throughput": round(len(done) / duration, 4) if duration > 0 else 0.0,
        "ttft_ms": _stats_ms(ttfts),
        "itl_ms": _stats_ms(itls),
        "accept_length": accept_length(endpoint) if metrics else None,
    }
    result["summary"] = (
        "%d/%d requests at concurrency %d: %.1f output tok/s, %.3f req/s, TTFT p50 %s ms, ITL p50 %s ms%s%s"
        % (len(done), num_requests, concurrency, result["output_throughput"], result["request_throughput"],
           result["ttft_ms"]["p50"], result["itl_ms"]["p50"],
           ", accept length %.2f" % result["accept_length"] if result["accept_length"] is not None else "",
           ", %d errors" % len(errors) if errors else ""))
    return result


# ---------------------------------------------------------------------------------------------------------------
# The benchmark gate of the server role (sglang_bench_gate), run by the module sglang_server (_server/machine.py)
# after a verified start or restart: benchmark the new invocation and compare its output tok/s with the baseline.
# molecule/bench_gate asserts on the texts of its messages.

# The benchmark settings a recorded baseline must share to count (a result at another concurrency says nothing).
BASELINE_SETTINGS = ("num_requests", "concurrency", "input_len", "output_len", "api")
GIVEN_SOURCE = "given (sglang_bench_baseline_tok_s)"
NO_BASELINE_SOURCE = "none: this run sets the baseline"
OTHER_SETTINGS = " (the recorded one used other benchmark settings)"


def read_prompt_file(path):
    """The prompts of ``prompt_file``, one a line, empty lines skipped (the module's rule); BenchError when the
    file cannot be read or holds none."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\n") for line in handle if line.strip()]
    except (IOError, OSError, UnicodeDecodeError) as exc:
        raise BenchError("cannot read prompt_file %s: %s" % (path, exc))
    if not lines:
        raise BenchError("prompt_file %s has no prompts" % path)
    return lines


def run_settings(settings):
    """One benchmark run from the options of gpuserve.sglang.sglang_bench (url, api_key, model, num_requests,
    concurrency, input_len, output_len, prompt_file, api, timeout, metrics, max_errors; the module's defaults for
    those left out). Raises BenchError as the module fails: the server cannot be reached or refuses the key, the
    prompt file is unusable, or more than ``max_errors`` requests failed (``max_errors`` -1: never)."""
    prompt_file = settings.get("prompt_file") or None
    lines = read_prompt_file(prompt_file) if prompt_file else None
    result = run(settings.get("url") or "http://127.0.0.1:30000", api_key=settings.get("api_key") or "",
                 model=settings.get("model") or "", num_requests=int(settings.get("num_requests", 60)),
                 concurrency=int(settings.get("concurrency", 30)), input_len=int(settings.get("input_len", 1024)),
                 output_len=int(settings.get("output_len", 256)), prompt_file_lines=lines,
                 api=settings.get("api") or "completions", timeout=float(settings.get("timeout", 600)),
                 metrics=bool(settings.get("metrics", True)))
    max_errors = int(settings.get("max_errors", 0))
    if 0 <= max_errors < result["errors"]:
        raise BenchError("%d of %d benchmark requests failed: %s" % (
            result["errors"], result["num_requests"], "; ".join(result["error_messages"])), result)
    return result


def _settings_of(mapping):
    return dict((key, mapping[key]) for key in BASELINE_SETTINGS if key in mapping)


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def baseline(bench, last_record, given_tok_s=0):
    """(baseline tok/s, where it comes from) for the result ``bench``: ``given_tok_s`` when above 0, else the
    baseline the last record carries when it was measured with the same settings (BASELINE_SETTINGS), else 0."""
    recorded = last_record.get("baseline") or {}
    if not isinstance(recorded, dict):
        recorded = {}
    matches = bool(recorded) and _settings_of(recorded) == _settings_of(bench)
    if _float(given_tok_s) > 0:
        return _float(given_tok_s), GIVEN_SOURCE
    if matches:
        return (_float(recorded.get("output_throughput")),
                "recorded %s (invocation %s)" % (last_record.get("baseline_when", "?"),
                                                 last_record.get("baseline_invocation_id", "?")))
    return 0.0, NO_BASELINE_SOURCE + (OTHER_SETTINGS if recorded else "")


def compare(bench, baseline_tok_s, baseline_source, threshold_pct):
    """The gate's verdict: a regression is output tok/s below the baseline by more than ``threshold_pct``
    percent; without a baseline (0) nothing is one, and this result becomes the baseline."""
    base = _float(baseline_tok_s)
    tok_s = _float(bench.get("output_throughput"))
    threshold = _float(threshold_pct)
    return {"baseline_tok_s": base, "baseline_source": baseline_source, "tok_s": tok_s, "threshold_pct": threshold,
            "change_pct": round((tok_s / base - 1) * 100, 1) if base > 0 else None,
            "regression": base > 0 and tok_s < base * (1 - threshold / 100)}


def gate_lines(bench, verdict):
    """What the role showed as 'Benchmark result': the run's summary, then the comparison."""
    change = verdict["change_pct"] if verdict["change_pct"] is not None else "n/a"
    return [bench.get("summary", ""),
            "baseline %s tok/s (%s), change %s %%, allowed -%s %%"
            % (verdict["baseline_tok_s"], verdict["baseline_source"], change, verdict["threshold_pct"])]


def regression_message(bench, verdict):
    """The failure text of a regression (the rollback's reason)."""
    return ("benchmark regression: %s output tok/s at concurrency %s is %s %% below the baseline %s tok/s (%s); "
            "allowed %s %%. %s" % (verdict["tok_s"], bench.get("concurrency"), abs(verdict["change_pct"]),
                                   verdict["baseline_tok_s"], verdict["baseline_source"], verdict["threshold_pct"],
                                   bench.get("summary", "")))


def gate(settings, record_json_path, only_without_baseline, runner=run_settings):
    """The benchmark gate: benchmark (``runner(settings)``, the options of gpuserve.sglang.sglang_bench) and
    compare with the baseline: ``settings['baseline_tok_s']`` when above 0, else the one the last record's JSON
    twin (``record_json_path``) carries with the same benchmark settings. ``only_without_baseline`` (a host that
    did not start or restart): run only when that twin has no baseline yet.

    Returns {"ran", "bench" (the run's result, {} when it did not run), "gate" (baseline_tok_s, baseline_source,
    tok_s, threshold_pct, change_pct, regression; {} when it did not run), "regression", "msg" (the failure text
    when a regression, else ''), "summary_lines"}. A run that cannot be made raises BenchError (a failed gate for
    the caller: the server did not serve the benchmark)."""
    last = load_record(record_json_path)
    result = {"ran": False, "bench": {}, "gate": {}, "regression": False, "msg": "", "summary_lines": []}
    if only_without_baseline and last.get("baseline"):
        return result
    bench = runner(settings)
    base, source = baseline(bench, last, settings.get("baseline_tok_s", 0))
    verdict = compare(bench, base, source, settings.get("threshold_pct", 10))
    result.update(ran=True, bench=bench, gate=verdict, regression=verdict["regression"],
                  summary_lines=gate_lines(bench, verdict),
                  msg=regression_message(bench, verdict) if verdict["regression"] else "")
    return result
