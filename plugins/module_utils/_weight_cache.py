# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright (c) gpuserve.sglang maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart downtime (issue 49): what the release offers, read from its wheel (``_sglang_releases`` rules), and the
collection's decisions on it. Pure functions, no host access (tests/unit/plugins/module_utils/test_weight_cache.py).

- the Weight Cache Daemon: ``refusals`` (release, speculative decoding, quantization allow-list, one host),
  ``ready_files`` (the files the standalone daemon writes when every rank holds its weights),
  ``client_flags`` (the server's ``--weight-cache-*`` flags);
- the checkpoint prefetch: ``prefetch_decision`` (SGLang's ``--weight-loader-prefetch-checkpoints`` where the release
  has it and the memory plan says RAM holds the weights beside the HiCache host pool);
"""

from __future__ import annotations

from ansible_collections.gpuserve.sglang.plugins.module_utils import _model_check, _sglang_releases

DAEMON_MODULE = "sglang.srt.weight_cache.daemon"
# The daemon writes /tmp/sglang_weight_cache_rank<global rank>.ready (weight_cache/protocol.py,
# WEIGHT_CACHE_READY_TEMPLATE); global rank = tp_size * pp_rank + tp_rank.
READY_TEMPLATE = "/tmp/sglang_weight_cache_rank%d.ready"
SOCKET_TEMPLATE = "/tmp/sglang_weight_cache_rank%d.sock"
# SGLang's own text for the refusal beside speculative decoding (0.5.17 server_args.py; 0.5.19+
# arg_groups/model_path_hook.py).
SPECULATIVE_TEXT = ("--weight-cache-mode is not supported together with speculative decoding (--speculative-algorithm): "
                    "the weight cache daemon does not export the draft model's weights")


def rules(release):
    """The release's rules from its wheel (the newest older table's for a release without one)."""
    table = _sglang_releases.release_for_defaults(release or "")[0]
    return _sglang_releases.RELEASES[table].get("rules", {})


def _int(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _truthy(value):
    return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")


def ranks(args):
    """(tp, pp, dp, ep) of the server's flags (SGLang's defaults: 1)."""
    args = args if isinstance(args, dict) else {}
    return (max(_int(args.get("tp", args.get("tp-size", 1)), 1), 1), max(_int(args.get("pp", args.get("pp-size", 1)), 1), 1),
            max(_int(args.get("dp", args.get("dp-size", 1)), 1), 1), max(_int(args.get("ep", args.get("ep-size", 1)), 1), 1))


def model_quantization(args, model_config=None, model_path=""):
    """(method, quantization_config) the daemon would export, as SGLang sees the model: --quantization, else the
    model preflight's reading (_model_check.quantization: config.json's quantization_config, also under
    text_config, or compression_config, else hf_quant_config.json); '' for an unquantized model."""
    args = args if isinstance(args, dict) else {}
    config = model_config if isinstance(model_config, dict) else {}
    quant = {}
    for holder in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
        found = holder.get("quantization_config") or holder.get("compression_config")
        if isinstance(found, dict):
            quant = found
            break
    method = _model_check.quantization(str(model_path or ""), config)[0] if config or model_path else ""
    if args.get("quantization"):
        method = _model_check.normalize_method(args["quantization"])
    return method, quant


def refusals(release, args, model_config=None, nodes=0, model_path=""):
    """Why sglang_weight_cache cannot serve this server ([] when it can), each naming the reason: a release
    without the standalone daemon, speculative decoding where the release refuses it, a quantization its CUDA IPC
    allow-list does not hold (protocol.py IPC_QUANT_ALLOWLIST, per release), a server over several hosts."""
    args = args if isinstance(args, dict) else {}
    found = rules(release)
    shown = release or "(release unknown)"
    if not found.get("weight_cache_daemon"):
        return ["sglang_weight_cache: SGLang %s has no standalone Weight Cache Daemon (python -m %s, 0.5.17 and "
                "later); nothing was changed" % (shown, DAEMON_MODULE)]
    problems = []
    if args.get("speculative-algorithm") and found.get("weight_cache_refuses_speculative"):
        problems.append("sglang_weight_cache: SGLang %s refuses the weight cache beside speculative decoding "
                        "(--speculative-algorithm %s): \"%s\"; nothing was changed. Set sglang_weight_cache: false "
                        "for this profile" % (shown, args.get("speculative-algorithm"), SPECULATIVE_TEXT))
    method, config = model_quantization(args, model_config, model_path)
    allowed = found.get("weight_cache_quant_allowlist") or {}
    if method not in allowed:
        problems.append("sglang_weight_cache: quantization %r is not on SGLang %s's weight cache allow-list (%s: "
                        "CUDA IPC exports only tensors these round-trip); nothing was changed"
                        % (method, shown, ", ".join(repr(m) if m else "'' (unquantized)" for m in sorted(allowed))))
    elif allowed[method] and config.get(allowed[method]) is None:
        problems.append("sglang_weight_cache: quantization %r is allowed by SGLang %s only with %s in the model's "
                        "quantization_config (block-wise); this model has none; nothing was changed"
                        % (method, shown, allowed[method]))
    if nodes and _int(nodes, 0) > 1:
        problems.append("sglang_weight_cache: a server over several hosts (sglang_server_nodes) is not supported "
                        "by the collection's daemon unit; nothing was changed")
    return problems


def ready_files(args):
    """The files the daemon writes when every rank of the host holds its weights."""
    tp, pp, _dp, _ep = ranks(args)
    return [READY_TEMPLATE % rank for rank in range(tp * pp)]


def client_flags(args, timeout=1800):
    """The server's flags for the standalone daemon: ``--weight-cache-mode client``, the readiness timeout, and
    ``--weight-cache-socket`` where the server has one rank (SGLang uses that one path for every rank when it is
    set, model_loader/loader.py; with more ranks each finds its own by SGLang's per-rank default)."""
    tp, pp, _dp, _ep = ranks(args)
    flags = {"weight-cache-mode": "client", "weight-cache-timeout": _int(timeout, 1800)}
    if tp * pp == 1:
        flags["weight-cache-socket"] = SOCKET_TEMPLATE % 0
    return flags


def prefetch_decision(mode, release, plan=None, tp=1, headroom_gb=16):
    """(flags, reason) for sglang_weight_prefetch (false, true or auto): SGLang's
    ``--weight-loader-prefetch-checkpoints`` where the release has it (0.5.11+); ``auto`` only where the memory plan
    says the page cache holds the weights beside the HiCache host pool the new process pins and ``headroom_gb``
    (weights + host pool + headroom <= MemAvailable). Never ``--weight-loader-drop-cache-after-load``: a warm
    restart reads the page cache the last load left."""
    mode = str(mode).strip().lower() if mode is not None else "false"
    if mode in ("false", "no", "off", "0", ""):
        return {}, ""
    if not rules(release).get("weight_loader_prefetch"):
        return {}, ("sglang_weight_prefetch: SGLang %s has no --weight-loader-prefetch-checkpoints (0.5.11 and "
                    "later): not used" % (release or "(release unknown)"))
    flags = {"weight-loader-prefetch-checkpoints": True}
    if mode != "auto":
        return flags, "sglang_weight_prefetch: on (--weight-loader-prefetch-checkpoints)"
    plan = plan if isinstance(plan, dict) else {}
    weights_gb, available = plan.get("weights_gb_per_gpu"), plan.get("mem_available_bytes")
    if weights_gb is None or available is None:
        return {}, "sglang_weight_prefetch: auto, not used: no memory plan with the weights' size and MemAvailable"
    weights_bytes = float(weights_gb) * max(_int(tp, 1), 1) * 1e9
    pool_bytes = float(plan.get("host_pool_bytes_total") or 0)
    if weights_bytes + pool_bytes + float(headroom_gb) * (1 << 30) > float(available):
        return {}, ("sglang_weight_prefetch: auto, not used: weights %.1f GB + HiCache host pool %.1f GB + headroom "
                    "%s GiB > MemAvailable %.1f GB" % (weights_bytes / 1e9, pool_bytes / 1e9, headroom_gb,
                                                       float(available) / 1e9))
    return flags, ("sglang_weight_prefetch: auto, on: weights + HiCache host pool + %s GiB headroom fit "
                   "MemAvailable %.1f GB" % (headroom_gb, float(available) / 1e9))
