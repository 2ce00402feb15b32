# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment record (Markdown) and its JSON twin, written as one unit, and their history (issue 22).

The one owner of ``sglang_record_file``, ``sglang_record_json_file`` and ``sglang_record_history_dir``:

* the pair is rewritten only when either differs; both new files are written to temporary files beside them first,
  then renamed into place (a kill before the renames leaves the old pair; a full disk fails before any rename);
* the pair it replaces goes to the history first, named by the HOST's clock and a unique suffix
  (``<service>-<YYYYmmddTHHMMSSZ>-<6 hex>.md|json``): two controllers with different clocks, or two runs within
  one second, never overwrite or misorder each other's copies. A previous pair with one file missing (a kill
  between two writes of the old tasks, an operator's ``rm``) is kept as it is and reported, never an error;
* the history keeps the newest ``keep`` pairs by the host's modification times (``keep: 0`` keeps none); older
  names (``<service>-<stamp>.json`` of the tasks before) are pruned by the same rule.

Standard library only (runs on the GPU host).
"""

from __future__ import annotations

import binascii
import json
import os
import re
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

STAMP = "%Y%m%dT%H%M%SZ"


def record_json(data):
    """The twin's text, as Ansible's to_nice_json wrote it before (indent 4, sorted keys, ASCII)."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def history_re(service):
    return re.compile(r"^%s-(?P<stamp>[0-9]{8}T[0-9]{6}Z|unknown)(?:-(?P<unique>[0-9a-f]{6}))?\.(?P<ext>md|json)$"
                      % re.escape(service))


def history_sets(history_dir, service):
    """{base name: [paths]} of the kept copies, oldest first by (newest mtime of the set, name)."""
    pattern = history_re(service)
    sets = {}
    try:
        names = os.listdir(history_dir)
    except (IOError, OSError):
        return []
    for name in names:
        match = pattern.match(name)
        if match:
            sets.setdefault(name.rsplit(".", 1)[0], []).append(os.path.join(history_dir, name))

    def age(item):
        mtimes = []
        for path in item[1]:
            try:
                mtimes.append(os.stat(path).st_mtime)
            except OSError:
                mtimes.append(0)
        return (max(mtimes), item[0])

    return sorted(sets.items(), key=age)


def write_record(md_path, json_path, markdown, data, history_dir, service, keep, mode=0o640, now=time.time,
                 unique=None, check_mode=False):
    """Returns {"changed", "history" (the copies written), "pruned", "missing_previous"}."""
    result = {"changed": False, "history": [], "pruned": [], "missing_previous": [], "md_path": md_path,
              "json_path": json_path}
    new_md = markdown.encode("utf-8")
    new_json = record_json(data).encode("utf-8")
    old_md, old_json = _read(md_path), _read(json_path)
    if old_md == new_md and old_json == new_json:
        return result
    result["changed"] = True
    if check_mode:
        return result
    previous = [(old_md, "md", md_path), (old_json, "json", json_path)]
    if any(text is not None for text, dummy, dummy2 in previous):
        if not os.path.isdir(history_dir):
            os.makedirs(history_dir, 0o755)
        base = "%s-%s-%s" % (service, time.strftime(STAMP, time.gmtime(now())),
                             unique or binascii.hexlify(os.urandom(3)).decode("ascii"))
        for text, ext, path in previous:
            if text is None:
                result["missing_previous"].append(path)
                continue
            dest = os.path.join(history_dir, "%s.%s" % (base, ext))
            write_atomic(dest, text, mode=mode, prefix=".%s." % service, root_owned=True)
            result["history"].append(dest)
    # both new files first as temporary files, then both renames: never a new JSON beside a half-written record
    staged = []
    try:
        for dest, text in ((json_path, new_json), (md_path, new_md)):
            directory = os.path.dirname(dest) or "."
            tmp = os.path.join(directory, ".%s.new" % os.path.basename(dest))
            write_atomic(tmp, text, mode=mode, prefix=".%s." % service, root_owned=True)
            staged.append((tmp, dest))
        for tmp, dest in staged:
            os.rename(tmp, dest)
    finally:
        for tmp, dummy in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
    sets = history_sets(history_dir, service)
    old = sets[:-keep] if keep > 0 else sets
    for dummy, paths in old:
        for path in paths:
            os.unlink(path)
            result["pruned"].append(path)
    return result
