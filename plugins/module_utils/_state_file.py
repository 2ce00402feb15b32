# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verified-start record of a unit: one root-only JSON file per unit.

Written by sglang_service each time it proved a start (a restart, a start, or a first verify of an invocation
whose start-up lines were still in the journal). ``state: verified`` on the SAME InvocationID takes the start-up
facts (HiCache per rank, KV pool, ready line, timeline) from it once journald has rotated those lines away, and
checks only the live part again. Directory 0700, file 0600, written to a temporary file and renamed.
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
