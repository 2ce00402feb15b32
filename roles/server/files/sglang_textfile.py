# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang contributors
"""Node exporter textfile-collector metrics of one SGLang unit, written by a timer of gpuserve.sglang.server.

    sglang_textfile.py --unit sglang-kimi.service --record /etc/sglang/sglang-kimi.json \
        --out /var/lib/prometheus/node-exporter/sglang-kimi.prom

From systemd (``systemctl show``): NRestarts, ActiveState, InvocationID. From the deployment record's JSON twin:
whether HiCache is configured and the benchmark baseline, nothing else. The running invocation counts as verified
only when the unit's state file names it (``--state-dir``; module_utils/_state_file.py, the one record of which
invocation is verified, written by the service runner each time it proves a start) with HiCache on a rank: after a
reboot or a crash that systemd recovered, ``verify.yml`` or the role's no-change path proves the new invocation and
writes that file, and the metric clears without a changing run; a record naming the invocation while the state file
names another does not make it verified. The file is replaced atomically (written beside, then renamed). Standard
library only.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile


def systemd_properties(unit):
    out = subprocess.run(["systemctl", "show", unit, "-p", "NRestarts", "-p", "ActiveState", "-p", "InvocationID"],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def read_record(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def read_state(directory, unit):
    """The unit's state file: the one record of which invocation is verified ({} when there is none or it cannot
    be read)."""
    if not directory:
        return {}
    state = read_record(os.path.join(directory, "%s.json" % unit))
    return state if isinstance(state, dict) else {}


def escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _verified_with_hicache(invocation, source):
    return bool(invocation) and invocation == source.get("invocation_id") \
        and bool((source.get("hicache") or {}).get("ranks_seen"))


def render(unit, props, record, state=None):
    """The metrics in Prometheus' text format. ``record``: the deployment record's twin (HiCache expected, the
    baseline); ``state``: the state file (``read_state``), the only source of "verified"."""
    label = 'unit="%s"' % escape(unit)
    invocation = props.get("InvocationID", "")
    baseline = record.get("baseline") or {}
    verified = _verified_with_hicache(invocation, state or {})
    metrics = [
        ("sglang_unit_restarts_total", "counter", "Automatic restarts of the unit by systemd (NRestarts).",
         [(label, int(props.get("NRestarts") or 0))]),
        ("sglang_unit_active", "gauge", "1 when the unit is active.",
         [(label, 1 if props.get("ActiveState") == "active" else 0)]),
        ("sglang_unit_invocation_info", "gauge", "The unit's running invocation.",
         [('%s,invocation_id="%s"' % (label, escape(invocation)), 1)] if invocation else []),
        ("sglang_hicache_expected", "gauge", "1 when the deployed configuration enables HiCache.",
         [(label, 1 if record.get("hicache_expected") else 0)]),
        ("sglang_hicache_verified", "gauge",
         "1 when the running invocation is the one gpuserve.sglang verified with HiCache on every rank.",
         [(label, 1 if verified else 0)]),
        ("sglang_bench_baseline_output_tok_s", "gauge", "Output tok/s of the recorded benchmark baseline.",
         [(label, float(baseline["output_throughput"]))] if baseline.get("output_throughput") else []),
        ("sglang_bench_baseline_concurrency", "gauge", "Concurrency of the recorded benchmark baseline.",
         [(label, int(baseline["concurrency"]))] if baseline.get("concurrency") else []),
    ]
    lines = []
    for name, kind, help_text, samples in metrics:
        if not samples:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s %s" % (name, kind))
        lines.extend("%s{%s} %s" % (name, labels, value) for labels, value in samples)
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--state-dir", default="", help="sglang_service's state directory (/var/lib/gpuserve-sglang)")
    args = parser.parse_args(argv)
    text = render(args.unit, systemd_properties(args.unit), read_record(args.record),
                  read_state(args.state_dir, args.unit))
    directory = os.path.dirname(os.path.abspath(args.out))
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".sglang-textfile-")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
