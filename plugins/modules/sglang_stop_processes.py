#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_stop_processes
short_description: Stop the stray processes an operator names (a nohup SGLang server), never the unit's own
version_added: "0.2.0"
description:
  - For the takeover of a hand-made deployment, where an SGLang server started with C(nohup) outside systemd
    holds the GPUs and the port that the managed unit needs.
  - A process matches when one of O(match) (fixed strings, not regular expressions) is part of its command line
    (argv joined with spaces). Never matched, whatever O(match) says - this module and its ancestors (the Ansible
    connection), kernel threads, and every process whose cgroup is O(protect_unit)'s.
  - Each match gets SIGTERM, then SIGKILL after O(timeout) seconds, and is reported with how it ended
    (C(stopped), C(killed), C(gone)). C(--api-key)/C(--admin-api-key) values on a reported command line are
    masked.
  - Nothing matched changes nothing (a second run reports changed=false).
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Reports the processes it would stop and sends no signal.
  diff_mode:
    support: none
    details: Reports only.
  platform:
    details: Linux (reads C(/proc)).
options:
  match:
    description:
      - Fixed strings; a process whose command line holds one of them is stopped. Each at least 8 characters
        and without control characters (refused otherwise, before any signal).
    type: list
    elements: str
    required: true
  protect_unit:
    description: A systemd unit (V(sglang-kimi.service)) whose processes are never stopped.
    type: str
  timeout:
    description: Seconds between SIGTERM and SIGKILL.
    type: float
    default: 30
"""

EXAMPLES = r"""
- name: Stop the nohup server of the hand-made deployment (never the managed unit's processes)
  gpuserve.sglang.sglang_stop_processes:
    match: ["sglang.launch_server --model-path /shared/kimi-k2.5"]
    protect_unit: sglang-kimi.service
"""

RETURN = r"""
processes:
  description: The processes that matched, with what happened to each (in check mode C(would stop)).
  returned: always
  type: list
  elements: dict
  sample: [{"pid": 4242, "cmdline": "/root/ml-env/bin/python3 -m sglang.launch_server --api-key ********",
            "match": "sglang.launch_server", "result": "stopped"}]
"""

import os

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._strays import find, match_problems, stop


def main():
    module = QuietModule(
        argument_spec=dict(
            match=dict(type="list", elements="str", required=True),
            protect_unit=dict(type="str"),
            timeout=dict(type="float", default=30.0),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    matches = module.params["match"]
    problems = match_problems(matches)
    if module.params["timeout"] < 0:
        problems.append("timeout must be 0 or more, got %s" % module.params["timeout"])
    if problems:
        module.fail_json(msg="nothing was stopped: " + "; ".join(problems), processes=[])
    found = find("/proc", matches, protect_unit=module.params["protect_unit"], own_pid=os.getpid())
    for proc in found:
        if module.check_mode:
            proc["result"] = "would stop"
        else:
            proc["result"] = stop(proc["pid"], module.params["timeout"])
    stuck = [proc for proc in found if proc["result"] == "still running"]
    changed = any(proc["result"] in ("stopped", "killed", "would stop") for proc in found)
    if stuck:
        module.fail_json(msg="still running after SIGKILL: %s" % ", ".join(str(p["pid"]) for p in stuck),
                         processes=found, changed=changed)
    module.exit_json(changed=changed, processes=found)


if __name__ == "__main__":
    main()
