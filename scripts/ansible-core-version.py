# SPDX-License-Identifier: GPL-3.0-or-later
"""The ansible-core release a controller of tests/controllers.txt names, read from PyPI's JSON
(https://pypi.org/pypi/ansible-core/json), never typed:

  ansible-core-version.py latest    -> the newest release, pre-releases included (2.22.0rc1 on 2026-12-06)
  ansible-core-version.py 2.19      -> the newest final release of that series (2.19.14)
  ansible-core-version.py 2.19.14   -> that release, as it is (no look-up)
  ansible-core-version.py --requires-python VERSION -> the Python range that release declares (">=3.13")

Offline-safe: PyPI's answer is kept in the cache ($GPUSERVE_CACHE, default ~/.cache/gpuserve-sglang/
pypi-ansible-core.json) and asked again only when older than a day (GPUSERVE_PYPI_MAX_AGE seconds); without the
network the kept answer is used, whatever its age (said on stderr). No answer and none kept: exit 1, saying so.
Yanked releases and releases without files are not candidates."""
from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.request

URL = "https://pypi.org/pypi/ansible-core/json"
VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:(a|b|rc)(\d+))?$")
PRE_ORDER = {"a": 0, "b": 1, "rc": 2, None: 3}


def version_key(version):
    """A sortable key for an ansible-core version (X.Y.Z with an optional aN, bN or rcN); None for any other form."""
    match = VERSION_RE.match(version)
    if not match:
        return None
    major, minor, patch, pre, num = match.groups()
    return (int(major), int(minor), int(patch), PRE_ORDER[pre], int(num or 0))


def candidates(releases):
    """The releases of PyPI's 'releases' mapping that can be installed: files, none of them yanked, a known form."""
    return [version for version, files in releases.items()
            if files and not all(f.get("yanked") for f in files) and version_key(version) is not None]


def resolve(spec, releases):
    """The release that spec (latest, X.Y or X.Y.Z[pre]) names, from PyPI's 'releases' mapping."""
    if spec != "latest" and version_key(spec) is not None:
        return spec
    versions = candidates(releases)
    if spec == "latest":
        pool = versions
    elif re.match(r"^\d+\.\d+$", spec):
        pool = [v for v in versions if v.startswith(spec + ".") and version_key(v)[3] == PRE_ORDER[None]]
    else:
        raise ValueError("not latest, X.Y or X.Y.Z: %r" % spec)
    if not pool:
        raise ValueError("PyPI lists no ansible-core release for %r" % spec)
    return max(pool, key=version_key)


def requires_python(version, releases):
    """The Requires-Python of a release's files ('' when PyPI gives none)."""
    for entry in releases.get(version, []):
        if entry.get("requires_python"):
            return entry["requires_python"]
    return ""


def python_allowed(python, spec):
    """Whether Python X.Y satisfies a Requires-Python of comma-separated >=, <, <=, >, ==, != clauses on X.Y[.Z]."""
    have = tuple(int(p) for p in python.split("."))

    def cmp(other):
        want = tuple(int(p) for p in other.split(".") if p.isdigit())
        want = want[:2] if len(want) > 2 and want[2] == 0 else want
        return (have[:len(want)] > want) - (have[:len(want)] < want)
    ops = {">=": lambda c: c >= 0, ">": lambda c: c > 0, "<=": lambda c: c <= 0, "<": lambda c: c < 0,
           "==": lambda c: c == 0, "!=": lambda c: c != 0}
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        match = re.match(r"^(>=|<=|==|!=|>|<)\s*([0-9.]+)(\.\*)?$", clause)
        if match and not ops[match.group(1)](cmp(match.group(2))):
            return False
    return True


def pypi_releases(cache_dir, max_age, fetch=None):
    """PyPI's 'releases' mapping: asked again when the kept answer is older than max_age seconds, else the kept one."""
    path = os.path.join(cache_dir, "pypi-ansible-core.json")
    fresh = os.path.exists(path) and time.time() - os.path.getmtime(path) < max_age
    if not fresh:
        try:
            body = (fetch or _fetch)()
            json.loads(body)["releases"]   # pylint: disable=expression-not-assigned
            os.makedirs(cache_dir, exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as handle:
                handle.write(body)
            os.replace(path + ".tmp", path)
        except (OSError, ValueError, KeyError) as exc:
            if not os.path.exists(path):
                raise RuntimeError("ansible-core-version: PyPI did not answer (%s) and no answer is kept in %s"
                                   % (exc, path)) from exc
            sys.stderr.write("ansible-core-version: PyPI did not answer (%s); using the answer kept in %s\n"
                             % (exc, path))
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["releases"]


def _fetch():
    with urllib.request.urlopen(URL, timeout=20) as response:   # nosec: a fixed https URL
        return response.read().decode("utf-8")


def main(argv):
    cache = os.environ.get("GPUSERVE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuserve-sglang")
    max_age = int(os.environ.get("GPUSERVE_PYPI_MAX_AGE", "86400"))
    if len(argv) == 2 and argv[0] == "--requires-python":
        print(requires_python(argv[1], pypi_releases(cache, max_age)))
        return 0
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    if argv[0] != "latest" and version_key(argv[0]) is not None:
        print(argv[0])
        return 0
    try:
        print(resolve(argv[0], pypi_releases(cache, max_age)))
    except (RuntimeError, ValueError) as exc:
        sys.stderr.write("%s\n" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
