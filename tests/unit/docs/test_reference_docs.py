# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/reference.md is generated from argument_specs and module docs; it must be current, and every role's
defaults must be documented in its argument_specs (and the other way round)."""
import glob
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = sorted(p.split(os.sep)[-3] for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def test_reference_is_current():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen-reference.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_argument_specs(role):
    spec = yaml.safe_load(open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")))
    options = set((spec["argument_specs"]["main"].get("options") or {}).keys())
    defaults_path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    defaults = set((yaml.safe_load(open(defaults_path)) or {}).keys()) if os.path.exists(defaults_path) else set()
    assert defaults - options == set(), "defaults not in argument_specs"
    assert {o for o in options if not spec["argument_specs"]["main"]["options"][o].get("required")} - defaults == set(), \
        "optional argument_specs options without a default in defaults/main.yml"
