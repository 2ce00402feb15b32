# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CUDA toolkit on one host, in one module run: read, refuse, install, configure, verify.

``CudaToolkit(params, ...).apply()`` does what the cuda role's task files did, in their order:

- preflight (always, read-only): the sources (https or file:// only, the keyring's sha256 well formed), NVIDIA's
  repository rendered for this distribution and architecture, one read of the CUDA home, its nvcc, the generic link
  and the loader entries (``_cuda_facts``), and the refusals - the existing method without an nvcc, the pip method
  over a real CUDA directory, a real directory at the generic link, the repository method without the keyring's
  sha256. Each refusal comes before anything changes and says so.
- install (``nvidia_repo``: the host compiler, the checked cuda-keyring .deb, the sources entry, the pin, apt-get
  update when one of them changed, the driver and its branch lock when asked, the toolkit package; ``pip``: the
  compiler and the venv module, the venv, the wheels, the wheel tree's lib64 link and the CUDA home as a link to
  it; ``existing``: nothing).
- configure (when the environment is managed): the generic link (its old target kept once in the backup
  directory), the profile script and the loader entry (the replaced file kept beside it), the loader entries of
  another CUDA major reported or - asked to - commented out with the originals kept, ldconfig when an entry changed;
  then the persisted facts file.
- verify (not in check mode): nvcc's release, the driver against the minimum where GPUs exist, and the .cu test
  compiled (and run where a GPU exists).

Every collaborator that touches the host beyond the filesystem is injected: ``run`` (AnsibleModule.run_command),
``which`` (get_bin_path), ``download(url, dest)``, ``backup(path)``, ``venv_run`` (subprocess.run for _venv), so
the unit tests drive the whole class against a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils import _cuda_facts, _nvidia_smi, _venv
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import sha256_file
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit import repo as repo_mod
from ansible_collections.gpuserve.sglang.plugins.module_utils._cuda_toolkit.host import Writer
from ansible_collections.gpuserve.sglang.plugins.module_utils._packages import (
    PackageError, Packages, lock_pins, lock_problems, pip_install, pip_install_lock, pip_unsatisfied)

PHASES = ("install", "configure", "verify")
OS_RELEASE = "/etc/os-release"
DOWNLOAD_DIR = "/var/cache/gpuserve"
FACTS_FILE = "/etc/ansible/facts.d/gpuserve_cuda.fact"
SMI_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin"]
KERNEL_OK = "gpuserve-cuda-ok sum=97920"
NOTHING_CHANGED = " Nothing was changed on the host."


class ToolkitFailure(Exception):
    """The run stops: ``msg`` says what is wrong (and, after a change, what had been changed)."""


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


class CudaToolkit(object):
    """One call of the module: ``params`` as the module's options (see plugins/modules/cuda_toolkit.py)."""

    def __init__(self, params, run, which, check_mode=False, download=None, backup=None, machine="",
                 venv_run=subprocess.run):
        self.p = params
        self.run = run
        self.which = which
        self.check_mode = check_mode
        self.download = download
        self.machine = machine
        self.venv_run = venv_run
        self.writer = Writer(check_mode=check_mode, backup=backup)
        self.packages = Packages(run, which, check_mode=check_mode)
        self.warnings = []
        self.notes = []
        self.os_release = OS_RELEASE
        self.download_dir = DOWNLOAD_DIR
        self.verify_dir = params["verify"]["dir"]
        self.boot_id_file = "/proc/sys/kernel/random/boot_id"
        self.release = str(params["release"])
        self.prefix = params["prefix"]
        self.symlink = params.get("symlink") or ""
        self.env = params["environment"]
        self.repo = {}
        self.host = {}
        self.stale = []
        self.verified = {"ran": False, "nvcc_version": "", "driver_version": "", "gpu_count": 0}

    # -- what it knows -------------------------------------------------------------------------------------------

    @property
    def major(self):
        return self.release.split(".", 1)[0]

    def facts(self):
        return {"cuda_home": self.prefix, "cuda_version": self.release, "cuda_bin": self.prefix + "/bin",
                "cuda_lib": self.prefix + "/lib64"}

    def _path(self, path):
        return self.host["paths"].get(path) or {"exists": False}

    def _fail(self, msg):
        """Stop: before the first change, the message says that nothing changed; after, what had changed."""
        if self.writer.changes:
            raise ToolkitFailure("%s Changed before this: %s." % (msg, "; ".join(self.writer.changes)))
        raise ToolkitFailure(msg + NOTHING_CHANGED)

    def _changed(self, changes):
        for change in changes if isinstance(changes, list) else [changes]:
            if change and change not in self.writer.changes:
                self.writer.changes.append(change)

    # -- preflight ------------------------------------------------------------------------------------------------

    def _render_repo(self):
        r = self.p["repo"]
        distro = r.get("distro") or repo_mod.repo_distro_of(repo_mod.os_release(_read(self.os_release)))
        arch = r.get("arch") or repo_mod.cuda_repo_arch(self.machine)
        return repo_mod.cuda_repo(self.release, distro, arch, mirror=r.get("mirror") or "",
                                  base_url=r.get("base_url") or "", keyring_version=r.get("keyring_version"),
                                  pin_version=r.get("pin_version") or "", driver_install=r.get("driver_install"),
                                  driver_branch=str(r.get("driver_branch")), driver_flavor=r.get("driver_flavor"))

    def read_host(self):
        manage = self.env["manage"]
        paths = [self.prefix, self.prefix + "/bin/nvcc"] + ([self.symlink] if manage and self.symlink else [])
        ldconfig_dir = os.path.dirname(self.env["ldconfig_file"]) if manage else ""
        self.host = _cuda_facts.gather(paths, ldconfig_dir)
        return self.host

    def preflight(self):
        """Everything that can refuse, before anything changes."""
        r, pip = self.p["repo"], self.p["pip"]
        refused = repo_mod.cuda_source_problems({
            "cuda_repo_base_url": r.get("base_url"), "cuda_repo_mirror": r.get("mirror") or "",
            "cuda_pip_extra_args": pip.get("extra_args") or "", "cuda_keyring_sha256": r.get("keyring_sha256") or ""})
        if refused:
            self._fail("cuda: only https:// (or a local file://) sources are allowed and cuda_keyring_sha256 is 64 "
                       "hex digits; refused: %s" % "; ".join(refused))
        method = self.p["method"]
        unlocked = lock_problems(pip.get("packages") or [], pip["lock"]) if method == "pip" and pip.get("lock") else []
        if unlocked:
            self._fail("cuda_pip_lock does not pin cuda_pip_packages (every CUDA wheel is installed from the hash "
                       "lock, --require-hashes --no-deps): %s. Generate a lock of them (scripts/gen-cuda-lock.py) "
                       "and name it in cuda_pip_lock, or set cuda_pip_lock to \"\" (no hash checking)."
                       % "; ".join(unlocked))
        if method == "nvidia_repo":
            try:
                self.repo = self._render_repo()
            except repo_mod.CudaToolkitError as exc:
                self._fail(str(exc) + ".")
        try:
            self.read_host()
        except _cuda_facts.CudaFactsError as exc:
            self._fail(str(exc) + ".")
        home, nvcc = self._path(self.prefix), self._path(self.prefix + "/bin/nvcc")
        missing = "does not exist" if not home["exists"] else "is missing or not executable"
        if method == "existing" and not (nvcc["exists"] and nvcc.get("executable")):
            self._fail(
                "cuda_install_method=existing, but there is no CUDA %s here: %s/bin/nvcc %s. Install CUDA %s at %s "
                "first, point cuda_prefix at the real CUDA home, or use cuda_install_method=nvidia_repo or pip."
                % (self.release, self.prefix, missing, self.release, self.prefix))
        if method == "pip" and home["exists"] and not home.get("islnk"):
            self._fail(
                "cuda_install_method=pip manages %s as a symlink into %s, but %s is a real %s (a toolkit installed "
                "another way?). Use cuda_install_method=existing for it, or set cuda_prefix to another path."
                % (self.prefix, pip["venv"], self.prefix, "directory" if home.get("isdir") else "file"))
        if self.env["manage"] and self.symlink:
            link = self._path(self.symlink)
            if link["exists"] and not link.get("islnk"):
                self._fail(
                    "%s is a real %s, not a link; the role will not delete it to point it at %s. Move it away, or set "
                    "cuda_symlink to \"\" to leave it alone."
                    % (self.symlink, "directory" if link.get("isdir") else "file", self.prefix))
        if method == "nvidia_repo" and "install" in self.p["phases"] and len(r.get("keyring_sha256") or "") != 64:
            self._fail(
                "cuda_install_method=nvidia_repo needs cuda_keyring_sha256, the sha256 of %s: the keyring is the "
                "trust anchor of every package from that repository, so it is not installed unchecked. Take the "
                "SHA256 of the cuda-keyring %s entry of that repository's Packages index, read on a host that already "
                "trusts NVIDIA's key (docs/security.md), and set cuda_keyring_sha256 for this host's group."
                % (self.repo["keyring_url"], r.get("keyring_version")))

    # -- install --------------------------------------------------------------------------------------------------

    def install(self):
        method = self.p["method"]
        if method == "existing":
            self.notes.append("cuda_install_method=existing: using the CUDA at %s as it is; the verify phase checks "
                              "it." % self.prefix)
            return
        try:
            if method == "pip":
                self._install_pip()
            else:
                self._install_repo()
        except (PackageError, OSError, RuntimeError) as exc:
            self._fail(str(exc))

    def _install_pip(self):
        pip = self.p["pip"]
        self._changed(self.packages.ensure(list(self.p["host_compiler_packages"]) + list(pip["system_packages"])))
        venv = _venv.ensure_venv(pip["venv"], pip["python"], check_mode=self.check_mode, run=self.venv_run)
        self._changed(venv["changes"])
        python = os.path.join(pip["venv"], "bin", "python")
        if not venv["site_packages"]:   # check mode, no venv yet: the rest would follow
            self._changed("install %s into %s" % (" ".join(pip["packages"]), pip["venv"]))
            return
        lock = pip.get("lock") or ""
        # with a lock: every wheel it pins, at its version (a fresh resolution can pull nothing else)
        wanted = ["%s==%s" % item for item in sorted(lock_pins(lock).items())] if lock else list(pip["packages"])
        missing = pip_unsatisfied(self.run, python, wanted)
        if missing:
            if self.check_mode:
                self._changed("install %s" % " ".join(missing))
            elif lock:
                lock_path = os.path.join(pip["venv"], "cuda-requirements-lock.txt")
                self._changed(self.writer.file(lock_path, lock, 0o644))
                if pip_install_lock(self.run, python, lock_path, pip.get("extra_args")):
                    self._changed("installed %s (hash lock)" % " ".join(missing))
            elif pip_install(self.run, python, pip["packages"], pip.get("extra_args")):
                self._changed("installed %s" % " ".join(missing))
        wheel_root = "%s/nvidia/cu%s" % (venv["site_packages"], self.major)
        if not self.check_mode and not _cuda_facts.path_facts(wheel_root + "/bin/nvcc")["exists"]:
            self._fail(
                "The wheels %s left no %s/bin/nvcc in %s. Include the nvcc, crt, nvvm and cudart extras of "
                "cuda-toolkit (or nvidia-cuda-nvcc, -crt, nvidia-nvvm, nvidia-cuda-runtime) for CUDA %s."
                % (" ".join(pip["packages"]), wheel_root, pip["venv"], self.release))
        if os.path.isdir(wheel_root):
            self.writer.link(wheel_root + "/lib64", "lib")
        self.writer.link(self.prefix, wheel_root)

    def _install_repo(self):
        r, repo = self.p["repo"], self.repo
        self._changed(self.packages.ensure(["ca-certificates"] + list(self.p["host_compiler_packages"])))
        self.writer.directory(self.download_dir, 0o755)
        deb = os.path.join(self.download_dir, repo["keyring_deb"])
        self._fetch_keyring(repo["keyring_url"], deb, r["keyring_sha256"].lower())
        repo_changed = [c for c in (self.packages.deb(deb),
                                    self.writer.file(repo["sources_file"], repo["sources_line"] + "\n"),
                                    self.writer.file(repo["pin_file"], repo["pin_content"])) if c]
        self._changed(repo_changed)
        if repo_changed:
            self._changed(self.packages.refresh(force=True))
        if r.get("driver_install"):
            self._changed(self.packages.ensure([repo["driver_pinning_package"]]))
            self._changed(self.packages.ensure(list(repo["driver_packages"])))
        self._changed(self.packages.ensure([repo["toolkit_package"]]))

    def _fetch_keyring(self, url, dest, sha256):
        """The cuda-keyring .deb at ``dest``, checked against ``sha256``: kept when the file there matches, else
        downloaded to a temporary file, checked, and renamed into place (a mismatch leaves nothing behind)."""
        if os.path.isfile(dest) and sha256_file(dest) == sha256:
            return
        if self.check_mode:
            self._changed("download %s" % url)
            return
        fd, tmp = tempfile.mkstemp(prefix=".cuda-keyring.", dir=os.path.dirname(dest))
        os.close(fd)
        try:
            self.download(url, tmp)
            got = sha256_file(tmp)
            if got != sha256:
                self._fail("The download of %s has sha256 %s, not cuda_keyring_sha256 %s: nothing was installed from "
                           "it." % (url, got, sha256))
            os.chmod(tmp, 0o644)
            os.rename(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self._changed("downloaded %s" % url)

    # -- configure ------------------------------------------------------------------------------------------------

    def configure(self):
        try:
            if self.env["manage"]:
                self._environment()
            self.writer.directory(os.path.dirname(self.p["facts_file"]), 0o755)
            self.writer.file(self.p["facts_file"], repo_mod.facts_text(self.facts()))
        except OSError as exc:
            self._fail(str(exc))

    def _environment(self):
        env, w = self.env, self.writer
        before = list(w.changes)
        if before:   # the install phase changed the host: its link and loader entries are read again
            self.read_host()
        backup_dir = env["backup_dir"]
        w.directory(backup_dir, 0o700)
        if self.symlink:
            link = self._path(self.symlink)
            points_here = link.get("lnk_target") == self.prefix or link.get("lnk_source") == self.prefix
            if link.get("islnk") and not points_here:
                w.file(os.path.join(backup_dir, os.path.basename(self.symlink) + ".link-target"),
                       link["lnk_target"] + "\n", mode=0o600, keep_existing=True)
            if link["exists"] and not link.get("islnk"):
                self.notes.append("%s is a real %s, not a link: left as it is (the role never replaces it). CUDA %s "
                                  "is at %s." % (self.symlink, "directory" if link.get("isdir") else "file",
                                                 self.release, self.prefix))
            elif not points_here:
                w.link(self.symlink, self.prefix)
        facts = self.facts()
        w.file(env["profile_file"], repo_mod.profile_text(self.prefix, self.release, self.p["method"],
                                                          env["ldconfig_file"]), backup=True)
        ours = w.file(env["ldconfig_file"], repo_mod.ldconfig_text(facts["cuda_lib"], self.release, self.p["method"]),
                      backup=True)
        self.stale = repo_mod.cuda_stale_ldconfig(self.host["ldconfig"], self.release, keep=[env["ldconfig_file"]])
        cleaned = []
        for item in self.stale:
            if not env["remove_stale"]:
                self.warnings.append(
                    "%s (%s) would give a second libcudart beside CUDA %s; left as it is. cuda_ldconfig_remove_stale="
                    "true comments out its CUDA lines (%s) and keeps the original in %s/ld.so.conf.d."
                    % (item["path"], item["reason"], self.release, ", ".join(item["stale_lines"]), backup_dir))
                continue
            w.directory(os.path.join(backup_dir, "ld.so.conf.d"), 0o700)
            with open(item["path"], "rb") as handle:
                original = handle.read()
            w.file(os.path.join(backup_dir, "ld.so.conf.d", os.path.basename(item["path"])), original, mode=0o600,
                   keep_existing=True)
            cleaned.append(w.file(item["path"], item["content_cleaned"],
                                  what="%s (commented out: %s)" % (item["path"], item["reason"])))
        if ours or any(cleaned):
            if not self.check_mode:
                rc, out, err = self.run(["ldconfig"])
                if rc != 0:
                    self._fail("ldconfig failed (rc=%d): %s" % (rc, (err or out).strip()))
            w.changes.append("rebuilt the loader cache (ldconfig)")

    # -- verify ---------------------------------------------------------------------------------------------------

    def verify(self):
        if self.check_mode:
            self.notes.append("Check mode: the verify phase runs nvcc and the GPU test only in a real run.")
            return
        v = self.p["verify"]
        bindir = self.prefix + "/bin"
        rc, out, err = self.run([bindir + "/nvcc", "--version"], environ_update={"LC_ALL": "C"})
        if rc != 0:
            self._fail("%s/nvcc --version failed (rc=%d): %s" % (bindir, rc, (err or out or "").strip()))
        try:
            nvcc = repo_mod.cuda_nvcc_release(out)
        except repo_mod.CudaToolkitError as exc:
            self._fail(str(exc))
        if nvcc["release"] != self.release:
            self._fail("%s/nvcc reports release %s (V%s), but this host should have CUDA %s."
                       % (bindir, nvcc["release"], nvcc["version"], self.release))
        gpus = self._gpus(v["nvidia_smi"])
        if gpus.get("nvidia_smi_failed"):
            self._fail("%s. Is the NVIDIA kernel driver loaded?" % gpus["reason"])
        drivers = sorted(set(g["driver_version"] for g in gpus["gpus"] if g.get("driver_version")))
        if gpus["driver_major"] is not None and gpus["driver_major"] < int(v["driver_min_version"]):
            self._fail("NVIDIA driver %s is older than %s, the minimum for CUDA %s (nvcc %s). Install driver branch %s "
                       "or newer (cuda_driver_install=true with nvidia_repo)."
                       % (", ".join(drivers), v["driver_min_version"], self.release, nvcc["version"],
                          self.p["repo"].get("driver_branch")))
        count = gpus["count"]
        last = ""
        if v["compile"]:
            proof = self._proof(bindir + "/nvcc", v["source"], gpus["driver_version"] or "", count)
            earlier = self._proof_earlier(proof) if not (v.get("every_run") or self.writer.changes) else None
            if earlier:
                last = ("the .cu test passed on this toolkit, driver and GPUs earlier in this boot (%s); not compiled "
                        "again (cuda_verify_every_run)" % earlier)
            else:
                last = self._compile(bindir + "/nvcc", v["source"], count)
                self._proof_keep(proof)
        self.verified = {"ran": True, "nvcc_version": nvcc["version"], "driver_version": gpus["driver_version"] or "",
                         "gpu_count": count}
        if count:
            self.notes.append("CUDA %s OK: home %s, nvcc %s, driver %s on %d GPU(s), %s"
                              % (self.release, self.prefix, nvcc["version"], gpus["driver_version"], count, last))
        else:
            self.notes.append("CUDA %s OK: home %s, nvcc %s, no GPU here (compile-only test passed%s)"
                              % (self.release, self.prefix, nvcc["version"],
                                 "; " + last if last.startswith("the .cu test passed") else ""))

    # The .cu test's proof: compiling and running it is most of a no-op run's time (seconds of nvcc). It is done
    # again whenever this run changed anything, the toolkit's nvcc, the test, the driver or the GPUs differ from
    # what passed last, or the host booted since; the proof is kept in the test's directory (not a change).
    PROOF = "verified.json"

    def _proof(self, nvcc, source, driver, gpu_count):
        try:
            real = os.path.realpath(nvcc)
            st = os.stat(real)
            binary = [real, st.st_size, st.st_mtime_ns, st.st_ino]
        except OSError:
            binary = None
        return {"release": self.release, "nvcc": binary, "driver": driver, "gpu_count": gpu_count,
                "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
                "boot_id": _read(self.boot_id_file).strip()}

    def _proof_earlier(self, proof):
        """When the same proof passed earlier: its time (UTC), else None."""
        try:
            with open(os.path.join(self.verify_dir, self.PROOF), encoding="utf-8") as handle:
                kept = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(kept, dict) or proof["nvcc"] is None or not proof["boot_id"]:
            return None
        return kept.get("at") if kept.get("proof") == json.loads(json.dumps(proof)) else None

    def _proof_keep(self, proof):
        path = os.path.join(self.verify_dir, self.PROOF)
        text = json.dumps({"proof": proof, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, sort_keys=True)
        try:
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError as exc:   # a proof not kept costs the next run a compile, nothing else
            self.warnings.append("could not keep the .cu test's proof in %s: %s" % (path, exc))

    def _gpus(self, wanted):
        """nvidia_gpu_info's view of the GPUs and the driver (no units): no nvidia-smi is a host without GPUs."""
        if "/" in wanted:
            binary = wanted if os.path.isfile(wanted) and os.access(wanted, os.X_OK) else None
        else:
            binary = self.which(wanted, SMI_DIRS)
        if not binary:
            return _nvidia_smi.no_gpus("%s not found" % wanted)

        def smi(argv):
            return self.run(argv, environ_update={"LC_ALL": "C"})
        return _nvidia_smi.gather(smi, binary)

    def _compile(self, nvcc, source, gpu_count):
        """The .cu test placed (root:root 0644 in a 0755 directory, replaced only when it differs), compiled in a
        temporary directory, and run where a GPU exists. Returns the program's last line."""
        src = os.path.join(self.verify_dir, "cuda_verify.cu")
        try:
            self.writer.directory(self.verify_dir, 0o755)
            self.writer.file(src, source, mode=0o644, what="the .cu test %s" % src)
        except OSError as exc:
            self._fail(str(exc))
        work = tempfile.mkdtemp(prefix="gpuserve-cuda-verify.")
        try:
            binary = os.path.join(work, "cuda_verify")
            rc, out, err = self.run([nvcc, "-o", binary, src])
            text = "%s\n%s" % (out, err)
            if rc == 0 and gpu_count:
                rc, out, err = self.run([binary])
                text = "%s\n%s\n%s" % (text, out, err)
            if rc != 0 or (gpu_count and KERNEL_OK not in out):
                self._fail("The .cu test failed (rc=%d): %s" % (rc, text.strip()))
            return out.strip().splitlines()[-1] if gpu_count and out.strip() else "compiled with %s" % nvcc
        finally:
            shutil.rmtree(work, ignore_errors=True)

    # -- the whole run --------------------------------------------------------------------------------------------

    def apply(self):
        """Preflight, then the phases asked for; returns the module's result (without ``failed``)."""
        self.preflight()
        phases = [phase for phase in PHASES if phase in self.p["phases"]]
        if "install" in phases:
            self.install()
        if "configure" in phases:
            self.configure()
        if "verify" in phases:
            self.verify()
        return self.result(phases)

    def result(self, phases):
        return {
            "changed": bool(self.writer.changes),
            "changes": list(self.writer.changes),
            "diff": list(self.writer.diffs),
            "phases": phases,
            "facts": self.facts(),
            "repo": self.repo,
            "stale_ldconfig": [{"path": s["path"], "reason": s["reason"]} for s in self.stale],
            "verified": self.verified,
            "notes": list(self.notes),
            "msg": " ".join(self.notes) or "CUDA %s at %s" % (self.release, self.prefix),
        }
