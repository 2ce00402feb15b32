# SPDX-License-Identifier: GPL-3.0-or-later
"""Write what the router role knows of one gateway release (sglang-router or SMG), taken from its released wheel.

  scripts/gen-gateway-data.py --package smg --version 1.13.0 --module smg.launch_router
  scripts/gen-gateway-data.py --package sglang-router --version 0.3.2 --module sglang_router.launch_router

Downloads the release's wheel for CPython 3.11 (x86_64 manylinux), installs it with the dependencies of its hash
lock (roles/router/files/locks/<package>-<version>.txt, scripts/gen-sglang-lock.py --package ...) into a
throw-away venv, starts the gateway's own launch module there with argparse's parse step replaced by a reader,
and writes roles/router/files/gateways/<package>-<version>.json: the wheel's name and sha256, the module the unit
runs, and every flag that release's parser accepts (whether it takes a value, its choices). Nothing is typed by
hand; regenerate, do not edit. pip's own index settings apply.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs inside the gateway's venv: the launch module builds its parser and parses; the first parse_args /
# parse_known_args call is answered by printing the parser's options as JSON, and the process ends.
READER = r"""
import argparse, json, runpy, sys
def dump(parser, *args, **kwargs):
    flags = {}
    for action in parser._actions:
        for opt in action.option_strings:
            if not opt.startswith('--') or opt in ('--help',):
                continue
            entry = {'value': action.nargs != 0}
            if action.choices:
                entry['choices'] = sorted(str(c) for c in action.choices)
            flags[opt[2:]] = entry
    print('GATEWAY-FLAGS ' + json.dumps(flags, sort_keys=True))
    sys.exit(0)
argparse.ArgumentParser.parse_args = dump
argparse.ArgumentParser.parse_known_args = dump
sys.argv = [sys.argv[1]]
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--module", required=True, help="the launch module the unit runs (python -m MODULE)")
    parser.add_argument("--python", default=sys.executable, help="a CPython 3.11 for the throw-away venv")
    parser.add_argument("-o", "--output", default="")
    args = parser.parse_args()
    lock = os.path.join(ROOT, "roles", "router", "files", "locks", "%s-%s.txt" % (args.package, args.version))
    if not os.path.isfile(lock):
        sys.exit("no hash lock %s: write it first with scripts/gen-sglang-lock.py --package %s --version %s"
                 % (lock, args.package, args.version))
    output = args.output or os.path.join(ROOT, "roles", "router", "files", "gateways",
                                         "%s-%s.json" % (args.package, args.version))
    with tempfile.TemporaryDirectory() as tmp:
        wheels = os.path.join(tmp, "wheels")
        subprocess.run([args.python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux2014_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "-d", wheels, "%s==%s" % (args.package, args.version)],
                       check=True)
        (wheel,) = os.listdir(wheels)
        with open(os.path.join(wheels, wheel), "rb") as handle:
            sha256 = hashlib.sha256(handle.read()).hexdigest()
        with open(lock) as handle:
            if sha256 not in handle.read():
                sys.exit("%s (sha256 %s) is not in %s: regenerate the lock" % (wheel, sha256, lock))
        venv = os.path.join(tmp, "venv")
        subprocess.run([args.python, "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--require-hashes", "-r", lock], check=True)
        out = subprocess.run([python, "-c", READER, args.module], check=True, capture_output=True, text=True).stdout
        line = [row for row in out.splitlines() if row.startswith("GATEWAY-FLAGS ")]
        if not line:
            sys.exit("%s did not reach its argument parser: %s" % (args.module, out[-2000:]))
        flags = json.loads(line[0][len("GATEWAY-FLAGS "):])
    data = {
        "generated_by": "scripts/gen-gateway-data.py from the released wheel (its own argument parser); regenerate, do not edit",
        "package": args.package,
        "version": args.version,
        "wheel": wheel,
        "wheel_sha256": sha256,
        "module": args.module,
        "flags": flags,
    }
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print("%s: %d flags of %s %s (%s)" % (output, len(flags), args.package, args.version, wheel))


if __name__ == "__main__":
    main()
