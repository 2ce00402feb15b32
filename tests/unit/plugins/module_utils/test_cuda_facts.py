# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_cuda_facts.py and the module cuda_host_facts: what the cuda role reads of a host, in one module run
(issue 22) - the fields of ansible.builtin.stat it replaced, and the loader entries as find + slurp read them. Real
files in a temporary tree."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.repo import cuda_stale_ldconfig
from ansible_collections.gpuserve.sglang.plugins.module_utils import _cuda_facts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "cuda_host_facts.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
STAT_FIELDS = {"exists", "path", "islnk", "isdir", "isreg", "executable"}


@pytest.fixture
def cuda_tree(tmp_path):
    """A pip-method host in small: the wheel tree with an executable nvcc, the CUDA home linking to it, the
    generic link to the home, a dangling link, a plain file and a real directory."""
    wheel = tmp_path / "site-packages" / "nvidia" / "cu13"
    (wheel / "bin").mkdir(parents=True)
    nvcc = wheel / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (wheel / "bin" / "ptxas.txt").write_text("not a program\n")
    os.symlink(str(wheel), str(tmp_path / "cuda-13.0"))
    os.symlink(str(tmp_path / "cuda-13.0"), str(tmp_path / "cuda"))
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "dangling"))
    (tmp_path / "realdir").mkdir()
    return tmp_path, wheel


def test_a_link_chain_reads_as_stat_with_and_without_follow(cuda_tree):
    root, wheel = cuda_tree
    link = _cuda_facts.path_facts(str(root / "cuda"))
    assert STAT_FIELDS <= set(link)
    assert (link["exists"], link["islnk"], link["isdir"], link["isreg"]) == (True, True, False, False)
    assert link["path"] == str(root / "cuda")
    # stat: lnk_source is the real path, lnk_target the link's own text
    assert link["lnk_target"] == str(root / "cuda-13.0")
    assert link["lnk_source"] == os.path.realpath(str(wheel)) == link["realpath"]
    assert link["executable"] is True  # a directory's search bit, through the link
    resolved = link["resolved"]
    assert (resolved["exists"], resolved["islnk"], resolved["isdir"], resolved["isreg"]) == (True, False, True, False)
    assert resolved["path"] == str(root / "cuda")


def test_nvcc_through_the_linked_home_is_the_wheel_trees(cuda_tree):
    root, wheel = cuda_tree
    via_home = _cuda_facts.path_facts(str(root / "cuda-13.0" / "bin" / "nvcc"))
    direct = _cuda_facts.path_facts(str(wheel / "bin" / "nvcc"))
    for facts in (via_home, direct):
        assert (facts["exists"], facts["isreg"], facts["islnk"], facts["executable"]) == (True, True, False, True)
        assert "lnk_source" not in facts and "lnk_target" not in facts
        assert facts["resolved"]["isreg"] and facts["resolved"]["executable"]
    assert via_home["realpath"] == direct["realpath"] == os.path.realpath(str(wheel / "bin" / "nvcc"))


def test_a_file_that_is_not_executable(cuda_tree):
    _root, wheel = cuda_tree
    facts = _cuda_facts.path_facts(str(wheel / "bin" / "ptxas.txt"))
    assert facts["exists"] and facts["isreg"] and not facts["isdir"]
    assert facts["executable"] is False  # 0644: not even root may execute it (no x bit at all)
    assert facts["resolved"]["executable"] is facts["executable"]


def test_a_real_directory_is_not_a_link(cuda_tree):
    root, _wheel = cuda_tree
    facts = _cuda_facts.path_facts(str(root / "realdir"))
    assert (facts["exists"], facts["isdir"], facts["islnk"], facts["isreg"]) == (True, True, False, False)
    assert "lnk_source" not in facts
    assert facts["resolved"]["isdir"]


def test_a_dangling_link_exists_but_does_not_resolve(cuda_tree):
    root, _wheel = cuda_tree
    facts = _cuda_facts.path_facts(str(root / "dangling"))
    assert facts["exists"] and facts["islnk"] and not facts["isdir"]
    assert facts["lnk_target"] == str(root / "gone")
    assert facts["executable"] is False
    assert facts["resolved"] == {"exists": False}


def test_a_looping_link_does_not_resolve(tmp_path):
    os.symlink(str(tmp_path / "b"), str(tmp_path / "a"))
    os.symlink(str(tmp_path / "a"), str(tmp_path / "b"))
    facts = _cuda_facts.path_facts(str(tmp_path / "a"))
    assert facts["exists"] and facts["islnk"]
    assert facts["resolved"] == {"exists": False}


def test_missing_paths_and_paths_under_a_file_read_as_stat_reads_a_missing_one(cuda_tree):
    root, wheel = cuda_tree
    for path in (root / "nothing", root / "nothing" / "bin" / "nvcc", wheel / "bin" / "nvcc" / "under-a-file"):
        facts = _cuda_facts.path_facts(str(path))
        assert facts["exists"] is False
        assert facts["resolved"] == {"exists": False}
        assert "islnk" not in facts and "isdir" not in facts
    # the real path of a missing path still resolves its parents
    assert _cuda_facts.path_facts(str(root / "cuda" / "bin" / "gone"))["realpath"] == \
        os.path.join(os.path.realpath(str(wheel)), "bin", "gone")


@pytest.mark.parametrize("path", ["relative/cuda", "", "/usr/local/cuda\x00x"])
def test_a_path_that_is_not_absolute_is_refused(path):
    with pytest.raises(_cuda_facts.CudaFactsError, match="not an absolute path"):
        _cuda_facts.path_facts(path)


@pytest.fixture
def ldconf(tmp_path):
    """An /etc/ld.so.conf.d in small: entries of two CUDA majors, the role's own, a link to an entry elsewhere, a
    dangling link, a directory and a hidden file named *.conf, a file of another suffix, undecodable bytes."""
    d = tmp_path / "ld.so.conf.d"
    d.mkdir()
    (d / "988_cuda-12.conf").write_text("/usr/local/cuda-12.8/targets/x86_64-linux/lib\n")
    (d / "cuda-gpuserve.conf").write_text("/usr/local/cuda-13.0/lib64\n")
    (d / "libc.conf").write_text("# libc default configuration\n/usr/local/lib\n")
    (d / "zz-latin1.conf").write_bytes(b"/opt/caf\xe9/lib\n")
    elsewhere = tmp_path / "tensorrt.conf.real"
    elsewhere.write_text("/usr/local/cuda-12.8/targets/x86_64-linux/lib\n/opt/tensorrt/lib\n")
    os.symlink(str(elsewhere), str(d / "tensorrt.conf"))
    os.symlink(str(tmp_path / "gone.conf"), str(d / "dangling.conf"))
    (d / "adir.conf").mkdir()
    (d / ".hidden.conf").write_text("/usr/local/cuda-12.8/lib64\n")
    (d / "notes.txt").write_text("/usr/local/cuda-12.8/lib64\n")
    (d / "988_cuda-12.conf.20250101~").write_text("/usr/local/cuda-12.8/lib64\n")
    return d


def test_loader_entries_are_read_sorted_and_unreadable_ones_skipped(ldconf):
    entries, skipped = _cuda_facts.ldconfig_entries(str(ldconf))
    assert [os.path.basename(e["path"]) for e in entries] == [
        "988_cuda-12.conf", "cuda-gpuserve.conf", "libc.conf", "tensorrt.conf", "zz-latin1.conf"]
    by_name = {os.path.basename(e["path"]): e["content"] for e in entries}
    assert by_name["tensorrt.conf"] == "/usr/local/cuda-12.8/targets/x86_64-linux/lib\n/opt/tensorrt/lib\n"
    assert by_name["libc.conf"] == "# libc default configuration\n/usr/local/lib\n"
    assert by_name["zz-latin1.conf"] == "/opt/caf\ufffd/lib\n"  # as the filter decodes a slurp
    assert all(isinstance(e["content"], str) for e in entries)
    assert entries[0]["path"] == str(ldconf / "988_cuda-12.conf")
    assert sorted(os.path.basename(s["path"]) for s in skipped) == ["adir.conf", "dangling.conf"]
    assert all(s["reason"] for s in skipped)


def test_loader_entries_feed_the_stale_filter_as_the_slurp_results_did(ldconf):
    entries, _skipped = _cuda_facts.ldconfig_entries(str(ldconf))
    stale = cuda_stale_ldconfig(entries, "13.0", keep=[str(ldconf / "cuda-gpuserve.conf")])
    assert [os.path.basename(s["path"]) for s in stale] == ["988_cuda-12.conf", "tensorrt.conf"]
    tensorrt = stale[1]
    assert tensorrt["stale_lines"] == ["/usr/local/cuda-12.8/targets/x86_64-linux/lib"]
    assert tensorrt["content_cleaned"].endswith("\n/opt/tensorrt/lib\n")
    # the same as the filter gives for the slurp results (base64) the role fed it before
    slurped = [{"source": e["path"], "content": base64.b64encode(e["content"].encode()).decode(), "encoding": "base64"}
               for e in entries]
    assert cuda_stale_ldconfig(slurped, "13.0", keep=[str(ldconf / "cuda-gpuserve.conf")]) == stale


def test_no_loader_directory_and_an_empty_one_read_nothing(tmp_path):
    assert _cuda_facts.ldconfig_entries(str(tmp_path / "missing")) == ([], [])
    assert _cuda_facts.ldconfig_entries("") == ([], [])
    (tmp_path / "empty").mkdir()
    assert _cuda_facts.ldconfig_entries(str(tmp_path / "empty")) == ([], [])


def test_gather_keys_each_path_as_given(cuda_tree, ldconf):
    root, _wheel = cuda_tree
    home, nvcc = str(root / "cuda-13.0"), str(root / "cuda-13.0") + "/bin/nvcc"
    facts = _cuda_facts.gather([home, nvcc, str(root / "cuda")], str(ldconf))
    assert list(facts["paths"]) == [home, nvcc, str(root / "cuda")]
    assert facts["paths"][home]["islnk"] and facts["paths"][nvcc]["executable"]
    assert len(facts["ldconfig"]) == 5 and len(facts["ldconfig_skipped"]) == 2
    assert _cuda_facts.gather([], "") == {"paths": {}, "ldconfig": [], "ldconfig_skipped": []}


def _run_module(args, tmp_path):
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=True)}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run([sys.executable, MODULE, str(argsfile)], capture_output=True, text=True, env=env,
                          cwd=str(tmp_path), check=False, timeout=120)
    return json.loads(proc.stdout)


def test_the_module_reads_in_check_mode_and_changes_nothing(cuda_tree, ldconf, tmp_path):
    root, _wheel = cuda_tree
    result = _run_module({"paths": [str(root / "cuda"), str(root / "nothing")], "ldconfig_dir": str(ldconf)}, tmp_path)
    assert result["changed"] is False and not result.get("failed"), result
    assert result["paths"][str(root / "cuda")]["islnk"] is True
    assert result["paths"][str(root / "nothing")]["exists"] is False
    assert [os.path.basename(e["path"]) for e in result["ldconfig"]][0] == "988_cuda-12.conf"


def test_the_module_fails_on_a_relative_path(tmp_path):
    result = _run_module({"paths": ["usr/local/cuda"]}, tmp_path)
    assert result["failed"] is True
    assert "not an absolute path" in result["msg"]
