# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the time of `make test` went, from the logs it leaves:

- .cache/molecule-logs/<scenario>.log (each line stamped by scripts/stamp-lines.py): seconds per molecule step
  (create, prepare, converge, idempotence, side_effect, verify, destroy; a step run twice is summed);
- .cache/test-logs/unit.xml (pytest's junit report): seconds per unit-test file;
- .cache/test-logs/static.log (scripts/test.sh's "##### step: ok (N s)" lines): the static lane's steps;
- .cache/molecule-logs/<scenario>.result (scripts/molecule-all.sh: "rc seconds controller-CPU hosts-CPU"): the CPU
  seconds of each scenario, on the controller (molecule and everything it ran) and in its hosts' containers.

  scripts/test-times.py              # the slowest steps (make test prints this at its end)
  scripts/test-times.py --markdown   # the tables of docs/development.md
  scripts/test-times.py --failures   # what failed, a line each (make test prints it last when it is red: CI keeps
                                     # only the tail of a run's output)
"""
import argparse
import collections
import os
import re
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("destroy", "create", "prepare", "converge", "idempotence", "side_effect", "verify")
# molecule 26 prints "INFO     [server > converge] Executing" when a step starts.
STEP_RE = re.compile(r"^(\d+(?:\.\d+)?) \| .*\[([\w.-]+) > (\w+)\] Executing")
STAMP_RE = re.compile(r"^(\d+(?:\.\d+)?) \| ")
STATIC_RE = re.compile(r"^##### ([\w-]+): (ok|FAILED) \((\d+) s\)")
# scripts/controller-matrix.sh: "##### controller 2.17.14: sanity FAILED", "... plugin unit tests FAILED", "(no venv)"
CONTROLLER_FAILED_RE = re.compile(r"^##### controller ([\w.]+): (.*FAILED.*)$")
# ansible-test sanity: "ERROR: Found 2 pylint issue(s) which need to be resolved:" and the issues below it
SANITY_ERROR_RE = re.compile(r"^ERROR: (?!Command \")(.+)$")
FATAL_RE = re.compile(r"^\d+(?:\.\d+)? \| ((?:fatal|failed): \[.*)$")
# a task result of a host ("ok: [host]", "changed: [host] => (item=...)", "fatal: [host]: FAILED!"): about one
# module run each, or one controller-side action (set_fact, assert, debug)
RESULT_RE = re.compile(r"^\d+(?:\.\d+)? \| (ok|changed|fatal|failed): \[")


def scenario_steps(path, results=None):
    """{step: seconds} of one stamped scenario log; the first destroy (of leftovers) and the last one are
    reported apart as destroy_before / destroy. With a dict as ``results``, it gets {step: task results}."""
    starts, last, counts = [], None, []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = STAMP_RE.match(line)
            if not match:
                continue
            last = float(match.group(1))
            step = STEP_RE.match(line)
            if step:
                starts.append((float(step.group(1)), step.group(3)))
                counts.append(0)
            elif counts and RESULT_RE.match(line):
                counts[-1] += 1
    times = collections.OrderedDict()
    for index, (start, step) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else last
        name = "destroy_before" if step == "destroy" and index == 0 else step
        times[name] = times.get(name, 0.0) + (end - start)
        if results is not None:
            results[name] = results.get(name, 0) + counts[index]
    return times


def unit_files(path):
    """{test file: seconds} from pytest's junit XML."""
    per_file = collections.Counter()
    counts = collections.Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("file") or case.get("classname", "?").rsplit(".", 1)[0].replace(".", "/") + ".py"
        per_file[name] += float(case.get("time") or 0)
        counts[name] += 1
    return per_file, counts


def static_steps(path):
    steps = collections.OrderedDict()
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = STATIC_RE.match(line.strip())
            if match:
                steps[match.group(1)] = int(match.group(3))
    return steps


RESULTS = {}   # scenario -> {step: task results}, filled by collect()
CPU = {}       # scenario -> (controller CPU s, hosts CPU s), filled by collect()


def scenario_cpu(path):
    """(controller, hosts) CPU seconds from a .result file, or None (a run before these were recorded)."""
    try:
        with open(path, encoding="ascii") as handle:
            fields = handle.read().split()
        return float(fields[2]), float(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def collect(root):
    logs = os.path.join(root, ".cache", "molecule-logs")
    scenarios = {}
    if os.path.isdir(logs):
        for name in sorted(os.listdir(logs)):
            if name.endswith(".log"):
                results = {}
                steps = scenario_steps(os.path.join(logs, name), results)
                if steps:
                    scenarios[name[:-4]] = steps
                    RESULTS[name[:-4]] = results
                cpu = scenario_cpu(os.path.join(logs, name[:-4] + ".result"))
                if cpu:
                    CPU[name[:-4]] = cpu
    unit_xml = os.path.join(root, ".cache", "test-logs", "unit.xml")
    unit = unit_files(unit_xml) if os.path.isfile(unit_xml) else (collections.Counter(), collections.Counter())
    static_log = os.path.join(root, ".cache", "test-logs", "static.log")
    static = static_steps(static_log) if os.path.isfile(static_log) else {}
    return scenarios, unit, static


def markdown(scenarios, unit, static):
    cols = ["destroy_before", "create", "prepare", "converge", "idempotence", "side_effect", "verify", "destroy"]
    out = ["| scenario | " + " | ".join(cols) + " | total |", "| --- |" + " ---: |" * (len(cols) + 1)]
    for name, steps in sorted(scenarios.items(), key=lambda item: -sum(item[1].values())):
        cells = ["%.0f" % steps[c] if c in steps else "-" for c in cols]
        out.append("| `%s` | %s | %.0f |" % (name, " | ".join(cells), sum(steps.values())))
    if RESULTS:
        steps = ["converge", "idempotence", "verify"]
        out += ["", "| scenario | task results: " + " | ".join(steps) + " | all steps |", "| --- |" + " ---: |" * 4]
        for name in sorted(RESULTS, key=lambda n: -sum(RESULTS[n].values())):
            cells = [str(RESULTS[name].get(step, "-")) for step in steps]
            out.append("| `%s` | %s | %d |" % (name, " | ".join(cells), sum(RESULTS[name].values())))
    if CPU:
        out += ["", "| scenario | CPU s: controller | hosts | all |", "| --- | ---: | ---: | ---: |"]
        for name, (ctl, hosts) in sorted(CPU.items(), key=lambda item: -sum(item[1])):
            out.append("| `%s` | %.0f | %.0f | %.0f |" % (name, ctl, hosts, ctl + hosts))
        controller = sum(pair[0] for pair in CPU.values())
        hosts = sum(pair[1] for pair in CPU.values())
        out.append("| all | %.0f | %.0f | %.0f |" % (controller, hosts, controller + hosts))
    per_file, counts = unit
    if per_file:
        out += ["", "| unit-test file | tests | seconds |", "| --- | ---: | ---: |"]
        for name, secs in per_file.most_common():
            out.append("| `%s` | %d | %.1f |" % (name, counts[name], secs))
        out.append("| all | %d | %.1f |" % (sum(counts.values()), sum(per_file.values())))
    if static:
        out += ["", "| static step | seconds |", "| --- | ---: |"]
        out += ["| %s | %d |" % item for item in static.items()]
    return "\n".join(out)


def slowest(scenarios, unit, static, count):
    rows = []
    for name, steps in scenarios.items():
        rows += [(secs, "molecule %s > %s" % (name, step)) for step, secs in steps.items()]
    rows += [(secs, "unit %s" % name) for name, secs in unit[0].items()]
    rows += [(secs, "static %s" % name) for name, secs in static.items()]
    rows.sort(reverse=True)
    lines = ["slowest steps of this run (scripts/test-times.py; seconds, wall clock, shared cores):"]
    lines += ["  %7.0f  %s" % row for row in rows[:count]]
    totals = sorted(((sum(s.values()), n) for n, s in scenarios.items()), reverse=True)
    lines.append("scenarios: " + ", ".join("%s %.0f s" % (n, t) for t, n in totals))
    if CPU:
        cpu = sorted(((c + h, c, h, n) for n, (c, h) in CPU.items()), reverse=True)
        lines.append("scenarios' CPU (controller + hosts): "
                     + ", ".join("%s %.0f s (%.0f + %.0f)" % (n, a, c, h) for a, c, h, n in cpu))
    return "\n".join(lines)


def _short(text, width=200):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def failures(root, most=8):
    """What failed in the run whose logs are under ``root``, a line each, at most ``most`` per part: the static
    lane's steps (and a controller's sanity or plugin tests, with ansible-test's first errors), the unit tests
    (from the junit report, with the first line of their message) and the molecule scenarios (rc of .result, the
    step they were in and their last failed task result not ignored, with its task and message). An empty list when nothing failed there."""
    lines = []
    static_log = os.path.join(root, ".cache", "test-logs", "static.log")
    if os.path.isfile(static_log):
        errors = []   # ansible-test's errors in the current controller's part of the log
        with open(static_log, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.rstrip("\n")
                if line.startswith("##### controller ansible-core "):
                    errors = []
                match = SANITY_ERROR_RE.match(line)
                if match and len(errors) < most:
                    errors.append("    sanity: " + _short(match.group(1)))
                match = CONTROLLER_FAILED_RE.match(line)
                if match:
                    lines.append("controller %s: %s" % (match.group(1), match.group(2)))
                    lines += errors if "sanity" in match.group(2) else []
                match = STATIC_RE.match(line.strip())
                if match and match.group(2) == "FAILED":
                    lines.append("static step %s failed after %s s" % (match.group(1), match.group(3)))
    unit_xml = os.path.join(root, ".cache", "test-logs", "unit.xml")
    if os.path.isfile(unit_xml):
        try:
            cases = list(ET.parse(unit_xml).getroot().iter("testcase"))
        except ET.ParseError as exc:
            cases = []
            lines.append("unit: the junit report could not be read (%s)" % exc)
        bad = []
        for case in cases:
            for kind in ("failure", "error"):
                node = case.find(kind)
                if node is not None:
                    where = (case.get("file") or case.get("classname", "?")) + "::" + case.get("name", "?")
                    bad.append("  %s %s: %s" % (kind, where, _short(node.get("message") or node.text or "")))
        if bad:
            lines.append("unit: %d test(s) failed" % len(bad))
            lines += bad[:most] + (["  ... and %d more" % (len(bad) - most)] if len(bad) > most else [])
    logs = os.path.join(root, ".cache", "molecule-logs")
    if os.path.isdir(logs):
        for name in sorted(os.listdir(logs)):
            if not name.endswith(".log"):
                continue
            scenario = name[:-4]
            try:
                with open(os.path.join(logs, scenario + ".result"), encoding="ascii") as handle:
                    rc = handle.read().split()[0]
            except (OSError, IndexError):
                rc = "none (it did not end)"
            if rc == "0":
                continue
            step, task = None, None   # the running step and TASK
            current, tail = None, None   # the failure being read: (kind, its step, its text); the lines under it
            found = {}   # kind ("fatal" / "failed") -> (step, text) of the last one not ignored
            with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    text = STAMP_RE.sub("", line, count=1).rstrip("\n")
                    if tail is not None:
                        # the result's YAML under "fatal: [h]: FAILED! =>" (msg, assertion...), up to a blank line;
                        # "...ignoring" after it: a failure the play expected (failed_when / ignore_errors)
                        if text.strip() == "...ignoring":
                            current, tail = None, None
                            continue
                        if text.strip() and text.startswith(" ") and len(tail) < 12:
                            tail.append(text.strip())
                            continue
                        if not text.strip():
                            continue
                        found[current[0]] = (current[1], current[2] + (" " + " ".join(tail) if tail else ""))
                        current, tail = None, None
                    match = STEP_RE.match(line)
                    if match:
                        step = match.group(3)
                    if text.startswith("TASK ["):
                        task = text[len("TASK ["):].split("]", 1)[0]
                    match = FATAL_RE.match(line)
                    if match:
                        # the LAST failure not ignored is the one that ended the step (an earlier one may be a
                        # play's own expected failure, caught in a rescue)
                        current = (match.group(1).split(":", 1)[0], step,
                                   ("TASK [%s] " % task if task else "") + match.group(1))
                        tail = []
                if tail is not None and current is not None:
                    found[current[0]] = (current[1], current[2] + (" " + " ".join(tail) if tail else ""))
            # a loop's item failures ("failed: [h] (item=x)") come before the task's own "fatal": that one first
            last = found.get("fatal") or found.get("failed")
            if last:
                step, fatal = last[0], _short(last[1], 600)
            else:
                fatal = None
            if step is None and not rc[0].isdigit():
                continue   # not a scenario's log: a nested play's of a scenario (molecule/*/verify.yml writes some here)
            lines.append("molecule %s: rc %s, in %s; %s" % (scenario, rc, step, fatal or "no fatal task result"))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--markdown", action="store_true", help="the tables for docs/development.md")
    parser.add_argument("--top", type=int, default=15, help="how many of the slowest steps (default 15)")
    parser.add_argument("--failures", action="store_true", help="what failed, a line each")
    parser.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.failures:
        found = failures(args.root)
        head = "what failed (scripts/test-times.py --failures; the logs: .cache/test-logs, .cache/molecule-logs):"
        print("\n".join([head] + found) if found else "test-times: no failure in the logs")
        return 0
    data = collect(args.root)
    if not any(data[0]) and not data[1][0] and not data[2]:
        print("test-times: no logs under %s/.cache yet" % args.root)
        return 0
    print(markdown(*data) if args.markdown else slowest(*data, count=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
