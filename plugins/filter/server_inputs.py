# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
"""The server role's own inputs (not SGLang's flags), checked before the host changes.

- sglang_input_problems: a mapping of the role's variables -> one message per bad value, naming the variable
  and the value (secrets are never quoted): unit names as systemd reads them, the port, the service user,
  systemd settings, and control characters in any text that reaches the unit, the environment file or a
  command.
(The last-good manifest is built by plugins/module_utils/_last_good.py, its one owner, through the module
gpuserve.sglang.sglang_server.)

Pure function; unit-tested in tests/unit/plugins/filter/test_server_inputs.py.
"""

from __future__ import annotations

import math
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

from ansible_collections.gpuserve.sglang.plugins.filter.systemd import sglang_unit_extra
from ansible_collections.gpuserve.sglang.plugins.module_utils._secrets import is_secret_name
from ansible_collections.gpuserve.sglang.plugins.module_utils._strays import match_problems
from ansible_collections.gpuserve.sglang.plugins.plugin_utils._text_safety import (
    USER_NAME_RE, control_problem, unit_name_problem)

string_types = (str,)  # text on the controller (ansible's tagged and unsafe strings are str)

UNIT_LISTS = ("sglang_unit_after", "sglang_unit_wants", "sglang_unit_wanted_by")
RESTART_VALUES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")
KILL_MODES = ("control-group", "mixed", "process", "none")
_SIGNAL_RE = re.compile(r"(SIG)?[A-Z][A-Z0-9+]*|[0-9]{1,2}")
_TIMESPAN_RE = re.compile(r"infinity|[0-9]+(\.[0-9]+)?( ?[a-z]+)?( [0-9]+(\.[0-9]+)?( ?[a-z]+)?)*")
_LIMIT_RE = re.compile(r"(infinity|[0-9]+[KMGTPE]?)(:(infinity|[0-9]+[KMGTPE]?))?")
_HOST_RE = re.compile(r"[A-Za-z0-9.:_\[\]-]*")


def _text(value):
    return value if isinstance(value, string_types) else str(value)


def _port_problem(name, value):
    if isinstance(value, bool):
        return "%s %r must be a port number 1-65535" % (name, value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "%s %r must be a port number 1-65535" % (name, value)
    if not math.isfinite(number) or number != int(number) or not 1 <= number <= 65535:
        return "%s %r must be a port number 1-65535" % (name, value)
    return None


def _unit_list(value):
    if value is None:
        return []
    if isinstance(value, string_types):
        return value.split()
    if is_sequence(value):
        return list(value)
    return [value]


def sglang_input_problems(inputs):
    """Messages for the role's bad inputs; [] when all are fine. inputs: {variable name: value}."""
    if not isinstance(inputs, dict):
        raise AnsibleFilterError("sglang_input_problems takes a mapping of variable names to values")
    problems = []

    def add(message):
        if message:
            problems.append(message)

    for name, value in inputs.items():
        if is_secret_name(name):
            if value and control_problem(name, _text(value)):
                problems.append("%s holds control characters (value not shown): refused" % name)
        elif isinstance(value, (string_types, int, float)) and not isinstance(value, bool):
            add(control_problem(name, _text(value)))

    if "sglang_service_name" in inputs:
        service = inputs["sglang_service_name"]
        message = unit_name_problem("sglang_service_name", _text(service) + ".service", suffix="service")
        if message or not isinstance(service, string_types):
            add("sglang_service_name %r is not a valid service name: systemd allows letters, digits, ':', '_', "
                "'.', '\\', '-' and one '@' with an instance (the role adds .service)" % (service,))
        elif service.endswith("@"):
            add("sglang_service_name %r is a template without an instance" % (service,))
    for name in UNIT_LISTS:
        if name in inputs:
            for unit in _unit_list(inputs[name]):
                add(unit_name_problem(name + ": unit", _text(unit)))
    if "sglang_port" in inputs:
        add(_port_problem("sglang_port", inputs["sglang_port"]))
    if "sglang_host" in inputs and not _HOST_RE.fullmatch(_text(inputs["sglang_host"])):
        add("sglang_host %r is not a host name or address" % (inputs["sglang_host"],))
    user = inputs.get("sglang_user")
    if user and not (isinstance(user, string_types) and USER_NAME_RE.fullmatch(user)):
        add("sglang_user %r is not a valid user name ([a-z_][a-z0-9_-]*, 32 characters at most)" % (user,))
    for name in ("sglang_user_groups",):
        for group in _unit_list(inputs.get(name)):
            if not (isinstance(group, string_types) and USER_NAME_RE.fullmatch(group)):
                add("%s: %r is not a valid group name" % (name, group))
    if "sglang_unit_restart" in inputs and inputs["sglang_unit_restart"] not in RESTART_VALUES:
        add("sglang_unit_restart %r is not one of %s" % (inputs["sglang_unit_restart"], ", ".join(RESTART_VALUES)))
    if "sglang_unit_kill_mode" in inputs and inputs["sglang_unit_kill_mode"] not in KILL_MODES:
        add("sglang_unit_kill_mode %r is not one of %s" % (inputs["sglang_unit_kill_mode"], ", ".join(KILL_MODES)))
    if "sglang_unit_kill_signal" in inputs and not _SIGNAL_RE.fullmatch(_text(inputs["sglang_unit_kill_signal"])):
        add("sglang_unit_kill_signal %r is not a signal name" % (inputs["sglang_unit_kill_signal"],))
    for name in ("sglang_unit_restart_sec", "sglang_unit_timeout_start_sec", "sglang_unit_timeout_stop_sec"):
        if name in inputs and (isinstance(inputs[name], bool) or not _TIMESPAN_RE.fullmatch(_text(inputs[name]))):
            add("%s %r is not a systemd time span (seconds, '5min', 'infinity')" % (name, inputs[name]))
    for name in ("sglang_unit_limit_nofile", "sglang_unit_limit_memlock"):
        if name in inputs and (isinstance(inputs[name], bool) or not _LIMIT_RE.fullmatch(_text(inputs[name]))):
            add("%s %r is not a systemd resource limit (a number, 'infinity' or 'soft:hard')" % (name, inputs[name]))
    secrets_file = inputs.get("sglang_secrets_file")
    if secrets_file is not None and not re.fullmatch(r"/[^\x00-\x1f\x7f]*\.(yaml|yml)", _text(secrets_file)):
        add("sglang_secrets_file %r must be an absolute path ending in .yaml or .yml (SGLang's --config reads only "
            "those)" % (secrets_file,))
    launch = inputs.get("sglang_launch_script")
    if launch and not _text(launch).startswith("/"):
        add("sglang_launch_script %r must be an absolute path or empty" % (launch,))
    keys = [name for name in ("sglang_api_key", "sglang_admin_api_key") if inputs.get(name)]
    if "sglang_launch_script" in inputs and not launch and keys:
        add("sglang_launch_script is empty while %s is set: without the launcher SGLang prints its server_args, "
            "the key in clear (api_key='...'), into the journal; keep the launcher (the default %s) or set no key"
            % (" and ".join(keys), "/usr/local/lib/gpuserve-sglang/sglang_launch.py"))
    # Paths a root unit's ExecStart takes (the textfile timer: sglang_textfile.py --record ... --out ...); the unit
    # line itself is quoted by sglang_cmdline, these must be absolute paths a file can have (issue 22).
    for name in ("sglang_record_json_file", "sglang_metrics_textfile_dir"):
        if name in inputs and not re.fullmatch(r"/[^\s\x00-\x1f\x7f]*[^/\s\x00-\x1f\x7f]", _text(inputs[name])):
            add("%s %r must be an absolute path without spaces or control characters" % (name, inputs[name]))
    for name in ("sglang_backup_keep",):
        if name in inputs and (isinstance(inputs[name], bool) or not re.fullmatch(r"[0-9]{1,4}", _text(inputs[name]))):
            add("%s %r must be a whole number, 0 or more" % (name, inputs[name]))
    if "sglang_metrics_textfile_interval" in inputs:
        interval = inputs["sglang_metrics_textfile_interval"]
        if isinstance(interval, bool) or not re.fullmatch(r"[1-9][0-9]{0,5}", _text(interval)):
            add("sglang_metrics_textfile_interval %r must be a whole number of seconds, 1 or more" % (interval,))
    for path in _unit_list(inputs.get("sglang_unit_read_write_paths")):
        if not re.fullmatch(r"-?/[^\s\x00-\x1f\x7f]*", _text(path)):
            add("sglang_unit_read_write_paths: %r must be an absolute path without spaces" % (path,))
    if "sglang_unit_device_allow" in inputs:
        try:
            sglang_unit_extra({"DeviceAllow": _unit_list(inputs["sglang_unit_device_allow"])}, "sglang_unit_device_allow")
        except AnsibleFilterError as exc:
            add(str(exc))
    if "sglang_stop_processes" in inputs:
        value = inputs["sglang_stop_processes"]
        if not is_sequence(value):
            add("sglang_stop_processes must be a list of strings, got %r" % (value,))
        else:
            for message in match_problems(list(value)):
                add("sglang_stop_processes: " + message)
    if "sglang_stop_processes_timeout" in inputs:
        value = inputs["sglang_stop_processes_timeout"]
        try:
            bad = isinstance(value, bool) or not math.isfinite(float(value)) or float(value) < 0
        except (TypeError, ValueError):
            bad = True
        if bad:
            add("sglang_stop_processes_timeout must be a number of seconds >= 0, got %r" % (value,))
    if "sglang_unit_extra" in inputs:
        try:
            sglang_unit_extra(inputs["sglang_unit_extra"])
        except AnsibleFilterError as exc:
            add(str(exc))
    return list(dict.fromkeys(problems))


class FilterModule(object):
    """The server role's inputs."""

    def filters(self):
        return {
            "sglang_input_problems": sglang_input_problems,
        }
