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


INVENTORY = """
sglang_servers:
  hosts:
    gpu1: {ansible_host: 10.0.0.1}
    gpu2: {ansible_host: 10.0.0.2, sglang_service_name: sglang-qwen, sglang_port: 30001}
sglang_routers:
  hosts:
    router1: {ansible_host: 10.0.0.9}
"""


def test_scrape_configs_of_the_prometheus_playbook(tmp_path):
    """playbooks/prometheus.yml writes prometheus_scrape_configs (labels host/unit the rules join on) and the
    rules; a prometheus.yml made of them passes promtool check config."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(INVENTORY)
    out = tmp_path / "out"
    proc = subprocess.run(
        [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(inventory),
         os.path.join(ROOT, "playbooks", "prometheus.yml"), "-e", "sglang_prometheus_dir=%s" % out],
        capture_output=True, text=True, check=False, cwd=ROOT,
        env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    configs = _load(str(out / "sglang-scrape-configs.yml"))["prometheus_scrape_configs"]
    jobs = {c["job_name"]: c for c in configs}
    assert sorted(jobs) == ["node", "sglang", "sglang-router"]
    assert jobs["sglang"]["static_configs"] == [
        {"targets": ["10.0.0.1:30000"], "labels": {"host": "gpu1", "unit": "sglang-kimi.service"}},
        {"targets": ["10.0.0.2:30001"], "labels": {"host": "gpu2", "unit": "sglang-qwen.service"}}]
    assert jobs["node"]["static_configs"][1] == {"targets": ["10.0.0.2:9100"], "labels": {"host": "gpu2"}}
    assert jobs["sglang-router"]["static_configs"] == [{"targets": ["10.0.0.9:29000"], "labels": {"host": "router1"}}]
    assert _load(str(out / "sglang.rules")) == _load(RULES)
    if PROMTOOL:
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({"rule_files": [str(out / "sglang.rules")], "scrape_configs": configs}))
        check = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
