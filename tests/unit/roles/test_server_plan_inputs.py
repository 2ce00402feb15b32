# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory plan's inputs match the unit's ExecStart for every profile and every release the collection claims
(issue 47): the profiles' flags for some releases only (_server_profile_release_args) were merged only after the
preflight's host read, so the fact sglang_plan_inputs, taken before it, said hicache false for the Qwen profile on
the releases whose rule hicache_mamba turns HiCache on, while the unit turned it on: the unit stopped with the 60 s
timeout instead of 180 s, the answers gate skipped its host-tier round, the memory plan left the host pool out."""
import os

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.filter.server_role import sglang_server_args, sglang_server_plan
from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "server")
PROFILES = sorted(name[:-4] for name in os.listdir(os.path.join(ROLE, "vars", "profiles")) if name != "custom.yml")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_the_release_only_flags_are_merged_before_the_host_read():
    release_args = _yaml("vars", "main.yml")["_server_in"]["release_args"]
    assert "_server_host" not in release_args and "_server_profile_release_args" in release_args
    for path in (("tasks", "run.yml"), ("templates", "sglang.service.j2")):
        with open(os.path.join(ROLE, *path), encoding="utf-8") as handle:
            assert "sglang_plan_inputs.hicache" not in handle.read(), path


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_plan_inputs_match_the_execstart_on_every_release(profile, release):
    data = _yaml("vars", "profiles", profile + ".yml")
    inputs = {"profile": data.get("_server_profile_args") or {}, "user": {}, "model_path": "/m",
              "release": release, "release_args": data.get("_server_profile_release_args") or [], "cpus": 0}
    args = sglang_server_args(inputs)
    plan = sglang_server_plan(inputs)
    assert plan["hicache"] is bool(args.get("enable-hierarchical-cache")), (profile, release)
