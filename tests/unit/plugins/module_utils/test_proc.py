# SPDX-License-Identifier: GPL-3.0-or-later
"""_proc.read_text: the one file reader of nvidia_gpu_info and sglang_memory_plan (/proc/<pid>/cgroup, ...)."""

from ansible_collections.gpuserve.sglang.plugins.module_utils import _proc


def test_read_text_reads_a_file(tmp_path):
    path = tmp_path / "cgroup"
    path.write_text("0::/system.slice/sglang-kimi.service\n")
    assert _proc.read_text(str(path)) == "0::/system.slice/sglang-kimi.service\n"


def test_read_text_missing_or_unreadable_is_none(tmp_path):
    assert _proc.read_text(str(tmp_path / "no-such-pid" / "cgroup")) is None
    assert _proc.read_text(str(tmp_path)) is None  # a directory
