# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 47: the router role's private filters are no longer collection API. The role's YAML calls none of the
deprecated filters; the action plugins of sglang_router_service, sglang_router_workers and sglang_lease (and the
install step's own Python) compute the same values through plugin_utils/_router_role.py (the expected values are
the filter tests', tests/unit/plugins/filter/test_router_role_filters.py, test_sglang_worker_aliases.py,
test_sglang_pd.py). The role's inputs (_router_in) are computed once, by the preflight's one task (the action
plugin of sglang_router_service with router_inputs), no longer by the filter sglang_router_inputs on every read
of a lazy role variable (the role's real play: tests/unit/roles/test_router_inputs.py)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.action import sglang_lease as lease_action
from ansible_collections.gpuserve.sglang.plugins.action import sglang_router_service as service_action
from ansible_collections.gpuserve.sglang.plugins.action import sglang_router_workers as workers_action
from ansible_collections.gpuserve.sglang.plugins.filter import sglang_router
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _router_role as rr
from ansible.plugins.action import ActionBase

from conftest import calls_in_roles_and_playbooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLE = os.path.join(ROOT, "roles", "router")
# the router role's filters that are role-private (issue 47): each deprecated, none called by the role
PRIVATE = ("sglang_router_envfile", "sglang_router_batch", "sglang_router_drained_words", "sglang_router_readd_kinds",
           "sglang_router_worker_health", "sglang_router_lease_held", "sglang_router_lease_failures",
           "sglang_router_rescue", "sglang_router_other_gateways", "sglang_router_urls", "sglang_worker_kinds",
           "sglang_worker_loopback",
           # the role's inputs and preflight: the action plugin of sglang_router_service (router_inputs)
           "sglang_router_inputs")
HOSTVARS = {
    "w1": {"sglang_host": "0.0.0.0", "ansible_host": "10.0.0.1", "sglang_disaggregation_mode": "prefill"},
    "w2": {"sglang_host": "0.0.0.0", "sglang_port": 30001, "sglang_disaggregation_mode": "decode"},
    "gw1": {"sglang_router_port": 8000}, "gw2": {"sglang_router_api_address": "10.0.0.9"},
}


def _role_text():
    out = []
    for base, _dirs, files in os.walk(ROLE):
        for name in files:
            if name.endswith((".yml", ".j2")):
                with open(os.path.join(base, name), encoding="utf-8") as handle:
                    out.append((os.path.relpath(os.path.join(base, name), ROOT), handle.read()))
    return out


def test_the_router_role_calls_no_deprecated_filter():
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        routing = yaml.safe_load(handle)["plugin_routing"]["filter"]
    deprecated = [name for name, entry in routing.items() if "deprecation" in entry]
    assert set(PRIVATE) <= set(deprecated)
    calls = ["%s: %s" % (path, name) for path, text in _role_text() for name in deprecated
             if "gpuserve.sglang.%s" % name in text]
    assert calls == []


@pytest.mark.parametrize("name", PRIVATE)
def test_each_private_filter_is_deprecated_until_3_0_0(name):
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        entry = yaml.safe_load(handle)["plugin_routing"]["filter"][name]
    assert str(entry["deprecation"]["removal_version"]) == "3.0.0" and entry["deprecation"]["warning_text"]
    with open(os.path.join(ROOT, "plugins", "filter", name + ".yml"), encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    assert str(doc["deprecated"]["removed_in"]) == "3.0.0" and doc["deprecated"]["alternative"]


def test_the_envfile_is_the_action_plugins():
    args = service_action.module_args({"env": {"path": "/etc/r.env"}, "api_key": "k1"})
    assert args["env"] == {"path": "/etc/r.env", "content": rr.ENV_HEADER + 'SGLANG_ROUTER_API_KEY="k1"\n'}
    assert service_action.module_args({"env": {"path": "/e"}})["env"]["content"] == rr.ENV_HEADER
    given = {"env": {"path": "/e", "content": "mine\n"}, "api_key": "k1"}
    assert service_action.module_args(given) == given
    run = yaml.safe_load(open(os.path.join(ROLE, "tasks", "run.yml"), encoding="utf-8"))[0]
    assert "content" not in run["gpuserve.sglang.sglang_router_service"]["env"]


def test_drain_args_from_inventory_hosts_are_the_filters():
    args, own = workers_action.module_args({"router_hosts": ["gw1", "gw2"], "worker_hosts": ["w1"],
                                            "fleet_hosts": ["w1", "w2"], "state": "drained"}, HOSTVARS)
    assert not set(workers_action.OWN) & set(args)
    assert args["routers"] == sglang_router.sglang_router_urls(["gw1", "gw2"], HOSTVARS) == [
        "http://gw1:8000", "http://10.0.0.9:30000"]
    assert args["workers"] == ["http://w1:30000"]
    assert args["fleet"] == sglang_router.sglang_worker_urls(["w1", "w2"], HOSTVARS)
    assert args["aliases"] == sglang_router.sglang_worker_aliases(["w1", "w2"], HOSTVARS)
    assert args["aliases"]["http://w1:30000"] == ["http://10.0.0.1:30000"]
    assert args["kinds"] == sglang_router.sglang_worker_kinds(["w1", "w2"], HOSTVARS)
    assert args["kinds"]["http://w2:30001"] == {"worker_type": "decode", "bootstrap_port": None}
    # the line the rollout prints (the filter test's expected words)
    words = workers_action.words({"in_flight_at_end": {"u": 0}, "drain_seconds": 1.5},
                                 {"state": "drained", "routers": ["r1", "r2"]}, {"worker_hosts": ["b"]})
    assert words == 'DRAINED b: out of 2 router(s), in flight at the end {"u": 0} after 1.5 s; nothing cut'
    assert workers_action.words({"failed": True}, {"state": "drained", "routers": []}, {"worker_hosts": ["b"]}) is None


def test_readd_kinds_are_the_filters():
    drained = {"kinds": {"http://w1:30000": {"worker_type": "prefill", "bootstrap_port": 9001}}}
    args, _own = workers_action.module_args({"router_hosts": ["gw1"], "worker_hosts": ["w1"], "state": "present",
                                             "kinds": drained["kinds"]}, HOSTVARS)
    assert args["kinds"] == rr.sglang_router_readd_kinds(drained, "w1", HOSTVARS)
    assert args["kinds"]["http://w1:30000"]["bootstrap_port"] == 9001
    assert args["aliases"] == sglang_router.sglang_worker_aliases(["w1"], HOSTVARS)
    args, _own = workers_action.module_args({"router_hosts": [], "worker_hosts": ["w1"], "state": "present"},
                                            HOSTVARS)
    assert args["kinds"] == rr.sglang_router_readd_kinds({}, "w1", HOSTVARS)
    # held_out / released: URLs only (no kinds asked of a server whose mode may be what failed)
    args, _own = workers_action.module_args({"router_hosts": ["gw1"], "worker_hosts": ["w1"], "state": "released"},
                                            HOSTVARS)
    assert "kinds" not in args and args["workers"] == ["http://w1:30000"]


class _Conn(object):
    class _shell(object):
        tmpdir = None


def _action(cls, args, monkeypatch, answers, check_mode=False):
    """An action plugin's run() with the module calls answered from ``answers`` (recorded in ``calls``)."""
    action = cls.__new__(cls)
    action._task = type("T", (), {"args": args, "check_mode": check_mode})()
    action._connection = _Conn()
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append(dict(module_args))
        return dict(answers.pop(0))
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action._execute_module = execute
    action._remove_tmp_path = lambda path: None
    return action, calls


@pytest.mark.parametrize("server, readmit", [
    ({"failed": True, "rolled_back": True, "serving_verified": True, "rollback": {"ok": True, "result": {}}}, True),
    ({"failed": True, "rolled_back": False, "serving_verified": False, "answers": {"failed": True}}, False),
    ({}, False),
])
def test_rescue_verdict_is_the_filters(server, readmit, monkeypatch):
    args = {"router_hosts": ["gw1"], "worker_hosts": ["w1"], "server_result": server, "state": "held_out",
            "held_out_file": "/f", "reason": "r"}
    action, calls = _action(workers_action.ActionModule, args, monkeypatch, [{"changed": True}])
    got = action.run(task_vars={"hostvars": HOSTVARS})
    want = rr.sglang_router_rescue(server, "/f")
    assert got["readmit"] is want["readmit"] is readmit and got["words"] == want["words"]
    # held out only when not re-admitted; never with the server's result among the module's options
    assert len(calls) == (0 if readmit else 1)
    assert all("server_result" not in c and c["workers"] == ["http://w1:30000"] for c in calls)


FIRST = [{"item": "r1", "taken": True, "result": "acquired", "changed": True},
         {"item": "r2", "taken": False, "contended": True, "result": "held"},
         {"item": "r3", "msg": "boom", "failed": False, "failed_when_result": False}]


def test_lease_second_round_is_the_filters(monkeypatch):
    """The first round's answers, the second round asking only the held one again: the stops are the filters'
    (sglang_router_lease_held, sglang_router_lease_failures on the filter test's answers)."""
    second = []
    asked = []
    for answer in FIRST:
        waited = {"taken": False, "contended": True, "msg": "held", "result": "held"}
        action, calls = _action(lease_action.ActionModule, {"unit": "u.service", "after": answer, "wait": 5},
                                monkeypatch, [waited, waited, waited])
        monkeypatch.setattr(lease_action._lease, "holder_gone", lambda owner, here: False)
        got = action.run(task_vars={"inventory_hostname": "w1"})
        asked += [answer["item"]] * bool(calls)
        assert all("after" not in c for c in calls)
        second.append(dict(got, item={"item": answer["item"]}))
    held = rr.sglang_router_lease_held({"results": FIRST})
    assert asked == [r["item"] for r in held] == ["r2"]
    failures = rr.sglang_router_lease_failures({"results": FIRST}, {"results": [second[1]]})
    # the same answers stop the rollout (said in the routers' order now, one message)
    assert [r["stop"] for r in second if r["stop"]] == ["held", "boom"]
    assert sorted(r.get("msg") for r in failures) == ["boom", "held"]
    assert second[0] == {"taken": True, "result": "acquired", "changed": False, "stop": "", "item": {"item": "r1"}}


@pytest.mark.parametrize("state, check_mode", [("released", False), ("acquired", True)])
def test_lease_second_round_asks_nothing_again_on_release_or_in_check_mode(state, check_mode, monkeypatch):
    """As before (the second round was skipped then): a held lease is not waited for, and is no stop."""
    action, calls = _action(lease_action.ActionModule, {"unit": "u", "state": state, "after": FIRST[1]},
                            monkeypatch, [], check_mode=check_mode)
    got = action.run(task_vars={})
    assert calls == [] and got["stop"] == "" and got["contended"] is True


def test_the_install_steps_python_finds_the_other_gateways_as_the_filter_did():
    with open(os.path.join(ROLE, "tasks", "installed.yml"), encoding="utf-8") as handle:
        argv = yaml.safe_load(handle)[0]["ansible.builtin.command"]["argv"]
    assert argv[3:] == ["{{ _router_in.gateways | to_json }}", "{{ sglang_router_gateway }}",
                        "{{ _router_in.pins | default({}) | to_json }}"]
    for gateway in ("pip", "no-such-gateway-xyz"):
        names = json.dumps(["pip", "no-such-gateway-xyz"])
        out = json.loads(subprocess.run([sys.executable, "-c", argv[2], names, gateway, "{}"], capture_output=True,
                                        text=True, check=True).stdout)
        assert out["others"] == rr.sglang_router_other_gateways(out["found"], gateway)
        assert out["others"] == ([] if gateway == "pip" else ["pip"])


def test_no_role_or_playbook_calls_the_inputs_filter():
    assert calls_in_roles_and_playbooks(("sglang_router_inputs",)) == []


def test_the_inputs_are_computed_once_by_the_preflights_one_task():
    """On 7d0d57e _router_in was a lazy role variable (the filter, run again on each of ~33 reads) and the preflight
    two tasks (a stat loop, an assert): now the preflight is one task that registers _router_in, tagged always
    (every phase reads it), and the role's vars hold only data."""
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        role_vars = yaml.safe_load(handle)
    assert sorted(role_vars) == ["_router_gateway_pins", "_router_managed_flags"]
    with open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8") as handle:
        preflight = yaml.safe_load(handle)
    assert len(preflight) == 1
    assert preflight[0]["gpuserve.sglang.sglang_router_service"] == {"router_inputs": True}
    assert preflight[0]["register"] == "_router_in" and preflight[0]["tags"] == ["always"]
    # every other task file reads _router_in, none registers or sets it
    for path, text in _role_text():
        if not path.endswith("preflight.yml"):
            assert "register: _router_in\n" not in text and "_router_in:" not in text, path


DEFAULTS = yaml.safe_load(open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8"))
ROLE_VARS = yaml.safe_load(open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8"))
PD_HOSTVARS = {"p1": {"sglang_host": "0.0.0.0", "sglang_disaggregation_mode": "prefill"},
               "d1": {"sglang_host": "0.0.0.0", "sglang_port": 30001, "sglang_disaggregation_mode": "decode"}}
INPUT_CASES = {
    "defaults": ({"sglang_router_worker_urls": ["http://w1:30000", "http://w2:30000"]}, {}, {}),
    "smg-with-flags": ({"sglang_router_gateway": "smg", "sglang_router_worker_urls": ["http://w1:30000"],
                        "sglang_router_extra_args": {"enable-wasm": True}, "sglang_router_port": 8000,
                        "sglang_router_config_dir": "/etc/gw/", "sglang_router_service_name": "gw",
                        "sglang_router_pip_index_url": "https://pypi.example/simple"}, {}, {}),
    "pd-group": ({"sglang_router_pd": True, "sglang_router_worker_group": "servers", "sglang_router_host": "10.0.0.5"},
                 PD_HOSTVARS, {"servers": ["p1", "d1"]}),
    "group": ({"sglang_router_worker_group": "servers", "sglang_router_wheel_dir": "/srv/wheels"},
              PD_HOSTVARS, {"servers": ["p1", "d1"]}),
    "refused": ({"sglang_router_worker_urls": [], "sglang_router_gateway": "smg", "sglang_router_version": "1.12.0",
                 "sglang_router_port": 0, "sglang_router_wheel_dir": "/srv/wheels"}, {}, {}),
    "secret-refused": ({"sglang_router_worker_urls": ["http://w1:30000"],
                        "sglang_router_extra_args": {"redis-url": "redis://u:s3cr3t-pw@r:6379"}}, {}, {}),
}
# the look at the host: the stat module's answer for each path asked
STATS = {"/usr/bin/python3": {"exists": True, "isdir": False}, "/srv/wheels": {"exists": True, "isdir": False}}


def _old_path(variables, hostvars, groups, host):
    """The filter as roles/router/vars/main.yml called it on 7d0d57e: _router_settings (each sglang_router_<key>
    under <key>, the managed flags, the pins, the stat loop, the host's name) | sglang_router_inputs(hostvars,
    groups, role_path)."""
    from ansible_collections.gpuserve.sglang.plugins.filter import router_role  # pylint: disable=import-outside-toplevel
    settings = dict((key[len("sglang_router_"):], value) for key, value in variables.items()
                    if key.startswith("sglang_router_"))
    settings.update(_managed=ROLE_VARS["_router_managed_flags"], _pins=ROLE_VARS["_router_gateway_pins"],
                    _host=host, _name="gw-1")
    return router_role.FilterModule().filters()["sglang_router_inputs"](settings, hostvars, groups, ROLE)


def _task_vars(variables, hostvars, groups):
    from ansible.template import trust_as_template  # pylint: disable=import-outside-toplevel
    task_vars = dict(DEFAULTS, **variables)
    # a variable that is a template resolves as the role's templar resolves it
    task_vars.update(_router_port=task_vars["sglang_router_port"],
                     sglang_router_port=trust_as_template("{{ _router_port }}"))
    task_vars.update(ROLE_VARS, role_path=ROLE, inventory_hostname="gw-1", hostvars=hostvars, groups=groups)
    return task_vars


@pytest.mark.parametrize("case", sorted(INPUT_CASES))
def test_the_preflights_inputs_are_the_filters(case, monkeypatch):
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    variables, hostvars, groups = INPUT_CASES[case]
    task_vars = _task_vars(variables, hostvars, groups)
    paths = rr.host_paths(dict((key, task_vars["sglang_router_" + key]) for key in rr.SETTINGS))
    action, calls = _action(service_action.ActionModule, {"router_inputs": True}, monkeypatch,
                            [{"changed": False, "stat": dict(STATS[path])} for path in paths])
    action._templar = Templar(loader=DataLoader(), variables=task_vars)
    got = action.run(task_vars=task_vars)
    # the look at the host is the former stat loop's: the base interpreter, then the wheel directory when set
    assert calls == [{"path": path, "get_checksum": False} for path in paths]
    assert paths == ["/usr/bin/python3"] + (["/srv/wheels"] if variables.get("sglang_router_wheel_dir") else [])
    host = {"results": [{"item": path, "stat": STATS[path]} for path in paths]}
    want = _old_path(dict(DEFAULTS, **variables), hostvars, groups, host)
    if want["problems"]:
        # the former assert's message; nothing of the inputs in the failed result (a refused secret among them)
        assert got == {"failed": True, "msg": "; ".join(want["problems"]), "problems": want["problems"]}
        return
    assert got.pop("changed") is False
    assert got.pop("gateway") == dict((k, v) for k, v in want.pop("gateway").items() if k != "flags")
    # and the lock's pins, for the install's no-op read (not a filter's output)
    assert got.pop("pins") == (rr.lock_pins(want["lock_file"]) if want["known"] else {})
    assert got == want


def test_a_failed_look_at_the_host_fails_the_preflight(monkeypatch):
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    task_vars = _task_vars(INPUT_CASES["defaults"][0], {}, {})
    action, _calls = _action(service_action.ActionModule, {"router_inputs": True}, monkeypatch,
                             [{"failed": True, "msg": "Permission denied"}])
    action._templar = Templar(loader=DataLoader(), variables=task_vars)
    got = action.run(task_vars=task_vars)
    assert got == {"failed": True, "msg": "the look at /usr/bin/python3 on the host failed: Permission denied"}


def test_without_router_inputs_the_module_runs_as_before(monkeypatch):
    args = {"router_inputs": False, "name": "r", "env": {"path": "/e"}, "api_key": ""}
    action, calls = _action(service_action.ActionModule, args, monkeypatch, [{"changed": False, "action": "none"}])
    assert action.run(task_vars={}) == {"changed": False, "action": "none"}
    assert calls == [{"name": "r", "env": {"path": "/e", "content": rr.ENV_HEADER}, "api_key": ""}]
