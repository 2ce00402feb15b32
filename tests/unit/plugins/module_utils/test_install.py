# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/_install.py (module sglang_install, the install role): the refusals with the role's
messages before any change (supply chain, issue 14: the hash lock, https-only sources, patch sha256), the venv's
name (its identity), pip only when a requirement is not met, the patches (-F0, a dry run of each first), the
install record (the lock by name, never its controller path), the link on a first install, the venvs kept, a
second run that changes nothing, and check mode. The host is tmp_path; pip and the venv's interpreter are fakes."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuserve.sglang.plugins.module_utils import _install

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLE = os.path.join(ROOT, "roles", "install")
FILES = os.path.join(ROLE, "files")
SHA_A = "a" * 64
SGLANG_SHA = "8a936c4d25fea605f44254e533cff2144c73ceffbc1f8738aba393461bbb64d1"
KIMI = "sglang-0.5.9-kimi-k25-eagle3.patch"
with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as _handle:
    SHIPPED_PATCHES = yaml.safe_load(_handle)["_install_shipped_patch_sha256"]
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
ORIGINAL = "".join("line %d\n" % i for i in range(1, 13))
CLEAN = "--- a/pkg/other.py\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
FUZZY = ("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -4,7 +4,7 @@\n line 4 CHANGED\n line 5\n line 6\n"
         "-line 7\n+line seven\n line 8\n line 9\n line 10\n")


def params(tmp_path, **given):
    """The module's parameters as the role passes its defaults (the host under tmp_path), with the action
    plugin's controller files read for them."""
    p = {"state": "present", "package": "sglang", "version": "0.5.9", "deps": False,
         "venv": str(tmp_path / "opt" / "venv"), "versioned": True, "versions_dir": str(tmp_path / "opt" / "versions"),
         "keep": 3, "base_python": sys.executable, "index_url": "", "wheel_dir": "", "require_hashes": True,
         "pip_lock": "", "extra_packages": [], "extra_args": [], "patches": [], "patch_strip": 1,
         "install_record": str(tmp_path / "opt" / "install-record.json"), "files_dir": FILES,
         "shipped_patches": SHIPPED_PATCHES, "host_name": "gpu-1"}
    p.update(given)
    p.update(_install.read_controller_files(FILES, p["package"], p["version"], p["pip_lock"], p["require_hashes"],
                                            p["patches"]))
    return p


def refusal(tmp_path, **given):
    """The preflight's refusal for these inputs, or None."""
    try:
        _install.Install(params(tmp_path, **given), run=FakeHost()).apply("checked")
    except _install.InstallError as exc:
        return " ".join(str(exc).split())
    return None


def _lock(tmp_path, text, name="lock.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


class FakeHost:
    """subprocess.run for the venv's commands: `-m venv` makes <venv>/bin/python, the probe answers from
    ``installed`` ({name: version}), pip install puts the wanted package in (or fails with ``pip_fails``);
    patch(1) and anything else run for real. Records each argv."""

    def __init__(self, installed=None, pip_fails=""):
        self.calls, self.installed, self.pip_fails = [], dict(installed or {}), pip_fails

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        self.envs = getattr(self, "envs", []) + [kwargs.get("env")]
        if argv[0] == sys.executable and argv[1:] == ["-c", _install.PYTHON_VERSION]:
            # the base interpreter (this test's own) as a Python the shipped locks have wheels for, whatever
            # Python runs the tests (the controller matrix runs them on 3.11 and 3.13)
            return subprocess.CompletedProcess(argv, 0, "3.12.3\n", "")
        if argv[1:3] == ["-m", "venv"]:
            os.makedirs(os.path.join(argv[3], "bin"))
            with open(os.path.join(argv[3], "bin", "python"), "w") as handle:
                handle.write("fake")
            os.makedirs(os.path.join(argv[3], "lib", "site-packages"))
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0].endswith("/bin/python") and argv[1:] == ["-c", _install.ensure_venv.__globals__["PURELIB"]]:
            return subprocess.CompletedProcess(argv, 0, os.path.join(os.path.dirname(os.path.dirname(argv[0])), "lib",
                                                                     "site-packages") + "\n", "")
        if argv[0].endswith("/bin/python") and argv[1:] == ["-c", _install.PROBE]:
            query = json.loads(kwargs["input"])
            missing = []
            for line in query["requirements"]:
                name, _sep, version = line.split(";")[0].strip().partition("==")
                if self.installed.get(name) != version:
                    missing.append(line)
            out = {"version": self.installed.get(query["package"], ""), "missing": missing}
            return subprocess.CompletedProcess(argv, 0, json.dumps(out) + "\n", "")
        if argv[0].endswith("/bin/pip"):
            if self.pip_fails:
                return subprocess.CompletedProcess(argv, 1, "", self.pip_fails)
            self.installed["sglang"] = "0.5.9"
            return subprocess.CompletedProcess(argv, 0, "Successfully installed sglang-0.5.9\n", "")
        kwargs.pop("check", None)
        return subprocess.run(argv, check=False, **kwargs)  # pylint: disable=ansible-bad-function


def pips(run):
    return [argv for argv in run.calls if argv[0].endswith("/bin/pip")]


# ------------------------------------------------------------------------------------------------ refusals
def test_shipped_lock_passes_and_only_the_package_line_is_installed_without_deps(tmp_path):
    assert refusal(tmp_path) is None
    inst = _install.Install(params(tmp_path, deps=True), run=FakeHost())
    inst.preflight()
    with open(os.path.join(FILES, "locks", "sglang-0.5.9.txt"), encoding="utf-8") as handle:
        pins = sum(1 for line in handle if "==" in line and not line.startswith("#"))
    assert len(inst.lock_lines) == pins
    inst = _install.Install(params(tmp_path), run=FakeHost())
    inst.preflight()
    assert len(inst.lock_lines) == 1 and inst.lock_lines[0].split() == ["sglang==0.5.9", "--hash=sha256:" + SGLANG_SHA]


def test_other_version_without_a_lock_is_refused_with_the_way_out(tmp_path):
    out = refusal(tmp_path, version="0.5.8")
    assert "No hash lock ships for sglang==0.5.8" in out
    # the shipped releases are named (read from files/locks/, not typed)
    assert "this role ships locks for sglang 0.5.17, 0.5.23, 0.5.9, the supported releases" in out
    assert "sglang_pip_lock" in out and "sglang_pip_require_hashes: false" in out


def test_the_opt_out_lets_another_version_through(tmp_path):
    assert refusal(tmp_path, version="0.5.8", require_hashes=False) is None


def test_an_operator_lock_replaces_the_shipped_one(tmp_path):
    lock = _lock(tmp_path, "# mine\nsglang==0.5.8 \\\n    --hash=sha256:%s\nsix==1.17.0 --hash=sha256:%s # ok\n"
                 % (SHA_A, SHA_A))
    inst = _install.Install(params(tmp_path, version="0.5.8", pip_lock=lock, deps=True), run=FakeHost())
    inst.preflight()
    assert len(inst.lock_lines) == 2


@pytest.mark.parametrize("index", range(len(BAD_LOCK_LINES)), ids=BAD_LOCK_LINES)
def test_a_lock_line_without_pin_and_sha256_is_refused(tmp_path, index):
    lock = _lock(tmp_path, "sglang==0.5.9 --hash=sha256:%s\n%s\n" % (SHA_A, BAD_LOCK_LINES[index]))
    out = refusal(tmp_path, pip_lock=lock)
    assert "every line must be NAME==VERSION" in out and BAD_LOCK_LINES[index].split()[0] in out


def test_a_lock_for_another_version_is_refused(tmp_path):
    out = refusal(tmp_path, pip_lock=_lock(tmp_path, "sglang==0.5.8 --hash=sha256:%s\n" % SHA_A))
    assert "does not pin sglang==0.5.9" in out


def test_a_missing_lock_is_refused(tmp_path):
    out = refusal(tmp_path, pip_lock=str(tmp_path / "nope.txt"))
    assert "sglang_pip_lock %s does not exist" % (tmp_path / "nope.txt") in out


def test_extra_packages_are_refused_while_hashes_are_required(tmp_path):
    out = refusal(tmp_path, extra_packages=["sglang-kernel==0.3.21"])
    assert "sglang_pip_extra_packages=[\"sglang-kernel==0.3.21\"] cannot be hash-checked" in out
    assert refusal(tmp_path, extra_packages=["sglang-kernel==0.3.21"], require_hashes=False) is None


@pytest.mark.parametrize("url", REFUSED_INDEX_URLS)
def test_index_url_must_be_https_or_file(tmp_path, url):
    assert "sglang_pip_index_url=" + url in refusal(tmp_path, index_url=url)


@pytest.mark.parametrize("url", PASSING_INDEX_URLS)
def test_https_and_file_index_urls_pass(tmp_path, url):
    assert refusal(tmp_path, index_url=url) is None


@pytest.mark.parametrize("index", range(len(REFUSED_EXTRA_ARGS)))
def test_pip_extra_args_with_a_plain_url_are_refused(tmp_path, index):
    assert "sglang_pip_extra_args has" in refusal(tmp_path, extra_args=REFUSED_EXTRA_ARGS[index])


def test_pip_extra_args_with_https_pass(tmp_path):
    assert refusal(tmp_path, extra_args=["--extra-index-url", "https://mirror.example/simple"]) is None


@pytest.mark.parametrize("version, package", [("0.5", "sglang x"), ("latest", "sglang"), (">=0.5.9", "sglang")])
def test_a_version_that_is_not_a_release_or_a_package_that_is_not_a_name_is_refused(tmp_path, version, package):
    out = refusal(tmp_path, version=version, package=package, require_hashes=False)
    assert "sglang_version must be an exact release such as 0.5.9" in out


def test_shipped_patch_is_checked_against_its_known_sha256(tmp_path):
    assert refusal(tmp_path, patches=[KIMI]) is None
    for name, sha in SHIPPED_PATCHES.items():
        with open(os.path.join(FILES, "patches", name), "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == sha, name
    out = refusal(tmp_path, patches=[KIMI], shipped_patches={KIMI: SHA_A})
    assert "sglang_patches expects %s: refused, nothing patched" % SHA_A in out


def test_a_shipped_patch_for_another_release_is_refused_and_0_5_23_passes_without_it(tmp_path):
    """Issue 21: the Kimi-K2.5 EAGLE-3 patch is for 0.5.9 (0.5.23 has the hooks upstream): refused on 0.5.23
    before anything is installed; 0.5.23 with its shipped lock and no patch passes."""
    out = refusal(tmp_path, version="0.5.23", patches=[KIMI])
    assert "The shipped patch %s is for another SGLang release than 0.5.23" % KIMI in out
    assert refusal(tmp_path, version="0.5.23") is None


def test_a_patch_with_another_sha256_is_refused(tmp_path):
    patch = tmp_path / "fix.patch"
    patch.write_text(CLEAN)
    good = hashlib.sha256(CLEAN.encode()).hexdigest()
    out = refusal(tmp_path, patches=[{"path": str(patch), "sha256": SHA_A}])
    assert "sglang_patches expects %s: refused, nothing patched" % SHA_A in out
    assert refusal(tmp_path, patches=[{"path": str(patch), "sha256": good.upper()}]) is None


def test_a_missing_patch_file_is_refused_naming_it(tmp_path):
    assert "Patch file /nonexistent/fix.patch does not exist on the controller" in refusal(
        tmp_path, patches=["/nonexistent/fix.patch"])


@pytest.mark.parametrize("index", range(len(MALFORMED_PATCHES)))
def test_a_malformed_patch_entry_is_refused(tmp_path, index):
    assert "sglang_patches entry" in refusal(tmp_path, patches=[MALFORMED_PATCHES[index]])


def test_host_state_refusals_name_the_host(tmp_path):
    assert refusal(tmp_path, wheel_dir=str(tmp_path / "none")) == "sglang_wheel_dir %s is not a directory on gpu-1" % (
        tmp_path / "none")
    assert refusal(tmp_path, base_python="/no/python") == "sglang_venv_base_python /no/python does not exist on gpu-1"


@pytest.mark.parametrize("given", [{"venv": "venv"}, {"versions_dir": "/opt/x/"}, {"keep": 0}, {"keep": "two"},
                                   {"venv": "/opt/a\nb"}])
def test_versioned_venv_settings_are_checked(tmp_path, given):
    if "versions_dir" in given:
        given["venv"] = "/opt/x"
    assert refusal(tmp_path, **given).endswith("a whole number of at least 1; nothing was changed")


def test_a_base_python_the_lock_has_no_wheels_for_is_refused_before_any_change(tmp_path):
    """Issue 42: Debian 13's Python 3.13 and SGLang 0.5.23's lock (CPython 3.11 and 3.12 only)."""
    for version, refused in (("3.11.2", False), ("3.12.3", False), ("3.13.5", True)):
        fake = tmp_path / ("python" + version)
        fake.write_text("#!/bin/sh\necho %s\n" % version)
        fake.chmod(0o755)
        out = refusal(tmp_path, version="0.5.23", deps=True, base_python=str(fake))
        assert (out is not None) is refused, out
        if refused:
            assert out.startswith("gpu-1: %s on the host is Python 3.13" % fake) and "Nothing was changed" in out
        assert refusal(tmp_path, version="0.5.23", deps=False, base_python=str(fake)) is None   # no lock wheels
    assert not (tmp_path / "opt").exists()


# ------------------------------------------------------------------------------------------------ the install
def test_the_venv_is_named_after_its_identity_as_the_role_named_it(tmp_path):
    """The same inputs name the same directory as the role's tasks did (hosts upgraded to the module keep their
    venv, and their server is not restarted): the converge of molecule/install made this one."""
    inst = _install.Install(params(tmp_path, patches=[KIMI], base_python="/usr/bin/python3",
                                   versions_dir="/opt/sglang/versions"))
    assert inst.venv_dir() == "/opt/sglang/versions/sglang-0.5.9-e31a9d575376"
    assert _install.Install(params(tmp_path, versioned=False)).venv_dir() == str(tmp_path / "opt" / "venv")


@pytest.mark.parametrize("given", [{"version": "0.5.23"}, {"deps": True}, {"patches": [KIMI]}, {"patch_strip": 0},
                                   {"base_python": "/usr/bin/python3.12"}, {"require_hashes": False},
                                   {"require_hashes": False, "extra_packages": ["six==1.17.0"]}])
def test_each_input_that_changes_what_is_in_the_venv_names_another_venv(tmp_path, given):
    """A new version, lock, patch set, dependencies flag or base interpreter is a new directory beside the
    running one."""
    assert _install.Install(params(tmp_path, **given)).venv_dir() != _install.Install(params(tmp_path)).venv_dir()


def test_install_then_a_second_run_changes_nothing(tmp_path):
    run = FakeHost()
    first = _install.Install(params(tmp_path), run=run).apply()
    venv = first["venv_dir"]
    assert first["changed"] and venv.startswith(str(tmp_path / "opt" / "versions" / "sglang-0.5.9-"))
    argv = pips(run)[0]
    assert argv[1:] == ["install", "--disable-pip-version-check", "--require-hashes", "--no-deps", "-r",
                        str(tmp_path / "opt" / "requirements-lock.txt")]
    lock = (tmp_path / "opt" / "requirements-lock.txt").read_text().splitlines()
    assert len(lock) == 1 and lock[0].split() == ["sglang==0.5.9", "--hash=sha256:" + SGLANG_SHA]
    record = json.loads((tmp_path / "opt" / "install-record.json").read_text())
    assert record == {"package": "sglang", "version": "0.5.9", "venv": venv, "with_dependencies": False,
                      "hashes_required": True, "lock": "gpuserve.sglang:locks/sglang-0.5.9.txt",
                      "lock_sha256": params(tmp_path)["lock"]["sha256"], "source": "default index", "patches": {}}
    assert (tmp_path / "opt" / "install-record.json").read_text() == json.dumps(
        record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
    assert json.loads(open(os.path.join(venv, _install.RECORD_IN_VENV)).read()) == record
    assert os.readlink(str(tmp_path / "opt" / "venv")) == venv
    assert first["ansible_facts"] == {"sglang_venv_dir": venv, "sglang_installed_version": "0.5.9",
                                      "sglang_site_packages": os.path.join(venv, "lib", "site-packages")}
    assert first["diff"]["before"] == "" and '"version": "0.5.9"' in first["diff"]["after"]
    run2 = FakeHost(installed=run.installed)
    again = _install.Install(params(tmp_path), run=run2).apply()
    assert not again["changed"] and again["changes"] == [] and "diff" not in again
    assert pips(run2) == []                       # every requirement met: pip is not run
    check = _install.Install(params(tmp_path), run=FakeHost(installed=run.installed), check_mode=True).apply()
    assert not check["changed"]
    found = _install.Install(params(tmp_path), run=FakeHost(), patch_bin="/usr/bin/patch").apply("checked")
    assert found == {"changed": False, "patch_found": True}


def test_an_index_token_reaches_pip_in_its_environment_only(tmp_path):
    """Issue 48, 7d0d57e: https://user:TOKEN@host/ went on pip's argv (any local user reads /proc/<pid>/cmdline), into
    the 0644 install record, --diff and the deployment record. The action plugin splits the token off (no_log)."""
    import importlib
    action = importlib.import_module("ansible_collections.gpuserve.sglang.plugins.module_utils._secrets")
    url = "https://ci:tok-9f8e7d6c@pypi.example.com/simple/"
    masked = action.mask(url)
    assert action.url_secret(url) == "tok-9f8e7d6c" and "tok-9f8e7d6c" not in masked
    run = FakeHost()
    result = _install.Install(params(tmp_path, index_url=masked, index_secret="tok-9f8e7d6c"), run=run).apply()
    pip = pips(run)[0]
    assert "--index-url" not in pip and not any("tok-9f8e7d6c" in arg for arg in pip)
    env = run.envs[run.calls.index(pip)]
    assert env["PIP_INDEX_URL"] == url
    record = open(params(tmp_path)["install_record"]).read()
    assert "tok-9f8e7d6c" not in record and "https://ci:********@pypi.example.com/simple/" in record
    assert "tok-9f8e7d6c" not in json.dumps(result)
    # an index without a secret stays on the command line, as before
    run = FakeHost()
    _install.Install(params(tmp_path / "b", index_url="https://mirror.example/simple"), run=run).apply()
    assert pips(run)[0][pips(run)[0].index("--index-url") + 1] == "https://mirror.example/simple"


def test_an_operator_lock_is_recorded_by_name_not_by_its_controller_path(tmp_path):
    lock = _lock(tmp_path, "sglang==0.5.9 --hash=sha256:%s\n" % SHA_A, "ops-lock.txt")
    result = _install.Install(params(tmp_path, pip_lock=lock, wheel_dir=str(tmp_path)), run=FakeHost()).apply()
    assert result["record"]["lock"] == "ops-lock.txt" and result["record"]["source"] == "wheel directory %s" % tmp_path
    assert pips(FakeHost()) == []


def test_check_mode_on_a_new_host_reports_and_changes_nothing(tmp_path):
    run = FakeHost()
    result = _install.Install(params(tmp_path, patches=[KIMI]), run=run, check_mode=True).apply()
    assert result["changed"] and any(c.startswith("created the venv") for c in result["changes"])
    assert "apply %s" % KIMI in result["changes"] and result["version"] == ""
    assert not (tmp_path / "opt").exists() and pips(run) == []


def test_a_pip_failure_names_pip_s_words_and_leaves_the_record(tmp_path):
    run = FakeHost()
    _install.Install(params(tmp_path), run=run).apply()
    before = (tmp_path / "opt" / "install-record.json").read_text()
    lock = _lock(tmp_path, "sglang==0.5.8 --hash=sha256:%s\n" % ("0" * 64))
    failing = FakeHost(installed=run.installed, pip_fails="THESE PACKAGES DO NOT MATCH THE HASHES ... Expected "
                       "sha256 " + "0" * 64)
    with pytest.raises(_install.InstallError, match="DO NOT MATCH THE HASHES.*" + "0" * 64):
        _install.Install(params(tmp_path, version="0.5.8", pip_lock=lock), run=failing).apply()
    assert (tmp_path / "opt" / "install-record.json").read_text() == before


def test_the_oldest_versioned_venvs_beyond_keep_go_never_the_new_one_nor_the_link_s(tmp_path):
    versions = tmp_path / "opt" / "versions"
    for index, name in enumerate(["old-1", "old-2", "linked", "old-3"]):
        (versions / name).mkdir(parents=True)
        os.utime(str(versions / name), (1000 + index, 1000 + index))
    os.symlink(str(versions / "linked"), str(tmp_path / "opt" / "venv"))
    result = _install.Install(params(tmp_path, keep=3), run=FakeHost()).apply()
    left = sorted(os.listdir(str(versions)))
    assert left == sorted(["linked", "old-3", os.path.basename(result["venv_dir"])])
    assert os.readlink(str(tmp_path / "opt" / "venv")) == str(versions / "linked")   # the server role moves it
    assert "a link to %s" % (versions / "linked") in result["msg"]


def _patched_host(tmp_path):
    run = FakeHost()
    first = _install.Install(params(tmp_path), run=run).apply()
    site = first["site_packages"]
    os.makedirs(os.path.join(site, "pkg"))
    with open(os.path.join(site, "pkg", "mod.py"), "w") as handle:
        handle.write(ORIGINAL)
    with open(os.path.join(site, "pkg", "other.py"), "w") as handle:
        handle.write("x = 1\n")
    return run, site


def _patch_params(tmp_path, texts):
    p = params(tmp_path)
    p["patches"], p["patch_files"] = [], []
    for name, text in texts:
        path = tmp_path / name
        path.write_text(text)
        p["patches"].append(str(path))
        p["patch_files"].append({"file": str(path), "exists": True, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                                 "content": base64.b64encode(text.encode()).decode()})
    return p


def test_patches_apply_without_fuzz_and_nothing_when_one_needs_fuzz(tmp_path):
    """A patch whose context matches only with fuzz is refused by -F0, and a second, clean patch in the same list
    is not applied either: the dry-run of every patch comes first. Real patch(1) in a tmp site-packages."""
    run, site = _patched_host(tmp_path)
    probe = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "-d", site, "-i", "/dev/stdin"], input=FUZZY,
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 0 and "fuzz" in probe.stdout, probe.stdout   # plain patch(1) would take it
    p = _patch_params(tmp_path, [("clean.patch", CLEAN), ("fuzzy.patch", FUZZY)])
    # a patch set is another venv: keep this one by installing in place
    p.update(versioned=False, venv=os.path.dirname(os.path.dirname(site)))
    with pytest.raises(_install.InstallError, match=r"Patch fuzzy.patch does not apply to sglang 0.5.9 .*\(patch -F0\)"):
        _install.Install(p, run=FakeHost(installed=run.installed)).apply()
    assert open(os.path.join(site, "pkg", "mod.py")).read() == ORIGINAL
    assert open(os.path.join(site, "pkg", "other.py")).read() == "x = 1\n"
    p = _patch_params(tmp_path, [("clean.patch", CLEAN)])
    p.update(versioned=False, venv=os.path.dirname(os.path.dirname(site)))
    check = _install.Install(dict(p), run=FakeHost(installed=run.installed), check_mode=True).apply()
    assert "applied clean.patch" in check["changes"]
    assert open(os.path.join(site, "pkg", "other.py")).read() == "x = 1\n"
    applied = _install.Install(dict(p), run=FakeHost(installed=run.installed)).apply()
    assert "applied clean.patch" in applied["changes"] and open(os.path.join(site, "pkg", "other.py")).read() == "x = 2\n"
    assert applied["record"]["patches"] == {"clean.patch": hashlib.sha256(CLEAN.encode()).hexdigest()}
    patch_dir = os.path.join(os.path.dirname(p["venv"]), "patches")
    assert open(os.path.join(patch_dir, "clean.patch")).read() == CLEAN
    again = _install.Install(dict(p), run=FakeHost(installed=run.installed)).apply()
    assert not again["changed"], again["changes"]
    site_files = [name for _d, _s, names in os.walk(site) for name in names]
    assert not [name for name in site_files if name.endswith((".rej", ".orig"))]


class _Packages(object):
    """The host's package manager as the install sees it (module_utils._packages.Packages): what it was asked."""

    def __init__(self, fail=None):
        self.asked, self.fail = [], fail

    def ensure(self, names):
        self.asked.append(list(names))
        if self.fail:
            raise _install.PackageError(self.fail)
        return ["installed %s" % " ".join(names)]


def test_patch_is_installed_by_the_module_where_patches_are_applied_and_the_host_has_none(tmp_path):
    """patch(1) was a task of the role's own before the module call (a package manager's look of seconds on
    every run, a skipped task on a no-op deploy): now the install call asks the package manager for it only when
    there are patches and the host has no patch, then applies them with the one it found. No patches, or patch
    already there: the package manager is not asked. (Old code: Install had no packages and no which.)"""
    run, site = _patched_host(tmp_path)
    p = _patch_params(tmp_path, [("clean.patch", CLEAN)])
    p.update(versioned=False, venv=os.path.dirname(os.path.dirname(site)))
    packages = _Packages()
    applied = _install.Install(dict(p), run=FakeHost(installed=run.installed), patch_bin=None, packages=packages,
                               which=shutil.which).apply()
    assert packages.asked == [["patch"]]
    assert "installed patch" in applied["changes"] and "applied clean.patch" in applied["changes"]
    again = _Packages()
    _install.Install(dict(p), run=FakeHost(installed=run.installed), patch_bin=shutil.which("patch"), packages=again,
                     which=shutil.which).apply()
    assert again.asked == []
    none = _Packages()
    _install.Install(params(tmp_path), run=FakeHost(), patch_bin=None, packages=none, which=shutil.which).apply()
    assert none.asked == []
    with pytest.raises(_install.InstallError, match=r"patch\(1\) is needed for sglang_patches and could not be"):
        _install.Install(dict(p), run=FakeHost(installed=run.installed), patch_bin=None,
                         packages=_Packages(fail="apt-get install -y patch failed (rc=100)"), which=shutil.which).apply()
