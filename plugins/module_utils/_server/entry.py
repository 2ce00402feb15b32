# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module gpuserve.sglang.sglang_server's options and its run over the state machine (issue 47: the module file
is its documentation and a short main(), as community.docker's docker_container is): ARGUMENT_SPEC, problems()
(every option checked before anything changes) and run(module): the one call of ServerLifecycle for the step the
options name, under the unit's work lock, with the gates, the recorder and the stray/GPU stoppers it is given."""

from __future__ import annotations

import os
import socket

from ansible_collections.gpuserve.sglang.plugins.module_utils import _answers, _nvidia_smi, _proc, _secrets, _strays
from ansible_collections.gpuserve.sglang.plugins.module_utils._journal import JournalFollower
from ansible_collections.gpuserve.sglang.plugins.module_utils._progress import JournalProgress
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import mask
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import Desired
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import LifecycleFailure, ServerLifecycle
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.onhost import HostSystemctl
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.worklock import WorkLockTimeout, acquire
from ansible_collections.gpuserve.sglang.plugins.module_utils._service_runner import ServiceRunner, check_health_url
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import compile_patterns
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import STATE_DIR, StateFile
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import unit_name

try:
    from ansible_collections.gpuserve.sglang.plugins.module_utils._bench import gate as bench_gate_of
except ImportError:  # an older _bench.py without the gate: the benchmark gate cannot run
    bench_gate_of = None
try:
    from ansible_collections.gpuserve.sglang.plugins.module_utils._record import deploy_record
except ImportError:  # an older _record.py without deploy_record: no record
    deploy_record = None

ENV = {"LC_ALL": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0", "SYSTEMD_LESS": ""}
FILE = dict(path=dict(type="path", required=True), content=dict(type="str", required=True))


class ReadOnlyRunner(ServiceRunner):
    """``state: verified``: the runner that never writes its state file (it still reads it)."""

    def _record(self):
        return None


def run(argv, timeout=_proc.DEFAULT_TIMEOUT, max_lines=None):
    return _proc.run(argv, timeout=timeout, max_lines=max_lines, env=ENV)


def problems(params):
    """Every option checked before anything changes."""
    found = []
    try:
        unit_name(params["name"])
        check_health_url(params["service"].get("health_url"))
        compile_patterns(params["service"].get("expect") or [], "expect")
        compile_patterns(params["service"].get("extra_fail_patterns") or [], "fail_patterns")
    except ValueError as exc:
        found.append(str(exc))
    if params["name"].endswith(".service"):
        found.append("name %r: give the unit's name without .service" % params["name"])
    if params["backup_keep"] < 0:
        found.append("backup_keep must be 0 or more, got %s" % params["backup_keep"])
    if (params["service"].get("timeout") or 0) <= 0:
        found.append("service.timeout must be a positive number of seconds")
    for item in params["dirs"]:
        if not str(item.get("mode") or "").isdigit() or len(item["mode"]) not in (3, 4):
            found.append("dirs: mode %r of %s is not an octal mode such as '0755'" % (item.get("mode"), item["path"]))
    for name in ("unit", "env", "secrets", "launcher"):
        path = (params.get(name) or {}).get("path")
        if path and not os.path.isabs(path):
            found.append("%s.path %r must be an absolute path" % (name, path))
    matches = params["stop_processes"].get("match") or []
    found.extend("stop_processes: " + text for text in _strays.match_problems(matches))
    return found


ARGUMENT_SPEC = dict(
    role_inputs=dict(type="dict"),  # the action plugin's (it sets the options below from them)
    due_from=dict(type="str"),      # the action plugin's (no module runs)
    companion_units=dict(type="list", elements="str", default=[]),
    name=dict(type="str", required=True),
    state=dict(type="str", default="deployed", choices=["deployed", "verified", "due"]),
    phase=dict(type="str", default="converge",
               choices=["converge", "prepare", "restart", "decide", "commit", "restore", "finish"]),
    group=dict(type="str", default=""),
    decision=dict(type="dict", default={}),
    force_restart=dict(type="bool", default=False),
    reason=dict(type="str", default="the group's verdict was a no"),
    unit=dict(type="dict", required=True, options=dict(FILE)),
    env=dict(type="dict", required=True,
             options=dict(path=dict(type="path", required=True),
                          content=dict(type="str", required=True, no_log=True))),
    secrets=dict(type="dict", no_log=False,
                 options=dict(path=dict(type="path", required=True),
                              content=dict(type="str", default="", no_log=True),
                              group=dict(type="str", default="root"))),
    launcher=dict(type="dict", options=dict(FILE)),
    dirs=dict(type="list", elements="dict", default=[],
              options=dict(path=dict(type="path", required=True), mode=dict(type="str", default="0755"))),
    reads=dict(type="list", elements="path", default=[]),
    install_record=dict(type="path"),
    backup_dir=dict(type="path", default="/etc/sglang/backup"),
    backup_keep=dict(type="int", default=5),
    keep_secrets=dict(type="bool", default=False, no_log=False),
    rollback=dict(type="bool", default=True),
    service=dict(type="dict", default={}, options=dict(
        timeout=dict(type="int", default=1800), health_url=dict(type="str"),
        expect=dict(type="list", elements="str", default=[]),
        extra_fail_patterns=dict(type="list", elements="str", default=[]),
        state_dir=dict(type="path", default=STATE_DIR))),
    api_key=dict(type="str", default="", no_log=True),
    secrets_to_mask=dict(type="list", elements="str", default=[], no_log=True),
    stop_processes=dict(type="dict", default={}, options=dict(
        match=dict(type="list", elements="str", default=[]), timeout=dict(type="float", default=30.0))),
    free_gpus=dict(type="dict", default={}, options=dict(
        enabled=dict(type="bool", default=False), nvidia_smi=dict(type="path", default="/usr/bin/nvidia-smi"))),
    gates_here=dict(type="bool", default=True),
    bench=dict(type="dict", default={}),
    answers=dict(type="dict", default={}),
    record=dict(type="dict", default={}),
    venv_link=dict(type="dict", default={}, options=dict(versioned=dict(type="path"), link=dict(type="path"))),
    host_name=dict(type="str"),
    lock_dir=dict(type="path", default="/run/gpuserve-sglang"),
    lock_wait=dict(type="int"),
)


def run_module(module):
    """The step the options name, over the state machine; exits the module (exit_json or fail_json)."""
    p = module.params
    # every secret its options carry (keys, the environment file's HF_TOKEN, ...), registered with the core's
    # masking API where it has one (2.22+): the one rule's module_secrets
    _secrets.module_secrets(p, ARGUMENT_SPEC)
    found = problems(p)
    if found:
        module.fail_json(msg="nothing was changed: " + "; ".join(found))
    p["host_name"] = p["host_name"] or (p["record"] or {}).get("host") or socket.gethostname()
    secrets = [key for key in list(p["secrets_to_mask"]) + [p["api_key"]] if key]
    p["secrets_to_mask"] = secrets
    desired = Desired.from_params(p)
    systemctl = HostSystemctl(run, module.get_bin_path("systemctl", required=True))
    journalctl = module.get_bin_path("journalctl", required=True)
    service = p["service"]

    def runner_factory(state, read_only=False, restore=False):
        # the restored set is verified as it ran before: the expectations of the new configuration
        # (service.expect, service.extra_fail_patterns) are not its own
        cls = ReadOnlyRunner if read_only else ServiceRunner
        return cls(systemctl, run, desired.unit, state=state, timeout=service["timeout"],
                   health_url=service.get("health_url"), expect=[] if restore else service["expect"],
                   extra_fail_patterns=[] if restore else service["extra_fail_patterns"],
                   check_mode=module.check_mode,
                   journalctl=journalctl, state_store=StateFile(service["state_dir"]),
                   progress=JournalProgress(desired.unit), secrets=secrets,
                   journal_factory=lambda inv: JournalFollower(run, inv, journalctl, env=ENV))

    lifecycle = ServerLifecycle(desired, systemctl, run, runner_factory, answers_gate=answers_gate(p),
                                bench_gate=bench_gate(p), recorder=recorder(p, module.check_mode),
                                stop_strays=stop_strays(p, module.check_mode), free_gpus=free_gpus(p),
                                gates_here=p["gates_here"],
                                check_mode=module.check_mode, force_restart=p["force_restart"], group=p["group"])
    # One call at a time on the unit (_server/worklock.py): a call whose controller died may still be finishing
    # its transaction on this host; wait for it, then read the host as it left it.
    if p["state"] == "deployed" and not module.check_mode:
        wait = p["lock_wait"] if p["lock_wait"] is not None else 2 * service["timeout"] + 1800
        try:
            _lock, waited, holder = acquire(p["lock_dir"], desired.unit, wait)
        except (WorkLockTimeout, OSError) as exc:
            module.fail_json(msg=mask(str(exc), secrets))
        if waited >= 1:
            module.warn("waited %d s for another call of sglang_server on %s (pid %s: a run whose controller may be "
                        "gone) to finish its work" % (waited, desired.unit, holder or "?"))
    try:
        if p["state"] == "due":
            result = lifecycle.due()
        elif p["state"] == "verified":
            result = lifecycle.verified()
        elif p["phase"] == "prepare":
            result = lifecycle.prepare()
        elif p["phase"] == "restart":
            result = lifecycle.restart(force=p["force_restart"])
        elif p["phase"] == "decide":
            result = lifecycle.decide()
        elif p["phase"] == "commit":
            result = lifecycle.commit()
        elif p["phase"] == "finish":
            result = lifecycle.finish_group((p["decision"] or {}).get("group") or "",
                                            bool((p["decision"] or {}).get("keep")), p["reason"])
        elif p["phase"] == "restore":
            result = lifecycle.restore_phase(p["reason"])
        else:
            result = lifecycle.converge()
    except LifecycleFailure as exc:
        result = dict(exc.result)
        for notice in result.pop("notices", []):
            module.warn(notice)
        result.pop("msg", None)
        result["phase"] = p["phase"]
        module.fail_json(msg=exc.msg, **result)
    except Exception as exc:  # pylint: disable=broad-except  # never a traceback (it may carry a key)
        module.fail_json(msg=mask("%s: unexpected error: %s: %s" % (p["name"], type(exc).__name__, exc), secrets),
                         actions=mask(lifecycle.result.get("actions", []), secrets))
    for notice in result.pop("notices", []):
        module.warn(notice)
    result["phase"] = p["phase"]   # a group's verdict takes only this step's result of each node
    module.exit_json(**result)


def answers_gate(p):
    """The correctness gate (_answers.gate) with the options of gpuserve.sglang.sglang_answers, or None."""
    settings = dict(p["answers"] or {})
    if not settings or not settings.pop("enabled", True):
        return None
    # drained (the rollout took the server out of every router), else deterministic (the server runs
    # --enable-deterministic-inference), else under possible live traffic, which the gate's result says
    server_args = settings.get("server_args") or {}
    settings.setdefault("conditions", "drained" if settings.pop("drained", False) else
                        "deterministic" if server_args.get("enable-deterministic-inference") else "live")
    # a round through HiCache's host tier: always, never, or auto (when the server runs HiCache)
    tier = settings.get("host_tier", "auto")
    if not isinstance(tier, bool):
        settings["host_tier"] = tier == "always" or (tier == "auto" and bool(settings.pop("hicache", False)))

    def gate(invocation_id):
        identity = dict(settings.get("identity") or {})
        identity["flags"] = _answers.output_flags(settings.get("server_args") or {})
        return _answers.gate(
            settings.get("url", "http://127.0.0.1:30000"), settings["prompts"], settings["state_file"], identity,
            api_key=settings.get("api_key") or p["api_key"], max_tokens=int(settings.get("max_tokens", 32)),
            repeat=int(settings.get("repeat", 2)), allowed_mismatches=int(settings.get("allowed_mismatches", 0)),
            invocation_id=invocation_id, timeout=float(settings.get("timeout", 300.0)),
            host_tier=bool(settings.get("host_tier")), evict_tokens=int(settings.get("evict_tokens") or 0),
            evict_chunk_tokens=int(settings.get("evict_chunk_tokens") or 1024),
            conditions=settings.get("conditions") or "live", accept_release=settings.get("accept_release") or "")
    return gate


def bench_gate(p):
    """The benchmark gate (_bench.gate), or None."""
    settings = dict(p["bench"] or {})
    if not settings or not settings.pop("enabled", True):
        return None
    settings.setdefault("api_key", p["api_key"])
    record_json = (p["record"] or {}).get("record_json_path") or settings.pop("record_json_path", "")
    if bench_gate_of is None:
        return lambda only: {"ran": True, "regression": True, "bench": {}, "gate": {},
                             "msg": "benchmark gate: this collection's _bench.py has no gate()"}
    return lambda only: bench_gate_of(settings, record_json, only)


def recorder(p, check_mode):
    """The deployment record (_record.deploy_record), or None."""
    params = dict(p["record"] or {})
    if not params or deploy_record is None:
        return None
    params.setdefault("secrets_to_mask", p["secrets_to_mask"])
    params.setdefault("service", p["name"])

    def write(verified, bench):
        bench = bench or {}
        return deploy_record(params, verified, bench.get("bench") or None, bench.get("gate") or None,
                             params.get("python") or "", check_mode=check_mode)
    return write


def stop_strays(p, check_mode=False):
    """The stray servers the operator named (_strays), or None; in check mode listed, not stopped."""
    match = p["stop_processes"].get("match") or []
    if not match:
        return None

    def stop():
        found = _strays.find("/proc", match, protect_unit=p["name"] + ".service", own_pid=os.getpid())
        for proc in found:
            proc["result"] = "would stop" if check_mode else _strays.stop(proc["pid"], p["stop_processes"]["timeout"])
        return found
    return stop


def free_gpus(p):
    """The processes of this host that hold a GPU, stopped before a first start (_nvidia_smi), or None."""
    if not p["free_gpus"].get("enabled"):
        return None

    def free():
        binary = p["free_gpus"]["nvidia_smi"]
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            return []
        info = _nvidia_smi.gather(lambda argv: tuple(run(argv, timeout=60)[:3]), binary, _proc.read_text)
        if info.get("nvidia_smi_failed") or info.get("problems"):
            raise RuntimeError("nvidia-smi: %s" % (info.get("reason") or "; ".join(info.get("problems") or [])))
        stopped = []
        for proc in info.get("processes") or []:
            if proc.get("unit") and proc["unit"] in (p.get("companion_units") or []):
                proc["result"] = "not stopped: a process of %s, the server's own companion unit" % proc["unit"]
            elif proc.get("pid_here") is False:
                proc["result"] = "not stopped: not a process of this host's /proc under that name"
            else:
                proc["result"] = _strays.stop(proc["pid"], 30.0)
            stopped.append(proc)
        return stopped
    return free
