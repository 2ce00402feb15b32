#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_tuning_probe
short_description: Ask the server's interpreter what the NCCL tuning needs to know, in one module run
version_added: 0.4.0
description:
  - O(state=inspect) (the nccl_tuning role's preflight) - whether O(python) exists, the site-packages and the
    C(sitecustomize) it imports (asked of the interpreter itself, user site off), that directory's owner and
    group/other write bits, and an existing C(sitecustomize.py) there (regular file or not, mode, text). Links are
    judged as C(ansible.builtin.stat) with C(follow=false) judges them.
  - O(state=verify) (the role's verify phase) - three starts of O(python) - with an empty environment, with the
    first of O(keys) already exported as C(gpuserve-exported), and with C(-S) and only the C(NAME=value) lines of
    O(env_file) (what the systemd unit gets) - each reporting the values of O(keys) it sees and whether a
    C(sitecustomize) was imported. The role's asserts judge them.
  - Read-only. One module run where nine were (stat, command, slurp). The logic is
    C(plugins/module_utils/_nccl_probe.py); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  state:
    description: What to ask.
    type: str
    choices: [inspect, verify]
    required: true
  python:
    description: The interpreter that runs SGLang (absolute).
    type: path
    required: true
  keys:
    description: The names of C(nccl_env) (O(state=verify)).
    type: list
    elements: str
    default: []
  env_file:
    description: The EnvironmentFile of the server unit (O(state=verify)).
    type: path
    default: ""
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: The GPU host; standard library only.
"""

EXAMPLES = r"""
- name: What the interpreter says of its site-packages and sitecustomize
  gpuserve.sglang.nccl_tuning_probe:
    state: inspect
    python: /opt/sglang/venv/bin/python
  register: probe

- name: Three starts of the interpreter
  gpuserve.sglang.nccl_tuning_probe:
    state: verify
    python: /opt/sglang/venv/bin/python
    keys: [NCCL_P2P_LEVEL, NCCL_IB_DISABLE]
    env_file: /etc/sglang/nccl.env
"""

RETURN = r"""
python:
  description: O(state=inspect) - C(exists) (the path, a link counts), C(executable).
  returned: when state is inspect
  type: dict
purelib:
  description: O(state=inspect) - the interpreter's site-packages (empty when it does not exist).
  returned: when state is inspect
  type: str
imported_sitecustomize:
  description: O(state=inspect) - the file C(import sitecustomize) finds, or null.
  returned: when state is inspect
  type: str
site_dir:
  description: O(state=inspect) - the site-packages directory - C(exists), C(isdir), C(pw_name), C(wgrp), C(woth), C(mode).
  returned: when state is inspect
  type: dict
sitecustomize:
  description: O(state=inspect) - C(sitecustomize.py) in it - C(exists), C(isreg), C(mode), C(text).
  returned: when state is inspect
  type: dict
clean:
  description: O(state=verify) - the start with an empty environment - C(env) (the values of O(keys) it saw), C(sitecustomize_loaded), C(sitecustomize).
  returned: when state is verify
  type: dict
policy:
  description: O(state=verify) - the start with RV(first) exported as C(gpuserve-exported); as RV(clean).
  returned: when state is verify
  type: dict
nosite:
  description: O(state=verify) - the C(-S) start with only O(env_file)'s values; as RV(clean).
  returned: when state is verify
  type: dict
first:
  description: O(state=verify) - the name exported for RV(policy) (the first of O(keys), sorted).
  returned: when state is verify
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_probe import ProbeError, inspect, verify


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["inspect", "verify"], required=True),
            python=dict(type="path", required=True),
            keys=dict(type="list", elements="str", default=[], no_log=False),
            env_file=dict(type="path", default=""),
        ),
        required_if=[("state", "verify", ("keys", "env_file"))],
        supports_check_mode=True,
    )
    params = module.params
    for name in ("python", "env_file"):
        value = params[name]
        if value and (not value.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in value)):
            module.fail_json(msg="%s %r must be an absolute path without control characters" % (name, value))
    try:
        if params["state"] == "inspect":
            result = inspect(params["python"])
        else:
            result = verify(params["python"], params["keys"], params["env_file"])
    except (ProbeError, OSError) as exc:
        module.fail_json(msg="nccl_tuning: %s" % exc)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
