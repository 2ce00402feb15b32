#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_last_good
short_description: Read or keep the last-good set of the server (the files its verified invocation read)
version_added: "0.2.0"
description:
  - The server role's last-good set, in one call instead of one stat, copy or read per file. The set is a
    directory (O(directory), root only) with C(manifest.json) and a copy of each restorable file; the logic and
    the format live in C(plugins/module_utils/_last_good.py).
  - O(state=read) (changes nothing) returns each file of O(paths) (exists, mtime), the manifest, and C(stale),
    the files that the running invocation does not have - changed in or after the second after O(active_since),
    or gone although the manifest of O(invocation_id) had them.
  - O(state=kept), after a verified start, replaces the set as a whole - a copy of each file of O(restorable)
    that exists under a name of O(invocation_id), then the manifest (sha256, mode and owner of each file of
    O(paths), none for O(secret_paths)) renamed into place, then the copies no manifest names any more removed.
    Each file goes through a temporary file and a rename, only where its content, mode or owner differs; a kill
    at any point leaves the old set or the new one. It also closes an open restore (the files on disk verified).
  - A rollback, in two calls around the stop of the failed invocation. O(state=restoring), before the stop,
    opens the restore (C(restore.json) beside the manifest, with the manifest's invocation and when it began);
    O(state=restored) puts back each restorable file of the manifest as the last verified start had it (the kept
    copy through a temporary file and a rename, with its mode and owner; a file it did not have removed), only
    where it differs. The restore stays open until O(state=kept) after the restored set verified, so that a
    rollback killed after the stop, or failing at one copy, is finished by the next run (O(state=read) returns it
    as C(restore_open)), also when the unit is stopped.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: O(state=kept), O(state=restoring) and O(state=restored) report what they would write and write nothing.
  diff_mode:
    support: none
    details: Reports the paths written.
  platform:
    details: Linux.
options:
  state:
    description:
      - V(read) the set and the files, V(kept) (write the set after a verified start), V(restoring) (open a
        rollback's restore) or V(restored) (put the set back).
    type: str
    choices: [read, kept, restoring, restored]
    default: read
  directory:
    description: The last-good directory (C(<sglang_backup_dir>/last-good)); an absolute path.
    type: path
    required: true
  paths:
    description: The files the server reads at start, absolute paths.
    type: list
    elements: path
    required: true
  restorable:
    description: Those of O(paths) that a rollback puts back (a copy is kept of each that exists).
    type: list
    elements: path
    default: []
  secret_paths:
    description:
      - Those of O(paths) that hold secrets (the keys). Their sha256 stays out of the manifest; O(state=kept) keeps no
        copy of them and O(state=restored) does not put them back (a rotated key stays), unless O(keep_secrets).
      - O(state=restored) also leaves alone a secret file that an older manifest named restorable.
    type: list
    elements: path
    default: []
  keep_secrets:
    description:
      - O(state=kept). Keep a copy of the files of O(secret_paths) and make them restorable (the manifest records
        C(secrets_kept)); a rollback then puts back the secrets the last verified start read, also over a rotated key.
    type: bool
    default: false
  invocation_id:
    description:
      - The systemd InvocationID of the running (O(state=read)) or just verified (O(state=kept)) invocation.
    type: str
    default: ""
  active_since:
    description:
      - O(state=read) only. When the running invocation became active, in whole seconds since the epoch
        (systemd's ActiveEnterTimestamp with C(--timestamp=unix)); V(0) when it is not running (nothing is
        stale).
    type: int
    default: 0
  reason:
    description: O(state=restoring) only. Why the rollback began (kept in the record, at most 500 characters; no secret).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Which files the running invocation does not have
  gpuserve.sglang.sglang_last_good:
    directory: /etc/sglang/backup/last-good
    paths: [/etc/systemd/system/sglang-kimi.service, /etc/sglang/sglang-kimi.env, /etc/sglang/nccl.env]
    active_since: 1764657600
    invocation_id: 98ed0f3a4c1e4bb1a6f0e6bd2a1b77c3
  register: inputs

- name: Keep the files the verified invocation read as the last good ones
  gpuserve.sglang.sglang_last_good:
    state: kept
    directory: /etc/sglang/backup/last-good
    paths: [/etc/systemd/system/sglang-kimi.service, /etc/sglang/sglang-kimi.secrets.yaml, /etc/sglang/nccl.env]
    restorable: [/etc/systemd/system/sglang-kimi.service, /etc/sglang/nccl.env]
    secret_paths: [/etc/sglang/sglang-kimi.secrets.yaml]   # never copied, never restored (keep_secrets: false)
    invocation_id: 98ed0f3a4c1e4bb1a6f0e6bd2a1b77c3
"""

RETURN = r"""
files:
  description: O(state=read). Each path of O(paths) with C(exists) and, for one that exists, C(mtime), C(mode), C(owner), C(group).
  returned: state is read
  type: dict
  sample: {"/etc/sglang/nccl.env": {"exists": true, "mtime": 1764657700.5, "mode": "0644", "owner": "root", "group": "root"}}
stale:
  description: O(state=read). The paths the running invocation does not have, in the order of O(paths), then the gone ones.
  returned: state is read
  type: list
  elements: str
  sample: ["/etc/sglang/nccl.env"]
manifest:
  description: The manifest (read, or as kept); V({}) when there is none yet.
  returned: always
  type: dict
  sample: {"invocation_id": "98ed...", "files": {"/etc/sglang/nccl.env": {"exists": true, "sha256": "ab12...",
           "mode": "0644", "owner": "root", "group": "root", "restorable": true,
           "kept_at": "/etc/sglang/backup/last-good/0f1e....98ed..."}}}
copies_missing:
  description: O(state=read). The kept copies the manifest names that are gone (the set must be written again).
  returned: state is read
  type: list
  elements: str
written:
  description: O(state=kept) or O(state=restoring). The paths written or removed (in check mode, those it would write or remove).
  returned: state is kept or restoring
  type: list
  elements: str
restore_open:
  description:
    - O(state=read) or O(state=restoring). The open restore of a rollback that has not verified yet
      (C(invocation_id) of the set it goes back to, C(since), C(reason)); V({}) when none is open.
  returned: state is read or restoring
  type: dict
put_back:
  description: O(state=restored). The files put back (in check mode, those it would put back).
  returned: state is restored
  type: list
  elements: str
removed:
  description: O(state=restored). The files removed because the last verified start did not have them.
  returned: state is restored
  type: list
  elements: str
missing:
  description: O(state=restored). Kept copies the manifest names that are gone (the module fails naming them).
  returned: state is restored
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["read", "kept", "restoring", "restored"], default="read"),
            directory=dict(type="path", required=True),
            paths=dict(type="list", elements="path", required=True),
            restorable=dict(type="list", elements="path", default=[]),
            secret_paths=dict(type="list", elements="path", default=[], no_log=False),  # paths, not secrets
            keep_secrets=dict(type="bool", default=False, no_log=False),  # a choice, not a secret
            invocation_id=dict(type="str", default=""),
            active_since=dict(type="int", default=0),
            reason=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    bad = [path for path in [params["directory"]] + params["paths"] + params["restorable"] + params["secret_paths"]
           if not os.path.isabs(path) or any(ord(char) < 32 for char in path)]
    if bad:
        module.fail_json(msg="sglang_last_good: absolute paths without control characters only, got %s"
                         % ", ".join(repr(path) for path in bad))
    if params["state"] == "read":
        result = _last_good.read(params["directory"], params["paths"], params["active_since"],
                                 params["invocation_id"])
        problem = result.pop("problem")
        if problem:
            module.warn(problem)
        module.exit_json(changed=False, **result)
    if params["state"] in ("restoring", "restored"):
        try:
            if params["state"] == "restoring":
                result = _last_good.begin_restore(params["directory"], params["reason"], check_mode=module.check_mode)
            else:
                result = _last_good.restore(params["directory"], check_mode=module.check_mode,
                                            secret_paths=params["secret_paths"])
        except OSError as exc:
            module.fail_json(msg="sglang_last_good: the last good set in %s could not be put back: %s (the restore "
                             "stays open: the next run finishes it)" % (params["directory"], exc))
        problem = result.pop("problem", None)
        if problem:
            module.warn(problem)
        if result.get("missing"):
            module.fail_json(msg="sglang_last_good: the kept copies %s are gone: those files cannot be put back (the "
                             "restore stays open)" % ", ".join(result["missing"]), **result)
        module.exit_json(**result)
    try:
        result = _last_good.keep(params["directory"], params["paths"], params["restorable"], params["secret_paths"],
                                 params["invocation_id"], check_mode=module.check_mode,
                                 keep_secrets=params["keep_secrets"])
    except OSError as exc:
        module.fail_json(msg="sglang_last_good: the last-good set in %s could not be written: %s"
                         % (params["directory"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
