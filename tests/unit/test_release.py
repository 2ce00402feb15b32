# SPDX-License-Identifier: GPL-3.0-or-later
"""make release (scripts/release.sh, issue 42) cuts a release in one command: the fragments become the release in
changelogs/changelog.yaml and CHANGELOG.rst, with the tested matrix as its summary; the tarball, its sha256 and the
matrix go into docs/releases/<version>.md; the release's files are committed and tagged. Run on a throwaway copy of
the checkout (the files git knows), never on the checkout itself."""
from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile

import pytest
import yaml

from conftest import ROOT, load_file

NOTES = load_file("release_notes", os.path.join(ROOT, "scripts", "release-notes.py"))


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost"] + list(args), cwd=cwd,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    if not os.path.exists(os.path.join(ROOT, ".venv", "bin", "antsibull-changelog")):
        pytest.skip("antsibull-changelog is not in .venv (make venv)")
    tree = tmp_path_factory.mktemp("release") / "sglang"
    tree.mkdir()
    # the files git tracks, as they are in the checkout (an untracked fragment is not part of a release)
    files = subprocess.run(["git", "ls-files", "-c", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["xargs", "-0", "cp", "--parents", "-t", str(tree)], input=files, cwd=ROOT, check=False,
                   capture_output=True)
    os.symlink(os.path.join(ROOT, ".venv"), str(tree / ".venv"))
    # once the checkout's version is released (its fragments gone into changelog.yaml), the machinery is tried on
    # the next patch version with one fragment of its own, as the next release will be cut
    galaxy = tree / "galaxy.yml"
    version = yaml.safe_load(galaxy.read_text())["version"]
    released = yaml.safe_load((tree / "changelogs" / "changelog.yaml").read_text()).get("releases") or {}
    if version in released:
        major, minor, patch = (int(x) for x in version.split("."))
        galaxy.write_text(galaxy.read_text().replace("version: %s" % version, "version: %d.%d.%d" % (major, minor, patch + 1)))
        (tree / "changelogs" / "fragments").mkdir(parents=True, exist_ok=True)   # git keeps no empty folder
        (tree / "changelogs" / "fragments" / "next.yml").write_text("---\nbugfixes:\n  - server - a fix of the next release.\n")
    _git(str(tree), "init", "-q")
    _git(str(tree), "add", "-A")
    _git(str(tree), "commit", "-qm", "tree")
    return tree


def _release(tree, **env):
    return subprocess.run(["bash", "scripts/release.sh"], cwd=str(tree), capture_output=True, text=True, timeout=900,
                          check=False, env=dict(os.environ, RELEASE_DATE="2026-12-06", **env))


def test_make_release_cuts_the_release_in_one_command(copy):
    version = yaml.safe_load((copy / "galaxy.yml").read_text())["version"]
    fragments = [f for f in os.listdir(str(copy / "changelogs" / "fragments")) if f.endswith(".yml")]
    assert fragments
    proc = _release(copy)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    changes = yaml.safe_load((copy / "changelogs" / "changelog.yaml").read_text())
    release = changes["releases"][version]
    assert release["release_date"] == "2026-12-06"
    summary = release["changes"]["release_summary"]
    for needle in ("2.19.14", "0.5.23", "sglang-router 0.3.2", "smg 1.13.0", "Debian 13", "Ubuntu 24.04"):
        assert needle in summary, needle
    assert "v%s" % version in (copy / "CHANGELOG.rst").read_text()
    assert not [f for f in os.listdir(str(copy / "changelogs" / "fragments")) if f.endswith(".yml")]
    tarball = copy / ".cache" / "dist" / ("gpuserve-sglang-%s.tar.gz" % version)
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert (copy / ".cache" / "dist" / (tarball.name + ".sha256")).read_text().split()[0] == sha
    notes = (copy / "docs" / "releases" / ("%s.md" % version)).read_text()
    assert "| `%s` | `%s` |" % (tarball.name, sha) in notes
    assert "| 2.19.14 | 3.11 |" in notes and "| sglang-router | 0.3.2 |" in notes and "| 0.5.23 |" in notes
    with tarfile.open(str(tarball)) as tar:
        names = tar.getnames()
    assert "CHANGELOG.rst" in names and not [n for n in names if n.startswith("docs/releases")]
    # committed (the release's files only) and tagged
    assert _git(str(copy), "status", "--porcelain", "--", "changelogs", "CHANGELOG.rst", "docs") == ""
    assert _git(str(copy), "tag", "--list").split() == [version]
    assert "release %s" % version in _git(str(copy), "log", "-1", "--format=%s")
    # a second run refuses: the version is released
    again = _release(copy)
    assert again.returncode != 0 and "already in changelogs/changelog.yaml" in again.stderr


def test_the_lock_header_names_the_pythons_a_lock_has_wheels_for():
    assert NOTES.lock_pythons("# x\n# Written by scripts/gen-sglang-lock.py: CPython 3.11 3.12, manylinux_2_34_x86_64"
                              " wheels only; regenerate, do not edit.\n") == (["3.11", "3.12"], "manylinux_2_34_x86_64")
    assert NOTES.lock_pythons("a==1 --hash=sha256:00\n") == ([], "")


def test_the_notes_read_the_matrix_from_the_files_that_define_it():
    rows = NOTES.controllers(resolve=lambda spec: "2.22.0rc1" if spec == "latest" else spec)
    assert [r[1] for r in rows][-1] == "latest" and rows[-1][0] == "2.22.0rc1"
    text = NOTES.notes("t.tar.gz", "0" * 64, "2026-12-06", rows=rows)
    assert '`requires_ansible: "%s"`' % NOTES.requires_ansible() in text
    for release, _wheel, sha, lock, pythons, _platform in NOTES.sglang_releases():
        assert sha in text and (not lock or os.path.exists(os.path.join(ROOT, lock)))
        assert "| %s |" % (", ".join(pythons) or "-") in text
    assert ("smg", "1.13.0") in [(g, v) for g, v, _p in NOTES.gateways()]
    assert NOTES.host_table()[0].startswith("| host |") and all(line in text for line in NOTES.host_table())


def test_antsibull_changelog_accepts_every_fragment():
    """make release refuses to start on a fragment antsibull-changelog rejects; make test says so first (a committed
    fragment with ': ' inside a plain YAML scalar stopped the release)."""
    lint = os.path.join(ROOT, ".venv", "bin", "antsibull-changelog")
    if not os.path.exists(lint):
        pytest.skip("antsibull-changelog is not in .venv (make venv)")
    proc = subprocess.run([lint, "lint"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_a_breaking_fragment_needs_the_next_major_version(tmp_path):
    """Issue 48: galaxy.yml said 1.0.0 while the fragments removed modules, filters and variables. make test fails
    when a fragment says breaking_changes or removed_features and galaxy.yml's version is not a major one above the
    last release; the checkout itself passes."""
    assert NOTES.semver_problem(ROOT) == ""
    for rel in ("galaxy.yml", "changelogs/changelog.yaml"):
        os.makedirs(os.path.dirname(str(tmp_path / rel)) or str(tmp_path), exist_ok=True)
        with open(os.path.join(ROOT, rel), encoding="utf-8") as src:
            (tmp_path / rel).write_text(src.read())
    (tmp_path / "changelogs" / "fragments").mkdir()
    released = sorted(yaml.safe_load((tmp_path / "changelogs" / "changelog.yaml").read_text())["releases"],
                      key=lambda v: tuple(int(p) for p in v.split(".")))[-1]
    major = int(released.split(".")[0])
    galaxy = yaml.safe_load((tmp_path / "galaxy.yml").read_text())
    (tmp_path / "changelogs" / "fragments" / "x.yml").write_text("removed_features:\n  - module x - gone.\n")
    for version, ok in (("%d.1.0" % major, False), ("%d.0.1" % major, False), (released, False),
                        ("%d.0.0" % (major + 1), True)):
        galaxy["version"] = version
        (tmp_path / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
        problem = NOTES.semver_problem(str(tmp_path))
        assert (problem == "") is ok, (version, problem)
    (tmp_path / "changelogs" / "fragments" / "x.yml").write_text("minor_changes:\n  - x - more.\n")
    galaxy["version"] = "%d.1.0" % major
    (tmp_path / "galaxy.yml").write_text(yaml.safe_dump(galaxy))
    assert NOTES.semver_problem(str(tmp_path)) == ""
