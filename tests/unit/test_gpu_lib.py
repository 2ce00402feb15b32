# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/gpu/lib.sh, the shared header of the GPU-machine checks: run in bash here (no GPU needed), and sourced
by every check that run_all.sh runs."""
from __future__ import annotations

import glob
import os
import subprocess

from conftest import ROOT

LIB = os.path.join(ROOT, "tests", "gpu", "lib.sh")


def _bash(script, **env):
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          env=dict(os.environ, **env), timeout=1800)


def test_init_links_the_collection_and_finish_counts_failures():
    proc = _bash('set -u; . "%s"; gpu_lib_init libtest\n'
                 'echo "WORK=$WORK"; readlink "$WORK/ansible_collections/gpuserve/sglang"; echo "ACP=$ANSIBLE_COLLECTIONS_PATH"\n'
                 'step "one"; ok "fine"; bad "broken"; step "two"; bad "worse"; gpu_lib_finish' % LIB)
    out = proc.stdout
    work = out.split("WORK=", 1)[1].splitlines()[0]
    assert os.path.basename(work).startswith("gpuserve-libtest.")
    assert ROOT in out and "ACP=" + work in out
    assert "=== libtest: one ===" in out and "--- RESULT: PASS: fine" in out and "--- RESULT: FAIL: broken" in out
    assert out.rstrip().endswith("=== libtest: FAILED: broken worse ===")
    assert proc.returncode == 1
    assert not os.path.exists(work)  # removed on exit


def test_all_passed_exit_zero_keep_work_and_exit_hook():
    proc = _bash('. "%s"; gpu_lib_init libtest; gpu_on_exit() { echo "HOOK ran"; }\n'
                 'echo "WORK=$WORK"; ok "fine"; gpu_lib_finish' % LIB, GPU_KEEP_WORK="1")
    work = proc.stdout.split("WORK=", 1)[1].splitlines()[0]
    try:
        assert proc.returncode == 0
        assert "=== libtest: ALL PASSED ===" in proc.stdout and "HOOK ran" in proc.stdout
        assert os.path.isdir(work) and "work dir kept: " + work in proc.stdout
    finally:
        subprocess.run(["rm", "-rf", work], check=False)


def test_every_check_sources_the_lib():
    skip = {"run_all.sh", "fetch-wheels.sh", "lib.sh"}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "*.sh"))):
        if os.path.basename(path) in skip:
            continue
        with open(path) as handle:
            text = handle.read()
        assert '. "$(dirname "$0")/lib.sh"' in text and "gpu_lib_init " in text, path
        assert "mktemp -d" not in text and "FAILED=()" not in text, path
    with open(os.path.join(ROOT, "tests", "gpu", "run_all.sh")) as handle:
        assert "lib.sh) continue" in handle.read()


def test_info_playbook_reads_the_gpus_first():
    import yaml
    proc = _bash('. "%s"; gpu_info_playbook "a check" <<\'YAML\'\n'
                 '    - name: Print\n      ansible.builtin.debug:\n        var: info\nYAML' % LIB)
    play = yaml.safe_load(proc.stdout)
    assert play[0]["name"] == "a check" and play[0]["hosts"] == "localhost"
    assert [t["name"] for t in play[0]["tasks"]] == ["Read the GPUs", "Print"]
    assert "gpuserve.sglang.nvidia_gpu_info" in play[0]["tasks"][0] and play[0]["tasks"][0]["register"] == "info"


def test_the_real_server_lane_is_left_to_its_own_call_and_runs_every_stage():
    # run_all.sh carries no SGLang: the real-server lane needs .gpu-carry (tests/gpu/real_server/build-carry.sh)
    with open(os.path.join(ROOT, "tests", "gpu", "run_all.sh")) as handle:
        assert "real_server.sh | lib.sh) continue" in handle.read()
    with open(os.path.join(ROOT, "tests", "gpu", "real_server.sh")) as handle:
        lane = handle.read()
    stages = [line.split()[3].rstrip(";") for line in lane.splitlines() if line.startswith("if ! done_stage ")]
    assert stages == ["setup", "plan", "deploy", "again", "ratio3", "fatal", "verify"]
    assert "gpuserve.sglang.server" in lane and "nsenter -t" in lane and "unshare --pid --fork --mount --cgroup" in lane


def test_the_real_lane_never_passes_with_stages_left_nor_a_verify_that_matched_no_host():
    """Issue 49: the lane printed ALL PASSED and exited 0 when its time ran out with stages left, and its verify
    stage ran verify.yml against a pattern that matched no host (skipping: no hosts matched, exit 0)."""
    with open(os.path.join(ROOT, "tests", "gpu", "real_server.sh"), encoding="utf-8") as handle:
        text = handle.read()
    assert "gpu_lib_finish; }" not in text and text.count("late \"$BUDGET\" && out_of_time") == 3
    assert "exit 3" in text and "stage(s) left" in text
    assert "-e sglang_verify_hosts=localhost" in text and "grep -q 'VERIFIED localhost'" in text
