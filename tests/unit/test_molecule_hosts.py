# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/molecule-hosts.py: every scenario's hosts are created and removed with the docker CLI (issue 20), with
each platform setting of molecule.yml turned into its `docker run` flag, and a setting it does not know refused
by name (a platform must never silently lose one). A fake `docker` on PATH records the calls."""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "molecule-hosts.py")

FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$DOCKER_CALLS"
case "$1" in
  inspect) exit 1 ;;            # no such container yet
  exec) echo "${FAKE_BOOT:-running}"; exit 0 ;;   # systemctl is-system-running --wait
  network) [ "$2" = inspect ] && exit 1; exit 0 ;;
esac
exit 0
"""


def _run(tmp_path, action, platforms, boot="running", bound="300"):
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH="%s:%s" % (tmp_path, os.environ["PATH"]), DOCKER_CALLS=str(calls), FAKE_BOOT=boot,
               GPUSERVE_HOST_BOOT_TIMEOUT=bound)
    proc = subprocess.run([sys.executable, SCRIPT, action], input=json.dumps(platforms), env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc, (calls.read_text().splitlines() if calls.exists() else [])


HOST = {"name": "gpuserve-x", "image": "gpuserve-sglang/debian12-systemd:1", "pre_build_image": True,
        "command": "/lib/systemd/systemd", "capabilities": ["SYS_ADMIN"],
        "security_opts": ["seccomp=unconfined", "apparmor=unconfined"], "cgroupns_mode": "private",
        "tmpfs": ["/run", "/run/lock", "/sys/fs/cgroup"], "stop_signal": "SIGRTMIN+3",
        "volumes": ["/etc/ssl/certs/ca-certificates.crt:/usr/local/share/gpuserve/host-ca-bundle.crt:ro"],
        "networks": [{"name": "gpuserve-net"}], "groups": ["sglang_servers"]}


def test_every_platform_setting_becomes_its_docker_run_flag(tmp_path):
    proc, calls = _run(tmp_path, "create", [HOST])
    assert proc.returncode == 0, proc.stderr
    assert "network create --label owner=molecule gpuserve-net" in calls
    run = next(c for c in calls if c.startswith("run "))
    assert run == ("run -d --name gpuserve-x --hostname gpuserve-x --label owner=molecule --cap-add SYS_ADMIN "
                   "--security-opt seccomp=unconfined --security-opt apparmor=unconfined --cgroupns private "
                   "--tmpfs /run --tmpfs /run/lock --tmpfs /sys/fs/cgroup --stop-signal SIGRTMIN+3 "
                   "-v /etc/ssl/certs/ca-certificates.crt:/usr/local/share/gpuserve/host-ca-bundle.crt:ro "
                   "--network gpuserve-net gpuserve-sglang/debian12-systemd:1 /lib/systemd/systemd")
    assert json.loads(proc.stdout) == {"created": ["gpuserve-x"]}
    # created means booted: systemd-tmpfiles-setup empties /tmp during the boot, under a module run's payload
    assert calls[-1] == "exec gpuserve-x timeout 300 systemctl is-system-running --wait"


def test_a_host_that_does_not_finish_booting_fails_the_create(tmp_path):
    # "offline" (no manager yet) and "starting" are asked again until the bound (GPUSERVE_HOST_BOOT_TIMEOUT)
    proc, calls = _run(tmp_path, "create", [HOST], boot="offline", bound="2")
    assert proc.returncode != 0
    assert "gpuserve-x: systemd did not finish booting within 2 s: 'offline'" in proc.stderr
    assert len([c for c in calls if c.startswith("exec ")]) >= 3   # asked again, every half second


def test_a_setting_it_does_not_know_is_refused_by_name(tmp_path):
    proc, calls = _run(tmp_path, "create", [dict(HOST, published_ports=["8080:80"])])
    assert proc.returncode != 0 and "does not support ['published_ports']" in proc.stderr
    assert not [c for c in calls if c.startswith("run ")]
    proc, _calls = _run(tmp_path, "create", [dict(HOST, pre_build_image=False)])
    assert proc.returncode != 0 and "only pre-built images" in proc.stderr


def test_destroy_removes_every_host_and_the_networks(tmp_path):
    proc, calls = _run(tmp_path, "destroy", [HOST, dict(HOST, name="gpuserve-y")])
    assert proc.returncode == 0, proc.stderr
    assert "rm -f -v gpuserve-x" in calls and "rm -f -v gpuserve-y" in calls
    assert "network rm gpuserve-net" in calls


def test_every_scenario_platform_uses_only_supported_settings_and_the_shared_playbooks():
    config = yaml.safe_load(open(os.path.join(ROOT, ".config", "molecule", "config.yml"), encoding="utf-8"))
    assert config["provisioner"]["playbooks"]["create"] == "../_shared/create.yml"
    assert config["provisioner"]["playbooks"]["destroy"] == "../_shared/destroy.yml"
    spec = importlib.util.spec_from_file_location("molecule_hosts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for path in glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")):
        scenario = yaml.safe_load(open(path, encoding="utf-8"))
        for platform in scenario.get("platforms") or []:
            assert set(platform) <= module.SUPPORTED, (path, platform["name"])
            playbooks = (scenario.get("provisioner") or {}).get("playbooks") or {}
            assert "create" not in playbooks and "destroy" not in playbooks, path
