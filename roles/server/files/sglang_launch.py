# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Start SGLang's launcher module with its secrets masked in what it logs (gpuserve.sglang.server).

Usage (the unit's ExecStart): python sglang_launch.py -m sglang.launch_server --config /etc/sglang/x.secrets.yaml ...

SGLang 0.5.9 logs ``server_args=ServerArgs(..., api_key='...', admin_api_key='...', ...)`` at start, which
puts the API keys into the journal. This launcher, before it runs the module with runpy (same process, same
argv after the module name, so SGLang reads sys.argv as under ``python -m``), masks the values of api_key and
admin_api_key (and of any ``*_api_key=``/``*_token=`` field in a ``key='value'`` repr) in:

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

MASK = "'********'"
_SECRET_FIELD = re.compile(
    r"(?P<name>\b(?:admin_api_key|api_key|[A-Za-z_]*_api_key|[A-Za-z_]*_token|[A-Za-z_]*secret[A-Za-z_]*)=)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")",
    re.IGNORECASE)


def mask(text):
    """text with the quoted values of secret fields replaced by a mask; None stays None."""
    if not isinstance(text, str) or "=" not in text:
        return text
    return _SECRET_FIELD.sub(lambda m: m.group("name") + MASK, text)


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
