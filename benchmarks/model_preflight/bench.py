# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: the model preflight (module_utils/_model_check.py, issue 24) on a model the size of Kimi-K2.5 INT4.

Writes 64 safetensors shards of 10 GB each (sparse files: a real header declaring one 10 GB tensor, then a hole;
the disk holds a few kB) and their index, then times ``_model_check.check`` on them, N runs, page cache dropped
before each run where the kernel lets us (root, /proc/sys/vm/drop_caches), and once with ``deep`` on one 1 GB
shard (the opt-in sha256 read, to give its rate). Prints one JSON line per measurement.

    python3 benchmarks/model_preflight/bench.py [--dir /tmp/bench-model] [--runs 5]

What it shows: the default check reads 8 bytes + one header per shard whatever the shard's size, so its time is
the number of files times one small read (bounded), while a checksum of the same model reads 640 GB.
"""

import argparse
import json
import os
import shutil
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check  # noqa: E402

SHARD_BYTES = 10 * 10 ** 9


def sparse_shard(path, name, data_bytes):
    header = {"__metadata__": {"format": "pt"},
              name: {"dtype": "U8", "shape": [data_bytes], "data_offsets": [0, data_bytes]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        handle.truncate(8 + len(text) + data_bytes)


def make_model(directory, shards, data_bytes):
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    weight_map = {}
    for index in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (index, shards)
        tensor = "layers.%d.weight" % index
        sparse_shard(os.path.join(directory, name), tensor, data_bytes)
        weight_map[tensor] = name
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": shards * data_bytes}, "weight_map": weight_map}, handle)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump({"architectures": ["KimiK25ForConditionalGeneration"],
                   "text_config": {"quantization_config": {"quant_method": "compressed-tensors"}}}, handle)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default="/tmp/gpuserve-bench-model")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    make_model(args.dir, 64, SHARD_BYTES)
    item = {"path": args.dir, "role": "model", "quantization": "compressed_tensors"}
    times = []
    dropped = False
    for _run in range(args.runs):
        dropped = drop_caches()
        start = time.monotonic()
        result = _model_check.check([item], release="0.5.9", compute_caps=["12.0"] * 8)
        times.append(time.monotonic() - start)
        assert result["problems"] == [], result["problems"]
        assert result["models"][0]["weights"]["headers_read"] == 64
    print(json.dumps({"what": "default check, 64 shards x 10 GB (sparse)", "runs": args.runs,
                      "declared_bytes": result["models"][0]["weights"]["bytes"], "cache_dropped": dropped,
                      "seconds_min": round(min(times), 4), "seconds_median": round(sorted(times)[len(times) // 2], 4),
                      "seconds_max": round(max(times), 4)}))
    # the opt-in deep check on one 1 GB shard (sparse: reads zeros at the page cache's rate, an upper bound)
    deep_dir = args.dir + "-deep"
    make_model(deep_dir, 1, 10 ** 9)
    drop_caches()
    start = time.monotonic()
    _model_check.check([{"path": deep_dir}], release="0.5.9", deep=True)
    seconds = time.monotonic() - start
    print(json.dumps({"what": "deep check (sha256), one 1 GB shard (sparse)", "seconds": round(seconds, 3),
                      "gb_per_s": round(1.0 / seconds, 3),
                      "extrapolated_640_gb_minutes": round(640 / (1.0 / seconds) / 60, 1)}))
    shutil.rmtree(args.dir, ignore_errors=True)
    shutil.rmtree(deep_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
