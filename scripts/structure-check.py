# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""The roles' shape against the targets of issue 39, measured, kept by `make lint`.

For the roles named in TARGETS it measures the tasks folder (files, lines) and the distinct internal names
(identifiers with the role's prefix, such as ``_server_restart_pending``, in its tasks, defaults, handlers and
templates). For EVERY role it finds the Jinja expressions (``{{ ... }}`` and ``{% ... %}``, whitespace collapsed to
one space) longer than JINJA_MAX characters in tasks, handlers, templates and defaults, and names each with
file:line. A long expression is computation that belongs in a filter or module_utils (Python with tests), or text
that reads better as named vars.

  scripts/structure-check.py              # the measurements of every role, then each missed target; rc 1 on a miss
  scripts/structure-check.py --root DIR   # the same for another tree (the unit tests' fixtures)
"""

from __future__ import annotations

import argparse
import os
import re
import sys

# The targets (issue 39): at most this many files and lines in roles/<role>/tasks, at most this many distinct
# internal names with the role's prefix. A role not listed here has the Jinja target alone.
TARGETS = {
    #  role      tasks files  tasks lines  internal names  name prefix
    "server": {"files": 10, "lines": 450, "names": 15, "prefix": "_server_"},
    "router": {"files": 10, "lines": 450, "names": 15, "prefix": "_router_"},
}
# No Jinja expression longer than this, in any role.
JINJA_MAX = 120

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME_DIRS = ("tasks", "defaults", "handlers", "templates")
JINJA_DIRS = ("tasks", "handlers", "templates", "defaults", "vars")
_OPENERS = {"{{": "}}", "{%": "%}"}


def _files(folder):
    """The files under ``folder`` (recursively), sorted; none when it does not exist."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        found.extend(os.path.join(dirpath, name) for name in sorted(filenames))
    return found


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _line_count(text):
    """Lines as wc -l counts them, plus a last line without its newline."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _expression_end(text, start, closer):
    """Where the expression opened just before ``start`` ends (the index after ``closer``), or -1.

    Quotes (Jinja's and YAML's) are followed so that a ``}}`` inside a string or a dict literal does not end it;
    a backslash hides the character after it.
    """
    depth = 0
    quote = None
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif text.startswith(closer, i) and depth == 0:
            return i + len(closer)
        elif char in "{[(":
            depth += 1
        elif char in "}])" and depth > 0:
            depth -= 1
        i += 1
    return -1


def jinja_expressions(text):
    """Each Jinja expression or statement in ``text``: (line number, the expression whitespace-collapsed)."""
    found = []
    pos = 0
    while True:
        match = re.search(r"\{\{|\{%", text[pos:])
        if not match:
            return found
        begin = pos + match.start()
        opener = match.group(0)
        end = _expression_end(text, begin + 2, _OPENERS[opener])
        if end < 0:
            # Quotes that do not balance (YAML escapes the scanner does not know): the first closer ends it.
            closer = text.find(_OPENERS[opener], begin + 2)
            if closer < 0:
                return found
            end = closer + 2
        found.append((text.count("\n", 0, begin) + 1, " ".join(text[begin:end].split())))
        pos = end


def long_jinja(root, limit=JINJA_MAX):
    """Every Jinja expression over ``limit`` characters in every role under ``root``/roles and in the playbooks
    (issue 47): a list of
    (path relative to root, line, length, expression), in file order."""
    offenders = []
    paths = [path for role in roles(root) for sub in JINJA_DIRS for path in _files(os.path.join(root, "roles", role, sub))]
    for path in paths + playbooks(root):
        for line, expr in jinja_expressions(_read(path)):
            if len(expr) > limit:
                offenders.append((os.path.relpath(path, root), line, len(expr), expr))
    return offenders


def playbooks(root):
    """The playbooks: playbooks/*.yml and the thin copies at the top level (``root``/*.yml but galaxy.yml)."""
    top = [os.path.join(root, name) for name in sorted(os.listdir(root))
           if name.endswith(".yml") and name != "galaxy.yml" and os.path.isfile(os.path.join(root, name))]
    return [path for path in _files(os.path.join(root, "playbooks")) if path.endswith(".yml")] + top


def roles(root):
    """The roles under ``root``/roles, sorted."""
    base = os.path.join(root, "roles")
    if not os.path.isdir(base):
        return []
    return sorted(name for name in os.listdir(base) if os.path.isdir(os.path.join(base, name)))


def internal_names(root, role, prefix):
    """The distinct identifiers that start with ``prefix`` (a word of their own) in the role's tasks, defaults,
    handlers and templates, sorted."""
    pattern = re.compile(r"\b%s[a-z0-9_]+\b" % re.escape(prefix))
    names = set()
    for sub in NAME_DIRS:
        for path in _files(os.path.join(root, "roles", role, sub)):
            names.update(pattern.findall(_read(path)))
    return sorted(names)


def measure(root, role, prefix=None):
    """The role's measurements: ``files`` and ``lines`` of its tasks folder, ``names`` (the distinct internal names
    with ``prefix``, default ``_<role>_``) and ``long_jinja`` (the count over JINJA_MAX)."""
    paths = _files(os.path.join(root, "roles", role, "tasks"))
    names = internal_names(root, role, prefix or "_%s_" % role.strip("_"))
    long_ones = [o for o in long_jinja(root) if o[0].startswith(os.path.join("roles", role, ""))]
    return {
        "files": len(paths),
        "lines": sum(_line_count(_read(path)) for path in paths),
        "names": len(names),
        "long_jinja": len(long_ones),
    }


def misses(root, targets=None, limit=JINJA_MAX):
    """Each missed target, a sentence each: a role of ``targets`` over its files, lines or names, and each Jinja
    expression over ``limit`` characters (file:line, its length and its start)."""
    targets = TARGETS if targets is None else targets
    found = []
    for role, target in sorted(targets.items()):
        if not os.path.isdir(os.path.join(root, "roles", role)):
            found.append("roles/%s: the role is missing" % role)
            continue
        got = measure(root, role, target["prefix"])
        if got["files"] > target["files"]:
            found.append("roles/%s/tasks: %d files, the target is at most %d" % (role, got["files"], target["files"]))
        if got["lines"] > target["lines"]:
            found.append("roles/%s/tasks: %d lines, the target is at most %d" % (role, got["lines"], target["lines"]))
        if got["names"] > target["names"]:
            found.append("roles/%s: %d distinct %s* names, the target is at most %d"
                         % (role, got["names"], target["prefix"], target["names"]))
    for path, line, length, expr in long_jinja(root, limit):
        found.append("%s:%d: Jinja expression of %d characters, the target is at most %d: %s"
                     % (path, line, length, limit, expr[:80] + ("..." if len(expr) > 80 else "")))
    return found


def report(root, targets=None):
    """The measurements of every role, a line each (the targeted roles with their targets)."""
    targets = TARGETS if targets is None else targets
    header = ("role", "tasks files", "tasks lines", "internal names", "Jinja > %d" % JINJA_MAX)
    lines = ["%-14s %11s %11s %15s %14s" % header]
    for role in roles(root):
        target = targets.get(role)
        got = measure(root, role, target["prefix"] if target else None)

        def cell(key):
            return "%d/%d" % (got[key], target[key]) if target else str(got[key])

        lines.append("%-14s %11s %11s %15s %14s" % (role, cell("files"), cell("lines"), cell("names"),
                                                    "%d/0" % got["long_jinja"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--root", default=ROOT, help="the collection's checkout (default: this one)")
    args = parser.parse_args(argv)
    print("structure-check: measured / target (issue 39)")
    print(report(args.root))
    found = misses(args.root)
    if found:
        print("structure-check: %d target(s) missed:" % len(found))
        for miss in found:
            print("  " + miss)
        return 1
    print("structure-check: every target met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
