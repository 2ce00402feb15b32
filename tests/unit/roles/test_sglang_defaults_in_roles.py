# SPDX-License-Identifier: GPL-3.0-or-later
"""One table of SGLang's defaults (issue 39): no role or playbook states one of SGLang's defaults as a literal of its
own; they read it through the filters sglang_default / sglang_defaults (module_utils/_sglang_releases, from each
release's wheel). The values SGLang computes at start-up have the collection's planning assumptions, named once
(module_utils/_memory_plan.py PLANNING_ASSUMPTIONS); the preflight role's inputs and the memory plan's option
defaults are those values, documented as the collection's.

On 59633b9 flags.yml had tp default(1), hicache default(false), ratio default(2.0), page-size default(1) and
mem-fraction-static default(0.88); preflight.yml tp default(1); record.yml, answers_gate.yml and the unit template
hicache default(false)."""
from __future__ import annotations

import glob
import os
import re

import yaml

from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan import PLANNING_ASSUMPTIONS
from ansible_collections.gpuserve.sglang.plugins.modules import sglang_memory_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# SGLang's flags whose defaults the roles need, as sglang_args spells them (and their aliases), and the keys of
# sglang_plan_inputs / the preflight role that carry them
FLAGS = ("tp", "tp-size", "tensor-parallel-size", "enable-hierarchical-cache", "hicache-ratio", "hicache-size",
         "page-size", "mem-fraction-static")
PLAN_KEYS = ("tp", "hicache", "ratio", "size_gb", "page_size", "mem_fraction_static")
LITERAL = r"(?:-?\d+(?:\.\d+)?|true|false|none|'[^']*'|\"[^\"]*\")"
STATED = re.compile(
    r"(?:\[\s*['\"](?:%s)['\"]\s*\]|\.(?:%s)\b)\s*\|\s*default\(\s*%s\s*[,)]"
    % ("|".join(re.escape(f) for f in FLAGS), "|".join(PLAN_KEYS), LITERAL), re.I)


def _files():
    for pattern in ("roles/**/*.yml", "roles/**/*.yaml", "roles/**/*.j2", "playbooks/**/*.yml"):
        yield from glob.glob(os.path.join(ROOT, pattern), recursive=True)


def stated_defaults(text):
    """The `<flag> | default(<literal>)` of one file's text (Jinja expressions may span lines)."""
    return [m.group(0) for m in STATED.finditer(text)]


def test_the_pattern_finds_what_the_old_files_stated():
    old = {
        "flags.yml": ["_server_args['tp'] | default(1) | int", "_server_args['enable-hierarchical-cache'] | default(false)",
                      "_server_args['hicache-ratio'] | default(2.0) | float", "_server_args['page-size'] | default(1)",
                      "_server_args['mem-fraction-static'] | default(0.88) | float",
                      "_server_args['hicache-size'] | default(0) | int"],
        "preflight.yml": ["tp=_server_args['tp'] | default(1), present=sglang_args | list"],
        "record.yml": ["sglang_plan_inputs.hicache | default(false) | bool"],
        "sglang.service.j2": ["((sglang_plan_inputs | default({})).hicache | default(false))"],
    }
    for name, lines in old.items():
        for line in lines:
            assert stated_defaults(line), (name, line)
    # what reads SGLang's table, or a value that is no SGLang default, is not matched
    for line in ("_server_args['tp'] | default(_server_sglang_defaults.tp_size) | int",
                 "_server_verified.hicache | default({})", "_server_args['kv-cache-dtype'] | default('auto')",
                 "sglang_plan_inputs.hicache | bool", "_server_args['topk'] | default(1)"):
        assert not stated_defaults(line), line


def test_no_role_or_playbook_states_an_sglang_default():
    found = {}
    for path in _files():
        with open(path, encoding="utf-8") as handle:
            hits = stated_defaults(handle.read())
        if hits:
            found[os.path.relpath(path, ROOT)] = hits
    assert found == {}, "SGLang defaults stated as literals (read them with gpuserve.sglang.sglang_defaults): %r" % found


def test_the_server_flags_read_sglang_s_defaults_through_the_filter():
    """flags.yml computes the plan inputs in Python (the action plugin of sglang_host_facts, server_flags:
    plugin_utils/_server_flags.py, by the host's release, else sglang_version's); a flag left out takes
    sglang_defaults(release, planning=True)'s value, field by field."""
    from ansible_collections.gpuserve.sglang.plugins.filter import server_role  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.filter.sglang_defaults import sglang_defaults  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "roles", "server", "tasks", "flags.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    flags = next(t for t in tasks if "gpuserve.sglang.sglang_host_facts" in t)
    assert flags["gpuserve.sglang.sglang_host_facts"] == {"server_flags": True}
    task = next(t for t in tasks if "sglang_plan_inputs" in (t.get("ansible.builtin.set_fact") or {}))
    assert task["ansible.builtin.set_fact"]["sglang_plan_inputs"] == "{{ %s.flags.plan }}" % flags["register"]
    for version in ("", "0.5.9"):
        inputs = {"_server_in": {"profile": {}, "user": {}, "model_path": "/m", "release": version}}
        assert _server_flags.flags(lambda name, default=None: inputs.get(name, default))["plan"] == \
            server_role.sglang_plan_inputs({"model-path": "/m"}, version)
    with open(os.path.join(ROOT, "roles", "server", "vars", "main.yml"), encoding="utf-8") as handle:
        release = yaml.safe_load(handle)["_server_in"]["release"]
    assert release.startswith("{{ _server_host.sglang_release | default(sglang_version")
    for version in ("", "0.5.9"):
        d = sglang_defaults(version, planning=True)
        inputs = server_role.sglang_plan_inputs({"model-path": "/m"}, version)
        for key, field in (("tp", "tp_size"), ("mem_fraction_static", "mem_fraction_static"),
                           ("hicache", "enable_hierarchical_cache"), ("ratio", "hicache_ratio"),
                           ("size_gb", "hicache_size"), ("page_size", "page_size"), ("kv_dtype", "kv_cache_dtype")):
            assert inputs[key] == d[field], (version, key)
    assert server_role.sglang_plan_inputs({"tp": 8}, "")["tp"] == 8


def test_the_planning_assumptions_are_named_once_and_the_inputs_that_repeat_them_are_tied_to_them():
    """The preflight role's inputs (the reference deployment's plan) and the memory plan's option defaults are the
    collection's planning assumptions, not SGLang's defaults: equal to PLANNING_ASSUMPTIONS and documented so."""
    with open(os.path.join(ROOT, "roles", "preflight", "defaults", "main.yml"), encoding="utf-8") as handle:
        text = handle.read()
    defaults = yaml.safe_load(text)
    assert defaults["sglang_preflight_mem_fraction_static"] == PLANNING_ASSUMPTIONS["mem_fraction_static"]
    assert defaults["sglang_preflight_hicache_ratio"] == PLANNING_ASSUMPTIONS["hicache_ratio"]
    assert defaults["sglang_preflight_page_size"] == PLANNING_ASSUMPTIONS["page_size"]
    assert "not SGLang's defaults" in text and "PLANNING_ASSUMPTIONS" in text
    doc = yaml.safe_load(sglang_memory_plan.DOCUMENTATION)["options"]
    assert doc["ratio"]["default"] == PLANNING_ASSUMPTIONS["hicache_ratio"]
    assert doc["page_size"]["default"] == PLANNING_ASSUMPTIONS["page_size"]
    for option in ("ratio", "page_size", "hicache"):
        assert "the collection's" in " ".join(doc[option]["description"]), option
    with open(os.path.join(ROOT, "plugins", "modules", "sglang_memory_plan.py"), encoding="utf-8") as handle:
        module = handle.read()
    assert 'default=mp.PLANNING_ASSUMPTIONS["hicache_ratio"]' in module
    assert 'default=mp.PLANNING_ASSUMPTIONS["page_size"]' in module
