# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's entry point `due` (tasks_from: due) on this machine (connection local, a fake systemctl on
PATH for the unit's state): read-only, it says whether a restart is due and why (public facts
sglang_server_restart_due, sglang_server_restart_reasons); the rolling playbooks drain only where it is due."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

import pytest
import yaml

from conftest import ROOT, make_standin_model, run_play

ROLE = os.path.join(ROOT, "roles", "server")

# The files a deploy lands, written by the same module call (the prepare phase of run.yml: lands what differs,
# restarts nothing); its write-ahead record removed, as a deploy that went on to keep the set closes it.
WRITE_FILES = """
    - name: Write the secrets file, environment file, launcher and unit as the main entry point does
      ansible.builtin.include_role:
        name: gpuserve.sglang.server
        tasks_from: run
      vars:
        _server_phase: prepare
    - name: The change closed
      ansible.builtin.file:
        path: "{{ sglang_config_dir }}/backup/sglang-kimi.last-good/txn.json"
        state: absent
"""

FAKE_SYSTEMCTL = """#!/bin/sh
cat "$FAKE_SYSTEMCTL_SHOW"
"""


def _show(active, started):
    return "ActiveState=%s\nActiveEnterTimestamp=@%d\nInvocationID=%s\n" % (
        active, started, "0123456789abcdef" if active == "active" else "")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Paths of a server under tmp_path and a systemctl that answers from a file; run(cases) runs ONE play that
    asks `due` once per case (case: {"vars": ..., "show": systemctl's answer, "write": write the files first}) and
    returns the answers."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    show = tmp_path / "show.txt"
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    monkeypatch.setenv("FAKE_SYSTEMCTL_SHOW", str(show))
    for sub in ("etc", "units", "lib", "out"):
        (tmp_path / sub).mkdir()
    make_standin_model("kimi", tmp_path / "model")
    make_standin_model("eagle3", tmp_path / "draft")
    variables = {
        "sglang_config_dir": str(tmp_path / "etc"), "sglang_unit_dir": str(tmp_path / "units"),
        "sglang_model_path": str(tmp_path / "model"), "sglang_draft_model_path": str(tmp_path / "draft"),
        "sglang_python": sys.executable, "sglang_user": "", "sglang_check_args": False,
        "sglang_launch_script": str(tmp_path / "lib" / "sglang_launch.py"),
        "sglang_install_record": str(tmp_path / "install-record.json"),
        "sglang_args": {"hicache-ratio": 2.0},
    }

    def run(cases):
        tasks = []
        for index, case in enumerate(cases):
            tasks.append({"name": "systemctl answers for case %d" % index,
                          "ansible.builtin.copy": {"content": case.get("show", _show("inactive", 0)),
                                                   "dest": str(show), "mode": "0644"}})
            tasks.append({"name": "Is a restart due, case %d" % index,
                          "ansible.builtin.include_role": {"name": "gpuserve.sglang.server", "tasks_from": "due"},
                          "vars": case.get("vars", {})})
            if case.get("write"):
                tasks += yaml.safe_load(WRITE_FILES)
                tasks[-2]["vars"].update(case.get("vars", {}))
            tasks.append({"name": "Keep the answer of case %d" % index, "ansible.builtin.copy": {
                "content": "{{ {'due': sglang_server_restart_due, 'reasons': sglang_server_restart_reasons} | to_json }}",
                "dest": str(tmp_path / "out" / ("%d.json" % index)), "mode": "0644"}})
        # play vars, not extra vars: a case's include vars must win over them
        play = yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars": variables, "tasks": tasks}],
                              sort_keys=False)
        rc, out = run_play(tmp_path, play)
        assert rc == 0, out
        return [json.loads((tmp_path / "out" / ("%d.json" % index)).read_text()) for index in range(len(cases))]

    return {"tmp": tmp_path, "vars": variables, "run": run}


def _tree(path):
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, dummy, files in os.walk(path) for f in files)


def test_due_entry_point_is_documented_with_mains_options():
    specs = yaml.safe_load(open(os.path.join(ROLE, "meta", "argument_specs.yml"), encoding="utf-8"))["argument_specs"]
    assert specs["due"]["options"] == specs["main"]["options"]
    assert "sglang_server_restart_due" in " ".join(specs["due"]["description"])


def test_deploy_and_due_share_one_check_pass():
    """due.yml asks the same module call as a deploy (run.yml, the same options: the same comparison) in state
    due; it holds no check of its own and changes nothing (the preflight reads only)."""
    with open(os.path.join(ROLE, "tasks", "due.yml"), encoding="utf-8") as handle:
        due = yaml.safe_load(handle)
    assert [t.get("ansible.builtin.import_tasks") for t in due if "ansible.builtin.import_tasks" in t] == [
        "preflight.yml", "run.yml"]
    assert next(t for t in due if t.get("ansible.builtin.import_tasks") == "run.yml")["vars"] == {
        "_server_phase": "due"}
    # a server over several hosts is due where any node is: the action plugin reads the nodes' answers (no module
    # runs, no Jinja computes it), then the facts
    assert [list(t)[1] for t in due if "ansible.builtin.import_tasks" not in t] == [
        "gpuserve.sglang.sglang_server", "ansible.builtin.set_fact"]
    group = next(t for t in due if "gpuserve.sglang.sglang_server" in t)["gpuserve.sglang.sglang_server"]
    assert group == {"name": "{{ sglang_service_name }}", "state": "due", "due_from": "sglang_server"}
    with open(os.path.join(ROLE, "tasks", "run.yml"), encoding="utf-8") as handle:
        module = yaml.safe_load(handle)[0]["gpuserve.sglang.sglang_server"]
    assert module["state"] == "{{ 'due' if _server_phase | default('') == 'due' else 'deployed' }}"


def test_fresh_host_is_due_and_nothing_is_written(host):
    before = _tree(host["tmp"])
    answer = host["run"]([{}])[0]
    assert answer["due"] is True
    for reason in ("not running", "unit would change", "environment file would change"):
        assert reason in answer["reasons"]
    assert any(r.startswith("launcher ") for r in answer["reasons"])
    ignore = ("play.yml", "show.txt", "out/0.json")
    assert [p for p in _tree(host["tmp"]) if p not in ignore] == [p for p in before if p not in ignore]


def test_unchanged_running_host_is_not_due_and_each_change_is_named(host):
    shutil.copy(os.path.join(ROLE, "files", "sglang_launch.py"), host["vars"]["sglang_launch_script"])
    later = _show("active", int(time.time()) + 600)   # started after every file was written
    answers = host["run"]([
        {"write": True},
        {"show": later},
        {"show": later, "vars": {"sglang_args": {"hicache-ratio": 4.0}}},
        {"show": later, "vars": {"sglang_env": {"NCCL_DEBUG": "INFO"}}},
        {"show": later, "vars": {"sglang_api_key": "k-123"}},
        {"show": _show("inactive", 0)},
    ])
    assert answers[1] == {"due": False, "reasons": []}
    assert answers[2] == {"due": True, "reasons": ["unit would change"]}
    assert answers[3] == {"due": True, "reasons": ["environment file would change"]}
    # a key: the secrets file would change (the environment file holds no key: a rollback restores it)
    assert answers[4]["due"] is True
    assert "secrets file would change" in answers[4]["reasons"]
    assert "environment file would change" not in answers[4]["reasons"]
    assert answers[5] == {"due": True, "reasons": ["not running"]}


def test_files_written_after_the_invocation_started_make_it_due(host):
    shutil.copy(os.path.join(ROLE, "files", "sglang_launch.py"), host["vars"]["sglang_launch_script"])
    nccl = host["tmp"] / "etc" / "nccl.env"
    nccl.write_text("NCCL_IB_DISABLE=1\n")
    answers = host["run"]([{"write": True}, {"show": _show("active", int(time.time()) - 1000)}])
    answer = answers[1]
    assert answer["due"] is True
    unit = os.path.join(host["vars"]["sglang_unit_dir"], "sglang-kimi.service")
    # the launcher in ExecStart counts as an input too (issue 22)
    for path in (str(nccl), unit, host["vars"]["sglang_launch_script"]):
        assert "%s changed after the running invocation started" % path in answer["reasons"]
    assert "unit would change" not in answer["reasons"]
