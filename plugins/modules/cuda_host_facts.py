#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_host_facts
short_description: What the cuda role reads of a host (paths, loader entries), in one module run
version_added: 0.4.0
description:
  - One round trip instead of one module run per read (issue 22) - the CUDA home, its C(nvcc), the generic CUDA
    link and the loader entries (M(gpuserve.sglang.cuda_toolkit) makes the same read, C(module_utils/_cuda_facts.py),
    inside its own run).
  - For each of O(paths), the fields the role used to read from M(ansible.builtin.stat) (without following a final
    link) under the same names, and the same fields after following links.
  - The C(*.conf) entries of O(ldconfig_dir) (any file type, not hidden, not recursive), each with its content as
    text (the shape C(module_utils/_cuda_toolkit/repo.py)'s C(cuda_stale_ldconfig) takes); an entry that cannot be read (a
    dangling link, a directory, an unreadable file) is skipped and named in RV(ldconfig_skipped).
  - The logic is C(plugins/module_utils/_cuda_facts.py); standard library only. Changes nothing on the host.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  paths:
    description:
      - Absolute paths to look at. A path that is not absolute fails the task; a path under a file counts as
        missing, as does one that does not exist.
    type: list
    elements: str
    default: []
  ldconfig_dir:
    description: The directory of the loader entries; empty reads none.
    type: str
    default: /etc/ld.so.conf.d
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: Linux hosts.
seealso:
  - module: ansible.builtin.stat
  - module: gpuserve.sglang.sglang_host_facts
  - module: gpuserve.sglang.cuda_toolkit
"""

EXAMPLES = r"""
- name: Read the CUDA home, its nvcc, the generic link and the loader entries
  gpuserve.sglang.cuda_host_facts:
    paths: [/usr/local/cuda-13.0, /usr/local/cuda-13.0/bin/nvcc, /usr/local/cuda]
  register: cuda_host

- name: Refuse a CUDA home without an executable nvcc
  ansible.builtin.assert:
    that: cuda_host.paths['/usr/local/cuda-13.0/bin/nvcc'].executable | default(false)

- name: The loader entries that name CUDA 12
  ansible.builtin.debug:
    msg: "{{ cuda_host.ldconfig | selectattr('content', 'search', 'cuda-12') | map(attribute='path') | list }}"
"""

RETURN = r"""
paths:
  description:
    - Each path of O(paths) as M(ansible.builtin.stat) with C(follow=false) names it - C(exists) (false and nothing
      else of stat's fields when there is nothing there), C(path), C(islnk), C(isdir), C(isreg), C(executable) (the
      permission, following links) and, for a link, C(lnk_source) (its real path) and C(lnk_target) (its text).
    - C(realpath), the path with every link resolved (also for a path that does not exist).
    - C(resolved), the same fields after following links (stat with C(follow=true)); C(exists=false) for a dangling
      or looping link.
  returned: always
  type: dict
  sample: {"/usr/local/cuda": {"exists": true, "path": "/usr/local/cuda", "islnk": true, "isdir": false,
                               "isreg": false, "executable": true, "lnk_source": "/opt/sglang/cuda-venv/lib/python3.12/site-packages/nvidia/cu13",
                               "lnk_target": "/usr/local/cuda-13.0",
                               "realpath": "/opt/sglang/cuda-venv/lib/python3.12/site-packages/nvidia/cu13",
                               "resolved": {"exists": true, "path": "/usr/local/cuda", "islnk": false, "isdir": true,
                                            "isreg": false, "executable": true}}}
ldconfig:
  description: The readable C(*.conf) entries of O(ldconfig_dir), sorted by path; C([]) when it is empty or missing.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The entry's path.
      type: str
      sample: /etc/ld.so.conf.d/988_cuda-12.conf
    content:
      description: Its content as text (UTF-8; bytes that do not decode are replaced).
      type: str
      sample: "/usr/local/cuda-12.8/targets/x86_64-linux/lib\n"
ldconfig_skipped:
  description: The C(*.conf) entries that could not be read (C(path), C(reason)), left out of RV(ldconfig).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/ld.so.conf.d/gone.conf", "reason": "No such file or directory"}]
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _cuda_facts


def main():
    module = QuietModule(
        argument_spec=dict(
            paths=dict(type="list", elements="str", default=[]),
            ldconfig_dir=dict(type="str", default=_cuda_facts.LDCONFIG_DIR),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    try:
        facts = _cuda_facts.gather(module.params["paths"], module.params["ldconfig_dir"])
    except _cuda_facts.CudaFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
