# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nccl_tuning role asks of the server's interpreter, one module run per phase (issue 22: a no-op run
made nine module runs of stat, command and slurp for it):

- inspect(): the interpreter (exists, executable), what it says of itself (its site-packages and the
  sitecustomize it imports, user site off), the site-packages directory (owner, group/other write) and an
  existing sitecustomize.py (regular file or not, mode, text);
- verify(): three starts of the interpreter - with an empty environment, with one of the variables already
  exported, and with `-S` and only the EnvironmentFile's values (what the systemd unit gets) - each reporting the
  NCCL values it sees and whether a sitecustomize was imported.

The role's asserts judge the answers (their messages unchanged). Standard library only; `run` is injectable."""
from __future__ import annotations

import json
import os
import pwd
import re
import stat
import subprocess

SELF_PROBE = (
    "import importlib.util, json, sysconfig\n"
    "spec = importlib.util.find_spec('sitecustomize')\n"
    "print(json.dumps({'purelib': sysconfig.get_paths()['purelib'],\n"
    "                  'sitecustomize': spec.origin if spec is not None else None}))\n")

ENV_PROBE = (
    "import json, os, sys\n"
    "keys = json.loads(sys.argv[1])\n"
    "sc = sys.modules.get('sitecustomize')\n"
    "print(json.dumps({'env': {k: os.environ[k] for k in keys if k in os.environ},\n"
    "                  'sitecustomize_loaded': sc is not None,\n"
    "                  'sitecustomize': getattr(sc, '__file__', None)}))\n")

CLEAN_PATH = "/usr/bin:/bin"
ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
EXPORTED = "gpuserve-exported"


class ProbeError(Exception):
    """A start of the interpreter failed or did not answer in JSON; the message names the command and output."""


def _run_json(argv, env, run, timeout):
    proc = run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
               timeout=timeout)
    if proc.returncode != 0:
        raise ProbeError("%s exited %d: %s" % (argv[0], proc.returncode, (proc.stderr or proc.stdout).strip()[-2000:]))
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeError("%s did not answer in JSON: %r" % (argv[0], proc.stdout[-500:]))


def _owner(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def inspect(python, run=subprocess.run, timeout=120):
    """The interpreter, what it says of its site-packages and sitecustomize, that directory and sitecustomize.py."""
    # as ansible.builtin.stat judged them (follow: false): a venv's bin/python link exists
    out = {"python": {"exists": os.path.lexists(python), "executable": os.access(python, os.X_OK)},
           "purelib": "", "imported_sitecustomize": None,
           "site_dir": {"exists": False, "isdir": False, "pw_name": "", "wgrp": False, "woth": False, "mode": ""},
           "sitecustomize": {"exists": False, "isreg": False, "mode": "", "text": ""}}
    if not out["python"]["exists"]:
        return out
    env = dict(os.environ, PYTHONNOUSERSITE="1")
    info = _run_json([python, "-c", SELF_PROBE], env, run, timeout)
    out["purelib"] = info.get("purelib") or ""
    out["imported_sitecustomize"] = info.get("sitecustomize")
    if not out["purelib"]:
        return out
    try:
        st = os.lstat(out["purelib"])   # a link is not the directory the role judges (stat, follow: false)
        out["site_dir"] = {"exists": True, "isdir": stat.S_ISDIR(st.st_mode), "pw_name": _owner(st.st_uid),
                           "wgrp": bool(st.st_mode & stat.S_IWGRP), "woth": bool(st.st_mode & stat.S_IWOTH),
                           "mode": "%04o" % stat.S_IMODE(st.st_mode)}
    except OSError:
        pass
    path = os.path.join(out["purelib"], "sitecustomize.py")
    try:
        st = os.lstat(path)
    except OSError:
        return out
    isreg = stat.S_ISREG(st.st_mode)
    out["sitecustomize"] = {"exists": True, "isreg": isreg, "mode": "%04o" % stat.S_IMODE(st.st_mode), "text": ""}
    if isreg:
        with open(path, "rb") as handle:
            out["sitecustomize"]["text"] = handle.read().decode("utf-8", "replace")
    return out


def env_file_lines(path):
    """The NAME=value lines of a systemd EnvironmentFile, as the unit's process gets them."""
    with open(path, "rb") as handle:
        text = handle.read().decode("utf-8", "replace")
    return [line for line in text.split("\n") if ENV_LINE.match(line)]


def verify(python, keys, env_file, run=subprocess.run, timeout=120):
    """The three starts of the interpreter; `keys` are nccl_env's names (the first, sorted, is the exported one)."""
    keys = list(keys)
    first = sorted(keys)[0]
    clean = _run_json([python, "-c", ENV_PROBE, json.dumps(keys)], {"PATH": CLEAN_PATH}, run, timeout)
    policy = _run_json([python, "-c", ENV_PROBE, json.dumps([first])], {"PATH": CLEAN_PATH, first: EXPORTED},
                       run, timeout)
    lines = env_file_lines(env_file)
    nosite_env = {"PATH": CLEAN_PATH}
    for line in lines:
        name, value = line.split("=", 1)
        nosite_env[name] = value
    nosite = _run_json([python, "-S", "-c", ENV_PROBE, json.dumps(keys)], nosite_env, run, timeout)
    return {"clean": clean, "policy": policy, "nosite": nosite, "first": first, "env_file_lines": len(lines)}
