# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_lease (issue 39): what only the controller knows.

- The owner's identity: the controller, the user, and what proves the run alive - its ansible-playbook's pid
  (the parent of the worker this runs in), the controller's boot id, that process's PID namespace inode and start
  time (_lease.controller_identity()).
- The run's id when the task gives none (_lease.run_id(): the same in every worker and on every host of the run,
  never the same for two runs; the router rollout's lease).
- A holder provably gone from this controller (_lease.holder_gone()) is taken over in a second module call that
  takes the lease only while that holder's id still holds it (``replace``: compare and swap under the lease's
  lock on the host), so a third, live run that took it in between is never broken. Otherwise the module waits
  as asked (``wait``) and refuses naming the holder.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease

MODULE = "gpuserve.sglang.sglang_lease"
display = Display()


def waiting_line(unit, wait, holder):
    """What a run says before it waits for another run's lease: how long at most, and for whom."""
    owner = (holder or {}).get("owner") or {}
    return "waiting (at most %s s) for the run that holds the lease on %s: %s@%s, play %s" % (
        wait, unit, _lease.clean(owner.get("user") or "?"), _lease.clean(owner.get("controller") or "?"),
        _lease.clean(owner.get("play") or "?"))


class ActionModule(ActionBase):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        here = _lease.controller_identity()
        if not args.get("id"):
            args["id"] = _lease.run_id(here)
        owner = dict(args.get("owner") or {})
        for key in ("controller", "user"):
            owner.setdefault(key, here.get(key))
        for key in ("pid", "boot_id", "pidns", "start"):   # the run's own, never the task's
            owner.pop(key, None)
            if here.get(key):
                owner[key] = here[key]
        args["owner"] = owner
        args.pop("replace", None)   # the action's own step, never the task's

        def call(**change):
            return self._execute_module(module_name=MODULE, module_args=dict(args, **change), task_vars=task_vars)

        try:
            if (args.get("state") or "acquired") != "acquired" or self._task.check_mode:
                answer = call()
            else:
                answer = call(wait=0)
                holder = answer.get("lease") if answer.get("result") == "held" else None
                if isinstance(holder, dict) and holder.get("id") and _lease.holder_gone(holder.get("owner"), here):
                    answer = call(wait=0, replace=holder["id"])
                if answer.get("result") == "held" and str(args.get("wait", 900)).strip() not in ("", "0"):
                    # said when the wait starts (it may be long), and kept in the result
                    line = waiting_line(args.get("unit"), args.get("wait", 900), answer.get("lease"))
                    display.display("%s: %s" % (task_vars.get("inventory_hostname", "?"), line))
                    answer = dict(call(), waiting=line)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(answer)
        return result
