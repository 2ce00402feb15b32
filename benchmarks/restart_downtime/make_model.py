# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a randomly initialised bf16 Llama of about 32 GB, generated on the GPU, as safetensors shards (nothing is
carried to the device machine): hidden 8192, 64 heads of 128, 8 KV heads, intermediate 28672 (Llama-70B's layer),
18 layers, vocabulary 32000, untied embeddings: 15.9 billion parameters, 31.9 GB. The tokenizer is the GPU lane's
(tests/gpu/real_server/make_tiny_model.py). Every weight is N(0, 0.02) except the norms (ones).
Usage: python make_model.py OUT_DIR [LAYERS]"""
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 8192, 28672, 64, 8, 128, 32000
SHARD_BYTES = 4 * 1024 ** 3
DEV = os.environ.get("MAKE_MODEL_DEVICE", "cuda")  # "cpu" for a dry run without a GPU


def tensors(layers):
    """(name, shape) of every tensor, in the order a Llama checkpoint lists them."""
    yield "model.embed_tokens.weight", (VOCAB, HIDDEN)
    for i in range(layers):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", (HIDDEN,)
        yield p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM)
        yield p + "post_attention_layernorm.weight", (HIDDEN,)
        yield p + "mlp.gate_proj.weight", (INTER, HIDDEN)
        yield p + "mlp.up_proj.weight", (INTER, HIDDEN)
        yield p + "mlp.down_proj.weight", (HIDDEN, INTER)
    yield "model.norm.weight", (HIDDEN,)
    yield "lm_head.weight", (VOCAB, HIDDEN)


def main(out, layers):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "gpu", "real_server"))
    import make_tiny_model  # the lane's tokenizer and config writer
    t0 = time.time()
    make_tiny_model.main(out)  # tokenizer + a tiny model whose weights are replaced below
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f.endswith(".safetensors.index.json"):
            os.remove(os.path.join(out, f))
    cfg = json.load(open(os.path.join(out, "config.json"), encoding="utf-8"))
    cfg.update(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=layers, num_attention_heads=HEADS,
               num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=VOCAB, tie_word_embeddings=False,
               torch_dtype="bfloat16", dtype="bfloat16")
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    gen = torch.Generator(device=DEV).manual_seed(0)
    shards, cur, size, total = [], {}, 0, 0
    for name, shape in tensors(layers):
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16, device=DEV)
        else:
            t = torch.empty(shape, dtype=torch.bfloat16, device=DEV).normal_(0.0, 0.02, generator=gen)
        cur[name] = t.cpu()
        size += t.numel() * 2
        if size >= SHARD_BYTES:
            shards.append(cur)
            total += size
            cur, size = {}, 0
            _write(out, shards)
    if cur:
        shards.append(cur)
        total += size
        _write(out, shards)
    n = len(shards)
    weight_map = {}
    for i in range(n):
        old = os.path.join(out, "part-%05d.safetensors" % (i + 1))
        new = "model-%05d-of-%05d.safetensors" % (i + 1, n)
        os.rename(old, os.path.join(out, new))
        for name in shards[i]:
            weight_map[name] = new
    with open(os.path.join(out, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    print(json.dumps({"model": out, "layers": layers, "bytes": total, "shards": n,
                      "params": total // 2, "seconds": round(time.time() - t0, 1)}))


def _write(out, shards):
    """Write the newest shard and drop its host copy (the name only is kept for the index)."""
    i = len(shards)
    save_file(shards[-1], os.path.join(out, "part-%05d.safetensors" % i), metadata={"format": "pt"})
    shards[-1] = dict.fromkeys(shards[-1])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 18)
