# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet views the playbooks print or write (plugins/filter/fleet_views.py): before issue 47 each was a Jinja
loop of over 120 characters in playbooks/prometheus.yml and playbooks/bench.yml."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter import fleet_views as v

HOSTVARS = {
    "gpu1": {"ansible_host": "10.0.0.1", "sglang_port": 31000, "sglang_service_name": "sglang-qwen"},
    "gpu2": {"sglang_metrics_target": "gpu2.example:9999", "sglang_node_exporter_target": "gpu2.example:9101"},
    "r1": {"ansible_host": "10.0.0.9"},
}


def test_scrape_configs_of_servers_nodes_and_routers():
    configs = v.sglang_prometheus_scrape_configs(["gpu1", "gpu2"], HOSTVARS, routers=["r1"], interval="30s",
                                                 node_port=9200)
    assert [c["job_name"] for c in configs] == ["sglang", "node", "sglang-router"]
    assert all(c["scrape_interval"] == "30s" for c in configs)
    assert configs[0]["static_configs"] == [
        {"targets": ["10.0.0.1:31000"], "labels": {"host": "gpu1", "unit": "sglang-qwen.service"}},
        {"targets": ["gpu2.example:9999"], "labels": {"host": "gpu2", "unit": "sglang-kimi.service"}}]
    assert configs[1]["static_configs"] == [{"targets": ["10.0.0.1:9200"], "labels": {"host": "gpu1"}},
                                            {"targets": ["gpu2.example:9101"], "labels": {"host": "gpu2"}}]
    assert configs[2]["static_configs"] == [{"targets": ["10.0.0.9:29000"], "labels": {"host": "r1"}}]
    assert configs[0]["metrics_path"] == "/metrics" and "metrics_path" not in configs[1]


def test_no_router_job_without_routers():
    assert [c["job_name"] for c in v.sglang_prometheus_scrape_configs(["gpu1"], HOSTVARS)] == ["sglang", "node"]
    with pytest.raises(AnsibleFilterError, match="servers must be a list"):
        v.sglang_prometheus_scrape_configs("gpu1", HOSTVARS)


def test_bench_table_lines():
    hostvars = {"a": {"bench_result": {"output_throughput": 759.1, "request_throughput": 2.5, "errors": 0,
                                       "ttft_ms": {"p50": 80, "p99": 140}, "itl_ms": {"p50": 9, "p99": 20},
                                       "accept_length": None}},
                "b": {"bench_result": {"failed": True, "msg": "connection refused"}}, "c": {}}
    lines = v.sglang_bench_table(["a", "b", "c"], hostvars)
    assert lines[0].split() == ["host", "out", "tok/s", "req/s", "TTFT", "p50/p99", "ms", "ITL", "p50/p99", "ms",
                                "accept", "errors"]
    assert lines[1] == "-" * len(lines[0])
    assert lines[2].split() == ["a", "759.1", "2.5", "80/140", "9/20", "-", "0"]
    assert lines[3] == "%-24s FAILED: connection refused" % "b"
    assert lines[4] == "%-24s FAILED: unreachable" % "c"
