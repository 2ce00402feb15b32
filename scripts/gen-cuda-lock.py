# SPDX-License-Identifier: GPL-3.0-or-later
"""Write the hash lock of the CUDA wheels the cuda role installs with cuda_install_method: pip.

pip resolves the requirement (default ``cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2``) from the index's metadata
without installing anything (``--dry-run --report``), once per architecture (x86_64 and aarch64 hosts: NVIDIA's
wheels are ``py3-none-manylinux_*`` for each), and this script writes every package of the resolution as
``NAME==VERSION --hash=sha256:...`` with the hashes of both architectures' wheels. The role installs it with
``pip install --require-hashes --no-deps -r``, so a fresh resolution can pull nothing else (no nvjitlink, nvcc or
nvvm of a later CUDA through an open specifier: nvidia-cuda-nvcc 13.0.88 requires nvidia-nvvm, -cuda-runtime and
-cuda-crt with no version at all):

  scripts/gen-cuda-lock.py -o roles/cuda/files/locks/cuda-toolkit-13.0.2.txt
  scripts/gen-cuda-lock.py --requirement 'cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2' --arch x86_64 -o lock.txt
  scripts/gen-cuda-lock.py --report r-x86.json:x86_64 --report r-arm.json:aarch64 -o lock.txt

pip's own index settings (pip.conf, PIP_INDEX_URL) apply, or --index-url.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("gen_sglang_lock", os.path.join(HERE, "gen-sglang-lock.py"))
sglang_lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sglang_lock)

REQUIREMENT = "cuda-toolkit[nvcc,crt,nvvm,cudart]==13.0.2"
ARCHES = {"x86_64": sglang_lock.platforms("manylinux_2_28_x86_64"),
          "aarch64": sglang_lock.platforms("manylinux_2_28_aarch64")}


def run_pip(requirement, plats, index_url, pip, python="3.11"):
    """pip's resolution report (a dict) for the requirement on one architecture's platform tags."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report,
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--target", os.path.join(tmp, "target")]
        for plat in plats:
            cmd += ["--platform", plat]
        if index_url:
            cmd += ["--index-url", index_url]
        cmd.append(requirement)
        subprocess.run(cmd, check=True)
        with open(report, encoding="utf-8") as handle:
            return json.load(handle)


def merge(per_arch):
    """{arch: pins()} -> the lock's lines: one per package, every architecture's hashes; a package whose version
    differs between architectures is an error (the lock pins one CUDA build)."""
    names = sorted({name for pins in per_arch.values() for name in pins})
    lines = []
    for name in names:
        versions = {pins[name][1] for pins in per_arch.values() if name in pins}
        if len(versions) != 1:
            raise SystemExit("%s resolves to %s on different architectures" % (name, sorted(versions)))
        hashes = set()
        for pins in per_arch.values():
            if name in pins:
                hashes.update(pins[name][2])
        lines.append("%s==%s" % (name, versions.pop()) + "".join(" \\\n    --hash=sha256:%s" % h for h in sorted(hashes)))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requirement", default=REQUIREMENT)
    parser.add_argument("--arch", action="append", choices=sorted(ARCHES), help="default: x86_64 and aarch64")
    parser.add_argument("--index-url", default="")
    parser.add_argument("--pip", default=os.path.join(os.path.dirname(sys.executable), "pip"))
    parser.add_argument("--report", action="append", default=[], help="REPORT.json:ARCH - an existing pip report")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    per_arch = {}
    if args.report:
        for spec in args.report:
            path, _sep, arch = spec.rpartition(":")
            with open(path, encoding="utf-8") as handle:
                per_arch[arch] = sglang_lock.pins(json.load(handle))
    else:
        for arch in args.arch or sorted(ARCHES):
            per_arch[arch] = sglang_lock.pins(run_pip(args.requirement, ARCHES[arch], args.index_url, args.pip))
    top = re.match(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)$", args.requirement)
    for arch, pins in per_arch.items():
        if top and pins.get(sglang_lock.normalize(top.group(1)), (None, None))[1] != top.group(2):
            raise SystemExit("the report for %s does not pin %s" % (arch, args.requirement))
    header = ["# Hash lock of %s and everything it pulls (pip install --require-hashes --no-deps -r THIS_FILE)."
              % args.requirement,
              "# Written by scripts/gen-cuda-lock.py: %s wheels; regenerate, do not edit." % " and ".join(sorted(per_arch))]
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write("\n".join(header + merge(per_arch)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
