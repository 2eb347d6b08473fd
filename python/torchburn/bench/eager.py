"""python -m torchburn.bench eager: per-call cost of turbo_torch vs PyTorch eager vs NumPy (the floor),
same process, one thread each, medians of repeated timed loops."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, List, Optional


def _per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Median seconds per call over 7 batches sized to take about seconds/7 each."""
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > 0.02 or n > 1 << 22:
            break
        n *= 4
    batch = max(1, int(n * (seconds / 7) / max(elapsed, 1e-9)))
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - start) / batch)
    return statistics.median(samples)


def _cases(tt: Any, torch: Any, np: Any) -> List[Dict[str, Any]]:
    def make(module: Any, name: str) -> Dict[str, Callable[[], Any]]:
        return {}

    rows = []

    def row(name: str, build: Callable[[Any], Callable[[], Any]], numpy_build: Optional[Callable[[], Callable[[], Any]]] = None):
        rows.append({"name": name, "build": build, "numpy": numpy_build})

    def tensors(m: Any, *shapes: Any, grad: bool = False) -> List[Any]:
        out = []
        for i, s in enumerate(shapes):
            t = m.randn(*s)
            if grad:
                t.requires_grad_(True)
            out.append(t)
        return out

    def b_add(m):
        a, b = tensors(m, (8,), (8,))
        return lambda: a + b
    row("a + b (8 floats)", b_add, lambda: (lambda a, b: lambda: a + b)(np.ones(8, np.float32), np.ones(8, np.float32)))

    def b_scalar(m):
        (x,) = tensors(m, (8,))
        return lambda: x * 2.0
    row("x * 2.0 (8 floats)", b_scalar, lambda: (lambda x: lambda: x * np.float32(2.0))(np.ones(8, np.float32)))

    def b_grad(m):
        (x,) = tensors(m, (1,), grad=True)
        return lambda: 2 * x
    row("2 * x, requires_grad (1 elem)", b_grad, None)

    def b_relu(m):
        (x,) = tensors(m, (8,))
        return lambda: m.relu(x)
    row("relu(x) (8 floats)", b_relu, lambda: (lambda x: lambda: np.maximum(x, 0))(np.ones(8, np.float32)))

    def b_sum(m):
        (x,) = tensors(m, (8,))
        return lambda: x.sum()
    row("x.sum() (8 floats)", b_sum, lambda: (lambda x: lambda: x.sum())(np.ones(8, np.float32)))

    def b_slice(m):
        (x,) = tensors(m, (8,))
        return lambda: x[1:3]
    row("x[1:3]", b_slice, lambda: (lambda x: lambda: x[1:3])(np.ones(8, np.float32)))

    def b_view(m):
        (x,) = tensors(m, (8,))
        return lambda: x.view(2, 4)
    row("x.view(2, 4)", b_view, lambda: (lambda x: lambda: x.reshape(2, 4))(np.ones(8, np.float32)))

    for n in (32, 64):
        def b_mm(m, n=n):
            a, b = tensors(m, (n, n), (n, n))
            return lambda: a @ b
        row(f"matmul {n}x{n}", b_mm, lambda n=n: (lambda a, b: lambda: a @ b)(np.ones((n, n), np.float32),
                                                                              np.ones((n, n), np.float32)))

    def b_chain(m):
        (x,) = tensors(m, (1000,))

        def run():
            y = x
            for _ in range(25):
                y = y * 1.0001
                y = y + 0.5
                y = y - 0.5
                y = m.relu(y)
            return y
        return run

    def np_chain():
        x = np.ones(1000, np.float32)

        def run():
            y = x
            for _ in range(25):
                y = y * np.float32(1.0001)
                y = y + np.float32(0.5)
                y = y - np.float32(0.5)
                y = np.maximum(y, 0)
            return y
        return run
    row("100-op elementwise chain (1000 floats)", b_chain, np_chain)

    def b_train(m):
        x, w, b = tensors(m, (64, 64), (64, 64), (64,))
        w.requires_grad_(True)
        b.requires_grad_(True)

        def run():
            loss = m.tanh(x @ w + b).sum()
            loss.backward()
            w.grad = None
            b.grad = None
        return run
    row("fwd+bwd tanh(x @ w + b).sum() (64x64)", b_train, None)

    def b_module(m):
        layer = m.nn.Linear(64, 64)
        (x,) = tensors(m, (1, 64))
        return lambda: layer(x)
    row("Linear(64, 64) module call (batch 1)", b_module, None)

    for name, op in (("a + b", lambda a, b: a + b), ("exp(x)", lambda a, b: a.exp()), ("x.sum()", lambda a, b: a.sum())):
        def b_big(m, op=op):
            a, b = tensors(m, (1 << 20,), (1 << 20,))
            return lambda: op(a, b)
        row(f"{name} (1M floats)", b_big, lambda op=op: (lambda a, b: lambda: (
            a + b if op.__code__.co_code == (lambda a, b: a + b).__code__.co_code else np.exp(a)
            if "exp" in name else a.sum()))(np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32)))
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchburn.bench eager",
                                     description="Per-call time of turbo_torch vs PyTorch eager and NumPy.")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement (default 0.5)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np
    import torchburn
    import turbo_torch as tt
    torchburn.set_num_threads(1)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    info = torchburn.cpu_info()
    print(f"CPU: {info['brand']} ({info['vendor']}), ISA {info['isa']}, 1 thread each; "
          f"torch {getattr(torch, '__version__', 'absent')}, numpy {np.__version__}, Python {platform.python_version()}")
    print()
    print("| workload | turbo_torch | torch eager | numpy | vs torch | vs numpy |")
    print("|---|---|---|---|---|---|")
    for case in _cases(tt, torch, np):
        ours = _per_call(case["build"](tt), args.seconds)
        theirs = _per_call(case["build"](torch), args.seconds) if torch is not None else float("nan")
        floor = _per_call(case["numpy"](), args.seconds) if case["numpy"] else float("nan")

        def fmt(s: float) -> str:
            if s != s:
                return "-"
            return f"{s * 1e6:.2f} µs" if s < 1e-3 else f"{s * 1e3:.3f} ms"
        vs_numpy = f"{floor / ours:.2f}x" if floor == floor else "-"
        print(f"| {case['name']} | {fmt(ours)} | {fmt(theirs)} | {fmt(floor)} | {theirs / ours:.2f}x | {vs_numpy} |",
              flush=True)
    print()
    print("ratios: the other side's time / turbo_torch's time (above 1: turbo_torch is faster)")
    return 0
