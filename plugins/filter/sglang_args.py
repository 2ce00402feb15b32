# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""SGLang's flag rules: the server role's flags as data.

- sglang_args_merge: a profile's flag mapping under the user's (true = bare flag, false/null = drop).
- sglang_argv: a flag mapping -> the list of words after the launcher (for SGLang's own parser).
- sglang_args_problems: the inputs SGLang 0.5.9 would refuse (or misuse), as messages, before the host changes.
- sglang_release_args: a profile's flags for one SGLang release only (a rule of that release's table holds).

Quoting for systemd (ExecStart, Environment=, EnvironmentFile) lives in systemd.py; the role's own inputs
(unit name, port, unit strings) are checked by sglang_input_problems in server_inputs.py.
Pure functions, no host access; unit-tested in tests/unit/plugins/filter/test_sglang_args.py.
"""

from __future__ import annotations

import json
import math
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import is_secret_flag, is_secret_name
from ansible_collections.gpuserve.sglang.plugins.module_utils._memory_plan import release_rules
from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import control_problem

string_types = (str,)  # text on the controller (ansible's tagged and unsafe strings are str)

# SGLang 0.5.9 accepts these spellings of one setting; the first is the one this collection writes.
ALIASES = {
    "tp-size": "tp",
    "tensor-parallel-size": "tp",
    "dp": "dp-size",
    "data-parallel-size": "dp-size",
    "ep": "ep-size",
    "expert-parallel-size": "ep-size",
    "model": "model-path",
    "nccl-init-addr": "dist-init-addr",
}

# Set through their own role variables, never through sglang_args.
RESERVED = {
    "model-path": "sglang_model_path",
    "host": "sglang_host",
    "port": "sglang_port",
    "api-key": "sglang_api_key (a secret: never on the command line, read by SGLang from --config)",
    "admin-api-key": "sglang_admin_api_key (a secret: never on the command line)",
    # one server over several hosts: derived per host from the list of its nodes (filter sglang_node_args)
    "nnodes": "sglang_server_nodes (the server's hosts in node-rank order; each host's --nnodes, --node-rank and "
              "--dist-init-addr are derived from it)",
    "node-rank": "sglang_server_nodes (the server's hosts in node-rank order; each host's --nnodes, --node-rank and "
                 "--dist-init-addr are derived from it)",
    "dist-init-addr": "sglang_server_nodes and sglang_dist_init_port (node 0's address and the port are derived)",
    # prefill/decode: a gateway in PD mode reads each server's kind and bootstrap port from these variables
    "disaggregation-mode": "sglang_disaggregation_mode (a gateway in PD mode reads each server's kind from it)",
    "disaggregation-bootstrap-port": "sglang_disaggregation_bootstrap_port (a gateway in PD mode names it in "
                                     "--prefill URL PORT)",
}

SPEC_TRIPLE = ("speculative-num-steps", "speculative-eagle-topk", "speculative-num-draft-tokens")
SPEC_NEEDS_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")
TRUE_WORDS = ("true", "1", "yes", "y")  # SGLang's own reading of SGLANG_ENABLE_SPEC_V2 (environ.py)
_FLAG_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Counts that must be whole numbers >= 1, and sizes/ratios that must be finite and >= 0.
POSITIVE_INTS = ("tp", "dp-size", "ep-size", "pp-size", "nnodes", "cuda-graph-max-bs", "max-running-requests")
NON_NEGATIVE = ("hicache-ratio", "hicache-size", "mem-fraction-static", "max-total-tokens", "chunked-prefill-size",
                "context-length")


def _flag_name(key):
    """'--hicache_ratio' -> 'hicache-ratio'; aliases folded; bad names refused."""
    if not isinstance(key, string_types):
        raise AnsibleFilterError("SGLang flag names are strings, got %r" % (key,))
    name = key.strip().lstrip("-").replace("_", "-").lower()
    name = ALIASES.get(name, name)
    if not _FLAG_RE.fullmatch(name) or control_problem("", key):
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
        if is_sequence(value) and value and all(is_sequence(v) for v in value):
            # a list of lists: the flag once per inner list (argparse's action="append" with nargs="+", such as
            # the gateways' --prefill URL BOOTSTRAP_PORT)
            for inner in value:
                words.append("--" + flag)
                words.extend(_scalar(flag, v) for v in inner)
            continue
        words.append("--" + flag)
        words.extend(_value_words(flag, value))
    return words


# A prefill server's --disaggregation-bootstrap-port when none is given: the server role's default, which is SGLang's
# own in every release table (rule pd_bootstrap_port_default, read from the wheels; test_sglang_pd.py holds the three
# together). The gateway's flags (filter sglang_pd_args) use it for a host that does not set the variable.
DEFAULT_BOOTSTRAP_PORT = 8998
PD_MODES = ("prefill", "decode")


def pd_kind(mode, bootstrap_port=DEFAULT_BOOTSTRAP_PORT):
    """(mode, port) of one server of a prefill/decode split: mode null/prefill/decode (lowercased), port a prefill
    server's bootstrap port as an int, None for the others. Raises naming the variable that is wrong. The one check
    of both the server's own flags (sglang_pd_server_args) and the gateway's view of its workers (sglang_worker_kinds)."""
    kind = str(mode).strip().lower()
    if kind not in PD_MODES + ("null",):
        raise AnsibleFilterError("sglang_disaggregation_mode must be null, prefill or decode, got %r" % (mode,))
    if kind != "prefill":
        return kind, None
    try:
        port = int(bootstrap_port)
    except (TypeError, ValueError):
        port = 0
    if not 0 < port < 65536:
        raise AnsibleFilterError("sglang_disaggregation_bootstrap_port must be a port number, got %r" % (bootstrap_port,))
    return kind, port


def sglang_pd_server_args(mode, bootstrap_port=DEFAULT_BOOTSTRAP_PORT):
    """This server's PD flags: {} for mode null, {"disaggregation-mode": "decode"} for a decode server,
    {"disaggregation-mode": "prefill", "disaggregation-bootstrap-port": PORT} for a prefill server."""
    kind, port = pd_kind("null" if mode is None else mode, bootstrap_port)
    if kind == "null":
        return {}
    args = {"disaggregation-mode": kind}
    if port is not None:
        args["disaggregation-bootstrap-port"] = port
    return args


def _number(args, flag, problems):
    value = args.get(flag)
    if value is None or value is True:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        problems.append("sglang_args: --%s must be a number, got %r" % (flag, value))
        return None
    if not math.isfinite(number):
        problems.append("sglang_args: --%s must be a finite number, got %r" % (flag, value))
        return None
    return number


def _range_problems(args, problems):
    for flag in POSITIVE_INTS:
        number = _number(args, flag, problems)
        if number is not None and (number < 1 or number != int(number)):
            problems.append("sglang_args: --%s must be a whole number >= 1, got %r" % (flag, args[flag]))
    for flag in NON_NEGATIVE:
        number = _number(args, flag, problems)
        if number is not None and number < 0:
            problems.append("sglang_args: --%s must not be negative, got %r" % (flag, args[flag]))


def _value_problems(args, env, problems):
    """Control characters anywhere in a flag value or an environment pair (they would reach the unit)."""
    for flag, value in args.items():
        for word in _value_words(flag, value) if value is not True else []:
            message = control_problem("sglang_args: --%s value" % flag, word)
            if message and is_secret_flag(str(flag), value):
                message = "sglang_args: --%s holds control characters (value not shown): refused" % (flag,)
            if message:
                problems.append(message)
    for name, value in env.items():
        message = control_problem("sglang_env: %s value" % (name,), "" if value is None else value)
        if message and is_secret_name(str(name)):
            message = "sglang_env: %s holds control characters (value not shown): refused" % (name,)
        if message:
            problems.append(message)


def sglang_args_problems(args, env=None, user_args=None, release=""):
    """What SGLang 0.5.9 would refuse at start (or what would misconfigure it), as a list of messages.

    args: the merged flag mapping; env: the unit's environment mapping; user_args: sglang_args as given
    (for the flags that must come from their own variables); release: the SGLang release the unit's interpreter
    has (its rules from the wheel; none: 0.5.9's). Never raises on a bad value: every problem is a message naming
    the variable and the value.
    """
    problems = []
    try:
        args = dict((_flag_name(k), v) for k, v in _items(args, "the flags") if v is not None and v is not False)
        user_items = _items(user_args, "sglang_args")
        env = dict(_items(env, "sglang_env"))
    except AnsibleFilterError as exc:
        return [str(exc)]
    for key, _value in user_items:
        try:
            name = _flag_name(key)
        except AnsibleFilterError as exc:
            problems.append(str(exc))
            continue
        if name in RESERVED:
            problems.append("sglang_args must not set --%s: use %s" % (name, RESERVED[name]))
    try:
        _value_problems(args, env, problems)
    except AnsibleFilterError as exc:
        problems.append(str(exc))

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
        if str(args.get("disaggregation-mode") or "").lower() == "decode":
            # SGLang runs a decode server without the radix cache (rule pd_decode_radix_cache, from the wheel), and
            # HiCache needs it: the server would refuse them together at start
            rules, _note = release_rules(release or None)
            way = rules.get("pd_decode_radix_cache")
            if way == "never" or (way == "with_flag" and not args.get("disaggregation-decode-enable-radix-cache")):
                problems.append(
                    "--enable-hierarchical-cache on a decode server (sglang_disaggregation_mode: decode): SGLang %s "
                    "runs a decode server without the radix cache%s, and HiCache needs it (SGLang would refuse them "
                    "together); turn HiCache off there (sglang_args: {enable-hierarchical-cache: false})"
                    % (release or "0.5.9", " unless --disaggregation-decode-enable-radix-cache is set"
                       if way == "with_flag" else ""))

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
    _range_problems(args, problems)
    mfs = args.get("mem-fraction-static")
    if isinstance(mfs, (int, float)) and not isinstance(mfs, bool) and not 0 < mfs < 1:
        problems.append("--mem-fraction-static %s must be between 0 and 1" % mfs)
    for name in env:
        if not isinstance(name, string_types) or not _ENV_NAME_RE.fullmatch(name):
            problems.append("environment variable name %r is not valid" % (name,))
    # one message per problem, in order
    return list(dict.fromkeys(problems))


CPUS_PER_RANK = "cpus_per_rank"


def _fill(value, threads):
    if value == CPUS_PER_RANK:
        return threads
    if isinstance(value, dict):
        return dict((k, _fill(v, threads)) for k, v in value.items())
    return value


def sglang_release_args(entries, release="", cpus=0, tp=1, present=()):
    """A profile's flags for one SGLang release: ``entries`` is a list of ``{when: {rule: value}, args: {...}}``;
    an entry applies when every rule of ``when`` has that value in the release's table (the rules taken from its
    wheel: ``_sglang_releases``; no release, 0.5.9's). Flags named in ``present`` (the user's own, a false to drop
    included) are left out. ``cpus_per_rank`` as a value is the host's CPUs divided by tp (at least 1)."""
    if entries in (None, ""):
        return {}
    if not is_sequence(entries):
        raise AnsibleFilterError("sglang_release_args: a list of {when, args} entries is needed, got %r" % (entries,))
    rules, _note = release_rules(release or None)
    try:
        threads = max(1, int(cpus or 0) // max(1, int(tp or 1)))
    except (TypeError, ValueError):
        raise AnsibleFilterError("sglang_release_args: cpus and tp must be whole numbers, got %r and %r" % (cpus, tp))
    taken = set(_flag_name(key) for key in (present or []))
    out = {}
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("when"), dict)
                and isinstance(entry.get("args"), dict)):
            raise AnsibleFilterError("sglang_release_args: each entry needs a 'when' and an 'args' mapping, got %r"
                                     % (entry,))
        unknown = [rule for rule in entry["when"] if rule not in rules]
        if unknown:
            raise AnsibleFilterError("sglang_release_args: no rule %s in the release tables (known: %s)"
                                     % (", ".join(sorted(unknown)), ", ".join(sorted(rules))))
        if all(rules[rule] == value for rule, value in entry["when"].items()):
            for key, value in entry["args"].items():
                if _flag_name(key) not in taken:
                    out[_flag_name(key)] = _fill(value, threads)
    return out


class FilterModule(object):
    """SGLang's flag rules."""

    def filters(self):
        return {
            "sglang_release_args": sglang_release_args,
            "sglang_args_merge": sglang_args_merge,
            "sglang_argv": sglang_argv,
            "sglang_args_problems": sglang_args_problems,
            "sglang_pd_server_args": sglang_pd_server_args,
        }
