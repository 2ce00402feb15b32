#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_preflight
short_description: Read-only checks of an SGLang host before a deploy changes it - paths, disk, GPUs, memory plan
version_added: "1.1.0"
description:
  - The preflight role's checks in one module run; it never fails because of what it finds, it returns the
    RV(problems) (the role's one assert fails with them) and the RV(notes) (what the role shows).
  - V(paths) in O(checks) - the model and draft directories exist (O(check_paths)); the log directory's filesystem
    (the longest device-backed mount point above it, as Ansible's mount facts list them - a container's overlay root
    is none, and is then not checked) has O(min_free_disk_gb) GiB free.
  - V(gpus) - nvidia-smi's answer (as M(gpuserve.sglang.nvidia_gpu_info)) - at least O(tp) GPUs
    (O(require_gpus)), a driver of at least O(min_driver), no process on the GPUs outside O(service_name)'s unit
    (or a note, O(allow_foreign_gpu_processes)).
  - V(memory) - the KV cache and HiCache host pool planned with SGLang's formulas
    (as M(gpuserve.sglang.sglang_memory_plan)), planned for after the stop of O(service_name) when it runs
    (O(plan_after_stop)); a plan that does not fit is a problem naming the numbers and the largest ratio that fits.
  - The logic is in C(plugins/module_utils/_preflight.py) (with C(_nvidia_smi.py) and C(_memory_plan_host.py));
    standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: Linux hosts; nvidia-smi when there are GPUs.
options:
  checks:
    description: Which checks run (the role's tags C(preflight_paths), C(preflight_gpus), C(preflight_memory)).
    type: list
    elements: str
    choices: [paths, gpus, memory]
    default: [paths, gpus, memory]
  host:
    description: The host's name in the messages (the role passes C(inventory_hostname)).
    type: str
    required: true
  tp:
    description: Tensor-parallel size (C(--tp)); GPUs needed and HiCache pools pinned.
    type: int
    default: 8
  mem_fraction_static:
    description: C(--mem-fraction-static).
    type: float
    default: 0.88
  hicache:
    description: Whether C(--enable-hierarchical-cache) will be on.
    type: bool
    default: true
  hicache_ratio:
    description: C(--hicache-ratio); must be > 1.
    type: float
    default: 2.0
  hicache_size_gb:
    description: C(--hicache-size) in GB per rank; 0 uses the ratio.
    type: int
    default: 0
  page_size:
    description: C(--page-size).
    type: int
    default: 1
  kv_dtype:
    description: C(--kv-cache-dtype).
    type: str
    default: auto
  model_path:
    description: Model directory on the host (its C(config.json) gives the KV geometry unless O(model_geometry)).
    type: str
    default: ""
  draft_model_path:
    description: Speculative (EAGLE) draft model directory; empty when there is none.
    type: str
    default: ""
  check_paths:
    description: Refuse an empty model path and a missing model or draft directory.
    type: bool
    default: true
  release:
    description: The SGLang release whose HiCache rules the plan uses; empty is 0.5.9's.
    type: str
    default: ""
  hybrid:
    description: A hybrid model's serving settings for its state pool (M(gpuserve.sglang.sglang_memory_plan) option C(hybrid)).
    type: dict
    default: {}
  model_geometry:
    description: Explicit KV geometry instead of the model's C(config.json) (M(gpuserve.sglang.sglang_memory_plan) option C(geometry)).
    type: dict
    default: {}
  require_gpus:
    description: Refuse fewer GPUs than O(tp).
    type: bool
    default: true
  min_driver:
    description: Lowest NVIDIA driver major version accepted.
    type: int
    default: 580
  allow_foreign_gpu_processes:
    description: Processes on the GPUs that are not the server's are a note instead of a problem.
    type: bool
    default: false
  service_name:
    description: The server's systemd unit (with or without C(.service)); its processes on the GPUs are not foreign.
    type: str
    default: sglang-kimi
  companion_units:
    description:
      - Units whose GPU processes belong to the server (the Weight Cache Daemon's, issue 49) - not foreign; while they
        hold GPU memory the weights are theirs and the plan does not count them again, before they run the plan
        counts one more CUDA context (O(gpu_overhead_gb)) for them.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: Path of nvidia-smi; empty looks it up on PATH and the usual directories.
    type: str
    default: ""
  plan_after_stop:
    description: When O(service_name) runs, plan for the host after its stop (both views are in RV(notes)).
    type: bool
    default: true
  gpu_memory_gb:
    description: Free memory per GPU in GiB; needed on hosts without GPUs, overrides nvidia-smi.
    type: float
  gpu_overhead_gb:
    description: GiB per GPU taken by the CUDA context and NCCL before SGLang measures its total.
    type: float
    default: 1.0
  weights_gb_per_gpu:
    description: Weights per GPU in GiB; estimated from the model's weight files / O(tp) when not set.
    type: float
  mem_available_gb:
    description: Host MemAvailable in GiB; read from C(/proc/meminfo) when not set.
    type: float
  compare:
    description: Alternatives planned side by side (M(gpuserve.sglang.sglang_memory_plan) option C(compare)).
    type: list
    elements: dict
    default: []
  log_dir:
    description: Where the server will log; when missing, the filesystem it will be on is checked.
    type: str
    default: /var/log/sglang
  min_free_disk_gb:
    description: GiB that must be free on the log directory's filesystem (a number).
    type: raw
    default: 20
"""

EXAMPLES = r"""
- name: The preflight's checks, computed on the host
  gpuserve.sglang.sglang_preflight:
    host: "{{ inventory_hostname }}"
    tp: 8
    model_path: /models/Kimi-K2.5
    hicache_ratio: 4.0
  register: preflight

- name: Refuse what it found
  ansible.builtin.assert:
    that: preflight.problems | length == 0
    fail_msg: "{{ preflight.problems | join('; ') }}"
"""

RETURN = r"""
problems:
  description: What stops the deploy, one message each (empty when the host passes).
  returned: always
  type: list
  elements: str
notes:
  description: What the role shows - the memory plan (the views with the server running, the summary, the compare
    table), GPU processes of another PID namespace, foreign processes allowed, a check that could not be made.
  returned: always
  type: list
  elements: str
gpu_info:
  description: The answer of nvidia-smi as M(gpuserve.sglang.nvidia_gpu_info) returns it; empty when neither
    V(gpus) nor V(memory) ran.
  returned: always
  type: dict
memory_plan:
  description: The plan as M(gpuserve.sglang.sglang_memory_plan) returns it; empty when V(memory) did not run or
    the plan could not be made (the reason is in RV(problems)).
  returned: always
  type: dict
"""

import numbers

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._preflight import CHECKS, check


def main():
    module = QuietModule(
        argument_spec=dict(
            checks=dict(type="list", elements="str", choices=list(CHECKS), default=list(CHECKS)),
            host=dict(type="str", required=True),
            tp=dict(type="int", default=8),
            mem_fraction_static=dict(type="float", default=0.88),
            hicache=dict(type="bool", default=True),
            hicache_ratio=dict(type="float", default=2.0),
            hicache_size_gb=dict(type="int", default=0),
            page_size=dict(type="int", default=1),
            kv_dtype=dict(type="str", default="auto"),
            model_path=dict(type="str", default=""),
            draft_model_path=dict(type="str", default=""),
            check_paths=dict(type="bool", default=True),
            release=dict(type="str", default=""),
            hybrid=dict(type="dict", default={}),
            model_geometry=dict(type="dict", default={}),
            require_gpus=dict(type="bool", default=True),
            min_driver=dict(type="int", default=580),
            allow_foreign_gpu_processes=dict(type="bool", default=False),
            service_name=dict(type="str", default="sglang-kimi"),
            companion_units=dict(type="list", elements="str", default=[]),
            nvidia_smi=dict(type="str", default=""),
            plan_after_stop=dict(type="bool", default=True),
            gpu_memory_gb=dict(type="float"),
            gpu_overhead_gb=dict(type="float", default=1.0),
            weights_gb_per_gpu=dict(type="float"),
            mem_available_gb=dict(type="float"),
            compare=dict(type="list", elements="dict", default=[]),
            log_dir=dict(type="str", default="/var/log/sglang"),
            min_free_disk_gb=dict(type="raw", default=20),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    free = module.params["min_free_disk_gb"]
    if isinstance(free, bool) or not isinstance(free, numbers.Number):
        try:
            module.params["min_free_disk_gb"] = float(free)
        except (TypeError, ValueError):
            module.fail_json(msg="min_free_disk_gb must be a number of GiB, got %r" % (free,))

    def nvidia_run(argv):
        try:
            return module.run_command(argv, environ_update={"LC_ALL": "C"})
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    result = check(module.params, module.run_command, nvidia_run, module.get_bin_path, module.params["host"],
                   warn=module.warn)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
