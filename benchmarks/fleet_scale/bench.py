# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet scale (issue 39): a no-op deploy and a rolling restart over 1, 2, 4 and 8 real systemd hosts, and what
that says about 1,000 hosts on one controller.

The code measured is a git ref of this repository, checked out into a temporary worktree (`git worktree add`), so
that a measurement is reproducible while the branch moves and the code before a change and after it run in one
invocation on one machine (`--before REF --after REF`). The harness (this file, scripts/molecule-hosts.py,
scripts/test-images.sh) is the checkout's own; the collection, its playbooks, the demo inventory's group_vars and
the stand-in server (tests/standin, a test fixture that speaks SGLang's texts, /health and shutdown) are the ref's.

For each ref:
1. One host deployed from scratch with the ref's playbooks/deploy.yml (the demo inventory's configuration: CUDA
   13.0 from pip, SGLang 0.5.9 without its GPU dependencies, the sglang-kimi unit running the stand-in), then
   frozen with `docker commit` (cached per ref, host image and recipe): every fleet host starts deployed.
2. For each size N, holding /tmp/molecule.lock (the machine's one lock for starting test hosts, one size at a
   time): N hosts started from that image (scripts/molecule-hosts.py, SSH as root with the test key, as the
   molecule scenarios reach theirs), one deploy to settle them (the new hostnames, the new boot's invocation; not
   counted), then the measured runs: `--runs` no-op deploys (playbooks/deploy.yml) and one rolling restart
   (playbooks/restart.yml, one host per batch, each restarted through "deactivating" and verified), then the
   hosts removed.

Counted per run, from the ansible.posix.json callback: task results by status (a task on a host is one result,
loop items not counted apart, as benchmarks/noop_deploy counts them), wall time, task results per second, the
controller's CPU (ansible-playbook and the children it waited for) and the hosts' CPU (their cgroups). For the
rolling restart, per worker: its batch's wall time (the play of that batch), the restart's own duration (the
module's `timeline.total`: stop, start, load, warm-up, verified) and the difference, Ansible's overhead per
worker. The projection to 1,000 hosts is computed from these figures (see README.md for the model and its limits).

  .venv/bin/python benchmarks/fleet_scale/bench.py                          # HEAD, sizes 1 2 4 8
  .venv/bin/python benchmarks/fleet_scale/bench.py --ref 244ebc5 --sizes 1,2,4,8
  .venv/bin/python benchmarks/fleet_scale/bench.py --before 244ebc5 --after HEAD
  .venv/bin/python benchmarks/fleet_scale/bench.py --table benchmarks/fleet_scale/results/<file>.json

Needs the Docker engine, the systemd image and the test host images (make engine; scripts/test-images.sh runs
here when its images are missing). Writes benchmarks/fleet_scale/results/<labels>-<UTC time>.json and prints
Markdown tables.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import importlib.util
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = os.environ.get("GPUSERVE_HOSTS_LOCK", "/tmp/molecule.lock")
PREFIX = "gpuserve-fleet-scale"
CA_VOLUME = "/etc/ssl/certs/ca-certificates.crt:/usr/local/share/gpuserve/host-ca-bundle.crt:ro"
# The stand-in's simulated durations: short, so that the rolling restart's figures are mostly Ansible's; the
# restart's own time is reported beside the overhead either way. PYTHONPATH: where the demo puts the stand-in.
BENCH_VARS = {
    "sglang_env": {"PYTHONPATH": "/opt/sglang-standin", "STANDIN_LOAD_SECONDS": "2",
                   "STANDIN_WARMUP_SECONDS": "1", "STANDIN_DRAIN_SECONDS": "3"},
    "sglang_restart_timeout": 240,
}
# The golden host's preparation, as scripts/demo.sh does it (what a GPU host has and a test host lacks).
PREPARE = [
    ["sh", "-c", 'printf "[global]\\ncert = /usr/local/share/gpuserve/host-ca-bundle.crt\\n" > /etc/pip.conf'],
    ["mkdir", "-p", "/opt/sglang-standin", "/srv/models/Kimi-K2.5-INT4", "/srv/models/Kimi-K2.5-EAGLE3"],
]
STANDIN_FILES = ["tests/standin/sglang_standin.py", "tests/standin/sglang_standin_releases.py",
                 "tests/standin/make_standin_model.py"]
MODEL_STEPS = [
    ["python3", "/opt/sglang-standin/make_standin_model.py", "kimi", "/srv/models/Kimi-K2.5-INT4"],
    ["python3", "/opt/sglang-standin/make_standin_model.py", "eagle3", "/srv/models/Kimi-K2.5-EAGLE3"],
]
KIMI_CONFIG = "tests/fixtures/models/kimi-k2.5/config.json"


def log(msg):
    print("fleet_scale: %s" % msg, file=sys.stderr, flush=True)


def run(args, check=True, **kwargs):
    """A command, its output captured; a failure names the command and its last output lines."""
    proc = subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise SystemExit("fleet_scale: %s failed (exit %d):\n%s" % (" ".join(args[:6]), proc.returncode, tail))
    return proc


@contextlib.contextmanager
def hosts_lock():
    """/tmp/molecule.lock, the machine's lock for starting test hosts (molecule runs take it too), held around one
    size at a time so that the measurements never share the 2 cores with a scenario, and other work is not
    held up for the whole benchmark. Opened close-on-exec: no child (dockerd included) keeps it."""
    handle = open(LOCK, "a")   # noqa: SIM115 - held for the block
    try:
        started = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX)
        waited = time.monotonic() - started
        if waited > 1:
            log("waited %.0f s for %s" % (waited, LOCK))
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def host_image():
    """The `host` test image (systemd, SSH for the test key, the AnsiballZ bytecode cache): scripts/test-images.sh,
    run under the lock when its list is missing or names an image that is gone."""
    env_file = os.path.join(ROOT, ".cache", "test-images.env")

    def listed():
        try:
            with open(env_file, encoding="utf-8") as handle:
                return dict(line.strip().split("=", 1) for line in handle if "=" in line).get("host")
        except OSError:
            return None

    image = listed()
    if not image or run(["docker", "image", "inspect", image], check=False).returncode != 0:
        log("building the test host images (scripts/test-images.sh)")
        with hosts_lock():
            subprocess.run([os.path.join(ROOT, "scripts", "test-images.sh")], check=True, stdout=sys.stderr)
        image = listed()
    return image


class Tree:
    """The ref's checkout in a temporary worktree, and a collections path where it is gpuserve.sglang."""

    def __init__(self, ref, work):
        self.ref = ref
        self.sha = run(["git", "-C", ROOT, "rev-parse", "--verify", ref + "^{commit}"]).stdout.strip()
        self.short = self.sha[:7]
        self.path = os.path.join(work, "tree-" + self.short)
        run(["git", "-C", ROOT, "worktree", "add", "--detach", self.path, self.sha])
        collections = os.path.join(work, "collections-" + self.short, "ansible_collections", "gpuserve")
        os.makedirs(collections)
        os.symlink(self.path, os.path.join(collections, "sglang"))
        self.collections = os.path.dirname(os.path.dirname(collections))
        self.subject = run(["git", "-C", ROOT, "log", "-1", "--format=%s", self.sha]).stdout.strip()

    def remove(self):
        run(["git", "-C", ROOT, "worktree", "remove", "--force", self.path], check=False)


class Fleet:
    """N test hosts started from one image with scripts/molecule-hosts.py (the molecule scenarios' create and
    destroy), reached over SSH with one multiplexed connection each, and the inventory that names them."""

    def __init__(self, names, image, work):
        self.names = names
        self.image = image
        self.work = work
        self.platforms = [{"name": name, "image": image, "pre_build_image": True, "command": "/lib/systemd/systemd",
                           "capabilities": ["SYS_ADMIN"], "security_opts": ["seccomp=unconfined",
                                                                            "apparmor=unconfined"],
                           "cgroupns_mode": "private", "tmpfs": ["/run", "/run/lock", "/sys/fs/cgroup"],
                           "stop_signal": "SIGRTMIN+3", "volumes": [CA_VOLUME]} for name in names]
        self.instances = []

    def env(self):
        return dict(os.environ, MOLECULE_INSTANCE_CONFIG=os.path.join(self.work, "instances.json"),
                    MOLECULE_EPHEMERAL_DIRECTORY=self.work)

    def up(self):
        self.down()   # a host of an interrupted run under the same name
        run([sys.executable, os.path.join(ROOT, "scripts", "molecule-hosts.py"), "create"],
            input=json.dumps(self.platforms), env=self.env())
        with open(os.path.join(self.work, "instances.json"), encoding="utf-8") as handle:
            self.instances = json.load(handle)

    def down(self):
        run([sys.executable, os.path.join(ROOT, "scripts", "molecule-hosts.py"), "destroy"],
            input=json.dumps(self.platforms), env=self.env(), check=False)

    def cpu_seconds(self):
        """CPU seconds the hosts used so far (their cgroups: systemd, sshd, the module runs, the stand-ins)."""
        script = os.path.join(ROOT, "scripts", "molecule-hosts.py")
        spec = importlib.util.spec_from_file_location("molecule_hosts", script)
        hosts = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hosts)
        ids = run(["docker", "inspect", "-f", "{{.Id}}"] + self.names).stdout.split()
        return sum(hosts.cgroup_cpu_seconds(cid) or 0.0 for cid in ids)

    def inventory(self, tree):
        """An inventory of the hosts in group sglang_servers with the ref's demo group_vars beside it."""
        directory = os.path.join(self.work, "inventory")
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(os.path.join(tree.path, "inventory", "demo", "group_vars"),
                        os.path.join(directory, "group_vars"))
        hosts = {}
        for entry in self.instances:
            host = {"ansible_python_interpreter": "/usr/bin/python3", "ansible_user": entry.get("user", "root")}
            if entry.get("connection"):
                host["ansible_connection"] = entry["connection"]
            else:
                host.update(ansible_host=entry["address"], ansible_port=entry["port"],
                            ansible_ssh_private_key_file=entry["identity_file"],
                            ansible_ssh_common_args="-o ControlPath=%s/cp-%%h -o ServerAliveInterval=30"
                            % self.work)
            hosts[entry["instance"]] = host
        with open(os.path.join(directory, "hosts.json"), "w", encoding="utf-8") as handle:
            json.dump({"sglang_servers": {"hosts": hosts}}, handle, indent=1)
        return os.path.join(directory, "hosts.json")


def ansible_cfg(work, forks):
    """The harness's own Ansible configuration (the ref's ansible.cfg is not read): the settings the molecule
    scenarios and the demo use (pipelining, SSH multiplexing) and the forks asked for."""
    path = os.path.join(work, "ansible.cfg")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("[defaults]\nforks = %d\nhost_key_checking = False\ninterpreter_python = auto_silent\n"
                     "retry_files_enabled = False\nstdout_callback = ansible.posix.json\n"
                     "[connection]\npipelining = True\n"
                     "[ssh_connection]\npipelining = True\nssh_args = -o ControlMaster=auto -o ControlPersist=300s\n"
                     % forks)
    return path


def busy_cpu_seconds():
    """CPU seconds the whole machine spent not idle so far (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def playbook(tree, work, inventory, forks, name, args, fleet=None):
    """One ansible-playbook run of the ref's playbook; its JSON document, wall time and CPU figures."""
    env = dict(os.environ, ANSIBLE_CONFIG=ansible_cfg(work, forks), ANSIBLE_JSON_INDENT="0",
               ANSIBLE_COLLECTIONS_PATH="%s:%s" % (tree.collections, site_packages()),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    with open(os.path.join(work, "vars.json"), "w", encoding="utf-8") as handle:
        json.dump(BENCH_VARS, handle)
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", inventory, "--forks", str(forks),
           os.path.join(tree.path, "playbooks", name), "-e", "@" + os.path.join(work, "vars.json")] + list(args)
    load = os.getloadavg()[0]
    host0 = fleet.cpu_seconds() if fleet else 0.0
    busy0 = busy_cpu_seconds()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    main_cpu = MainCpu(proc.pid)
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    main_cpu.stop()
    proc = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy1 = busy_cpu_seconds()
    host1 = fleet.cpu_seconds() if fleet else 0.0
    text = proc.stdout
    try:
        doc = json.loads(text[text.index("{"):])
    except ValueError:
        doc = None
    if proc.returncode != 0 or doc is None:
        with open(os.path.join(work, "failed-%s.log" % name), "w", encoding="utf-8") as handle:
            handle.write(text + "\n--- stderr\n" + proc.stderr)
        failures = [(task["task"]["name"], host, res.get("msg"))
                    for play in (doc or {}).get("plays", []) for task in play["tasks"]
                    for host, res in task["hosts"].items() if res.get("failed") or res.get("unreachable")]
        raise SystemExit("fleet_scale: %s of %s failed (exit %d): %s\n%s" % (
            name, tree.short, proc.returncode, json.dumps(failures[:5], default=str)[:3000],
            "\n".join(proc.stderr.strip().splitlines()[-15:])))
    return {"doc": doc, "wall_s": round(wall, 2), "load_1min_at_start": load,
            "controller_cpu_s": round((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), 2),
            "controller_main_cpu_s": round(main_cpu.seconds, 2),
            "hosts_cpu_s": round(host1 - host0, 2), "machine_busy_cpu_s": round(busy1 - busy0, 2)}


class MainCpu(threading.Thread):
    """The CPU of the ansible-playbook process itself, without its workers (/proc/<pid>/stat, read every 0.2 s
    until it ends): the strategy's one loop that queues every task and handles every result, the part of the
    controller's work that more cores do not spread."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.path = "/proc/%d/stat" % pid
        self.seconds = 0.0
        self.done = threading.Event()
        self.start()

    def run(self):
        tick = os.sysconf("SC_CLK_TCK")
        while not self.done.is_set():
            try:
                with open(self.path, encoding="ascii") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                return
            if fields[0] != "Z":
                self.seconds = (int(fields[11]) + int(fields[12])) / tick
            self.done.wait(0.2)

    def stop(self):
        self.done.set()
        self.join()


def site_packages():
    return run([os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()


def count_results(doc):
    """Task results by status, in all and per host, and the names of the tasks that reported a change."""
    total = {"ok": 0, "changed": 0, "skipped": 0, "failed": 0, "unreachable": 0}
    per_host = {}
    changed = []
    for play in doc["plays"]:
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                kind = ("unreachable" if res.get("unreachable") else "skipped" if res.get("skipped")
                        else "failed" if res.get("failed") else "changed" if res.get("changed") else "ok")
                total[kind] += 1
                per_host[host] = per_host.get(host, 0) + 1
                if kind == "changed":
                    changed.append("%s: %s" % (host, task["task"]["name"]))
    return total, per_host, changed


def parse_time(text):
    return datetime.datetime.fromisoformat(text.rstrip("Z"))


def find_timelines(value, depth=0):
    """Every dict with a numeric `timeline.total` in a task result (the module's own, or one level in)."""
    if not isinstance(value, dict) or depth > 2:
        return []
    found = []
    timeline = value.get("timeline")
    if isinstance(timeline, dict) and isinstance(timeline.get("total"), (int, float)):
        found.append(value)
    for child in value.values():
        if isinstance(child, dict):
            found.extend(find_timelines(child, depth + 1))
    return found


def restart_workers(doc):
    """Per worker of a rolling restart (one play per batch in the JSON document): the batch's wall time, the
    restart's own duration (the changed result with the longest timeline.total, i.e. the restart) and the rest."""
    workers = {}
    for play in doc["plays"]:
        duration = play["play"]["duration"]
        if "end" not in duration:
            continue
        hosts = sorted({host for task in play["tasks"] for host in task["hosts"]})
        span = (parse_time(duration["end"]) - parse_time(duration["start"])).total_seconds()
        restarts = {}
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                for found in find_timelines(res):
                    if found.get("changed", res.get("changed")) and (
                            host not in restarts or found["timeline"]["total"] > restarts[host]["total"]):
                        restarts[host] = dict(found["timeline"], task=task["task"]["name"])
        for host in hosts:
            restart = restarts.get(host)
            workers[host] = {"batch_wall_s": round(span / max(1, len(hosts)), 2), "batch_hosts": len(hosts),
                             "restart": restart,
                             "overhead_s": round(span / max(1, len(hosts)) - restart["total"], 2) if restart else None}
    return workers


def summarize(run_, kind):
    total, per_host, changed = count_results(run_["doc"])
    results = sum(total.values())
    out = {k: v for k, v in run_.items() if k != "doc"}
    out.update(results=total, results_total=results, results_per_host=per_host, changed_tasks=changed[:40],
               results_per_s=round(results / run_["wall_s"], 1) if run_["wall_s"] else None,
               controller_cpu_per_result_ms=round(1000 * run_["controller_cpu_s"] / results, 1) if results else None)
    if run_.get("controller_main_cpu_s") and results:
        out["controller_main_cpu_per_result_ms"] = round(1000 * run_["controller_main_cpu_s"] / results, 1)
    if kind == "restart":
        workers = restart_workers(run_["doc"])
        out["workers"] = workers
        with_restart = [w for w in workers.values() if w["restart"]]
        if with_restart:
            out["restart_s_mean"] = round(statistics.mean(w["restart"]["total"] for w in with_restart), 2)
            out["batch_wall_s_mean"] = round(statistics.mean(w["batch_wall_s"] for w in with_restart), 2)
            out["overhead_s_mean"] = round(statistics.mean(w["overhead_s"] for w in with_restart), 2)
        out["workers_restarted"] = len(with_restart)
    return out


def golden_image(tree, base, work, forks):
    """The image of one host deployed from scratch by the ref's deploy.yml (cached per ref, base image, vars and
    preparation): each fleet host starts from it, deployed, as a fleet that a no-op deploy finds unchanged."""
    recipe = json.dumps([run(["docker", "image", "inspect", "-f", "{{.Id}}", base]).stdout.strip(), BENCH_VARS,
                         PREPARE, STANDIN_FILES, MODEL_STEPS, KIMI_CONFIG], sort_keys=True)
    tag = "gpuserve-sglang/fleet-scale:%s-%s" % (tree.short, hashlib.sha256(recipe.encode()).hexdigest()[:8])
    if run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        log("%s: deployed host image %s is cached" % (tree.short, tag))
        return tag, None
    name = "%s-golden" % PREFIX
    fleet = Fleet([name], base, os.path.join(work, "golden-" + tree.short))
    os.makedirs(fleet.work, exist_ok=True)
    log("%s: deploying one host from scratch for the image %s (CUDA wheels, SGLang 0.5.9: minutes)" % (
        tree.short, tag))
    with hosts_lock():
        fleet.up()
        try:
            for step in PREPARE:
                run(["docker", "exec", name] + step)
            for path in STANDIN_FILES:
                run(["docker", "cp", "-L", os.path.join(tree.path, path), "%s:/opt/sglang-standin/" % name])
            for step in MODEL_STEPS:
                run(["docker", "exec", name] + step)
            run(["docker", "cp", os.path.join(tree.path, KIMI_CONFIG),
                 "%s:/srv/models/Kimi-K2.5-INT4/config.json" % name])
            inventory = fleet.inventory(tree)
            first = playbook(tree, fleet.work, inventory, forks, "deploy.yml", [])
            run(["docker", "commit", "-c", 'CMD ["/lib/systemd/systemd"]', name, tag])
        finally:
            fleet.down()
    return tag, summarize(first, "deploy")


def measure_size(tree, image, size, work, forks, runs):
    names = ["%s-%d" % (PREFIX, i) for i in range(1, size + 1)]
    fleet = Fleet(names, image, os.path.join(work, "n%d-%s" % (size, tree.short)))
    os.makedirs(fleet.work, exist_ok=True)
    with hosts_lock():
        others = [n for n in run(["docker", "ps", "--format", "{{.Names}}"]).stdout.split()
                  if not n.startswith(PREFIX)]
        started = time.monotonic()
        fleet.up()
        up_s = time.monotonic() - started
        try:
            inventory = fleet.inventory(tree)
            settle = summarize(playbook(tree, fleet.work, inventory, forks, "deploy.yml", [], fleet), "deploy")
            noop = [summarize(playbook(tree, fleet.work, inventory, forks, "deploy.yml", [], fleet), "deploy")
                    for _run in range(runs)]
            restart = summarize(playbook(tree, fleet.work, inventory, forks, "restart.yml",
                                         ["-e", "sglang_rollout_batch=1"], fleet), "restart")
        finally:
            fleet.down()
    log("%s, %d host(s): no-op deploy %s s (%s results), rolling restart %s s" % (
        tree.short, size, "/".join(str(n["wall_s"]) for n in noop), noop[0]["results_total"], restart["wall_s"]))
    return {"hosts": size, "hosts_up_s": round(up_s, 1), "other_containers_running": others,
            "settle_deploy": {k: settle[k] for k in ("wall_s", "results", "results_total", "changed_tasks")},
            "noop_deploy": noop, "rolling_restart": restart}


def median_run(runs):
    """The run with the median wall time (the lower one of an even count)."""
    return sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2]


def projection(sizes, target=1000, forks=50, cores=(2, 16)):
    """1,000 hosts on one controller with forks 50, from the measured sizes (README.md: the model, its limits)."""
    largest = max(sizes, key=lambda s: s["hosts"])
    one = min(sizes, key=lambda s: s["hosts"])
    noop = median_run(largest["noop_deploy"])
    per_host = noop["results_total"] / largest["hosts"]
    wall_1 = median_run(one["noop_deploy"])["wall_s"]
    rate = noop["results_per_s"]
    cpu_per_result = noop["controller_cpu_s"] / noop["results_total"]
    waves = math.ceil(target / forks)
    deploy = {
        "task_results_per_host": round(per_host, 1),
        "task_results_total": round(per_host * target),
        "measured_results_per_s_at_%d_hosts" % largest["hosts"]: rate,
        "by_measured_rate_s": round(per_host * target / rate),
        # one host's wall time per wave; without a 1-host size measured, no latency bound
        "by_latency_s": round(waves * wall_1) if one["hosts"] == 1 else None,
        "controller_cpu_per_result_ms": round(1000 * cpu_per_result, 1),
    }
    for core in cores:
        deploy["by_controller_cpu_%d_cores_s" % core] = round(per_host * target * cpu_per_result / core)
    bounds = [b for b in (deploy["by_latency_s"], deploy["by_controller_cpu_%d_cores_s" % cores[-1]]) if b]
    if noop.get("controller_main_cpu_s"):
        main = noop["controller_main_cpu_s"] / noop["results_total"]
        deploy["controller_main_cpu_per_result_ms"] = round(1000 * main, 1)
        deploy["by_one_result_loop_s"] = round(per_host * target * main)
        bounds.append(deploy["by_one_result_loop_s"])
    deploy["estimate_s"] = max(bounds)
    restart = largest["rolling_restart"]
    rolling = {}
    if restart.get("workers_restarted"):
        per_worker = restart["batch_wall_s_mean"]
        rolling = {"restart_s": restart["restart_s_mean"], "overhead_per_worker_s": restart["overhead_s_mean"],
                   "batch_1_s": round(target * per_worker),
                   "batch_%d_s_if_overhead_per_batch_stays" % forks: round(waves * per_worker)}
    return {"hosts": target, "forks": forks, "from_sizes": [s["hosts"] for s in sizes], "noop_deploy": deploy,
            "rolling_restart": rolling}


def table(doc):
    lines = ["| code | hosts | no-op deploy wall s | task results (per host) | results/s | controller CPU s "
             "(ms per result) | rolling restart wall s | per worker: batch s / restart s / Ansible overhead s |",
             "|---|---|---|---|---|---|---|---|"]
    for ref in doc["refs"]:
        for size in ref["sizes"]:
            noop = median_run(size["noop_deploy"])
            walls = "/".join("%.1f" % r["wall_s"] for r in size["noop_deploy"])
            status = ", ".join("%d %s" % (v, k) for k, v in noop["results"].items() if v)
            restart = size["rolling_restart"]
            worker = ("%.1f / %.1f / %.1f" % (restart["batch_wall_s_mean"], restart["restart_s_mean"],
                                              restart["overhead_s_mean"]) if restart.get("workers_restarted")
                      else "no restart seen")
            lines.append("| %s `%s` | %d | %s | %d (%g): %s | %.1f | %.1f (%.1f) | %.1f | %s |" % (
                ref["label"], ref["sha"][:7], size["hosts"], walls, noop["results_total"],
                noop["results_total"] / size["hosts"], status, noop["results_per_s"], noop["controller_cpu_s"],
                noop["controller_cpu_per_result_ms"], restart["wall_s"], worker))
    lines.append("")
    for ref in doc["refs"]:
        proj = ref.get("projection")
        if not proj:
            continue
        d, r = proj["noop_deploy"], proj["rolling_restart"]
        rate_key = next(k for k in d if k.startswith("measured_results_per_s"))
        lines.append(
            "%s `%s`, 1,000 hosts, forks 50: no-op deploy %d task results; at the measured %s results/s %s; "
            "latency-bound (20 waves x the 1-host wall) %s; controller-CPU-bound (%.1f ms per result) %s on 2 cores, "
            "%s on 16;%s estimate %s. Rolling restart, one host per batch: %s (restart %.1f s + Ansible %.1f s per "
            "worker)." % (ref["label"], ref["sha"][:7], d["task_results_total"], d[rate_key],
                          minutes(d["by_measured_rate_s"]),
                          minutes(d["by_latency_s"]) if d["by_latency_s"] else "not measured (no 1-host size)",
                          d["controller_cpu_per_result_ms"], minutes(d["by_controller_cpu_2_cores_s"]),
                          minutes(d["by_controller_cpu_16_cores_s"]),
                          " the one result loop (%.1f ms per result, any cores) %s;" % (
                              d["controller_main_cpu_per_result_ms"], minutes(d["by_one_result_loop_s"]))
                          if "by_one_result_loop_s" in d else "", minutes(d["estimate_s"]),
                          minutes(r.get("batch_1_s", 0)), r.get("restart_s", 0), r.get("overhead_per_worker_s", 0)))
    return "\n".join(lines)


def minutes(seconds):
    return "%.0f min" % (seconds / 60) if seconds >= 600 else "%.1f min" % (seconds / 60)


def write(path, doc):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(doc, handle, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--ref", help="the code to measure (default HEAD)")
    parser.add_argument("--before", help="with --after: the code before a change, measured first")
    parser.add_argument("--after", help="with --before: the code after it, measured in the same run")
    parser.add_argument("--sizes", default="1,2,4,8", help="fleet sizes, comma-separated (default 1,2,4,8)")
    parser.add_argument("--runs", type=int, default=1, help="no-op deploys per size (default 1)")
    parser.add_argument("--forks", type=int, default=50, help="ansible forks (default 50)")
    parser.add_argument("--out", help="results file (default benchmarks/fleet_scale/results/<labels>-<time>.json)")
    parser.add_argument("--table", metavar="FILE", help="only print the tables of an earlier results file")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table, encoding="utf-8") as handle:
            print(table(json.load(handle)))
        return 0
    if bool(args.before) != bool(args.after):
        parser.error("--before and --after go together")
    if args.ref and args.before:
        parser.error("--ref or --before/--after, not both")
    refs = [("before", args.before), ("after", args.after)] if args.before else [("ref", args.ref or "HEAD")]
    sizes = [int(s) for s in args.sizes.split(",")]
    base = host_image()
    work = tempfile.mkdtemp(prefix="fleet-scale.")
    doc = {"benchmark": "fleet_scale", "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "harness_sha": run(["git", "-C", ROOT, "rev-parse", "HEAD"]).stdout.strip(),
           "machine": {"cores": os.cpu_count(), "mem_gib": round(os.sysconf("SC_PAGE_SIZE")
                                                                 * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)},
           "host_image": base, "forks": args.forks, "bench_vars": BENCH_VARS, "refs": []}
    trees = []
    try:
        for label, ref in refs:
            tree = Tree(ref, work)
            trees.append(tree)
            doc["refs"].append({"label": label, "ref": ref, "sha": tree.sha, "subject": tree.subject, "sizes": []})
        out = args.out or os.path.join(HERE, "results", "%s-%s.json" % (
            "-".join("%s-%s" % (e["label"], e["sha"][:7]) for e in doc["refs"]),
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")))
        for entry, tree in zip(doc["refs"], trees):
            entry["image"], entry["first_deploy"] = golden_image(tree, base, work, args.forks)
        # sizes interleaved (before n, after n, ...) so that both see the machine in the same state; the file
        # is written after each size, so that an interrupted run keeps what it measured
        for size in sizes:
            for entry, tree in zip(doc["refs"], trees):
                entry["sizes"].append(measure_size(tree, entry["image"], size, work, args.forks, args.runs))
                entry["projection"] = projection(entry["sizes"], forks=args.forks)
                write(out, doc)
    finally:
        for tree in trees:
            tree.remove()
        shutil.rmtree(work, ignore_errors=True)
    doc["ended"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    write(out, doc)
    log("wrote %s" % os.path.relpath(out, ROOT))
    print(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
