#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nccl_tuning
short_description: NCCL settings for the SGLang server's interpreter - sitecustomize block, .pth hook, EnvironmentFile
version_added: "1.1.0"
description:
  - Does on the host, in one run, what the role gpuserve.sglang.nccl_tuning does - resolve the interpreter (O(python),
    else the venv named in O(install_record), else C(<venv>/bin/python)), ask it for its site-packages and the
    C(sitecustomize) it imports, refuse bad input and a host it must not write to (every reason at once, before
    anything changes), compare, write what differs atomically, and verify.
  - O(state=present) - the EnvironmentFile O(env_file) for the server unit (root 0644; its directory root 0755), a
    managed block at the end of the interpreter's C(sitecustomize.py) (root 0644) that sets the values on every
    start, and, when another C(sitecustomize) shadows the venv's (Debian/Ubuntu python3 ship one) or
    O(pth_hook=always), a one-line C(gpuserve_nccl_tuning.pth) hook in site-packages. The verification starts the
    interpreter three times - with an empty environment (every value), with one value exported (the policy), and
    with C(-S) and only the EnvironmentFile's values (what the unit gets).
  - O(state=absent) - removes the EnvironmentFile and the hook, and takes the block out of C(sitecustomize.py) so
    that the file is byte for byte what it was before the role (the file goes when the role created it and it holds
    nothing else). The verification looks for anything left.
  - The logic is in C(plugins/module_utils/_nccl_tuning.py) and C(_nccl_network.py); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads, refuses and compares; writes nothing and does not start the interpreter for the verification.
  diff_mode:
    support: full
    details:
      - Each file that changes, before and after.
  platform:
    details: The GPU host; standard library only.
options:
  state:
    description: Whether the tuning is installed or removed.
    type: str
    choices: [present, absent]
    default: present
  python:
    description:
      - The interpreter whose site-packages receive C(sitecustomize.py) (absolute). Empty - the venv named in
        O(install_record), else C(<venv>/bin/python).
      - Must exist for O(state=present). For O(state=absent) a missing interpreter only skips the sitecustomize part.
    type: str
    default: ""
  install_record:
    description: The JSON record of gpuserve.sglang.install; its C(venv) is the interpreter's venv when O(python) is empty.
    type: str
    default: /opt/sglang/install-record.json
  venv:
    description: The SGLang venv, used when O(python) is empty and the install record names none.
    type: str
    default: /opt/sglang/venv
  env:
    description:
      - "The NCCL variables, name to value (the role's C(nccl_env)). Names are environment variable names; values
        strings or numbers of letters, digits and C(_ . , : / = + ^ @ % -) only."
    type: raw
    required: true
  network:
    description:
      - NCCL across hosts (the role's C(nccl_network)) - C(transport), C(interface), C(hcas), C(hca_match),
        C(gid_index); its variables win over the same names in O(env). An empty mapping adds nothing.
    type: raw
    default: {}
  policy:
    description:
      - V(setdefault) - a value exported before Python starts wins. V(force) - these values replace exported ones.
    type: str
    choices: [setdefault, force]
    default: setdefault
  env_file:
    description: The EnvironmentFile of the server unit (absolute).
    type: str
    default: /etc/sglang/nccl.env
  pth_hook:
    description:
      - V(auto) - write the C(.pth) hook only when the interpreter imports another C(sitecustomize) before the
        venv's. V(always) - in any case. V(never) - never (the verification then fails on a shadowed venv).
    type: str
    choices: [auto, always, never]
    default: auto
  configure:
    description: Write (V(false) - read, refuse and verify only; the role's C(nccl_tuning_preflight) and
      C(nccl_tuning_verify) tags alone).
    type: bool
    default: true
  verify:
    description: Verify after the change (never in check mode).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: NCCL settings for the SGLang venv
  gpuserve.sglang.nccl_tuning:
    env:
      NCCL_PROTO: LL
      NCCL_P2P_LEVEL: SYS
    env_file: /etc/sglang/nccl.env

- name: Remove them again
  gpuserve.sglang.nccl_tuning:
    state: absent
    env: {NCCL_PROTO: LL}
"""

RETURN = r"""
python:
  description: The interpreter, as resolved.
  returned: always
  type: str
site_dir:
  description: Its site-packages (empty when it does not exist).
  returned: always
  type: str
sitecustomize:
  description: The C(sitecustomize.py) in RV(site_dir) that holds the block.
  returned: always
  type: str
imported_sitecustomize:
  description: The file C(import sitecustomize) finds in that interpreter, or null.
  returned: always
  type: str
shadowed:
  description: Whether RV(imported_sitecustomize) is another file than RV(sitecustomize).
  returned: always
  type: bool
use_pth:
  description: Whether the C(.pth) hook is wanted.
  returned: always
  type: bool
env:
  description: The variables written - O(env) with O(network)'s over the same names, values as strings.
  returned: always
  type: dict
replaced:
  description: The names whose O(env) value O(network) replaced - name to C([env's value, network's value]).
  returned: always
  type: dict
changes:
  description: The paths changed (or, in check mode, that would change).
  returned: always
  type: list
  elements: str
verified:
  description: The three starts of the interpreter (C(clean), C(policy), C(nosite), C(first)); empty for absent or
    when not verified.
  returned: always
  type: dict
notes:
  description: What the run says - the values O(network) replaced, a shadowed C(sitecustomize).
  returned: always
  type: list
  elements: str
ansible_facts:
  description: Facts for later roles.
  returned: always
  type: dict
  contains:
    nccl_tuning_site_dir:
      description: RV(site_dir).
      type: str
    nccl_tuning_sitecustomize:
      description: RV(sitecustomize).
      type: str
    nccl_tuning_use_pth:
      description: RV(use_pth).
      type: bool
    nccl_tuning_shadowed:
      description: RV(shadowed).
      type: bool
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_probe import ProbeError
from ansible_collections.gpuserve.sglang.plugins.module_utils._nccl_tuning import NcclTuning, Refused, VerifyFailed


def main():
    module = QuietModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            python=dict(type="str", default=""),
            install_record=dict(type="str", default="/opt/sglang/install-record.json"),
            venv=dict(type="str", default="/opt/sglang/venv"),
            env=dict(type="raw", required=True),
            network=dict(type="raw", default={}),
            policy=dict(type="str", choices=["setdefault", "force"], default="setdefault"),
            env_file=dict(type="str", default="/etc/sglang/nccl.env"),
            pth_hook=dict(type="str", choices=["auto", "always", "never"], default="auto"),
            configure=dict(type="bool", default=True),
            verify=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    try:
        result = NcclTuning(module.params, check_mode=module.check_mode).converge()
    except (Refused, VerifyFailed) as exc:
        module.fail_json(msg=str(exc))
    except (ProbeError, OSError) as exc:
        module.fail_json(msg="nccl_tuning: %s" % exc)
    if not module._diff:
        result.pop("diff")
    result["ansible_facts"] = {"nccl_tuning_site_dir": result["site_dir"],
                               "nccl_tuning_sitecustomize": result["sitecustomize"],
                               "nccl_tuning_use_pth": result["use_pth"], "nccl_tuning_shadowed": result["shadowed"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
