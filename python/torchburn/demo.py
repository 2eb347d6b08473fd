"""python -m torchburn.demo: the README's main job.

Runs the product description's examples that exist so far, checking each result against PyTorch,
then prints a short kernel benchmark side by side with PyTorch eager.
"""
from __future__ import annotations

import sys
import time


def section(title: str) -> None:
    print(f"\n== {title}")


def demo_ops(torch) -> None:
    import torchburn.ops as ops

    section("torchburn.ops: fused Linear + GELU and attention on torch tensors (zero-copy)")
    x, w, b = torch.randn(32, 512), torch.randn(1024, 512), torch.randn(1024)
    y = ops.linear(x, w, b, activation="gelu")
    torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w.T + b), rtol=1e-4, atol=1e-4)
    print(f"linear+gelu: output {tuple(y.shape)}, matches torch")
    q = torch.randn(2, 4, 64, 32)
    o = ops.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(o, torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
                               rtol=1e-5, atol=1e-5)
    print(f"causal SDPA: output {tuple(o.shape)}, matches torch")


def demo_compile(torch) -> None:
    section("seed example: torch.compile(model, backend='torchburn')")
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
    try:
        compiled = torch.compile(model, backend="torchburn")
        x = torch.randn(32, 512)
        with torch.no_grad():
            out = compiled(x)
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
        print(f"compiled output {tuple(out.shape)}, matches eager")
    except Exception as error:  # the backend is still being built: say so instead of failing the demo
        print(f"not available yet: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")


def demo_quantization(torch) -> None:
    section("seed example: int4 grouped quantization and QuantizedLinear")
    try:
        import torchburn as tb

        weight = torch.randn(1024, 4096)
        packed_weights, scales = tb.quantize_weight_int4_grouped(weight, group_size=64)
        layer = tb.QuantizedLinear.from_float(torch.nn.Linear(4096, 1024), quant_type="int4", group_size=64)
        x = torch.randn(8, 4096)
        out = layer(x)
        print(f"packed {tuple(packed_weights.shape)} {packed_weights.dtype}, scales {tuple(scales.shape)}; "
              f"QuantizedLinear output {tuple(out.shape)}")
    except Exception as error:
        print(f"not available yet: {type(error).__name__}: {error}")


def main() -> int:
    import torch

    import torchburn

    info = torchburn.cpu_info()
    print(f"torchburn {torchburn.__version__} on {info['brand']} — ISA {info['isa']}, "
          f"{info['num_threads']} threads, engine {torchburn.active_engine()}")
    demo_ops(torch)
    demo_compile(torch)
    demo_quantization(torch)
    section("kernel benchmark (python -m torchburn.bench kernels)")
    from torchburn.bench import kernels

    start = time.perf_counter()
    kernels.main(["--seconds", "0.3"])
    print(f"\n(benchmark took {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
