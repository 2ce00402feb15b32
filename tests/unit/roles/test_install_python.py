# SPDX-License-Identifier: GPL-3.0-or-later
"""install role (issue 42): a host whose base Python the release's hash lock has no wheel set for (Debian 13's
Python 3.13 and SGLang 0.5.23's lock: CPython 3.11 and 3.12) is refused in the role's preflight, before anything is
installed, with the ways named. The role's checks run on this machine (conftest.run_play_batch, connection local);
the base interpreter is a stand-in that answers with the version of the case."""
from __future__ import annotations

import pytest

from conftest import run_play_batch

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.install
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: "PASSED {{ sglang_venv_dir }}"
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install-python")
    cases = {}
    for version in ("3.11.2", "3.12.3", "3.13.5"):
        fake = tmp / ("python" + version)
        fake.write_text("#!/bin/sh\necho %s\n" % version)
        fake.chmod(0o755)
        cases[version] = {"sglang_version": "0.5.23", "sglang_venv_base_python": str(fake)}
        cases[version + " without deps"] = dict(cases[version], sglang_install_deps=False)
    cases["0.5.9 on 3.13"] = dict(cases["3.13.5"], sglang_version="0.5.9")
    return run_play_batch(tmp, PLAY, cases)


@pytest.mark.parametrize("case", ["3.11.2", "3.12.3", "3.11.2 without deps", "3.13.5 without deps"])
def test_a_python_the_lock_has_wheels_for_passes(results, case):
    rc, out = results[case]
    assert rc == 0 and "PASSED" in out, out[-3000:]


@pytest.mark.parametrize("case", ["3.13.5", "0.5.9 on 3.13"])
def test_debian_13s_python_is_refused_before_any_change_with_the_ways_named(results, case):
    rc, out = results[case]
    assert rc == 1 and "PASSED" not in out
    assert "is Python 3.13" in out and "has wheels for CPython" in out and "Nothing was changed" in out
    assert "sglang_venv_base_python" in out and "sglang_wheel_dir" in out and "cp313" in out
    assert "changed=0" in out
