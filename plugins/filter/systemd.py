# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Quoting for systemd: what the server role writes into its unit and its environment file.

- sglang_cmdline: words or a flag mapping -> one line quoted for systemd's ExecStart.
- sglang_unit_environment: a mapping -> Environment= lines of a unit.
- sglang_envfile: a mapping -> KEY="value" lines for a systemd EnvironmentFile.
- sglang_unit_value: one setting's value with % doubled (no specifier expansion); control characters refused.
- sglang_unit_extra: a mapping of more [Service] directives -> lines (a list value repeats the directive).

Every value is refused when it holds a control character (a newline would start a new directive, for
example ExecStartPre=+ running as root); every check is a full match. Pure functions; unit-tested in
tests/unit/plugins/filter/test_systemd.py and tests/unit/plugins/filter/test_injection_properties.py.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_args import sglang_argv
from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import control_problem

string_types = (str,)  # text on the controller (ansible's tagged and unsafe strings are str)

_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words that need no quoting in ExecStart (and read the same in a shell).
_SAFE_WORD_RE = re.compile(r"[A-Za-z0-9_./:=,+@^-]+")
# A [Service] directive name (systemd's are CamelCase words).
_DIRECTIVE_RE = re.compile(r"[A-Z][A-Za-z0-9]*")


def _refuse_control(what, text):
    message = control_problem(what, text)
    if message:
        raise AnsibleFilterError(message)


def systemd_quote(word, dollar=True):
    """One word for ExecStart: systemd's quoting, with $ and % escaped so they stay literal.

    dollar=False for settings that do not expand variables (Environment=): only % is doubled there.
    Control characters are refused, not escaped.
    """
    if not isinstance(word, string_types):
        word = str(word)
    _refuse_control("command line word", word)
    escaped = word.replace("%", "%%")
    if dollar:
        escaped = escaped.replace("$", "$$")
    if word and _SAFE_WORD_RE.fullmatch(word):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sglang_cmdline(args, prefix=None):
    """Flag mapping (or list of words) -> one ExecStart line; prefix words go first."""
    if isinstance(args, dict):
        words = sglang_argv(args)
    elif is_sequence(args):
        words = [w if isinstance(w, string_types) else str(w) for w in args]
    else:
        raise AnsibleFilterError("sglang_cmdline takes a mapping of flags or a list of words, got %s"
                                 % type(args).__name__)
    prefix = list(prefix or [])
    return " ".join(systemd_quote(w) for w in prefix + words)


def _items(mapping, what):
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise AnsibleFilterError("%s must be a mapping, got %s" % (what, type(mapping).__name__))
    return list(mapping.items())


def _env_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env_pairs(items):
    """(key, value) pairs -> (key, text) with valid names and one-line values; None values are dropped."""
    pairs = []
    for key, value in items:
        if not isinstance(key, string_types) or not _ENV_NAME_RE.fullmatch(key):
            raise AnsibleFilterError("environment variable name %r is not valid" % (key,))
        if value is None:
            continue
        text = _env_value(value)
        _refuse_control("environment variable %s: the value" % key, text)
        pairs.append((key, text))
    return pairs


def sglang_unit_environment(env):
    """Mapping -> 'Environment=...' lines for a unit (quoted, % doubled, no $ expansion there), in order."""
    return "\n".join("Environment=" + systemd_quote("%s=%s" % (key, text), dollar=False)
                     for key, text in _env_pairs(_items(env, "the unit environment")))


def sglang_envfile(env):
    """Mapping -> lines for a systemd EnvironmentFile: KEY="value" with \\ and " escaped, sorted by key."""
    lines = []
    for key, text in _env_pairs(sorted(_items(env, "the environment"), key=lambda kv: str(kv[0]))):
        text = text.replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"' % (key, text))
    return "\n".join(lines) + ("\n" if lines else "")


def sglang_unit_value(value, what="unit setting"):
    """One value for a unit setting (Description=, WorkingDirectory=, a path): % doubled, controls refused."""
    text = _env_value(value)
    _refuse_control(what, text)
    return text.replace("%", "%%")


def sglang_unit_extra(extra, what="sglang_unit_extra"):
    """More [Service] directives -> lines. {Nice: -5, DeviceAllow: [a, b]}: a list repeats the directive.

    Values are written as given (systemd specifiers such as %n keep working) but may not hold control
    characters; names must be directive names (CamelCase). An empty-string value resets a list setting.
    """
    lines = []
    for name, value in _items(extra, what):
        if not isinstance(name, string_types) or not _DIRECTIVE_RE.fullmatch(name):
            raise AnsibleFilterError("%s: %r is not a systemd directive name" % (what, name))
        values = value if is_sequence(value) else [value]
        for one in values:
            if isinstance(one, (dict, list)) or one is None:
                raise AnsibleFilterError("%s: %s=%r is not a scalar value" % (what, name, one))
            text = _env_value(one)
            _refuse_control("%s: %s value" % (what, name), text)
            lines.append("%s=%s" % (name, text))
    return "\n".join(lines)


class FilterModule(object):
    """Quoting for systemd units and environment files."""

    def filters(self):
        return {
            "sglang_cmdline": sglang_cmdline,
            "sglang_envfile": sglang_envfile,
            "sglang_unit_environment": sglang_unit_environment,
            "sglang_unit_value": sglang_unit_value,
            "sglang_unit_extra": sglang_unit_extra,
        }
