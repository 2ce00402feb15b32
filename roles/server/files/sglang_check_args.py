# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check an SGLang command line with the installed SGLang's own argument parser.

Run with the interpreter of the venv that holds SGLang:

    python sglang_check_args.py --model-path /models/x --tp 8 ...     (arguments on the command line), or
    SGLANG_CHECK_ARGV='["--model-path", ...]' python sglang_check_args.py   (a JSON list, as the server role does)
    SGLANG_CHECK_ARGV_BATCH='[[...], [...]]' python sglang_check_args.py    (many lines, one import: for tests)

It builds the parser exactly as `python -m sglang.launch_server` does (ServerArgs.add_cli_args on a fresh
argparse.ArgumentParser) and calls parse_args. It does NOT build ServerArgs (its __post_init__ probes GPUs).
Exit 0 and a JSON object of the parsed values on stdout; exit 2 and argparse's own error on stderr when the
parser rejects the line; exit 3 when SGLang cannot be imported.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys


def _import_torchvision():
    """Import torchvision, tolerating a CUDA build of it beside a CPU build of torch.

    torchvision's PyPI wheels are CUDA builds: next to torch's CPU build its C ops cannot load, and
    torchvision 0.28 then fails in _meta_registrations (register_fake on torchvision::nms / qnms, which do
    not exist). On a GPU host nothing of this runs. Here we declare the two op schemas and import again,
    so that SGLang's parser module (which imports torchvision through its model configs) can be imported.
    """
    try:
        import torchvision  # noqa: F401  pylint: disable=unused-import
        return
    except ImportError:
        return
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    import torch
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        if not hasattr(torch.ops.torchvision, op) or op not in dir(torch.ops.torchvision):
            try:
                lib.define(op + "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:
                pass
    _import_torchvision.lib = lib  # keep the library (and its definitions) alive
    import torchvision  # noqa: F401,F811  pylint: disable=unused-import,reimported


def _parse(server_args_cls, argv, version):
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    server_args_cls.add_cli_args(parser)
    ns = parser.parse_args(argv)  # exits 2 with "sglang.launch_server: error: ..." on a bad line
    return {"sglang_version": version, "args": dict(sorted(vars(ns).items()))}


def main(argv=None):
    batch = os.environ.get("SGLANG_CHECK_ARGV_BATCH")
    if argv is None and not batch:
        raw = os.environ.get("SGLANG_CHECK_ARGV")
        argv = json.loads(raw) if raw else sys.argv[1:]
    try:
        _import_torchvision()
        from sglang.srt.server_args import ServerArgs
        import sglang
    except Exception as exc:  # pylint: disable=broad-except
        sys.stderr.write("cannot import sglang.srt.server_args: %s: %s\n" % (type(exc).__name__, exc))
        return 3
    version = getattr(sglang, "__version__", None)
    if not batch:
        sys.stdout.write(json.dumps(_parse(ServerArgs, argv, version), default=str) + "\n")
        return 0
    for one in json.loads(batch):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                out = _parse(ServerArgs, one, version)
            out["rc"] = 0
        except SystemExit as exc:
            out = {"sglang_version": version, "rc": exc.code}
        out["stderr"] = err.getvalue()
        sys.stdout.write(json.dumps(out, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
