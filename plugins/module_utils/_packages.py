# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""System packages and pip requirements, asked of the host before anything is installed: an unchanged host costs a
query (dpkg-query, rpm -q, the venv's own interpreter) and no apt-get update, no index, no network.

``run(argv, data=None, environ_update=None) -> (rc, stdout, stderr)`` is AnsibleModule.run_command (a fake in the
tests). What the apt, package and pip modules did for the role, with the same outcome on the host: apt-get
update only when something is to be installed and the cache is older than an hour (cache_valid_time 3600), or
holds no package lists at all (an image build or provisioning script that emptied /var/lib/apt/lists minutes ago
leaves a young directory and nothing in it: apt then installs nothing and exits 0), or when the repository changed;
every install is proven by asking the package database afterwards (a name that installed nothing is an error that
names it); dpkg -i of a .deb only when that version is not installed; pip only for requirements
the venv does not satisfy.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
APT_OPTIONS = ["-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
CACHE_VALID_TIME = 3600
APT_LISTS = "/var/lib/apt/lists"
CACHE_STAMPS = ("/var/lib/apt/periodic/update-success-stamp", APT_LISTS)

# Run by the venv's interpreter: which requirements (NAME[EXTRAS] SPECIFIER) it does not satisfy, each extra's
# dependencies included. A requirement that is not NAME[EXTRAS] SPECIFIER (a URL, a path) counts as unsatisfied:
# pip is asked, and reports whether it installed anything.
PIP_CHECK = r"""
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
dists = {}
for dist in metadata.distributions():
    dists.setdefault(norm(dist.metadata["Name"] or ""), dist)
def ok(req):
    dist = dists.get(norm(req.name))
    if dist is None or not req.specifier.contains(dist.version, prereleases=True):
        return False
    for extra in req.extras:
        for text in dist.requires or []:
            dep = Requirement(text)
            if dep.marker and "extra" in str(dep.marker) and dep.marker.evaluate({"extra": extra}):
                if not ok(Requirement(str(dep).split(";")[0])):
                    return False
    return True
missing = []
for text in json.loads(sys.argv[1]):
    try:
        req = Requirement(text)
    except Exception:
        missing.append(text)
        continue
    if req.url or not ok(req):
        missing.append(text)
print(json.dumps(missing))
"""


class PackageError(Exception):
    """A package query or install failed; the message names the command and its output."""


def _tail(out, err):
    return ((err or "").strip() or (out or "").strip())[-2000:]


class Packages(object):
    """The host's package manager (apt where there is dpkg-query, else dnf or yum), through ``run``; ``which(name)``
    finds a command (None when absent); ``clock`` and ``stamps`` date the apt cache."""

    def __init__(self, run, which, check_mode=False, clock=time.time, stamps=CACHE_STAMPS, lists=APT_LISTS):
        self.run = run
        self.which = which
        self.check_mode = check_mode
        self.clock = clock
        self.stamps = stamps
        self.lists = lists
        self.cache_fresh = False

    def _call(self, argv, env=None, data=None, output=False):
        rc, out, err = self.run(argv, data=data, environ_update=dict(APT_ENV, **(env or {})))
        if rc != 0:
            raise PackageError("%s failed (rc=%d): %s" % (" ".join(shlex.quote(a) for a in argv), rc, _tail(out, err)))
        return (out, err) if output else out

    def has_lists(self):
        """Whether apt's cache holds any package list (a ``*_Packages`` index, compressed or not): an emptied lists
        directory is young by its mtime and still a cache with nothing in it."""
        try:
            return any("_Packages" in name for name in os.listdir(self.lists))
        except OSError:
            return False

    def manager(self):
        """'apt', 'dnf', 'yum', or None."""
        if self.which("dpkg-query") and self.which("apt-get"):
            return "apt"
        for name in ("dnf", "yum"):
            if self.which(name) and self.which("rpm"):
                return name
        return None

    def missing(self, names):
        """The names of ``names`` that are not installed (a NAME=VERSION asks for that version)."""
        kind = self.manager()
        if kind is None:
            raise PackageError("no apt-get, dnf or yum on this host to install %s" % ", ".join(names))
        if kind == "apt":
            argv = ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Status}\t${Version}\n"]
            _rc, out, _err = self.run(argv + [n.split("=")[0] for n in names], environ_update=APT_ENV)
            found = {}
            for line in out.splitlines():
                parts = line.split("\t")
                if len(parts) == 3 and parts[1] == "installed":
                    found[parts[0]] = parts[2]
            missing = []
            for name in names:
                package, _sep, version = name.partition("=")
                package = package.split(":")[0]
                if package not in found or (version and found[package] != version):
                    missing.append(name)
            return missing
        return [name for name in names if self.run(["rpm", "-q", name], environ_update=APT_ENV)[0] != 0]

    def refresh(self, force=False):
        """apt-get update when ``force`` (the repository changed), the cache is older than an hour or holds no
        package lists; once a run. Returns the change, or None."""
        if self.cache_fresh and not force:
            return None
        if not force and self.has_lists():
            ages = [self.clock() - os.stat(p).st_mtime for p in self.stamps if os.path.exists(p)]
            if ages and ages[0] < CACHE_VALID_TIME:
                self.cache_fresh = True
                return None
        if not self.check_mode:
            self._call(["apt-get", "update"])
        self.cache_fresh = True
        return "apt-get update"

    def ensure(self, names):
        """Install what of ``names`` is missing; returns the changes (apt-get update, the install), [] when all
        were there."""
        names = [n for n in names if n]
        if not names:
            return []
        missing = self.missing(names)
        if not missing:
            return []
        kind = self.manager()
        changes = []
        if kind == "apt":
            update = self.refresh()
            if update:
                changes.append(update)
            argv = ["apt-get", "install", "-y"] + APT_OPTIONS + missing
        else:
            argv = [kind, "install", "-y"] + missing
        if not self.check_mode:
            out, err = self._call(argv, output=True)
            # apt-get reads a name it finds in no list as a pattern, installs nothing and exits 0: the package
            # database, not the exit status, says whether each package is there now.
            still = self.missing(missing)
            if still:
                raise PackageError("%s exited 0 but did not install %s (the package database has no such package "
                                   "installed afterwards; is it in the configured repositories?): %s"
                                   % (" ".join(shlex.quote(a) for a in argv), ", ".join(still), _tail(out, err)))
        changes.append("installed %s" % " ".join(missing))
        return changes

    def deb(self, path):
        """dpkg -i ``path`` unless its package is installed at its version; returns the change, or None. In check
        mode a .deb not downloaded yet counts as to be installed."""
        if not os.path.exists(path):
            return "installed %s" % os.path.basename(path)
        out = self._call(["dpkg-deb", "-f", path, "Package", "Version"])
        fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        package, version = fields.get("Package", ""), fields.get("Version", "")
        _rc, status, _err = self.run(["dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", package],
                                     environ_update=APT_ENV)
        if status.strip() == "installed %s" % version:
            return None
        if not self.check_mode:
            self._call(["dpkg", "--force-confdef", "--force-confold", "-i", path])
        return "installed %s %s from %s" % (package, version, os.path.basename(path))


def pip_unsatisfied(run, python, requirements):
    """The requirements the venv of ``python`` does not satisfy (asked of that interpreter, no index)."""
    rc, out, err = run([python, "-c", PIP_CHECK, json.dumps(list(requirements))], environ_update={"LC_ALL": "C"})
    if rc != 0:
        raise PackageError("%s could not say which requirements it satisfies (rc=%d): %s"
                           % (python, rc, _tail(out, err)))
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise PackageError("%s printed no list of unsatisfied requirements: %s" % (python, _tail(out, err)))


_LOCK_LINE_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*")
_REQ_RE = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*")


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text):
    """{normalized name: version} of a hash lock (``NAME==VERSION --hash=sha256:...`` per requirement, backslash
    continuations joined, comments skipped); raises PackageError on a line that is not such a pin."""
    pins = {}
    joined = re.sub(r"\\\n", " ", text or "")
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line.strip()
        if not line:
            continue
        found = _LOCK_LINE_RE.fullmatch(line)
        if not found:
            raise PackageError("the lock line %r is not NAME==VERSION --hash=sha256:..." % line[:120])
        pins[_norm(found.group(1))] = found.group(2)
    return pins


def lock_problems(requirements, text):
    """Why the lock does not pin ``requirements`` (each ``name[extras]==version``): a requirement that is not an
    exact pin, or whose name the lock pins at another version or not at all; [] when it does."""
    try:
        pins = lock_pins(text)
    except PackageError as exc:
        return [str(exc)]
    if not pins:
        return ["the lock pins nothing"]
    problems = []
    for requirement in requirements:
        found = _REQ_RE.fullmatch(requirement)
        if not found:
            problems.append("%s is not an exact pin (name==version)" % requirement)
        elif pins.get(_norm(found.group(1))) != found.group(2):
            problems.append("%s: the lock pins %s" % (requirement, pins.get(_norm(found.group(1)), "nothing of it")))
    return problems


def pip_install_lock(run, python, lock_path, extra_args=""):
    """pip install exactly the hash lock at ``lock_path`` into the venv of ``python`` (``--require-hashes
    --no-deps``: nothing the lock does not name, every file checked); True when pip installed anything."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--require-hashes", "--no-deps"]
    argv += shlex.split(extra_args or "") + ["-r", lock_path]
    rc, out, err = run(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        raise PackageError("pip install --require-hashes -r %s failed (rc=%d): %s" % (lock_path, rc, _tail(out, err)))
    return "Successfully installed" in out


def pip_install(run, python, requirements, extra_args=""):
    """pip install the requirements into the venv of ``python``; True when pip installed anything."""
    argv = [python, "-m", "pip", "install", "--disable-pip-version-check"] + shlex.split(extra_args or "")
    argv += list(requirements)
    rc, out, err = run(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        raise PackageError("pip install %s failed (rc=%d): %s" % (" ".join(requirements), rc, _tail(out, err)))
    return "Successfully installed" in out
