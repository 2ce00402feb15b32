# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_bench run as Ansible runs it, against a small streaming server in this test whose pace is known:
it sends one token every DELAY seconds, so a run of N requests at concurrency C cannot exceed C / DELAY tok/s
and the module's counts must be exact."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _bench
from conftest import standin_server

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_bench.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
KEY = "bench-secret-key"


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    delay = 0.02          # seconds per token
    key = ""
    fail_every = 0        # every n-th completion request answers 500
    accept = None         # sglang:spec_accept_length value, None: no such metric
    requests = 0
    bodies = []
    lock = threading.Lock()  # the handler threads count requests under it


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _authorized(self):
        if self.server.key and self.headers.get("Authorization") != "Bearer " + self.server.key:
            self._send(401, {"error": "Unauthorized"})
            return False
        return True

    def _send(self, status, obj, ctype="application/json"):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path == "/metrics":
            lines = ["# TYPE sglang:num_running_reqs gauge", 'sglang:num_running_reqs{model_name="m"} 0.0']
            if self.server.accept is not None:
                lines += ["# TYPE sglang:spec_accept_length gauge",
                          'sglang:spec_accept_length{model_name="m",engine_type="unified"} %s' % self.server.accept]
            self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain")
        elif self.path == "/v1/models":
            if self._authorized():
                self._send(200, {"object": "list", "data": [{"id": "standin-model", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self._authorized():
            return
        with self.server.lock:
            self.server.requests += 1
            number = self.server.requests
            self.server.bodies.append(body)
        if self.server.fail_every and number % self.server.fail_every == 0:
            self._send(500, {"error": "boom"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat = self.path == "/v1/chat/completions"
        for dummy in range(body["max_tokens"]):
            time.sleep(self.server.delay)
            choice = {"index": 0, "delta": {"content": " tok"}} if chat else {"index": 0, "text": " tok"}
            self._chunk(b"data: " + json.dumps({"choices": [choice], "usage": None}).encode() + b"\n\n")
        usage = {"prompt_tokens": len(str(body.get("prompt", "")).split()), "completion_tokens": body["max_tokens"]}
        self._chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


@pytest.fixture()
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.bodies = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def run_module(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False, timeout=3600)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("module printed no JSON: %s %s" % (proc.stdout, proc.stderr))


def _url(srv):
    return "http://127.0.0.1:%d" % srv.server_address[1]


def test_numbers_match_the_server_pace(tmp_path, server):
    server.delay = 0.02
    server.key = KEY
    server.accept = 2.5
    result = run_module(tmp_path, dict(url=_url(server), api_key=KEY, num_requests=8, concurrency=4,
                                       input_len=16, output_len=25))
    assert result["changed"] is False and not result.get("failed"), result
    assert result["completed"] == 8 and result["errors"] == 0
    assert result["output_tokens"] == 8 * 25
    assert result["prompt_tokens"] == 8 * 16
    # reference: 4 streams of one token every 20 ms -> at most 4 / 0.02 = 200 tok/s, 2 rounds of 25 tokens
    ceiling = 4 / 0.02
    assert result["output_throughput"] <= ceiling * 1.02
    assert result["output_throughput"] >= ceiling * 0.4
    # the module's own figures agree with each other
    assert abs(result["output_throughput"] - result["output_tokens"] / result["duration_s"]) < 0.01 * ceiling
    assert abs(result["request_throughput"] - 8 / result["duration_s"]) < 0.01
    assert result["duration_s"] >= 2 * 25 * 0.02
    # each gap between tokens is at least the server's sleep, TTFT at least one sleep
    assert result["itl_ms"]["p50"] >= 20 * 0.95
    assert result["ttft_ms"]["p50"] >= 20 * 0.95
    assert result["ttft_ms"]["p50"] <= result["ttft_ms"]["p90"] <= result["ttft_ms"]["p99"]
    assert result["accept_length"] == 2.5
    assert result["model"] == "standin-model"
    # the key never shows in the result (no_log); ansible-core 2.22's module side hands the no_log values to the
    # controller in _ansible_new_secrets, which the controller pops from the result before anything shows it
    assert KEY not in json.dumps({k: v for k, v in result.items() if k != "_ansible_new_secrets"})
    # what the server got: streaming, exact length, usage asked for
    body = server.bodies[0]
    assert body["stream"] is True and body["max_tokens"] == 25 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert len(body["prompt"].split()) == 16


def test_chat_api_and_prompt_file(tmp_path, server):
    server.delay = 0.001
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\nsecond one here\n")
    result = run_module(tmp_path, dict(url=_url(server), api="chat", num_requests=3, concurrency=2,
                                       output_len=5, prompt_file=str(prompts)))
    assert result["completed"] == 3 and result["output_tokens"] == 15, result
    contents = sorted(b["messages"][0]["content"] for b in server.bodies)
    assert contents == ["first prompt", "first prompt", "second one here"]
    assert result["accept_length"] is None  # no spec decoding metric on this server
    server.accept = 0.0  # SGLang without speculative decoding
    result = run_module(tmp_path, dict(url=_url(server), num_requests=1, concurrency=1, output_len=2, input_len=2))
    assert result["completed"] == 1 and result["accept_length"] is None


def test_refused_key_is_a_clear_error(tmp_path, server):
    server.key = KEY
    result = run_module(tmp_path, dict(url=_url(server), api_key="wrong-key", num_requests=2, concurrency=1))
    assert result["failed"] is True
    assert "refused the API key (HTTP 401" in result["msg"] and "wrong key" in result["msg"]
    assert server.requests == 0  # nothing benchmarked
    result = run_module(tmp_path, dict(url=_url(server), num_requests=2, concurrency=1))
    assert "refused the API key" in result["msg"] and "no key given" in result["msg"]


def test_unreachable_server_is_a_clear_error(tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    result = run_module(tmp_path, dict(url="http://127.0.0.1:%d" % port, num_requests=2, concurrency=1))
    assert result["failed"] is True
    assert result["msg"].startswith("cannot reach the server at http://127.0.0.1:%d/v1/models" % port)


def test_request_errors_counted_and_fail_past_max_errors(tmp_path, server):
    server.delay = 0.001
    server.fail_every = 3
    result = run_module(tmp_path, dict(url=_url(server), num_requests=6, concurrency=2, output_len=4, max_errors=-1))
    assert result["errors"] == 2 and result["completed"] == 4 and result["output_tokens"] == 16, result
    assert result["error_messages"][0].startswith("HTTP 500")
    server.requests = 0
    result = run_module(tmp_path, dict(url=_url(server), num_requests=6, concurrency=2, output_len=4))
    assert result["failed"] is True and "2 of 6 benchmark requests failed: HTTP 500" in result["msg"]


def test_percentile_is_numpys_linear():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert _bench.percentile(values, 50) == 5.5
    assert _bench.percentile(values, 90) == pytest.approx(9.1)
    assert _bench.percentile(values, 99) == pytest.approx(9.91)
    assert _bench.percentile([], 50) is None
    assert _bench.percentile([7], 99) == 7


def test_metric_parser_takes_the_exact_name():
    text = ('sglang:spec_accept_length{model_name="a"} 2.0\n'
            'sglang:spec_accept_length_sum{model_name="a"} 99\n'
            'sglang:spec_accept_length{model_name="b"} 3.0\n'
            'sglang:spec_accept_length NaN\n')
    assert _bench.parse_metrics(text, "sglang:spec_accept_length") == [2.0, 3.0]


def test_against_the_standin_and_its_own_counters(tmp_path):
    """The stand-in (tests/standin, SGLang 0.5.9's API) streams one token per 20 ms: the module's counts agree with
    the server's own /metrics counters, its tok/s stays under the pace's ceiling, the key is checked."""
    import urllib.request

    env = dict(STANDIN_TOKEN_DELAY_SECONDS="0.02", STANDIN_SPEC_ACCEPT_LENGTH="2.7")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with standin_server(["--api-key", KEY, "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                         "--served-model-name", "kimi"], env) as url:
        refused = run_module(tmp_path, dict(url=url, api_key="wrong", num_requests=1, concurrency=1))
        assert "refused the API key (HTTP 401" in refused["msg"]
        result = run_module(tmp_path, dict(url=url, api_key=KEY, num_requests=6, concurrency=3,
                                           input_len=12, output_len=20))
        assert result["completed"] == 6 and result["errors"] == 0, result
        assert result["model"] == "kimi"
        metrics = opener.open(url + "/metrics", timeout=5).read().decode()
        counters = {n: sum(_bench.parse_metrics(metrics, n)) for n in
                    ("sglang:generation_tokens_total", "sglang:num_requests_total", "sglang:prompt_tokens_total")}
        # the server's own counters of what it served are the reference
        assert result["output_tokens"] == 6 * 20 == counters["sglang:generation_tokens_total"]
        assert counters["sglang:num_requests_total"] == 6
        assert result["prompt_tokens"] == counters["sglang:prompt_tokens_total"]
        assert result["output_throughput"] <= 3 / 0.02 * 1.02
        assert result["itl_ms"]["p50"] >= 20 * 0.95
        assert result["accept_length"] == 2.7
