"""Benchmarks, run as ``python -m torchburn.bench SUITE``: each prints a table of medians measured
side by side with the peer (PyTorch eager, inductor, HF tokenizers) in the same process, together with
the machine facts. Suites: ``kernels``, ``quant``, ``tokenizer``, ``compile``, ``gpu``."""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable, Optional


def machine_facts() -> str:
    """One line with the CPU, ISA, thread counts and library versions."""
    import torchburn

    info = torchburn.cpu_info()
    parts = [
        f"cpu: {info['brand'] or platform.processor()} ({info['vendor']})",
        f"isa: {info['isa']} (supported: {', '.join(info['supported_isas'])})",
        f"physical cores: {info['physical_cores']}",
        f"torchburn threads: {info['num_threads']} ({info['parallel_runtime']})",
    ]
    try:
        import torch

        parts.append(f"torch {torch.__version__} threads: {torch.get_num_threads()}")
    except ImportError:
        pass
    return " | ".join(parts)


def median_time(fn: Callable[[], object], *, min_repeats: int = 5, max_repeats: int = 200,
                target_seconds: float = 0.6, warmup: int = 2) -> float:
    """Median wall time of fn() in seconds over repeated runs (at least min_repeats, about
    target_seconds in total)."""
    for _ in range(warmup):
        fn()
    samples = []
    deadline = time.perf_counter() + target_seconds
    while len(samples) < max_repeats and (len(samples) < min_repeats or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def format_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A GitHub-markdown table, so results paste straight into docs and issues."""
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def env_threads(default: Optional[int] = None) -> Optional[int]:
    value = os.environ.get("TORCHBURN_NUM_THREADS")
    return int(value) if value else default
