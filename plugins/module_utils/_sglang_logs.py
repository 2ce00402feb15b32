# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's log catalogue per release, and a watcher that reads one invocation.

The texts SGLang prints (ready line, KV and HiCache pools, server_args, fatal texts) are DATA per release:
``_sglang_releases.RELEASES``, written by scripts/gen-sglang-texts.py from each release's wheel (fixtures with
file:line and the wheel's sha256 in tests/fixtures/sglang/). ``texts_for(release)`` picks a release's table
(or its neighbours' for a release without one, or every table when the release is unknown) and compiles it.

Line format (0.5.9 utils/common.py ``configure_logger``; unchanged in 0.5.23):
``[%Y-%m-%d %H:%M:%S{.mmm with SGLANG_LOG_MS=1}{prefix}] message``. The scheduler's prefix is, in this order and
each only when it applies: `` DP{dp_rank}``, `` PP{pp_rank}`` (pp_size > 1), `` ATTN_CP{rank}``, `` MOE_DP{rank}``,
`` TP{tp_rank}`` (tp_size > 1), `` EP{rank}`` (ep_size > 1). With tp 1 and nothing else, a scheduler line carries
no tag at all, like the main process.
"""

from __future__ import annotations

import re
import string
import subprocess

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES
from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets, _timeline

# Texts of other programs, the same whatever the SGLang release: torch, argparse (Python's), uvicorn.
OTHER_FATAL = {
    "torch_oom": r"torch\.OutOfMemoryError: CUDA out of memory",
    "argparse_choice": r"error: argument --[\w-]+: invalid choice:",
    # 0.5.20+: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill
    "argparse_ambiguous": r"error: ambiguous option: --[\w-]+ could match ",
}
KV_ANCHOR = " is allocated"
HTTP_START_RE = re.compile(r"Uvicorn running on |Application startup complete\.")
# Fatal families, most specific first: the reason quotes the line of the lowest-numbered one.
FATAL_ORDER = ["fatal_host_memory", "fatal_hicache_reserve", "fatal_host_smaller", "fatal_kv_memory", "torch_oom",
               "fatal_cuda_graph", "fatal_radix_exclusive", "fatal_spec_v2_topk", "argparse_choice",
               "argparse_ambiguous", "fatal_warmup", "fatal_rank_dead", "fatal_rank_died_init",
               "fatal_scheduler_exception", "fatal_child_sigquit", "fatal_sigquit", "fatal_init_failed"]
_NUMBER = r"-?\d+(?:\.\d+)?"
_FIELD_PATTERNS = {"tokens": r"\d+", "rank": r"\d+", "gb": _NUMBER, "k_gb": _NUMBER, "v_gb": _NUMBER,
                   "pool": r".+?", "dtype": r"\S+", "args": r".*", "ratio": _NUMBER,
                   "mem_gb": _NUMBER, "elapsed": _NUMBER, "load_weight": _NUMBER, "kv_cache_allocation": _NUMBER,
                   "scheduler_e2e": _NUMBER, "tokenizer_e2e": _NUMBER, "cuda_graph": r"[^{}]*"}


def _vkey(version):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", version or ""))


KNOWN_RELEASES = sorted(RELEASES, key=_vkey)


def template_regex(template, fatal=False):
    """A release table's template (str.format syntax) -> regex text: literal parts escaped, named fields as
    groups, anonymous fields (``_N``) as ``.*?``. fatal: the text that identifies a fatal line, which may run over
    several journal lines or be cut: up to the first newline, and after the last value only to the end of that
    sentence, its full stop left out (``... GB free``, not the advice after it)."""
    parts = list(string.Formatter().parse(template))
    last_field = max([i for i, part in enumerate(parts) if part[1] is not None] or [-1])
    out, named = [], set()
    for index, (literal, field, spec, _conv) in enumerate(parts):
        if fatal:
            if "\n" in literal:
                out.append(re.escape(literal.split("\n", 1)[0]))
                break
            if last_field >= 0 and index > last_field:
                out.append(re.escape(re.split(r"\.(?:\s|$)", literal, maxsplit=1)[0]))
                break
        out.append(re.escape(literal))
        if field is None:
            continue
        if spec.endswith("d"):
            pattern = r"-?\d+"
        elif spec.endswith(("f", "e", "g")):
            pattern = _NUMBER
        else:
            pattern = _FIELD_PATTERNS.get(field, r".*?")
        if field.startswith("_") or field in named or field not in _FIELD_PATTERNS:
            out.append("(?:%s)" % pattern)
        else:
            named.add(field)
            out.append("(?P<%s>%s)" % (field, pattern))
    return "".join(out)


class Texts(object):
    """One release's texts (or several releases' together), compiled."""

    def __init__(self, tables, info):
        self.info = info
        families = {}
        for table in tables:
            for family, templates in table["texts"].items():
                merged = families.setdefault(family, [])
                merged.extend(t for t in templates if t not in merged)
        self.families = families
        self.forms = sorted(set(table["server_args_form"] for table in tables))

        def compiled(family):
            return [re.compile(template_regex(t)) for t in families.get(family, [])]
        self.ready = compiled("ready")
        self.kv = compiled("kv_pool")
        self.hicache = compiled("hicache_host_pool")
        self.hicache_mamba = compiled("hicache_mamba_host_pool")
        self.mamba = compiled("mamba_pool")
        self.mamba_texts = list(families.get("mamba_pool", []))
        self.hicache_mamba_texts = list(families.get("hicache_mamba_host_pool", []))
        self.hicache_auto = compiled("hicache_auto_size")
        self.max_tokens = compiled("max_total_num_tokens")
        self.load_weight_end = compiled("load_weight_end")
        self.pd_bootstrap = compiled("pd_bootstrap_started")
        # where the start-up phases end (_timeline.py): per rank, and SGLang's own timings (0.5.17+)
        self.load_weight_begin = compiled("load_weight_begin")
        self.cuda_graph_end = compiled("cuda_graph_end")
        self.startup_timings = compiled("engine_startup_timings")
        self.server_args = [re.compile(r"server_args=(?:ServerArgs\(|\{)")]
        self.fatal = []
        for family in FATAL_ORDER:
            if family in OTHER_FATAL:
                self.fatal.append(OTHER_FATAL[family])
            else:
                self.fatal.extend(template_regex(t, fatal=True) for t in families.get(family, []))
        self.ready_pattern = "|".join(regex.pattern for regex in self.ready)
        self.hicache_texts = list(families.get("hicache_host_pool", []))


def texts_for(release=None, how=None):
    """The Texts to read an invocation of this SGLang release with, and why (info dict: release, tables, how,
    note). Exact table; a release between two tables: both neighbours; newer than every table: the newest (said
    so); unknown: every table."""
    info = {"release": release or None, "how": how, "known": list(KNOWN_RELEASES)}
    if release in RELEASES:
        tables = [release]
    elif not release:
        tables = list(KNOWN_RELEASES)
        info["note"] = ("the SGLang release is not known: reading the texts of every known release (%s)"
                        % ", ".join(KNOWN_RELEASES))
    else:
        older = [r for r in KNOWN_RELEASES if _vkey(r) < _vkey(release)]
        newer = [r for r in KNOWN_RELEASES if _vkey(r) > _vkey(release)]
        tables = ([older[-1]] if older else []) + ([newer[0]] if newer else [])
        if not newer:
            info["note"] = ("SGLang %s is newer than the newest release table (%s): read with %s's texts; a text "
                            "this release changed is reported as not found, naming the family"
                            % (release, KNOWN_RELEASES[-1], KNOWN_RELEASES[-1]))
        else:
            info["note"] = ("SGLang %s has no release table of its own: read with the texts of %s"
                            % (release, " and ".join(tables)))
    info["tables"] = tables
    return Texts([RELEASES[r] for r in tables], info)


RELEASE_PROBE = ("import importlib.metadata as m\ntry:\n print(m.version('sglang'))\n"
                 "except m.PackageNotFoundError:\n print('')")


def installed_release(python, run=None, timeout=30):
    """The version of the ``sglang`` distribution in that interpreter's environment (importlib.metadata, isolated
    mode, SGLang not imported), or None."""
    if not python:
        return None
    try:
        if run is None:
            proc = subprocess.run([python, "-I", "-c", RELEASE_PROBE], stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                  stderr=subprocess.PIPE, timeout=timeout, check=False)
            rc, out = proc.returncode, proc.stdout.decode("utf-8", "replace")
        else:
            rc, out = run([python, "-I", "-c", RELEASE_PROBE])
    except (OSError, subprocess.SubprocessError):
        return None
    version = out.strip()
    return version if rc == 0 and re.match(r"^\d+(?:\.\d+)*[\w.+-]*$", version) else None


ALL_TEXTS = texts_for(None)
READY_TEXT = RELEASES[KNOWN_RELEASES[-1]]["texts"]["ready"][0]
READY_PATTERN = ALL_TEXTS.ready_pattern
FATAL_PATTERNS = list(ALL_TEXTS.fatal)

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
MASK = _secrets.MASK
# SGLang prints every size with 2 decimals ({:.2f}): a printed X.XX stands for a true value within +/- this.
GB_HALF_STEP = 0.005
# 0.5.23's HiCache auto-sizing prints the ratio it chose with 3 decimals ({ratio:.3f}).
RATIO_HALF_STEP = 0.0005
GIB = float(1 << 30)


def match_any(regexes, text):
    for regex in regexes:
        match = regex.search(text)
        if match:
            return match
    return None


def kv_entry(match):
    """{tokens, gb, gb_lo, gb_hi} of a KV pool line (MLA: one KV size; MHA: K + V). gb_lo..gb_hi: the true size
    (GiB) the printed values allow, each printed value rounded to 0.01 (+/- GB_HALF_STEP each: K + V +/- 0.01)."""
    values = match.groupdict()
    if values.get("gb") is not None:
        parts = [float(values["gb"])]
    else:
        parts = [float(values.get("k_gb") or 0), float(values.get("v_gb") or 0)]
    return {"tokens": int(values["tokens"]), "gb": round(sum(parts), 2),
            "gb_lo": sum(max(0.0, part - GB_HALF_STEP) for part in parts),
            "gb_hi": sum(part + GB_HALF_STEP for part in parts)}


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


def ranks_missing(tags, expected_ranks, rank_ids=None):
    """{ranks_missing: [n, ...]} of the plain TP ranks without a line: those below ``expected_ranks``, or the
    global ranks ``rank_ids`` one node of a multi-node server runs; {ranks_missing_count: n} when the tags are not
    plain TPn (DP / PP / EP tags)."""
    tags = list(tags)
    if all(tag == "" or PURE_TP_RE.match(tag) for tag in tags):
        seen = set(rank_keys(tags))
        wanted = list(rank_ids) if rank_ids else list(range(expected_ranks))
        return {"ranks_missing": [rank for rank in wanted if rank not in seen]}
    return {"ranks_missing_count": max(0, expected_ranks - len(tags))}


def mask_secrets(text, secrets=()):
    """Secrets masked in every form SGLang prints them (_secrets.mask), and any known secret value."""
    return _secrets.mask(text, secrets)


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


def host_pool_tokens(kv_tokens, ratio, page_size=1):
    """The host pool's tokens for --hicache-ratio, as SGLang sizes it from the rank's device pool (0.5.17
    mem_cache/pool_host/base.py HostKVCache.__init__, the same in 0.5.9's mem_cache/memory_pool_host.py and
    0.5.23's pool_host/base.py): ``size = int(device_pool.size * host_to_device_ratio)``, then
    ``page_num = size // page_size + 1; size = page_num * page_size``. The device pool's size is the KV line's
    #tokens: 131072 at ratio 2 -> 262145, as the real 0.5.17 server printed."""
    page_size = page_size or 1
    return (int(kv_tokens * ratio) // page_size + 1) * page_size


def host_pool_allowed(kv, ratio=None, size_gb=None, page_size=1, ratio_step=0.0, host_tokens=None, host_gb=None):
    """What SGLang's host pool line may print for this request, derived from the printed precision of every number
    used (nothing fixed): {tokens_lo, tokens_hi} (ratio) and {gb_lo, gb_hi} (the printed GB, itself rounded to
    0.01). ``kv``: the rank's KV entry (kv_entry). The device pool holds ``tokens + page_size`` slots (SGLang's
    padded slot 0), so bytes per token = KV size / (tokens + page_size), bounded by the KV line's rounding.
    ``size_gb`` (--hicache-size): ``int(size * 1e9 // bytes_per_token)`` tokens, one page more: the host bytes lie
    in (size - one token, size + one page]; bytes per token bounded by the host line when it prints its tokens
    (``host_tokens``, ``host_gb``), else by the KV line. ``ratio_step``: the half-width of a ratio that was
    printed rounded (0.5.23's auto-sizing). None when the request cannot be worked out."""
    page_size = page_size or 1
    tokens = (kv or {}).get("tokens")
    if not tokens:
        return None
    per_token_lo = kv["gb_lo"] * GIB / (tokens + page_size)
    per_token_hi = kv["gb_hi"] * GIB / tokens
    if size_gb:
        if host_tokens and host_gb is not None:
            per_token_hi = min(per_token_hi, (host_gb + GB_HALF_STEP) * 1e9 / host_tokens)
        return {"gb_lo": max(0.0, size_gb - per_token_hi / 1e9 - GB_HALF_STEP),
                "gb_hi": size_gb + page_size * per_token_hi / 1e9 + GB_HALF_STEP}
    if not ratio:
        return None
    tokens_lo = host_pool_tokens(tokens, max(0.0, ratio - ratio_step), page_size)
    tokens_hi = host_pool_tokens(tokens, ratio + ratio_step, page_size)
    return {"tokens_lo": tokens_lo, "tokens_hi": tokens_hi,
            "gb_lo": max(0.0, tokens_lo * per_token_lo / 1e9 - GB_HALF_STEP),
            "gb_hi": tokens_hi * per_token_hi / 1e9 + GB_HALF_STEP}


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

    def __init__(self, ready_pattern=None, fail_patterns=None, expect=None, texts=None):
        self.texts = texts or ALL_TEXTS
        self.ready_given = ready_pattern
        self.fail_given = fail_patterns
        self.extra_fail = []
        self.ready_re = None
        self.fail_res = []
        self.use_texts(self.texts)
        self.expect_res = compile_patterns(expect, "expect")
        self.lines_seen = 0
        self.first_line_ts = None
        self.http_start_ts = None
        self.ready_line = None
        self.ready_ts = None
        self.ready_stamp = None
        self.fatal = []           # (pattern index, order, line)
        self.hicache = {}         # rank -> GB of the KV host pool, lines before the ready line only
        self.hicache_late = {}    # rank -> GB, lines after the ready line (do not count)
        self.hicache_tokens = {}  # rank -> host pool tokens (releases that print them)
        self.hicache_draft = {}   # rank -> GB of the draft model's host pool (0.5.23 with EAGLE)
        self.hicache_mamba = {}   # rank -> GB of a hybrid model's Mamba state host pool
        self.hicache_auto_ratio = None  # the ratio HiCache auto-sizing chose (0.5.23: no ratio or size given)
        self.hicache_unread = []  # lines that speak of a host pool / hierarchical cache in no known form
        self.kv = {}              # rank -> list of {tokens, gb}
        self.mamba = {}           # rank -> state slots of a hybrid model's Mamba pool (max_mamba_cache_size)
        self.max_total_num_tokens = None
        self.expect_matched = {}  # pattern -> first line
        self.dropped = 0          # lines of this invocation journald suppressed (rate limit)
        self.server_args_seen = False
        self.pd_bootstrap_line = None  # a prefill server's "KV bootstrap server started" line (releases that print it)
        self.marks = {}           # start-up phase -> journal time of the event that ends it (_timeline.PHASES)
        self.weight_load_s = None  # the slowest rank's "Load weight end. elapsed=" (SGLang's own figure)
        self.startup_reported = None  # SGLang's "Engine startup timings" (0.5.17+), _timeline.startup_timings

    def use_texts(self, texts, extra_fail_patterns=None):
        """Read with these texts (a release's table): the ready and fatal patterns follow, unless given."""
        self.texts = texts
        if extra_fail_patterns is not None:
            self.extra_fail = list(extra_fail_patterns)
        ready = self.ready_given or texts.ready_pattern
        try:
            self.ready_re = re.compile(ready)
        except re.error as exc:
            raise ValueError("ready_pattern: invalid regular expression %r: %s" % (ready, exc))
        fail = list(texts.fatal if self.fail_given is None else self.fail_given) + self.extra_fail
        self.fail_res = compile_patterns(fail, "fail_patterns")

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
        http_before = self.http_start_ts is not None
        if self.http_start_ts is None and HTTP_START_RE.search(line):
            self.http_start_ts = ts
        texts = self.texts
        if match_any(texts.server_args, msg):
            self.server_args_seen = True
        key = rank if rank is not None else ""
        match = match_any(texts.hicache, msg)
        if match:
            # Counted when before the ready line; a line that arrived later (another process or stream) but
            # carries a stamp not after the ready line's was printed before it and counts too.
            stamp = line_stamp(line)
            early = self.ready_line is None or (stamp is not None and self.ready_stamp is not None
                                                and stamp <= self.ready_stamp)
            pool = (match.groupdict().get("pool") or "kv").strip()
            if pool.startswith("draft"):
                self.hicache_draft.setdefault(key, float(match.group("gb")))
            else:
                target = self.hicache if early else self.hicache_late
                target.setdefault(key, float(match.group("gb")))
                if match.groupdict().get("tokens"):
                    self.hicache_tokens.setdefault(key, int(match.group("tokens")))
        else:
            match = match_any(texts.hicache_mamba, msg)
            if match:
                self.hicache_mamba.setdefault(key, float(match.group("gb")))
            elif (("host pool" in msg or "hierarchical" in msg or "HiCache" in msg) and "GB" in msg
                  and len(self.hicache_unread) < 3):
                self.hicache_unread.append(line)
        match = match_any(texts.hicache_auto, msg)
        if match and self.hicache_auto_ratio is None:
            self.hicache_auto_ratio = float(match.group("ratio"))
        # every release's pool line says " is allocated": the templates' leading ``{pool}`` field is not searched
        # through a line without it (0.5.17's ``(?P<pool>.+?) is allocated`` took seconds on server_args=)
        match = match_any(texts.kv, msg) if KV_ANCHOR in msg else None
        kv_seen = match is not None
        if match:
            self.kv.setdefault(key, []).append(kv_entry(match))
        match = match_any(texts.mamba, msg)
        if match:
            self.mamba.setdefault(key, int(match.group("tokens")))
        if self.pd_bootstrap_line is None and match_any(texts.pd_bootstrap, msg):
            self.pd_bootstrap_line = line
        self.mark_phases(texts, msg, ts, http_before, kv_seen)
        match = match_any(texts.max_tokens, msg)
        if match and self.max_total_num_tokens is None:
            self.max_total_num_tokens = int(match.group("tokens"))
        if self.ready_line is None and self.ready_re.search(line):
            self.ready_line = line
            self.ready_ts = ts
            if ts is not None:
                self.marks["warm_up"] = ts
            self.ready_stamp = line_stamp(line)

    def mark_phases(self, texts, msg, ts, http_before, kv_seen):
        """The journal time of each start-up event that ends a phase (_timeline.PHASES): the first rank's Load
        weight begin, the last rank's Load weight end, KV pool, CUDA graph capture and HiCache host pool, the HTTP
        server's start and the ready line; SGLang's own start-up timings where the release prints them."""
        if ts is None:
            return
        if "process_start" not in self.marks and match_any(texts.load_weight_begin, msg):
            self.marks["process_start"] = ts
        match = match_any(texts.load_weight_end, msg)
        if match:
            self.marks["weights"] = ts
            if match.groupdict().get("elapsed") is not None:
                self.weight_load_s = max(self.weight_load_s or 0.0, float(match.group("elapsed")))
        if kv_seen:
            self.marks["kv_pool"] = ts
        if match_any(texts.cuda_graph_end, msg):
            self.marks["cuda_graphs"] = ts
        if match_any(texts.hicache, msg) and self.ready_line is None:
            self.marks["hicache_pool"] = ts
        if not http_before and self.http_start_ts is not None:
            self.marks["http_start"] = ts
        match = match_any(texts.startup_timings, msg)
        if match and self.startup_reported is None:
            self.startup_reported = _timeline.startup_timings(match)

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

    def hicache_summary(self, expected_ranks=None, ratio=None, size_gb=None, page_size=1, rank_ids=None,
                        ratio_step=0.0):
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
            summary.update(ranks_missing(self.hicache, expected_ranks, rank_ids))
        if self.hicache_late:
            summary["ranks_after_ready"] = rank_keys(self.hicache_late)
        if self.hicache_tokens:
            summary["host_pool_tokens_per_rank"] = max(self.hicache_tokens.values())
        if self.hicache_draft:
            summary["draft_host_pool_gb_per_rank"] = max(self.hicache_draft.values())
            summary["draft_host_pool_gb_total"] = round(sum(self.hicache_draft.values()), 2)
        if self.hicache_mamba:
            summary["mamba_host_pool_gb_per_rank"] = max(self.hicache_mamba.values())
        if self.hicache_unread:
            summary["lines_not_read"] = list(self.hicache_unread)
        if self.dropped:
            summary["journal_lines_dropped"] = self.dropped
        check = self.hicache_vs_request(ratio, size_gb, page_size, ratio_step)
        if check is not None:
            summary["requested"] = check
        return summary

    def hybrid_summary(self, expected_ranks=None, rank_ids=None):
        """A hybrid model's Mamba state pool per rank (and its HiCache host pool where the release has one)."""
        summary = {"ranks_seen": rank_keys(self.mamba), "ranks_expected": expected_ranks,
                   "state_slots_per_rank": min(self.mamba.values()) if self.mamba else None}
        if expected_ranks:
            summary.update(ranks_missing(self.mamba, expected_ranks, rank_ids))
        if self.hicache_mamba:
            summary["host_pool_ranks_seen"] = rank_keys(self.hicache_mamba)
            summary["host_pool_gb_per_rank"] = max(self.hicache_mamba.values())
        return summary

    def hicache_vs_request(self, ratio=None, size_gb=None, page_size=1, ratio_step=0.0):
        """Each rank's host pool against what --hicache-ratio / --hicache-size asks for, given the KV pool that rank
        printed. A release that prints the host pool's tokens is checked on them: exactly for a ratio given on the
        command line (SGLang's own formula, host_pool_tokens), within the rounding of a ratio it printed
        (``ratio_step``). Sizes alone are checked against host_pool_allowed, a range derived from the printed
        precision of each number. None when neither is known; else {ratio|size_gb, expected_gb_min/max, off:
        [{rank, logged_gb, expected_gb, allowed_gb[, logged_tokens, expected_tokens]}]}."""
        if not self.hicache or not (ratio or size_gb):
            return None
        off = []
        expected_all = []
        for tag, logged in sorted(self.hicache.items(), key=lambda item: _tag_sort_key(item[0])):
            pools = self.kv.get(tag)
            if not pools:
                continue
            kv = pools[0]
            logged_tokens = self.hicache_tokens.get(tag)
            allowed = host_pool_allowed(kv, ratio, size_gb, page_size, ratio_step, logged_tokens, logged)
            if allowed is None:
                continue
            if logged_tokens and "tokens_lo" in allowed:
                # the host line's own bytes per token (its GB over its tokens) for the tokens the request gives
                expected = round(allowed["tokens_lo"] * logged / logged_tokens, 2)
            else:
                expected = round((allowed["gb_lo"] + allowed["gb_hi"]) / 2.0, 2)
            expected_all.append(expected)
            item = {"rank": tag or "TP0", "logged_gb": logged, "expected_gb": expected,
                    "allowed_gb": [round(allowed["gb_lo"], 3), round(allowed["gb_hi"], 3)]}
            if logged_tokens is not None and "tokens_lo" in allowed:
                wanted = ([allowed["tokens_lo"]] if allowed["tokens_lo"] == allowed["tokens_hi"]
                          else [allowed["tokens_lo"], allowed["tokens_hi"]])
                if not allowed["tokens_lo"] <= logged_tokens <= allowed["tokens_hi"]:
                    item.update(logged_tokens=logged_tokens, expected_tokens=wanted, kv_tokens=kv["tokens"])
                    off.append(item)
            elif not allowed["gb_lo"] - 1e-9 <= logged <= allowed["gb_hi"] + 1e-9:
                off.append(item)
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
