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


def test_a_red_run_names_each_failure_a_line_each(tmp_path):
    """make test prints this last when it is red: CI keeps only the tail of a run (stop 36 was red in CI and its
    tail named nothing that failed)."""
    times = load_file("test_times_failures", os.path.join(ROOT, "scripts", "test-times.py"))
    _logs(tmp_path, {"good": "0 90 1.0 1.0", "bad": "2 95 1.0 1.0", "killed": ""})
    bad_log = tmp_path / ".cache" / "molecule-logs" / "bad.log"
    bad_log.write_text(bad_log.read_text().replace(
        "160.0 | INFO     [bad > verify] Executing\n",
        "160.0 | INFO     [bad > verify] Executing\n170.0 | fatal: [host1]: FAILED! => {\"msg\": \"no HiCache\"}\n"
        "171.0 | failed: [host2] => (item=x)\n"))
    (tmp_path / ".cache" / "molecule-logs" / "killed.result").unlink()
    (tmp_path / ".cache" / "molecule-logs" / "bad.nested-play.log").write_text("1.0 | fatal: [h]: FAILED! => {}\n")
    test_logs = tmp_path / ".cache" / "test-logs"
    test_logs.mkdir()
    (test_logs / "static.log").write_text(
        "##### lint: ok (100 s)\n##### controller ansible-core 2.17.14 on Python 3.11 (/v)\n"
        "ERROR: Found 1 pylint issue(s) which need to be resolved:\n"
        "ERROR: plugins/modules/x.py:1:1: unused-import: Unused import os\n"
        "##### controller 2.17.14: sanity FAILED\n##### controllers: FAILED (200 s)\n##### unit: FAILED (300 s)\n")
    (test_logs / "unit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.unit.test_a" name="test_ok" file="tests/unit/test_a.py"/>'
        '<testcase classname="tests.unit.test_a" name="test_bad" file="tests/unit/test_a.py">'
        '<failure message="AssertionError: assert 1 == 2&#10;second line">trace</failure></testcase>'
        '<testcase classname="tests.unit.test_b" name="test_err" file="tests/unit/test_b.py">'
        '<error message="fixture x not found">trace</error></testcase></testsuite></testsuites>')
    lines = times.failures(str(tmp_path))
    assert lines == [
        "controller 2.17.14: sanity FAILED",
        "    sanity: Found 1 pylint issue(s) which need to be resolved:",
        "    sanity: plugins/modules/x.py:1:1: unused-import: Unused import os",
        "static step controllers failed after 200 s",
        "static step unit failed after 300 s",
        "unit: 2 test(s) failed",
        "  failure tests/unit/test_a.py::test_bad: AssertionError: assert 1 == 2 second line",
        "  error tests/unit/test_b.py::test_err: fixture x not found",
        "molecule bad: rc 2, in verify; fatal: [host1]: FAILED! => {\"msg\": \"no HiCache\"}",
        "molecule killed: rc none (it did not end), in destroy; no fatal task result",
    ]


def test_a_red_scenario_is_named_by_its_last_failure_not_ignored_with_its_task_and_message(tmp_path):
    """Stop 45 was red in CI with "molecule server: rc 2, in verify; fatal: [gpuserve-server]: FAILED! =>" and
    nothing else: ansible's default callback writes the result as YAML on the lines under that one, and the first
    fatal of a log may be a play's own expected failure (ignored, or caught by a rescue)."""
    times = load_file("test_times_last_failure", os.path.join(ROOT, "scripts", "test-times.py"))
    _logs(tmp_path, {"bad": "2 95 1.0 1.0"})
    bad_log = tmp_path / ".cache" / "molecule-logs" / "bad.log"
    bad_log.write_text(bad_log.read_text().replace(
        "160.0 | INFO     [bad > verify] Executing\n",
        "160.0 | INFO     [bad > verify] Executing\n"
        "161.0 | TASK [Expected to fail] ****\n"
        "162.0 | fatal: [h1]: FAILED! =>\n162.0 |     changed: false\n162.0 |     msg: an expected refusal\n"
        "162.0 | ...ignoring\n"
        "163.0 | TASK [Kill that run's module on the host too] ****\n"
        "164.0 | fatal: [h1]: FAILED! =>\n164.0 |     changed: true\n164.0 |     msg: non-zero return code\n"
        "164.0 |     rc: 1\n164.0 | \n164.0 | PLAY RECAP ****\n"
        "170.0 | INFO     [bad > destroy] Executing\n"))
    lines = times.failures(str(tmp_path))
    assert lines == [
        "molecule bad: rc 2, in verify; TASK [Kill that run's module on the host too] fatal: [h1]: FAILED! => "
        "changed: true msg: non-zero return code rc: 1",
    ]


def test_a_green_runs_logs_name_no_failure(tmp_path):
    times = load_file("test_times_green", os.path.join(ROOT, "scripts", "test-times.py"))
    _logs(tmp_path, {"good": "0 90 1.0 1.0"})
    assert times.failures(str(tmp_path)) == []
