# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/restart.yml behind routers asks the server role whether a restart is due BEFORE it drains (when
unchanged hosts are left alone, as deploy.yml does), and drains, restarts and puts back only those hosts; the
router role's drain step takes out only the batch's hosts whose rollout_restart_due is true. molecule/router_ha
proves it on real hosts; this test pins the wiring."""
from __future__ import annotations

import json
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _when(task):
    when = task.get("when", [])
    return when if isinstance(when, list) else [when]


def _lease_wrapped(tasks):
    """The one task of a play that changes hosts under the lease: its block starts by taking the host lease and
    its always gives it back when this play took it. Returns the block's tasks."""
    assert len(tasks) == 1 or "block" in tasks[-1], [t.get("name") for t in tasks]
    outer = tasks[-1]
    take, back = outer["block"][0], outer["always"][-1]
    # restart.yml includes the role, deploy.yml imports it (static: no task result of its own)
    role = take.get("ansible.builtin.include_role") or take["ansible.builtin.import_role"]
    assert role == dict(role, name="gpuserve.sglang.server", tasks_from="lease")
    assert take["vars"]["sglang_lease_state"] == "acquired"
    assert (back.get("ansible.builtin.include_role") or back["ansible.builtin.import_role"])["tasks_from"] == "lease"
    assert back["vars"]["sglang_lease_state"] == "released"
    remember = outer["block"][1]["ansible.builtin.set_fact"]
    (flag, expr), = remember.items()
    assert _when(back) == ["%s | default(false) | bool" % flag]
    assert expr == "{{ sglang_lease.taken }}"   # a lease this play only renewed is not its to give back (_lease.TAKEN)
    return outer["block"]


def test_restart_and_deploy_change_hosts_only_under_the_lease():
    restart = _lease_wrapped(_yaml("playbooks", "restart.yml")[0]["tasks"])
    assert (restart[2].get("ansible.builtin.include_role") or {}).get("tasks_from") == "due"   # due asked under it
    deploy = _yaml("playbooks", "deploy.yml")[0]["tasks"]
    names = [t["name"] for t in deploy]
    assert names[:2] == ["The memory plan's inputs from the server's effective flags (fact sglang_plan_inputs)",
                         "Preflight (read-only)"]   # read-only steps before the lease
    inner = _lease_wrapped(deploy[2:])
    roles = [(t.get("ansible.builtin.import_role") or {}).get("name") for t in inner]
    assert roles.index("gpuserve.sglang.cuda") < len(roles) - 1 - roles[::-1].index("gpuserve.sglang.server")
    assert any("sglang_service" in str(t) for t in inner)   # the verify and the summary run under it


def test_roles_change_the_host_only_under_the_lease():
    server = ["The service account", "Configure and run", "Configure and run one server over several hosts, as one",
              "Textfile-collector metrics of the unit (NRestarts, verified invocation, benchmark baseline)"]
    for role, phases in (("server", server), ("router", ["Install", "Configure and run"])):
        # the preflight first (the router no longer resets a restart fact before it: the module's plan decides)
        main = [t for t in _yaml("roles", role, "tasks", "main.yml") if "ansible.builtin.set_fact" not in t]
        assert main[0]["name"] == "Preflight" and "block" not in main[0]
        block = main[1]
        assert block["block"][0]["ansible.builtin.import_tasks"] == "lease.yml"
        assert [t["name"] for t in block["block"] if t["name"] in phases] == phases
        back = block["always"][0]
        assert back["ansible.builtin.include_tasks"]["file"] == "lease.yml"
        assert "_lease_taken" in _when(back)[0] or "sglang_lease.taken" in _when(back)[0]


def test_restart_asks_due_before_the_drain_and_gates_every_step_on_it():
    tasks = _lease_wrapped(_yaml("playbooks", "restart.yml")[0]["tasks"])
    names = [t["name"] for t in tasks]
    due = next(t for t in tasks if (t.get("ansible.builtin.include_role") or {}).get("tasks_from") == "due")
    assert due["ansible.builtin.include_role"]["name"] == "gpuserve.sglang.server"
    assert _when(due) == ["not rollout_restart_unchanged | bool"]
    block_task = next(t for t in tasks if "block" in t)
    assert names.index(due["name"]) < names.index(block_task["name"])
    drain, server = block_task["block"][0], block_task["block"][1]
    assert drain["ansible.builtin.include_role"]["tasks_from"] == "drain"
    assert server["ansible.builtin.include_role"]["name"] == "gpuserve.sglang.server"
    assert "rollout_restart_due | bool" in _when(server)
    undrain = next(t for t in tasks if (t.get("ansible.builtin.include_role") or {}).get("tasks_from") == "undrain")
    assert "rollout_restart_due | bool" in _when(undrain)
    setter = next(t for t in tasks if "rollout_restart_due" in (t.get("ansible.builtin.set_fact") or {}))
    assert "sglang_server_restart_due" in setter["ansible.builtin.set_fact"]["rollout_restart_due"]
    assert "rollout_restart_unchanged" in setter["ansible.builtin.set_fact"]["rollout_restart_due"]


def test_deploy_behind_routers_leaves_unchanged_hosts_alone():
    plays = _yaml("playbooks", "deploy.yml")
    rolling = plays[-1]
    assert rolling["ansible.builtin.import_playbook"] == "restart.yml"
    assert rolling["vars"]["sglang_rollout_restart_unchanged"] is False


def test_drain_takes_out_only_the_due_hosts_of_the_batch(tmp_path):
    """The batch is the hosts of the play batch whose rollout_restart_due is not false (unset: due), computed by
    Ansible's own filters (issue 47: no role-private filter, sglang_router_batch's values), run here by
    ansible-playbook on drain.yml's own task."""
    import subprocess
    import sys
    from conftest import COLLECTIONS
    tasks = _yaml("roles", "router", "tasks", "drain.yml")
    assert "sglang_router_batch" not in yaml.safe_dump(tasks)
    drain = next(t for t in tasks if "gpuserve.sglang.sglang_router_workers" in t)
    assert drain["gpuserve.sglang.sglang_router_workers"]["worker_hosts"] == "{{ _router_rollout.batch }}"
    assert _when(drain) == ["_router_rollout.batch | length > 0"]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {"sglang_routers": {"hosts": {"gw": {}}}, "sglang_servers": {"hosts": {
            "w1": {"rollout_restart_due": True}, "w2": {"rollout_restart_due": False}, "w3": {}, "w4": {}}}}}}))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "sglang_servers", "gather_facts": False, "tasks": [
        {"ansible.builtin.set_fact": {"rollout_restart_due": False}, "when": "inventory_hostname == 'w4'"},
        tasks[0],
        {"ansible.builtin.copy": {"content": "{{ _router_rollout.batch | to_json }}", "dest": str(tmp_path / "batch")},
         "run_once": True}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                    str(tmp_path / "play.yml")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
                   check=True)
    assert json.loads((tmp_path / "batch").read_text()) == ["w1", "w3"]   # w3: asked by no one -> drained
    from ansible_collections.gpuserve.sglang.plugins.plugin_utils._router_role import sglang_router_batch
    hostvars = {"w1": {"rollout_restart_due": True}, "w2": {"rollout_restart_due": False}, "w3": {},
                "w4": {"rollout_restart_due": False}}
    assert sglang_router_batch(["w1", "w2", "w3", "w4"], hostvars) == ["w1", "w3"]


def test_deploy_tags_server_reaches_the_rolling_play_behind_routers(tmp_path):
    """`deploy.yml --tags server` with a router group runs the rolling play (it was untagged: --tags server skipped
    the whole server step behind routers) and its includes apply the tag to the roles' tasks."""
    import subprocess
    import sys
    from conftest import COLLECTIONS
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("sglang_servers: {hosts: {w1: {}}}\nsglang_routers: {hosts: {gw1: {}}}\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                          os.path.join(ROOT, "playbooks", "deploy.yml"), "--tags", "server", "--list-tasks"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=True).stdout
    rolling = out.split("Rolling restart of the SGLang servers", 1)[1]
    for task in ("Is a restart due on this host", "Take the batch's due hosts out of every router",
                 "Apply the configuration", "Put the host back in every router"):
        assert task in rolling
    for task in _yaml("playbooks", "restart.yml")[0]["tasks"]:
        for sub in [task] + task.get("block", []) + task.get("rescue", []):
            include = sub.get("ansible.builtin.include_role")
            if include:
                assert include["apply"]["tags"] == ["server"], sub["name"]


def test_a_batch_with_part_of_a_server_over_several_hosts_is_refused_before_anything(tmp_path):
    """restart.yml: a batch that holds only some nodes of one server (issue 25) fails before the lease, the drain or
    a restart; a batch with all of them passes, and so does a host without sglang_server_nodes at all (a server of
    one host: the role's default is not visible to the playbook; its fail_msg once failed there, every batch)."""
    import subprocess
    import sys
    from conftest import COLLECTIONS
    inventory = tmp_path / "hosts.yml"
    nodes = {"sglang_server_nodes": ["a1", "a2"]}
    inventory.write_text(yaml.safe_dump({"sglang_servers": {
        "hosts": {"a1": nodes, "a2": nodes, "b1": {}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")

    def said(proc):
        return " ".join((proc.stdout + " " + proc.stderr).split())     # wrapped by the callback; stderr in 2.19+

    proc = subprocess.run([playbook, "-i", str(inventory), os.path.join(ROOT, "playbooks", "restart.yml"),
                           "-e", "sglang_rollout_batch=1"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
    assert proc.returncode != 0
    assert "this batch (a1) holds a1 but not a2 of its server (a1, a2" in said(proc)
    assert "Take the host lease" not in proc.stdout          # refused before anything
    # the check itself, as restart.yml has it, on every batch size: whole servers and hosts of their own pass
    play = [{"name": "The batch check of restart.yml", "hosts": "sglang_servers", "gather_facts": False,
             "serial": "{{ batch }}", "tasks": [_yaml("playbooks", "restart.yml")[0]["tasks"][0]]}]
    (tmp_path / "check.yml").write_text(yaml.safe_dump(play))
    for batch, refused in ((1, ["a1"]), (2, []), (3, [])):     # a failed batch ends the play (serial)
        proc = subprocess.run([playbook, "-i", str(inventory), str(tmp_path / "check.yml"), "-e", "batch=%d" % batch],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False)
        failed = sorted(host for host in ("a1", "a2", "b1") if "fatal: [%s]" % host in proc.stdout + proc.stderr)
        assert failed == refused, (batch, said(proc)[-2000:])
        assert refused or "ok: [b1]" in proc.stdout, (batch, said(proc)[-2000:])


def test_no_playbook_or_role_restarts_or_verifies_outside_the_server_module():
    """Issue 47 defect 6: restart.yml restarted unchanged hosts with sglang_service (the next no-op deploy found an
    invocation the last good set did not name and verified it again), deploy.yml verified a second time, and the
    rollout rescue re-admitted on its own health check. Only playbooks/verify.yml (read-only, check mode) calls it."""
    callers = []
    for top in ("playbooks", "roles"):
        for base, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith(".yml"):
                    with open(os.path.join(base, name)) as handle:
                        if "gpuserve.sglang.sglang_service:" in handle.read():
                            callers.append(os.path.relpath(os.path.join(base, name), ROOT))
    assert callers == [os.path.join("playbooks", "verify.yml")]
    restart = open(os.path.join(ROOT, "playbooks", "restart.yml")).read()
    assert 'sglang_restart_forced: "{{ rollout_restart_unchanged }}"' in restart
