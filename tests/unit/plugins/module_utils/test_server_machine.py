# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's on-host state machine (module_utils/_server/machine.py) without a host: a temporary directory for
every path, a fake systemctl, a fake service runner and the real _last_good / txn / land code."""
import json
import os
import time

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import txn as txn_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import (
    HEAD_UNFINISHED, Killed, LifecycleFailure)

from server_fakes import KEY, SERVICE, Host, fail_start


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def deployed(host, version="1", **kwargs):
    """A host deployed and verified with ``version``, every file older than the running invocation."""
    host.write(host.nccl, "NCCL_P2P_LEVEL=SYS\n")
    host.write(host.site, "import os  # v1\n")
    host.write(host.record, '{"sglang": "0.5.9"}\n')
    result = host.machine(host.desired(version, **kwargs)).converge()
    host.age_everything()
    host.runners.calls[:] = []
    host.systemctl.commands[:] = []
    return result


def manifest(host):
    with open(host.last_good + "/manifest.json") as handle:
        return json.load(handle)


def test_first_deployment_lands_every_file_starts_and_keeps_the_set(host):
    result = deployed(host)
    assert result["action"] == "start" and result["changed"]
    assert host.read(host.unit).endswith("--v 1\n")
    assert oct(os.stat(host.env).st_mode & 0o777) == "0o600"
    assert oct(os.stat(host.secrets).st_mode & 0o777) == "0o640"
    assert oct(os.stat(host.launcher).st_mode & 0o777) == "0o755"
    data = manifest(host)
    assert data["invocation_id"] == "inv1"
    assert sorted(data["files"]) == sorted([host.unit, host.env, host.secrets, host.launcher, host.nccl, host.site,
                                            host.record])
    assert data["files"][host.nccl]["restorable"] and "restorable" not in data["files"][host.record]
    assert "restorable" not in data["files"][host.secrets]   # not kept unless keep_secrets
    assert not os.path.exists(host.last_good + "/txn.json")
    assert result["inputs"]["mismatches"] == [] and result["inputs"]["files"][host.env] == "withheld"
    assert host.systemctl.props["UnitFileState"] == "enabled"


def test_an_unchanged_host_is_one_call_that_writes_nothing(host):
    deployed(host)
    before = host.snapshot()
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "none" and not result["changed"]
    assert result["reasons"] == [] and result["diff"] == []
    assert host.snapshot() == before
    assert host.systemctl.commands == []
    assert host.runners.calls == [("started", False)]     # the running invocation verified, not restarted


def test_a_change_lands_atomically_restarts_once_and_keeps_the_new_set(host):
    deployed(host)
    result = host.machine(host.desired("2")).converge()
    assert result["action"] == "restart"
    assert host.runners.calls == [("restarted", False)]
    assert host.systemctl.commands == ["daemon-reload"]
    assert host.read(host.unit).endswith("--v 2\n") and "V=2" in host.read(host.env)
    assert manifest(host)["invocation_id"] == "inv2"
    assert not os.path.exists(host.last_good + "/txn.json")
    assert not [name for name in os.listdir(host.last_good) if name.startswith("txn-")]
    # no temporary file left beside the landed ones
    assert not [n for n in os.listdir(os.path.dirname(host.env)) if n.startswith(".gpuserve-")]


def test_the_unit_replaced_is_kept_timestamped_and_a_hand_made_one_once_as_orig(host):
    host.write(host.unit, "[Service]\nExecStart=/root/ml-env/bin/python3 -m sglang --tp 8\n")
    host.systemctl.new_invocation()
    host.age_everything()
    assert host.machine(host.desired("1")).converge()["action"] == "restart"   # the takeover
    orig = os.path.join(host.backup, SERVICE + ".service.orig")
    assert "sglang --tp 8" in host.read(orig)
    for version in ("2", "3", "4"):
        host.machine(host.desired(version)).converge()
    copies = sorted(n for n in os.listdir(host.backup) if n.startswith(SERVICE + ".service.2"))
    assert len(copies) == 2                         # backup_keep
    assert "sglang --tp 8" in host.read(orig)       # never overwritten


def test_keep_only_when_a_kept_copy_is_gone_no_restart(host):
    deployed(host)
    entry = manifest(host)["files"][host.nccl]
    os.unlink(entry["kept_at"])
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "keep_only"
    assert host.runners.calls == [("started", False)]
    assert os.path.exists(entry["kept_at"])


def test_a_unit_refused_by_systemd_analyze_lands_nothing(host):
    deployed(host)
    before = host.snapshot()

    def refuse(argv, timeout=None):
        assert os.path.basename(argv[-1]) == SERVICE + ".service"
        return 1, "", "%s.service:3: Unknown key name 'ExecStrat'" % SERVICE

    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2"), run=refuse).converge()
    assert "systemd-analyze verify refused" in info.value.msg and "Nothing was changed" in info.value.msg
    after = host.snapshot()
    assert {p: v for p, v in after.items() if host.last_good not in p} == \
        {p: v for p, v in before.items() if host.last_good not in p}
    assert not os.path.exists(host.last_good + "/txn.json")
    assert host.runners.calls == []


def test_a_failing_gate_restores_every_file_it_touched_and_verifies_the_restored_server(host):
    deployed(host)
    good = {path: host.read(path) for path in (host.unit, host.env, host.launcher, host.nccl, host.site)}
    # another role changed nccl.env and sitecustomize.py after the invocation started (stale: one restart)
    host.write(host.nccl, "NCCL_P2P_LEVEL=NVL\n")
    host.write(host.site, "import os  # v2\n")
    answers = []

    def answers_gate(invocation_id):
        answers.append(invocation_id)
        return {"failed": True, "msg": "correctness gate: 8 of 8 prompts answer otherwise than the baseline"}

    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2", launcher="launcher 2\n"), answers_gate=answers_gate).converge()
    msg = info.value.msg
    assert answers == ["inv2"]
    assert "%s: the new configuration failed verification: correctness gate: 8 of 8" % SERVICE in msg
    assert "Rolled back: the last good configuration serves again (invocation inv3, /health 200)." in msg
    for path, text in good.items():
        assert host.read(path) == text, path
        assert path in msg                  # named as put back
    assert host.runners.calls == [("restarted", False), ("restarted", False)]
    assert host.systemctl.commands[-2:] == ["stop %s.service" % SERVICE, "daemon-reload"]
    assert manifest(host)["invocation_id"] == "inv3"
    assert not os.path.exists(host.last_good + "/restore.json")
    assert not os.path.exists(host.last_good + "/txn.json")
    assert info.value.result["rolled_back"] is True
    assert KEY not in json.dumps(info.value.result) and KEY not in msg


@pytest.mark.parametrize("keep_secrets", [False, True])
def test_the_secrets_file_is_not_restored_unless_keep_secrets(host, keep_secrets):
    deployed(host, keep_secrets=keep_secrets)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2", key="sk-rotated-key-2", keep_secrets=keep_secrets)).converge()
    assert "Rolled back" in info.value.msg
    assert "V=1" in host.read(host.env)
    expected = KEY if keep_secrets else "sk-rotated-key-2"
    assert host.read(host.secrets) == "api-key: %s\n" % expected
    assert "Journal of the failed invocation (last lines):" in info.value.msg
    assert KEY not in info.value.msg and "sk-rotated-key-2" not in info.value.msg


def test_a_rollback_killed_after_the_stop_is_finished_by_the_next_call_with_the_unit_stopped(host):
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))

    def killed():
        raise Killed()

    host.systemctl.on_stop = killed
    with pytest.raises(Killed):
        host.machine(host.desired("2")).converge()
    host.systemctl.on_stop = None
    assert host.systemctl.props["ActiveState"] == "inactive"
    assert os.path.exists(host.last_good + "/restore.json")
    assert "--v 2" in host.read(host.unit)        # the mix a killed rollback leaves
    # the next call, whatever it was asked (here: the same change again), finishes the rollback first
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert info.value.result["action"] == "finish_restore"
    assert HEAD_UNFINISHED in info.value.msg
    assert "Rolled back: the last good configuration serves again" in info.value.msg
    assert "--v 1" in host.read(host.unit) and "V=1" in host.read(host.env)
    assert host.systemctl.props["ActiveState"] == "active"
    assert not os.path.exists(host.last_good + "/restore.json")
    assert not os.path.exists(host.last_good + "/txn.json")
    # and the call after it applies the change
    result = host.machine(host.desired("2")).converge()
    assert result["action"] == "restart" and "--v 2" in host.read(host.unit)


def test_an_open_transaction_on_a_host_without_a_manifest_is_restored_from_its_copies(host):
    hand_unit = "[Service]\nExecStart=/root/ml-env/bin/python3 -m sglang --tp 8\n"
    host.write(host.unit, hand_unit)
    host.write(host.env, "HAND=1\n")
    host.systemctl.new_invocation()
    host.age_everything()

    def killed(state):
        raise Killed()

    host.runners.hooks.append(killed)
    with pytest.raises(Killed):                 # killed during the restart of the takeover
        host.machine(host.desired("1")).converge()
    assert not os.path.exists(host.last_good + "/manifest.json")
    assert txn_mod.load(host.last_good)["phase"] in ("landed", "restarting")
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("1")).converge()
    assert HEAD_UNFINISHED in info.value.msg
    assert "this host has no last-good manifest yet" in info.value.msg
    assert host.read(host.unit) == hand_unit and host.read(host.env) == "HAND=1\n"
    assert host.read(host.launcher) is None         # it did not exist before the change: removed
    assert not os.path.exists(host.last_good + "/txn.json")
    assert manifest(host)["invocation_id"] == host.systemctl.props["InvocationID"]


def test_an_unknown_invocation_is_verified_inside_the_rollbacks_reach(host):
    deployed(host)
    host.systemctl.new_invocation()    # a crash restarted by systemd, or a killed run's restart
    host.age_everything()
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "verify_only"
    assert host.runners.calls == [("started", False)]
    assert any("was never verified by this role" in n for n in result["notices"])
    assert manifest(host)["invocation_id"] == host.systemctl.props["InvocationID"]
    # and when it fails, the last good set goes back
    host.systemctl.new_invocation()
    host.age_everything()
    host.runners.hooks.append(lambda state: (False, {"msg": "HiCache missing on rank 1", "journal_tail": []}))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("1")).converge()
    assert "which no run had verified (a killed run left it), failed verification" in info.value.msg
    assert "Rolled back: the last good configuration serves again" in info.value.msg


def test_a_stale_invocation_restarts_once(host):
    deployed(host)
    later = time.time() + 5
    for path in (host.nccl, host.site):
        os.utime(path, (later, later))
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "restart"
    assert host.runners.calls == [("restarted", False)]
    assert "%s changed after the running invocation started" % host.nccl in result["reasons"]


def test_first_deployment_failing_has_no_rollback_and_says_so(host):
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("1")).converge()
    assert "No rollback: there is no previous unit (first deployment)." in info.value.msg
    assert not os.path.exists(host.last_good + "/txn.json")


def test_no_rollback_when_rollback_is_false(host):
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2", rollback=False)).converge()
    assert "No rollback: sglang_rollback is false." in info.value.msg
    assert "--v 2" in host.read(host.unit)
    assert not os.path.exists(host.last_good + "/txn.json")


def test_rollback_failing_too_leaves_the_restore_open(host):
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    host.runners.hooks.append(fail_start(host.systemctl, msg="still broken"))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert "ROLLBACK FAILED too: the previous configuration did not verify: still broken" in info.value.msg
    assert os.path.exists(host.last_good + "/restore.json")


def test_check_mode_writes_nothing_and_the_diff_holds_no_secret(host):
    deployed(host)
    before = host.snapshot()
    result = host.machine(host.desired("2", key="sk-rotated-key-2"), check_mode=True).converge()
    assert host.snapshot() == before
    assert result["changed"] and result["action"] == "restart"
    assert host.runners.calls == [] and host.systemctl.commands == []
    by_path = {entry["before_header"]: entry for entry in result["diff"]}
    assert set(by_path) == {host.unit, host.env, host.secrets}
    assert by_path[host.secrets]["before"].startswith("<not shown: it holds the keys>")
    assert "V=2" in by_path[host.env]["after"]
    text = json.dumps(result)
    assert KEY not in text and "sk-rotated-key-2" not in text
    assert "--v 2" in by_path[host.unit]["after"] and "--v 1" in by_path[host.unit]["before"]


def test_check_mode_lists_the_stray_servers_a_real_run_would_stop_and_stops_none(host):
    """sglang_stop_processes listed in check mode the strays it would stop; the module that replaced it in the
    role (sglang_server, stop_processes) stopped them in a real run and said nothing of them in check mode (old
    code: no "strays" in the check's result). Now check mode lists them (result "would stop"), stops none."""
    deployed(host)
    found = [{"pid": 4242, "cmdline": "python3 -m sglang.launch_server --port 30001", "result": "would stop"}]
    stopped = []

    def strays():
        stopped.append("asked")
        return [dict(proc) for proc in found]
    result = host.machine(host.desired("1"), check_mode=True, stop_strays=strays).converge()
    assert result["strays"] == found and stopped == ["asked"]
    assert "would stop pid 4242 python3 -m sglang.launch_server --port 30001" in result["actions"]
    assert result["changed"] is True   # a real run would stop it
    assert host.runners.calls == [] and host.systemctl.commands == []
    quiet = host.machine(host.desired("1"), check_mode=True, stop_strays=lambda: []).converge()
    assert quiet["strays"] == [] and quiet["changed"] is False


def test_state_verified_writes_nothing(host):
    deployed(host)
    before = host.snapshot()
    result = host.machine(host.desired("1")).verified()
    assert host.runners.calls == [("verified", True)]     # the runner gets a state store that writes nothing
    assert host.snapshot() == before and not result["changed"]


def test_state_due_reasons(host):
    deployed(host)
    result = host.machine(host.desired("1")).due()
    assert result["due"] is False and result["reasons"] == []
    result = host.machine(host.desired("2", launcher="launcher 2\n")).due()
    assert result["reasons"] == ["unit would change", "environment file would change",
                                 "launcher %s would change" % host.launcher]
    result = host.machine(host.desired("1", key="sk-rotated-key-2")).due()
    assert result["reasons"] == ["environment file would change", "secrets file would change"]
    later = time.time() + 5
    os.utime(host.nccl, (later, later))
    assert host.machine(host.desired("1")).due()["reasons"] == [
        "%s changed after the running invocation started" % host.nccl]
    host.systemctl.props["ActiveState"] = "inactive"
    assert host.machine(host.desired("1")).due()["reasons"] == ["not running"]
    assert host.runners.calls == []


def test_a_file_replaced_by_another_writer_before_the_start_is_not_claimed(host):
    deployed(host)

    def writer(state):
        with open(host.env, "a") as handle:
            handle.write("INTRUDER=1\n")

    host.runners.hooks.append(writer)
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert info.value.msg.startswith("NOT DEPLOYED on node-a: ")
    assert host.env in info.value.msg and KEY not in info.value.msg


def test_a_benchmark_regression_restores_and_the_record_follows_a_verified_start(host):
    deployed(host)
    records = []

    def bench(only_without_baseline):
        return {"ran": True, "bench": {"output_throughput": 50.0}, "regression": True,
                "gate": {"regression": True}, "msg": "benchmark regression: 50.0 output tok/s"}

    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2"), bench_gate=bench,
                     recorder=lambda verified, b: records.append(verified) or {"changed": True}).converge()
    assert "benchmark regression" in info.value.msg and "Rolled back" in info.value.msg
    assert records == []       # no record of a change that did not pass
    ok = host.machine(host.desired("2"), bench_gate=lambda only: {"ran": True, "regression": False,
                                                                  "bench": {}, "gate": {}},
                      recorder=lambda verified, b: records.append((verified["invocation_id"], b["ran"]))
                      or {"changed": True}).converge()
    assert records == [(host.systemctl.props["InvocationID"], True)]
    assert "wrote the deployment record" in ok["actions"]


def test_group_phases_prepare_restart_commit(host):
    deployed(host)
    desired = host.desired("2")
    prepared = host.machine(desired).prepare()
    assert prepared["restart_due"] is True and host.runners.calls == []
    assert os.path.exists(host.last_good + "/txn.json")       # open until commit or restore
    restarted = host.machine(desired, force_restart=True).restart()
    assert restarted["verified"] and host.runners.calls == [("restarted", False)]
    committed = host.machine(desired).commit()
    assert manifest(host)["invocation_id"] == host.systemctl.props["InvocationID"]
    assert not os.path.exists(host.last_good + "/txn.json") and committed["inputs"]["mismatches"] == []


def test_group_restore_puts_the_last_good_set_back(host):
    deployed(host)
    desired = host.desired("2")
    host.machine(desired).prepare()
    host.machine(desired).restart()
    result = host.machine(desired).restore_phase("node b failed its restart")
    assert result["rolled_back"] and "--v 1" in host.read(host.unit)
    assert "Rolled back: the last good configuration serves again" in result["msg"]
    assert not os.path.exists(host.last_good + "/txn.json")


def test_group_restore_before_any_restart_puts_the_files_back_and_stops_nothing(host):
    # the group's first verdict was a no (a node refused, unreachable, its lease held): the nodes that prepared
    # put their files back; their servers never stopped and still run what they read
    deployed(host)
    invocation = host.systemctl.props["InvocationID"]
    desired = host.desired("2")
    host.machine(desired).prepare()
    assert "--v 2" in host.read(host.unit)
    host.systemctl.commands[:] = []
    result = host.machine(desired).restore_phase("node b is not in the play any more")
    assert "--v 1" in host.read(host.unit) and "--v 2" not in host.read(host.unit)
    assert host.runners.calls == []
    assert not any(cmd.startswith("stop") for cmd in host.systemctl.commands)
    assert "daemon-reload" in host.systemctl.commands
    assert host.systemctl.props["InvocationID"] == invocation
    assert "Nothing was stopped or restarted" in result["msg"]
    assert not os.path.exists(host.last_good + "/txn.json")


def test_a_change_killed_after_it_landed_and_before_any_restart_is_undone_and_the_next_call_applies_its_own(host):
    deployed(host)
    invocation = host.systemctl.props["InvocationID"]
    host.machine(host.desired("2")).prepare()          # landed, then the run was killed before its restart
    assert txn_mod.load(host.last_good)["phase"] == "landed"
    result = host.machine(host.desired("3")).converge()
    assert "--v 3" in host.read(host.unit)
    assert host.runners.calls == [("restarted", False)]    # one restart, onto this call's change
    assert any("never restarted the server" in notice for notice in result.get("notices", [])) or \
        any("never restarted" in action for action in result["actions"])
    assert host.systemctl.props["InvocationID"] != invocation
    assert not os.path.exists(host.last_good + "/txn.json")


def test_the_restored_set_is_verified_without_the_new_configurations_expectations(host):
    # sglang_verify_expect / extra fail patterns belong to the change: the restored set is verified as it ran
    deployed(host)
    host.runners.restores = 0
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure):
        host.machine(host.desired("2")).converge()
    assert host.runners.restores == 1     # the rollback's runner only (the module drops expect/extra patterns there)


def test_the_commit_phase_reports_the_restart_phases_restart(host):
    # sglang_server_restart after a group's run is the restart, not the commit's verification: playbooks/restart.yml
    # restarts an "unchanged" host again when it is not changed
    deployed(host)
    desired = host.desired("2")
    host.machine(desired).prepare()
    restarted = host.machine(desired, force_restart=True).restart()
    committed = host.machine(desired).commit()
    assert committed["restart"]["changed"] is True
    assert committed["restart"]["invocation_id"] == restarted["restart"]["invocation_id"]


def test_a_restart_due_on_another_node_only_is_reported_by_the_commit_too(host):
    deployed(host)
    desired = host.desired("1")
    assert host.machine(desired).prepare()["restart_due"] is False   # nothing lands on this node
    host.machine(desired).restart(force=True)
    committed = host.machine(desired).commit()
    assert committed["restart"]["changed"] is True
    assert not os.path.exists(host.last_good + "/txn.json")


def test_the_failures_journal_is_read_again_with_the_invocations_last_lines_masked(host):
    # SGLang's own last line ("Received sigquit from a child process") may come after the verification gave up,
    # on a busy host or during the rollback's stop: the message reads the failed invocation's journal again
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    asked = []

    def run(argv, timeout=None):
        if argv[0] == "journalctl":
            asked.append(argv[1])
            return 0, "RuntimeError: Not enough host memory available\nReceived sigquit from a child process %s\n" \
                % KEY, ""
        return 0, "", ""
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2"), run=run).converge()
    assert asked and asked[0].startswith("_SYSTEMD_INVOCATION_ID=")
    assert "Received sigquit from a child process" in info.value.msg and KEY not in info.value.msg


# ---- two units on one host: each its own state (issue 47 defect 1) ----------------------------------------------
def _two_units(tmp_path):
    """Two servers on one host (two models on 4 GPUs each): one backup directory, nccl.env, sitecustomize and
    install record shared, each unit its own files and systemd state; both deployed by their own runs."""
    first, second = Host(tmp_path, "sglang-a"), Host(tmp_path, "sglang-b")
    first.write(first.nccl, "NCCL_P2P_LEVEL=SYS\n")
    first.write(first.site, "import os  # v1\n")
    first.write(first.record, '{"sglang": "0.5.9"}\n')
    first.machine(first.desired("1")).converge()
    second.machine(second.desired("1")).converge()
    first.age_everything()
    second.age_everything()
    for unit in (first, second):
        unit.runners.calls[:] = []
        unit.systemctl.commands[:] = []
    return first, second


def test_two_units_on_one_host_are_each_a_no_op(tmp_path):
    """7d0d57e: one shared last-good directory; the second unit's keep replaced the first's manifest, and every
    later run of either verified 'the running invocation ... never verified by this role' (changed)."""
    first, second = _two_units(tmp_path)
    assert first.last_good != second.last_good
    for unit in (first, second, first, second):
        result = unit.machine(unit.desired("1")).converge()
        assert result["action"] == "none" and not result["changed"], result["notices"]
        assert unit.runners.calls[-1] == ("started", False)
    assert manifest(first)["invocation_id"] == "inv1" and manifest(second)["invocation_id"] == "inv1"
    assert first.unit in manifest(first)["files"] and second.unit not in manifest(first)["files"]


def test_one_unit_fails_and_rolls_back_the_other_untouched(tmp_path):
    first, second = _two_units(tmp_path)
    before = dict((p, v) for p, v in second.snapshot().items() if "sglang-b" in p)
    first.runners.hooks.append(fail_start(first.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        first.machine(first.desired("2")).converge()
    assert "Rolled back" in info.value.msg and first.read(first.unit).endswith("--v 1\n")
    assert dict((p, v) for p, v in second.snapshot().items() if "sglang-b" in p) == before
    assert second.systemctl.commands == [] and second.runners.calls == []
    result = second.machine(second.desired("1")).converge()
    assert result["action"] == "none" and not result["changed"]


def test_a_change_of_one_unit_in_progress_is_not_undone_by_the_other(tmp_path):
    first, second = _two_units(tmp_path)
    machine = first.machine(first.desired("2"))
    machine.read()
    machine.prepare_files()                     # the first unit's change landed; its run is still going
    assert os.path.exists(first.last_good + "/txn.json")
    result = second.machine(second.desired("1")).converge()
    assert result["action"] == "none" and not result["changed"]
    assert first.read(first.unit).endswith("--v 2\n") and os.path.exists(first.last_good + "/txn.json")


def test_the_shared_layout_moves_to_the_unit_without_a_restart(tmp_path, host):
    """A host deployed before issue 47: the state in <backup>/last-good. The first run moves it (one rename),
    restarts nothing, and the kept copies still restore."""
    deployed(host)
    legacy = host.backup + "/last-good"
    os.rename(host.last_good, legacy)
    check = host.machine(host.desired("1"), check_mode=True).converge()
    assert check["action"] == "none" and check["changed"] and os.path.isdir(legacy)
    assert any("would move" in a for a in check["actions"])
    result = host.machine(host.desired("1")).converge()
    assert result["action"] == "none" and host.runners.calls[-1] == ("started", False)
    assert not os.path.exists(legacy) and manifest(host)["invocation_id"] == "inv1"
    assert any("per-unit layout" in a for a in result["actions"])
    again = host.machine(host.desired("1")).converge()
    assert not again["changed"]
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert "Rolled back" in info.value.msg and "V=1" in host.read(host.env)


def test_the_shared_layout_of_another_unit_is_left_to_it(tmp_path, host):
    deployed(host)
    legacy = host.backup + "/last-good"
    os.rename(host.last_good, legacy)
    other = Host(tmp_path, "sglang-other")
    other.machine(other.desired("1")).converge()
    assert os.path.isdir(legacy) and manifest(other)["invocation_id"] == "inv1"
    host.machine(host.desired("1")).converge()
    assert not os.path.exists(legacy) and os.path.isdir(host.last_good)


# ---- rollouts through the machine (issue 47 defects 6, 7) --------------------------------------------------------
def test_a_forced_restart_is_a_phase_of_the_machine_and_the_next_run_is_a_no_op(host):
    """7d0d57e: restart.yml restarted an unchanged host with sglang_service, outside the machine; the next no-op
    deploy found an invocation the last good set did not name and verified it again (changed)."""
    deployed(host)
    result = host.machine(host.desired("1"), force_restart=True).converge()
    assert result["action"] == "restart" and host.runners.calls == [("restarted", False)]
    assert manifest(host)["invocation_id"] == host.systemctl.props["InvocationID"] == "inv2"
    again = host.machine(host.desired("1")).converge()
    assert again["action"] == "none" and not again["changed"]


def test_a_forced_restart_that_fails_rolls_back(host):
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("1"), force_restart=True).converge()
    assert "Rolled back" in info.value.msg and info.value.result["serving_verified"] is True


def test_serving_verified_says_whether_a_rollout_may_put_the_worker_back(host):
    deployed(host)

    # refused before anything restarted: the verified invocation still runs
    def refuse(argv, timeout=None):
        return 1, "", "Unknown key name 'ExecStrat'"
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2"), run=refuse).converge()
    assert info.value.result["serving_verified"] is True
    # a change that failed and could not be rolled back
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("3", rollback=False)).converge()
    assert info.value.result["serving_verified"] is False


# ---- a kept copy gone (issue 47 defect 4) -------------------------------------------------------------------------
def _lose_kept_copy(host, path):
    data = manifest(host)
    os.unlink(data["files"][path]["kept_at"])


def test_a_lost_kept_copy_goes_back_from_the_changes_own_copy(host):
    """7d0d57e skipped the transaction's copy of every restorable file, so a lost kept copy left the failing
    environment file in place, and the result still said 'Rolled back'."""
    deployed(host)
    _lose_kept_copy(host, host.env)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert "Rolled back" in info.value.msg
    assert "V=1" in host.read(host.env) and host.read(host.unit).endswith("--v 1\n")


def test_a_lost_kept_copy_of_a_file_the_change_did_not_touch_is_no_loss(host):
    deployed(host)
    _lose_kept_copy(host, host.nccl)             # nccl.env is as the last good set had it
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert "Rolled back" in info.value.msg and host.read(host.nccl) == "NCCL_P2P_LEVEL=SYS\n"


def test_a_file_that_cannot_go_back_is_no_rollback(host):
    """nccl.env changed after the last verified start (another role) and its kept copy is gone: it cannot go back;
    the result says so and never 'Rolled back'."""
    deployed(host)
    _lose_kept_copy(host, host.nccl)
    host.write(host.nccl, "NCCL_P2P_LEVEL=NVL\n")
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2")).converge()
    assert "Rolled back" not in info.value.msg and "ROLLBACK INCOMPLETE" in info.value.msg
    assert host.nccl in info.value.msg and not info.value.result["rolled_back"]


def test_a_change_that_removes_the_key_rolls_back_with_the_key(host):
    """Issue 47 defect 8, 7d0d57e: the secrets file was neither kept nor copied, so a change that removed the API key
    and failed restored a unit whose --config file was gone."""
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2", key="")).converge()
    assert "Rolled back" in info.value.msg
    assert host.read(host.secrets) == "api-key: %s\n" % KEY
    assert oct(os.stat(host.secrets).st_mode & 0o777) == "0o640"
    assert not [n for n in os.listdir(host.last_good) if n.startswith("txn-")]   # the copy went with the change


def test_a_rotated_key_is_still_never_put_back(host):
    deployed(host)
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure):
        host.machine(host.desired("2", key="sk-rotated-key-2")).converge()
    assert host.read(host.secrets) == "api-key: sk-rotated-key-2\n"


def test_the_answers_gate_never_fails_a_server_nobody_changed(host):
    """Issue 47 defect 10, 7d0d57e: the answers gate ran on every no-op run, under live traffic no router drained,
    and a flipped answer failed the run (a group: rolled back a server nobody changed). Now it reports."""
    deployed(host)
    before = host.snapshot()

    def flipped(invocation_id):
        return {"failed": True, "msg": "prompt 3 answered otherwise"}

    result = host.machine(host.desired("1"), answers_gate=flipped).converge()
    assert result["action"] == "none" and not result["rolled_back"]
    assert any("reported only" in n and "prompt 3" in n for n in result["notices"])
    assert host.systemctl.commands == [] and host.snapshot() == before
    host.runners.hooks.append(None)
    with pytest.raises(LifecycleFailure) as info:       # after a change it still rolls back
        host.machine(host.desired("2"), answers_gate=flipped).converge()
    assert "Rolled back" in info.value.msg


def test_no_launcher_is_no_directory_and_every_run_works(host):
    """Issue 47 defect 10, 7d0d57e: sglang_launch_script "" (allowed without a key) gave the directory "" (its
    dirname) to create, and every run failed."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import Desired
    params = {"name": "sglang-t", "unit": {"path": host.unit, "content": "[Service]\nExecStart=/bin/true\n"},
              "env": {"path": host.env, "content": "A=1\n"}, "secrets": {"path": host.secrets, "content": ""},
              "launcher": {"path": "", "content": ""}, "backup_dir": host.backup,
              "dirs": [{"path": host.p("etc/sglang"), "mode": "0755"}, {"path": "", "mode": "0755"}]}
    desired = Desired.from_params(params)
    assert [d.path for d in desired.dirs] == [host.p("etc/sglang")]
    for spec in desired.files + desired.dirs:
        spec.owner, spec.group = host_owner(host)
    result = host.machine(desired).converge()
    assert result["action"] == "start" and not os.path.exists(host.launcher)


def host_owner(host):
    from server_fakes import GROUP, USER
    return USER, GROUP


def test_the_kept_environment_file_holds_no_token_and_a_rollback_keeps_the_rotated_one(host):
    """Issue 48, 7d0d57e: the kept copy of the environment file held every value of sglang_env (an HF_TOKEN), and a
    rollback after a rotation put the old token back. Now the kept copy has secret-named values redacted and the
    restore takes the current file's line of each."""
    deployed(host)
    for name in os.listdir(host.last_good):
        with open(os.path.join(host.last_good, name), "rb") as handle:
            assert KEY.encode() not in handle.read(), name
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(host.desired("2", key="sk-rotated-key-3")).converge()
    assert "Rolled back" in info.value.msg
    env = host.read(host.env)
    assert "V=1\n" in env and "SGLANG_API_KEY=sk-rotated-key-3\n" in env and KEY not in env
    assert env.startswith("# Managed\n")


def test_a_rollback_stops_the_companion_that_holds_the_gpus_before_the_restored_start(host):
    """The Weight Cache Daemon (sglang_weight_cache) holds the failed set's weights on the GPUs; the restored unit,
    which may load its own, starts only after it stopped (old code: the restored start ran beside the daemon's
    weights: out of GPU memory on a real host)."""
    deployed(host)
    desired = host.desired("2")
    desired.companion_units = ["sglang-kimi-weight-cache.service"]
    host.runners.hooks.append(fail_start(host.systemctl))
    with pytest.raises(LifecycleFailure) as info:
        host.machine(desired).converge()
    assert "Rolled back" in info.value.msg
    commands = host.systemctl.commands
    stops = [i for i, command in enumerate(commands) if command == "stop sglang-kimi-weight-cache.service"]
    assert len(stops) == 1, commands
    assert commands.index("stop %s" % host.desired("1").unit) < stops[0], commands
    assert any("stopped sglang-kimi-weight-cache.service (rollback" in a for a in info.value.result["actions"])
