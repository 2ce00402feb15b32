# SPDX-License-Identifier: GPL-3.0-or-later
"""router role: every input validated as the server's are, full matches (issue 23: three patterns anchored with
``$`` let a trailing newline through), the launcher's path too. The role's preflight runs on this machine in one
ansible-playbook (conftest.run_preflight_batch); nothing is installed."""
from __future__ import annotations

import json
import re

import pytest

from conftest import ROUTER_PREFLIGHT_PLAY, batch_key, run_play_batch, run_preflight_batch

PLAY = ROUTER_PREFLIGHT_PLAY + """    - ansible.builtin.debug:
        msg: PASSED
"""
WORKERS = {"sglang_router_worker_urls": ["http://10.0.0.1:30000"]}

REFUSED = [
    ("sglang_router_version", "0.3.2\n", "sglang_router_version must be an exact release such as 0.3.2"),
    ("sglang_router_service_name", "sglang-router\n", "sglang_router_service_name is not a unit name"),
    ("sglang_router_user", "sglang\n", "sglang_router_user is not a user name"),
    ("sglang_router_worker_urls", ["http://10.0.0.1:30000\n"], 'not a worker base URL (http(s)://host:port): "http://10.0.0.1:30000\\n"'),
    ("sglang_router_launch_script", "relative/launch.py", "sglang_router_launch_script must be an absolute path"),
    ("sglang_router_launch_script", "/usr/local/lib/x y.py", "sglang_router_launch_script must be an absolute path"),
    ("sglang_router_launch_script", "/usr/local/lib/launch.py\nExecStartPre=/bin/sh", "sglang_router_launch_script must be an absolute path"),
    # PD mode names each worker's kind from the server's own variable: a URL list has no kind (issue 25)
    ("sglang_router_pd", True, "sglang_router_pd takes its workers from the group sglang_router_worker_group"),
]
PASSING = [{}, {"sglang_router_launch_script": "/opt/gpuserve/router_launch.py"}]


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    return run_preflight_batch(tmp_path_factory.mktemp("router-inputs"), PLAY, WORKERS,
                               [(name, value) for name, value, _msg in REFUSED], PASSING)


@pytest.mark.parametrize("name,value,message", REFUSED)
def test_refused_with_a_trailing_newline_or_a_bad_path(preflight, name, value, message):
    rc, out = preflight[batch_key({name: value})]
    assert rc != 0 and "PASSED" not in out
    assert message in out, out[-2000:]


@pytest.mark.parametrize("variables", PASSING)
def test_good_inputs_pass(preflight, variables):
    rc, out = preflight[batch_key(variables)]
    assert rc == 0 and "PASSED" in out, out[-3000:]


# Issue 47: the preflight's one task registers what every later task and template reads (_router_in), computed once
# by the action plugin of sglang_router_service (router_inputs), no longer by a lazy variable's filter.
PLAY_INPUTS = ROUTER_PREFLIGHT_PLAY + """    - ansible.builtin.debug:
        msg: "INPUTS {{ {'release': _router_in.release, 'url': _router_in.url, 'workers': _router_in.workers,
          'flags': _router_in.flags, 'unit': _router_in.unit, 'env': _router_in.env, 'package': _router_in.gateway.package,
          'venv': _router_in.venv} | to_json }}"
"""


def test_the_preflight_registers_the_inputs_the_role_reads(tmp_path):
    cases = {"router": dict(WORKERS), "smg": dict(WORKERS, sglang_router_gateway="smg", sglang_router_port=8000,
                                                  sglang_router_service_name="gw", sglang_router_config_dir="/etc/gw")}
    results = run_play_batch(tmp_path, PLAY_INPUTS, cases)
    got = {}
    for case, (rc, out) in results.items():
        assert rc == 0, out[-3000:]
        # the role's preflight is one task result
        assert len([line for line in out.splitlines() if line.startswith("TASK [gpuserve.sglang.router : ")]) == 1
        got[case] = json.loads(re.search(r"^INPUTS (\{.*\})$", out, re.M).group(1))
    assert got["router"]["release"] == "sglang-router-0.3.2" and got["router"]["package"] == "sglang-router"
    assert got["router"]["url"] == "http://127.0.0.1:30000" and got["router"]["workers"] == ["http://10.0.0.1:30000"]
    assert got["router"]["flags"]["worker-urls"] == ["http://10.0.0.1:30000"] and got["router"]["flags"]["port"] == 30000
    assert got["smg"]["release"] == "smg-1.13.0" and got["smg"]["venv"] == "/opt/smg/venv"
    assert got["smg"]["unit"] == "/etc/systemd/system/gw.service" and got["smg"]["env"] == "/etc/gw/gw.env"
    assert got["smg"]["url"] == "http://127.0.0.1:8000" and got["smg"]["flags"]["port"] == 8000
