#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright (c) gpuserve.sglang contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_install
short_description: SGLang into its venv, its patches and the install record, in one module run
version_added: 0.5.0
description:
  - The on-host work of the gpuserve.sglang.install role. First every refusal, before anything changes - the version
    and package name, https-only sources, the hash lock (present, every line C(NAME==VERSION --hash=sha256:...), the
    package pinned, no unhashable extra packages), the patch entries and files (present, the expected sha256, a
    shipped patch only on its own release), the wheel directory, the base interpreter and whether the lock has wheels
    for its Python, the versioned venv settings.
  - Then the venv named after what goes into it (with O(versioned), C(<versions_dir>/<package>-<version>-<12 hex>)
    of the package, version, dependencies flag, lock sha256, extra packages, patch sha256s, strip level and base
    interpreter; else O(venv) itself), created with O(base_python) when missing; the hash lock written to
    C(<dirname of venv>/requirements-lock.txt) (all of it, or the package's own lines with O(install_deps=false));
    C(pip install) only when a requirement is not met in the venv; the patch files copied to
    C(<dirname of venv>/patches) and those not applied yet applied with C(patch -F0) inside site-packages, each one
    checked by a dry run first (a patch that needs fuzz refuses them all); the install record written to
    O(install_record) (and, versioned, into the venv); on a first versioned install the link O(venv); the oldest
    versioned venvs beyond O(keep) removed (never the new one nor the link's).
  - The logic is C(plugins/module_utils/_install.py); the action plugin reads the controller's files.
author:
  - gpuserve.sglang maintainers (@gpuserve)
extends_documentation_fragment:
  - gpuserve.sglang._attributes
  - gpuserve.sglang._attributes.action_plugin
attributes:
  check_mode:
    support: full
    details: Reports what it would create, install, patch, write and remove; runs the refusals and asks the venv
      (when it exists) which requirements it does not meet, and C(patch --dry-run) which patches would apply.
  diff_mode:
    support: full
    details: The install record's text before and after.
  platform:
    details:
      - Linux hosts; standard library only.
      - When patches are given and C(patch) is missing, it is installed with the host's package manager (apt, dnf, yum).
  action:
    details: The action plugin reads the hash lock, the shipped locks' list and the patch files on the controller.
options:
  state:
    description: V(present) does the whole install; V(checked) runs only the refusals (the role's preflight, before it takes the host lease).
    type: str
    choices: [present, checked]
    default: present
  package:
    description: The pip requirement name (C(sglang_package)).
    type: str
    default: sglang
  version:
    description: The exact release to install (C(sglang_version)).
    type: str
    required: true
  install_deps:
    description: Install the dependencies too; false passes C(--no-deps) and installs only the package's lines of the lock.
    type: bool
    default: true
  venv:
    description: The server's venv (C(sglang_venv)); with O(versioned) the link to the venv the server runs.
    type: str
    required: true
  versioned:
    description: One venv per version and patch set under O(versions_dir); false installs into O(venv) in place.
    type: bool
    default: true
  versions_dir:
    description: Directory of the versioned venvs.
    type: str
    default: /opt/sglang/versions
  keep:
    description: How many versioned venvs to keep (a whole number of at least 1; refused otherwise).
    type: raw
    default: 3
  base_python:
    description: Interpreter on the host that creates the venv.
    type: str
    default: /usr/bin/python3
  index_url:
    description: Index URL (https:// or file://); empty uses pip's default. Through the action plugin a password or
      token in its userinfo (C(https://user:TOKEN@host/)) is masked here and travels in O(index_secret); pip gets
      the whole URL in its environment (C(PIP_INDEX_URL)), never on its command line, and the install record and
      C(--diff) show it masked.
    type: str
    default: ""
  index_secret:
    description: The secret of O(index_url)'s userinfo, split off by the action plugin (never logged).
    type: str
    default: ""
  wheel_dir:
    description: Directory on the host with the wheels of an offline install (C(--no-index --find-links)).
    type: str
    default: ""
  require_hashes:
    description: C(pip install --require-hashes -r LOCK) from the hash lock.
    type: bool
    default: true
  pip_lock:
    description: Path on the controller of the operator's hash lock; empty uses the one shipped in O(files_dir)C(/locks/).
    type: str
    default: ""
  extra_packages:
    description: More requirement specifiers; refused while O(require_hashes) is true.
    type: list
    elements: str
    default: []
  extra_args:
    description: More pip arguments; a URL in them must be https:// or file://.
    type: list
    elements: str
    default: []
  patches:
    description:
      - Patch files on the controller - a path (a bare name is one in O(files_dir)C(/patches/)) or a mapping with
        C(path) and C(sha256).
    type: list
    elements: raw
    default: []
  patch_strip:
    description: The C(-p) level of C(patch).
    type: int
    default: 1
  install_record:
    description: The JSON install record on the host.
    type: str
    default: /opt/sglang/install-record.json
  files_dir:
    description: The role's C(files/) directory on the controller (shipped locks and patches).
    type: str
    required: true
  shipped_patches:
    description: The known sha256 of each shipped patch, by file name; a bare name is checked against it.
    type: dict
    default: {}
  host_name:
    description: The host's inventory name, for the messages.
    type: str
    default: the host
  controller_files:
    description:
      - Set by the action plugin from the controller's files (the lock's path, text and sha256, the shipped lock
        versions, each patch file's path, content and sha256); a value given in the task is replaced.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: SGLang 0.5.9 from the shipped hash lock, with the Kimi-K2.5 EAGLE-3 patch
  gpuserve.sglang.sglang_install:
    version: "0.5.9"
    venv: /opt/sglang/venv
    files_dir: "{{ role_path }}/files"
    install_deps: false
    patches: [sglang-0.5.9-kimi-k25-eagle3.patch]
    shipped_patches:
      sglang-0.5.9-kimi-k25-eagle3.patch: 6f6fcc932215c657018548d092a7917b34faf3f718835661d48014070e87c6b7
    host_name: "{{ inventory_hostname }}"
  register: install
"""

RETURN = r"""
patch_found:
  description: Whether C(patch) is on the host's C(PATH) (the role installs it when patches are given and it is not).
  returned: always
  type: bool
venv_dir:
  description: The venv this install went into.
  returned: when O(state=present)
  type: str
  sample: /opt/sglang/versions/sglang-0.5.9-e31a9d575376
version:
  description: The installed version of the package (empty in check mode before the venv exists).
  returned: when O(state=present)
  type: str
  sample: 0.5.9
site_packages:
  description: The venv's purelib directory.
  returned: when O(state=present)
  type: str
record:
  description: The install record as written (package, version, venv, with_dependencies, hashes_required, lock, lock_sha256, source, patches).
  returned: when O(state=present)
  type: dict
changes:
  description: What was (or, in check mode, would be) created, installed, applied, written or removed.
  returned: when O(state=present)
  type: list
  elements: str
msg:
  description: Which venv the server runs and which one waits for its verified restart, or what is installed where.
  returned: when O(state=present)
  type: str
ansible_facts:
  description: C(sglang_venv_dir), C(sglang_installed_version) and C(sglang_site_packages).
  returned: when O(state=present)
  type: dict
"""

import shutil

from ansible_collections.gpuserve.sglang.plugins.module_utils._module import QuietModule
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import module_secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._install import Install, InstallError
from ansible_collections.gpuserve.sglang.plugins.module_utils._packages import Packages


def main():
    module = QuietModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "checked"], default="present"),
            package=dict(type="str", default="sglang"),
            version=dict(type="str", required=True),
            install_deps=dict(type="bool", default=True),
            venv=dict(type="str", required=True),
            versioned=dict(type="bool", default=True),
            versions_dir=dict(type="str", default="/opt/sglang/versions"),
            keep=dict(type="raw", default=3),
            base_python=dict(type="str", default="/usr/bin/python3"),
            index_url=dict(type="str", default=""),
            index_secret=dict(type="str", default="", no_log=True),
            wheel_dir=dict(type="str", default=""),
            require_hashes=dict(type="bool", default=True),
            pip_lock=dict(type="str", default=""),
            extra_packages=dict(type="list", elements="str", default=[]),
            extra_args=dict(type="list", elements="str", default=[]),
            patches=dict(type="list", elements="raw", default=[]),
            patch_strip=dict(type="int", default=1),
            install_record=dict(type="str", default="/opt/sglang/install-record.json"),
            files_dir=dict(type="str", required=True),
            shipped_patches=dict(type="dict", default={}),
            host_name=dict(type="str", default="the host"),
            controller_files=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
        no_log=True,  # no 'Invoked with' line in the host's journal (docs/security.md)
    )
    # every secret its options carry, registered with the core's masking API (2.22+; _secrets.module_secrets)
    module_secrets(module.params, module.argument_spec)
    p = dict(module.params)
    files = p.pop("controller_files") or {}
    p.update(deps=p.pop("install_deps"), lock=files.get("lock") or {}, shipped_locks=files.get("shipped_locks") or [],
             patch_files=files.get("patch_files") or [])
    if len(p["patch_files"]) != len(p["patches"]):
        module.fail_json(msg="controller_files does not match patches: run the module through its action plugin")

    def run(argv, data=None, environ_update=None):
        try:
            return module.run_command(argv, data=data, environ_update=environ_update)
        except (IOError, OSError) as exc:
            return 127, "", str(exc)

    def which(name, dirs=None):
        return module.get_bin_path(name, opt_dirs=dirs or []) or shutil.which(name)

    packages = Packages(run, which, check_mode=module.check_mode)
    try:
        result = Install(p, check_mode=module.check_mode, patch_bin=which("patch"), packages=packages,
                         which=which).apply(p["state"])
    except InstallError as exc:
        module.fail_json(msg=str(exc))
    except (OSError, RuntimeError, ValueError) as exc:
        module.fail_json(msg="the install of %s %s: %s" % (p["package"], p["version"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
