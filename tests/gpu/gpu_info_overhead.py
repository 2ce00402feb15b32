# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure what SGLang's "total" is on this machine: free GPU memory per rank after the CUDA context and an
NCCL communicator exist (SGLang measures it there, before loading weights), against nvidia-smi's memory.free.

Run: python3 tests/gpu/gpu_info_overhead.py [nranks]   (prints one JSON line per rank, labelled OVERHEAD)
"""
import json
import os
import subprocess
import sys


def smi_free_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return dict((int(i), int(f)) for i, f in (line.split(",") for line in out.strip().splitlines()))


def worker(rank, world, before, port):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    torch.cuda.init()
    ctx_free, total = torch.cuda.mem_get_info(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    nccl_free = torch.cuda.mem_get_info(rank)[0]
    print("OVERHEAD " + json.dumps({
        "rank": rank, "world": world,
        "nvidia_smi_free_mib_before": before[rank],
        "total_mib": total // (1 << 20),
        "free_after_context_gib": round(ctx_free / float(1 << 30), 3),
        "free_after_nccl_gib": round(nccl_free / float(1 << 30), 3),
        "overhead_gib": round(before[rank] / 1024.0 - nccl_free / float(1 << 30), 3),
    }), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    import torch
    import torch.multiprocessing as mp
    world = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
    before = smi_free_mib()
    mp.spawn(worker, args=(world, before, 29517), nprocs=world, join=True)


if __name__ == "__main__":
    main()
