# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""Copy the masking rule of plugins/module_utils/_secrets.py into the launcher that runs on the host.

roles/server/files/sglang_launch.py runs outside the collection (python <launcher> -m sglang.launch_server), so
it cannot import module_utils: it carries the block between the ``# ---- BEGIN masking rule`` and
``# ---- END masking rule ----`` lines of _secrets.py byte for byte. This script writes that block there;
``--check`` only says whether the two differ (exit 1). tests/unit/plugins/module_utils/test_secrets.py fails when
they differ.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "plugins", "module_utils", "_secrets.py")
LAUNCHER = os.path.join(ROOT, "roles", "server", "files", "sglang_launch.py")
BEGIN = "# ---- BEGIN masking rule"
END = "# ---- END masking rule ----\n"


def block(text, path):
    """(start, end) of the rule block in text: from its BEGIN line to the end of its END line."""
    start = text.find(BEGIN)
    end = text.find(END, start)
    if start < 0 or end < 0 or text.count(BEGIN) != 1:
        raise SystemExit("%s: no single '%s' ... '%s' block" % (path, BEGIN, END.strip()))
    return start, end + len(END)


def rule(path=SOURCE):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    start, end = block(text, path)
    return text[start:end]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the launcher's copy differs, write nothing")
    args = parser.parse_args(argv)
    wanted = rule()
    with open(LAUNCHER, encoding="utf-8") as handle:
        text = handle.read()
    start, end = block(text, LAUNCHER)
    if text[start:end] == wanted:
        return 0
    if args.check:
        sys.stderr.write("%s: its masking rule differs from %s (run scripts/sync-masking-rule.py)\n" % (LAUNCHER, SOURCE))
        return 1
    with open(LAUNCHER, "w", encoding="utf-8") as handle:
        handle.write(text[:start] + wanted + text[end:])
    sys.stdout.write("%s: masking rule written\n" % LAUNCHER)
    return 0


if __name__ == "__main__":
    sys.exit(main())
