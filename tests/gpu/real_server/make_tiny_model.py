# SPDX-License-Identifier: GPL-3.0-or-later
"""Write a tiny randomly initialised Llama (bf16 safetensors) and a WordLevel tokenizer of the same vocabulary, for
the real-SGLang GPU lane (tests/gpu/real_server.sh). 2 layers, hidden 256, 4 KV heads of 64: 2 KiB of KV cache per
token in bf16, so a small --mem-fraction-static still gives millions of tokens and a host pool of a few GB.
Usage: python make_tiny_model.py OUT_DIR"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 32000


def main(out):
    os.makedirs(out, exist_ok=True)
    # every id the random model can sample decodes to a word: 4 specials, printable characters, a few words, fillers
    vocab = {}
    for tok in ["<unk>", "<s>", "</s>", "<pad>"] + [chr(c) for c in range(33, 127)] + \
            ["the", "capital", "city", "of", "France", "is", "Paris", "hello", "world"]:
        vocab.setdefault(tok, len(vocab))
    i = 0
    while len(vocab) < VOCAB:
        vocab.setdefault("w%05d" % i, len(vocab))
        i += 1
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=4096)
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}assistant:{% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096, rms_norm_eps=1e-6,
                      rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    cfg.torch_dtype = torch.bfloat16
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}, f)
    print("wrote", out, sorted(os.listdir(out)))


if __name__ == "__main__":
    main(sys.argv[1])
