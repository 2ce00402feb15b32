# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped Prometheus alert rules: promtool check rules, promtool test rules (sglang.rules.test.yml), and
every alert in the file has a promtool test case that expects it to fire."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RULES = os.path.join(ROOT, "roles", "server", "files", "prometheus", "sglang.rules")
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sglang.rules.test.yml")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool absent (Debian package prometheus; "
                                                              "scripts/test.sh installs it)")

EXPECTED_ALERTS = {
    "SGLangUnitRestarted", "SGLangHiCacheNotVerified", "SGLangNoReadyServer", "SGLangKVCacheUsageHigh",
    "SGLangSpecAcceptLengthLow", "SGLangThroughputBelowBaseline",
}


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_the_alerts_shipped():
    alerts = {rule["alert"] for group in _load(RULES)["groups"] for rule in group["rules"]}
    assert alerts == EXPECTED_ALERTS


def test_each_alert_has_a_firing_test_case():
    fired = {case["alertname"] for test in _load(TESTS)["tests"] for case in test.get("alert_rule_test", [])
             if case.get("exp_alerts")}
    quiet = {case["alertname"] for test in _load(TESTS)["tests"] for case in test.get("alert_rule_test", [])
             if not case.get("exp_alerts")}
    assert fired == EXPECTED_ALERTS
    assert quiet == EXPECTED_ALERTS  # and a case where it must stay quiet


@needs_promtool
def test_promtool_check_rules():
    proc = subprocess.run([PROMTOOL, "check", "rules", RULES], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: %d rules found" % len(EXPECTED_ALERTS) in proc.stdout + proc.stderr


@needs_promtool
def test_promtool_test_rules():
    proc = subprocess.run([PROMTOOL, "test", "rules", os.path.basename(TESTS)], capture_output=True, text=True,
                          cwd=os.path.dirname(TESTS), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr
