# SPDX-License-Identifier: GPL-3.0-or-later
"""How long the kernel takes to end a process that holds N GB of CUDA-pinned host memory (HiCache's host pool).

SGLang 0.5.9 allocates the HiCache host pool with ``torch.empty`` and pins it with ``cudaHostRegister``
(mem_cache/memory_pool_host.py alloc_with_host_register), and after its drain it SIGKILLs itself: systemd's
stop lasts until the kernel has torn the process down, i.e. unpinned and freed the whole pool. This measures,
per size: allocate + register (the start cost) and SIGKILL -> reaped (the stop cost). Needs torch with CUDA.

    python3 benchmarks/sglang_service/pinned_teardown.py 8 32 64 96   # sizes in GB (10^9 bytes)
Prints one JSON object per size.
"""

import json
import os
import signal
import sys
import time


def child(size_bytes, ready_w):
    import torch
    buf = torch.empty(size_bytes, dtype=torch.uint8, device="cpu")
    t0 = time.monotonic()
    rc = torch.cuda.cudart().cudaHostRegister(buf.data_ptr(), size_bytes, 0)
    registered = time.monotonic() - t0
    os.write(ready_w, json.dumps({"register_rc": int(rc), "register_s": round(registered, 3)}).encode() + b"\n")
    while True:
        time.sleep(60)


def measure(gb):
    size = int(gb * 1e9)
    ready_r, ready_w = os.pipe()
    t_start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        try:
            child(size, ready_w)
        finally:
            os._exit(1)
    os.close(ready_w)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(ready_r, 4096)
        if not chunk:
            break
        line += chunk
    t_ready = time.monotonic()
    info = json.loads(line.decode() or "{}")
    t_kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    t_reaped = time.monotonic()
    return dict(info, gb=gb, start_s=round(t_ready - t_start, 3), sigkill_to_reaped_s=round(t_reaped - t_kill, 3),
                teardown_gb_per_s=round(gb / max(1e-6, t_reaped - t_kill), 1))


def main(argv):
    for gb in [float(value) for value in argv[1:]] or [8.0]:
        print(json.dumps(measure(gb)), flush=True)


if __name__ == "__main__":
    main(sys.argv)
