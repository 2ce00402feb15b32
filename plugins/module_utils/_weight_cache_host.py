# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Weight Cache Daemon's unit on the host (module gpuserve.sglang.sglang_weight_cache; issue 49).

``converge`` refuses first (nothing changed: the release, speculative decoding, the quantization, a server over
several hosts, from ``_weight_cache.refusals``), then lands the unit atomically when its text differs and enables
it. It never stops, starts or restarts the server (the sglang_server module's alone), and never restarts the daemon
under a running server (the server maps its weights by CUDA IPC; a second copy would not fit beside the old server):

- the server is not running: the daemon is started now, or restarted once when its unit changed;
- the server is running: a daemon not running yet is started by the server's own next start (its unit's
  ``ExecStartPre=+ ... systemctl start <daemon>``, after the old process is gone, before the new one loads); a daemon
  whose unit changed (a new SGLang or torch in a new venv: its cache key holds the torch version) gets a restart
  marker (``<marker_dir>/<daemon>.restart``), which the server's next start consumes: the daemon restarts once,
  between the old server's stop and the new one's start.

A second run with nothing changed does nothing. ``state=absent`` stops and disables the daemon and removes its unit;
while the server runs on its weights it is refused (stop the server first), before anything changes.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.gpuserve.sglang.plugins.module_utils import _atomic, _weight_cache


# a unit name as systemd reads it (unit_name_is_valid: at most 255 characters of [A-Za-z0-9:_.\-@])
_UNIT_RE = re.compile(r"\A[A-Za-z0-9:_.\\@-]{1,247}\.service\Z")


def read_model_config(model_path):
    """config.json of the model directory ({} when it cannot be read: the refusal then goes by --quantization)."""
    try:
        with open(os.path.join(str(model_path or ""), "config.json"), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Host(object):
    """What converge needs of the host: systemctl through ``run`` (argv -> (rc, out, err)), files."""

    def __init__(self, run, systemctl="systemctl"):
        self.run = run
        self.systemctl = systemctl

    def _ok(self, *argv):
        rc, out, err = self.run([self.systemctl] + list(argv))
        if rc != 0:
            raise RuntimeError("systemctl %s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out or "").strip()))
        return out

    def active(self, unit):
        rc, out, _err = self.run([self.systemctl, "is-active", unit])
        return rc == 0 and out.strip() in ("active", "activating", "reloading")

    def enabled(self, unit):
        rc, _out, _err = self.run([self.systemctl, "is-enabled", unit])
        return rc == 0

    def read(self, path):
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def write(self, path, data):
        _atomic.write_atomic(path, data, mode=0o644, root_owned=True)

    def remove(self, path):
        if os.path.exists(path):
            os.unlink(path)

    def daemon_reload(self):
        self._ok("daemon-reload")

    def enable(self, unit):
        self._ok("enable", unit)

    def disable(self, unit):
        self._ok("disable", unit)

    def start(self, unit):
        self._ok("start", unit)

    def restart(self, unit):
        self._ok("restart", unit)

    def stop(self, unit):
        self._ok("stop", unit)


def marker_path(marker_dir, unit):
    """The restart marker of the daemon ``unit`` (the server's unit reads the same path)."""
    return os.path.join(marker_dir, unit + ".restart")


def converge(host, state, unit, unit_path, content, server_unit, release="", args=None, model_config=None,
             nodes=0, marker_dir="/run/gpuserve-sglang", check_mode=False):
    """Bring the daemon's unit to ``state`` (present/absent); returns the module's result (refused: ``failed``
    with ``msg`` and ``refusals``, before anything changed)."""
    result = {"changed": False, "unit": unit, "actions": [], "refusals": [], "restarted": False,
              "restart_pending": False, "ready_files": []}
    actions = result["actions"]
    marker = marker_path(marker_dir, unit)
    if state == "absent":
        if host.read(unit_path) is None:
            return result
        if host.active(unit) and host.active(server_unit):
            problem = ("sglang_weight_cache: false while %s runs on the weights %s holds (CUDA IPC): stop %s first "
                       "(systemctl stop %s), then run again; nothing was changed" % (server_unit, unit, server_unit,
                                                                                     server_unit))
            result.update(failed=True, refusals=[problem], msg=problem)
            return result
        result["changed"] = True
        actions.append("stop, disable and remove %s" % unit)
        if check_mode:
            return result
        if host.active(unit):
            host.stop(unit)
        if host.enabled(unit):
            host.disable(unit)
        host.remove(unit_path)
        host.remove(marker)
        host.daemon_reload()
        return result
    problems = _weight_cache.refusals(release, args or {}, model_config, nodes,
                                      model_path=(args or {}).get("model-path", ""))
    if not _UNIT_RE.match(unit or ""):
        problems.append("sglang_weight_cache_service_name %r is not a unit name systemd reads (letters, digits, "
                        ":_.\\-@ and .service); nothing was changed" % (unit,))
    if problems:
        result.update(failed=True, refusals=problems, msg="; ".join(problems))
        return result
    result["ready_files"] = _weight_cache.ready_files(args or {})
    data = content.encode("utf-8") if not isinstance(content, bytes) else content
    landed = host.read(unit_path) != data
    active, enabled, serving = host.active(unit), host.enabled(unit), host.active(server_unit)
    start_now = not serving and (landed or not active)
    mark = serving and active and landed
    if not (landed or not enabled or start_now or mark):
        result["restart_pending"] = host.read(marker) is not None
        return result
    result["changed"] = True
    if landed:
        actions.append("land %s" % unit_path)
    if not enabled:
        actions.append("enable %s" % unit)
    if start_now:
        actions.append("%s %s" % ("restart" if active else "start", unit))
    elif mark:
        actions.append("%s restarts once at %s's next start (its unit changed)" % (unit, server_unit))
    elif serving and not active:
        actions.append("%s starts at %s's next start, before it" % (unit, server_unit))
    if check_mode:
        return result
    if landed:
        host.write(unit_path, data)
        host.daemon_reload()
    if not enabled:
        host.enable(unit)
    if start_now:
        host.remove(marker)
        if active:
            host.restart(unit)
            result["restarted"] = True
        else:
            host.start(unit)
    elif mark:
        host.write(marker, b"restart\n")
        result["restart_pending"] = True
    return result
