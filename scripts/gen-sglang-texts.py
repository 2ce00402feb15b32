# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's texts per release, taken from the release's own wheel (issue 21).

    scripts/gen-sglang-texts.py 0.5.23            download the wheel (pip download --no-deps), extract the texts,
                                                  write tests/fixtures/sglang/0.5.23.json and the release table
                                                  plugins/module_utils/_sglang_releases.py
    scripts/gen-sglang-texts.py 0.5.23 --wheel W  the same from a wheel already on disk (its sha256 is recorded)
    scripts/gen-sglang-texts.py --check           re-derive every release's templates from the fixtures' code and
                                                  check the table (offline; the unit tests run it)

A text is found by its FAMILY below: the files it may live in (they move between releases) and a literal the
logging call's format contains. The call's format (an f-string, or a %-format with its arguments) is read with
``ast`` and turned into a TEMPLATE in ``str.format`` syntax: the literal parts as printed, each value a field
named by FIELDS (``{tokens:d}``, ``{gb:.2f}``) or ``{_N}`` when the collection does not read it. The table holds
templates only: ``_sglang_logs`` turns them into regexes, the stand-in (a test fixture) prints them. A family a
release does not have is simply absent from its entry; a REQUIRED family that is not found stops the script, so
a release that moved a text is reviewed, not silently read with nothing. The same holds for RULES (how a release
sizes its pools, which flags it has) and for SGLang's own defaults (DEFAULT_FIELDS, read from ServerArgs' fields:
``server_defaults(release)`` in the table).

Every release from 0.5.9 to 0.5.23 on PyPI has a fixture (post releases included); the wheels are cached in
.cache/sglang-wheels (SGLANG_WHEEL_CACHE), and --check never downloads.
"""
import argparse
import ast
import fnmatch
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "sglang")
TABLE = os.path.join(ROOT, "plugins", "module_utils", "_sglang_releases.py")
CACHE = os.environ.get("SGLANG_WHEEL_CACHE", os.path.join(ROOT, ".cache", "sglang-wheels"))

# Value expressions (as ast.unparse prints them) -> the field name the collection reads. Same name = same meaning
# in every release; anything else becomes an anonymous field.
FIELDS = {
    "num_tokens": "tokens", "self.size": "tokens", "size": "tokens",
    "kv_size_GB": "gb", "k_size_GB": "k_gb", "v_size_GB": "v_gb",
    "requested_bytes / 1e9": "gb", "requested_bytes / 1000000000.0": "gb", "self.pool_label": "pool", "pool_label": "pool",
    "cache_name": "pool",
    "self.max_total_num_tokens": "tokens", "i": "rank", "rank": "rank",
    "server_args": "args", "_server_args_for_logging(server_args)": "args", "server_args.resolved_dict()": "args",
    "get_parallel().node_rank": "node_rank", "server_args.node_rank": "node_rank",
    "self.dtype": "dtype", "ratio": "ratio", "self.weight_load_mem_usage": "mem_gb",
    "time.perf_counter() - tic_total": "elapsed", "self.weight_load_time": "elapsed",
    "type(self.model).__name__": "model_type", "available_bytes / 1e9": "free_gb",
    "available_bytes / 1000000000.0": "free_gb", "self.target_layer_num": "target_layers",
    "self.layer_num": "total_layers", "draft_layer_num": "draft_layers",
    # the start-up timeline (issue 49): a CUDA graph capture's duration, SGLang's own start-up timings (0.5.17+)
    "time.perf_counter() - tic": "elapsed", "capture_time": "elapsed",
    "startup_time['load_weight']": "load_weight", "startup_time['kv_cache_allocation']": "kv_cache_allocation",
    "startup_time['scheduler_e2e']": "scheduler_e2e", "cuda_graph_timings": "cuda_graph",
    "startup_time['tokenizer_e2e']": "tokenizer_e2e",
}
READ_NAMES = {"tokens", "gb", "k_gb", "v_gb", "pool", "rank", "args", "dtype", "ratio", "mem_gb"}
# Conditional values the collection wants one branch of (the other is another state, not a start-up text).
CHOICES = {
    "'VA upper bound' if self.post_capture_active else 'is allocated'": "is allocated",
    "'available_cpu_mem' if self.device == 'cpu' else 'available_gpu_mem'": "available_gpu_mem",
}

# name: (required, files under sglang/srt, literal(s) in the format (any of them; "!x": not containing x), what)
FAMILIES = {
    "ready": (True, ["entrypoints/http_server.py"], "fired up and ready to roll",
              "the ready line, printed once after the warm-up request succeeded"),
    "server_args": (True, ["entrypoints/engine.py"], "server_args=",
                    "the launch arguments, keys included (masked by the server role's launcher)"),
    "load_weight_end": (True, ["model_executor/model_runner.py"], "Load weight end. ",
                        "per rank, after the weights are on the GPU"),
    "kv_pool": (True, ["mem_cache/memory_pool.py"], ("#tokens: {", "!skipped"),
                "per rank: the device KV pool (and the draft model's with EAGLE)"),
    "max_total_num_tokens": (True, ["managers/scheduler.py"], "max_total_num_tokens={",
                             "TP0's summary of the KV pool"),
    "hicache_host_pool": (True, ["mem_cache/memory_pool_host.py", "mem_cache/pool_host/base.py"],
                          ("host memory for hierarchical KV cache", "hierarchical KV host pool"),
                          "per rank: the HiCache host pool of the KV cache (and of the draft model where it has one)"),
    "hicache_mamba_host_pool": (False, ["mem_cache/pool_host/mamba.py"], "hierarchical Mamba cache",
                                "per rank: the HiCache host pool of a hybrid model's Mamba state"),
    "hicache_auto_size": (False, ["mem_cache/hicache_auto_size.py"], "HiCache auto-sizing: ratio",
                          "the HiCache ratio that auto-sizing chose (neither --hicache-ratio nor --hicache-size)"),
    "mamba_pool": (False, ["mem_cache/memory_pool.py"], "Mamba Cache is allocated",
                   "per rank: a hybrid model's Mamba state pool"),
    "fatal_host_memory": (True, ["mem_cache/memory_pool_host.py", "mem_cache/pool_host/base.py"],
                          "Not enough host memory available", "per rank: the host pool does not fit (ValueError)"),
    "fatal_host_smaller": (False, ["mem_cache/memory_pool_host.py", "mem_cache/pool_host/base.py"],
                           "host memory should be larger than the device memory",
                           "an assert: --hicache-ratio at most 1"),
    "fatal_hicache_reserve": (False, ["mem_cache/hicache_auto_size.py"], "No host memory is left for HiCache",
                              "HiCache auto-sizing found nothing above the 10 GiB reserve"),
    "fatal_kv_memory": (True, ["model_executor/model_runner_kv_cache_mixin.py", "model_executor/pool_configurator.py"],
                        "Not enough memory. Please try to increase", "the device KV pool does not fit"),
    "fatal_cuda_graph": (True, ["model_executor/cuda_graph_runner.py",
                                "model_executor/runner/decode_cuda_graph_runner.py"],
                         "Capture cuda graph failed", "CUDA graph capture failed"),
    "fatal_radix_exclusive": (True, ["server_args.py", "arg_groups/kv_cache_hook.py"],
                              "enable-hierarchical-cache and disable-radix-cache are mutually exclusive",
                              "HiCache needs the radix cache"),
    "fatal_spec_v2_topk": (False, ["server_args.py"], "Spec v2 currently only supports topk = 1",
                           "spec v2 with topk > 1"),
    "fatal_warmup": (True, ["entrypoints/http_server.py"], "Initialization failed. warmup error",
                     "the warm-up request failed"),
    "fatal_rank_dead": (False, ["entrypoints/engine.py"], "scheduler is dead", "a scheduler died (0.5.9)"),
    "fatal_rank_died_init": (False, ["entrypoints/engine.py"], "scheduler died during initialization",
                             "a scheduler died during initialization"),
    "fatal_scheduler_exception": (True, ["managers/scheduler.py"], "Scheduler hit an exception",
                                  "a scheduler raised"),
    "fatal_child_sigquit": (True, ["entrypoints/engine.py"], "Received sigquit from a child process",
                            "the main process learned a child failed (launch phase)"),
    "fatal_sigquit": (True, ["managers/tokenizer_manager.py"], "It usually means one child failed",
                      "the main process learned a child failed (running phase)"),
    "fatal_init_failed": (True, ["entrypoints/engine.py"], "Initialization failed. Please see the error messages",
                          "start-up failed"),
    "pd_bootstrap_started": (False, ["disaggregation/common/conn.py"], "KVBootstrapServer started successfully",
                             "a prefill server's KV bootstrap server listens (PD disaggregation; 0.5.9 prints "
                             "nothing there)"),
    # the start-up timeline of a restart (issue 49, _timeline.py): where each phase ends, per rank
    "load_weight_begin": (False, ["model_executor/model_runner.py"], "Load weight begin.",
                          "per rank, before the first weight is read"),
    "cuda_graph_end": (False, ["model_executor/model_runner.py", "model_executor/model_runner_components/cuda_graph_setup.py",
                               "speculative/eagle_worker.py", "speculative/eagle_worker_v2.py"],
                       (" end. Time elapsed: ", "graph end. elapsed="),
                       "per rank, each CUDA graph capture done (target decode/prefill, piecewise, the draft's)"),
    "engine_startup_timings": (False, ["entrypoints/engine.py"], "Engine startup timings",
                               "SGLang's own start-up timings, once, before the HTTP server (0.5.17+)"),
    "nonzero_node_sigterm": (False, ["entrypoints/engine.py"], "SIGTERM received on node_rank",
                             "a node other than node 0 of a multi-node server got SIGTERM and waits for node 0's "
                             "shutdown broadcast"),
}


def _find_line(source, needle):
    for number, line in enumerate(source.splitlines(), 1):
        if needle in line:
            return number
    return None


def _reserve(source):
    """The HiCache host reserve in bytes: ``X = 10 * (1024**3)`` as SGLang writes it (evaluated from the AST)."""
    for node in ast.walk(ast.parse(source)):
        target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
        name = getattr(target, "id", "")
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and name in ("HICACHE_HOST_MEMORY_RESERVE_BYTES", "ten_gb"):
            value = eval(compile(ast.Expression(node.value), "<reserve>", "eval"), {"__builtins__": {}})  # numbers only
            return int(value), node.lineno
    return None, None


# How a release sizes HiCache's host pools (the memory plan uses these): name -> (files, detector(source) ->
# (value, line) or (None, None)). The first file that exists and answers decides.
RULES = {
    # 0.5.9 memory_pool_host.py: each rank checks its pool alone against MemAvailable - 10 GiB (``ten_gb``, from
    # 0.5.11 the constant HICACHE_HOST_MEMORY_RESERVE_BYTES);
    # 0.5.23 pool_host/base.py host_memory_budget_bytes: (cgroup-aware available - 10 GiB) // ranks on the host.
    "hicache_budget": (["mem_cache/pool_host/base.py", "mem_cache/memory_pool_host.py"], "_hicache_budget"),
    "hicache_reserve_bytes": (["mem_cache/pool_host/base.py", "mem_cache/memory_pool_host.py"], _reserve),
    # with EAGLE the draft model gets a host pool of the target's tokens (hybrid_pool_assembler: pool_label="draft")
    "hicache_draft_host_pool": (["mem_cache/hybrid_cache/hybrid_pool_assembler.py"],
                                lambda src: (True, _find_line(src, 'pool_label="draft"'))
                                if 'pool_label="draft"' in src else (None, None)),
    # neither --hicache-ratio nor --hicache-size: the ratio is sized to the host (hicache_auto_size.py)
    "hicache_auto_size": (["mem_cache/hicache_auto_size.py"],
                          lambda src: (True, _find_line(src, "def auto_size_hicache")) if "def auto_size_hicache" in src
                          else (None, None)),
    # --model-loader-extra-config's enable_multithread_load when not given (model_loader/loader.py): False in 0.5.9
    # (the Kimi profile turns it on: 64 shards load ~4x faster, sgl-project/sglang#18124), True from 0.5.10
    "multithread_load_default": (["model_loader/loader.py"], "_multithread_default"),
    # --cuda-graph-max-bs split into --cuda-graph-max-bs-decode / -prefill (0.5.20+): the old name is then an
    # ambiguous prefix, and argparse exits at start-up ("ambiguous option: --cuda-graph-max-bs could match ...")
    "cuda_graph_max_bs_split": (["arg_groups/fields/exec_.py"], "_has_field:cuda_graph_max_bs_decode"),
    # --enable-flashinfer-allreduce-fusion deprecated for --flashinfer-allreduce-fusion-backend
    "flashinfer_allreduce_fusion_backend": (["arg_groups/fields/exec_.py"],
                                            "_has_field:flashinfer_allreduce_fusion_backend"),
    # --mamba-scheduler-strategy renamed --mamba-radix-cache-strategy (same choices: no_buffer, extra_buffer, ...)
    "mamba_radix_cache_strategy": (["arg_groups/fields/exec_.py"], "_has_field:mamba_radix_cache_strategy"),
    # HiCache for a hybrid model's Mamba state (mem_cache/pool_host/mamba.py, after 0.5.9): the Qwen3.5 profile turns
    # HiCache on only where the release has it (0.5.9's HiRadixCache keeps no Gated DeltaNet state)
    "hicache_mamba": (["mem_cache/pool_host/mamba.py"],
                      lambda src: (True, _find_line(src, "hierarchical Mamba cache"))
                      if "hierarchical Mamba cache" in src else (None, None)),
    # How a hybrid model's Mamba state pool is sized (the memory plan, issue 24), r = --mamba-full-memory-ratio:
    # "ratio_split" (0.5.9-0.5.12 model_runner_kv_cache_mixin.handle_max_mamba_cache: the speculative reserve first,
    # then rest x r / (1 + r)); "joint_solve" (0.5.13-0.5.16: slots and speculative scratch solved together,
    # slots = budget // (per_req (1 + D / ratio)), no padding slot); "joint_spec_solve" (0.5.17+
    # kv_cache_configurator._handle_max_mamba_cache: the same with a padding slot, (budget - per_req (1 + D)) //
    # ..., fused draft entries, ReplaySSM) - the plan models the standard path of each and says so for the last two
    "hybrid_mamba_sizing": (["mem_cache/kv_cache_configurator.py", "model_executor/model_runner_kv_cache_mixin.py"],
                            "_hybrid_mamba_sizing"),
    # --mamba-full-memory-ratio's default (state memory : full-attention KV memory)
    "mamba_full_memory_ratio_default": (["server_args.py", "arg_groups/fields/schedule.py"],
                                        lambda src: _field_default(src, "mamba_full_memory_ratio")),
    # state slots per running request (the cap on running requests is the pool's slots // this, plus the
    # extra_buffer slots)
    "mamba_slots_per_request_base": (["mem_cache/kv_cache_configurator.py",
                                      "model_executor/model_runner_kv_cache_mixin.py"],
                                     lambda src: _regex_value(src, r"MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = (\d+)",
                                                              cast=int)),
    # --max-running-requests when speculative decoding is on and none is given
    "spec_max_running_requests_default": (["server_args.py", "arg_groups/speculative_hook.py"],
                                          lambda src: _regex_value(src, r"(?:self|server_args)\.max_running_requests = (\d+)",
                                                                   r"max_running_requests=(\d+)", cast=int)),
    # A server over several hosts (--nnodes): which global TP ranks a node runs (entrypoints/engine.py, 0.5.9
    # _launch_subprocesses, 0.5.23 _compute_node_rank_ranges): "contiguous" = tp_size // nnodes_per_tp_group ranks
    # from tp_size_per_node * (node_rank % nnodes_per_tp_group); each node's journal holds its own ranks' lines
    "node_tp_ranks": (["entrypoints/engine.py"],
                      lambda src: _regex_value(src, r"(tp_size_per_node \* \((?:server_args\.)?node_rank % nnodes_per_tp_group)",
                                               cast=lambda _code: "contiguous")),
    # What SIGTERM does to a node other than node 0: "waits_for_node0" (0.5.23: a handler that logs and waits for
    # node 0's ShutdownReq broadcast; systemd's TimeoutStopSec is the backstop) or "exits" (0.5.9: no handler,
    # Python's default ends the process)
    "nonzero_node_sigterm": (["entrypoints/engine.py"],
                             lambda src: ("waits_for_node0", _find_line(src, "SIGTERM received on node_rank"))
                             if "SIGTERM received on node_rank" in src else
                             ("exits", _find_line(src, "node_rank >= 1")) if "node_rank >= 1" in src else (None, None)),
    # The path a prefill server's KV bootstrap server answers 200 on (CommonKVBootstrapServer: "OK"); a decode
    # server reaches the prefill's bootstrap port, so the server role proves a prefill server by it
    "pd_bootstrap_health_path": (["disaggregation/common/conn.py"],
                                 lambda src: _regex_value(src, r'add_get\(\s*"(/[a-z_]+)",\s*self\._handle_health_check')),
    # The port a prefill server's KV bootstrap server listens on when --disaggregation-bootstrap-port is not given
    "pd_bootstrap_port_default": (["server_args.py", "arg_groups/fields/disagg.py"],
                                  lambda src: _regex_value(src, r"disaggregation_bootstrap_port: int = (\d+)",
                                                           r"disaggregation_bootstrap_port: A\[[^\]]*\] = (\d+)", cast=int)),
    # Whether a decode server of a PD pair can have the radix cache (which HiCache needs): "never" (0.5.9: the decode
    # branch of _handle_pd_disaggregation forces disable_radix_cache) or "with_flag" (0.5.23: only with
    # --disaggregation-decode-enable-radix-cache); the server role refuses HiCache on a decode server without it
    "pd_decode_radix_cache": (["arg_groups/pd_disaggregation_hook.py", "server_args.py"],
                              lambda src: ("with_flag", _find_line(src, "if cfg.disaggregation_decode_enable_radix_cache:"))
                              if "if cfg.disaggregation_decode_enable_radix_cache:" in src else
                              ("never", _find_line(src, "KV cache is forced as chunk cache for decode server"))
                              if "KV cache is forced as chunk cache for decode server" in src else (None, None)),
    # ModelOpt NVFP4 on SM120 (RTX PRO 6000 Blackwell, compute capability 12.0): the release's modelopt_quant.py
    # has a path for it (0.5.9: is_sm120_supported(); 0.5.23: get_platform().is_sm120); the model preflight
    # refuses NVFP4 on an SM120 GPU with a release that has none
    "nvfp4_sm120": (["layers/quantization/modelopt_quant.py"],
                    lambda src: (True, _find_line(src, "sm120")) if "sm120" in src else (None, None)),
    # The Weight Cache Daemon (issue 49, roles/weight_cache): the standalone `python -m sglang.srt.weight_cache.daemon`
    # (0.5.17+), the quantizations its CUDA IPC export allows (protocol.py IPC_QUANT_ALLOWLIST: method -> the
    # quantization_config field it needs, "" for none), and whether server_args refuses it beside speculative decoding
    "weight_cache_daemon": (["weight_cache/daemon.py"],
                            lambda src: (True, _find_line(src, "if __name__ == \"__main__\":"))
                            if "if __name__ == \"__main__\":" in src else (None, None)),
    "weight_cache_quant_allowlist": (["weight_cache/protocol.py"], "_ipc_quant_allowlist"),
    "weight_cache_refuses_speculative": (["server_args.py", "arg_groups/model_path_hook.py"],
                                         lambda src: (True, _find_line(src, "--weight-cache-mode is not supported together with speculative"))
                                         if "--weight-cache-mode is not supported together with speculative" in src else (None, None)),
    # --weight-loader-prefetch-checkpoints (0.5.11+) and --weight-loader-drop-cache-after-load (0.5.12+)
    "weight_loader_prefetch": (["server_args.py", "arg_groups/fields/model.py"],
                               "_has_field:weight_loader_prefetch_checkpoints"),
    "weight_loader_drop_cache": (["server_args.py", "arg_groups/fields/model.py"],
                                 "_has_field:weight_loader_drop_cache_after_load"),
    # SGLANG_CACHE_DIR (environ.py, 0.5.11+) and the compiler caches the release points under it itself
    # (third_party_cache_defaults, 0.5.18+: set only where not set already); the unit sets each of them
    "sglang_cache_dir_env": (["environ.py"], lambda src: (True, _find_line(src, "SGLANG_CACHE_DIR = EnvStr"))
                             if "SGLANG_CACHE_DIR = EnvStr" in src else (None, None)),
    "cache_dir_redirects": (["environ.py"], "_cache_dir_redirects"),
}
RULE_DEFAULTS = {"hicache_mamba": False, "nvfp4_sm120": False, "hicache_draft_host_pool": False, "hicache_auto_size": False, "cuda_graph_max_bs_split": False,
                 "flashinfer_allreduce_fusion_backend": False, "mamba_radix_cache_strategy": False,
                 "weight_cache_daemon": False, "weight_cache_quant_allowlist": {}, "weight_cache_refuses_speculative": False,
                 "weight_loader_prefetch": False, "weight_loader_drop_cache": False, "sglang_cache_dir_env": False,
                 "cache_dir_redirects": []}


def _regex_value(source, *patterns, cast=str):
    """(value, line) of the first pattern's first group that matches, else (None, None)."""
    for pattern in patterns:
        match = re.search(pattern, source, re.S)
        if match:
            return cast(match.group(1)), source[:match.start(1)].count("\n") + 1
    return None, None


def _hicache_budget(source):
    """(kind, line): "per_rank_share" where the budget is divided by the ranks on the host, "each_rank_alone" where
    each rank's pool is checked alone against the host's available memory less the reserve."""
    if "// ranks_per_host()" in source:
        return "per_rank_share", _find_line(source, "// ranks_per_host()")
    return _regex_value(source, r"(host_mem\.available - (?:ten_gb|HICACHE_HOST_MEMORY_RESERVE_BYTES)\b)",
                        cast=lambda _code: "each_rank_alone")


def _hybrid_mamba_sizing(source):
    for kind, pattern in (("joint_spec_solve", r"(mamba_budget_bytes\s*-\s*per_req\s*\*\s*\(1 \+ D\))"),
                          ("joint_solve", r"(mamba_budget_bytes\s*//\s*\(per_req\s*\*\s*\(1 \+ D / ratio\)\))"),
                          ("ratio_split", r"(mamba_state_intermediate_size)")):
        value, line = _regex_value(source, pattern, cast=lambda _code, kind=kind: kind)
        if value:
            return value, line
    return None, None


class _NotLiteral(Exception):
    pass


def _arg_keywords(annotation):
    """The keywords of ``Arg(...)`` in a field's ``A[type, Arg(...)]`` annotation (0.5.16+), else {}."""
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple)):
        return {}
    for item in annotation.slice.elts[1:]:
        if isinstance(item, ast.Call) and getattr(item.func, "id", "") == "Arg":
            return {k.arg: k.value for k in item.keywords if k.arg}
    return {}


def _value_of(node):
    """A field's default as a Python value: a literal, ``field(default=literal)``, or a literal ``fallback=``."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "field":
        keywords = {k.arg: k.value for k in node.keywords}
        if "default" not in keywords:
            raise _NotLiteral(ast.unparse(node))
        node = keywords["default"]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise _NotLiteral(ast.unparse(node))


def server_fields(source, classes=None):
    """{field: {"value", "fallback"?, "line"} or {"expr", "line"}} of the dataclass fields SGLang builds its
    command line from (``name: type = default`` in ServerArgs, 0.5.9; ``name: A[type, "help" | Arg(...)] = default``
    in ServerArgs or arg_groups/fields/*.py, 0.5.16+). ``value`` is the declared default (None: SGLang computes it
    at start-up); ``fallback`` is Arg's scalar used when neither the command line nor a resolution hook gives one;
    ``expr`` is a default that is not a literal (its code)."""
    out = {}
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef) or (classes is not None and cls.name not in classes):
            continue
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)) or node.value is None:
                continue
            entry = {"line": node.lineno}
            try:
                entry["value"] = _value_of(node.value)
            except _NotLiteral as exc:
                entry["expr"] = str(exc)
            fallback = _arg_keywords(node.annotation).get("fallback")
            if fallback is not None:
                try:
                    entry["fallback"] = _value_of(fallback)
                except _NotLiteral:
                    pass
            out.setdefault(node.target.id, entry)
    return out


def _field_default(source, name):
    """(default, line) of one field: the declared literal, else its fallback; (None, None) when neither."""
    entry = server_fields(source).get(name)
    if not entry:
        return None, None
    value = entry.get("value")
    if value is None:
        value = entry.get("fallback")
    return (value, entry["line"]) if value is not None else (None, None)


# SGLang's defaults the collection states (issue 39: one table): ServerArgs' fields, read from each wheel
DEFAULT_FIELDS = (
    "tp_size", "dp_size", "pp_size", "nnodes", "enable_hierarchical_cache", "hicache_ratio", "hicache_size",
    "hicache_write_policy", "hicache_io_backend", "hicache_mem_layout", "hicache_host_memory_fraction",
    "disable_radix_cache", "mem_fraction_static", "page_size", "attention_backend", "kv_cache_dtype",
    "max_running_requests", "max_total_tokens", "chunked_prefill_size", "context_length", "host", "port",
    "enable_metrics", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
# fields only some releases have (absent from the others' tables)
OPTIONAL_DEFAULT_FIELDS = ("hicache_host_memory_fraction",)
DEFAULTS_FILES = [("server_args.py", ("ServerArgs",)), ("arg_groups/fields/*.py", None)]


def server_defaults_of(archive, names):
    """{field: {"value": declared default (None: computed at start-up), "fallback"?: Arg's fallback, "source"}}
    for DEFAULT_FIELDS, from the release's ServerArgs (server_args.py, or arg_groups/fields/*.py from 0.5.20)."""
    found = {}
    for pattern, classes in DEFAULTS_FILES:
        for path in sorted(n for n in names if fnmatch.fnmatch(n, "sglang/srt/" + pattern)):
            fields = server_fields(archive.read(path).decode("utf-8-sig"), classes)
            for name in DEFAULT_FIELDS:
                if name in fields and name not in found:
                    entry = dict(fields[name], source="%s:%d" % (path, fields[name]["line"]))
                    del entry["line"]
                    if "expr" in entry:
                        raise SystemExit("%s's default is not a literal (%s): review the release and server_fields"
                                         % (name, entry["expr"]))
                    found[name] = entry
    missing = [name for name in DEFAULT_FIELDS if name not in found and name not in OPTIONAL_DEFAULT_FIELDS]
    if missing:
        raise SystemExit("ServerArgs fields not found: %s: review the release and DEFAULT_FIELDS" % ", ".join(missing))
    return found


def _multithread_default(source):
    match = re.search(r'extra_config\.get\(\s*"enable_multithread_load",\s*(True|False)\s*\)', source)
    if not match:
        return None, None
    return match.group(1) == "True", source[:match.start()].count("\n") + 1


def _ipc_quant_allowlist(source):
    """({method: the quantization_config field its predicate needs, or ""}, line) of protocol.py's
    IPC_QUANT_ALLOWLIST (a lambda that returns True needs nothing; a named predicate, the field it reads)."""
    tree = ast.parse(source)
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "IPC_QUANT_ALLOWLIST":
            allowed = {}
            for key, value in zip(node.value.keys, node.value.values):
                field = ""
                if isinstance(value, ast.Name) and value.id in functions:
                    reads = [sub.value for sub in ast.walk(functions[value.id])
                             if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier()]
                    field = reads[0] if reads else value.id
                allowed[key.value] = field
            return allowed, node.lineno
    return None, None


def _cache_dir_redirects(source):
    """(sorted variable names, line) that environ.py's third_party_cache_defaults points under SGLANG_CACHE_DIR."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "third_party_cache_defaults":
            names = [sub.value for ret in ast.walk(node) if isinstance(ret, ast.Dict)
                     for sub in ret.keys if isinstance(sub, ast.Constant)]
            return sorted(names), node.lineno
    return None, None


def _has_field(source, name):
    """(True, line) when a class of that file declares the field ``name`` (an annotated assignment: the
    dataclass fields SGLang builds its command line from), else (None, None)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            return True, node.lineno
    return None, None


def architectures_of(archive, names):
    """{architecture: "file:line"}: every model class the release's registry can load, i.e. each name a module of
    sglang/srt/models/ assigns to EntryClass (the registry imports each module and reads EntryClass); config.json's
    ``architectures[0]`` must be one of them."""
    found = {}
    for path in sorted(names):
        if not (path.startswith("sglang/srt/models/") and path.endswith(".py")):
            continue
        for node in ast.walk(ast.parse(archive.read(path).decode("utf-8-sig"))):
            if not (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EntryClass" for t in node.targets)):
                continue
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for value in values:
                if isinstance(value, ast.Name):
                    found.setdefault(value.id, "%s:%d" % (path, node.lineno))
    if not found:
        raise SystemExit("no EntryClass in sglang/srt/models/: review the release and architectures_of")
    return found


def _returned(function):
    """The first ``return`` of a method: ('const', value) or ('call', class name) for ``return X.method()``."""
    for node in ast.walk(function):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Constant):
                return "const", node.value.value
            func = getattr(node.value, "func", None)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                return "call", func.value.id
            return None, None
    return None, None


def quant_capabilities_of(archive, names):
    """{quant_method: {"value": min compute capability x 10, "source": "file:line"}} from every quantization
    config class of the release: get_name() and get_min_capability() (the model loader refuses a GPU below it,
    model_loader/loader.py). ``return Other.get_min_capability()`` takes the other class's value."""
    classes = {}
    for path in sorted(names):
        if not (path.startswith("sglang/srt/layers/quantization/") and path.endswith(".py")):
            continue
        for node in ast.walk(ast.parse(archive.read(path).decode("utf-8-sig"))):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
            if "get_min_capability" not in methods:
                continue
            classes[node.name] = {"name": _returned(methods["get_name"]) if "get_name" in methods else (None, None),
                                  "cap": _returned(methods["get_min_capability"]),
                                  "source": "%s:%d" % (path, methods["get_min_capability"].lineno)}
    found = {}
    for cls in classes.values():
        kind, name = cls["name"]
        if kind != "const" or not isinstance(name, str):
            continue
        kind, cap = cls["cap"]
        if kind == "call" and cap in classes and classes[cap]["cap"][0] == "const":
            cap = classes[cap]["cap"][1]
        elif kind != "const":
            continue
        if isinstance(cap, int) and not isinstance(cap, bool):
            found.setdefault(name, {"value": cap, "source": cls["source"]})
    if "modelopt_fp4" not in found:
        raise SystemExit("modelopt_fp4's minimum capability not found: review the release and quant_capabilities_of")
    return found


def rules_of(archive, names):
    found = {}
    for rule, (files, detect) in RULES.items():
        for pattern in files:
            path = "sglang/srt/" + pattern
            if path not in names:
                continue
            source = archive.read(path).decode("utf-8")
            if isinstance(detect, str) and detect.startswith("_has_field:"):
                value, line = _has_field(source, detect.split(":", 1)[1])
            else:
                value, line = (globals()[detect] if isinstance(detect, str) else detect)(source)
            if value is not None:
                found[rule] = {"value": value, "source": "%s:%d" % (path, line)}
                break
        if rule not in found:
            if rule not in RULE_DEFAULTS:
                raise SystemExit("rule %s not found in %s: review the release and RULES" % (rule, files))
            found[rule] = {"value": RULE_DEFAULTS[rule], "source": "not in the wheel"}
    return found


def _literal(text):
    return text.replace("{", "{{").replace("}", "}}")


class Unmapped(Exception):
    pass


def _field(expr, spec, counter):
    src = ast.unparse(expr)
    if src in CHOICES:
        return _literal(CHOICES[src])
    name = FIELDS.get(src)
    if name is None and isinstance(expr, (ast.Name, ast.Attribute)):
        # a plain variable or attribute: named after it (the stand-in fills it by that name); never one of the
        # names the collection reads (READ_NAMES), which only FIELDS may give
        tail = expr.id if isinstance(expr, ast.Name) else expr.attr
        name = tail if tail not in READ_NAMES and not tail.startswith("_") else None
    if name is None:
        counter[0] += 1
        name = "_%d" % counter[0]
    return "{%s%s}" % (name, (":" + spec) if spec else "")


def _spec(node):
    if node is None:
        return ""
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(v.value for v in node.values)
    raise Unmapped("a computed format spec %r" % ast.unparse(node))


def template_of(fmt, args=()):
    """The str.format template of one logging format: an f-string (JoinedStr), a str, or a %-format and its
    argument expressions. Self-documenting f-strings (``{x=}``) come parsed as a literal ``x=`` and the value's
    repr, so they need nothing special."""
    counter = [0]
    if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str):
        if not args:
            return _literal(fmt.value)
        out, pos, index = [], 0, 0
        for match in re.finditer(r"%(?:\((\w+)\))?([-#0 +]*\d*(?:\.\d+)?)([sdrfgei%])", fmt.value):
            out.append(_literal(fmt.value[pos:match.start()]))
            pos = match.end()
            if match.group(3) == "%":
                out.append("%")
                continue
            conv = match.group(3)
            spec = match.group(2) + ("d" if conv in "di" else conv if conv in "fge" else "")
            out.append(_field(args[index], spec, counter))
            index += 1
        out.append(_literal(fmt.value[pos:]))
        return "".join(out)
    if isinstance(fmt, ast.JoinedStr):
        out = []
        for value in fmt.values:
            if isinstance(value, ast.Constant):
                out.append(_literal(value.value))
            else:
                out.append(_field(value.value, _spec(value.format_spec), counter))
        return "".join(out)
    if isinstance(fmt, ast.BinOp) and isinstance(fmt.op, ast.Add):
        return template_of(fmt.left) + template_of(fmt.right)
    raise Unmapped("a format that is neither a string nor an f-string: %r" % ast.unparse(fmt))


def _format_text(node):
    """The literal text of a format node (to find the anchor in), fields blanked to '{'."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _format_text(node.left) + _format_text(node.right)
    return ""


def _matches(text, anchor):
    anchors = (anchor,) if isinstance(anchor, str) else anchor
    if any(a.startswith("!") and a[1:] in text for a in anchors):
        return False
    return any(a in text for a in anchors if not a.startswith("!"))


def find(source, anchor):
    """[(line, call code, template)] of every call whose first argument's text contains the anchor."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _matches(_format_text(node.value), anchor):
            # msg = "..." then raise X(msg): the assigned text is the message
            node = ast.Call(func=ast.Name(id="log"), args=[node.value], keywords=[], lineno=node.lineno)
        elif isinstance(node, ast.Assert) and node.msg is not None and _matches(_format_text(node.msg), anchor):
            node = ast.Call(func=ast.Name(id="log"), args=[node.msg], keywords=[], lineno=node.lineno)
        if not isinstance(node, ast.Call) or not node.args:
            continue
        fmt = node.args[0]
        if not _matches(_format_text(fmt), anchor):
            continue
        code = ast.unparse(ast.Call(func=ast.Name(id="log"), args=node.args, keywords=[]))
        try:
            found.append((node.lineno, code, template_of(fmt, node.args[1:])))
        except Unmapped as exc:
            raise Unmapped("line %d: %s" % (node.lineno, exc))
    return found


def template_of_code(code):
    """The template of a fixture's recorded call code (``log(<format>, <args>...)``)."""
    call = ast.parse(code, mode="eval").body
    return template_of(call.args[0], call.args[1:])


def extract(wheel):
    families = {}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        families["_rules"] = rules_of(archive, names)
        families["_defaults"] = server_defaults_of(archive, names)
        families["_models"] = {"architectures": architectures_of(archive, names),
                               "quant_min_capability": quant_capabilities_of(archive, names)}
        for family, (required, files, anchor, what) in FAMILIES.items():
            hits = []
            for pattern in files:
                path = "sglang/srt/" + pattern
                if path not in names:
                    continue
                source = archive.read(path).decode("utf-8")
                try:
                    hits_here = find(source, anchor)
                except Unmapped as exc:
                    raise SystemExit("%s %s %s %s" % (os.path.basename(wheel), family, path, exc))
                for line, code, template in hits_here:
                    hits.append({"source": "%s:%d" % (path, line), "code": code, "template": template})
            seen, unique = set(), []
            for hit in hits:
                if hit["template"] not in seen:
                    seen.add(hit["template"])
                    unique.append(hit)
            if unique:
                families[family] = unique
            elif required:
                raise SystemExit("%s: family %s (%s) not found in %s with %r: review the release and FAMILIES"
                                 % (os.path.basename(wheel), family, what, files, anchor))
    return families


def server_args_form(families):
    template = families["server_args"][0]["code"]
    # 0.5.19-0.5.21 log server_args.resolved_dict(), 0.5.22+ _server_args_for_logging(server_args): a dict
    return "dict" if "_server_args_for_logging" in template or ".resolved_dict()" in template else "repr"


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(version):
    os.makedirs(CACHE, exist_ok=True)
    found = glob.glob(os.path.join(CACHE, "sglang-%s-*.whl" % version))
    if not found:
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", CACHE,
                               "sglang==%s" % version])
        found = glob.glob(os.path.join(CACHE, "sglang-%s-*.whl" % version))
    return sorted(found)[0]


def _vkey(version):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", version))


def fixtures():
    out = {}
    for path in sorted(glob.glob(os.path.join(FIXTURES, "*.json"))):
        with open(path) as handle:
            data = json.load(handle)
        out[data["release"]] = data
    return out


def table_from(fixtures_by_release):
    releases = {}
    for version in sorted(fixtures_by_release, key=_vkey):
        data = fixtures_by_release[version]
        releases[version] = {
            "wheel": data["wheel"], "sha256": data["sha256"], "server_args_form": data["server_args_form"],
            "rules": {name: rule["value"] for name, rule in sorted(data.get("rules", {}).items())},
            "architectures": sorted(data.get("models", {}).get("architectures", {})),
            "quant_min_capability": {name: cap["value"] for name, cap in
                                     sorted(data.get("models", {}).get("quant_min_capability", {}).items())},
            "texts": {family: [hit["template"] for hit in hits] for family, hits in sorted(data["families"].items())},
            "defaults": {name: field["value"] for name, field in sorted(data.get("defaults", {}).items())},
        }
    return releases


def render_table(releases):
    lines = [
        "# -*- coding: utf-8 -*-",
        "# SPDX-License-Identifier: GPL-3.0-or-later",
        '"""SGLang\'s texts per release, GENERATED by scripts/gen-sglang-texts.py from each release\'s wheel (do not',
        "edit: run the script). Templates in str.format syntax; _sglang_logs turns them into regexes. The fixtures",
        'tests/fixtures/sglang/<release>.json hold the code each template came from, with file:line and the sha256."""',
        "",
        "from __future__ import annotations",
        "",
        "RELEASES = %s" % _pyrepr(releases),
        "",
    ]
    return "\n".join(lines) + ACCESSORS


# Written after RELEASES in the generated table: how the collection reads SGLang's defaults (issue 39)
ACCESSORS = '''

def _vkey(version):
    return tuple(int(x) if x.isdigit() else 0 for x in (version or "").replace("+", ".").replace("-", ".").split("."))


def release_for_defaults(release=None):
    """(table release, note) whose defaults stand for ``release``: its own table; a release without one: the
    newest older table's (the oldest's when it is older than every table); not given: the newest table's."""
    known = sorted(RELEASES, key=_vkey)
    if not release:
        return known[-1], "release not given: SGLang %s's defaults" % known[-1]
    if release in RELEASES:
        return release, "SGLang %s's defaults (from its wheel)" % release
    older = [r for r in known if _vkey(r) <= _vkey(release)]
    chosen = older[-1] if older else known[0]
    return chosen, "SGLang %s has no release table: %s's defaults" % (release, chosen)


def server_defaults(release=None):
    """SGLang's own defaults for ``release`` (ServerArgs' declared defaults, taken from the wheel): tp_size,
    enable_hierarchical_cache, hicache_ratio, hicache_write_policy, hicache_io_backend, mem_fraction_static,
    page_size, attention_backend, the speculative settings ... None where SGLang computes the value at start-up
    (mem_fraction_static; hicache_ratio from 0.5.18). A copy: the caller may change it."""
    return dict(RELEASES[release_for_defaults(release)[0]]["defaults"])


def server_default(name, release=None):
    """One of server_defaults(release); KeyError for a field the table does not hold."""
    return RELEASES[release_for_defaults(release)[0]]["defaults"][name]
'''


def _strrepr(text, pad, width=100):
    """A string's repr, cut into adjacent literals of at most ``width`` characters (line length)."""
    if not isinstance(text, str) or len(repr(text)) <= width:
        return repr(text)
    pieces = [text[i:i + width - 10] for i in range(0, len(text), width - 10)]
    return "(\n" + "".join("%s    %r\n" % (pad, piece) for piece in pieces) + pad + ")"


def _pyrepr(value, indent=0):
    pad = "    " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = ["%s%r: %s," % (pad, key, _pyrepr(val, indent + 1)) for key, val in value.items()]
        return "{\n" + "\n".join(items) + "\n" + "    " * indent + "}"
    if isinstance(value, list) and len(value) > 20 and all(isinstance(i, str) and i and i.split() == [i] for i in value):
        # a long list of names (architectures): one string split, which Python compiles ~10x faster than a list
        # of that many literals (the table is imported by every module that reads a release)
        lines, line = [], ""
        for item in value:
            if line and len(line) + len(item) > 90:
                lines.append(line)
                line = ""
            line += item + " "
        lines.append(line)
        return "(\n" + "".join("%s%r\n" % (pad, text) for text in lines) + "    " * indent + ").split()"
    if isinstance(value, list):
        items = ["%s%s," % (pad, _strrepr(item, pad)) for item in value]
        return "[\n" + "\n".join(items) + "\n" + "    " * indent + "]"
    return repr(value)


def check():
    problems = []
    data = fixtures()
    for version, fixture in data.items():
        for family, hits in fixture["families"].items():
            for hit in hits:
                derived = template_of_code(hit["code"])
                if derived != hit["template"]:
                    problems.append("%s %s %s: the fixture's template %r is not what its code gives (%r)"
                                    % (version, family, hit["source"], hit["template"], derived))
    with open(TABLE) as handle:
        current = handle.read()
    if current != render_table(table_from(data)):
        problems.append("%s differs from the fixtures: run scripts/gen-sglang-texts.py <release> for each "
                        "release, or restore it" % os.path.relpath(TABLE, ROOT))
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("release", nargs="?")
    parser.add_argument("--wheel")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        return check()
    if not args.release:
        parser.error("a release (e.g. 0.5.23) or --check")
    wheel = args.wheel or download(args.release)
    families = extract(wheel)
    rules = families.pop("_rules")
    models = families.pop("_models")
    defaults = families.pop("_defaults")
    fixture = {
        "release": args.release, "wheel": os.path.basename(wheel), "sha256": sha256(wheel),
        "server_args_form": server_args_form(families), "families": families, "rules": rules, "models": models,
        "defaults": defaults,
    }
    os.makedirs(FIXTURES, exist_ok=True)
    with open(os.path.join(FIXTURES, "%s.json" % args.release), "w") as handle:
        json.dump(fixture, handle, indent=1, sort_keys=True)
        handle.write("\n")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(TABLE))
    with os.fdopen(fd, "w") as handle:
        handle.write(render_table(table_from(fixtures())))
    os.chmod(tmp, 0o644)
    os.replace(tmp, TABLE)
    print("%s: %d families from %s (sha256 %s)" % (args.release, len(families), fixture["wheel"], fixture["sha256"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
