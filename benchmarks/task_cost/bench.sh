#!/usr/bin/env bash
# Where the CPU of one Ansible task against a container host goes (the molecule and demo hosts' connection,
# community.docker.docker, pipelining on): N tasks that run a module on the host (ansible.builtin.stat) and N
# that do not (ansible.builtin.set_fact), each as its own task. Counted separately:
#   - controller: ansible-playbook and its children (the docker CLI), from the shell's `time`;
#   - host: the container's cgroup (cpuacct.usage: the module's python3 in the host);
#   - engine: dockerd + containerd (+ shims), from /proc/<pid>/stat.
# Needs the engine and the systemd image (make engine). Usage: benchmarks/task_cost/bench.sh [tasks] (default 40)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
tasks="${1:-40}"
work="$(mktemp -d)"
name="gpuserve-task-cost-bench-$$"
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
docker run -d --name "$name" --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  --cgroupns=private --tmpfs /run --tmpfs /run/lock --tmpfs /sys/fs/cgroup --stop-signal SIGRTMIN+3 \
  "${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}" /lib/systemd/systemd >/dev/null
id="$(docker inspect -f '{{.Id}}' "$name")"
cg=""
for c in "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage" "/sys/fs/cgroup/docker/$id/cpu.stat" \
         "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat"; do
  [[ -e "$c" ]] && { cg="$c"; break; }
done
host_cpu() {  # seconds of CPU the container's processes used so far
  case "$cg" in
    *cpuacct.usage) awk '{printf "%.3f", $1 / 1e9}' "$cg" ;;
    *cpu.stat) awk '/^usage_usec/ {printf "%.3f", $2 / 1e6}' "$cg" ;;
    *) echo 0 ;;
  esac
}
engine_cpu() {  # seconds of CPU of dockerd, containerd and the shims so far
  local ticks=0 pid
  for pid in $(pgrep -x dockerd; pgrep -x containerd; pgrep -f containerd-shim); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", t / hz}'
}
docker exec "$name" systemctl is-system-running --wait >/dev/null 2>&1 || true
python3 - "$work" "$tasks" <<'PY'
import sys
work, n = sys.argv[1], int(sys.argv[2])
for kind, task in (("module", "ansible.builtin.stat: {path: /etc/hostname}"),
                   ("local", "ansible.builtin.set_fact: {x%d: 1}")):
    lines = ["- hosts: all", "  gather_facts: false", "  tasks:"]
    lines += ["    - {name: t%d, %s}" % (i, task % i if "%d" in task else task) for i in range(n)]
    open("%s/%s.yml" % (work, kind), "w").write("\n".join(lines) + "\n")
PY
echo "$name ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3" >"$work/inv"
echo "| $tasks tasks of | wall s | controller CPU s | host CPU s | engine CPU s | CPU per task s | load at start |"
echo "|---|---|---|---|---|---|---|"
for kind in local module; do
  load="$(cut -d' ' -f1 /proc/loadavg)"
  h0="$(host_cpu)"; e0="$(engine_cpu)"
  TIMEFORMAT='%R %U %S'
  out="$( { time ANSIBLE_PIPELINING=True "$ROOT/.venv/bin/ansible-playbook" -i "$work/inv" "$work/$kind.yml" \
            >/dev/null 2>&1; } 2>&1 | tail -1)"
  read -r wall user sys <<<"$out"
  h1="$(host_cpu)"; e1="$(engine_cpu)"
  python3 - "$kind" "$wall" "$user" "$sys" "$h0" "$h1" "$e0" "$e1" "$tasks" "$load" <<'PY'
import sys
kind, wall, user, sys_, h0, h1, e0, e1, n, load = sys.argv[1:]
ctl = float(user) + float(sys_)
host = float(h1) - float(h0)
eng = float(e1) - float(e0)
name = {"local": "`set_fact` (no module on the host)", "module": "`stat` (a module on the host)"}[kind]
print("| %s | %.1f | %.1f | %.1f | %.1f | %.3f | %s |" % (name, float(wall), ctl, host, eng, (ctl + host + eng) / int(n), load))
PY
done
