# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_health_url: the health URL derived once from sglang_host/sglang_port, for the server role's default and
every playbook (issue 22: an IPv6 sglang_host was not bracketed, and the playbooks asked 127.0.0.1 whatever the
role listened on)."""
from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_router import sglang_health_url

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


@pytest.mark.parametrize("host, port, url", [
    ("127.0.0.1", 30000, "http://127.0.0.1:30000/health"),
    ("0.0.0.0", 30000, "http://127.0.0.1:30000/health"),
    ("::", "30001", "http://127.0.0.1:30001/health"),
    ("", 30000, "http://127.0.0.1:30000/health"),
    ("fd00::5", 30000, "http://[fd00::5]:30000/health"),
    ("[fd00::5]", 30000, "http://[fd00::5]:30000/health"),
    ("::1", 8000, "http://[::1]:8000/health"),
    ("gpu-01.example", 30000, "http://gpu-01.example:30000/health"),
])
def test_urls(host, port, url):
    assert sglang_health_url(host, port) == url


def test_never_raises_so_that_the_preflight_names_the_bad_input():
    """The role's argument_specs template sglang_health_url before the preflight; a raise here would replace the
    preflight's "sglang_port ... must be a port number 1-65535" (molecule/server's bad inputs)."""
    assert sglang_health_url("h", 70000) == "http://h:70000/health"
    assert sglang_health_url("a\nb", "x") == "http://a\nb:x/health"


def test_the_role_and_every_playbook_derive_it_with_the_filter():
    with open(os.path.join(ROOT, "roles", "server", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    assert "gpuserve.sglang.sglang_health_url(sglang_port)" in defaults["sglang_health_url"]
    for path in ("playbooks/deploy.yml", "playbooks/restart.yml", "playbooks/verify.yml"):
        with open(os.path.join(ROOT, path)) as handle:
            text = handle.read()
        assert "'http://127.0.0.1:'" not in text, path
    # deploy.yml and restart.yml verify nothing outside gpuserve.sglang.sglang_server (issue 47); verify.yml asks
    with open(os.path.join(ROOT, "playbooks", "verify.yml")) as handle:
        text = handle.read()
    assert "gpuserve.sglang.sglang_health_url(verify_port)" in text
    assert "verify_port: \"{{ sglang_port | default(30000) }}\"" in text
    from ansible_collections.gpuserve.sglang.plugins.filter.router_role import sglang_router_worker_health
    assert sglang_router_worker_health("w", {"w": {"sglang_host": "::1", "sglang_port": 31000}}) == \
        sglang_health_url("::1", 31000)
    assert sglang_router_worker_health("w", {"w": {}}) == sglang_health_url("127.0.0.1", 30000)


def test_no_playbook_or_role_builds_a_server_url_by_hand():
    """bench.yml built http://<sglang_host>:<port> itself: an IPv6 sglang_host gave http://fd00::5:30000."""
    for top in ("playbooks", "roles"):
        for base, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".yml"):
                    with open(os.path.join(base, name)) as handle:
                        text = handle.read()
                    assert "'http://' ~" not in text and '"http://" ~' not in text, os.path.join(base, name)
    with open(os.path.join(ROOT, "playbooks", "bench.yml")) as handle:
        text = handle.read()
    assert "gpuserve.sglang.sglang_health_url(bench_port, '')" in text
    assert "bench_port: \"{{ sglang_port | default(30000) }}\"" in text
    assert sglang_health_url("fd00::5", 30000, "") == "http://[fd00::5]:30000"
