# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Find and stop the stray processes an operator names (a ``nohup`` SGLang server outside systemd that holds
the GPUs of a host being taken over), never a process of the managed unit.

A process matches when one of the operator's fixed strings (not a regular expression) is part of its command
line (argv joined with spaces). Never matched: this process and its ancestors (the module and the Ansible
connection), kernel threads (empty command line), and every process whose cgroup is the protected unit's.
Stopping is SIGTERM, then SIGKILL after ``timeout`` seconds; each process is reported with how it ended.
API keys on a command line are masked in what is reported. Standard library only; ``/proc`` is a parameter
so the logic is tested on a fake tree.
"""

from __future__ import annotations

import os
import signal
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._proc import read_text

MIN_MATCH_LEN = 8


def match_problems(matches):
    """Messages for match strings that would be unsafe (empty, short, control characters)."""
    problems = []
    for text in matches:
        if not isinstance(text, str):
            problems.append("match %r is not a string" % (text,))
        elif any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
            problems.append("match %r holds a control character" % (text,))
        elif len(text.strip()) < MIN_MATCH_LEN:
            problems.append("match %r is shorter than %d characters: it could match processes you did not mean"
                            % (text, MIN_MATCH_LEN))
    return problems


def mask(cmdline):
    """A process's command line with its secrets masked (_secrets: --api-key v, --api-key=v, --hf-token v, ...)."""
    return _secrets.mask(cmdline)


def _read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def cmdline_of(proc_root, pid):
    raw = _read_bytes(os.path.join(proc_root, str(pid), "cmdline"))
    if not raw:
        return ""
    return " ".join(part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0"))


def parent_of(proc_root, pid):
    stat = read_text(os.path.join(proc_root, str(pid), "stat"))
    if not stat or ")" not in stat:
        return 0
    fields = stat.rsplit(")", 1)[1].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return 0


def ancestors(proc_root, pid):
    seen = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        pid = parent_of(proc_root, pid)
    return seen


def in_unit(proc_root, pid, unit):
    """True when a cgroup line of the process ends in the unit (its own processes, also under a sub-cgroup)."""
    if not unit:
        return False
    text = read_text(os.path.join(proc_root, str(pid), "cgroup")) or ""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        parts = path.split("/")
        if unit in parts:
            return True
    return False


def find(proc_root, matches, protect_unit=None, own_pid=None):
    """The processes whose command line holds one of ``matches``: list of dicts pid, cmdline (masked), match."""
    skip = ancestors(proc_root, own_pid if own_pid is not None else os.getpid())
    found = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        names = []
    for name in sorted(names, key=lambda n: int(n) if n.isdigit() else -1):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in skip:
            continue
        cmdline = cmdline_of(proc_root, pid)
        if not cmdline:
            continue
        hit = next((text for text in matches if text in cmdline), None)
        if hit is None:
            continue
        if in_unit(proc_root, pid, protect_unit):
            continue
        found.append({"pid": pid, "cmdline": mask(cmdline), "match": hit})
    return found


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for our purpose: it holds no GPU memory and no port
    state = read_text("/proc/%d/stat" % pid) or ""
    return not (")" in state and state.rsplit(")", 1)[1].split()[:1] == ["Z"])


def stop(pid, timeout, kill=os.kill, alive=_alive, sleep=time.sleep, clock=time.monotonic):
    """SIGTERM, wait up to timeout, SIGKILL. Returns 'gone' (already), 'stopped' (after SIGTERM) or 'killed'."""
    if not alive(pid):
        return "gone"
    try:
        kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    end = clock() + max(0.0, timeout)
    while clock() < end:
        if not alive(pid):
            return "stopped"
        sleep(0.2)
    if not alive(pid):
        return "stopped"
    try:
        kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped"
    end = clock() + 10.0
    while clock() < end and alive(pid):
        sleep(0.1)
    return "killed" if not alive(pid) else "still running"
