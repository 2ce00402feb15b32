# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one masking rule of the collection: secrets masked in every form they are printed in.

Users: the modules (sglang_service's journal tail, messages, stop report and traceback; sglang_stop_processes'
command lines), the filters (``sglang_mask`` for text, ``sglang_mask_env`` for mappings: plugins/filter/sglang_secrets.py
imports this file) and the launcher that runs SGLang on the host (roles/server/files/sglang_launch.py), which runs
outside the collection and so carries the block between the ``BEGIN``/``END masking rule`` lines byte for byte:
``scripts/sync-masking-rule.py`` writes it there, and tests/unit/plugins/module_utils/test_secrets.py fails when
the two differ.

A secret field is named (any case, ``_`` or ``-`` between words): ``api_key``, ``apikey``, any name ending in
``_key``/``-key``/``_keys`` (``admin_api_key``, ``tenant-api-key``, ``control-plane-api-keys``, ``HF_API_KEY``),
ending in ``_token``/``-token`` (``hf_token``, ``HF_TOKEN``), or holding ``secret``, ``password``, ``passwd`` or
``credential`` (``oracle-password``, ``client_secret``); a name ending in ``_file``, ``_path``, ``_dir`` or
``_name`` (``sglang_secrets_file``) names where a secret is, not the secret. Its value is masked in every form:

- a command line ``--api-key v``, ``--api-key=v``, an argv list ``['--api-key', 'v']``;
- a repr or keyword list ``api_key='v'`` (SGLang 0.5.9's ``ServerArgs(...)``), ``api_key = 'v'``, ``HF_TOKEN=v``;
- a mapping: a dict repr ``'api_key': 'v'`` (0.5.23's ``server_args={...}``), JSON ``"api_key": "v"``, YAML
  ``api_key: v`` / ``api-key: v`` (the secrets file's own form);
- a name and its value separated by blanks (``api_key v``);
- an HTTP authorization ``Authorization: Bearer v`` (and ``Basic v``);
- the password of a URL's userinfo ``scheme://user:v@host`` (a pip index, a gateway's PostgreSQL or Redis URL), and
  a token given as the whole userinfo of an https URL ``https://v@host``.

``None``, ``null`` and empty values are kept, so "no key set" still shows. Every known secret value given to
``mask`` (the configured keys) is replaced wherever it appears, also repr- and JSON-escaped. A ``#`` just before
a name makes it a counter, not a field (SGLang's ``#new-token: 7``).
"""

from __future__ import annotations

import json
import re

# ---- BEGIN masking rule (the launcher carries this block byte for byte: scripts/sync-masking-rule.py) ----
MASK = "********"
# The name of a secret field: what ends it, then what must not follow (a longer name).
SECRET_NAME = (r"[A-Za-z0-9_-]*?"
               r"(?:apikeys?|(?<=[A-Za-z0-9])[_-](?:keys?|token)"
               r"|(?:secret|password|passwd|passphrase|credential)(?:s|[_-][A-Za-z0-9_-]*)?)"
               r"(?<![_-]file)(?<![_-]files)(?<![_-]path)(?<![_-]dir)(?<![_-]name)"
               r"(?![A-Za-z0-9_-])")
# A value: quoted ('...' or "..." with backslash escapes), a [list] of them, or a word (up to the closing quote of a
# quoted field name, else up to a blank).
STRING = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
QUOTED = STRING + r"|\[[ \t]*(?:(?:" + STRING + r")[ \t]*,?[ \t]*)*\]"
VALUE = r"(?P<value>" + QUOTED + r"|(?(q)(?:(?!(?P=q))[^\s\\]|\\.)+|\S+))"
# [quote] [--] name, then: the closing quote and ':', '=' or ',' (a mapping, JSON, an argv list), or '=' or ':'
# (a keyword, YAML, --flag=v), or blanks (--flag v, name v).
FIELD_PATTERN = (r"(?P<lead>(?<![A-Za-z0-9_#-])(?P<q>['\"])?-{0,2}" + SECRET_NAME
                 + r"(?:(?(q)\\?(?P=q)[ \t]*[:=,][ \t]*|(?!))|[ \t]*[:=][ \t]*|[ \t]+))" + VALUE)
BEARER_PATTERN = r"(?P<lead>\b(?:bearer|basic)[ \t]+)(?P<value>" + QUOTED + r"|\S+)"
FIELD_RE = re.compile(FIELD_PATTERN, re.IGNORECASE)
BEARER_RE = re.compile(BEARER_PATTERN, re.IGNORECASE)
# A URL's userinfo: user:password@, or a token alone before @ in an http(s) URL (pip's https://TOKEN@host/).
URL_PATTERN = (r"(?P<lead>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:'\"]*:)(?P<value>[^\s/@'\"]+)(?=@)"
               r"|(?P<lead2>\bhttps?://)(?P<value2>[^\s/@:'\"]+)(?=@)")
URL_RE = re.compile(URL_PATTERN, re.IGNORECASE)
NAME_RE = re.compile(r"-{0,2}" + SECRET_NAME, re.IGNORECASE)
_EMPTY_RE = re.compile(r"(?:None|null|''|\"\"|\[\])[,;)}\]]*\Z")
# The flag rule: a command-line flag carries a secret when its name does (the name rule), when any word of it is a
# secret word (a gateway's --jwt-key-pem, --auth-tokens), or when its value is a URL with a password or token in
# its userinfo (--postgres-db-url postgres://u:PASSWORD@db/r); a file's path and the counts of the pinned releases
# (SGLang's and both gateways' flags that hold such a word and carry none) excepted.
SECRET_WORDS = frozenset(("key", "keys", "apikey", "apikeys", "password", "passwords", "passwd", "passphrase",
                          "token", "tokens", "secret", "secrets", "credential", "credentials"))
NOT_SECRET_FLAGS = frozenset((
    "rate-limit-tokens-per-second", "balance-token-usage-threshold", "overload-token-usage-threshold",
    "worker-overload-token-usage", "prefix-token-count", "dp-minimum-tokens-scheduler",
    "least-load-mean-prefill-tokens", "routing-key-headers", "routing-key-override", "sticky-key-idle-secs",
    "bucket-inter-token-latency", "bucket-time-to-first-token", "generation-tokens-buckets", "prompt-tokens-buckets",
    "kt-max-deferred-experts-per-token", "max-prefill-tokens", "max-total-tokens", "num-reserved-decode-tokens",
    "prefill-delayer-token-usage-low-watermark", "sampling-mask-max-tokens", "speculative-num-draft-tokens",
    "speculative-dspark-align-verify-tokens-to-graph-tier", "speculative-ngram-external-corpus-max-tokens",
    "speculative-token-map", "swa-full-tokens-ratio", "tbo-token-distribution-threshold", "max-new-tokens"))
NOT_SECRET_SUFFIXES = ("-path", "-paths", "-file", "-files", "-dir", "-name")
FLAG_RE = re.compile(r"(?P<lead>(?<![A-Za-z0-9_#-])(?P<fq>['\"])?--(?P<name>[A-Za-z][A-Za-z0-9_-]*)"
                     r"(?:(?(fq)(?P=fq)[ \t]*,[ \t]*|(?!))|=|[ \t]+))(?P<value>(?!-)(?:" + QUOTED + r"|\S+))")
_FLAG_ONLY_RE = re.compile(r"--[A-Za-z][A-Za-z0-9_-]*")


def is_secret_name(name):
    """True when ``name`` (a field, a flag, an environment variable) names a secret."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None


def is_secret_flag(flag, value=None):
    """True when the command-line flag ``flag`` (``--x``, ``x`` or ``x_y``) carries a secret, by its name or by
    ``value`` (a URL with userinfo; a list: any item)."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if any(url_secret(str(item)) for item in values if item is not None and item is not True):
        return True
    name = str(flag).lstrip("-").lower().replace("_", "-")
    if is_secret_name(name):
        return True
    if name in NOT_SECRET_FLAGS or name.endswith(NOT_SECRET_SUFFIXES):
        return False
    return bool(set(name.split("-")) & SECRET_WORDS)


def _flag_masked(match):
    if not is_secret_flag(match.group("name")):
        return match.group(0)
    return _masked(match)


def _masked(match):
    value = match.group("value")
    if _EMPTY_RE.match(value):
        return match.group(0)
    if len(value) > 1 and value[0] in "'\"[" and value[-1] == {"[": "]"}.get(value[0], value[0]):
        return match.group("lead") + value[0] + MASK + value[-1]
    return match.group("lead") + MASK


def _forms(secret):
    """How a known secret value can appear: as it is, repr-escaped, JSON-escaped."""
    return {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}


def replace_known(text, secrets=()):
    """``text`` with only the known secret values (as they are, repr- and JSON-escaped) replaced by the mask; the
    field rule not applied (fixed texts such as "secrets file would change")."""
    if not isinstance(text, str) or not text:
        return text
    known = set()
    for secret in secrets or ():
        if isinstance(secret, str) and secret:
            known.update(form for form in _forms(secret) if form)
    for form in sorted(known, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def mask(text, secrets=()):
    """``text`` with every secret field's value masked (None and empty values kept) and every known secret value
    in ``secrets`` replaced wherever it appears. A list or tuple: each item masked. Not text: returned as it is."""
    if isinstance(text, (list, tuple)):
        return [MASK if index and _argv_secret(text, index) else mask(item, secrets) for index, item in enumerate(text)]
    if not isinstance(text, str) or not text:
        return text
    text = replace_known(text, secrets)
    return URL_RE.sub(_url_masked, FLAG_RE.sub(_flag_masked, BEARER_RE.sub(_masked, FIELD_RE.sub(_masked, text))))


def _argv_secret(argv, index):
    """True when argv[index] is the value of the secret flag just before it (``['--api-key', 'v']``)."""
    flag, value = argv[index - 1], argv[index]
    return (isinstance(flag, str) and isinstance(value, str) and bool(value) and not value.startswith("-")
            and _FLAG_ONLY_RE.fullmatch(flag) is not None and is_secret_flag(flag))


def _url_masked(match):
    return (match.group("lead") or match.group("lead2")) + MASK


def url_secret(url):
    """The secret a URL carries in its userinfo (the password, or an https token alone), else ""."""
    found = URL_RE.search(url or "") if isinstance(url, str) else None
    return (found.group("value") or found.group("value2") or "") if found else ""


def config_secrets(text):
    """The values of the secret fields of a YAML secrets file (``api-key: v``, one field a line, as the role
    writes it): the literal values to mask wherever they appear."""
    found = []
    for line in (text or "").splitlines():
        name, sep, value = line.partition(":")
        value = value.strip()
        if sep and is_secret_name(name.strip()) and value:
            if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]:
                value = value[1:-1]
            if value and not _EMPTY_RE.match(value):
                found.append(value)
    return found
# ---- END masking rule ----


def scrub(value, secrets=(), rule=True, literal_keys=()):
    """Every string of ``value`` (dicts, lists and tuples walked; an argv list's secret flag values masked) through
    the one rule: ``mask`` (``rule`` False: only the known secret values replaced, ``replace_known``). Under a key in
    ``literal_keys`` (fixed texts) only the known values are replaced. Other values are returned as they are."""
    if isinstance(value, dict):
        return dict((key, scrub(item, secrets, rule and key not in literal_keys, literal_keys))
                    for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return [MASK if rule and index and _argv_secret(value, index) else scrub(item, secrets, rule, literal_keys)
                for index, item in enumerate(value)]
    if isinstance(value, str):
        return mask(value, secrets) if rule else replace_known(value, secrets)
    return value


_ENV_ASSIGN_RE = re.compile(r"^[ \t]*(?:export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[ \t]*=(?P<value>.*)$")


def env_secrets(text):
    """The values of the secret-named variables (``is_secret_name``: HF_TOKEN, ...) of an environment file's text
    (``NAME=value`` lines, systemd's double quotes and backslash escapes undone) or of a mapping, and the secrets
    of URLs with userinfo among the values: the literal values to mask and register."""
    if isinstance(text, dict):
        pairs = [(str(name), "" if value is None else str(value)) for name, value in text.items()]
    else:
        pairs = []
        for line in (text.decode("utf-8", "replace") if isinstance(text, bytes) else (text or "")).splitlines():
            found = _ENV_ASSIGN_RE.match(line)
            if found:
                value = found.group("value").strip()
                if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
                    value = re.sub(r"\\(.)", r"\1", value[1:-1]) if value[0] == '"' else value[1:-1]
                pairs.append((found.group("name"), value))
    found = []
    for name, value in pairs:
        if value and not _EMPTY_RE.match(value) and is_secret_name(name):
            found.append(value)
        elif url_secret(value):
            found.append(url_secret(value))
    return found


# ansible-core 2.22's masking API: a value registered here is replaced wherever the core prints or returns it
# (failure results, run_command's messages, the callbacks' output). Older cores have none: nothing to do.
try:
    from ansible.module_utils.secrets import register_secrets as _register_secrets
except ImportError:  # ansible-core < 2.22
    _register_secrets = None


def register(values):
    """Register every non-empty secret text of ``values`` with the core's masking API where it has one (2.22+);
    returns the list of values (for the module's own masking, which runs on every core)."""
    texts = [value for value in values or () if isinstance(value, str) and value.strip() and value != MASK]
    if texts and _register_secrets is not None:
        _register_secrets(texts)
    return texts


def _no_log_values(params, spec):
    found = []
    for name, option in (spec or {}).items():
        value = (params or {}).get(name) if isinstance(params, dict) else None
        if value is None:
            continue
        if option.get("no_log"):
            found.extend(item for item in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(item, str))
        elif option.get("options"):
            for item in (value if isinstance(value, (list, tuple)) else [value]):
                found.extend(_no_log_values(item, option["options"]))
    return found


def module_secrets(params, argument_spec=None, extra=()):
    """Every secret value a module's options carry, by the one rule: the values of its ``no_log`` options
    (``argument_spec`` walked, sub-options included), of secret-named keys at any depth, of secret-named variables
    of an environment file's content (``env.content``: ``HF_TOKEN=v``) and of a secrets file's fields
    (``secrets.content``: ``api-key: v``), the secret of any URL with userinfo, and ``extra``. Registered with the
    core's masking API where it has one (``register``); returned for the module's own masking."""
    found = list(extra or ()) + _no_log_values(params, argument_spec)

    def walk(value, key="", parent=""):
        if isinstance(value, dict):
            for name, item in value.items():
                walk(item, str(name), key)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, key, parent)
        elif isinstance(value, str) and value:
            if is_secret_name(key) and not _EMPTY_RE.match(value):
                found.append(value)
            if key == "content" and parent in ("env", "environment"):
                found.extend(env_secrets(value))
            if key == "content" and parent == "secrets":
                found.extend(config_secrets(value))
            if key != "content":   # a file's text (a launcher's source, a unit) is no URL option
                found.append(url_secret(value))
    walk(params)
    return register(list(dict.fromkeys(value for value in found if isinstance(value, str) and value.strip())))


def mask_mapping(mapping, extra_secret_names=(), masked=MASK):
    """A mapping with the values of its secret-named keys (is_secret_name, or listed in ``extra_secret_names``)
    replaced by ``masked``; empty values stay empty."""
    extra = set(extra_secret_names or ())
    return {key: (masked if (key in extra or is_secret_name(str(key))) and value not in (None, "") else value)
            for key, value in mapping.items()}


def config_file_secrets(argv, read=None):
    """The values of the secrets file a command line names with ``--config FILE`` / ``--config=FILE`` (the role's
    secrets file, which SGLang reads): the literal values to mask wherever they appear. A file that cannot be read
    gives none."""
    found = []
    args = list(argv or [])
    for index, arg in enumerate(args):
        path = arg[len("--config="):] if arg.startswith("--config=") else (
            args[index + 1] if arg == "--config" and index + 1 < len(args) else None)
        if not path:
            continue
        try:
            if read is not None:
                text = read(path)
            else:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        found.extend(config_secrets(text))
    return found
