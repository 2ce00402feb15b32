# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in prints the start-up texts the restart timeline reads (issue 49) where the release it speaks does:
SGLang 0.5.17's ``Engine startup timings (s): ...`` and its ``Capture ... CUDA graph end. elapsed=...`` (as the
real 0.5.17 server printed them, tests/fixtures/sglang/real/0.5.17-h200/), 0.5.9's ``Capture cuda graph end.
Time elapsed: ...`` and no timings line."""
import signal

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_logs import LogWatch, texts_for
from conftest import free_port
from real_sglang_logs import server_log
from test_standin_real import standin_run

PHASES = {"process_start", "weights", "kv_pool", "cuda_graphs", "hicache_pool", "http_start", "warm_up"}


def read(lines, release):
    watch = LogWatch(texts=texts_for(release))
    for index, line in enumerate(lines):
        watch.feed(line, 1000.0 + index)      # the order of the lines stands for their time
    return watch


@pytest.mark.parametrize("release", ["0.5.9", "0.5.17", "0.5.23"])
def test_the_standin_prints_every_phase_of_its_release(release):
    code, lines = standin_run(release, free_port())
    assert code == -signal.SIGKILL
    watch = read(lines, release)
    assert set(watch.marks) == PHASES
    real = read(server_log("serverA.log"), "0.5.17")
    if release == "0.5.9":
        assert watch.startup_reported is None and not any("Engine startup timings" in line for line in lines)
        assert any("Capture cuda graph end. Time elapsed: " in line for line in lines)
    else:
        # the real server's keys, and the line where the real server printed it: after the HiCache host pool,
        # before the HTTP server
        assert set(watch.startup_reported) == set(real.startup_reported)
        assert set(watch.startup_reported["cuda_graph"]) == set(real.startup_reported["cuda_graph"])
        timings = next(i for i, line in enumerate(lines) if "Engine startup timings (s): " in line)
        assert watch.marks["hicache_pool"] < 1000.0 + timings < watch.marks["http_start"]
        assert real.marks["hicache_pool"] <= real.marks["http_start"]
        assert any("Capture target decode CUDA graph end. elapsed=" in line for line in lines)
