# SPDX-License-Identifier: GPL-3.0-or-later
"""The test hosts: a scenario that lists its own platforms (several hosts, or Debian 12 beside Debian 13) keeps the
shared flags that make them real systemd hosts without side effects on the machine (.config/molecule/config.yml),
and the host matrix of issue 23 is what the docs say: the scenarios where systemd, journald and the system python
matter run on Debian 13 too."""
from __future__ import annotations

import glob
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PER_HOST = ("name", "image", "groups", "networks", "env", "published_ports", "hostname")


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


SHARED = _load(os.path.join(ROOT, ".config", "molecule", "config.yml"))["platforms"][0]
SCENARIOS = {os.path.basename(os.path.dirname(p)): _load(p)
             for p in glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml"))}


def test_every_platform_keeps_the_shared_systemd_flags():
    flags = {k: v for k, v in SHARED.items() if k not in PER_HOST}
    assert flags["command"] == "/lib/systemd/systemd" and flags["cgroupns_mode"] == "private"
    checked = 0
    for name, scenario in SCENARIOS.items():
        for platform in scenario.get("platforms") or []:
            checked += 1
            for key, value in flags.items():
                assert platform.get(key) == value, (name, platform["name"], key)
            assert "privileged" not in platform, (name, platform["name"])
    assert checked >= 10


def test_the_host_matrix():
    debian13 = sorted(name for name, scenario in SCENARIOS.items()
                      for platform in scenario.get("platforms") or []
                      if "SYSTEMD_IMAGE_DEBIAN13" in platform.get("image", ""))
    assert debian13 == ["fleet", "nccl_tuning", "sglang_service"]
    # the fleet's rollout changes and verifies fleet-1 on Debian 13 through restart.yml, the server role on it
    fleet = [(p["name"], p["image"]) for p in SCENARIOS["fleet"]["platforms"]]
    assert fleet[0] == ("fleet-1", "${SYSTEMD_IMAGE_DEBIAN13:-gpuserve-sglang/debian13-systemd:1}")
    for host, image in fleet[1:]:
        assert image == "${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}", host
    for name in ("nccl_tuning", "sglang_service"):
        images = [p["image"] for p in SCENARIOS[name]["platforms"]]
        assert images == ["${SYSTEMD_IMAGE:-gpuserve-sglang/debian12-systemd:1}",
                          "${SYSTEMD_IMAGE_DEBIAN13:-gpuserve-sglang/debian13-systemd:1}"], name
    with open(os.path.join(ROOT, "scripts", "molecule-all.sh"), encoding="utf-8") as handle:
        assert 'SYSTEMD_IMAGE_DEBIAN13="${image_of[debian13]}"' in handle.read()
    with open(os.path.join(ROOT, "scripts", "test-images.sh"), encoding="utf-8") as handle:
        assert "DEBIAN_SUITE=trixie" in handle.read()
