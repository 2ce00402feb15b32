# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of module sglang_lease (issue 39): what only the controller knows.

- The owner's identity: the controller, the user, and what proves the run alive - its ansible-playbook's pid
  (the parent of the worker this runs in), the controller's boot id, that process's PID namespace inode and start
  time (_lease.controller_identity()).
- The run's id when the task gives none (_lease.run_id(): the same in every worker and on every host of the run,
  never the same for two runs; the router rollout's lease).
- A second round over a first round's answers (``after``: the router rollout's leases on every router): only a
  lease another live run held in the first round is asked again, and ``stop`` says whether the answer stops the
  run (_router_role.sglang_router_lease_failures' rule, one answer at a time).
- A holder provably gone from this controller (_lease.holder_gone()) is taken over in a second module call that
  takes the lease only while that holder's id still holds it (``replace``: compare and swap under the lease's
  lock on the host), so a third, live run that took it in between is never broken. Otherwise the module waits
  as asked (``wait``) and refuses naming the holder.
- ``gates`` (the server role's gates after a restart) becomes ``gate_timeout`` when the task gives none
  (plugin_utils/_server_lease.gate_seconds()).
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_lease

MODULE = "gpuserve.sglang.sglang_lease"
display = Display()
# what a registered loop adds to an answer; a first round's answer handed back has none of it
_LOOP_KEYS = ("item", "ansible_loop_var", "ansible_index_var", "ansible_loop", "failed_when_result", "changed_when_result",
              "invocation", "changed", "failed", "warnings", "deprecations")


def held(answer):
    """A first round's answer (wait 0) that another live run holds the lease: the one asked again."""
    return isinstance(answer, dict) and "taken" in answer and bool(answer.get("contended")) and not answer.get("taken")


def stop(answer, waited):
    """Why an answer stops the run ('' when it does not): a module error (no ``taken``), or, after the wait, a lease
    still another live run's (contended, not taken)."""
    if "taken" not in answer or (waited and answer.get("contended") and not answer.get("taken")):
        return str(answer.get("msg") or "?")
    return ""


def first_answer(after):
    """A first round's answer as this task's: its own keys only, unchanged."""
    return dict((key, value) for key, value in after.items()
                if key not in _LOOP_KEYS and not key.startswith("_ansible"))


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
        gates = args.pop("gates", None)
        if gates is not None and args.get("gate_timeout") in (None, ""):
            args["gate_timeout"] = _server_lease.gate_seconds(gates)
        after = args.pop("after", None)
        again = (after is None or (held(after) and (args.get("state") or "acquired") == "acquired"
                                   and not self._task.check_mode))
        if not again:
            answer = first_answer(after if isinstance(after, dict) else {})
            result.update(answer, changed=False, stop=stop(answer, False))
            return result

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
        if after is not None:
            result["stop"] = stop(answer, True)
        return result
