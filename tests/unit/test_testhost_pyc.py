# SPDX-License-Identifier: GPL-3.0-or-later
"""The test hosts' bytecode cache for AnsiballZ payloads (tests/testhost/gpuserve_test_pyc.py, a test fixture
installed by scripts/test-images.sh): the same code runs, cached by the sha256 of its source, never stale."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
import zipimport

import pytest

from conftest import MODULE_PYTHON, ROOT

FIXTURE_DIR = os.path.join(ROOT, "tests", "testhost")
sys.path.insert(0, FIXTURE_DIR)
import gpuserve_test_pyc  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setattr(gpuserve_test_pyc, "CACHE_DIR", str(directory))
    return directory


def _payload(tmp_path, name, source):
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mod_under_test.py", source)
    return str(path)


def test_zipimport_compile_step_is_wrapped_once():
    assert zipimport._compile_source is gpuserve_test_pyc.compile_source  # pylint: disable=protected-access
    gpuserve_test_pyc.install()
    assert gpuserve_test_pyc._plain_compile is not gpuserve_test_pyc.compile_source  # pylint: disable=protected-access


def test_second_compile_of_a_payload_comes_from_the_cache_with_this_runs_file_name(cache, monkeypatch):
    source = b"def answer():\n    return 42\n"
    first = gpuserve_test_pyc.compile_source("/tmp/a/ansible_x_payload.zip/m.py", source)
    assert len(os.listdir(cache)) == 1

    def no_compile(*args):
        raise AssertionError("compiled again: %r" % (args,))
    monkeypatch.setattr(gpuserve_test_pyc, "_plain_compile", no_compile)
    second = gpuserve_test_pyc.compile_source("/tmp/b/ansible_x_payload.zip/m.py", source)
    assert second.co_code == first.co_code
    namespace = {}
    exec(second, namespace)  # pylint: disable=exec-used
    assert namespace["answer"]() == 42
    # the file name of this run, in the module's code and in the nested function's code
    assert second.co_filename == "/tmp/b/ansible_x_payload.zip/m.py"
    assert namespace["answer"].__code__.co_filename == "/tmp/b/ansible_x_payload.zip/m.py"


def test_changed_source_is_compiled_again_never_stale(cache):
    one = gpuserve_test_pyc.compile_source("/t/ansible_x_payload.zip/m.py", b"VALUE = 1\n")
    two = gpuserve_test_pyc.compile_source("/t/ansible_x_payload.zip/m.py", b"VALUE = 2\n")
    results = []
    for code in (one, two):
        namespace = {}
        exec(code, namespace)  # pylint: disable=exec-used
        results.append(namespace["VALUE"])
    assert results == [1, 2]
    assert len(os.listdir(cache)) == 2


def test_other_zips_and_a_broken_cache_take_the_plain_compile(cache):
    gpuserve_test_pyc.compile_source("/t/other.zip/m.py", b"X = 1\n")
    assert not cache.exists()
    source = b"X = 3\n"
    gpuserve_test_pyc.compile_source("/t/ansible_x_payload.zip/m.py", source)
    entry = cache / os.listdir(cache)[0]
    entry.write_bytes(b"not marshal data")
    namespace = {}
    exec(gpuserve_test_pyc.compile_source("/t/ansible_x_payload.zip/m.py", source), namespace)  # pylint: disable=exec-used
    assert namespace["X"] == 3
    assert entry.read_bytes() != b"not marshal data"   # written again


def test_an_interpreter_with_the_hook_imports_a_payload_zip_through_the_cache(tmp_path):
    """As on a test host: the import of a module from a payload zip in a fresh interpreter fills the cache; a
    second interpreter runs the same code from it."""
    cache_root = tmp_path / "pyc"
    payload = _payload(tmp_path, "ansible_probe_payload.zip", "import sys\nprint('ran', __file__)\n")
    env = dict(os.environ, GPUSERVE_TEST_PYC_DIR=str(cache_root), PYTHONPATH=FIXTURE_DIR)
    code = "import gpuserve_test_pyc, sys; sys.path.insert(0, %r); import mod_under_test" % payload
    outputs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                              timeout=600).stdout for dummy in range(2)]
    assert outputs[0] == outputs[1] == "ran %s\n" % os.path.join(payload, "mod_under_test.py")
    cached = [f for d, dummy, files in os.walk(cache_root) for f in files]
    assert len(cached) == 1


def test_the_unit_tests_plays_run_their_modules_with_the_cache():
    """conftest.MODULE_PYTHON (the plays' ansible_python_interpreter) is a venv of this interpreter that loads the
    same fixture as the molecule hosts, and runs the standard library the modules need."""
    assert MODULE_PYTHON != sys.executable
    out = subprocess.run([MODULE_PYTHON, "-c", "import zipimport, sys, json, hashlib; "
                          "print(zipimport._compile_source.__module__, sys.version_info[:2] == %r)"
                          % (tuple(sys.version_info[:2]),)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    assert out == "gpuserve_test_pyc True\n"


def test_another_interpreters_tests_leave_this_ones_module_python_alone():
    """The controller matrix runs the plugin tests on Python 3.11 and the unit step on 3.12, both importing this
    conftest: each gets its own venv, and neither remakes the other's (one shared .cache/module-python was remade
    by a 3.11 run under a 3.12 one, which then ran its plays' modules on 3.11)."""
    other = None
    for want in ("3.11", "3.12", "3.13"):
        if want != "%d.%d" % sys.version_info[:2]:
            proc = subprocess.run([os.path.join(ROOT, "scripts", "find-python.sh"), want], capture_output=True,
                                  text=True, check=False)
            if proc.returncode == 0:
                other = proc.stdout.strip()
                break
    if other is None:
        pytest.skip("no second Python here (3.11, 3.12 or 3.13)")
    theirs = subprocess.run([other, "-c", "import sys; sys.path.insert(0, %r); import conftest; "
                             "print(conftest.MODULE_PYTHON)" % os.path.join(ROOT, "tests", "unit")],
                            capture_output=True, text=True, check=True, timeout=600).stdout.strip()
    assert theirs != MODULE_PYTHON
    out = subprocess.run([MODULE_PYTHON, "-c", "import sys; print(sys.version_info[:2] == %r)"
                          % (tuple(sys.version_info[:2]),)], capture_output=True, text=True, check=True,
                         timeout=600).stdout
    assert out == "True\n"
