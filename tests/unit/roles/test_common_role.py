# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/_common: the one place that creates the SGLang venv and reads its site-packages; the roles' venv
variables all derive from one sglang_venv; the role refuses to run on its own. The venv tasks run for real here
(connection local, a venv under tmp_path)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import yaml

from conftest import COLLECTIONS, MODULE_PYTHON, ROOT, run_play_batch

ROLES = os.path.join(ROOT, "roles")


def _yaml(*parts):
    with open(os.path.join(ROLES, *parts)) as handle:
        return yaml.safe_load(handle) or {}


def test_one_entry_point_per_tasks_file():
    specs = _yaml("_common", "meta", "argument_specs.yml")["argument_specs"]
    tasks = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROLES, "_common", "tasks", "*.yml")))
    # the lease is one task of the server role's (entry point lease) and of the router role's, no _common part
    assert sorted(specs) == ["interpreter", "main", "venv"]
    assert tasks == sorted(specs)
    assert all(name.startswith("_common_") for name in specs["venv"]["options"])


def test_every_venv_variable_derives_from_sglang_venv():
    # "" = read from the host: the venv of sglang_install_record, else sglang_venv (preflight of each role)
    derived = {"nccl_tuning": ("nccl_python", ""),
               "server": ("sglang_python", ""),
               "install": (None, None)}
    for role, (name, value) in derived.items():
        defaults = _yaml(role, "defaults", "main.yml")
        options = _yaml(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
        assert defaults["sglang_venv"] == options["sglang_venv"]["default"] == "/opt/sglang/venv", role
        assert defaults["sglang_install_record"] == options["sglang_install_record"]["default"] \
            == "/opt/sglang/install-record.json", role
        if name:
            assert defaults[name] == options[name]["default"] == value, role
    # the CUDA wheels have their own venv: the SGLang venv is one per version (install role)
    cuda = _yaml("cuda", "defaults", "main.yml")
    assert "sglang_venv" not in cuda and cuda["cuda_pip_venv"] == "/opt/sglang/cuda-venv"


def test_server_and_nccl_tuning_resolve_the_interpreter_the_same_way():
    # one place (_common interpreter.yml) reads sglang_install_record's venv when the interpreter is not given and
    # falls back to sglang_venv; the server and nccl_tuning preflights include it with their own variables
    with open(os.path.join(ROLES, "_common", "tasks", "interpreter.yml")) as handle:
        text = handle.read()
    # one module run (sglang_host_facts; the order given > install record > venv is tested in test_host_facts.py)
    assert "gpuserve.sglang.sglang_host_facts:" in text
    assert 'python: "{{ _common_python_given if ansible_parent_role_names' in text
    assert "install_record: \"{{ _common_install_record if _common_python_given | length == 0 else '' }}\"" in text
    assert '_common_python: "{{ _common_host.python }}"' in text
    # the server's preflight reads the host in ONE sglang_host_facts run of its own (issue 39), its options set by
    # the action plugin (plugin_utils/_server_preflight.py, issue 47) with the same rule: the interpreter given,
    # else the install record's venv (only when none is given), else sglang_venv
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_preflight  # pylint: disable=import-outside-toplevel
    server = next(t["gpuserve.sglang.sglang_host_facts"] for t in _yaml("server", "tasks", "preflight.yml")
                  if "gpuserve.sglang.sglang_host_facts" in t)
    assert server == {"server_preflight": True}
    for given, record in (("", "/opt/sglang/install-record.json"), ("/opt/x/bin/python", "")):
        values = dict((name, "") for name in _server_preflight.HOST_READ_VARS)
        values.update(sglang_python=given, sglang_install_record="/opt/sglang/install-record.json",
                      sglang_venv="/opt/sglang/venv", _server_in={"model_path": "/m"}, sglang_model_check=False)
        args = _server_preflight.host_read_args(lambda name, default=None, v=values: v.get(name, default))
        assert (args["python"], args["install_record"], args["venv"]) == (given, record, "/opt/sglang/venv")
    # nccl_tuning's module resolves it on the host with the same function (_host_facts.interpreter, as
    # sglang_host_facts does), from the role's own variables passed on unchanged
    nccl = next(t["gpuserve.sglang.nccl_tuning"] for t in _yaml("nccl_tuning", "tasks", "tuning.yml")
                if "gpuserve.sglang.nccl_tuning" in t)
    assert (nccl["python"], nccl["install_record"], nccl["venv"]) == (
        "{{ nccl_python }}", "{{ sglang_install_record }}", "{{ sglang_venv }}")
    with open(os.path.join(ROOT, "plugins", "module_utils", "_nccl_tuning.py")) as handle:
        assert 'interpreter(p["python"], p["install_record"], p["venv"])' in handle.read()


# The roles that share the SGLang venv (the router role has its own venv, sglang_router_venv, also made by _common).
VENV_ROLES = ("_common", "install", "cuda", "nccl_tuning", "server")


def test_no_role_but_common_runs_python_m_venv():
    for path in glob.glob(os.path.join(ROLES, "*", "tasks", "*.yml")):
        rel = os.path.relpath(path, ROLES)
        if rel.startswith("_common" + os.sep):
            continue
        with open(path) as handle:
            text = handle.read()
        assert "-m venv" not in text and "-m, venv" not in text, rel


def test_only_common_creates_a_venv_or_names_the_venv_path():
    for path in [p for role in VENV_ROLES for p in glob.glob(os.path.join(ROLES, role, "*", "*.yml"))]:
        rel = os.path.relpath(path, ROLES)
        with open(path) as handle:
            text = handle.read()
        if not rel.startswith("_common" + os.sep) and os.sep + "tasks" + os.sep in rel:
            assert "-m venv" not in text and "-m, venv" not in text, rel
            # nccl_tuning and the server's stale check ask THEIR interpreter (possibly an adopted venv) where its
            # site-packages are: the sitecustomize.py it really imports; neither makes a venv
            assert "purelib" not in text or rel == os.path.join("server", "tasks", "stale.yml"), rel
        if "/opt/sglang/venv" in text:
            # the one value, as the default of sglang_venv in each role (and its argument_specs entry)
            lines = [line.strip() for line in text.splitlines() if "/opt/sglang/venv" in line]
            assert all(line.startswith(("sglang_venv:", "default: /opt/sglang/venv")) for line in lines), (rel, lines)


PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: caller
"""

CALLER = """
- name: Create the venv through _common
  ansible.builtin.include_role:
    name: gpuserve.sglang._common
    tasks_from: venv.yml
  vars:
    _common_venv: "{{ venv }}"
    _common_venv_python: "{{ base_python }}"

- name: Show the site-packages
  ansible.builtin.debug:
    msg: "SITE={{ _common_venv_site_packages }}"
"""

DIRECT = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpuserve.sglang._common
"""


def _play(tmp_path, text, *extra):
    roles = tmp_path / "roles" / "caller" / "tasks"
    roles.mkdir(parents=True, exist_ok=True)
    (roles / "main.yml").write_text(CALLER)
    play = tmp_path / "play.yml"
    play.write_text(text)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_ROLES_PATH=str(tmp_path / "roles"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + MODULE_PYTHON, "-e", "base_python=" + sys.executable,
           "-e", "venv=" + str(tmp_path / "parent" / "venv"), str(play)] + list(extra)
    return subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=3600, check=False)


def test_venv_created_once_and_site_packages_read(tmp_path):
    first = _play(tmp_path, PLAY)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    venv_py = tmp_path / "parent" / "venv" / "bin" / "python"
    assert venv_py.exists()
    purelib = subprocess.run([str(venv_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert "SITE=%s" % purelib in first.stdout
    # one module run (gpuserve.sglang.sglang_venv) made the parent directory (0755) and the venv; three did before
    assert "changed=1" in first.stdout
    assert oct(os.stat(tmp_path / "parent").st_mode & 0o777) == "0o755"
    second = _play(tmp_path, PLAY)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-3000:]
    assert "SITE=%s" % purelib in second.stdout


def test_check_mode_before_the_venv_exists(tmp_path):
    proc = _play(tmp_path, PLAY, "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "SITE=\"" in proc.stdout or "SITE=\n" in proc.stdout or '"msg": "SITE="' in proc.stdout
    assert not (tmp_path / "parent" / "venv").exists()


def test_refuses_to_run_on_its_own(tmp_path):
    proc = _play(tmp_path, DIRECT)
    assert proc.returncode != 0
    assert "gpuserve.sglang._common is internal to the collection" in proc.stdout


# Each tasks_from entry refuses a call from outside the collection's roles in its first module task's arguments (a
# guard task of its own was one more result in every role run, issue 20): refused by name, before the module runs.
BYPASS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: An entry of _common called from a play, not from one of the collection's roles
      ansible.builtin.include_role:
        name: gpuserve.sglang._common
        tasks_from: "{{ entry }}"
      vars:
        _common_python_given: ""
        _common_install_record: ""
        _common_venv_python: /usr/bin/python3
"""


def test_each_entry_refuses_a_call_from_outside_the_roles_before_its_module_runs(tmp_path):
    base = {"_common_venv": str(tmp_path / "venv")}
    entries = ("interpreter.yml", "venv.yml")
    results = run_play_batch(tmp_path, BYPASS, {entry: dict(base, entry=entry) for entry in entries})
    wanted = {"interpreter.yml": "gpuserve.sglang._common is internal; use gpuserve.sglang.server or "
                                 "gpuserve.sglang.nccl_tuning.",
              "venv.yml": "gpuserve.sglang._common is internal; use gpuserve.sglang.install or gpuserve.sglang.cuda."}
    for entry, text in wanted.items():
        rc, out = results[entry]
        assert rc == 1 and text in out, (entry, out[-3000:])
    # nothing reached the host: no venv made
    assert not (tmp_path / "venv").exists()
