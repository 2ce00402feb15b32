# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a role needs to know of a server host before it changes anything, read in ONE module run (issue 22:
fewer remote round trips; issue 20: each module run costs ~0.5 s of CPU on the test hosts).

The server role's preflight used to make one module run per read: the CUDA facts file, the install record, the
unit's drop-ins (find, then one slurp each), each model path, the interpreter, whether SGLang is installed, its
site-packages, the deployment record and the venv link. ``gather`` makes them all in one call and returns plain
data; the YAML keeps the asserts and their messages. Read-only.

The interpreter is resolved here for both roles that run SGLang's interpreter (server, nccl_tuning; through
roles/_common/tasks/interpreter.yml): the one given, else ``<venv>/bin/python`` of the venv named in the install
role's record on the host (versioned venvs: a new SGLang version or patch set is a new directory), else
``<sglang_venv>/bin/python``.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import stat
import subprocess

from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check, _nvidia_smi
from ansible_collections.gpuserve.sglang.plugins.module_utils._systemd import parse_show

OVERRIDE_RE = re.compile(r"(ExecStart|Environment|EnvironmentFile) *=")
PYTHON_PROBE = ("import importlib.util, importlib.metadata as m, json, sysconfig\n"
                "try:\n release = m.version('sglang')\nexcept m.PackageNotFoundError:\n release = ''\n"
                "print(json.dumps({'purelib': sysconfig.get_paths()['purelib'], "
                "'sglang': importlib.util.find_spec('sglang') is not None, 'release': release, "
                "'jit': importlib.util.find_spec('tvm_ffi') is not None}))")


class HostFactsError(Exception):
    """A file the roles wrote holds something they cannot read: the message says which and what to do."""


def _clean(path):
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    return not any(ord(char) < 32 or ord(char) == 127 for char in path)


def _read_json(path, what, fix):
    """The JSON document at ``path``; None when there is no such file (or it cannot be opened)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError):
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise HostFactsError("%s %s is not JSON; %s" % (what, path, fix))


def interpreter(python_given, install_record, venv):
    """(python, versioned_venv): the interpreter that runs SGLang and the versioned venv the install record names
    ('' when the interpreter was given, the record names none, or it names sglang_venv itself)."""
    if python_given:
        return python_given, ""
    record = _read_json(install_record, "the install record", "run gpuserve.sglang.install again, or remove it") \
        if _clean(install_record) else None
    installed = str(record.get("venv") or "") if isinstance(record, dict) else ""
    if not installed:
        return venv + "/bin/python", ""
    versioned = installed if os.path.normpath(installed) != os.path.normpath(venv) else ""
    return installed + "/bin/python", versioned


def dropin_overrides(unit_dir, unit):
    """(drop-in paths, overriding lines as '<path>: <line>'): the *.conf of <unit_dir>/<unit>.service.d that set
    ExecStart, Environment or EnvironmentFile, which win over the managed unit."""
    paths = sorted(glob.glob(os.path.join(glob.escape(unit_dir), glob.escape(unit + ".service.d"), "*.conf")))
    overrides = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except (IOError, OSError) as exc:
            overrides.append("%s: cannot be read (%s)" % (path, exc.strerror))
            continue
        overrides.extend("%s: %s" % (path, line.strip()) for line in text.splitlines()
                         if OVERRIDE_RE.match(line.strip()))
    return paths, overrides


def path_facts(paths):
    """{path: {exists, isdir, islnk[, target]}} without following a final link (as ansible.builtin.stat does);
    ``target`` is a link's own text (os.readlink)."""
    facts = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except (OSError, ValueError):
            facts[path] = {"exists": False, "isdir": False, "islnk": False}
            continue
        link = os.path.islink(path)
        facts[path] = {"exists": True, "isdir": os.path.isdir(path) and not link, "islnk": link}
        if link:
            facts[path]["target"] = os.readlink(path)
    return facts


FINGERPRINT_MAX = 16 * 1024 * 1024  # a file larger than this gets no sha1 (the roles fingerprint small text files)


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


def _group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def fingerprints(paths):
    """{path: {exists, islnk, isdir, mode '0644', owner, group, sha1 (regular files up to 16 MiB)}}, following a
    link for the rest (islnk says it was one: the roles treat a link as "would change" and let the module decide).
    The roles compare them with what they would write and skip a module run where nothing would change."""
    facts = {}
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            facts[path] = {"exists": False}
            continue
        entry = {"exists": True, "islnk": os.path.islink(path), "isdir": stat.S_ISDIR(st.st_mode),
                 "mode": "%04o" % stat.S_IMODE(st.st_mode),
                 "owner": _user_name(st.st_uid), "group": _group_name(st.st_gid)}
        if stat.S_ISREG(st.st_mode) and st.st_size <= FINGERPRINT_MAX:
            digest = hashlib.sha1()
            try:
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
                entry["sha1"] = digest.hexdigest()
            except (IOError, OSError):
                pass
        facts[path] = entry
    return facts


def account(user, device_glob="/dev/nvidia*"):
    """The service account: {exists, group_exists, groups (its supplementary and primary group names),
    device_groups (the names of the non-root groups that own the GPU device files)}."""
    facts = {"exists": False, "group_exists": False, "groups": [], "device_groups": []}
    gids = set()
    for path in glob.glob(device_glob):
        try:
            gid = os.lstat(path).st_gid
        except OSError:
            continue
        if gid != 0:
            gids.add(gid)
    facts["device_groups"] = sorted(_group_name(gid) for gid in gids)
    try:
        grp.getgrnam(user)
        facts["group_exists"] = True
    except KeyError:
        pass
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return facts
    facts["exists"] = True
    names = {group.gr_name for group in grp.getgrall() if user in group.gr_mem}
    names.add(_group_name(entry.pw_gid))
    facts["groups"] = sorted(names)
    return facts


def unit_state(unit, run=subprocess.run, timeout=60):
    """{ActiveState, ActiveEnterTimestamp (--timestamp=unix), InvocationID, UnitFileState} of <unit>.service from
    systemctl show; {} when systemctl cannot answer."""
    try:
        proc = run(["systemctl", "show", unit + ".service", "--timestamp=unix", "--property=ActiveState",  # pylint: disable=ansible-bad-function
                    "--property=ActiveEnterTimestamp", "--property=InvocationID", "--property=UnitFileState"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False,
                   env=dict(os.environ, LC_ALL="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0"))
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if proc.returncode != 0:
        return {}
    return parse_show(proc.stdout.decode("utf-8", "replace"))


def probe_python(python, run=subprocess.run, timeout=120):
    """{purelib, sglang (bool or None), error}: the interpreter's site-packages (isolated mode: no user site, no
    PYTHON* variables, as nccl_tuning asks it) and whether it can import SGLang."""
    try:
        proc = run([python, "-I", "-c", PYTHON_PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                   timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"purelib": "", "sglang": None, "release": "", "jit": False, "error": "%s: %s" % (python, exc)}
    out = proc.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        answer = json.loads(out[-1]) if proc.returncode == 0 and out else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return {"purelib": "", "sglang": None, "release": "", "jit": False,
                "error": "%s exited %d: %s" % (python, proc.returncode,
                                               proc.stderr.decode("utf-8", "replace").strip()[-500:])}
    release = str(answer.get("release") or "")
    return {"purelib": str(answer.get("purelib") or ""), "sglang": bool(answer.get("sglang")),
            "release": release if re.match(r"^\d+(?:\.\d+)*[\w.+-]*$", release) else "",
            "jit": bool(answer.get("jit")), "error": ""}


def jit_toolchain_problems(cuda_home, release=""):
    """Why SGLang's first start could not compile its own CUDA kernels with this CUDA home ([] when it can).
    Releases with tvm-ffi JIT kernels (0.5.17 on an H100/H200: 7 kernels, 7-10 s each, docs/validation.md) run
    $CUDA_HOME/bin/nvcc and link -L$CUDA_HOME/lib64 -lcudart; a home without either fails that start ("cannot find
    -lcudart", or ninja's FileNotFoundError), after the old server was stopped."""
    home = cuda_home if _clean(cuda_home) else ""
    missing = []
    nvcc = os.path.join(home, "bin", "nvcc") if home else ""
    if not (nvcc and os.path.isfile(nvcc) and os.access(nvcc, os.X_OK)):
        missing.append("bin/nvcc")
    if not (home and os.path.exists(os.path.join(home, "lib64", "libcudart.so"))):
        missing.append("lib64/libcudart.so")
    if not missing:
        return []
    return ["SGLang %s compiles its own CUDA kernels (tvm-ffi) at its first start and needs CUDA_HOME (%s) to hold "
            "bin/nvcc and lib64/libcudart.so; missing: %s. Install the CUDA toolkit (gpuserve.sglang.cuda) or set "
            "sglang_cuda_home (or the cuda role's cuda_home) to a CUDA home that has both" % (release or "(this release)", home or "unset", ", ".join(missing))]


def usable_cpus():
    """CPUs this process may run on (its affinity: a cgroup cpuset or taskset counts), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def compute_caps(run=subprocess.run, which=None, timeout=60):
    """The GPUs' compute capabilities (['12.0', ...]) from the same nvidia-smi query and parser as
    gpuserve.sglang.nvidia_gpu_info (module_utils/_nvidia_smi.py); [] when there is no nvidia-smi or it fails (the
    model preflight then says the GPUs were not checked)."""
    nvidia_smi = (which or shutil.which)("nvidia-smi")
    if not nvidia_smi:
        return []
    try:
        done = run([nvidia_smi] + _nvidia_smi.QUERY_GPU_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                   timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    text = done.stdout.decode("utf-8", "replace") if isinstance(done.stdout, bytes) else done.stdout
    try:
        return [gpu["compute_cap"] for gpu in _nvidia_smi.parse_query_gpu(text) if gpu.get("compute_cap")]
    except _nvidia_smi.NvidiaSmiParseError:
        return []


def model_check(spec, release, run=subprocess.run):
    """The model preflight (module_utils/_model_check.py) of spec {items, release, timeout, deep}: the release
    the interpreter reports, else the one given (the version being deployed)."""
    items = [item for item in spec.get("items") or [] if isinstance(item, dict) and _clean(item.get("path"))]
    return _model_check.check(items, release=release or spec.get("release") or "",
                              compute_caps=compute_caps(run=run), timeout=float(spec.get("timeout") or 120),
                              deep=bool(spec.get("deep")))


def gather(python_given, install_record, venv, cuda_fact_file="", unit="", unit_dir="", paths=(),
           probe=False, run=subprocess.run, files=(), user="", unit_state_wanted=False, models=None, cuda_home=""):
    """Everything in one dict (see the module's RETURN)."""
    python, versioned = interpreter(python_given, install_record, venv)
    facts = {"python": python, "versioned_venv": versioned, "python_exists": False,
             "purelib": "", "sglang_installed": None, "sglang_release": "", "python_error": "",
             "cpus": usable_cpus(),
             "cuda": {}, "dropins": [], "dropin_overrides": [], "paths": {}, "files": {}, "account": {},
             "unit_state": {}, "sglang_jit": False, "jit_problems": []}
    facts["files"] = fingerprints([path for path in files if _clean(path)])
    if user and re.match(r"^[a-z_][a-z0-9_-]*[$]?$", user):
        facts["account"] = account(user)
    if unit_state_wanted and unit and re.match(r"^[A-Za-z0-9:_.@-]+$", unit):
        facts["unit_state"] = unit_state(unit, run=run)
    if cuda_fact_file and _clean(cuda_fact_file):
        cuda = _read_json(cuda_fact_file, "the CUDA facts file", "run gpuserve.sglang.cuda again, or remove it")
        facts["cuda"] = cuda if isinstance(cuda, dict) else {}
    if unit and unit_dir and _clean(unit_dir) and "/" not in unit and "\n" not in unit:
        facts["dropins"], facts["dropin_overrides"] = dropin_overrides(unit_dir, unit)
    facts["paths"] = path_facts([path for path in paths if _clean(path)])
    if _clean(python):
        facts["python_exists"] = os.path.lexists(python)
        if probe and os.path.exists(python):
            answer = probe_python(python, run=run)
            facts["purelib"], facts["sglang_installed"], facts["sglang_release"], facts["python_error"] = (
                answer["purelib"], answer["sglang"], answer["release"], answer["error"])
            facts["sglang_jit"] = bool(answer.get("jit")) and bool(answer["sglang"])
    if facts["sglang_jit"]:
        # the CUDA home the unit gets: the one given, else the cuda role's (its facts file), else /usr/local/cuda
        home = cuda_home or str(facts["cuda"].get("cuda_home") or "") or "/usr/local/cuda"
        facts["jit_problems"] = jit_toolchain_problems(home, facts["sglang_release"])
    if models and models.get("items"):
        facts["models"] = model_check(models, facts["sglang_release"], run=run)
    return facts
