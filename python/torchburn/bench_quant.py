"""Quantized matmul benchmark: GEMV (batch 1) and batch-8 GEMM on the LLM's shapes, as effective weight
bandwidth next to the machine's measured read bandwidth, with the same product in f32 through PyTorch
eager for reference. Run ``python -m torchburn.bench quant`` (``--help`` for options).

Method: weights live in enough rotating copies (>= 256 MiB in all) that every call streams them from
DRAM, never from cache; each configuration is timed call by call and the table shows the best and the
median. The read bandwidth is measured the same way (slices of a 512 MiB buffer, best of many) with
the same thread count. "GB/s" counts the bytes a call must read: packed weights plus their scales.
On a shared machine, other processes only ever slow a call down, so compare best to best.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, List, Sequence, Tuple

SHAPES = ((4096, 4096), (896, 4864), (151936, 896))
MIB = 1 << 20


def _time_calls(call: Callable[[int], None], copies: int, repeats: int) -> Tuple[float, float]:
    """(best, median) seconds of call(i) over `repeats` calls rotating through the copies. The warm-up
    uses the last copies, so that no timed call finds its weights still in cache."""
    for i in range(max(0, copies - 2), copies):
        call(i)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        call(i % copies)
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def _copies_for(nbytes: int, total: int, cap: int = 64) -> int:
    return max(2, min(cap, -(-total // max(nbytes, 1))))


def _quantized_copies(torch, n: int, k: int, quant_type: str, group: int, copies: int):
    """Random packed weights and scales (values do not change the speed), `copies` independent ones."""
    out = []
    for _ in range(copies):
        if quant_type == "int4":
            w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
            s = torch.rand(n, k // group) * 0.01 + 0.001
        else:
            w = torch.randint(-127, 128, (n, k), dtype=torch.int8)
            s = torch.rand(n) * 0.01 + 0.001
        out.append((w, s))
    return out


def run_quant_benchmark(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchburn.bench quant",
        description="Quantized GEMV/GEMM bandwidth vs the machine's read bandwidth, with torch f32 for reference.",
    )
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes M (default 1,8)")
    parser.add_argument("--types", default="int4,int8", help="weight formats: int4 (grouped) and/or int8")
    parser.add_argument("--activations", default="f32,int8",
                        help="activation modes: f32 (W*A32) and/or int8 (W*A8, VNNI when present)")
    parser.add_argument("--group-size", type=int, default=64, help="int4 group size (default 64)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per configuration (default 30)")
    parser.add_argument("--shapes", default=None,
                        help="N x K list like '4096x4096,896x4864' (default: the LLM shapes of the issue)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch f32 reference")
    args = parser.parse_args(list(argv) if argv is not None else None)

    import torch

    import torchburn as tb
    from torchburn import _C

    threads = [int(t) for t in args.threads.split(",") if t]
    batches = [int(b) for b in args.batches.split(",") if b]
    types = [t for t in args.types.split(",") if t]
    acts = [a for a in args.activations.split(",") if a]
    shapes = SHAPES if not args.shapes else tuple(tuple(int(v) for v in s.split("x")) for s in args.shapes.split(","))
    group = args.group_size
    info = tb.cpu_info()
    print(f"# torchburn quantized matmul benchmark")
    print(f"cpu: {info.get('brand')} | isa: {info.get('isa')} | physical cores: {info.get('physical_cores')} | "
          f"kernels: A32 -> {_C.quant_kernel_for('auto', False)}, A8 -> {_C.quant_kernel_for('auto', True)} | "
          f"torch {torch.__version__}")
    print(f"weights: {len(shapes)} shapes, int4 group_size={group}; each config best/median of {args.repeats} "
          f"calls over rotating copies (>= 256 MiB, never cache-hot)\n")

    bandwidth = {}
    for t in threads:
        tb.set_num_threads(t)
        best, median = _C.quant_read_bandwidth(512 * MIB, 32 * MIB, 48)
        bandwidth[t] = best
        print(f"read bandwidth, {t} thread{'s' if t > 1 else ''}: best {best:.1f} GB/s, median {median:.1f} GB/s")
    print()

    header = ("| N x K | weights | act | M | threads | best us | median us | GB/s | % of read BW "
              "| torch f32 us | speedup |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    rows: List[str] = []
    for n, k in shapes:
        ref_copies: list = []
        ref_times: dict = {}

        def torch_reference(m: int, t: int, x, n=n, k=k, ref_copies=ref_copies, ref_times=ref_times) -> float:
            """Best seconds of torch.nn.functional.linear with an f32 [N, K] weight (M rows, t threads)."""
            if (m, t) not in ref_times:
                if not ref_copies:
                    ref_copies.extend(torch.randn(n, k) for _ in range(_copies_for(4 * n * k, 256 * MIB, cap=16)))
                torch.set_num_threads(t)
                ref_times[(m, t)] = _time_calls(
                    lambda i: torch.nn.functional.linear(x, ref_copies[i]), len(ref_copies), max(5, args.repeats // 2)
                )[0]
            return ref_times[(m, t)]
        for quant_type in types:
            if quant_type == "int4" and k % group != 0:
                print(f"| {n} x {k} | int4 | - | - | - | K not a multiple of {group} | | | | | |")
                continue
            weight_bytes = n * (k // 2 if quant_type == "int4" else k)
            scale_bytes = 4 * n * (k // group if quant_type == "int4" else 1)
            nbytes = weight_bytes + scale_bytes
            copies = _quantized_copies(torch, n, k, quant_type, group, _copies_for(nbytes, 256 * MIB))
            g = group if quant_type == "int4" else 0
            for act in acts:
                for m in batches:
                    x = torch.randn(m, k)
                    out = torch.empty(m, n)
                    for t in threads:
                        tb.set_num_threads(t)

                        def call(i, x=x, out=out, g=g, act=act, m=m):
                            w, s = copies[i]  # the addresses path QuantizedLinear uses (no DLPack import)
                            _C.quant_linear_raw(x.data_ptr(), m, k, k, w.data_ptr(), n, s.data_ptr(), 0,
                                                out.data_ptr(), n, g, act == "int8", "auto")

                        best, median = _time_calls(call, len(copies), args.repeats)
                        torch_text, speedup = "", ""
                        if not args.no_torch:
                            reference = torch_reference(m, t, x)
                            torch_text, speedup = f"{reference * 1e6:.0f}", f"{reference / best:.2f}x"
                        gbps = nbytes / best / 1e9
                        row = (f"| {n} x {k} | {quant_type}{f' g{group}' if quant_type == 'int4' else ''} | "
                               f"{act} | {m} | {t} | {best * 1e6:.0f} | {median * 1e6:.0f} | {gbps:.1f} | "
                               f"{100 * gbps / bandwidth[t]:.0f}% | {torch_text} | {speedup} |")
                        rows.append(row)
                        print(row, flush=True)
            del copies
        ref_copies.clear()
    print("\nGB/s = (packed weight + scale bytes) / best time. % of read BW uses the same thread count. "
          "M > 1 is compute-bound, so its GB/s is not a bandwidth target.")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_quant_benchmark())
