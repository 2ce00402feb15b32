#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_service
short_description: Restart, start or verify an SGLang server unit and prove the new process is ready
version_added: "0.1.0"
description:
  - Restarts (or starts, or only verifies) a systemd unit that runs an SGLang 0.5.9 server, rides through
    the C(deactivating) state of a slow drain without blocking, follows the unit until its InvocationID
    changes, and decides readiness from the journal lines of B(that) invocation only.
  - Ready means the ready line of this invocation (default SGLang's C(The server is fired up and ready to roll!)),
    HTTP 200 from O(health_url) when given, every O(expect) pattern matched, and with HiCache one
    C(Allocating X GB host memory for hierarchical KV cache.) line per tensor-parallel rank before the ready line.
  - Fails fast, quoting the line, when a fail pattern appears in this invocation; when the unit fails, enters
    C(auto-restart), NRestarts grows or the InvocationID changes again (a crash loop); when the main process is
    gone; and at the deadline, naming the phase it was stuck in.
  - Issues at most one C(systemctl restart --no-block). When a stop or restart job is already in flight, or the
    unit is deactivating, it waits for that instead of queueing another.
  - Reads the journal with C(journalctl --all -o json _SYSTEMD_INVOCATION_ID=<id> + INVOCATION_ID=<id> +
    OBJECT_SYSTEMD_INVOCATION_ID=<id>), following it as journald writes it (one C(journalctl --follow) process), so the
    cost does not grow with the unit's history and the ready line is seen within journald's own delivery time.
  - Writes a state file per unit (root-only JSON under O(state_dir)) at each proven start. V(verified) on the same
    InvocationID takes the start-up facts from it once the start-up lines have left the journal (rotation,
    C(SystemMaxUse), C(--vacuum-*)) and checks the live part now (active, same invocation and main PID, no restart
    since, /health, no fatal text in what the journal holds). The first read of an invocation is bounded (its first
    20000 and last 2000 records).
  - Reports how the old invocation stopped (RV(stop) - systemd's C(Result), whether systemd killed it with SIGKILL
    after C(TimeoutStopSec), how long it took) and names it in any failure message.
  - Every option is checked before the host changes; a later error is a failure with the phase, the invocation and
    the journal tail, never a traceback. C(systemctl)/C(journalctl) calls have time limits and transient errors are
    retried. A unit file changed on disk (C(NeedDaemonReload=yes)) is reloaded before a start or restart.
  - Values of C(api_key)/C(admin_api_key) are masked in every returned line.
  - Logs each phase change to the host's journal under the identifier C(gpuserve-sglang-service)
    (C(journalctl -f -t gpuserve-sglang-service) follows a long restart).
  - Runs on the target with the Python standard library, C(systemctl) and C(journalctl) only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  name:
    description:
      - The unit, for example V(sglang-kimi) or V(sglang-kimi.service). C(.service) is added when no unit suffix is given.
    type: str
    required: true
  state:
    description:
      - V(restarted) queues one C(systemctl restart --no-block) (or joins a stop/restart already in flight) and
        waits until the new invocation is ready.
      - V(started) starts the unit only when it is not active (after a stop in flight ends), then waits until ready;
        an active unit is verified as with V(verified).
      - V(verified) changes nothing and verifies the current invocation (waits while it is still starting).
    type: str
    choices: [restarted, started, verified]
    default: verified
  timeout:
    description:
      - One deadline in seconds for stop, load and warm-up together.
    type: int
    default: 1800
  health_url:
    description:
      - When set, readiness also needs HTTP 200 from this URL (GET, no proxy), for example V(http://127.0.0.1:30000/health).
      - Polled only after the ready line appeared.
      - Required on a node other than node 0 of a server over several hosts (ExecStart's C(--nnodes N --node-rank K),
        K > 0). SGLang runs only schedulers there, prints no ready line and serves a health server (a constant 200)
        once every scheduler of the node is up; that answer and every one of the node's own global TP ranks in the
        journal (KV pool, HiCache host pool) prove the node.
    type: str
  ready_pattern:
    description:
      - Regular expression (Python C(re.search)) of the ready line. Default is the ready line of the release's
        text table (see O(release)).
    type: str
  release:
    description:
      - The SGLang release whose texts (ready line, KV and HiCache pools, server_args, fatal texts) the journal is
        read with, from the release tables taken from each release's wheel (C(_sglang_releases)).
      - Default is the version of the C(sglang) distribution that the interpreter of the unit's C(ExecStart) has
        (C(importlib.metadata), SGLang not imported); when there is none, every known release's texts.
      - A release without a table of its own is read with its neighbours' tables, a release newer than the newest
        with the newest's; the result's RV(sglang_texts) says which, and a HiCache failure names the text family
        and the lines seen instead.
    type: str
  hicache:
    description:
      - Whether HiCache must be proven (one host-allocation line per rank before the ready line).
      - Default is V(true) when the unit's C(ExecStart) has C(--enable-hierarchical-cache).
    type: bool
  hybrid:
    description:
      - Whether the model is a hybrid linear-attention model (Qwen3-Next / Qwen3.5 Gated DeltaNet, Nemotron-H) whose
        Mamba state pool must be proven on every rank (the release's text family C(mamba_pool), C(Mamba Cache is
        allocated ...)), and with HiCache its Mamba host pool on every rank where the release prints one (0.5.23).
      - Default from the model's C(config.json) (the C(--model-path) of the unit's C(ExecStart)) - C(layer_types)
        naming linear or mamba layers, C(full_attention_interval) or C(hybrid_override_pattern).
    type: bool
  ranks:
    description:
      - How many distinct scheduler ranks must show the HiCache host-allocation line in this invocation. A rank is
        the full tag SGLang prints (C(TP3), C(DP1 TP3), C(PP1 TP3 EP3)...; none with tp 1).
      - Default from C(ExecStart) - tp x pp, times dp when data parallelism runs whole replicas (no
        C(--enable-dp-attention)), else V(1).
    type: int
  expect:
    description:
      - More regular expressions that must each match a line of this invocation (at most 10 s after readiness).
    type: list
    elements: str
    default: []
  fail_patterns:
    description:
      - Regular expressions that fail the task at once when a line of this invocation matches.
      - Default is SGLang 0.5.9's fatal texts (host memory, KV memory, CUDA OOM, cuda graph, dead scheduler,
        initialisation failures, invalid arguments), most specific first; the most specific match is quoted.
    type: list
    elements: str
  extra_fail_patterns:
    description:
      - Regular expressions added to O(fail_patterns) (or to its default).
    type: list
    elements: str
    default: []
  poll_interval:
    description:
      - Seconds between two readings of the unit state and O(health_url); with O(follow) the journal wakes the
        module earlier as soon as a line arrives.
    type: float
    default: 0.5
  follow:
    description:
      - Follow the journal with one streaming C(journalctl --follow) process (V(true)) instead of reading it every
        O(poll_interval) (V(false)).
    type: bool
    default: true
  state_dir:
    description:
      - Directory of the state files (one C(<unit>.json) per unit, directory 0700, files 0600).
    type: path
    default: /var/lib/gpuserve-sglang
  progress:
    description:
      - Log phase changes to the host's journal under the identifier C(gpuserve-sglang-service).
    type: bool
    default: true
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Nothing is queued; the result says what would be done. V(verified) (and V(started) on an active unit)
        verify as usual, since verifying only reads.
  diff_mode:
    support: none
    details: Reports only; there is nothing to diff.
  platform:
    details: Linux hosts with systemd (tested with systemd 252 on Debian 12) and journald.
notes:
  - Needs systemd (tested with systemd 252, Debian 12) and a persistent or volatile journal.
  - When C(ExecStart) runs a wrapper script instead of the server, set O(hicache) and O(ranks) explicitly.
  - The HiCache line means "about to allocate", so a failure after it (for example pinning the memory) shows as a
    fatal line or a dead process, which this module also watches.
seealso:
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Restart the SGLang server and wait until this invocation is ready (HiCache on 8 ranks, /health 200)
  gpuserve.sglang.sglang_service:
    name: sglang-kimi
    state: restarted
    health_url: http://127.0.0.1:30000/health
    timeout: 1800

- name: Verify the running server without touching it
  gpuserve.sglang.sglang_service:
    name: sglang-kimi
  register: sglang

- name: Show the host pool
  ansible.builtin.debug:
    msg: "{{ sglang.hicache.host_pool_gb_total }} GB pinned over {{ sglang.hicache.ranks_seen | length }} ranks"

- name: Start when stopped, expect speculative decoding with the overlap scheduler, fail on an extra text
  gpuserve.sglang.sglang_service:
    name: sglang-kimi.service
    state: started
    expect:
      - Spec v2 is enabled for eagle/eagle3 speculative decoding
    extra_fail_patterns:
      - Overlap scheduler is disabled when spec v2 is off
"""

RETURN = r"""
changed:
  description: Whether this task queued a job (a restart or a start).
  returned: always
  type: bool
action:
  description: What the task did or would do (V(restart), V(start), V(start_after_stop), V(join) a restart in flight, V(none)).
  returned: always
  type: str
  sample: restart
invocation_id:
  description: InvocationID of the invocation that was verified (the new one after a restart).
  returned: when an invocation was followed
  type: str
  sample: 78140f679af74fdba0aba4e5d4531774
previous_invocation_id:
  description: InvocationID before the task acted.
  returned: always
  type: str
main_pid:
  description: MainPID of the verified invocation (last reading).
  returned: always
  type: int
n_restarts:
  description: NRestarts of the unit (last reading).
  returned: always
  type: int
timeline:
  description:
    - Seconds spent V(stopping) (until the new InvocationID), V(starting) (until its first line), V(loading) (until the
      HTTP server started), V(warming_up) (until ready line and HTTP 200), and V(total). V(null) where unknown.
    - For an invocation that began before the task, loading and warming_up come from journal timestamps.
    - After a restart or start this task made, V(downtime_s) (from the restart asked to the new invocation proven
      ready) and V(phases) (seconds per phase, in the order they happened, adding up to V(downtime_s) - V(drain),
      V(reap), V(exec), V(process_start), V(weights), V(kv_pool), V(cuda_graphs), V(hicache_pool), V(http_start),
      V(warm_up), V(ready_check); an event that did not happen gives its time to the next phase).
    - V(weight_load_s) (the slowest rank's C(Load weight end. elapsed=)) and V(sglang_startup) (SGLang 0.5.17+'s own
      C(Engine startup timings)) where SGLang printed them.
  returned: always
  type: dict
  sample: {stopping: 21.4, starting: 0.2, loading: 2.1, warming_up: 1.3, total: 25.1, downtime_s: 24.9,
           phases: {drain: 20.1, reap: 0.2, exec: 0.1, process_start: 1.0, weights: 0.4, kv_pool: 0.3,
                    cuda_graphs: 0.9, hicache_pool: 0.1, http_start: 0.3, warm_up: 1.3, ready_check: 0.2},
           weight_load_s: 0.4}
hybrid:
  description:
    - A hybrid model's Mamba state pool - V(ranks_seen), V(ranks_expected), V(ranks_missing),
      V(state_slots_per_rank) (C(max_mamba_cache_size), the smallest), and with HiCache V(host_pool_ranks_seen) and
      V(host_pool_gb_per_rank).
  returned: when the model is hybrid or its Mamba pool lines were seen
  type: dict
hicache:
  description:
    - V(ranks_seen) (sorted list of ranks with a host-allocation line before the ready line - numbers with plain TP
      tags, the tags themselves such as V(DP0 TP0) otherwise), V(ranks_expected), V(ranks_missing),
      V(host_pool_gb_per_rank) (GB as logged, the max), V(host_pool_gb_min), V(host_pool_gb_max),
      V(host_pool_gb_total) (sum over ranks), V(requested) (each rank's pool against C(--hicache-ratio) /
      C(--hicache-size) given the KV pool it printed, SGLang's own sizing; V(off) lists the ranks that differ).
  returned: when HiCache is on or its lines were seen
  type: dict
  sample: {ranks_seen: [0, 1, 2, 3, 4, 5, 6, 7], ranks_expected: 8, ranks_missing: [], host_pool_gb_per_rank: 20.85,
           host_pool_gb_total: 166.8}
kv_cache:
  description: KV pool of this invocation as logged (V(tokens_per_rank), V(gb_per_rank), V(ranks), V(max_total_num_tokens), draft pool when present).
  returned: when the KV line was seen
  type: dict
  sample: {tokens_per_rank: 159277, gb_per_rank: 10.42, ranks: [0, 1, 2, 3, 4, 5, 6, 7], max_total_num_tokens: 159277}
sglang_texts:
  description:
    - Which SGLang release the journal was read as, and how it was learnt (V(release), V(how), V(tables) used,
      V(known) releases, V(note) when the release has no table of its own or was not found).
  returned: when the unit was read
  type: dict
  sample: {release: 0.5.23, how: importlib.metadata of /opt/sglang/venv/bin/python, tables: [0.5.23], known: [0.5.9, 0.5.23]}
node:
  description:
    - On a node of a server over several hosts (ExecStart's C(--nnodes)), which node this is and which ranks it must
      prove. V(tp_ranks) are the global TP ranks SGLang runs on it (the release's rule, read from its
      entrypoints/engine.py); V(null) with pipeline parallelism, where ranks are counted, not named.
  returned: when ExecStart has --nnodes above 1
  type: dict
  sample: {nnodes: 2, node_rank: 1, tp_ranks: [8, 9, 10, 11, 12, 13, 14, 15], ranks_expected: 8}
disaggregation:
  description:
    - On a server of a prefill/decode pair (ExecStart's C(--disaggregation-mode)), its mode and, on node 0 of a
      prefill server, its KV bootstrap server as proven (every decode server reaches it per request). A prefill
      server is ready only once V(bootstrap_url) answers 200 (the release's health path of that server, read from
      its wheel) and, in a release that prints one (0.5.23), its "bootstrap server started" line names the port.
  returned: when ExecStart has --disaggregation-mode prefill or decode
  type: dict
  sample: {mode: prefill, bootstrap_port: 8998, bootstrap_url: "http://10.0.0.7:8998/health", bootstrap_status: 200,
           bootstrap_line: "[2026-12-04 10:00:00] CommonKVBootstrapServer started successfully on 10.0.0.7:8998"}
ready_line:
  description: The ready line of this invocation (V(null) on a node other than node 0, where SGLang prints none).
  returned: always
  type: str
  sample: "[2026-11-29 17:54:37] The server is fired up and ready to roll!"
matched:
  description: For the ready pattern and each O(expect) pattern that matched, the first matching line.
  returned: always
  type: dict
health_status:
  description: Last HTTP status from O(health_url) (V(null) when there was no answer or no URL).
  returned: always
  type: int
fatal_lines:
  description: Lines of this invocation that matched a fail pattern (at most 20).
  returned: when any matched
  type: list
  elements: str
commands:
  description: The state-changing systemctl commands issued.
  returned: always
  type: list
  elements: str
  sample: ["systemctl restart --no-block sglang-kimi.service"]
journal_tail:
  description: The last 50 journal lines of the followed invocation (its own lines and systemd's messages about it).
  returned: on failure
  type: list
  elements: str
msg:
  description: Why the task failed (or, in check mode, what it would do).
  returned: on failure, in check mode
  type: str
  sample: "fatal line in invocation 2bcf...: ValueError: Not enough host memory available. Requesting 20.85 GB but only have 8.12 GB free. ..."
phase:
  description: The phase the task was in when it failed (stopping, starting, loading, warming up...).
  returned: on failure
  type: str
stop:
  description:
    - How the invocation this task replaced ended. V(result) (systemd's C(Result), e.g. V(success), V(signal),
      V(timeout)), V(killed) (systemd sent SIGKILL after C(TimeoutStopSec)), V(seconds) (stop duration),
      V(substates_seen), V(systemd_lines) (systemd's own lines that prove the kill).
    - V(ending) says how it ended (from systemd's lines and the invocation's own last lines), V(ending_means) in
      words. V(sglang_sigkill) (SGLang's own end after SIGTERM, its C(kill_process_tree called) line then its SIGKILL of its
      own process tree, exit status 137; not a crash, not an OOM kill, not V(killed)), V(timeout_kill) (systemd's
      C(TimeoutStopSec) kill), V(oom_kill), V(sglang_crash) (SGLang killed its tree after a child failed, no stop
      before it), V(signal) (another signal), V(exit_code), V(exited), V(unknown). V(main_exit), V(exit_status)
      (137 for SIGKILL), V(sglang_lines) (its C(SIGTERM received) and C(kill_process_tree called) lines) and
      V(leftovers_killed) (systemd's SIGKILL of processes left after SGLang's own SIGKILL, a sweep, not a timeout)
      when seen.
  returned: when the task stopped or waited for the stop of an invocation
  type: dict
  sample: {invocation_id: 4a9c..., result: signal, killed: false, seconds: 6.6, substates_seen: [stop-sigterm],
           ending: sglang_sigkill, main_exit: "code=killed, status=9", exit_status: 137}
sources:
  description: Where each fact came from (V(start_up) V(journal) or V(state_file (verified at ...)); V(unit), V(health) V(live)).
  returned: when verified
  type: dict
state_file:
  description:
    - V(path), V(written) (a new record was written), V(verified_at) of the record written, used or kept.
    - This file is the one record of which invocation of the unit is verified; M(gpuserve.sglang.sglang_server) reads
      it, so that a start proven here is not verified again by the next deploy (its files unchanged).
  returned: when a start was proven or a record was used
  type: dict
journal_scan:
  description: The first read of an invocation that began before the task (V(head_entries), V(truncated), V(tail_entries)).
  returned: when the invocation began before the task
  type: dict
journal_lines_dropped:
  description: Lines of this invocation that journald's rate limit dropped (its C(Suppressed N messages) record).
  returned: when any
  type: int
notices:
  description: Things the operator should know (log level too high for the info lines, daemon-reload run...); also Ansible warnings.
  returned: when any
  type: list
  elements: str
daemon_reload:
  description: V(true) when the task ran C(systemctl daemon-reload) first because the unit file changed on disk.
  returned: when it did
  type: bool
detected_at:
  description: The host's clock (seconds since the epoch) when readiness was decided (for latency measurements).
  returned: when ready from the journal
  type: float
ready_read_at:
  description: The host's clock when this task read the ready line from the journal (for latency measurements).
  returned: when the ready line was read
  type: float
progress_command:
  description: The command that follows the module's phase lines on the host.
  returned: always
  type: str
  sample: journalctl -f -t gpuserve-sglang-service
"""

import re

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc
from ansible_collections.gpuserve.sglang.plugins.module_utils._progress import JournalProgress, follow_command
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import compile_patterns
from ansible_collections.gpuserve.sglang.plugins.module_utils._service_runner import ServiceRunner, check_health_url
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import STATE_DIR, StateFile
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import Systemctl, SystemdError, unit_name
from ansible_collections.gpuserve.sglang.plugins.module_utils._journal import JournalError, JournalFollower


def main():
    module = QuietModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="verified", choices=["restarted", "started", "verified"]),
            timeout=dict(type="int", default=1800),
            health_url=dict(type="str"),
            ready_pattern=dict(type="str"),
            release=dict(type="str"),
            hicache=dict(type="bool"),
            hybrid=dict(type="bool"),
            ranks=dict(type="int"),
            expect=dict(type="list", elements="str", default=[]),
            fail_patterns=dict(type="list", elements="str"),
            extra_fail_patterns=dict(type="list", elements="str", default=[]),
            poll_interval=dict(type="float", default=0.5),
            state_dir=dict(type="path", default=STATE_DIR),
            progress=dict(type="bool", default=True),
            follow=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg="timeout must be a positive number of seconds, got %s" % params["timeout"])
    if params["poll_interval"] <= 0 or params["poll_interval"] > 60:
        module.fail_json(msg="poll_interval must be in (0, 60] seconds, got %s" % params["poll_interval"])
    if params["ranks"] is not None and params["ranks"] < 1:
        module.fail_json(msg="ranks must be at least 1, got %s" % params["ranks"])
    # Every option is checked here, before the host changes (nothing below may raise on bad input).
    try:
        check_health_url(params["health_url"])
        if params["ready_pattern"] is not None:
            compile_patterns([params["ready_pattern"]], "ready_pattern")
        if params["release"] is not None and not re.match(r"^\d+(?:\.\d+)*[\w.+-]*$", params["release"]):
            raise ValueError("release must be an SGLang version such as 0.5.23, got %r" % params["release"])
        compile_patterns(params["expect"], "expect")
        compile_patterns(params["fail_patterns"], "fail_patterns")
        compile_patterns(params["extra_fail_patterns"], "fail_patterns")
        unit = unit_name(params["name"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))

    env = {"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0", "SYSTEMD_LESS": ""}

    def run(argv, timeout=_proc.DEFAULT_TIMEOUT, max_lines=None):
        return _proc.run(argv, timeout=timeout, max_lines=max_lines, env=env)

    systemctl = Systemctl(run, module.get_bin_path("systemctl", required=True))
    journalctl = module.get_bin_path("journalctl", required=True)
    progress = JournalProgress(unit) if params["progress"] else None
    try:
        runner = ServiceRunner(
            systemctl, run, unit, state=params["state"], timeout=params["timeout"], health_url=params["health_url"],
            ready_pattern=params["ready_pattern"], hicache=params["hicache"], ranks=params["ranks"],
            expect=params["expect"], fail_patterns=params["fail_patterns"],
            extra_fail_patterns=params["extra_fail_patterns"], poll_interval=params["poll_interval"],
            check_mode=module.check_mode, journalctl=journalctl, release=params["release"], hybrid=params["hybrid"],
            state_store=StateFile(params["state_dir"]), progress=progress,
            journal_factory=(lambda inv: JournalFollower(run, inv, journalctl, env=env)) if params["follow"] else None,
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    try:
        ok, result = runner.execute()
    except (SystemdError, JournalError) as exc:  # execute() catches these; kept as a last guard
        module.fail_json(msg=str(exc), changed=bool(systemctl.commands), commands=list(systemctl.commands))
    result["progress_command"] = follow_command() if progress else None
    for notice in result.get("notices", []):
        module.warn(notice)
    if ok:
        module.exit_json(**result)
    module.fail_json(**result)


if __name__ == "__main__":
    main()
