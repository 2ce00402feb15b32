# SPDX-License-Identifier: GPL-3.0-or-later
"""Test tool (molecule/multinode): run one group deploy (the command after ``--``) and SIGKILL it in its commit
phase, the moment a node's open change records the group's decision (``"decision": "commit"`` in the unit's
txn.json, written by the decide phase before any node commits). The run's process group is killed (ansible-playbook
and its workers), then the module still working on each node (the pid in the unit's work lock, held): a controller
and its modules gone as in a crash. Then the nodes' state is read back and printed as JSON.

Exits 0 only when the kill landed in the window: some node holds the run's change open, with the decision recorded
on a node or its set already kept under that change. A run that ended, or a kill that found every node committed
or none decided, exits 1 (the check fails, never passes by luck)."""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

WATCH = r"""
import json, os, sys, time
path, stop, end = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
while time.time() < end and not os.path.exists(stop):
    try:
        with open(path) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = {}
    if record.get("decision") == "commit":
        print(json.dumps(record))
        sys.exit(0)
    time.sleep(0.02)
sys.exit(1)
"""

READ = r"""
import json, os, sys
out = {}
for key, path in (("txn", sys.argv[1]), ("manifest", sys.argv[2])):
    try:
        with open(path) as handle:
            out[key] = json.load(handle)
    except (OSError, ValueError) as exc:
        out[key] = None if isinstance(exc, FileNotFoundError) else {"unreadable": str(exc)}
print(json.dumps(out))
"""

# the module holding the unit's work lock (worklock.py: flock, its pid in the file): killed, as a crash would
KILL_HOLDER = 'f="$1"; [ -e "$f" ] || exit 0; flock -n "$f" true || kill -KILL "$(cat "$f")" 2>/dev/null; exit 0'


def docker(node, *argv, **kwargs):
    return subprocess.run(["docker", "exec", node] + list(argv), capture_output=True, text=True, check=False, **kwargs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--node", action="append", required=True, help="a node's container, node 0 first")
    parser.add_argument("--dir", required=True, help="the unit's last-good directory on the nodes")
    parser.add_argument("--work-lock", required=True, help="the unit's work lock on the nodes")
    parser.add_argument("--log", required=True, help="where the killed run's output goes")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    txn, manifest = args.dir + "/txn.json", args.dir + "/manifest.json"
    stop = "/run/mn-kill-in-commit.stop"
    for node in args.node:
        docker(node, "rm", "-f", stop)
        left = json.loads(docker(node, "python3", "-c", READ, txn, manifest).stdout or "{}")
        if left.get("txn") is not None:
            print(json.dumps({"hit": False, "why": "%s has a change open before the run: %s" % (node, left)}))
            return 1
    watchers = dict((node, subprocess.Popen(["docker", "exec", node, "python3", "-c", WATCH, txn, stop,
                                             str(args.timeout)], stdout=subprocess.PIPE, text=True))
                    for node in args.node)
    with open(args.log, "w", encoding="utf-8") as log:
        run = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1", ANSIBLE_NOCOLOR="1"))
    seen, end = None, time.time() + args.timeout
    while seen is None and run.poll() is None and time.time() < end:
        for node, watcher in watchers.items():
            if watcher.poll() == 0:
                seen = node
                break
        time.sleep(0.01)
    ended = run.poll()
    if ended is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    # the modules on the nodes: killed while any holds the lock (one started just before the controller died too)
    settle = time.time() + 3
    while time.time() < settle:
        for node in args.node:
            docker(node, "sh", "-c", KILL_HOLDER, "kill", args.work_lock)
        time.sleep(0.2)
    for node, watcher in watchers.items():
        docker(node, "touch", stop)
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watcher.kill()
    nodes = {}
    for node in args.node:
        nodes[node] = json.loads(docker(node, "python3", "-c", READ, txn, manifest).stdout or "{}")
    groups = set((n.get("txn") or {}).get("group") for n in nodes.values() if n.get("txn")) - {None, ""}
    group = sorted(groups)[0] if len(groups) == 1 else ""
    opened = [node for node, n in nodes.items() if (n.get("txn") or {}).get("group") == group and group]
    decided = [node for node in opened if nodes[node]["txn"].get("decision") == "commit"]
    committed = [node for node, n in nodes.items()
                 if not n.get("txn") and group and (n.get("manifest") or {}).get("group") == group]
    hit = ended is None and bool(opened) and bool(decided or committed)
    with open(args.log, encoding="utf-8", errors="replace") as handle:
        tasks = [line.strip() for line in handle if line.startswith("TASK [")]
    brief = {}
    for node, state in nodes.items():
        record, kept = state.get("txn") or {}, state.get("manifest") or {}
        brief[node] = {"txn": dict((key, record.get(key)) for key in ("group", "phase", "decision")) if record else None,
                       "kept_group": kept.get("group"), "kept_invocation": kept.get("invocation_id")}
    print(json.dumps({"hit": hit, "seen_on": seen, "run_ended_itself": ended, "group": group, "open": opened,
                      "decided": decided, "committed": committed, "last_task": tasks[-1] if tasks else "",
                      "nodes": brief}))
    return 0 if hit else 1


if __name__ == "__main__":
    sys.exit(main())
