# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the server role: SGLang's flags as data, turned into the unit's ExecStart.

- sglang_args_merge: a profile's flag mapping under the user's (true = bare flag, false/null = drop).
- sglang_argv: a flag mapping -> the list of words after the launcher (for SGLang's own parser).
- sglang_cmdline: words or a flag mapping -> one line quoted for systemd's ExecStart.
- sglang_args_problems: the inputs SGLang 0.5.9 would refuse (or misuse), as messages, before the host changes.
- sglang_envfile: a mapping -> KEY="value" lines for a systemd EnvironmentFile.
- sglang_unit_environment: a mapping -> Environment= lines of a unit.
- sglang_mask_env: a mapping with the values of secret-looking keys masked (for the deployment record).

Pure functions, no host access; unit-tested in tests/unit/plugins/filter/test_sglang_cmdline.py.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_cmdline
short_description: Quote an SGLang command line for a systemd ExecStart
version_added: "0.1.0"
author: gpuserve.sglang maintainers
description:
  - Turns an ordered mapping of SGLang flags (names without the leading dashes) or a list of words into one
    line for a systemd C(ExecStart=), quoted by systemd's rules (C(systemd.service(5)), "Command lines").
  - A word that is not made only of safe characters is put in double quotes with C(\\) and C(") escaped;
    C($) becomes C($$) (no environment expansion) and C(%) becomes C(%%) (no specifier expansion), in every word.
  - In a mapping, V(true) is a bare flag, V(false) and V(null) drop the flag, a list gives the flag followed by
    each element, a dict is passed as compact JSON, a float keeps its decimal point (V(4.0) stays C(4.0)).
positional: _input
options:
  _input:
    description: The flags (a mapping, in order) or the words (a list of strings).
    type: raw
    required: true
  prefix:
    description: Words put before the flags, for example the interpreter, C(-m) and the launcher module.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: ExecStart for the unit
  ansible.builtin.debug:
    msg: >-
      {{ {'model-path': '/models/Kimi K2.5', 'tp': 8, 'enable-hierarchical-cache': true, 'hicache-ratio': 4.0}
         | gpuserve.sglang.sglang_cmdline(prefix=['/opt/sglang/venv/bin/python', '-m', 'sglang.launch_server']) }}
  # /opt/sglang/venv/bin/python -m sglang.launch_server --model-path "/models/Kimi K2.5" --tp 8
  #   --enable-hierarchical-cache --hicache-ratio 4.0
"""

RETURN = r"""
_value:
  description: The command line, one string, ready for C(ExecStart=).
  type: str
"""

import json
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence
from ansible.module_utils.six import string_types

# SGLang 0.5.9 accepts these spellings of one setting; the first is the one this collection writes.
ALIASES = {
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "dp": "dp-size",
    "data-parallel-size": "dp-size",
    "ep": "ep-size",
    "expert-parallel-size": "ep-size",
    "model": "model-path",
}

# Set through their own role variables, never through sglang_args.
RESERVED = {
    "model-path": "sglang_model_path",
    "host": "sglang_host",
    "port": "sglang_port",
    "api-key": "sglang_api_key (kept out of the unit file, in the 0600 environment file)",
}

SPEC_TRIPLE = ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens")
SPEC_NEEDS_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")
TRUE_WORDS = ("true", "1", "yes", "y")  # SGLang's own reading of SGLANG_ENABLE_SPEC_V2 (environ.py)
SECRET_KEY_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_FLAG_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words that need no quoting in ExecStart (and read the same in a shell).
_SAFE_WORD_RE = re.compile(r"^[A-Za-z0-9_./:=,+@^-]+$")


def _flag_name(key):
    """'--hicache_ratio' -> 'hicache-ratio'; aliases folded; bad names refused."""
    if not isinstance(key, string_types):
        raise AnsibleFilterError("SGLang flag names are strings, got %r" % (key,))
    name = key.strip().lstrip("-").replace("_", "-").lower()
    name = ALIASES.get(name, name)
    if not _FLAG_RE.match(name):
        raise AnsibleFilterError("not an SGLang flag name: %r (use names like 'hicache-ratio')" % (key,))
    return name


def _items(mapping, what):
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        raise AnsibleFilterError("%s must be a mapping of SGLang flag names to values, got %s"
                                 % (what, type(mapping).__name__))
    return list(mapping.items())


def sglang_args_merge(profile, user=None, first=None):
    """Merge flag mappings: first (e.g. model path), then the profile, then the user's on top.

    Keys are normalised (no dashes in front, '_' -> '-', aliases folded). A key keeps the position where it
    first appeared; a later value replaces the earlier one; False/None in a later mapping drops the flag
    (so a user can remove a profile flag). Returns a new ordered dict without dropped flags.
    """
    merged = {}
    for what, mapping in (("first", first), ("the profile's flags", profile), ("sglang_args", user)):
        for key, value in _items(mapping, what):
            merged[_flag_name(key)] = value
    return dict((k, v) for k, v in merged.items() if v is not None and v is not False)


def _value_words(flag, value):
    if value is True:
        return []
    if isinstance(value, dict):
        return [json.dumps(value, separators=(",", ":"), sort_keys=True)]
    if is_sequence(value):
        return [_scalar(flag, v) for v in value]
    return [_scalar(flag, value)]


def _scalar(flag, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return float.__repr__(float(value))
    if isinstance(value, (int, string_types)):
        return str(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    raise AnsibleFilterError("--%s: unsupported value %r" % (flag, value))


def sglang_argv(args):
    """Flag mapping -> list of words: ['--tp', '8', '--enable-hierarchical-cache', ...]."""
    words = []
    for key, value in _items(args, "the flags"):
        flag = _flag_name(key)
        if value is None or value is False:
            continue
        words.append("--" + flag)
        words.extend(_value_words(flag, value))
    return words


def systemd_quote(word, dollar=True):
    """One word for ExecStart: systemd's quoting, with $ and % escaped so they stay literal.

    dollar=False for settings that do not expand variables (Environment=): only % is doubled there.
    """
    if not isinstance(word, string_types):
        word = str(word)
    escaped = word.replace("%", "%%")
    if dollar:
        escaped = escaped.replace("$", "$$")
    if word and _SAFE_WORD_RE.match(word):
        return escaped
    out = []
    for char in escaped:
        if char == "\\":
            out.append("\\\\")
        elif char == '"':
            out.append('\\"')
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


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


def _env_pairs(items):
    """(key, value) pairs -> (key, text) with valid names and one-line values; None values are dropped."""
    pairs = []
    for key, value in items:
        if not isinstance(key, string_types) or not _ENV_NAME_RE.match(key):
            raise AnsibleFilterError("environment variable name %r is not valid" % (key,))
        if value is None:
            continue
        text = _env_value(value)
        if "\n" in text:
            raise AnsibleFilterError("environment variable %s: a value cannot span lines" % key)
        pairs.append((key, text))
    return pairs


def sglang_unit_environment(env):
    """Mapping -> 'Environment=...' lines for a unit (quoted, % doubled, no $ expansion there), in order."""
    return "\n".join("Environment=" + systemd_quote("%s=%s" % (key, text), dollar=False)
                     for key, text in _env_pairs(_items(env, "the unit environment")))


def _number(args, flag, problems):
    value = args.get(flag)
    if value is None or value is True:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        problems.append("--%s must be a number, got %r" % (flag, value))
        return None


def sglang_args_problems(args, env=None, user_args=None):
    """What SGLang 0.5.9 would refuse at start (or what would misconfigure it), as a list of messages.

    args: the merged flag mapping; env: the unit's environment mapping; user_args: sglang_args as given
    (for the flags that must come from their own variables).
    """
    problems = []
    args = dict((_flag_name(k), v) for k, v in _items(args, "the flags") if v is not None and v is not False)
    env = env or {}
    for key, _value in _items(user_args, "sglang_args"):
        name = _flag_name(key)
        if name in RESERVED:
            problems.append("sglang_args must not set --%s: use %s" % (name, RESERVED[name]))

    hicache = bool(args.get("enable-hierarchical-cache"))
    if hicache:
        ratio = _number(args, "hicache-ratio", problems)
        size = _number(args, "hicache-size", problems)
        if not size and ratio is not None and ratio <= 1:
            problems.append(
                "--hicache-ratio %s: the host pool must be larger than the GPU KV pool (ratio > 1); SGLang would "
                "fail with 'The host memory should be larger than the device memory with the current protocol'"
                % args.get("hicache-ratio"))
        if args.get("disable-radix-cache"):
            problems.append("--enable-hierarchical-cache with --disable-radix-cache: SGLang refuses them together "
                            "('The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive')")

    present = [f for f in SPEC_TRIPLE if f in args]
    if present and len(present) != len(SPEC_TRIPLE):
        problems.append("partial speculative settings: %s set but %s missing; set all three or none"
                        % (", ".join("--" + f for f in present),
                           ", ".join("--" + f for f in SPEC_TRIPLE if f not in args)))
    algorithm = str(args.get("speculative-algorithm") or "").upper()
    if present and not algorithm:
        problems.append("speculative settings (%s) without --speculative-algorithm"
                        % ", ".join("--" + f for f in present))
    if algorithm in SPEC_NEEDS_DRAFT and not args.get("speculative-draft-model-path"):
        problems.append("--speculative-algorithm %s needs a draft model (sglang_draft_model_path or "
                        "--speculative-draft-model-path)" % algorithm)
    spec_v2 = str(env.get("SGLANG_ENABLE_SPEC_V2", "")).strip().lower() in TRUE_WORDS
    topk = _number(args, "speculative-eagle-topk", problems)
    if spec_v2 and topk is not None and topk > 1:
        problems.append("SGLANG_ENABLE_SPEC_V2 with --speculative-eagle-topk %s: spec v2 only supports topk = 1 "
                        "('Spec v2 currently only supports topk = 1 for speculative decoding.')"
                        % args.get("speculative-eagle-topk"))
    for flag in ("tp", "mem-fraction-static", "cuda-graph-max-bs"):
        _number(args, flag, problems)
    mfs = args.get("mem-fraction-static")
    if isinstance(mfs, (int, float)) and not isinstance(mfs, bool) and not 0 < mfs < 1:
        problems.append("--mem-fraction-static %s must be between 0 and 1" % mfs)
    for name in env:
        if not isinstance(name, string_types) or not _ENV_NAME_RE.match(name):
            problems.append("environment variable name %r is not valid" % (name,))
    return problems


def _env_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def sglang_envfile(env):
    """Mapping -> lines for a systemd EnvironmentFile: KEY="value" with \\, " and $ handled, sorted by key."""
    lines = []
    for key, text in _env_pairs(sorted(_items(env, "the environment"), key=lambda kv: str(kv[0]))):
        text = text.replace("\\", "\\\\").replace('"', '\\"')
        lines.append('%s="%s"' % (key, text))
    return "\n".join(lines) + ("\n" if lines else "")


def sglang_mask_env(env, extra_secret_keys=None, mask="********"):
    """Mapping with the values of secret-looking keys (…KEY, TOKEN, SECRET, PASSWORD…) replaced by a mask."""
    extra = set(extra_secret_keys or [])
    out = {}
    for key, value in _items(env, "the environment"):
        secret = key in extra or bool(SECRET_KEY_RE.search(str(key)))
        out[key] = mask if secret and value not in (None, "") else value
    return out


class FilterModule(object):
    """SGLang flags as data -> the server unit's command line."""

    def filters(self):
        return {
            "sglang_args_merge": sglang_args_merge,
            "sglang_argv": sglang_argv,
            "sglang_cmdline": sglang_cmdline,
            "sglang_args_problems": sglang_args_problems,
            "sglang_envfile": sglang_envfile,
            "sglang_mask_env": sglang_mask_env,
            "sglang_unit_environment": sglang_unit_environment,
        }
