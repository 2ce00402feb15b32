# SPDX-License-Identifier: GPL-3.0-or-later
"""router role: its pip sources are https:// or file:// only (issue 14, supply chain); the refusal names the
variable. The role's preflight runs on this machine (conftest.run_play); nothing is installed."""
from __future__ import annotations

import json

import pytest

from conftest import run_play

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.router
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: PASSED
"""
WORKERS = {"sglang_router_worker_urls": ["http://10.0.0.1:30000"]}


def _preflight(tmp_path, **variables):
    return run_play(tmp_path, PLAY, [json.dumps(dict(WORKERS, **variables))])


@pytest.mark.parametrize("name,value", [
    ("sglang_router_pip_index_url", "http://pypi.mirror.example/simple"),
    ("sglang_router_pip_index_url", "ftp://pypi.mirror.example/simple"),
    ("sglang_router_pip_extra_args", ["--extra-index-url", "http://pypi.mirror.example/simple"]),
    ("sglang_router_pip_extra_args", ["--find-links=http://pypi.mirror.example/wheels"]),
])
def test_plain_pip_sources_are_refused_naming_the_variable(tmp_path, name, value):
    rc, out = _preflight(tmp_path, **{name: value})
    assert rc != 0
    assert "refused: %s=%s" % (name, json.dumps(value)) in out
    assert "PASSED" not in out


@pytest.mark.parametrize("variables", [{}, {"sglang_router_pip_index_url": "https://pypi.mirror.example/simple"},
                                       {"sglang_router_pip_index_url": "file:///srv/simple"},
                                       {"sglang_router_pip_extra_args": ["--index-url", "https://x.example/simple"]}])
def test_https_and_file_pass(tmp_path, variables):
    rc, out = _preflight(tmp_path, **variables)
    assert rc == 0 and "PASSED" in out, out
