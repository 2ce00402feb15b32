# SPDX-License-Identifier: GPL-3.0-or-later
"""The install role refuses, before any change, a host whose base Python the release's hash lock has no wheel set
for (issue 42: Debian 13's Python 3.13 and SGLang 0.5.23's lock, CPython 3.11 and 3.12 only), naming the ways."""
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.sglang.plugins.filter.sglang_lock import (sglang_lock_python_problems,
                                                                            sglang_lock_pythons)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
LOCKS = os.path.join(ROOT, "roles", "install", "files", "locks")


def _lock(name):
    with open(os.path.join(LOCKS, name)) as handle:
        return handle.read()


def test_the_shipped_locks_name_their_pythons():
    assert sglang_lock_pythons(_lock("sglang-0.5.23.txt")) == ["3.11", "3.12"]
    assert sglang_lock_pythons(_lock("sglang-0.5.9.txt")) == ["3.10", "3.11", "3.12"]
    assert sglang_lock_pythons("torch==2.9.1 --hash=sha256:" + "0" * 64 + "\n") == []


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.12.3"])
def test_a_python_the_lock_has_wheels_for_is_not_refused(python):
    assert sglang_lock_python_problems(_lock("sglang-0.5.23.txt"), python) == []


def test_debian_13s_python_is_refused_for_sglang_0_5_23_with_the_ways_named():
    problems = sglang_lock_python_problems(_lock("sglang-0.5.23.txt"), "3.13.5", lock="sglang-0.5.23.txt",
                                           package="sglang", version="0.5.23", base_python="/usr/bin/python3")
    assert len(problems) == 1
    text = problems[0]
    assert "/usr/bin/python3 on the host is Python 3.13" in text
    assert "sglang-0.5.23.txt of sglang==0.5.23 has wheels for CPython 3.11, 3.12 only" in text
    assert "Nothing was changed" in text and "outlines_core" in text
    # the ways: another interpreter (sglang_venv_base_python), or the cp313 wheels built into the wheelhouse
    assert "sglang_venv_base_python" in text and "uv python install 3.12" in text
    assert "cp313" in text and "sglang_wheel_dir" in text and "sglang_pip_lock" in text and "cargo" in text


def test_0_5_9_on_debian_13_is_refused_too_and_an_operators_lock_without_a_header_is_left_to_pip():
    assert sglang_lock_python_problems(_lock("sglang-0.5.9.txt"), "3.13")
    assert sglang_lock_python_problems("sglang==0.5.23 --hash=sha256:" + "0" * 64 + "\n", "3.13") == []


@pytest.mark.parametrize("python", ["", "three", "3", None])
def test_a_python_version_that_is_not_x_y_is_an_error(python):
    with pytest.raises(AnsibleFilterError):
        sglang_lock_python_problems(_lock("sglang-0.5.23.txt"), python)


def test_the_pythons_read_once_serve_as_the_input_too():
    pythons = sglang_lock_pythons(_lock("sglang-0.5.23.txt"))
    assert sglang_lock_python_problems(pythons, "3.12") == []
    assert sglang_lock_python_problems(pythons, "3.13")
