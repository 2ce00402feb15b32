# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verified-start record of a unit: one root-only JSON file per unit, and the ONE record of which invocation
of the unit is verified (issue 47).

Written only by the service runner (``_service_runner.ServiceRunner``) each time it proved a start (a restart, a
start, or a first verify of an invocation whose start-up lines were still in the journal): by sglang_server's state
machine (``_server/machine.py``) and by sglang_service outside it, one writer function, atomically (``_atomic``).
``state: verified`` on the SAME InvocationID takes the start-up facts (HiCache per rank, KV pool, ready line,
timeline) from it once journald has rotated those lines away, and checks only the live part again. Directory
0700, file 0600.

The rule: "is the running invocation verified" is answered here and nowhere else (``verified_ids``). The
last-good manifest (``_last_good``) and the deployment record (``_record``) REFER to this file and carry a copy of
its invocation and time made by one function (``reference``); no decision reads their copy. A manifest written
before this rule (gpuserve.sglang 1.0.0 and 2.0.0: no ``verified`` reference) still names a verified invocation
for the run that finds it (the old layout read), and the next keep writes the new one. A unit without a state
file (the router's runner keeps none: ``Desired.state_dir`` empty) has its manifest as that one record.
"""

from __future__ import annotations

import json
import os

from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic

STATE_DIR = "/var/lib/gpuserve-sglang"
VERSION = 1


class StateFile(object):
    def __init__(self, directory=STATE_DIR):
        self.directory = directory

    def path(self, unit):
        return os.path.join(self.directory, "%s.json" % unit)

    def read(self, unit):
        """The record, None when there is none; a record that cannot be read is reported as {"error": ...}."""
        path = self.path(unit)
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (IOError, OSError) as exc:
            if getattr(exc, "errno", None) == 2:
                return None
            return {"error": "cannot read %s: %s" % (path, exc)}
        except ValueError as exc:
            return {"error": "%s is not JSON: %s" % (path, exc)}
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return {"error": "%s has an unknown format" % path}
        return data

    def write(self, unit, record):
        record = dict(record, version=VERSION, unit=unit)
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory, 0o700)
        os.chmod(self.directory, 0o700)
        text = json.dumps(record, sort_keys=True, indent=1)
        write_atomic(self.path(unit), text.encode("utf-8"), mode=0o600, prefix=".%s." % unit)
        return self.path(unit)


def verified_invocation(record):
    """The invocation a record of this file names as verified ('' for none, an unreadable record, an error)."""
    if not isinstance(record, dict) or record.get("error"):
        return ""
    return str(record.get("invocation_id") or "")


def legacy_manifest(manifest):
    """A last-good manifest of the layout before this rule (1.0.0, 2.0.0, or a unit with no state file): it has no
    ``verified`` reference, so its own ``invocation_id`` is the verified one it was kept for."""
    return isinstance(manifest, dict) and bool(manifest) and not isinstance(manifest.get("verified"), dict)


def verified_ids(record, manifest):
    """The ONE answer to "which invocation of this unit is verified": the one this file's ``record`` names; on a
    host whose manifest is of the layout before (``legacy_manifest``) the one it names too. ``[]`` when neither
    names any (a first deployment)."""
    ids = [verified_invocation(record)]
    if legacy_manifest(manifest):
        ids.append(str(manifest.get("invocation_id") or ""))
    return [ident for ident in dict.fromkeys(ids) if ident]


def reference(path, invocation_id, result=None):
    """The copy the last-good manifest and the deployment record carry: this file's path, the invocation and when
    it was verified (from the runner's result, ``state_file.verified_at``). The one function that makes it."""
    state = (result or {}).get("state_file") if isinstance(result, dict) else None
    state = state if isinstance(state, dict) else {}
    data = {"state_file": path or "", "invocation_id": invocation_id or ""}
    if state.get("verified_at"):
        data["verified_at"] = state["verified_at"]
    return data
