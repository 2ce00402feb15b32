# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/test-times.py: the CPU seconds of each scenario (controller and hosts) from the .result files that
scripts/molecule-all.sh writes, in make test's closing lines and in the tables of docs/development.md; a .result
of a run before they were recorded (two fields) gives no CPU line, and nothing fails."""
from __future__ import annotations

import os

from conftest import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _logs(tmp_path, results):
    logs = tmp_path / ".cache" / "molecule-logs"
    logs.mkdir(parents=True)
    for name, result in results.items():
        (logs / (name + ".log")).write_text("100.0 | INFO     [%s > converge] Executing\n"
                                            "160.0 | INFO     [%s > verify] Executing\n"
                                            "190.0 | INFO     [%s > destroy] Executing\n" % (name, name, name))
        (logs / (name + ".result")).write_text(result + "\n")


def test_each_scenarios_cpu_is_reported_largest_first(tmp_path):
    times = load_file("test_times_cpu", os.path.join(ROOT, "scripts", "test-times.py"))
    _logs(tmp_path, {"small": "0 90 20.5 9.5", "big": "0 95 120.0 80.0", "old": "0 99"})
    data = times.collect(str(tmp_path))
    assert times.CPU == {"small": (20.5, 9.5), "big": (120.0, 80.0)}
    text = times.slowest(*data, count=3)
    assert "scenarios' CPU (controller + hosts): big 200 s (120 + 80), small 30 s (20 + 10)" in text
    table = times.markdown(*data)
    assert "| `big` | 120 | 80 | 200 |" in table and "| all | 140 | 90 | 230 |" in table


def test_results_without_cpu_give_no_cpu_line(tmp_path):
    times = load_file("test_times_old", os.path.join(ROOT, "scripts", "test-times.py"))
    _logs(tmp_path, {"old": "0 99"})
    text = times.slowest(*times.collect(str(tmp_path)), count=3)
    assert "scenarios: old" in text and "CPU" not in text
