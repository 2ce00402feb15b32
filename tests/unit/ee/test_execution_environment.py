# SPDX-License-Identifier: GPL-3.0-or-later
"""The execution environment definition is valid for ansible-builder v3 and installs this collection."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")


def _tool(name):
    path = os.path.join(VENV_BIN, name)
    if os.path.exists(path):
        return path
    found = shutil.which(name)
    if not found:
        pytest.skip("%s is not installed (make venv installs it)" % name)
    return found


@pytest.fixture(scope="module")
def built_context(tmp_path_factory):
    dist = os.path.join(ROOT, ".cache", "dist")
    os.makedirs(dist, exist_ok=True)
    subprocess.run([_tool("ansible-galaxy"), "collection", "build", "--force", "--output-path", dist, ROOT],
                   check=True, cwd=ROOT, capture_output=True, text=True)
    context = str(tmp_path_factory.mktemp("ee-context"))
    proc = subprocess.run([_tool("ansible-builder"), "create", "-f", "execution-environment.yml", "-c", context,
                           "--output-filename", "Containerfile"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return context


def test_builder_writes_a_containerfile_that_installs_the_collection(built_context):
    containerfile = os.path.join(built_context, "Containerfile")
    text = open(containerfile).read()
    assert "ansible-galaxy collection install /tmp/gpuserve-dist/gpuserve-sglang-" in text
    assert "ansible-core==2.19.14" in text


def test_context_carries_the_built_tarball_and_python_needs(built_context):
    tarballs = glob.glob(os.path.join(built_context, "_build", "dist", "gpuserve-sglang-*.tar.gz"))
    assert tarballs, os.listdir(os.path.join(built_context, "_build"))
    reqs = open(os.path.join(built_context, "_build", "requirements.txt")).read()
    assert "jinja2" in reqs


def test_collection_tarball_leaves_out_tests_and_caches():
    dist = os.path.join(ROOT, ".cache", "dist")
    tarball = sorted(glob.glob(os.path.join(dist, "gpuserve-sglang-*.tar.gz")))[-1]
    names = subprocess.run(["tar", "-tzf", tarball], capture_output=True, text=True, check=True).stdout.split()
    assert "galaxy.yml" not in names and "MANIFEST.json" in names
    assert not [n for n in names if n.startswith(("molecule/", "tests/", ".venv/", ".cache/", "benchmarks/"))]
    assert "roles/install/tasks/main.yml" in names
