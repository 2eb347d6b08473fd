#!/usr/bin/env python3
"""Writes a random-weight model with exactly Qwen2.5-0.5B-Instruct's configuration (hidden 896, 24 layers,
14 heads, 2 kv heads, intermediate 4864, vocab 151936, tied embeddings, bf16 safetensors) plus a small
byte-level BPE tokenizer trained here with a ChatML template, so the LLM benchmark runs with no download.
The weights are noise (the text is gibberish); the shapes, bytes and arithmetic are the real model's.

Usage:  python tools/make_bench_model.py [--out DIR] [--seed 0]
        (default DIR: $TORCHBURN_CACHE_DIR or ~/.cache/torchburn, then bench-models/qwen2.5-0.5b-random)
Then:   python -m torchburn.llm benchmark -m DIR -q int4 --threads 1
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "repetition_penalty": 1.1,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
}

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def corpus() -> list[str]:
    """Plain text to train the tokenizer on: this machine's Python standard library sources."""
    root = Path(json.__file__).resolve().parent.parent
    texts = []
    for path in sorted(root.glob("*.py"))[:200]:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def write_tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # the split regex and byte-level mapping of Qwen2's tokenizer.json
    split = Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(split, behavior="isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": CHATML, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
         "model_max_length": 32768}, indent=2))


def write_weights(out: Path, seed: int) -> int:
    import torch
    from safetensors.torch import save_file

    c = CONFIG
    hidden, inter, heads, kv, layers = (c["hidden_size"], c["intermediate_size"], c["num_attention_heads"],
                                        c["num_key_value_heads"], c["num_hidden_layers"])
    d = hidden // heads
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen) * std).to(torch.bfloat16)

    tensors = {"model.embed_tokens.weight": normal(c["vocab_size"], hidden),
               "model.norm.weight": torch.ones(hidden, dtype=torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        tensors[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        tensors[p + "self_attn.q_proj.weight"] = normal(heads * d, hidden)
        tensors[p + "self_attn.q_proj.bias"] = normal(heads * d)
        tensors[p + "self_attn.k_proj.weight"] = normal(kv * d, hidden)
        tensors[p + "self_attn.k_proj.bias"] = normal(kv * d)
        tensors[p + "self_attn.v_proj.weight"] = normal(kv * d, hidden)
        tensors[p + "self_attn.v_proj.bias"] = normal(kv * d)
        tensors[p + "self_attn.o_proj.weight"] = normal(hidden, heads * d)
        tensors[p + "mlp.gate_proj.weight"] = normal(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = normal(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = normal(hidden, inter)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return sum(t.numel() for t in tensors.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="output folder (default: under the torchburn cache)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer-vocab", type=int, default=8000, help="BPE vocabulary to train (<= 151936)")
    args = parser.parse_args(argv)
    if args.out is None:
        import os

        root = os.environ.get("TORCHBURN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torchburn")
        args.out = os.path.join(root, "bench-models", "qwen2.5-0.5b-random")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    write_tokenizer(out, args.tokenizer_vocab)
    count = write_weights(out, args.seed)
    print(f"wrote {out} ({count / 1e6:.1f}M parameters, Qwen2.5-0.5B-Instruct configuration, random bf16 weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
