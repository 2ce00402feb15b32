# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/_host_facts.py and the module sglang_host_facts: what the roles need of a host before they change
it, in one module run (issue 22). Real files in a temporary tree; the interpreter probe runs a real Python."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _host_facts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULE = os.path.join(ROOT, "plugins", "modules", "sglang_host_facts.py")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")


def test_interpreter_given_wins_and_names_no_versioned_venv(tmp_path):
    record = tmp_path / "install-record.json"
    record.write_text(json.dumps({"venv": "/opt/sglang/venvs/0.5.9-aa"}))
    assert _host_facts.interpreter("/usr/bin/python3", str(record), "/opt/sglang/venv") == ("/usr/bin/python3", "")


def test_interpreter_from_the_install_record_then_the_venv(tmp_path):
    record = tmp_path / "install-record.json"
    assert _host_facts.interpreter("", str(record), "/opt/sglang/venv") == ("/opt/sglang/venv/bin/python", "")
    record.write_text(json.dumps({"venv": "/opt/sglang/venvs/0.5.9-aa"}))
    assert _host_facts.interpreter("", str(record), "/opt/sglang/venv") == \
        ("/opt/sglang/venvs/0.5.9-aa/bin/python", "/opt/sglang/venvs/0.5.9-aa")
    # the record names the venv link itself (an unversioned install): no versioned venv
    record.write_text(json.dumps({"venv": "/opt/sglang/venv/"}))
    assert _host_facts.interpreter("", str(record), "/opt/sglang/venv") == ("/opt/sglang/venv//bin/python", "")


def test_a_record_that_is_not_json_is_named(tmp_path):
    record = tmp_path / "install-record.json"
    record.write_text("{half")
    with pytest.raises(_host_facts.HostFactsError, match="install record .* is not JSON"):
        _host_facts.interpreter("", str(record), "/opt/sglang/venv")


def test_dropins_name_each_overriding_line(tmp_path):
    dropins = tmp_path / "sglang-kimi.service.d"
    dropins.mkdir()
    (dropins / "10-limits.conf").write_text("[Service]\nLimitNOFILE=1\n")
    (dropins / "20-env.conf").write_text("[Service]\n  Environment=FOO=1\nExecStart=\nExecStart=/bin/true\n")
    (dropins / "notes.txt").write_text("Environment=ignored\n")
    paths, overrides = _host_facts.dropin_overrides(str(tmp_path), "sglang-kimi")
    assert [os.path.basename(p) for p in paths] == ["10-limits.conf", "20-env.conf"]
    assert overrides == ["%s: Environment=FOO=1" % (dropins / "20-env.conf"),
                         "%s: ExecStart=" % (dropins / "20-env.conf"),
                         "%s: ExecStart=/bin/true" % (dropins / "20-env.conf")]
    assert _host_facts.dropin_overrides(str(tmp_path), "other") == ([], [])


def test_paths_do_not_follow_a_final_link(tmp_path):
    (tmp_path / "model").mkdir()
    os.symlink(str(tmp_path / "model"), str(tmp_path / "link"))
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "dangling"))
    facts = _host_facts.path_facts([str(tmp_path / n) for n in ("model", "link", "dangling", "absent")])
    assert facts[str(tmp_path / "model")] == {"exists": True, "isdir": True, "islnk": False}
    assert facts[str(tmp_path / "link")] == {"exists": True, "isdir": False, "islnk": True,
                                             "target": str(tmp_path / "model")}
    assert facts[str(tmp_path / "dangling")]["exists"] is True
    assert facts[str(tmp_path / "absent")] == {"exists": False, "isdir": False, "islnk": False}


def test_probe_asks_the_interpreter_in_isolated_mode(tmp_path):
    answer = _host_facts.probe_python(sys.executable)
    assert answer["error"] == "" and answer["purelib"].startswith("/") and answer["sglang"] in (True, False)
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    broken.chmod(0o755)
    answer = _host_facts.probe_python(str(broken))
    assert answer["sglang"] is None and "exited 3: broken" in answer["error"]


def test_gather_reads_nothing_it_was_not_asked_and_never_runs_a_hostile_path(tmp_path):
    calls = []
    facts = _host_facts.gather("/tmp/x\nExecStartPre=/bin/sh", "", "/opt/sglang/venv", probe=True,
                               paths=["relative/model", "/abs\n/evil"], run=lambda *a, **k: calls.append(a))
    assert calls == [] and facts["python_exists"] is False
    assert facts["paths"] == {} and facts["cuda"] == {} and facts["dropins"] == []


def run_module(tmp_path, args):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=COLLECTIONS), check=False)
    return json.loads(proc.stdout)


def test_module_one_run_for_all_of_it(tmp_path):
    cuda = tmp_path / "gpuserve_cuda.fact"
    cuda.write_text(json.dumps({"cuda_home": "/usr/local/cuda-13.0"}))
    (tmp_path / "model").mkdir()
    result = run_module(tmp_path, {"python": sys.executable, "venv": "/opt/sglang/venv", "cuda_fact_file": str(cuda),
                                   "unit": "sglang-kimi", "unit_dir": str(tmp_path), "probe": True,
                                   "paths": [str(tmp_path / "model"), str(tmp_path / "record.md")]})
    assert result["changed"] is False and result["python"] == sys.executable and result["python_exists"] is True
    assert result["cuda"] == {"cuda_home": "/usr/local/cuda-13.0"} and result["purelib"].startswith("/")
    assert result["paths"][str(tmp_path / "model")]["isdir"] is True
    assert result["paths"][str(tmp_path / "record.md")]["exists"] is False
    cuda.write_text("not json")
    bad = run_module(tmp_path, {"venv": "/opt/sglang/venv", "cuda_fact_file": str(cuda)})
    assert bad["failed"] is True and "CUDA facts file %s is not JSON" % cuda in bad["msg"]


def test_fingerprints_name_owner_mode_and_sha1_and_say_link(tmp_path):
    import grp
    import hashlib
    import pwd
    target = tmp_path / "unit.service"
    target.write_bytes(b"[Unit]\n")
    target.chmod(0o644)
    os.symlink(str(target), str(tmp_path / "link.service"))
    (tmp_path / "dir").mkdir(mode=0o700)
    facts = _host_facts.fingerprints([str(target), str(tmp_path / "link.service"), str(tmp_path / "dir"),
                                      str(tmp_path / "absent")])
    me = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    assert facts[str(target)] == {"exists": True, "islnk": False, "isdir": False, "mode": "0644", "owner": me,
                                  "group": group, "sha1": hashlib.sha1(b"[Unit]\n").hexdigest()}
    assert facts[str(tmp_path / "link.service")]["islnk"] is True   # the roles leave a link to the module
    assert facts[str(tmp_path / "dir")]["isdir"] is True and facts[str(tmp_path / "dir")]["mode"] == "0700"
    assert "sha1" not in facts[str(tmp_path / "dir")]
    assert facts[str(tmp_path / "absent")] == {"exists": False}


def test_account_of_this_machines_root_and_of_nobody_known():
    root = _host_facts.account("root", device_glob="/nonexistent*")
    assert root["exists"] is True and root["group_exists"] is True and "root" in root["groups"]
    assert root["device_groups"] == []
    ghost = _host_facts.account("gpuserve-no-such-user", device_glob="/nonexistent*")
    assert ghost == {"exists": False, "group_exists": False, "groups": [], "device_groups": []}


def test_account_names_the_groups_that_own_the_devices(tmp_path):
    import grp
    device = tmp_path / "nvidia0"
    device.write_text("")
    gid = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != 0), None)
    if gid is None:
        pytest.skip("no non-root group on this machine")
    os.chown(str(device), -1, gid)
    facts = _host_facts.account("root", device_glob=str(tmp_path / "nvidia*"))
    assert facts["device_groups"] == [grp.getgrgid(gid).gr_name]


def test_unit_state_parses_systemctl_show_and_survives_its_absence():
    class Proc(object):
        returncode = 0
        stdout = b"ActiveState=active\nActiveEnterTimestamp=@1764687600\nInvocationID=98ed\nUnitFileState=enabled\n"
    calls = []
    state = _host_facts.unit_state("sglang-kimi", run=lambda argv, **kw: calls.append(argv) or Proc())
    assert state == {"ActiveState": "active", "ActiveEnterTimestamp": "@1764687600", "InvocationID": "98ed",
                     "UnitFileState": "enabled"}
    assert calls[0][:3] == ["systemctl", "show", "sglang-kimi.service"] and "--timestamp=unix" in calls[0]

    def missing(argv, **kw):
        raise OSError("no systemctl")
    assert _host_facts.unit_state("sglang-kimi", run=missing) == {}


def _fake_interpreter(tmp_path, jit):
    """A 'python' whose probe answers like a venv with SGLang 0.5.17 (and tvm-ffi when jit)."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    answer = json.dumps({"purelib": "/opt/v/lib", "sglang": True, "release": "0.5.17", "jit": jit})
    python.write_text("#!/bin/sh\necho '%s'\n" % answer)
    python.chmod(0o755)
    return str(python)


def _cuda_home(tmp_path, nvcc=True, cudart=True):
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "lib64").mkdir()
    if nvcc:
        (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
        (home / "bin" / "nvcc").chmod(0o755)
    if cudart:
        (home / "lib64" / "libcudart.so").write_text("")
    return str(home)


@pytest.mark.parametrize("nvcc,cudart,missing", [
    (False, True, "bin/nvcc"), (True, False, "lib64/libcudart.so"), (False, False, "bin/nvcc, lib64/libcudart.so")])
def test_a_jit_compiling_sglang_is_refused_a_cuda_home_without_nvcc_or_libcudart(tmp_path, nvcc, cudart, missing):
    # the real 0.5.17 server's first start compiles 7 kernels with $CUDA_HOME/bin/nvcc and links -lcudart from
    # $CUDA_HOME/lib64 (docs/validation.md): a home without either must be refused before any stop
    facts = _host_facts.gather(_fake_interpreter(tmp_path, True), "", "/opt/sglang/venv", probe=True,
                               cuda_home=_cuda_home(tmp_path, nvcc, cudart))
    assert facts["sglang_jit"] is True
    assert len(facts["jit_problems"]) == 1
    assert "missing: %s" % missing in facts["jit_problems"][0] and "0.5.17" in facts["jit_problems"][0]


def test_a_complete_cuda_home_or_a_release_without_jit_kernels_is_not_refused(tmp_path):
    home = _cuda_home(tmp_path)
    assert _host_facts.gather(_fake_interpreter(tmp_path, True), "", "/v", probe=True, cuda_home=home)["jit_problems"] == []
    other = tmp_path / "other"
    other.mkdir()
    facts = _host_facts.gather(_fake_interpreter(other, False), "", "/v", probe=True, cuda_home=str(tmp_path / "none"))
    assert facts["sglang_jit"] is False and facts["jit_problems"] == []


def test_the_cuda_home_checked_is_the_cuda_roles_when_none_is_given(tmp_path):
    fact_file = tmp_path / "gpuserve_cuda.fact"
    fact_file.write_text(json.dumps({"cuda_home": str(tmp_path / "no-such-cuda")}))
    facts = _host_facts.gather(_fake_interpreter(tmp_path, True), "", "/v", probe=True, cuda_fact_file=str(fact_file))
    assert str(tmp_path / "no-such-cuda") in facts["jit_problems"][0]


def test_the_unit_keeps_sglangs_jit_kernels_in_its_cache_directory():
    with open(os.path.join(ROOT, "roles", "server", "templates", "sglang.service.j2"), encoding="utf-8") as handle:
        template = handle.read()
    assert "Environment=TVM_FFI_CACHE_DIR=/var/cache/sglang/tvm-ffi" in template
    assert template.index("CacheDirectory=sglang") < template.index("TVM_FFI_CACHE_DIR")
