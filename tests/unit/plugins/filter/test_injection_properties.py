# SPDX-License-Identifier: GPL-3.0-or-later
"""Property-based (hypothesis): arbitrary text thrown at the server filters and the unit template.

Whatever a user puts into a flag value, an environment value, the description, a path or sglang_unit_extra,
either a filter refuses it (AnsibleFilterError, a clear message) or the rendered unit has exactly the
directives it should: the same directive names, in the same order, as the unit rendered with plain values,
and every ExecStart word reads back as given. No value can add a directive (ExecStartPre=+ as root), a section
or a line to the environment file.
"""
from __future__ import annotations

import os
import shlex

import jinja2
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import (
    server_inputs, server_role, sglang_args, sglang_secrets, systemd)
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags

from conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "server")
PREFIX = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]
FILTERS = {}
for _module in (sglang_args, systemd, sglang_secrets, server_inputs, server_role):
    FILTERS.update(_module.FilterModule().filters())

# Any text, with the characters that matter for injection made likely.
TEXT = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(list("\n\r\t\x00\x0b\x0c\x85\u2028\u2029"
                                                                        "%$\"'\\ =[]+;#@"))), max_size=40)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _render(**over):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    for name, func in FILTERS.items():
        env.filters["gpuserve.sglang." + name] = func
    variables = dict(_defaults())
    variables.update({
        "sglang_unit_environment": {"CUDA_HOME": "/usr/local/cuda", "PATH": "/usr/bin:/bin"},
        "sglang_env_file": "/etc/sglang/sglang-kimi.env", "sglang_record_file": "/etc/sglang/sglang-kimi.md",
        "sglang_nccl_env_file": "/etc/sglang/nccl.env", "sglang_unit_description": "SGLang",
        "ansible_managed": "Ansible managed", "sglang_api_key": "", "hostvars": {},
    })
    cmdline = over.pop("_server_cmdline", systemd.sglang_cmdline({"model-path": "/m"}, prefix=PREFIX))
    variables.update(over)
    # what the template reads (roles/server/vars/main.yml _server_flags, computed by plugin_utils/_server_flags.py):
    # the ExecStart with SGLang's --config, the secrets file when a key is set, by the role's own expression
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)["_server_in"]["config"]
    variables["_server_flags"] = {"exec_start": _server_flags.exec_start(cmdline, env.from_string(config).render(**variables)),
                                  "hicache": False}
    return env.get_template("sglang.service.j2").render(**variables)


def _directives(unit):
    """The unit's directive names and section headers, in order (comments and blank lines left out)."""
    out = []
    for line in unit.split("\n"):
        if not line.strip() or line.startswith("#"):
            continue
        out.append(line if line.startswith("[") else line.split("=", 1)[0])
    return out


def _words(line):
    return [w.replace("$$", "$").replace("%%", "%") for w in shlex.split(line, posix=True)]


BASELINE = _directives(_render())
BASELINE_EXTRA = _directives(_render(sglang_unit_extra={"Nice": "1", "DeviceAllow": ["a", "b"]}))


@SETTINGS
@given(value=TEXT)
def test_flag_value_reads_back_or_is_refused(value):
    try:
        line = systemd.sglang_cmdline({"lora-paths": ["x", value], "served-model-name": value}, prefix=PREFIX)
    except AnsibleFilterError:
        assert sglang_args.sglang_args_problems({"served-model-name": value})  # the preflight says so first
        return
    assert "\n" not in line and "\r" not in line
    assert _words(line) == PREFIX + ["--lora-paths", "x", value, "--served-model-name", value]


@SETTINGS
@given(description=TEXT, path=TEXT, env_value=TEXT, flag_value=TEXT)
def test_unit_has_exactly_its_directives(description, path, env_value, flag_value):
    try:
        cmdline = systemd.sglang_cmdline({"model-path": "/m", "served-model-name": flag_value}, prefix=PREFIX)
        unit = _render(sglang_unit_description=description, sglang_unit_working_directory="",
                       sglang_env_file="/etc/sglang/" + path, sglang_record_file=path,
                       sglang_unit_environment={"CUDA_HOME": env_value, "PATH": "/usr/bin:/bin"},
                       server_cmdline=cmdline, _server_cmdline=cmdline)
    except AnsibleFilterError as exc:
        assert "control characters" in str(exc)
        return
    assert _directives(unit) == BASELINE
    line = [x for x in unit.split("\n") if x.startswith("Description=")][0]
    assert line == "Description=" + description.replace("%", "%%")


@SETTINGS
@given(value=TEXT, name=st.sampled_from(["Nice", "DeviceAllow", "ReadWritePaths"]))
def test_unit_extra_adds_only_its_directives(value, name):
    extra = {"Nice": "1", "DeviceAllow": ["a", "b"]}
    extra[name] = [value, "b"] if name == "DeviceAllow" else value
    try:
        unit = _render(sglang_unit_extra=extra)
    except AnsibleFilterError:
        assert server_inputs.sglang_input_problems({"sglang_unit_extra": extra})
        return
    expected = list(BASELINE_EXTRA)
    if name == "ReadWritePaths":
        expected.insert(expected.index("[Install]"), "ReadWritePaths")
    assert _directives(unit) == expected


@SETTINGS
@given(env=st.dictionaries(TEXT, st.one_of(TEXT, st.none(), st.integers(), st.booleans()), max_size=5))
def test_envfile_one_line_per_variable(env):
    try:
        text = systemd.sglang_envfile(env)
    except AnsibleFilterError:
        assert sglang_args.sglang_args_problems({}, env)
        return
    lines = text.split("\n")[:-1] if text else []
    assert len(lines) == len([v for v in env.values() if v is not None])
    assert all(line.split("=", 1)[0] in env for line in lines)


@SETTINGS
@given(inputs=st.dictionaries(st.sampled_from(["sglang_service_name", "sglang_port", "sglang_host", "sglang_user",
                                               "sglang_unit_after", "sglang_unit_extra", "sglang_api_key",
                                               "sglang_unit_restart_sec", "sglang_unit_limit_memlock"]),
                              st.one_of(TEXT, st.integers(), st.floats(), st.none(), st.lists(TEXT, max_size=3),
                                        st.dictionaries(TEXT, TEXT, max_size=2))))
def test_input_problems_never_raise(inputs):
    problems = server_inputs.sglang_input_problems(inputs)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    name = inputs.get("sglang_service_name")
    if isinstance(name, str) and not problems:
        # a name the preflight accepts is safe as a file name and as one shell word
        assert "/" not in name and shlex.split(shlex.quote(name)) == [name] and "\n" not in name


@SETTINGS
@given(args=st.dictionaries(st.sampled_from(["tp", "hicache-ratio", "hicache-size", "mem-fraction-static",
                                             "enable-hierarchical-cache", "speculative-eagle-topk", "dp-size"]),
                            st.one_of(TEXT, st.integers(), st.floats(), st.booleans(), st.none(),
                                      st.lists(st.integers(), max_size=2))))
def test_args_problems_never_raise(args):
    problems = sglang_args.sglang_args_problems(args, {})
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
