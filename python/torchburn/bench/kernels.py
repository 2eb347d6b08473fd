"""python -m torchburn.bench kernels: torchburn's kernels against PyTorch eager, same process.

For each workload: the median time of each, the ratio (torch time / torchburn time; > 1 means
torchburn is faster), and a roofline column: achieved GFLOP/s against the measured FMA peak for
compute-bound work, or GB/s moved against the measured memory read bandwidth for memory-bound work.
"""
from __future__ import annotations

import argparse
import json
from typing import Callable

from . import format_time, machine_facts, median_time, print_table


def workloads(torch, ops, native_bf16: bool = True):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    items = []

    def gemm(n):
        a, b = randn(n, n), randn(n, n)
        return (f"GEMM {n}x{n}x{n}", lambda: torch.mm(a, b), lambda: ops.matmul(a, b), ("flops", 2.0 * n ** 3))

    items.append(gemm(1024))
    items.append(gemm(256))

    def gemm_bf16(n):
        a, b = randn(n, n).bfloat16(), randn(n, n).bfloat16()
        # both accumulate in f32 and round once to bf16: compare within bf16 rounding
        return (f"GEMM bf16 {n}x{n}x{n}", lambda: torch.mm(a, b), lambda: ops.matmul(a, b),
                ("flops", 2.0 * n ** 3), 2e-2)

    items.append(gemm_bf16(1024))
    if native_bf16:  # without bf16 dot products (AVX512-BF16/AMX) both sides emulate it: 4096^3 takes minutes
        items.append(gemm_bf16(4096))
    x = randn(1024, 1024)
    items.append(("GELU (erf) 1024x1024", lambda: F.gelu(x), lambda: ops.gelu(x), ("bytes", 2 * 4 * x.numel())))
    q, k, v = randn(4, 8, 128, 64), randn(4, 8, 128, 64), randn(4, 8, 128, 64)
    sdpa_flops = 4 * 8 * (2 * 128 * 128 * 64 * 2) / 2  # causal: half of QK^T and PV
    items.append(("SDPA B4 H8 T128 D64 causal",
                  lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  lambda: ops.scaled_dot_product_attention(q, k, v, is_causal=True), ("flops", sdpa_flops)))
    xl, w, b = randn(128, 512), randn(1024, 512), randn(1024)
    items.append(("Linear+bias+GELU 128x512->1024",
                  lambda: F.gelu(F.linear(xl, w, b)),
                  lambda: ops.linear(xl, w, b, activation="gelu"), ("flops", 2.0 * 128 * 512 * 1024)))
    s = randn(2048, 2048)
    items.append(("softmax 2048x2048 (dim -1)", lambda: torch.softmax(s, -1), lambda: ops.softmax(s, -1),
                  ("bytes", 2 * 4 * s.numel())))
    ln, lw, lb = randn(4096, 1024), randn(1024), randn(1024)
    items.append(("layer_norm 4096x1024", lambda: F.layer_norm(ln, (1024,), lw, lb),
                  lambda: ops.layer_norm(ln, (1024,), lw, lb), ("bytes", 2 * 4 * ln.numel())))
    import torchburn
    from torchburn import nn_ops

    winograd = "winograd" in torchburn.cpu_info()["kernels"]["conv"]

    def conv(n, cin, cout, size, kernel, stride, padding):
        xc, wc, bc = randn(n, cin, size, size), randn(cout, cin, kernel, kernel), randn(cout)
        out = (size + 2 * padding - kernel) // stride + 1
        flops = 2.0 * n * cout * out * out * cin * kernel * kernel
        measure = ("flops", flops)
        if winograd and kernel == 3 and stride == 1 and min(cin, cout) >= 16:
            # the Winograd path runs 16 GEMMs over the 2x2 output tiles: 2.25x fewer FLOPs than direct
            tiles = n * ((out + 1) // 2) ** 2
            measure = ("winograd_flops", (flops, 2.0 * 16 * tiles * cin * cout))
        return (f"conv2d {n}x{cin}x{size}x{size} -> {cout}, {kernel}x{kernel}/{stride}",
                lambda: F.conv2d(xc, wc, bc, stride, padding), lambda: nn_ops.conv2d(xc, wc, bc, stride, padding),
                measure)

    items.append(conv(8, 16, 32, 32, 3, 1, 1))
    items.append(conv(8, 64, 64, 56, 3, 1, 1))
    items.append(conv(8, 64, 128, 56, 3, 2, 1))
    items.append(conv(8, 3, 64, 112, 7, 2, 3))
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench kernels", description=__doc__)
    parser.add_argument("--seconds", type=float, default=0.6, help="target measuring time per side and workload")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv or [])

    import torch

    import torchburn
    import torchburn.ops as ops
    from torchburn import _C

    threads = torchburn.get_num_threads()
    torch.set_num_threads(threads)
    isa = torchburn.cpu_info()["isa"]
    peak = max(_C.probe_peak_gflops(isa, 0.3) for _ in range(3))  # an upper bound: noise only lowers it
    bandwidth = _C.probe_read_bandwidth(256 << 20, 5)
    rows, records = [], []
    features = torchburn.cpu_info()["features"]
    native_bf16 = bool(features.get("avx512_bf16") or features.get("amx_bf16"))
    for name, torch_fn, ours_fn, (kind, amount), *tolerance in workloads(torch, ops, native_bf16):
        tol = tolerance[0] if tolerance else 1e-4
        torch.testing.assert_close(ours_fn(), torch_fn(), rtol=tol, atol=tol)  # never time a wrong answer
        t_torch = median_time(torch_fn, target_seconds=args.seconds)
        t_ours = median_time(ours_fn, target_seconds=args.seconds)
        ratio = t_torch / t_ours
        if kind == "flops":
            achieved = amount / t_ours * 1e-9
            roofline = f"{achieved:.1f} GFLOP/s = {100 * achieved / peak:.0f}% of {peak:.0f} peak"
        elif kind == "winograd_flops":
            achieved = amount[0] / t_ours * 1e-9
            gemm = amount[1] / t_ours * 1e-9
            roofline = (f"{achieved:.1f} GFLOP/s direct-equivalent; Winograd GEMMs {gemm:.1f} GFLOP/s = "
                        f"{100 * gemm / peak:.0f}% of {peak:.0f} peak")
        else:
            achieved = amount / t_ours * 1e-9
            roofline = f"{achieved:.1f} GB/s = {100 * achieved / bandwidth:.0f}% of {bandwidth:.1f} read BW"
        rows.append([name, format_time(t_torch), format_time(t_ours), f"{ratio:.2f}x", roofline])
        records.append({"workload": name, "torch_s": t_torch, "torchburn_s": t_ours, "ratio": ratio,
                        "achieved": achieved, "unit": "GFLOP/s" if kind == "flops" else "GB/s"})
    if args.json:
        print(json.dumps({"machine": machine_facts(), "peak_gflops": peak, "read_gbps": bandwidth,
                          "results": records}, indent=2))
        return 0
    print(machine_facts())
    info = torchburn.cpu_info()
    caches = info.get("caches", {})
    sizes = ", ".join(f"{level} {caches[level]['size_bytes'] >> 10} KiB" for level in ("l1d", "l2", "l3")
                      if level in caches)
    print(f"cpu: {info.get('microarchitecture', '?')} (family {info.get('family')} model {info.get('model')}), {sizes}")
    for family, variant in info.get("kernels", {}).items():
        print(f"  {family}: {variant}")
    print(f"measured: FMA peak {peak:.1f} GFLOP/s ({isa}, {threads} threads), read bandwidth {bandwidth:.1f} GB/s")
    print("roofline % is of the f32 FMA peak; bf16 dot products (vdpbf16ps) can reach about 2x that")
    print("ratio = torch eager time / torchburn time (medians; > 1 means torchburn is faster)\n")
    print_table(["workload", "torch eager", "torchburn", "ratio", "roofline (torchburn)"], rows)
    return 0
