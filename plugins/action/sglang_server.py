# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_server, the server role's seam (issue 47). Called with ``role_inputs`` (the
server role's one task: the preflight's host read, the rendered unit, the launcher's text), it reads the role's
variables once each and computes the module's whole payload in Python (plugin_utils/_server_payload.py): the
module then gets one checked set of options, computed after the host read. Called without it (a playbook of
yours that sets every option), the options go to the module as they are."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _role_vars, _server_payload

MODULE = "gpuserve.sglang.sglang_server"


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        role = args.pop("role_inputs", None)
        if role is not None:
            if not isinstance(role, dict):
                result.update(failed=True, msg="role_inputs must be a dict (host, unit, launcher)")
                return result
            # each role variable resolved once; hostvars stays Ansible's lazy view (a node's facts are templated
            # only when read, as the role's filters read them)
            read = _role_vars.reader(self._templar, task_vars)
            args.update(_server_payload.payload(
                read, str(args.get("name") or ""), role.get("host"), str(role.get("unit") or ""),
                str(role.get("launcher") or ""), hostvars=(task_vars or {}).get("hostvars") or {}))
        try:
            result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
