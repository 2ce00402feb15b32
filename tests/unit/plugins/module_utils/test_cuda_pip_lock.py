# SPDX-License-Identifier: GPL-3.0-or-later
"""The hash lock of the CUDA wheels (issue 48): cuda_install_method=pip installs every wheel from
roles/cuda/files/locks/cuda-toolkit-13.0.2.txt with ``pip install --require-hashes --no-deps -r``, so a fresh
resolution cannot pull an nvjitlink, nvcc or nvvm of a later CUDA through an open specifier (nvidia-cuda-nvcc
13.0.88 asks for nvidia-nvvm, nvidia-cuda-runtime and nvidia-cuda-crt with no version)."""
from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.module_utils import _packages
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.toolkit import ToolkitFailure

# host: the fake host fixture
from test_cuda_toolkit import _toolkit as toolkit, host  # noqa: F401  # pylint: disable=unused-import

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
LOCK = os.path.join(ROOT, "roles", "cuda", "files", "locks", "cuda-toolkit-13.0.2.txt")
# What cuda-toolkit 13.0.2's metadata asks for through the role's extras (nvcc, crt, nvvm, cudart), and what
# nvidia-cuda-nvcc 13.0.88 asks for without a version (read from the wheels' METADATA on PyPI)
EXTRAS = {"nvidia-cuda-nvcc": "13.0.88", "nvidia-cuda-crt": "13.0.88", "nvidia-nvvm": "13.0.88",
          "nvidia-cuda-runtime": "13.0.96"}
NVCC_OPEN_DEPS = ("nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-crt")


def _defaults():
    with open(os.path.join(ROOT, "roles", "cuda", "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


def test_the_lock_is_what_pip_reads_as_pinned_and_hashed():
    """pip's own parser: every entry ==, every entry with sha256 hashes (x86_64 and aarch64 wheels)."""
    from pip._internal.network.session import PipSession  # pylint: disable=import-outside-toplevel
    from pip._internal.req.req_file import parse_requirements  # pylint: disable=import-outside-toplevel
    names = {}
    for entry in parse_requirements(LOCK, session=PipSession()):
        name, _sep, version = (part.strip() for part in entry.requirement.partition("=="))
        assert version and not set("<>~!*,;[") & set(version + name), entry.requirement
        hashes = entry.options.get("hashes", {}).get("sha256", [])
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), entry.requirement
        names[name] = (version, hashes)
    assert names["cuda-toolkit"][0] == "13.0.2"
    for name, version in EXTRAS.items():
        assert names[name][0] == version and len(names[name][1]) == 2, name   # one wheel per architecture
    assert set(NVCC_OPEN_DEPS) <= set(names)
    # every CUDA wheel of the pinned set at CUDA 13.0: none of a later CUDA (13.5.37 came through open specifiers)
    assert all(version.startswith("13.0.") for name, (version, _h) in names.items() if name.startswith("nvidia-"))
    assert set(names) == {"cuda-toolkit"} | set(EXTRAS)


def test_the_roles_default_lock_pins_the_roles_default_packages():
    defaults = _defaults()
    assert defaults["cuda_pip_lock"] == os.path.basename(LOCK)
    with open(LOCK) as handle:
        assert _packages.lock_problems(defaults["cuda_pip_packages"], handle.read()) == []


@pytest.mark.parametrize("packages,problem", [
    (["cuda-toolkit[nvcc]==13.0.1"], "the lock pins 13.0.2"),
    (["cuda-toolkit>=13.0"], "is not an exact pin"),
    (["nvidia-nvjitlink==13.5.37"], "the lock pins nothing of it"),
])
def test_a_package_the_lock_does_not_pin_is_named(packages, problem):
    with open(LOCK) as handle:
        assert any(problem in text for text in _packages.lock_problems(packages, handle.read()))


def test_a_lock_line_without_a_hash_is_refused():
    assert "is not NAME==VERSION --hash=sha256" in " ".join(_packages.lock_problems(
        ["a==1"], "a==1\n"))


def _with_lock(tmp_path, host, **pip):
    with open(LOCK) as handle:
        lock = handle.read()
    return toolkit(tmp_path, host, pip=dict({"lock": lock}, **pip))


def test_pip_installs_exactly_the_lock_with_hashes_and_no_deps(tmp_path, host):
    host.pip_missing = ["nvidia-nvvm==13.0.88"]
    result = _with_lock(tmp_path, host).apply()
    installs = [call for call in host.calls if call[1:4] == ["-m", "pip", "install"]]
    assert len(installs) == 1
    argv = installs[0]
    assert "--require-hashes" in argv and "--no-deps" in argv and argv[-2] == "-r"
    assert open(argv[-1]).read() == open(LOCK).read()
    assert not [word for word in argv if word.startswith("cuda-toolkit")]   # nothing resolved beside the lock
    # the venv asked about every pin of the lock
    checks = [call for call in host.calls if call[1:2] == ["-c"]]
    assert "nvidia-cuda-nvcc==13.0.88" in checks[0][-1] and "nvidia-nvvm==13.0.88" in checks[0][-1]
    assert any("hash lock" in change for change in result["changes"])


def test_a_lock_that_does_not_pin_the_packages_is_refused_before_anything_changes(tmp_path, host):
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ToolkitFailure) as failure:
        _with_lock(tmp_path, host, packages=["cuda-toolkit[nvcc]==13.0.1"]).apply()
    assert "cuda_pip_lock does not pin cuda_pip_packages" in str(failure.value)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not [call for call in host.calls if call[1:4] == ["-m", "pip", "install"]]


def test_without_a_lock_the_packages_resolve_as_before(tmp_path, host):
    toolkit(tmp_path, host, pip={"lock": ""}).apply()
    installs = [call for call in host.calls if call[1:4] == ["-m", "pip", "install"]]
    assert installs and "--require-hashes" not in installs[0] and installs[0][-1].startswith("cuda-toolkit[")
