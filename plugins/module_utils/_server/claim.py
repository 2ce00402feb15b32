# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run may claim (issue 22), computed on the host: the files the verified invocation read (the last-good
manifest kept after its verification) against what THIS run rendered. The same rule as the filter
``gpuserve.sglang.sglang_inputs_claim`` (plugins/filter/server_inputs.py), here without Ansible so that the
module ``sglang_server`` computes it where the manifest is."""

from __future__ import annotations


def inputs_claim(manifest, rendered, withheld=()):
    """``manifest``: {"invocation_id", "files": {path: {"exists", "sha256"?}}}; ``rendered``: {path: sha256 of the
    content this run landed or found in place}; ``withheld``: paths whose checksum must not be shown (a file that
    holds a key). Returns {"invocation_id", "files": {path: sha256 | "absent" | "withheld" | "unknown"},
    "mismatches": [path, ...]}: a rendered file the invocation read with other content, or did not read at all.
    A file without a checksum in the manifest (the secrets file) is not compared and shows as "withheld"."""
    if not isinstance(manifest, dict) or not isinstance(rendered, dict):
        raise ValueError("inputs_claim: the manifest and the rendered checksums must be mappings")
    files = manifest.get("files") or {}
    withheld = set(withheld or ())
    shown, mismatches = {}, []
    for path in sorted(files):
        entry = files[path] or {}
        sha = entry.get("sha256")
        if not entry.get("exists"):
            shown[path] = "absent"
        elif path in withheld or not sha:
            shown[path] = "withheld" if (path in withheld or "sha256" not in entry) else "unknown"
        else:
            shown[path] = sha
    for path in sorted(rendered):
        want = rendered[path]
        entry = files.get(path)
        if not want:
            continue
        if not entry or not entry.get("exists"):
            mismatches.append(path)
        elif entry.get("sha256") and entry.get("sha256") != want:
            mismatches.append(path)
    return {"invocation_id": manifest.get("invocation_id", ""), "files": shown, "mismatches": mismatches}
