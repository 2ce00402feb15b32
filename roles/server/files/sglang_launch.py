# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Start SGLang's launcher module with its secrets masked in what it logs (gpuserve.sglang.server).

Usage (the unit's ExecStart): python sglang_launch.py -m sglang.launch_server --config /etc/sglang/x.secrets.yaml ...

SGLang logs its arguments at start, keys included: 0.5.9 as ``server_args=ServerArgs(..., api_key='...')``,
0.5.23 as ``server_args={..., 'api_key': '...'}``. This launcher, before it runs the module with runpy (same
process, same argv after the module name, so SGLang reads sys.argv as under ``python -m``), masks with the
collection's one masking rule (the block between the ``BEGIN``/``END masking rule`` lines below is
plugins/module_utils/_secrets.py's, byte for byte: this file runs on the host, outside the collection;
scripts/sync-masking-rule.py writes it, a unit test fails when they differ) every secret field (``api_key``,
``admin_api_key``, ``*_key``, ``*_token``, ``*secret*``, ``*password*``, in a repr, a dict, JSON, YAML, a command
line, an argv list, ``Authorization: Bearer``) and the values of the secrets file given with ``--config`` wherever
they appear, in:

- every logging record of the process (a LogRecord factory: independent of the handlers SGLang installs later);
- every write to sys.stdout and sys.stderr (print, uvicorn, a traceback that shows ServerArgs).

Child processes that SGLang spawns (schedulers, detokenizer) do not run this file; in 0.5.9 they do not log
server_args. The keys themselves reach SGLang through --config (a 0640 YAML file), never the command line.
"""

from __future__ import annotations

import io
import json
import logging
import re
import runpy
import sys

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


class _MaskingStream(io.TextIOBase):
    """A text stream that masks secrets in each write and passes everything else to the real stream."""

    def __init__(self, stream, secrets=()):
        super().__init__()
        self._stream = stream
        self._secrets = tuple(secrets)

    def write(self, text):
        return self._stream.write(mask(text, self._secrets))

    def flush(self):
        return self._stream.flush()

    def fileno(self):
        return self._stream.fileno()

    def isatty(self):
        return self._stream.isatty()

    def writable(self):
        return True

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")

    @property
    def buffer(self):
        return getattr(self._stream, "buffer", None)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def known_secrets(args):
    """The values of the secrets file named by ``--config FILE`` / ``--config=FILE`` in SGLang's arguments (the
    service user reads it: 0640, its group); none when there is no such file or it cannot be read."""
    found = []
    for index, arg in enumerate(args):
        path = arg[len("--config="):] if arg.startswith("--config=") else (
            args[index + 1] if arg == "--config" and index + 1 < len(args) else None)
        if not path:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                found.extend(config_secrets(handle.read()))
        except (OSError, UnicodeDecodeError):
            continue
    return found


def install(secrets=()):
    """Mask secrets (the rule, and the known values in ``secrets``) in every log record and in stdout/stderr of
    this process."""
    secrets = tuple(secrets)
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # pylint: disable=broad-except  # a bad format is logging's business, not ours
            return record
        masked = mask(message, secrets)
        if masked != message:
            record.msg, record.args = masked, ()
        return record

    logging.setLogRecordFactory(factory)
    sys.stdout = _MaskingStream(sys.stdout, secrets)
    sys.stderr = _MaskingStream(sys.stderr, secrets)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] != "-m":
        sys.stderr.write("usage: sglang_launch.py -m MODULE [ARGS...]\n")
        return 2
    module, rest = argv[1], argv[2:]
    install(known_secrets(rest))
    sys.argv = [module] + rest
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
