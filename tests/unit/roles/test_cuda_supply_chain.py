# SPDX-License-Identifier: GPL-3.0-or-later
"""cuda role, supply chain (issue 14): https-only repository and pip sources, and the cuda-keyring download checked
against cuda_keyring_sha256 (refused without it). NVIDIA's repository is not reachable here: the checks run on this
machine before anything is downloaded (conftest.run_play, connection local)."""
from __future__ import annotations

import json

import pytest

from conftest import batch_key, run_play, run_preflight_batch

SHA = "0123456789abcdef" * 4

PREFLIGHT = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.cuda
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: "PASSED {{ _cuda_repo.keyring_url | default('') }}"
"""
REPO = {"cuda_repo_distro": "debian12", "cuda_repo_arch": "x86_64"}


REFUSED = [
    ("cuda_repo_base_url", "http://developer.example/compute/cuda/repos"),
    ("cuda_repo_base_url", "ftp://developer.example/compute/cuda/repos"),
    ("cuda_repo_mirror", "http://mirror.example/cuda/repos"),
    ("cuda_repo_mirror", "mirror.example/cuda/repos"),
    ("cuda_pip_extra_args", "--index-url http://pypi.mirror.example/simple"),
    ("cuda_pip_extra_args", "--extra-index-url=http://pypi.mirror.example/simple"),
    ("cuda_keyring_sha256", "abc"),
    ("cuda_keyring_sha256", "md5:" + "0" * 32),
]
PASSING = [
    {},
    {"cuda_repo_mirror": "https://mirror.example/cuda/repos"},
    {"cuda_repo_mirror": "file:///srv/cuda/repos"},
    {"cuda_pip_extra_args": "--index-url https://pypi.mirror.example/simple"},
    {"cuda_keyring_sha256": SHA.upper()},
]


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """Every preflight case of this file in one ansible-playbook (conftest.run_play_batch)."""
    return run_preflight_batch(tmp_path_factory.mktemp("cuda-preflight"), PREFLIGHT, REPO, REFUSED, PASSING)


@pytest.mark.parametrize("name,value", REFUSED)
def test_plain_sources_and_a_malformed_checksum_are_refused_naming_the_variable(preflight, name, value):
    rc, out = preflight[batch_key({name: value})]
    assert rc != 0
    assert "refused: %s=%s" % (name, json.dumps(value)) in out
    assert "PASSED" not in out


@pytest.mark.parametrize("variables", PASSING)
def test_https_file_and_a_well_formed_checksum_pass(preflight, variables):
    rc, out = preflight[batch_key(variables)]
    assert rc == 0, out
    assert "PASSED " in out and "cuda-keyring_1.1-1_all.deb" in out


INSTALL = """
- hosts: localhost
  gather_facts: false
  tasks:
    - gpuserve.sglang.cuda_toolkit:
        release: "13.0"
        method: nvidia_repo
        prefix: /nonexistent/cuda-13.0
        symlink: ""
        phases: [install]
        environment: {manage: false}
        repo: {mirror: https://mirror.example/cuda/repos, distro: debian12, arch: x86_64}
"""


def test_nvidia_repo_without_the_keyring_checksum_is_refused_before_anything_changes(tmp_path):
    """The module's preflight refuses the install phase without cuda_keyring_sha256 (the preflight alone, as the
    PASSING cases above, renders the repository without it); the download itself is checked against the checksum
    and a mismatch installs nothing (tests/unit/plugins/module_utils/test_cuda_toolkit.py)."""
    rc, out = run_play(tmp_path, INSTALL)
    assert rc != 0
    text = " ".join(out.split())
    assert "cuda_install_method=nvidia_repo needs cuda_keyring_sha256" in text
    assert "https://mirror.example/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb" in text
    assert "Nothing was changed on the host." in text
    assert "changed=0" in out
