#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_venv
short_description: A Python venv on the host and its site-packages, in one module run
version_added: 0.4.0
description:
  - Makes the parent directory of O(path) (and any missing directory above it) a directory owned by root with mode
    0755, creates the venv with O(python) C(-m venv) when C(<path>/bin/python) does not exist, and asks the venv's
    interpreter for its site-packages (C(sysconfig) purelib).
  - One module run where three were (a C(file), a C(command) with C(creates), a C(command)) - the install, cuda and
    router roles call it through C(roles/_common/tasks/venv.yml). An existing venv is never touched.
  - The logic is C(plugins/module_utils/_venv.py); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  path:
    description: The venv directory (absolute).
    type: path
    required: true
  python:
    description:
      - The interpreter that creates the venv - an absolute path, or a command name looked up on the host's
        C(PATH) (C(python3)).
    type: str
    required: true
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Reports what it would create or correct; reads the site-packages of a venv that exists.
  diff_mode:
    support: none
    details: RV(changes) names each change.
  platform:
    details: The GPU host; standard library only.
"""

EXAMPLES = r"""
- name: The SGLang venv
  gpuserve.sglang.sglang_venv:
    path: /opt/sglang/versions/sglang-0.5.9-e31a9d575376
    python: /usr/bin/python3
  register: venv
"""

RETURN = r"""
site_packages:
  description: The venv's purelib directory; empty in check mode when the venv does not exist yet.
  returned: always
  type: str
created:
  description: Whether the venv was (or, in check mode, would be) created.
  returned: always
  type: bool
changes:
  description: What was created or corrected (directories, their mode or owner, the venv).
  returned: always
  type: list
  elements: str
"""

import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._venv import ensure_venv


def main():
    module = QuietModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            python=dict(type="str", required=True),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    path, python = module.params["path"], module.params["python"]
    if not path.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in path):
        module.fail_json(msg="path %r must be an absolute path without control characters" % path)
    if not python.startswith("/"):
        # a command name (python3), looked up on PATH as the command module did
        if not re.match(r"^[A-Za-z0-9._+-]+\Z", python):
            module.fail_json(msg="python %r must be an absolute path or a command name" % python)
        found = module.get_bin_path(python)
        if not found and not os.path.exists(os.path.join(path, "bin", "python")):
            module.fail_json(msg="python %r: no such command on the host's PATH" % python)
        python = found or python
    elif any(ord(c) < 32 or ord(c) == 127 for c in python):
        module.fail_json(msg="python %r must not hold control characters" % python)
    try:
        result = ensure_venv(path.rstrip("/") or "/", python, check_mode=module.check_mode)
    except (OSError, RuntimeError, ValueError) as exc:
        module.fail_json(msg="the venv %s: %s" % (module.params["path"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
