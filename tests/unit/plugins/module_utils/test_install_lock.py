# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_install.py, the hash lock: the install refuses, before any change, a host whose base Python the release's hash lock has no wheel set
for (issue 42: Debian 13's Python 3.13 and SGLang 0.5.23's lock, CPython 3.11 and 3.12 only), naming the ways."""
import os
import re

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _install

sglang_lock_package_re = _install.lock_package_re
sglang_lock_python_problems = _install.lock_python_problems
sglang_lock_pythons = _install.lock_pythons
sglang_lock_requirements = _install.lock_requirements

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
    with pytest.raises(ValueError):
        sglang_lock_python_problems(_lock("sglang-0.5.23.txt"), python)


def test_the_pythons_read_once_serve_as_the_input_too():
    pythons = sglang_lock_pythons(_lock("sglang-0.5.23.txt"))
    assert sglang_lock_python_problems(pythons, "3.12") == []
    assert sglang_lock_python_problems(pythons, "3.13")


def test_lock_requirements_join_continued_lines_and_drop_comments_and_blanks():
    text = ("# header\n\nsglang==0.5.9 \\\n    --hash=sha256:%s  # pinned\naiohttp==3.9.0 --hash=sha256:%s\n"
            "   \n#only a comment\nx==1#not a comment\n" % ("a" * 64, "b" * 64))
    # the continuation's indent stays (pip reads the blanks as one)
    assert sglang_lock_requirements(text) == ["sglang==0.5.9      --hash=sha256:" + "a" * 64,
                                              "aiohttp==3.9.0 --hash=sha256:" + "b" * 64, "x==1#not a comment"]
    assert sglang_lock_requirements("") == []
    with pytest.raises(ValueError, match="must be a string"):
        sglang_lock_requirements(None)


def test_every_shipped_lock_has_its_own_package_line():
    for name in sorted(os.listdir(LOCKS)):
        version = name[len("sglang-"):-len(".txt")]
        lines = [line for line in sglang_lock_requirements(_lock(name))
                 if re.match(sglang_lock_package_re("sglang", version), line)]
        assert len(lines) == 1 and lines[0].startswith("sglang==%s " % version), name


@pytest.mark.parametrize("line, matches", [
    ("sglang==0.5.9 --hash=sha256:00", True),
    ("SGLang[all]==0.5.9; python_version >= '3.10' --hash=sha256:00", True),
    ("sglang==0.5.9", True),
    ("sglang==0.5.90 --hash=sha256:00", False),
    ("sglang==0x5y9 --hash=sha256:00", False),
    ("sglang-router==0.5.9 --hash=sha256:00", False),
])
def test_lock_package_re_matches_the_package_and_version_only(line, matches):
    assert bool(re.match(sglang_lock_package_re("sglang", "0.5.9"), line)) is matches


def test_lock_package_re_takes_dash_underscore_and_dot_alike():
    pattern = sglang_lock_package_re("flash_attn.x", "2.0")
    assert all(re.match(pattern, name + "==2.0 ") for name in ("flash-attn-x", "Flash_Attn_X", "flash.attn-x"))
