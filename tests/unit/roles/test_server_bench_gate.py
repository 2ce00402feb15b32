# SPDX-License-Identifier: GPL-3.0-or-later
"""The server role's benchmark gate, as the role wires it (the bench option the role's seam,
plugin_utils/_server_payload.py, hands gpuserve.sglang.sglang_server, through the module's bench_gate(): _bench.gate) against the stand-in SGLang server
(tests/standin, a test fixture; one token per 20 ms, so 2 requests in flight give at most 100 tok/s) with a GIVEN
baseline (sglang_bench_baseline_tok_s, e.g. the operators' 759): one far above the stand-in's ceiling is a
regression that fails naming the given baseline; one far below passes. The state machine turns a regression into
the rollback (tests/unit/plugins/module_utils/test_server_machine.py)."""
from __future__ import annotations

import inspect
import json

from ansible_collections.gpuserve.sglang.plugins.module_utils._server import entry as sglang_server
from ansible_collections.gpuserve.sglang.plugins.plugin_utils import _server_payload

from conftest import standin_server

KEY = "gate-secret-key"


def _params(url, baseline, record_json):
    """The module's params as the role's seam passes the role's variables (plugin_utils/_server_payload.py)."""
    source = inspect.getsource(_server_payload.payload)
    role = {"enabled": "sglang_bench_gate", "url": "sglang_bench_url", "num_requests": "sglang_bench_requests",
            "concurrency": "sglang_bench_concurrency", "input_len": "sglang_bench_input_len",
            "output_len": "sglang_bench_output_len", "prompt_file": "sglang_bench_prompt_file",
            "timeout": "sglang_bench_timeout", "threshold_pct": "sglang_bench_threshold_pct",
            "baseline_tok_s": "sglang_bench_baseline_tok_s"}
    for option, name in role.items():
        assert '"%s": v["%s"]' % (option, name) in source, option
    values = {"enabled": True, "url": url, "num_requests": 4, "concurrency": 2, "input_len": 8, "output_len": 10,
              "prompt_file": "", "timeout": 60, "threshold_pct": 10, "baseline_tok_s": baseline}
    return {"bench": values, "api_key": KEY, "record": {"record_json_path": record_json}}


def test_given_baseline_decides_the_gate(tmp_path):
    record_json = str(tmp_path / "no-record.json")
    with standin_server(["--api-key", KEY], {"STANDIN_TOKEN_DELAY_SECONDS": "0.02"}) as url:
        passed = sglang_server.bench_gate(_params(url, 1, record_json))(False)
        failed = sglang_server.bench_gate(_params(url, 100000, record_json))(False)
    verdict = passed["gate"]
    assert passed["ran"] and passed["regression"] is False and passed["msg"] == ""
    assert verdict["baseline_source"] == "given (sglang_bench_baseline_tok_s)"
    assert verdict["baseline_tok_s"] == 1.0 and verdict["regression"] is False
    assert 0 < verdict["tok_s"] <= 2 / 0.02 * 1.02
    assert failed["regression"] is True
    assert failed["msg"].startswith("benchmark regression: ")
    assert "below the baseline 100000.0 tok/s (given (sglang_bench_baseline_tok_s)); allowed 10.0 %" in failed["msg"]
    assert KEY not in json.dumps(passed) and KEY not in json.dumps(failed)
    # off: no gate
    params = _params("http://127.0.0.1:1", 1, record_json)
    params["bench"]["enabled"] = False
    assert sglang_server.bench_gate(params) is None
