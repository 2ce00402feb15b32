# SPDX-License-Identifier: GPL-3.0-or-later
"""Every module takes its attributes block from the doc fragment plugins/doc_fragments/_attributes.py, and
ansible-doc renders each attribute complete (support, and platforms for platform)."""
from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import COLLECTIONS, ROOT

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


def _documentation(name):
    with open(os.path.join(ROOT, "plugins", "modules", name + ".py")) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("no DOCUMENTATION in " + name)


@pytest.mark.parametrize("name", MODULES)
def test_module_extends_the_attributes_fragment(name):
    doc = _documentation(name)
    assert "gpuserve.sglang._attributes" in doc.get("extends_documentation_fragment", [])
    # what the fragment says is not said again: a module only adds details
    for attribute in (doc.get("attributes") or {}).values():
        assert "description" not in attribute and "platforms" not in attribute


@pytest.fixture(scope="module")
def rendered():
    """ansible-doc's JSON of every module, from one call (each call loads the whole plugin set)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json"]
                          + ["gpuserve.sglang." + name for name in MODULES],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders_complete_attributes(rendered, name):
    attributes = rendered["gpuserve.sglang." + name]["doc"]["attributes"]
    # "action" exactly where the module has an action plugin of its name (the fragment's action_plugin)
    has_action = os.path.isfile(os.path.join(ROOT, "plugins", "action", name + ".py"))
    assert set(attributes) == {"check_mode", "diff_mode", "platform"} | ({"action"} if has_action else set())
    for key, attribute in attributes.items():
        assert attribute["support"] in ("full", "partial", "none"), key
        assert attribute["description"] and attribute.get("details"), key
    assert attributes["platform"]["platforms"] == "posix"
