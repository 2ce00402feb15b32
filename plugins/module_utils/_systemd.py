# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a systemd unit's state with ``systemctl show`` and queueing jobs without blocking.

Only ``systemctl`` is used (no D-Bus bindings), so this runs on any target with the Python standard library.
"""

from __future__ import annotations

import re
import shlex

SHOW_PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "MainPID", "InvocationID", "NRestarts", "Result",
    "ExecStart", "Job", "ExecMainCode", "ExecMainStatus", "Restart", "RestartUSec",
)

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


def exec_start_facts(argv):
    """What the server's command line says: HiCache on or off, and the tensor-parallel size."""
    tp = None
    hicache = False
    for index, arg in enumerate(argv):
        flag, sep, inline = arg.partition("=")
        if flag == "--enable-hierarchical-cache":
            hicache = True
        elif flag in ("--tp", "--tp-size", "--tensor-parallel-size"):
            raw = inline if sep else (argv[index + 1] if index + 1 < len(argv) else "")
            try:
                tp = int(raw)
            except ValueError:
                tp = None
    return {"hicache": hicache, "tp": tp}


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
    """Thin wrapper; ``run(argv) -> (rc, stdout, stderr)`` (AnsibleModule.run_command in the module)."""

    def __init__(self, run, systemctl="systemctl"):
        self.run = run
        self.bin = systemctl
        self.commands = []  # every state-changing command issued, for tests and the result

    def show(self, unit):
        argv = [self.bin, "show", unit, "--property=" + ",".join(SHOW_PROPERTIES)]
        rc, out, err = self.run(argv)
        if rc != 0:
            raise SystemdError("systemctl show %s failed (rc=%s): %s" % (unit, rc, (err or out).strip()))
        return UnitState(parse_show(out))

    def job_type(self, unit, job_id):
        """The type of the queued job (``restart``, ``stop``, ``start``...), '' when it is gone."""
        rc, out, _err = self.run([self.bin, "list-jobs", "--no-legend", "--full", "--plain", unit])
        if rc != 0:
            return ""
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == str(job_id):
                return fields[2]
        return ""

    def _queue(self, verb, unit):
        argv = [self.bin, verb, "--no-block", unit]
        self.commands.append(" ".join(argv))
        rc, out, err = self.run(argv)
        if rc != 0:
            raise SystemdError("systemctl %s --no-block %s failed (rc=%s): %s"
                               % (verb, unit, rc, (err or out).strip()))

    def restart_no_block(self, unit):
        self._queue("restart", unit)

    def start_no_block(self, unit):
        self._queue("start", unit)
