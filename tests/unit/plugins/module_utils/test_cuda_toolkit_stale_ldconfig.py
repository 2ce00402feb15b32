# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 14: the cuda role destroys nothing of the operator's. A stale loader entry is reported by default; asked
to clean, the role comments out only the lines of another CUDA major (content_cleaned), keeping the rest."""
from __future__ import annotations

import os

import yaml

from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit import repo as f

from conftest import ROOT


def test_mixed_file_keeps_its_other_lines():
    files = [{"path": "/etc/ld.so.conf.d/tensorrt.conf",
              "content": "/usr/local/cuda-12.8/targets/x86_64-linux/lib\n# a comment\n/opt/tensorrt/lib\n"}]
    (item,) = f.cuda_stale_ldconfig(files, "13.0")
    assert item["stale_lines"] == ["/usr/local/cuda-12.8/targets/x86_64-linux/lib"]
    assert item["content_cleaned"] == ("# gpuserve.sglang.cuda (CUDA 12, not 13): /usr/local/cuda-12.8/targets/x86_64-linux/lib\n"
                                       "# a comment\n/opt/tensorrt/lib\n")


def test_cleaned_file_is_no_longer_stale_by_content_and_cleaning_twice_changes_nothing():
    files = [{"path": "/etc/ld.so.conf.d/site.conf", "content": "/usr/local/cuda-12/lib64\n/opt/site/lib\n"}]
    (item,) = f.cuda_stale_ldconfig(files, "13.0")
    again = f.cuda_stale_ldconfig([{"path": "/etc/ld.so.conf.d/site.conf", "content": item["content_cleaned"]}], "13.0")
    assert again == []  # no active CUDA 12 line left: the loader no longer sees a second libcudart


def test_file_named_after_cuda_12_is_idempotent():
    files = [{"path": "/etc/ld.so.conf.d/988_cuda-12.conf", "content": "/usr/local/cuda-12.8/targets/x86_64-linux/lib\n"}]
    (item,) = f.cuda_stale_ldconfig(files, "13.0")
    (again,) = f.cuda_stale_ldconfig([dict(files[0], content=item["content_cleaned"])], "13.0")
    assert again["content_cleaned"] == item["content_cleaned"]


def test_default_only_reports():
    with open(os.path.join(ROOT, "roles", "cuda", "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    assert defaults["cuda_ldconfig_remove_stale"] is False
    # the module's default too (test_cuda_toolkit.py: a stale entry is reported and left as it is)
    with open(os.path.join(ROOT, "plugins", "modules", "cuda_toolkit.py"), encoding="utf-8") as handle:
        assert 'remove_stale=dict(type="bool", default=False)' in handle.read()
