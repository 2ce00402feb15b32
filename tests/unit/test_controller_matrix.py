# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller matrix (scripts/controller-matrix.sh) and make test's unit step run the plugin unit tests once per
controller: the matrix skips them only on the controller that IS the development one (same ansible-core, same
Python), and only when make test says the unit step runs them (issue 20: they ran twice on 2.21.5)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import ROOT

MATRIX = os.path.join(ROOT, "scripts", "controller-matrix.sh")
TEST_SH = os.path.join(ROOT, "scripts", "test.sh")


def _dev_controller(root):
    script = open(MATRIX).read()
    func = re.search(r"^dev_controller\(\) \{.*?^\}", script, re.S | re.M).group(0)
    return subprocess.run(["bash", "-c", "%s\nROOT=%s\ndev_controller" % (func, root)],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_development_controller_is_read_from_the_venv(tmp_path):
    want = subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                           "import sys, ansible.release as r; print(r.__version__, '%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert _dev_controller(ROOT) == want
    # a checkout without a venv has no development controller: the matrix then runs every controller's tests
    assert _dev_controller(str(tmp_path)) == ""


def test_the_skip_is_asked_for_only_by_make_test_whose_unit_step_runs_the_plugin_tests():
    test_sh = open(TEST_SH).read()
    assert "MATRIX_SKIP_DEV_UNIT=1 scripts/controller-matrix.sh" in test_sh
    unit = re.search(r"step unit +python -m pytest (\S+)(.*)", test_sh)
    assert unit.group(1) == "tests/unit" and "--ignore" not in unit.group(2) and "plugins" not in unit.group(2)
    matrix = open(MATRIX).read()
    assert '"${MATRIX_SKIP_DEV_UNIT:-0}" == 1 && "$(dev_controller)" == "$core $pyv"' in matrix


def test_sanity_runs_ansible_test_with_a_temporary_directory_of_its_own(tmp_path):
    """ansible-test runs its pip bootstrap as a script in the temporary directory, first on sys.path there: a stray
    attr.py in the shared /tmp broke pip's imports in every venv it made (seen on this machine). scripts/sanity.sh
    gives ansible-test a temporary directory of the run's own; a module left in /tmp is not importable there."""
    import sys
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexec %s \"$@\"\n" % sys.executable)   # ansible_test: this venv's
    (venv / "bin" / "python").chmod(0o755)
    out = tmp_path / "seen"
    (venv / "bin" / "ansible-test").write_text(
        "#!/bin/sh\n"
        "cd \"$TMPDIR\" && printf 'import tempfile, sys\\nprint(tempfile.gettempdir())\\n' > probe.py\n"
        "python probe.py > %s\n" % out)
    (venv / "bin" / "ansible-test").chmod(0o755)
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "sanity.sh")], env=dict(os.environ, SANITY_VENV=str(venv)),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = out.read_text().strip()
    assert seen.startswith(os.path.join(ROOT, ".cache", "sanity.")) and seen.endswith("/tmp"), seen
    assert not os.path.exists(seen)   # removed with the run's copy


def _controllers():
    rows = []
    with open(os.path.join(ROOT, "tests", "controllers.txt")) as handle:
        for line in handle:
            if line.strip() and not line.startswith("#"):
                rows.append(line.split())
    return rows


def test_the_declared_range_is_the_tested_range_with_a_lower_bound_only():
    """meta/runtime.yml's requires_ansible is '>=X.Y.0', X.Y the oldest controller of tests/controllers.txt, with no
    upper bound (issue 42: '<2.22' made ansible-galaxy 2.22.0rc1 refuse a collection that works on it); the newest
    controller is PyPI's newest, pre-releases included ('latest', resolved by scripts/ansible-core-version.py)."""
    import yaml
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        declared = yaml.safe_load(handle)["requires_ansible"]
    clauses = [c.strip() for c in declared.split(",")]
    assert len(clauses) == 1 and re.match(r"^>=\d+\.\d+\.0$", clauses[0]), declared
    lower = tuple(int(p) for p in clauses[0][2:].split(".")[:2])
    rows = _controllers()
    cores = [core for core, _python in rows]
    assert cores[-1] == "latest", cores
    pinned = [tuple(int(p) for p in core.split(".")[:2]) for core in cores if core != "latest"]
    assert pinned and min(pinned) == lower == pinned[0], (declared, cores)
    # the newest controller runs on the newest Python its release line needs (2.22 needs 3.13)
    assert rows[-1][1] == "3.13"


def test_each_pinned_controller_has_its_sanity_ignore_file():
    for core, _python in _controllers():
        if core != "latest":
            series = ".".join(core.split(".")[:2])
            assert os.path.exists(os.path.join(ROOT, "tests", "sanity", "ignore-%s.txt" % series)), series


def _acv():
    from conftest import load_file
    return load_file("ansible_core_version", os.path.join(ROOT, "scripts", "ansible-core-version.py"))


RELEASES = {
    "2.19.13": [{"requires_python": ">=3.11"}], "2.19.14": [{"requires_python": ">=3.11"}],
    "2.19.15rc1": [{"requires_python": ">=3.11"}], "2.21.5": [{"requires_python": ">=3.12"}],
    "2.22.0b2": [{"requires_python": ">=3.13"}], "2.22.0rc1": [{"requires_python": ">=3.13"}],
    "2.22.0rc2": [{"requires_python": ">=3.13", "yanked": True}], "2.23.0.dev0": [{}], "2.24.0": [],
}


def test_latest_is_the_newest_release_pre_releases_included_yanked_and_empty_ones_not():
    acv = _acv()
    assert acv.resolve("latest", RELEASES) == "2.22.0rc1"
    assert acv.resolve("latest", dict(RELEASES, **{"2.22.0": [{}]})) == "2.22.0"
    assert acv.resolve("2.19", RELEASES) == "2.19.14"   # a series: its newest final release
    assert acv.resolve("2.19.13", RELEASES) == "2.19.13"
    assert acv.requires_python("2.22.0rc1", RELEASES) == ">=3.13"
    assert acv.python_allowed("3.13", ">=3.13") and not acv.python_allowed("3.12", ">=3.13")


def test_pypi_is_asked_when_the_kept_answer_is_old_and_the_kept_one_serves_offline(tmp_path):
    import json
    acv = _acv()
    calls = []

    def answer():
        calls.append(1)
        return json.dumps({"releases": RELEASES})

    def offline():
        raise OSError("no network")
    assert acv.resolve("latest", acv.pypi_releases(str(tmp_path), 86400, answer)) == "2.22.0rc1"
    assert acv.resolve("latest", acv.pypi_releases(str(tmp_path), 86400, offline)) == "2.22.0rc1"   # fresh: kept
    assert acv.resolve("latest", acv.pypi_releases(str(tmp_path), 0, offline)) == "2.22.0rc1"       # stale, offline
    assert len(calls) == 1
    with pytest.raises(RuntimeError, match="no answer is kept"):
        acv.pypi_releases(str(tmp_path / "empty"), 0, offline)


def test_every_role_states_the_declared_lower_bound():
    # meta/runtime.yml's requires_ansible lower bound is the oldest core tested; a role that claims an older one
    # (2.17 after the range moved to 2.19) promises what nothing tests
    import glob
    import yaml
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        lower = re.match(r">=(\d+\.\d+)", yaml.safe_load(handle)["requires_ansible"]).group(1)
    for meta in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "main.yml"))):
        with open(meta) as handle:
            assert str(yaml.safe_load(handle)["galaxy_info"]["min_ansible_version"]) == lower, meta


def _run_matrix(tmp_path, **env):
    """scripts/controller-matrix.sh in a copy of the checkout whose helpers are stubs: each controller's "python"
    records the pytest arguments it was given."""
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "scripts" / "controller-matrix.sh").write_text(open(MATRIX).read())
    (root / "scripts" / "collection-link.sh").write_text("#!/bin/sh\nexit 0\n")
    (root / "scripts" / "sanity.sh").write_text("#!/bin/sh\nexit 0\n")
    (root / "scripts" / "ansible-core-version.py").write_text("import sys\nprint(sys.argv[1])\n")
    log = tmp_path / "pytest-args"
    (root / "scripts" / "controller-venv.sh").write_text(
        "#!/bin/sh\nv=%s/venv-$1\nmkdir -p $v/bin\n"
        "printf '#!/bin/sh\\necho \"$1 $*\" >> %s\\n' > $v/bin/python\nchmod +x $v/bin/python\necho $v\n" % (tmp_path, log))
    for name in ("collection-link.sh", "sanity.sh", "controller-venv.sh"):
        (root / "scripts" / name).chmod(0o755)
    (root / "tests" / "controllers.txt").write_text("2.19.14 3.11\n2.22.0 3.13\n")
    proc = subprocess.run(["bash", str(root / "scripts" / "controller-matrix.sh")], capture_output=True, text=True,
                          env=dict(os.environ, GPUSERVE_CACHE=str(tmp_path / "cache"), **env), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split() for line in log.read_text().splitlines()]


def test_module_utils_tests_run_on_the_oldest_controller_and_the_newer_ones_run_the_controller_side(tmp_path):
    """module_utils' code runs on the managed host: the oldest controller (Python 3.11) runs their tests, a newer one
    the controller-side plugin tests only; MATRIX_MODULE_UTILS=all runs them on every controller."""
    oldest, newest = _run_matrix(tmp_path)
    assert "tests/unit/plugins" in oldest and not any(a.startswith("--ignore") for a in oldest)
    assert "tests/unit/plugins" in newest and "--ignore=tests/unit/plugins/module_utils" in newest
    both = _run_matrix(tmp_path / "all", MATRIX_MODULE_UTILS="all")
    assert not any(a.startswith("--ignore") for args in both for a in args)
