# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's effective flags, the unit's command line and the memory plan's inputs (issue 47), computed ONCE in
Python by the action plugin of gpuserve.sglang.sglang_host_facts, from the role's variables:

- before the host read (the role's entry point ``flags``, option ``server_flags``): the profile's file is read
  (``profile``), the release is ``sglang_version``'s and the profile's flags for some releases only are merged for it;
- after it (option ``server_preflight``): the host's release and CPUs (``_server_host``), so the profile's
  release-only flags are in the ExecStart and the plan's inputs alike (the Qwen profile's HiCache from 0.5.23).

``flags()`` is a pure function of a variable reader ``read(name[, default])``
(tests/unit/plugins/plugin_utils/test_server_flags_seam.py compares it with the deprecated filters sglang_server_args,
sglang_server_cmdline and sglang_server_plan, which computed the same through Jinja).
"""

from __future__ import annotations

from ansible.errors import AnsibleError, AnsibleFilterError
from ansible.plugins.filter.core import to_bool

from ansible_collections.gpuserve.sglang.plugins.filter import server_role
from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_argv
from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_cmdline
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import is_secret_flag

# A profile's file (roles/server/vars/profiles/<sglang_profile>.yml): the names it may set.
PROFILE_VARS = ("_server_profile_args", "_server_profile_env", "_server_profile_model", "_server_profile_release_args")
# What the role's own variables add to the flags (issue 49; the public fact sglang_server_features).
FEATURE_VARS = ("sglang_weight_cache", "sglang_weight_cache_timeout", "sglang_weight_cache_service_name",
                "sglang_weight_prefetch", "sglang_weight_prefetch_headroom_gb")
_UNSET = object()


def profile(name, data):
    """The variables of the profile ``name``'s file (``data``, as loaded): a mapping of PROFILE_VARS only."""
    if not isinstance(data, dict):
        raise AnsibleError("sglang_profile %s: its file must hold a mapping, got %s" % (name, type(data).__name__))
    unknown = sorted(str(key) for key in data if key not in PROFILE_VARS)
    if unknown:
        raise AnsibleError("sglang_profile %s: its file sets %s; a profile sets only %s"
                           % (name, ", ".join(unknown), ", ".join(PROFILE_VARS)))
    return dict(data)


def features(read):
    """The public fact sglang_server_features from the role's variables (None where the role's defaults are not
    in view: then the flags take what hostvars holds, as the filters did)."""
    values = dict((name, read(name, _UNSET)) for name in FEATURE_VARS)
    if any(value is _UNSET for value in values.values()):
        return None
    weight_cache = bool(to_bool(values["sglang_weight_cache"]))
    return {"weight_cache": weight_cache, "weight_cache_timeout": values["sglang_weight_cache_timeout"],
            "weight_cache_unit": ("%s.service" % values["sglang_weight_cache_service_name"]) if weight_cache else "",
            "weight_prefetch": values["sglang_weight_prefetch"],
            "weight_prefetch_headroom_gb": values["sglang_weight_prefetch_headroom_gb"]}


class _Facts(object):
    """A host's variables with some replaced (``get`` only: what the flags read of them)."""

    def __init__(self, facts, over):
        self._facts, self._over = facts, over

    def get(self, name, default=None):
        if name in self._over:
            return self._over[name]
        return self._facts.get(name, default) if hasattr(self._facts, "get") else default


class _HostView(object):
    """Ansible's lazy hostvars, this host's sglang_server_features replaced by the role's (the fact the entry point
    `flags` sets is not set yet when its own task computes)."""

    def __init__(self, hostvars, host, over):
        self._hostvars, self._host, self._over = hostvars if hostvars is not None else {}, host, over

    def __contains__(self, name):
        return name == self._host or name in self._hostvars

    def __getitem__(self, name):
        if name == self._host:
            return _Facts(self._hostvars[name] if name in self._hostvars else {}, self._over)
        return self._hostvars[name]

    def get(self, name, default=None):
        return self[name] if name in self else default


def _argv(inputs, args):
    """SGLang's arguments (after ``-m <launcher>``): the flags, then the listening address."""
    return sglang_argv(args) + ["--host", str(inputs.get("listen_host", "")), "--port", str(inputs.get("port", ""))]


def _prefix(inputs):
    """The words before SGLang's arguments: the interpreter, the launch script when set, ``-m`` launcher."""
    prefix = [str(inputs.get("python", ""))]
    if inputs.get("launch_script"):
        prefix.append(str(inputs["launch_script"]))
    return prefix + ["-m", str(inputs.get("launcher", ""))]


def exec_start(cmdline, config=""):
    """The unit's ExecStart: the command line, then ``--config`` and the secrets file when a key is set (SGLang
    reads the keys there, never from its command line)."""
    return cmdline + (" " + sglang_cmdline(["--config", config]) if config else "")


def flags(read, hostvars=None):
    """{args, argv, cmdline, exec_start, problem, plan, hicache, features, release} of the role's variables as
    ``read`` gives them (``_server_in``, FEATURE_VARS): the effective flags, SGLang's arguments, the unit's command
    line without and with ``--config`` (None, and ``problem`` says why, where a word holds control characters), the
    memory plan's inputs (the public fact sglang_plan_inputs) and whether HiCache is on."""
    inputs = dict(read("_server_in") or {})
    added = features(read)
    view = hostvars if added is None else _HostView(hostvars, inputs.get("host", ""), {"sglang_server_features": added})
    args = server_role.sglang_server_args(inputs, view)
    release = str(inputs.get("release") or "")
    plan = server_role.sglang_plan_inputs(args, release)
    argv = _argv(inputs, args)
    try:
        cmdline = sglang_cmdline(argv, prefix=_prefix(inputs))
        line, problem = exec_start(cmdline, str(inputs.get("config") or "")), ""
    except AnsibleFilterError as exc:
        # a word systemd could not read (control characters): no command line; the preflight refuses it naming the
        # variable (sglang_args' flag), and fails with this where nothing else refused it
        cmdline, line, problem = None, None, str(exc)
    return {
        "args": args,
        "argv": argv,
        "cmdline": cmdline,
        "exec_start": line,
        "problem": problem,
        "plan": plan,
        "hicache": plan["hicache"],
        "features": added,
        "release": release,
    }


def secret(values):
    """True when the flags hold a secret flag's value (is_secret_flag): the task's result is then not shown."""
    args = (values or {}).get("args") or {}
    return any(is_secret_flag(str(flag), value) for flag, value in args.items()
               if value not in (None, "", False, True))
