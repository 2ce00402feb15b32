# SPDX-License-Identifier: GPL-3.0-or-later
"""The restart timeline and the downtime prediction (issue 49), on the real SGLang 0.5.17 server's journal
(tests/fixtures/sglang/real/0.5.17-h200/collection-run/journal.txt: a --hicache-ratio 2 -> 3 restart under a real
systemd, with the module's own result beside it) and on 0.5.9's texts, which differ."""
import calendar
import json
import os
import re
import time

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _record, _timeline
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import LogWatch, texts_for
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import release_of
from real_sglang_logs import real_path, server_log
from server_fakes import Host

JOURNAL_RE = re.compile(r"^(?P<mon>\w{3}) (?P<day>\d\d) (?P<hms>\d\d:\d\d:\d\d)\.(?P<us>\d{6}) \S+ "
                        r"(?P<ident>[\w.-]+)\[(?P<pid>\d+)\]: (?P<msg>.*)$")
STAMP_RE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def journal_entries():
    """(realtime, from systemd, message) of every line of the real collection run's journal (UTC, 2026)."""
    out = []
    with open(real_path("collection-run", "journal.txt"), encoding="utf-8") as handle:
        for line in handle.read().splitlines():
            match = JOURNAL_RE.match(line)
            if not match:
                continue
            when = time.strptime("2026 %s %s %s" % (match.group("mon"), match.group("day"), match.group("hms")),
                                 "%Y %b %d %H:%M:%S")
            realtime = calendar.timegm(when) + int(match.group("us")) / 1e6
            manager = match.group("ident") == "systemd" and match.group("pid") == "1"
            out.append((realtime, manager, match.group("msg")))
    return out


def module_result():
    with open(real_path("collection-run", "module-ratio3.json"), encoding="utf-8") as handle:
        return json.load(handle)


def ratio3_restart():
    """The ratio 2 -> 3 restart of the real run: the stop asked (systemd's "Stopping", as the module queued the
    restart), the old invocation's systemd lines, the new invocation's lines up to its ready line, and when the
    module read that ready line (its result's ready_read_at)."""
    entries = journal_entries()
    asked = next(i for i, (_t, manager, msg) in enumerate(entries)
                 if manager and msg.startswith("Stopping ") and i > 100 and "ready to roll" in entries[i - 2][2])
    started = next(i for i in range(asked, len(entries)) if entries[i][1] and entries[i][2].startswith("Started "))
    ready = next(i for i in range(started, len(entries)) if "fired up and ready to roll" in entries[i][2])
    old_manager = [(t, msg) for t, manager, msg in entries[asked:started] if manager]
    new_service = [(t, msg) for t, manager, msg in entries[started:ready + 1] if not manager]
    return entries[asked][0], old_manager, entries[started], new_service, module_result()["ready_read_at"]


def test_the_real_restart_per_phase_adds_up_to_its_downtime():
    asked, old_manager, started, new_service, ready_read = ratio3_restart()
    watch = LogWatch(texts=texts_for("0.5.17"))
    for realtime, message in new_service:
        watch.feed(message, realtime)
    marks = dict(_timeline.stop_marks(old_manager))
    marks.update(_timeline.start_mark([(started[0], started[2])]))
    marks.update(watch.marks)
    timeline = _timeline.build(asked, ready_read, marks)
    phases = timeline["phases"]
    # 0.5.17 allocates the HiCache host pool after the CUDA graphs: the phases come in the order they happened
    assert list(phases) == ["drain", "reap", "exec", "process_start", "weights", "kv_pool", "cuda_graphs",
                            "hicache_pool", "http_start", "warm_up", "ready_check"]
    assert _timeline.phases_total(timeline) == timeline["downtime_s"]
    # the module measured 27.805 s from the restart queued to its end; the stop 6.578 s (its result)
    assert timeline["downtime_s"] == pytest.approx(27.76, abs=0.05)
    assert phases["drain"] == pytest.approx(6.124, abs=0.01)          # SIGTERM .. "Main process exited"
    assert phases["process_start"] == pytest.approx(17.36, abs=0.01)   # "Started" .. "Load weight begin"
    assert phases["weights"] == pytest.approx(0.072, abs=0.005)
    assert phases["cuda_graphs"] == pytest.approx(2.41, abs=0.01)      # prefill 1.63 + decode 0.69 + the gap
    assert phases["warm_up"] == pytest.approx(1.08, abs=0.01)
    assert watch.weight_load_s == 0.07
    assert watch.startup_reported == {"load_weight": 0.07, "kv_cache_allocation": 0.0, "scheduler_e2e": 4.12,
                                      "tokenizer_e2e": 11.96, "cuda_graph": {
                                          "prefill": 1.63, "decode": 0.69, "target_verify": 0.0,
                                          "draft_prefill": 0.0, "draft_decode": 0.0, "draft_extend": 0.0}}


@pytest.mark.parametrize("name", ["serverA.log", "serverB.log", "serverD.log"])
def test_each_real_start_has_every_start_up_phase(name):
    """The real server's own stdout (no journal): its printed stamps as the times."""
    watch = LogWatch(texts=texts_for("0.5.17"))
    for line in server_log(name):
        match = STAMP_RE.match(line)
        watch.feed(line, calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) if match else None)
    assert set(watch.marks) == {"process_start", "weights", "kv_pool", "cuda_graphs", "hicache_pool", "http_start",
                                "warm_up"}
    assert watch.startup_reported["load_weight"] == watch.weight_load_s
    timeline = _timeline.build(min(watch.marks.values()) - 30.0, watch.marks["warm_up"] + 0.5, watch.marks)
    assert _timeline.phases_total(timeline) == timeline["downtime_s"]


REAL_059 = [
    # SGLang 0.5.9's texts (tests/fixtures/sglang/0.5.9.json), TP 2 with its rank tags; no Engine startup timings
    "[2026-12-01 10:00:10 TP0] Load weight begin. avail mem=78.10 GB",
    "[2026-12-01 10:00:10 TP1] Load weight begin. avail mem=78.10 GB",
    "[2026-12-01 10:02:40 TP1] Load weight end. elapsed=150.20 s, type=KimiK25ForConditionalGeneration, "
    "dtype=torch.bfloat16, avail mem=8.10 GB, mem usage=70.00 GB.",
    "[2026-12-01 10:02:41 TP0] Load weight end. elapsed=151.00 s, type=KimiK25ForConditionalGeneration, "
    "dtype=torch.bfloat16, avail mem=8.10 GB, mem usage=70.00 GB.",
    "[2026-12-01 10:02:45 TP0] KV Cache is allocated. #tokens: 200000, KV size: 5.00 GB",
    "[2026-12-01 10:02:45 TP1] KV Cache is allocated. #tokens: 200000, KV size: 5.00 GB",
    "[2026-12-01 10:02:46 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.00 GB",
    "[2026-12-01 10:03:30 TP0] Capture cuda graph end. Time elapsed: 44.00 s. mem usage=1.21 GB. avail mem=1.79 GB.",
    "[2026-12-01 10:03:31 TP1] Capture cuda graph end. Time elapsed: 45.00 s. mem usage=1.21 GB. avail mem=1.79 GB.",
    "[2026-12-01 10:03:32 TP0] Allocating 10.00 GB host memory for hierarchical KV cache.",
    "[2026-12-01 10:03:33 TP1] Allocating 10.00 GB host memory for hierarchical KV cache.",
    "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
    "[2026-12-01 10:03:50] The server is fired up and ready to roll!",
]


def test_0_5_9_texts_end_each_phase_at_the_last_rank():
    watch = LogWatch(texts=texts_for("0.5.9"))
    base = calendar.timegm(time.strptime("2026-12-01 10:00:00", "%Y-%m-%d %H:%M:%S"))
    last = base
    for line in REAL_059:
        match = STAMP_RE.match(line)
        last = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) if match else last + 5
        watch.feed(line, last)
    assert watch.startup_reported is None                      # 0.5.9 does not print it
    assert watch.weight_load_s == 151.0                        # the slowest rank
    timeline = _timeline.build(base, last + 1, watch.marks)
    assert timeline["phases"] == {"process_start": 10.0, "weights": 151.0, "kv_pool": 4.0, "cuda_graphs": 46.0,
                                  "hicache_pool": 2.0, "http_start": 5.0, "warm_up": 12.0, "ready_check": 1.0}
    assert _timeline.phases_total(timeline) == timeline["downtime_s"] == 231.0


def test_a_missing_event_gives_its_time_to_the_next_phase_and_marks_are_clamped():
    timeline = _timeline.build(100.0, 160.0, {"drain": 105.0, "weights": 130.0, "warm_up": 170.0, "exec": 90.0})
    assert timeline["phases"] == {"exec": 0.0, "drain": 5.0, "weights": 25.0, "warm_up": 30.0, "ready_check": 0.0}
    assert _timeline.phases_total(timeline) == timeline["downtime_s"] == 60.0
    assert _timeline.build(None, 5.0, {}) == {"phases": {}, "downtime_s": None}


def test_stop_marks_read_systemds_lines():
    lines = [(10.0, "Stopping sglang-kimi.service - SGLang..."), (16.1, "sglang-kimi.service: Main process exited, "
             "code=killed, status=9/KILL"), (16.2, "sglang-kimi.service: Failed with result 'signal'."),
             (16.3, "Stopped sglang-kimi.service - SGLang."), (16.31, "sglang-kimi.service: Consumed 1min CPU time.")]
    assert _timeline.stop_marks(lines) == {"drain": 16.1, "reap": 16.3}
    assert _timeline.start_mark([(17.0, "Started sglang-kimi.service - SGLang.")]) == {"exec": 17.0}


# ---- the prediction ---------------------------------------------------------------------------------------------

CMD = ("/opt/sglang/versions/sglang-0.5.17-0123456789ab/bin/python -m gpuserve_launch --model-path /models/kimi "
       "--tp 8 --enable-hierarchical-cache --hicache-ratio %s")


def rec(when, ratio, downtime, weights, release="0.5.17", action="restart"):
    return {"when": when, "action": action, "cmdline": CMD % ratio, "sglang_version": release,
            "timeline": {"downtime_s": downtime,
                         "phases": {"drain": 5.0, "weights": weights, "ready_check": downtime - 5.0 - weights}}}


def test_predict_from_the_same_release_model_and_flags():
    records = [rec("2026-12-01T10:00:00Z", 3, 100.0, 60.0), rec("2026-12-02T10:00:00Z", 3, 110.0, 62.0),
               rec("2026-12-03T10:00:00Z", 3, 130.0, 70.0), rec("2026-12-04T10:00:00Z", 2, 400.0, 300.0),
               rec("2026-12-05T10:00:00Z", 3, 999.0, 1.0, action="none")]
    key = _timeline.restart_key(CMD % 3, "0.5.17")
    assert key == {"release": "0.5.17", "model": "/models/kimi",
                   "flags": ["--tp", "8", "--enable-hierarchical-cache", "--hicache-ratio", "3"]}
    out = _timeline.predict(records, key)
    assert out["basis"] == "history" and out["match"] == "same" and out["restarts"] == 3
    assert out["downtime_s"] == 110.0 and out["range_s"] == [100.0, 130.0]
    assert out["weight_load_s"] == 62.0 and out["weights_kept"] is False
    assert "110.0 s (median of 3 recorded restarts of the same release, model and flags" in out["msg"]


def test_predict_falls_back_to_other_flags_and_says_so_then_no_history():
    records = [rec("2026-12-04T10:00:00Z", 2, 400.0, 300.0)]
    out = _timeline.predict(records, _timeline.restart_key(CMD % 4, "0.5.17"))
    assert out["match"] == "release_model" and out["downtime_s"] == 400.0
    assert "OTHER flags" in out["msg"]
    none = _timeline.predict(records, _timeline.restart_key(CMD % 4, "0.5.18"))
    assert none["basis"] == "no history" and none["downtime_s"] is None
    assert none["msg"].startswith("no history: this host has no recorded restart of SGLang 0.5.18")
    assert _timeline.predict([], _timeline.restart_key(CMD % 4, "0.5.17"))["basis"] == "no history"


def test_predict_names_why_the_weights_cannot_be_kept_and_what_it_costs():
    records = [rec("2026-12-01T10:00:00Z", 3, 400.0, 371.0)]
    why = ["SGLang 0.5.17 refuses the weight cache beside speculative decoding (--speculative-algorithm EAGLE3)"]
    out = _timeline.predict(records, _timeline.restart_key(CMD % 3, "0.5.17"), why)
    assert out["weights_not_kept"] == why and out["weights_kept"] is False
    assert "the weights cannot be kept across it (SGLang 0.5.17 refuses" in out["msg"]
    assert "their load costs 371.0 s of it" in out["msg"]
    kept = _timeline.predict(records, _timeline.restart_key(CMD % 3 + " --weight-cache-mode client", "0.5.17"))
    assert kept["weights_kept"] is True


def test_release_of_a_versioned_venv():
    assert release_of("/opt/sglang/versions/sglang-0.5.17-0123456789ab/bin/python") == "0.5.17"
    assert release_of("/nowhere/bin/python", "/opt/sglang/versions/sglang-0.5.12.post1-abcdefabcdef") == "0.5.12.post1"
    assert release_of("/nowhere/bin/python") == ""


def test_the_record_keeps_the_timeline_and_restart_records_reads_it_back(tmp_path):
    md, js, hist = str(tmp_path / "s.md"), str(tmp_path / "s.json"), str(tmp_path / "history")
    for index, ratio in enumerate((2, 3, 3)):
        data = rec("2026-12-0%dT10:00:00Z" % (index + 1), ratio, 100.0 + index, 50.0)
        _record.write_record(md, js, "# record %d\n" % index, data, hist, "sglang-kimi", 10, unique="%06x" % index,
                             now=lambda index=index: 1796000000 + index)
    records = _record.restart_records(js, hist, "sglang-kimi")
    assert sorted(r["when"] for r in records) == ["2026-12-01T10:00:00Z", "2026-12-02T10:00:00Z",
                                                  "2026-12-03T10:00:00Z"]
    out = _timeline.predict(records, _timeline.restart_key(CMD % 3, "0.5.17"))
    assert out["restarts"] == 2 and out["downtime_s"] == 101.5


def test_the_record_markdown_shows_the_downtime_and_its_phases():
    line = _record.downtime_line({"downtime_s": 27.76, "phases": {"drain": 6.124, "weights": 0.072}, "gates_s": 3.5,
                                  "sglang_startup": {"load_weight": 0.07, "cuda_graph": {"prefill": 1.63}}})
    assert line == ("- downtime: 27.76 s (restart asked to the new invocation ready): drain 6.124, weights 0.072; "
                    "then the gates 3.5 s (serving); SGLang's own timings: load_weight 0.07")
    assert _record.downtime_line({"total": 3.0}) is None


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def test_check_mode_predicts_the_downtime_of_the_restart_from_the_hosts_records(host):
    host.write(host.nccl, "NCCL_P2P_LEVEL=SYS\n")
    host.write(host.site, "import os  # v1\n")
    host.write(host.record, '{"sglang": "0.5.9"}\n')
    host.machine(host.desired("1")).converge()
    host.age_everything()
    host.runners.calls[:] = []
    js, hist = host.p("etc/sglang/sglang-t.json"), host.p("var/history")
    desired = host.desired("2")
    desired.record = {"cmdline": CMD % 3, "python": "/opt/sglang/versions/sglang-0.5.9-0123456789ab/bin/python",
                      "record_json_path": js, "record_history_dir": hist}
    result = host.machine(desired, check_mode=True).converge()
    assert result["action"] == "restart"
    assert result["restart"]["predicted_downtime"]["basis"] == "no history"
    _record.write_record(host.p("etc/sglang/sglang-t.md"), js, "# r\n",
                         rec("2026-12-01T10:00:00Z", 3, 200.0, 150.0, release="0.5.9"), hist, "sglang-t", 10)
    result = host.machine(desired, check_mode=True).converge()
    predicted = result["restart"]["predicted_downtime"]
    assert predicted["basis"] == "history" and predicted["downtime_s"] == 200.0
    # 0.5.9 has no Weight Cache Daemon: said, with the recorded weight load as its cost
    assert "has no standalone Weight Cache Daemon" in predicted["weights_not_kept"][0]
    assert "their load costs 150.0 s of it" in predicted["msg"]
    assert host.runners.calls == []


def test_a_real_run_puts_the_gates_time_beside_the_downtime(host):
    host.write(host.nccl, "NCCL_P2P_LEVEL=SYS\n")
    host.write(host.site, "import os  # v1\n")
    host.write(host.record, '{"sglang": "0.5.9"}\n')
    host.machine(host.desired("1")).converge()
    host.age_everything()
    host.runners.hooks.append(lambda state: (True, {"changed": True, "invocation_id": host.systemctl.new_invocation(),
                                                    "health_status": 200, "timeline": {"downtime_s": 9.0}}))
    seen = {}

    def answers(invocation):
        return {"failed": False}

    def recorder(verified, bench):
        seen.update(verified["timeline"])
        return {"changed": True}

    result = host.machine(host.desired("2"), answers_gate=answers, recorder=recorder).converge()
    assert result["restart"]["timeline"]["downtime_s"] == 9.0
    assert result["restart"]["timeline"]["gates_s"] >= 0 and seen["gates_s"] == result["restart"]["timeline"]["gates_s"]
    assert not os.path.exists(host.p("etc/sglang/sglang-t.json"))


def test_a_record_without_an_sglang_distribution_matches_an_unknown_release_and_a_first_start_is_no_restart():
    """The record says "not installed" where the venv has no sglang distribution (the stand-in's hosts); --check
    finds no release there either: the same key. A first start (nothing was stopped) predicts no restart."""
    assert _timeline.restart_key(CMD % 3, "not installed")["release"] == ""
    records = [rec("2026-12-01T10:00:00Z", 3, 50.0, 1.0, release="not installed"),
               rec("2026-12-02T10:00:00Z", 3, 9.0, 1.0, release="not installed", action="start")]
    out = _timeline.predict(records, _timeline.restart_key(CMD % 3, ""))
    assert out["match"] == "same" and out["restarts"] == 1 and out["downtime_s"] == 50.0


def test_the_kv_pool_text_is_searched_only_in_lines_that_say_is_allocated():
    """0.5.17's ``(?P<pool>.+?) is allocated...`` searched through every position of the real 10 KB
    ``server_args=`` line took seconds per line (old code: every line went through it, twice with the timeline)."""
    searched = []

    class Spy(object):
        def __init__(self, regex):
            self.regex = regex

        def search(self, text):
            searched.append(text)
            return self.regex.search(text)

    watch = LogWatch(texts=texts_for("0.5.17"))
    watch.texts.kv = [Spy(regex) for regex in watch.texts.kv]
    lines = server_log("serverB.log")
    for line in lines:
        watch.feed(line, 1.0)
    assert searched and all(" is allocated" in text for text in searched)
    assert watch.kv_summary()["tokens_per_rank"] == 131072 and "kv_pool" in watch.marks
