# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's computations in Python (plugins/filter/server_role.py, issue 39), against the YAML they replace:
the former role's Jinja expressions are kept here verbatim (roles/server/tasks/*.yml before the rewrite: flags.yml,
preflight.yml, check_files.yml, stale.yml, install.yml, user.yml) and rendered with Jinja and the same filters
Ansible gives them, so that a host the former role configured sees no change: the same environment and secrets
files byte for byte, the same refusals word for word, the same plan inputs."""
from __future__ import annotations

import functools
import inspect
import os

import jinja2
import pytest
from jinja2.nativetypes import NativeEnvironment
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible.plugins.filter.mathstuff import FilterModule as MathFilters
from ansible.plugins.test.core import TestModule as CoreTests

from ansible_collections.gpuserve.sglang.plugins.filter import server_role as r
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_payload
from ansible_collections.gpuserve.sglang.plugins.filter.server_inputs import sglang_input_problems
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import (
    sglang_args_merge, sglang_args_problems, sglang_release_args)
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_defaults import sglang_defaults
from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_envfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def _env(native=True):
    """Jinja with the filters and tests the former YAML used, as Ansible names them (the collection's by FQCN)."""
    env = (NativeEnvironment if native else jinja2.Environment)(undefined=jinja2.Undefined)
    jinja_default = env.filters["default"]
    env.filters.update(CoreFilters().filters())
    env.filters.update(MathFilters().filters())
    # Ansible's default filter reads Ansible's own undefined values; Jinja's reads these the same way
    env.filters["default"] = env.filters["d"] = jinja_default
    env.tests.update(CoreTests().tests())
    for name in ("select", "reject", "selectattr", "rejectattr", "map"):  # Ansible hands the next filter a list
        env.filters[name] = _listed(env.filters[name])
    env.filters.update({"gpuserve.sglang.sglang_envfile": sglang_envfile,
                        "gpuserve.sglang.sglang_input_problems": sglang_input_problems,
                        "gpuserve.sglang.sglang_args_problems": sglang_args_problems,
                        "gpuserve.sglang.sglang_defaults": sglang_defaults})
    return env


def _listed(jinja_filter):
    @functools.wraps(jinja_filter)
    def wrapper(*args, **kwargs):
        return list(jinja_filter(*args, **kwargs))
    return wrapper


def _render(expression, native=True, **variables):
    return _env(native).from_string(expression).render(**variables)


# ---- the environment and secrets files: byte for byte the former check_files.yml's ---------------------------------
OLD_ENV_CONTENT = """{{ _server_env | combine({'SGLANG_API_KEY': sglang_api_key} if sglang_api_key | length > 0 else {})
   | gpuserve.sglang.sglang_envfile }}"""
OLD_ENV_TEXT = ("# Managed by gpuserve.sglang.server (Ansible): local changes are overwritten.\n"
                "{{ _server_env_content }}")
OLD_SECRETS = """{{ {'api-key': sglang_api_key, 'admin-api-key': sglang_admin_api_key} | dict2items
   | rejectattr('value', 'equalto', '') | items2dict | to_nice_yaml }}"""

ENVS = [
    {},
    {"SGLANG_ENABLE_SPEC_V2": "True", "NCCL_DEBUG": "WARN"},
    {"B": 'say "hi" \\ there', "A": 1, "C": True, "D": None, "E": 0.5, "F": "a b$c%d"},
    {"SGLANG_API_KEY": "from-sglang-env", "Z": "z"},
]


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("key", ["", "sk-test-key", 'k"e\\y'])
def test_envfile_is_the_former_text_byte_for_byte(env, key):
    """Without a key, the text the role wrote before (an unchanged host sees no change); with one, the same text:
    the key is no longer in the environment file (below)."""
    content = _render(OLD_ENV_CONTENT, native=False, _server_env=env, sglang_api_key="")
    old = _render(OLD_ENV_TEXT, native=False, _server_env_content=content)
    assert r.sglang_server_envfile(env) == old
    assert old.startswith(r.ENV_HEADER) and old.endswith("\n")
    assert key == "" or key not in r.sglang_server_envfile(env)


def test_the_api_key_is_not_in_the_environment_file_a_rollback_restores():
    """Issue 39 point 10: a deploy that rotates a leaked key and then fails verification must not restore the old
    key. The secrets file (--config) is left as it is by a rollback; the environment file is restored - and held
    SGLANG_API_KEY too (old code: 'SGLANG_API_KEY="new"' in the text), so the old key came back with it (a -vvv
    run on the demo host found it in the last-good copy). SGLang reads the key from the secrets file."""
    assert "SGLANG_API_KEY" not in r.sglang_server_envfile({"NCCL_DEBUG": "WARN"})
    assert r.sglang_server_envfile(None) == r.ENV_HEADER
    # the role's seam writes the environment file from _server_env and the secrets file from the keys
    source = inspect.getsource(_server_payload.payload)
    assert 'sglang_server_envfile(v["_server_env"])' in source and "sglang_server_secrets(keys)" in source


@pytest.mark.parametrize("api, admin", [("sk-1", ""), ("", "adm-1"), ("sk-1", "adm-1"), ("a: b # c", "'q'\n")])
def test_secrets_are_the_former_text_byte_for_byte(api, admin):
    old = _render(OLD_SECRETS, native=False, sglang_api_key=api, sglang_admin_api_key=admin)
    assert r.sglang_server_secrets({"api-key": api, "admin-api-key": admin}) == old


def test_no_key_is_no_secrets_file():
    """The former role wrote no file then (files.yml removed it); '' tells the module the file must be absent."""
    assert r.sglang_server_secrets({"api-key": "", "admin-api-key": ""}) == ""
    assert r.sglang_server_secrets({"api-key": None}) == ""
    assert r.sglang_server_secrets(None) == ""


# ---- the memory plan's inputs: the former flags.yml's ----------------------------------------------------------------
OLD_PLAN = {
    "tp": "{{ _server_args['tp'] | default(_server_sglang_defaults.tp_size) | int }}",
    "mem_fraction_static": "{{ _server_args['mem-fraction-static']"
                           " | default(_server_sglang_defaults.mem_fraction_static) | float }}",
    "hicache": "{{ _server_args['enable-hierarchical-cache']"
               " | default(_server_sglang_defaults.enable_hierarchical_cache) | bool }}",
    "ratio": "{{ _server_args['hicache-ratio'] | default(_server_sglang_defaults.hicache_ratio) | float }}",
    "size_gb": "{{ _server_args['hicache-size'] | default(_server_sglang_defaults.hicache_size) | int }}",
    "page_size": "{{ _server_args['page-size'] | default(_server_sglang_defaults.page_size) | int }}",
    "kv_dtype": "{{ _server_args['kv-cache-dtype'] | default(_server_sglang_defaults.kv_cache_dtype) }}",
    "model_path": "{{ _server_args['model-path'] }}",
    "draft_model_path": "{{ _server_args['speculative-draft-model-path'] | default('') }}",
}
OLD_HYBRID = {
    "speculative_num_draft_tokens": "{{ _server_args['speculative-num-draft-tokens'] | default(0) | int"
                                    " if _server_args['speculative-algorithm'] | default('') | length > 0 else 0 }}",
    "max_running_requests": "{{ _server_args['max-running-requests']"
                            " | default(_server_sglang_defaults.max_running_requests) }}",
    "max_mamba_cache_size": "{{ _server_args['max-mamba-cache-size'] | default(none) }}",
    "mamba_full_memory_ratio": "{{ _server_args['mamba-full-memory-ratio'] | default(none) }}",
    "extra_buffer": "{{ (_server_args['mamba-scheduler-strategy'] | default(_server_args['mamba-radix-cache-strategy']"
                    " | default(''))) == 'extra_buffer' }}",
    "disable_radix_cache": "{{ _server_args['disable-radix-cache']"
                           " | default(_server_sglang_defaults.disable_radix_cache) | bool }}",
    "context_len": "{{ _server_args['context-length'] | default(_server_sglang_defaults.context_length) }}",
}
OLD_DEFAULTS = "{{ _server_host.sglang_release | default(sglang_version | default(''), true)" \
               " | gpuserve.sglang.sglang_defaults(planning=true) }}"

PLAN_ARGS = [
    {"model-path": "/models/m"},
    {"model-path": "/models/m", "tp": 8, "mem-fraction-static": 0.85, "enable-hierarchical-cache": True,
     "hicache-ratio": 2, "hicache-size": 100, "page-size": 64, "kv-cache-dtype": "fp8_e5m2",
     "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/models/d", "speculative-num-draft-tokens": 4,
     "max-running-requests": 64, "mamba-scheduler-strategy": "extra_buffer", "disable-radix-cache": "yes",
     "context-length": 8192, "max-mamba-cache-size": 10, "mamba-full-memory-ratio": 0.9},
    # strings as an inventory gives them, and values that are no number (refused later, by name, not here)
    {"model-path": "/models/m", "tp": "8", "mem-fraction-static": "0.8", "hicache-size": "12.0", "page-size": "x",
     "enable-hierarchical-cache": "False", "speculative-num-draft-tokens": "3",
     "mamba-radix-cache-strategy": "extra_buffer"},
    {"model-path": "/models/m", "tp": None, "mem-fraction-static": "abc", "speculative-algorithm": "",
     "speculative-num-draft-tokens": 4},
]


@pytest.mark.parametrize("args", PLAN_ARGS)
@pytest.mark.parametrize("release", ["", "0.5.17", "0.4.0"])
def test_plan_inputs_are_the_former_flags_yml(args, release):
    variables = {"_server_args": args, "_server_host": {"sglang_release": release}}
    variables["_server_sglang_defaults"] = _render(OLD_DEFAULTS, **variables)
    old = {key: _render(expression, **variables) for key, expression in OLD_PLAN.items()}
    old["hybrid"] = {key: _render(expression, **variables) for key, expression in OLD_HYBRID.items()}
    assert r.sglang_plan_inputs(args, release) == old


def test_plan_inputs_refuse_what_is_no_mapping():
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        r.sglang_plan_inputs(["tp", 8])


# ---- the effective flags, the command line ------------------------------------------------------------------------
def _inputs(**extra):
    base = {"profile": {"tp": 8, "mem-fraction-static": 0.9}, "user": {"mem-fraction-static": 0.8},
            "model_path": "/models/m", "nodes": [], "host": "gpu-a1", "dist_init_port": 50000, "pd_mode": None,
            "bootstrap_port": 8998, "listen_host": "0.0.0.0", "port": 30000, "python": "/opt/sglang/bin/python",
            "launch_script": "", "launcher": "sglang.launch_server"}
    base.update(extra)
    return base


def test_server_args_profile_under_the_user_model_path_first():
    args = r.sglang_server_args(_inputs())
    assert list(args)[0] == "model-path" and args == {"model-path": "/models/m", "tp": 8, "mem-fraction-static": 0.8}


def test_server_args_of_a_node_and_of_a_prefill_server():
    hostvars = {"gpu-a1": {"ansible_host": "10.0.0.11"}, "gpu-a2": {}}
    args = r.sglang_server_args(_inputs(nodes=["gpu-a1", "gpu-a2"], host="gpu-a2", pd_mode="prefill"), hostvars)
    assert args["nnodes"] == 2 and args["node-rank"] == 1 and args["dist-init-addr"] == "10.0.0.11:50000"
    assert args["disaggregation-mode"] == "prefill" and args["disaggregation-bootstrap-port"] == 8998


RELEASE_ARGS = [{"when": {"multithread_load_default": False},
                 "args": {"model-loader-extra-config": {"enable_multithread_load": True,
                                                        "num_threads": "cpus_per_rank"}}},
                {"when": {"multithread_load_default": True}, "args": {"mem-fraction-static": 0.5}}]


@pytest.mark.parametrize("release", ["0.5.9", "0.5.17", ""])
@pytest.mark.parametrize("user", [{}, {"model-loader-extra-config": {"x": 1}}, {"mem-fraction-static": 0.8}])
def test_server_args_release_args_as_the_former_preflight_merged_them(release, user):
    """The former preflight: _server_args | sglang_args_merge(release_args | sglang_release_args(release=...,
    cpus=..., tp=sglang_plan_inputs.tp, present=sglang_args | list)), after the user's, never over them."""
    before = r.sglang_server_args(_inputs(user=user))
    extra = sglang_release_args(RELEASE_ARGS, release=release, cpus=64, tp=r.sglang_plan_inputs(before, release)["tp"],
                                present=list(user))
    args = r.sglang_server_args(_inputs(user=user, release_args=RELEASE_ARGS, release=release, cpus=64))
    assert args == sglang_args_merge(before, extra)
    for name, value in user.items():
        assert args[name] == value
    assert r.sglang_server_args(_inputs(user=user, release_args=[], release=release, cpus=64)) == before


def test_server_args_refuse_what_is_no_mapping():
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        r.sglang_server_args("x")


def test_argv_and_cmdline():
    argv = r.sglang_server_argv(_inputs())
    assert argv[:2] == ["--model-path", "/models/m"] and argv[-4:] == ["--host", "0.0.0.0", "--port", "30000"]
    line = r.sglang_server_cmdline(_inputs(launch_script="/usr/local/lib/gpuserve-sglang/sglang_launch.py"))
    assert line.startswith("/opt/sglang/bin/python /usr/local/lib/gpuserve-sglang/sglang_launch.py -m "
                           "sglang.launch_server --model-path /models/m")
    assert r.sglang_server_cmdline(_inputs()).startswith("/opt/sglang/bin/python -m sglang.launch_server ")
    assert r.sglang_server_plan(_inputs(release="0.5.17"))["tp"] == 8


# ---- the model preflight's items: the former preflight.yml's --------------------------------------------------------
OLD_MODELS = """{{ ([{'path': _server_args['model-path'] | default('') | string, 'role': 'model',
                      'quantization': _server_profile_model.quantization | default(''),
                      'files': _server_profile_model.files | default([]),
                      'model_impl': _server_args['model-impl'] | default('') | string}]
                    + ([{'path': _server_args['speculative-draft-model-path'] | string, 'role': 'draft'}]
                       if _server_args['speculative-draft-model-path'] | default('') | length > 0 else []))
                   if sglang_model_check | bool else [] }}"""


@pytest.mark.parametrize("args", [{"model-path": "/m"}, {"model-path": "/m", "model-impl": "sglang",
                                                         "speculative-draft-model-path": "/d"}])
@pytest.mark.parametrize("profile_model", [{}, {"quantization": "int4", "files": ["model.safetensors.index.json"]}])
@pytest.mark.parametrize("check", [True, False, "yes"])
def test_models_are_the_former_items(args, profile_model, check):
    old = _render(OLD_MODELS, _server_args=args, _server_profile_model=profile_model, sglang_model_check=check)
    assert r.sglang_server_models(args, profile_model, check) == old


# ---- the refusals: the former preflight.yml's, word for word --------------------------------------------------------
OLD_REFUSALS = r"""{{ (['sglang_python ' ~ _server_python
           ~ ' is under /root, /home or /run/user, which the unit\'s sandbox hides'
           ~ ' (ProtectHome=yes); nothing was changed. Move the venv (e.g. under /opt) or set'
           ~ ' sglang_unit_sandbox: false'
           ~ ' (and sglang_user: "" when only root can read it)']
          if sglang_unit_sandbox | bool and _server_python is match('/(root|home|run/user)/') else [])
         + (['drop-ins override the managed unit (nothing was changed): ' ~ (_server_dropin_overrides | join('; '))
             ~ '. Remove them, or set sglang_allow_dropin_overrides: true to keep them']
            if not sglang_allow_dropin_overrides | bool and _server_dropin_overrides | length > 0 else [])
         + (['server role inputs refused (nothing was changed): ' ~ (_server_input_problems | join('; '))]
            if _server_input_problems | length > 0 else [])
         + (['sglang_args / sglang_env refused (nothing was changed): ' ~ (_server_problems | join('; '))]
            if _server_problems | length > 0 else [])
         + (['not on ' ~ inventory_hostname ~ ' (nothing was changed): '
             ~ (_server_missing | map(attribute='what') | zip(_server_missing | map(attribute='path'))
                | map('join', ' ') | join(', '))]
            if _server_missing | length > 0 else [])
         + (['model preflight on ' ~ inventory_hostname ~ ' (nothing was changed; sglang_model_check: false skips it): '
             ~ (_server_host.models.problems | join('; '))]
            if _server_host.models.problems | default([]) | length > 0 else [])
         + _server_host.jit_problems | default([])
         + (['sglang_python ' ~ _server_python ~ ' does not exist on ' ~ inventory_hostname
             ~ ' (run gpuserve.sglang.install first; nothing was changed)']
            if not _server_host.python_exists | bool else []) }}"""
OLD_PROBLEMS = """{{ _server_args | gpuserve.sglang.sglang_args_problems(_server_env, user_args=sglang_args,
                                                             release=_server_host.sglang_release | default('')) }}"""
OLD_MISSING = """{{ ([{'what': 'model (--model-path)', 'path': _server_args['model-path'] | default('') | string}]
          + ([{'what': 'draft model (--speculative-draft-model-path)',
                'path': _server_args['speculative-draft-model-path'] | string}]
             if _server_args['speculative-draft-model-path'] | default('') | length > 0 else []))
         | rejectattr('path', 'in', _server_host.paths | dict2items | selectattr('value.exists')
                                    | map(attribute='key') | list)
         | list }}"""
OLD_PARSER = """{{ (_server_parser.stderr_lines | default([]) | select('search', 'error:') | list | last)
         | default(_server_parser.stderr | default(_server_parser.msg | default('')) | trim) }}"""

ROLE_INPUTS = {"sglang_service_name": "sglang", "sglang_port": 30000, "sglang_host": "0.0.0.0",
               "sglang_launcher": "sglang.launch_server", "sglang_api_key": "", "sglang_user": "sglang"}
FINE_HOST = {"python": "/opt/sglang/venvs/0.5.17/bin/python", "python_exists": True, "sglang_release": "0.5.17",
             "dropin_overrides": [], "jit_problems": [], "models": {"problems": [], "notes": []},
             "paths": {"/models/m": {"exists": True}, "/models/d": {"exists": True}}}
FINE_ARGS = {"model-path": "/models/m", "tp": 8}


def _case(host=None, args=None, inputs=None, env=None, user_args=None, sandbox=True, allow=False, parser=None):
    return {"host": dict(FINE_HOST, **(host or {})), "hostname": "gpu-a1",
            "inputs": dict(ROLE_INPUTS, **(inputs or {})),
            "args": dict(FINE_ARGS, **(args or {})), "env": env or {}, "user_args": user_args or {},
            "sandbox": sandbox, "allow_dropins": allow, "parser": parser if parser is not None else {"skipped": True}}


def _old_refusals(case):
    host = case["host"]
    python = host["python"]
    old_inputs = {}
    for name, value in case["inputs"].items():  # the former preflight named sglang_python after sglang_host
        old_inputs[name] = value
        if name == "sglang_host":
            old_inputs["sglang_python"] = python
    variables = {"_server_python": python, "_server_host": host, "_server_dropin_overrides": host["dropin_overrides"],
                 "_server_args": case["args"], "_server_env": case["env"], "sglang_args": case["user_args"],
                 "sglang_unit_sandbox": case["sandbox"], "sglang_allow_dropin_overrides": case["allow_dropins"],
                 "inventory_hostname": case["hostname"],
                 "_server_input_problems": sglang_input_problems(old_inputs)}
    variables["_server_problems"] = _render(OLD_PROBLEMS, **variables)
    variables["_server_missing"] = _render(OLD_MISSING, **variables)
    refusals = _render(OLD_REFUSALS, **variables)
    parser = case["parser"]
    if parser and not parser.get("skipped") and parser["rc"] != 0:  # parser.yml's assert, then on its own
        refusals.append("the installed SGLang's parser rejects the command line (nothing was changed): "
                        + _render(OLD_PARSER, native=False, _server_parser=parser))
    return refusals


REFUSAL_CASES = {
    "none": _case(),
    "sandbox hides the venv": _case(host={"python": "/home/ops/venv/bin/python"}),
    "sandbox off": _case(host={"python": "/root/venv/bin/python"}, sandbox=False),
    "run/user": _case(host={"python": "/run/user/1000/v/bin/python"}, sandbox="yes"),
    "drop-ins": _case(host={"dropin_overrides": ["/etc/systemd/system/sglang.service.d/x.conf: ExecStart"]}),
    "drop-ins allowed": _case(host={"dropin_overrides": ["a.conf: Environment"]}, allow="true"),
    "bad inputs": _case(inputs={"sglang_port": 70000, "sglang_service_name": "a b\n", "sglang_launcher": "x\ty"},
                        host={"python": "/opt/v\n/bin/python"}),
    "bad flags": _case(args={"port": 1}, user_args={"port": 1}),
    "model missing": _case(args={"model-path": "/models/gone"}),
    "both missing": _case(args={"model-path": "/models/gone", "speculative-draft-model-path": "/models/gone-d"}),
    "draft missing": _case(args={"speculative-draft-model-path": "/models/nope"}),
    "model problems": _case(host={"models": {"problems": ["quantization int4 expected, got fp8", "no weights"]}}),
    "jit": _case(host={"jit_problems": ["SGLang 0.5.17 compiles its kernels at start: nvcc missing (nothing ...)"]}),
    "no interpreter": _case(host={"python_exists": False}),
    "all at once": _case(host={"python": "/home/x/bin/python", "python_exists": False, "dropin_overrides": ["d"],
                               "jit_problems": ["jit"], "models": {"problems": ["p"]}},
                         args={"model-path": "/models/gone", "port": 1}, user_args={"port": 1},
                         inputs={"sglang_port": 0}),
}


@pytest.mark.parametrize("name", sorted(REFUSAL_CASES))
def test_refusals_are_the_former_preflights_word_for_word(name):
    case = REFUSAL_CASES[name]
    assert r.sglang_server_refusals(case) == _old_refusals(case)


def test_refusal_texts():
    """Each refusal names what is wrong and that nothing was changed."""
    out = r.sglang_server_refusals(REFUSAL_CASES["all at once"])
    assert out[0] == ("sglang_python /home/x/bin/python is under /root, /home or /run/user, which the unit's sandbox "
                      "hides (ProtectHome=yes); nothing was changed. Move the venv (e.g. under /opt) or set "
                      "sglang_unit_sandbox: false (and sglang_user: \"\" when only root can read it)")
    assert out[1] == ("drop-ins override the managed unit (nothing was changed): d. Remove them, or set "
                      "sglang_allow_dropin_overrides: true to keep them")
    assert out[2].startswith("server role inputs refused (nothing was changed): sglang_port 0 ")
    assert out[3] == ("sglang_args / sglang_env refused (nothing was changed): sglang_args must not set --port: "
                      "use sglang_port")
    assert out[4] == "not on gpu-a1 (nothing was changed): model (--model-path) /models/gone"
    assert out[5] == "model preflight on gpu-a1 (nothing was changed; sglang_model_check: false skips it): p"
    assert out[6] == "jit"
    assert out[7] == ("sglang_python /home/x/bin/python does not exist on gpu-a1 (run gpuserve.sglang.install first; "
                      "nothing was changed)")
    assert len(out) == 8
    assert r.sglang_server_refusals(_case()) == []


@pytest.mark.parametrize("parser, why", [
    ({"rc": 2, "stderr_lines": ["usage: ...", "launch_server: error: unrecognized arguments: --bogus"],
      "stderr": "usage: ...\nlaunch_server: error: unrecognized arguments: --bogus"},
     "launch_server: error: unrecognized arguments: --bogus"),
    ({"rc": 1, "stderr_lines": ["Traceback", "ImportError: x"], "stderr": "Traceback\nImportError: x\n"},
     "Traceback\nImportError: x"),
    ({"rc": 1, "msg": "non-zero return code ", "stderr_lines": []}, "non-zero return code"),
])
def test_the_parsers_refusal(parser, why):
    case = _case(parser=parser)
    assert r.sglang_server_refusals(case) == [
        "the installed SGLang's parser rejects the command line (nothing was changed): " + why]
    if "stderr" in parser:
        assert r.sglang_server_refusals(case) == _old_refusals(case)
    # a parser that passed, or did not run, refuses nothing
    for fine in ({"rc": 0, "stderr_lines": ["error: only a warning"]}, {"skipped": True, "rc": 3}, {}, None):
        assert r.sglang_server_refusals(_case(parser=fine or {})) == []


def test_notes():
    host = dict(FINE_HOST, dropin_overrides=["a.conf: ExecStart"], models={"notes": ["no index", "deep off"]})
    assert r.sglang_server_notes(host, True) == ["drop-ins override the managed unit (allowed): a.conf: ExecStart",
                                                 "model preflight, not checked: no index; deep off"]
    assert r.sglang_server_notes(host, False) == ["model preflight, not checked: no index; deep off"]
    assert r.sglang_server_notes(None) == []


# ---- what the server reads at start: the former stale.yml's, outside the unit --------------------------------
OLD_READS = """{{ ([_server_unit_path, sglang_env_file, sglang_secrets_file, sglang_nccl_env_file]
         + ([sglang_launch_script] if sglang_launch_script | length > 0 else [])
         + ([_server_site ~ '/sitecustomize.py', _server_site ~ '/gpuserve_nccl_tuning.pth']
            if _server_site is match('/') else [])) | list + [_server_venv_record] }}"""
OLD_VENV_RECORD = """{{ ((_server_python | dirname | dirname) ~ '/gpuserve-install-record.json')
         if _server_versioned_venv | default('') | length > 0 else sglang_install_record }}"""


@pytest.mark.parametrize("host", [
    {"python": "/opt/sglang/venvs/0.5.17-abc/bin/python", "versioned_venv": "/opt/sglang/venvs/0.5.17-abc",
     "purelib": "/opt/sglang/venvs/0.5.17-abc/lib/python3.12/site-packages"},
    {"python": "/opt/sglang/venv/bin/python", "versioned_venv": "", "purelib": "/opt/sglang/venv/lib/site"},
    {"python": "/opt/sglang/venv/bin/python", "versioned_venv": "", "purelib": ""},
    {"python": "/opt/sglang/venv/bin/python", "versioned_venv": "/x", "purelib": "relative/site"},
])
def test_reads_are_the_former_input_files_outside_the_unit(host):
    unit_files = ["/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env", "/etc/sglang/secrets.yaml",
                  "/usr/local/lib/gpuserve-sglang/sglang_launch.py"]
    variables = {"_server_python": host["python"], "_server_versioned_venv": host["versioned_venv"],
                 "_server_site": host["purelib"], "sglang_install_record": "/etc/sglang/install-record.json",
                 "_server_unit_path": unit_files[0], "sglang_env_file": unit_files[1],
                 "sglang_secrets_file": unit_files[2], "sglang_launch_script": unit_files[3],
                 "sglang_nccl_env_file": "/etc/sglang/nccl.env"}
    variables["_server_venv_record"] = _render(OLD_VENV_RECORD, **variables)
    old = [path for path in _render(OLD_READS, **variables) if path not in unit_files]
    assert r.sglang_server_reads(host, "/etc/sglang/nccl.env") == old[:-1]
    assert r.sglang_server_install_record(host, "/etc/sglang/install-record.json") == old[-1]


def test_identity():
    host = {"sglang_release": "0.5.17", "models": {"models": [{"role": "draft", "config_sha256": "d"},
                                                              {"role": "model", "config_sha256": "c0ffee"}]}}
    assert r.sglang_server_identity(host, {"model-path": "/m"}) == {"model": "/m", "release": "0.5.17",
                                                                    "config_sha256": "c0ffee"}
    assert r.sglang_server_identity(None, None) == {"model": "", "release": "", "config_sha256": ""}


# ---- the service account: the former install.yml's condition and user.yml's groups ---------------------------------
OLD_ACCOUNT_MISSING = """{{ not (_server_account.exists | default(false)
           and _server_account.group_exists | default(false)
           and (_server_account.device_groups + sglang_user_groups) | difference(_server_account.groups)
               | length == 0) }}"""
OLD_GPU_GROUPS = """{{ (ansible_facts.getent_group | default({})) | dict2items
         | selectattr('value.1', 'in', _server_gpu_gids | map('string') | list)
         | map(attribute='key') | list }}"""
OLD_GPU_GIDS = "{{ _server_gpu_devices.files | map(attribute='gid') | reject('equalto', 0) | unique | list }}"


@pytest.mark.parametrize("account", [
    {"exists": True, "group_exists": True, "groups": ["sglang", "video", "render"], "device_groups": ["video"]},
    {"exists": True, "group_exists": True, "groups": ["sglang"], "device_groups": ["video"]},
    {"exists": True, "group_exists": False, "groups": ["video", "render"], "device_groups": []},
    {"exists": False, "group_exists": True, "groups": [], "device_groups": []},
    {"exists": True, "group_exists": True, "groups": ["sglang", "video"], "device_groups": ["video"]},
])
def test_account_ok_is_the_former_install_condition(account):
    groups = ["render"]
    missing = _render(OLD_ACCOUNT_MISSING, _server_account=account, sglang_user_groups=groups)
    assert r.sglang_server_account_ok(account, groups) is (not missing)
    assert r.sglang_server_account_ok({}, []) is False


def test_gpu_groups_are_the_former_user_yml():
    groups = {"root": ["x", "0", ""], "video": ["x", "44", ""], "render": ["x", "109", ""], "sglang": ["x", "990", ""],
              "audio": ["x", "29", ""]}
    files = [{"path": "/dev/nvidia0", "gid": 44}, {"path": "/dev/nvidiactl", "gid": 44},
             {"path": "/dev/nvidia-caps", "gid": 0}, {"path": "/dev/nvidia-uvm", "gid": 109}]
    gids = _render(OLD_GPU_GIDS, _server_gpu_devices={"files": files})
    old = _render(OLD_GPU_GROUPS, ansible_facts={"getent_group": groups}, _server_gpu_gids=gids)
    assert r.sglang_server_gpu_groups(groups, files) == sorted(old) == ["render", "video"]
    assert r.sglang_server_gpu_groups(dict(groups, bad=None, short=["x"]), files) == ["render", "video"]
    assert r.sglang_server_gpu_groups(groups, []) == []
    assert r.sglang_server_gpu_groups(None, files) == []


# ---- one server over several hosts: the group's verdict, and a restart due on any node -----------------------------
NODES = ["gpu-a1", "gpu-a2", "gpu-a3"]


def _hostvars(**results):
    ok = {"phase": "prepare", "changed": True, "restart_due": False}
    return {node: {"sglang_server": results.get(node.replace("-", "_"), ok)} for node in NODES}


def _problems(*args, **kwargs):
    return r.sglang_group(*args, **kwargs)["problems"]


def test_verdict_all_fine_and_a_server_on_one_host():
    assert _problems(NODES, _hostvars(), NODES, "prepare") == []
    assert _problems([], _hostvars(), NODES, "prepare") == []
    assert _problems(None, {}, [], "restart") == []
    assert _problems("gpu-a1", _hostvars(), NODES, "prepare") == []


def test_verdict_a_node_not_in_the_play():
    assert _problems(NODES, _hostvars(), ["gpu-a1", "gpu-a3"], "prepare") == [
        "gpu-a2 (node 1) is not in the play any more (it failed, was refused or is unreachable)"]


@pytest.mark.parametrize("result, why", [
    ({"unreachable": True, "msg": "ssh: connect to host 10.0.0.12 port 22: Connection refused"}, "unreachable"),
    ({"failed": True, "msg": "ranks missing: TP7\nmore", "phase": "prepare"}, "failed: ranks missing: TP7"),
    ({"failed": True}, "failed: "),
    ({"skipped": True}, "skipped"),
    ({"phase": "restart"}, "no result of the prepare step in this run"),
    ({"changed": False}, "no result of the prepare step in this run"),
    ({}, "no result (it did not run this step)"),
    (None, "no result (it did not run this step)"),
])
def test_verdict_names_the_node_that_is_not_fine(result, why):
    problems = _problems(NODES, _hostvars(gpu_a2=result), NODES, "prepare")
    assert problems == ["gpu-a2 (node 1): " + why]


def test_verdict_a_node_without_host_vars_and_another_result_name():
    hostvars = _hostvars()
    del hostvars["gpu-a3"]
    assert _problems(NODES, hostvars, NODES, "prepare") == [
        "gpu-a3 (node 2): no result (it did not run this step)"]
    assert _problems(NODES, {n: {"mine": {"phase": "restart"}} for n in NODES}, NODES, "restart",
                     result="mine") == []


def test_verdict_of_the_restart_step_reads_node_0s_gates_in_its_result():
    results = {n.replace("-", "_"): {"phase": "restart"} for n in NODES}
    results["gpu_a1"] = {"phase": "restart", "failed": True, "msg": "benchmark regression: 10 tok/s"}
    assert _problems(NODES, _hostvars(**results), NODES, "restart") == [
        "gpu-a1 (node 0): failed: benchmark regression: 10 tok/s"]


def test_group_due():
    def due(*args, **kwargs):
        return r.sglang_group(NODES, *args, **kwargs)["due"]

    assert due(_hostvars(), NODES, "prepare") is False
    assert due(_hostvars(gpu_a3={"phase": "prepare", "restart_due": True}), NODES, "prepare") is True
    assert due(_hostvars(gpu_a2={"restart_due": "false"}), NODES, "prepare") is False
    # issue 47 defect 3: the rollout asks each node read-only (state due: a result with "due", no "restart_due");
    # 7d0d57e read restart_due only, so a server due on one node only was never due as a whole behind routers
    assert due(_hostvars(gpu_a2={"phase": "converge", "due": True}), NODES, "prepare") is True
    assert due({"gpu-a1": {"sglang_server": None}}, NODES, "prepare") is False
    assert due({}, NODES, "prepare", result="other") is False
    assert r.sglang_group([], _hostvars(gpu_a1={"restart_due": True}), NODES, "prepare")["due"] is False


def test_every_filter_is_listed():
    assert set(r.FilterModule().filters()) == {
        "sglang_server_args", "sglang_server_argv", "sglang_server_cmdline", "sglang_plan_inputs",
        "sglang_server_plan", "sglang_server_models", "sglang_server_refusals", "sglang_server_notes",
        "sglang_server_envfile", "sglang_server_secrets", "sglang_server_reads", "sglang_server_install_record",
        "sglang_server_identity", "sglang_server_gate_seconds",
        "sglang_server_gpu_groups", "sglang_server_account_ok", "sglang_group"}


@pytest.mark.parametrize("gates, seconds", [
    ({"bench": True, "requests": 8, "concurrency": 4, "timeout": 300, "answers": False}, 900),
    ({"bench": "true", "requests": "8", "concurrency": "0", "timeout": "300", "answers": "true"}, 2700 + 300),
    ({"bench": False, "requests": 8, "concurrency": 4, "timeout": 300, "answers": True}, 300),
    ({"bench": False, "answers": False, "timeout": 300}, 0),
    (None, 0)])
def test_the_lease_ttl_covers_the_gates_the_role_runs(gates, seconds):
    """The host lease's TTL (issue 39 defect 8) covers two restarts and the gates after them; the server role's
    lease task passes what its gates take, as the three role variables it replaced computed: the benchmark's rounds
    (requests // concurrency, a warm-up round more) times the timeout, and one timeout for the answers gate."""
    assert r.sglang_server_gate_seconds(gates) == seconds


def test_group_change_is_the_run_id_of_node_0s_lease_and_the_decision_follows_the_records():
    hostvars = _hostvars()
    hostvars["gpu-a1"]["sglang_lease"] = {"lease": {"id": "run-abc"}}
    verdict = r.sglang_group(NODES, hostvars, NODES, "prepare")
    assert verdict["group"] == "run-abc" and verdict["decision"] == {"group": "run-abc", "keep": False}
    # one node recorded the decision to keep (decide): the rescue keeps on every node
    hostvars["gpu-a2"]["sglang_server"] = {"phase": "decide", "group_decision": "commit"}
    assert r.sglang_group(NODES, hostvars, NODES, "decide")["decision"]["keep"] is True
    # an earlier run's change open on one node, kept on another under that change: keep it everywhere
    opened = {"open": {"id": "run-old", "phase": "restarted", "decision": ""}}
    hostvars = _hostvars(gpu_a2={"phase": "prepare", "group_state": opened},
                         gpu_a3={"phase": "prepare", "group_state": {"kept_group": "run-old"}})
    verdict = r.sglang_group(NODES, hostvars, NODES, "prepare")
    assert verdict["open"] == ["gpu-a2"] and verdict["decision"] == {"group": "run-old", "keep": True}
    assert "an earlier run's change of this server (group change run-old" in verdict["problems"][0]
    # no node recorded anything: presumed abort
    hostvars["gpu-a3"]["sglang_server"] = {"phase": "prepare", "group_state": {"kept_group": "run-older"}}
    assert r.sglang_group(NODES, hostvars, NODES, "prepare")["decision"] == {"group": "run-old", "keep": False}
