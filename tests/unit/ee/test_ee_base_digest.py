# SPDX-License-Identifier: GPL-3.0-or-later
"""The execution environment's base image is pinned by digest (issue 14, supply chain), and the Containerfile
ansible-builder writes starts FROM that digest."""
import os
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EE = os.path.join(ROOT, "execution-environment.yml")
DIGEST = re.compile(r"^[a-z0-9.-]+(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")


def _base():
    with open(EE, encoding="utf-8") as handle:
        return yaml.safe_load(handle)["images"]["base_image"]["name"]


def test_base_image_is_pinned_by_digest_not_by_tag():
    name = _base()
    assert DIGEST.match(name), name
    assert ":latest" not in name


def test_the_file_says_how_to_repin():
    with open(EE, encoding="utf-8") as handle:
        text = handle.read()
    assert "skopeo inspect --format '{{.Digest}}' docker://registry.access.redhat.com/ubi9/python-311" in text


def test_builder_writes_from_the_digest(tmp_path):
    builder = os.path.join(ROOT, ".venv", "bin", "ansible-builder")
    if not os.path.exists(builder):
        builder = shutil.which("ansible-builder")
        if not builder:
            pytest.skip("ansible-builder is not installed (make venv installs it)")
    os.makedirs(os.path.join(ROOT, ".cache", "dist"), exist_ok=True)
    proc = subprocess.run([builder, "create", "-f", EE, "-c", str(tmp_path), "--output-filename", "Containerfile"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "Containerfile").read_text()
    assert "ARG EE_BASE_IMAGE=\"%s\"" % _base() in text or "ARG EE_BASE_IMAGE=%s" % _base() in text, text[:800]
