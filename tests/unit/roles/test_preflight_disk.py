# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight role's free-disk check on this machine (connection local, read-only), from ansible_facts.mounts:
the filesystem of a log directory that does not exist yet is its nearest mount point; too little room is refused
with the numbers; enough passes."""
from __future__ import annotations

import json
import os
import shutil

from conftest import run_play

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Paths and disk only
      ansible.builtin.include_role:
        name: gpuserve.sglang.preflight
        tasks_from: paths.yml
"""


def run_paths(tmp_path, min_free_gb, log_dir):
    return run_play(tmp_path, PLAY, [json.dumps({"sglang_preflight_check_paths": False, "sglang_preflight_log_dir": log_dir,
                                                 "sglang_preflight_min_free_disk_gb": min_free_gb})])


def test_too_little_disk_is_refused_with_the_numbers(tmp_path):
    log_dir = str(tmp_path / "not" / "yet" / "logs")
    free_gib = shutil.disk_usage(str(tmp_path)).free / 2 ** 30
    rc, out = run_paths(tmp_path, 1000000, log_dir)
    assert rc != 0, out[-2000:]
    assert "GiB free on" in out and "(the filesystem of the log directory %s), 1000000 GiB needed" % log_dir in out
    shown = float(out.split("Only ", 1)[1].split(" GiB", 1)[0])
    assert abs(shown - free_gib) < 1.0
    assert not os.path.exists(os.path.dirname(os.path.dirname(log_dir)))


def test_enough_disk_passes(tmp_path):
    rc, out = run_paths(tmp_path, 0.001, str(tmp_path / "logs"))
    assert rc == 0, out[-2000:]
