# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in (a test fixture) in prefill/decode disaggregation (PD, issue 25): --disaggregation-mode prefill serves
SGLang's KV bootstrap server (the release's health path, 0.5.23's "started successfully" line, started before the
schedulers are ready; a port in use ends start-up); a gateway's request (the same body with bootstrap_host/port/room,
sent to both at once) is prefilled on the prefill, which keeps it in flight until a decode server took its KV (the
stand-in's own hand-off), and decoded on the decode server; a decode server that cannot take the KV answers 500
naming the bootstrap host:port; the warm-up's FAKE_BOOTSTRAP_HOST skips the hand-off; a request without
bootstrap_room gets SGLang's 400; the drain counts a prefill's request that waits for its decode; mode null is
unchanged."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading

import pytest

from conftest import STANDIN, free_port, http_call, until

BOUND = 60      # hang guards only: every wait below polls a condition
RUNNING = 'sglang:num_running_reqs{engine_type="%s",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
GAUGE = 'sglang:%s{engine_type="%s",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'


def releases():
    namespace = {}
    path = os.path.join(os.path.dirname(STANDIN), "sglang_standin_releases.py")
    with open(path) as handle:
        exec(compile(handle.read(), path, "exec"), namespace)  # pylint: disable=exec-used
    return namespace["RELEASES"]


class Server(object):
    """One stand-in process (its output read as it comes); ``wait=False`` does not wait for /health 200."""

    def __init__(self, args=(), release="0.5.23", wait=True, **env):
        self.port = free_port()
        full = dict(os.environ, STANDIN_LOAD_SECONDS="0.3", STANDIN_WARMUP_SECONDS="0.2",
                    STANDIN_TOKEN_DELAY_SECONDS="0.01", STANDIN_SGLANG_RELEASE=release)
        full.update({k: str(v) for k, v in env.items()})
        self.proc = subprocess.Popen([sys.executable, STANDIN, "--port", str(self.port), "--served-model-name", "kimi",
                                      "--enable-metrics"] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if wait and not (until(lambda: self.call("GET", "/health")[0] == 200 or self.proc.poll() is not None)
                         and self.proc.poll() is None):
            raise AssertionError("the stand-in did not become ready: %s" % self.stop())

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self):
        return "\n".join(self.lines)

    def call(self, method, path, body=None, timeout=BOUND, port=None):
        return http_call(method, "http://127.0.0.1:%d%s" % (port or self.port, path), body, timeout=timeout)

    def running(self, kind, gauge="num_running_reqs"):
        code, text = self.call("GET", "/metrics")
        assert code == 200
        for line in text.splitlines():
            if line.startswith(GAUGE % (gauge, kind) + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no %s in %s" % (GAUGE % (gauge, kind), text))

    def held(self, kind):
        """{gauge: value} of SGLang's disaggregation queues and the running batch."""
        return dict((g, self.running(kind, g)) for g in (
            "num_running_reqs", "num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
            "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(BOUND)
        self.reader.join(BOUND)
        return self.output()


def prefill(release="0.5.23", wait=True, **env):
    bootstrap = free_port()
    srv = Server(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap)], release,
                 wait, **env)
    srv.bootstrap = bootstrap
    return srv


def decode(release="0.5.23", **env):
    """A decode server; its own --disaggregation-bootstrap-port (a decode serves nothing there) in ``flag_port``."""
    flag_port = free_port()
    srv = Server(["--disaggregation-mode", "decode", "--disaggregation-bootstrap-port", str(flag_port)], release,
                 **env)
    srv.flag_port = flag_port
    return srv


def body(bootstrap_port, room=None, host="127.0.0.1", **extra):
    """A gateway's request: the client's body with the prefill's bootstrap host/port and a random 63-bit room."""
    req = {"model": "kimi", "prompt": "one two three", "max_tokens": 5}
    req.update(extra)
    req.update(bootstrap_host=host, bootstrap_port=bootstrap_port,
               bootstrap_room=random.getrandbits(63) if room is None else room)
    return req


class Call(object):
    """A request in a thread of its own."""

    def __init__(self, srv, path, req):
        self.result = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(srv, path, req), daemon=True)
        self.thread.start()

    def _run(self, srv, path, req):
        try:
            self.result = srv.call("POST", path, req)
        finally:
            self.done.set()

    def get(self):
        assert self.done.wait(BOUND), "no answer"
        return self.result


def sse(text):
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]


@pytest.fixture(scope="module")
def pair():
    p = prefill()
    try:
        d = decode()
    except Exception:
        p.stop()
        raise
    yield p, d
    p.stop()
    d.stop()


@pytest.mark.parametrize("path, extra", [
    ("/v1/completions", {}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "one two three"}], "stream": True}),
    ("/generate", {"text": "one two three", "sampling_params": {"max_new_tokens": 5}}),
])
def test_a_gateway_request_goes_to_both_and_the_decode_answers_with_its_tokens(pair, path, extra):
    p, d = pair
    req = body(p.bootstrap, **extra)
    to_prefill, to_decode = Call(p, path, req), Call(d, path, req)
    (pcode, ptext), (dcode, dtext) = to_prefill.get(), to_decode.get()
    assert pcode == 200 and dcode == 200, (ptext, dtext)
    if path == "/v1/completions":
        pr, dr = json.loads(ptext), json.loads(dtext)
        assert dr["usage"]["completion_tokens"] == 5 and dr["choices"][0]["text"]
        assert pr["usage"]["completion_tokens"] <= 1                 # the prefill's answer (the gateway drops it)
        assert dr["choices"][0]["text"].startswith(pr["choices"][0]["text"])
    elif path == "/generate":
        assert json.loads(dtext)["meta_info"]["completion_tokens"] == 5
        assert json.loads(ptext)["meta_info"]["completion_tokens"] <= 1
    else:
        devents, pevents = sse(dtext), sse(ptext)
        assert devents[-1] == "[DONE]" and pevents[-1] == "[DONE]"
        words = [json.loads(e)["choices"][0]["delta"].get("content") for e in devents[1:-2]]
        assert len(words) == 5 and all(words)
    assert until(lambda: p.running("prefill") == 0 and d.running("decode") == 0)


def test_the_prefill_keeps_the_request_in_flight_until_a_decode_took_its_kv(pair):
    p, d = pair
    req = body(p.bootstrap)
    to_prefill = Call(p, "/v1/completions", req)
    # SGLang's bootstrap queue: no decode server asked for its KV yet (not running)
    assert until(lambda: p.running("prefill", "num_prefill_bootstrap_queue_reqs") == 1)
    answered_before_the_decode = to_prefill.done.is_set()
    assert p.running("prefill", "num_prefill_bootstrap_queue_reqs") == 1 and p.running("prefill") == 0
    dcode, dtext = d.call("POST", "/v1/completions", req)         # the decode takes the KV
    assert dcode == 200 and json.loads(dtext)["usage"]["completion_tokens"] == 5
    assert to_prefill.get()[0] == 200
    assert not answered_before_the_decode
    assert until(lambda: p.running("prefill") == 0)


def test_the_decode_answers_500_naming_the_bootstrap_server_when_it_cannot_take_the_kv(pair):
    p, d = pair
    wrong = free_port()
    room = random.getrandbits(63)
    code, text = d.call("POST", "/v1/completions", body(wrong, room))
    assert code == 500
    reply = json.loads(text)
    assert reply["object"] == "error" and reply["code"] == 500
    assert "KV transfer from 127.0.0.1:%d room %d failed" % (wrong, room) in reply["message"]
    assert "[stand-in]" in reply["message"]
    assert until(lambda: sum("KV transfer from 127.0.0.1:%d room %d failed" % (wrong, room) in line
                             for line in d.lines) == 1)            # one line in the decode's log
    assert d.running("decode") == 0


def test_a_stopped_prefill_fails_the_decode():
    p, d = prefill(), None
    try:
        d = decode()
        req = body(p.bootstrap)
        to_prefill, to_decode = Call(p, "/v1/completions", req), Call(d, "/v1/completions", req)
        assert to_prefill.get()[0] == 200 and to_decode.get()[0] == 200     # the pair works
        p.stop()
        room = random.getrandbits(63)
        code, text = d.call("POST", "/v1/completions", body(p.bootstrap, room))
        assert code == 500 and "KV transfer from 127.0.0.1:%d room %d failed" % (p.bootstrap, room) in text
    finally:
        p.stop()
        if d is not None:
            d.stop()


def test_a_room_nobody_prefills_fails_the_decode_and_a_kv_nobody_takes_fails_the_prefill():
    p, d = prefill(STANDIN_KV_TIMEOUT="1"), None
    try:
        d = decode()
        room = random.getrandbits(63)
        code, text = d.call("POST", "/v1/completions", body(p.bootstrap, room))      # the prefill never got it
        assert code == 500 and "KV transfer from 127.0.0.1:%d room %d failed" % (p.bootstrap, room) in text
        code, text = p.call("POST", "/v1/completions", body(p.bootstrap))              # no decode takes its KV
        assert code == 500 and json.loads(text)["message"].startswith("Prefill transfer failed for request")
        assert p.running("prefill") == 0
    finally:
        p.stop()
        if d is not None:
            d.stop()


def test_the_bootstrap_server_answers_health_on_a_prefill_only(pair):
    p, d = pair
    health = releases()["0.5.23"]["rules"]["pd_bootstrap_health_path"]
    assert p.call("GET", health, port=p.bootstrap) == (200, "OK")
    code, reason = d.call("GET", health, port=d.flag_port)
    assert code is None and "refused" in reason.lower()


def test_0_5_23_logs_its_bootstrap_server_before_the_schedulers_are_ready_and_0_5_9_does_not():
    template = releases()["0.5.23"]["texts"]["pd_bootstrap_started"][0]
    p = prefill(wait=False, STANDIN_LOAD_SECONDS="120")
    try:
        expected = template.format(host="127.0.0.1", port=p.bootstrap)
        assert until(lambda: any(line.endswith("] " + expected) for line in p.lines))
        # printed once it listens, long before the schedulers are ready and the HTTP server starts
        assert p.call("GET", "/health", port=p.bootstrap) == (200, "OK")
        assert p.call("GET", "/health")[0] is None
        at = [i for i, line in enumerate(p.lines) if line.endswith(expected)][0]
        assert "server_args=" in p.lines[0] and not any("Load weight end" in line for line in p.lines[:at])
    finally:
        p.stop()
    old = prefill("0.5.9")
    try:
        assert old.call("GET", "/health", port=old.bootstrap) == (200, "OK")
    finally:
        out = old.stop()
    assert "server_args=" in out and "CommonKVBootstrapServer" not in out
    assert "started successfully" not in out


def test_a_bootstrap_port_in_use_fails_start_up():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    srv = Server(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(taken)], wait=False)
    try:
        assert until(lambda: srv.proc.poll() is not None)
        assert srv.proc.returncode != 0
    finally:
        out = srv.stop()
        holder.close()
    assert "Server error: [Errno" in out and "('127.0.0.1', %d): address already in use" % taken in out
    assert "cannot listen on 127.0.0.1:%d" % taken in out
    assert "Load weight begin" not in out and "ready to roll" not in out


def test_bootstrap_room_is_required_and_the_warm_up_host_skips_the_hand_off(pair):
    p, d = pair
    for srv in (p, d):
        code, text = srv.call("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert code == 400
        assert "Disaggregated request received without bootstrap room id" in json.loads(text)["message"]
    # FAKE_BOOTSTRAP_HOST (SGLang's warm-up): no hand-off, on either side
    fake = body(free_port(), host="2.2.2.2")
    code, text = d.call("POST", "/v1/completions", fake)
    assert code == 200 and json.loads(text)["usage"]["completion_tokens"] == 5
    code, text = p.call("POST", "/v1/completions", fake)
    assert code == 200 and json.loads(text)["usage"]["completion_tokens"] <= 1
    assert p.running("prefill") == 0


def test_the_drain_counts_a_prefill_request_that_waits_for_its_decode():
    p, d = prefill(STANDIN_DRAIN_SECONDS="8"), None
    try:
        d = decode()
        req = body(p.bootstrap)
        to_prefill = Call(p, "/v1/completions", req)
        assert until(lambda: p.running("prefill", "num_prefill_bootstrap_queue_reqs") == 1)
        p.proc.send_signal(signal.SIGTERM)
        assert until(lambda: any("Gracefully exiting... Remaining number of requests 1." in line for line in p.lines))
        assert not to_prefill.done.is_set()
        code, _text = d.call("POST", "/v1/completions", req)       # the bootstrap server still serves while draining
        assert code == 200 and to_prefill.get()[0] == 200
        assert until(lambda: any("Remaining number of requests 0." in line for line in p.lines))
        assert p.proc.wait(BOUND) == -signal.SIGKILL
    finally:
        p.stop()
        if d is not None:
            d.stop()


def test_the_pd_queues_hold_the_request_as_sglangs_do():
    """Issue 41: a prefill holds a request in its inflight queue while the decode server pulls its KV, the decode
    server in its transfer queue; neither counts it as running then (SGLang's gauges, the 0.5.23 names; 0.5.9 calls
    the bootstrap queue prealloc). A drain that reads running + waiting only would call this prefill idle."""
    p, d = prefill(STANDIN_KV_TRANSFER_SECONDS="3"), None
    try:
        d = decode()
        req = body(p.bootstrap)
        to_prefill, to_decode = Call(p, "/v1/completions", req), Call(d, "/v1/completions", req)
        assert until(lambda: p.held("prefill")["num_prefill_inflight_queue_reqs"] == 1)
        assert p.held("prefill") == {"num_running_reqs": 0, "num_prefill_bootstrap_queue_reqs": 0,
                                     "num_prefill_inflight_queue_reqs": 1, "num_decode_prealloc_queue_reqs": 0,
                                     "num_decode_transfer_queue_reqs": 0}
        assert d.held("decode")["num_decode_transfer_queue_reqs"] == 1 and d.held("decode")["num_running_reqs"] == 0
        assert to_prefill.get()[0] == 200 and to_decode.get()[0] == 200
        assert until(lambda: set(p.held("prefill").values()) == {0} and set(d.held("decode").values()) == {0})
    finally:
        p.stop()
        if d is not None:
            d.stop()
    old = prefill(release="0.5.9")
    try:
        text = old.call("GET", "/metrics")[1]
        assert "sglang:num_prefill_prealloc_queue_reqs{" in text and "bootstrap_queue" not in text
    finally:
        old.stop()


def test_mode_null_is_unchanged():
    bootstrap = free_port()
    srv = Server(["--disaggregation-bootstrap-port", str(bootstrap)])
    try:
        code, text = srv.call("POST", "/v1/completions", body(free_port()))   # bootstrap fields are ignored
        assert code == 200 and json.loads(text)["usage"]["completion_tokens"] == 5
        code, text = srv.call("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert code == 200 and json.loads(text)["usage"]["completion_tokens"] == 2
        assert srv.running("unified") == 0
        assert srv.call("GET", "/health", port=bootstrap)[0] is None
    finally:
        out = srv.stop()
    assert "CommonKVBootstrapServer" not in out and "disaggregation warmup" not in out
    assert "'disaggregation_mode': 'null'" in out
