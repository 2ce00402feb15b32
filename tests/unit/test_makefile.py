# SPDX-License-Identifier: GPL-3.0-or-later
"""The README's commands are Makefile targets that run the project's own scripts."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("target, script", [
    ("demo", "scripts/demo.sh"),
    ("test", "scripts/test.sh"),
    ("test-busy", "scripts/test-busy.sh"),
    ("demo-clean", "scripts/demo.sh --clean"),
    ("reference", "scripts/gen-reference.py"),
])
def test_target_runs_its_script(target, script):
    proc = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
    assert script in proc.stdout


def test_ci_runs_the_readme_test_command():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "exec make test" in ci
    assert readme.index("make demo") < readme.index("make test") < 200
