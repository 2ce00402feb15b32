# SPDX-License-Identifier: GPL-3.0-or-later
"""Copy stdin to stdout, each line prefixed with the wall-clock time it arrived ("1764657600.12 | line").

scripts/molecule-all.sh pipes each scenario's output through this, so that scripts/test-times.py can say how
long each molecule step (create, prepare, converge, idempotence, side effects, verify, destroy) took."""
import sys
import time


def main():
    out = sys.stdout
    for line in iter(sys.stdin.readline, ""):
        out.write("%.2f | %s" % (time.time(), line if line.endswith("\n") else line + "\n"))
        out.flush()


if __name__ == "__main__":
    main()
