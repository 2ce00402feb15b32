# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's own inputs (plugins/filter/server_inputs.py): unit names, port, user, unit settings."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.filter import server_inputs as f

# The role's defaults (roles/server/defaults/main.yml), as the preflight passes them.
DEFAULTS = {
    "sglang_service_name": "sglang-kimi",
    "sglang_port": 30000,
    "sglang_host": "127.0.0.1",
    "sglang_python": "/opt/sglang/venv/bin/python",
    "sglang_launcher": "sglang.launch_server",
    "sglang_api_key": "",
    "sglang_user": "sglang",
    "sglang_user_groups": [],
    "sglang_unit_description": "SGLang inference server (kimi_k25_int4_eagle3)",
    "sglang_unit_after": ["network-online.target"],
    "sglang_unit_wants": ["network-online.target"],
    "sglang_unit_wanted_by": "multi-user.target",
    "sglang_unit_restart": "on-failure",
    "sglang_unit_restart_sec": 30,
    "sglang_unit_timeout_start_sec": 900,
    "sglang_unit_timeout_stop_sec": "1min 30s",
    "sglang_unit_limit_nofile": 65536,
    "sglang_unit_limit_memlock": "infinity",
    "sglang_unit_kill_mode": "control-group",
    "sglang_unit_kill_signal": "SIGTERM",
    "sglang_unit_extra": {"Nice": -5, "DeviceAllow": ["/dev/nvidia0 rw"]},
    "sglang_env_file": "/etc/sglang/sglang-kimi.env",
    "sglang_secrets_file": "/etc/sglang/sglang-kimi.secrets.yaml",
    "sglang_launch_script": "/usr/local/lib/gpuserve-sglang/sglang_launch.py",
    "sglang_admin_api_key": "",
}


def problems(**changes):
    return f.sglang_input_problems(dict(DEFAULTS, **changes))


def test_defaults_have_no_problem():
    assert problems() == []


@pytest.mark.parametrize("name", ["sglang-kimi", "sglang@kimi", "a:b_c.d\\x2d", "x" * 247])
def test_valid_service_names(name):
    assert problems(sglang_service_name=name) == []


@pytest.mark.parametrize("name", [
    "x'$(touch /tmp/pwned)'",  # the reproducer: templated into sh -c as root
    "sglang kimi", "sglang/kimi", "", "sglang\n", "a@b@c", "sglang@", "x" * 248, "ü",
])
def test_invalid_service_names(name):
    found = problems(sglang_service_name=name)
    assert found and found[0].startswith("sglang_service_name") and repr(name) in found[0]


@pytest.mark.parametrize("port", [0, -1, 65536, 1.5, "http", True, float("nan"), float("inf")])
def test_port_out_of_range(port):
    assert problems(sglang_port=port) == ["sglang_port %r must be a port number 1-65535" % (port,)]


@pytest.mark.parametrize("port", [1, 65535, "30000"])
def test_port_in_range(port):
    assert problems(sglang_port=port) == []


@pytest.mark.parametrize("name, value", [
    ("sglang_unit_description", "x\nExecStartPre=+/bin/sh -c id"),
    ("sglang_python", "/opt/python\n"),
    ("sglang_env_file", "/etc/sglang/x.env\nExecStartPre=+/bin/sh"),
    ("sglang_unit_wanted_by", "multi-user.target\n[Service]"),
    ("sglang_unit_after", ["network.target", "x.service\nExecStartPre=+/bin/sh"]),
    ("sglang_unit_restart", "always\nExecStartPre=+/bin/sh"),
    ("sglang_unit_kill_signal", "SIGTERM;"),
    ("sglang_unit_restart_sec", "30\nUser=root"),
    ("sglang_unit_limit_memlock", "infinity "),
    ("sglang_unit_kill_mode", "cgroup"),
    ("sglang_user", "root\nUser=root"),
    ("sglang_user", "Bad User"),
    ("sglang_user_groups", ["video", "x y"]),
    ("sglang_host", "0.0.0.0 --api-key x"),
    ("sglang_unit_extra", {"Nice": "1\nUser=root"}),
    ("sglang_unit_extra", {"User Name": "x"}),
])
def test_refused_inputs_name_the_variable(name, value):
    found = problems(**{name: value})
    assert found and all(name in p for p in found)


def test_secret_with_control_characters_is_refused_without_showing_it():
    found = problems(sglang_api_key="s3cret\nExecStartPre=+/bin/sh")
    assert found == ["sglang_api_key holds control characters (value not shown): refused"]


def test_wanted_by_as_list_or_words():
    assert problems(sglang_unit_wanted_by=["multi-user.target", "graphical.target"]) == []
    assert problems(sglang_unit_after="network-online.target nvidia-persistenced.service") == []


def test_refuses_non_mapping():
    with pytest.raises(AnsibleFilterError):
        f.sglang_input_problems(["sglang_port"])


@pytest.mark.parametrize("path", ["/etc/sglang/x.secrets.env", "relative.yaml", "/etc/x.yaml\n"])
def test_secrets_file_must_be_a_yaml_path(path):
    found = problems(sglang_secrets_file=path)
    assert found and all("sglang_secrets_file" in p for p in found)


def test_admin_key_with_control_characters_is_refused_without_showing_it():
    assert problems(sglang_admin_api_key="k\n") == [
        "sglang_admin_api_key holds control characters (value not shown): refused"]


@pytest.mark.parametrize("paths, ok", [(["/srv/dumps", "-/var/log/sglang"], True), (["/srv/a b"], False),
                                       (["relative"], False), (["/x\nExecStartPre=+/bin/sh"], False)])
def test_read_write_paths(paths, ok):
    assert (problems(sglang_unit_read_write_paths=paths) == []) is ok


def test_device_allow_without_control_characters():
    assert problems(sglang_unit_device_allow=["/dev/nvidiactl rw", "char-nvidia-frontend rw"]) == []
    found = problems(sglang_unit_device_allow=["/dev/nvidiactl rw\nUser=root"])
    assert found and "sglang_unit_device_allow" in found[0]


# ---------------------------------------------------------------- takeover: the stray processes to stop (issue 13)
@pytest.mark.parametrize("value, message", [
    (["python"], "sglang_stop_processes: match 'python' is shorter than 8"),
    (["sglang.launch_server\nx"], "control character"),
    ("sglang.launch_server", "must be a list"),
])
def test_stop_processes_refused(value, message):
    problems = f.sglang_input_problems({"sglang_stop_processes": value})
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize("value", [-1, "soon", float("nan"), True])
def test_stop_processes_timeout_refused(value):
    problems = f.sglang_input_problems({"sglang_stop_processes_timeout": value})
    assert any("sglang_stop_processes_timeout" in p for p in problems), problems


def test_stop_processes_fine():
    assert f.sglang_input_problems({"sglang_stop_processes": ["sglang_standin --port 30007"],
                                    "sglang_stop_processes_timeout": 30}) == []
    assert f.sglang_input_problems({"sglang_stop_processes": [], "sglang_stop_processes_timeout": 0}) == []


# Issue 22: the textfile timer's ExecStart took these raw into a root unit.
@pytest.mark.parametrize("name", ["sglang_record_json_file", "sglang_metrics_textfile_dir"])
@pytest.mark.parametrize("bad", ["relative/path", "/etc/sglang/x y.json", "/etc/sglang/a\nExecStartPre=/bin/sh",
                                 "/etc/sglang/", ""])
def test_textfile_paths_must_be_absolute_plain_paths(name, bad):
    problems = f.sglang_input_problems(dict(DEFAULTS, **{name: bad}))
    assert any(p.startswith(name) for p in problems), problems


@pytest.mark.parametrize("good", ["/etc/sglang/sglang-kimi.record.json", "/var/lib/node_exporter/textfile_collector",
                                  "/srv/100%/x.json"])
def test_textfile_paths_that_are_fine(good):
    assert f.sglang_input_problems(dict(DEFAULTS, sglang_record_json_file=good, sglang_metrics_textfile_dir=good)) == []


@pytest.mark.parametrize("bad", [0, -5, "30s", True, "1\n", 10 ** 7])
def test_textfile_interval_is_whole_seconds(bad):
    problems = f.sglang_input_problems(dict(DEFAULTS, sglang_metrics_textfile_interval=bad))
    assert any(p.startswith("sglang_metrics_textfile_interval") for p in problems), problems


@pytest.mark.parametrize("bad", [-1, "five", True, "5\n"])
def test_backup_keep_is_a_whole_number(bad):
    assert any(p.startswith("sglang_backup_keep") for p in f.sglang_input_problems(dict(DEFAULTS, sglang_backup_keep=bad)))
