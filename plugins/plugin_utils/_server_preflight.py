# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server role's preflight (issue 47), computed on the controller by the action plugin of
gpuserve.sglang.sglang_host_facts when the role's task asks for it (option ``server_preflight``).

Three steps, each a pure function of a variable reader ``read(name[, default])`` (the role's variables as the task's
templar resolves them):

- ``host_read_args``: the module's options for the host read (interpreter, CUDA facts, drop-ins, the paths and
  models the server needs, the unit's state, the service account), from the effective flags BEFORE the host read
  (``sglang_version``'s release: the role's ``_server_host`` is not this run's yet);
- ``parser_argv``: SGLang's arguments for the installed parser's check, AFTER the host read (the host's release and
  its release-only flags), or None when the check is off or SGLang is not installed;
- the effective flags and SGLang's arguments come from ``_server_flags.flags`` (computed once after the host read
  by the action plugin and handed to ``parser_argv`` and ``verdict``, then returned as the host read's ``flags``);
- ``verdict``: every refusal (one message each; the task fails with them joined by '; ' before the host changes)
  and every note (what the preflight allowed or did not check), AFTER the host read, whether the service account
  is complete (``account_ok``: then the role's install step is skipped as a whole) and the groups it joins
  (``account_groups``).

tests/unit/plugins/plugin_utils/test_server_preflight.py.
"""

from __future__ import annotations

from ansible.plugins.filter.core import to_bool

from ansible_collections.gpuserve.sglang.plugins.filter import server_role
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_flags

CUDA_FACT_FILE = "/etc/ansible/facts.d/gpuserve_cuda.fact"
# the parser's check: roles/server/files/ (found as the script module finds a role's file)
PARSER_SCRIPT = "sglang_check_args.py"
# What the role's templar must see of _server_host before this run's host read (the role's defaults read
# _server_host.cuda.cuda_home: "" lets the module take the CUDA facts file's home), never an earlier run's read.
BEFORE_HOST_READ = {"cuda": {"cuda_home": ""}}

# The role's variables each step reads.
HOST_READ_VARS = (
    "sglang_python", "sglang_install_record", "sglang_venv", "sglang_service_name", "sglang_unit_dir",
    "sglang_cuda_home", "sglang_user", "sglang_model_check", "sglang_model_check_timeout", "sglang_model_check_deep",
    "sglang_weight_cache_service_name", "_server_in",
)
VERDICT_VARS = (
    "inventory_hostname", "_server_in", "_server_inputs", "_server_env", "sglang_args", "sglang_unit_sandbox",
    "sglang_allow_dropin_overrides", "sglang_user_groups", "sglang_check_args",
)
# Read when defined, else this value (set by the profile, a play or flags.yml, not by the role's defaults).
OPTIONAL_VARS = {"sglang_version": "", "_server_profile_model": {}, "sglang_server_features": None,
                 "sglang_memory_plan": {}}


def _read(read, names):
    values = dict((name, read(name)) for name in names)
    values.update((name, read(name, default)) for name, default in OPTIONAL_VARS.items())
    return values


def _bool(value):
    return bool(to_bool(value))


def host_read_args(read, hostvars=None):
    """The options of the module sglang_host_facts for the server role's host read: ``read`` resolves the role's
    variables as they are before this run's host read (see BEFORE_HOST_READ)."""
    v = _read(read, HOST_READ_VARS)
    args = _server_flags.flags(read, hostvars)["args"]
    python = str(v["sglang_python"] or "")
    paths = [str(args.get("model-path") or ""), str(args.get("speculative-draft-model-path") or ""),
             # the Weight Cache Daemon's unit (one to remove?)
             "%s/%s.service" % (v["sglang_unit_dir"], v["sglang_weight_cache_service_name"])]
    return {
        "python": python,
        "install_record": "" if python else str(v["sglang_install_record"] or ""),
        "venv": v["sglang_venv"],
        "cuda_fact_file": CUDA_FACT_FILE,
        "unit": v["sglang_service_name"],
        "unit_dir": v["sglang_unit_dir"],
        "paths": [path for path in paths if path],
        "probe": True,
        # checked for nvcc and libcudart when the installed SGLang compiles its own kernels at its first start: the
        # unit's CUDA_HOME (sglang_cuda_home; "" before the host read: the module takes the CUDA facts file's)
        "cuda_home": str(v["sglang_cuda_home"] or ""),
        "user": v["sglang_user"],
        "unit_state": True,
        "models": {
            "items": server_role.sglang_server_models(args, v["_server_profile_model"], v["sglang_model_check"]),
            "release": str(v["sglang_version"] or ""),
            "timeout": v["sglang_model_check_timeout"],
            "deep": _bool(v["sglang_model_check_deep"]),
        },
    }


def parser_argv(read, host, hostvars=None, flags=None):
    """SGLang's arguments (after ``-m <launcher>``) for the installed parser's check, or None when it is not run
    (sglang_check_args false, or the host read found no SGLang). ``flags``: _server_flags.flags() of this read."""
    host = host if isinstance(host, dict) else {}
    if not (_bool(read("sglang_check_args")) and _bool(host.get("sglang_installed") or False)):
        return None
    return (flags or _server_flags.flags(read, hostvars))["argv"]


def parser_result(rc, stdout="", stderr=""):
    """The parser's check as the refusals read it (the shape of a registered script result)."""
    del stdout  # the parsed values: not kept (the host read is handed on to the module sglang_server)
    stderr = str(stderr or "")
    return {"rc": rc, "stderr": stderr, "stderr_lines": stderr.splitlines()}


def server_args(read, hostvars=None):
    """The effective flags (the role's _server_args) as ``read`` resolves the role's variables."""
    return _server_flags.flags(read, hostvars)["args"]


def verdict(read, host, parser=None, hostvars=None, flags=None):
    """{refusals, notes, account_ok, account_groups} of the preflight: ``read`` resolves the role's variables after this run's host
    read ``host`` (the module's result), ``parser`` is the parser's check (parser_result) or None when not run,
    ``flags`` _server_flags.flags() of this read."""
    v = _read(read, VERDICT_VARS)
    host = host if isinstance(host, dict) else {}
    args = (flags or _server_flags.flags(read, hostvars))["args"]
    check = {"host": host, "hostname": v["inventory_hostname"], "inputs": v["_server_inputs"], "args": args,
             "env": v["_server_env"], "user_args": v["sglang_args"], "sandbox": v["sglang_unit_sandbox"],
             "allow_dropins": v["sglang_allow_dropin_overrides"], "parser": parser or {},
             # whether the checkpoint prefetch is used, and why (a note)
             "features": v["sglang_server_features"], "plan": v["sglang_memory_plan"] or {}}
    account = host.get("account") if isinstance(host.get("account"), dict) else {}
    return {
        "refusals": server_role.sglang_server_refusals(check),
        "notes": server_role.sglang_server_notes(host, v["sglang_allow_dropin_overrides"], check),
        "account_ok": server_role.sglang_server_account_ok(account, v["sglang_user_groups"] or []),
        # the groups the service account joins: those owning the GPU device files (a gid without a name left
        # out, as the account's getent lookup did) and sglang_user_groups
        "account_groups": sorted(name for name in account.get("device_groups") or [] if not str(name).isdigit())
        + list(v["sglang_user_groups"] or []),
    }
