# SPDX-License-Identifier: GPL-3.0-or-later
"""The test controller's compile caches (tests/testcontroller/gpuserve_test_ctl.py, a test fixture that
scripts/venv.sh installs as a .pth line and scripts/test.sh turns on): the same templates, plugins and payloads,
cached by everything they depend on, never stale. Each case runs a fresh interpreter or ansible-playbook with
the checkout's copy of the fixture, so what is tested is the file in the checkout, not the venv's copy."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import MODULE_PYTHON, ROOT

FIXTURE = os.path.join(ROOT, "tests", "testcontroller", "gpuserve_test_ctl.py")
ENV = "GPUSERVE_TEST_CTL_CACHE"
# Load the checkout's fixture into a fresh interpreter (the venv's .pth copy stays off: the variable is unset at
# its start), turn the cache on, then run the case's code.
PRELUDE = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("gpuserve_test_ctl", %r)
ctl = importlib.util.module_from_spec(spec)
sys.modules["gpuserve_test_ctl"] = ctl
spec.loader.exec_module(ctl)
os.environ[ctl.ENV] = sys.argv[1]
ctl.install()
""" % FIXTURE
# The same for ansible-playbook: its own main, after the prelude.
PLAYBOOK = PRELUDE + """
sys.argv = ["ansible-playbook"] + sys.argv[2:]
from ansible.cli.playbook import main
main()
"""


def _python(tmp_path, code, cache, *args):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code, str(cache)] + list(args), env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _entries(cache, kind):
    root = cache / kind
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_without_the_variable_nothing_is_patched(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('ctl_off', %r)\n"
            "ctl = importlib.util.module_from_spec(spec); spec.loader.exec_module(ctl)\n"
            "import jinja2\n"
            "print(hasattr(jinja2.Environment.compile, 'gpuserve_test_ctl'), ctl.cache_dir())\n") % FIXTURE
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=600, check=True).stdout
    assert out.split() == ["False", "None"]


JINJA = """
import jinja2
assert getattr(jinja2.Environment.compile, "gpuserve_test_ctl", False)
env = jinja2.Environment(trim_blocks=sys.argv[2] == "trim")
print(repr(env.from_string(sys.argv[3]).render(x=[1, 2])))
"""


def test_jinja_template_compiled_once_and_keyed_by_source_and_settings(tmp_path):
    cache = tmp_path / "cache"
    template = "{% for i in x %}\n{{ i }}{% endfor %}"
    first = _python(tmp_path, JINJA, cache, "plain", template)
    assert len(_entries(cache, "jinja")) == 1
    # the second interpreter takes the code object from the cache (no new entry) and renders the same
    assert _python(tmp_path, JINJA, cache, "plain", template) == first == "'\\n1\\n2'\n"
    assert len(_entries(cache, "jinja")) == 1
    # a setting the lexer reads is part of the key: the same source, another code object, another result
    assert _python(tmp_path, JINJA, cache, "trim", template) == "'12'\n"
    # and so is the source
    assert _python(tmp_path, JINJA, cache, "plain", template + "!") == "'\\n1\\n2!'\n"
    assert len(_entries(cache, "jinja")) == 3


def test_a_broken_entry_means_the_plain_compile(tmp_path):
    cache = tmp_path / "cache"
    _python(tmp_path, JINJA, cache, "plain", "{{ x | length }}")
    (entry,) = _entries(cache, "jinja")
    (cache / "jinja" / entry).write_bytes(b"not marshal data")
    assert _python(tmp_path, JINJA, cache, "plain", "{{ x | length }}") == "'2'\n"


def _collection(base, filter_value, util_value):
    """A collection gpuserve.sglang under base with one filter plugin and one module over one module_utils file."""
    root = base / "ansible_collections" / "gpuserve" / "sglang"
    (root / "plugins" / "filter").mkdir(parents=True, exist_ok=True)
    (root / "plugins" / "modules").mkdir(parents=True, exist_ok=True)
    (root / "plugins" / "module_utils").mkdir(parents=True, exist_ok=True)
    (root / "galaxy.yml").write_text("namespace: gpuserve\nname: sglang\nversion: 1.0.0\n")
    # the filter imports the module_utils file as the collection's filters do (through the collection loader)
    (root / "plugins" / "filter" / "probe.py").write_text(
        "from ansible_collections.gpuserve.sglang.plugins.module_utils._probe import VALUE\n"
        "class FilterModule:\n    def filters(self):\n        return {'probe': lambda value: %r + '/' + VALUE}\n"
        % filter_value)
    (root / "plugins" / "module_utils" / "_probe.py").write_text("VALUE = %r\n" % util_value)
    (root / "plugins" / "modules" / "probe.py").write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible_collections.gpuserve.sglang.plugins.module_utils._probe import VALUE\n"
        "def main():\n"
        "    AnsibleModule(argument_spec={}).exit_json(changed=False, value=VALUE)\n"
        "if __name__ == '__main__':\n"
        "    main()\n")


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - gpuserve.sglang.probe:
      register: probed
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'filter': 'x' | gpuserve.sglang.probe, 'module': probed.value} | to_json }}"
        mode: "0644"
"""


def _play(tmp_path, cache, collections):
    out = tmp_path / "out.json"
    (tmp_path / "play.yml").write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run([sys.executable, "-c", PLAYBOOK, str(cache), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + MODULE_PYTHON, "-e", "out=" + str(out),
                           str(tmp_path / "play.yml")], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("edit", ["filter", "module_utils"])
def test_an_edited_plugin_or_module_util_runs_as_edited_never_from_the_cache(tmp_path, edit):
    cache = tmp_path / "cache"
    collections = tmp_path / "collections"
    _collection(collections, "filter-1", "util-1")
    assert _play(tmp_path, cache, collections) == {"filter": "filter-1/util-1", "module": "util-1"}
    # every kind of entry was made: plugin code, templates, the module's payload
    assert _entries(cache, "pyc") and _entries(cache, "jinja") and _entries(cache, "ansiballz")
    # a second run with nothing changed answers the same (its copy task runs `file` where the first ran `copy`:
    # one payload more), and a third one is served from the cache: no new payload
    assert _play(tmp_path, cache, collections) == {"filter": "filter-1/util-1", "module": "util-1"}
    payloads = _entries(cache, "ansiballz")
    assert _play(tmp_path, cache, collections) == {"filter": "filter-1/util-1", "module": "util-1"}
    assert _entries(cache, "ansiballz") == payloads
    if edit == "filter":
        _collection(collections, "filter-2", "util-1")
        assert _play(tmp_path, cache, collections) == {"filter": "filter-2/util-1", "module": "util-1"}
    else:
        # only the module_utils file changes: the module's own source is the same, the payload must not be
        _collection(collections, "filter-1", "util-2")
        assert _play(tmp_path, cache, collections) == {"filter": "filter-1/util-2", "module": "util-2"}
        assert len(_entries(cache, "ansiballz")) > len(payloads)
