# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/molecule-hosts.py: every scenario's hosts are created and removed with the docker CLI (issue 20), with
each platform setting of molecule.yml turned into its `docker run` flag, and a setting it does not know refused
by name (a platform must never silently lose one). A fake `docker` on PATH records the calls."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import yaml

from conftest import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "molecule-hosts.py")

FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$DOCKER_CALLS"
case "$1" in
  image) echo "$FAKE_SSH_LABEL"; exit 0 ;;   # image inspect -f {{index .Config.Labels "org.gpuserve.test-ssh"}}
  inspect) case "$3" in *Networks*) echo '{"gpuserve-net": {"IPAddress": "172.18.0.7"}}'; exit 0 ;; esac
           exit 1 ;;            # no such container yet
  exec) echo "${FAKE_BOOT:-running}"; exit 0 ;;   # systemctl is-system-running --wait
  network) [ "$2" = inspect ] && exit 1; exit 0 ;;
esac
exit 0
"""
# a fake ssh: records its arguments; answers with FAKE_SSH_RC
FAKE_SSH = """#!/bin/sh
echo "$*" >> "$SSH_CALLS"
exit "${FAKE_SSH_RC:-0}"
"""


def _run(tmp_path, action, platforms, boot="running", bound="300", ssh_label="", ssh_rc="0", ephemeral=None,
         extra_env=None):
    for name, text in (("docker", FAKE_DOCKER), ("ssh", FAKE_SSH)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH="%s:%s" % (tmp_path, os.environ["PATH"]), DOCKER_CALLS=str(calls), FAKE_BOOT=boot,
               GPUSERVE_HOST_BOOT_TIMEOUT=bound, FAKE_SSH_LABEL=ssh_label, FAKE_SSH_RC=ssh_rc,
               SSH_CALLS=str(tmp_path / "ssh-calls"), GPUSERVE_TEST_SSH_KEY=str(tmp_path / "key" / "id_ed25519"),
               MOLECULE_INSTANCE_CONFIG=str(tmp_path / "instance_config.yml"),
               MOLECULE_EPHEMERAL_DIRECTORY=str(ephemeral or tmp_path), **(extra_env or {}))
    proc = subprocess.run([sys.executable, SCRIPT, action], input=json.dumps(platforms), env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return proc, (calls.read_text().splitlines() if calls.exists() else [])


def _instance_config(tmp_path):
    return yaml.safe_load((tmp_path / "instance_config.yml").read_text())


def _ssh_calls(tmp_path):
    path = tmp_path / "ssh-calls"
    return path.read_text().splitlines() if path.exists() else []


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
    boot = calls.index("exec gpuserve-x timeout 300 systemctl is-system-running --wait")
    assert boot > calls.index(run) and not [c for c in calls[boot + 1:] if c.startswith("exec ")]


def test_an_image_without_ssh_keeps_the_docker_connection(tmp_path):
    proc, calls = _run(tmp_path, "create", [HOST])
    assert proc.returncode == 0, proc.stderr
    assert not [c for c in calls if "authorized_keys" in c]
    assert _instance_config(tmp_path) == [{"instance": "gpuserve-x", "address": "gpuserve-x", "user": "root",
                                           "connection": "community.docker.docker"}]
    assert not _ssh_calls(tmp_path)


def test_an_image_with_ssh_is_reached_over_ssh_with_the_test_key(tmp_path):
    """The image's label says its hosts answer SSH: the test key (made once) is root's authorized_keys, the host's
    address on its FIRST network goes into the instance config with the key, and one SSH command with that key
    proved the host answers before the create ends."""
    proc, calls = _run(tmp_path, "create", [HOST], ssh_label="22")
    assert proc.returncode == 0, proc.stderr
    key = str(tmp_path / "key" / "id_ed25519")
    assert os.path.exists(key) and os.path.exists(key + ".pub")
    run = next(c for c in calls if c.startswith("run "))
    assert "-v %s.pub:/root/.ssh/authorized_keys:ro " % key in run
    assert _instance_config(tmp_path) == [{"instance": "gpuserve-x", "address": "172.18.0.7", "user": "root",
                                           "port": 22, "identity_file": key}]
    ssh = _ssh_calls(tmp_path)
    assert len(ssh) == 1 and ssh[0].endswith("-i %s -p 22 root@172.18.0.7 true" % key), ssh
    assert "BatchMode=yes" in ssh[0]
    # a second create (hosts already there) reuses the same key
    with open(key + ".pub", encoding="utf-8") as handle:
        first = handle.read()
    proc, _calls = _run(tmp_path, "create", [HOST], ssh_label="22")
    assert proc.returncode == 0, proc.stderr
    with open(key + ".pub", encoding="utf-8") as handle:
        assert handle.read() == first


def test_docker_is_asked_once_per_image_whether_its_hosts_answer_ssh(tmp_path):
    # `docker run`'s arguments and the instance config both need it, for each host: one answer per image and run
    proc, calls = _run(tmp_path, "create", [HOST, dict(HOST, name="gpuserve-y")], ssh_label="22")
    assert proc.returncode == 0, proc.stderr
    assert len([c for c in calls if c.startswith("image inspect ")]) == 1
    assert len([c for c in calls if c.startswith("run ")]) == 2 and len(_ssh_calls(tmp_path)) == 2


def test_a_host_that_never_answers_ssh_fails_the_create_by_name(tmp_path):
    proc, _calls = _run(tmp_path, "create", [HOST], ssh_label="22", ssh_rc="255", bound="2")
    assert proc.returncode != 0
    assert "gpuserve-x: no SSH answer at 172.18.0.7:22 within 2 s" in proc.stderr
    assert len(_ssh_calls(tmp_path)) >= 3   # asked again, every half second
    assert not (tmp_path / "instance_config.yml").exists()


def test_destroy_closes_the_scenarios_ssh_masters_first(tmp_path):
    ephemeral = tmp_path / "molecule.x"
    ephemeral.mkdir()
    for name in ("cp-172.18.0.7", "cp-172.18.0.8", "state.yml"):
        (ephemeral / name).write_text("")
    proc, calls = _run(tmp_path, "destroy", [HOST], ephemeral=ephemeral)
    assert proc.returncode == 0, proc.stderr
    closed = sorted(c.split("ControlPath=")[1].split()[0] for c in _ssh_calls(tmp_path))
    assert closed == [str(ephemeral / "cp-172.18.0.7"), str(ephemeral / "cp-172.18.0.8")]
    assert all(" -O exit " in c for c in _ssh_calls(tmp_path))
    assert "rm -f -v gpuserve-x" in calls
    assert _instance_config(tmp_path) == []


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


def test_a_containers_cpu_is_read_from_its_cgroup_in_either_layout(tmp_path):
    hosts = load_file("molecule_hosts_cgroup", SCRIPT)
    (tmp_path / "v1-abc").write_text("2500000000\n")                               # cpuacct.usage: nanoseconds
    (tmp_path / "v2-def").write_text("usage_usec 1500000\nuser_usec 1000000\n")   # cpu.stat
    layouts = ((str(tmp_path / "v1-{id}"), "ns"), (str(tmp_path / "v2-{id}"), "usage_usec"))
    assert hosts.cgroup_cpu_seconds("abc", layouts) == 2.5
    assert hosts.cgroup_cpu_seconds("def", layouts) == 1.5
    assert hosts.cgroup_cpu_seconds("gone", layouts) is None


def test_destroy_records_the_hosts_cpu_before_it_removes_them(tmp_path, monkeypatch):
    hosts = load_file("molecule_hosts_cpu", SCRIPT)
    asked = []
    monkeypatch.setattr(hosts, "docker", lambda *args, check=True: asked.append(args) or subprocess.CompletedProcess(
        args, 0, "id1\nid2\n", ""))
    monkeypatch.setattr(hosts, "cgroup_cpu_seconds", {"id1": 2.5, "id2": None}.get)
    out = tmp_path / "hosts.cpu"
    monkeypatch.setenv("GPUSERVE_HOST_CPU_FILE", str(out))
    hosts.record_cpu([{"name": "a"}, {"name": "b"}])
    hosts.record_cpu([])   # destroy before create: nothing there, a 0 line
    assert out.read_text() == "2.5\n0.0\n"
    assert asked == [("inspect", "-f", "{{.Id}}", "a", "b")]
    # in destroy: read while the hosts are there, before `docker rm`
    proc, calls = _run(tmp_path, "destroy", [HOST], extra_env={"GPUSERVE_HOST_CPU_FILE": str(tmp_path / "d.cpu")})
    assert proc.returncode == 0, proc.stderr
    assert calls.index("inspect -f {{.Id}} gpuserve-x") < calls.index("rm -f -v gpuserve-x")
    assert (tmp_path / "d.cpu").read_text() == "0.0\n"   # the fake docker knows no container


def test_every_scenario_platform_uses_only_supported_settings_and_the_shared_playbooks():
    config = yaml.safe_load(open(os.path.join(ROOT, ".config", "molecule", "config.yml"), encoding="utf-8"))
    assert config["provisioner"]["playbooks"]["create"] == "../_shared/create.yml"
    assert config["provisioner"]["playbooks"]["destroy"] == "../_shared/destroy.yml"
    # molecule's default driver reads the instance config the create writes; each scenario's SSH masters have their
    # sockets in its own molecule directory (destroy closes them there), and no compression of the payloads
    assert config["driver"]["name"] == "default" and config["driver"]["options"]["managed"] is True
    common = config["driver"]["options"]["ansible_connection_options"]["ansible_ssh_common_args"]
    assert "-o ControlPath=${MOLECULE_EPHEMERAL_DIRECTORY}/cp-%h" in common
    assert "-C" not in config["provisioner"]["config_options"]["ssh_connection"]["ssh_args"].split()
    module = load_file("molecule_hosts", SCRIPT)
    for path in glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")):
        scenario = yaml.safe_load(open(path, encoding="utf-8"))
        for platform in scenario.get("platforms") or []:
            assert set(platform) <= module.SUPPORTED, (path, platform["name"])
            playbooks = (scenario.get("provisioner") or {}).get("playbooks") or {}
            assert "create" not in playbooks and "destroy" not in playbooks, path


def test_the_first_creators_key_stands_when_scenarios_make_it_at_once(tmp_path, monkeypatch):
    """Three scenarios are created at once on a fresh checkout: each may find no key and make one. A creator that
    finishes second must keep the pair the first one made (and already mounted into its hosts), never replace it."""
    module = load_file("molecule_hosts", SCRIPT)
    key = tmp_path / "cache" / "test-ssh" / "id_ed25519"
    monkeypatch.setenv("GPUSERVE_TEST_SSH_KEY", str(key))
    real_run = module.subprocess.run

    def keygen_then_another_creator_wins(argv, **kwargs):
        result = real_run(argv, **kwargs)
        key.parent.mkdir(parents=True)
        key.write_text("the first creator's private key")
        (key.parent / "id_ed25519.pub").write_text("the first creator's public key")
        return result

    monkeypatch.setattr(module.subprocess, "run", keygen_then_another_creator_wins)
    assert module.ssh_key() == str(key)
    assert key.read_text() == "the first creator's private key"
    assert (key.parent / "id_ed25519.pub").read_text() == "the first creator's public key"
    assert sorted(os.listdir(key.parent.parent)) == ["test-ssh"]   # this creator's own pair dropped


def test_a_fresh_key_is_a_complete_pair(tmp_path, monkeypatch):
    module = load_file("molecule_hosts", SCRIPT)
    key = tmp_path / "cache" / "test-ssh" / "id_ed25519"
    monkeypatch.setenv("GPUSERVE_TEST_SSH_KEY", str(key))
    assert module.ssh_key() == str(key)
    pub = (key.parent / "id_ed25519.pub").read_text()
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True).stdout
    assert pub.split()[:2] == derived.split()[:2]
    assert sorted(os.listdir(key.parent.parent)) == ["test-ssh"]
