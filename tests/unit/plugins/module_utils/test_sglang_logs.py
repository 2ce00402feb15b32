# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang 0.5.9 log catalogue, on SGLang's real texts (formats from the 0.5.9 wheel; see
/work/shared/reference/sglang-0.5.9.md and docs/sglang_service.md)."""
import re

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs

STAMP = "2026-11-29 17:54:36"


def startup(tp=8, hicache_gb=20.85, hicache_ranks=None, ready=True, kv=(159277, 10.42)):
    """One invocation of the reference host, as SGLang 0.5.9 prints it (order of the reference doc)."""
    lines = ["[%s] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=%d, "
             "enable_hierarchical_cache=True, hicache_ratio=2.0)" % (STAMP, tp)]
    for rank in range(tp):
        lines.append("[%s TP%d] Load weight end. elapsed=412.53 s, type=KimiK25ForConditionalGeneration, "
                     "dtype=torch.bfloat16, avail mem=21.83 GB, mem usage=72.30 GB." % (STAMP, rank))
    for rank in range(tp):
        lines.append("[%s TP%d] KV Cache is allocated. #tokens: %d, KV size: %.2f GB" % (STAMP, rank, kv[0], kv[1]))
    for rank in range(tp):
        lines.append("[%s TP%d] Memory pool end. avail mem=11.41 GB" % (STAMP, rank))
        lines.append("[%s TP%d] Capture cuda graph begin. This can take up to several minutes. avail mem=11.41 GB"
                     % (STAMP, rank))
        lines.append("[%s TP%d] Capture cuda graph end. Time elapsed: 38.20 s. mem usage=1.21 GB. avail mem=10.20 GB."
                     % (STAMP, rank))
    lines.append("[%s TP0] max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                 "max_running_requests=48, context_len=262144, available_gpu_mem=10.20 GB" % (STAMP, kv[0]))
    for rank in (range(tp) if hicache_ranks is None else hicache_ranks):
        lines.append("[%s TP%d] Allocating %.2f GB host memory for hierarchical KV cache." % (STAMP, rank, hicache_gb))
    lines.append("INFO:     Started server process [4242]")
    lines.append("INFO:     Waiting for application startup.")
    lines.append("INFO:     Application startup complete.")
    lines.append("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    if ready:
        lines.append("[%s] The server is fired up and ready to roll!" % STAMP)
    return lines


def feed_all(watch, lines):
    for index, line in enumerate(lines):
        watch.feed(line, 1000.0 + index)
    return watch


def test_parse_line_rank_and_main_process():
    assert logs.parse_line("[2026-11-29 17:54:36 TP7] KV Cache is allocated. #tokens: 1, KV size: 0.01 GB") == (
        7, "KV Cache is allocated. #tokens: 1, KV size: 0.01 GB")
    assert logs.parse_line("[2026-11-29 17:54:36] The server is fired up and ready to roll!") == (
        None, "The server is fired up and ready to roll!")
    # data-parallel attention adds more tags; the TP rank is still found
    assert logs.parse_line("[2026-11-29 17:54:36 DP1 TP3 EP3] x")[0] == 3
    assert logs.parse_tagged("[2026-11-29 17:54:36 DP1 TP3 EP3] x")[0] == "DP1 TP3 EP3"
    assert logs.parse_tagged("[2026-11-29 17:54:36] x")[0] == ""
    assert logs.parse_line("INFO:     Started server process [4242]") == (None, "INFO:     Started server process [4242]")


def test_full_startup_gives_ready_hicache_and_kv():
    watch = feed_all(logs.LogWatch(), startup())
    assert watch.ready_line.endswith(logs.READY_TEXT)
    assert watch.fatal == []
    summary = watch.hicache_summary(8)
    assert summary["ranks_seen"] == list(range(8))
    assert summary["ranks_missing"] == []
    assert summary["host_pool_gb_per_rank"] == 20.85
    assert summary["host_pool_gb_total"] == pytest.approx(166.8)
    kv = watch.kv_summary()
    assert kv["tokens_per_rank"] == 159277
    assert kv["gb_per_rank"] == 10.42
    assert kv["max_total_num_tokens"] == 159277
    assert kv["ranks"] == list(range(8))
    assert watch.http_start_ts is not None and watch.http_start_ts < watch.ready_ts


def test_seven_of_eight_ranks_are_reported_missing():
    watch = feed_all(logs.LogWatch(), startup(hicache_ranks=range(7)))
    summary = watch.hicache_summary(8)
    assert summary["ranks_seen"] == list(range(7))
    assert summary["ranks_missing"] == [7]


def test_hicache_lines_after_the_ready_line_do_not_count():
    lines = startup(hicache_ranks=[])
    lines.append("[2026-11-29 17:54:37 TP0] Allocating 20.85 GB host memory for hierarchical KV cache.")
    watch = feed_all(logs.LogWatch(), lines)
    assert watch.hicache == {}
    assert watch.hicache_summary(8)["ranks_after_ready"] == [0]


def test_hicache_line_arriving_late_but_printed_before_ready_counts():
    # another process's stream delivered TP7's line after the ready line; its SGLang stamp is earlier
    lines = startup(hicache_ranks=range(7))
    lines.append("[2026-11-29 17:54:35 TP7] Allocating 20.85 GB host memory for hierarchical KV cache.")
    watch = feed_all(logs.LogWatch(), lines)
    assert watch.hicache_summary(8)["ranks_missing"] == []


def test_duplicate_rank_lines_count_once():
    watch = feed_all(logs.LogWatch(), startup(hicache_ranks=[0, 0, 1, 1, 2]))
    assert watch.hicache_summary(8)["ranks_seen"] == [0, 1, 2]


def test_ratio_four_and_hicache_size_numbers():
    watch = feed_all(logs.LogWatch(), startup(hicache_gb=41.70))
    assert watch.hicache_summary(8)["host_pool_gb_total"] == pytest.approx(333.6)


@pytest.mark.parametrize("line, quoted", [
    ("ValueError: Not enough host memory available. Requesting 41.70 GB but only have 30.02 GB free. "
     "Please reduce the size of the hierarchical cache.", "Not enough host memory available"),
    ("AssertionError: The host memory should be larger than the device memory with the current protocol",
     "larger than the device memory"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "--mem-fraction-static"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 139.81 GiB",
     "CUDA out of memory"),
    ("Exception: Capture cuda graph failed: CUDA error: out of memory", "Capture cuda graph failed"),
    ("[2026-11-29 17:54:36] Rank 3 scheduler is dead. Please check if there are relevant logs.", "scheduler is dead"),
    ("[2026-11-29 17:54:36] Received sigquit from a child process. It usually means the child failed.",
     "Received sigquit"),
    ("RuntimeError: Initialization failed. Please see the error messages above.", "Initialization failed"),
    ("[2026-11-29 17:54:36] Initialization failed. warmup error: Traceback (most recent call last):", "warmup error"),
    ("ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot "
     "be used at the same time. Please use only one of them.", "mutually exclusive"),
    ("ValueError: Spec v2 currently only supports topk = 1 for speculative decoding.", "Spec v2"),
    ("launch_server.py: error: argument --hicache-io-backend: invalid choice: 'dma' (choose from 'direct', 'kernel')",
     "invalid choice"),
])
def test_each_fatal_text_is_caught(line, quoted):
    watch = feed_all(logs.LogWatch(), startup(ready=False)[:5] + [line])
    assert quoted in watch.failed_line


@pytest.mark.parametrize("line", logs.NOT_FATAL_TEXTS + [
    "[2026-11-29 17:54:36 TP0] Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is "
    "turned on.",
])
def test_not_fatal_texts_do_not_fail(line):
    watch = feed_all(logs.LogWatch(), [line])
    assert watch.fatal == []


def test_most_specific_line_is_quoted_not_the_generic_wrapper():
    lines = startup(ready=False)[:3] + [
        "[%s TP0] Scheduler hit an exception: Traceback (most recent call last):" % STAMP,
        '  File "sglang/srt/mem_cache/memory_pool_host.py", line 179, in __init__',
        "ValueError: Not enough host memory available. Requesting 20.85 GB but only have 8.12 GB free. "
        "Please reduce the size of the hierarchical cache.",
        "[%s] Received sigquit from a child process. It usually means the child failed." % STAMP,
    ]
    watch = feed_all(logs.LogWatch(), lines)
    assert watch.failed_line.startswith("ValueError: Not enough host memory available. Requesting 20.85 GB")
    assert len(watch.fatal_lines) == 3


def test_custom_fail_patterns_replace_the_default():
    watch = feed_all(logs.LogWatch(fail_patterns=[r"Overlap scheduler is disabled"]), [
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "[%s] Overlap scheduler is disabled when spec v2 is off" % STAMP,
    ])
    assert watch.failed_line.endswith("Overlap scheduler is disabled when spec v2 is off")
    assert len(watch.fatal) == 1


def test_expect_patterns_and_custom_ready():
    watch = logs.LogWatch(ready_pattern=r"Uvicorn running on", expect=[r"Spec v2 is enabled", r"never printed"])
    feed_all(watch, startup() + ["[%s] Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap "
                                 "schedule is turned on." % STAMP])
    assert "Uvicorn running on" in watch.ready_line
    assert watch.expect_missing() == ["never printed"]
    assert "Spec v2 is enabled" in watch.expect_matched["Spec v2 is enabled"]


def test_mha_pool_and_eagle_draft_pool():
    watch = feed_all(logs.LogWatch(), [
        "[%s TP0] KV Cache is allocated. #tokens: 500000, K size: 11.44 GB, V size: 11.44 GB" % STAMP,
        "[%s TP0] KV Cache is allocated. #tokens: 500000, K size: 0.19 GB, V size: 0.19 GB" % STAMP,
    ])
    kv = watch.kv_summary()
    assert kv["gb_per_rank"] == 22.88
    assert kv["draft_gb_per_rank"] == 0.38


def test_bad_regex_is_rejected_with_its_name():
    with pytest.raises(ValueError, match=r"expect: invalid regular expression '\('"):
        logs.LogWatch(expect=["("])
    with pytest.raises(ValueError, match="fail_patterns"):
        logs.LogWatch(fail_patterns=["[unclosed"])


def test_ready_pattern_default_is_the_real_text():
    assert re.search(logs.READY_PATTERN, "[2026-11-29 17:54:37] The server is fired up and ready to roll!")
    assert not re.search(logs.READY_PATTERN, "The server is fired up and ready to rollX")


# ---- issue 12: every prefix SGLang 0.5.9's scheduler can print (managers/scheduler.py ~3080) -------------------
def scheduler_prefix(dp=None, pp=None, attn_cp=None, moe_dp=None, tp=None, ep=None):
    """run_scheduler_process's prefix, built as SGLang 0.5.9 builds it (each tag only when its size > 1)."""
    prefix = ""
    if dp is not None:
        prefix += " DP%d" % dp
    if pp is not None:
        prefix += " PP%d" % pp
    if attn_cp is not None:
        prefix += " ATTN_CP%d" % attn_cp
    if moe_dp is not None:
        prefix += " MOE_DP%d" % moe_dp
    if tp is not None:
        prefix += " TP%d" % tp
    if ep is not None:
        prefix += " EP%d" % ep
    return prefix


@pytest.mark.parametrize("sizes", [
    {},                                            # tp 1: no tag at all
    {"tp": 8},
    {"dp": 2, "tp": 4},
    {"tp": 8, "ep": 8},
    {"dp": 8, "tp": 8, "ep": 8},                   # DP attention: DPd TPt EPe
    {"pp": 2, "tp": 4},
    {"attn_cp": 2, "tp": 4},
    {"moe_dp": 2, "tp": 4, "ep": 4},
    {"dp": 2, "pp": 2, "attn_cp": 2, "moe_dp": 2, "tp": 2, "ep": 2},
])
@pytest.mark.parametrize("log_ms", [False, True])   # SGLANG_LOG_MS=1 adds .%(msecs)03d (utils/common.py ~1227)
def test_every_rank_prefix_combination_counts_each_scheduler_once(sizes, log_ms):
    """Old code put every rank of these formats under TP0: a healthy start failed as '1 of N ranks'."""
    import itertools
    names = ["dp", "pp", "attn_cp", "moe_dp", "tp", "ep"]
    present = [name for name in names if name in sizes]
    combos = list(itertools.product(*[range(sizes[name]) for name in present])) or [()]
    # ep and moe_dp ranks follow tp in SGLang; here every combination is its own scheduler for the count
    stamp = STAMP + (".123" if log_ms else "")
    watch = logs.LogWatch()
    for combo in combos:
        prefix = scheduler_prefix(**dict(zip(present, combo)))
        watch.feed("[%s%s] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" % (stamp, prefix))
        watch.feed("[%s%s] Allocating 22.39 GB host memory for hierarchical KV cache." % (stamp, prefix))
    watch.feed("[%s] The server is fired up and ready to roll!" % stamp)
    summary = watch.hicache_summary(len(combos), ratio=2.0)
    assert len(summary["ranks_seen"]) == len(combos)
    assert summary.get("ranks_missing", []) == [] and summary.get("ranks_missing_count", 0) == 0
    assert summary["requested"]["off"] == []
    assert watch.ready_line is not None
    if set(present) <= {"tp"}:
        assert summary["ranks_seen"] == list(range(len(combos)))


def test_log_ms_stamp_and_prefix_parse():
    assert logs.parse_tagged("[2026-11-29 17:54:36.042 DP1 PP0 ATTN_CP1 MOE_DP0 TP3 EP3] x") == (
        "DP1 PP0 ATTN_CP1 MOE_DP0 TP3 EP3", "x")
    assert logs.line_stamp("[2026-11-29 17:54:36.042 TP3] x") == "2026-11-29 17:54:36.042"
    assert logs.line_stamp("[2026-11-29 17:54:36 TP3] x") == "2026-11-29 17:54:36.000"
    assert logs.parse_line("[2026-11-29 17:54:36.042 ATTN_CP1 TP3] x") == (3, "x")


def test_hicache_pool_is_checked_against_the_requested_ratio_with_min_and_max():
    watch = logs.LogWatch()
    for rank in range(8):
        watch.feed("[%s TP%d] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB" % (STAMP, rank))
        gb = 22.39 if rank != 5 else 11.20        # rank 5 sized as ratio 1
        watch.feed("[%s TP%d] Allocating %.2f GB host memory for hierarchical KV cache." % (STAMP, rank, gb))
    summary = watch.hicache_summary(8, ratio=2.0)
    assert summary["host_pool_gb_min"] == 11.20 and summary["host_pool_gb_max"] == 22.39
    assert summary["requested"]["off"] == [{"rank": "TP5", "logged_gb": 11.2, "expected_gb": 22.38,
                                            "allowed_gb": [22.361, 22.393]}]
    # ratio 4 on the reference host: 44.77 GB (stand-in and SGLang's own sizing agree)
    assert logs.expected_host_pool_gb(159277, 10.42, ratio=4.0) == pytest.approx(44.77, abs=0.03)
    # --hicache-size 30 (GB): floor to whole tokens, one page more
    assert logs.expected_host_pool_gb(159277, 10.42, size_gb=30) == pytest.approx(30.0, abs=0.01)
    # page size 64 aligns up
    assert logs.expected_host_pool_gb(1000, 1000 * 70272 / 2.0 ** 30, ratio=2.0, page_size=64) == pytest.approx(
        2048 * 70272 / 1e9, abs=0.01)
    # a size asked with --hicache-size is checked too
    assert watch.hicache_vs_request(size_gb=22.39)["off"][0]["rank"] == "TP5"


@pytest.mark.parametrize("line, secret", [
    ("[2026-11-29 17:54:36] server_args=ServerArgs(model_path='m', api_key='sk-live-123', admin_api_key='adm-9', "
     "port=30000)", ("sk-live-123", "adm-9")),
    ("ExecStart=/opt/venv/bin/python -m sglang.launch_server --api-key sk-live-123 --admin-api-key=adm-9",
     ("sk-live-123", "adm-9")),
])
def test_api_keys_are_masked(line, secret):
    masked = logs.mask_secrets(line)
    assert all(value not in masked for value in secret)
    assert logs.MASK in masked
    assert "api_key=None" in logs.mask_secrets("server_args=ServerArgs(api_key=None, port=1)")
    # a known key is masked wherever it appears (a traceback quoting it)
    assert "sk-live-123" not in logs.mask_secrets("Unauthorized: sk-live-123", ["sk-live-123"])


# ---- the size check follows what SGLang prints (issue 40) ------------------------------------------------------
# The real 0.5.17 server on an H200 (tests/fixtures/sglang/real/0.5.17-h200/serverA.log), --hicache-ratio 2.
REAL_KV = "[2026-12-06 03:53:51] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 131072, K size: 0.13 GB, V size: 0.13 GB"
REAL_POOL = "[2026-12-06 03:54:58] Allocating kv hierarchical KV host pool: 262145 tokens, 0.54 GB host memory."


def real_watch(pool_line=REAL_POOL, kv_line=REAL_KV, release="0.5.23"):
    watch = logs.LogWatch(texts=logs.texts_for(release))
    watch.feed(kv_line)
    watch.feed(pool_line)
    watch.feed("[2026-12-06 03:55:28] The server is fired up and ready to roll!")
    return watch


def test_a_healthy_real_invocation_passes_on_its_token_count():
    """Old code: 'TP0 logged 0.54 GB, expected 0.56 GB' from the KV line's rounded K and V sizes, a healthy server
    rolled back. 262,145 = int(131,072 x 2) + one page (SGLang's HostKVCache formula)."""
    check = real_watch().hicache_vs_request(ratio=2.0)
    assert check["off"] == [] and check["hicache_ratio"] == 2.0
    assert logs.host_pool_tokens(131072, 2.0) == 262145 and logs.host_pool_tokens(131072, 3.0) == 393217
    assert logs.host_pool_tokens(1000, 2.0, page_size=64) == 2048


@pytest.mark.parametrize("ratio", [1.0, 2.5, 3.0])
def test_a_wrong_ratio_still_fails_on_the_token_count(ratio):
    off = real_watch().hicache_vs_request(ratio=ratio)["off"]
    assert off and off[0]["logged_tokens"] == 262145
    assert off[0]["expected_tokens"] == [logs.host_pool_tokens(131072, ratio)] and off[0]["kv_tokens"] == 131072


def test_the_ratio_step_of_an_auto_sized_pool_allows_its_printed_rounding_only():
    # 0.5.23's auto-sizing prints its ratio with 3 decimals: 1.2345 shows as 1.234 (or 1.235)
    line = REAL_POOL.replace("262145", str(logs.host_pool_tokens(131072, 1.2345)))
    assert real_watch(line).hicache_vs_request(ratio=1.234, ratio_step=logs.RATIO_HALF_STEP)["off"] == []
    assert real_watch(line).hicache_vs_request(ratio=1.234)["off"]           # a ratio given exactly: exact
    assert real_watch(line).hicache_vs_request(ratio=1.230, ratio_step=logs.RATIO_HALF_STEP)["off"]


def test_sizes_alone_are_checked_within_the_printed_precision_of_each_number():
    """A release that prints no token count (0.5.9's line): the real pool's 0.54 GB against the KV line's
    0.13 + 0.13 GiB (each +/-0.005): ratio 2 passes, ratio 3 (0.81 GB) fails, both ways from the same numbers."""
    line = "[2026-12-06 03:54:58] Allocating 0.54 GB host memory for hierarchical KV cache."
    kv = "[2026-12-06 03:53:51] KV Cache is allocated. #tokens: 131072, K size: 0.13 GB, V size: 0.13 GB"
    watch = real_watch(line, kv, release="0.5.9")
    assert watch.hicache_tokens == {}
    check = watch.hicache_vs_request(ratio=2.0)
    assert check["off"] == []
    off = watch.hicache_vs_request(ratio=3.0)["off"]
    assert len(off) == 1 and off[0]["logged_gb"] == 0.54 and off[0]["allowed_gb"][0] > 0.79
    # the range is the rounding of K, V (0.25..0.27 GiB) and the printed pool (+/-0.005), nothing more
    lo, hi = off[0]["allowed_gb"]
    per_token = (0.25 * 2 ** 30 / 131073, 0.27 * 2 ** 30 / 131072)
    assert lo == pytest.approx(393217 * per_token[0] / 1e9 - 0.005, abs=1e-3)
    assert hi == pytest.approx(393217 * per_token[1] / 1e9 + 0.005, abs=1e-3)
    ok = real_watch(line.replace("0.54", "0.58"), kv, release="0.5.9").hicache_vs_request(ratio=2.0)
    assert ok["off"] == []                      # 0.27 GiB x 2 = 0.5798 GB: still what the KV line allows
    assert real_watch(line.replace("0.54", "0.59"), kv, release="0.5.9").hicache_vs_request(ratio=2.0)["off"]


def test_hicache_size_is_checked_within_one_token_below_and_one_page_above():
    watch = real_watch(REAL_POOL.replace("262145 tokens, 0.54", "250000 tokens, 0.50"))
    assert watch.hicache_vs_request(size_gb=0.5)["off"] == []
    assert watch.hicache_vs_request(size_gb=0.52)["off"]
    assert watch.hicache_vs_request(size_gb=0.48)["off"]
