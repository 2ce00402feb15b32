#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_info
short_description: Report the NVIDIA GPUs of a host, their memory, driver, CUDA version and the processes holding them
version_added: 0.1.0
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) and C(nvidia-smi --query-compute-apps=...)
    and returns one entry per GPU (index, UUID, name, PCI bus id, memory total/used/free, driver version,
    compute capability, persistence mode, power limit, temperature) with the processes that hold it.
  - The CUDA version the driver supports comes from the C(nvidia-smi) table header (or C(nvidia-smi -q)).
  - For each process it names the systemd unit it runs in (from C(/proc/<pid>/cgroup)), so a caller can tell
    the server's own processes from foreign ones.
  - On a host without C(nvidia-smi), or where it fails (no driver, no device), it returns C(gpus=[]) and a
    C(reason); it does not fail.
  - Changes nothing on the host.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  nvidia_smi:
    description:
      - Path of the C(nvidia-smi) binary, or a command name (no C(/)) looked up on C(PATH) and in
        C(/usr/bin), C(/usr/local/bin), C(/usr/local/nvidia/bin). By default C(nvidia-smi) is looked up there.
      - A path that does not exist counts as a host without C(nvidia-smi) (C(gpus=[]) and a C(reason)).
    type: path
  identify_units:
    description:
      - Read C(/proc/<pid>/cgroup) of each GPU process to name the systemd unit it belongs to.
    type: bool
    default: true
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
attributes:
  platform:
    details: Linux hosts (nvidia-smi, /proc).
notes:
  - Memory numbers are MiB as C(nvidia-smi) prints them with C(nounits); the C(*_gib) values are the same
    numbers divided by 1024, the unit SGLang's logs label "GB".
seealso:
  - module: gpuserve.sglang.sglang_memory_plan
"""

EXAMPLES = r"""
- name: Look at the GPUs
  gpuserve.sglang.nvidia_gpu_info:
  register: gpu_info

- name: Refuse to go on with fewer than 8 GPUs
  ansible.builtin.assert:
    that: gpu_info.count >= 8
    fail_msg: "{{ gpu_info.count }} GPUs found ({{ gpu_info.reason | default('') }}), 8 needed"

- name: List the processes that hold a GPU and are not the server
  ansible.builtin.debug:
    msg: "{{ gpu_info.processes | rejectattr('unit', 'equalto', 'sglang-kimi.service') | list }}"
"""

RETURN = r"""
available:
  description: Whether at least one GPU was found.
  returned: always
  type: bool
  sample: true
count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 2
reason:
  description: Why there are no GPUs (no nvidia-smi, nvidia-smi failed, nothing listed); null when GPUs were found.
  returned: always
  type: str
  sample: nvidia-smi not found on PATH or in /usr/bin, /usr/local/bin, /usr/local/nvidia/bin
nvidia_smi:
  description: The nvidia-smi binary used; null when none was found.
  returned: always
  type: str
  sample: /usr/bin/nvidia-smi
nvidia_smi_failed:
  description:
    - Whether nvidia-smi was found but failed or printed what could not be parsed (no driver loaded, ...).
    - False on a host without nvidia-smi and where it lists no GPU.
  returned: always
  type: bool
  sample: false
driver_version:
  description: NVIDIA driver version.
  returned: always
  type: str
  sample: 580.159.04
driver_major:
  description: Major driver version (the number before the first dot).
  returned: always
  type: int
  sample: 580
cuda_version:
  description: Highest CUDA version the driver supports, from the nvidia-smi header.
  returned: always
  type: str
  sample: "13.0"
memory_total_mib_min:
  description: Smallest memory.total across the GPUs (MiB).
  returned: always
  type: int
  sample: 143771
memory_free_mib_min:
  description: Smallest memory.free across the GPUs (MiB).
  returned: always
  type: int
  sample: 143156
gpus:
  description: One entry per GPU, sorted by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-ca60360e-6190-fdf7-9bbb-8f0a025bf673
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    pci_bus_id:
      description: PCI bus id.
      type: str
      sample: "00000000:00:06.0"
    memory_total_mib:
      description: Total memory, MiB.
      type: int
      sample: 143771
    memory_used_mib:
      description: Used memory, MiB.
      type: int
      sample: 0
    memory_free_mib:
      description: Free memory, MiB.
      type: int
      sample: 143156
    memory_total_gib:
      description: Total memory, GiB.
      type: float
      sample: 140.401
    memory_used_gib:
      description: Used memory, GiB.
      type: float
      sample: 0.0
    memory_free_gib:
      description: Free memory, GiB.
      type: float
      sample: 139.801
    driver_version:
      description: Driver version.
      type: str
      sample: 580.159.04
    compute_cap:
      description: CUDA compute capability.
      type: str
      sample: "9.0"
    persistence_mode:
      description: Persistence mode.
      type: str
      sample: Enabled
    power_limit_w:
      description: Power limit in watts.
      type: float
      sample: 700.0
    temperature_c:
      description: GPU temperature in degrees Celsius.
      type: int
      sample: 34
    processes:
      description: The processes on this GPU (same entries as the top-level RV(processes)).
      type: list
      elements: dict
processes:
  description: Every compute process holding a GPU.
  returned: always
  type: list
  elements: dict
  contains:
    gpu_uuid:
      description: UUID of the GPU.
      type: str
    gpu_index:
      description: Index of the GPU.
      type: int
    pid:
      description: Process id.
      type: int
    process_name:
      description: Process name as nvidia-smi prints it.
      type: str
    used_memory_mib:
      description: GPU memory the process uses (MiB); null where the driver does not report it.
      type: int
    unit:
      description: The systemd unit the process runs in (from /proc/<pid>/cgroup), or null.
      type: str
      sample: sglang-kimi.service
    pid_here:
      description:
        - Whether this host's /proc has the PID under the name nvidia-smi gives. False in a container that sees
          the PIDs of another PID namespace (or a process that just exited); such a process is neither the
          server's nor one to stop. Null when O(identify_units=false).
      type: bool
problems:
  description:
    - Problems that did not stop the report (the process list could not be read, ...); each is also given to
      Ansible as a warning. (Not named C(warnings), since a module result key of that name is Ansible's own.)
  returned: when GPUs were found
  type: list
  elements: str
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils._nvidia_smi import read_host
from ansible_collections.gpuserve.sglang.plugins.module_utils._proc import read_text as _read


def main():
    module = QuietModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            identify_units=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )

    def run(argv):
        try:
            return module.run_command(argv, environ_update={"LC_ALL": "C"})
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    result = read_host(module.params["nvidia_smi"], module.get_bin_path, run,
                       _read if module.params["identify_units"] else None)
    for problem in result.get("problems") or []:
        module.warn(problem)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
