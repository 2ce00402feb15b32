# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Text that reaches a systemd unit, an environment file, a shell or a Python file: what is refused there.

Control characters (C0, DEL, C1) and the Unicode line and paragraph separators are refused everywhere: a newline
starts a new unit directive (``ExecStartPre=+...`` as root), a new environment line or a new statement; the
other controls have no legitimate use in a flag, a path or a description. Checks use full matches only
(``re.fullmatch``): ``re.match`` with ``$`` accepts a trailing newline.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the separators str.splitlines() also breaks on.
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\x85]")

# systemd's unit names (src/basic/unit-name.c): these characters, one '@' at most (template/instance),
# a known suffix, 255 characters at most.
UNIT_NAME_MAX = 255
_UNIT_CHARS = r"[A-Za-z0-9:_.\\-]"
UNIT_NAME_RE = re.compile(r"(?P<prefix>%s+)(@(?P<instance>%s*))?\.(?P<suffix>[a-z]+)" % (_UNIT_CHARS, _UNIT_CHARS))
UNIT_SUFFIXES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer",
                 "slice", "scope")

# A user or group name that useradd accepts on Debian/Ubuntu/RHEL (NAME_REGEX's conservative form).
USER_NAME_RE = re.compile(r"[a-z_][a-z0-9_-]{0,30}\$?")


def control_chars(text):
    """The control characters in text, as a sorted list of their repr (empty when there are none)."""
    return sorted(set(repr(c) for c in CONTROL_RE.findall(text)))


def control_problem(what, text):
    """A message naming what holds a control character, or None when text has none."""
    if not isinstance(text, str):
        text = str(text)
    found = control_chars(text)
    if not found:
        return None
    return "%s %r holds control characters (%s): refused, they would start a new line in a unit, an " \
           "environment file or a script" % (what, text, ", ".join(found))


def unit_name_problem(what, name, suffix=None):
    """A message when name is not a valid systemd unit name (with the given suffix), else None."""
    if not isinstance(name, str) or not name:
        return "%s %r is not a unit name" % (what, name)
    match = UNIT_NAME_RE.fullmatch(name)
    if len(name) > UNIT_NAME_MAX or not match or match.group("suffix") not in UNIT_SUFFIXES:
        return ("%s %r is not a valid systemd unit name (letters, digits, ':', '_', '.', '\\', '-', one '@', "
                "a suffix such as .service, %d characters at most)" % (what, name, UNIT_NAME_MAX))
    if suffix and match.group("suffix") != suffix:
        return "%s %r must end in .%s" % (what, name, suffix)
    return None


def unbracket(host):
    """An address without the brackets an IPv6 literal may carry ('[::1]' -> '::1'); any other text as it is."""
    host = "" if host is None else str(host).strip()
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def url_host(host):
    """The host part of a URL or of SGLang's host:port (--dist-init-addr): an IPv6 literal bracketed, once."""
    host = unbracket(host)
    return "[%s]" % host if ":" in host else host
