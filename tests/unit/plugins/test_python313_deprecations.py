# SPDX-License-Identifier: GPL-3.0-or-later
"""Python 3.13 deprecates re.split's maxsplit and re.sub/re.subn's count (and their flags) passed by position
(DeprecationWarning): ansible-test's import test on Python 3.13 (the newest controller of the matrix, ansible-core
2.22.0rc1) failed every module that imports _sglang_logs for one such call, and Debian 13's Python 3.13 runs the
module_utils on the hosts. Every call of the collection's host code passes them by keyword."""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# the positional arguments these functions take before the ones 3.13 wants by keyword
POSITIONAL = {"split": 2, "sub": 3, "subn": 3}


def _positional_calls(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POSITIONAL
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and len(node.args) > POSITIONAL[node.func.attr]):
            yield "%s:%d re.%s" % (os.path.relpath(path, ROOT), node.lineno, node.func.attr)


def test_no_re_call_passes_maxsplit_count_or_flags_by_position():
    files = glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True) \
        + glob.glob(os.path.join(ROOT, "roles", "*", "files", "*.py"))
    assert files
    found = [call for path in files for call in _positional_calls(path)]
    assert not found, found
