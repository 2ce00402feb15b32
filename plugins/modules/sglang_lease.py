#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_lease
short_description: Take or give back the host lease on a managed unit (one run at a time changes it)
version_added: "0.3.0"
description:
  - One run at a time changes the life of a unit on a host. The server and router roles, C(deploy.yml) and
    C(restart.yml) take the lease before they write anything and give it back after they verified or rolled back;
    a second run waits at most O(wait) seconds, then fails and names the holder (controller, user, play, since
    when). The logic and the on-host format live in C(plugins/module_utils/_lease.py).
  - The lease is run bookkeeping, not configuration, so the module never reports C(changed) (an unchanged host
    stays C(changed=0)); RV(result) says what it did.
  - A run that holds the lease again (the same O(id), as when a playbook took it and then includes a role that
    takes it) renews it (RV(result=renewed)); only the first taker gives it back.
  - The holder is the run's id plus what proves its C(ansible-playbook) alive on its controller, filled in by the
    action plugin on the controller - the controller's boot id, the process's PID namespace inode and start time
    (O(owner)). Its action plugin takes a lease over at once (RV(result=gone)) only when its holder is provably gone
    - the same boot and PID namespace as this run's controller, and that process no longer exists or is another
    process - and only while that holder still holds it (compare and swap, O(replace), under the lease's lock); a
    holder in another PID namespace (a container with host networking, a CI runner), another boot or another
    controller is never judged gone.
  - A lease whose run died expires O(ttl) seconds after it was last taken or renewed, measured on the host's
    boot-time clock (a step of the wall clock does not move it), and is taken over (RV(result=expired));
    O(force=true) breaks a live one (RV(result=broken)). Each takeover reports the previous holder in RV(previous).
    The lease directory is on tmpfs by default, so a reboot ends every lease.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.action_plugin
attributes:
  check_mode:
    support: full
    details: Reports whether the lease is free (RV(result=free), RV(result=renewed)) or held (RV(result=held)); writes, takes over and waits for nothing.
  diff_mode:
    support: none
    details: The lease is run bookkeeping; RV(result) and RV(message) say what was done.
  platform:
    details: Linux hosts (flock, tmpfs under /run, CLOCK_BOOTTIME); the holder's liveness is read on Linux controllers (/proc).
  action:
    details: The action plugin fills in the owner's identity and the run's id on the controller and judges a holder gone there.
options:
  state:
    description:
      - V(acquired) (take or renew, waiting at most O(wait)), V(renewed) (move the expiry of this run's lease on,
        between long steps; fails when another run holds it or nobody does) or V(released) (give back, when O(id)
        holds it).
    type: str
    choices: [acquired, renewed, released]
    default: acquired
  unit:
    description: The unit the lease is on, with its suffix (C(sglang-kimi.service)).
    type: str
    required: true
  id:
    description:
      - This run's lease id. Omitted (as the roles do), the run's own id, made by the action plugin from the
        identity of the run's C(ansible-playbook) (the same in every task and on every host of the run, never the
        same for two runs).
    type: str
  owner:
    description:
      - Who holds it, for the message a waiting run prints; keys C(controller), C(user), C(play), and what proves
        the run alive, C(pid) (its C(ansible-playbook)), C(boot_id) (the controller's), C(pidns) (the PID namespace
        inode of that process), C(start) (its start time, clock ticks after boot). The action plugin fills in all
        but C(play).
    type: dict
    default: {}
  ttl:
    description:
      - Seconds after which a lease that was not renewed counts as the lease of a dead run; at least 2 x
        O(restart_timeout) + O(gate_timeout) + 900 where those are given.
    type: int
    default: 7200
  restart_timeout:
    description: The longest restart the lease covers (C(sglang_restart_timeout)); the TTL covers it twice (a restart, a rollback restart).
    type: int
    default: 0
  gate_timeout:
    description: The longest the gates after a restart take (benchmark, answers), in seconds; see O(gates).
    type: int
    default: 0
  gates:
    description:
      - The server role's gates after a restart, with the keys C(bench), C(requests), C(concurrency), C(timeout)
        and C(answers) (C(sglang_bench_gate), C(sglang_bench_requests), C(sglang_bench_concurrency),
        C(sglang_bench_timeout), C(sglang_answers_gate)). When O(gate_timeout) is not given, the action plugin
        sets it to the longest they take - the benchmark's rounds (C(requests) // C(concurrency), plus a warm-up
        round) times C(timeout) when C(bench) is on, plus one C(timeout) when C(answers) is on.
    type: dict
  replace:
    description:
      - Compare and swap - the id of a holder this run judged gone on its controller; the lease is taken over
        (RV(result=gone)) only while that id still holds it. Set by the action plugin.
    type: str
  wait:
    description: Seconds to wait for a lease another live run holds, then fail naming it.
    type: int
    default: 900
  force:
    description: Break a live lease of another run (its run is known to be dead).
    type: bool
    default: false
  after:
    description:
      - A second round over several leases (the router rollout's) - this lease's answer of a first round with
        O(wait=0). Only a lease another live run held then (contended, not taken) is asked again, waiting O(wait)
        (not in check mode, and only for V(acquired)); any other answer is returned as it was. Either way RV(stop)
        says whether the answer stops the run. Read by the action plugin.
    type: dict
  directory:
    description: Where the leases are (absolute path; tmpfs by default).
    type: path
    default: /run/gpuserve-sglang
"""

EXAMPLES = r"""
- name: Take the host lease on the server unit
  gpuserve.sglang.sglang_lease:
    unit: sglang-kimi.service
    owner: {play: Deploy SGLang}
    wait: 900
  register: lease

- name: Give it back
  gpuserve.sglang.sglang_lease:
    state: released
    unit: sglang-kimi.service
  when: lease.taken
"""

RETURN = r"""
stop:
  description:
    - With O(after), why this answer stops the run - a module error (no RV(taken) in the answer), or a lease still
      another live run's after the wait (contended, not taken) - the answer's message; empty when it does not.
  returned: with after
  type: str
result:
  description:
    - V(acquired), V(renewed), V(expired) (taken over from a run whose TTL passed), V(gone) (taken over from a run
      gone from its controller), V(broken) (O(force)); V(released), V(not held), V(held by another) (left alone);
      in check mode V(free) or V(held).
  returned: always
  type: str
  sample: acquired
lease:
  description: The lease as it is now (acquired, renewed), as it was (released), or the holder's (check mode).
  returned: always
  type: dict
  sample: {"unit": "sglang-kimi.service", "id": "20261202T150000-9f3c...", "owner": {"controller": "ops-1",
           "user": "alice", "play": "Deploy SGLang"}, "acquired_at": 1764687600.0, "expires_at": 1764694800.0}
taken:
  description:
    - Whether this call made the run the lease's first taker, the one that gives it back (RV(result) V(acquired),
      V(expired), V(gone), V(broken); in check mode V(free)). V(false) when it only renewed the run's own lease.
  returned: always
  type: bool
holds:
  description:
    - Whether the run holds the lease after this call (it took it, or renewed its own; in check mode V(free)). A role
      inside a playbook that holds it joins it instead of taking it and giving it back.
  returned: always
  type: bool
contended:
  description:
    - Whether another run held the lease when the call came - it still does (V(held), V(held by another)), or it
      was taken over from a run that died (V(expired), V(gone)) or broken (V(broken)); the roles then say so.
  returned: always
  type: bool
previous:
  description: The lease taken over (expired, gone) or broken (force); null otherwise.
  returned: state is acquired
  type: dict
waited:
  description: Seconds waited for another run's lease.
  returned: state is acquired
  type: int
waiting:
  description:
    - What the run said when it began to wait for another run's lease (how long at most, for whom); set by the
      action plugin, which also prints it then.
  returned: when the run waited
  type: str
message:
  description: One line on what happened, naming a previous holder.
  returned: always
  type: str
"""

import os

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease


def main():
    module = QuietModule(
        argument_spec=dict(
            state=dict(type="str", choices=["acquired", "renewed", "released"], default="acquired"),
            unit=dict(type="str", required=True),
            id=dict(type="str"),
            owner=dict(type="dict", default={}),
            ttl=dict(type="int", default=7200),
            restart_timeout=dict(type="int", default=0),
            gate_timeout=dict(type="int", default=0),
            gates=dict(type="dict"),   # the action plugin's (it sets gate_timeout from it)
            wait=dict(type="int", default=900),
            force=dict(type="bool", default=False),
            replace=dict(type="str"),
            after=dict(type="dict"),   # the action plugin's (a second round over a first round's answer)
            directory=dict(type="path", default=_lease.LEASE_DIR),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    params = module.params
    directory = params["directory"]
    if not os.path.isabs(directory) or any(ord(char) < 32 for char in directory):
        module.fail_json(msg="sglang_lease: directory must be an absolute path without control characters, got %r"
                         % directory)
    if not params["id"]:
        module.fail_json(msg="sglang_lease: id is required (the action plugin sets the run's own when it is omitted)")
    lease = _lease.Lease(directory)
    unit = params["unit"]
    ttl = _lease.ttl_for(params["ttl"], params["restart_timeout"], params["gate_timeout"])
    try:
        if params["state"] == "released":
            result = lease.release(unit, params["id"], check_mode=module.check_mode)
            message = {"released": "gave back the host lease on %s" % unit,
                       "not held": "the host lease on %s was not held" % unit,
                       "held by another": "the host lease on %s is held by another run (%s): left alone"
                       % (unit, _lease.describe(result["lease"], lease.clock(), lease.left(result["lease"])))
                       }.get(result["result"], "")
            module.exit_json(changed=False, message=message, **dict(result, **_lease.meaning(result["result"])))
        if params["state"] == "renewed":
            result = lease.renew(unit, params["id"], ttl, check_mode=module.check_mode)
            if result["result"] != "renewed":
                module.fail_json(msg="the host lease on %s is no longer this run's: %s" % (
                    unit, "nobody holds it" if result["lease"] is None else
                    "another run holds it: " + _lease.describe(result["lease"], lease.clock(), lease.left(result["lease"]))),
                    **dict(result, **_lease.meaning(result["result"])))
            module.exit_json(changed=False, message="renewed this run's host lease on %s (%d s)" % (unit, ttl),
                             **dict(result, **_lease.meaning("renewed")))
        result = lease.acquire(unit, params["id"], params["owner"], ttl, params["wait"],
                               force=params["force"], check_mode=module.check_mode, replace=params["replace"])
    except _lease.LeaseHeld as exc:
        module.fail_json(msg=str(exc), result="held", lease=exc.holder, waited=int(exc.waited),
                         **_lease.meaning("held"))
    except ValueError as exc:
        module.fail_json(msg="sglang_lease: %s" % exc)
    except OSError as exc:
        module.fail_json(msg="sglang_lease: the lease on %s in %s could not be read or written: %s"
                         % (unit, directory, exc))
    now = lease.clock()

    def holder(record):
        return _lease.describe(record, now, lease.left(record, now))

    message = {
        "acquired": "took the host lease on %s" % unit,
        "renewed": "renewed this run's host lease on %s" % unit,
        "expired": "took over the host lease on %s from a run that died: %s" % (unit, holder(result["previous"])),
        "gone": "took over the host lease on %s from a run gone from its controller (its ansible-playbook no longer "
                "runs): %s" % (unit, holder(result["previous"])),
        "broken": "BROKE the live host lease on %s (force): %s" % (unit, holder(result["previous"])),
        "free": "check mode: the host lease on %s is free" % unit,
        "held": "check mode: the host lease on %s is held by another run: %s (what this check reports may change "
                "under it)" % (unit, holder(result["lease"])),
    }[result["result"]]
    if result["waited"]:
        message += " after waiting %d s" % result["waited"]
    meaning = _lease.meaning(result["result"])
    if meaning["contended"] or result["waited"]:   # expired, gone, broken, held; or taken after a wait: said
        module.warn(message)
    module.exit_json(changed=False, message=message, **dict(result, **meaning))


if __name__ == "__main__":
    main()
