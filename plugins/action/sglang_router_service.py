# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_router_service (issue 47): the environment file's text is computed here from
``api_key`` when the task gives only its path (the router role's task; plugin_utils/_router_role.py), so no filter
of the role computes it in YAML. A task that gives ``env.content`` itself is passed through as it is.

With ``router_inputs: true`` (the router role's preflight, one task) no sglang_router_service runs: the role's
variables are read, the host is looked at (ansible.builtin.stat of the base interpreter and the wheel directory) and
everything the role's tasks and templates read is computed once (_router_role.role_inputs); the task fails with
every refusal, joined by '; ', before the host changes, else returns the inputs (the role registers them as
``_router_in``)."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _role_vars, _router_role

MODULE = "gpuserve.sglang.sglang_router_service"


def module_args(args):
    """The module's options from the task's: ``env.content`` from ``api_key`` when not given."""
    args = dict(args)
    env = args.get("env")
    if isinstance(env, dict) and env.get("content") is None:
        args["env"] = dict(env, content=_router_role.sglang_router_envfile(args.get("api_key") or ""))
    return args


class ActionModule(ActionBase):

    def _router_inputs(self, task_vars):
        """The router role's preflight: its inputs, or the task's failure with every refusal."""
        read = _role_vars.reader(self._templar, task_vars)
        looked = []
        for path in _router_role.host_paths(_router_role.role_settings(read)):
            stat = self._execute_module(module_name="ansible.builtin.stat",
                                        module_args={"path": path, "get_checksum": False}, task_vars=task_vars)
            if stat.get("failed"):
                return dict(failed=True, msg="the look at %s on the host failed: %s" % (path, stat.get("msg")))
            looked.append({"item": path, "stat": stat.get("stat") or {}})
        inputs = _router_role.role_inputs(read, task_vars.get("hostvars") or {}, task_vars.get("groups") or {},
                                          {"results": looked})
        if inputs["problems"]:
            # the refusals only: the inputs may hold what was refused (a secret in sglang_router_extra_args)
            return dict(failed=True, msg="; ".join(inputs["problems"]), problems=inputs["problems"])
        return dict(inputs, changed=False)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        try:
            if boolean(args.pop("router_inputs", False), strict=False):
                result.update(self._router_inputs(task_vars or {}))
            else:
                result.update(self._execute_module(module_name=MODULE, module_args=module_args(args),
                                                   task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
