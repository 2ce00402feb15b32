# SPDX-License-Identifier: GPL-3.0-or-later
"""One licence for the whole collection: GPL-3.0-or-later (galaxy.yml, role metadata, SPDX headers, LICENSES/)."""
from __future__ import annotations

import os

import yaml

from conftest import ROOT

SPDX = "# SPDX-License-Identifier: GPL-3.0-or-later"
SKIP_DIRS = {".git", ".venv", ".cache", ".ansible", ".whl", "__pycache__", ".pytest_cache", "out", ".tox"}


def _python_files():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(top, name)


def test_every_python_file_has_the_spdx_line():
    missing = []
    for path in _python_files():
        with open(path, encoding="utf-8") as handle:
            head = [handle.readline().rstrip("\n") for dummy in range(4)]
        if SPDX not in head:
            missing.append(os.path.relpath(path, ROOT))
    assert not missing, "no '%s' in the first lines of: %s" % (SPDX, ", ".join(sorted(missing)))


def test_galaxy_and_roles_declare_the_same_licence():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as handle:
        galaxy = yaml.safe_load(handle)
    assert galaxy["license"] == ["GPL-3.0-or-later"] and "license_file" not in galaxy
    for role in os.listdir(os.path.join(ROOT, "roles")):
        meta = os.path.join(ROOT, "roles", role, "meta", "main.yml")
        if os.path.exists(meta):
            with open(meta, encoding="utf-8") as handle:
                assert yaml.safe_load(handle)["galaxy_info"]["license"] == "GPL-3.0-or-later", role


def test_licence_text_is_shipped():
    with open(os.path.join(ROOT, "LICENSES", "GPL-3.0-or-later.txt"), encoding="utf-8") as handle:
        text = handle.read()
    assert text.lstrip().startswith("GNU GENERAL PUBLIC LICENSE") and "Version 3, 29 June 2007" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a notice
