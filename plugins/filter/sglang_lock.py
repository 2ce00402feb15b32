# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the install role: a hash lock's requirements, the line of the package to install, and whether the
lock has a wheel set for the host's Python.

A lock written by scripts/gen-sglang-lock.py says in its header which CPython versions and which platform its
hashes are for ("CPython 3.11 3.12, manylinux_2_34_x86_64 wheels only"); pip --require-hashes cannot install it on
another Python (no wheel carries one of its hashes). Debian 13's Python is 3.13, and SGLang 0.5.23's lock has no
3.13 set (its dependency outlines_core 0.1.26 has no cp313 wheel on PyPI, only an sdist that needs a Rust
toolchain and crates.io to build): the role refuses such a host before any change, naming the ways.

Pure functions, no host access (tests/unit/plugins/filter/test_sglang_lock.py).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

_HEADER_RE = re.compile(r"^#\s*Written by scripts/gen-sglang-lock\.py: CPython ([0-9. ]+), (\S+) wheels only", re.M)
_PYTHON_RE = re.compile(r"^(\d+)\.(\d+)(\.\d+)?$")
# A backslash at the end of a line continues it; '#' at a line's start or after a blank starts a comment.
_JOIN_RE = re.compile(r"\\[ \t]*\n")
_COMMENT_RE = re.compile(r"(^|\s)#.*$")


def sglang_lock_requirements(text):
    """The requirements of a hash lock's text, one string each: continued lines joined (with a blank), comments
    and surrounding blanks taken off, empty lines dropped."""
    if not isinstance(text, str):
        raise AnsibleFilterError("sglang_lock_requirements: the lock's text must be a string, got %s"
                                 % type(text).__name__)
    lines = (_COMMENT_RE.sub("", line).strip() for line in _JOIN_RE.sub(" ", text).splitlines())
    return [line for line in lines if line]


def sglang_lock_package_re(package, version):
    """The regular expression that matches the lock line of ``package``==``version`` (any case, '-', '_' and '.'
    alike in the name as pip compares them, optional extras, then a blank, a marker or the end)."""
    return "(?i)%s(\\[[^\\]]*\\])?==%s(\\s|;|\\Z)" % (re.sub(r"[-_.]+", "[-_.]+", str(package)),
                                                      re.escape(str(version)))


def sglang_lock_pythons(text):
    """The CPython X.Y versions a lock's header names (an empty list: a lock that does not say, e.g. an operator's)."""
    if not isinstance(text, str):
        raise AnsibleFilterError("sglang_lock_pythons: the lock's text must be a string, got %s" % type(text).__name__)
    match = _HEADER_RE.search(text)
    return match.group(1).split() if match else []


def sglang_lock_python_problems(text, python, lock="", package="sglang", version="", base_python="/usr/bin/python3"):
    """The refusal (a list of one message, or empty) for a host whose base Python (X.Y or X.Y.Z) the lock has no
    wheel set for. text: the lock's text, or the Pythons sglang_lock_pythons read from it. A lock whose header names
    no Pythons is not judged (pip decides)."""
    match = _PYTHON_RE.match(str(python).strip())
    if not match:
        raise AnsibleFilterError("sglang_lock_python_problems: the host's Python must be X.Y, got %r" % (python,))
    have = "%s.%s" % match.group(1, 2)
    pythons = list(text) if isinstance(text, (list, tuple)) else sglang_lock_pythons(text)
    if not pythons or have in pythons:
        return []
    what = "%s==%s" % (package, version) if version else package
    return [
        "%s on the host is Python %s, and the hash lock %s of %s has wheels for CPython %s only: pip --require-hashes "
        "cannot install it there (Debian 13's Python is 3.13; SGLang 0.5.23's dependency outlines_core 0.1.26 has "
        "no cp313 wheel). Nothing was changed. Either give the host a Python the lock has wheels for and point "
        "sglang_venv_base_python at it (Debian 13's package sources have only 3.13: install CPython %s from "
        "python.org's source with Debian's toolchain, or a python-build-standalone build, e.g. `uv python install "
        "%s`, copied to the host for an offline one), or build the missing cp%s wheels from their sdists on a "
        "Debian 13 machine with Rust (apt install cargo rustc python3-dev; `pip wheel --no-deps --no-binary "
        "outlines_core outlines_core==0.1.26 -w WHEELHOUSE`, which fetches its crates from crates.io), put them "
        "into the wheelhouse (sglang_wheel_dir) and set sglang_pip_lock to a lock made for CPython %s with "
        "scripts/gen-sglang-lock.py that carries their hashes." % (
            base_python, have, lock or "(this release's)", what, ", ".join(pythons), pythons[-1],
            pythons[-1], have.replace(".", ""), have)]


class FilterModule(object):
    """Hash lock filters of the install role."""

    def filters(self):
        return {
            "sglang_lock_pythons": sglang_lock_pythons,
            "sglang_lock_python_problems": sglang_lock_python_problems,
            "sglang_lock_requirements": sglang_lock_requirements,
            "sglang_lock_package_re": sglang_lock_package_re,
        }
