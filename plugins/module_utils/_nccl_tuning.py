# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NCCL tuning of the server's interpreter, on the host, in one pass (the module gpuserve.sglang.nccl_tuning):

1. read: the interpreter (the one given, else the install record's venv, else sglang_venv: _host_facts.interpreter),
   what it says of its site-packages and the sitecustomize it imports (_nccl_probe.inspect), the files there;
2. refuse bad input and a host it must not write to, with every reason at once, BEFORE anything changes;
3. compare what is there with what is wanted: the EnvironmentFile for the unit (root 0644, directory root 0755),
   a managed block at the end of sitecustomize.py (root 0644), and a one-line .pth hook in site-packages when
   another sitecustomize shadows the venv's (Debian/Ubuntu python3 ship one); for state absent, none of them, and
   sitecustomize.py byte for byte as it was before the role;
4. change what differs (each file atomically: temporary file and rename), unless in check mode;
5. verify by starting the interpreter (_nccl_probe.verify): clean, with an exported value (the policy), and with
   `-S` and only the EnvironmentFile's values; for absent, that nothing the role writes is left.

The managed block is the one ansible.builtin.blockinfile wrote for earlier releases of the role, byte for byte (the
same markers, the same place, the same text), so a host those releases tuned is unchanged. The block records two
flags in its own text, worked out from the file before the block is first written: `file-created-by-role` (no
file before: absent removes it when nothing else was written into it since) and `newline-added-by-role` (the
operator's last line had no newline: absent takes it back). The files are rendered here, in the same bytes as the
role's templates rendered them, so that nccl.env's checksum (which the server role's restart check reads) does not
change with this code.

Standard library only; `run` (the interpreter's starts) is injectable; the paths are the host's.
Tests: tests/unit/plugins/module_utils/test_nccl_tuning.py."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess

from ansible_collections.gpuserve.sglang.plugins.module_utils import _nccl_network, _nccl_probe
from ansible_collections.gpuserve.sglang.plugins.module_utils._atomic import write_atomic
from ansible_collections.gpuserve.sglang.plugins.module_utils._host_facts import HostFactsError, interpreter

MARKER = "# {mark} gpuserve.sglang.nccl_tuning MANAGED BLOCK"
CREATED_FLAG = "# file-created-by-role: yes"
NEWLINE_FLAG = "# newline-added-by-role: yes"
PTH_NAME = "gpuserve_nccl_tuning.pth"
FILE_MODE = 0o644
DIR_MODE = 0o755


class Refused(Exception):
    """Bad input or a host the role must not write to; raised before anything changed (the message says so)."""


class VerifyFailed(Exception):
    """The interpreter, started after the change, does not see what was written (the message says what it saw)."""


# --- the managed block --------------------------------------------------------------------------------------------

def block_state(text, exists=True, marker=MARKER):
    """Where ``text`` (the file's content, '' when absent) stands with the block under ``marker``.

    Returns a dict: ``present`` (the block is there), ``file_created``, ``newline_added``, ``text_without_block``,
    ``restored_text`` (the file as it was before the role: without the block and the newline it added) and
    ``remove_file`` (the role created the file and nothing but the block is in it)."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ValueError("block_state: the input must be the file's text, not %s" % type(text).__name__)
    if not isinstance(marker, str) or "{mark}" not in marker:
        raise ValueError("block_state: marker must contain {mark}")
    begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
    pattern = re.compile(r"(?ms)^%s\n.*?^%s(?:\n|\Z)" % (re.escape(begin), re.escape(end)))
    found = pattern.search(text)
    block = found.group(0) if found else ""
    without = pattern.sub("", text)
    file_created = (not exists) or CREATED_FLAG in block
    newline_added = NEWLINE_FLAG in block or (not block and text != "" and not text.endswith("\n"))
    restored = without[:-1] if newline_added and without.endswith("\n") else without
    return {
        "present": bool(block),
        "file_created": bool(file_created),
        "newline_added": bool(newline_added),
        "text_without_block": without,
        "restored_text": restored,
        "remove_file": bool(block) and bool(file_created) and without == "",
    }


def insert_block(text, block, marker=MARKER):
    """``text`` with ``block`` between the markers, as ansible.builtin.blockinfile (insertafter EOF) puts it: in
    place of an existing block (both markers whole lines), else at the end, after a newline added to a last line
    that has none."""
    begin, end = marker.replace("{mark}", "BEGIN") + "\n", marker.replace("{mark}", "END") + "\n"
    if not block.endswith("\n"):
        block += "\n"
    lines = text.splitlines(True)
    first = last = None
    for index, line in enumerate(lines):
        if line == begin:
            first = index
        if line == end:
            last = index
    if first is None or last is None:
        at = len(lines)
    else:
        at = min(first, last)
        del lines[at:max(first, last) + 1]
    if at > 0 and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    lines[at:at] = [begin] + block.splitlines(True) + [end]
    return "".join(lines)


# --- the files, in the bytes the role's templates gave them ---------------------------------------------------------

def _sorted(env):
    """nccl_env's items as Jinja's dictsort ordered them (case-insensitive), values as strings."""
    return [(key, str(value)) for key, value in sorted(env.items(), key=lambda item: item[0].lower())]


def render_block(env, policy, env_file, file_created, newline_added):
    """The managed block's text (without the markers): sets each value on every start of the interpreter."""
    lines = [
        "# NCCL settings for every Python start of this interpreter (gpuserve.sglang.nccl_tuning).",
        "# Policy %s: %s." % (policy, "a value exported before Python starts wins" if policy == "setdefault"
                              else "these values replace exported ones"),
        "# The server unit reads the same values from %s (EnvironmentFile=), so" % json.dumps(env_file),
        "# they reach it even when this file is bypassed (python -S, another interpreter, a rebuilt venv).",
        "# file-created-by-role: %s" % ("yes" if file_created else "no"),
        "# newline-added-by-role: %s" % ("yes" if newline_added else "no"),
        "def _gpuserve_nccl_tuning():",
        "    import os",
        "    for key, value in (",
    ]
    lines += ["        (%s, %s)," % (json.dumps(key), json.dumps(value)) for key, value in _sorted(env)]
    lines += ["    ):",
              "        os.environ[key] = value" if policy == "force" else "        os.environ.setdefault(key, value)",
              "", "", "_gpuserve_nccl_tuning()", "del _gpuserve_nccl_tuning"]
    return "\n".join(lines) + "\n"


def render_env_file(env, env_file, site_dir):
    """The EnvironmentFile for the server unit: KEY=VALUE lines after a comment header."""
    lines = ["#", "# Ansible managed", "#",
             "# NCCL settings for the SGLang server unit (EnvironmentFile=%s)." % json.dumps(env_file),
             "# Same values as the gpuserve.sglang.nccl_tuning block in %s," % json.dumps(site_dir + "/sitecustomize.py"),
             "# so the unit carries them even when sitecustomize is bypassed (python -S). KEY=VALUE, one a line."]
    lines += ["%s=%s" % item for item in _sorted(env)]
    return "\n".join(lines) + "\n"


def render_pth(env, policy, site_dir):
    """The .pth hook: one `import` line (site.addpackage runs only those) with the block's effect."""
    call = "update({k: v})" if policy == "force" else "setdefault(k, v)"
    pairs = "".join("(%s, %s), " % (json.dumps(key), json.dumps(value)) for key, value in _sorted(env))
    return ("import os; [os.environ.%s for k, v in (%s)]  # gpuserve.sglang.nccl_tuning: sitecustomize.py of this "
            "venv is shadowed by another one, see %s/sitecustomize.py\n" % (call, pairs, site_dir))


# --- the host -----------------------------------------------------------------------------------------------------

def _lstat(path):
    try:
        return os.lstat(path)
    except OSError:
        return None


def _read(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def _attrs_differ(st, mode, root=True):
    """Whether an existing path's mode (or, with ``root`` and running as root, its root:root ownership) differs."""
    if stat.S_IMODE(st.st_mode) != mode:
        return True
    return root and os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0)


class Change(object):
    """One path to change: ``kind`` file (``text`` and ``mode``; ``root`` to own it by root), absent, or dir."""

    def __init__(self, path, kind, before=None, text=None, mode=FILE_MODE, root=True):
        self.path, self.kind, self.before, self.text, self.mode, self.root = path, kind, before, text, mode, root

    def diff(self):
        header = "%s (%s)" % (self.path, "directory" if self.kind == "dir" else "content")
        after = "" if self.kind == "absent" else (self.text if self.kind == "file" else "directory, mode %04o\n"
                                                  % self.mode)
        return {"before_header": header, "after_header": header, "before": self.before or "", "after": after}

    def apply(self):
        if self.kind == "absent":
            os.unlink(self.path)
        elif self.kind == "dir":
            if not os.path.isdir(self.path):
                os.makedirs(self.path, DIR_MODE)
            os.chmod(self.path, self.mode)
            if os.geteuid() == 0:
                os.chown(self.path, 0, 0)
        else:
            write_atomic(self.path, self.text.encode("utf-8"), mode=self.mode, root_owned=self.root)


def _file_change(path, text, mode=FILE_MODE, root=True):
    """The Change that makes ``path`` hold ``text`` with ``mode``, or None when it does already."""
    st = _lstat(path)
    before = _read(path) if st is not None and stat.S_ISREG(st.st_mode) else None
    if before == text and not _attrs_differ(st, mode, root):
        return None
    return Change(path, "file", before=before, text=text, mode=mode, root=root)


def _absent_change(path):
    """The Change that removes ``path``, or None when there is nothing."""
    st = _lstat(path)
    if st is None:
        return None
    return Change(path, "absent", before=_read(path) if stat.S_ISREG(st.st_mode) else None)


def _dir_change(path):
    st = _lstat(path)
    if st is not None and stat.S_ISDIR(st.st_mode) and not _attrs_differ(st, DIR_MODE):
        return None
    return Change(path, "dir", before="" if st is None else "directory, mode %04o\n" % stat.S_IMODE(st.st_mode),
                  mode=DIR_MODE)


class NcclTuning(object):
    """The whole run for one interpreter. ``params`` are the module's options; ``run`` starts the interpreter."""

    def __init__(self, params, check_mode=False, run=subprocess.run):
        self.p = params
        self.check_mode = check_mode
        self.run = run

    # -- read and refuse (nothing changes) --
    def read(self):
        """What the host holds and the problems that stop the run, as one dict (raises Refused)."""
        p = self.p
        try:
            python = interpreter(p["python"], p["install_record"], p["venv"])[0]
        except HostFactsError as exc:
            raise Refused("nccl_tuning: %s (nothing was changed)" % exc)
        problems = _nccl_network.input_problems(
            p["env"], [("nccl_python", python), ("nccl_tuning_env_file", p["env_file"])], p["network"])
        if problems:
            raise Refused("nccl_tuning: bad input (nothing was changed): %s" % "; ".join(problems))
        merge = _nccl_network.nccl_network_merge(p["env"], p["network"])
        probe = _nccl_probe.inspect(python, run=self.run)
        found = bool(probe["python"]["exists"])
        site_dir = probe["purelib"]
        sitecustomize = site_dir + "/sitecustomize.py"
        imported = probe["imported_sitecustomize"]
        shadowed = bool(found and imported and imported != sitecustomize)
        facts = {"python": python, "found": found, "site_dir": site_dir, "sitecustomize": sitecustomize,
                 "imported_sitecustomize": imported, "shadowed": shadowed,
                 "use_pth": p["pth_hook"] == "always" or (p["pth_hook"] == "auto" and shadowed),
                 "pth": site_dir + "/" + PTH_NAME, "env": merge["env"], "replaced": merge["replaced"],
                 "sc": probe["sitecustomize"]}
        host = self.host_problems(facts, probe)
        if host:
            raise Refused("nccl_tuning: %s" % " ".join(host))
        return facts

    def host_problems(self, facts, probe):
        """The refusals of what was found on the host ([] when none), in the role's order: with state present, a
        missing or not executable interpreter; with state present and the interpreter there, a site-packages
        directory that is not root's or that group or others can write (the sitecustomize.py there runs in every
        Python start of the venv); with the interpreter there, a sitecustomize.py that is not a regular file."""
        present = self.p["state"] == "present"
        site, sc = probe["site_dir"], probe["sitecustomize"]
        problems = []
        if present and not (facts["found"] and probe["python"]["executable"]):
            problems.append("nccl_python %s does not exist or is not executable. Create the server venv first (role "
                            "gpuserve.sglang.install) or point nccl_python at the interpreter that runs SGLang."
                            % facts["python"])
        if present and facts["found"] and not (site["isdir"] and site["pw_name"] == "root"
                                               and not site["wgrp"] and not site["woth"]):
            problems.append("%s is owned by %s with mode %s. sitecustomize.py there runs in every Python start of the "
                            "venv, so the directory must be owned by root and writable by nobody else (no "
                            "group/other write). Fix it (e.g. chown -R root: and chmod go-w on the venv) and run "
                            "again." % (facts["site_dir"], site["pw_name"] or "?", site["mode"] or "?"))
        if facts["found"] and sc["exists"] and not sc["isreg"]:
            problems.append("%s exists but is not a regular file (a symlink or a directory); the role does not write "
                            "through it. Replace it with a regular file." % facts["sitecustomize"])
        return problems

    # -- compare --
    def plan(self, facts):
        """The Changes that bring the host to the wanted state, in the order they are made."""
        p, env_file = self.p, self.p["env_file"]
        sc_text = facts["sc"]["text"] if facts["sc"]["exists"] else ""
        state = block_state(sc_text, exists=facts["sc"]["exists"]) if facts["found"] else None
        changes = []
        if p["state"] == "present":
            block = render_block(facts["env"], p["policy"], env_file, state["file_created"], state["newline_added"])
            changes += [_dir_change(os.path.dirname(env_file)),
                        _file_change(env_file, render_env_file(facts["env"], env_file, facts["site_dir"])),
                        _file_change(facts["sitecustomize"], insert_block(sc_text, block))]
            if facts["use_pth"]:
                changes.append(_file_change(facts["pth"], render_pth(facts["env"], p["policy"], facts["site_dir"])))
            else:
                changes.append(_absent_change(facts["pth"]))
        else:
            changes.append(_absent_change(env_file))
            if facts["found"]:
                changes.append(_absent_change(facts["pth"]))
                if state["remove_file"]:
                    changes.append(_absent_change(facts["sitecustomize"]))
                elif state["present"]:
                    mode = int(facts["sc"]["mode"], 8)
                    changes.append(_file_change(facts["sitecustomize"], state["restored_text"], mode=mode, root=False))
        return [change for change in changes if change is not None]

    # -- verify --
    def verify(self, facts):
        """Start the interpreter (present) or look for what the role writes (absent); raises VerifyFailed."""
        if self.p["state"] == "absent":
            left = [path for path in [self.p["env_file"]] + ([facts["pth"]] if facts["found"] else [])
                    if os.path.lexists(path)]
            if left:
                raise VerifyFailed("nccl_tuning: still present: %s" % left)
            sc = facts["sitecustomize"]
            if facts["found"] and os.path.isfile(sc) and "gpuserve.sglang.nccl_tuning MANAGED BLOCK" in _read(sc):
                raise VerifyFailed("nccl_tuning: the managed block is still in %s" % sc)
            return {}
        python, env = facts["python"], facts["env"]
        expected = dict(_sorted(env))
        seen = _nccl_probe.verify(python, list(env), self.p["env_file"], run=self.run)
        clean, policy, nosite, first = seen["clean"], seen["policy"], seen["nosite"], seen["first"]
        if clean["env"] != expected:
            hint = (" That file shadows %s; set nccl_tuning_pth_hook: auto." % facts["sitecustomize"]
                    if facts["shadowed"] else "")
            raise VerifyFailed("nccl_tuning: %s does not set the NCCL values on start. Expected %s, the interpreter "
                               "saw %s (sitecustomize imported from %s).%s"
                               % (python, expected, clean["env"], clean["sitecustomize"], hint))
        want = _nccl_probe.EXPORTED if self.p["policy"] == "setdefault" else expected[first]
        got = policy["env"].get(first)
        if got != want:
            raise VerifyFailed("nccl_tuning: with %s=%s exported and policy %s, the interpreter saw %s, expected %s."
                               % (first, _nccl_probe.EXPORTED, self.p["policy"],
                                  "nothing" if got is None else got, want))
        if nosite["sitecustomize_loaded"] or nosite["env"] != expected:
            raise VerifyFailed("nccl_tuning: under python -S with the values of %s the interpreter saw %s, expected "
                               "%s." % (self.p["env_file"], nosite["env"], expected))
        return seen

    # -- the whole run --
    def converge(self):
        """Read, refuse, compare, change, verify; the module's result (raises Refused, VerifyFailed)."""
        facts = self.read()
        changes = self.plan(facts) if self.p["configure"] else []
        if not self.check_mode:
            for change in changes:
                change.apply()
        verified = {}
        if self.p["verify"] and not self.check_mode:
            verified = self.verify(facts)
        notes = ["nccl_tuning: nccl_network sets %s=%s over nccl_env's %s" % (name, new, old)
                 for name, (old, new) in sorted(facts["replaced"].items())]
        if self.p["state"] == "present" and facts["shadowed"]:
            notes.append("%s imports %s as sitecustomize, which comes before %s on sys.path, so the managed block there "
                         "would never run on its own. %s"
                         % (facts["python"], facts["imported_sitecustomize"], facts["sitecustomize"],
                            "The role also writes %s (a one-line .pth hook, run by site for every start)." % facts["pth"]
                            if facts["use_pth"] else "nccl_tuning_pth_hook is never: the verify phase will fail."))
        return {
            "changed": bool(changes),
            "changes": [change.path for change in changes],
            "diff": [change.diff() for change in changes],
            "python": facts["python"],
            "site_dir": facts["site_dir"],
            "sitecustomize": facts["sitecustomize"],
            "imported_sitecustomize": facts["imported_sitecustomize"],
            "shadowed": facts["shadowed"],
            "use_pth": facts["use_pth"],
            "env": dict(_sorted(facts["env"])),
            "replaced": facts["replaced"],
            "verified": verified,
            "notes": notes,
            "msg": " ".join(notes),
        }
