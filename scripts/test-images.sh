#!/usr/bin/env bash
# Test host images derived from the systemd image (scripts/systemd-image.sh), each prepared ONCE per recipe and
# reused by every scenario that would otherwise do the same work in its prepare step (molecule/IMAGES says which
# scenario runs on which). The tag is the sha256 of the base image's ID and the recipe, so a changed recipe or
# a rebuilt base image gives a new image; the prepare steps still check what they need (`creates:`, dpkg-query)
# and do it themselves on a plain host, so a scenario run without this script is slower, never different.
#   host        the systemd image + the bytecode cache for AnsiballZ payloads (tests/testhost/gpuserve_test_pyc.py,
#               loaded by a .pth of the system python3 only) + Debian's openssh-server, so that the scenarios reach
#               their hosts over SSH as an operator reaches a GPU host (scripts/molecule-hosts.py; a `docker exec`
#               command cost 42 ms of the machine's CPU, a multiplexed SSH command 7 ms: docs/performance.md
#               section 13): every scenario's hosts start from it
#   standin     host + the venv where the install role would put SGLang (/opt/sglang/venv: `python3 -m venv`, as the
#               prepare steps create it) and the stand-in model directories (tests/standin/make_standin_model.py:
#               the real formats, a few bytes per tensor; the server role's model preflight reads them)
#   prometheus  standin + Debian's prometheus and prometheus-node-exporter (the prometheus scenario)
#   debian13    Debian 13's systemd image (scripts/systemd-image.sh, DEBIAN_SUITE=trixie) + the same bytecode cache:
#               the second platform of molecule/sglang_service (SYSTEMD_IMAGE_DEBIAN13)
# Writes .cache/test-images.env: one line `<kind>=<image>` each, read by scripts/molecule-all.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BASE="${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}"
out="$ROOT/.cache/test-images.env"
mkdir -p "$ROOT/.cache"

build() {  # kind from-image recipe [label] -> prints the image name
  local kind="$1" from="$2" recipe="$3" label="${4:-}" from_id hash tag cid
  from_id="$(docker image inspect -f '{{.Id}}' "$from")"
  hash="$(printf '%s\n%s\n%s\n' "$from_id" "$recipe" "$label" | sha256sum | cut -c1-12)"
  case "$kind" in
    *13) tag="gpuserve-sglang/debian13-${kind%13}:$hash" ;;
    *)   tag="gpuserve-sglang/debian12-$kind:$hash" ;;
  esac
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    echo "test-images: building $tag" >&2
    cid="$(docker create -e DEBIAN_FRONTEND=noninteractive "$from" /bin/sh -ec "$recipe")"
    if ! docker start -a "$cid" >"$ROOT/.cache/test-image-$kind.log" 2>&1; then
      docker rm -f "$cid" >/dev/null 2>&1 || true
      echo "test-images: building $tag failed, see .cache/test-image-$kind.log" >&2
      tail -20 "$ROOT/.cache/test-image-$kind.log" >&2
      return 1
    fi
    # the label tells scripts/molecule-hosts.py that the image's hosts answer SSH (images derived from it inherit it)
    docker commit -c 'CMD ["/lib/systemd/systemd"]' ${label:+-c "LABEL $label"} "$cid" "$tag" >/dev/null
    docker rm "$cid" >/dev/null
  fi
  echo "$tag"
}

# The fixture travels inside the recipe (base64), so its content is part of the image's tag.
pyc_b64="$(base64 -w0 "$ROOT/tests/testhost/gpuserve_test_pyc.py")"
# SSH for the test controller (root, key only; the key is mounted at `docker run` by scripts/molecule-hosts.py).
# No PAM: a PAM session would start a logind session and a user manager in the host for every task. MaxSessions:
# one multiplexed connection carries the sessions of a play and of the plays its verify step starts.
ssh_conf='UsePAM no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUseDNS no\nPrintMotd no\nPrintLastLog no\nMaxSessions 200\nMaxStartups 200:30:400\n'
ssh_recipe="apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-server >/dev/null
   rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
   printf '$ssh_conf' >/etc/ssh/sshd_config.d/gpuserve-test.conf
   install -d -m 0700 /root/.ssh /run/sshd && sshd -t && systemctl is-enabled ssh.service"
host_recipe="d=/usr/lib/python3/dist-packages && echo $pyc_b64 | base64 -d >\$d/gpuserve_test_pyc.py
   echo 'import gpuserve_test_pyc' >\$d/gpuserve-test-pyc.pth
   python3 -c 'import zipimport, gpuserve_test_pyc; assert zipimport._compile_source is gpuserve_test_pyc.compile_source'
   $ssh_recipe"
host="$(build host "$BASE" "$host_recipe" org.gpuserve.test-ssh=22)"
model_b64="$(base64 -w0 "$ROOT/tests/standin/make_standin_model.py")"
standin="$(build standin "$host" \
  "python3 -m venv /opt/sglang/venv && echo $model_b64 | base64 -d >/tmp/make_standin_model.py
   python3 /tmp/make_standin_model.py kimi /models/Kimi-K2.5-INT4
   python3 /tmp/make_standin_model.py eagle3 /models/Kimi-K2.5-EAGLE3 && rm /tmp/make_standin_model.py")"
prometheus="$(build prometheus "$standin" \
  'apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter >/dev/null
   rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb')"
# Debian 13 (trixie: systemd 257, Python 3.13), the second host platform of the scenarios where systemd and
# journald behaviour matter (molecule/sglang_service): its own debootstrap base, plus the same bytecode cache.
BASE13="${SYSTEMD_IMAGE_DEBIAN13_BASE:-gpuserve-sglang/debian13-systemd:1}"
SYSTEMD_IMAGE="$BASE13" DEBIAN_SUITE=trixie "$ROOT/scripts/systemd-image.sh" >&2
host13="$(build host13 "$BASE13" "$host_recipe" org.gpuserve.test-ssh=22)"
printf 'systemd=%s\nhost=%s\nstandin=%s\nprometheus=%s\ndebian13=%s\n' "$BASE" "$host" "$standin" "$prometheus" "$host13" >"$out.tmp"
mv "$out.tmp" "$out"
echo "test-images: host $host, standin $standin, prometheus $prometheus, debian13 $host13"
