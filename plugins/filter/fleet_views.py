# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Views of a fleet the playbooks print or write, in Python (issue 47: playbooks compute nothing a Python function
could; each is public, for your own playbooks too):

- sglang_prometheus_scrape_configs: Prometheus scrape configs for the servers, their hosts' node exporters and the
  routers of an inventory (playbooks/prometheus.yml);
- sglang_bench_table: one text table of every host's gpuserve.sglang.sglang_bench result (playbooks/bench.yml).

Pure functions; tests/unit/plugins/filter/test_fleet_views.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _hosts(value, what):
    if not isinstance(value, (list, tuple)):
        raise AnsibleFilterError("%s must be a list of inventory hosts, got %s" % (what, type(value).__name__))
    return [str(h) for h in value]


def _facts(hostvars, host):
    try:
        facts = hostvars[host]
    except (KeyError, TypeError):
        return {}
    return facts if hasattr(facts, "get") else {}


def _address(facts, host):
    return str(facts.get("ansible_host") or host)


def sglang_prometheus_scrape_configs(servers, hostvars, routers=(), interval="15s", node_port=9100):
    """Scrape configs: job ``sglang`` (each server's /metrics: ``sglang_metrics_target`` or its address and
    ``sglang_port``, labelled host and unit), job ``node`` (``sglang_node_exporter_target`` or its address and
    ``node_port``) and, when there are routers, job ``sglang-router`` (``sglang_router_metrics_target`` or
    address:29000)."""
    servers, routers = _hosts(servers, "servers"), _hosts(list(routers or []), "routers")
    server_targets, node_targets, router_targets = [], [], []
    for host in servers:
        facts = _facts(hostvars, host)
        address = _address(facts, host)
        target = facts.get("sglang_metrics_target") or "%s:%s" % (address, facts.get("sglang_port") or 30000)
        unit = "%s.service" % (facts.get("sglang_service_name") or "sglang-kimi")
        server_targets.append({"targets": [str(target)], "labels": {"host": host, "unit": unit}})
        node = facts.get("sglang_node_exporter_target") or "%s:%s" % (address, node_port)
        node_targets.append({"targets": [str(node)], "labels": {"host": host}})
    for host in routers:
        facts = _facts(hostvars, host)
        target = facts.get("sglang_router_metrics_target") or "%s:29000" % _address(facts, host)
        router_targets.append({"targets": [str(target)], "labels": {"host": host}})
    configs = [{"job_name": "sglang", "scrape_interval": interval, "metrics_path": "/metrics",
                "static_configs": server_targets},
               {"job_name": "node", "scrape_interval": interval, "static_configs": node_targets}]
    if router_targets:
        configs.append({"job_name": "sglang-router", "scrape_interval": interval, "metrics_path": "/metrics",
                        "static_configs": router_targets})
    return configs


BENCH_FORMAT = "%-24s %10s %8s %17s %17s %7s %7s"


def sglang_bench_table(hosts, hostvars, result="bench_result"):
    """Lines of one table: a header, a rule, then per host its throughput, request rate, TTFT and ITL p50/p99,
    acceptance length and errors from its registered ``result``, or FAILED and the message."""
    header = BENCH_FORMAT % ("host", "out tok/s", "req/s", "TTFT p50/p99 ms", "ITL p50/p99 ms", "accept", "errors")
    lines = [header, "-" * len(header)]
    for host in _hosts(hosts, "hosts"):
        got = _facts(hostvars, host).get(result) or {}
        if "output_throughput" not in got:
            lines.append("%-24s FAILED: %s" % (host, got.get("msg") or "unreachable"))
            continue
        ttft, itl = got.get("ttft_ms") or {}, got.get("itl_ms") or {}
        accept = got.get("accept_length")
        lines.append(BENCH_FORMAT % (host, got.get("output_throughput"), got.get("request_throughput"),
                                     "%s/%s" % (ttft.get("p50"), ttft.get("p99")),
                                     "%s/%s" % (itl.get("p50"), itl.get("p99")),
                                     "-" if accept is None else accept, got.get("errors")))
    return lines


class FilterModule(object):
    """Views of a fleet."""

    def filters(self):
        return {
            "sglang_prometheus_scrape_configs": sglang_prometheus_scrape_configs,
            "sglang_bench_table": sglang_bench_table,
        }
