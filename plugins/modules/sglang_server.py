#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_server
short_description: The SGLang server's on-host life - compare, land, restart, verify, gates, keep or roll back
version_added: "1.1.0"
description:
  - Takes the desired state of one SGLang server unit on one host (the unit, its environment file, the secrets file
    for SGLang's C(--config), the launcher, the directories, the other files the server reads) and does, in Python on
    the host - compare with what is there (the diff in C(--diff)); open a write-ahead transaction
    (C(<backup_dir>/<name>.last-good/txn.json), each unit its own state directory) with a copy of every file it will replace; land the files atomically
    (temporary file and rename; the unit only after C(systemd-analyze verify) accepted it); enable, daemon-reload;
    restart ONCE (through C(deactivating)) or start, and verify the new invocation (M(gpuserve.sglang.sglang_service)'s
    runner); run the gates (benchmark, answers); then keep the set the verified invocation read as the last good one,
    write the deployment record and claim only what it rendered - or restore EVERY file the change touched and
    verify the restored server.
  - A rollback or change an earlier run left open (a killed run) is finished first, whatever this call was asked and
    also when the unit is stopped; the call then fails saying so (run it again to apply its change).
  - A running invocation no verified start knows (a killed run's, a reboot, a crash restarted by systemd) is verified
    inside the rollback's reach; a running invocation older than a file it reads is restarted once; an unchanged host
    costs one call that writes nothing.
  - O(phase) splits the work for a group of hosts that moves as one (the nodes of one server, a prefill/decode pair);
    the YAML takes the verdict across hosts.
  - The logic is in C(plugins/module_utils/_server/) (a state machine tested without a host); standard library only
    on the host.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.action_plugin
attributes:
  check_mode:
    support: full
    details:
      - Reads and plans only; returns RV(action), RV(reasons) and RV(diff), writes nothing and restarts nothing.
  diff_mode:
    support: full
    details:
      - Each file that would change, before and after; the secrets file's text is never shown, the environment
        file's is masked by the collection's one masking rule.
  platform:
    details: Linux hosts with systemd.
  action:
    details: With O(role_inputs) (the server role's call), the action plugin computes every other option from the
      role's variables on the controller, once, after the host read; without it the options go to the module as
      given.
options:
  role_inputs:
    description:
      - The server role's seam - C(host) (the role's host read, M(gpuserve.sglang.sglang_host_facts)), C(unit) (the
        rendered unit) and C(launcher) (the launcher's source). The action plugin then reads the role's variables
        (C(sglang_*)) and sets the unit, env, secrets, launcher, dirs, reads, install_record, backup, service, gates,
        record and venv_link options itself (C(plugins/plugin_utils/_server_payload.py)).
      - Leave it out to set those options yourself.
      - For a server over several hosts (C(sglang_server_nodes)) the action plugin also takes the group's verdict
        before the phase, from each node's registered result (C(module_utils/_server/group.py)) - before
        V(restart) every node prepared, before V(decide) every node restarted and verified - and where it is a no
        it fails without running the module; it sets O(force_restart), O(group) and O(decision) where not given.
    type: dict
  due_from:
    description:
      - With O(state=due), no module runs - the variable each node registered its own O(state=due) result under.
        The action plugin answers RV(due) - a restart is due here or on any node of C(sglang_server_nodes) (the
        server restarts as one) - and RV(reasons), naming each other node where it is due.
    type: str
  companion_units:
    description:
      - Units beside the server that hold its GPU memory (the Weight Cache Daemon's, C(sglang_weight_cache)) - a
        rollback stops them before the restored unit starts (a restored client starts its daemon again), and
        O(free_gpus) never stops their processes.
    type: list
    elements: str
    default: []
  name:
    description: The unit's name without C(.service).
    type: str
    required: true
  state:
    description:
      - V(deployed) - the desired state lands, the server restarts when due, is verified and gated (O(phase)).
      - V(verified) - verify the running invocation; writes NOTHING (not even the service state file).
      - V(due) - read and plan only; RV(due) and RV(reasons).
    type: str
    choices: [deployed, verified, due]
    default: deployed
  phase:
    description:
      - V(converge) - one host, all of it in one call.
      - V(prepare) - a group's first phase - finish an open change, land, enable, reload; no restart (RV(restart_due)).
        A group change an earlier run left open is not settled here - it is reported (RV(group_state)) and nothing
        lands.
      - V(restart) - restart (or start, or verify) when due here or O(force_restart), then the gates where
        O(gates_here). A node where nothing restarts opens no transaction.
      - V(decide) - the group's verdict was a pass - the decision (keep) recorded in this node's open change before
        any node acts on it.
      - V(commit) - keep the set, close the change, venv link, record, claim.
      - V(restore) - the group's verdict was a no - put the last good set back and verify it (O(reason)); refused
        where this node's change was decided kept.
      - V(finish) - the group's decision O(decision) on this node - commit where this node's open change is the
        decided group change (or none is open), else restore. Idempotent.
    type: str
    choices: [converge, prepare, restart, decide, commit, restore, finish]
    default: converge
  force_restart:
    description: With O(phase=restart) - restart although nothing is due here (a restart due on one node is due on all).
      With O(role_inputs) and not given - C(sglang_restart_forced), or a restart due on any node of the server.
    type: bool
    default: false
  group:
    description: The group change this call is a phase of (the run's id) - recorded in the transaction and in the
      last good set kept by it.
    type: str
    default: ""
  decision:
    description: With O(phase=finish) - the group's decision (C(group), the group change; C(keep), keep it or not),
      from the one verdict function (C(module_utils/_server/group.py)).
    type: dict
    default: {}
  reason:
    description: With O(phase=restore) - why the group restores (in the message).
    type: str
    default: the group's verdict was a no
  unit:
    description: The unit file (0644 root:root); checked with C(systemd-analyze verify) before it lands.
    type: dict
    required: true
    suboptions:
      path: {description: Where it lives., type: path, required: true}
      content: {description: Its text., type: str, required: true}
  env:
    description: The environment file (0600 root:root).
    type: dict
    required: true
    suboptions:
      path: {description: Where it lives., type: path, required: true}
      content: {description: Its text (may hold the API key; never logged)., type: str, required: true}
  secrets:
    description: The secrets file SGLang reads with C(--config) (0640 root:O(secrets.group)); absent when empty.
    type: dict
    suboptions:
      path: {description: Where it lives., type: path, required: true}
      content: {description: Its text; empty means the file must be absent. Never logged., type: str, default: ""}
      group: {description: Its group (the service user's)., type: str, default: root}
  launcher:
    description: The launcher that masks the keys in SGLang's output (0755 root:root).
    type: dict
    suboptions:
      path: {description: Where it lives., type: path, required: true}
      content: {description: Its text., type: str, required: true}
  dirs:
    description: Directories that must exist (root-owned).
    type: list
    elements: dict
    default: []
    suboptions:
      path: {description: The directory., type: path, required: true}
      mode: {description: Its mode., type: str, default: "0755"}
  reads:
    description: Other files the server reads at its start (nccl.env, sitecustomize.py, the .pth hook); restorable.
    type: list
    elements: path
    default: []
  install_record:
    description: The install record of the venv the unit runs - read at start (a newer one makes the invocation
      stale), never restored.
    type: path
  backup_dir:
    description: Where the replaced units, the last-good set and the transaction live.
    type: path
    default: /etc/sglang/backup
  backup_keep:
    description: Timestamped copies of replaced units kept.
    type: int
    default: 5
  keep_secrets:
    description: Keep (and restore) the secrets file in the last-good set; off, a rollback never undoes a rotated key.
    type: bool
    default: false
  rollback:
    description: Put the last good set back when verification or a gate fails.
    type: bool
    default: true
  service:
    description: How the restart is verified (M(gpuserve.sglang.sglang_service)'s options).
    type: dict
    default: {}
    suboptions:
      timeout: {description: Seconds the restart may take., type: int, default: 1800}
      health_url: {description: The server's /health URL., type: str}
      expect: {description: Regular expressions each start must print., type: list, elements: str, default: []}
      extra_fail_patterns: {description: More fatal lines., type: list, elements: str, default: []}
      state_dir: {description: The verified-start records., type: path, default: /var/lib/gpuserve-sglang}
  api_key:
    description: The server's API key, for the gates (C(Authorization) header). Never logged.
    type: str
    default: ""
  secrets_to_mask:
    description: Every key - masked in every message and result (the one masking rule).
    type: list
    elements: str
    default: []
  stop_processes:
    description: Stray servers to stop before the start (M(gpuserve.sglang.sglang_stop_processes)).
    type: dict
    default: {}
    suboptions:
      match: {description: Fixed strings of their command lines., type: list, elements: str, default: []}
      timeout: {description: Seconds between SIGTERM and SIGKILL., type: float, default: 30.0}
  free_gpus:
    description: Before a start of a unit that is down, stop what holds the GPUs (this host's processes only).
    type: dict
    default: {}
    suboptions:
      enabled: {description: Do it., type: bool, default: false}
      nvidia_smi: {description: The nvidia-smi binary., type: path, default: /usr/bin/nvidia-smi}
  gates_here:
    description: Run the gates on this host (node 0 of a server over several hosts).
    type: bool
    default: true
  bench:
    description: The benchmark gate's settings (M(gpuserve.sglang.sglang_bench)'s options plus C(baseline_tok_s),
      C(threshold_pct)); off when empty.
    type: dict
    default: {}
  answers:
    description: The correctness gate's options (M(gpuserve.sglang.sglang_answers)'s); off when empty.
    type: dict
    default: {}
  record:
    description: The deployment record's inputs (C(plugins/module_utils/_record.py) deploy_record's params, with
      C(record_md_path), C(record_json_path), C(python)); no record when empty.
    type: dict
    default: {}
  venv_link:
    description: Versioned venvs - the link follows the verified invocation's venv.
    type: dict
    default: {}
    suboptions:
      versioned: {description: The venv the unit runs., type: path}
      link: {description: The link., type: path}
  lock_dir:
    description:
      - "Where the unit's work lock is (C(<unit>.work), flock): a call that may change the host holds it for its
        whole duration, and a second call waits for it. A call whose controller died may still be finishing its
        restart or rollback on the host; the next run waits for it instead of acting beside it."
    type: path
    default: /run/gpuserve-sglang
  lock_wait:
    description: Seconds to wait for another call's work lock, then fail naming its pid (nothing changed).
      Default 2 x O(service.timeout) + 1800.
    type: int
  host_name:
    description: This host's name in messages (the inventory name); default the record's C(host), else the host's name.
    type: str
seealso:
  - module: gpuserve.sglang.sglang_service
"""

EXAMPLES = r"""
- name: Land, restart once, verify, gate, keep or roll back
  gpuserve.sglang.sglang_server:
    name: sglang-kimi
    unit: {path: /etc/systemd/system/sglang-kimi.service, content: "{{ unit_text }}"}
    env: {path: /etc/sglang/sglang-kimi.env, content: "{{ env_text }}"}
    secrets: {path: /etc/sglang/sglang-kimi.secrets.yaml, content: "{{ secrets_text }}", group: sglang}
    reads: [/etc/sglang/nccl.env]
    install_record: /opt/sglang/install-record.json
    service: {timeout: 3600, health_url: http://127.0.0.1:30000/health}
    secrets_to_mask: ["{{ sglang_api_key }}"]
  no_log: true

- name: Is a restart due here
  gpuserve.sglang.sglang_server:
    name: sglang-kimi
    state: due
    unit: {path: /etc/systemd/system/sglang-kimi.service, content: "{{ unit_text }}"}
    env: {path: /etc/sglang/sglang-kimi.env, content: "{{ env_text }}"}
  register: due
"""

RETURN = r"""
action:
  description: What the plan chose - V(finish_restore), V(restart), V(start), V(verify_only), V(keep_only), V(none)
    (V(verified) for O(state=verified)).
  returned: always
  type: str
strays:
  description:
    - The stray servers O(stop_processes.match) found, each with C(pid), C(cmdline) (keys masked) and C(result)
      (C(stopped), C(killed)..., or in check mode C(would stop)).
  returned: when O(stop_processes.match) is set
  type: list
  elements: dict
reasons:
  description: Why a restart is due (C(not running), C(unit would change), C(<path> changed after the running
    invocation started)...).
  returned: always
  type: list
  elements: str
phase:
  description: The phase of this call (O(phase)).
  returned: always
  type: str
due:
  description: Whether a restart is due (RV(reasons) not empty).
  returned: always
  type: bool
stale:
  description: The files the running invocation does not have (written after it started, or gone although its
    verified start had them).
  returned: always
  type: list
  elements: str
restart_due:
  description: O(phase=prepare) - whether this node restarts, starts or verifies in the restart phase.
  returned: with O(phase=prepare)
  type: bool
group_state:
  description: O(phase=prepare) - this node's open group change (C(open) - C(id), C(phase), C(decision)) and the group
    change its last good set was kept by (C(kept_group)); read by the group's verdict.
  returned: with O(phase=prepare)
  type: dict
group_decision:
  description: V(commit) once this node recorded the group's decision to keep (O(phase=decide) or O(phase=commit),
    also in a failed commit's result).
  returned: with O(phase=decide) and O(phase=commit)
  type: str
diff:
  description: Before and after of each file that changes (no secret in it).
  returned: always
  type: list
  elements: dict
actions:
  description: What this call did, in order.
  returned: always
  type: list
  elements: str
restart:
  description: The service runner's result of the restart, start or verification (invocation_id, main_pid, hicache,
    kv_cache, health_status, timeline, journal_tail...).
  returned: always
  type: dict
  contains:
    timeline:
      description:
        - Seconds - V(stopping), V(starting), V(loading), V(warming_up), V(total) as in sglang_service.
        - After a restart or start this call made - V(downtime_s), the time the server answered no request (from the
          restart asked, SIGTERM, to the new invocation proven ready - its ready line and /health 200), and V(phases),
          each named by the event that ends it, in the order they happened, adding up to V(downtime_s) - V(drain)
          (old main process exited), V(reap) (systemd's Stopped - its last process reaped), V(exec) (systemd's
          Started), V(process_start) (the first Load weight begin), V(weights), V(kv_pool), V(cuda_graphs),
          V(hicache_pool) (the last rank's line each), V(http_start), V(warm_up) (the ready line), V(ready_check)
          (/health 200); an event that did not happen gives its time to the next phase.
        - V(weight_load_s) (the slowest rank's C(Load weight end. elapsed=)), V(sglang_startup) (SGLang 0.5.17+'s own
          C(Engine startup timings)), V(gates_s) (the benchmark and answers gates after it; not downtime).
      returned: when a server was restarted, started or verified
      type: dict
      sample: {downtime_s: 27.755, phases: {drain: 6.124, reap: 0.0, exec: 0.027, process_start: 17.362,
               weights: 0.072, kv_pool: 0.174, cuda_graphs: 2.413, hicache_pool: 0.004, http_start: 0.396,
               warm_up: 1.083, ready_check: 0.1}, weight_load_s: 0.07, gates_s: 3.2, total: 27.805}
    predicted_downtime:
      description:
        - Check mode, when a restart or start is due - the downtime it would cost, from this host's recorded restarts
          (the deployment record's JSON twin and its history) - V(basis) (V(history) or V(no history)), V(match)
          (V(same) - same release, model and flags; V(release_model) - same release and model, other flags),
          V(restarts), V(downtime_s) (median), V(range_s), V(phases) (medians), V(from_records), V(weight_load_s)
          (the recorded weights phase - what loading the weights costs), V(weights_kept), V(weights_not_kept) (why the
          Weight Cache Daemon cannot keep them - speculative decoding, a release before 0.5.17, a quantization off the
          release's allow-list), V(release), V(model), V(msg).
      returned: check mode, when a restart or start is due
      type: dict
bench:
  description: The benchmark's result ({} when it did not run).
  returned: always
  type: dict
bench_gate:
  description: baseline_tok_s, baseline_source, tok_s, threshold_pct, change_pct, regression ({} when it did not run).
  returned: always
  type: dict
answers:
  description: The correctness gate's result ({} when off).
  returned: always
  type: dict
record:
  description: The deployment record written (changed, md_path, json_path, data).
  returned: always
  type: dict
inputs:
  description: What this run may claim - invocation_id, files (sha256, C(absent) or C(withheld)), mismatches.
  returned: always
  type: dict
rolled_back:
  description: Whether the last good set serves again after a failure.
  returned: always
  type: bool
rollback:
  description: The rollback - ok, put_back, removed, missing, source (V(manifest) or V(transaction)), result, msg.
  returned: always
  type: dict
verified:
  description: O(phase=restart) - the restart or start was verified.
  returned: with O(phase=restart)
  type: bool
gates_passed:
  description: O(phase=restart) - the gates passed here (or did not run here).
  returned: with O(phase=restart)
  type: bool
msg:
  description: On failure the reason, what the rollback did and the failed invocation's journal tail (masked).
  returned: always
  type: str
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.entry import ARGUMENT_SPEC, run_module


def main():
    # no 'Invoked with' line in the host's journal, whatever the task's no_log (_module.py, docs/security.md)
    run_module(QuietModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, no_log=True))


if __name__ == "__main__":
    main()
