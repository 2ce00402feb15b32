# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_router_service (issue 47): the environment file's text is computed here from
``api_key`` when the task gives only its path (the router role's task; plugin_utils/_router_role.py), so no filter
of the role computes it in YAML. A task that gives ``env.content`` itself is passed through as it is."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _router_role

MODULE = "gpuserve.sglang.sglang_router_service"


def module_args(args):
    """The module's options from the task's: ``env.content`` from ``api_key`` when not given."""
    args = dict(args)
    env = args.get("env")
    if isinstance(env, dict) and env.get("content") is None:
        args["env"] = dict(env, content=_router_role.sglang_router_envfile(args.get("api_key") or ""))
    return args


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=module_args(self._task.args),
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
