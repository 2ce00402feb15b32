# SPDX-License-Identifier: GPL-3.0-or-later
"""benchmarks/fleet_scale/bench.py, what it reads from a run (no Docker here): task results counted by status as
benchmarks/noop_deploy counts them, per worker of a rolling restart its batch's wall time, the restart's own
duration (the module's timeline.total) and Ansible's overhead (the rest), and the projection to 1,000 hosts
from the figures, each bound as README.md states it."""
from __future__ import annotations

import os

import pytest

from conftest import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bench():
    return load_file("fleet_scale_bench", os.path.join(ROOT, "benchmarks", "fleet_scale", "bench.py"))


def _task(name, hosts):
    return {"task": {"name": name, "duration": {"start": "2026-12-06T12:00:00.000000Z"}}, "hosts": hosts}


def _batch(host, start, end, restart_total):
    restart = {"changed": True, "action": "gpuserve.sglang.sglang_service",
               "timeline": {"stopping": 3.6, "starting": 0.0, "loading": 2.0, "warming_up": 1.1,
                            "total": restart_total}}
    return {"play": {"name": "Rolling restart", "duration": {"start": start, "end": end}},
            "tasks": [_task("Take the host lease", {host: {"changed": False}}),
                      _task("Restart due", {host: {"skipped": True, "skip_reason": "Conditional result was False"}}),
                      # a verified (unchanged) invocation's timeline is no restart
                      _task("Verify", {host: {"changed": False, "timeline": {"total": 0.4}}}),
                      _task("Restart an unchanged host", {host: restart}),
                      _task("Verified", {host: {"changed": False, "msg": "RESTARTED"}})]}


def test_results_are_counted_by_status_and_host(bench):
    doc = {"plays": [{"play": {"name": "Deploy", "duration": {"start": "x"}},
                      "tasks": [_task("a", {"h1": {"changed": False}, "h2": {"skipped": True}}),
                                _task("b", {"h1": {"changed": True}, "h2": {"failed": True}}),
                                _task("c", {"h2": {"unreachable": True}})]}]}
    total, per_host, changed = bench.count_results(doc)
    assert total == {"ok": 1, "changed": 1, "skipped": 1, "failed": 1, "unreachable": 1}
    assert per_host == {"h1": 2, "h2": 3}
    assert changed == ["h1: b"]


def test_each_worker_gets_its_batch_its_restart_and_the_overhead(bench):
    doc = {"plays": [_batch("w1", "2026-12-06T12:00:00.000000Z", "2026-12-06T12:00:12.000000Z", 6.5),
                     _batch("w2", "2026-12-06T12:00:12.500000Z", "2026-12-06T12:00:23.500000Z", 6.0),
                     # a play that matched no host (deploy.yml's rolling play without routers) is left out
                     {"play": {"name": "behind routers", "duration": {"start": "2026-12-06T12:00:24Z"}},
                      "tasks": []}]}
    workers = bench.restart_workers(doc)
    assert set(workers) == {"w1", "w2"}
    assert workers["w1"]["batch_wall_s"] == 12.0 and workers["w1"]["restart"]["total"] == 6.5
    assert workers["w1"]["overhead_s"] == 5.5
    assert workers["w2"]["overhead_s"] == 5.0
    summary = bench.summarize({"doc": doc, "wall_s": 24.0, "controller_cpu_s": 5.0}, "restart")
    assert summary["workers_restarted"] == 2
    assert summary["restart_s_mean"] == 6.25 and summary["overhead_s_mean"] == 5.25
    assert summary["results_total"] == 10 and summary["results"]["skipped"] == 2


def test_a_worker_without_a_restart_has_no_overhead_figure(bench):
    play = _batch("w1", "2026-12-06T12:00:00Z", "2026-12-06T12:00:02Z", 6.5)
    play["tasks"][3]["hosts"]["w1"] = {"skipped": True}
    workers = bench.restart_workers({"plays": [play]})
    assert workers["w1"]["restart"] is None and workers["w1"]["overhead_s"] is None


def _size(hosts, walls, per_host, cpu_per_result, batch=12.0, restart=6.0):
    results = hosts * per_host
    return {"hosts": hosts,
            "noop_deploy": [{"wall_s": wall, "results_total": results, "results_per_s": round(results / wall, 1),
                             "controller_cpu_s": results * cpu_per_result} for wall in walls],
            "rolling_restart": {"workers_restarted": hosts, "batch_wall_s_mean": batch, "restart_s_mean": restart,
                                "overhead_s_mean": batch - restart}}


def test_projection_states_each_bound_from_the_figures(bench):
    sizes = [_size(1, [25.0, 27.0], 237, 0.066), _size(8, [60.0, 50.0], 237, 0.05)]
    proj = bench.projection(sizes, target=1000, forks=50)
    deploy = proj["noop_deploy"]
    assert proj["from_sizes"] == [1, 8]
    assert deploy["task_results_total"] == 237000
    # the median run of 8 hosts (the lower of two): 1896 results in 50 s
    assert deploy["measured_results_per_s_at_8_hosts"] == 37.9
    assert deploy["by_measured_rate_s"] == round(237000 / 37.9)
    assert deploy["by_latency_s"] == 20 * 25.0   # ceil(1000 / 50) waves x the one-host wall
    assert deploy["by_controller_cpu_2_cores_s"] == round(237000 * 0.05 / 2)
    assert deploy["estimate_s"] == max(deploy["by_latency_s"], deploy["by_controller_cpu_16_cores_s"])
    assert proj["rolling_restart"]["batch_1_s"] == 1000 * 12
    assert proj["rolling_restart"]["overhead_per_worker_s"] == 6.0


def test_the_result_loop_bounds_the_estimate_whatever_the_cores(bench):
    sizes = [_size(1, [25.0], 237, 0.066), _size(8, [50.0], 237, 0.05)]
    sizes[1]["noop_deploy"][0]["controller_main_cpu_s"] = 1896 * 0.02   # 20 ms per result in the main process
    deploy = bench.projection(sizes, target=1000, forks=50)["noop_deploy"]
    assert deploy["controller_main_cpu_per_result_ms"] == 20.0
    assert deploy["by_one_result_loop_s"] == round(237000 * 0.02)
    assert deploy["estimate_s"] == max(deploy["by_latency_s"], deploy["by_controller_cpu_16_cores_s"],
                                       deploy["by_one_result_loop_s"])


def test_the_main_process_cpu_is_read_without_its_children(bench):
    import subprocess
    import sys
    proc = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.6: pass\ntime.sleep(0.3)"])
    cpu = bench.MainCpu(proc.pid)
    proc.wait()
    cpu.stop()
    assert 0.3 <= cpu.seconds <= 1.5


def test_no_latency_bound_without_a_one_host_size(bench):
    deploy = bench.projection([_size(8, [50.0], 237, 0.05)], target=1000, forks=50)["noop_deploy"]
    assert deploy["by_latency_s"] is None
    assert deploy["estimate_s"] == deploy["by_controller_cpu_16_cores_s"]
