# SPDX-License-Identifier: GPL-3.0-or-later
"""The tested matrix of a release, read from the files that define it (never typed here), for scripts/release.sh:

  release-notes.py summary                      -> a changelog fragment (YAML) with the release_summary
  release-notes.py notes TARBALL SHA256 DATE    -> docs/releases/<version>.md (Markdown)
  release-notes.py semver                       -> exit 1 when a fragment says breaking_changes/removed_features and
                                                   galaxy.yml's version is not the next major one

What is read: the version (galaxy.yml); the ansible-core range (meta/runtime.yml) and the controllers the suite runs
(tests/controllers.txt, "latest" resolved by scripts/ansible-core-version.py; the development controller of
requirements-dev.txt; the installs of tests/unit/test_collection_build.py); the SGLang releases (the texts of
plugins/module_utils/_sglang_releases.py, the hash locks of roles/install/files/locks and the Pythons each lock has
wheels for); the gateways (roles/router/vars/main.yml's pins and their locks); the hosts (the host table of
docs/operator-guide.md, as it stands)."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_HEADER_RE = re.compile(r"^# Written by scripts/gen-sglang-lock\.py: CPython ([0-9. ]+), (\S+) wheels only", re.M)


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def _load(name, *parts):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK_STACK_RE = re.compile(r"^(torch|nvidia-cuda-runtime(?:-cu\d+)?|nvidia-nccl-cu\d+)==(\S+)", re.M)


def lock_stack(text):
    """What a lock brings of the GPU stack: "torch X, CUDA runtime Y.Z, NCCL W" (read from its pins), or ""."""
    pins = dict(LOCK_STACK_RE.findall(text or ""))
    torch = pins.get("torch", "")
    cuda = next((v for k, v in pins.items() if k.startswith("nvidia-cuda-runtime")), "")
    nccl = next((v for k, v in pins.items() if k.startswith("nvidia-nccl")), "")
    parts = (["torch %s" % torch] if torch else []) + (["CUDA %s" % ".".join(cuda.split(".")[:2])] if cuda else []) \
        + (["NCCL %s" % nccl] if nccl else [])
    return ", ".join(parts)


def lock_pythons(text):
    """(the CPython X.Y list, the platform tag) a lock written by scripts/gen-sglang-lock.py has wheels for."""
    match = LOCK_HEADER_RE.search(text)
    return (match.group(1).split(), match.group(2)) if match else ([], "")


def version():
    return yaml.safe_load(_read("galaxy.yml"))["version"]


def controllers(resolve=None):
    """[(ansible-core, as tests/controllers.txt names it, Python)], 'latest' resolved from PyPI (or the kept answer)."""
    if resolve is None:
        acv = _load("ansible_core_version", "scripts", "ansible-core-version.py")
        cache = os.environ.get("GPUSERVE_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuserve-sglang")

        def resolve(spec):
            return acv.resolve(spec, acv.pypi_releases(cache, int(os.environ.get("GPUSERVE_PYPI_MAX_AGE", "86400"))))
    rows = []
    for line in _read("tests", "controllers.txt").splitlines():
        if line.strip() and not line.startswith("#"):
            spec, python = line.split()[:2]
            rows.append((resolve(spec), spec, python))
    return rows


def dev_controller():
    """The development controller's ansible-core and ansible (requirements-dev.txt)."""
    pins = dict(re.findall(r"^(ansible-core|ansible)==([0-9.]+)", _read("requirements-dev.txt"), re.M))
    return pins["ansible-core"], pins["ansible"]


def install_controllers():
    """The (ansible-core, Python) pairs that tests/unit/test_collection_build.py installs the tarball with."""
    tree = ast.parse(_read("tests", "unit", "test_collection_build.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INSTALL_CONTROLLERS" for t in node.targets):
            return [tuple(pair) for pair in ast.literal_eval(node.value)]
    return []


def sglang_releases():
    """[(release, wheel, sha256, lock file or '', its Pythons, its platform)] of the texts the collection ships."""
    texts = _load("sglang_releases", "plugins", "module_utils", "_sglang_releases.py").RELEASES
    rows = []
    for release in sorted(texts, key=lambda v: [int(p) for p in re.findall(r"\d+", v)]):
        lock = os.path.join("roles", "install", "files", "locks", "sglang-%s.txt" % release)
        pythons, platform = lock_pythons(_read(lock)) if os.path.exists(os.path.join(ROOT, lock)) else ([], "")
        rows.append((release, texts[release]["wheel"], texts[release]["sha256"],
                     lock if pythons or platform else "", pythons, platform))
    return rows


def gateways():
    """[(gateway, release, its lock's Pythons)] of the router role's pins."""
    pins = yaml.safe_load(_read("roles", "router", "vars", "main.yml"))["_router_gateway_pins"]
    rows = []
    for gateway, release in pins.items():
        lock = os.path.join("roles", "router", "files", "locks", "%s-%s.txt" % (gateway, release))
        rows.append((gateway, release, lock_pythons(_read(lock))[0] if os.path.exists(os.path.join(ROOT, lock)) else []))
    return rows


def host_table():
    """The host table of docs/operator-guide.md (its lines, as they stand)."""
    lines = _read("docs", "operator-guide.md").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| host | what is tested |"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def requires_ansible():
    return yaml.safe_load(_read("meta", "runtime.yml"))["requires_ansible"]


def _lock_words(row):
    """A locked release in the summary: its CPythons and the GPU stack its lock pins."""
    stack = lock_stack(_read(row[3]))
    return "%s (CPython %s%s)" % (row[0], ", ".join(row[4]), "; " + stack if stack else "")


def summary_fragment(rows=None):
    """The release_summary fragment: one paragraph (RST) naming the tested matrix and the full notes."""
    rows = rows if rows is not None else controllers()
    dev_core, ansible = dev_controller()
    releases = sglang_releases()
    text = ("Release %s. Tested matrix (docs/releases/%s.md has it in full): ansible-core ``%s`` (%s; the "
            "development controller %s with ansible %s runs every test); SGLang releases with a hash lock %s, and the "
            "texts of %d releases %s to %s; gateways %s; hosts: Debian 12 and Debian 13 in molecule, Ubuntu 24.04 on "
            "the GPU validation machines (docs/validation.md)." % (
                version(), version(), requires_ansible(),
                ", ".join("%s on Python %s" % (core, python) for core, _spec, python in rows), dev_core, ansible,
                ", ".join(_lock_words(r) for r in releases if r[4]) or "none",
                len(releases), releases[0][0], releases[-1][0],
                ", ".join("%s %s" % (g, v) for g, v, _p in gateways())))
    return yaml.safe_dump({"release_summary": text}, width=1000, sort_keys=False)


def notes(tarball, sha256, date, rows=None):
    """docs/releases/<version>.md: the tarball, its sha256 and the tested matrix."""
    rows = rows if rows is not None else controllers()
    dev_core, ansible = dev_controller()
    out = ["# gpuserve.sglang %s (%s)" % (version(), date), "",
           "The changes are in [CHANGELOG.rst](../../CHANGELOG.rst) (`antsibull-changelog`, from "
           "`changelogs/changelog.yaml`). This page is written by `make release` (scripts/release.sh, "
           "scripts/release-notes.py) from the files that define what is tested.", "",
           "## The tarball", "", "| file | sha256 |", "| --- | --- |", "| `%s` | `%s` |" % (tarball, sha256), "",
           "Install: `ansible-galaxy collection install %s` (check it first: `sha256sum %s`)." % (tarball, tarball), "",
           "## ansible-core", "",
           "`meta/runtime.yml`: `requires_ansible: \"%s\"` (a lower bound only: the oldest ansible-core that is "
           "tested and still maintained)." % requires_ansible(), "",
           "| ansible-core | Python | what runs on it |", "| --- | --- | --- |"]
    for core, spec, python in rows:
        what = "ansible-test sanity and the plugin unit tests (scripts/controller-matrix.sh)"
        if spec == "latest":
            what += "; PyPI's newest ansible-core, pre-releases included, on the day of the release"
        out.append("| %s | %s | %s |" % (core, python, what))
    out.append("| %s (ansible %s) | 3.12 | the development controller: ansible-lint, every unit test, every molecule "
               "scenario |" % (dev_core, ansible))
    for core, python in install_controllers():
        core = dict((spec, resolved) for resolved, spec, _py in rows).get(core, core)
        out.append("| %s | %s | `ansible-galaxy collection install` of the tarball and a role run from the installed "
                   "copy (tests/unit/test_collection_build.py) |" % (core, python))
    out += ["", "## SGLang releases", "",
            "| release | texts (from the wheel) | hash lock | host Pythons with a wheel set in the lock | GPU stack the "
            "lock pins |", "| --- | --- | --- | --- | --- |"]
    for release, wheel, sha, lock, pythons, platform in sglang_releases():
        out.append("| %s | `%s`, sha256 `%s` | %s | %s | %s |" % (
            release, wheel, sha, "`%s` (%s)" % (lock, platform) if lock else "none shipped",
            ", ".join(pythons) if pythons else "-", (lock_stack(_read(lock)) if lock else "") or "-"))
    out += ["", "A host whose Python has no wheel set in the lock (Debian 13's 3.13 for 0.5.23: outlines_core 0.1.26 "
            "has no cp313 wheel) is refused by the install role before any change, with the way named "
            "(docs/operator-guide.md).", "",
            "## Gateways", "", "| gateway | release | host Pythons with a wheel set in the lock |", "| --- | --- | --- |"]
    for gateway, release, pythons in gateways():
        out.append("| %s | %s | %s |" % (gateway, release, ", ".join(pythons) or "-"))
    out += ["", "## Hosts", "", "From docs/operator-guide.md:", ""] + host_table() + [""]
    return "\n".join(out)


MAJOR_SECTIONS = ("breaking_changes", "removed_features")


def _vtuple(version):
    return tuple(int(part) for part in str(version).split("."))


def semver_problem(root=ROOT):
    """Why galaxy.yml's version cannot be the next release, or "": a fragment that says breaking_changes or
    removed_features needs a major version above the last release (changelogs/changelog.yaml); galaxy.yml's version
    changes only with a release, so a checkout with such fragments must carry the next major version."""
    with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as handle:
        version = yaml.safe_load(handle)["version"]
    with open(os.path.join(root, "changelogs", "changelog.yaml"), encoding="utf-8") as handle:
        released = sorted((yaml.safe_load(handle) or {}).get("releases") or {}, key=_vtuple)
    last = released[-1] if released else "0.0.0"
    breaking = []
    folder = os.path.join(root, "changelogs", "fragments")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        if isinstance(data, dict) and any(data.get(section) for section in MAJOR_SECTIONS):
            breaking.append(name)
    if not breaking:
        return ""
    if version in released or _vtuple(version)[0] <= _vtuple(last)[0]:
        return ("changelogs/fragments %s say %s, so the next release is a major one: galaxy.yml's version is %s and "
                "the last release %s (set galaxy.yml to %d.0.0 and cut it with make release)"
                % (", ".join(breaking), " or ".join(MAJOR_SECTIONS), version, last, _vtuple(last)[0] + 1))
    return ""


def main(argv):
    if argv[:1] == ["semver"] and len(argv) == 1:
        problem = semver_problem()
        if problem:
            sys.stderr.write("release: %s\n" % problem)
            return 1
        return 0
    if argv[:1] == ["summary"] and len(argv) == 1:
        sys.stdout.write(summary_fragment())
        return 0
    if argv[:1] == ["notes"] and len(argv) == 4:
        sys.stdout.write(notes(*argv[1:]))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
