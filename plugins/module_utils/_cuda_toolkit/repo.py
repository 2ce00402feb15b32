# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cuda toolkit module computes without touching the host: NVIDIA's CUDA apt repository rendered per
distribution and architecture, the sources the role may fetch from (https or a local file:// tree only), the
parsers of ``nvcc --version`` and of the loader entries (ld.so.conf.d), and the text of the files it writes (the
login-shell profile, the loader entry, the persisted facts).

Pure functions, so every branch is unit-tested without a host (tests/unit/plugins/module_utils/).
"""

from __future__ import annotations

import base64
import json
import re
import shlex


class CudaToolkitError(ValueError):
    """An input the toolkit cannot work with (a release, a distribution, a URL); the message names it."""


NVIDIA_REPO_BASE_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
SUPPORTED_DISTROS = ("ubuntu2204", "ubuntu2404", "debian12")
SUPPORTED_ARCHES = ("x86_64", "sbsa")
KEYRING_FILE = "/usr/share/keyrings/cuda-archive-keyring.gpg"
DRIVER_FLAVORS = {"open": "nvidia-open", "proprietary": "cuda-drivers"}

# ansible_facts.architecture / uname -m / dpkg --print-architecture -> NVIDIA's repository arch
_ARCH_MAP = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "sbsa",
    "arm64": "sbsa",
    "sbsa": "sbsa",
}

_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)$")
_NVCC_RE = re.compile(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)+)")
# a CUDA install path with its version: /usr/local/cuda-12.8/..., /usr/local/cuda-12/...
_CUDA_PATH_RE = re.compile(r"cuda-(\d+)(?:[.-]\d+)?(?=[/\s]|$)")
# a wheel tree of another major: .../site-packages/nvidia/cu12/lib
_CUDA_WHEEL_RE = re.compile(r"/nvidia/cu(\d+)(?=/|$)")
# NVIDIA's own file names: 988_cuda-12.conf, gds-12-8.conf, cuda-12-8.conf
_CUDA_NAME_RE = re.compile(r"(?:^|[_-])(?:cuda|gds)-(\d+)(?:[.-]\d+)?\.conf$")


def _split_release(release):
    """'13.0' -> (13, 0); anything else is a clear error."""
    match = _RELEASE_RE.match(str(release).strip())
    if not match:
        raise CudaToolkitError(
            "CUDA release must be MAJOR.MINOR such as '13.0', got %r" % (release,))
    return int(match.group(1)), int(match.group(2))


def cuda_repo_distro(distribution, version):
    """Ansible facts (distribution, distribution_version) -> NVIDIA's repository name.

    ('Ubuntu', '24.04') -> 'ubuntu2404'; ('Debian', '12.7') -> 'debian12'.
    """
    dist = str(distribution).strip().lower()
    ver = str(version).strip()
    if dist == "ubuntu":
        name = "ubuntu" + ver.replace(".", "")
    elif dist == "debian":
        name = "debian" + ver.split(".", 1)[0]
    else:
        name = dist + ver
    if name not in SUPPORTED_DISTROS:
        raise CudaToolkitError(
            "NVIDIA's CUDA apt repository is supported here for %s only; this host is %s %s (%s)"
            % (", ".join(SUPPORTED_DISTROS), distribution, version, name))
    return name


def cuda_repo_arch(machine):
    """'x86_64' -> 'x86_64', 'aarch64' -> 'sbsa' (server ARM, e.g. Grace)."""
    arch = _ARCH_MAP.get(str(machine).strip().lower())
    if arch is None:
        raise CudaToolkitError(
            "NVIDIA's CUDA apt repository has no %r architecture here; supported: %s"
            % (machine, ", ".join(sorted(_ARCH_MAP))))
    return arch


def cuda_repo(release, distro, arch, mirror="", base_url=NVIDIA_REPO_BASE_URL, keyring_version="1.1-1",
              pin_version="", driver_install=False, driver_branch="580", driver_flavor="open"):
    """Everything the nvidia_repo method writes or installs, as one dict.

    mirror replaces base_url when set (an air-gapped mirror of .../compute/cuda/repos).
    """
    major, minor = _split_release(release)
    if distro not in SUPPORTED_DISTROS:
        raise CudaToolkitError("unsupported CUDA repository distro %r; supported: %s"
                               % (distro, ", ".join(SUPPORTED_DISTROS)))
    if arch not in SUPPORTED_ARCHES:
        raise CudaToolkitError("unsupported CUDA repository arch %r; supported: %s"
                               % (arch, ", ".join(SUPPORTED_ARCHES)))
    base = str(mirror or base_url or "").strip().rstrip("/")
    if not re.match(r"^(https?|file)://\S+$", base):
        raise CudaToolkitError("CUDA repository URL must be http(s):// or file://, got %r" % (base,))
    if not re.match(r"^\d+(\.\d+)*-\d+$", str(keyring_version)):
        raise CudaToolkitError("cuda-keyring version looks like '1.1-1', got %r" % (keyring_version,))
    pin = str(pin_version or "%d.%d.*" % (major, minor)).strip()
    if not pin.startswith("%d.%d." % (major, minor)):
        raise CudaToolkitError("apt pin version %r is not a %d.%d release" % (pin, major, minor))

    dashed = "%d-%d" % (major, minor)
    repo_url = "%s/%s/%s/" % (base, distro, arch)
    keyring_deb = "cuda-keyring_%s_all.deb" % keyring_version
    toolkit = "cuda-toolkit-%s" % dashed
    pin_lines = [
        "# Keep %s at %d.%d.x (version %s) from NVIDIA's repository." % (toolkit, major, minor, pin),
        "Package: %s" % toolkit,
        "Pin: version %s" % pin,
        "Pin-Priority: 1001",
        "",
        "# Never let the rolling meta packages move the toolkit to another release.",
        "Package: cuda cuda-toolkit cuda-toolkit-%d" % major,
        "Pin: version *",
        "Pin-Priority: -1",
    ]
    result = {
        "release": "%d.%d" % (major, minor),
        "distro": distro,
        "arch": arch,
        "repo_url": repo_url,
        "keyring_deb": keyring_deb,
        "keyring_url": repo_url + keyring_deb,
        "keyring_file": KEYRING_FILE,
        "sources_file": "/etc/apt/sources.list.d/cuda-%s-%s.list" % (distro, arch),
        "sources_line": "deb [signed-by=%s] %s /" % (KEYRING_FILE, repo_url),
        "toolkit_package": toolkit,
        "pin_file": "/etc/apt/preferences.d/%s" % toolkit,
        "pin_version": pin,
        "pin_content": "\n".join(pin_lines) + "\n",
        "driver_pinning_package": "",
        "driver_packages": [],
    }
    if driver_install:
        branch = str(driver_branch).strip()
        if not re.match(r"^\d{3}$", branch):
            raise CudaToolkitError("driver branch is three digits such as '580', got %r" % (driver_branch,))
        if driver_flavor not in DRIVER_FLAVORS:
            raise CudaToolkitError("driver flavor must be one of %s, got %r"
                                   % (", ".join(sorted(DRIVER_FLAVORS)), driver_flavor))
        result["driver_pinning_package"] = "nvidia-driver-pinning-%s" % branch
        result["driver_packages"] = [DRIVER_FLAVORS[driver_flavor]]
    return result


def cuda_nvcc_release(text):
    """`nvcc --version` output -> {'release': '13.0', 'version': '13.0.88'}."""
    match = _NVCC_RE.search(str(text or ""))
    if not match:
        raise CudaToolkitError("no 'release X.Y, VX.Y.Z' line in nvcc --version output: %r"
                               % (str(text or "")[-300:],))
    return {"release": "%s.%s" % (match.group(1), match.group(2)), "version": match.group(3)}


def cuda_stale_ldconfig(files, release, keep=()):
    """ld.so.conf.d entries that point the loader at ANOTHER CUDA major than `release`.

    files: [{'path': '/etc/ld.so.conf.d/988_cuda-12.conf', 'content': '/usr/local/cuda-12.8/...'}], or the
    results of ansible.builtin.slurp ({'source': PATH, 'content': BASE64, 'encoding': 'base64'}).
    Returns [{'path', 'reason', 'content_cleaned', 'stale_lines'}]: content_cleaned is the file with only the
    lines of another major commented out (nothing else changes). A file is stale when its name or one of its lines
    names another CUDA major (cuda-12, cuda-12.8, gds-12-8, .../nvidia/cu12/...) and no line names
    the wanted major. Paths in keep are never returned.
    """
    major, _minor = _split_release(release)
    keep = set(keep or ())
    stale = []
    for item in files or []:
        path = str(item.get("path") or item.get("source") or "")
        if not path or path in keep:
            continue
        content = item.get("content", "") or ""
        if item.get("encoding") == "base64":
            content = base64.b64decode(content).decode("utf-8", "replace")
        content = str(content)
        majors = set()
        reasons = []
        name = path.rsplit("/", 1)[-1]
        name_match = _CUDA_NAME_RE.search(name)
        if name_match:
            majors.add(int(name_match.group(1)))
            reasons.append("file name %s" % name)
        stale_lines = set()
        raw_lines = content.splitlines()
        for number, raw_line in enumerate(raw_lines):
            line = raw_line.split("#", 1)[0].strip()
            if not line:
                continue
            line_majors = set()
            for rx in (_CUDA_PATH_RE, _CUDA_WHEEL_RE):
                for match in rx.finditer(line):
                    line_majors.add(int(match.group(1)))
                    reasons.append(line)
            majors |= line_majors
            if line_majors and major not in line_majors:
                stale_lines.add(number)
        others = sorted(m for m in majors if m != major)
        if others and major not in majors:
            seen = "/".join(str(m) for m in others)
            why = "; ".join(dict.fromkeys(reasons))
            # The same file with only the lines of another CUDA major commented out: an operator's other
            # lines (TensorRT, a site library) keep working when the role is asked to clean.
            cleaned = "".join(("# gpuserve.sglang.cuda (CUDA %s, not %d): %s\n" % (seen, major, text))
                              if number in stale_lines else text + "\n" for number, text in enumerate(raw_lines))
            stale.append({"path": path, "reason": "CUDA %s, not %d (%s)" % (seen, major, why),
                          "content_cleaned": cleaned, "stale_lines": [raw_lines[n] for n in sorted(stale_lines)]})
    return stale


_SOURCE_URL_RE = re.compile(r"^(https|file)://[^\s]+\Z")
_INSECURE_URL_RE = re.compile(r"(^|[\s=,])(?!https://|file://)[A-Za-z][A-Za-z0-9+.-]*://")
_SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}\Z")


def cuda_source_problems(settings):
    """The cuda role's settings that would fetch from a source that is not https (a local file:// tree is allowed)
    or give a malformed keyring checksum, each as NAME=VALUE (the value as JSON).

    settings: the role's variables by name. cuda_repo_base_url must be an https:// or file:// URL; cuda_repo_mirror
    is empty or such a URL; cuda_pip_extra_args names no URL of another scheme; cuda_keyring_sha256 is empty or 64
    hex digits. A missing one is taken as empty (the base URL then refused); a value that is not a string is refused
    (the role's argument specs make them strings).
    """
    if not isinstance(settings, dict):
        raise CudaToolkitError("cuda_source_problems: the input must be the role's variables by name, not %s"
                               % type(settings).__name__)
    problems = []

    def refuse(name, value):
        problems.append("%s=%s" % (name, json.dumps(value)))

    base_url = settings.get("cuda_repo_base_url", "")
    mirror = settings.get("cuda_repo_mirror", "")
    pip_extra_args = settings.get("cuda_pip_extra_args", "")
    keyring_sha256 = settings.get("cuda_keyring_sha256", "")
    if not (isinstance(base_url, str) and _SOURCE_URL_RE.match(base_url)):
        refuse("cuda_repo_base_url", base_url)
    if not (mirror == "" or (isinstance(mirror, str) and _SOURCE_URL_RE.match(mirror))):
        refuse("cuda_repo_mirror", mirror)
    if not isinstance(pip_extra_args, str) or _INSECURE_URL_RE.search(pip_extra_args):
        refuse("cuda_pip_extra_args", pip_extra_args)
    if not (keyring_sha256 == "" or (isinstance(keyring_sha256, str) and _SHA256_RE.match(keyring_sha256))):
        refuse("cuda_keyring_sha256", keyring_sha256)
    return problems


def os_release(text):
    """/etc/os-release as a dict (KEY=VALUE lines, shell quotes removed): what names the distribution where the
    role does not gather Ansible's facts."""
    found = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value]
        found[key.strip()] = words[0] if words else ""
    return found


def repo_distro_of(os_release_fields):
    """NVIDIA's repository name from /etc/os-release (ID and VERSION_ID, as cuda_repo_distro takes Ansible's
    distribution facts): ubuntu 24.04 -> ubuntu2404, debian 12 -> debian12; refused for any other."""
    return cuda_repo_distro(os_release_fields.get("ID", "unknown"), os_release_fields.get("VERSION_ID", ""))


MANAGED = "#\n# Ansible managed\n#\n"


def profile_text(home, version, method, ldconfig_file):
    """/etc/profile.d/cuda.sh: CUDA_HOME, CUDA_PATH and the CUDA bin directory on PATH (once, however often the
    script is sourced); every value shell-quoted, so a crafted path never runs in a login shell (issue 14). Libraries
    come from the loader entry, so LD_LIBRARY_PATH is left alone."""
    bindir = home + "/bin"
    return (MANAGED
            + "# CUDA %s (%s) for login shells. Libraries come from\n" % (json.dumps(version), method)
            + "# %s, so LD_LIBRARY_PATH is left alone. Values are shell-quoted.\n" % json.dumps(ldconfig_file)
            + "export CUDA_HOME=%s\n" % shlex.quote(home)
            + "export CUDA_PATH=%s\n" % shlex.quote(home)
            + "_gpuserve_cuda_bin=%s\n" % shlex.quote(bindir)
            + 'case ":${PATH}:" in\n'
            + '  *":${_gpuserve_cuda_bin}:"*) ;;\n'
            + '  *) export PATH="${_gpuserve_cuda_bin}:${PATH}" ;;\n'
            + "esac\n"
            + "unset _gpuserve_cuda_bin\n")


def ldconfig_text(lib, version, method):
    """The loader entry: the CUDA home's lib64, one line."""
    return MANAGED + "# CUDA %s (%s)\n%s\n" % (version, method, lib)


def facts_text(facts):
    """/etc/ansible/facts.d/gpuserve_cuda.fact: the CUDA home, version, bin and lib as sorted, indented JSON (what
    the server role and later runs read, whether or not this role ran in the same play)."""
    return json.dumps(facts, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
