# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A STAND-IN for the SGLang server (0.5.9, 0.5.23): a test fixture, never used by the product.

Its texts are the release table's (plugins/module_utils/_sglang_releases.py, generated from each release's wheel by
scripts/gen-sglang-texts.py; copied beside this file as sglang_standin_releases.py): it speaks the release named by
STANDIN_SGLANG_RELEASE, else the version of the ``sglang`` distribution installed beside it, else 0.5.9. The lines
below are 0.5.9's; 0.5.23 logs server_args as a dict, its KV line with the dtype, its HiCache line as
``Allocating kv hierarchical KV host pool: N tokens, X GB host memory.`` and, with EAGLE, a ``draft`` host pool.

The real server needs 8 GPUs and a 547 GB model. This program behaves as SGLang 0.5.9 does from the
outside, so that a systemd unit, its journal and its /health endpoint can be tested on a plain host:

* It takes SGLang's command line (parsed with ``parse_known_args``: unknown flags are ignored) and prints
  SGLang 0.5.9's real log texts in SGLang's format ``[%Y-%m-%d %H:%M:%S TPn] message`` (one ``TPn`` per
  tensor-parallel rank; lines of the main process carry no rank), unbuffered, so journald gets each line
  as it is printed.
* Start-up, in SGLang's order: ``server_args=ServerArgs(...)``; per rank ``Load weight end. ...``,
  ``KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB`` (the reference host at
  ``--mem-fraction-static 0.88``; other fractions scale it), ``Memory pool end. ...``, the CUDA graph
  capture lines (the release's: 0.5.9 ``Capture cuda graph end. Time elapsed: ...``, 0.5.14+ ``Capture target
  decode CUDA graph end. elapsed=...``); TP0 ``max_total_num_tokens=...``; with ``--enable-hierarchical-cache``
  per rank ``Allocating X.XX GB host memory for hierarchical KV cache.`` (ratio 2 -> 22.39, ratio 4 -> 44.77,
  ``--hicache-size N`` -> N.00); where the release prints it (0.5.17+) ``Engine startup timings (s):
  load_weight=..., kv_cache_allocation=..., scheduler_e2e=..., cuda_graph={...}, tokenizer_e2e=...``; then the
  HTTP server starts (connections to /health are refused before),
  a warm-up (/health answers 503) and ``The server is fired up and ready to roll!`` (/health 200).
* SIGTERM after warm-up (SGLang installs its handler with the first request, and the warm-up is one) logs
  ``SIGTERM received. ... Draining requests and shutting down...``, keeps logging
  ``Gracefully exiting... Remaining number of requests N...`` for STANDIN_DRAIN_SECONDS (the unit sits in
  "deactivating"), then, as SGLang does, logs ``kill_process_tree called: parent_pid=P, include_parent=True, pid=P``
  (0.5.13 on) and SIGKILLs itself: exit status 137, systemd records Result=signal. SIGTERM before
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
STANDIN_MISSING_MAMBA_RANKS (default 0) a hybrid model (its config.json under --model-path): that many ranks
                                       fewer print their Mamba state pool line.
STANDIN_FREE_HOST_GB (default 8.12)    the free host memory quoted by ``host_memory``.
STANDIN_DIST_TIMEOUT (default 600)     --nnodes > 1: seconds node 0 waits for the other nodes at the dist port, and
                                       they for node 0 (docs/standin.md, "One server over several hosts").
STANDIN_KV_TIMEOUT (default 30)        PD: seconds a prefill keeps a request's KV for a decode server (then 500), and a
                                       decode server's long poll for it (docs/standin.md, "Prefill/decode (PD)").
STANDIN_KV_TRANSFER_SECONDS (0.2)      PD: how long a room's KV hand-off takes; the prefill holds the request in its
                                       inflight queue meanwhile (sglang:num_prefill_inflight_queue_reqs).
SGLANG_LOG_MS (SGLang's own variable)  ``1``: stamps with milliseconds ``[%Y-%m-%d %H:%M:%S.mmm ...]``.
Also ``--log-level warning`` (info lines not printed), ``--enable-dp-attention --dp-size N`` and ``--ep-size N``
(rank tags ``DPd TPt EPe`` as SGLang's scheduler prints them; none with --tp 1).

Also from SGLang: ``--enable-hierarchical-cache`` with ``--disable-radix-cache`` and ``--hicache-ratio``
<= 1 fail with SGLang's texts; ``--speculative-algorithm EAGLE/EAGLE3`` logs the spec v2 line that matches
SGLANG_ENABLE_SPEC_V2 and adds the draft model's KV pool per rank.

HTTP: /health and /health_generate (refused / 503 / 200 as above, 503 while draining), /model_info,
/server_info, /get_model_info, /get_server_info, /v1/models; traffic on /generate (native), /v1/completions and
/v1/chat/completions, streaming (SSE ``data: {...}`` chunks, then ``data: [DONE]``) or not, with ``usage``: one
token per STANDIN_TOKEN_DELAY_SECONDS (default 0.02), STANDIN_MAX_TOKENS (default 16) tokens when the request
names no max_tokens; the words follow from the prompt (greedy, deterministic: the same prompt, the same answer;
STANDIN_ANSWER_SHIFT (default 0) shifts every answer by that many words: a wrong-output regression for the
correctness gate's tests); requests beyond --max-running-requests wait in a queue. /metrics (with --enable-metrics,
else 404) in Prometheus' text format with SGLang 0.5.9's names and labels (sglang:num_running_reqs,
sglang:num_queue_reqs, sglang:token_usage, sglang:gen_throughput, sglang:spec_accept_length (STANDIN_SPEC_ACCEPT_LENGTH
with a speculative algorithm, else 0), the disaggregation queues (sglang:num_prefill_bootstrap_queue_reqs, before
0.5.12 sglang:num_prefill_prealloc_queue_reqs, sglang:num_prefill_inflight_queue_reqs,
sglang:num_decode_prealloc_queue_reqs, sglang:num_decode_transfer_queue_reqs), sglang:prompt_tokens_total,
sglang:generation_tokens_total,
sglang:num_requests_total, ...). With --api-key every path but /health* and /metrics* needs
``Authorization: Bearer <key>`` (401 ``{"error": "Unauthorized"}``), as SGLang's middleware. While draining,
new requests are still accepted (as SGLang); the final SIGKILL closes the port and cuts every request still in
flight (the client gets no answer, or a stream that stops without ``[DONE]``).

Prefill/decode disaggregation (``--disaggregation-mode prefill|decode``, ``--disaggregation-bootstrap-port``,
``--disaggregation-transfer-backend`` accepted): a prefill serves SGLang's KV bootstrap server (the release's health
path answers 200 "OK"; 0.5.23 logs ``CommonKVBootstrapServer started successfully on host:port``), started where
SGLang starts it; a request with bootstrap_host/port/room is prefilled on the prefill, which keeps it in flight until a
decode server took its KV, and decoded on the decode server once it took the KV from that prefill. The hand-off is
the stand-in's own (a long poll of the bootstrap server's /standin_kv?room=R), not SGLang's RDMA.

Run as ``python3 sglang_standin.py <SGLang flags>`` or, copied into a venv's site-packages, as
``python -m sglang_standin <SGLang flags>``. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import string
import sys
import threading
import time
import urllib.error
import urllib.request

try:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python < 3.7
    from http.server import BaseHTTPRequestHandler, HTTPServer as ThreadingHTTPServer

# The reference production host (see docs/standin.md): 96 GB GPUs, weights 72.3 GB per GPU,
# MLA cell size (512 + 64) * 61 layers * 2 bytes = 70,272 bytes per token per rank.
CELL_SIZE = 70272
DRAFT_CELL_SIZE = 576 * 2   # the EAGLE-3 draft model's one MLA layer
GPU_TOTAL_GIB = 95.0
WEIGHTS_GIB = 72.3
REF_TOKENS = 159277
REF_FRACTION = 0.88
GIB = 1 << 30

STATE = {"phase": "loading", "ready_at": None, "draining": False}
ARGS = None
DEFAULT_RELEASE = "0.5.9"


def load_releases():
    """SGLang's texts per release: the collection's table (plugins/module_utils/_sglang_releases.py, generated from
    the wheels by scripts/gen-sglang-texts.py), copied beside this file as sglang_standin_releases.py (the
    scenarios' prepare copies tests/standin/, where that name links to the table), or read from the checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "sglang_standin_releases.py"),
                 os.path.join(here, "..", "..", "plugins", "module_utils", "_sglang_releases.py")):
        if os.path.exists(path):
            namespace = {}
            with open(path) as handle:
                exec(compile(handle.read(), path, "exec"), namespace)  # pylint: disable=exec-used
            return namespace["RELEASES"]
    raise SystemExit("stand-in: no release table beside %s (copy tests/standin/ whole)" % __file__)


def standin_release(releases):
    """The release whose texts this stand-in speaks: STANDIN_SGLANG_RELEASE, else the version of the sglang
    distribution installed beside it (importlib.metadata), else 0.5.9."""
    wanted = os.environ.get("STANDIN_SGLANG_RELEASE", "").strip()
    if not wanted:
        try:
            from importlib import metadata
            wanted = metadata.version("sglang")
        except Exception:  # pylint: disable=broad-except
            wanted = DEFAULT_RELEASE
    if wanted not in releases:
        raise SystemExit("stand-in: no texts for SGLang %s (known: %s)" % (wanted, ", ".join(sorted(releases))))
    return wanted


RELEASES = load_releases()
RELEASE = standin_release(RELEASES)
TEXTS = RELEASES[RELEASE]["texts"]


class _Fill(string.Formatter):
    """A template's fields from the values given; one not given prints as 0 (a number) or nothing."""

    def get_value(self, key, args, kwargs):
        return kwargs.get(key, "") if isinstance(key, str) else ""

    def format_field(self, value, format_spec):
        if value == "" and format_spec:
            value = 0
        return super().format_field(value, format_spec)


def has_text(family):
    return bool(TEXTS.get(family))


def text(family, values=None, want=(), avoid=()):
    """SGLang's text of that family in the stand-in's release, filled in: the first template holding every
    ``want`` and no ``avoid`` substring."""
    for template in TEXTS.get(family, []):
        if all(w in template for w in want) and not any(a in template for a in avoid):
            return _Fill().format(template, **(values or {}))
    raise KeyError("SGLang %s has no %s text with %r and without %r" % (RELEASE, family, want, avoid))


MAMBA_SLOTS = 412   # the stand-in's max_mamba_cache_size per rank (a hybrid model's state slots)


def model_config(path):
    """config.json of --model-path when it is a directory on this host (the stand-in model directories of
    tests/standin/make_standin_model.py), else {}."""
    try:
        with open(os.path.join(path, "config.json")) as handle:
            config = json.load(handle)
    except (IOError, OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def is_hybrid(config):
    """A hybrid linear-attention model, as the collection's model preflight tells one (config.json or text_config:
    layer_types with linear/mamba layers, full_attention_interval, hybrid_override_pattern)."""
    for holder in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
        types = holder.get("layer_types")
        if isinstance(types, list) and any(isinstance(t, str) and ("linear" in t or "mamba" in t) for t in types):
            return True
        if holder.get("full_attention_interval") or holder.get("hybrid_override_pattern"):
            return True
    return False


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


def rank_prefix(rank):
    """The scheduler's tags as SGLang 0.5.9 builds them (managers/scheduler.py ~3080): `` DPd`` with
    --enable-dp-attention and --dp-size > 1, `` TPt`` when tp > 1, `` EPe`` when --ep-size > 1 (none when tp is 1)."""
    if ARGS is None:
        return " TP%d" % rank
    tp = max(1, ARGS.tp_size)
    prefix = ""
    if ARGS.enable_dp_attention and ARGS.dp_size > 1:
        prefix += " DP%d" % (rank // max(1, tp // ARGS.dp_size))
    if tp > 1:
        prefix += " TP%d" % rank
    if ARGS.ep_size > 1:
        prefix += " EP%d" % rank
    return prefix


def emit(message, rank=None, stream=None):
    """One SGLang log line: ``[%Y-%m-%d %H:%M:%S{.mmm}{tags}] message`` (utils/common.py configure_logger), flushed
    at once. SGLANG_LOG_MS=1 adds milliseconds, as in SGLang; with --log-level warning or higher the info lines
    (those on stdout) are not printed."""
    if stream is None and ARGS is not None and ARGS.log_level.lower() in ("warning", "error", "critical"):
        return
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes"):
        stamp += ".%03d" % int((now % 1) * 1000)
    prefix = "[%s%s]" % (stamp, rank_prefix(rank)) if rank is not None else "[%s]" % stamp
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
    parser.add_argument("--admin-api-key", default=None)
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
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--dp", "--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    parser.add_argument("--enable-dp-attention", action="store_true")
    parser.add_argument("--ep", "--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", dest="node_rank", type=int, default=0)
    parser.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    # prefill/decode disaggregation (SGLang's arg_groups/fields/disagg.py): the backend is accepted, nothing else
    parser.add_argument("--disaggregation-mode", choices=("null", "prefill", "decode"), default="null")
    parser.add_argument("--disaggregation-bootstrap-port", type=int,
                        default=RELEASES[RELEASE].get("rules", {}).get("pd_bootstrap_port_default", 8998))
    parser.add_argument("--disaggregation-transfer-backend", default="mooncake")
    return parser


def kv_tokens(fraction):
    """SGLang's memory math on the reference host: rest = available - total * (1 - fraction)."""
    rest_ref = (REF_TOKENS * CELL_SIZE + CELL_SIZE / 2.0) / GIB
    rest = rest_ref + GPU_TOTAL_GIB * (fraction - REF_FRACTION)
    if rest <= 0:
        return 0
    return int(rest * GIB) // CELL_SIZE


def host_pool_tokens(args, tokens):
    """The host pool's tokens, as host_pool_gb counts them."""
    if args.hicache_size > 0:
        return int(args.hicache_size * 1e9 // CELL_SIZE) + 1
    return int(tokens * args.hicache_ratio) + 1


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
    emit(text("fatal_scheduler_exception", {"_1": "Traceback (most recent call last):"}), rank, sys.stderr)
    for line in lines:
        raw(line, sys.stderr)
    raw(final, sys.stderr)


def die_by_sigquit():
    """The launch-phase SIGQUIT handler of SGLang's main process: log, then kill the process tree."""
    emit(text("fatal_child_sigquit"), None, sys.stderr)
    kill_process_tree(sys.stderr)
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
        "api_key=%r" % (args.api_key,),  # as SGLang 0.5.9 logs it: the server role's launcher masks it
        "admin_api_key=%r" % (args.admin_api_key,),
        "served_model_name=%r" % (args.served_model_name or args.model_path),
        "enable_hierarchical_cache=%r" % args.enable_hierarchical_cache,
        "hicache_ratio=%r" % args.hicache_ratio,
        "hicache_size=%r" % args.hicache_size,
        "hicache_write_policy=%r" % args.hicache_write_policy,
        "hicache_io_backend=%r" % args.hicache_io_backend,
        "hicache_mem_layout=%r" % args.hicache_mem_layout,
        "speculative_algorithm=%r" % args.speculative_algorithm,
        "disaggregation_mode=%r" % args.disaggregation_mode,
        "disaggregation_transfer_backend=%r" % args.disaggregation_transfer_backend,
        "disaggregation_bootstrap_port=%d" % args.disaggregation_bootstrap_port,
    ]
    if RELEASES[RELEASE]["server_args_form"] == "dict":
        # 0.5.23: server_args={'model_path': ..., 'api_key': ...} (entrypoints/engine.py _server_args_for_logging)
        as_dict = {}
        for field in fields:
            name, value = field.split("=", 1)
            as_dict[name] = eval(value)  # pylint: disable=eval-used  # the reprs just made
        return text("server_args", {"args": repr(as_dict)})
    return text("server_args", {"args": "ServerArgs(%s)" % ", ".join(fields)})


class Traffic(object):
    """Requests in flight, the queue and the counters behind /metrics (SGLang 0.5.9's metric names). A request of
    a prefill or decode server leaves the running batch while it waits in one of SGLang's disaggregation queues
    (PD_QUEUES: ``hold``), as the real scheduler keeps it there, and is counted there, not as running."""

    def __init__(self):
        self.cond = threading.Condition()
        self.running = {}          # rid -> tokens held (prompt + generated so far)
        self.held = {}             # rid -> (PD queue, tokens): out of the running batch, in a disaggregation queue
        self.queued = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.aborted_total = 0
        self.recent = []           # (time, tokens) of the last seconds, for gen_throughput
        self.next_id = 0

    def admit(self, prompt_tokens, limit):
        """Wait for a running slot (max_running_requests), as the scheduler's waiting queue does."""
        with self.cond:
            self.next_id += 1
            rid = "%032x" % random.getrandbits(128)
            self.queued += 1
            while len(self.running) >= limit:
                self.cond.wait(0.1)
            self.queued -= 1
            self.running[rid] = prompt_tokens
            return rid

    def token(self, rid):
        with self.cond:
            now = time.time()
            self.running[rid] = self.running.get(rid, 0) + 1
            self.recent.append((now, 1))
            cut = now - 2.0
            while self.recent and self.recent[0][0] < cut:
                self.recent.pop(0)

    def hold(self, rid, queue):
        """A PD request moves from the running batch into SGLang's disaggregation queue ``queue`` (a PD_QUEUES
        key), or back into the running batch (queue None)."""
        with self.cond:
            tokens = self.held.pop(rid, (None, None))[1]
            if tokens is None:
                tokens = self.running.pop(rid, 0)
            if queue is None:
                self.running[rid] = tokens
            else:
                self.held[rid] = (queue, tokens)
            self.cond.notify_all()

    def finish(self, rid, prompt_tokens, completion_tokens, aborted=False):
        with self.cond:
            self.running.pop(rid, None)
            self.held.pop(rid, None)
            if aborted:
                self.aborted_total += 1
            else:
                self.requests_total += 1
                self.prompt_tokens_total += prompt_tokens
                self.generation_tokens_total += completion_tokens
            self.cond.notify_all()

    def snapshot(self):
        with self.cond:
            now = time.time()
            recent = sum(n for t, n in self.recent if t >= now - 2.0)
            pd = dict((queue, 0) for queue in PD_QUEUES)
            for queue, _tokens in self.held.values():
                pd[queue] += 1
            return dict(pd, running=len(self.running), queued=self.queued,
                        used=sum(self.running.values()) + sum(t for _q, t in self.held.values()),
                        rids=sorted(set(self.running) | set(self.held)), gen_throughput=recent / 2.0,
                        prompt_tokens_total=self.prompt_tokens_total,
                        generation_tokens_total=self.generation_tokens_total,
                        requests_total=self.requests_total, aborted_total=self.aborted_total)


# SGLang's disaggregation queues (observability/metrics_collector.py, 0.5.23; metrics/collector.py, 0.5.9; the
# prefill's first queue's gauge is "prealloc" before 0.5.12): the gauge of each and its help text. A prefill holds a request
# in its bootstrap queue until a decode server asked for its KV (the handshake) and in its inflight queue while the
# decode server pulls the KV; a decode server holds it in its transfer queue until the KV came.
PD_QUEUES = {
    "bootstrap": ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    "inflight": ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    "prealloc": ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    "transfer": ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
}


def pd_metric(queue):
    """The gauge's name in this release: before 0.5.12 (0.5.9, 0.5.10, 0.5.11 wheels) the bootstrap queue's gauge
    is called prealloc."""
    name = PD_QUEUES[queue][0]
    if queue == "bootstrap" and tuple(int(p) for p in RELEASE.split(".")[:3] if p.isdigit()) < (0, 5, 12):
        name = "num_prefill_prealloc_queue_reqs"
    return "sglang:" + name


TRAFFIC = Traffic()
WORDS = ("The", " stand-in", " answers", " as", " SGLang", " does", ",", " one", " token", " at", " a", " time", ".")


def count_tokens(value):
    """A rough token count (whitespace words) of a prompt: a string, a list of strings or of token ids."""
    if value is None:
        return 0
    if isinstance(value, str):
        return max(1, len(value.split()))
    if isinstance(value, list):
        return sum(1 if isinstance(item, int) else count_tokens(item) for item in value)
    return 1


def chat_prompt_tokens(messages):
    total = 0
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += 4 + count_tokens(content or "")
    return max(1, total)


METRIC_HELP = [
    # (name, type, help, source): the scheduler's gauges carry its labels, the tokenizer's counters model_name.
    ("sglang:num_running_reqs", "gauge", "The number of running requests.", "running"),
    ("sglang:num_used_tokens", "gauge", "The number of used tokens.", "used"),
    ("sglang:token_usage", "gauge", "The token usage.", "token_usage"),
    ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", "gen_throughput"),
    ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", "queued"),
    ("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.", "max_tokens"),
    ("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.",
     "spec_accept_length"),
    ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens_total"),
    ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
     "generation_tokens_total"),
    ("sglang:num_requests_total", "counter", "Number of requests processed.", "requests_total"),
    ("sglang:num_aborted_requests_total", "counter", "Number of requests aborted.", "aborted_total"),
]


def metrics_text():
    """/metrics in Prometheus' text format, as prometheus_client (multiprocess mode) writes SGLang's metrics."""
    snap = TRAFFIC.snapshot()
    name = ARGS.served_model_name or ARGS.model_path
    max_tokens = STATE.get("max_total_num_tokens") or 1
    spec = (ARGS.speculative_algorithm or "").upper()
    values = dict(snap, max_tokens=max_tokens, token_usage=round(float(snap["used"]) / max_tokens, 4),
                  spec_accept_length=env_float("STANDIN_SPEC_ACCEPT_LENGTH", 2.5) if spec else 0.0)
    # engine_type: SGLang's DisaggregationMode.to_engine_type (prefill, decode, else unified)
    engine = {"prefill": "prefill", "decode": "decode"}.get(ARGS.disaggregation_mode, "unified")
    sched = 'engine_type="%s",model_name="%s",moe_ep_rank="0",pp_rank="0",tp_rank="0"' % (engine, name)
    tok = 'model_name="%s"' % name
    lines = []
    for metric, kind, help_text, key in METRIC_HELP:
        base = metric[:-len("_total")] if kind == "counter" else metric
        lines.append("# HELP %s %s" % (base, help_text))
        lines.append("# TYPE %s %s" % (base, kind))
        lines.append("%s{%s} %s" % (metric, tok if kind == "counter" else sched, float(values[key])))
    for queue, (_name, help_text) in PD_QUEUES.items():
        # SGLang exports the four gauges in every mode (0 outside PD)
        lines.append("# HELP %s %s" % (pd_metric(queue), help_text))
        lines.append("# TYPE %s gauge" % pd_metric(queue))
        lines.append("%s{%s} %s" % (pd_metric(queue), sched, float(values[queue])))
    return ("\n".join(lines) + "\n").encode()


# Prefill/decode disaggregation (PD). What is SGLang's: the flags, the bootstrap server on a prefill (an HTTP server on
# --disaggregation-bootstrap-port answering the release's health path with 200 "OK", disaggregation/common/conn.py
# CommonKVBootstrapServer), the release's "started successfully" line, FAKE_BOOTSTRAP_HOST (the warm-up's requests
# skip the transfer), the 400 for a request without bootstrap_room and the error texts of a failed transfer. What is
# the STAND-IN'S OWN: the KV hand-off. SGLang moves the KV over RDMA (mooncake, nixl) after a handshake through the
# bootstrap server's /route; here the decode server long-polls the prefill's bootstrap server at STANDIN_KV_PATH
# for the request's bootstrap_room, and that answer is the "transfer" (no data, only the moment).
FAKE_BOOTSTRAP_HOST = "2.2.2.2"      # disaggregation/utils.py: the warm-up's requests, no transfer
STANDIN_KV_PATH = "/standin_kv"      # the stand-in's own hand-off path on the bootstrap server (not SGLang's)
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def kv_timeout():
    return env_float("STANDIN_KV_TIMEOUT", 30)


def kv_transfer_seconds():
    """How long the hand-off of a room's KV takes (the prefill holds it in its inflight queue meanwhile)."""
    return env_float("STANDIN_KV_TRANSFER_SECONDS", 0.2)


class KVRooms(object):
    """A prefill's rooms (bootstrap_room -> state), the stand-in's KV hand-off: ``prefilling`` (the request arrived),
    ``ready`` (its prefill is done, the KV waits for a decode server), ``fetched`` (a decode server took it) or
    ``failed`` (nobody took it within STANDIN_KV_TIMEOUT). A decode server may ask before the prefill got its copy of
    the request (the gateway sends both at once): its long poll waits for the room to be ready."""

    def __init__(self):
        self.cond = threading.Condition()
        self.rooms = {}            # room -> [state, since]
        self.asked = {}            # room -> when a decode server asked for its KV (the handshake)

    def give_up(self, room):
        """The prefill's side when no decode server asked in time: the room failed. False."""
        with self.cond:
            self._set(room, "failed")
            return False

    def wait_asked(self, room, timeout):
        """The prefill's bootstrap queue: True once a decode server asked for the room's KV, False after timeout."""
        with self.cond:
            deadline = time.time() + timeout
            while room not in self.asked and time.time() < deadline:
                self.cond.wait(min(0.5, max(0.01, deadline - time.time())))
            return room in self.asked

    def open(self, room):
        with self.cond:
            now = time.time()
            for old in [r for r, (state, since) in self.rooms.items()
                        if state in ("fetched", "failed") and since < now - 2 * kv_timeout()]:
                del self.rooms[old]
            self.rooms[room] = ["prefilling", now]
            self.cond.notify_all()

    def _set(self, room, state):
        self.rooms[room] = [state, time.time()]
        self.cond.notify_all()

    def ready_and_wait(self, room, timeout):
        """The prefill's side: the room's KV is ready; True once a decode server fetched it, False (the room failed)
        after ``timeout`` seconds."""
        with self.cond:
            self._set(room, "ready")
            deadline = time.time() + timeout
            while self.rooms.get(room, [None])[0] in ("ready", "transferring") and time.time() < deadline:
                self.cond.wait(min(0.5, max(0.01, deadline - time.time())))
            self.asked.pop(room, None)
            if self.rooms.get(room, [None])[0] == "fetched":
                del self.rooms[room]
                return True
            self._set(room, "failed")
            return False

    def fetch(self, room, timeout):
        """The bootstrap server's side of a decode server's long poll: ``fetched`` once the room is ready (the hand-off),
        ``failed`` if its prefill gave up, ``timeout`` when it never became ready within ``timeout`` seconds."""
        with self.cond:
            now = time.time()
            for old in [r for r, since in self.asked.items() if since < now - 2 * kv_timeout()]:
                del self.asked[old]
            self.asked[room] = now
            self.cond.notify_all()
            deadline = now + timeout
            while self.rooms.get(room, [None])[0] in (None, "prefilling") and time.time() < deadline:
                self.cond.wait(min(0.5, max(0.01, deadline - time.time())))
            state = self.rooms.get(room, [None])[0]
            if state != "ready":
                return "failed" if state in ("failed", "fetched", "transferring") else "timeout"
            self._set(room, "transferring")
        # the transfer itself: the prefill keeps the request in its inflight queue until the room is fetched
        time.sleep(kv_transfer_seconds())
        with self.cond:
            if self.rooms.get(room, [None])[0] != "transferring":
                return "failed"
            self._set(room, "fetched")
            return "fetched"


KV_ROOMS = KVRooms()


class BootstrapHandler(BaseHTTPRequestHandler):
    """A prefill's KV bootstrap server (SGLang: CommonKVBootstrapServer, aiohttp, no access log): the release's health
    path answers 200 "OK"; STANDIN_KV_PATH?room=R is the stand-in's hand-off (above); the rest 404 as aiohttp."""
    server_version = "Python/3 aiohttp"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        return

    def _text(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server API
        path, _sep, query = self.path.partition("?")
        if path == RELEASES[RELEASE]["rules"].get("pd_bootstrap_health_path", "/health"):
            self._text(200, "OK")
            return
        if path != STANDIN_KV_PATH:
            self._text(404, "404: Not Found")
            return
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        try:
            room = int(params.get("room", ""))
        except ValueError:
            self._text(400, "[stand-in] %s needs room=<bootstrap_room>" % STANDIN_KV_PATH)
            return
        state = KV_ROOMS.fetch(room, kv_timeout())
        if state == "fetched":
            self._send_json({"bootstrap_room": room, "kv": "stand-in"})
        elif state == "failed":
            self._text(410, "[stand-in] room %d: its prefill gave the KV up (not fetched in time)" % room)
        else:
            self._text(504, "[stand-in] room %d: no prefill of that room within %gs" % (room, kv_timeout()))

    def _send_json(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET  # noqa: N815


def start_bootstrap_server(args):
    """A prefill's KV bootstrap server, listening on (--host, --disaggregation-bootstrap-port) before this returns;
    the release's ``pd_bootstrap_started`` line (0.5.23: ``CommonKVBootstrapServer started successfully on
    host:port``; 0.5.9 prints nothing) once it listens. None when the port cannot be bound: SGLang's bootstrap thread
    logs ``Server error: [Errno 98] error while attempting to bind on address ...`` (asyncio's words) and SGLang
    starts on without it (its prefill ranks then fail to register); the stand-in ends start-up there instead."""
    port = args.disaggregation_bootstrap_port
    try:
        server = StandinHTTPServer((args.host, port), BootstrapHandler)
    except OSError as exc:
        reason = "[Errno %s] error while attempting to bind on address %r: %s" % (
            exc.errno, (args.host, port), (exc.strerror or str(exc)).lower())
        emit("Server error: %s" % reason, None, sys.stderr)
        raw("Traceback (most recent call last):", sys.stderr)
        raw('  File "sglang/srt/disaggregation/common/conn.py", in _run_server', sys.stderr)
        raw("OSError: %s" % reason, sys.stderr)
        raw("[stand-in] the KV bootstrap server cannot listen on %s:%d (--disaggregation-bootstrap-port): start-up "
            "ends here" % (args.host, port), sys.stderr)
        return None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if has_text("pd_bootstrap_started"):
        emit(text("pd_bootstrap_started", {"host": args.host, "port": port}))
    return server


def fetch_kv(host, port, room):
    """A decode server takes the KV of ``room`` from the prefill's bootstrap server at host:port (the stand-in's
    hand-off: a long poll of STANDIN_KV_PATH, bounded by STANDIN_KV_TIMEOUT). None when it came, else
    (phase, reason): "handshake" when the bootstrap server cannot be reached, "transfer" when it answered no KV."""
    url = "http://%s:%d%s?room=%d" % ("[%s]" % host if ":" in host else host, port, STANDIN_KV_PATH, room)
    try:
        with NO_PROXY.open(url, timeout=kv_timeout() + 5) as resp:
            resp.read()
        return None
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()
        return "transfer", "HTTP %d %s" % (exc.code, body)
    except urllib.error.URLError as exc:
        return "handshake", str(exc.reason)
    except (OSError, ValueError) as exc:
        return "transfer" if isinstance(exc, socket.timeout) else "handshake", str(exc) or exc.__class__.__name__


def _first(value):
    """A batch's first element (a bootstrap field is a value or a list of them, io_struct.py)."""
    return value[0] if isinstance(value, list) and value else value


class ClientGone(Exception):
    """The client closed the connection (or the router gave up on it)."""


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        status = args[1] if len(args) > 1 else ""
        raw('INFO:     %s:%d - "%s" %s' % (self.client_address[0], self.client_address[1], self.requestline, status))

    def _send(self, code, body, content_type="application/json"):
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self, path):
        """SGLang's API key middleware: /health* and /metrics* are always allowed, the rest need the Bearer key."""
        if not ARGS.api_key or path.startswith("/health") or path.startswith("/metrics"):
            return True
        parts = self.headers.get("Authorization", "").split(" ", 1)
        if len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == ARGS.api_key:
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def _error(self, code, message, err_type="BadRequestError"):
        self._send(code, {"object": "error", "message": message, "type": err_type, "param": None, "code": code})

    def do_GET(self):  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return
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
        name = ARGS.served_model_name or ARGS.model_path
        if path == "/metrics" and ARGS.enable_metrics:
            self._send(200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        elif path in ("/model_info", "/get_model_info"):
            self._send(200, {"model_path": ARGS.model_path, "tokenizer_path": ARGS.model_path,
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                             "has_image_understanding": False, "has_audio_understanding": False,
                             "model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
                             "standin": True})
        elif path in ("/server_info", "/get_server_info"):
            info = dict(vars(ARGS))
            info["api_key"] = None
            info["version"] = "0.5.9"
            info["standin"] = True
            snap = TRAFFIC.snapshot()
            info["internal_states"] = [{"max_total_num_tokens": STATE.get("max_total_num_tokens"),
                                        "last_gen_throughput": snap["gen_throughput"]}]
            self._send(200, info)
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "sglang",
                                                         "root": name, "max_model_len": ARGS.context_length}]})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if not self._authorized(path):
            return
        if path not in ("/generate", "/v1/completions", "/v1/chat/completions"):
            self._send(404, {"detail": "Not Found"})
            return
        try:
            req = json.loads(body.decode() or "{}")
            if not isinstance(req, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            self._error(400, "Invalid JSON body: %s" % exc)
            return
        self.generate(path, req)

    def _chunk(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            raise ClientGone()

    def generate(self, path, req):
        """Generate max_tokens tokens, one per STANDIN_TOKEN_DELAY_SECONDS, streamed (SSE) or in one answer."""
        name = ARGS.served_model_name or ARGS.model_path
        default_tokens = env_int("STANDIN_MAX_TOKENS", 16)
        if path == "/generate":
            params = req.get("sampling_params") or {}
            wanted = params.get("max_new_tokens")
            prompt_tokens = count_tokens(req.get("text") if req.get("text") is not None else req.get("input_ids"))
        elif path == "/v1/completions":
            wanted = req.get("max_tokens")
            prompt_tokens = count_tokens(req.get("prompt"))
        else:
            wanted = req.get("max_completion_tokens", req.get("max_tokens"))
            prompt_tokens = chat_prompt_tokens(req.get("messages"))
        try:
            max_tokens = default_tokens if wanted is None else int(wanted)
            if max_tokens < 0:
                raise ValueError()
        except (TypeError, ValueError):
            self._error(400, "max_tokens must be a non-negative integer, got %r" % (wanted,))
            return
        if prompt_tokens + max_tokens > ARGS.context_length:
            self._error(400, "Requested token count exceeds the model's maximum context length of %d tokens."
                        % ARGS.context_length)
            return
        handoff = self._pd_request(req)
        if handoff is False:
            return
        if ARGS.disaggregation_mode == "prefill":
            max_tokens = min(max_tokens, 1)     # the prefill's answer: its one token (the gateway drops it)
        stream = bool(req.get("stream"))
        # greedy and deterministic: the words follow from the prompt; STANDIN_ANSWER_SHIFT makes the stand-in answer
        # differently (a wrong-output regression, for the correctness gate's tests)
        prompt_value = req.get("text", req.get("input_ids", req.get("prompt", req.get("messages"))))
        first_word = (int(hashlib.sha256(json.dumps(prompt_value, sort_keys=True).encode("utf-8")).hexdigest(), 16)
                      + env_int("STANDIN_ANSWER_SHIFT", 0)) % len(WORDS)
        delay = env_float("STANDIN_TOKEN_DELAY_SECONDS", 0.02)
        limit = ARGS.max_running_requests or 2048
        rid = TRAFFIC.admit(prompt_tokens, limit)
        created = int(time.time())
        oid = rid if path == "/generate" else ("cmpl-" if path == "/v1/completions" else "chatcmpl-") + rid
        text = []
        start = time.time()
        ok = False
        try:
            if handoff is not None:
                if not self._pd_handoff(rid, handoff, delay):
                    return
                if ARGS.disaggregation_mode == "prefill":
                    delay = 0           # its token came with the prefill's forward, before the hand-off
            if stream:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                if path == "/v1/chat/completions":
                    self._chunk(self._chat_chunk(oid, created, name, {"role": "assistant", "content": ""}, None))
            for i in range(max_tokens):
                time.sleep(delay)
                word = WORDS[(first_word + i) % len(WORDS)]
                text.append(word)
                TRAFFIC.token(rid)
                if stream:
                    if path == "/generate":
                        self._chunk(self._native(rid, "".join(text), prompt_tokens, i + 1, None, start))
                    elif path == "/v1/completions":
                        self._chunk(self._cmpl_chunk(oid, created, name, word, None))
                    else:
                        self._chunk(self._chat_chunk(oid, created, name, {"content": word}, None))
            finish = {"type": "length", "length": max_tokens}
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + max_tokens,
                     "completion_tokens": max_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0}
            if stream:
                if path == "/generate":
                    self._chunk(self._native(rid, "".join(text), prompt_tokens, max_tokens, finish, start))
                elif path == "/v1/completions":
                    self._chunk(self._cmpl_chunk(oid, created, name, "", "length"))
                else:
                    self._chunk(self._chat_chunk(oid, created, name, {}, "length"))
                if path != "/generate" and (req.get("stream_options") or {}).get("include_usage"):
                    self._chunk({"id": oid, "object": "chat.completion.chunk" if "chat" in path else
                                 "text_completion", "created": created, "model": name, "choices": [],
                                 "usage": usage})
                self._chunk(b"[DONE]")
            elif path == "/generate":
                self._send(200, self._native(rid, "".join(text), prompt_tokens, max_tokens, finish, start))
            elif path == "/v1/completions":
                self._send(200, {"id": oid, "object": "text_completion", "created": created, "model": name,
                                 "choices": [{"index": 0, "text": "".join(text), "logprobs": None,
                                              "finish_reason": "length", "matched_stop": None}],
                                 "usage": usage, "metadata": {"weight_version": "default"}})
            else:
                self._send(200, {"id": oid, "object": "chat.completion", "created": created, "model": name,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(text),
                                                                      "reasoning_content": None,
                                                                      "tool_calls": None},
                                              "logprobs": None, "finish_reason": "length",
                                              "matched_stop": None}],
                                 "usage": usage, "metadata": {"weight_version": "default"}})
            ok = True
        except (ClientGone, BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            TRAFFIC.finish(rid, prompt_tokens, len(text), aborted=not ok)

    def _pd_request(self, req):
        """A request to a prefill or decode server: None when it has no hand-off (--disaggregation-mode null, or
        bootstrap_host FAKE_BOOTSTRAP_HOST: SGLang's warm-up, FakeKVSender/FakeKVReceiver), else (host, port, room);
        False when it was refused here. As SGLang's scheduler (managers/scheduler.py, 0.5.23): a request without
        bootstrap_room is aborted with 400 ``Invalid request: Disaggregated request received without bootstrap room
        id.`` and one error line; a missing bootstrap_port is this server's --disaggregation-bootstrap-port."""
        if ARGS.disaggregation_mode == "null":
            return None
        host, port, room = (_first(req.get(k)) for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room"))
        if room is None:
            message = ("Invalid request: Disaggregated request received without bootstrap room id. req.rid=%r"
                       % ("%032x" % random.getrandbits(128)))
            emit(message, 0, sys.stderr)
            self._error(400, message)
            return False
        try:
            room = int(room)
            port = ARGS.disaggregation_bootstrap_port if port is None else int(port)
        except (TypeError, ValueError):
            self._error(400, "bootstrap_room and bootstrap_port must be integers, got %r and %r" % (room, port))
            return False
        if host == FAKE_BOOTSTRAP_HOST:
            return None
        if ARGS.disaggregation_mode == "prefill":
            KV_ROOMS.open(room)             # a decode server's long poll for this room now waits for its prefill
        return (str(host), port, room)

    def _pd_handoff(self, rid, handoff, delay):
        """The stand-in's KV hand-off of an admitted request, held in SGLang's disaggregation queues as the real
        scheduler holds it (TRAFFIC.hold: the bootstrap and inflight queues of a prefill, the transfer queue of a
        decode server; /metrics counts it there, not as running).
        A prefill: its forward (one token's time), the room's KV ready, then it waits for a decode server to fetch it
        (STANDIN_KV_TIMEOUT at most: then 500 with SGLang's ``Prefill transfer failed ...``). A decode: it fetches the
        room's KV from the prefill's bootstrap server, else 500 with SGLang's ``Decode handshake/transfer failed ...``
        naming the stand-in's reason. True when the request goes on to its tokens."""
        host, port, room = handoff
        if ARGS.disaggregation_mode == "prefill":
            # SGLang's prefill: the bootstrap queue until a decode server asked for the KV, the running batch for
            # its forward, then the inflight queue until the decode server pulled the KV
            TRAFFIC.hold(rid, "bootstrap")
            asked = KV_ROOMS.wait_asked(room, kv_timeout())
            TRAFFIC.hold(rid, None)
            if asked:
                time.sleep(delay)
                TRAFFIC.hold(rid, "inflight")
            fetched = KV_ROOMS.ready_and_wait(room, kv_timeout()) if asked else KV_ROOMS.give_up(room)
            TRAFFIC.hold(rid, None)
            if fetched:
                return True
            message = ("Prefill transfer failed for request rank=0 req.rid=%r req.bootstrap_room=%d with exception "
                       "[stand-in] no decode server fetched the KV of room %d within %gs"
                       % (rid, room, room, kv_timeout()))
            emit(message, 0, sys.stderr)
            self._error(500, message, "InternalServerError")
            return False
        # SGLang's decode server: the transfer queue until the KV came, then the running batch
        TRAFFIC.hold(rid, "transfer")
        failure = fetch_kv(host, port, room)
        TRAFFIC.hold(rid, None)
        if failure is None:
            return True
        phase, reason = failure
        message = ("Decode %s failed for request rank=0 decode_req.req.rid=%r decode_req.req.bootstrap_room=%d with "
                   "exception [stand-in] KV transfer from %s:%d room %d failed: %s"
                   % (phase, rid, room, host, port, room, reason))
        emit(message, 0, sys.stderr)
        self._error(500, message, "InternalServerError")
        return False

    @staticmethod
    def _native(rid, text, prompt_tokens, completion_tokens, finish, start):
        return {"text": text, "output_ids": list(range(completion_tokens)),
                "meta_info": {"id": rid, "finish_reason": finish, "prompt_tokens": prompt_tokens,
                              "weight_version": "default", "completion_tokens": completion_tokens,
                              "cached_tokens": 0, "e2e_latency": round(time.time() - start, 4)}}

    @staticmethod
    def _cmpl_chunk(oid, created, name, text, finish):
        return {"id": oid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                             "matched_stop": None}]}

    @staticmethod
    def _chat_chunk(oid, created, name, delta, finish):
        return {"id": oid, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                             "matched_stop": None}]}


def node_ranks(args):
    """The global TP ranks this node runs: all of them on one node; with --nnodes N --node-rank K the release's
    rule node_tp_ranks ("contiguous": tp // N ranks from K * tp // N, SGLang's entrypoints/engine.py)."""
    tp = max(1, args.tp_size)
    if args.nnodes <= 1:
        return list(range(tp))
    per_node = max(1, tp // args.nnodes)
    return list(range(per_node * args.node_rank, per_node * (args.node_rank + 1)))


def dist_address(args):
    """(host, port) of --dist-init-addr (``host:port``, ``[v6]:port``)."""
    value = args.dist_init_addr or ""
    host, _sep, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit("stand-in: --nnodes %d needs --dist-init-addr HOST:PORT, got %r" % (args.nnodes, value))
    return host.strip("[]"), int(port)


class NodeGroup(object):
    """The rendezvous of a server over several hosts, as torch.distributed's TCPStore does it for SGLang: node 0
    listens on --dist-init-addr's port and waits for the other nodes, which connect to it (retrying) before they
    load anything. The connections stay open: a node that goes away without node 0's shutdown ends the others'
    schedulers (SGLang: the collective fails, the scheduler raises, the main process gets SIGQUIT). Node 0's clean
    end sends "shutdown" first when the release broadcasts it (rule nonzero_node_sigterm waits_for_node0: 0.5.23's
    ShutdownReq); with "exits" (0.5.9) it does not, and the other nodes fail as above."""

    def __init__(self, args):
        self.args = args
        self.peers = []
        self.lock = threading.Lock()
        self.ending = False

    def form(self, timeout):
        host, port = dist_address(self.args)
        if self.args.node_rank == 0:
            return self._lead(port, timeout)
        return self._join(host, port, timeout)

    def _lead(self, port, timeout):
        listener = socket.socket(socket.AF_INET6 if ":" in (self.args.host or "") else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("", port))
        except OSError:
            raw("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                "address. port: %d, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
                % port, sys.stderr)
            return False
        listener.listen(16)
        listener.settimeout(0.5)
        joined = set()
        deadline = time.time() + timeout
        while len(joined) < self.args.nnodes - 1:
            if time.time() >= deadline:
                raw("torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d clients "
                    "joined." % (timeout, len(joined) + 1, self.args.nnodes), sys.stderr)
                return False
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(10)
            try:
                hello = conn.makefile("r").readline().split()
            except OSError:
                conn.close()
                continue
            if len(hello) == 2 and hello[0] == "node" and hello[1].isdigit() and 0 < int(hello[1]) < self.args.nnodes \
                    and int(hello[1]) not in joined:
                joined.add(int(hello[1]))
                conn.settimeout(None)
                self.peers.append(conn)
                threading.Thread(target=self._watch, args=(conn, "node %s" % hello[1]), daemon=True).start()
            else:
                conn.close()
        self.listener = listener
        return True

    def _join(self, host, port, timeout):
        deadline = time.time() + timeout
        while True:
            try:
                conn = socket.create_connection((host, port), timeout=2)
                break
            except OSError:
                if time.time() >= deadline:
                    raw("torch.distributed.DistNetworkError: The client socket has timed out after %dms while trying "
                        "to connect to (%s, %d)." % (timeout * 1000, host, port), sys.stderr)
                    return False
                time.sleep(0.5)
        conn.sendall(("node %d\n" % self.args.node_rank).encode())
        conn.settimeout(None)
        self.peers.append(conn)
        threading.Thread(target=self._watch, args=(conn, "node 0"), daemon=True).start()
        return True

    def _watch(self, conn, who):
        try:
            words = conn.makefile("r").readline().split()
        except OSError:
            words = []
        with self.lock:
            if self.ending:
                return
            if words == ["shutdown"]:
                # node 0's ShutdownReq: this node's schedulers stop, its main process returns
                self.ending = True
                os._exit(0)
            if STATE["draining"] and self.args.node_rank == 0:
                return          # node 0 is going down anyway
            self.ending = True
        scheduler_exception(node_ranks(self.args)[0], [
            '  File "sglang/srt/managers/scheduler.py", in event_loop_overlap',
        ], "RuntimeError: [stand-in] %s of the group is gone (connection closed without a shutdown)" % who)
        die_by_sigquit()

    def shutdown(self):
        """Node 0's clean end: the other nodes stop too (releases that broadcast ShutdownReq)."""
        with self.lock:
            self.ending = True
            for conn in self.peers:
                try:
                    conn.sendall(b"shutdown\n")
                except OSError:
                    pass


GROUP = None


def node_sigterm_rule():
    return RELEASES[RELEASE].get("rules", {}).get("nonzero_node_sigterm", "exits")


class HealthOnlyHandler(BaseHTTPRequestHandler):
    """The health server of a node other than node 0 (SGLang's launch_dummy_health_check_server: FastAPI with
    /ping, /health, /health_generate answering 200, /metrics with --enable-metrics; uvicorn at log level warning,
    so no access lines)."""
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        return

    def do_GET(self):  # noqa: N802 - http.server API
        path = self.path.split("?", 1)[0]
        if path in ("/ping", "/health", "/health_generate"):
            body, code, kind = b"", 200, "application/json"
        elif path == "/metrics" and ARGS.enable_metrics:
            body, code, kind = metrics_text().encode(), 200, "text/plain; version=0.0.4; charset=utf-8"
        else:
            body, code, kind = b'{"detail":"Not Found"}', 404, "application/json"
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815


def on_node_sigterm(signum, frame):
    """0.5.23 on a node other than node 0: log, and wait for node 0's ShutdownReq (systemd's kill is the backstop)."""
    emit(text("nonzero_node_sigterm", {"node_rank": ARGS.node_rank}), None, sys.stderr)


def serve_as_follower(args):
    """Nodes 1..N-1 after their schedulers are up: the health server, until node 0's shutdown or the group ends."""
    server = StandinHTTPServer((args.host, args.port), HealthOnlyHandler)
    if node_sigterm_rule() == "waits_for_node0":
        signal.signal(signal.SIGTERM, on_node_sigterm)
    STATE["phase"] = "follower"
    server.serve_forever()
    return 0


class StandinHTTPServer(ThreadingHTTPServer):
    """One thread per connection (HTTP/1.0: one request each), a listen backlog like uvicorn's (2048)."""
    daemon_threads = True
    request_queue_size = 2048


# SGLang's texts on SIGTERM and at its end (0.5.9, 0.5.17 and 0.5.23 wheels; the real 0.5.17 server printed them,
# tests/fixtures/sglang/real/0.5.17-h200/). Its SIGTERM handler is installed with loop.add_signal_handler, which
# calls it without arguments: signum=None frame=None.
SIGTERM_TEXT = "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
DRAIN_TEXT = "Gracefully exiting... Remaining number of requests %d. Remaining requests remaining_rids=%r."
# utils/common.py kill_process_tree logs this first from 0.5.13 on (no such line in the 0.5.9, 0.5.11, 0.5.12 and
# 0.5.12.post1 wheels; there in 0.5.13, 0.5.17, 0.5.23), then SIGKILLs the process's children and the process itself.
KILL_TREE_TEXT = "kill_process_tree called: parent_pid=%d, include_parent=True, pid=%d"
KILL_TREE_LOGGED_SINCE = (0, 5, 13)


def release_key(release):
    return tuple(int(part) if part.isdigit() else 0 for part in release.split("."))


def kill_process_tree(stream=None):
    """SGLang's end, ``kill_process_tree(os.getpid(), include_parent=True)``: its line (0.5.13+), then SIGKILL of
    the children (the stand-in has none: its servers are threads) and of itself, so the exit status is 137 (as the
    real server's in every case)."""
    if release_key(RELEASE) >= KILL_TREE_LOGGED_SINCE:
        emit(KILL_TREE_TEXT % (os.getpid(), os.getpid()), None, stream)
    os.kill(os.getpid(), signal.SIGKILL)


def on_sigterm(signum, frame):
    emit(SIGTERM_TEXT)
    STATE["draining"] = True


def drain_and_exit():
    seconds = env_float("STANDIN_DRAIN_SECONDS", 0)
    end = time.time() + seconds
    while True:
        # SGLang's sigterm_watchdog: the requests still in flight, every second here (SGLang: every 5 s).
        # New requests are still accepted (only /health says 503); at the end of the drain the SIGKILL below
        # closes the port and cuts whatever is still in flight.
        rids = TRAFFIC.snapshot()["rids"]
        emit(DRAIN_TEXT % (len(rids), rids))
        if time.time() >= end:
            break
        time.sleep(min(1.0, max(0.01, end - time.time())))
    if GROUP is not None and node_sigterm_rule() == "waits_for_node0":
        GROUP.shutdown()          # ShutdownReq to every TP rank, those of the other nodes too
    if os.environ.get("STANDIN_DRAIN_EXIT", "kill") == "clean":
        sys.exit(0)
    kill_process_tree()


def _config_value(text):
    """One scalar of the YAML subset the server role writes (to_nice_yaml of strings): quoted or plain."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return json.loads(text)
    return text


def merge_config(argv):
    """SGLang 0.5.9's --config (server_args_config_parser.ConfigArgumentMerger): the YAML file's keys become
    flags put before the command line's (CLI > config); only .yaml/.yml; one --config at most."""
    if "--config" not in argv:
        return argv
    at = argv.index("--config")
    if argv.count("--config") > 1 or at == len(argv) - 1:
        raise SystemExit("Multiple config files specified! Only one allowed." if argv.count("--config") > 1
                         else "No config file specified after --config flag!")
    path = argv[at + 1]
    if not path.lower().endswith((".yaml", ".yml")):
        raise SystemExit("Config file must be YAML format, got: %s" % os.path.splitext(path)[1])
    try:
        import yaml  # pylint: disable=import-outside-toplevel
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except ImportError:
        data = {}
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("#") and ":" in line:
                    key, value = line.split(":", 1)
                    data[key.strip()] = _config_value(value)
    words = []
    for key, value in data.items():
        if value is True:
            words.append("--" + key)
        elif value not in (False, None):
            words.extend(["--" + key, str(value)])
    return words + argv[:at] + argv[at + 2:]


def main(argv=None):
    global ARGS
    argv = merge_config(list(sys.argv[1:] if argv is None else argv))
    args, _unknown = build_parser().parse_known_args(argv)
    ARGS = args
    fail = os.environ.get("STANDIN_FAIL", "").strip()
    load = env_float("STANDIN_LOAD_SECONDS", 2)
    warmup = env_float("STANDIN_WARMUP_SECONDS", 1)
    ranks = node_ranks(args)
    step = load / 6.0

    emit(server_args_line(args))
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        raw("Traceback (most recent call last):", sys.stderr)
        raw("ValueError: " + text("fatal_radix_exclusive"), sys.stderr)
        return 1
    if fail == "exit_early":
        return 1
    spec = (args.speculative_algorithm or "").upper()
    if spec in ("EAGLE", "EAGLE3") and has_text("fatal_spec_v2_topk"):
        # releases with the SGLANG_ENABLE_SPEC_V2 switch (0.5.9); later ones always run spec v2
        if os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true", "yes", "y"):
            emit("Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.")
        else:
            emit("Overlap scheduler is disabled when spec v2 is off")
    if args.disaggregation_mode == "prefill" and args.node_rank == 0:
        # Where SGLang starts a prefill's KV bootstrap server (entrypoints/engine.py _launch_subprocesses, both
        # releases): after server_args and the launch of the scheduler processes, in the main process's tokenizer
        # manager ("Init tokenizer manager first, as the bootstrap server is initialized here",
        # managers/disagg_service.py start_disagg_service), before the schedulers are ready (weights, KV, graphs)
        # and so long before the HTTP server; node 0 only (nodes 1..N-1 run no tokenizer manager).
        if start_bootstrap_server(args) is None:
            return 1
    time.sleep(step)
    if args.nnodes > 1:
        # torch.distributed's rendezvous comes before the weights: node 0 waits for every other node
        global GROUP
        GROUP = NodeGroup(args)
        if not GROUP.form(env_float("STANDIN_DIST_TIMEOUT", 600)):
            return 1
    started = time.time()
    for rank in ranks:
        emit(text("load_weight_begin", {"_1": GPU_TOTAL_GIB - 0.87}) if has_text("load_weight_begin")
             else "Load weight begin. avail mem=%.2f GB" % (GPU_TOTAL_GIB - 0.87), rank)
    time.sleep(step)
    avail = GPU_TOTAL_GIB - 0.87 - WEIGHTS_GIB
    config = model_config(args.model_path)
    hybrid = is_hybrid(config)
    architecture = (config.get("architectures") or ["KimiK25ForConditionalGeneration"])[0]
    for rank in ranks:
        emit(text("load_weight_end", {"elapsed": step, "model_type": architecture,
                                      "dtype": "torch.bfloat16", "after_avail_memory": avail, "mem_gb": WEIGHTS_GIB}),
             rank)
    if fail == "crash":
        bad = ranks[env_int("STANDIN_FAIL_RANK", 0) % len(ranks)]
        time.sleep(step)
        if has_text("fatal_rank_dead"):
            emit(text("fatal_rank_dead", {"rank": bad}), None, sys.stderr)
            emit("Exit code: -9", None, sys.stderr)
        else:
            raw("RuntimeError: " + text("fatal_rank_died_init", {"rank": bad, "exitcode": -9}), sys.stderr)
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
            ], "RuntimeError: " + text("fatal_kv_memory", {"mem_fraction_static": args.mem_fraction_static}))
        die_by_sigquit()
    STATE["max_total_num_tokens"] = tokens
    kv_gb = tokens * CELL_SIZE / float(GIB)
    for rank in ranks:
        emit(text("kv_pool", {"tokens": tokens, "gb": kv_gb, "pool": "KV Cache", "dtype": "torch.bfloat16"},
                  want=("{gb",)), rank)
        if spec in ("EAGLE", "EAGLE3"):
            emit(text("kv_pool", {"tokens": tokens, "gb": tokens * DRAFT_CELL_SIZE / float(GIB), "pool": "KV Cache",
                                  "dtype": "torch.bfloat16"}, want=("{gb",)), rank)
    if hybrid:
        # a hybrid model (config.json: Gated DeltaNet / Mamba layers): its Mamba state pool on each rank, the
        # release's text (with speculative decoding the variant that also sizes the intermediate states)
        missing_mamba = max(0, env_int("STANDIN_MISSING_MAMBA_RANKS", 0))
        for rank in ranks:
            if rank < ranks[-1] + 1 - missing_mamba:
                emit(text("mamba_pool", {"tokens": MAMBA_SLOTS, "_1": 0.52, "_2": 9.84, "_3": 0.31,
                                         "intermediate_ssm_gb": 2.46, "_4": 0.31},
                          want=("intermediate",) if spec else (), avoid=() if spec else ("intermediate",)), rank)
    for rank in ranks:
        emit("Memory pool end. avail mem=%.2f GB" % (avail - kv_gb), rank)
    time.sleep(step)
    new_graph_texts = any("{capture_name}" in template for template in TEXTS.get("cuda_graph_end", []))
    for rank in ranks:
        if new_graph_texts:
            # 0.5.14+ (model_runner_components/cuda_graph_setup.py from 0.5.16): one capture per graph kind
            emit("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], "
                 "avail mem=%.2f GB" % (avail - kv_gb), rank)
        else:
            emit("Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB"
                 % (avail - kv_gb), rank)
    if fail == "cuda_oom":
        bad = ranks[env_int("STANDIN_FAIL_RANK", 0) % len(ranks)]
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
        if new_graph_texts:
            emit(text("cuda_graph_end", {"capture_name": "target decode", "elapsed": step, "mem_usage": 1.21,
                                         "after_mem": avail - kv_gb - 1.21}, want=("{capture_name}",)), rank)
        else:
            emit("Capture cuda graph end. Time elapsed: %.2f s. mem usage=1.21 GB. avail mem=%.2f GB."
                 % (step, avail - kv_gb - 1.21), rank)
    running = args.max_running_requests or (48 if spec else 2048)
    left = avail - kv_gb - 1.21
    if 0 in ranks:
        emit(text("max_total_num_tokens", {"tokens": tokens, "chunked_prefill_size": args.chunked_prefill_size,
                                           "max_prefill_tokens": 16384, "max_running_requests": running,
                                           "context_len": args.context_length, "avail_mem": left,
                                           "startup_available_gpu_memory_gb": left}), 0)
    if args.enable_hierarchical_cache:
        if args.hicache_size <= 0 and args.hicache_ratio <= 1 and has_text("fatal_host_smaller"):
            for rank in ranks:
                scheduler_exception(rank, [
                    '  File "sglang/srt/mem_cache/memory_pool_host.py", line 168, in __init__',
                ], "AssertionError: " + text("fatal_host_smaller"))
            die_by_sigquit()
        pool = host_pool_gb(args, tokens)
        if fail == "host_memory":
            free = env_float("STANDIN_FREE_HOST_GB", 8.12)
            for rank in ranks:
                scheduler_exception(rank, [
                    '  File "sglang/srt/mem_cache/memory_pool_host.py", line 179, in __init__',
                    "    raise ValueError(",
                ], "ValueError: " + text("fatal_host_memory", {"gb": pool, "free_gb": free}))
            die_by_sigquit()
        missing = max(0, env_int("STANDIN_MISSING_RANKS", 0))
        for rank in ranks:
            if rank < ranks[-1] + 1 - missing:
                emit(text("hicache_host_pool", {"gb": pool, "pool": "kv", "tokens": host_pool_tokens(args, tokens)},
                          avoid=("packed MTP",)), rank)
                if hybrid and has_text("hicache_mamba_host_pool"):
                    # releases with HiCache for the Mamba radix cache: the state's host pool (ratio x the slots)
                    slots = int(MAMBA_SLOTS * max(args.hicache_ratio, 1.0))
                    emit(text("hicache_mamba_host_pool", {"gb": slots * 9.84 / MAMBA_SLOTS, "tokens": slots,
                                                          "layout": "page_first"}), rank)
                if spec in ("EAGLE", "EAGLE3") and "{pool}" in TEXTS["hicache_host_pool"][-1]:
                    # releases that give the draft model a host pool of its own, as many tokens as the target's
                    size = host_pool_tokens(args, tokens)
                    emit(text("hicache_host_pool", {"gb": size * DRAFT_CELL_SIZE / 1e9, "pool": "draft",
                                                    "tokens": size}, avoid=("packed MTP",)), rank)
    time.sleep(step)
    if args.nnodes > 1 and args.node_rank > 0:
        # no tokenizer, no API, no warm-up, no ready line on nodes 1..N-1 (SGLang's engine.py)
        return serve_as_follower(args)
    if has_text("engine_startup_timings"):
        # 0.5.17+ (entrypoints/engine.py _set_startup_time): the main process, once every scheduler is up
        emit(text("engine_startup_timings", {
            "load_weight": step, "kv_cache_allocation": 0.0, "scheduler_e2e": time.time() - started,
            "cuda_graph": "prefill=0.00, decode=%.2f, target_verify=0.00, draft_prefill=0.00, draft_decode=0.00, "
                          "draft_extend=0.00" % step, "tokenizer_e2e": time.time() - started + step}))

    # The HTTP server starts only after every scheduler is ready (before: connection refused).
    server = StandinHTTPServer((args.host, args.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    raw("INFO:     Started server process [%d]" % os.getpid())
    raw("INFO:     Waiting for application startup.")
    raw("INFO:     Application startup complete.")
    raw("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port))
    STATE["phase"] = "warming"
    thread.start()
    # The warm-up request is SGLang's first request: from now on SIGTERM drains.
    signal.signal(signal.SIGTERM, on_sigterm)
    if args.disaggregation_mode != "null":
        # SGLang's warm-up in PD mode (entrypoints/http_server.py, both releases): its requests carry bootstrap_host
        # FAKE_BOOTSTRAP_HOST, so no KV moves (here: no request is sent at all)
        emit("Start of pd disaggregation warmup ...")
    emit("Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, "
         "#queue-req: 0", 0)
    deadline = time.time() + warmup
    while time.time() < deadline and not STATE["draining"]:
        time.sleep(0.05)
    if not STATE["draining"]:
        STATE["ready_at"] = time.time()
        STATE["phase"] = "ready"
        emit(text("ready"))
    while not STATE["draining"]:
        time.sleep(0.1)
    drain_and_exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
