# SPDX-License-Identifier: GPL-3.0-or-later
"""STAND-IN for SGLang's standalone Weight Cache Daemon (``python -m sglang.srt.weight_cache.daemon``; a test
fixture, never used by the product). It takes the daemon's command line (``parse_known_args``), and for every rank of
the host (tp_size x pp_size) does what the real one does on the outside: binds the Unix socket
/tmp/sglang_weight_cache_rank<N>.sock, writes /tmp/sglang_weight_cache_rank<N>.ready (``pid=...``) once "loaded"
(STANDIN_WEIGHT_CACHE_LOAD_SECONDS, default 1), logs as the real daemon, answers nothing on the sockets, and on
SIGTERM removes its files and exits 0. No GPU, no weights.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time

SOCKET = "/tmp/sglang_weight_cache_rank%d.sock"
READY = "/tmp/sglang_weight_cache_rank%d.ready"


def main(argv=None):
    parser = argparse.ArgumentParser(description="stand-in Weight Cache Daemon")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", type=int, default=1)
    parser.add_argument("--pp-size", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=1800)
    args, _unknown = parser.parse_known_args(argv)
    ranks = range(args.tp_size * args.pp_size)
    sockets, files = [], []

    def stop(signum, _frame):
        print("[WeightCacheDaemon] Received signal %d, shutting down" % signum, flush=True)
        for sock in sockets:
            sock.close()
        for path in files:
            if os.path.exists(path):
                os.unlink(path)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    time.sleep(float(os.environ.get("STANDIN_WEIGHT_CACHE_LOAD_SECONDS", "1")))
    for rank in ranks:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(SOCKET % rank):
            os.unlink(SOCKET % rank)
        sock.bind(SOCKET % rank)
        sock.listen(1)
        sockets.append(sock)
        files.append(SOCKET % rank)
        with open(READY % rank, "w") as handle:
            handle.write("pid=%d\n" % os.getpid())
        files.append(READY % rank)
        print("[WeightCacheDaemon gpu=%d tp_rank=%d] Listening on %s" % (rank, rank, SOCKET % rank), flush=True)
    print("All %d weight cache daemons on node 0 are ready (model %s)" % (len(ranks), args.model_path), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
