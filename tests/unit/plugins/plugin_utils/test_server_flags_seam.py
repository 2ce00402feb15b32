# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's effective flags, the unit's command line and the memory plan's inputs (issue 47): computed once in
Python by the action plugin of gpuserve.sglang.sglang_host_facts (server_flags: the entry point `flags`;
server_preflight: after the host read), plugins/plugin_utils/_server_flags.py. On 4aca088 the role computed them in
YAML and in the unit's template with the published filters sglang_server_args, sglang_server_cmdline and
sglang_server_plan (now deprecated): the values here are compared with theirs. The role's real plays:
tests/unit/roles/test_server_flags.py."""

from __future__ import annotations

import os
import re

import jinja2
import pytest
import yaml
from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.action import sglang_host_facts as facts_action
from ansible_collections.gpuserve.sglang.plugins.filter import server_role as r
from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_cmdline
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags as sf

from conftest import ROOT, calls_in_roles_and_playbooks, reader as _reader

ROLE = os.path.join(ROOT, "roles", "server")
DEPRECATED = ("sglang_server_args", "sglang_server_cmdline", "sglang_server_plan")
PROFILES = sorted(name[:-4] for name in os.listdir(os.path.join(ROLE, "vars", "profiles")))
DEFAULTS = {"sglang_weight_cache": False, "sglang_weight_cache_timeout": 1800,
            "sglang_weight_cache_service_name": "sglang-weight-cache", "sglang_weight_prefetch": False,
            "sglang_weight_prefetch_headroom_gb": 16}


def _yaml(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _inputs(**extra):
    base = {"profile": {"tp": 8}, "user": {}, "model_path": "/models/m", "nodes": [], "host": "gpu-a1",
            "dist_init_port": 50000, "pd_mode": None, "bootstrap_port": 8998, "release": "", "release_args": [],
            "cpus": 0, "listen_host": "0.0.0.0", "port": 30000, "python": "/opt/sglang/venv/bin/python",
            "launch_script": "", "launcher": "sglang.launch_server", "config": "", "secret_keys": []}
    base.update(extra)
    return base


def _old_exec_start(inputs, hostvars):
    """The unit template's former ExecStart expression, verbatim."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["gpuserve.sglang.sglang_server_cmdline"] = r.sglang_server_cmdline
    env.filters["gpuserve.sglang.sglang_cmdline"] = sglang_cmdline
    return env.from_string(
        "{{ _server_in | gpuserve.sglang.sglang_server_cmdline(hostvars) }}"
        "{{ (' ' ~ ['--config', _server_in.config] | gpuserve.sglang.sglang_cmdline) if _server_in.config else '' }}"
    ).render(_server_in=inputs, hostvars=hostvars)


def _cases():
    hostvars = {"gpu-a1": {"ansible_host": "10.0.0.11"}, "gpu-a2": {"ansible_host": "10.0.0.12"}}
    release_args = _yaml(ROLE, "vars", "profiles", "qwen35_397b_a17b_nvfp4.yml")["_server_profile_release_args"]
    yield "one host", _inputs(), {}, {}
    yield "user over the profile, a key set", _inputs(user={"tp": 4, "hicache-ratio": 3.0},
                                                      config="/etc/sglang/sglang.secrets"), {}, {}
    yield "node 1 of two, prefill", _inputs(nodes=["gpu-a1", "gpu-a2"], host="gpu-a2", pd_mode="prefill"), \
        hostvars, {}
    yield "the launch script", _inputs(launch_script="/usr/local/lib/gpuserve-sglang/sglang_launch.py"), {}, {}
    for release in ("0.5.9", "0.5.18", "0.5.23"):
        yield "Qwen's release-only flags on " + release, _inputs(
            profile=_yaml(ROLE, "vars", "profiles", "qwen35_397b_a17b_nvfp4.yml")["_server_profile_args"],
            release=release, release_args=release_args, cpus=64), {}, {}
    yield "the weight cache and the prefetch", _inputs(release="0.5.17"), {}, dict(
        DEFAULTS, sglang_weight_cache=True, sglang_weight_prefetch=True)


CASES = list(_cases())


@pytest.mark.parametrize("name, inputs, hostvars, role", CASES, ids=[c[0] for c in CASES])
def test_the_flags_are_the_deprecated_filters_values(name, inputs, hostvars, role):
    """args, argv, cmdline, the ExecStart and the plan's inputs: the filters' and the template's former values,
    with the role's features as the former fact sglang_server_features gave them to the filters through hostvars."""
    del name
    got = sf.flags(_reader(dict(DEFAULTS, _server_in=inputs, **role)), hostvars)
    facts = dict(hostvars)
    facts[inputs["host"]] = dict(hostvars.get(inputs["host"], {}), sglang_server_features=got["features"])
    assert got["args"] == r.sglang_server_args(inputs, facts)
    assert got["argv"] == r.sglang_server_argv(inputs, facts)
    assert got["cmdline"] == r.sglang_server_cmdline(inputs, facts)
    assert got["exec_start"] == _old_exec_start(inputs, facts)
    assert got["plan"] == r.sglang_server_plan(inputs, facts) and got["hicache"] is got["plan"]["hicache"]
    assert got["release"] == inputs["release"]


def test_the_role_s_features_are_in_the_flags_before_their_fact_is_set():
    """The entry point computes before its set_fact: the weight cache's client flags come from the role's variables
    (the filter, given hostvars without the fact, left them out of _server_args)."""
    inputs = _inputs(release="0.5.17")
    got = sf.flags(_reader(dict(DEFAULTS, _server_in=inputs, sglang_weight_cache=True)), {})
    assert got["features"]["weight_cache_unit"] == "sglang-weight-cache.service"
    assert "weight-cache-mode" not in r.sglang_server_args(inputs, {}) and "weight-cache-mode" in got["args"]
    # without the role's defaults in view (a reader of a plain mapping) hostvars' fact is read, as the filter did
    assert sf.flags(_reader({"_server_in": inputs}), {})["features"] is None


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_plan_s_hicache_is_the_execstart_s_on_every_release(profile, release):
    """The Qwen profile turns HiCache on from the releases of rule hicache_mamba: the plan's inputs (and the unit's
    stop timeout) say so on every release, from the same computation as the ExecStart."""
    data = _yaml(ROLE, "vars", "profiles", profile + ".yml")
    inputs = _inputs(profile=data.get("_server_profile_args") or {}, release=release,
                     release_args=data.get("_server_profile_release_args") or [], cpus=64)
    got = sf.flags(_reader(dict(DEFAULTS, _server_in=inputs)), {})
    assert got["plan"]["hicache"] is ("--enable-hierarchical-cache" in got["exec_start"].split()), (profile, release)


def test_the_roles_and_playbooks_call_none_of_the_deprecated_filters():
    assert calls_in_roles_and_playbooks(DEPRECATED) == []


def test_the_unit_template_reads_the_computed_flags_and_calls_no_server_filter():
    with open(os.path.join(ROLE, "templates", "sglang.service.j2"), encoding="utf-8") as handle:
        text = handle.read()
    assert "ExecStart={{ _server_flags.exec_start }}" in text and "_server_flags.hicache" in text
    assert not re.search(r"gpuserve\.sglang\.sglang_server_\w+", text) and "_server_in" not in text


def test_the_entry_point_is_the_action_and_public_facts_it_computed():
    """flags.yml: the action's task (no module runs; include_vars and a computing set_fact before), then the public
    facts copied from its result (a module's ansible_facts would be top-level facts ansible-core 2.21 deprecates)."""
    tasks = _yaml(ROLE, "tasks", "flags.yml")
    assert len(tasks) == 2 and tasks[0]["gpuserve.sglang.sglang_host_facts"] == {"server_flags": True}
    assert tasks[0]["register"] == "_server_flags_read" and tasks[0]["check_mode"] is False
    assert tasks[1]["ansible.builtin.set_fact"] == {"sglang_plan_inputs": "{{ _server_flags_read.flags.plan }}",
                                                    "sglang_server_features": "{{ _server_flags_read.flags.features }}"}
    role_vars = _yaml(ROLE, "vars", "main.yml")
    assert role_vars["_server_flags"] == "{{ _server_host.flags | default(_server_flags_read.flags) }}"
    assert role_vars["_server_args"] == "{{ _server_flags.args }}" and "_server_cmdline" not in role_vars


def test_every_deprecated_filter_is_routed_with_a_deprecation():
    routing = _yaml(ROOT, "meta", "runtime.yml")["plugin_routing"]["filter"]
    for name in DEPRECATED:
        assert routing[name]["deprecation"]["removal_version"] == "3.0.0", name
        assert _yaml(ROOT, "plugins", "filter", name + ".yml")["DOCUMENTATION"]["deprecated"]["removed_in"] == "3.0.0"


def test_a_profile_file_sets_only_the_profile_s_variables():
    assert sf.profile("p", {"_server_profile_args": {"tp": 8}}) == {"_server_profile_args": {"tp": 8}}
    with pytest.raises(Exception, match="sets sglang_port"):
        sf.profile("p", {"_server_profile_args": {}, "sglang_port": 1})
    with pytest.raises(Exception, match="must hold a mapping"):
        sf.profile("p", ["x"])


def test_a_secret_flag_value_hides_the_result():
    assert not sf.secret({"args": {"model-path": "/m", "enable-metrics": True, "tp": 8}})
    assert sf.secret({"args": {"hicache-storage-backend-extra-config": "redis://u:pw@h:6379"}})


class _Conn(object):
    class _shell(object):
        tmpdir = None


class _Loader(object):
    def __init__(self, data):
        self.data, self.asked = data, []

    def load_from_file(self, path, cache="all", trusted_as_template=False):
        self.asked.append((path, cache, trusted_as_template))
        return self.data


def _action(monkeypatch, data):
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel

    def no_module(**kwargs):
        raise AssertionError("a module ran: %s" % kwargs.get("module_name"))
    action = facts_action.ActionModule.__new__(facts_action.ActionModule)
    action._task = type("T", (), {"args": {"server_flags": True}, "check_mode": False})()
    action._connection = _Conn()
    action._templar = Templar(loader=DataLoader(), variables={})
    action._loader = _Loader(data)
    action._find_needle = lambda folder, needle: "/role/%s/%s" % (folder, needle)
    action._execute_module = no_module
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return action


def test_the_entry_point_s_action_reads_the_profile_and_runs_no_module(monkeypatch):
    from ansible.template import trust_as_template  # pylint: disable=import-outside-toplevel
    data = {"_server_profile_args": {"tp": 8, "speculative-draft-model-path": trust_as_template("{{ draft }}")},
            "_server_profile_env": {}, "_server_profile_release_args": []}
    action = _action(monkeypatch, data)
    inputs = dict(_inputs(), profile=trust_as_template("{{ _server_profile_args }}"),
                  release_args=trust_as_template("{{ _server_profile_release_args }}"))
    task_vars = dict(DEFAULTS, sglang_profile="kimi", draft="/models/d", _server_in=inputs, hostvars={})
    got = action.run(task_vars=task_vars)
    assert action._loader.asked == [("/role/vars/profiles/kimi.yml", "none", True)]
    assert got["changed"] is False and "_ansible_no_log" not in got
    assert got["profile"]["_server_profile_args"] == {"tp": 8, "speculative-draft-model-path": "/models/d"}
    assert got["flags"]["args"] == {"model-path": "/models/m", "tp": 8, "speculative-draft-model-path": "/models/d"}
    assert got["flags"]["plan"] == r.sglang_plan_inputs(got["flags"]["args"], "")
    # a secret in a flag's value: the registered result keeps it, the console shows none of it
    task_vars["_server_in"] = dict(inputs, user={"hicache-storage-backend-extra-config": "redis://u:pw@h:6379"})
    assert action.run(task_vars=task_vars)["_ansible_no_log"] is True


def test_the_preflight_returns_the_flags_of_the_host_s_release(monkeypatch):
    """After the host read the flags are the host's (its release's rules: the Qwen profile's HiCache from 0.5.23),
    returned once in the preflight's result (_server_host.flags) for the unit's template and the later tasks; none
    where the preflight refused."""
    from ansible.template import trust_as_template  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_preflight as p  # pylint: disable=import-outside-toplevel
    qwen = _yaml(ROLE, "vars", "profiles", "qwen35_397b_a17b_nvfp4.yml")
    refusals = []
    monkeypatch.setattr(p, "host_read_args", lambda read, hostvars=None: {})
    monkeypatch.setattr(p, "verdict", lambda read, host, parser=None, hostvars=None, flags=None: {
        "refusals": list(refusals), "notes": [], "account_ok": True, "account_groups": []})
    action = _action(monkeypatch, {})
    action._task.args = {"server_preflight": True}
    action._execute_module = lambda **kwargs: {"sglang_release": "0.5.23", "cpus": 64, "python": "/v/bin/python",
                                               "sglang_installed": False}
    action._remove_tmp_path = lambda path: None
    inputs = dict(_inputs(profile=qwen["_server_profile_args"], release_args=qwen["_server_profile_release_args"]),
                  release=trust_as_template("{{ _server_host.sglang_release | default(sglang_version, true) }}"),
                  python=trust_as_template("{{ _server_host.python | default('') }}"))
    task_vars = dict(DEFAULTS, _server_in=inputs, sglang_version="0.5.9", sglang_check_args=True, hostvars={},
                     inventory_hostname="gpu-a1")
    got = action.run(task_vars=task_vars)
    assert got["flags"]["release"] == "0.5.23" and got["flags"]["hicache"] is True
    assert got["flags"]["cmdline"].startswith("/v/bin/python -m sglang.launch_server --model-path /models/m ")
    assert "--enable-hierarchical-cache" in got["flags"]["exec_start"].split()
    refusals.append("no")
    assert "flags" not in action.run(task_vars=task_vars)


def test_a_word_with_a_newline_leaves_the_refusal_to_the_preflight():
    """molecule/server's bad input 'a flag value with a newline': the entry point still computes the plan's inputs
    (it raised before the preflight could name the flag); no command line is made of it."""
    inputs = _inputs(user={"lora-paths": ["x\n", "ExecStartPre=+/bin/sh"]})
    got = sf.flags(_reader(dict(DEFAULTS, _server_in=inputs)), {})
    assert got["cmdline"] is None and got["exec_start"] is None and "control characters" in got["problem"]
    assert got["plan"] == r.sglang_server_plan(inputs, {}) and got["args"]["lora-paths"][0] == "x\n"
    assert sf.flags(_reader(dict(DEFAULTS, _server_in=_inputs())), {})["problem"] == ""


def test_the_preflight_fails_with_the_command_line_s_problem_where_nothing_else_refused(monkeypatch):
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_preflight as p  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(p, "host_read_args", lambda read, hostvars=None: {})
    monkeypatch.setattr(p, "verdict", lambda read, host, parser=None, hostvars=None, flags=None: {
        "refusals": [], "notes": [], "account_ok": True, "account_groups": []})
    action = _action(monkeypatch, {})
    action._task.args = {"server_preflight": True}
    action._execute_module = lambda **kwargs: {"sglang_installed": False}
    action._remove_tmp_path = lambda path: None
    task_vars = dict(DEFAULTS, _server_in=_inputs(launcher="sglang\n"), sglang_check_args=True, hostvars={})
    got = action.run(task_vars=task_vars)
    assert got["failed"] and "control characters" in got["msg"] and "flags" not in got
