# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading a systemd unit's state with ``systemctl show`` and queueing jobs without blocking.

Only ``systemctl`` is used (no D-Bus bindings), so this runs on any target with the Python standard library.
Every call has a time limit (``run(argv, timeout=...)``); a read that fails or times out is retried, and a
queueing command is retried only on errors that prove nothing was queued (no connection to the manager).
"""

from __future__ import annotations

import re
import shlex
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import server_default

SHOW_PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "MainPID", "InvocationID", "NRestarts", "Result",
    "ExecStart", "Job", "ExecMainCode", "ExecMainStatus", "Restart", "RestartUSec", "NeedDaemonReload",
    "TimeoutStopUSec",
)

SYSTEMCTL_TIMEOUT = 30.0
READ_ATTEMPTS = 3
RETRY_PAUSE = 0.5
# Errors after which nothing was queued: safe to send the same job again.
TRANSIENT_RE = re.compile(r"Failed to connect to bus|Transport endpoint is not connected|Connection timed out|"
                          r"Resource temporarily unavailable|Connection reset by peer|Failed to get D-Bus connection",
                          re.I)

# Job types that already lead to a stop of the running invocation: wait for them, queue nothing.
STOP_JOB_TYPES = ("stop", "restart", "try-restart", "reload-or-restart", "try-reload-or-restart")


class SystemdError(Exception):
    """systemctl failed or answered something unreadable."""


def unit_name(name):
    """``sglang-kimi`` -> ``sglang-kimi.service``; names with a unit suffix are kept."""
    name = (name or "").strip()
    if not name:
        raise ValueError("name must not be empty")
    if any(ch in name for ch in "/ \t\n"):
        raise ValueError("name %r is not a unit name" % name)
    suffixes = (".service", ".socket", ".target", ".timer", ".mount", ".path", ".scope", ".slice", ".swap",
                ".device", ".automount")
    return name if name.endswith(suffixes) else name + ".service"


def parse_show(text):
    """``KEY=VALUE`` lines of ``systemctl show`` -> dict (a value may contain '=')."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = value
    return props


def parse_exec_start(value):
    """The argv of the first command in ``ExecStart={ path=... ; argv[]=... ; ... }``."""
    value = value or ""
    start = value.find("argv[]=")
    if start < 0:
        return []
    start += len("argv[]=")
    end = value.find(" ; ", start)
    text = value[start:end if end >= 0 else len(value)].strip()
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


_INT_FLAGS = {
    "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp",
    "--pp": "pp", "--pp-size": "pp", "--pipeline-parallel-size": "pp",
    "--dp": "dp", "--dp-size": "dp", "--data-parallel-size": "dp",
    "--page-size": "page_size", "--nnodes": "nnodes", "--node-rank": "node_rank",
    "--disaggregation-bootstrap-port": "bootstrap_port",
}
_FLOAT_FLAGS = {"--hicache-ratio": "hicache_ratio", "--hicache-size": "hicache_size"}
_STR_FLAGS = {"--log-level": "log_level", "--api-key": "api_key", "--admin-api-key": "admin_api_key",
              "--host": "host", "--port": "port", "--model-path": "model_path", "--model": "model_path",
              "--disaggregation-mode": "disaggregation_mode"}


def exec_start_facts(argv):
    """What the server's command line says: HiCache on or off, its ratio/size, the parallel sizes, the log level,
    the API keys (to mask them in every returned line) and the listening address."""
    facts = {"hicache": False, "tp": None, "pp": None, "dp": None, "dp_attention": False, "page_size": None,
             "hicache_ratio": None, "hicache_size": None, "log_level": None, "api_key": None,
             "admin_api_key": None, "host": None, "port": None, "model_path": None, "nnodes": None,
             "node_rank": None, "disaggregation_mode": None, "bootstrap_port": None}
    for index, arg in enumerate(argv):
        flag, sep, inline = arg.partition("=")
        raw = inline if sep else (argv[index + 1] if index + 1 < len(argv) else "")
        if flag == "--enable-hierarchical-cache":
            facts["hicache"] = True
        elif flag == "--enable-dp-attention":
            facts["dp_attention"] = True
        elif flag in _INT_FLAGS:
            try:
                facts[_INT_FLAGS[flag]] = int(raw)
            except ValueError:
                facts[_INT_FLAGS[flag]] = None
        elif flag in _FLOAT_FLAGS:
            try:
                facts[_FLOAT_FLAGS[flag]] = float(raw)
            except ValueError:
                facts[_FLOAT_FLAGS[flag]] = None
        elif flag in _STR_FLAGS:
            facts[_STR_FLAGS[flag]] = raw
    return facts


def scheduler_count(facts):
    """How many scheduler processes (each prints its own HiCache line) SGLang 0.5.9 starts for this command
    line: tp x pp, times dp when data parallelism runs whole replicas (no --enable-dp-attention). A size the
    command line does not give is SGLang's default (the release table's, taken from the wheel)."""
    tp = facts.get("tp") or server_default("tp_size")
    pp = facts.get("pp") or server_default("pp_size")
    dp = facts.get("dp") or server_default("dp_size")
    count = tp * pp
    if dp > 1 and not facts.get("dp_attention"):
        count *= dp
    return count


def node_tp_ranks(facts, rule="contiguous"):
    """The global TP ranks one node of a server over several hosts runs (``--nnodes N --node-rank K``), as SGLang
    assigns them (the release's rule ``node_tp_ranks``, read from its entrypoints/engine.py: "contiguous" =
    ``tp_size_per_node * (node_rank % nnodes_per_tp_group)`` onwards, ``tp_size // nnodes_per_tp_group`` of them).
    None on one node, with pipeline parallelism (the ranks then carry PP tags: counted, not named), or when the
    release's rule is another (unknown) one."""
    nnodes = facts.get("nnodes") or server_default("nnodes")
    if nnodes <= 1 or rule != "contiguous" or (facts.get("pp") or server_default("pp_size")) > 1:
        return None
    tp = facts.get("tp") or server_default("tp_size")
    node_rank = facts.get("node_rank") or 0
    nnodes_per_tp_group = nnodes          # pp 1: nnodes_per_pp_rank = nnodes // pp_size
    per_node = max(tp // nnodes_per_tp_group, 1)
    start = per_node * (node_rank % nnodes_per_tp_group)
    return list(range(start, start + per_node))


def node_scheduler_count(facts):
    """The schedulers one node runs: scheduler_count over the nodes (each prints its own lines)."""
    return max(1, scheduler_count(facts) // (facts.get("nnodes") or server_default("nnodes")))


_TIMESPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
    "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0,
}


def parse_timespan(value):
    """systemd's timespan text (``100ms``, ``1min 30s``, ``2.500s``) -> seconds; None for infinity/garbage."""
    value = (value or "").strip()
    if not value or value == "infinity":
        return None
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        factor = _TIMESPAN_UNITS.get(unit or "s")
        if factor is None:
            return None
        total += float(number) * factor
    return total


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class UnitState(object):
    """One reading of ``systemctl show``."""

    def __init__(self, props):
        self.props = props
        self.id = props.get("Id", "")
        self.load_state = props.get("LoadState", "")
        self.active_state = props.get("ActiveState", "")
        self.sub_state = props.get("SubState", "")
        self.main_pid = _int(props.get("MainPID"))
        self.invocation_id = props.get("InvocationID", "")
        self.n_restarts = _int(props.get("NRestarts"))
        self.result = props.get("Result", "")
        self.exec_start = parse_exec_start(props.get("ExecStart", ""))
        self.job_id = _int(props.get("Job"))
        self.exec_main_code = props.get("ExecMainCode", "")
        self.exec_main_status = props.get("ExecMainStatus", "")
        self.restart = props.get("Restart", "")
        self.restart_sec = parse_timespan(props.get("RestartUSec", ""))
        self.need_daemon_reload = props.get("NeedDaemonReload", "") == "yes"
        self.timeout_stop_sec = parse_timespan(props.get("TimeoutStopUSec", ""))

    @property
    def running(self):
        return self.active_state == "active"

    @property
    def stopping(self):
        return self.active_state == "deactivating"

    @property
    def down(self):
        return self.active_state in ("inactive", "failed")

    def describe(self):
        text = "%s (%s), MainPID=%d, Result=%s, NRestarts=%d" % (
            self.active_state, self.sub_state, self.main_pid, self.result, self.n_restarts)
        if self.job_id:
            text += ", job %d queued" % self.job_id
        return text

    def as_dict(self):
        return {
            "active_state": self.active_state, "sub_state": self.sub_state, "main_pid": self.main_pid,
            "invocation_id": self.invocation_id, "n_restarts": self.n_restarts, "result": self.result,
            "job_id": self.job_id,
        }


class Systemctl(object):
    """Thin wrapper; ``run(argv, timeout=...) -> (rc, stdout, stderr)`` (rc 124: timed out)."""

    def __init__(self, run, systemctl="systemctl", sleep=time.sleep, timeout=SYSTEMCTL_TIMEOUT):
        self.run = run
        self.bin = systemctl
        self.sleep = sleep
        self.timeout = timeout
        self.commands = []  # every state-changing command issued, for tests and the result
        self.retries = 0    # transient errors retried

    def _call(self, argv, done):
        """Run argv until ``done(answer)`` accepts the answer, READ_ATTEMPTS times at most (longer pauses each
        time); returns the last answer."""
        answer = (1, "", "")
        for attempt in range(READ_ATTEMPTS):
            if attempt:
                self.retries += 1
                self.sleep(RETRY_PAUSE * attempt)
            answer = self.run(argv, timeout=self.timeout)
            if done(answer):
                break
        return answer

    def _read(self, argv):
        """A read-only call: retried when it fails or times out."""
        return self._call(argv, lambda answer: answer[0] == 0)

    def show(self, unit):
        argv = [self.bin, "show", unit, "--property=" + ",".join(SHOW_PROPERTIES)]
        rc, out, err = self._read(argv)[:3]
        if rc != 0:
            raise SystemdError("systemctl show %s failed %d times (rc=%s): %s"
                               % (unit, READ_ATTEMPTS, rc, (err or out).strip()))
        return UnitState(parse_show(out))

    def job_type(self, unit, job_id):
        """The type of the queued job (``restart``, ``stop``, ``start``...), '' when it is gone."""
        rc, out, _err = self._read([self.bin, "list-jobs", "--no-legend", "--full", "--plain", unit])[:3]
        if rc != 0:
            return ""
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == str(job_id):
                return fields[2]
        return ""

    def _change(self, argv, what):
        self.commands.append(" ".join(argv))
        # a change is retried only on a transient error (the bus busy, a timeout), never on a refusal
        answer = self._call(argv, lambda answer: answer[0] == 0 or not TRANSIENT_RE.search(answer[2] or answer[1] or ""))
        rc, out, err = answer[:3]
        if rc != 0:
            raise SystemdError("%s failed (rc=%s): %s" % (what, rc, (err or out).strip()))

    def _queue(self, verb, unit):
        self._change([self.bin, verb, "--no-block", unit], "systemctl %s --no-block %s" % (verb, unit))

    def restart_no_block(self, unit):
        self._queue("restart", unit)

    def start_no_block(self, unit):
        self._queue("start", unit)

    def daemon_reload(self):
        self._change([self.bin, "daemon-reload"], "systemctl daemon-reload")
