"""python -m torchburn.bench gpu: the Vulkan engine's kernels against native_cpu, same process.

Prints the Vulkan device (name, type, driver, limits) and, per kernel, the median time of one op on
each engine. A kernel's time is isolated from the copies in and out of engine buffers by running it
once and `repeat + 1` times in one batch and taking the difference per extra op (on the GPU the batch is
one submission, so this is dispatch + kernel time). Pipelines are built on first use, so every
configuration is warmed up before it is timed.

Then the LLM forward on each device (`LLM.from_pretrained(device="gpu")` against device="cpu" with
exact_activations=True, the product the GPU computes): prefill and decode tokens per second, medians
of --samples runs, submits per decoded token, and the bytes uploaded at load (a bf16 row shows the
16-bit weights at half the f32 bytes), for the model in --llm-model (e.g. tools/make_bench_model.py's Qwen2.5-0.5B-shaped
one) or, by default, a small random Qwen2-shaped model written to a temporary folder (needs
transformers). --no-llm skips these rows.

On a CPU-type Vulkan device (Mesa's lavapipe, used with --allow-cpu or TORCHBURN_VULKAN_ALLOW_CPU=1)
the numbers only show that the engine runs; they say nothing about GPU speed.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from . import format_time, machine_facts, print_table


def kernels():
    """(name, ops for one run, arrays, repeatable op index) per workload."""
    rng = np.random.default_rng(0)

    def randn(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    items = []
    n = 1 << 20
    x, y = randn(n), np.zeros(n, np.float32)
    items.append(("gelu (erf) 1M", {"kind": "unary", "op": "gelu", "n": n, "a": 0, "y": 1}, [x, y]))
    items.append(("add 1M", {"kind": "binary", "op": "add", "n": n, "b_len": n, "a": 0, "b": 0, "y": 1}, [x, y]))
    for m, k, out in ((1, 4096, 4096), (128, 1024, 1024), (512, 512, 512)):
        a, w, b = randn(m, k), randn(out, k), randn(out)
        items.append((f"linear {m}x{k} -> {out} +bias", {"kind": "matmul", "m": m, "n": out, "k": k, "trans_b": 1,
                                                        "a": 0, "b": 1, "c": 2, "y": 3},
                      [a, w, b, np.zeros((m, out), np.float32)]))
    s = randn(1024, 1024)
    items.append(("softmax 1024x1024", {"kind": "softmax", "rows": 1024, "len": 1024, "a": 0, "y": 1},
                  [s, np.zeros_like(s)]))
    h, g = randn(256, 4096), randn(4096)
    items.append(("rms_norm 256x4096", {"kind": "rms_norm", "rows": 256, "len": 4096, "eps": 1e-6, "a": 0, "b": 1,
                                        "y": 2}, [h, g, np.zeros_like(h)]))
    items.append(("layer_norm 256x4096", {"kind": "layer_norm", "rows": 256, "len": 4096, "eps": 1e-5, "a": 0,
                                          "b": 1, "c": 1, "y": 2}, [h, g, np.zeros_like(h)]))
    chain = [{"kind": "unary", "op": "tanh", "lhs": 0}, {"kind": "scalar", "op": "mul", "lhs": 4, "scalar": 0.5},
             {"kind": "binary", "op": "add", "lhs": 5, "rhs": 0}, {"kind": "unary", "op": "gelu", "lhs": 6}]
    items.append(("fused tanh*0.5+x -> gelu 1M", {"kind": "fused", "n": n, "inputs": [(n, 1)], "steps": chain, "a": 0,
                                                  "y": 1}, [x, y]))
    items.append(("reduce sum 1024x1024 rows", {"kind": "reduce", "op": "sum", "rows": 1024, "len": 1024, "inner": 1,
                                                "a": 0, "y": 1}, [s, np.zeros(1024, np.float32)]))
    items.append(("strided_copy transpose 1024x1024", {"kind": "strided_copy", "n": 1 << 20, "shape": [1024, 1024],
                                                       "strides": [1, 1024], "a": 0, "y": 1}, [s, np.zeros_like(s)]))
    q, kv = randn(1, 8, 512, 64), randn(1, 8, 512, 64)
    items.append(("attention 8 heads x 512 x 64", {"kind": "attention", "batch": 1, "q_heads": 8, "kv_heads": 8,
                                                   "q_len": 512, "kv_len": 512, "head_dim": 64, "value_dim": 64,
                                                   "scale": 0.125, "a": 0, "b": 1, "c": 1, "y": 2},
                  [q, kv, np.zeros_like(q)]))
    return items


def op_time(engine: str, op: dict, arrays: list, repeat: int, samples: int) -> float:
    from torchburn import gpu

    def timed(count: int) -> float:
        start = time.perf_counter()
        gpu.engine_run(engine, [op] * count, arrays)
        return time.perf_counter() - start

    timed(1)
    timed(repeat + 1)  # warm-up: pipelines, buffer pool
    diffs = sorted(timed(repeat + 1) - timed(1) for _ in range(samples))
    return max(diffs[len(diffs) // 2] / repeat, 0.0)


def _small_model(folder, dtype=None) -> None:
    """A random Qwen2-shaped model (hidden 256, 4 layers, 8 heads / 2 kv heads, vocab 2048) with a
    byte-level tokenizer, enough to time the forward without a download; saved in `dtype` (a torch
    dtype; default float32)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=2048, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
                                      tie_word_embeddings=True)
    model = transformers.Qwen2ForCausalLM(config).eval()
    (model.to(dtype) if dtype is not None else model).save_pretrained(folder)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 10, trainer)
    tok.save(str(folder / "tokenizer.json"))


def llm_rows(model_dir, quants, prompt: int, new_tokens: int, samples: int, bf16_dir=None) -> list[list[str]]:
    """[quant, device, prefill tok/s, decode tok/s, submits and transfer submits per decoded token, MiB
    uploaded at load] per quant and device. quant "bf16" is quant="none" on the bf16 checkpoint
    `bf16_dir` (kept 16-bit on a device with 16-bit storage)."""
    from torchburn import LLM, gpu

    rows = []
    ids = [int(t) for t in np.random.default_rng(0).integers(10, 250, size=prompt)]
    for quant in quants:
        folder = bf16_dir if quant == "bf16" else model_dir
        if folder is None:
            continue
        for device in ("gpu", "cpu"):
            loaded = gpu.gpu_info()["upload_bytes"]
            llm = LLM.from_pretrained(folder, quant="none" if quant == "bf16" else quant, device=device,
                                      exact_activations=True, quiet=True)
            loaded = gpu.gpu_info()["upload_bytes"] - loaded
            llm.generate_tokens(ids[:8], max_tokens=2, temperature=0.0, stop_token_ids=[])  # warm-up (pipelines)
            prefill, decode = [], []
            before = gpu.gpu_info()
            for _ in range(samples):
                llm.generate_tokens(ids, max_tokens=new_tokens, temperature=0.0, stop_token_ids=[])
                prefill.append(llm.last_stats["prefill_tok_s"])
                decode.append(llm.last_stats["decode_tok_s"])
            after = gpu.gpu_info()
            steps = samples * new_tokens
            on_gpu = device == "gpu"
            rows.append([quant, device, f"{np.median(prefill):.1f}", f"{np.median(decode):.1f}",
                         f"{(after['submits'] - before['submits']) / steps:.2f}" if on_gpu else "-",
                         f"{(after['transfers'] - before['transfers']) / steps:.2f}" if on_gpu else "-",
                         f"{loaded / 2**20:.1f}" if on_gpu else "-"])
            del llm
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow-cpu", action="store_true",
                        help="use a CPU-type Vulkan device (lavapipe) when no GPU exists")
    parser.add_argument("--repeat", type=int, default=10, help="ops per timed batch (default 10)")
    parser.add_argument("--samples", type=int, default=5, help="timed batches per kernel (median; default 5)")
    parser.add_argument("--llm-model", default=None, help="model folder for the LLM rows (default: a small random one)")
    parser.add_argument("--llm-model-bf16", default=None,
                        help="bf16 checkpoint for the 'bf16' row (default: a bf16 copy of the small random one)")
    parser.add_argument("--llm-quants", default="none,bf16,int8,int4",
                        help="weight formats of the LLM rows (bf16: quant none on a bf16 checkpoint)")
    parser.add_argument("--prompt", type=int, default=64, help="LLM prompt tokens (default 64)")
    parser.add_argument("--new-tokens", type=int, default=16, help="LLM decoded tokens per run (default 16)")
    parser.add_argument("--no-llm", action="store_true", help="skip the LLM rows")
    args = parser.parse_args(argv)
    if args.allow_cpu:
        os.environ["TORCHBURN_VULKAN_ALLOW_CPU"] = "1"
    import torchburn
    from torchburn import gpu

    gpu.reset()
    info = gpu.gpu_info()
    print(machine_facts())
    if not info["available"]:
        print(f"no usable Vulkan device: {info['reason']}")
        return 1
    limits = info["limits"]
    print(f"vulkan device: {info['adapter_name']} ({info['device_type']}, Vulkan {info['api_version']}, "
          f"driver {info['driver']}) | device-local memory {info['vram_bytes'] / 2**30:.1f} GiB | "
          f"maxStorageBufferRange {limits['max_storage_buffer_range'] / 2**20:.0f} MiB | subgroup "
          f"{limits['subgroup_size']} | shared memory {limits['max_shared_memory_bytes'] // 1024} KiB")
    if info["device_type"] == "cpu":
        print("note: a CPU-type Vulkan device; these times show that the engine runs, not GPU speed")
    rows = []
    for name, op, arrays in kernels():
        gpu_seconds = op_time("vulkan", op, arrays, args.repeat, args.samples)
        cpu_seconds = op_time("native_cpu", op, arrays, args.repeat, args.samples)
        ratio = cpu_seconds / gpu_seconds if gpu_seconds > 0 else float("inf")
        rows.append([name, format_time(gpu_seconds), format_time(cpu_seconds), f"{ratio:.2f}"])
    print_table(["kernel", "vulkan", "native_cpu", "native_cpu / vulkan"], rows)
    print(f"submissions so far: {gpu.gpu_info()['submits']} (one per batch); engine in use for the front doors: "
          f"{torchburn.active_engine()}")
    if args.no_llm:
        return 0
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        model_dir, bf16_dir = args.llm_model, args.llm_model_bf16
        if model_dir is None:
            import torch

            model_dir = pathlib.Path(scratch) / "qwen2-small-random"
            _small_model(model_dir)
            if bf16_dir is None:
                bf16_dir = pathlib.Path(scratch) / "qwen2-small-random-bf16"
                _small_model(bf16_dir, torch.bfloat16)
        os.environ.setdefault("TORCHBURN_CACHE_DIR", str(pathlib.Path(scratch) / "cache"))
        print(f"\nLLM forward: {model_dir}, prompt {args.prompt} tokens, {args.new_tokens} decoded, median of "
              f"{args.samples} runs (cpu: exact_activations=True, {torchburn.get_num_threads()} threads)")
        rows = llm_rows(model_dir, [q for q in args.llm_quants.split(",") if q], args.prompt, args.new_tokens,
                        args.samples, bf16_dir)
        print(f"memory mode: {'staging (device-local buffers)' if info['staging'] else 'mapped'}; 16-bit storage: "
              f"{info['storage_16bit']}")
        print_table(["quant", "device", "prefill tok/s", "decode tok/s", "submits / decoded token",
                     "transfer submits / token", "MiB uploaded at load"], rows)
    return 0
