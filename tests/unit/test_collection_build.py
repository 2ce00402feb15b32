# SPDX-License-Identifier: GPL-3.0-or-later
"""The built collection tarball installs, and its modules, roles and playbooks are found by FQCN."""
import glob
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")


def _bin(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip("%s is not in .venv (make venv)" % name)
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([_bin("ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT],
                   check=True, capture_output=True, text=True)
    tarball = glob.glob(str(dist / "gpuserve-sglang-*.tar.gz"))[0]
    target = tmp_path_factory.mktemp("collections")
    # Only the installed copy may be found: no ansible.cfg, no collections path but the target.
    empty_cfg = tmp_path_factory.mktemp("cfg") / "ansible.cfg"
    empty_cfg.write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(target), ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_NOCOLOR="1")
    subprocess.run([_bin("ansible-galaxy"), "collection", "install", "--force", "-p", str(target), tarball],
                   check=True, capture_output=True, text=True, env=env, cwd=str(target))
    return target, env


@pytest.mark.parametrize("module", ["sglang_service", "nvidia_gpu_info", "sglang_memory_plan"])
def test_ansible_doc_finds_each_module(installed, module):
    target, env = installed
    proc = subprocess.run([_bin("ansible-doc"), "gpuserve.sglang." + module], capture_output=True, text=True,
                          env=env, cwd=str(target), check=False)
    assert proc.returncode == 0, proc.stderr
    assert os.path.join("ansible_collections", "gpuserve", "sglang", "plugins", "modules") in proc.stdout


@pytest.mark.parametrize("role", ["preflight", "cuda", "install", "nccl_tuning", "server", "_common"])
def test_ansible_doc_finds_each_role(installed, role):
    target, env = installed
    proc = subprocess.run([_bin("ansible-doc"), "-t", "role", "gpuserve.sglang." + role], capture_output=True,
                          text=True, env=env, cwd=str(target), check=False)
    assert proc.returncode == 0, proc.stderr
    where = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang")
    assert "ROLE: *gpuserve.sglang.%s* (%s)" % (role, where) in proc.stdout


def test_playbooks_by_fqcn_parse(installed):
    target, env = installed
    for playbook in ("deploy", "restart", "verify", "plan"):
        proc = subprocess.run([_bin("ansible-playbook"), "--syntax-check", "-i", "localhost,",
                               "gpuserve.sglang." + playbook], capture_output=True, text=True, env=env,
                              cwd=str(target), check=False)
        assert proc.returncode == 0, playbook + ": " + proc.stdout + proc.stderr


def test_tarball_leaves_out_tests_and_caches(installed):
    target = installed[0]
    root = os.path.join(str(target), "ansible_collections", "gpuserve", "sglang")
    present = set(os.listdir(root))
    assert {"roles", "plugins", "playbooks", "meta", "docs", "MANIFEST.json"} <= present
    assert not present & {"molecule", "tests", ".venv", ".cache", "benchmarks", "scripts"}
