# SPDX-License-Identifier: GPL-3.0-or-later
"""Create or remove a molecule scenario's test hosts with the docker CLI (molecule/_shared/create.yml, destroy.yml).

The docker driver's own create and destroy playbooks run about a dozen tasks with community.docker modules on
the controller (each imports the Docker SDK) and took 7-64 s to create and 5-42 s to destroy a scenario's hosts on
the 2-core machine while the suite ran (docs/development.md, issue 20); this does the same with one `docker run`
per host, started together. It reads the scenario's platforms (molecule.yml, as JSON on stdin) and supports the
keys the scenarios use: name, image (pre-built), command, hostname, capabilities, security_opts, cgroupns_mode,
tmpfs, stop_signal, volumes, networks, privileged, env; any other key is refused by name, so a platform never
silently loses a setting.

How the controller reaches a host (molecule's `default` driver reads it from the instance config this writes,
$MOLECULE_INSTANCE_CONFIG): over SSH, as an operator reaches a GPU host, where the image says its hosts answer it
(label org.gpuserve.test-ssh, scripts/test-images.sh): root with the test key (GPUSERVE_TEST_SSH_KEY, default
.cache/test-ssh/id_ed25519, made once), mounted as root's authorized_keys, at the host's address on its first
network. A bare command over `docker exec` cost 42 ms of the machine's CPU (the docker CLI, dockerd, containerd,
the shim and runc), over a multiplexed SSH connection 7 ms (docs/performance.md section 13). Other images (the plain systemd
image) keep the docker connection. Destroy closes the scenario's SSH master connections first (their sockets in
$MOLECULE_EPHEMERAL_DIRECTORY, named by address: a later host may get the same address).

  python3 scripts/molecule-hosts.py create  < platforms.json
  python3 scripts/molecule-hosts.py destroy < platforms.json
"""
import functools
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SUPPORTED = {"name", "image", "pre_build_image", "command", "hostname", "capabilities", "security_opts",
             "cgroupns_mode", "tmpfs", "stop_signal", "volumes", "networks", "groups", "privileged", "env"}
LABEL = "owner=molecule"
SSH_LABEL = "org.gpuserve.test-ssh"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]


def docker(*args, check=True):
    proc = subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise SystemExit("docker %s: %s" % (" ".join(args), (proc.stderr or proc.stdout).strip()))
    return proc


def ssh_key():
    """The test key pair (private key path), made once. Scenarios are created at once (scripts/molecule-all.sh), so
    the pair is made in a directory of its own and that directory renamed into place: the first creator's pair
    stands, a later one's is dropped, and no creator ever replaces a key another one has already mounted."""
    key = os.environ.get("GPUSERVE_TEST_SSH_KEY") or os.path.join(ROOT, ".cache", "test-ssh", "id_ed25519")
    if os.path.exists(key + ".pub"):
        return key
    directory = os.path.dirname(key)
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".test-ssh.", dir=os.path.dirname(directory))
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuserve-sglang test hosts",
                        "-f", os.path.join(tmp, os.path.basename(key))], check=True, capture_output=True)
        os.rename(tmp, directory)   # fails when another creator's directory is there first
    except OSError:
        if not os.path.exists(key + ".pub"):
            raise SystemExit("no test key at %s and none could be made there" % key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return key


@functools.lru_cache(maxsize=None)
def ssh_port(image):
    """The SSH port the image's hosts answer on (its label), else None: the docker connection. Asked of docker once
    per image and run: `docker run`'s arguments and the instance config both need it, for every host."""
    proc = docker("image", "inspect", "-f", '{{index .Config.Labels "%s"}}' % SSH_LABEL, image, check=False)
    value = proc.stdout.strip() if proc.returncode == 0 else ""
    return int(value) if value.isdigit() else None


def run_args(platform):
    unknown = sorted(set(platform) - SUPPORTED)
    if unknown:
        raise SystemExit("platform %s: scripts/molecule-hosts.py does not support %s" % (platform["name"], unknown))
    if not platform.get("pre_build_image", False):
        raise SystemExit("platform %s: only pre-built images (pre_build_image: true)" % platform["name"])
    args = ["run", "-d", "--name", platform["name"], "--hostname", platform.get("hostname", platform["name"]),
            "--label", LABEL]
    for cap in platform.get("capabilities", []):
        args += ["--cap-add", cap]
    for opt in platform.get("security_opts", []):
        args += ["--security-opt", opt]
    if platform.get("cgroupns_mode"):
        args += ["--cgroupns", platform["cgroupns_mode"]]
    for mount in platform.get("tmpfs", []):
        args += ["--tmpfs", mount]
    if platform.get("stop_signal"):
        args += ["--stop-signal", platform["stop_signal"]]
    for volume in platform.get("volumes", []):
        args += ["-v", volume]
    if ssh_port(platform["image"]):
        args += ["-v", "%s.pub:/root/.ssh/authorized_keys:ro" % ssh_key()]
    if platform.get("privileged"):
        args.append("--privileged")
    for key, value in (platform.get("env") or {}).items():
        args += ["-e", "%s=%s" % (key, value)]
    networks = [n["name"] for n in platform.get("networks", [])]
    if networks:
        args += ["--network", networks[0]]
    args.append(platform["image"])
    command = platform.get("command")
    if command:
        args += shlex.split(command) if isinstance(command, str) else list(command)
    return args, networks[1:]


def create(platforms):
    for network in sorted({n["name"] for p in platforms for n in p.get("networks", [])}):
        if docker("network", "inspect", network, check=False).returncode != 0:
            docker("network", "create", "--label", LABEL, network)
    started = []
    for platform in platforms:
        state = docker("inspect", "-f", "{{.State.Running}}", platform["name"], check=False)
        if state.returncode == 0 and state.stdout.strip() == "true":
            continue   # already there (molecule create on created hosts changes nothing)
        if state.returncode == 0:
            docker("rm", "-f", platform["name"])
        args, more_networks = run_args(platform)
        started.append((platform["name"], subprocess.Popen(["docker"] + args, stdout=subprocess.PIPE,
                                                           stderr=subprocess.PIPE, text=True), more_networks))
    for name, proc, more_networks in started:
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit("docker run %s: %s" % (name, (err or out).strip()))
        for network in more_networks:
            docker("network", "connect", network, name)
    # A host whose init is systemd is ready once its boot is done: until then systemd-tmpfiles-setup empties /tmp,
    # and a module run that started early lost its AnsiballZ payload there (seen: FileNotFoundError on the payload
    # zip in the first task of prepare). The docker driver's slower create hid the race.
    for name, _proc, _more in started:
        platform = next(p for p in platforms if p["name"] == name)
        if "systemd" in str(platform.get("command", "")):
            wait_booted(name)
    write_instance_config([instance(platform) for platform in platforms])
    print(json.dumps({"created": [name for name, _proc, _more in started]}))


def address(platform):
    """The host's address on its first network (the one `docker run --network` named, else docker's bridge)."""
    proc = docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", platform["name"])
    networks = json.loads(proc.stdout)
    first = (platform.get("networks") or [{"name": "bridge"}])[0]["name"]
    found = (networks.get(first) or {}).get("IPAddress") or ""
    if not found:
        raise SystemExit("%s: no address on network %s: %s" % (platform["name"], first, proc.stdout.strip()))
    return found


def instance(platform):
    """The instance config entry molecule's default driver turns into the host's connection variables."""
    port = ssh_port(platform["image"])
    if not port:
        return {"instance": platform["name"], "address": platform["name"], "user": "root",
                "connection": "community.docker.docker"}
    entry = {"instance": platform["name"], "address": address(platform), "user": "root", "port": port,
             "identity_file": ssh_key()}
    wait_ssh(entry)
    return entry


def wait_ssh(entry, bound=None):
    """One SSH command with the test key until it answers (sshd starts during the boot), bounded like the boot;
    a host that refuses the key fails the create here, not in the first task."""
    bound = bound or int(os.environ.get("GPUSERVE_HOST_BOOT_TIMEOUT", "300"))
    deadline = time.monotonic() + bound
    while True:
        proc = subprocess.run(["ssh"] + SSH_OPTIONS + ["-i", entry["identity_file"], "-p", str(entry["port"]),
                                                       "root@" + entry["address"], "true"],
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit("%s: no SSH answer at %s:%s within %d s: %s"
                             % (entry["instance"], entry["address"], entry["port"], bound, proc.stderr.strip()))
        time.sleep(0.5)


def write_instance_config(entries):
    path = os.environ.get("MOLECULE_INSTANCE_CONFIG")
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(entries, handle, indent=1)
    os.replace(tmp, path)


def close_ssh_masters():
    """The scenario's SSH master connections closed (ControlPath in .config/molecule/config.yml): a master left
    for a removed host would carry a later host's tasks to nowhere when that host gets the same address."""
    directory = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not directory:
        return
    for socket_path in glob.glob(os.path.join(directory, "cp-*")):
        subprocess.run(["ssh", "-o", "ControlPath=" + socket_path, "-O", "exit", "gpuserve-test-host"],
                       capture_output=True, check=False, stdin=subprocess.DEVNULL)


def wait_booted(name, bound=None):
    """`systemctl is-system-running --wait` in the host until it answers running or degraded (a unit that failed at
    boot is the scenario's to judge). Right after `docker run` there may be no bus yet ("Failed to connect to bus")
    or no manager yet ("offline"): asked again every half second until the bound (GPUSERVE_HOST_BOOT_TIMEOUT, 300 s),
    which only stops a host that never finishes booting."""
    bound = bound or int(os.environ.get("GPUSERVE_HOST_BOOT_TIMEOUT", "300"))
    deadline = time.monotonic() + bound
    while True:
        proc = subprocess.run(["docker", "exec", name, "timeout", str(bound), "systemctl", "is-system-running", "--wait"],
                              capture_output=True, text=True, check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        if time.monotonic() > deadline:
            raise SystemExit("%s: systemd did not finish booting within %d s: %r %s"
                             % (name, bound, state, proc.stderr.strip()))
        time.sleep(0.5)


# Where a container's CPU time is counted, per cgroup layout (v1 or v2, docker's cgroupfs or systemd driver): the
# file and how to read seconds from it.
CGROUP_CPU = (
    ("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage", "ns"),
    ("/sys/fs/cgroup/cpuacct/system.slice/docker-{id}.scope/cpuacct.usage", "ns"),
    ("/sys/fs/cgroup/docker/{id}/cpu.stat", "usage_usec"),
    ("/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat", "usage_usec"),
)


def cgroup_cpu_seconds(container_id, layouts=CGROUP_CPU):
    """CPU seconds the container used so far (everything in it: systemd, journald, sshd, the module runs, the
    stand-ins, the gateways), from its cgroup; None where no layout of CGROUP_CPU has it."""
    for pattern, unit in layouts:
        try:
            with open(pattern.format(id=container_id), encoding="ascii") as handle:
                text = handle.read()
        except OSError:
            continue
        if unit == "ns":
            return int(text.split()[0]) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


def record_cpu(platforms):
    """Before the hosts go: the CPU seconds they used, added as one line to $GPUSERVE_HOST_CPU_FILE when it is set
    (scripts/molecule-all.sh: the scenario's CPU line; destroy runs before create too, and adds 0 then)."""
    path = os.environ.get("GPUSERVE_HOST_CPU_FILE")
    if not path:
        return
    names = [p["name"] for p in platforms]
    ids = docker("inspect", "-f", "{{.Id}}", *names, check=False).stdout.split() if names else []
    seconds = sum(cgroup_cpu_seconds(cid) or 0.0 for cid in ids)
    with open(path, "a", encoding="ascii") as handle:
        handle.write("%.1f\n" % seconds)


def destroy(platforms):
    close_ssh_masters()
    record_cpu(platforms)
    procs = [subprocess.Popen(["docker", "rm", "-f", "-v", p["name"]], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for p in platforms]
    for proc in procs:
        proc.wait()
    for network in sorted({n["name"] for p in platforms for n in p.get("networks", [])}):
        docker("network", "rm", network, check=False)   # still used by another scenario's host: left
    left = [p["name"] for p in platforms if docker("inspect", p["name"], check=False).returncode == 0]
    if left:
        raise SystemExit("still there after docker rm -f: %s" % left)
    write_instance_config([])
    print(json.dumps({"removed": [p["name"] for p in platforms]}))


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("create", "destroy"):
        raise SystemExit(__doc__)
    platforms = json.load(sys.stdin)
    (create if sys.argv[1] == "create" else destroy)(platforms)


if __name__ == "__main__":
    main()
