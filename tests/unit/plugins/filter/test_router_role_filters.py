# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/filter/router_role.py: the router role's computations (issue 39), against the former role's Jinja: the
refusals word for word, the flags of ExecStart, the rollout's lines."""
import os

import pytest

import yaml

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _router_role as rr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLE = os.path.join(ROOT, "roles", "router")
with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as _h:
    DEFAULTS = yaml.safe_load(_h)
with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as _h:
    VARS = yaml.safe_load(_h)


def inputs(host=None, hostvars=None, groups=None, **settings):
    base = dict((key[len("sglang_router_"):], value) for key, value in DEFAULTS.items())
    base.update(settings)
    return rr.sglang_router_inputs(base, hostvars or {}, groups or {}, ROLE, VARS["_router_managed_flags"],
                                   VARS["_router_gateway_pins"], host, "gw-1")


def test_defaults_with_workers_pass_and_the_flags_are_the_former_roles():
    got = inputs(worker_urls=["http://w1:30000"])
    assert got["problems"] == []
    assert got["release"] == "sglang-router-0.3.2" and got["gateway"]["package"] == "sglang-router"
    assert got["unit"] == "/etc/systemd/system/sglang-router.service"
    assert got["env"] == "/etc/sglang-router/sglang-router.env" and got["backup"] == "/etc/sglang-router/backup"
    assert got["url"] == "http://127.0.0.1:30000" and got["python"] == "/opt/sglang-router/venv/bin/python"
    assert list(got["flags"])[:4] == ["host", "port", "policy", "worker-urls"]
    assert got["flags"]["prometheus-port"] == 29000 and got["flags"]["log-level"] == "info"
    assert got["pip_args"] == "--require-hashes --only-binary=:all:"


def test_the_refusals_word_for_word():
    got = inputs(gateway="nope", worker_urls=[])["problems"]
    assert got[0] == 'sglang_router_gateway must be one of sglang-router, smg, got "nope"'
    assert "no worker: group sglang_servers is empty or missing and sglang_router_worker_urls is empty" in got
    got = inputs(version="9.9.9", worker_urls=["http://w1:30000", "http://w1:30000"], port=0,
                 api_key="a b", pip_index_url="http://x/simple")["problems"]
    assert got[0].startswith("the role has no data or hash lock for sglang-router 9.9.9 (releases it knows: "
                             "sglang-router-0.3.2, smg-1.13.0)")
    assert "the same worker URL twice: http://w1:30000, http://w1:30000" in got
    assert "sglang_router_port must be 1-65535, got 0" in got
    assert "sglang_router_api_key holds whitespace or a control character" in got
    assert got[-1] == ('only https:// (or a local file://) pip sources are allowed; refused: '
                       'sglang_router_pip_index_url="http://x/simple"')
    got = inputs(worker_urls=["http://w1:30000"], extra_args={"no-such-flag": 1})["problems"]
    assert got == ["flags sglang-router 0.3.2 does not know (sglang_router_extra_args): no-such-flag"]


def test_the_host_look_is_judged_too():
    host = {"results": [{"item": "/usr/bin/python3", "stat": {"exists": False}},
                        {"item": "/srv/wheels", "stat": {"exists": True, "isdir": False}}]}
    got = inputs(host=host, worker_urls=["http://w1:30000"], wheel_dir="/srv/wheels")["problems"]
    assert got == ["sglang_router_venv_base_python /usr/bin/python3 does not exist on gw-1",
                   "sglang_router_wheel_dir /srv/wheels is not a directory on gw-1"]


def test_workers_from_the_group():
    hostvars = {"w1": {"sglang_host": "0.0.0.0"}, "w2": {}}
    got = inputs(hostvars=hostvars, groups={"sglang_servers": ["w1", "w2"]})
    assert got["workers"] == ["http://w1:30000", "http://w2:30000"] and got["loopback"] == ["w2"]
    assert any("worker(s) w2 listen on loopback only" in p for p in got["problems"])


def test_the_rollouts_helpers():
    hostvars = {"a": {"rollout_restart_due": False}, "b": {"rollout_restart_due": True}, "c": {}}
    assert rr.sglang_router_batch(["a", "b", "c"], hostvars) == ["b", "c"]
    words = rr.sglang_router_drained_words({"in_flight_at_end": {"u": 0}, "drain_seconds": 1.5},
                                           {"batch": ["b"], "routers": ["r1", "r2"]})
    assert words == 'DRAINED b: out of 2 router(s), in flight at the end {"u": 0} after 1.5 s; nothing cut'
    first = {"results": [{"item": "r1", "taken": True}, {"item": "r2", "taken": False, "contended": True},
                         {"item": "r3", "msg": "boom"}]}
    assert [r["item"] for r in rr.sglang_router_lease_held(first)] == ["r2"]
    second = {"results": [{"item": {"item": "r2"}, "taken": False, "contended": True, "msg": "held"}]}
    assert [r.get("msg") for r in rr.sglang_router_lease_failures(first, second)] == ["boom", "held"]
    assert rr.sglang_router_lease_failures({"results": [{"taken": True}]}, {"results": [], "skipped": True}) == []
    assert rr.sglang_router_envfile("") == rr.ENV_HEADER


@pytest.mark.parametrize("server, readmit, words", [
    # the module rolled it back and verified the restored set
    ({"failed": True, "rolled_back": True, "serving_verified": True, "rollback": {"ok": True, "result": {
        "invocation_id": "i2"}}}, True, "rolled back and its last good configuration verified (invocation i2)"),
    # refused before anything restarted: the verified invocation still runs
    ({"failed": True, "serving_verified": True, "restart": {}}, True, "never restarted"),
    # 7d0d57e re-admitted this one (its own /health check answered): a gate failed and nothing was rolled back
    ({"failed": True, "rolled_back": False, "serving_verified": False, "answers": {"failed": True},
      "restart": {"invocation_id": "i1", "changed": False}}, False, "a gate failed on a server this run did not"),
    ({"failed": True, "rolled_back": False, "serving_verified": False, "rollback": {"ok": False}}, False,
     "the rollback did not verify"),
    ({}, False, "no result of the server module"),
    (None, False, "no result of the server module"),
])
def test_rollout_rescue_reads_the_server_modules_result(server, readmit, words):
    """Issue 47 defect 7: the rescue put a worker back when its own health check answered, also when its gate had
    failed without a rollback; now only the module's answer (serving_verified) re-admits it."""
    answer = rr.sglang_router_rescue(server, "/f")
    assert answer["readmit"] is readmit and words in answer["words"]
    assert readmit or "held out in /f on every router host" in answer["words"]


def test_router_filters_continued():
    assert rr.sglang_router_envfile("") == rr.ENV_HEADER
    assert rr.sglang_router_envfile("k1") == rr.ENV_HEADER + 'SGLANG_ROUTER_API_KEY="k1"\n'
    assert rr.sglang_router_other_gateways('{"smg": "1.13.0", "sglang-router": null}', "sglang-router") == ["smg"]
