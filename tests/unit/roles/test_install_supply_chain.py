# SPDX-License-Identifier: GPL-3.0-or-later
"""install role, supply chain (issue 14): the hash lock, https-only sources, patch sha256 and -F0.

The role's checks run on this machine (conftest.run_play, connection local); nothing is installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, load_file, run_play, run_play_batch

ROLE = os.path.join(ROOT, "roles", "install")
LOCK = os.path.join(ROLE, "files", "locks", "sglang-0.5.9.txt")
SGLANG_WHEEL_SHA256 = "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"
SHA_A = "a" * 64

PREFLIGHT = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.install
        tasks_from: preflight.yml
    - ansible.builtin.debug:
        msg: "PASSED {{ (_install_lock_reqs | default([])) | length }} lines"
"""
BAD_LOCK_LINES = [
    "six==1.17.0",                                          # no hash
    "six>=1.0 --hash=sha256:" + SHA_A,                      # a range
    "--index-url http://mirror.example/simple",            # an option line
    "-r other.txt",
    "six==1.17.0 --hash=md5:0123456789abcdef0123456789abcdef",
    "six @ http://mirror.example/six.whl --hash=sha256:" + SHA_A,
]
REFUSED_INDEX_URLS = ["http://mirror.example/simple", "ftp://mirror.example/simple", "HTTP://mirror.example/simple",
                      "mirror.example/simple"]
PASSING_INDEX_URLS = ["https://mirror.example/simple", "file:///srv/simple"]
REFUSED_EXTRA_ARGS = [["--extra-index-url", "http://mirror.example/simple"], ["--find-links=http://mirror.example/wheels"],
                      ["--trusted-host", "x", "-f", "ftp://x/y"]]
MALFORMED_PATCHES = [{"file": "x.patch"}, {"path": "x.patch", "sha256": "abc"}, {"path": "x.patch", "sha": SHA_A}, 5]
PATCH_TEXT = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n"


def _preflight(tmp_path, **variables):
    return run_play(tmp_path, PREFLIGHT, [json.dumps(variables)])


def _lock(tmp_path, text, name="lock.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """Every preflight case of this file in one ansible-playbook (conftest.run_play_batch): {case: (rc, out)},
    and the directory of the cases' files."""
    tmp = tmp_path_factory.mktemp("install-preflight")
    patch = tmp / "fix.patch"
    patch.write_text(PATCH_TEXT)
    good = subprocess.run(["sha256sum", str(patch)], capture_output=True, text=True, check=True).stdout.split()[0]
    cases = {
        "shipped": {},
        "other version": {"sglang_version": "0.5.8"},
        "opt-out": {"sglang_version": "0.5.8", "sglang_pip_require_hashes": False},
        "operator lock": {"sglang_version": "0.5.8", "sglang_pip_lock": _lock(
            tmp, "# mine\nsglang==0.5.8 \\\n    --hash=sha256:%s\nsix==1.17.0 --hash=sha256:%s # ok\n" % (SHA_A, SHA_A),
            "operator.txt")},
        "lock for another version": {"sglang_pip_lock": _lock(tmp, "sglang==0.5.8 --hash=sha256:%s\n" % SHA_A,
                                                              "other.txt")},
        "missing lock": {"sglang_pip_lock": str(tmp / "nope.txt")},
        "extra packages": {"sglang_pip_extra_packages": ["sglang-kernel==0.3.21"]},
        "extra packages, no hashes": {"sglang_pip_extra_packages": ["sglang-kernel==0.3.21"],
                                      "sglang_pip_require_hashes": False},
        "extra args https": {"sglang_pip_extra_args": ["--extra-index-url", "https://mirror.example/simple"]},
        "shipped patch": {"sglang_patches": ["sglang-0.5.9-kimi-k25-eagle3.patch"]},
        "0.5.9 patch on 0.5.23": {"sglang_version": "0.5.23", "sglang_patches": ["sglang-0.5.9-kimi-k25-eagle3.patch"]},
        "0.5.23, no patch": {"sglang_version": "0.5.23"},
        "patch, other sha256": {"sglang_patches": [{"path": str(patch), "sha256": SHA_A}]},
        "patch, its sha256": {"sglang_patches": [{"path": str(patch), "sha256": good.upper()}]},
    }
    for index, line in enumerate(BAD_LOCK_LINES):
        cases["bad lock line %d" % index] = {"sglang_pip_lock": _lock(
            tmp, "sglang==0.5.9 --hash=sha256:%s\n%s\n" % (SHA_A, line), "bad%d.txt" % index)}
    for url in REFUSED_INDEX_URLS + PASSING_INDEX_URLS:
        cases["index " + url] = {"sglang_pip_index_url": url}
    for index, args in enumerate(REFUSED_EXTRA_ARGS):
        cases["extra args %d" % index] = {"sglang_pip_extra_args": args}
    for index, entry in enumerate(MALFORMED_PATCHES):
        cases["malformed patch %d" % index] = {"sglang_patches": [entry]}
    return run_play_batch(tmp, PREFLIGHT, cases), tmp


def test_shipped_lock_passes_and_is_read_whole(preflight):
    rc, out = preflight[0]["shipped"]
    assert rc == 0, out
    with open(LOCK, encoding="utf-8") as handle:
        pins = sum(1 for line in handle if "==" in line and not line.startswith("#"))
    assert "PASSED %d lines" % pins in out


def test_other_version_without_a_lock_is_refused_with_the_way_out(preflight):
    rc, out = preflight[0]["other version"]
    assert rc != 0
    assert "No hash lock ships for sglang==0.5.8" in out
    # the shipped releases are named (read from files/locks/, not typed)
    assert "this role ships locks for sglang 0.5.17, 0.5.23, 0.5.9, the supported releases" in " ".join(out.split())
    assert "sglang_pip_lock" in out and "sglang_pip_require_hashes: false" in out


def test_the_opt_out_lets_another_version_through(preflight):
    rc, out = preflight[0]["opt-out"]
    assert rc == 0, out
    assert "PASSED 0 lines" in out


def test_an_operator_lock_replaces_the_shipped_one(preflight):
    rc, out = preflight[0]["operator lock"]
    assert rc == 0, out
    assert "PASSED 2 lines" in out


@pytest.mark.parametrize("index", range(len(BAD_LOCK_LINES)), ids=BAD_LOCK_LINES)
def test_a_lock_line_without_pin_and_sha256_is_refused(preflight, index):
    rc, out = preflight[0]["bad lock line %d" % index]
    assert rc != 0
    assert "every line must be NAME==VERSION" in out
    assert BAD_LOCK_LINES[index].split()[0] in out


def test_a_lock_for_another_version_is_refused(preflight):
    rc, out = preflight[0]["lock for another version"]
    assert rc != 0
    assert "does not pin sglang==0.5.9" in out


def test_a_missing_lock_is_refused(preflight):
    rc, out = preflight[0]["missing lock"]
    assert rc != 0
    assert "sglang_pip_lock %s does not exist" % (preflight[1] / "nope.txt") in out


def test_extra_packages_are_refused_while_hashes_are_required(preflight):
    rc, out = preflight[0]["extra packages"]
    assert rc != 0
    assert "sglang_pip_extra_packages=[\"sglang-kernel==0.3.21\"] cannot be hash-checked" in out
    rc, out = preflight[0]["extra packages, no hashes"]
    assert rc == 0, out


@pytest.mark.parametrize("url", REFUSED_INDEX_URLS)
def test_index_url_must_be_https_or_file(preflight, url):
    rc, out = preflight[0]["index " + url]
    assert rc != 0
    assert "sglang_pip_index_url=" + url in out


@pytest.mark.parametrize("url", PASSING_INDEX_URLS)
def test_https_and_file_index_urls_pass(preflight, url):
    rc, out = preflight[0]["index " + url]
    assert rc == 0, out


@pytest.mark.parametrize("index", range(len(REFUSED_EXTRA_ARGS)))
def test_pip_extra_args_with_a_plain_url_are_refused(preflight, index):
    rc, out = preflight[0]["extra args %d" % index]
    assert rc != 0
    assert "sglang_pip_extra_args has" in out


def test_pip_extra_args_with_https_pass(preflight):
    rc, out = preflight[0]["extra args https"]
    assert rc == 0, out


def test_shipped_patch_is_checked_against_its_known_sha256(preflight):
    rc, out = preflight[0]["shipped patch"]
    assert rc == 0, out
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        known = yaml.safe_load(handle)["_install_shipped_patch_sha256"]
    for name, sha in known.items():
        got = subprocess.run(["sha256sum", os.path.join(ROLE, "files", "patches", name)], capture_output=True,
                             text=True, check=True).stdout.split()[0]
        assert got == sha, name


def test_a_shipped_patch_for_another_release_is_refused_and_0_5_23_passes_without_it(preflight):
    """Issue 21: the Kimi-K2.5 EAGLE-3 patch is for 0.5.9 (0.5.23 has the hooks upstream): refused on 0.5.23
    before anything is installed; 0.5.23 with its shipped lock and no patch passes."""
    rc, out = preflight[0]["0.5.9 patch on 0.5.23"]
    assert rc != 0
    flat = " ".join(out.split())
    assert "The shipped patch sglang-0.5.9-kimi-k25-eagle3.patch is for another SGLang release than 0.5.23" in flat
    rc, out = preflight[0]["0.5.23, no patch"]
    assert rc == 0, out


def test_a_patch_with_another_sha256_is_refused(preflight):
    rc, out = preflight[0]["patch, other sha256"]
    assert rc != 0
    assert "sglang_patches expects %s: refused, nothing patched" % SHA_A in out
    rc, out = preflight[0]["patch, its sha256"]
    assert rc == 0, out


@pytest.mark.parametrize("index", range(len(MALFORMED_PATCHES)))
def test_a_malformed_patch_entry_is_refused(preflight, index):
    rc, out = preflight[0]["malformed patch %d" % index]
    assert rc != 0
    assert "sglang_patches entry" in out


PATCHES = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuserve.sglang.install
        tasks_from: patches.yml
"""

ORIGINAL = "".join("line %d\n" % i for i in range(1, 13))


def test_patches_apply_without_fuzz_and_nothing_when_one_needs_fuzz(tmp_path):
    """A patch whose context matches only with fuzz (its first context line differs) is refused by -F0, and a
    second, clean patch in the same list is not applied either: the dry-run of every patch comes first."""
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    target = site / "pkg" / "mod.py"
    target.write_text(ORIGINAL)
    other = site / "pkg" / "other.py"
    other.write_text("x = 1\n")
    clean = tmp_path / "clean.patch"
    clean.write_text("--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
    fuzzy = tmp_path / "fuzzy.patch"
    fuzzy.write_text("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -4,7 +4,7 @@\n line 4 CHANGED\n line 5\n line 6\n"
                     "-line 7\n+line seven\n line 8\n line 9\n line 10\n")
    variables = {"sglang_venv": str(tmp_path / "venv" / "venv"), "sglang_site_packages": str(site),
                 "sglang_installed_version": "0.5.9", "_install_patch_files": [str(clean), str(fuzzy)]}
    # plain patch(1) (fuzz 2) takes the fuzzy patch: the test would pass without -F0 only if it did not
    probe = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-d", str(site), "-i", str(fuzzy)],
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0 and "fuzz" in probe.stdout, probe.stdout
    rc, out = run_play(tmp_path, PATCHES, [json.dumps(variables)])
    assert rc != 0
    assert "Patch fuzzy.patch does not apply to sglang 0.5.9" in out and "(patch -F0)" in out
    assert target.read_text() == ORIGINAL and other.read_text() == "x = 1\n"
    assert not list(site.rglob("*.rej")) and not list(site.rglob("*.orig"))
    # without the fuzzy one, the clean patch applies once; a second run changes nothing
    variables["_install_patch_files"] = [str(clean)]
    rc, out = run_play(tmp_path, PATCHES, [json.dumps(variables)])
    assert rc == 0 and "changed=1" in out, out
    assert other.read_text() == "x = 2\n"
    rc, out = run_play(tmp_path, PATCHES, [json.dumps(variables)])
    assert rc == 0 and "changed=0" in out, out


def _gen_lock_module():
    return load_file("gen_sglang_lock", os.path.join(ROOT, "scripts", "gen-sglang-lock.py"))


def _report(*items):
    return {"install": [{"metadata": {"name": n, "version": v},
                         "download_info": {"archive_info": {"hashes": {"sha256": h}}}} for n, v, h in items]}


def test_lock_generator_merges_reports_per_python(tmp_path):
    gen = _gen_lock_module()
    reports = {
        "3.10": _report(("sglang", "0.5.9", "1" * 64), ("numpy", "2.2.6", "2" * 64), ("tomli", "2.0", "5" * 64)),
        "3.12": _report(("sglang", "0.5.9", "1" * 64), ("numpy", "2.5.5", "3" * 64)),
    }
    args = ["--version", "0.5.9", "-o", str(tmp_path / "lock.txt")]
    for python, report in reports.items():
        path = tmp_path / ("r%s.json" % python)
        path.write_text(json.dumps(report))
        args += ["--report", "%s:%s" % (path, python)]
    assert gen.main(args) == 0
    lines = (tmp_path / "lock.txt").read_text().replace("\\\n", " ").splitlines()
    reqs = [" ".join(line.split()) for line in lines if not line.startswith("#")]
    assert reqs == [
        'numpy==2.2.6 ; python_version == "3.10" --hash=sha256:' + "2" * 64,
        'numpy==2.5.5 ; python_version == "3.12" --hash=sha256:' + "3" * 64,
        "sglang==0.5.9 --hash=sha256:" + "1" * 64,
        'tomli==2.0 ; python_version == "3.10" --hash=sha256:' + "5" * 64,
    ]
    # the role accepts what the generator writes (with a base Python the lock has wheels for: 3.12, this venv's;
    # the install preflight refuses a base Python the lock has no wheel set for)
    rc, out = _preflight(tmp_path, sglang_pip_lock=str(tmp_path / "lock.txt"), sglang_venv_base_python=sys.executable)
    assert rc == 0, out


def test_lock_generator_refuses_a_report_without_the_release(tmp_path):
    gen = _gen_lock_module()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(("sglang", "0.5.8", "1" * 64))))
    with pytest.raises(SystemExit, match="does not pin sglang==0.5.9"):
        gen.main(["--version", "0.5.9", "--report", "%s:3.12" % path, "-o", str(tmp_path / "lock.txt")])


def test_shipped_lock_is_what_pip_reads_as_pinned_and_hashed():
    """pip's own requirements parser: every entry pinned with ==, every entry with sha256 hashes, sglang 0.5.9 with
    the sha256 of the wheel on PyPI, torch pinned (SGLang 0.5.9 asks for 2.9.1)."""
    from pip._internal.network.session import PipSession  # pylint: disable=import-outside-toplevel
    from pip._internal.req.req_file import parse_requirements  # pylint: disable=import-outside-toplevel
    entries = list(parse_requirements(LOCK, session=PipSession()))
    assert len(entries) > 150
    names = {}
    for entry in entries:
        name, _sep, version = entry.requirement.split(";")[0].strip().partition("==")
        assert version and not set("<>~!*,") & set(version), entry.requirement
        hashes = entry.options.get("hashes", {}).get("sha256", [])
        assert hashes and all(len(h) == 64 for h in hashes), entry.requirement
        names.setdefault(name, []).append((version, hashes))
    assert names["sglang"] == [("0.5.9", [SGLANG_WHEEL_SHA256])]
    assert [v for v, _path in names["torch"]] == ["2.9.1"]
