# SPDX-License-Identifier: GPL-3.0-or-later
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A 2-process torch.distributed NCCL all-reduce that prints what each process saw.

Run either under torchrun (RANK/LOCAL_RANK/WORLD_SIZE set by it):
    python -m torch.distributed.run --nproc_per_node 2 nccl_proof.py
or self-spawned (children inherit the interpreter flags, so `python -S nccl_proof.py --spawn 2`
keeps -S in every process):
    python nccl_proof.py --spawn 2

Each rank prints one line `PROOF-RANK {json}` (its NCCL_* environment, whether site/sitecustomize
ran, the interpreter) and, after the all-reduce of a 4 MiB float32 tensor of (rank+1), `PROOF-SUM`.
NCCL's own lines (NCCL_DEBUG=INFO) go to the same output; tests/gpu/nccl_check.py reads them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def say(line):
    """One write call per line: under PYTHONUNBUFFERED print() writes text and newline separately,
    and the lines of two ranks sharing a pipe would interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(rank, world_size, local_rank):
    import torch
    import torch.distributed as dist

    info = {
        "rank": rank,
        "pid": os.getpid(),
        "executable": sys.executable,
        "no_site": bool(sys.flags.no_site),
        "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }
    say("PROOF-RANK " + json.dumps(info, sort_keys=True))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=torch.device("cuda", local_rank))
    try:
        x = torch.full((1024 * 1024,), float(rank + 1), device="cuda", dtype=torch.float32)  # 4194304 bytes
        dist.all_reduce(x)
        torch.cuda.synchronize()
        want = float(sum(range(1, world_size + 1)))
        got = float(x[0].item())
        ok = bool(torch.all(x == want).item())
        say("PROOF-SUM rank %d sum %s expected %s %s" % (rank, got, want, "ok" if ok else "WRONG"))
        if not ok:
            raise SystemExit(3)
    finally:
        dist.destroy_process_group()


def _spawned(index, world_size, port):
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "RANK": str(index), "LOCAL_RANK": str(index), "WORLD_SIZE": str(world_size)})
    run(index, world_size, index)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawn", type=int, default=0, help="start this many processes itself (no torchrun)")
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    if args.spawn:
        import torch.multiprocessing as mp
        mp.spawn(_spawned, args=(args.spawn, args.port), nprocs=args.spawn, join=True)
    else:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


if __name__ == "__main__":
    main()
