# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.9 log catalogue: the real texts the server prints, and a watcher that reads one invocation.

Texts come from the released ``sglang==0.5.9`` wheel (file and line given for each; see
docs/sglang_service.md). Line format (utils/common.py ``configure_logger`` ~1216):
``[%Y-%m-%d %H:%M:%S{.mmm with SGLANG_LOG_MS=1}{prefix}] message``. The scheduler's prefix
(managers/scheduler.py ``run_scheduler_process`` ~3080) is, in this order and each only when it applies:
`` DP{dp_rank}`` (dp_rank set or SGLANG_DP_RANK), `` PP{pp_rank}`` (pp_size > 1), `` ATTN_CP{rank}``
(attn_cp_size > 1), `` MOE_DP{rank}`` (moe_dp_size > 1), `` TP{tp_rank}`` (tp_size > 1), `` EP{rank}``
(ep_size > 1). With tp 1 and nothing else, a scheduler line carries no tag at all, like the main process.
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

RANK_TAGS = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
LINE_RE = re.compile(r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(?P<ms>\d{3}))?"
                     r"(?P<tags>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (?P<msg>.*)$", re.S)
TP_TAG_RE = re.compile(r"(?:^| )TP(\d+)(?: |$)")
PURE_TP_RE = re.compile(r"^TP(\d+)$")
# Values of the API keys in SGLang's server_args line and on a command line.
SECRET_FIELD_RE = re.compile(r"((?:admin_)?api_key=)('[^']*'|\"[^\"]*\"|[^,)\s]+)")
SECRET_FLAG_RE = re.compile(r"(--(?:admin-)?api-key[= ])(\S+)")
MASK = "********"
HICACHE_REL_TOLERANCE = 0.005   # SGLang prints GB with 2 decimals; KV size (GiB) too: 0.5 % + 0.01 GB covers it
HICACHE_ABS_TOLERANCE = 0.01
GIB = float(1 << 30)
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
    """The ``%Y-%m-%d %H:%M:%S[.mmm]`` prefix of an SGLang line (sortable as text), or None."""
    match = LINE_RE.match(line)
    if not match:
        return None
    return match.group("stamp") + ("." + match.group("ms") if match.group("ms") else ".000")


def parse_tagged(line):
    """Split an SGLang log line into (rank tag, message): the tag is the scheduler's prefix without its leading
    space (``TP3``, ``DP1 TP3``, ``PP1 ATTN_CP0 TP2 EP2``...), ``""`` for a line with SGLang's prefix but no tag
    (the main process, or the only scheduler when tp is 1), None for a line without SGLang's prefix."""
    match = LINE_RE.match(line)
    if not match:
        return None, line
    return match.group("tags").strip(), match.group("msg")


def parse_line(line):
    """Split an SGLang log line into (tensor-parallel rank or None, message); lines without the prefix give
    (None, line). The TP rank alone does not identify a scheduler with PP/DP: LogWatch uses parse_tagged."""
    tag, msg = parse_tagged(line)
    if not tag:
        return None, msg
    tp = TP_TAG_RE.search(tag)
    return (int(tp.group(1)) if tp else None), msg


def _tag_sort_key(tag):
    return [(name, int(num)) for name, num in re.findall(r"([A-Z_]+)(\d+)", tag or "")]


def rank_keys(tags):
    """Rank tags -> the values to report: ints when every tag is a plain ``TPn`` (or no tag: rank 0, tp 1),
    else the tags themselves (``DP0 TP3``), sorted by their numbers."""
    tags = list(tags)
    if all(tag == "" or PURE_TP_RE.match(tag) for tag in tags):
        return sorted(int(PURE_TP_RE.match(tag).group(1)) if tag else 0 for tag in tags)
    return sorted(tags, key=_tag_sort_key)


def mask_secrets(text, secrets=()):
    """Mask the values of api_key / admin_api_key (server_args line, --api-key flags) and any known secret."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 1:
            text = text.replace(secret, MASK)
    text = SECRET_FIELD_RE.sub(lambda m: m.group(1) + (m.group(2) if m.group(2) == "None" else "'%s'" % MASK), text)
    return SECRET_FLAG_RE.sub(lambda m: m.group(1) + MASK, text)


def expected_host_pool_gb(kv_tokens, kv_gb, ratio=None, size_gb=None, page_size=1):
    """SGLang 0.5.9's host pool (mem_cache/memory_pool_host.py HostKVCache.__init__) from the rank's device pool:
    size = hicache_size * 1e9 // bytes_per_token, else int(device tokens * ratio); aligned up to a page
    (size // page + 1 pages); printed as size * bytes_per_token / 1e9. bytes_per_token comes from the KV line
    (KV size is GiB). None when the request cannot be worked out."""
    if not kv_tokens or not kv_gb:
        return None
    page_size = page_size or 1
    per_token = kv_gb * GIB / kv_tokens
    if size_gb:
        size = int(size_gb * 1e9 // per_token)
    elif ratio:
        size = int(kv_tokens * ratio)
    else:
        return None
    size = (size // page_size + 1) * page_size
    return round(size * per_token / 1e9, 2)


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
        try:
            self.ready_re = re.compile(ready_pattern)
        except re.error as exc:
            raise ValueError("ready_pattern: invalid regular expression %r: %s" % (ready_pattern, exc))
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
        self.dropped = 0          # lines of this invocation journald suppressed (rate limit)
        self.server_args_seen = False

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
        rank, msg = parse_tagged(line)
        if self.http_start_ts is None and HTTP_START_RE.search(line):
            self.http_start_ts = ts
        if "server_args=ServerArgs(" in msg:
            self.server_args_seen = True
        key = rank if rank is not None else ""
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

    def hicache_summary(self, expected_ranks=None, ratio=None, size_gb=None, page_size=1):
        values = list(self.hicache.values())
        summary = {
            "ranks_seen": rank_keys(self.hicache),
            "ranks_expected": expected_ranks,
            "host_pool_gb_per_rank": max(values) if values else None,
            "host_pool_gb_min": min(values) if values else None,
            "host_pool_gb_max": max(values) if values else None,
            "host_pool_gb_total": round(sum(values), 2) if values else 0.0,
        }
        if expected_ranks:
            tags = list(self.hicache)
            if all(tag == "" or PURE_TP_RE.match(tag) for tag in tags):
                seen = set(rank_keys(tags))
                summary["ranks_missing"] = [rank for rank in range(expected_ranks) if rank not in seen]
            else:
                summary["ranks_missing_count"] = max(0, expected_ranks - len(tags))
        if self.hicache_late:
            summary["ranks_after_ready"] = rank_keys(self.hicache_late)
        if self.dropped:
            summary["journal_lines_dropped"] = self.dropped
        check = self.hicache_vs_request(ratio, size_gb, page_size)
        if check is not None:
            summary["requested"] = check
        return summary

    def hicache_vs_request(self, ratio=None, size_gb=None, page_size=1):
        """Each rank's host pool against what --hicache-ratio / --hicache-size asks for, given the KV pool that rank
        printed. None when neither is known; else {ratio|size_gb, expected_gb_min/max, off: [{rank, logged,
        expected}]}."""
        if not self.hicache or not (ratio or size_gb):
            return None
        off = []
        expected_all = []
        for tag, logged in sorted(self.hicache.items(), key=lambda item: _tag_sort_key(item[0])):
            pools = self.kv.get(tag)
            if not pools:
                continue
            expected = expected_host_pool_gb(pools[0]["tokens"], pools[0]["gb"], ratio, size_gb, page_size)
            if expected is None:
                continue
            expected_all.append(expected)
            if abs(logged - expected) > HICACHE_ABS_TOLERANCE + HICACHE_REL_TOLERANCE * expected:
                off.append({"rank": tag or "TP0", "logged_gb": logged, "expected_gb": expected})
        if not expected_all:
            return None
        check = {"expected_gb_min": min(expected_all), "expected_gb_max": max(expected_all), "off": off}
        if size_gb:
            check["hicache_size_gb"] = size_gb
        else:
            check["hicache_ratio"] = ratio
        return check

    def kv_summary(self):
        if not self.kv:
            return {}
        first = self.kv[sorted(self.kv, key=_tag_sort_key)[0]][0]
        summary = {
            "tokens_per_rank": first["tokens"],
            "gb_per_rank": first["gb"],
            "ranks": rank_keys(self.kv),
            "max_total_num_tokens": self.max_total_num_tokens,
        }
        draft = [pools[1] for pools in self.kv.values() if len(pools) > 1]
        if draft:
            summary["draft_tokens_per_rank"] = draft[0]["tokens"]
            summary["draft_gb_per_rank"] = draft[0]["gb"]
        return summary
