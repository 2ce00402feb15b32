# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang into its venv on the host, in one module run (gpuserve.sglang.sglang_install, the install role).

What the role's tasks did one by one, in the same order: refuse bad input and bad host state first (the same
messages as before, and nothing is changed then), name the venv after what goes into it (one venv per SGLang
version + lock + patch set + base interpreter, so a re-run finds the same directory and another version gets a
new one beside the running one), create it, write the hash lock pip installs from, run pip only when a requirement
is not met in the venv, apply the patches that are not applied yet (each one checked to apply without fuzz before
any is applied), write the install record (the server and nccl_tuning roles read it to find the venv), make the
venv link on a first install and remove the oldest versioned venvs beyond the number to keep.

The controller's files (the hash lock, the patch files, the list of shipped locks) are read by the action plugin
(plugins/action/sglang_install.py, with read_controller_files() here) and arrive as the module's internal options.
Standard library only; every command goes through an injectable ``run`` (subprocess.run's signature)."""

from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile

from ansible_collections.gpuserve.sglang.plugins.module_utils import _secrets
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic
from ansible_collections.gpuserve.sglang.plugins.module_utils._packages import PackageError
from ansible_collections.gpuserve.sglang.plugins.module_utils._venv import ensure_parent, ensure_venv

VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$")
PACKAGE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
INDEX_RE = re.compile(r"^(https|file)://[^\s]+\Z")
# A remote URL whose scheme is not https (file:// is local and allowed): in an index URL or a pip argument.
INSECURE_URL_RE = re.compile(r"(^|[\s=,])(?!https://|file://)[A-Za-z][A-Za-z0-9+.-]*://")
# One requirement of a hash lock: NAME[extras]==VERSION, an optional marker, one or more sha256 hashes; nothing
# else (no option lines such as --index-url or -r, no ranges, no URLs).
LOCK_LINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._, -]*\])?==[A-Za-z0-9.+!_-]+(\s*;[^-\n]+)?"
                          r"(\s+--hash=sha256:[0-9a-f]{64})+\Z")
SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}\Z")
SHIPPED_PATCH_RE = re.compile(r"^sglang-[0-9][0-9.]*-")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

# A lock written by scripts/gen-sglang-lock.py says in its header which CPython versions and which platform its
# hashes are for ("CPython 3.11 3.12, manylinux_2_34_x86_64 wheels only"); pip --require-hashes cannot install it
# on another Python (no wheel carries one of its hashes).
_HEADER_RE = re.compile(r"^#\s*Written by scripts/gen-sglang-lock\.py: CPython ([0-9. ]+), (\S+) wheels only", re.M)
_PYTHON_RE = re.compile(r"^(\d+)\.(\d+)(\.\d+)?$")
# A backslash at the end of a line continues it; '#' at a line's start or after a blank starts a comment.
_JOIN_RE = re.compile(r"\\[ \t]*\n")
_COMMENT_RE = re.compile(r"(^|\s)#.*$")
_HASH_SPLIT_RE = re.compile(r"\s+--hash=")

RECORD_IN_VENV = "gpuserve-install-record.json"
PYTHON_VERSION = "import sys; print('%d.%d.%d' % sys.version_info[:3])"

# Run by the venv's interpreter: the installed version of the package, and which requirements (lock lines without
# their hashes, or NAME==VERSION specifiers) the venv does not meet - pip's own vendored packaging evaluates the
# markers and specifiers as pip does. "missing" is null when that cannot be told (pip is then asked).
PROBE = r"""
import json, sys
import importlib.metadata as md
q = json.load(sys.stdin)
out = {"version": "", "missing": None}
try:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    have = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name:
            have.setdefault(canonicalize_name(name), dist.version)
    out["version"] = have.get(canonicalize_name(q["package"]), "")
    missing = []
    for line in q["requirements"]:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        got = have.get(canonicalize_name(req.name))
        if got is None or not req.specifier.contains(got, prereleases=True):
            missing.append(line if got is None else "%s (installed: %s)" % (line, got))
    out["missing"] = missing
except Exception as exc:
    out["error"] = str(exc)
    try:
        out["version"] = md.version(q["package"])
    except Exception:
        pass
print(json.dumps(out))
"""


class InstallError(Exception):
    """A refusal or a failed step; the message says what is wrong (and, for a refusal, that nothing changed)."""


def _json(value):
    """JSON as the role's messages and identity always wrote it (Ansible's to_json: json.dumps' defaults)."""
    return json.dumps(value)


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------------- hash locks
def lock_requirements(text):
    """The requirements of a hash lock's text, one string each: continued lines joined (with a blank), comments
    and surrounding blanks taken off, empty lines dropped."""
    if not isinstance(text, str):
        raise ValueError("the lock's text must be a string, got %s" % type(text).__name__)
    lines = (_COMMENT_RE.sub("", line).strip() for line in _JOIN_RE.sub(" ", text).splitlines())
    return [line for line in lines if line]


def lock_package_re(package, version):
    """The regular expression that matches the lock line of ``package``==``version`` (any case, '-', '_' and '.'
    alike in the name as pip compares them, optional extras, then a blank, a marker or the end)."""
    return "(?i)%s(\\[[^\\]]*\\])?==%s(\\s|;|\\Z)" % (re.sub(r"[-_.]+", "[-_.]+", str(package)),
                                                      re.escape(str(version)))


def lock_pythons(text):
    """The CPython X.Y versions a lock's header names (an empty list: a lock that does not say, e.g. an operator's)."""
    if not isinstance(text, str):
        raise ValueError("the lock's text must be a string, got %s" % type(text).__name__)
    match = _HEADER_RE.search(text)
    return match.group(1).split() if match else []


def lock_python_problems(text, python, lock="", package="sglang", version="", base_python="/usr/bin/python3"):
    """The refusal (a list of one message, or empty) for a host whose base Python (X.Y or X.Y.Z) the lock has no
    wheel set for. text: the lock's text, or the Pythons lock_pythons read from it. A lock whose header names
    no Pythons is not judged (pip decides). Debian 13's Python is 3.13, and SGLang 0.5.23's lock has no 3.13 set
    (outlines_core 0.1.26 has no cp313 wheel on PyPI, only an sdist that needs Rust and crates.io to build)."""
    match = _PYTHON_RE.match(str(python).strip())
    if not match:
        raise ValueError("the host's Python must be X.Y, got %r" % (python,))
    have = "%s.%s" % match.group(1, 2)
    pythons = list(text) if isinstance(text, (list, tuple)) else lock_pythons(text)
    if not pythons or have in pythons:
        return []
    what = "%s==%s" % (package, version) if version else package
    return [
        "%s on the host is Python %s, and the hash lock %s of %s has wheels for CPython %s only: pip --require-hashes "
        "cannot install it there (Debian 13's Python is 3.13; SGLang 0.5.23's dependency outlines_core 0.1.26 has "
        "no cp313 wheel). Nothing was changed. Either give the host a Python the lock has wheels for and point "
        "sglang_venv_base_python at it (Debian 13's package sources have only 3.13: install CPython %s from "
        "python.org's source with Debian's toolchain, or a python-build-standalone build, e.g. `uv python install "
        "%s`, copied to the host for an offline one), or build the missing cp%s wheels from their sdists on a "
        "Debian 13 machine with Rust (apt install cargo rustc python3-dev; `pip wheel --no-deps --no-binary "
        "outlines_core outlines_core==0.1.26 -w WHEELHOUSE`, which fetches its crates from crates.io), put them "
        "into the wheelhouse (sglang_wheel_dir) and set sglang_pip_lock to a lock made for CPython %s with "
        "scripts/gen-sglang-lock.py that carries their hashes." % (
            base_python, have, lock or "(this release's)", what, ", ".join(pythons), pythons[-1],
            pythons[-1], have.replace(".", ""), have)]


# ------------------------------------------------------------------------------------------ the controller's files
def patch_entry_ok(entry):
    """Whether a sglang_patches entry is a path, or a mapping with 'path' (a string) and optionally 'sha256' (64
    hex digits) and nothing else."""
    if isinstance(entry, str):
        return True
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or set(entry) - {"path", "sha256"}:
        return False
    return "sha256" not in entry or bool(SHA256_RE.match(str(entry["sha256"])))


def patch_file(entry, patches_dir):
    """The controller path of a well-formed patch entry: a bare or relative name is one in ``patches_dir`` (the
    role's files/patches/), an absolute path stays as it is."""
    return os.path.join(patches_dir, entry["path"] if isinstance(entry, dict) else entry)


def shipped_lock(files_dir, package, version):
    """The lock the role ships for ``package``==``version``: files/locks/<package>-<version>.txt."""
    return os.path.join(files_dir, "locks", "%s-%s.txt" % (package, version))


def _read(path):
    """{file, exists, sha256, data (bytes)} of a regular file on the controller; exists false when it is not one."""
    if not os.path.isfile(path):
        return {"file": path, "exists": False, "sha256": "", "data": b""}
    with open(path, "rb") as handle:
        data = handle.read()
    return {"file": path, "exists": True, "sha256": _sha256(data), "data": data}


def read_controller_files(files_dir, package, version, pip_lock, require_hashes, patches):
    """What the module needs from the controller (the action plugin's part): the hash lock to install from (the
    operator's, or the one shipped for this version; its text and sha256), the versions the role ships locks for,
    and each well-formed patch entry's file (its content base64, its sha256; None for a malformed entry, which the
    module refuses)."""
    lock = {}
    if require_hashes:
        found = _read(pip_lock if pip_lock else shipped_lock(files_dir, package, version))
        lock = {"file": found["file"], "exists": found["exists"], "sha256": found["sha256"],
                "text": found["data"].decode("utf-8", "replace")}
    shipped = sorted(re.sub(r"^sglang-|[.]txt$", "", os.path.basename(path))
                     for path in glob.glob(os.path.join(files_dir, "locks", "sglang-*.txt")))
    files = []
    for entry in patches or []:
        if not patch_entry_ok(entry):
            files.append(None)
            continue
        found = _read(patch_file(entry, os.path.join(files_dir, "patches")))
        files.append({"file": found["file"], "exists": found["exists"], "sha256": found["sha256"],
                      "content": base64.b64encode(found["data"]).decode("ascii")})
    return {"lock": lock, "shipped_locks": shipped, "patch_files": files}


# ------------------------------------------------------------------------------------------------------ refusals
def input_problem(p):
    """The first refusal of the inputs alone (the role's variables and the controller's files), or None. ``p``:
    the module's parameters, the action plugin's lock, shipped_locks and patch_files among them."""
    version, package = p["version"], p["package"]
    if not VERSION_RE.match(version) or not PACKAGE_RE.match(package):
        return ("sglang_version must be an exact release such as 0.5.9, got '%s'; sglang_package must be a plain "
                "package name, got %s" % (version, _json(package)))
    index_ok = p["index_url"] == "" or INDEX_RE.match(p["index_url"])
    insecure = [arg for arg in p["extra_args"] if INSECURE_URL_RE.search(arg)]
    if not index_ok or insecure:
        return "Only https:// (or a local file://) source is allowed: %s" % (
            "sglang_pip_index_url=%s" % p["index_url"] if not index_ok else "sglang_pip_extra_args has %s"
            % _json(insecure))
    if p["require_hashes"]:
        problem = _lock_problem(p)
        if problem:
            return problem
    return _patch_problem(p)


def _lock_problem(p):
    lock, package, version = p["lock"] or {}, p["package"], p["version"]
    if not lock.get("exists"):
        if p["pip_lock"]:
            return "sglang_pip_lock %s does not exist on the controller." % p["pip_lock"]
        return ("No hash lock ships for %s==%s (this role ships locks for sglang %s, the supported releases). Set "
                "sglang_pip_lock to a requirements file that pins %s==%s and every dependency with --hash=sha256 "
                "(scripts/gen-sglang-lock.py writes one), or set sglang_pip_require_hashes: false to install "
                "without hash checking (not recommended)."
                % (package, version, ", ".join(p["shipped_locks"]), package, version))
    reqs = lock_requirements(lock["text"])
    bad = [line for line in reqs if not LOCK_LINE_RE.match(line)]
    if bad:
        return ("sglang_pip_lock %s: every line must be NAME==VERSION [; marker] --hash=sha256:... (no option lines, "
                "no ranges, no URLs), these are not: %s" % (lock["file"], _json([_truncate(x) for x in bad[:5]])))
    if not [line for line in reqs if re.match(lock_package_re(package, version), line)]:
        return ("sglang_pip_lock %s does not pin %s==%s (sglang_package==sglang_version): a lock made for another "
                "version?" % (lock["file"], package, version))
    if p["extra_packages"]:
        return ("sglang_pip_extra_packages=%s cannot be hash-checked: put them, with their hashes, into your own lock "
                "(sglang_pip_lock), or set sglang_pip_require_hashes: false." % _json(p["extra_packages"]))
    return None


def _truncate(text, length=120):
    """Jinja's truncate(120): cut at a word boundary, '...' appended, 5 characters of leeway."""
    if len(text) <= length + 5:
        return text
    return text[:length - 3].rsplit(" ", 1)[0] + "..."


def _patch_problem(p):
    for entry in p["patches"]:
        if not patch_entry_ok(entry):
            return ("sglang_patches entry %s: give a path, or a mapping with 'path' and 'sha256' (64 hex digits, the "
                    "sha256 of the patch file)" % _json(entry))
    files = p["patch_files"]
    for found in files:
        if not found["exists"]:
            return "Patch file %s does not exist on the controller" % found["file"]
    shipped_dir = os.path.join(p["files_dir"], "patches")
    for entry, found in zip(p["patches"], files):
        want = _expected_sha256(entry, p["shipped_patches"])
        if want and want != found["sha256"]:
            return ("Patch file %s has sha256 %s, sglang_patches expects %s: refused, nothing patched"
                    % (found["file"], found["sha256"], want))
    for found in files:
        name = os.path.basename(found["file"])
        if (os.path.dirname(found["file"]) == shipped_dir and SHIPPED_PATCH_RE.match(name)
                and not name.startswith("sglang-%s-" % p["version"])):
            return ("The shipped patch %s is for another SGLang release than %s (its name says which): remove it from "
                    "sglang_patches. SGLang 0.5.23 needs no Kimi-K2.5 EAGLE-3 patch (its models/kimi_k25.py has "
                    "set_eagle3_layers_to_capture); nothing was installed." % (name, p["version"]))
    return None


def _expected_sha256(entry, shipped):
    """The sha256 a patch entry must have: the one given, else the known one of a shipped patch, else ''."""
    if isinstance(entry, dict) and "sha256" in entry:
        return str(entry["sha256"]).strip().lower()
    return str(shipped.get(entry["path"] if isinstance(entry, dict) else entry, "")).strip().lower()


def settings_problem(p):
    """The refusal of the versioned venv settings, or None."""
    venv, versions_dir, keep = p["venv"], p["versions_dir"], p["keep"]
    if (not venv.startswith("/") or CONTROL_RE.search(venv) or not versions_dir.startswith("/")
            or CONTROL_RE.search(versions_dir) or os.path.normpath(versions_dir) == os.path.normpath(venv)
            or not re.match(r"^[1-9][0-9]*\Z", str(keep))):
        return ("sglang_venv (%s) and sglang_venv_versions_dir (%s) must be two different absolute paths without "
                "control characters, sglang_venv_keep (%s) a whole number of at least 1; nothing was changed"
                % (_json(venv), _json(versions_dir), _json(keep)))
    return None


# ------------------------------------------------------------------------------------------------------- install
class Install(object):
    """One run: ``params`` are the module's (with the action plugin's lock, shipped_locks and patch_files);
    ``run`` has subprocess.run's signature; ``check_mode`` reports without changing. ``packages`` (a
    module_utils._packages.Packages) installs patch(1) where patches are to be applied and the host has none;
    ``which(name)`` finds it afterwards."""

    def __init__(self, params, run=subprocess.run, check_mode=False, patch_bin=None, packages=None, which=None):
        self.p = params
        self.run = run
        self.check_mode = check_mode
        self.patch_bin = patch_bin
        self.packages = packages
        self.which = which
        self.changes = []
        self.diff = {"before": "", "after": ""}
        self.reqs = []
        self.lock_lines = []
        self.version = ""

    # ----------------------------------------------------------------------------------------------- helpers
    def _cmd(self, argv, stdin=None, timeout=None, env=None):
        extra = {"env": dict(os.environ, **env)} if env else {}
        proc = self.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                        universal_newlines=True, timeout=timeout, check=False, **extra)
        secret = self.p.get("index_secret") or ""
        out, err = proc.stdout or "", proc.stderr or ""
        return proc.returncode, _secrets.mask(out, [secret]) if secret else out, \
            _secrets.mask(err, [secret]) if secret else err

    def index_env(self):
        """pip's environment for an index URL that carries a secret: the whole URL in PIP_INDEX_URL (never on its
        command line, which any local user reads in /proc); {} otherwise."""
        p = self.p
        if not p.get("index_secret"):
            return {}
        return {"PIP_INDEX_URL": p["index_url"].replace(_secrets.MASK, p["index_secret"], 1)}

    def _write(self, path, data, what):
        """Write ``data`` (bytes) to ``path`` (root:root 0644) when it differs; returns whether it did (or would)."""
        try:
            with open(path, "rb") as handle:
                before = handle.read()
        except (IOError, OSError):
            before = None
        if before == data:
            st = os.stat(path)
            if stat.S_IMODE(st.st_mode) == 0o644 and (os.geteuid() != 0 or (st.st_uid, st.st_gid) == (0, 0)):
                return False
            self.changes.append("mode or owner of %s -> root:root 0644" % path)
            if not self.check_mode:
                os.chmod(path, 0o644)
                if os.geteuid() == 0:
                    os.chown(path, 0, 0)
            return True
        self.changes.append("%s %s" % ("wrote" if before is None else "rewrote", what))
        if not self.check_mode:
            write_atomic(path, data, mode=0o644, root_owned=True)
        return True

    # ----------------------------------------------------------------------------------------------- phases
    def preflight(self):
        """Every refusal, before anything changes: the inputs, the controller's files, the wheel directory, the
        base interpreter (and whether the lock has wheels for its Python), the versioned venv settings."""
        p = self.p
        problem = input_problem(p)
        if problem:
            raise InstallError(problem)
        if p["require_hashes"]:
            reqs = lock_requirements(p["lock"]["text"])
            if p["deps"]:
                self.lock_lines = reqs
            else:
                pattern = lock_package_re(p["package"], p["version"])
                self.lock_lines = [line for line in reqs if re.match(pattern, line)]
        if p["wheel_dir"] and not os.path.isdir(p["wheel_dir"]):
            raise InstallError("sglang_wheel_dir %s is not a directory on %s" % (p["wheel_dir"], p["host_name"]))
        if not os.path.exists(p["base_python"]):
            raise InstallError("sglang_venv_base_python %s does not exist on %s" % (p["base_python"], p["host_name"]))
        pythons = lock_pythons(p["lock"]["text"]) if p["require_hashes"] else []
        if p["deps"] and pythons:
            rc, out, err = self._cmd([p["base_python"], "-c", PYTHON_VERSION], timeout=60)
            if rc != 0:
                raise InstallError("%s could not say its version (rc %d): %s" % (p["base_python"], rc, err.strip()))
            problems = lock_python_problems(pythons, out.strip(), lock=os.path.basename(p["lock"]["file"]),
                                            package=p["package"], version=p["version"],
                                            base_python=p["base_python"])
            if problems:
                raise InstallError("%s: %s" % (p["host_name"], " ".join(problems)))
        problem = settings_problem(p)
        if problem:
            raise InstallError(problem)

    def venv_dir(self):
        """The venv this install goes into: <versions_dir>/<package>-<version>-<12 hex of the identity> (what pip
        and patch put into it), or the venv itself when not versioned."""
        p = self.p
        if not p["versioned"]:
            return p["venv"]
        identity = {
            "package": p["package"], "version": p["version"], "deps": bool(p["deps"]),
            "lock_sha256": p["lock"]["sha256"] if p["require_hashes"] else "",
            "extra_packages": list(p["extra_packages"]),
            "patches": [found["sha256"] for found in p["patch_files"]],
            "patch_strip": int(p["patch_strip"]), "base_python": p["base_python"],
        }
        return "%s/%s-%s-%s" % (p["versions_dir"], p["package"], p["version"], _sha256(_json(identity).encode())[:12])

    def pip_args(self):
        """pip's arguments besides what to install: hashes, --no-deps, the index or the wheel directory, the extra ones."""
        p = self.p
        args = ["--require-hashes"] if p["require_hashes"] else []
        args += [] if p["deps"] else ["--no-deps"]
        args += ["--index-url", p["index_url"]] if p["index_url"] and not p.get("index_secret") else []
        args += ["--no-index", "--find-links", p["wheel_dir"]] if p["wheel_dir"] else []
        return args + list(p["extra_args"])

    def probe(self, venv):
        """The venv's answer: {version, missing (None: could not tell)}."""
        p = self.p
        wanted = ([_HASH_SPLIT_RE.split(line)[0].strip() for line in self.lock_lines] if p["require_hashes"]
                  else ["%s==%s" % (p["package"], p["version"])] + list(p["extra_packages"]))
        rc, out, err = self._cmd([os.path.join(venv, "bin", "python"), "-c", PROBE],
                                 stdin=_json({"package": p["package"], "requirements": wanted}), timeout=300)
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise InstallError("%s/bin/python could not read its installed packages (rc %d): %s"
                               % (venv, rc, (err or out).strip()[-2000:]))
        return answer

    def install(self, venv, lock_dest):
        """pip install into ``venv`` when a requirement is not met there (or the venv cannot tell); returns the
        installed version."""
        p = self.p
        answer = self.probe(venv) if os.path.exists(os.path.join(venv, "bin", "python")) else None
        if answer is not None and answer.get("missing") == [] and (p["require_hashes"] or not p["deps"]):
            return answer.get("version", "")
        what = ["-r", lock_dest] if p["require_hashes"] else (
            ["%s==%s" % (p["package"], p["version"])] + list(p["extra_packages"]))
        if answer is None or answer.get("missing") is None:
            needs = "pip decides"
        else:
            needs = ", ".join(answer["missing"][:5]) + (" ..." if len(answer["missing"]) > 5 else "") or "pip decides"
        if self.check_mode:
            if answer is not None and answer.get("missing") == []:
                return answer.get("version", "")
            self.changes.append("pip install into %s (%s)" % (venv, needs))
            return answer.get("version", "") if answer else ""
        argv = [os.path.join(venv, "bin", "pip"), "install", "--disable-pip-version-check"] + self.pip_args() + what
        rc, out, err = self._cmd(argv, env=self.index_env())
        if rc != 0:
            raise InstallError("pip install into %s failed (rc %d), the venv is as pip left it: %s %s" % (
                venv, rc, out.strip()[-3000:], err.strip()[-6000:]))
        after = self.probe(venv)
        if not after.get("version"):
            raise InstallError("pip installed into %s, and %s is not there: %s" % (venv, p["package"], out[-2000:]))
        if "Successfully installed" in out or answer is None or answer.get("missing"):
            self.changes.append("pip install into %s (%s)" % (venv, needs))
        return after["version"]

    def patch(self, site, version, patch_dir):
        """Copy the patch files beside the venv and apply those not applied yet (a reverse dry-run tells an applied
        one), each checked to apply without fuzz (patch -F0) before any is applied. Returns {name: sha256}."""
        p = self.p
        names = [os.path.basename(found["file"]) for found in p["patch_files"]]
        sums = dict(zip(names, [found["sha256"] for found in p["patch_files"]]))
        if not names:
            return sums
        self.changes.extend(ensure_parent(patch_dir, check_mode=self.check_mode))
        scratch = tempfile.mkdtemp(prefix="gpuserve-patches-") if self.check_mode else None
        try:
            paths = []
            for name, found in zip(names, p["patch_files"]):
                data = base64.b64decode(found["content"])
                dest = os.path.join(patch_dir, name)
                if self._write(dest, data, "the patch file %s" % dest) and scratch:
                    dest = os.path.join(scratch, name)
                    with open(dest, "wb") as handle:
                        handle.write(data)
                paths.append(dest)
            if not site or not os.path.isdir(site):
                self.changes.extend("apply %s" % name for name in names)   # check mode, before the venv exists
                return sums
            strip = "-p%d" % int(p["patch_strip"])
            patch_bin = self.patch_bin or "patch"
            todo = []
            for name, path in zip(names, paths):
                rc, _out, _err = self._cmd([patch_bin, strip, "-F0", "--reverse", "--dry-run", "--force", "--silent",
                                            "-d", site, "-i", path], timeout=300)
                if rc != 0:
                    todo.append((name, path))
            for name, path in todo:
                rc, out, err = self._cmd([patch_bin, strip, "-F0", "--forward", "--batch", "--dry-run",
                                          "-d", site, "-i", path], timeout=300)
                if rc != 0:
                    raise InstallError("Patch %s does not apply to %s %s in %s without fuzz (patch -F0): %s. Nothing "
                                       "was patched." % (name, p["package"], version, site,
                                                         (out + " " + err).strip()))
            for name, path in todo:
                self.changes.append("applied %s" % name)
                if self.check_mode:
                    continue
                rc, out, err = self._cmd([patch_bin, strip, "-F0", "--forward", "--batch", "-d", site, "-i", path],
                                         timeout=300)
                if rc != 0:
                    raise InstallError("Patch %s failed in %s after its dry-run passed (rc %d): %s"
                                       % (name, site, rc, (out + " " + err).strip()))
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
        return sums

    def record(self, venv, version, sums):
        """The install record: what was installed, from where, with which lock and patches."""
        p = self.p
        if p["wheel_dir"]:
            source = "wheel directory %s" % p["wheel_dir"]
        elif p["index_url"]:
            source = "index %s" % _secrets.mask(p["index_url"])
        else:
            source = "default index"
        # the lock by name and its sha256, never its path on the controller: a run from another checkout would
        # rewrite the record and, since the server reads it, restart the server for nothing
        lock = ""
        if p["require_hashes"]:
            lock = ("gpuserve.sglang:locks/" if not p["pip_lock"] else "") + os.path.basename(p["lock"]["file"])
        return {
            "package": p["package"], "version": version, "venv": venv, "with_dependencies": bool(p["deps"]),
            "hashes_required": bool(p["require_hashes"]), "lock": lock,
            "lock_sha256": p["lock"]["sha256"] if p["require_hashes"] else "", "source": source, "patches": sums,
        }

    def write_record(self, venv, record):
        text = json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
        paths = [self.p["install_record"]] + ([os.path.join(venv, RECORD_IN_VENV)] if self.p["versioned"] else [])
        for path in paths:
            try:
                with open(path) as handle:
                    before = handle.read()
            except (IOError, OSError):
                before = ""
            if path == self.p["install_record"] and before != text:
                self.diff = {"before_header": path, "after_header": path, "before": before, "after": text}
            if self.check_mode and path != self.p["install_record"] and not os.path.isdir(venv):
                continue
            if not self.check_mode and not os.path.isdir(os.path.dirname(path)):
                ensure_parent(os.path.dirname(path))
            self._write(path, text.encode("utf-8"), "the install record %s" % path)

    def link_and_prune(self, venv):
        """A first install points the link at the new venv; the oldest versioned venvs beyond keep are removed
        (never the one just installed nor the link's). Returns a sentence on which venv the server runs."""
        p = self.p
        link = p["venv"]
        message = ""
        target = os.readlink(link) if os.path.islink(link) else ""
        if not os.path.exists(link):
            self.changes.append("linked %s -> %s" % (link, venv))
            if not self.check_mode:
                if os.path.lexists(link):
                    os.unlink(link)
                os.symlink(venv, link)
                if os.geteuid() == 0:
                    os.lchown(link, 0, 0)
            target = ""
        elif target != venv:
            message = ("%s is %s; %s (%s %s) is in the install record, and the server role runs it from its next "
                       "verified restart (then the link points at it)" % (
                           link, "a link to %s" % target if target else "a directory (an unversioned venv, kept as "
                           "it is)", venv, p["package"], self.version))
        protected = [venv, target]
        others = []
        if os.path.isdir(p["versions_dir"]):
            for name in os.listdir(p["versions_dir"]):
                path = os.path.join(p["versions_dir"], name)
                if name.startswith(".") or path in protected or os.path.islink(path) or not os.path.isdir(path):
                    continue
                others.append((os.stat(path).st_mtime, path))
        room = max(int(p["keep"]) - len(set(x for x in protected if x)), 0)
        for _mtime, path in sorted(others, reverse=True)[room:]:
            self.changes.append("removed the versioned venv %s" % path)
            if not self.check_mode:
                shutil.rmtree(path)
        return message

    def ensure_patch_bin(self):
        """patch(1) from the host's package manager when there are patches to apply and the host has none (a
        task of its own in the role before: a package manager's look of seconds on every run)."""
        if not self.p["patches"] or self.patch_bin or self.packages is None:
            return
        try:
            self.changes.extend(self.packages.ensure(["patch"]))
        except PackageError as exc:
            raise InstallError("patch(1) is needed for sglang_patches and could not be installed: %s; nothing of the "
                               "patches was applied" % exc)
        if not self.check_mode and self.which is not None:
            self.patch_bin = self.which("patch")

    # ----------------------------------------------------------------------------------------------- the run
    def apply(self, state="present"):
        """state checked: the refusals only. present: the whole install. Returns the module's result."""
        p = self.p
        self.preflight()
        if state == "checked":
            return {"changed": False, "patch_found": bool(self.patch_bin)}
        venv = self.venv_dir()
        made = ensure_venv(venv, p["base_python"], check_mode=self.check_mode, run=self.run)
        self.changes.extend(made["changes"])
        site = made["site_packages"]
        lock_dest = os.path.join(os.path.dirname(p["venv"]), "requirements-lock.txt")
        if p["require_hashes"]:
            self._write(lock_dest, ("\n".join(self.lock_lines) + "\n").encode("utf-8"), "the hash lock %s" % lock_dest)
        self.version = self.install(venv, lock_dest)
        self.ensure_patch_bin()
        sums = self.patch(site, self.version, os.path.join(os.path.dirname(p["venv"]), "patches"))
        record = self.record(venv, self.version, sums)
        self.write_record(venv, record)
        message = self.link_and_prune(venv) if p["versioned"] else ""
        message = message or "%s %s in %s" % (p["package"], self.version, venv)
        result = {
            "patch_found": bool(self.patch_bin), "changed": bool(self.changes), "changes": self.changes, "venv_dir": venv, "version": self.version,
            "site_packages": site, "record": record, "msg": message,
            "ansible_facts": {"sglang_venv_dir": venv, "sglang_installed_version": self.version,
                              "sglang_site_packages": site},
        }
        if self.diff["before"] != self.diff["after"]:
            result["diff"] = self.diff
        return result
