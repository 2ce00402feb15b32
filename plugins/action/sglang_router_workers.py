# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_router_workers (issue 47): the router-aware rollout names inventory hosts, and
what the routers are told is computed here from the inventory, in Python (plugin_utils/_router_role.py), never by a
filter in the router role's YAML.

- ``router_hosts``: the routers (``routers``: each one's sglang_router_api_address or name, and sglang_router_port);
- ``worker_hosts``: the workers (``workers``: sglang_worker_urls); and ``fleet_hosts``: the fleet (``fleet``);
  for V(drained) and V(present), their ``aliases`` and PD ``kinds`` (the fleet's, else the workers'), the task's own
  ``aliases`` and ``kinds`` (a drain's answer) taking precedence;
- V(drained) returns ``words``: the line the rollout prints (DRAINED <hosts>: ...);
- ``server_result`` (with V(held_out), the rollout's rescue): gpuserve.sglang.sglang_server's result decides
  (sglang_router_rescue): a unit that serves a verified set is not held out (``readmit`` true, the module is not
  called); otherwise it is, ``readmit`` false. ``words`` says which, either way.

Options the task gives itself (routers, workers, fleet) are passed through as they are."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.sglang.plugins.filter import sglang_router
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _router_role

MODULE = "gpuserve.sglang.sglang_router_workers"
OWN = ("router_hosts", "worker_hosts", "fleet_hosts", "server_result")


def module_args(args, hostvars):
    """The module's options from the task's: the action's own options (OWN) resolved against ``hostvars``."""
    args = dict(args)
    own = dict((key, args.pop(key, None)) for key in OWN)
    if own["router_hosts"] is not None and not args.get("routers"):
        args["routers"] = sglang_router.sglang_router_urls(own["router_hosts"], hostvars)
    if own["worker_hosts"] is not None and not args.get("workers"):
        args["workers"] = sglang_router.sglang_worker_urls(own["worker_hosts"], hostvars)
    if own["fleet_hosts"] is not None and not args.get("fleet"):
        args["fleet"] = sglang_router.sglang_worker_urls(own["fleet_hosts"], hostvars)
    hosts = own["fleet_hosts"] if own["fleet_hosts"] is not None else own["worker_hosts"]
    if hosts is not None and args.get("state") in ("drained", "present"):
        aliases = sglang_router.sglang_worker_aliases(hosts, hostvars)
        aliases.update(args.get("aliases") or {})
        kinds = sglang_router.sglang_worker_kinds(hosts, hostvars)
        kinds.update(args.get("kinds") or {})
        args.update(aliases=aliases, kinds=kinds)
    return args, own


def rescue(own, args):
    """With ``server_result``: the rescue's verdict ({readmit, words}), else None."""
    if own.get("server_result") is None:
        return None
    return _router_role.sglang_router_rescue(own["server_result"], args.get("held_out_file"))


def words(result, args, own):
    """What the task's answer says, for the rollout's output."""
    if args.get("state") == "drained" and own.get("worker_hosts") is not None and not result.get("failed"):
        return _router_role.sglang_router_drained_words(result, {"batch": own["worker_hosts"],
                                                                 "routers": args.get("routers") or []})
    return None


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args, own = module_args(self._task.args, (task_vars or {}).get("hostvars") or {})
        verdict = rescue(own, args)
        try:
            if verdict is not None and verdict["readmit"]:
                result.update(changed=False, msg="not held out: it serves a verified set")
            else:
                result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        if verdict is not None:
            result.update(verdict)
        said = words(result, args, own)
        if said is not None:
            result["words"] = said
        return result
