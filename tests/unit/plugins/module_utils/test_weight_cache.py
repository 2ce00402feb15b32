# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 49: the Weight Cache Daemon's refusals and its unit's life on the host (module_utils/_weight_cache.py,
_weight_cache_host.py), the checkpoint prefetch's decision, and the release data they read (from each wheel)."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuserve.sglang.plugins.module_utils import _sglang_releases, _weight_cache
from ansible_collections.gpuserve.sglang.plugins.module_utils import _weight_cache_host as host_mod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
UNQUANTIZED = {"model-path": "/models/llama", "tp": 1}


# ---- the release data, read from the wheels ------------------------------------------------------------------------
def test_the_release_data_is_each_wheel_s_with_its_source_line():
    """0.5.17 is the first release with the standalone daemon; its allow-list is unquantized and block-wise FP8
    (protocol.py IPC_QUANT_ALLOWLIST), and it refuses speculative decoding beside it (server_args.py)."""
    with open(os.path.join(ROOT, "tests", "fixtures", "sglang", "0.5.17.json"), encoding="utf-8") as handle:
        rules = json.load(handle)["rules"]
    assert rules["weight_cache_daemon"]["value"] is True
    assert rules["weight_cache_daemon"]["source"].startswith("sglang/srt/weight_cache/daemon.py:")
    assert rules["weight_cache_quant_allowlist"]["value"] == {"": "", "fp8": "weight_block_size"}
    assert rules["weight_cache_refuses_speculative"]["source"].startswith("sglang/srt/server_args.py:")
    table = _sglang_releases.RELEASES
    assert not table["0.5.16"]["rules"]["weight_cache_daemon"]
    assert table["0.5.11"]["rules"]["weight_loader_prefetch"] and not table["0.5.10"]["rules"]["weight_loader_prefetch"]
    assert table["0.5.12"]["rules"]["weight_loader_drop_cache"] and not table["0.5.11"]["rules"]["weight_loader_drop_cache"]
    assert table["0.5.11"]["rules"]["sglang_cache_dir_env"] and not table["0.5.10"]["rules"]["sglang_cache_dir_env"]
    assert table["0.5.17"]["rules"]["cache_dir_redirects"] == []
    assert "TRITON_CACHE_DIR" in table["0.5.18"]["rules"]["cache_dir_redirects"]


# ---- refusals (before anything changes) ----------------------------------------------------------------------------
def test_a_release_without_the_daemon_is_refused_naming_it():
    problems = _weight_cache.refusals("0.5.16", UNQUANTIZED)
    assert len(problems) == 1 and "SGLang 0.5.16 has no standalone Weight Cache Daemon" in problems[0]
    assert "nothing was changed" in problems[0]
    assert _weight_cache.refusals("0.5.17", UNQUANTIZED) == []
    assert _weight_cache.refusals("0.5.23", UNQUANTIZED) == []


def test_speculative_decoding_is_refused_with_sglang_s_own_words():
    args = dict(UNQUANTIZED, **{"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "/d"})
    problems = _weight_cache.refusals("0.5.17", args)
    assert len(problems) == 1
    assert "the weight cache daemon does not export the draft model's weights" in problems[0]
    assert "EAGLE3" in problems[0]


@pytest.mark.parametrize("args, config, refused", [
    (UNQUANTIZED, {}, None),
    (UNQUANTIZED, {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, None),
    (UNQUANTIZED, {"quantization_config": {"quant_method": "fp8"}}, "only with weight_block_size"),
    (UNQUANTIZED, {"quantization_config": {"quant_method": "compressed-tensors"}}, "'compressed_tensors' is not on"),
    # Kimi-K2.5 keeps its quantization under text_config (the model preflight's reading)
    (UNQUANTIZED, {"text_config": {"quantization_config": {"quant_method": "compressed-tensors"}}},
     "'compressed_tensors' is not on"),
    (dict(UNQUANTIZED, quantization="modelopt_fp4"), {}, "'modelopt_fp4' is not on"),
])
def test_the_quantization_is_checked_against_the_release_s_allow_list(args, config, refused):
    problems = _weight_cache.refusals("0.5.17", args, config)
    if refused is None:
        assert problems == []
    else:
        assert len(problems) == 1 and refused in problems[0], problems


def test_a_server_over_several_hosts_is_refused():
    assert "several hosts" in _weight_cache.refusals("0.5.17", UNQUANTIZED, nodes=2)[0]


# ---- the server's client flags and the daemon's ready files --------------------------------------------------------
def test_the_client_flags_set_one_socket_only_for_one_rank():
    assert _weight_cache.client_flags({"tp": 1}, 900) == {
        "weight-cache-mode": "client", "weight-cache-timeout": 900,
        "weight-cache-socket": "/tmp/sglang_weight_cache_rank0.sock"}
    # SGLang uses one --weight-cache-socket for every rank when it is set: with 8 ranks each finds its own
    assert "weight-cache-socket" not in _weight_cache.client_flags({"tp": 8})
    assert _weight_cache.ready_files({"tp": 2, "pp": 2}) == ["/tmp/sglang_weight_cache_rank%d.ready" % r for r in range(4)]


# ---- the checkpoint prefetch -----------------------------------------------------------------------------------------
PLAN = {"weights_gb_per_gpu": 68.4, "mem_available_bytes": 2000 * 10 ** 9, "host_pool_bytes_total": 358 * 10 ** 9}


def test_prefetch_off_true_and_a_release_without_it():
    assert _weight_cache.prefetch_decision(False, "0.5.17") == ({}, "")
    assert _weight_cache.prefetch_decision(True, "0.5.17")[0] == {"weight-loader-prefetch-checkpoints": True}
    flags, why = _weight_cache.prefetch_decision(True, "0.5.10")
    assert flags == {} and "0.5.10 has no --weight-loader-prefetch-checkpoints" in why


def test_prefetch_auto_goes_by_the_memory_plan_and_never_drops_the_cache():
    flags, why = _weight_cache.prefetch_decision("auto", "0.5.17", PLAN, tp=8)
    assert flags == {"weight-loader-prefetch-checkpoints": True} and "auto, on" in why
    assert "weight-loader-drop-cache-after-load" not in flags
    small = dict(PLAN, mem_available_bytes=800 * 10 ** 9)   # 547 GB + 358 GB pool > 800 GB
    flags, why = _weight_cache.prefetch_decision("auto", "0.5.17", small, tp=8)
    assert flags == {} and "547.2 GB + HiCache host pool 358.0 GB" in why and "> MemAvailable 800.0 GB" in why
    flags, why = _weight_cache.prefetch_decision("auto", "0.5.17", {}, tp=8)
    assert flags == {} and "no memory plan" in why


# ---- the unit's life on the host ------------------------------------------------------------------------------------
class FakeHost(object):
    def __init__(self, files=None, active=(), enabled=()):
        self.files = dict(files or {})
        self.active_units, self.enabled_units = set(active), set(enabled)
        self.calls = []

    def active(self, unit):
        return unit in self.active_units

    def enabled(self, unit):
        return unit in self.enabled_units

    def read(self, path):
        return self.files.get(path)

    def write(self, path, data):
        self.calls.append(("write", path))
        self.files[path] = data

    def remove(self, path):
        if path in self.files:
            self.calls.append(("remove", path))
            del self.files[path]

    def daemon_reload(self):
        self.calls.append(("daemon-reload",))

    def enable(self, unit):
        self.calls.append(("enable", unit))
        self.enabled_units.add(unit)

    def disable(self, unit):
        self.calls.append(("disable", unit))
        self.enabled_units.discard(unit)

    def start(self, unit):
        self.calls.append(("start", unit))
        self.active_units.add(unit)

    def restart(self, unit):
        self.calls.append(("restart", unit))

    def stop(self, unit):
        self.calls.append(("stop", unit))
        self.active_units.discard(unit)


D, S, PATH = "sglang-weight-cache.service", "sglang.service", "/etc/systemd/system/sglang-weight-cache.service"
MARKER = "/run/gpuserve-sglang/sglang-weight-cache.service.restart"


def _converge(host, content="unit v1\n", state="present", release="0.5.17", args=None, check_mode=False):
    return host_mod.converge(host, state, D, PATH, content, S, release=release, args=args or UNQUANTIZED,
                             check_mode=check_mode)


def test_a_refusal_changes_nothing_on_the_host():
    host = FakeHost(active=[S])
    result = _converge(host, release="0.5.16")
    assert result["failed"] and "0.5.16" in result["msg"] and host.calls == []


def test_with_the_server_stopped_the_unit_lands_and_the_daemon_starts_and_a_second_run_changes_nothing():
    host = FakeHost()
    result = _converge(host)
    assert result["changed"] and host.calls == [("write", PATH), ("daemon-reload",), ("enable", D), ("start", D)]
    host.calls = []
    again = _converge(host)
    assert not again["changed"] and host.calls == []


def test_a_server_change_never_touches_a_running_daemon():
    host = FakeHost(files={PATH: b"unit v1\n"}, active=[S, D], enabled=[D])
    result = _converge(host)
    assert not result["changed"] and host.calls == [] and not result["restart_pending"]


def test_first_enable_under_a_running_server_leaves_the_start_to_the_server_s_next_start():
    """The old server holds the GPU memory: the daemon's copy of the weights would not fit beside it; the server
    unit's ExecStartPre starts the daemon after the old process is gone. Nothing here stops the server."""
    host = FakeHost(active=[S])
    result = _converge(host)
    assert result["changed"] and ("start", D) not in host.calls and ("stop", S) not in host.calls
    assert host.calls == [("write", PATH), ("daemon-reload",), ("enable", D)]


def test_an_upgrade_under_a_running_server_restarts_the_daemon_once_at_the_server_s_next_start():
    host = FakeHost(files={PATH: b"unit v1 (0.5.17)\n"}, active=[S, D], enabled=[D])
    result = _converge(host, content="unit v2 (0.5.18)\n", release="0.5.18")
    assert result["changed"] and result["restart_pending"] and not result["restarted"]
    assert host.files[MARKER] == b"restart\n"
    assert ("restart", D) not in host.calls and ("stop", S) not in host.calls
    host.calls = []
    assert not _converge(host, content="unit v2 (0.5.18)\n", release="0.5.18")["changed"] and host.calls == []


def test_an_upgrade_with_the_server_stopped_restarts_the_daemon_now():
    host = FakeHost(files={PATH: b"unit v1\n", MARKER: b"restart\n"}, active=[D], enabled=[D])
    result = _converge(host, content="unit v2\n")
    assert result["restarted"] and ("restart", D) in host.calls and MARKER not in host.files


def test_check_mode_says_what_it_would_do_and_changes_nothing():
    host = FakeHost(active=[S])
    result = _converge(host, check_mode=True)
    assert result["changed"] and host.calls == []
    assert result["actions"] == ["land %s" % PATH, "enable %s" % D,
                                 "%s starts at %s's next start, before it" % (D, S)]


def test_absent_is_refused_while_the_server_runs_on_the_daemon_s_weights():
    host = FakeHost(files={PATH: b"unit\n"}, active=[S, D], enabled=[D])
    result = _converge(host, state="absent")
    assert result["failed"] and "stop sglang.service first" in result["msg"] and host.calls == []


def test_absent_removes_the_unit_when_the_server_is_stopped():
    host = FakeHost(files={PATH: b"unit\n"}, active=[D], enabled=[D])
    result = _converge(host, state="absent")
    assert result["changed"] and PATH not in host.files
    assert host.calls == [("stop", D), ("disable", D), ("remove", PATH), ("daemon-reload",)]
    assert not _converge(FakeHost(), state="absent")["changed"]


def test_the_model_s_config_json_is_what_the_quantization_is_read_from(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq"}}))
    assert host_mod.read_model_config(str(tmp_path)) == {"quantization_config": {"quant_method": "awq"}}
    assert host_mod.read_model_config(str(tmp_path / "missing")) == {}


def test_a_unit_name_systemd_would_not_read_is_refused_before_anything_changes():
    host = FakeHost()
    result = host_mod.converge(host, "present", "wc\nExecStartPre=+/bin/sh.service", PATH, "unit\n", S,
                               release="0.5.17", args=UNQUANTIZED)
    assert result["failed"] and "is not a unit name" in result["msg"] and host.calls == []
