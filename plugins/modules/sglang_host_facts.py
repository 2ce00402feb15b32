#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_host_facts
short_description: What the roles need to know of a server host before they change it, in one module run
version_added: "0.3.0"
description:
  - One round trip instead of one module run per read (the logic in C(plugins/module_utils/_host_facts.py)). The
    server and nccl_tuning roles call it through C(roles/_common/tasks/interpreter.yml).
  - Resolves the interpreter that runs SGLang - O(python) when given, else C(<venv>/bin/python) of the venv named
    in the install record O(install_record) (versioned venvs), else C(<venv>/bin/python) of O(venv).
  - Optionally reads the CUDA facts file the cuda role wrote (O(cuda_fact_file)), the unit's drop-ins and the
    lines of them that override C(ExecStart), C(Environment) or C(EnvironmentFile) (O(unit), O(unit_dir)),
    whether each of O(paths) exists (not following a final link), and, with O(probe=true), asks the interpreter
    (isolated mode) for its site-packages and whether it can import SGLang.
  - A file a role wrote that is not JSON (the install record, the CUDA facts) fails the task naming it.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.info_module
  - gpuserve.sglang._attributes.action_plugin
attributes:
  platform:
    details: Linux hosts.
  action:
    details: With O(server_preflight=true) (the server role's preflight), the action plugin sets every other option
      from the role's variables and runs the role's checks after the host read; without it the options go to the
      module as given.
options:
  server_preflight:
    description:
      - The server role's preflight (C(plugins/plugin_utils/_server_preflight.py)) - the action plugin reads the
        role's variables (C(sglang_*)) and sets the other options itself, then runs the installed SGLang's parser
        over the server's command line (C(sglang_check_args)), and fails with every refusal, joined by C(; ), before
        anything changes. Otherwise returns the host read with RV(refusals), RV(notes), RV(parser) and RV(account_ok).
      - Only in a task of the role gpuserve.sglang.server; leave it out to set the options yourself.
    type: bool
    default: false
  server_flags:
    description:
      - The server role's entry point C(flags), before the host read - no module runs; the action plugin reads the
        profile's file (C(sglang_profile)) and the role's variables and returns RV(profile) and RV(flags), computed in
        Python (C(plugins/plugin_utils/_server_flags.py)).
      - Only in a task of the role gpuserve.sglang.server.
    type: bool
    default: false
  server_nodes:
    description:
      - The server role's nodes step, for a server over several hosts (C(sglang_server_nodes)), after every node's
        preflight - no module runs; the action plugin fails naming each other node whose RV(node) differs from this
        one's (both values) or that has no preflight in this play, else returns RV(reach).
      - Only in a task of the role gpuserve.sglang.server.
    type: bool
    default: false
  python:
    description: The interpreter given by the user (C(sglang_python)); empty to resolve it from the host.
    type: str
    default: ""
  install_record:
    description: The install role's record on the host (its C(venv) names the venv it last made).
    type: str
    default: ""
  venv:
    description: The SGLang venv (C(sglang_venv)), the fallback.
    type: str
    required: true
  cuda_fact_file:
    description: The CUDA facts file to read (empty, the default, reads none).
    type: str
    default: ""
  cuda_home:
    description:
      - The CUDA home the unit is given (C(cuda_home)); empty takes the CUDA facts file's, else C(/usr/local/cuda).
      - With O(probe), when the interpreter's SGLang compiles its own kernels (C(tvm_ffi) importable), RV(jit_problems)
        says what that CUDA home lacks (C(bin/nvcc), C(lib64/libcudart.so)).
    type: str
    default: ""
  unit:
    description: The unit's name without C(.service), for its drop-in directory (empty reads none).
    type: str
    default: ""
  unit_dir:
    description: The directory of the unit file.
    type: str
    default: ""
  paths:
    description: Paths to look for (absolute; others count as missing).
    type: list
    elements: str
    default: []
  probe:
    description: Run the interpreter once for its site-packages and whether it imports SGLang.
    type: bool
    default: false
  files:
    description:
      - Paths to fingerprint (following links, as the copy, template and file modules judge a destination) - the
        roles compare them with what they would write and skip the module run where nothing would change.
    type: list
    elements: str
    default: []
  user:
    description: The service account to look up (with the groups that own the GPU device files); empty for none.
    type: str
    default: ""
  unit_state:
    description: Read the state of O(unit) (C(systemctl show)).
    type: bool
    default: false
  models:
    description:
      - The model preflight (C(plugins/module_utils/_model_check.py)) - C(items), a list of C({path, role
        (model|draft), quantization (the quant_method the profile expects, empty for any), files (files the
        profile needs), model_impl}); C(release), the SGLang release to judge by when the interpreter reports none;
        C(timeout), seconds for reading the safetensors headers (the rest are only found present, said so);
        C(deep), read every weight file whole and compare its sha256 with the one Hugging Face's download recorded.
      - Reads config.json, the weight index and each safetensors header, the quantization config, and the GPUs'
        compute capability (C(nvidia-smi)); the architecture and the GPUs are judged by the release's table (taken
        from its wheel). Empty (the default) checks nothing.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: What the server role needs of this host
  gpuserve.sglang.sglang_host_facts:
    install_record: /opt/sglang/install-record.json
    venv: /opt/sglang/venv
    cuda_fact_file: /etc/ansible/facts.d/gpuserve_cuda.fact
    unit: sglang-kimi
    unit_dir: /etc/systemd/system
    paths: [/models/Kimi-K2.5-INT4, /etc/sglang/sglang-kimi.md]
    probe: true
  register: host
"""

RETURN = r"""
python:
  description: The interpreter that runs SGLang.
  returned: always
  type: str
  sample: /opt/sglang/venvs/0.5.9-3f2a/bin/python
versioned_venv:
  description: The versioned venv the install record names, when it is not O(venv) itself; else empty.
  returned: always
  type: str
python_exists:
  description: Whether the interpreter exists (a link counts).
  returned: always
  type: bool
purelib:
  description: The interpreter's site-packages (O(probe)); empty when not asked or it could not answer.
  returned: always
  type: str
sglang_installed:
  description: Whether the interpreter imports SGLang (O(probe)); null when not asked or it could not answer.
  returned: always
  type: bool
sglang_release:
  description:
    - The version of the C(sglang) distribution in the interpreter's environment (C(importlib.metadata), O(probe));
      empty when there is none or it was not asked.
  returned: always
  type: str
  sample: 0.5.9
cpus:
  description: CPUs the managed host lets this process run on (its affinity), for per-rank thread counts.
  returned: always
  type: int
python_error:
  description: Why the interpreter could not answer (O(probe)).
  returned: always
  type: str
sglang_jit:
  description: Whether the interpreter's SGLang compiles its own CUDA kernels at its first start (C(tvm_ffi)), O(probe).
  returned: always
  type: bool
jit_problems:
  description: What the CUDA home lacks for that compile (the server role refuses before any change); V([]) when fine.
  returned: always
  type: list
  elements: str
cuda:
  description: The CUDA facts file's content; V({}) when absent or not asked.
  returned: always
  type: dict
dropins:
  description: The unit's drop-in files (C(*.conf)).
  returned: always
  type: list
  elements: str
dropin_overrides:
  description: "Their lines that set C(ExecStart), C(Environment) or C(EnvironmentFile), as C(<path>: <line>)."
  returned: always
  type: list
  elements: str
paths:
  description: Each path of O(paths) with C(exists), C(isdir), C(islnk), and C(target) (what it points to) for a link.
  returned: always
  type: dict
  sample: {"/models/Kimi-K2.5-INT4": {"exists": true, "isdir": true, "islnk": false}}
files:
  description: Each path of O(files) with C(exists) and, for one that exists, C(isdir), C(mode), C(owner), C(group) and C(sha1) (regular files up to 16 MiB).
  returned: always
  type: dict
  sample: {"/etc/sglang/sglang-kimi.env": {"exists": true, "islnk": false, "isdir": false, "mode": "0600", "owner": "root",
                                           "group": "root", "sha1": "0beec7b5ea3f0fdbc95d0dd47f3c5bc275da8a33"}}
account:
  description: O(user) - C(exists), C(group_exists), C(groups) (its group names) and C(device_groups) (the groups owning the GPU devices).
  returned: always
  type: dict
models:
  description:
    - O(models) - C(problems) (each a refusal naming the path), C(notes) (what was not checked, and why), C(table)
      (which release table judged), C(compute_caps) and per model C(architecture), C(quantization) and C(weights)
      (C(index), C(files), C(bytes), C(headers_read)).
  returned: when O(models) has items
  type: dict
refusals:
  description: With O(server_preflight) - the preflight's refusals (V([]) when the task succeeds).
  returned: with O(server_preflight)
  type: list
  elements: str
notes:
  description: With O(server_preflight) - what the preflight allowed or did not check (said on the console too).
  returned: with O(server_preflight)
  type: list
  elements: str
parser:
  description: With O(server_preflight) - the installed parser's check (C(rc), C(stderr)), or C(skipped) when not run.
  returned: with O(server_preflight)
  type: dict
account_ok:
  description:
    - With O(server_preflight) - whether the service account exists with its group, in every group owning a GPU
      device file and in every one of C(sglang_user_groups).
  returned: with O(server_preflight)
  type: bool
account_groups:
  description:
    - With O(server_preflight) - the groups the service account joins - those owning the GPU device files (a gid
      without a name left out), then C(sglang_user_groups).
  returned: with O(server_preflight)
  type: list
  elements: str
node:
  description:
    - With O(server_preflight) and C(sglang_server_nodes) - what this node must share with the other nodes of the
      server (C(sglang_release), C(profile), C(gpus), C(compute_caps), C(tp), C(model_config_sha256),
      C(model_index_sha256), C(model_weight_files), C(model_weight_bytes)).
  returned: with O(server_preflight) for a server over several hosts
  type: dict
profile:
  description: With O(server_flags) - the profile's variables (C(_server_profile_args), C(_server_profile_env), ...), templated.
  returned: with O(server_flags)
  type: dict
flags:
  description:
    - With O(server_flags), and with O(server_preflight) when nothing was refused (then for the host's release) - the
      server's effective flags (C(args)), SGLang's arguments (C(argv)), the unit's command line without and with
      C(--config) (C(cmdline), C(exec_start)), the memory plan's inputs (C(plan), the role's fact C(sglang_plan_inputs)),
      C(hicache), what the role's own variables add (C(features)) and the C(release) they were computed for; where a
      word holds control characters, no command line (V(null)) and C(problem) says why (the preflight refuses it).
    - Not shown on the console when a flag's value is a secret (the whole result is then hidden).
  returned: with O(server_flags) or O(server_preflight)
  type: dict
reach:
  description:
    - With O(server_nodes) - what this node must reach of node 0 before anything stops (C(node0), C(address),
      C(ports) - the dist port and the five after it); V({}) on node 0.
  returned: with O(server_nodes)
  type: dict
mismatches:
  description: With O(server_nodes) - how each other node differs from this one (V([]) when the task succeeds).
  returned: with O(server_nodes)
  type: list
  elements: str
unit_state:
  description: O(unit_state) - C(ActiveState), C(ActiveEnterTimestamp) (seconds, C(@<n>)), C(InvocationID), C(UnitFileState).
  returned: always
  type: dict
"""

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule

from ansible_collections.gpuserve.sglang.plugins.module_utils import _host_facts


def main():
    module = QuietModule(
        argument_spec=dict(
            python=dict(type="str", default=""),
            install_record=dict(type="str", default=""),
            venv=dict(type="str", required=True),
            cuda_fact_file=dict(type="str", default=""),
            unit=dict(type="str", default=""),
            unit_dir=dict(type="str", default=""),
            paths=dict(type="list", elements="str", default=[]),
            probe=dict(type="bool", default=False),
            files=dict(type="list", elements="str", default=[]),
            user=dict(type="str", default=""),
            unit_state=dict(type="bool", default=False),
            models=dict(type="dict", default={}),
            cuda_home=dict(type="str", default=""),
            server_preflight=dict(type="bool", default=False),  # the action plugin's (it sets the options above)
            server_nodes=dict(type="bool", default=False),  # the action plugin's (no module runs)
            server_flags=dict(type="bool", default=False),  # the action plugin's (no module runs)
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    params = module.params
    try:
        facts = _host_facts.gather(params["python"], params["install_record"], params["venv"],
                                   cuda_fact_file=params["cuda_fact_file"], unit=params["unit"],
                                   unit_dir=params["unit_dir"], paths=params["paths"], probe=params["probe"],
                                   files=params["files"], user=params["user"], unit_state_wanted=params["unit_state"],
                                   models=params["models"], cuda_home=params["cuda_home"])
    except _host_facts.HostFactsError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
