#!/usr/bin/env bash
# The molecule hosts' transport: `docker exec` (community.docker.docker) against SSH (multiplexed, root with the test
# key), for the same host container of the `host` image (scripts/test-images.sh: it answers SSH). Two measures, each
# as the WHOLE machine's CPU (/proc/stat: the docker CLI, dockerd, containerd, the shim and runc included, which a
# process's own time does not show): N bare commands (`true`), and one play of 60 looped module runs (40 stat, 20
# command), pipelining on as in the suite. Needs the engine and the images (scripts/test-images.sh); run it on an
# otherwise idle machine. Usage: benchmarks/ssh_transport/bench.sh [N]   (default 100)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
n="${1:-100}"
image="$(sed -n 's/^host=//p' "$ROOT/.cache/test-images.env")"
work="$(mktemp -d)"
name="gpuserve-ssh-bench-$$"
cleanup() {
  local sock
  for sock in "$work"/cp*; do ssh -o ControlPath="$sock" -O exit x >/dev/null 2>&1 || true; done
  docker rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
ssh-keygen -q -t ed25519 -N '' -f "$work/key"
docker run -d --name "$name" --cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
  --cgroupns private --tmpfs /run --tmpfs /run/lock --tmpfs /sys/fs/cgroup --stop-signal SIGRTMIN+3 \
  -v "$work/key.pub:/root/.ssh/authorized_keys:ro" "$image" /lib/systemd/systemd >/dev/null
docker exec "$name" timeout 120 systemctl is-system-running --wait >/dev/null 2>&1 || true
addr="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$name")"
opts=(-i "$work/key" -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
      -o LogLevel=ERROR -o ControlMaster=auto -o ControlPath="$work/cp" -o ControlPersist=60s)
until ssh "${opts[@]}" "root@$addr" true 2>/dev/null; do sleep 0.5; done
cpu() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat; }   # centiseconds of all cores
hz="$(getconf CLK_TCK)"
measure() {  # label command... -> one table row: CPU ms per command
  local label="$1" a b; shift
  a="$(cpu)"; for _ in $(seq 1 "$n"); do "$@" >/dev/null; done; b="$(cpu)"
  echo "| $label | $n | $(( (b - a) * 1000 / hz / n )) |"
}
echo "| transport | commands | machine CPU ms per command |"
echo "| --- | ---: | ---: |"
measure "docker exec $name true" docker exec "$name" true
measure "ssh (multiplexed) true" ssh "${opts[@]}" "root@$addr" true
measure "docker exec $name python3 -c pass" docker exec "$name" /usr/bin/python3 -c pass
measure "ssh (multiplexed) python3 -c pass" ssh "${opts[@]}" "root@$addr" /usr/bin/python3 -c pass
cat >"$work/play.yml" <<'PLAY'
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.stat: {path: /etc/passwd}
      loop: "{{ range(40) | list }}"
    - ansible.builtin.command: "true"
      changed_when: false
      loop: "{{ range(20) | list }}"
PLAY
echo "$name ansible_connection=community.docker.docker" >"$work/inv-docker"
echo "$name ansible_host=$addr ansible_user=root ansible_private_key_file=$work/key ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ControlPath=$work/cp-%h'" >"$work/inv-ssh"
echo
echo "| transport | a play of 60 module runs: wall s | machine CPU s |"
echo "| --- | ---: | ---: |"
for t in docker ssh; do
  a="$(cpu)"; s=$SECONDS
  ANSIBLE_PIPELINING=True ANSIBLE_SSH_ARGS='-o ControlMaster=auto -o ControlPersist=60s' \
    ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3 "$ROOT/.venv/bin/ansible-playbook" -i "$work/inv-$t" "$work/play.yml" >/dev/null
  b="$(cpu)"
  echo "| $t | $((SECONDS - s)) | $(python3 -c "print(round(($b - $a) / $hz, 1))") |"
done
