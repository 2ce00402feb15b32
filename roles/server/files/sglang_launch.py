# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Start SGLang's launcher module with its secrets masked in what it logs (gpuserve.sglang.server).

Usage (the unit's ExecStart): python sglang_launch.py -m sglang.launch_server --config /etc/sglang/x.secrets.yaml ...

SGLang logs its arguments at start, keys included: 0.5.9 as ``server_args=ServerArgs(..., api_key='...')``,
0.5.23 as ``server_args={..., 'api_key': '...'}``. This launcher, before it runs the module with runpy (same
process, same argv after the module name, so SGLang reads sys.argv as under ``python -m``), masks the values of
api_key, admin_api_key and any ``*_api_key``, ``*_token``, ``*secret*``, ``*password*`` field, in a repr
(``name='v'``), a dict or JSON (``'name': 'v'``) and on a command line (``--api-key v``), in:

- every logging record of the process (a LogRecord factory: independent of the handlers SGLang installs later);
- every write to sys.stdout and sys.stderr (print, uvicorn, a traceback that shows ServerArgs).

Child processes that SGLang spawns (schedulers, detokenizer) do not run this file; in 0.5.9 they do not log
server_args. The keys themselves reach SGLang through --config (a 0640 YAML file), never the command line.
"""

from __future__ import annotations

import io
import logging
import re
import runpy
import sys

# The same pattern texts as plugins/module_utils/_secrets.py (a unit test fails when they differ): this file runs
# on the host, outside the collection, so it carries its own copy.
MASK = "********"
SECRET_NAME = r"(?:[A-Za-z_]*(?:api_key|_token)|[A-Za-z_]*(?:secret|password)[A-Za-z_]*)(?![A-Za-z0-9_])"
KEYWORD_PATTERN = (r"(?P<lead>\b" + SECRET_NAME + r"=)"
                   r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,)\s]+)")
MAPPING_PATTERN = (r"(?P<lead>(?P<q>['\"])" + SECRET_NAME + r"(?P=q)\s*:\s*)"
                   r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,}\s]+)")
FLAG_PATTERN = (r"(?P<lead>--(?:[a-z-]*(?:api-key|-token)|[a-z-]*(?:secret|password)[a-z-]*)(?![a-z0-9_-])(?:=|\s+))"
                r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\"]+(?:['\"][^\s'\",}]+)*)")
_RES = [re.compile(pattern, re.IGNORECASE) for pattern in (MAPPING_PATTERN, KEYWORD_PATTERN, FLAG_PATTERN)]
_EMPTY = ("None", "null", "''", '""')


def _masked(match):
    value = match.group("value")
    if value in _EMPTY:
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return match.group("lead") + quote + MASK + quote


def mask(text):
    """text with the values of secret fields masked (server_args as a repr or a dict, JSON, flags); None and
    empty values stay, so "no key set" still shows. Not a string: returned as it is."""
    if not isinstance(text, str) or not text:
        return text
    for regex in _RES:
        text = regex.sub(_masked, text)
    return text


class _MaskingStream(io.TextIOBase):
    """A text stream that masks secrets in each write and passes everything else to the real stream."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream

    def write(self, text):
        return self._stream.write(mask(text))

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


def install():
    """Mask secrets in every log record and in stdout/stderr of this process."""
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # pylint: disable=broad-except  # a bad format is logging's business, not ours
            return record
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return record

    logging.setLogRecordFactory(factory)
    sys.stdout = _MaskingStream(sys.stdout)
    sys.stderr = _MaskingStream(sys.stderr)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] != "-m":
        sys.stderr.write("usage: sglang_launch.py -m MODULE [ARGS...]\n")
        return 2
    module, rest = argv[1], argv[2:]
    install()
    sys.argv = [module] + rest
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
