# SPDX-License-Identifier: GPL-3.0-or-later
"""The router's on-host life (module_utils/_router_service.py) on the server's mechanism, without a host: a
temporary directory for every path, a fake systemctl that follows restarts and crashes, a fake router
verification (_router.run's place) and the real _server Desired / plan / txn / land / last-good code."""
import json
import os
import time

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._router import RouterError
from ansible_collections.gpuserve.sglang.plugins.module_utils._router_service import (
    RECORD_MARK, RouterLifecycle, RouterRunner, UnitDown, down_reason, record_text, router_desired, write_record)
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import LifecycleFailure

SERVICE = "sglang-router"
KEY = "router-key-123456"
URL = "http://127.0.0.1:30000"
WORKERS = ["http://w1:30000", "http://w2:30000"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the router's files are root's (chown)")


class FakeSystemctl(object):
    def __init__(self):
        self.props = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "InvocationID": "",
                      "ActiveEnterTimestamp": "", "UnitFileState": "disabled", "MainPID": "0", "NRestarts": "0",
                      "Result": "success"}
        self.commands = []
        self.invocations = 0
        self.crash_next = False      # the next start's process exits at once (a flag its release refuses)

    def show_props(self, unit, properties=None):
        return dict(self.props)

    def _start(self):
        self.invocations += 1
        self.props.update(ActiveState="active", SubState="running", InvocationID="inv%d" % self.invocations,
                          MainPID=str(100 + self.invocations), ActiveEnterTimestamp="@%d" % (int(time.time()) + 1),
                          NRestarts="0")
        if self.crash_next:
            self.props.update(ActiveState="activating", SubState="auto-restart", Result="exit-code")

    def restart(self, unit):
        self.commands.append("restart " + unit)
        self._start()

    def start(self, unit):
        self.commands.append("start " + unit)
        self._start()

    def stop(self, unit):
        self.commands.append("stop " + unit)
        self.props.update(ActiveState="inactive", SubState="dead", InvocationID="", MainPID="0")

    def enable(self, unit):
        self.commands.append("enable " + unit)
        self.props["UnitFileState"] = "enabled"

    def daemon_reload(self):
        self.commands.append("daemon-reload")


class Router(object):
    """One router host under ``root``: its paths, the fake systemctl, the fake verification."""

    def __init__(self, root):
        self.root = str(root)
        self.unit = os.path.join(self.root, "etc/systemd/system/%s.service" % SERVICE)
        self.env = os.path.join(self.root, "etc/sglang-router/%s.env" % SERVICE)
        self.launcher = os.path.join(self.root, "usr/local/lib/gpuserve-sglang/sglang_router_launch.py")
        self.backup = os.path.join(self.root, "etc/sglang-router/backup")
        self.record = os.path.join(self.root, "etc/sglang-router/%s.md" % SERVICE)
        os.makedirs(os.path.dirname(self.unit), exist_ok=True)
        self.systemctl = FakeSystemctl()
        self.verifies = []            # (state, invocation) of each verification
        self.put_back = {}            # what the next reconcile puts back
        self.not_ready = 0            # how many more times the router does not answer yet

    def params(self, version="1", key="", rollback=True, launcher="launcher 1\n"):
        return {"name": SERVICE, "unit": {"path": self.unit, "content": "[Service]\nExecStart=/bin/router --v %s\n"
                                          % version},
                "env": {"path": self.env, "content": "# Managed\n" + ('SGLANG_ROUTER_API_KEY="%s"\n' % key
                                                                      if key else "")},
                "launcher": {"path": self.launcher, "content": launcher},
                "dirs": [{"path": os.path.dirname(self.env), "mode": "0755"}], "backup_dir": self.backup,
                "backup_keep": 2, "rollback": rollback, "api_key": key, "host_name": "gw-1",
                "record": {"path": self.record, "text": "# router\n\n| | |\n|---|---|\n| gateway | g |\n"
                           + RECORD_MARK + "\n\n## Flags\n"}}

    def verify(self, state, sleep):
        """_router.run's place: a crashed unit is seen by the runner's watch (``sleep``) while it polls."""
        self.verifies.append((state, self.systemctl.props["InvocationID"]))
        if self.systemctl.props["SubState"] == "auto-restart":
            sleep(0.5)
            raise RouterError("router %s: not ready" % URL)
        if self.not_ready:
            self.not_ready -= 1
            raise RouterError("router %s: GET /workers answered 503" % URL)
        put, self.put_back = self.put_back, {}
        listed = dict((w, {"is_healthy": True, "load": 0}) for w in WORKERS)
        return {"routers": {URL: listed}, "put_back": put, "held_out": []}

    def machine(self, params, check_mode=False):
        desired = router_desired(params)

        def factory(state, read_only=False, restored=False):
            return RouterRunner(self.systemctl, desired.unit, state, self.verify,
                                lambda: ["error: argument --cb-failure-threshold: invalid int value: 'x'",
                                         "key %s" % KEY],
                                restored=restored, sleep=lambda s: None, check_mode=check_mode)

        def recorder(verified, bench):
            return write_record(self.record, record_text(params["record"]["text"], verified, WORKERS, URL))

        return RouterLifecycle(desired, self.systemctl, lambda argv, timeout=None: (0, "", ""), factory,
                               recorder=recorder, check_mode=check_mode)

    def read(self, path):
        if not os.path.lexists(path):
            return None
        with open(path) as handle:
            return handle.read()

    def snapshot(self):
        out = {}
        for top, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = os.path.join(top, name)
                info = os.lstat(path)
                out[path] = (self.read(path) if os.path.isfile(path) else None, info.st_mode, info.st_mtime_ns)
        return out

    def age(self, seconds=100):
        then = time.time() - seconds
        for top, _dirs, files in os.walk(self.root):
            for name in files:
                os.utime(os.path.join(top, name), (then, then))
        if self.systemctl.props["ActiveState"] == "active":
            self.systemctl.props["ActiveEnterTimestamp"] = "@%d" % int(then + 10)


@pytest.fixture
def gw(tmp_path):
    return Router(tmp_path)


def deployed(gw, version="1", **kwargs):
    result = gw.machine(gw.params(version, **kwargs)).converge()
    gw.age()
    gw.systemctl.commands[:] = []
    gw.verifies[:] = []
    return result


def test_first_deployment_lands_starts_verifies_keeps_and_records(gw):
    result = deployed(gw, key=KEY)
    assert result["action"] == "start" and result["changed"]
    assert result["restart"]["action"] == "started" and result["restart"]["invocation_id"] == "inv1"
    assert oct(os.stat(gw.env).st_mode & 0o777) == "0o600" and oct(os.stat(gw.launcher).st_mode & 0o777) == "0o644"
    with open(gw.backup + "/" + SERVICE + ".last-good/manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["invocation_id"] == "inv1"
    # the environment file holds the key: never kept, no checksum shown
    assert "restorable" not in manifest["files"][gw.env] and "sha256" not in manifest["files"][gw.env]
    assert manifest["files"][gw.unit]["restorable"]
    record = gw.read(gw.record)
    assert "| action | started |" in record and "| invocation | inv1 |" in record
    assert "| http://w1:30000 | True | 0 |" in record and RECORD_MARK not in record
    assert KEY not in json.dumps(result)


def test_an_unchanged_router_is_a_noop_that_still_reconciles(gw):
    deployed(gw)
    before = gw.snapshot()
    result = gw.machine(gw.params("1")).converge()
    assert result["action"] == "none" and not result["changed"] and result["diff"] == []
    assert gw.snapshot() == before and gw.systemctl.commands == []
    assert gw.verifies == [("reconciled", "inv1")]
    # a worker an earlier run left out is put back by the same call, without a restart
    gw.put_back = {"http://w2:30000": [URL]}
    result = gw.machine(gw.params("1")).converge()
    assert result["restart"]["put_back"] == {"http://w2:30000": [URL]} and result["restart"]["action"] == "verified"
    assert gw.systemctl.commands == []


def test_a_change_restarts_once_and_keeps_the_new_set(gw):
    deployed(gw)
    result = gw.machine(gw.params("2")).converge()
    assert result["action"] == "restart" and result["reasons"] == ["unit would change"]
    assert gw.systemctl.commands == ["daemon-reload", "restart %s.service" % SERVICE]
    assert gw.read(gw.unit).endswith("--v 2\n") and not os.path.exists(gw.backup + "/" + SERVICE + ".last-good/txn.json")
    assert "| action | restarted once (unit or environment changed) |" in gw.read(gw.record)


def test_a_failing_verification_restores_the_previous_unit_and_verifies_it(gw):
    deployed(gw)
    unit_before = gw.read(gw.unit)
    gw.systemctl.crash_next = True

    def crash_then_recover(unit, orig=gw.systemctl.restart):
        orig(unit)
        gw.systemctl.crash_next = False
        gw.not_ready = 2          # the restored router answers after two tries
    gw.systemctl.restart = crash_then_recover
    with pytest.raises(LifecycleFailure) as failure:
        gw.machine(gw.params("2", key=KEY)).converge()
    msg = failure.value.msg
    assert msg.startswith("sglang-router: the new configuration failed verification: the router exited")
    assert "Rolled back: the previous unit and environment run again and the router answers (invocation inv3)" in msg
    assert "argument --cb-failure-threshold: invalid int value" in msg     # the journal names the cause
    assert KEY not in msg and KEY not in json.dumps(failure.value.result)
    assert gw.read(gw.unit) == unit_before
    # the key is never rolled back: the environment file stays as this run wrote it, and the message says so
    assert KEY in gw.read(gw.env) and "holds the workers' key" in msg
    assert gw.systemctl.commands[-3:] == [
        "stop %s.service" % SERVICE, "daemon-reload", "restart %s.service" % SERVICE]
    assert gw.verifies[-3:] == [("status", "inv3")] * 3   # the restored router is verified: asked until it answers
    assert failure.value.result["rolled_back"] is True
    assert not os.path.exists(gw.backup + "/" + SERVICE + ".last-good/txn.json")


def test_first_deployment_failing_has_no_rollback_and_says_so(gw):
    gw.systemctl.crash_next = True
    with pytest.raises(LifecycleFailure) as failure:
        gw.machine(gw.params("1")).converge()
    assert "No rollback: there is no previous unit (first deployment)." in failure.value.msg


def test_no_rollback_names_the_router_switch(gw):
    deployed(gw)
    gw.systemctl.crash_next = True
    with pytest.raises(LifecycleFailure) as failure:
        gw.machine(gw.params("2", rollback=False)).converge()
    assert "No rollback: sglang_router_rollback is false." in failure.value.msg
    assert gw.read(gw.unit).endswith("--v 2\n")


def test_check_mode_writes_nothing_and_shows_no_key(gw):
    deployed(gw)
    before = gw.snapshot()
    result = gw.machine(gw.params("2", key=KEY), check_mode=True).converge()
    assert result["action"] == "restart" and result["changed"]
    assert gw.snapshot() == before and gw.systemctl.commands == [] and gw.verifies == []
    env_diff = next(d for d in result["diff"] if d["after_header"] == gw.env)
    assert KEY not in json.dumps(result) and "not shown" in env_diff["after"]


def test_the_runner_fails_fast_on_a_unit_that_went_down():
    assert down_reason({"ActiveState": "failed", "Result": "exit-code"}, "a", 0) == "the unit failed (Result=exit-code)"
    assert "crash loop" in down_reason({"ActiveState": "active", "NRestarts": "2"}, "a", 0)
    assert "started again" in down_reason({"ActiveState": "active", "InvocationID": "b"}, "a", 0)
    assert down_reason({"ActiveState": "active", "InvocationID": "a", "NRestarts": "0"}, "a", 0) == ""
    systemctl = FakeSystemctl()
    systemctl.props.update(ActiveState="active", InvocationID="a")
    runner = RouterRunner(systemctl, "r.service", "verified", None, lambda: [], sleep=lambda s: None)
    runner.invocation = "a"
    systemctl.props["ActiveState"] = "failed"
    with pytest.raises(UnitDown):
        runner.watch(0.5)
