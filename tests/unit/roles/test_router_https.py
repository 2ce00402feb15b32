# SPDX-License-Identifier: GPL-3.0-or-later
"""router role: its pip sources are https:// or file:// only (issue 14, supply chain); the refusal names the
variable. The role's preflight runs on this machine (conftest.run_play); nothing is installed."""
from __future__ import annotations

import json

import pytest

from conftest import ROUTER_PREFLIGHT_PLAY, batch_key, run_preflight_batch

PLAY = ROUTER_PREFLIGHT_PLAY + """    - ansible.builtin.debug:
        msg: PASSED
"""
WORKERS = {"sglang_router_worker_urls": ["http://10.0.0.1:30000"]}


REFUSED = [
    ("sglang_router_pip_index_url", "http://pypi.mirror.example/simple"),
    ("sglang_router_pip_index_url", "ftp://pypi.mirror.example/simple"),
    ("sglang_router_pip_extra_args", ["--extra-index-url", "http://pypi.mirror.example/simple"]),
    ("sglang_router_pip_extra_args", ["--find-links=http://pypi.mirror.example/wheels"]),
]
PASSING = [{}, {"sglang_router_pip_index_url": "https://pypi.mirror.example/simple"},
           {"sglang_router_pip_index_url": "file:///srv/simple"},
           {"sglang_router_pip_extra_args": ["--index-url", "https://x.example/simple"]}]


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """Every case of this file through the role's preflight in one ansible-playbook (conftest.run_play_batch)."""
    return run_preflight_batch(tmp_path_factory.mktemp("router-https"), PLAY, WORKERS, REFUSED, PASSING)


@pytest.mark.parametrize("name,value", REFUSED)
def test_plain_pip_sources_are_refused_naming_the_variable(preflight, name, value):
    rc, out = preflight[batch_key({name: value})]
    assert rc != 0
    assert "refused: %s=%s" % (name, json.dumps(value)) in out
    assert "PASSED" not in out


@pytest.mark.parametrize("variables", PASSING)
def test_https_and_file_pass(preflight, variables):
    rc, out = preflight[batch_key(variables)]
    assert rc == 0 and "PASSED" in out, out
