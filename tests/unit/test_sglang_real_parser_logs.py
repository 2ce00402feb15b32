# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module's log reader on what a REAL SGLang 0.5.17 server printed (issue 40): the unedited logs of
tests/fixtures/sglang/real/0.5.17-h200/ (an H200, a plain process group; and the collection's own module under
systemd 252 on an H100), read as sglang_service reads them: release 0.5.17, TP 1, HiCache at ratio 2 and 3."""
from __future__ import annotations

import json

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_logs as logs
from real_sglang_logs import journal_invocations, real_path, server_log

HEALTHY = ["serverA.log", "serverB.log", "serverD.log"]


def read(lines, release="0.5.17"):
    watch = logs.LogWatch(texts=logs.texts_for(release))
    for line in lines:
        watch.feed(line)
    return watch


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_real_start_is_read_whole(name):
    watch = read(server_log(name))
    assert watch.ready_line.endswith("] The server is fired up and ready to roll!")
    assert watch.fatal == [] and watch.server_args_seen
    kv = watch.kv_summary()
    assert kv["tokens_per_rank"] == 131072 and kv["gb_per_rank"] == 0.26 and kv["ranks"] == [0]
    assert kv["max_total_num_tokens"] == 131072
    summary = watch.hicache_summary(1, ratio=2.0)
    assert summary["ranks_seen"] == [0] and summary["ranks_missing"] == []     # 1 of 1 rank, no rank prefix
    assert summary["host_pool_gb_per_rank"] == 0.54 and summary["host_pool_tokens_per_rank"] == 262145


@pytest.mark.parametrize("name", HEALTHY)
def test_the_size_check_passes_the_real_ratio_2_and_fails_a_wrong_ratio(name):
    """Old code: 'TP0 logged 0.54 GB, expected 0.56 GB' for ratio 2, a healthy server rolled back."""
    watch = read(server_log(name))
    assert watch.hicache_summary(1, ratio=2.0)["requested"]["off"] == []
    off = watch.hicache_summary(1, ratio=3.0)["requested"]["off"]
    assert off == [{"rank": "TP0", "logged_gb": 0.54, "expected_gb": 0.81, "allowed_gb": off[0]["allowed_gb"],
                    "logged_tokens": 262145, "expected_tokens": [393217], "kv_tokens": 131072}]


def test_the_real_pool_size_in_a_release_that_prints_only_gb_passes_ratio_2_and_fails_ratio_3():
    """The same server's numbers in 0.5.9's forms (no token count): the range from the printed precision."""
    kv = "[2026-12-06 03:53:51] KV Cache is allocated. #tokens: 131072, K size: 0.13 GB, V size: 0.13 GB"
    pool = "[2026-12-06 03:54:58] Allocating 0.54 GB host memory for hierarchical KV cache."
    watch = read([kv, pool], release="0.5.9")
    assert watch.hicache_vs_request(ratio=2.0)["off"] == []
    assert [item["rank"] for item in watch.hicache_vs_request(ratio=3.0)["off"]] == ["TP0"]


def test_the_fatal_host_memory_lines_of_a_real_start_are_quoted():
    watch = read(server_log("serverC.log"))
    assert watch.ready_line is None and watch.hicache == {}
    assert watch.failed_line == ("ValueError: Not enough host memory available. Requesting 268.44 GB but only have "
                                 "120.91 GB free. Please reduce the size of the hierarchical cache.")
    lines = watch.fatal_lines
    assert lines[0].endswith("] Scheduler hit an exception: Traceback (most recent call last):")
    assert lines[1] == watch.failed_line
    assert lines[2].endswith("] Received sigquit from a child process. It usually means the child failed.")


def test_the_host_pool_line_of_0_5_17_is_not_0_5_9s():
    """Read with 0.5.9's table alone the host pool line is in no known form: it is said, not silently missed."""
    watch = read(server_log("serverA.log"), release="0.5.9")
    assert watch.hicache == {} and "hierarchical KV host pool: 262145 tokens" in watch.hicache_unread[0]


def test_the_key_given_through_the_launcher_is_in_no_line():
    lines = server_log("serverD.log")
    assert any("api_key='********'" in line for line in lines)
    assert all(logs.mask_secrets(line) == line for line in lines if "server_args=" in line)


def test_the_collection_run_journal_passes_the_size_check_for_ratio_2_and_ratio_3():
    """The module's own journal under systemd: the ratio 2 invocation and the ratio 3 one (the seed's change)."""
    invocations = [inv for inv in journal_invocations() if any("The server is fired up" in line
                                                               for line in inv["service"])]
    assert len(invocations) == 2
    for inv, ratio, tokens, gb in ((invocations[0], 2.0, 262145, 0.54), (invocations[1], 3.0, 393217, 0.81)):
        watch = read(inv["service"])
        assert watch.hicache == {"": gb} and watch.hicache_tokens == {"": tokens}
        assert watch.hicache_vs_request(ratio=ratio)["off"] == []
        wrong = 3.0 if ratio == 2.0 else 2.0
        assert watch.hicache_vs_request(ratio=wrong)["off"][0]["logged_tokens"] == tokens
    for name in ("module-ratio2.json", "module-ratio3.json"):
        with open(real_path("collection-run", name), encoding="utf-8") as handle:
            old = json.load(handle)
        # what the module said then (the defect): a rejection of a healthy invocation, on the rounded sizes
        assert old["failed"] and "does not match --hicache-ratio" in old["msg"]
        assert old["hicache"]["requested"]["off"][0]["logged_gb"] == old["hicache"]["host_pool_gb_per_rank"]
