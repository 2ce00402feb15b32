#!/usr/bin/env bash
# Cost of one Ansible task against a container host (the molecule and demo hosts' connection,
# community.docker.docker), with and without pipelining: 40 looped tasks (20 x command, 20 x stat), wall time and
# the CPU time of ansible-playbook and its children (the docker CLI calls). Needs the engine and the systemd image
# (make engine). Usage: benchmarks/pipelining/bench.sh [rounds]   (default 1)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
rounds="${1:-1}"
work="$(mktemp -d)"
name="gpuserve-pipelining-bench-$$"
cleanup() { docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
docker run -d --name "$name" --rm "${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}" sleep 3600 >/dev/null
cat >"$work/play.yml" <<'PLAY'
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.command: "true"
      loop: "{{ range(20) | list }}"
      changed_when: false
    - ansible.builtin.stat: {path: /etc/hostname}
      loop: "{{ range(20) | list }}"
PLAY
echo "$name ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3" >"$work/inv"
echo "| pipelining | wall s | CPU s (user+sys) | load average at start |"
echo "|---|---|---|---|"
for _ in $(seq 1 "$rounds"); do
  for p in False True; do
    load="$(cut -d' ' -f1 /proc/loadavg)"
    TIMEFORMAT='%R %U %S'
    out="$( { time ANSIBLE_PIPELINING=$p "$ROOT/.venv/bin/ansible-playbook" -i "$work/inv" "$work/play.yml" \
              >/dev/null 2>&1; } 2>&1 | tail -1)"
    read -r wall user sys <<<"$out"
    echo "| $p | $wall | $(python3 -c "print(round($user + $sys, 1))") | $load |"
  done
done
