# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in (a test fixture) serves traffic as SGLang 0.5.9 does: the OpenAI and native endpoints, streaming
and not, /metrics with SGLang's metric names and labels, the API key, and SIGTERM cutting what is in flight."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import STANDIN, free_port, http_call


class Server(object):
    def __init__(self, args=(), **env):
        self.port = free_port()
        full = dict(os.environ, STANDIN_LOAD_SECONDS="0.3", STANDIN_WARMUP_SECONDS="0.2",
                    STANDIN_TOKEN_DELAY_SECONDS="0.01")
        full.update({k: str(v) for k, v in env.items()})
        self.proc = subprocess.Popen([sys.executable, STANDIN, "--port", str(self.port),
                                      "--served-model-name", "kimi"] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.call("GET", "/health")[0] == 200:
                return
            time.sleep(0.05)
        raise AssertionError("the stand-in did not become ready")

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def call(self, method, path, body=None, key=None, timeout=10):
        return http_call(method, self.url(path), body, key=key, timeout=timeout)

    def metrics(self):
        code, text = self.call("GET", "/metrics")
        assert code == 200
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return text, values

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.communicate()[0]


@pytest.fixture
def server():
    srv = Server(["--enable-metrics"])
    yield srv
    srv.stop()


def sse(text):
    """The `data: ...` payloads of a server-sent event stream."""
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]


def test_openai_and_native_endpoints_with_usage(server):
    code, body = server.call("POST", "/v1/chat/completions",
                             {"model": "kimi", "messages": [{"role": "user", "content": "one two three"}],
                              "max_tokens": 5})
    reply = json.loads(body)
    assert code == 200 and reply["object"] == "chat.completion" and reply["model"] == "kimi"
    assert reply["choices"][0]["message"]["role"] == "assistant" and reply["choices"][0]["message"]["content"]
    assert reply["usage"]["completion_tokens"] == 5 and reply["usage"]["prompt_tokens"] > 0
    assert reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"] + 5

    code, body = server.call("POST", "/v1/completions", {"model": "kimi", "prompt": "a b c d", "max_tokens": 3})
    reply = json.loads(body)
    assert code == 200 and reply["object"] == "text_completion"
    assert reply["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7,
                              "prompt_tokens_details": None, "reasoning_tokens": 0}

    code, body = server.call("POST", "/generate", {"text": "x y", "sampling_params": {"max_new_tokens": 4}})
    reply = json.loads(body)
    assert code == 200 and reply["meta_info"]["completion_tokens"] == 4 and reply["meta_info"]["prompt_tokens"] == 2
    assert reply["meta_info"]["finish_reason"] == {"type": "length", "length": 4}

    # without max_tokens: STANDIN_MAX_TOKENS (16)
    code, body = server.call("POST", "/v1/completions", {"model": "kimi", "prompt": "hi"})
    assert json.loads(body)["usage"]["completion_tokens"] == 16

    for path in ("/get_model_info", "/get_server_info", "/v1/models"):
        code, body = server.call("GET", path)
        assert code == 200, path
    assert json.loads(server.call("GET", "/v1/models")[1])["data"][0]["id"] == "kimi"
    assert server.call("POST", "/v1/completions", {"prompt": "x", "max_tokens": "many"})[0] == 400
    assert server.call("GET", "/no/such/path")[0] == 404


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
                              "stream_options": {"include_usage": True}}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}, "stream": True}),
])
def test_streaming_sse_chunks_end_with_done(server, path, body):
    code, text = server.call("POST", path, body)
    assert code == 200
    events = sse(text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    if path == "/generate":
        assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]
        assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        return
    assert chunks[-1]["usage"]["completion_tokens"] == 3 and chunks[-1]["choices"] == []
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] == "length"]
    assert len(finishing) == 1
    if path == "/v1/chat/completions":
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        words = [c["choices"][0]["delta"].get("content") for c in chunks[1:-2]]
    else:
        words = [c["choices"][0]["text"] for c in chunks[:-2]]
    assert len(words) == 3 and all(words)


def test_metrics_names_labels_and_in_flight(server):
    done = []
    thread = threading.Thread(target=lambda: done.append(server.call(
        "POST", "/v1/completions", {"prompt": "a b", "max_tokens": 300})))
    thread.start()
    deadline = time.time() + 60
    running = 0
    while time.time() < deadline and not running:
        text, values = server.metrics()
        running = values['sglang:num_running_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",'
                         'pp_rank="0",tp_rank="0"}']
        time.sleep(0.05)
    assert running == 1                                          # the request is in flight
    for name in ("sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
                 "sglang:spec_accept_length", "sglang:num_used_tokens"):
        assert "# TYPE %s gauge" % name in text and name + '{engine_type="unified",model_name="kimi"' in text
    thread.join(30)
    assert done[0][0] == 200
    text, values = server.metrics()
    assert values['sglang:num_running_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",'
                  'pp_rank="0",tp_rank="0"}'] == 0
    assert "# TYPE sglang:num_requests counter" in text
    assert values['sglang:num_requests_total{model_name="kimi"}'] == 1
    assert values['sglang:prompt_tokens_total{model_name="kimi"}'] == 2
    assert values['sglang:generation_tokens_total{model_name="kimi"}'] == 300


def test_metrics_only_with_enable_metrics_and_api_key_as_sglang():
    srv = Server(["--api-key", "sk-test"])
    try:
        assert srv.call("GET", "/metrics")[0] == 404             # SGLang mounts /metrics with --enable-metrics
        assert srv.call("GET", "/health")[0] == 200              # health needs no key
        code, body = srv.call("POST", "/v1/chat/completions", {"messages": [], "max_tokens": 1})
        assert code == 401 and json.loads(body) == {"error": "Unauthorized"}
        assert srv.call("GET", "/v1/models", key="wrong")[0] == 401
        assert srv.call("GET", "/get_model_info")[0] == 401
        assert srv.call("GET", "/v1/models", key="sk-test")[0] == 200
        assert srv.call("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 1}},
                        key="sk-test")[0] == 200
    finally:
        srv.stop()


def test_sigterm_drains_then_cuts_what_is_in_flight_and_closes_the_port():
    # Waits poll a condition (the request in flight, the 503 of the drain) instead of sleeping a fixed time, and
    # the drain is long enough to be seen on a busy machine: nothing here depends on how busy the machine is.
    srv = Server(["--enable-metrics"], STANDIN_DRAIN_SECONDS="4", STANDIN_TOKEN_DELAY_SECONDS="0.05")
    long_one, short_one = [], []
    t_long = threading.Thread(target=lambda: long_one.append(srv.call(
        "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1000}, timeout=90)))   # 50 s: outlasts the drain
    t_long.start()
    running_key = ('sglang:num_running_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",'
                   'pp_rank="0",tp_rank="0"}')
    deadline = time.time() + 60
    while time.time() < deadline and srv.metrics()[1][running_key] != 1:
        time.sleep(0.05)
    assert srv.metrics()[1][running_key] == 1                    # the long request is in flight
    srv.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 60
    while time.time() < deadline and srv.call("GET", "/health")[0] == 200:
        time.sleep(0.05)
    assert srv.call("GET", "/health")[0] == 503                  # draining
    t_short = threading.Thread(target=lambda: short_one.append(srv.call(
        "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, timeout=30)))       # accepted while draining
    t_short.start()
    out = srv.proc.communicate(timeout=120)[0]
    t_long.join(120)
    t_short.join(120)
    assert srv.proc.returncode == -signal.SIGKILL
    assert long_one[0][0] is None                                # cut: no answer at all
    assert short_one[0][0] == 200                                # finished within the drain
    assert "Gracefully exiting... Remaining number of requests 1." in out
    assert srv.call("GET", "/health")[0] is None                 # the port is closed
