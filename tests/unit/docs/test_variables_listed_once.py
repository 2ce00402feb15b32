# SPDX-License-Identifier: GPL-3.0-or-later
"""Role variables are listed once: in docs/reference.md, generated from meta/argument_specs.yml. No other Markdown
file has a table whose rows start with one (prose may mention a variable and link to the reference)."""
from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _role_options():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(path, encoding="utf-8") as handle:
            names |= set(re.findall(r"(?m)^      (\w+):", handle.read()))
    return names


def test_no_hand_written_variable_table():
    options = _role_options()
    assert "sglang_model_path" in options and "nccl_env" in options
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "**", "*.md"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel == os.path.join("docs", "reference.md") or rel.split(os.sep)[0] in (".venv", ".cache", ".ansible"):
            continue
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                first = line.split("|")[1] if line.startswith("|") and line.count("|") > 2 else ""
                named = re.match(r"\s*`(\w+)`", first)
                if named and named.group(1) in options:
                    offenders.append("%s:%d: %s" % (rel, number, line.strip()[:80]))
    assert not offenders, "variables listed outside docs/reference.md:\n" + "\n".join(offenders)
