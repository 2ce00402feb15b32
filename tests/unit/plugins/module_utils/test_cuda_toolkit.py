# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_cuda_toolkit/toolkit.py without a host: every path under tmp_path, a fake run_command (dpkg-query,
apt-get, the venv's interpreter, pip, nvcc, ldconfig) and a fake venv maker. Compare, change, no-op, check mode and
each refusal (before anything changes, saying so)."""
from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _packages as pk
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.toolkit import CudaToolkit, ToolkitFailure

NVCC_OUT = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
KEYRING = b"the cuda-keyring .deb"


class Host(object):
    """The fake host: what is installed, what each command answers, and every command run."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.calls = []
        self.installed = {"g++", "python3-venv", "ca-certificates"}
        self.pip_missing = ["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"]
        self.site = str(tmp / "opt" / "venv" / "lib" / "python3.12" / "site-packages")
        self.nvcc_out = NVCC_OUT
        self.debs = {}

    def which(self, name, dirs=None):
        return None if name in ("nvidia-smi", "dnf", "yum") else "/usr/bin/" + name

    def run(self, argv, data=None, environ_update=None):
        self.calls.append(list(argv))
        name = os.path.basename(argv[0])
        if name == "dpkg-query":
            if argv[2].startswith("-f=${db:Status-Status} ${Version}"):
                version = self.debs.get(argv[3])
                return (0, "installed %s" % version, "") if version else (1, "", "not installed")
            return 0, "".join("%s\tinstalled\t1\n" % n for n in argv[3:] if n in self.installed), ""
        if name == "apt-get":
            if argv[1] == "install":
                self.installed.update(a for a in argv[3:] if not a.startswith(("-", "Dpkg")))
            return 0, "", ""
        if name == "dpkg-deb":
            return 0, "Package: cuda-keyring\nVersion: 1.1-1\n", ""
        if name == "dpkg":
            self.debs["cuda-keyring"] = "1.1-1"
            return 0, "", ""
        if name == "python" and argv[1] == "-c":
            return 0, json.dumps(self.pip_missing) + "\n", ""
        if name == "python" and argv[1:4] == ["-m", "pip", "install"]:
            tree = os.path.join(self.site, "nvidia", "cu13")
            os.makedirs(os.path.join(tree, "bin"), exist_ok=True)
            os.makedirs(os.path.join(tree, "lib"), exist_ok=True)
            with open(os.path.join(tree, "bin", "nvcc"), "w") as handle:
                handle.write("#!/bin/sh\n")
            os.chmod(os.path.join(tree, "bin", "nvcc"), 0o755)
            self.pip_missing = []
            return 0, "Successfully installed cuda-toolkit-13.0.2", ""
        if name == "nvcc" and argv[1] == "--version":
            return 0, self.nvcc_out, ""
        if name == "nvcc":
            return 0, "", ""
        if name == "ldconfig":
            return 0, "", ""
        return 127, "", "unknown command %s" % argv

    def venv_run(self, argv, **_kwargs):
        if argv[1:3] == ["-m", "venv"]:
            os.makedirs(os.path.join(argv[3], "bin"))
            open(os.path.join(argv[3], "bin", "python"), "w").close()
            return subprocess.CompletedProcess(argv, 0, "", "")
        return subprocess.CompletedProcess(argv, 0, self.site + "\n", "")

    def download(self, url, dest):
        with open(dest, "wb") as handle:
            handle.write(KEYRING)


def _params(tmp, **changes):
    ld = tmp / "etc" / "ld.so.conf.d"
    params = {
        "release": "13.0", "method": "pip", "prefix": str(tmp / "usr" / "local" / "cuda-13.0"),
        "symlink": str(tmp / "usr" / "local" / "cuda"), "phases": ["install", "configure", "verify"],
        "host_compiler_packages": ["g++"],
        "facts_file": str(tmp / "etc" / "ansible" / "facts.d" / "gpuserve_cuda.fact"),
        "repo": {"base_url": "https://developer.download.nvidia.com/compute/cuda/repos", "mirror": "",
                 "distro": "debian12", "arch": "x86_64", "keyring_version": "1.1-1", "keyring_sha256": "", "pin_version": "",
                 "driver_install": False, "driver_branch": "580", "driver_flavor": "open"},
        "pip": {"venv": str(tmp / "opt" / "venv"), "python": "python3",
                "packages": ["cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"], "extra_args": "",
                "system_packages": ["python3-venv"]},
        "environment": {"manage": True, "profile_file": str(tmp / "etc" / "profile.d" / "cuda.sh"),
                        "ldconfig_file": str(ld / "cuda-gpuserve.conf"), "remove_stale": True,
                        "backup_dir": str(tmp / "backups")},
        "verify": {"compile": True, "source": "int main() { return 0; }\n", "nvidia_smi": "nvidia-smi",
                   "driver_min_version": 580, "dir": str(tmp / "cuda-verify")},
    }
    for key, value in changes.items():
        if isinstance(value, dict):
            params[key] = dict(params[key], **value)
        else:
            params[key] = value
    return params


def _toolkit(tmp, host, check_mode=False, **changes):
    toolkit = CudaToolkit(copy.deepcopy(_params(tmp, **changes)), host.run, host.which, check_mode=check_mode,
                          download=host.download, backup=lambda path: None, machine="x86_64", venv_run=host.venv_run)
    toolkit.download_dir = str(tmp / "var" / "cache" / "gpuserve")
    return toolkit


@pytest.fixture
def host(tmp_path):
    """A host after a hand upgrade from 12.8: the 12.8 tree, /usr/local/cuda pointing at it, its loader entries."""
    (tmp_path / "usr" / "local" / "cuda-12.8").mkdir(parents=True)
    os.symlink(str(tmp_path / "usr" / "local" / "cuda-12.8"), str(tmp_path / "usr" / "local" / "cuda"))
    ld = tmp_path / "etc" / "ld.so.conf.d"
    ld.mkdir(parents=True)
    (tmp_path / "etc" / "profile.d").mkdir()
    (ld / "988_cuda-12.conf").write_text("/usr/local/cuda-12.8/targets/x86_64-linux/lib\n")
    (ld / "tensorrt.conf").write_text("/usr/local/cuda-12.8/targets/x86_64-linux/lib\n/opt/tensorrt/lib\n")
    (ld / "zz-site.conf").write_text("/opt/site/lib\n")
    return Host(tmp_path)


def test_pip_installs_wires_verifies_and_a_second_run_changes_nothing(tmp_path, host):
    result = _toolkit(tmp_path, host).apply()
    assert result["changed"] and result["phases"] == ["install", "configure", "verify"]
    prefix = tmp_path / "usr" / "local" / "cuda-13.0"
    tree = os.path.join(host.site, "nvidia", "cu13")
    assert os.readlink(str(prefix)) == tree and os.readlink(os.path.join(tree, "lib64")) == "lib"
    assert os.readlink(str(tmp_path / "usr" / "local" / "cuda")) == str(prefix)
    old_target = (tmp_path / "backups" / "cuda.link-target").read_text()
    assert old_target == str(tmp_path / "usr" / "local" / "cuda-12.8") + "\n"
    ld = tmp_path / "etc" / "ld.so.conf.d"
    assert (ld / "cuda-gpuserve.conf").read_text().endswith("# CUDA 13.0 (pip)\n%s/lib64\n" % prefix)
    assert (ld / "tensorrt.conf").read_text().startswith("# gpuserve.sglang.cuda (CUDA 12, not 13): ")
    assert (ld / "tensorrt.conf").read_text().endswith("\n/opt/tensorrt/lib\n")
    assert (ld / "zz-site.conf").read_text() == "/opt/site/lib\n"
    assert (tmp_path / "backups" / "ld.so.conf.d" / "tensorrt.conf").read_text().startswith("/usr/local/cuda-12.8")
    assert "export CUDA_HOME=%s\n" % prefix in (tmp_path / "etc" / "profile.d" / "cuda.sh").read_text()
    facts = json.loads((tmp_path / "etc" / "ansible" / "facts.d" / "gpuserve_cuda.fact").read_text())
    assert facts == result["facts"] and facts["cuda_lib"] == str(prefix) + "/lib64"
    assert ["ldconfig"] in host.calls
    assert result["verified"] == {"ran": True, "nvcc_version": "13.0.88", "driver_version": "", "gpu_count": 0}
    assert "no GPU here (compile-only test passed)" in result["msg"]
    assert (tmp_path / "cuda-verify" / "cuda_verify.cu").read_text() == "int main() { return 0; }\n"

    host.calls[:] = []
    again = _toolkit(tmp_path, host).apply()
    assert again["changed"] is False and again["changes"] == [], again["changes"]
    assert ["ldconfig"] not in host.calls and not [c for c in host.calls if c[0] == "apt-get"]
    assert not [c for c in host.calls if c[1:3] == ["-m", "pip"]]


def test_check_mode_reports_and_writes_nothing(tmp_path, host):
    result = _toolkit(tmp_path, host, check_mode=True).apply()
    assert result["changed"]
    assert not os.path.lexists(str(tmp_path / "usr" / "local" / "cuda-13.0"))
    assert not (tmp_path / "opt" / "venv").exists() and not os.listdir(str(tmp_path / "etc" / "profile.d"))
    assert os.readlink(str(tmp_path / "usr" / "local" / "cuda")).endswith("cuda-12.8")
    assert "Check mode: the verify phase runs nvcc and the GPU test only in a real run." in result["notes"]
    assert not [c for c in host.calls if c[0] in ("apt-get", "ldconfig")]


def test_default_only_reports_stale_entries(tmp_path, host):
    toolkit = _toolkit(tmp_path, host, environment={"remove_stale": False})
    result = toolkit.apply()
    assert [s["path"].rsplit("/", 1)[1] for s in result["stale_ldconfig"]] == ["988_cuda-12.conf", "tensorrt.conf"]
    assert (tmp_path / "etc" / "ld.so.conf.d" / "tensorrt.conf").read_text().startswith("/usr/local/cuda-12.8")
    assert any("would give a second libcudart beside CUDA 13.0; left as it is" in w for w in toolkit.warnings)


def test_missing_packages_are_installed_after_a_cache_refresh(tmp_path, host):
    host.installed.discard("g++")
    toolkit = _toolkit(tmp_path, host)
    toolkit.packages.stamps = ()
    result = toolkit.apply()
    assert ["apt-get", "update"] in host.calls and "installed g++" in result["changes"]


def _refused(tmp_path, host, text, **changes):
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ToolkitFailure) as failure:
        _toolkit(tmp_path, host, **changes).apply()
    assert text in str(failure.value) and str(failure.value).endswith("Nothing was changed on the host.")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    return str(failure.value)


def test_existing_without_nvcc_is_refused(tmp_path, host):
    msg = _refused(tmp_path, host, "cuda_install_method=existing, but there is no CUDA 13.0 here: ", method="existing",
                   prefix=str(tmp_path / "none"))
    assert "%s/none/bin/nvcc does not exist. Install CUDA 13.0 at %s/none first" % (tmp_path, tmp_path) in msg
    (tmp_path / "home" / "bin").mkdir(parents=True)
    (tmp_path / "home" / "bin" / "nvcc").write_text("")
    _refused(tmp_path, host, "/home/bin/nvcc is missing or not executable.", method="existing",
             prefix=str(tmp_path / "home"))


def test_pip_over_a_real_directory_is_refused(tmp_path, host):
    old = tmp_path / "usr" / "local" / "cuda-12.8"
    _refused(tmp_path, host, "cuda_install_method=pip manages %s as a symlink into %s, but %s is a real directory"
             % (old, tmp_path / "opt" / "venv", old), prefix=str(old))


def test_a_real_directory_at_the_generic_link_is_refused(tmp_path, host):
    (tmp_path / "realdir").mkdir()
    _refused(tmp_path, host, "%s is a real directory, not a link; the role will not delete it" % (tmp_path / "realdir"),
             symlink=str(tmp_path / "realdir"))


@pytest.mark.parametrize("name,value", [("base_url", "http://x/repos"), ("mirror", "ftp://m"),
                                        ("keyring_sha256", "abc")])
def test_plain_sources_are_refused_naming_the_variable(tmp_path, host, name, value):
    variable = {"base_url": "cuda_repo_base_url", "mirror": "cuda_repo_mirror"}.get(name, "cuda_" + name)
    _refused(tmp_path, host, "refused: %s=%s" % (variable, json.dumps(value)), repo={name: value})


def test_nvidia_repo_without_the_keyring_checksum_is_refused_unless_only_the_preflight_runs(tmp_path, host):
    _refused(tmp_path, host, "cuda_install_method=nvidia_repo needs cuda_keyring_sha256, the sha256 of "
             "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb",
             method="nvidia_repo")
    result = _toolkit(tmp_path, host, method="nvidia_repo", phases=[],
                      repo={"mirror": "https://mirror.example.internal/cuda/repos/", "driver_install": True}).apply()
    assert result["changed"] is False and result["phases"] == []
    assert result["repo"]["repo_url"] == "https://mirror.example.internal/cuda/repos/debian12/x86_64/"
    assert result["repo"]["driver_packages"] == ["nvidia-open"]


def test_distro_from_os_release(tmp_path, host):
    toolkit = _toolkit(tmp_path, host, method="nvidia_repo", phases=[], repo={"distro": ""})
    toolkit.os_release = str(tmp_path / "os-release")
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n')
    assert toolkit.apply()["repo"]["distro"] == "ubuntu2404"
    (tmp_path / "os-release").write_text('ID=rocky\nVERSION_ID="9.4"\n')
    toolkit = _toolkit(tmp_path, host, method="nvidia_repo", phases=[], repo={"distro": ""})
    toolkit.os_release = str(tmp_path / "os-release")
    with pytest.raises(ToolkitFailure, match="supported here for ubuntu2204, ubuntu2404, debian12 only"):
        toolkit.apply()


def _repo_toolkit(tmp_path, host, sha):
    toolkit = _toolkit(tmp_path, host, method="nvidia_repo", symlink="", environment={"manage": False},
                       phases=["install"], repo={"keyring_sha256": sha})
    original = toolkit._render_repo

    def render():
        repo = original()
        repo["sources_file"] = str(tmp_path / "apt" / "cuda.list")
        repo["pin_file"] = str(tmp_path / "apt" / "pin")
        return repo
    toolkit._render_repo = render
    (tmp_path / "apt").mkdir(exist_ok=True)
    return toolkit


def test_nvidia_repo_keyring_sources_pin_and_packages_then_nothing(tmp_path, host):
    sha = hashlib.sha256(KEYRING).hexdigest()
    result = _repo_toolkit(tmp_path, host, sha).apply()
    assert (tmp_path / "apt" / "cuda.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n")
    assert "Pin: version 13.0.*" in (tmp_path / "apt" / "pin").read_text()
    assert ["apt-get", "update"] in host.calls and "cuda-toolkit-13-0" in host.installed
    assert any(c.startswith("installed cuda-keyring 1.1-1") for c in result["changes"])
    host.calls[:] = []
    again = _repo_toolkit(tmp_path, host, sha).apply()
    assert again["changed"] is False, again["changes"]
    assert not [c for c in host.calls if c[0] in ("apt-get", "dpkg")]


def test_a_keyring_with_another_checksum_is_not_installed(tmp_path, host):
    with pytest.raises(ToolkitFailure, match="not cuda_keyring_sha256 %s: nothing was installed from it" % ("0" * 64)):
        _repo_toolkit(tmp_path, host, "0" * 64).apply()
    assert not os.listdir(str(tmp_path / "var" / "cache" / "gpuserve"))
    assert not [c for c in host.calls if c[0] == "dpkg"]


def test_verify_refuses_another_release(tmp_path, host):
    host.nvcc_out = "Cuda compilation tools, release 12.8, V12.8.93\n"
    with pytest.raises(ToolkitFailure) as failure:
        _toolkit(tmp_path, host).apply()
    assert "/bin/nvcc reports release 12.8 (V12.8.93), but this host should have CUDA 13.0." in str(failure.value)
    assert "Changed before this: " in str(failure.value)


def test_verify_only_changes_nothing_on_a_wired_host(tmp_path, host):
    _toolkit(tmp_path, host).apply()
    result = _toolkit(tmp_path, host, phases=["verify"]).apply()
    assert result["changed"] is False and result["verified"]["ran"]


def test_pip_unsatisfied_asks_the_venvs_interpreter(tmp_path):
    calls = []

    def run(argv, data=None, environ_update=None):
        calls.append(argv)
        return 0, '["b==2"]\n', ""
    assert pk.pip_unsatisfied(run, "/v/bin/python", ["a==1", "b==2"]) == ["b==2"]
    assert calls[0][:2] == ["/v/bin/python", "-c"] and json.loads(calls[0][3]) == ["a==1", "b==2"]


def test_pip_check_script_against_this_interpreter():
    """The check script itself, run by this interpreter: pytest is there, a made-up name is not."""
    out = subprocess.run(["python3", "-c", pk.PIP_CHECK, json.dumps(["pytest>=1", "no-such-dist-xyz==1"])],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["no-such-dist-xyz==1"]


def _compiles(host):
    return [c for c in host.calls if os.path.basename(c[0]) == "nvcc" and c[1:2] == ["-o"]]


def test_a_run_that_changed_nothing_compiles_the_cu_test_once_per_boot_toolkit_and_driver(tmp_path, host):
    """The .cu test's compile was most of a no-op run's time (seconds of nvcc on every deploy, issue 39's no-op
    budget). A run that changed nothing skips it when the same test passed earlier in this boot on the same nvcc
    binary, driver and GPU count; a new boot, another nvcc, a change in the run or verify.every_run compile again.
    nvcc --version (the release) is read on every run either way. (Old code: a compile on every run.)"""
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")

    def run(**changes):
        toolkit = _toolkit(tmp_path, host, **changes)
        toolkit.boot_id_file = str(boot)
        host.calls[:] = []
        return toolkit.apply()

    first = run()
    assert first["changed"] and len(_compiles(host)) == 1
    assert json.loads((tmp_path / "cuda-verify" / "verified.json").read_text())["proof"]["boot_id"] == "boot-1"
    again = run()
    assert again["changed"] is False and _compiles(host) == [], host.calls
    assert [c for c in host.calls if c[1:] == ["--version"]], "nvcc's release is still read"
    assert "not compiled again" in again["msg"] and again["verified"]["ran"] is True
    assert run(verify={"every_run": True})["changed"] is False and len(_compiles(host)) == 1
    boot.write_text("boot-2\n")    # a reboot: the driver and GPUs are proven again once
    assert run()["changed"] is False and len(_compiles(host)) == 1
    assert run()["changed"] is False and _compiles(host) == []
    nvcc = os.path.join(host.site, "nvidia", "cu13", "bin", "nvcc")
    with open(nvcc, "a") as handle:    # another nvcc binary (a toolkit replaced by hand)
        handle.write("# 13.0.3\n")
    assert run()["changed"] is False and len(_compiles(host)) == 1
