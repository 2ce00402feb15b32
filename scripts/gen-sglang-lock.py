# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the hash lock of an SGLang release (a pip requirements file: every line NAME==VERSION with --hash).

pip resolves the release from package metadata without installing anything (--dry-run --report; fast-deps reads
a wheel's metadata with HTTP range requests, so no multi-GB wheel is downloaded) once per Python version; this
script merges the reports into one lock that roles/install installs with `pip install --require-hashes -r`:

  scripts/gen-sglang-lock.py --version 0.5.9 -o roles/install/files/locks/sglang-0.5.9.txt
  scripts/gen-sglang-lock.py --version 0.5.9 --platform-family manylinux_2_28_aarch64 -o my-arm-lock.txt
  scripts/gen-sglang-lock.py --version 0.5.9 --report r310.json:3.10 --report r312.json:3.12 -o lock.txt

A package resolved to the same version for every Python gets one line with the hashes of all its files (one wheel
per Python tag); a package whose version differs between Pythons, or that only some Pythons need, gets one line
per version with a python_version marker. pip's own index settings (pip.conf, PIP_INDEX_URL) apply, or
--index-url.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PYTHONS = ("3.10", "3.11", "3.12")
# pip matches --platform literally: list every manylinux tag a glibc 2.28 host accepts.
MANYLINUX_X86_64 = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
                    "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                    "manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")


def normalize(name):
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def platforms(family):
    """manylinux_2_28_x86_64 -> that tag and every older manylinux tag of the same architecture."""
    if family == "manylinux_2_28_x86_64":
        return list(MANYLINUX_X86_64)
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", family)
    if not match:
        return [family]
    minor, arch = int(match.group(1)), match.group(2)
    tags = ["manylinux_2_%d_%s" % (m, arch) for m in range(minor, 16, -1)] + ["manylinux2014_%s" % arch]
    return tags


def run_pip(package, version, python, plats, index_url, pip):
    """pip's resolution report (a dict) for package==version on one Python version."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [pip, "install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps", "--quiet",
               "--report", report, "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--target", os.path.join(tmp, "target")]
        for plat in plats:
            cmd += ["--platform", plat]
        if index_url:
            cmd += ["--index-url", index_url]
        cmd.append("%s==%s" % (package, version))
        subprocess.run(cmd, check=True)
        with open(report, encoding="utf-8") as handle:
            return json.load(handle)


def pins(report):
    """{normalized name: (name, version, {sha256, ...})} from one pip report."""
    out = {}
    for item in report["install"]:
        meta = item["metadata"]
        hashes = item.get("download_info", {}).get("archive_info", {}).get("hashes", {})
        sha = hashes.get("sha256")
        if not sha:
            raise SystemExit("%s %s: no sha256 in pip's report (a local or VCS source?)"
                             % (meta["name"], meta["version"]))
        out[normalize(meta["name"])] = (meta["name"], meta["version"], {sha})
    return out


def marker(pythons):
    return " or ".join('python_version == "%s"' % p for p in sorted(pythons, key=lambda v: tuple(map(int, v.split(".")))))


def merge(per_python):
    """per_python: {python: pins()} -> the lock's lines (sorted by name)."""
    all_pythons = set(per_python)
    names = sorted({n for p in per_python.values() for n in p})
    lines = []
    for name in names:
        by_version = {}
        for python, found in per_python.items():
            if name in found:
                shown, version, hashes = found[name]
                entry = by_version.setdefault(version, [shown, set(), set()])
                entry[1].update(hashes)
                entry[2].add(python)
        for version in sorted(by_version):
            shown, hashes, pythons = by_version[version]
            line = "%s==%s" % (normalize(shown), version)
            if pythons != all_pythons:
                line += " ; " + marker(pythons)
            lines.append(line + "".join(" \\\n    --hash=sha256:%s" % h for h in sorted(hashes)))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", default="sglang")
    parser.add_argument("--version", required=True)
    parser.add_argument("--python", action="append", help="Python version (repeatable; default 3.10 3.11 3.12)")
    parser.add_argument("--platform-family", default="manylinux_2_28_x86_64",
                        help="the newest manylinux tag the hosts accept (older tags are added)")
    parser.add_argument("--index-url", default="")
    parser.add_argument("--pip", default=os.path.join(os.path.dirname(sys.executable), "pip"))
    parser.add_argument("--report", action="append", default=[],
                        help="REPORT.json:PYTHON - use an existing pip report instead of running pip")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)

    per_python = {}
    if args.report:
        for spec in args.report:
            path, _sep, python = spec.rpartition(":")
            with open(path, encoding="utf-8") as handle:
                per_python[python] = pins(json.load(handle))
    else:
        for python in args.python or PYTHONS:
            per_python[python] = pins(run_pip(args.package, args.version, python, platforms(args.platform_family),
                                              args.index_url, args.pip))
    for python, found in per_python.items():
        got = found.get(normalize(args.package))
        if not got or got[1] != args.version:
            raise SystemExit("the report for Python %s does not pin %s==%s" % (python, args.package, args.version))
    header = [
        "# Hash lock of %s==%s and its dependencies (pip install --require-hashes -r THIS_FILE)." % (
            args.package, args.version),
        "# Written by scripts/gen-sglang-lock.py: CPython %s, %s wheels only; regenerate, do not edit." % (
            " ".join(sorted(per_python)), args.platform_family),
    ]
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write("\n".join(header + merge(per_python)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
