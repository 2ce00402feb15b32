#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_record
short_description: Write the deployment record and its JSON twin as one unit, with their history
version_added: 0.4.0
description:
  - Rewrites O(md_path) and O(json_path) only when either differs from O(markdown) and O(data); both new files are
    written beside their destinations first and then renamed into place, so a run killed in between leaves the
    previous pair, never a new twin beside an old record.
  - The pair it replaces is kept in O(history_dir) first, named by the host's clock and a unique suffix
    (C(<service>-<YYYYmmddTHHMMSSZ>-<6 hex>.md) and C(.json)); a previous pair with a file missing is kept as it is
    and reported in RV(missing_previous), never an error.
  - The history keeps the newest O(keep) pairs by the host's modification times; O(keep=0) keeps none.
  - The logic, and the one owner of these files, is C(plugins/module_utils/_record.py); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  md_path:
    description: The Markdown record (C(sglang_record_file)).
    type: path
    required: true
  json_path:
    description: Its JSON twin (C(sglang_record_json_file)).
    type: path
    required: true
  markdown:
    description: The record's text.
    type: str
    required: true
  data:
    description: The twin's content, written as indented JSON with sorted keys.
    type: dict
    required: true
  history_dir:
    description: Where replaced pairs are kept.
    type: path
    required: true
  service:
    description: The unit's name without C(.service), the history files' prefix.
    type: str
    required: true
  keep:
    description: Pairs kept in the history; 0 keeps none.
    type: int
    default: 10
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the pair would be rewritten; writes nothing.
  diff_mode:
    support: none
    details: The record is long; the result names what was kept and pruned.
  platform:
    details: The GPU host; standard library only.
notes:
  - Files are written mode 0640, owned by root when the module runs as root (the record names the secrets file).
"""

EXAMPLES = r"""
- name: The deployment record and its twin
  gpuserve.sglang.sglang_record:
    md_path: /etc/sglang/sglang-kimi.md
    json_path: /etc/sglang/sglang-kimi.json
    markdown: "{{ lookup('ansible.builtin.template', 'my-record.md.j2') }}"
    data: "{{ record_data }}"
    history_dir: /etc/sglang/history
    service: sglang-kimi
    keep: 10
"""

RETURN = r"""
history:
  description: The copies of the replaced pair written to O(history_dir).
  returned: always
  type: list
  elements: str
pruned:
  description: History files removed beyond O(keep).
  returned: always
  type: list
  elements: str
missing_previous:
  description: Files of the replaced pair that were not there (kept as they were, not an error).
  returned: always
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._record import write_record

SERVICE_RE = re.compile(r"[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            md_path=dict(type="path", required=True),
            json_path=dict(type="path", required=True),
            markdown=dict(type="str", required=True),
            data=dict(type="dict", required=True),
            history_dir=dict(type="path", required=True),
            service=dict(type="str", required=True),
            keep=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not SERVICE_RE.fullmatch(params["service"]):
        module.fail_json(msg="service %r is not a unit name" % params["service"])
    for name in ("md_path", "json_path", "history_dir"):
        if not params[name].startswith("/") or any(ord(c) < 32 for c in params[name]):
            module.fail_json(msg="%s %r must be an absolute path without control characters" % (name, params[name]))
    if params["keep"] < 0:
        module.fail_json(msg="keep must be 0 or more, got %d" % params["keep"])
    try:
        result = write_record(params["md_path"], params["json_path"], params["markdown"], params["data"],
                              params["history_dir"], params["service"], params["keep"],
                              check_mode=module.check_mode)
    except (IOError, OSError) as exc:
        module.fail_json(msg="the deployment record could not be written (the previous pair is in place): %s" % exc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
