#!/usr/bin/env bash
# A no-op deploy of one served host (issue 22: "at most 60 tasks that run on the host"): playbooks/deploy.yml
# against the demo host (make demo first: the host is deployed and serving; this changes nothing on it), N runs,
# the ansible.posix.json callback. Counted per run: task results by status, and the "host tasks" - results of
# actions that run a module on the host (everything but set_fact, assert, debug, fail, include_*/import_*, meta,
# add_host, group_by, and tasks delegated to the controller; loop items counted one by one) - with the wall time of the run. LIST_HOST_TASKS=1 lists them.
#   benchmarks/noop_deploy/bench.sh [runs]          this checkout
#   REF=<commit> benchmarks/noop_deploy/bench.sh    an earlier commit, in a temporary worktree (before/after)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
runs="${1:-3}"
HOST=gpuserve-demo
docker container inspect "$HOST" >/dev/null 2>&1 || { echo "noop_deploy: no demo host; run make demo first" >&2; exit 2; }
src="$ROOT"
work="$(mktemp -d)"
cleanup() { [[ "$src" != "$ROOT" ]] && git -C "$ROOT" worktree remove --force "$src" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT
if [[ -n "${REF:-}" ]]; then
  src="$work/tree"
  git -C "$ROOT" worktree add --detach "$src" "$REF" >/dev/null 2>&1
fi
mkdir -p "$work/collections/ansible_collections/gpuserve"
ln -s "$src" "$work/collections/ansible_collections/gpuserve/sglang"
export PATH="$ROOT/.venv/bin:$PATH"
label="$(git -C "$src" rev-parse --short HEAD)"
for _run in $(seq 1 "$runs"); do
  t=$(date +%s.%N)
  (cd "$src" && ANSIBLE_COLLECTIONS_PATH="$work/collections:$(echo "$ROOT"/.venv/lib/python3*/site-packages)" \
     ANSIBLE_STDOUT_CALLBACK=ansible.posix.json ANSIBLE_JSON_INDENT=0 \
     ansible-playbook -i "$ROOT/inventory/demo" playbooks/deploy.yml -e demo_hicache_ratio=4.0 > "$work/run.json" 2>"$work/run.err") \
    || { echo "noop_deploy: the deploy failed"; tail -20 "$work/run.err"
         python3 -c 'import json, sys
text = open(sys.argv[1]).read()
for play in json.loads(text[text.index("{"):])["plays"]:
    for task in play["tasks"]:
        for res in task["hosts"].values():
            if res.get("failed"):
                print("failed:", task["task"]["name"], "-", res.get("msg"))' "$work/run.json" || true
         exit 1; }
  wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t))")
  python3 - "$work/run.json" "$label" "$wall" <<'PY'
import json, os, sys
from collections import Counter
doc = json.loads(open(sys.argv[1]).read()[open(sys.argv[1]).read().index("{"):])
controller = {"set_fact", "assert", "debug", "fail", "include_tasks", "import_tasks", "include_role", "import_role",
              "meta", "add_host", "group_by", "include_vars", "validate_argument_spec"}
status, host_runs, changed = Counter(), 0, []
for play in doc["plays"]:
    for task in play["tasks"]:
        action = task["task"].get("action", "") if "action" in task["task"] else ""
        for name, res in task["hosts"].items():
            kind = "skipped" if res.get("skipped") else "changed" if res.get("changed") else "failed" if res.get("failed") else "ok"
            status[kind] += 1
            short = (res.get("action") or action or "").split(".")[-1]
            items = [r for r in res.get("results", [])] if isinstance(res.get("results"), list) else None
            # ansible-core 2.21 marks a skipped loop item by skip_reason only (no skipped: true)
            ran = ([r for r in items if not r.get("skipped") and "skip_reason" not in r] if items is not None
                   else ([] if res.get("skipped") else [res]))
            # a task delegated to the controller (the install role's stat of its lock file) runs no module on the host
            on_controller = any((r.get("_ansible_delegated_vars") or {}).get("ansible_connection") == "local"
                                for r in [res] + (items or []))
            if short and short not in controller and not on_controller:
                host_runs += len(ran)
                if os.environ.get("LIST_HOST_TASKS") and ran:
                    print("  host task x%d: %s (%s)" % (len(ran), task["task"]["name"], short))
            if res.get("changed"):
                changed.append(task["task"]["name"])
stats = doc["stats"]
print("%s: wall %s s, results %s, host tasks %d, changed %s" % (sys.argv[2], sys.argv[3], dict(status), host_runs, changed or "none"))
PY
done
