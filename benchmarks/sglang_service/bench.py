# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmarks of gpuserve.sglang.sglang_service against the stand-in SGLang server (a test fixture) on a real
systemd test host that this script starts itself (docker, the flags of .config/molecule/config.yml).

1. Detection latency: from the stand-in's ready moment (the journal timestamp of its ready line; /health turns 200
   at the same moment) to the return of the task, median over runs, for the module following the journal
   (follow: true, the default), the module polling it every 0.5 s (follow: false) and the usual pattern
   (ansible.builtin.systemd_service restart + ansible.builtin.uri until 200 with delay 10); for the module also
   to its own decision moment (result detected_at), without Ansible's return overhead.
2. Journal history: `verified` time with 1,000,000 lines of earlier invocations of the same unit in the journal
   vs with none.

Run from the repository root: `.venv/bin/python benchmarks/sglang_service/bench.py [--runs 7] [--lines 1000000]`.
Writes benchmarks/sglang_service/results.json and prints a markdown table (copied into docs/performance.md).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
IMAGE = os.environ.get("SYSTEMD_IMAGE", "gpuserve-sglang/debian12-systemd:1")
CTR = "gpuserve-bench-sglang-service"
UNIT = "sgl-bench"
PORT = 31010
READY = "The server is fired up and ready to roll!"
DOCKER_FLAGS = ["--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--security-opt",
                "apparmor=unconfined", "--cgroupns=private", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                "--tmpfs", "/sys/fs/cgroup", "--stop-signal", "SIGRTMIN+3"]

UNIT_TEXT = """\
[Unit]
Description=Stand-in SGLang server for the benchmark (a test fixture)

[Service]
Type=simple
Environment=STANDIN_LOAD_SECONDS=3 STANDIN_WARMUP_SECONDS=1 STANDIN_DRAIN_SECONDS=1
EnvironmentFile=-/etc/standin/%%N.env
ExecStart=/usr/bin/python3 -m sglang_standin --model-path /models/Kimi-K2.5 --tp 8 --enable-hierarchical-cache \\
    --hicache-ratio 2 --host 127.0.0.1 --port %s
LogRateLimitIntervalSec=0
TimeoutStopSec=60
"""
CLEAN = "sgl-clean"   # a second unit, same journal, no history of its own
CLEAN_PORT = 31011

# Earlier invocations: SGLang-looking lines INCLUDING ready and HiCache lines, so that a reader that did not
# filter by invocation would be fooled (and slowed) by them.
FLOOD = r"""
import sys
n = int(sys.argv[1])
w = sys.stdout.write
texts = ["[2026-11-29 10:00:00 TP%d] Allocating 20.85 GB host memory for hierarchical KV cache.",
         "[2026-11-29 10:00:00 TP%d] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
         "[2026-11-29 10:00:00 TP%d] Decode batch. #running-req: 12, #token: 48213, token usage: 0.30, gen throughput (token/s): 812.44, #queue-req: 0",
         "[2026-11-29 10:00:00] The server is fired up and ready to roll!"]
for i in range(n):
    t = texts[i % 4]
    w((t % (i % 8) if "%d" in t else t) + "\n")
sys.stdout.flush()
"""


def sh(argv, check=True, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError("%s failed (%s): %s" % (" ".join(argv[:6]), proc.returncode, proc.stderr[-2000:]))
    return proc


def dexec(cmd, check=True):
    return sh(["docker", "exec", CTR, "bash", "-c", cmd], check=check)


def playbook(name, extra):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3", ANSIBLE_HOST_KEY_CHECKING="False")
    argv = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "%s," % CTR, "-c",
            "community.docker.docker", os.path.join(HERE, name)]
    for key, value in extra.items():
        argv += ["-e", "%s=%s" % (key, value)]
    proc = sh(argv, check=False, env=env, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if "BENCH " in line:
            text = line.split("BENCH ", 1)[1].rstrip().rstrip('"')
            return json.loads(text.replace('\\"', '"'))
    raise RuntimeError("%s: no measurement\n%s" % (name, proc.stdout[-3000:]))


def ready_ts(invocation_id):
    out = dexec("journalctl --no-pager -q -o json --output-fields=MESSAGE _SYSTEMD_INVOCATION_ID=%s"
                % invocation_id).stdout
    for line in out.splitlines():
        entry = json.loads(line)
        if READY in str(entry.get("MESSAGE")):
            return int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    raise RuntimeError("no ready line in invocation %s" % invocation_id)


def start_container():
    sh(["docker", "rm", "-f", CTR], check=False)
    sh(["docker", "run", "-d", "--name", CTR] + DOCKER_FLAGS + [IMAGE, "/lib/systemd/systemd"])
    for _attempt in range(100):
        if dexec("systemctl is-system-running", check=False).stdout.strip() in ("running", "degraded"):
            break
        time.sleep(0.2)
    for name in ("sglang_standin.py", "sglang_standin_releases.py"):   # the stand-in and the release texts it speaks
        sh(["docker", "cp", "-L", os.path.join(ROOT, "tests", "standin", name),
            "%s:/usr/local/lib/python3.11/dist-packages/%s" % (CTR, name)])
    dexec("mkdir -p /etc/systemd/journald.conf.d && printf '[Journal]\\nRuntimeMaxUse=4G\\nRuntimeMaxFileSize=512M\\n"
          "RateLimitIntervalSec=0\\n' > /etc/systemd/journald.conf.d/bench.conf && systemctl restart systemd-journald")
    dexec("mkdir -p /etc/standin")
    for unit, port in ((UNIT, PORT), (CLEAN, CLEAN_PORT)):
        dexec("cat > /etc/systemd/system/%s.service <<'EOF'\n%sEOF\nsystemctl daemon-reload"
              % (unit, UNIT_TEXT % port))
    dexec("systemctl start %s" % UNIT)
    time.sleep(6)


def latency(runs, seed=3, skip_usual=False):
    """Each run draws one load time (3-13 s) used by both approaches, so the ready moment falls anywhere in
    the uri pattern's 10 s retry grid, as a real load time of minutes would."""
    rng = random.Random(seed)
    kinds = (("module_follow", "restart_module.yml", {"bench_follow": "true"}),
             ("module_poll", "restart_module.yml", {"bench_follow": "false"}),
             ("usual", "restart_usual.yml", {}))
    if skip_usual:
        kinds = kinds[:2]
    out = {"load_seconds": []}
    for kind, _name, _extra in kinds:
        out[kind] = []
        if kind.startswith("module"):
            out[kind + "_in_module"] = []   # the module's own decision moment (no Ansible return overhead)
    for _run in range(runs):
        load = round(rng.uniform(3.0, 13.0), 2)
        out["load_seconds"].append(load)
        dexec("echo STANDIN_LOAD_SECONDS=%s > /etc/standin/%s.env" % (load, UNIT))
        for kind, name, extra in kinds:
            res = playbook(name, dict(extra, bench_unit=UNIT, bench_port=PORT))
            ready = ready_ts(res["invocation_id"])
            out[kind].append(round(float(res["returned_at"]) - ready, 3))
            if res.get("detected_at"):
                out[kind + "_in_module"].append(round(float(res["detected_at"]) - ready, 3))
            if res.get("ready_read_at"):
                out.setdefault(kind + "_line_read", []).append(round(float(res["ready_read_at"]) - ready, 3))
    dexec("rm -f /etc/standin/%s.env" % UNIT)
    return out


def history(lines, runs):
    def verify_once(unit, port):
        t0 = time.time()
        res = playbook("verify_module.yml", {"bench_unit": unit, "bench_port": port})
        assert res["ranks"] == 8
        return res["total"], round(time.time() - t0, 3), res["entries"]

    def naive(unit):
        t0 = time.time()
        count = dexec("journalctl --no-pager -q -u %s -o cat | grep -c 'ready to roll'" % unit, check=False).stdout
        return round(time.time() - t0, 3), int(count.strip() or 0)

    def series(units):
        rows = dict((unit, {"module_total_s": [], "playbook_wall_s": []}) for unit, _port in units)
        for _run in range(runs):
            for unit, port in units:  # alternate, so background load hits every series alike
                total, wall, entries = verify_once(unit, port)
                rows[unit]["module_total_s"].append(total)
                rows[unit]["playbook_wall_s"].append(wall)
                rows[unit]["entries_read"] = entries
        for unit, _port in units:
            rows[unit]["naive_full_unit_read_s"], rows[unit]["naive_ready_lines"] = naive(unit)
        return rows

    empty = series([(UNIT, PORT)])[UNIT]
    # Earlier invocations of the SAME unit: a drop-in replaces ExecStart by a fast printer, 10 runs.
    dexec("systemctl stop %s" % UNIT)
    dexec("mkdir -p /run/systemd/system/%s.service.d && cat > /usr/local/bin/bench_flood.py <<'EOF'\n%s\nEOF\n"
          "printf '[Service]\\nType=oneshot\\nExecStart=\\nExecStart=/usr/bin/python3 /usr/local/bin/bench_flood.py %d\\n'"
          " > /run/systemd/system/%s.service.d/flood.conf && systemctl daemon-reload" % (UNIT, FLOOD, lines // 10, UNIT))
    t0 = time.time()
    for _flood in range(10):
        dexec("systemctl start %s" % UNIT)
    dexec("rm -rf /run/systemd/system/%s.service.d && systemctl daemon-reload && journalctl --sync" % UNIT)
    flood_s = round(time.time() - t0, 1)
    dexec("systemctl start %s %s" % (UNIT, CLEAN))
    time.sleep(6)
    after = series([(UNIT, PORT), (CLEAN, CLEAN_PORT)])
    history_lines = int(dexec("journalctl --no-pager -q -u %s -o cat | wc -l" % UNIT).stdout.strip())
    usage = dexec("journalctl --disk-usage", check=False).stdout.strip()
    return {"lines": lines, "unit_lines_in_journal": history_lines, "flood_seconds": flood_s, "journal_usage": usage,
            "none": empty, "history": after[UNIT], "other_unit_same_journal": after[CLEAN]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--lines", type=int, default=1000000)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-history", action="store_true")
    parser.add_argument("--skip-usual", action="store_true", help="latency of the module only (follow vs poll)")
    args = parser.parse_args()
    results = {"image": IMAGE, "runs": args.runs}
    start_container()
    try:
        results["systemd"] = dexec("systemctl --version | head -1").stdout.strip()
        if not args.skip_latency:
            results["latency"] = latency(args.runs, skip_usual=args.skip_usual)
        if not args.skip_history:
            results["history"] = history(args.lines, args.runs)
    finally:
        sh(["docker", "rm", "-f", CTR], check=False)
    path = os.path.join(HERE, "results.json")
    if os.path.exists(path):  # keep the parts not measured this time (--skip-latency / --skip-history)
        with open(path) as handle:
            kept = json.load(handle)
        kept.update(results)
        results = kept
    with open(path, "w") as handle:
        json.dump(results, handle, indent=2)
    med = statistics.median
    if "latency" in results:
        lat = results["latency"]
        print("load seconds per run: %s" % lat["load_seconds"])
        print("| approach | median s | min s | max s | runs |")
        print("|---|---|---|---|---|")
        for kind in [key for key in lat if key != "load_seconds" and lat[key]]:
            row = (kind, med(lat[kind]), min(lat[kind]), max(lat[kind]), len(lat[kind]))
            print("| %s | %.2f | %.2f | %.2f | %d |" % row)
    if "history" in results:
        his = results["history"]
        print("| case | module median s | playbook median s | entries read | journalctl -u + grep s |")
        print("|---|---|---|---|---|")
        for key in ("none", "history", "other_unit_same_journal"):
            row = his[key]
            print("| %s | %.3f | %.2f | %s | %.2f (%d ready lines) |" % (
                key, med(row["module_total_s"]), med(row["playbook_wall_s"]), row["entries_read"],
                row["naive_full_unit_read_s"], row["naive_ready_lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
