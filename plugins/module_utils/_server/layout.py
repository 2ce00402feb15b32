# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a unit's state lives, and the move of a host's state to the per-unit layout (issue 47).

Before, every unit of a host shared ``<backup dir>/last-good`` (manifest, copies, txn.json, restore.json): two
servers on one host deleted each other's kept copies and each no-op run re-verified the other's invocation. Now
each unit has ``<backup dir>/<service>.last-good`` (``_last_good.unit_dir``). The first run on a host of the old
layout moves the shared directory to the unit it belongs to in ONE rename (a kill leaves either layout whole; the
kept copies are found by name in the directory that holds the record, ``_last_good.rebase``): nothing is
restarted, the running invocation stays the verified one. A shared directory that holds another unit's state is
left for that unit's run; a check run reads it where it is and writes nothing."""

from __future__ import annotations

import os

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_mod


def legacy_belongs(desired, legacy):
    """Whether the shared directory ``legacy`` holds this unit's state: its manifest names this unit's unit file
    (or there is none) and its open transaction is this service's (or there is none), and one of them exists."""
    manifest, _problem = _last_good.load_manifest(legacy)
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    record = txn_mod.load(legacy)
    if not manifest and not record:
        return False
    if manifest and desired.unit_path not in files:
        return False
    return not record or record.get("service") in ("", desired.service)


def state_dir(desired, check_mode=False):
    """(the directory this call reads and writes, the words of a move done or due, or "")."""
    own, legacy = desired.last_good_dir, desired.legacy_dir
    if os.path.lexists(own) or not os.path.isdir(legacy) or not legacy_belongs(desired, legacy):
        return own, ""
    if check_mode:
        return legacy, "would move %s to %s (the per-unit layout)" % (legacy, own)
    os.rename(legacy, own)
    return own, "moved %s to %s (the per-unit layout; nothing restarted)" % (legacy, own)
