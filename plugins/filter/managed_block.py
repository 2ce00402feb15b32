# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""managed_block_state: where a file stands with an ansible.builtin.blockinfile block, and the text that takes
the block out again byte for byte (what blockinfile's state=absent does not do: it leaves the newline it added
after a last line that had none, and the file it created).

The block records two flags in its own text (lines the caller's block template writes):
- ``# file-created-by-role: yes``: the role created the file (no file before its first run);
- ``# newline-added-by-role: yes``: blockinfile added a newline to the operator's last line.
They are worked out from the file as it is before the block is first written, and carried by the block, so
later runs (idempotent) and state=absent know them. Pure function; unit-tested in
tests/unit/plugins/filter/test_managed_block.py (with a real blockinfile round trip).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

string_types = (str,)  # text on the controller (ansible's tagged and unsafe strings are str)

CREATED_FLAG = "# file-created-by-role: yes"
NEWLINE_FLAG = "# newline-added-by-role: yes"


def managed_block_state(text, exists=True, marker="# {mark} ANSIBLE MANAGED BLOCK", marker_begin="BEGIN",
                        marker_end="END"):
    """The state of ``text`` (the file's content, '' when absent) with respect to the block under ``marker``.

    Returns a dict: ``present`` (the block is there), ``file_created``, ``newline_added``, ``text_without_block``,
    ``restored_text`` (the file as it was before the role: without the block and the newline it added) and
    ``remove_file`` (the role created the file and nothing but the block is in it).
    """
    if text is None:
        text = ""
    if not isinstance(text, string_types):
        raise AnsibleFilterError("managed_block_state: the input must be the file's text, not %s" % type(text).__name__)
    if not isinstance(marker, string_types) or "{mark}" not in marker:
        raise AnsibleFilterError("managed_block_state: marker must contain {mark}, as blockinfile's does")
    begin = marker.replace("{mark}", marker_begin)
    end = marker.replace("{mark}", marker_end)
    pattern = re.compile(r"(?ms)^%s\n.*?^%s(?:\n|\Z)" % (re.escape(begin), re.escape(end)))
    found = pattern.search(text)
    block = found.group(0) if found else ""
    without = pattern.sub("", text)
    file_created = (not exists) or CREATED_FLAG in block
    newline_added = NEWLINE_FLAG in block or (not block and text != "" and not text.endswith("\n"))
    restored = without[:-1] if newline_added and without.endswith("\n") else without
    return {
        "present": bool(block),
        "file_created": bool(file_created),
        "newline_added": bool(newline_added),
        "text_without_block": without,
        "restored_text": restored,
        "remove_file": bool(block) and bool(file_created) and without == "",
    }


class FilterModule(object):
    """The managed-block filter."""

    def filters(self):
        return {"managed_block_state": managed_block_state}
