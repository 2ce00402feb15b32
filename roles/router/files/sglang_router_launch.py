# SPDX-License-Identifier: GPL-3.0-or-later
# Managed by gpuserve.sglang.router (Ansible): local changes are overwritten.
"""Start sglang-router with its API key handed over inside the process, never on its command line.

Neither sglang-router 0.3.2 nor SMG reads the key from the environment or a file, and a unit that writes
``--api-key ${SGLANG_ROUTER_API_KEY}`` in ExecStart puts it into the process's argv, readable by every local user
in /proc/<pid>/cmdline and in ``ps``. This launcher takes SGLANG_ROUTER_API_KEY from its environment (the unit's
root-only EnvironmentFile), removes it there, adds ``--api-key`` to the arguments Python parses in this process
(sys.argv: the kernel's copy of the command line, which /proc shows, stays without it) and runs the router's own
entry point, ``python -m sglang_router.launch_router``, in this process.
"""

import os
import runpy
import sys

MODULE = os.environ.pop("SGLANG_ROUTER_MODULE", "sglang_router.launch_router")


def main():
    key = os.environ.pop("SGLANG_ROUTER_API_KEY", "")
    args = sys.argv[1:]
    if "--api-key" in args or any(arg.startswith("--api-key=") for arg in args):
        sys.stderr.write("sglang_router_launch: --api-key on the command line is refused (it would be readable "
                         "by every local user); set it in SGLANG_ROUTER_API_KEY\n")
        return 2
    sys.argv = [sys.argv[0]] + args + (["--api-key", key] if key else [])
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
