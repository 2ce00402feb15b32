# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A STAND-IN for the SGLang 0.5.9 server: a test fixture, never used by the product.

The real server needs 8 GPUs and a 547 GB model. This program behaves as SGLang 0.5.9 does from the
outside, so that a systemd unit, its journal and its /health endpoint can be tested on a plain host:

* It takes SGLang's command line (parsed with ``parse_known_args``: unknown flags are ignored) and prints
  SGLang 0.5.9's real log texts in SGLang's format ``[%Y-%m-%d %H:%M:%S TPn] message`` (one ``TPn`` per
  tensor-parallel rank; lines of the main process carry no rank), unbuffered, so journald gets each line
  as it is printed.
* Start-up, in SGLang's order: ``server_args=ServerArgs(...)``; per rank ``Load weight end. ...``,
  ``KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB`` (the reference host at
  ``--mem-fraction-static 0.88``; other fractions scale it), ``Memory pool end. ...``, the CUDA graph
  capture lines; TP0 ``max_total_num_tokens=...``; with ``--enable-hierarchical-cache`` per rank
  ``Allocating X.XX GB host memory for hierarchical KV cache.`` (ratio 2 -> 22.39, ratio 4 -> 44.77,
  ``--hicache-size N`` -> N.00); then the HTTP server starts (connections to /health are refused before),
  a warm-up (/health answers 503) and ``The server is fired up and ready to roll!`` (/health 200).
* SIGTERM after warm-up (SGLang installs its handler with the first request, and the warm-up is one) logs
  ``SIGTERM received. ... Draining requests and shutting down...``, keeps logging
  ``Gracefully exiting... Remaining number of requests N...`` for STANDIN_DRAIN_SECONDS (the unit sits in
  "deactivating"), then, as SGLang does, SIGKILLs itself (systemd records Result=signal). SIGTERM before
  warm-up ends the process at once (Python's default), as in SGLang.

Knobs (environment variables):

STANDIN_LOAD_SECONDS (default 2)       time from start to the HTTP server (weights, KV, graphs, HiCache).
STANDIN_WARMUP_SECONDS (default 1)     warm-up time: /health answers 503, then the ready line.
STANDIN_HEALTH_503_SECONDS (default 0) after the ready line /health still answers 503 this long.
STANDIN_DRAIN_SECONDS (default 0)      drain time after SIGTERM (once warm-up began).
STANDIN_DRAIN_EXIT (default kill)      ``kill``: SIGKILL itself after the drain as SGLang does;
                                       ``clean``: exit 0 instead.
STANDIN_MISSING_RANKS (default 0)      print the HiCache allocation line for that many ranks fewer
                                       (the highest ranks stay silent), e.g. 1 with --tp 8 -> 7 lines.
STANDIN_FAIL (default none)            one failure mode, with SGLang's real texts:
    host_memory  every rank: ``ValueError: Not enough host memory available. Requesting X GB but only have
                 Y GB free. Please reduce the size of the hierarchical cache.`` (needs HiCache), then the main
                 process logs ``Received sigquit from a child process. It usually means the child failed.``
                 and SIGKILLs itself.
    kv_memory    ``RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.``, then as
                 above.
    cuda_oom     ``Capture cuda graph failed: ...`` and ``torch.OutOfMemoryError: CUDA out of memory. ...``
                 inside ``Scheduler hit an exception:``, then as above.
    crash        a scheduler dies by SIGKILL (the OOM killer): ``Rank N scheduler is dead. Please check if
                 there are relevant logs.``, ``Exit code: -9``, ``Initialization failed. Please see the error
                 messages above.``; exit status 1.
    exit_early   exit status 1 right after ``server_args=...``, with no fatal text.
STANDIN_FAIL_RANK (default 0)          the rank that fails for ``crash`` / ``cuda_oom``.
STANDIN_FREE_HOST_GB (default 8.12)    the free host memory quoted by ``host_memory``.

Also from SGLang: ``--enable-hierarchical-cache`` with ``--disable-radix-cache`` and ``--hicache-ratio``
<= 1 fail with SGLang's texts; ``--speculative-algorithm EAGLE/EAGLE3`` logs the spec v2 line that matches
SGLANG_ENABLE_SPEC_V2 and adds the draft model's KV pool per rank.

HTTP: /health and /health_generate (refused / 503 / 200 as above, 503 while draining), /model_info,
/server_info, /v1/models, /get_model_info (these need ``Authorization: Bearer <key>`` when --api-key is set).

Run as ``python3 sglang_standin.py <SGLang flags>`` or, copied into a venv's site-packages, as
``python -m sglang_standin <SGLang flags>``. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python < 3.7
    from http.server import BaseHTTPRequestHandler, HTTPServer as ThreadingHTTPServer

# The reference production host (see docs/standin.md): 96 GB GPUs, weights 72.3 GB per GPU,
# MLA cell size (512 + 64) * 61 layers * 2 bytes = 70,272 bytes per token per rank.
CELL_SIZE = 70272
GPU_TOTAL_GIB = 95.0
WEIGHTS_GIB = 72.3
REF_TOKENS = 159277
REF_FRACTION = 0.88
GIB = 1 << 30

STATE = {"phase": "loading", "ready_at": None, "draining": False}
ARGS = None


def env_float(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return float(default)


def env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return int(default)


def emit(message, rank=None, stream=None):
    """One SGLang log line: ``[%Y-%m-%d %H:%M:%S TPn] message``, flushed at once."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    prefix = "[%s TP%d]" % (stamp, rank) if rank is not None else "[%s]" % stamp
    out = stream or sys.stdout
    out.write("%s %s\n" % (prefix, message))
    out.flush()


def raw(text, stream=None):
    """Lines without a prefix (a traceback's continuation lines, uvicorn)."""
    out = stream or sys.stdout
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def build_parser():
    parser = argparse.ArgumentParser(prog="sglang_standin", add_help=True)
    parser.add_argument("--model-path", "--model", dest="model_path", default="moonshotai/Kimi-K2.5")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--tp", "--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=REF_FRACTION)
    parser.add_argument("--enable-hierarchical-cache", action="store_true")
    parser.add_argument("--hicache-ratio", type=float, default=2.0)
    parser.add_argument("--hicache-size", type=int, default=0)
    parser.add_argument("--hicache-write-policy", default="write_through")
    parser.add_argument("--hicache-io-backend", default="kernel")
    parser.add_argument("--hicache-mem-layout", default="layer_first")
    parser.add_argument("--disable-radix-cache", action="store_true")
    parser.add_argument("--speculative-algorithm", default=None)
    parser.add_argument("--context-length", type=int, default=262144)
    parser.add_argument("--max-running-requests", type=int, default=None)
    parser.add_argument("--chunked-prefill-size", type=int, default=8192)
    return parser


def kv_tokens(fraction):
    """SGLang's memory math on the reference host: rest = available - total * (1 - fraction)."""
    rest_ref = (REF_TOKENS * CELL_SIZE + CELL_SIZE / 2.0) / GIB
    rest = rest_ref + GPU_TOTAL_GIB * (fraction - REF_FRACTION)
    if rest <= 0:
        return 0
    return int(rest * GIB) // CELL_SIZE


def host_pool_gb(args, tokens):
    """Host pool per rank exactly as SGLang 0.5.9's HostKVCache sizes and prints it (memory_pool_host.py):
    size = hicache_size * 1e9 // cell (or int(tokens * ratio)), aligned up to a page (page_size 1: + 1),
    printed as bytes / 1e9."""
    if args.hicache_size > 0:
        size = int(args.hicache_size * 1e9 // CELL_SIZE)
    else:
        size = int(tokens * args.hicache_ratio)
    size = size + 1  # page_num = size // page_size + 1, page_size 1
    return size * CELL_SIZE / 1e9


def scheduler_exception(rank, lines, final):
    """``Scheduler hit an exception: <traceback>`` as SGLang logs it (one journal entry per line)."""
    emit("Scheduler hit an exception: Traceback (most recent call last):", rank, sys.stderr)
    for line in lines:
        raw(line, sys.stderr)
    raw(final, sys.stderr)


def die_by_sigquit():
    """The launch-phase SIGQUIT handler of SGLang's main process: log, then kill the process tree."""
    emit("Received sigquit from a child process. It usually means the child failed.", None, sys.stderr)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(5)  # pragma: no cover
    sys.exit(1)  # pragma: no cover


def server_args_line(args):
    fields = [
        "model_path=%r" % args.model_path,
        "tokenizer_path=%r" % args.model_path,
        "host=%r" % args.host,
        "port=%d" % args.port,
        "mem_fraction_static=%r" % args.mem_fraction_static,
        "tp_size=%d" % args.tp_size,
        "api_key=%s" % ("'<redacted by the stand-in>'" if args.api_key else "None"),
        "served_model_name=%r" % (args.served_model_name or args.model_path),
        "enable_hierarchical_cache=%r" % args.enable_hierarchical_cache,
        "hicache_ratio=%r" % args.hicache_ratio,
        "hicache_size=%r" % args.hicache_size,
        "hicache_write_policy=%r" % args.hicache_write_policy,
        "hicache_io_backend=%r" % args.hicache_io_backend,
        "hicache_mem_layout=%r" % args.hicache_mem_layout,
        "speculative_algorithm=%r" % args.speculative_algorithm,
    ]
    return "server_args=ServerArgs(%s)" % ", ".join(fields)


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        status = args[1] if len(args) > 1 else ""
        raw('INFO:     %s:%d - "%s" %s' % (self.client_address[0], self.client_address[1], self.requestline, status))

    def _send(self, code, body):
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate"):
            if STATE["draining"] or STATE["phase"] != "ready":
                self._send(503, b"")
                return
            hold = env_float("STANDIN_HEALTH_503_SECONDS", 0)
            if time.time() - STATE["ready_at"] < hold:
                self._send(503, b"")
                return
            self._send(200, b"")
            return
        if ARGS.api_key and self.headers.get("Authorization", "") != "Bearer %s" % ARGS.api_key:
            self._send(401, {"error": "Unauthorized"})
            return
        name = ARGS.served_model_name or ARGS.model_path
        if path in ("/model_info", "/get_model_info"):
            self._send(200, {"model_path": ARGS.model_path, "tokenizer_path": ARGS.model_path,
                             "is_generation": True, "standin": True})
        elif path in ("/server_info", "/get_server_info"):
            info = dict(vars(ARGS))
            info["api_key"] = None
            info["version"] = "0.5.9"
            info["standin"] = True
            self._send(200, info)
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "sglang",
                                                         "root": name, "max_model_len": ARGS.context_length}]})
        else:
            self._send(404, {"detail": "Not Found"})


def on_sigterm(signum, frame):
    emit("SIGTERM received. signum=%r frame=%r. Draining requests and shutting down..." % (signum, frame))
    STATE["draining"] = True


def drain_and_exit():
    seconds = env_float("STANDIN_DRAIN_SECONDS", 0)
    end = time.time() + seconds
    while True:
        remaining = int(max(0.0, end - time.time()) + 0.999)
        emit("Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r."
             % (remaining, ["standin-%d" % i for i in range(remaining)]))
        if remaining == 0:
            break
        time.sleep(min(1.0, max(0.01, end - time.time())))
    if os.environ.get("STANDIN_DRAIN_EXIT", "kill") == "clean":
        sys.exit(0)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv=None):
    global ARGS
    args, _unknown = build_parser().parse_known_args(argv)
    ARGS = args
    fail = os.environ.get("STANDIN_FAIL", "").strip()
    load = env_float("STANDIN_LOAD_SECONDS", 2)
    warmup = env_float("STANDIN_WARMUP_SECONDS", 1)
    tp = max(1, args.tp_size)
    ranks = range(tp)
    step = load / 6.0

    emit(server_args_line(args))
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        raw("Traceback (most recent call last):", sys.stderr)
        raw("ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
            "and cannot be used at the same time. Please use only one of them.", sys.stderr)
        return 1
    if fail == "exit_early":
        return 1
    spec = (args.speculative_algorithm or "").upper()
    if spec in ("EAGLE", "EAGLE3"):
        if os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes", "y"):
            emit("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.")
        else:
            emit("Overlap scheduler is disabled when spec v2 is off")
    time.sleep(step)
    for rank in ranks:
        emit("Load weight begin. avail mem=%.2f GB" % (GPU_TOTAL_GIB - 0.87), rank)
    time.sleep(step)
    avail = GPU_TOTAL_GIB - 0.87 - WEIGHTS_GIB
    for rank in ranks:
        emit("Load weight end. elapsed=%.2f s, type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
             "avail mem=%.2f GB, mem usage=%.2f GB." % (step, avail, WEIGHTS_GIB), rank)
    if fail == "crash":
        bad = env_int("STANDIN_FAIL_RANK", 0) % tp
        time.sleep(step)
        emit("Rank %d scheduler is dead. Please check if there are relevant logs." % bad, None, sys.stderr)
        emit("Exit code: -9", None, sys.stderr)
        raw("Traceback (most recent call last):", sys.stderr)
        raw("EOFError", sys.stderr)
        raw("", sys.stderr)
        raw("During handling of the above exception, another exception occurred:", sys.stderr)
        raw("", sys.stderr)
        raw("Traceback (most recent call last):", sys.stderr)
        raw("RuntimeError: Initialization failed. Please see the error messages above.", sys.stderr)
        return 1
    time.sleep(step)
    tokens = kv_tokens(args.mem_fraction_static)
    if fail == "kv_memory" or tokens <= 0:
        for rank in ranks:
            scheduler_exception(rank, [
                '  File "sglang/srt/model_executor/model_runner_kv_cache_mixin.py", line 415, in init_memory_pool',
            ], "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        die_by_sigquit()
    kv_gb = tokens * CELL_SIZE / float(GIB)
    for rank in ranks:
        emit("KV Cache is allocated. #tokens: %d, KV size: %.2f GB" % (tokens, kv_gb), rank)
        if spec in ("EAGLE", "EAGLE3"):
            emit("KV Cache is allocated. #tokens: %d, KV size: %.2f GB" % (tokens, tokens * 576 * 2 / float(GIB)),
                 rank)
    for rank in ranks:
        emit("Memory pool end. avail mem=%.2f GB" % (avail - kv_gb), rank)
    time.sleep(step)
    for rank in ranks:
        emit("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB"
             % (avail - kv_gb), rank)
    if fail == "cuda_oom":
        bad = env_int("STANDIN_FAIL_RANK", 0) % tp
        scheduler_exception(bad, [
            '  File "sglang/srt/model_executor/cuda_graph_runner.py", line 373, in __init__',
            "    raise Exception(",
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU %d has a "
            "total capacity of %.2f GiB of which 1.05 GiB is free." % (bad, GPU_TOTAL_GIB),
        ], "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU %d has a total capacity "
           "of %.2f GiB of which 1.05 GiB is free." % (bad, GPU_TOTAL_GIB))
        die_by_sigquit()
    time.sleep(step)
    for rank in ranks:
        emit("Capture cuda graph end. Time elapsed: %.2f s. mem usage=1.21 GB. avail mem=%.2f GB."
             % (step, avail - kv_gb - 1.21), rank)
    running = args.max_running_requests or (48 if spec else 2048)
    emit("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=16384, max_running_requests=%d, "
         "context_len=%d, available_gpu_mem=%.2f GB"
         % (tokens, args.chunked_prefill_size, running, args.context_length, avail - kv_gb - 1.21), 0)
    if args.enable_hierarchical_cache:
        if args.hicache_size <= 0 and args.hicache_ratio <= 1:
            for rank in ranks:
                scheduler_exception(rank, [
                    '  File "sglang/srt/mem_cache/memory_pool_host.py", line 168, in __init__',
                ], "AssertionError: The host memory should be larger than the device memory with the current "
                   "protocol")
            die_by_sigquit()
        pool = host_pool_gb(args, tokens)
        if fail == "host_memory":
            free = env_float("STANDIN_FREE_HOST_GB", 8.12)
            for rank in ranks:
                scheduler_exception(rank, [
                    '  File "sglang/srt/mem_cache/memory_pool_host.py", line 179, in __init__',
                    "    raise ValueError(",
                ], "ValueError: Not enough host memory available. Requesting %.2f GB but only have %.2f GB free. "
                   "Please reduce the size of the hierarchical cache." % (pool, free))
            die_by_sigquit()
        missing = max(0, env_int("STANDIN_MISSING_RANKS", 0))
        for rank in ranks:
            if rank < tp - missing:
                emit("Allocating %.2f GB host memory for hierarchical KV cache." % pool, rank)
    time.sleep(step)

    # The HTTP server starts only after every scheduler is ready (before: connection refused).
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    raw("INFO:     Started server process [%d]" % os.getpid())
    raw("INFO:     Waiting for application startup.")
    raw("INFO:     Application startup complete.")
    raw("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))
    STATE["phase"] = "warming"
    thread.start()
    # The warm-up request is SGLang's first request: from now on SIGTERM drains.
    signal.signal(signal.SIGTERM, on_sigterm)
    emit("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0", 0)
    deadline = time.time() + warmup
    while time.time() < deadline and not STATE["draining"]:
        time.sleep(0.05)
    if not STATE["draining"]:
        STATE["ready_at"] = time.time()
        STATE["phase"] = "ready"
        emit("The server is fired up and ready to roll!")
    while not STATE["draining"]:
        time.sleep(0.1)
    drain_and_exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
