# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What should be on the host: the files the server role lands (the unit, its environment file, the secrets file
for SGLang's ``--config``, the launcher that masks the keys), the directories they live in, and the other files
the server reads at its start (nccl.env, sitecustomize.py and the .pth hook of its interpreter, the install record).

A plain object built from the module's parameters (``Desired.from_params``); nothing here reads the host.
Which files a rollback puts back (``restorable``): every landed or read file except the install record (the venv
is never copied: its own record names it) and except the secrets file unless ``keep_secrets`` (a rollback must
never undo a rotated key, issue 39)."""

from __future__ import annotations

import hashlib

from ansible_collections.gpuserve.sglang.plugins.module_utils import _last_good, _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._state_file import STATE_DIR, StateFile

UNIT, ENV, SECRETS, LAUNCHER = "unit", "env", "secrets", "launcher"
# What a change of each kind is called in the due reasons (today's due.yml words).
CHANGE_WORDS = {UNIT: "unit would change", ENV: "environment file would change",
                SECRETS: "secrets file would change"}


class FileSpec(object):
    """One file to land: ``content`` bytes, or None when the file must be absent; mode as '0644'."""

    def __init__(self, path, content, mode="0644", owner="root", group="root", kind="", secret=False,
                 verify_unit=False):
        self.path = path
        self.content = content.encode("utf-8") if isinstance(content, str) else content
        self.mode = mode
        self.owner = owner
        self.group = group
        self.kind = kind
        self.secret = bool(secret)
        self.verify_unit = bool(verify_unit)

    @property
    def sha256(self):
        return None if self.content is None else hashlib.sha256(self.content).hexdigest()

    def __repr__(self):
        size = "absent" if self.content is None else "%d bytes" % len(self.content)
        return "FileSpec(%r, %s, %s)" % (self.path, size, self.kind)


class DirSpec(object):
    """A directory that must exist with this mode, owner and group."""

    def __init__(self, path, mode="0755", owner="root", group="root"):
        self.path = path
        self.mode = mode
        self.owner = owner
        self.group = group

    def __repr__(self):
        return "DirSpec(%r, %s)" % (self.path, self.mode)


class Desired(object):
    """The desired state of one server unit on one host."""

    def __init__(self, service, files, dirs=(), reads=(), install_record="", backup_dir="/etc/sglang/backup",
                 backup_keep=5, keep_secrets=False, rollback=True, secrets_to_mask=(), venv_versioned="",
                 venv_link="", record_path="", host_name="", state_dir=""):
        self.service = service[:-len(".service")] if service.endswith(".service") else service
        self.files = list(files)
        self.dirs = list(dirs)
        self.reads = [path for path in reads if path]
        self.install_record = install_record or ""
        self.backup_dir = backup_dir.rstrip("/") or "/"
        self.backup_keep = int(backup_keep)
        self.keep_secrets = bool(keep_secrets)
        self.rollback = bool(rollback)
        self.secrets_to_mask = [secret for secret in secrets_to_mask or () if secret]
        self.venv_versioned = venv_versioned or ""
        self.venv_link = venv_link or ""
        self.record_path = record_path or ""
        self.host_name = host_name or ""
        self.companion_units = []
        # the service runner's state files (_state_file): the one record of which invocation is verified; "" for a
        # unit whose runner keeps none (the router): its last-good manifest is that record
        self.state_dir = state_dir or ""
        # the deployment record's inputs (the module's ``record`` option): the new ExecStart (``cmdline``), the
        # interpreter, the record and its history, where --check reads this host's recorded restarts (issue 49)
        self.record = {}

    # ---- names ------------------------------------------------------------------------------------------------
    @property
    def unit(self):
        """The unit's name for systemctl (``<service>.service``)."""
        return self.service + ".service"

    @property
    def last_good_dir(self):
        """This unit's own state (last-good manifest and copies, the open transaction, the open restore):
        ``<backup dir>/<service>.last-good``, so that two servers on one host never share it (issue 47)."""
        return _last_good.unit_dir(self.backup_dir, self.service)

    @property
    def legacy_dir(self):
        """The layout before issue 47: one ``<backup dir>/last-good`` for every unit of the host (moved to the
        unit's own directory by ``_server/layout.py`` on the first run, without a restart)."""
        return "%s/%s" % (self.backup_dir, _last_good.LEGACY_DIR)

    @property
    def state_file(self):
        """The unit's state file (``_state_file``), or "" when it has none."""
        return StateFile(self.state_dir).path(self.service + ".service") if self.state_dir else ""

    def verified_record(self):
        """The state file's record (None when there is none or no state file)."""
        return StateFile(self.state_dir).read(self.service + ".service") if self.state_dir else None

    def of_kind(self, kind):
        return next((spec for spec in self.files if spec.kind == kind), None)

    @property
    def unit_path(self):
        spec = self.of_kind(UNIT)
        return spec.path if spec else ""

    @property
    def env_path(self):
        spec = self.of_kind(ENV)
        return spec.path if spec else ""

    @property
    def secret_paths(self):
        return [spec.path for spec in self.files if spec.secret]

    # ---- the sets ---------------------------------------------------------------------------------------------
    @property
    def input_files(self):
        """Every file the server reads at its start, in a fixed order: the landed ones, the other reads, the
        install record (the paths the last-good manifest names)."""
        paths = [spec.path for spec in self.files] + list(self.reads)
        if self.install_record:
            paths.append(self.install_record)
        return list(dict.fromkeys(paths))

    @property
    def restorable(self):
        """The files a rollback puts back: all but the install record, and the secrets file only with
        ``keep_secrets``."""
        secret = set(self.secret_paths)
        return [path for path in self.input_files
                if path != self.install_record and (self.keep_secrets or path not in secret)]

    def rendered(self):
        """{path: sha256} of the unit and the environment file as this run renders them (what it may claim)."""
        return dict((spec.path, spec.sha256) for spec in self.files if spec.kind in (UNIT, ENV) and spec.content)

    def withheld(self):
        """The files whose checksum is not shown: the environment file when it holds a secret (a key to mask, or
        a value the one rule calls secret: _secrets.env_secrets)."""
        env = self.of_kind(ENV)
        if env is None or not env.content:
            return []
        text = env.content.decode("utf-8", "replace")
        held = any(secret in text for secret in self.secrets_to_mask) or _secrets.env_secrets(text)
        return [env.path] if held else []

    # ---- from the module's parameters -------------------------------------------------------------------------
    @classmethod
    def from_params(cls, params):
        """The module's options (plugins/modules/sglang_server.py) -> Desired. Modes and owners are the role's:
        unit 0644 root:root, environment file 0600 root:root, secrets file 0640 root:<group> (absent when its
        content is empty), launcher 0755 root:root."""
        files = []
        unit = params.get("unit") or {}
        files.append(FileSpec(unit["path"], unit.get("content") or "", "0644", kind=UNIT, verify_unit=True))
        env = params.get("env") or {}
        files.append(FileSpec(env["path"], env.get("content") or "", "0600", kind=ENV))
        secrets = params.get("secrets") or {}
        if secrets.get("path"):
            files.append(FileSpec(secrets["path"], secrets.get("content") or None, "0640",
                                  group=secrets.get("group") or "root", kind=SECRETS, secret=True))
        launcher = params.get("launcher") or {}
        if launcher.get("path"):
            files.append(FileSpec(launcher["path"], launcher.get("content") or "", "0755", kind=LAUNCHER))
        # an empty path is no directory: the launcher's directory when sglang_launch_script is "" (issue 47)
        dirs = [DirSpec(item["path"], item.get("mode") or "0755", item.get("owner") or "root",
                        item.get("group") or "root") for item in params.get("dirs") or [] if item.get("path")]
        venv = params.get("venv_link") or {}
        record = params.get("record") or {}
        desired = cls(params["name"], files, dirs, params.get("reads") or [], params.get("install_record") or "",
                      params.get("backup_dir") or "/etc/sglang/backup", params.get("backup_keep", 5),
                      params.get("keep_secrets"), params.get("rollback", True), params.get("secrets_to_mask") or [],
                      venv.get("versioned") or "", venv.get("link") or "",
                      record.get("record_md_path") or record.get("md_path") or "",
                      params.get("host_name") or record.get("host") or "")
        desired.record = dict(record)
        desired.state_dir = (params.get("service") or {}).get("state_dir") or STATE_DIR
        # units beside the server that hold its GPU memory (the Weight Cache Daemon's): a rollback stops them
        # before the restored unit starts, the GPU freeing step never stops their processes
        desired.companion_units = [str(unit) for unit in params.get("companion_units") or [] if unit]
        return desired
