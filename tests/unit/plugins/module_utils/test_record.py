# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployment record and its JSON twin as one unit (plugins/module_utils/_record.py; issue 22)."""
import json
import os
import sys

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _record
from ansible_collections.gpuserve.sglang.plugins.module_utils._record import record_json, write_record


@pytest.fixture
def paths(tmp_path):
    return {"md_path": str(tmp_path / "sglang-kimi.md"), "json_path": str(tmp_path / "sglang-kimi.json"),
            "history_dir": str(tmp_path / "history"), "service": "sglang-kimi"}


def write(paths, md, data, keep=10, **kw):
    return write_record(paths["md_path"], paths["json_path"], md, data, paths["history_dir"], paths["service"], keep,
                        **kw)


def test_writes_both_then_changes_nothing_when_equal(paths):
    first = write(paths, "# record 1\n", {"invocation_id": "a"})
    assert first["changed"] and first["history"] == [] and first["missing_previous"] == []
    assert open(paths["md_path"]).read() == "# record 1\n"
    assert json.load(open(paths["json_path"])) == {"invocation_id": "a"}
    assert oct(os.stat(paths["md_path"]).st_mode & 0o777) == "0o640"
    assert write(paths, "# record 1\n", {"invocation_id": "a"})["changed"] is False
    assert sorted(os.listdir(os.path.dirname(paths["md_path"]))) == ["sglang-kimi.json", "sglang-kimi.md"]


def test_the_replaced_pair_goes_to_the_history_by_the_hosts_clock_with_a_unique_suffix(paths):
    write(paths, "# one\n", {"n": 1})

    def clock():                          # the host's clock, not the controller's
        return 1796300000.0

    second = write(paths, "# two\n", {"n": 2}, now=clock, unique="abc123")
    base = os.path.join(paths["history_dir"], "sglang-kimi-20261203T121320Z-abc123")
    assert second["history"] == [base + ".md", base + ".json"]
    assert open(base + ".md").read() == "# one\n" and json.load(open(base + ".json")) == {"n": 1}
    # a second run within the same second (or another controller) never overwrites the first copy
    third = write(paths, "# three\n", {"n": 3}, now=clock)
    assert len(os.listdir(paths["history_dir"])) == 4 and third["history"][0] != base + ".md"


def test_a_missing_markdown_record_is_reported_not_fatal(paths):
    """Old tasks: the history copy needed both files; one missing .md failed every later run after its verify."""
    write(paths, "# one\n", {"n": 1})
    os.unlink(paths["md_path"])
    result = write(paths, "# two\n", {"n": 2})
    assert result["missing_previous"] == [paths["md_path"]]
    assert [p.endswith(".json") for p in result["history"]] == [True]
    assert open(paths["md_path"]).read() == "# two\n"


def test_history_keeps_the_newest_pairs_by_modification_time(paths):
    os.makedirs(paths["history_dir"])
    # an old-style name from the tasks before, and names whose order by name is not their order by time
    for index, base in enumerate(["sglang-kimi-20991231T000000Z-ffffff", "sglang-kimi-20261201T101010Z",
                                  "sglang-kimi-20000101T000000Z-000000"]):
        for ext in ("md", "json"):
            path = os.path.join(paths["history_dir"], "%s.%s" % (base, ext))
            open(path, "w").close()
            os.utime(path, (1000 + index, 1000 + index))
    open(os.path.join(paths["history_dir"], "other-unit-20261201T101010Z.json"), "w").close()
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, keep=2)
    left = sorted(os.listdir(paths["history_dir"]))
    assert "sglang-kimi-20991231T000000Z-ffffff.md" not in left      # the oldest by time, though last by name
    assert "sglang-kimi-20261201T101010Z.md" not in left
    assert "sglang-kimi-20000101T000000Z-000000.md" in left
    assert "other-unit-20261201T101010Z.json" in left                  # another unit's history is not ours
    assert len(result["pruned"]) == 4


def test_keep_zero_keeps_no_history(paths):
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, keep=0)
    assert len(result["history"]) == 2 and sorted(result["pruned"]) == sorted(result["history"])
    assert os.listdir(paths["history_dir"]) == []


def test_check_mode_changes_nothing(paths):
    write(paths, "# one\n", {"n": 1})
    result = write(paths, "# two\n", {"n": 2}, check_mode=True)
    assert result["changed"] is True
    assert open(paths["md_path"]).read() == "# one\n" and not os.path.exists(paths["history_dir"] + "/x")


def test_a_write_that_fails_leaves_the_previous_pair(paths, monkeypatch):
    write(paths, "# one\n", {"n": 1})
    real = _record.write_atomic

    def full_disk(dest, data, **kw):
        if dest.endswith(".sglang-kimi.md.new"):
            raise OSError(28, "No space left on device")
        return real(dest, data, **kw)

    monkeypatch.setattr(_record, "write_atomic", full_disk)
    with pytest.raises(OSError):
        write(paths, "# two\n", {"n": 2})
    assert open(paths["md_path"]).read() == "# one\n"
    assert json.load(open(paths["json_path"])) == {"n": 1}          # the twin was not replaced alone
    assert sorted(os.listdir(os.path.dirname(paths["md_path"]))) == ["history", "sglang-kimi.json", "sglang-kimi.md"]


def test_twin_text_is_what_to_nice_json_wrote():
    assert record_json({"b": 1, "a": [1, "é"]}) == '{\n    "a": [\n        1,\n        "\\u00e9"\n    ],\n    "b": 1\n}\n'


# ---------------------------------------------------------------------------------------------------------------
# The record's content (deploy_record, record_data, markdown; formerly record.yml, versions.yml and the template
# deployment-record.md.j2, whose output for these inputs the expected texts below are, byte for byte).

KEY = "the-api-key-value"
ADMIN_KEY = "the-admin-key-value"
HF_TOKEN = "hf_the-token-value"
GPU_LINE = "%d, GPU-%d, NVIDIA H200, 00000000:1%d:00.0, 143771, 0, 143771, 580.159.04, 9.0, Enabled, 700.00, 30"

VERIFIED = {"action": "restart", "invocation_id": "abc123", "previous_invocation_id": "old999", "main_pid": 4242,
            "timeline": {"deactivating": 1.5, "ready": 42.25, "total": 43},
            "ready_line": "The server is fired up and ready to roll!", "health_status": 200,
            "hicache": {"ranks_seen": [0, 1, 2], "host_pool_gb_per_rank": 120.5, "host_pool_gb_total": 361.5},
            "kv_cache": {"tokens_per_rank": 123456, "gb_per_rank": 10.25}}
BENCH = {"output_throughput": 120.5, "request_throughput": 2.1,
         "ttft_ms": {"p50": 10.0, "p90": 20.5, "p99": None, "mean": 12},
         "itl_ms": {"p50": 30.0, "p90": 31.0, "p99": 33.3, "mean": 30}, "accept_length": None, "errors": 0,
         "completed": 8, "num_requests": 8, "concurrency": 4, "input_len": 64, "output_len": 30, "api": "completions",
         "duration_s": 2.0, "summary": "8/8 ...", "url": "http://127.0.0.1:30000", "model": "m",
         "error_messages": []}
PREVIOUS_BENCH = dict(BENCH, output_throughput=118.0, accept_length=2.5)
GATE = {"baseline_tok_s": 118.0, "baseline_source": "recorded 2026 (invocation a)", "tok_s": 120.5,
        "threshold_pct": 10.0, "change_pct": 2.1, "regression": False}
WHEN = 1796300000          # 2026-12-03 12:13:20 UTC

EXPECTED_FULL = """\
<!-- Ansible managed -->
# sglang-kimi on gpu01

Rewritten by `gpuserve.sglang.server` after each verified start or restart; do not edit.

## Last verified restart
- when (UTC): 2026-12-03 12:13:20
- invocation: abc123 (previous old999), main PID 4242
- timeline (s): deactivating 1.5, ready 42.25, total 43
- ready line: `The server is fired up and ready to roll!`
- health: http://127.0.0.1:30000/health -> 200

## HiCache (from this invocation's journal)
- ranks seen: 0, 1, 2
- host pool per rank: 120.5 GB, total pinned 361.5 GB
- GPU KV cache: 123456 tokens, 10.25 GB per rank

## Command line (ExecStart)
```
/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/K --tp 8 --config \
/etc/sglang/sglang-kimi.secrets.yaml (keys: api-key, values not shown)
```
Profile `kimi-k25`; flags over it (sglang_args): {"hicache-ratio": 2.0, "enable-metrics": true, "note": "caf\\u00e9", \
"n": null}

## Environment (secrets masked)
Unit:
- CUDA_HOME=/usr/local/cuda
- HOME=/var/lib/sglang
/etc/sglang/sglang-kimi.env:
- SGL_ENABLE_JIT_DEEPGEMM=1
- HF_TOKEN=********
- EMPTY_KEY=
/etc/sglang/nccl.env:
- NCCL_P2P_LEVEL=NVL
- NCCL_MIN_NCHANNELS=16

## Versions
- SGLang: 0.5.9 (/opt/sglang/venv/bin/python -m sglang.launch_server)
- CUDA: release 12.8, V12.8.93
- NVIDIA driver: 580.159.04, NVIDIA H200
- venv: /opt/sglang/venv

## Why this configuration
first deployment

## Benchmark (gpuserve.sglang.sglang_bench)
| | output tok/s | req/s | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | accept length | errors | settings |
|---|---|---|---|---|---|---|---|
| this configuration | 120.5 | 2.1 | 10.0 / 20.5 /  | 30.0 / 31.0 / 33.3 | - | 0 | 8 req, concurrency 4, in 64, out 30 |
| previous | 118.0 | 2.1 | 10.0 / 20.5 /  | 30.0 / 31.0 / 33.3 | 2.5 | 0 | 8 req, concurrency 4, in 64, out 30 |

Gate: baseline 118.0 tok/s (recorded 2026 (invocation a)), change 2.1 %, allowed -10.0 %.

## NCCL values of the running process (/proc/4242/environ)
- NCCL_A=1=x
- NCCL_B=2

## Files this process read when it started (sha256 at the verified start; a rollback puts them back)
- /etc/a: sha256 ff
- /etc/n: absent
- /etc/s: present (secret, no hash)

## Patches applied (/opt/sglang/install-record.json)
- p1.patch sha256 abababab
- p0.patch sha256 cd

## Memory plan
plan line

Machine-readable twin: /etc/sglang/sglang-kimi.json; earlier records: /etc/sglang/history (last 10).
"""

EXPECTED_BARE_TAIL = """\
## Benchmark (gpuserve.sglang.sglang_bench)
- not benchmarked (sglang_bench_gate is off)

## NCCL values of the running process (/proc/7/environ)
- (none)

## Files this process read when it started (sha256 at the verified start; a rollback puts them back)
- (not recorded)

## Patches applied (/opt/sglang/install-record.json)
- (none recorded)

## Memory plan
- no plan in this run (gpuserve.sglang.preflight's sglang_memory_plan); the journal's figures are above

Machine-readable twin: /etc/sglang/sglang-kimi.json; earlier records: /etc/sglang/history (last 10).
"""

SECTIONS = ["## Last verified restart", "## HiCache (from this invocation's journal)", "## Command line (ExecStart)",
            "## Environment (secrets masked)", "## Versions", "## Why this configuration",
            "## Benchmark (gpuserve.sglang.sglang_bench)", "## NCCL values of the running process (/proc/4242/environ)",
            "## Files this process read when it started (sha256 at the verified start; a rollback puts them back)",
            "## Patches applied (/opt/sglang/install-record.json)", "## Memory plan"]

DATA_KEYS = {"service", "host", "when", "change_reason", "action", "invocation_id", "main_pid", "profile", "args",
             "cmdline", "sglang_version", "venv", "cuda", "driver", "install", "patches", "nccl_process", "inputs",
             "memory_plan", "kv_cache", "hicache", "hicache_expected", "bench", "bench_gate", "bench_previous",
             "baseline", "baseline_when", "baseline_invocation_id", "timeline", "verified"}


def record_params(**over):
    params = {"service": "sglang-kimi", "host": "gpu01", "change_reason": "first deployment", "profile": "kimi-k25",
              "args": {"hicache-ratio": 2.0, "enable-metrics": True, "note": "café", "n": None},
              "cmdline": "/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/K --tp 8",
              "secrets_file": "/etc/sglang/sglang-kimi.secrets.yaml", "secret_keys": ["api-key"],
              "unit_environment": {"CUDA_HOME": "/usr/local/cuda", "HOME": "/var/lib/sglang"},
              "env_file": "/etc/sglang/sglang-kimi.env",
              "env": {"SGL_ENABLE_JIT_DEEPGEMM": "1", "HF_TOKEN": HF_TOKEN, "EMPTY_KEY": ""},
              "nccl_env_file": "/etc/sglang/nccl.env", "install_record": "/opt/sglang/install-record.json",
              "record_md_path": "/etc/sglang/sglang-kimi.md", "record_json_path": "/etc/sglang/sglang-kimi.json",
              "record_history_dir": "/etc/sglang/history", "keep": 10,
              "memory_plan": {"summary": "plan line", "kv_tokens_per_rank": 5}, "hicache_expected": True,
              "health_url": "http://127.0.0.1:30000/health", "launcher": "sglang.launch_server",
              "cuda_home": "/usr/local/cuda", "nvidia_smi": "/usr/bin/nvidia-smi", "backup_dir": "/var/backups/sglang"}
    params.update(over)
    return params


def host_read(**over):
    host = {"previous": {"bench": PREVIOUS_BENCH, "baseline": PREVIOUS_BENCH},
            "install": {"version": "0.5.9", "patches": {"p1.patch": "ab" * 4, "p0.patch": "cd"}},
            "inputs": {"/etc/a": {"exists": True, "sha256": "ff"}, "/etc/s": {"exists": True},
                       "/etc/n": {"exists": False}},
            "nccl_process": {"NCCL_B": "2", "NCCL_A": "1=x"}, "sglang": "0.5.9", "cuda": "release 12.8, V12.8.93",
            "driver": "580.159.04, NVIDIA H200", "nccl_lines": ["NCCL_P2P_LEVEL=NVL", "NCCL_MIN_NCHANNELS=16"]}
    host.update(over)
    return host


def render(params, verified, bench, gate, host):
    data = _record.record_data(params, verified, bench, gate, "/opt/sglang/venv/bin/python", host, WHEN)
    return data, _record.markdown(data, params, verified, host["nccl_lines"], "/opt/sglang/venv/bin/python")


def test_markdown_is_the_templates_text():
    data, text = render(record_params(), VERIFIED, BENCH, GATE, host_read())
    assert text == EXPECTED_FULL
    assert [line for line in text.splitlines() if line.startswith("## ")] == SECTIONS


def test_markdown_of_a_start_without_benchmark_plan_or_inputs():
    verified = {"action": "start", "invocation_id": "i2", "main_pid": 7, "timeline": {}, "hicache": {},
                "kv_cache": {}, "health_status": None, "ready_line": None, "previous_invocation_id": None}
    params = record_params(secret_keys=["admin-api-key"], env={}, change_reason="", unit_environment={},
                           memory_plan={})
    host = host_read(previous={}, install={}, inputs={}, nccl_process={}, nccl_lines=[])
    data, text = render(params, verified, {}, None, host)
    assert text.endswith(EXPECTED_BARE_TAIL)
    assert "## Last verified start\n" in text
    assert "- invocation: i2 (previous none), main PID 7\n- timeline (s): \n- ready line: ``\n" in text
    assert ("- health: http://127.0.0.1:30000/health -> \n\n## HiCache (from this invocation's journal)\n"
            "- off\n\n") in text
    assert "(keys: admin-api-key, values not shown)" in text
    assert "Unit:\n/etc/sglang/sglang-kimi.env:\n- (empty)\n/etc/sglang/nccl.env:\n- (absent)\n" in text
    assert "## Why this configuration\n(no reason given: sglang_change_reason)\n" in text
    # no key set: ExecStart alone
    assert "--tp 8\n```" in _record.markdown(data, record_params(secret_keys=[]), verified, [], "/p")


def test_the_previous_benchmark_alone_and_a_gate_without_baseline():
    params = record_params()
    data, text = render(params, VERIFIED, None, {}, host_read(previous={"bench": {}, "bench_previous": PREVIOUS_BENCH}))
    assert "|---|---|---|---|---|---|---|---|\n| previous | 118.0 |" in text and "| this configuration |" not in text
    assert "Gate:" not in text
    gate = dict(GATE, change_pct=None, baseline_tok_s=0.0, baseline_source="none: this run sets the baseline")
    data, text = render(params, VERIFIED, BENCH, gate, host_read(previous={}))
    assert ("\n\nGate: baseline 0.0 tok/s (none: this run sets the baseline), change n/a %, allowed -10.0 %.\n\n"
            "## NCCL") in text


def test_data_has_the_keys_of_the_record_and_carries_the_baseline():
    data, dummy = render(record_params(), VERIFIED, BENCH, GATE, host_read())
    assert set(data) == DATA_KEYS
    assert data["when"] == "2026-12-03T12:13:20Z" and data["venv"] == "/opt/sglang/venv"
    assert data["bench"] == dict((k, BENCH[k]) for k in _record.BENCH_KEYS)       # no url, model, error_messages
    assert data["baseline"] == data["bench"] and data["baseline_when"] == data["when"]
    assert data["baseline_invocation_id"] == "abc123" and data["bench_gate"] == GATE
    assert data["bench_previous"] == PREVIOUS_BENCH
    assert data["install"] == {"version": "0.5.9"} and data["patches"] == {"p1.patch": "abababab", "p0.patch": "cd"}
    assert data["memory_plan"] == {"summary": "plan line", "kv_tokens_per_rank": 5, "host_pool_gb_per_rank": None}
    assert data["hicache_expected"] is True and data["main_pid"] == 4242
    # a copy of the state file's record (the one record of the verified invocation), made by one function
    assert data["verified"]["invocation_id"] == data["invocation_id"] and "state_file" in data["verified"]
    # no benchmark this time: the last record's baseline goes on, with its time and invocation; no gate
    previous = {"bench": PREVIOUS_BENCH, "baseline": PREVIOUS_BENCH, "baseline_when": "2026-01-01T00:00:00Z",
                "baseline_invocation_id": "first"}
    data, dummy = render(record_params(memory_plan={}), VERIFIED, {}, GATE, host_read(previous=previous))
    assert data["bench"] == {} and data["bench_gate"] == {} and data["memory_plan"] == {}
    assert data["baseline"] == PREVIOUS_BENCH and data["baseline_when"] == "2026-01-01T00:00:00Z"
    assert data["baseline_invocation_id"] == "first" and data["bench_previous"] == PREVIOUS_BENCH
    data, dummy = render(record_params(), VERIFIED, None, None, host_read(previous={}))
    assert data["baseline"] is None and data["baseline_when"] is None and data["bench_previous"] is None


def test_nccl_values_only_from_the_environ():
    environ = (b"SGLANG_API_KEY=" + KEY.encode() + b"\0NCCL_P2P_LEVEL=NVL\0PATH=/usr/bin\0NOT_NCCL_X=1\0"
               b"NCCL_MIN_NCHANNELS=16\0NCCL_IB_HCA==mlx5_0\0NCCL_=x\0nccl_lower=1\0")
    assert _record.nccl_values(environ) == {"NCCL_P2P_LEVEL": "NVL", "NCCL_MIN_NCHANNELS": "16",
                                            "NCCL_IB_HCA": "=mlx5_0"}
    assert _record.nccl_values(b"") == {} and _record.nccl_values(None) == {}


class Host(object):
    """A GPU host in a temporary directory: the venv's and the host's install records, the last-good manifest, the
    running process's environ, the NCCL environment file; and the commands versions.yml ran."""

    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path
        self.python = str(tmp_path / "venv" / "bin" / "python")
        (tmp_path / "venv" / "bin").mkdir(parents=True)
        (tmp_path / "etc").mkdir()
        self.host_install = tmp_path / "install-record.json"
        self.host_install.write_text(json.dumps({"version": "0.5.8", "venv": "/opt/sglang/venv",
                                                 "patches": {"host.patch": "11" * 32}}))
        self.venv_install = tmp_path / "venv" / "gpuserve-install-record.json"
        self.venv_install.write_text(json.dumps({"version": "0.5.9", "patches": {"venv.patch": "ab" * 32}}))
        manifest = tmp_path / "backup" / "last-good" / "manifest.json"
        manifest.parent.mkdir(parents=True)
        manifest.write_text(json.dumps({"invocation_id": "abc123", "files": {
            "/etc/systemd/system/sglang-kimi.service": {"exists": True, "sha256": "aa" * 32},
            "/etc/sglang/sglang-kimi.secrets.yaml": {"exists": True, "mode": "0640"}}}))
        (tmp_path / "proc" / "4242").mkdir(parents=True)
        (tmp_path / "proc" / "4242" / "environ").write_bytes(
            b"PATH=/usr/bin\0SGLANG_API_KEY=" + KEY.encode() + b"\0HF_TOKEN=" + HF_TOKEN.encode()
            + b"\0NCCL_P2P_LEVEL=NVL\0NCCL_MIN_NCHANNELS=16\0")
        monkeypatch.setattr(_record, "PROC_ENVIRON", str(tmp_path / "proc" / "%d" / "environ"))
        self.nccl_env = tmp_path / "nccl.env"
        self.nccl_env.write_text("# NCCL tuning\n\nNCCL_P2P_LEVEL=NVL\n   \n  # indented comment\n"
                                 "NCCL_MIN_NCHANNELS=16\n")
        self.commands = []
        nvcc = "Cuda compilation tools, release 12.8, V12.8.93\nBuild cuda_12.8.r12.8/compiler.35404655_0\n"
        self.answers = {"sglang": (0, "0.5.9\n", ""), "nvcc": (0, nvcc, ""),
                        "nvidia-smi": (0, "\n".join(GPU_LINE % (i, i, i) for i in range(2)) + "\n", "")}

    def run(self, argv):
        self.commands.append(list(argv))
        if argv[0] == self.python:
            return self.answers["sglang"]
        return self.answers[os.path.basename(argv[0])]

    def params(self, **over):
        root = str(self.root)
        return record_params(install_record=str(self.host_install), backup_dir=root + "/backup",
                             nccl_env_file=str(self.nccl_env), record_md_path=root + "/etc/sglang-kimi.md",
                             record_json_path=root + "/etc/sglang-kimi.json", record_history_dir=root + "/etc/history",
                             env={"SGL_X": "1", "SGLANG_API_KEY": KEY, "HF_TOKEN": HF_TOKEN},
                             unit_environment={"HOME": "/var/lib/sglang", "ADMIN_API_KEY": ADMIN_KEY},
                             args={"hicache-ratio": 2, "admin-api-key": ADMIN_KEY},
                             secrets_to_mask=[KEY, ADMIN_KEY], secret_keys=["api-key", "admin-api-key"], **over)


def deploy(host, params, bench=None, gate=None, when=WHEN):
    return _record.deploy_record(params, VERIFIED, bench, gate, host.python, run=host.run, now=lambda: when)


def test_deploy_record_reads_the_host_and_writes_the_pair(tmp_path, monkeypatch):
    host = Host(tmp_path, monkeypatch)
    params = host.params()
    result = deploy(host, params, BENCH, GATE)
    assert result["changed"] and result["history"] == []
    md = open(params["record_md_path"]).read()
    data = json.load(open(params["record_json_path"]))
    assert data == result["data"]
    assert data["sglang_version"] == "0.5.9" and data["cuda"] == "release 12.8, V12.8.93"
    assert data["driver"] == "580.159.04, NVIDIA H200"                     # two GPUs, one line
    assert data["install"] == {"version": "0.5.9"} and data["patches"] == {"venv.patch": "ab" * 32}
    assert data["venv"] == str(tmp_path / "venv")
    assert data["nccl_process"] == {"NCCL_P2P_LEVEL": "NVL", "NCCL_MIN_NCHANNELS": "16"}
    assert sorted(data["inputs"]) == ["/etc/sglang/sglang-kimi.secrets.yaml", "/etc/systemd/system/sglang-kimi.service"]
    assert ("/etc/sglang/sglang-kimi.secrets.yaml: present (secret, no hash)\n"
            "- /etc/systemd/system/sglang-kimi.service: sha256 " + "aa" * 32 + "\n") in md
    assert "\n" + str(host.nccl_env) + ":\n- NCCL_P2P_LEVEL=NVL\n- NCCL_MIN_NCHANNELS=16\n\n## Versions" in md
    assert "- SGLang: 0.5.9 (%s -m sglang.launch_server)\n" % host.python in md
    assert "- venv.patch sha256 " + "ab" * 32 in md
    assert host.commands[0] == [host.python, "-c", _record.VERSION_SCRIPT]
    assert host.commands[1] == ["/usr/local/cuda/bin/nvcc", "--version"]
    assert host.commands[2][0] == "/usr/bin/nvidia-smi" and host.commands[2][1].startswith("--query-gpu=")
    # the next record: the pair goes to the history
    second = deploy(host, params, when=WHEN + 60)
    assert len(second["history"]) == 2 and second["data"]["bench_previous"] == dict(
        (k, BENCH[k]) for k in _record.BENCH_KEYS)


def test_no_key_value_anywhere_in_the_record(tmp_path, monkeypatch):
    host = Host(tmp_path, monkeypatch)
    params = host.params(cmdline="/venv/bin/python -m sglang.launch_server --served-model-name " + KEY)
    deploy(host, params, BENCH, GATE)
    md = open(params["record_md_path"]).read()
    twin = open(params["record_json_path"]).read()
    for secret in (KEY, ADMIN_KEY, HF_TOKEN):
        assert secret not in md and secret not in twin
    assert "- SGLANG_API_KEY=********\n" in md and "- HF_TOKEN=********\n" in md and "- SGL_X=1\n" in md
    assert "- ADMIN_API_KEY=********\n" in md
    assert json.loads(twin)["args"] == {"hicache-ratio": 2, "admin-api-key": "********"}
    assert "(keys: api-key, admin-api-key, values not shown)" in md
    # the process's environment: its NCCL values and nothing else
    assert "PATH=/usr/bin" not in md and "/usr/bin" not in twin


def test_the_hosts_install_record_when_the_venv_has_none_and_versions_not_found(tmp_path, monkeypatch):
    host = Host(tmp_path, monkeypatch)
    os.unlink(str(host.venv_install))
    host.answers.update(sglang=(127, "", "No such file"), nvcc=(127, "", "No such file"),
                        **{"nvidia-smi": (9, "", "NVIDIA-SMI has failed")})
    result = deploy(host, host.params(cuda_version="12.8"))
    data = result["data"]
    assert data["install"] == {"version": "0.5.8", "venv": "/opt/sglang/venv"}
    assert data["patches"] == {"host.patch": "11" * 32}
    assert (data["sglang_version"], data["cuda"], data["driver"]) == ("unknown", "12.8", "not found")
    assert deploy(host, host.params())["data"]["cuda"] == "not found"
    host.answers["nvidia-smi"] = (0, "garbage\n", "")
    assert deploy(host, host.params())["data"]["driver"] == "not found"


def test_a_host_without_a_process_manifest_or_nccl_file(tmp_path, monkeypatch):
    host = Host(tmp_path, monkeypatch)
    os.unlink(str(tmp_path / "backup" / "last-good" / "manifest.json"))
    os.unlink(str(host.nccl_env))
    verified = dict(VERIFIED, main_pid=0)
    result = _record.deploy_record(host.params(), verified, None, None, host.python, run=host.run, now=lambda: WHEN)
    md = open(result["md_path"]).read()
    assert result["data"]["nccl_process"] == {} and result["data"]["inputs"] == {}
    assert "environ)\n- (none)\n" in md and "- (not recorded)\n" in md and ":\n- (absent)\n" in md


def test_deploy_record_in_check_mode_writes_nothing(tmp_path, monkeypatch):
    host = Host(tmp_path, monkeypatch)
    params = host.params()
    result = _record.deploy_record(params, VERIFIED, BENCH, GATE, host.python, run=host.run, now=lambda: WHEN,
                                   check_mode=True)
    assert result["changed"] is True
    assert not os.path.exists(params["record_md_path"]) and not os.path.exists(params["record_json_path"])


def test_run_command_reports_a_missing_program():
    assert _record.run_command(["/nonexistent/nvcc", "--version"])[0] == 127
    rc, out, dummy = _record.run_command([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"])
    assert (rc, out) == (0, "C\n")


def test_the_record_shows_the_environment_file_as_it_is_no_key_added():
    """The record showed SGLANG_API_KEY=******** under the environment file whenever a key was set, as the file
    held it; the key is in the secrets file only now (a rollback restores the environment file), and the record
    shows the environment file's own variables (old code: a SGLANG_API_KEY line it does not hold)."""
    params = record_params(secret_keys=["api-key"], env={"SGL_X": "1", "HF_TOKEN": "hf-x"})
    assert _record.env_file_values(params) == {"SGL_X": "1", "HF_TOKEN": "********"}


def test_the_recorded_invocation_is_the_twins_copy_of_the_state_file(tmp_path):
    """What the state machine compares with the state file's verified invocation: the twin's ``verified`` copy, a
    twin of before that copy by its ``invocation_id``, "" for none (a record then rewritten by the next run)."""
    twin = tmp_path / "s.json"
    twin.write_text(json.dumps({"invocation_id": "a", "verified": {"state_file": "/x", "invocation_id": "b"}}))
    assert _record.recorded_invocation(str(twin)) == "b"
    twin.write_text(json.dumps({"invocation_id": "a"}))
    assert _record.recorded_invocation(str(twin)) == "a"
    twin.write_text("not json")
    assert _record.recorded_invocation(str(twin)) == ""
    assert _record.recorded_invocation(str(tmp_path / "none.json")) == "" == _record.recorded_invocation("")
