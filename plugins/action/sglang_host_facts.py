# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_host_facts. With ``server_preflight: true`` (the server role's preflight, one
task) it reads the role's variables and computes the whole preflight in Python (plugin_utils/_server_preflight.py):
the module's options for the host read, then, when SGLang is installed and sglang_check_args is on, the installed
SGLang's own parser run over the command line (roles/server/files/sglang_check_args.py, as ansible.builtin.script
runs it), then every refusal: the task fails with them before the host changes, else returns the host read with
``refusals`` ([]), ``notes`` (said on the console), ``parser`` and ``account_ok``, and for a server over several hosts
(sglang_server_nodes) ``node``: what this node must share with the others (plugin_utils/_server_nodes.py). With
``server_nodes: true`` (the role's nodes step, after every node's preflight) it runs no module: it fails naming every
node that differs from this one, else returns ``reach`` (node 0's dist ports this node must reach, {} on node 0).
With ``server_flags: true`` (the role's entry point ``flags``, before the host read) it runs no module: it reads the
profile's file (roles/server/vars/profiles/<sglang_profile>.yml) and returns ``profile`` and ``flags``. ``flags``
(plugin_utils/_server_flags.py: the effective flags, SGLang's arguments, the unit's command line, the memory plan's
inputs, HiCache) is also in the preflight's result, for the host's release. Without any of these, the options go to
the module as they are."""

from __future__ import annotations

import json

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import (
    _role_vars, _server_flags, _server_nodes, _server_preflight)

MODULE = "gpuserve.sglang.sglang_host_facts"
display = Display()


class ActionModule(ActionBase):

    def _reader(self, task_vars, server_host):
        """A reader of the role's variables as the task's templar sees them, with _server_host set to ``host``."""
        return _role_vars.reader(self._templar, task_vars, _server_host=server_host)

    def _profile(self, task_vars):
        """The profile's variables, templated (its file in the role's vars/profiles, found and loaded as
        include_vars loads it: its values may name the role's variables, as the Kimi profile's draft model does)."""
        name = str(_role_vars.reader(self._templar, task_vars)("sglang_profile"))
        path = self._find_needle("vars", "profiles/%s.yml" % name)
        data = _server_flags.profile(name, self._loader.load_from_file(path, cache="none", trusted_as_template=True))
        read = _role_vars.reader(self._templar, task_vars, **data)
        return dict((key, read(key)) for key in data)

    def _flags(self, task_vars):
        """The entry point flags: the profile and the flags before the host read, no module run."""
        profile = self._profile(task_vars)
        read = _role_vars.reader(self._templar, task_vars, **profile)
        flags = _server_flags.flags(read, task_vars.get("hostvars") or {})
        result = {"changed": False, "profile": profile, "flags": flags}
        if _server_flags.secret(flags):
            result["_ansible_no_log"] = True
        return result

    def _parser_check(self, python, argv):
        """Run the role's parser check with the host's interpreter; its result as the refusals read it."""
        source = self._loader.get_real_file(self._find_needle("files", _server_preflight.PARSER_SCRIPT))
        shell = self._connection._shell
        if shell.tmpdir is None:
            self._make_tmp_path()
        remote = shell.join_path(shell.tmpdir, _server_preflight.PARSER_SCRIPT)
        self._transfer_file(source, remote)
        self._fixup_perms2((shell.tmpdir, remote))
        env = shell.env_prefix(SGLANG_CHECK_ARGV=json.dumps(argv), PYTHONWARNINGS="ignore")
        cmd = " ".join(part for part in (self._compute_environment_string(), env, shell.quote(python),
                                         shell.quote(remote)) if part)
        out = self._low_level_execute_command(cmd=cmd, sudoable=True)
        return _server_preflight.parser_result(out.get("rc"), out.get("stdout"), out.get("stderr"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        preflight = boolean(args.pop("server_preflight", False), strict=False)
        if boolean(args.pop("server_flags", False), strict=False):
            result.update(self._flags(task_vars))
            return result
        if boolean(args.pop("server_nodes", False), strict=False):
            read = self._reader(task_vars, task_vars.get("_server_host"))
            result.update(_server_nodes.check(read("sglang_server_nodes"), task_vars.get("hostvars") or {},
                                              read("inventory_hostname"), read("sglang_dist_init_port")),
                          changed=False)
            return result
        try:
            if not preflight:
                result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
                return result
            hostvars = task_vars.get("hostvars") or {}
            before = self._reader(task_vars, dict(_server_preflight.BEFORE_HOST_READ))
            args.update(_server_preflight.host_read_args(before, hostvars))
            host = self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)
            result.update(host)
            if host.get("failed"):
                return result
            after = self._reader(task_vars, host)
            flags = _server_flags.flags(after, hostvars)   # the host's: computed once, read by the later tasks
            argv = _server_preflight.parser_argv(after, host, hostvars, flags)
            parser = self._parser_check(str(host.get("python") or ""), argv) if argv is not None else None
            verdict = _server_preflight.verdict(after, host, parser, hostvars, flags)
            result.update(verdict, parser=parser or {"skipped": True})
            if verdict["refusals"] or flags["problem"]:
                result.update(failed=True, msg="; ".join(verdict["refusals"] or [flags["problem"]]))
            else:
                result["flags"] = flags
                if _server_flags.secret(flags):
                    result["_ansible_no_log"] = True
                if after("sglang_server_nodes", None):
                    result["node"] = _server_nodes.fingerprint(host, after("sglang_profile", ""), flags["args"])
                for note in verdict["notes"]:
                    display.display("%s: %s" % (task_vars.get("inventory_hostname", "?"), note))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
