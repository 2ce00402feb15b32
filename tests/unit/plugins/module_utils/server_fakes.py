# SPDX-License-Identifier: GPL-3.0-or-later
"""Fakes for the server lifecycle tests (module_utils/_server): a host in a temporary directory, a systemctl that
keeps the unit's state, a service runner factory that follows it, and helpers to build the desired state."""
import grp
import hashlib
import os
import pwd
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._server.desired import (
    ENV, LAUNCHER, SECRETS, UNIT, Desired, DirSpec, FileSpec)
from ansible_collections.gpuserve.sglang.plugins.module_utils._server.machine import ServerLifecycle
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import StateFile

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name
SERVICE = "sglang-t"
KEY = "sk-very-secret-key-1"


class FakeSystemctl(object):
    def __init__(self, clock=time.time):
        self.props = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "InvocationID": "",
                      "ActiveEnterTimestamp": "", "UnitFileState": "disabled", "MainPID": "0"}
        self.commands = []
        self.on_stop = None
        self.invocations = 0

    def show_props(self, unit):
        return dict(self.props)

    def stop(self, unit):
        self.commands.append("stop " + unit)
        self.props.update(ActiveState="inactive", SubState="dead", InvocationID="", MainPID="0")
        if self.on_stop:
            self.on_stop()

    def enable(self, unit):
        self.commands.append("enable " + unit)
        self.props["UnitFileState"] = "enabled"

    def daemon_reload(self):
        self.commands.append("daemon-reload")

    def new_invocation(self):
        self.invocations += 1
        inv = "inv%d" % self.invocations
        # a second ahead: the files written so far are older than the new invocation
        self.props.update(ActiveState="active", SubState="running", InvocationID=inv,
                          MainPID=str(100 + self.invocations), ActiveEnterTimestamp="@%d" % (int(time.time()) + 1))
        return inv


class FakeRunner(object):
    def __init__(self, factory, state, read_only):
        self.factory = factory
        self.state = state
        self.read_only = read_only

    def execute(self):
        factory = self.factory
        factory.calls.append((self.state, self.read_only))
        systemctl = factory.systemctl
        hook = factory.hooks.pop(0) if factory.hooks else None
        if hook is not None:
            outcome = hook(self.state)
            if outcome is not None:
                return self.record(outcome)
        return self.record(self.outcome())

    def record(self, outcome):
        """As the real runner: a proven start is written to the unit's state file (never by a read-only one)."""
        ok, result = outcome
        store, unit = self.factory.state_store, self.factory.unit
        if ok and store is not None and not self.read_only and result.get("invocation_id"):
            existing = store.read(unit) or {}
            if existing.get("invocation_id") != result["invocation_id"]:
                when = round(time.time(), 3)
                store.write(unit, {"invocation_id": result["invocation_id"], "verified_at": when})
                result["state_file"] = {"path": store.path(unit), "written": True,
                                        "verified_at": when}
            else:
                result["state_file"] = {"path": store.path(unit), "written": False,
                                        "verified_at": existing.get("verified_at")}
        return ok, result

    def outcome(self):
        systemctl = self.factory.systemctl
        props = systemctl.props
        up = props["ActiveState"] in ("active", "activating", "reloading")
        if self.state == "verified":
            if not up:
                return False, {"msg": "unit %s.service is not running" % SERVICE, "journal_tail": []}
            return True, {"changed": False, "invocation_id": props["InvocationID"], "health_status": 200}
        if self.state == "started" and up:
            return True, {"changed": False, "invocation_id": props["InvocationID"], "health_status": 200}
        inv = systemctl.new_invocation()
        return True, {"changed": True, "invocation_id": inv, "health_status": 200, "action": self.state}


class RunnerFactory(object):
    def __init__(self, systemctl):
        self.systemctl = systemctl
        self.calls = []
        self.hooks = []    # one per execute(): hook(state) -> None (go on) or (ok, result)
        self.state_store = None    # a _state_file.StateFile: proven starts are recorded there, as the real runner does
        self.unit = SERVICE + ".service"

    def __call__(self, state, read_only=False, restore=False):
        self.restores = getattr(self, "restores", 0) + (1 if restore else 0)
        return FakeRunner(self, state, read_only)


def fail_start(systemctl, msg="Not enough host memory available", key=KEY):
    """A hook: the new invocation starts and fails verification (its journal tail holds the key)."""
    def hook(state):
        inv = systemctl.new_invocation()
        systemctl.props["ActiveState"] = "failed"
        return False, {"changed": True, "invocation_id": inv, "msg": msg,
                       "journal_tail": ["server_args api_key=%s" % key, "RuntimeError: " + msg]}
    return hook


def analyze_ok(argv, timeout=None):
    return 0, "", ""


class Host(object):
    """The paths of one server on a host under ``root``."""

    def __init__(self, root, service=SERVICE):
        self.root = str(root)
        self.service = service
        self.unit = self.p("etc/systemd/system/%s.service" % service)
        self.env = self.p("etc/sglang/%s.env" % service)
        self.secrets = self.p("etc/sglang/%s.secrets.yaml" % service)
        self.launcher = self.p("usr/local/lib/gpuserve-sglang/sglang_launch.py")
        self.nccl = self.p("etc/sglang/nccl.env")
        self.site = self.p("site/sitecustomize.py")
        self.record = self.p("opt/sglang/install-record.json")
        self.backup = self.p("etc/sglang/backup")
        self.last_good = self.backup + "/%s.last-good" % service   # the unit's own state (issue 47)
        for path in (self.unit, self.env, self.nccl, self.site, self.record, self.launcher):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self.systemctl = FakeSystemctl()
        self.runners = RunnerFactory(self.systemctl)
        self.state_dir = self.p("var/lib/gpuserve-sglang")
        self.runners.state_store = StateFile(self.state_dir)
        self.runners.unit = service + ".service"

    def p(self, rel):
        return os.path.join(self.root, rel)

    def desired(self, version="1", key=KEY, keep_secrets=False, rollback=True, launcher="launcher 1\n", **extra):
        files = [
            FileSpec(self.unit, "# Deployment record: /etc/sglang/%s.md\n[Service]\nExecStart=/bin/true --v %s\n"
                     % (self.service, version), "0644", USER, GROUP, kind=UNIT, verify_unit=True),
            FileSpec(self.env, "# Managed\nSGLANG_API_KEY=%s\nV=%s\n" % (key, version), "0600", USER, GROUP, kind=ENV),
            FileSpec(self.secrets, ("api-key: %s\n" % key) if key else None, "0640", USER, GROUP, kind=SECRETS,
                     secret=True),
        ]
        if launcher:
            files.append(FileSpec(self.launcher, launcher, "0755", USER, GROUP, kind=LAUNCHER))
        dirs = [DirSpec(self.p("etc/sglang"), "0755", USER, GROUP)]
        return Desired(self.service, files, dirs, reads=[self.nccl, self.site], install_record=self.record,
                       backup_dir=self.backup, backup_keep=2, keep_secrets=keep_secrets, rollback=rollback,
                       secrets_to_mask=[key] if key else [], host_name="node-a",
                       state_dir=extra.pop("state_dir", self.state_dir), **extra)

    def machine(self, desired, run=analyze_ok, **kwargs):
        return ServerLifecycle(desired, self.systemctl, run, self.runners, clock=time.time, **kwargs)

    def write(self, path, text, age=0):
        with open(path, "w") as handle:
            handle.write(text)
        if age:
            then = time.time() - age
            os.utime(path, (then, then))

    def read(self, path):
        if not os.path.lexists(path):
            return None
        with open(path) as handle:
            return handle.read()

    def snapshot(self):
        """Every file under the root: (content sha256, mode, mtime_ns)."""
        out = {}
        for top, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = os.path.join(top, name)
                info = os.lstat(path)
                digest = ""
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as handle:
                        digest = hashlib.sha256(handle.read()).hexdigest()
                out[path] = (digest, info.st_mode, info.st_mtime_ns)
        return out

    def age_everything(self, seconds=100):
        """Make every file older than the running invocation (as on a host deployed a while ago)."""
        then = time.time() - seconds
        for top, _dirs, files in os.walk(self.root):
            for name in files:
                os.utime(os.path.join(top, name), (then, then))
        if self.systemctl.props["ActiveState"] == "active":
            self.systemctl.props["ActiveEnterTimestamp"] = "@%d" % int(then + 10)
