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
  - A lease whose run died expires at its C(expires_at) (O(ttl) seconds after it was last taken or renewed, host
    clock) and is taken over (RV(result=expired)); O(force=true) breaks a live one (RV(result=broken)). Both
    report the previous holder in RV(previous). The lease directory is on tmpfs by default, so a reboot ends every
    lease.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the lease is free (RV(result=free), RV(result=renewed)) or held (RV(result=held)); writes and waits for nothing.
  diff_mode:
    support: none
    details: The lease is run bookkeeping; RV(result) and RV(message) say what was done.
  platform:
    details: Linux hosts (flock, tmpfs under /run).
options:
  state:
    description: V(acquired) (take or renew, waiting at most O(wait)) or V(released) (give back, when O(id) holds it).
    type: str
    choices: [acquired, released]
    default: acquired
  unit:
    description: The unit the lease is on, with its suffix (C(sglang-kimi.service)).
    type: str
    required: true
  id:
    description: This run's lease id (the roles make one per C(ansible-playbook) run, fact C(gpuserve_lease_id)).
    type: str
    required: true
  owner:
    description:
      - Who holds it, for the message a waiting run prints; keys C(controller), C(user), C(play), C(pid) (the
        controller's ansible-playbook process, with which a later run of the same controller tells a dead holder).
    type: dict
    default: {}
  ttl:
    description: Seconds after which a lease that was not renewed counts as the lease of a dead run.
    type: int
    default: 7200
  wait:
    description: Seconds to wait for a lease another live run holds, then fail naming it.
    type: int
    default: 900
  force:
    description: Break a live lease of another run (its run is known to be dead).
    type: bool
    default: false
  directory:
    description: Where the leases are (absolute path; tmpfs by default).
    type: path
    default: /run/gpuserve-sglang
"""

EXAMPLES = r"""
- name: Take the host lease on the server unit
  gpuserve.sglang.sglang_lease:
    unit: sglang-kimi.service
    id: "{{ gpuserve_lease_id }}"
    owner: {controller: ops-1, user: alice, play: Deploy SGLang}
  register: lease

- name: Give it back
  gpuserve.sglang.sglang_lease:
    state: released
    unit: sglang-kimi.service
    id: "{{ gpuserve_lease_id }}"
  when: lease.result != 'renewed'
"""

RETURN = r"""
result:
  description:
    - V(acquired), V(renewed), V(expired) (taken over from a dead run), V(broken) (O(force)); V(released),
      V(not held), V(held by another) (left alone); in check mode V(free) or V(held).
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
      V(expired), V(broken); in check mode V(free)). V(false) when it only renewed the run's own lease.
  returned: always
  type: bool
contended:
  description:
    - Whether another run held the lease when the call came - it still does (V(held), V(held by another)), or it
      was taken over from a run that died (V(expired)) or broken (V(broken)); the roles then say so.
  returned: always
  type: bool
previous:
  description: The lease taken over (expired) or broken (force); null otherwise.
  returned: state is acquired
  type: dict
waited:
  description: Seconds waited for another run's lease.
  returned: state is acquired
  type: int
message:
  description: One line on what happened, naming a previous holder.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _lease


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["acquired", "released"], default="acquired"),
            unit=dict(type="str", required=True),
            id=dict(type="str", required=True),
            owner=dict(type="dict", default={}),
            ttl=dict(type="int", default=7200),
            wait=dict(type="int", default=900),
            force=dict(type="bool", default=False),
            directory=dict(type="path", default=_lease.LEASE_DIR),
        ),
        supports_check_mode=True,
    )
    params = module.params
    directory = params["directory"]
    if not os.path.isabs(directory) or any(ord(char) < 32 for char in directory):
        module.fail_json(msg="sglang_lease: directory must be an absolute path without control characters, got %r"
                         % directory)
    lease = _lease.Lease(directory)
    unit = params["unit"]
    try:
        if params["state"] == "released":
            result = lease.release(unit, params["id"], check_mode=module.check_mode)
            message = {"released": "gave back the host lease on %s" % unit,
                       "not held": "the host lease on %s was not held" % unit,
                       "held by another": "the host lease on %s is held by another run (%s): left alone"
                       % (unit, _lease.describe(result["lease"], lease.clock()))}.get(result["result"], "")
            module.exit_json(changed=False, message=message, **dict(result, **_lease.meaning(result["result"])))
        result = lease.acquire(unit, params["id"], params["owner"], params["ttl"], params["wait"],
                               force=params["force"], check_mode=module.check_mode)
    except _lease.LeaseHeld as exc:
        module.fail_json(msg=str(exc), result="held", lease=exc.holder, waited=int(exc.waited),
                         **_lease.meaning("held"))
    except ValueError as exc:
        module.fail_json(msg="sglang_lease: %s" % exc)
    except OSError as exc:
        module.fail_json(msg="sglang_lease: the lease on %s in %s could not be read or written: %s"
                         % (unit, directory, exc))
    now = lease.clock()
    message = {
        "acquired": "took the host lease on %s" % unit,
        "renewed": "renewed this run's host lease on %s" % unit,
        "expired": "took over the host lease on %s from a run that died: %s"
                   % (unit, _lease.describe(result["previous"], now)),
        "broken": "BROKE the live host lease on %s (force): %s" % (unit, _lease.describe(result["previous"], now)),
        "free": "check mode: the host lease on %s is free" % unit,
        "held": "check mode: the host lease on %s is held by another run: %s (what this check reports may change "
                "under it)" % (unit, _lease.describe(result["lease"], now)),
    }[result["result"]]
    if result["waited"]:
        message += " after waiting %d s" % result["waited"]
    meaning = _lease.meaning(result["result"])
    if meaning["contended"]:   # expired, broken, held: what acquire() can answer of _lease.CONTENDED
        module.warn(message)
    module.exit_json(changed=False, message=message, **dict(result, **meaning))


if __name__ == "__main__":
    main()
