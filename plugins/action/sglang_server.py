# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_server, the server role's seam (issue 47). Called with ``role_inputs`` (the
server role's one task: the preflight's host read, the rendered unit, the launcher's text), it reads the role's
variables once each and computes the module's whole payload in Python (plugin_utils/_server_payload.py): the
module then gets one checked set of options, computed after the host read. For a server over several hosts it also
takes the group's verdict before the phase (plugins/plugin_utils/_server_group.py): a no fails the phase without
running the module; else it sets force_restart, group and decision where the task gives none. Called without it
(a playbook of yours that sets every option), the options go to the module as they are. ``due_from`` (no module
runs): whether a restart is due on this node or any node of its server, from each node's ``state: due`` answer."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _role_vars, _server_group, _server_payload

MODULE = "gpuserve.sglang.sglang_server"


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        role = args.pop("role_inputs", None)
        due_from = args.pop("due_from", None)
        task_vars = task_vars or {}
        hostvars = task_vars.get("hostvars") or {}
        if due_from:
            # every node answered state due (an earlier task): the server's answer, no module runs
            read = _role_vars.reader(self._templar, task_vars)
            result.update(_server_group.due(read("sglang_server_nodes", []), hostvars, task_vars.get("inventory_hostname"),
                                            str(due_from)), changed=False)
            return result
        if role is not None:
            if not isinstance(role, dict):
                result.update(failed=True, msg="role_inputs must be a dict (host, unit, launcher)")
                return result
            # each role variable resolved once; hostvars stays Ansible's lazy view (a node's facts are templated
            # only when read, as the role's filters read them)
            read = _role_vars.reader(self._templar, task_vars)
            # the group's verdict before this phase (none for a server on one host): a no runs no module here
            register = _server_group.registered_as(getattr(self._task, "register", None))
            phase = str(args.get("phase") or "converge")
            taken, refused = _server_group.check(read("sglang_server_nodes", []), hostvars,
                                                 task_vars.get("ansible_play_batch") or [], phase, register)
            if refused:
                previous = _server_group.result_of(hostvars, task_vars.get("inventory_hostname"), register)
                result.update(_server_group.refusal(refused, phase, previous))
                return result
            for key, value in _server_group.options(taken, read("sglang_restart_forced", False)).items():
                args.setdefault(key, value)
            args.update(_server_payload.payload(
                read, str(args.get("name") or ""), role.get("host"), str(role.get("unit") or ""),
                str(role.get("launcher") or "")))
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
