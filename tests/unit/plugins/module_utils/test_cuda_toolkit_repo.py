# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The toolkit module's pure functions (module_utils/_cuda_toolkit/repo.py): NVIDIA's repository per distro/arch,
the nvcc parser, stale ld.so.conf.d, the sources refused."""
from __future__ import annotations

import base64
import os
import re

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit import repo as f
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.repo import CudaToolkitError

from conftest import FIXTURES

HOST_TXT = os.path.join(FIXTURES, "gpu-host-texts", "host.txt")

DISTROS = ["ubuntu2204", "ubuntu2404", "debian12"]
ARCHES = ["x86_64", "sbsa"]


def _section(name):
    text = open(HOST_TXT, encoding="utf-8").read()
    match = re.search(r"^### %s\n(.*?)(?=^### |\Z)" % re.escape(name), text, re.S | re.M)
    assert match, name
    return match.group(1)


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("arch", ARCHES)
def test_repo_rendered_for_each_distro_and_arch(distro, arch):
    r = f.cuda_repo("13.0", distro, arch)
    base = "https://developer.download.nvidia.com/compute/cuda/repos/%s/%s/" % (distro, arch)
    assert r["repo_url"] == base
    assert r["keyring_url"] == base + "cuda-keyring_1.1-1_all.deb"
    assert r["keyring_deb"] == "cuda-keyring_1.1-1_all.deb"
    # the keyring package's own file name, so our file replaces its entry instead of duplicating it
    assert r["sources_file"] == "/etc/apt/sources.list.d/cuda-%s-%s.list" % (distro, arch)
    assert r["sources_line"] == "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] %s /" % base
    assert r["toolkit_package"] == "cuda-toolkit-13-0"
    assert r["pin_file"] == "/etc/apt/preferences.d/cuda-toolkit-13-0"
    assert r["pin_version"] == "13.0.*"
    assert r["driver_pinning_package"] == ""
    assert r["driver_packages"] == []


def test_pin_file_content():
    pin = f.cuda_repo("13.0", "ubuntu2404", "x86_64")["pin_content"]
    stanzas = pin.strip().split("\n\n")
    assert len(stanzas) == 2
    assert "Package: cuda-toolkit-13-0\nPin: version 13.0.*\nPin-Priority: 1001" in stanzas[0]
    assert "Package: cuda cuda-toolkit cuda-toolkit-13\nPin: version *\nPin-Priority: -1" in stanzas[1]
    exact = f.cuda_repo("13.0", "ubuntu2404", "x86_64", pin_version="13.0.2-1")
    assert "Pin: version 13.0.2-1\n" in exact["pin_content"]


@pytest.mark.parametrize("mirror", ["https://mirror.example/cuda/repos", "https://mirror.example/cuda/repos/"])
def test_mirror_replaces_nvidia(mirror):
    r = f.cuda_repo("13.0", "debian12", "x86_64", mirror=mirror)
    assert r["repo_url"] == "https://mirror.example/cuda/repos/debian12/x86_64/"
    assert r["keyring_url"] == "https://mirror.example/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
    assert "developer.download.nvidia.com" not in r["sources_line"]
    assert r["sources_line"].endswith(" https://mirror.example/cuda/repos/debian12/x86_64/ /")


@pytest.mark.parametrize("flavor,pkg", [("open", "nvidia-open"), ("proprietary", "cuda-drivers")])
def test_driver_branch_lock(flavor, pkg):
    r = f.cuda_repo("13.0", "ubuntu2204", "sbsa", driver_install=True, driver_branch="580", driver_flavor=flavor)
    assert r["driver_pinning_package"] == "nvidia-driver-pinning-580"
    assert r["driver_packages"] == [pkg]


@pytest.mark.parametrize("kwargs,message", [
    ({"release": "13"}, "MAJOR.MINOR"),
    ({"release": "13.0.1"}, "MAJOR.MINOR"),
    ({"distro": "rhel9"}, "unsupported CUDA repository distro"),
    ({"arch": "aarch64"}, "unsupported CUDA repository arch"),
    ({"mirror": "mirror.example/cuda"}, "http(s):// or file://"),
    ({"keyring_version": "latest"}, "cuda-keyring version"),
    ({"pin_version": "12.8.*"}, "is not a 13.0 release"),
    ({"driver_install": True, "driver_branch": "58"}, "three digits"),
    ({"driver_install": True, "driver_flavor": "nouveau"}, "driver flavor"),
])
def test_repo_bad_input(kwargs, message):
    args = {"release": "13.0", "distro": "ubuntu2404", "arch": "x86_64"}
    args.update(kwargs)
    with pytest.raises(CudaToolkitError, match=re.escape(message)):
        f.cuda_repo(**args)


@pytest.mark.parametrize("dist,ver,name", [
    ("Ubuntu", "22.04", "ubuntu2204"),
    ("Ubuntu", "24.04", "ubuntu2404"),
    ("Debian", "12", "debian12"),
    ("Debian", "12.7", "debian12"),
])
def test_distro_from_facts(dist, ver, name):
    assert f.cuda_repo_distro(dist, ver) == name


@pytest.mark.parametrize("dist,ver", [("Ubuntu", "20.04"), ("Debian", "11"), ("RedHat", "9.4")])
def test_distro_unsupported(dist, ver):
    with pytest.raises(CudaToolkitError, match="supported here for ubuntu2204, ubuntu2404, debian12 only"):
        f.cuda_repo_distro(dist, ver)


@pytest.mark.parametrize("machine,arch", [("x86_64", "x86_64"), ("amd64", "x86_64"), ("aarch64", "sbsa"), ("arm64", "sbsa")])
def test_arch_from_facts(machine, arch):
    assert f.cuda_repo_arch(machine) == arch


def test_arch_unsupported():
    with pytest.raises(CudaToolkitError, match="ppc64le"):
        f.cuda_repo_arch("ppc64le")


def test_nvcc_release_from_real_host_output():
    parsed = f.cuda_nvcc_release(_section("nvcc"))
    assert parsed == {"release": "13.0", "version": "13.0.88"}


def test_nvcc_release_of_12_8():
    text = ("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
            "Build cuda_12.8.r12.8/compiler.35583870_0\n")
    assert f.cuda_nvcc_release(text) == {"release": "12.8", "version": "12.8.93"}


def test_nvcc_release_garbage():
    with pytest.raises(CudaToolkitError, match="no 'release X.Y, VX.Y.Z' line"):
        f.cuda_nvcc_release("bash: nvcc: command not found")


def test_stale_ldconfig():
    files = [
        {"path": "/etc/ld.so.conf.d/988_cuda-12.conf", "content": "/usr/local/cuda-12.8/targets/x86_64-linux/lib\n"},
        {"path": "/etc/ld.so.conf.d/gds-12-8.conf", "content": "/usr/local/cuda-12.8/gds/lib\n"},
        {"path": "/etc/ld.so.conf.d/987_cuda-13.conf", "content": "/usr/local/cuda-13/targets/x86_64-linux/lib\n"},
        {"path": "/etc/ld.so.conf.d/gds-13-0.conf", "content": "/usr/local/cuda-13.0/gds/lib\n"},
        {"path": "/etc/ld.so.conf.d/000_cuda.conf", "content": "/usr/local/cuda/targets/x86_64-linux/lib\n"},
        {"path": "/etc/ld.so.conf.d/nvidia.conf", "content": "/usr/lib/x86_64-linux-gnu/nvidia\n"},
        {"path": "/etc/ld.so.conf.d/libc.conf", "content": "# libc default configuration\n/usr/local/lib\n"},
        {"path": "/etc/ld.so.conf.d/wheels.conf",
         "content": "/opt/venv/lib/python3.11/site-packages/nvidia/cu12/lib\n"},
        {"path": "/etc/ld.so.conf.d/cuda-gpuserve.conf", "content": "# CUDA 12.8 once\n/usr/local/cuda-13.0/lib64\n"},
    ]
    stale = f.cuda_stale_ldconfig(files, "13.0", keep=["/etc/ld.so.conf.d/cuda-gpuserve.conf"])
    assert [s["path"] for s in stale] == [
        "/etc/ld.so.conf.d/988_cuda-12.conf",
        "/etc/ld.so.conf.d/gds-12-8.conf",
        "/etc/ld.so.conf.d/wheels.conf",
    ]
    assert stale[0]["reason"].startswith("CUDA 12, not 13 (file name 988_cuda-12.conf; /usr/local/cuda-12.8/")


def test_stale_ldconfig_reads_slurp_results():
    slurped = [{"source": "/etc/ld.so.conf.d/988_cuda-12.conf", "encoding": "base64",
                "content": base64.b64encode(b"/usr/local/cuda-12.8/targets/x86_64-linux/lib\n").decode()}]
    assert [s["path"] for s in f.cuda_stale_ldconfig(slurped, "13.0")] == ["/etc/ld.so.conf.d/988_cuda-12.conf"]
    # for a 12.8 target, the 13 entry is the stale one
    slurped[0]["source"] = "/etc/ld.so.conf.d/987_cuda-13.conf"
    slurped[0]["content"] = base64.b64encode(b"/usr/local/cuda-13/targets/x86_64-linux/lib\n").decode()
    assert [s["path"] for s in f.cuda_stale_ldconfig(slurped, "12.8")] == ["/etc/ld.so.conf.d/987_cuda-13.conf"]
    assert f.cuda_stale_ldconfig(slurped, "13.0") == []


def test_real_host_ldconf_names_are_not_stale_for_13():
    names = [n.strip() for n in _section("nvcc").splitlines() if n.strip().endswith(".conf")]
    assert "987_cuda-13.conf" in names
    files = [{"path": "/etc/ld.so.conf.d/" + n, "content": ""} for n in names]
    assert f.cuda_stale_ldconfig(files, "13.0") == []


GOOD_SOURCES = {"cuda_repo_base_url": "https://developer.download.nvidia.com/compute/cuda/repos",
                "cuda_repo_mirror": "", "cuda_pip_extra_args": "", "cuda_keyring_sha256": ""}


@pytest.mark.parametrize("name, value", [
    ("cuda_repo_mirror", "https://mirror.example/cuda/repos"),
    ("cuda_repo_base_url", "file:///srv/cuda/repos"),
    ("cuda_pip_extra_args", "--index-url https://pypi.mirror.example/simple --find-links file:///srv/wheels"),
    ("cuda_keyring_sha256", "AB" * 32),
])
def test_source_problems_pass_https_file_and_a_well_formed_checksum(name, value):
    assert f.cuda_source_problems(dict(GOOD_SOURCES, **{name: value})) == []


def test_source_problems_name_each_refused_setting_in_order_as_json():
    bad = {"cuda_repo_base_url": "http://x/repos", "cuda_repo_mirror": "ftp://m/repos",
           "cuda_pip_extra_args": "--extra-index-url=http://pypi.example/simple", "cuda_keyring_sha256": "abc"}
    assert f.cuda_source_problems(bad) == ['cuda_repo_base_url="http://x/repos"', 'cuda_repo_mirror="ftp://m/repos"',
                                           'cuda_pip_extra_args="--extra-index-url=http://pypi.example/simple"',
                                           'cuda_keyring_sha256="abc"']
    # a URL with a space after it, a newline at its end, a value that is not a string, a missing base URL
    assert f.cuda_source_problems(dict(GOOD_SOURCES, cuda_repo_base_url="https://x/ y")) \
        == ['cuda_repo_base_url="https://x/ y"']
    assert f.cuda_source_problems(dict(GOOD_SOURCES, cuda_repo_mirror="https://m/\n")) \
        == ['cuda_repo_mirror="https://m/\\n"']
    assert f.cuda_source_problems(dict(GOOD_SOURCES, cuda_keyring_sha256=12)) == ["cuda_keyring_sha256=12"]
    assert f.cuda_source_problems({}) == ['cuda_repo_base_url=""']
    with pytest.raises(CudaToolkitError, match="by name"):
        f.cuda_source_problems(["https://x"])
