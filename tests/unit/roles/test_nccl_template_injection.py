# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 14: nccl_tuning's files take no code or lines from its inputs.

nccl_tuning_env_file was written into a comment of sitecustomize.py: a newline in it put Python code into every
start of the interpreter (root's too). It is now written as JSON (one line whatever it holds), and the preflight
refuses control characters in the paths and a trailing newline in names and values (full matches)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import jinja2
import yaml

from conftest import ROOT

ROLE = os.path.join(ROOT, "roles", "nccl_tuning")
EVIL = "/etc/sglang/nccl.env\nimport os; open(os.environ['MARKER'], 'w').write('pwned')\n#"


def _render(name, **extra):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             keep_trailing_newline=True, trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    env.filters["comment"] = lambda s: "# " + s
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    values = {"nccl_env": defaults["nccl_env"], "_nccl_tuning_env": defaults["nccl_env"], "nccl_env_policy": "setdefault", "ansible_managed": "Ansible managed",
              "nccl_tuning_env_file": EVIL, "nccl_tuning_site_dir": EVIL,
              "_nccl_tuning_sc": {"file_created": False, "newline_added": False}}
    values.update(extra)
    return env.get_template(name).render(**values)


def test_env_file_path_cannot_inject_python(tmp_path):
    marker = tmp_path / "marker"
    block = _render("sitecustomize_block.py.j2")
    subprocess.run([sys.executable, "-S", "-c", block], env={"MARKER": str(marker), "PATH": "/usr/bin:/bin"},
                   check=True)
    assert not marker.exists()


def test_env_file_comments_stay_comments():
    text = _render("nccl.env.j2")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert all(line.startswith("NCCL_") for line in lines), lines


def test_preflight_uses_full_matches_and_refuses_control_characters():
    with open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8") as handle:
        text = handle.read()
    assert "*$')" not in text and "+$')" not in text  # re.match with $ accepts a trailing newline
    # both paths through nccl_path_problems: absolute, no control character (tests/unit/plugins/filter)
    assert "_paths | gpuserve.sglang.nccl_path_problems" in text
    for name, path in (("nccl_python", "_nccl_tuning_python"), ("nccl_tuning_env_file", "nccl_tuning_env_file")):
        assert '%s: "{{ %s }}"' % (name, path) in text
    assert "nccl_env | gpuserve.sglang.nccl_env_problems" in text   # names and values: tests/unit/plugins/filter
