#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit
short_description: The CUDA toolkit on a host - installed, pinned, wired into the environment and verified
version_added: "1.1.0"
description:
  - Does, in Python on the host, what the role gpuserve.sglang.cuda needs - read what is there, refuse bad input or
    host state before anything changes, change only what differs, verify, and report the changes (and the diffs of
    the files it writes in C(--diff)). A second run changes nothing.
  - Preflight (every call, read-only) - the sources must be https:// or a local file:// tree and
    O(repo.keyring_sha256) 64 hex digits; NVIDIA's repository is rendered for this distribution (/etc/os-release)
    and architecture; the CUDA home, its C(nvcc), the generic link and the loader entries are read once. Refused
    with a message that names the fix - the C(existing) method without an executable C(nvcc), the C(pip) method over
    a real directory at O(prefix), a real directory or file at O(symlink), the C(nvidia_repo) install without
    O(repo.keyring_sha256).
  - Phase C(install) - C(nvidia_repo) installs the host compiler, the cuda-keyring .deb downloaded and checked
    against O(repo.keyring_sha256), the sources entry (the keyring's own file name, so a mirror replaces NVIDIA's
    URL), the apt pin of C(cuda-toolkit-<major>-<minor>), optionally the driver with its branch lock, and the
    toolkit package (apt-get update only when the repository changed or a missing package meets an apt cache older
    than an hour). C(pip) installs the host compiler and the venv module, makes the venv, installs the wheels it
    does not satisfy, links C(lib64) to C(lib) in the wheel tree and makes O(prefix) a link to the wheel tree.
    C(existing) installs nothing.
  - Phase C(configure) - with O(environment.manage), points O(symlink) at O(prefix) (its old target kept once in
    O(environment.backup_dir)), writes the profile script and the loader entry (a replaced file kept beside it),
    reports the loader entries of another CUDA major or, with O(environment.remove_stale), comments out only their
    lines of another major (each original kept in O(environment.backup_dir)C(/ld.so.conf.d)), and runs C(ldconfig)
    when an entry changed. Then writes O(facts_file).
  - Phase C(verify) (not in check mode) - C(nvcc --version) must report O(release); where GPUs exist the driver must
    be at least O(verify.driver_min_version); the .cu test O(verify.source) is compiled, and run where a GPU exists.
  - The logic is C(plugins/module_utils/_cuda_toolkit/); standard library only.
author:
  - gpuserve.sglang maintainers (@gpuserve)
options:
  release:
    description: The CUDA release MAJOR.MINOR to install and to demand from C(nvcc --version).
    type: str
    required: true
  method:
    description: How CUDA gets onto the host.
    type: str
    choices: [nvidia_repo, pip, existing]
    default: nvidia_repo
  prefix:
    description: The CUDA home. With C(pip) it is a symlink this module manages, pointing at the wheel tree.
    type: str
    required: true
  symlink:
    description: The generic link pointed at O(prefix) (left alone when it already resolves there); empty to skip.
    type: str
    default: /usr/local/cuda
  phases:
    description: The phases to run after the preflight; empty runs the preflight alone (reads and refusals).
    type: list
    elements: str
    choices: [install, configure, verify]
    default: [install, configure, verify]
  host_compiler_packages:
    description: Host C++ compiler packages C(nvcc) needs; installed by C(nvidia_repo) and C(pip).
    type: list
    elements: str
    default: [g++]
  facts_file:
    description: Where the CUDA home, version, bin and lib are persisted for later runs and other roles.
    type: path
    default: /etc/ansible/facts.d/gpuserve_cuda.fact
  repo:
    description: NVIDIA's apt repository (method C(nvidia_repo)).
    type: dict
    default: {}
    suboptions:
      base_url:
        description: NVIDIA's repository tree, C(<base>/<distro>/<arch>/). https:// or file:// only.
        type: str
        default: https://developer.download.nvidia.com/compute/cuda/repos
      mirror:
        description: A mirror of the same tree; replaces O(repo.base_url) when set. https:// or file:// only.
        type: str
        default: ""
      distro:
        description: NVIDIA's repository name; empty derives it from /etc/os-release.
        type: str
        default: ""
        choices: ["", ubuntu2204, ubuntu2404, debian12]
      arch:
        description: NVIDIA's repository architecture; empty derives it from the machine (aarch64 -> sbsa).
        type: str
        default: ""
        choices: ["", x86_64, sbsa]
      keyring_version:
        description: Version of the cuda-keyring package.
        type: str
        default: "1.1-1"
      keyring_sha256:
        description: sha256 of the cuda-keyring .deb in that repository; required by the C(install) phase.
        type: str
        default: ""
      pin_version:
        description: apt pin of C(cuda-toolkit-<major>-<minor>); empty pins C(<release>.*).
        type: str
        default: ""
      driver_install:
        description: Also install the NVIDIA driver from the repository, locked to O(repo.driver_branch).
        type: bool
        default: false
      driver_branch:
        description: Driver branch locked with C(nvidia-driver-pinning-<branch>), and named by the driver check.
        type: str
        default: "580"
      driver_flavor:
        description: C(open) installs C(nvidia-open), C(proprietary) installs C(cuda-drivers).
        type: str
        choices: [open, proprietary]
        default: open
  pip:
    description: NVIDIA's CUDA wheels from PyPI (method C(pip)).
    type: dict
    default: {}
    suboptions:
      venv:
        description: The venv that receives the wheels; created when it has no C(bin/python).
        type: path
        default: /opt/sglang/cuda-venv
      python:
        description: Interpreter that creates the venv.
        type: str
        default: python3
      packages:
        description: Requirements giving C(nvcc), its headers, C(cicc) and cudart at one CUDA build.
        type: list
        elements: str
        default: ["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"]
      extra_args:
        description: Extra pip arguments (e.g. C(--index-url) of a mirror); a URL in them must be https:// or file://.
        type: str
        default: ""
      system_packages:
        description: System packages the method needs besides the compiler (the venv module).
        type: list
        elements: str
        default: [python3-venv]
      lock:
        description:
          - The text of a hash lock (C(NAME==VERSION --hash=sha256:...) per wheel) that pins O(pip.packages) and
            everything they pull; installed with C(pip install --require-hashes --no-deps -r) (written to
            C(<venv>/cuda-requirements-lock.txt)). A package it does not pin is refused before anything changes.
          - Empty - the packages are installed as they resolve, without hash checking.
        type: str
        default: ""
  environment:
    description: The host's environment for CUDA (phase C(configure)).
    type: dict
    default: {}
    suboptions:
      manage:
        description: Write the profile script, the loader entry and O(symlink), and handle stale loader entries.
        type: bool
        default: true
      profile_file:
        description: Login-shell environment file (CUDA_HOME, CUDA_PATH, PATH).
        type: path
        default: /etc/profile.d/cuda.sh
      ldconfig_file:
        description: Loader entry for C(<prefix>/lib64); the other entries of its directory are checked.
        type: path
        default: /etc/ld.so.conf.d/cuda-gpuserve.conf
      remove_stale:
        description: Comment out the lines of another CUDA major in the other loader entries (false reports them).
        type: bool
        default: false
      backup_dir:
        description: Where the originals are kept (stale loader entries, the old target of O(symlink)).
        type: path
        default: /var/backups/gpuserve-sglang/cuda
  verify:
    description: The verify phase.
    type: dict
    default: {}
    suboptions:
      compile:
        description: Compile O(verify.source) with C(nvcc), and run it where a GPU exists.
        type: bool
        default: true
      every_run:
        description:
          - Compile (and run) the .cu test on every run. By default a run that changed nothing skips it when the same
            test passed earlier in this boot on the same nvcc binary, driver version and GPU count (the proof is kept
            as O(verify.dir)C(/verified.json)); nvcc C(--version), the release and the driver are checked every run.
        type: bool
        default: false
      source:
        description:
          - The .cu test (the role's C(files/cuda_verify.cu)), placed as O(verify.dir)C(/cuda_verify.cu) (root:root
            0644, replaced only when it differs); the binary goes to a temporary directory, removed each run.
          - Where a GPU exists its output must hold C(gpuserve-cuda-ok sum=97920).
        type: str
        default: ""
      dir:
        description: Where the .cu test is kept (a 0755 directory).
        type: path
        default: /usr/local/share/gpuserve/cuda-verify
      nvidia_smi:
        description: nvidia-smi command; where it is absent the host counts as having no GPU.
        type: str
        default: nvidia-smi
      driver_min_version:
        description: Minimum driver major version where GPUs exist.
        type: int
        default: 580
extends_documentation_fragment:
  - gpuserve.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports what would change; the verify phase runs only in a real run.
  diff_mode:
    support: full
    details:
      - The files it writes (profile script, loader entries, apt sources and pin, facts file).
  platform:
    details: Linux hosts; C(nvidia_repo) on Ubuntu 22.04, 24.04 and Debian 12.
seealso:
  - module: gpuserve.sglang.cuda_host_facts
  - module: gpuserve.sglang.nvidia_gpu_info
"""

EXAMPLES = r"""
- name: CUDA 13.0 from NVIDIA's wheels, wired into the host and verified
  gpuserve.sglang.cuda_toolkit:
    release: "13.0"
    method: pip
    prefix: /usr/local/cuda-13.0
    environment:
      remove_stale: true
    verify:
      source: "{{ lookup('ansible.builtin.file', 'cuda_verify.cu') }}"
  register: cuda

- name: The preflight alone (reads and refusals, NVIDIA's repository rendered)
  gpuserve.sglang.cuda_toolkit:
    release: "13.0"
    prefix: /usr/local/cuda-13.0
    phases: []
    repo:
      mirror: https://mirror.example.internal/cuda/repos
  register: cuda_plan
"""

RETURN = r"""
changes:
  description: What was changed (or would be in check mode), in order.
  returned: always
  type: list
  elements: str
  sample: ["installed g++", "linked /usr/local/cuda -> /usr/local/cuda-13.0 (was -> /usr/local/cuda-12.8)"]
phases:
  description: The phases that ran after the preflight.
  returned: always
  type: list
  elements: str
  sample: [install, configure, verify]
facts:
  description: C(cuda_home), C(cuda_version), C(cuda_bin), C(cuda_lib) (what the role sets as facts and persists).
  returned: always
  type: dict
  sample: {"cuda_home": "/usr/local/cuda-13.0", "cuda_version": "13.0", "cuda_bin": "/usr/local/cuda-13.0/bin",
           "cuda_lib": "/usr/local/cuda-13.0/lib64"}
repo:
  description:
    - NVIDIA's repository for this host (method C(nvidia_repo); C({}) otherwise) - C(repo_url), C(keyring_url),
      C(keyring_deb), C(keyring_file), C(sources_file), C(sources_line), C(toolkit_package), C(pin_file),
      C(pin_version), C(pin_content), C(driver_pinning_package), C(driver_packages), C(release), C(distro), C(arch).
  returned: always
  type: dict
  sample: {"repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
           "toolkit_package": "cuda-toolkit-13-0"}
stale_ldconfig:
  description: The loader entries of another CUDA major (C(path), C(reason)), reported or cleaned.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/ld.so.conf.d/988_cuda-12.conf", "reason": "CUDA 12, not 13 (file name 988_cuda-12.conf)"}]
verified:
  description: The verify phase - C(ran), C(nvcc_version), C(driver_version) (empty without a GPU), C(gpu_count).
  returned: always
  type: dict
  sample: {"ran": true, "nvcc_version": "13.0.88", "driver_version": "", "gpu_count": 0}
notes:
  description: What the run has to say (the existing method's note, a real file left at O(symlink), the result).
  returned: always
  type: list
  elements: str
msg:
  description: The notes as one text.
  returned: always
  type: str
  sample: "CUDA 13.0 OK: home /usr/local/cuda-13.0, nvcc 13.0.88, no GPU here (compile-only test passed)"
"""

import platform
import shutil
from urllib.parse import unquote, urlparse

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible.module_utils.urls import open_url

from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.toolkit import (
    PHASES, CudaToolkit, ToolkitFailure)

REPO = dict(
    base_url=dict(type="str", default="https://developer.download.nvidia.com/compute/cuda/repos"),
    mirror=dict(type="str", default=""),
    distro=dict(type="str", default="", choices=["", "ubuntu2204", "ubuntu2404", "debian12"]),
    arch=dict(type="str", default="", choices=["", "x86_64", "sbsa"]),
    keyring_version=dict(type="str", default="1.1-1", no_log=False),
    keyring_sha256=dict(type="str", default="", no_log=False),
    pin_version=dict(type="str", default=""),
    driver_install=dict(type="bool", default=False),
    driver_branch=dict(type="str", default="580"),
    driver_flavor=dict(type="str", default="open", choices=["open", "proprietary"]),
)
PIP = dict(
    venv=dict(type="path", default="/opt/sglang/cuda-venv"),
    python=dict(type="str", default="python3"),
    packages=dict(type="list", elements="str", default=["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"]),
    extra_args=dict(type="str", default=""),
    system_packages=dict(type="list", elements="str", default=["python3-venv"]),
    lock=dict(type="str", default=""),
)
ENVIRONMENT = dict(
    manage=dict(type="bool", default=True),
    profile_file=dict(type="path", default="/etc/profile.d/cuda.sh"),
    ldconfig_file=dict(type="path", default="/etc/ld.so.conf.d/cuda-gpuserve.conf"),
    remove_stale=dict(type="bool", default=False),
    backup_dir=dict(type="path", default="/var/backups/gpuserve-sglang/cuda"),
)
VERIFY = dict(
    compile=dict(type="bool", default=True),
    every_run=dict(type="bool", default=False),
    source=dict(type="str", default=""),
    dir=dict(type="path", default="/usr/local/share/gpuserve/cuda-verify"),
    nvidia_smi=dict(type="str", default="nvidia-smi"),
    driver_min_version=dict(type="int", default=580),
)


def main():
    module = QuietModule(
        argument_spec=dict(
            release=dict(type="str", required=True),
            method=dict(type="str", default="nvidia_repo", choices=["nvidia_repo", "pip", "existing"]),
            prefix=dict(type="str", required=True),
            symlink=dict(type="str", default="/usr/local/cuda"),
            phases=dict(type="list", elements="str", default=list(PHASES), choices=list(PHASES)),
            host_compiler_packages=dict(type="list", elements="str", default=["g++"]),
            facts_file=dict(type="path", default="/etc/ansible/facts.d/gpuserve_cuda.fact"),
            repo=dict(type="dict", default={}, options=REPO),
            pip=dict(type="dict", default={}, options=PIP),
            environment=dict(type="dict", default={}, options=ENVIRONMENT),
            verify=dict(type="dict", default={}, options=VERIFY),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )

    def run(argv, data=None, environ_update=None):
        try:
            return module.run_command(argv, data=data, environ_update=environ_update)
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    def which(name, dirs=None):
        return module.get_bin_path(name, opt_dirs=dirs or [])

    def download(url, dest):
        """file:// is copied, https:// fetched (certificates checked); any failure names the URL."""
        try:
            if url.startswith("file://"):
                shutil.copyfile(unquote(urlparse(url).path), dest)
                return
            response = open_url(url, timeout=120)
            with open(dest, "wb") as handle:
                shutil.copyfileobj(response, handle)
        except Exception as exc:  # pylint: disable=broad-except
            raise OSError("could not download %s: %s" % (url, exc))

    toolkit = CudaToolkit(module.params, run, which, check_mode=module.check_mode, download=download,
                          backup=module.backup_local, machine=platform.machine())
    try:
        result = toolkit.apply()
    except ToolkitFailure as exc:
        module.fail_json(msg=str(exc), changes=list(toolkit.writer.changes))
    for warning in toolkit.warnings:
        module.warn(warning)
    if not module._diff:
        result.pop("diff")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
