# SPDX-License-Identifier: GPL-3.0-or-later
"""STAND-IN model directories for the molecule scenarios (test fixture; never used by the product).

The real models are 547 GB (Kimi-K2.5 INT4) and ~230 GB (Qwen3.5-397B-A17B NVFP4). The stand-in server loads no
weights, but the server role's model preflight (module_utils/_model_check.py) reads a model directory the way SGLang
does: config.json (architecture, quantization config), the weight index and every shard's safetensors header. This
writes directories in exactly those formats, with a few bytes per tensor:

    make_standin_model.py kimi DIR      Kimi-K2.5 INT4 (compressed-tensors), 4 shards + model.safetensors.index.json
    make_standin_model.py eagle3 DIR    an EAGLE-3 draft (LlamaForCausalLMEagle3), one model.safetensors
    make_standin_model.py qwen35 DIR    Qwen3.5 NVFP4 (ModelOpt, hf_quant_config.json), 4 shards + index

Idempotent: an existing config.json is left alone (the directory is then not rewritten). Standard library only (it
runs on the test hosts' system python3).
"""

import json
import os
import struct
import sys

STAND_IN = "gpuserve.sglang test stand-in: the real formats, a few bytes per tensor, no real weights"
KIMI = {
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "_stand_in": STAND_IN,
    "text_config": {"model_type": "kimi_k2", "num_hidden_layers": 61, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                    "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                            "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int",
                                                                                      "group_size": 32}}}}},
}
EAGLE3 = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
          "_stand_in": STAND_IN}
QWEN35 = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
          "_stand_in": STAND_IN,
          "text_config": {"model_type": "qwen3_5_moe_text", "num_hidden_layers": 60, "full_attention_interval": 4}}
QWEN35_QUANT = {"producer": {"name": "modelopt"}, "_stand_in": STAND_IN,
                "quantization": {"quant_algo": "NVFP4", "group_size": 16}}


def safetensors(path, tensors):
    """A real safetensors file: 8-byte little-endian header length, JSON header, data (F32 tensors)."""
    header, data = {"__metadata__": {"format": "pt", "stand_in": STAND_IN}}, b""
    for name, values in tensors.items():
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)   # the header is padded to 8 bytes, as safetensors writes it
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + data)
    return len(data)


def sharded(directory, prefix, shards):
    weight_map, total = {}, 0
    for index in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (index, shards)
        tensors = {"%s.layers.%d.mlp.weight" % (prefix, index): [0.5, 1.5],
                   "%s.layers.%d.self_attn.weight" % (prefix, index): [2.0, 3.0, 4.0]}
        total += safetensors(os.path.join(directory, name), tensors)
        weight_map.update({tensor: name for tensor in tensors})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, handle, indent=1, sort_keys=True)


def main(kind, directory):
    os.makedirs(directory, exist_ok=True)
    config_path = os.path.join(directory, "config.json")
    if os.path.exists(config_path):
        return 0
    if kind == "kimi":
        sharded(directory, "language_model.model", 4)
        config = KIMI
    elif kind == "eagle3":
        safetensors(os.path.join(directory, "model.safetensors"), {"midlayer.self_attn.q_proj.weight": [1.0, 2.0]})
        config = EAGLE3
    elif kind == "qwen35":
        sharded(directory, "model.language_model", 4)
        with open(os.path.join(directory, "hf_quant_config.json"), "w") as handle:
            json.dump(QWEN35_QUANT, handle, indent=1)
        config = QWEN35
    else:
        raise SystemExit("kind: kimi, eagle3 or qwen35")
    with open(config_path + ".tmp", "w") as handle:   # config.json last: its presence means the rest is written
        json.dump(config, handle, indent=1, sort_keys=True)
    os.replace(config_path + ".tmp", config_path)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
