# SPDX-License-Identifier: GPL-3.0-or-later
"""The secret hunt on a test host (a test fixture, run by molecule/_shared/tasks/secret_hunt.yml): where does each canary
value appear? Reads its input as base64 JSON on stdin (so that no canary is in this process's command line, nor in
the module's arguments), prints JSON: the places found (named, never the value) and how much it searched.

Input: {"canaries": [{"name": .., "value": .., "allowed": [paths], "environ_units": [units]}],
        "roots": ["/etc", "/var", "/opt", "/run"]}
Searched: every line of ``journalctl -o export`` (all fields, all boots), every regular file under the roots (a
file in ``allowed`` must hold it and be unreadable by others), every process's /proc/<pid>/cmdline, and
/proc/<pid>/environ except a process of a unit in ``environ_units``."""
import base64
import json
import os
import stat
import subprocess
import sys

SKIP_DIRS = ("/proc", "/sys", "/dev")
CHUNK = 1 << 20


def file_has(path, needles):
    """The needles found in the file (read in chunks, overlapping by the longest needle)."""
    longest = max(len(n) for n in needles)
    found = set()
    tail = b""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            data = tail + block
            found.update(n for n in needles if n in data)
            tail = data[-longest:]
    return found


def unit_of(pid):
    """The systemd service whose cgroup holds the process ("" when none)."""
    try:
        with open("/proc/%s/cgroup" % pid) as handle:
            parts = handle.read().replace("\n", "/").split("/")
    except OSError:
        return ""
    services = [part for part in parts if part.endswith(".service")]
    return services[-1] if services else ""


def main():
    spec = json.loads(base64.b64decode(sys.stdin.read()).decode())
    canaries = spec["canaries"]
    needles = dict((c["value"].encode(), c) for c in canaries)
    findings, searched = [], {"journal_entries": 0, "files": 0, "bytes": 0, "processes": 0}
    allowed_seen = dict((c["name"], []) for c in canaries)

    # the journal, every field of every entry (export format: FIELD=value lines, binary fields length-prefixed)
    out = subprocess.run(["journalctl", "-o", "export", "--no-pager"], stdout=subprocess.PIPE, check=False).stdout
    for entry in out.split(b"\n\n"):
        if not entry.strip():
            continue
        searched["journal_entries"] += 1
        hits = [n for n in needles if n in entry]
        if not hits:
            continue
        fields = dict(line.split(b"=", 1) for line in entry.split(b"\n") if b"=" in line[:64])
        where = "%s, %s" % tuple((fields.get(key) or b"?").decode("utf-8", "replace")
                                 for key in (b"_SYSTEMD_UNIT", b"SYSLOG_IDENTIFIER"))
        for needle in hits:
            at = entry.index(needle)
            excerpt = entry[max(0, at - 80):at + len(needle) + 40].replace(needle, b"<" + needles[needle]["name"].encode() + b">")
            findings.append("journal (%s): %s in %r"
                            % (where, needles[needle]["name"], excerpt.decode("utf-8", "replace")))

    # the files
    for root in spec.get("roots") or ["/etc", "/var", "/opt", "/run"]:
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(top, d) not in SKIP_DIRS]
            for name in files:
                path = os.path.join(top, name)
                try:
                    info = os.lstat(path)
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    hits = file_has(path, list(needles))
                except OSError:
                    continue
                searched["files"] += 1
                searched["bytes"] += info.st_size
                for needle in hits:
                    canary = needles[needle]
                    if path in canary.get("allowed", []) and not info.st_mode & 0o007:
                        allowed_seen[canary["name"]].append("%s (%o)" % (path, stat.S_IMODE(info.st_mode)))
                    else:
                        findings.append("file %s (mode %o): %s" % (path, stat.S_IMODE(info.st_mode), canary["name"]))

    # the processes: command lines always, environments except the units that must have it
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        searched["processes"] += 1
        for what in ("cmdline", "environ"):
            try:
                with open("/proc/%s/%s" % (pid, what), "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            for needle in [n for n in needles if n in data]:
                canary = needles[needle]
                unit = unit_of(pid)
                if what == "environ" and unit in canary.get("environ_units", []):
                    continue
                findings.append("process %s (%s) %s: %s" % (pid, unit or "no unit", what, canary["name"]))

    for canary in canaries:
        if canary.get("allowed") and not allowed_seen[canary["name"]]:
            findings.append("%s: in none of its own files %s (each must hold it, unreadable by others)"
                            % (canary["name"], canary["allowed"]))
    print(json.dumps({"findings": findings, "searched": searched, "own_files": allowed_seen}))


if __name__ == "__main__":
    main()
