# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller matrix (scripts/controller-matrix.sh) and make test's unit step run the plugin unit tests once per
controller: the matrix skips them only on the controller that IS the development one (same ansible-core, same
Python), and only when make test says the unit step runs them (issue 20: they ran twice on 2.21.5)."""
from __future__ import annotations

import os
import re
import subprocess

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
