# SPDX-License-Identifier: GPL-3.0-or-later
"""What the real-SGLang lane and the restart-downtime benchmark compute here, before a GPU machine runs them
(issue 49): the module's answer kept and read by key, the playbook that keeps it even when the role fails, the
carry's size check, and the downtime cut into phases that add up to it. Run: python -m pytest tests/gpu -q"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP = os.path.join(ROOT, "tests", "gpu", "real_server", "setup.sh")
LANE = os.path.join(ROOT, "tests", "gpu", "real_server.sh")
BENCH = os.path.join(ROOT, "benchmarks", "restart_downtime")
sys.path.insert(0, BENCH)
import timeline  # noqa: E402  (benchmarks/restart_downtime/timeline.py)


def _bash(script):
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, timeout=120)


def test_the_module_answer_is_read_by_key(tmp_path):
    answer = tmp_path / "result.json"
    answer.write_text(json.dumps({"changed": False, "action": "none",
                                  "restart": {"stop": {"ending": "sglang_sigkill"}, "kv_cache": {"tokens_per_rank": 7}}}))
    out = _bash('. "%s"; real_result %s changed; real_result %s action; real_result %s restart.stop.ending; '
                'real_result %s restart.kv_cache.tokens_per_rank; real_result %s restart.nothing.here; '
                'real_result %s/missing.json changed' % (SETUP, answer, answer, answer, answer, answer, tmp_path))
    assert out.stdout.split() == ["false", '"none"', '"sglang_sigkill"', "7", "null", "null"], out.stderr


def test_the_playbook_keeps_the_answer_even_when_the_role_fails(tmp_path):
    book = tmp_path / "deploy.yml"
    out = _bash('. "%s"; real_role_playbook %s' % (SETUP, book))
    assert out.returncode == 0, out.stderr
    play = yaml.safe_load(book.read_text())[0]
    assert play["hosts"] == "localhost"
    task = play["tasks"][0]
    assert task["block"][0]["ansible.builtin.import_role"]["name"] == "gpuserve.sglang.server"
    keep = task["always"][0]["ansible.builtin.copy"]
    assert keep["content"] == "{{ sglang_server | default({}) | to_nice_json }}" and keep["dest"] == "{{ result_file }}"


def test_the_lane_checks_read_the_module_answer_not_the_recap():
    with open(LANE, encoding="utf-8") as f:
        lane = f.read()
    # issue 49: the recap's changed= and the role log's SIGKILL texts are not printed at default verbosity
    assert "sed -E 's/.*changed=" not in lane and "grep -iE 'stop|137|sigkill'" not in lane
    assert 'real_result "$LOGS/result-again.json" changed' in lane
    assert 'real_result "$LOGS/result-ratio3.json" restart.stop.ending' in lane and '"sglang_sigkill"' in lane
    assert '-e "result_file=$LOGS/result-$1.json"' in lane and 'real_role_playbook "$WORK/deploy.yml"' in lane
    # the plan against the printed sizes reads keys sglang_memory_plan returns, and fails when one is missing
    assert "kv_tokens_per_rank" in lane and "host_tokens_per_rank" in lane and "compare_plans" in lane
    assert '"per_gpu", "compare", "kv_tokens", "host"' not in lane
    assert ". \"$(dirname \"$0\")/real_server/setup.sh\"" in lane and "if ! real_setup; then" in lane


def test_the_carry_check_fails_above_64_mib():
    with open(os.path.join(ROOT, "tests", "gpu", "real_server", "build-carry.sh"), encoding="utf-8") as f:
        text = f.read()
    assert 'rm -rf "$W/site/sglang/multimodal_gen"' in text
    assert "du -s -B1" in text and "limit=$((64 * 1024 * 1024))" in text and "exit 1" in text.split("limit=$((64 * 1024 * 1024))", 1)[1]


def _entry(t, msg, pid="700"):
    return {"__REALTIME_TIMESTAMP": str(int(t * 1e6)), "MESSAGE": msg, "_PID": pid}


def _probes(t0, t1, down_from, down_to, step=0.05):
    out, t = [], t0
    while t < t1:
        out.append({"t0": t, "t1": t + 0.01, "ok": not down_from < t < down_to})
        t += step
    return out


def test_the_phases_cut_the_downtime_and_add_up_to_it():
    base = 1000.0
    journal = [_entry(base + 10.02, "SIGTERM received. signum=None frame=None. Draining requests"),
               _entry(base + 17.0, "sglang-kimi.service: Deactivated successfully.", "1"),
               _entry(base + 17.1, "Stopped sglang-kimi.service - SGLang.", "1"),
               _entry(base + 17.2, "Started sglang-kimi.service - SGLang.", "1"),
               _entry(base + 40.0, "Init torch distributed begin."),
               _entry(base + 41.0, "Load weight begin. avail mem=78.5 GB"),
               _entry(base + 51.0, "Load weight end. elapsed=9.80 s, type=LlamaForCausalLM"),
               _entry(base + 52.0, "Memory pool end. avail mem=40 GB"),
               _entry(base + 53.0, "Capture target prefill CUDA graph end. elapsed=1.0 s"),
               _entry(base + 55.0, "Capture target decode CUDA graph end. elapsed=2.0 s"),
               _entry(base + 56.0, "Allocating kv hierarchical KV host pool: 196609 tokens, 14.5 GB host memory."),
               _entry(base + 60.0, "Tree cache initialized: impl=HiRadixCache"),
               _entry(base + 60.1, "Engine startup timings (s): load_weight=9.80, kv_cache_allocation=0.50, "
                                   "scheduler_e2e=20.00, cuda_graph={prefill=1.00, decode=2.00}, tokenizer_e2e=30.00"),
               _entry(base + 61.0, "INFO:     Uvicorn running on http://127.0.0.1:30000"),
               _entry(base + 69.5, "The server is fired up and ready to roll!")]
    res = timeline.restart("t", _probes(base, base + 100, base + 10.03, base + 69.6), journal, base, base + 100)
    down = res["downtime"]["seconds"]
    assert 59 < down < 60
    assert abs(res["phases_sum_s"] - down) < 0.01 and abs(res["phases_vs_downtime_pct"]) < 0.1
    phases = {p["phase"]: p["seconds"] for p in res["phases"]}
    assert phases["weights loaded"] == 10.0
    assert phases["CUDA graphs captured"] == 3.0  # to the LAST graph's end
    assert phases["drain and stop (to the last process reaped)"] == 7.08  # to systemd's last stop line
    assert res["sglang_startup_timings"]["load_weight"] == 9.8 and res["sglang_startup_timings"]["decode"] == 2.0
    assert res["ready_s"] == round(base + 69.5 - res["downtime"]["last_old_answer"], 3)
    table = timeline.table([dict(res, label="baseline", role_rc="0")])
    assert table.splitlines()[2].startswith("| baseline | 59.")


def test_a_missing_marker_merges_its_phase_into_the_next():
    base = 1000.0
    journal = [_entry(base + 17.2, "Started sglang-kimi.service - SGLang.", "1"),
               _entry(base + 51.0, "Load weight end. elapsed=0.00 s"),
               _entry(base + 69.5, "The server is fired up and ready to roll!")]
    res = timeline.restart("t", _probes(base, base + 100, base + 10.03, base + 69.6), journal, base, base + 100)
    labels = [p["phase"] for p in res["phases"]]
    assert labels[0] == "until SIGTERM + drain and stop (to the last process reaped) + systemd: stopped to started"
    assert labels[1] == "process start, imports, tokenizer + torch distributed, model init + weights loaded"
    assert abs(res["phases_sum_s"] - res["downtime"]["seconds"]) < 0.01


def test_no_answer_is_no_downtime_claimed():
    res = timeline.restart("t", [{"t0": 1, "t1": 1.1, "ok": False}], [], 0, 10)
    assert res["downtime"] is None and "error" in res
    assert "(role run failed, rc 2)" in timeline.table([dict(res, label="x", role_rc="2")])


def test_the_check_runs_prediction_is_kept_beside_the_real_downtime(tmp_path):
    """The benchmark's `predicted` restart: the role run in --check first; its module answer's predicted downtime
    reaches the row (issue 49: --check within 20 % of the real downtime), and the copy task writes in --check."""
    check = tmp_path / "check.json"
    check.write_text(json.dumps({"changed": True, "restart": {"predicted_downtime": {
        "basis": "history", "match": "release_model", "restarts": 1, "downtime_s": 52.5, "from_records": ["x"]}}}))
    view = timeline.predicted_view(str(check))
    assert view["downtime_s"] == 52.5 and view["match"] == "release_model" and "from_records" not in view
    assert "error" in timeline.predicted_view(str(tmp_path / "missing.json"))
    row = dict(timeline.restart("t", _probes(1000.0, 1100.0, 1010.03, 1069.6), [], 1000.0, 1100.0),
               label="predicted", role_rc="0", predicted=view,
               module={"timeline": {"downtime_s": 59.1}})
    line = timeline.table([row]).splitlines()[2]
    assert line.endswith("| 59.1 | 52.5 (release_model) |"), line
    book = tmp_path / "deploy.yml"
    assert _bash('. "%s"; real_role_playbook %s' % (SETUP, book)).returncode == 0
    keep = yaml.safe_load(book.read_text())[0]["tasks"][0]["always"][0]
    assert keep["check_mode"] is False
    with open(os.path.join(BENCH, "run.sh"), encoding="utf-8") as f:
        run = f.read()
    assert "play --check" in run and '"${check[@]}"' in run and " predicted " in run.split("CONFIGS=", 1)[1].split("\n")[0]


def test_both_views_read_a_saved_answer_through_one_loader(tmp_path):
    """module_view and predicted_view share load_answer: an unreadable answer is the same error in both."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    answer, err = timeline.load_answer(str(bad))
    assert answer is None and "error" in err
    assert timeline.module_view(str(bad)) == err == timeline.predicted_view(str(bad))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"action": "restarted", "restart": {"stop": {"seconds": 3}}}))
    assert timeline.load_answer(str(good))[0]["action"] == "restarted"
    assert timeline.module_view(str(good))["stop"]["seconds"] == 3
