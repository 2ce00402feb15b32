# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model preflight (issue 24): is a model directory one the installed SGLang can load, on these GPUs, before the
running server is stopped for it? A missing shard of a 547 GB model is otherwise found by the new server 15 minutes
after the old one went down.

``check`` reads, for the target model and the draft model of EAGLE profiles:

- ``config.json``: JSON, with ``architectures[0]`` among the model classes of the release (its ``EntryClass``
  names, taken from the wheel by scripts/gen-sglang-texts.py into ``_sglang_releases``), unless the server loads it
  through ``--model-impl transformers``;
- the weights: every shard named in ``model.safetensors.index.json`` (or ``pytorch_model.bin.index.json``) present
  as a file; each safetensors file's header (its first 8 bytes give the header's length; the header gives each
  tensor's byte range), so a truncated shard (size != 8 + header + data) and a shard without the tensors the index
  puts in it are found. Headers are a few hundred kB for a 10 GB shard: bounded time on network storage, and a
  deadline (``timeout``) after which the rest are only stat-checked, said so;
- the quantization SGLang will see (``quantization_config`` / ``compression_config`` of config.json, else ModelOpt's
  ``hf_quant_config.json``, as SGLang's ``ModelConfig._parse_quant_hf_config`` reads them) against the profile's
  expectation, and the files the profile needs;
- the GPUs: the quantization's minimum compute capability in that release (``get_min_capability()`` of its config
  class: the model loader refuses a GPU below it) and, for ModelOpt NVFP4 on SM120 GPUs, whether the release has
  an SM120 path (rule ``nvfp4_sm120``);
- with ``deep``: the sha256 of every weight file, compared with the hash Hugging Face's downloader recorded
  (``.cache/huggingface/download/<file>.metadata``, its second line, for LFS files) where there is one.

Read-only. Returns plain data: ``problems`` (each a refusal, naming the path), ``notes`` (what was not checked and
why) and per model what was found.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import struct
import time

from ansible_collections.gpuserve.sglang.plugins.module_utils._sglang_releases import RELEASES

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
MAX_HEADER = 100 * 1024 * 1024   # safetensors' own limit on the header length
HF_METADATA = os.path.join(".cache", "huggingface", "download")
SHOWN = 5                        # names shown in a message before "and N more"


def _names(items):
    items = list(items)
    shown = ", ".join(items[:SHOWN])
    return shown + (" and %d more" % (len(items) - SHOWN) if len(items) > SHOWN else "")


def _read_json(path, with_bytes=False):
    """(document, error), and the file's bytes with ``with_bytes``: error is a sentence when the file is missing
    or not JSON."""
    raw = b""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        document, error = json.loads(raw.decode("utf-8")), ""
    except FileNotFoundError:
        document, error = None, "missing"
    except (IOError, OSError) as exc:
        document, error = None, "unreadable (%s)" % exc.strerror
    except (ValueError, UnicodeDecodeError):
        document, error = None, "not JSON"
    return (document, error, raw) if with_bytes else (document, error)


def _text_config(config):
    """Multimodal wrappers (Kimi-K2.5, Qwen3.5) keep the language model's settings under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else {}


def is_hybrid(config):
    """A hybrid linear-attention model (Qwen3-Next / Qwen3.5 Gated DeltaNet, Nemotron-H, ...): SGLang gives it a
    Mamba state pool beside the KV pool of its full-attention layers. From config.json (or its text_config):
    ``layer_types`` naming linear or mamba layers, ``full_attention_interval``, or ``hybrid_override_pattern``."""
    if not isinstance(config, dict):
        return False
    for holder in (config, _text_config(config)):
        types = holder.get("layer_types")
        if isinstance(types, list) and any(isinstance(t, str) and ("linear" in t or "mamba" in t) for t in types):
            return True
        if holder.get("full_attention_interval") or holder.get("hybrid_override_pattern"):
            return True
    return False


def read_config(path):
    """config.json of a model directory as a dict, or None."""
    config, _error = _read_json(os.path.join(path, "config.json"))
    return config if isinstance(config, dict) else None


def normalize_method(name):
    return str(name or "").strip().lower().replace("-", "_")


def _modelopt_method(quant):
    """SGLang's ModelConfig._parse_modelopt_quant_config: quant_algo -> quant_method."""
    algo = str(quant.get("quant_algo") or "").upper()
    if algo == "MIXED_PRECISION":
        return "modelopt_mixed"
    if "FP4" in algo:
        return "modelopt_fp4"
    if "FP8" in algo:
        return "modelopt_fp8"
    return ""


def quantization(path, config):
    """(quant_method, where it was read) as SGLang sees the model: config.json's quantization_config (also under
    text_config) or compression_config, else hf_quant_config.json. ('', '') for an unquantized model."""
    for where, holder in (("config.json", config), ("config.json text_config", _text_config(config))):
        quant = holder.get("quantization_config") or holder.get("compression_config")
        if isinstance(quant, dict):
            method = normalize_method(quant.get("quant_method")) or ("compressed_tensors"
                                                                     if "compression_config" in holder else "")
            if method == "modelopt":
                method = _modelopt_method(quant) or method
            return method, where
    hf_quant, error = _read_json(os.path.join(path, "hf_quant_config.json"))
    if isinstance(hf_quant, dict):
        inner = hf_quant.get("quantization") if isinstance(hf_quant.get("quantization"), dict) else hf_quant
        return _modelopt_method(inner) or "modelopt", "hf_quant_config.json"
    if error and error != "missing":
        return "?", "hf_quant_config.json is %s" % error
    return "", ""


def safetensors_header(path):
    """(size on disk, size the header declares, tensor names) of one safetensors file; raises ValueError with
    a sentence when it is not one."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError("%d bytes, shorter than a safetensors header" % size)
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER or length + 8 > size:
            raise ValueError("not a safetensors file (header length %d, file %d bytes)" % (length, size))
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise ValueError("its safetensors header is not JSON")
    if not isinstance(header, dict):
        raise ValueError("its safetensors header is not a JSON object")
    end = 0
    tensors = set()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise ValueError("tensor %s has no data_offsets in its header" % name)
        end = max(end, offsets[1])
        tensors.add(name)
    return size, 8 + length + end, tensors


def hf_recorded_sha256(path, name):
    """The sha256 Hugging Face's downloader recorded for an LFS file (its etag), or ''."""
    try:
        with open(os.path.join(path, HF_METADATA, name + ".metadata")) as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError, UnicodeDecodeError):
        return ""
    etag = lines[1].strip().strip('"') if len(lines) > 1 else ""
    return etag if re.match(r"^[0-9a-f]{64}$", etag) else ""


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights(path, what, deadline, clock, deep):
    """(problems, notes, facts) of a model directory's weights."""
    problems, notes = [], []
    facts = {"index": "", "files": 0, "bytes": 0, "headers_read": 0}
    index_name = next((name for name in INDEX_FILES if os.path.exists(os.path.join(path, name))), "")
    expected = {}   # file -> tensor names the index puts in it
    if index_name:
        facts["index"] = index_name
        index, error, raw = _read_json(os.path.join(path, index_name), with_bytes=True)
        # the weight index's sha256: the nodes of one server over several hosts must hold the same model
        facts["index_sha256"] = hashlib.sha256(raw).hexdigest() if raw else ""
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            return ["%s %s: %s is %s" % (what, path, index_name, error or "without a weight_map")], notes, facts
        for tensor, name in weight_map.items():
            if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
                return (["%s %s: %s names a shard %r outside the directory" % (what, path, index_name, name)],
                        notes, facts)
            expected.setdefault(name, set()).add(tensor)
        files = sorted(expected)
    else:
        try:
            entries = sorted(os.listdir(path))
        except OSError as exc:
            return ["%s %s cannot be listed (%s)" % (what, path, exc.strerror)], notes, facts
        files = [name for name in entries if name.endswith(".safetensors")] or \
                [name for name in entries if name.endswith((".bin", ".pt", ".pth")) and name != "training_args.bin"]
        if not files:
            return (["%s %s has no weights (no %s, no *.safetensors, no *.bin)" % (what, path, " / ".join(INDEX_FILES))],
                    notes, facts)
    missing, empty, sizes = [], [], {}
    for name in files:
        try:
            info = os.stat(os.path.join(path, name))
        except OSError:
            missing.append(name)
            continue
        if not os.path.isfile(os.path.join(path, name)):
            missing.append(name)
        elif info.st_size == 0:
            empty.append(name)
        sizes[name] = info.st_size
    facts["files"], facts["bytes"] = len(files), sum(sizes.values())
    if missing:
        problems.append("%s %s: %d of the %d weight files%s are missing: %s" % (
            what, path, len(missing), len(files), " %s names" % index_name if index_name else "", _names(missing)))
    if empty:
        problems.append("%s %s: %d weight files are empty: %s" % (what, path, len(empty), _names(empty)))
    bad, short = [], []
    unread = [name for name in files if name.endswith(".safetensors") and name in sizes and name not in empty]
    for position, name in enumerate(list(unread)):
        if clock() > deadline:
            notes.append("%s %s: the headers of %d of %d safetensors files were read before the deadline "
                         "(sglang_model_check_timeout); the rest were only found present"
                         % (what, path, position, len(unread)))
            break
        try:
            size, declared, tensors = safetensors_header(os.path.join(path, name))
        except (IOError, OSError) as exc:
            bad.append("%s (%s)" % (name, exc.strerror))
            continue
        except ValueError as exc:
            bad.append("%s (%s)" % (name, exc))
            continue
        facts["headers_read"] += 1
        if size != declared:
            short.append("%s (%d bytes, its header says %d)" % (name, size, declared))
        lacking = sorted(expected.get(name, set()) - tensors)
        if lacking:
            bad.append("%s (lacks %d tensors %s puts in it: %s)" % (name, len(lacking), index_name, _names(lacking)))
    if short:
        problems.append("%s %s: %d weight files are truncated or padded: %s" % (what, path, len(short), _names(short)))
    if bad:
        problems.append("%s %s: %d weight files are not what %s says: %s" % (
            what, path, len(bad), index_name or "their names", _names(bad)))
    if deep and not missing:
        checked, recorded, mismatched = 0, 0, []
        for name in files:
            digest = sha256_of(os.path.join(path, name))
            checked += 1
            known = hf_recorded_sha256(path, name)
            if known:
                recorded += 1
                if known != digest:
                    mismatched.append("%s (sha256 %s, recorded %s)" % (name, digest[:16], known[:16]))
        facts["deep"] = {"files_read": checked, "with_recorded_sha256": recorded}
        if mismatched:
            problems.append("%s %s: %d weight files differ from the sha256 Hugging Face's download recorded: %s"
                            % (what, path, len(mismatched), _names(mismatched)))
        if recorded < checked:
            notes.append("%s %s: %d of %d weight files have no recorded sha256 (.cache/huggingface/download): read "
                         "whole, not compared" % (what, path, checked - recorded, checked))
    return problems, notes, facts


def _capability(text):
    """'12.0' -> 120; None when unknown."""
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(text or ""))
    return int(match.group(1)) * 10 + int(match.group(2)) if match else None


def gpu_problems(method, release, entry, compute_caps):
    """Refusals for a quantization the GPUs or the release cannot run; (problems, notes)."""
    caps = [cap for cap in (_capability(c) for c in compute_caps or []) if cap is not None]
    if not method or method == "?" or not entry:
        return [], []
    if not caps:
        return [], ["GPU compute capability not checked for %s: no GPUs seen (nvidia-smi)" % method]
    problems = []
    needed = (entry.get("quant_min_capability") or {}).get(method)
    lowest = min(caps)
    if needed is not None and lowest < needed:
        problems.append("%s needs GPUs of compute capability %d.%d or newer in SGLang %s (get_min_capability of its "
                        "quantization config; the model loader refuses below it): this host has %d.%d"
                        % (method, needed // 10, needed % 10, release, lowest // 10, lowest % 10))
    if method == "modelopt_fp4" and any(cap // 10 == 12 for cap in caps) and \
            not (entry.get("rules") or {}).get("nvfp4_sm120", False):
        problems.append("ModelOpt NVFP4 on SM120 GPUs (compute capability 12.x) needs an SGLang release with SM120 "
                        "kernels; SGLang %s has none (rule nvfp4_sm120 of its wheel)" % release)
    return problems, []


def check_one(item, release, entry, compute_caps, deadline, clock, deep):
    path, role = item["path"], item.get("role", "model")
    what = "draft model" if role == "draft" else "model"
    found = {"path": path, "role": role}
    if not os.path.isdir(path):
        return ["%s directory %s %s" % (what.capitalize(), path,
                                        "is not a directory" if os.path.exists(path) else "does not exist")], [], found
    problems, notes = [], []
    config, error, raw = _read_json(os.path.join(path, "config.json"), with_bytes=True)
    if not isinstance(config, dict):
        return ["%s %s: config.json is %s" % (what, path, error or "not a JSON object")], notes, found
    architectures = config.get("architectures")
    architecture = architectures[0] if isinstance(architectures, list) and architectures else ""
    found["architecture"] = architecture
    found["hybrid"] = is_hybrid(config)
    found["config_sha256"] = hashlib.sha256(raw).hexdigest()
    known = entry.get("architectures") or []
    if not architecture:
        problems.append("%s %s: config.json names no architectures" % (what, path))
    elif item.get("model_impl", "") == "transformers":
        notes.append("%s %s: architecture %s not checked (--model-impl transformers)" % (what, path, architecture))
    elif not known:
        notes.append("%s %s: architecture %s not checked (no table for SGLang %s)" % (what, path, architecture,
                                                                                      release or "(not installed)"))
    elif architecture not in known:
        close = difflib.get_close_matches(architecture, known, n=3)
        problems.append("%s %s: architecture %s is not one SGLang %s can load (%d model classes in its wheel%s)"
                        % (what, path, architecture, release, len(known),
                           "; close: " + ", ".join(close) if close else ""))
    method, where = quantization(path, config)
    found["quantization"], found["quantization_from"] = method, where
    wanted = normalize_method(item.get("quantization", ""))
    if method == "?":
        problems.append("%s %s: %s" % (what, path, where))
    elif wanted and method != wanted:
        problems.append("%s %s: the profile expects %s weights, %s says %s" % (
            what, path, wanted, where or "the model (no quantization config)", method or "unquantized"))
    lacking = [name for name in item.get("files", []) if not os.path.isfile(os.path.join(path, name))]
    if lacking:
        problems.append("%s %s: the profile needs %s, missing" % (what, path, _names(lacking)))
    more, more_notes = gpu_problems(method, release, entry, compute_caps)
    problems += ["%s %s: %s" % (what, path, p) for p in more]
    notes += more_notes
    weight_problems, weight_notes, found["weights"] = weights(path, what, deadline, clock, deep)
    return problems + weight_problems, notes + weight_notes, found


def entry_for(release):
    """(table row, note) to judge a model by. Only the release's own table refuses: for a release without one the
    architectures and capabilities of its neighbours are not the truth (a newer release may load more), so the
    row is empty and the note says the checks that need it were not made."""
    if release in RELEASES:
        return RELEASES[release], "SGLang %s's table (from its wheel)" % release
    if not release:
        return {}, "SGLang not installed: the architecture and the GPUs were not checked against a release"
    return {}, ("SGLang %s has no release table (tables: %s): the architecture and the GPUs were not checked "
                "against it" % (release, ", ".join(sorted(RELEASES))))


def check(items, release="", entry=None, compute_caps=None, timeout=120.0, deep=False, clock=time.monotonic):
    """The model preflight of ``items`` ([{path, role, quantization, files, model_impl}]) for SGLang ``release``
    (``entry``: its row of _sglang_releases.RELEASES; None: looked up by ``entry_for``) on GPUs of
    ``compute_caps`` (['12.0', ...]; None or [] when there are none to see)."""
    note = ""
    if entry is None:
        entry, note = entry_for(release)
    deadline = clock() + float(timeout)
    result = {"release": release, "table": note, "compute_caps": list(compute_caps or []), "problems": [],
              "notes": [], "models": []}
    for item in items:
        problems, notes, found = check_one(item, release, entry, compute_caps, deadline, clock, deep)
        result["problems"] += problems
        result["notes"] += notes
        result["models"].append(found)
    return result
