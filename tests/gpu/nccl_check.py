# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read NCCL_DEBUG=INFO output and check that NCCL took the tuned values.

Two texts of NCCL 2.28 are used (see tests/fixtures/gpu-host-texts/nccl_tuned.txt):

    vm:668:668 [0] NCCL INFO NCCL_PROTO set by environment to LL
    vm:668:668 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
    vm:668:668 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..23}

The first kind is printed by every process for each variable NCCL read from its environment
(integer parameters end with a period, string ones do not); the second by rank 0 for each
collective when NCCL_DEBUG_SUBSYS includes TUNING. A process is told apart by the pid in the
"host:pid:tid" prefix.

Usage: nccl_check.py LOG --env-file FILE [--procs N] [--op AllReduce]
exit 0 when every variable of FILE (KEY=VALUE lines) was reported "set by environment" with its
value by each of N processes and every OP line chose Algo NCCL_ALGO and proto NCCL_PROTO.
"""
from __future__ import annotations

import argparse
import re
import sys

PREFIX = r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO "
SET_BY_ENV = re.compile(PREFIX + r"(?P<key>[A-Z][A-Z0-9_]*) set by environment to (?P<value>.*?)\.?\s*$")
VERSION = re.compile(PREFIX + r"NCCL version (?P<version>\S+)")
CHOICE = re.compile(
    PREFIX + r"(?P<op>[A-Za-z]+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r" channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\}"
)


def parse(text):
    """Return {'versions': {pid: version}, 'set_by_env': {pid: {key: value}}, 'choices': [dict]}."""
    versions = {}
    set_by_env = {}
    choices = []
    for line in text.splitlines():
        m = SET_BY_ENV.match(line)
        if m:
            set_by_env.setdefault(m.group("pid"), {})[m.group("key")] = m.group("value")
            continue
        m = VERSION.match(line)
        if m:
            versions[m.group("pid")] = m.group("version")
            continue
        m = CHOICE.match(line)
        if m:
            choices.append({
                "pid": m.group("pid"), "op": m.group("op"), "bytes": int(m.group("bytes")),
                "algo": m.group("algo"), "proto": m.group("proto"),
                "channels": (int(m.group("lo")), int(m.group("hi"))),
            })
    return {"versions": versions, "set_by_env": set_by_env, "choices": choices}


def read_env_file(text):
    """KEY=VALUE lines of an EnvironmentFile (comments and blank lines skipped)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        env[key.strip()] = value.strip()
    return env


def check(parsed, expected, procs=2, op="AllReduce"):
    """Return (problems, report_lines). No problem means NCCL took every expected value."""
    problems = []
    report = []
    pids = sorted(set(parsed["versions"]) | set(parsed["set_by_env"]), key=int)
    if len(parsed["versions"]) < procs:
        problems.append("expected NCCL output of %d processes, found %d (NCCL version lines)" % (procs, len(parsed["versions"])))
    for key in sorted(expected):
        want = str(expected[key])
        seen = {pid: parsed["set_by_env"].get(pid, {}).get(key) for pid in pids}
        good = [pid for pid, value in seen.items() if value == want]
        status = "ok" if len(good) >= procs and len(good) == len(pids) else "MISSING"
        report.append("%-22s %-8s %s  (%s)" % (key, want, status, ", ".join(
            "pid %s: %s" % (pid, "set by environment to " + value if value is not None else "not reported")
            for pid, value in seen.items())))
        if status != "ok":
            problems.append("%s=%s not reported as 'set by environment' by every process: %s" % (key, want, seen))
    ops = [c for c in parsed["choices"] if c["op"] == op]
    if not ops:
        problems.append("no '%s: N Bytes -> Algo X proto Y' line (NCCL_DEBUG_SUBSYS needs TUNING)" % op)
    for c in ops:
        line = "%s %d bytes -> Algo %s proto %s channels %d..%d" % (c["op"], c["bytes"], c["algo"], c["proto"], *c["channels"])
        report.append(line)
        if "NCCL_ALGO" in expected and c["algo"].upper() != str(expected["NCCL_ALGO"]).upper():
            problems.append("%s: algorithm %s, expected %s" % (line, c["algo"], expected["NCCL_ALGO"]))
        if "NCCL_PROTO" in expected and c["proto"].upper() != str(expected["NCCL_PROTO"]).upper():
            problems.append("%s: protocol %s, expected %s" % (line, c["proto"], expected["NCCL_PROTO"]))
    return problems, report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--env-file", required=True, help="KEY=VALUE file with the expected values (e.g. /etc/sglang/nccl.env)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--op", default="AllReduce")
    args = ap.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        parsed = parse(f.read())
    with open(args.env_file, encoding="utf-8") as f:
        expected = read_env_file(f.read())
    problems, report = check(parsed, expected, args.procs, args.op)
    print("NCCL versions: %s" % (sorted(set(parsed["versions"].values())) or "none"))
    for line in report:
        print("  " + line)
    for p in problems:
        print("PROBLEM: " + p)
    print("nccl_check: %s" % ("PASS" if not problems else "FAIL (%d problems)" % len(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
