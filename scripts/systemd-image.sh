#!/usr/bin/env bash
# Build (once) and cache a Debian image whose PID 1 is systemd, used by every test host: Debian 12 (bookworm,
# systemd 252, Python 3.11) by default, Debian 13 (trixie, systemd 257, Python 3.13) with DEBIAN_SUITE=trixie.
# Built locally with debootstrap + docker import: no container registry is needed.
set -euo pipefail
SUITE="${DEBIAN_SUITE:-bookworm}"
case "$SUITE" in
  bookworm) IMAGE="${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}" ;;
  trixie)   IMAGE="${SYSTEMD_IMAGE:-gpuserve-sglang/debian13-systemd:1}" ;;
  *) echo "systemd-image: DEBIAN_SUITE must be bookworm or trixie, not $SUITE" >&2; exit 2 ;;
esac
if docker image inspect "$IMAGE" >/dev/null 2>&1 && [[ "${1:-}" != "--rebuild" ]]; then
  echo "systemd-image: $IMAGE is cached"
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
# The mirror the host itself uses (deb822 or one-line sources), else Debian's.
MIRROR="$( (grep -hoE '^URIs: *http[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}';
            grep -hoE '^deb +http[^ ]+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}') | grep -v security | head -1 || true)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
ROOTFS="$(mktemp -d /tmp/gpuserve-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "systemd-image: debootstrap $SUITE from $MIRROR (about a minute)"
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-venv,python3-pip,sudo,ca-certificates,procps,iproute2 \
  "$SUITE" "$ROOTFS" "$MIRROR" >"/tmp/gpuserve-debootstrap-$SUITE.log" 2>&1 || {
    echo "systemd-image: debootstrap failed, see /tmp/gpuserve-debootstrap-$SUITE.log" >&2
    tail -20 "/tmp/gpuserve-debootstrap-$SUITE.log" >&2; exit 1; }
# Trim units that make no sense in a container and slow the boot.
for u in systemd-remount-fs.service systemd-firstboot.service getty.target console-getty.service; do
  ln -sf /dev/null "$ROOTFS/etc/systemd/system/$u"
done
echo 'container' > "$ROOTFS/etc/hostname"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | docker import -c 'CMD ["/lib/systemd/systemd"]' - "$IMAGE" >/dev/null
echo "systemd-image: built $IMAGE"
