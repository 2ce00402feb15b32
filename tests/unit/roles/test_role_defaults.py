# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role (roles/*/, internal ones included): defaults/main.yml and the `main` entry point of
meta/argument_specs.yml name the same variables with the same defaults, a default is one of its choices and of
its type. A templated default ("{{ ... }}") is documented without a default, or with the same text."""
from __future__ import annotations

import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", d)))
TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "list": list, "dict": dict, "path": str,
         "raw": object}


def _load(role, *parts):
    path = os.path.join(ROOT, "roles", role, *parts)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_every_role_is_checked():
    assert {"cuda", "install", "nccl_tuning", "preflight", "server"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_equal_the_main_entry_points_options(role):
    specs = _load(role, "meta", "argument_specs.yml")
    assert specs is not None, "%s has no meta/argument_specs.yml" % role
    options = (specs["argument_specs"].get("main") or {}).get("options") or {}
    defaults = _load(role, "defaults", "main.yml") or {}
    optional = {name for name, spec in options.items() if not spec.get("required")}
    assert sorted(defaults) == sorted(optional), "%s: defaults/main.yml and argument_specs main differ" % role
    for name, value in defaults.items():
        spec = options[name]
        if isinstance(value, str) and "{{" in value or "{{" in str(value):
            assert "default" not in spec or spec["default"] == value, "%s: %s" % (role, name)
            continue
        assert spec.get("default") == value, "%s: %s: %r != %r" % (role, name, spec.get("default"), value)
        if value is not None:
            assert isinstance(value, TYPES[spec.get("type", "str")]), "%s: %s is not a %s" % (role, name, spec.get("type"))
            if spec.get("type", "str") == "int":
                assert not isinstance(value, bool), "%s: %s" % (role, name)
        if "choices" in spec:
            assert value in spec["choices"], "%s: %s" % (role, name)
