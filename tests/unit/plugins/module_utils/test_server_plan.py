# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan (module_utils/_server/plan.py), a pure function of (desired, on-host): built here from plain objects,
no host, no file."""
import hashlib

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import (
    ENV, SECRETS, UNIT, Desired, FileSpec)
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.onhost import OnHost
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.plan import plan, stale_files

UNIT_TEXT = "[Service]\nExecStart=/bin/true\n"
ENV_TEXT = "SGLANG_API_KEY=sk-plan-key\n"
STARTED = 1_800_000_000


def desired(keep_secrets=False):
    files = [FileSpec("/u/s.service", UNIT_TEXT, "0644", kind=UNIT, verify_unit=True),
             FileSpec("/e/s.env", ENV_TEXT, "0600", kind=ENV),
             FileSpec("/e/s.secrets.yaml", None, "0640", kind=SECRETS, secret=True)]
    return Desired("s", files, reads=["/e/nccl.env"], install_record="/opt/rec.json", backup_dir="/b",
                   keep_secrets=keep_secrets, secrets_to_mask=["sk-plan-key"])


def state(text, mode, mtime=STARTED - 100):
    return {"exists": True, "islnk": False, "mode": mode, "owner": "root", "group": "root", "mtime": mtime,
            "sha256": hashlib.sha256(text.encode()).hexdigest()}


def onhost(active="active", invocation="inv1", manifest_inv="inv1", restore_open=None, txn=None, **files):
    paths = {"/u/s.service": state(UNIT_TEXT, "0644"), "/e/s.env": state(ENV_TEXT, "0600"),
             "/e/s.secrets.yaml": {"exists": False}, "/e/nccl.env": state("N=1\n", "0644"),
             "/opt/rec.json": state("{}", "0644")}
    # the manifest of the verified start: the files as they were then
    manifest = {"invocation_id": manifest_inv, "files": dict((p, {"exists": s["exists"]}) for p, s in paths.items())}
    paths.update(files)
    unit = {"ActiveState": active, "InvocationID": invocation, "UnitFileState": "enabled",
            "ActiveEnterTimestamp": "@%d" % STARTED if active == "active" else ""}
    return OnHost(paths, {}, {}, unit, manifest, None, txn or {}, restore_open or {}, [])


def test_an_unchanged_host_plans_nothing():
    result = plan(desired(), onhost())
    assert result.action == "none" and result.reasons == [] and result.diff == [] and not result.writes


def test_a_change_in_the_second_the_invocation_started_is_not_stale():
    assert stale_files({"/a": {"exists": True, "mtime": STARTED + 0.9}}, {}, STARTED, "inv1") == []
    assert stale_files({"/a": {"exists": True, "mtime": STARTED + 1}}, {}, STARTED, "inv1") == ["/a"]
    result = plan(desired(), onhost(**{"/e/nccl.env": state("N=2\n", "0644", STARTED + 30)}))
    assert result.action == "restart" and result.reasons == ["/e/nccl.env changed after the running invocation started"]


def test_a_file_this_invocation_had_and_is_gone_is_stale():
    result = plan(desired(), onhost(**{"/e/nccl.env": {"exists": False}}))
    assert result.stale == ["/e/nccl.env"] and result.action == "restart"


def test_an_invocation_no_verified_start_knows_is_verified_only():
    assert plan(desired(), onhost(invocation="inv9")).action == "verify_only"
    assert plan(desired(), onhost(invocation="inv9", active="failed")).action == "verify_only"


@pytest.mark.parametrize("opened", [dict(restore_open={"invocation_id": "inv1", "since": 1, "reason": "x"}),
                                    dict(txn={"id": "t", "phase": "landed", "files": {}})])
def test_an_open_restore_or_transaction_is_finished_first_also_when_stopped(opened):
    result = plan(desired(), onhost(active="inactive", invocation="", **opened))
    assert result.action == "finish_restore"
    assert "an earlier run left its rollback unfinished" in result.reasons


def test_a_transaction_verified_and_kept_is_only_closed():
    txn = {"id": "t", "phase": "verified", "invocation_id": "inv1", "files": {}}
    result = plan(desired(), onhost(txn=txn))
    assert result.action == "none" and result.txn_settled


def test_a_group_phase_takes_its_own_transaction():
    txn = {"id": "t", "phase": "landed", "files": {}}
    assert plan(desired(), onhost(txn=txn), own_txn=True).action == "none"


def test_mode_only_change_lands_and_the_diff_shows_the_mode_not_the_key():
    result = plan(desired(), onhost(**{"/e/s.env": state(ENV_TEXT, "0644")}))
    assert [spec.path for spec in result.land] == ["/e/s.env"] and result.action == "restart"
    assert result.diff[0]["before"].startswith("mode 0644") and "sk-plan-key" not in str(result.diff)


def test_stopped_unit_with_a_change_starts_and_rolls_back_on_failure():
    result = plan(desired(), onhost(active="inactive", invocation="", **{"/u/s.service": {"exists": False}}))
    assert result.action == "start" and result.rollback_applies and result.daemon_reload
    assert result.reasons == ["not running", "unit would change"]
    plain = plan(desired(), onhost(active="inactive", invocation=""))
    assert plain.action == "start" and not plain.rollback_applies


def test_the_secrets_file_is_restorable_only_with_keep_secrets():
    assert "/e/s.secrets.yaml" not in desired().restorable
    assert "/e/s.secrets.yaml" in desired(keep_secrets=True).restorable
    assert "/opt/rec.json" not in desired(keep_secrets=True).restorable
    assert "/opt/rec.json" in desired().input_files
