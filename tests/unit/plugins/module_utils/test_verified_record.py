# SPDX-License-Identifier: GPL-3.0-or-later
"""The verified invocation is ONE record (issue 47): the unit's state file (module_utils/_state_file.py), written by
the service runner in and outside the state machine; the last-good manifest and the deployment record refer to it.
A restart outside the machine (sglang_service) is no reason to verify again; a run killed between the state file,
the gates and the keep is finished by the next one as its transaction says; a host of 1.0.0/2.0.0 keeps working."""
import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good, _record, _state_file
from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import Killed, LifecycleFailure
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import StateFile

from server_fakes import Host


@pytest.fixture
def host(tmp_path):
    host = Host(tmp_path)
    host.write(host.nccl, "NCCL_P2P_LEVEL=SYS\n")
    host.write(host.site, "import os  # v1\n")
    host.write(host.record, '{"sglang": "0.5.9"}\n')
    return host


def manifest(host):
    return json.loads(host.read(host.last_good + "/manifest.json"))


def state(host):
    return StateFile(host.state_dir).read(host.service + ".service")


def deployed(host, version="1"):
    result = host.machine(host.desired(version)).converge()
    host.age_everything()
    return result


def restart_outside(host):
    """What sglang_service state=restarted does: a new invocation, proven, recorded in the state file (its runner's
    one writer), the last-good manifest untouched."""
    inv = host.systemctl.new_invocation()
    StateFile(host.state_dir).write(host.service + ".service", {"invocation_id": inv, "verified_at": 1.0})
    host.age_everything()
    return inv


def test_the_manifest_and_the_record_refer_to_the_state_file(host):
    result = deployed(host)
    inv = host.systemctl.props["InvocationID"]
    assert state(host)["invocation_id"] == inv
    ref = manifest(host)["verified"]
    assert ref["state_file"] == StateFile(host.state_dir).path(host.service + ".service")
    assert ref["invocation_id"] == manifest(host)["invocation_id"] == inv and ref["verified_at"]
    assert result["inputs"]["invocation_id"] == inv


def test_a_restart_outside_the_machine_leaves_the_next_deploy_a_no_op(host):
    """Defect 6: sglang_service restarted the unit (restart.yml's plain restart): the next no-op deploy verified
    the new invocation again, its gates with a rollback, and kept the set anew (changed)."""
    deployed(host)
    kept = host.read(host.last_good + "/manifest.json")
    inv = restart_outside(host)
    before = host.snapshot()
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "none" and not result["changed"], result["actions"]
    assert not any("never verified" in notice for notice in result["notices"])
    assert host.snapshot() == before and host.read(host.last_good + "/manifest.json") == kept
    assert host.systemctl.props["InvocationID"] == inv and result["inputs"]["invocation_id"] == inv
    machine = host.machine(host.desired("1"))
    assert machine.due()["action"] == "none" and machine.serving_verified()


def test_an_invocation_the_state_file_does_not_name_is_verified_in_the_rollbacks_reach(host):
    """A crash restarted by systemd (or a reboot): no runner proved the new invocation, the state file names the old
    one: verified now (and recorded), then a no-op."""
    deployed(host)
    old = state(host)["invocation_id"]
    inv = host.systemctl.new_invocation()
    host.age_everything()
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "verify_only" and any("never verified by this role" in n and old in n
                                                     for n in result["notices"])
    assert state(host)["invocation_id"] == inv == manifest(host)["invocation_id"]
    assert host.machine(host.desired("1")).converge()["action"] == "none"


def test_a_run_killed_between_its_gated_verification_and_the_keep_is_kept_by_the_next(host, monkeypatch):
    """The state file names the new invocation, its transaction says verified (the gates passed), the manifest
    still names the old set: the next run keeps the verified change, restarts nothing, rolls nothing back (before:
    the transaction was taken for an unfinished change, the verified change rolled back and the run failed)."""
    deployed(host)
    original = _last_good.keep

    def killed(*args, **kwargs):
        raise Killed()

    monkeypatch.setattr(_last_good, "keep", killed)
    with pytest.raises(Killed):
        host.machine(host.desired("2")).converge()
    monkeypatch.setattr(_last_good, "keep", original)
    inv = host.systemctl.props["InvocationID"]
    assert state(host)["invocation_id"] == inv != manifest(host)["invocation_id"]
    assert os.path.exists(host.last_good + "/txn.json")
    commands = list(host.systemctl.commands)
    result = host.machine(host.desired("2")).converge()
    assert result["action"] == "keep_only" and not result["rolled_back"], result
    assert host.systemctl.commands == commands and host.systemctl.props["InvocationID"] == inv
    assert manifest(host)["invocation_id"] == inv and not os.path.exists(host.last_good + "/txn.json")
    assert "--v 2" in host.read(host.unit)
    host.age_everything()
    assert host.machine(host.desired("2")).converge()["changed"] is False


def test_a_run_killed_during_its_gates_is_rolled_back_although_the_state_file_names_it(host):
    """The runner recorded the new start, the gates never finished: the open transaction decides (presumed
    abort); the state file naming the invocation does not make its set a kept one."""
    deployed(host)

    def killed_gate(invocation):
        raise Killed()

    with pytest.raises(Killed):
        host.machine(host.desired("2"), answers_gate=killed_gate).converge()
    assert state(host)["invocation_id"] == host.systemctl.props["InvocationID"]
    with pytest.raises(LifecycleFailure) as failure:
        host.machine(host.desired("2")).converge()
    assert "did NOT apply its own change" in failure.value.msg and failure.value.result["rolled_back"]
    assert "--v 1" in host.read(host.unit)
    assert state(host)["invocation_id"] == host.systemctl.props["InvocationID"] == manifest(host)["invocation_id"]


def test_a_change_that_failed_its_gate_without_rollback_is_never_kept_by_a_later_run(host):
    """rollback: false, a failing gate: the state file names the started invocation (its start was proven), but its
    files are not the last good set: every later run gates it again, and never keeps it unjudged."""
    deployed(host)
    kept = manifest(host)["files"][host.unit]["sha256"]

    def wrong(invocation):
        return {"failed": True, "msg": "answers differ"}

    for _run in range(2):
        with pytest.raises(LifecycleFailure):
            host.machine(host.desired("2", rollback=False), answers_gate=wrong).converge()
        host.age_everything()
    assert manifest(host)["files"][host.unit]["sha256"] == kept
    machine = host.machine(host.desired("2", rollback=False))
    assert machine.due()["action"] == "verify_only" and machine.plan.unkept_set


def test_files_changed_by_hand_then_a_restart_outside_are_gated_before_they_are_kept(host):
    deployed(host)
    host.write(host.nccl, "NCCL_P2P_LEVEL=NVL\n")
    restart_outside(host)
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "verify_only"
    assert any("not the last good set" in notice for notice in result["notices"])
    assert manifest(host)["invocation_id"] == host.systemctl.props["InvocationID"]


@pytest.mark.parametrize("release", ["1.0.0", "2.0.0", "2.0.0 restarted outside"])
def test_a_host_of_the_layout_before_keeps_working_and_moves_on_the_first_run(host, release):
    """The manifest names the verified invocation (no reference to the state file); 1.0.0 kept no state file of
    its own, 2.0.0's names the same invocation, or a later one sglang_service started. The first run restarts and
    re-verifies nothing, writes the new layout (the manifest refers to the state file); the next is a no-op."""
    host.machine(host.desired("1", state_dir="")).converge()
    host.age_everything()
    old = json.loads(host.read(host.last_good + "/manifest.json"))
    old.pop("verified", None)
    host.write(host.last_good + "/manifest.json", _last_good.manifest_text(old), age=100)
    path = StateFile(host.state_dir).path(host.service + ".service")
    if release == "1.0.0":
        os.unlink(path)
    inv = restart_outside(host) if "outside" in release else host.systemctl.props["InvocationID"]
    assert _state_file.legacy_manifest(manifest(host))
    commands = list(host.systemctl.commands)
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "keep_only", result["actions"]
    assert not any("never verified" in notice for notice in result["notices"])
    assert host.systemctl.commands == commands and host.systemctl.props["InvocationID"] == inv
    assert manifest(host)["verified"]["state_file"] == path and state(host)["invocation_id"] == inv
    assert manifest(host)["invocation_id"] == inv
    host.age_everything()
    before = host.snapshot()
    assert host.machine(host.desired("1")).converge()["changed"] is False
    assert host.snapshot() == before


def test_the_one_rule():
    assert _state_file.verified_ids(None, {}) == []
    new_layout = {"invocation_id": "b", "files": {}, "verified": {"state_file": "/s"}}
    assert _state_file.verified_ids({"invocation_id": "a"}, new_layout) == ["a"]
    # a manifest of the layout before names a verified invocation too (read the old layout)
    assert _state_file.verified_ids({"invocation_id": "a"}, {"invocation_id": "b", "files": {}}) == ["a", "b"]
    assert _state_file.verified_ids({"error": "unreadable"}, dict(new_layout, verified={})) == []
    ref = _state_file.reference("/s/u.json", "a", {"state_file": {"verified_at": 5.0}})
    assert ref == {"state_file": "/s/u.json", "invocation_id": "a", "verified_at": 5.0}


def test_the_plan_reads_the_state_file_never_the_manifests_copy():
    """plan.py, a pure function: a manifest of the new layout that names another invocation than the running one
    is no reason to verify; the state file naming another is."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils._server.plan import plan, set_differs
    from test_server_plan import desired, onhost

    host = onhost(manifest_inv="old")
    host.manifest["verified"] = {"state_file": "/var/lib/gpuserve-sglang/s.service.json", "invocation_id": "old"}
    host.state_record = {"invocation_id": "inv1"}
    wanted = desired()
    wanted.state_dir = "/var/lib/gpuserve-sglang"
    result = plan(wanted, host)
    assert result.action == "none" and result.running_verified("inv1") and not result.keep_needed
    host.state_record = {"invocation_id": "old"}
    result = plan(wanted, host)
    assert result.action == "verify_only" and result.unknown_invocation and not result.running_verified("inv1")
    # the set the running invocation read is not the kept one: gated again, not kept unjudged
    host.state_record = {"invocation_id": "inv1"}
    host.manifest["files"]["/e/nccl.env"]["sha256"] = "0" * 64
    assert set_differs(host.manifest, host.files)
    result = plan(wanted, host)
    assert result.action == "verify_only" and result.unkept_set


def test_a_file_of_the_last_good_set_gone_after_a_restart_outside_is_stale(host):
    """The running invocation is verified (the state file) and a file of the last good set is gone: it may have read
    it, so the unit restarts on what is there now (a removal has no time to compare with its start)."""
    deployed(host)
    restart_outside(host)
    os.unlink(host.nccl)
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "restart" and host.nccl in result["stale"]
    assert manifest(host)["files"][host.nccl]["exists"] is False


class Recorder(object):
    """The deployment record as _record.deploy_record writes it: the Markdown and its twin, whose ``verified`` is the
    state file's copy (_state_file.reference), rewritten only when either differs."""

    def __init__(self, host):
        self.host = host
        self.md, self.json = host.p("etc/sglang/%s.md" % host.service), host.p("etc/sglang/%s.json" % host.service)
        self.calls = []

    def desired(self, version):
        desired = self.host.desired(version, record_path=self.md)
        desired.record = {"record_md_path": self.md, "record_json_path": self.json}
        return desired

    def __call__(self, verified, bench):
        inv = verified.get("invocation_id", "")
        self.calls.append(inv)
        data = {"invocation_id": inv, "verified": _state_file.reference(
            (verified.get("state_file") or {}).get("path", ""), inv, verified)}
        return _record.write_record(self.md, self.json, "# %s\n" % inv, data, self.host.p("etc/sglang/history"),
                                    self.host.service, 2)

    def names(self):
        return json.loads(self.host.read(self.json))["verified"]["invocation_id"]


def close_then_killed(monkeypatch):
    original = txn_mod.close

    def killed(directory):
        original(directory)
        raise Killed()
    monkeypatch.setattr(txn_mod, "close", killed)
    return original


class KilledOnce(Recorder):
    """The run killed as its recorder starts (before it wrote anything)."""

    def __init__(self, host):
        Recorder.__init__(self, host)
        self.kill = True

    def __call__(self, verified, bench):
        if self.kill:
            self.kill = False
            raise Killed()
        return Recorder.__call__(self, verified, bench)


def first_deployed(host, recorder):
    host.machine(recorder.desired("1"), recorder=recorder).converge()
    host.age_everything()
    assert recorder.names() == host.systemctl.props["InvocationID"]
    return host.systemctl.props["InvocationID"]


def then_a_no_op(host, recorder, inv):
    host.age_everything()
    calls = len(recorder.calls)
    assert host.machine(recorder.desired("2"), recorder=recorder, check_mode=True).converge()["changed"] is False
    result = host.machine(recorder.desired("2"), recorder=recorder).converge()
    assert result["changed"] is False and len(recorder.calls) == calls and recorder.names() == inv


def test_a_run_killed_after_its_close_leaves_the_record_naming_the_running_invocation(host, monkeypatch):
    """The transaction closed, the run killed: the record named the previous invocation and no later run rewrote
    it (the recorder ran after the close, and fired only on a start, a missing record, a benchmark)."""
    recorder = Recorder(host)
    old = first_deployed(host, recorder)
    original = close_then_killed(monkeypatch)
    with pytest.raises(Killed):
        host.machine(recorder.desired("2"), recorder=recorder).converge()
    monkeypatch.setattr(txn_mod, "close", original)
    inv = host.systemctl.props["InvocationID"]
    assert inv != old and state(host)["invocation_id"] == inv == manifest(host)["invocation_id"]
    host.age_everything()
    result = host.machine(recorder.desired("2"), recorder=recorder).converge()
    assert recorder.names() == inv == state(host)["invocation_id"], result["actions"]
    then_a_no_op(host, recorder, inv)


def test_a_run_killed_before_its_record_has_it_written_by_the_run_that_finishes_its_change(host):
    recorder = KilledOnce(host)
    recorder.kill = False
    old = first_deployed(host, recorder)
    recorder.kill = True
    with pytest.raises(Killed):
        host.machine(recorder.desired("2"), recorder=recorder).converge()
    inv = host.systemctl.props["InvocationID"]
    assert inv != old and recorder.names() == old and os.path.exists(host.last_good + "/txn.json")
    host.age_everything()
    commands = list(host.systemctl.commands)
    check = host.machine(recorder.desired("2"), recorder=recorder, check_mode=True).converge()
    assert check["changed"] and any("would write the deployment record" in act for act in check["actions"])
    result = host.machine(recorder.desired("2"), recorder=recorder).converge()
    assert "wrote the deployment record" in result["actions"] and not result["rolled_back"], result["actions"]
    assert recorder.names() == inv == state(host)["invocation_id"] and host.systemctl.commands == commands
    assert not os.path.exists(host.last_good + "/txn.json")
    then_a_no_op(host, recorder, inv)


@pytest.mark.parametrize("kill", ["after the close", "before the record"])
def test_a_group_commit_killed_leaves_or_gets_the_record_naming_the_running_invocation(host, monkeypatch, kill):
    """A group's ``finish`` (commit) goes through the same keep, record and close."""
    recorder = KilledOnce(host) if kill == "before the record" else Recorder(host)
    if kill == "before the record":
        recorder.kill = False
    old = first_deployed(host, recorder)
    host.machine(recorder.desired("2"), recorder=recorder).prepare()
    host.machine(recorder.desired("2"), recorder=recorder).restart()
    original = txn_mod.close
    if kill == "after the close":
        close_then_killed(monkeypatch)
    else:
        recorder.kill = True
    with pytest.raises(Killed):
        host.machine(recorder.desired("2"), recorder=recorder).commit()
    monkeypatch.setattr(txn_mod, "close", original)
    inv = host.systemctl.props["InvocationID"]
    assert inv != old and manifest(host)["invocation_id"] == inv
    host.age_everything()
    host.machine(recorder.desired("2"), recorder=recorder).commit()
    assert recorder.names() == inv == state(host)["invocation_id"]
    then_a_no_op(host, recorder, inv)


def test_a_rollback_leaves_the_next_run_of_the_last_good_set_a_no_op(host):
    """The record still names the invocation before the failed change (a rollback writes none): the next run of
    the restored configuration finishes no change and rewrites nothing."""
    from server_fakes import fail_start

    recorder = Recorder(host)
    old = first_deployed(host, recorder)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as failure:
        host.machine(recorder.desired("2"), recorder=recorder).converge()
    assert failure.value.result["rolled_back"] and recorder.names() == old
    host.age_everything()
    calls = len(recorder.calls)
    result = host.machine(recorder.desired("1"), recorder=recorder).converge()
    assert result["changed"] is False and result["action"] == "none" and len(recorder.calls) == calls
