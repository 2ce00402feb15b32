# SPDX-License-Identifier: GPL-3.0-or-later
"""install role: the host directory of the patch files is named once (vars/main.yml) and every task that copies,
applies or records a patch uses that name."""
from __future__ import annotations

import glob
import os

import yaml

from conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "install")


def test_patch_dir_named_once():
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        assert yaml.safe_load(handle)["_install_patch_dir"] == "{{ sglang_venv | dirname }}/patches"
    uses = 0
    for path in glob.glob(os.path.join(ROLE, "tasks", "*.yml")):
        with open(path) as handle:
            text = handle.read()
        assert "dirname }}/patches" not in text, path
        uses += text.count("{{ _install_patch_dir }}")
    assert uses == 6  # create the directory, copy, reverse dry-run, forward dry-run (-F0), apply, record
