#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_service
short_description: The router's on-host life - compare, land, restart once, verify the workers, keep or roll back
version_added: "1.1.0"
description:
  - Takes the desired state of one router unit (sglang-router or SMG) on one host - the unit, its environment file
    (the workers' key), the launcher, the directories - and does, in Python on the host, what
    M(gpuserve.sglang.sglang_server) does for an SGLang server, with the SAME mechanism (the transaction, the atomic
    landing after C(systemd-analyze verify), the last good set, the rollback; C(plugins/module_utils/_server/)).
  - Compare with what is there (the diff in C(--diff)); land what differs; enable, daemon-reload; restart ONCE or
    start; verify the router as M(gpuserve.sglang.sglang_router_workers) V(reconciled) does - C(/readiness) and
    every worker listed healthy, a healthy worker an earlier run left out put back unless it is held out on purpose
    (O(router.held_out_file)); then keep the set and write the record, or put back every file the change touched,
    restart and verify that the router answers again, and fail saying so with the router's journal.
  - The environment file holds the key - never copied into the last good set, never put back by a rollback, its text
    never in a diff. An unchanged router costs one call that writes nothing (the reconcile still runs).
  - No SGLang gate runs here (no benchmark, no answers, no HiCache texts).
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.action_plugin
attributes:
  check_mode:
    support: full
    details:
      - Reads and plans only; returns RV(action), RV(reasons) and the diff, writes nothing, restarts nothing.
  diff_mode:
    support: full
    details:
      - Each file that would change, before and after; the environment file's text is never shown.
  platform:
    details: Linux hosts with systemd.
  action:
    details: The action plugin writes the environment file's text from O(api_key) when O(env.content) is left out;
      with O(router_inputs=true) it runs the router role's preflight instead (no module runs).
options:
  router_inputs:
    description:
      - The router role's preflight (C(plugins/plugin_utils/_router_role.py)) - no unit is touched; the action plugin
        reads the role's variables (C(sglang_router_*)), looks at the host (the base interpreter, the wheel
        directory), and fails with every refusal, joined by C(; ), before anything changes. Otherwise it returns
        everything the role's tasks and templates read, computed once - C(release), C(version), C(gateway) (the
        release's C(package), C(version), C(module), C(wheel_sha256)), C(gateways), C(known), C(data_file),
        C(lock_file), C(host_lock), C(venv), C(python), C(pip_args), C(unit), C(env), C(backup), C(url),
        C(workers), C(kinds), C(pd), C(loopback), C(flags) (those of C(ExecStart)) and C(problems) (V([])).
      - Only in a task of the role gpuserve.sglang.router (it registers the result as C(_router_in)); the other
        options are not given then.
    type: bool
    default: false
  name:
    description: The unit's name without C(.service).
    type: str
    required: true
  unit:
    description: The unit file (0644 root:root), checked with C(systemd-analyze verify) before it lands.
    type: dict
    required: true
    suboptions:
      path: {description: Where it lands., type: path, required: true}
      content: {description: Its text., type: str, required: true}
  env:
    description: The environment file (0600 root:root), the workers' key.
    type: dict
    required: true
    suboptions:
      path: {description: Where it lands., type: path, required: true}
      content:
        description:
          - Its text. Left out, the module's action plugin writes it from O(api_key) (a header, and
            C(SGLANG_ROUTER_API_KEY) when there is a key), as the router role does.
        type: str
  launcher:
    description: The launcher that hands the key to the router inside its process (0644 root:root).
    type: dict
    suboptions:
      path: {description: Where it lands., type: path, required: true}
      content: {description: Its text., type: str, required: true}
  dirs:
    description: Directories that must exist (root:root).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      mode: {description: Its mode., type: str, default: "0755"}
  backup_dir:
    description: The last good set (C(<name>.last-good/)), the transaction and the replaced units' copies.
    type: path
    required: true
  backup_keep:
    description: How many timestamped copies of replaced units to keep.
    type: int
    default: 5
  rollback:
    description: Put the previous files back when the new configuration fails verification.
    type: bool
    default: true
  api_key:
    description: The key the router checks and hands to its workers (its worker API is asked with it).
    type: str
    default: ""
  router:
    description: How the router is verified.
    type: dict
    required: true
    suboptions:
      url: {description: The router's own URL on this host., type: str, required: true}
      workers: {description: The workers it must list healthy., type: list, elements: str, default: []}
      kinds: {description: Prefill/decode kinds behind a gateway in PD mode., type: dict, default: {}}
      held_out_file: {description: Workers held out on purpose (never put back)., type: path}
      timeout: {description: Seconds for the verification., type: float, default: 120}
  record:
    description: The deployment record (markdown), written after a verified start or restart, or when missing.
    type: dict
    default: {}
    suboptions:
      path: {description: Where it is written., type: path}
      text: {description: "Its text; the line C(<!-- gpuserve: verification -->) becomes the verification.", type: str}
  host_name:
    description: This host's name in the messages.
    type: str
"""

EXAMPLES = r"""
- name: The router's on-host life
  gpuserve.sglang.sglang_router_service:
    name: sglang-router
    unit:
      path: /etc/systemd/system/sglang-router.service
      content: "{{ lookup('template', 'sglang-router.service.j2') }}"
    env: {path: /etc/sglang-router/sglang-router.env}   # its text from api_key (the action plugin)
    backup_dir: /etc/sglang-router/backup
    router: {url: "http://127.0.0.1:30000", workers: [http://gpu-1:30000]}

- name: The router role's preflight (its tasks read the result, _router_in)
  gpuserve.sglang.sglang_router_service:
    router_inputs: true
  register: _router_in
"""

RETURN = r"""
action:
  description: What the call did - V(none), V(restart), V(start), V(verify_only), V(keep_only), V(finish_restore).
  returned: without O(router_inputs)
  type: str
reasons:
  description: Why a restart was due (a file that would change, not running...).
  returned: without O(router_inputs)
  type: list
actions:
  description: What was done, in order.
  returned: without O(router_inputs)
  type: list
restart:
  description: The runner's result - C(changed), C(action), C(invocation_id), C(routers), C(put_back), C(held_out).
  returned: without O(router_inputs)
  type: dict
rolled_back:
  description: Whether a rollback put the previous set back and it verified.
  returned: without O(router_inputs)
  type: bool
record:
  description: The record written (C(changed), C(path)), or {}.
  returned: without O(router_inputs)
  type: dict
problems:
  description: With O(router_inputs) - the preflight's refusals (V([]) when the task succeeds).
  returned: with O(router_inputs)
  type: list
  elements: str
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc, _router
from ansible_collections.gpuserve.sglang.plugins.module_utils._router_service import (
    JOURNAL_LINES, RouterLifecycle, RouterRunner, RouterSystemctl, record_text, router_desired, write_record)
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import mask, module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import LifecycleFailure

ENV = {"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0", "SYSTEMD_LESS": ""}
FILE = dict(path=dict(type="path", required=True), content=dict(type="str", required=True))


def run(argv, timeout=_proc.DEFAULT_TIMEOUT, max_lines=None):
    return _proc.run(argv, timeout=timeout, max_lines=max_lines, env=ENV)


def main():
    module = QuietModule(
        argument_spec=dict(
            router_inputs=dict(type="bool", default=False),  # the action plugin's (no module runs)
            name=dict(type="str", required=True),
            unit=dict(type="dict", required=True, options=dict(FILE)),
            env=dict(type="dict", required=True, options=dict(path=dict(type="path", required=True),
                                                              content=dict(type="str", no_log=True))),
            launcher=dict(type="dict", options=dict(FILE)),
            dirs=dict(type="list", elements="dict", default=[],
                      options=dict(path=dict(type="path", required=True), mode=dict(type="str", default="0755"))),
            backup_dir=dict(type="path", required=True),
            backup_keep=dict(type="int", default=5),
            rollback=dict(type="bool", default=True),
            api_key=dict(type="str", default="", no_log=True),
            router=dict(type="dict", required=True, options=dict(
                url=dict(type="str", required=True), workers=dict(type="list", elements="str", default=[]),
                kinds=dict(type="dict", default={}), held_out_file=dict(type="path"),
                timeout=dict(type="float", default=120))),
            record=dict(type="dict", default={}, options=dict(path=dict(type="path"), text=dict(type="str"))),
            host_name=dict(type="str"),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    p = module.params
    if p["env"]["content"] is None:
        module.fail_json(msg="nothing was changed: env.content is computed by the module's action plugin; call the "
                             "module by its name gpuserve.sglang.sglang_router_service, or give env.content")
    if p["name"].endswith(".service") or p["backup_keep"] < 0 or p["router"]["timeout"] <= 0:
        module.fail_json(msg="nothing was changed: name must be given without .service, backup_keep 0 or more and "
                             "router.timeout a positive number of seconds")
    desired = router_desired(p)
    systemctl = RouterSystemctl(run, module.get_bin_path("systemctl", required=True))
    journalctl = module.get_bin_path("journalctl", required=True)
    key = p["api_key"] or None
    settings = dict(routers=[p["router"]["url"]], workers=p["router"]["workers"], kinds=p["router"]["kinds"],
                    held_out_file=p["router"]["held_out_file"], timeout=p["router"]["timeout"], api_key=key,
                    worker_api_key=key)

    def verify(state, sleep):
        return _router.run(dict(settings, state=state), sleep=sleep)

    def journal():
        rc, out = run([journalctl, "-u", desired.unit, "-n", str(JOURNAL_LINES), "--no-pager", "-o", "cat"])[:2]
        return out.splitlines() if rc == 0 else []

    def runner_factory(state, read_only=False, restored=False, restore=False):
        return RouterRunner(systemctl, desired.unit, state, verify, journal, restored=restored or restore,
                            timeout=p["router"]["timeout"], check_mode=module.check_mode)

    def recorder(verified, bench):
        record = p["record"] or {}
        text = record_text(record.get("text") or "", verified, p["router"]["workers"], p["router"]["url"])
        return write_record(record["path"], text, check_mode=module.check_mode)

    lifecycle = RouterLifecycle(desired, systemctl, run, runner_factory,
                                recorder=recorder if (p["record"] or {}).get("path") else None,
                                check_mode=module.check_mode)
    try:
        result = lifecycle.converge()
    except LifecycleFailure as exc:
        result = dict(exc.result)
        for notice in result.pop("notices", []):
            module.warn(notice)
        result.pop("msg", None)
        module.fail_json(msg=exc.msg, **result)
    except Exception as exc:  # pylint: disable=broad-except  # never a traceback (it may carry a key)
        module.fail_json(msg=mask("%s: unexpected error: %s: %s" % (p["name"], type(exc).__name__, exc),
                                  [p["api_key"]]), actions=lifecycle.result.get("actions", []))
    for notice in result.pop("notices", []):
        module.warn(notice)
    put_back = (result.get("restart") or {}).get("put_back") or {}
    if put_back:
        result["changed"] = True
    held = (result.get("restart") or {}).get("held_out") or []
    if held:
        module.warn("held out on purpose until a run verifies them (%s): %s"
                    % (p["router"]["held_out_file"], ", ".join(held)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
