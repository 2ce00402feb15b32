# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang 0.5.9 log catalogue: the real texts the server prints, and a watcher that reads one invocation.

Texts come from the released ``sglang==0.5.9`` wheel (file and line given for each; see
docs/sglang_service.md). Line format: ``[%Y-%m-%d %H:%M:%S TPn] message`` (utils/common.py); scheduler
processes carry `` TPn`` (also ``DPn``/``EPn``/``PPn`` tags with data/expert/pipeline parallelism),
lines of the main process carry none.
"""

from __future__ import annotations

import re

# entrypoints/http_server.py ~1836, printed once after the warm-up request succeeded.
READY_TEXT = "The server is fired up and ready to roll!"
READY_PATTERN = re.escape(READY_TEXT)

# Fatal texts, most specific first: the reason quotes the line of the lowest-numbered pattern.
FATAL_PATTERNS = [
    # mem_cache/memory_pool_host.py ~179 (ValueError, per rank)
    r"Not enough host memory available\. Requesting [\d.]+ GB but only have [-\d.]+ GB free",
    # mem_cache/memory_pool_host.py ~168 (assert; hicache ratio <= 1)
    r"The host memory should be larger than the device memory with the current protocol",
    # model_executor/model_runner_kv_cache_mixin.py ~415
    r"Not enough memory\. Please try to increase --mem-fraction-static",
    # inside "Scheduler hit an exception:" (scheduler.py ~3190)
    r"torch\.OutOfMemoryError: CUDA out of memory",
    # model_executor/cuda_graph_runner.py ~373
    r"Capture cuda graph failed:",
    # server_args.py ~2685 / ~2381
    r"The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive",
    r"Spec v2 currently only supports topk = 1 for speculative decoding",
    # argparse (exit 2, before any child starts)
    r"error: argument --[\w-]+: invalid choice:",
    # entrypoints/http_server.py ~1687/1811
    r"Initialization failed\. warmup error:",
    # entrypoints/engine.py ~897 (then "Exit code: C"; -9 = SIGKILL, e.g. the OOM killer)
    r"Rank \d+ scheduler is dead\. Please check if there are relevant logs\.",
    # scheduler.py ~3190 and the other managers
    r"(?:Scheduler|TokenizerManager|DetokenizerManager) hit an exception:",
    # entrypoints/engine.py ~870 (launch phase) and the running-phase SIGQUIT handler
    r"Received sigquit from a child process\. It usually means the child failed\.",
    r"SIGQUIT received\..*It usually means one child failed\.",
    # entrypoints/engine.py ~905
    r"Initialization failed\. Please see the error messages above\.",
]

# Texts that look alarming but are NOT fatal (documented so nobody adds them to fail_patterns).
NOT_FATAL_TEXTS = [
    "libnuma.so: cannot open shared object file: No such file or directory",
    "The memory capacity is unbalanced. Some GPUs may be occupied by other processes.",
    "Max running requests is reset to 48 for speculative decoding.",
]

LINE_RE = re.compile(r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<tags>(?: [A-Z]{2}\d+)*)\] (?P<msg>.*)$")
TP_TAG_RE = re.compile(r"\bTP(\d+)\b")
# mem_cache/memory_pool_host.py ~187, once per rank, BEFORE the pinned buffer is allocated.
HICACHE_RE = re.compile(r"Allocating (?P<gb>\d+(?:\.\d+)?) GB host memory for hierarchical KV cache\.")
# mem_cache/memory_pool.py ~658 (MLA) and ~652 (MHA)
KV_MLA_RE = re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+), KV size: (?P<gb>\d+(?:\.\d+)?) GB")
KV_MHA_RE = re.compile(r"KV Cache is allocated\. #tokens: (?P<tokens>\d+), K size: (?P<k>\d+(?:\.\d+)?) GB, "
                       r"V size: (?P<v>\d+(?:\.\d+)?) GB")
# scheduler.py ~622, TP0 only
MAX_TOKENS_RE = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")
# The HTTP server starts (uvicorn) only after every scheduler is ready: the warm-up begins.
HTTP_START_RE = re.compile(r"Uvicorn running on |Application startup complete\.")


def line_stamp(line):
    """The ``%Y-%m-%d %H:%M:%S`` prefix of an SGLang line (sortable as text), or None."""
    match = LINE_RE.match(line)
    return match.group("stamp") if match else None


def parse_line(line):
    """Split an SGLang log line into (rank or None, message). Lines without the prefix give (None, line)."""
    match = LINE_RE.match(line)
    if not match:
        return None, line
    tp = TP_TAG_RE.search(match.group("tags"))
    return (int(tp.group(1)) if tp else None), match.group("msg")


def compile_patterns(patterns, what):
    """Compile user regexes; raise ValueError naming the bad one (checked before the host changes)."""
    compiled = []
    for pattern in patterns or []:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError("%s: invalid regular expression %r: %s" % (what, pattern, exc))
    return compiled


class LogWatch(object):
    """Reads the lines of ONE invocation in order and keeps what the readiness decision needs."""

    def __init__(self, ready_pattern=READY_PATTERN, fail_patterns=None, expect=None):
        self.ready_re = re.compile(ready_pattern)
        self.fail_res = compile_patterns(FATAL_PATTERNS if fail_patterns is None else fail_patterns,
                                         "fail_patterns")
        self.expect_res = compile_patterns(expect, "expect")
        self.lines_seen = 0
        self.first_line_ts = None
        self.http_start_ts = None
        self.ready_line = None
        self.ready_ts = None
        self.ready_stamp = None
        self.fatal = []           # (pattern index, order, line)
        self.hicache = {}         # rank -> GB, lines before the ready line only
        self.hicache_late = {}    # rank -> GB, lines after the ready line (do not count)
        self.kv = {}              # rank -> list of {tokens, gb}
        self.max_total_num_tokens = None
        self.expect_matched = {}  # pattern -> first line

    def feed(self, line, ts=None):
        self.lines_seen += 1
        order = self.lines_seen
        if self.first_line_ts is None:
            self.first_line_ts = ts
        for index, regex in enumerate(self.fail_res):
            if regex.search(line):
                self.fatal.append((index, order, line))
                break
        for regex in self.expect_res:
            if regex.pattern not in self.expect_matched and regex.search(line):
                self.expect_matched[regex.pattern] = line
        rank, msg = parse_line(line)
        if self.http_start_ts is None and HTTP_START_RE.search(line):
            self.http_start_ts = ts
        key = rank if rank is not None else 0
        match = HICACHE_RE.search(msg)
        if match:
            # Counted when before the ready line; a line that arrived later (another process or stream) but
            # carries a stamp not after the ready line's was printed before it and counts too.
            stamp = line_stamp(line)
            early = self.ready_line is None or (stamp is not None and self.ready_stamp is not None
                                                and stamp <= self.ready_stamp)
            target = self.hicache if early else self.hicache_late
            target.setdefault(key, float(match.group("gb")))
        match = KV_MLA_RE.search(msg)
        if match:
            self.kv.setdefault(key, []).append({"tokens": int(match.group("tokens")), "gb": float(match.group("gb"))})
        match = KV_MHA_RE.search(msg)
        if match:
            self.kv.setdefault(key, []).append(
                {"tokens": int(match.group("tokens")),
                 "gb": round(float(match.group("k")) + float(match.group("v")), 2)})
        match = MAX_TOKENS_RE.search(msg)
        if match and self.max_total_num_tokens is None:
            self.max_total_num_tokens = int(match.group("tokens"))
        if self.ready_line is None and self.ready_re.search(line):
            self.ready_line = line
            self.ready_ts = ts
            self.ready_stamp = line_stamp(line)

    @property
    def failed_line(self):
        """The line to quote: the most specific fatal pattern, earliest line among those."""
        if not self.fatal:
            return None
        return sorted(self.fatal)[0][2]

    @property
    def fatal_lines(self):
        return [line for _index, _order, line in sorted(self.fatal, key=lambda item: item[1])]

    def expect_missing(self):
        return [regex.pattern for regex in self.expect_res if regex.pattern not in self.expect_matched]

    def hicache_summary(self, expected_ranks=None):
        ranks = sorted(self.hicache)
        per_rank = max(self.hicache.values()) if self.hicache else None
        total = round(sum(self.hicache.values()), 2) if self.hicache else 0.0
        summary = {
            "ranks_seen": ranks,
            "ranks_expected": expected_ranks,
            "host_pool_gb_per_rank": per_rank,
            "host_pool_gb_total": total,
        }
        if expected_ranks:
            summary["ranks_missing"] = [rank for rank in range(expected_ranks) if rank not in self.hicache]
        if self.hicache_late:
            summary["ranks_after_ready"] = sorted(self.hicache_late)
        return summary

    def kv_summary(self):
        if not self.kv:
            return {}
        first = self.kv[min(self.kv)][0]
        summary = {
            "tokens_per_rank": first["tokens"],
            "gb_per_rank": first["gb"],
            "ranks": sorted(self.kv),
            "max_total_num_tokens": self.max_total_num_tokens,
        }
        draft = [pools[1] for pools in self.kv.values() if len(pools) > 1]
        if draft:
            summary["draft_tokens_per_rank"] = draft[0]["tokens"]
            summary["draft_gb_per_rank"] = draft[0]["gb"]
        return summary
