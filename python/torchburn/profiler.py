"""Counters and reports over what the compile backend ran, under TorchBurn's names: ``supported_ops()``,
``profile()``, ``profiling_stats()``, ``reset_stats()``, ``coverage_report()``, ``memory_pool_stats()`` and
``clear_memory_pool()``.

The figures come from the live counters of every compiled region's plan (calls that ran natively,
calls handed to PyTorch, seconds inside the plan's kernels), summed over the compiled models that are
still alive; nothing is timed on the call path itself.

Example::

    >>> import torch, torchburn
    >>> model = torch.compile(torch.nn.Linear(64, 64), backend="torchburn")
    >>> torchburn.reset_stats()
    >>> with torch.no_grad(), torchburn.profile() as run:
    ...     _ = model(torch.randn(8, 64))
    >>> run.engine, run.calls, torchburn.profiling_stats()["calls"]
    ('native_cpu', 1, 1)
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Optional

from . import _C

__all__ = ["supported_ops", "profile", "profiling_stats", "reset_stats", "coverage_report", "memory_pool_stats",
           "clear_memory_pool"]

_lock = threading.Lock()
# per Region: (native runs, PyTorch runs, plan seconds) at the last reset_stats()
_baselines: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def supported_ops(overloads: bool = False) -> list:
    """The ATen ops the compile backend can run natively, sorted: op names such as ``"addmm"`` or
    ``"_softmax"`` (``overloads=True``: every overload, such as ``"aten.add.Tensor"``). Whether a node
    really runs natively also depends on its dtypes and arguments (see :func:`torchburn.explain`)."""
    from .backend import lowering

    names = set()
    for target in {**lowering.RULES, **lowering.INTEGER_RULES}:
        target = getattr(target, "torchburn_aten", target)  # the backend's own FX targets stand for an aten op
        if overloads:
            names.add(str(target))
        else:
            packet = getattr(target, "overloadpacket", None)
            names.add(getattr(packet, "__name__", str(target)))
    return sorted(names)


def _regions() -> list:
    from .backend import diagnostics

    return [region for record in diagnostics.live_records() for region in record.runners]


def _totals() -> dict:
    totals = {"calls": 0, "fallback_calls": 0, "total_ms": 0.0, "total_nodes": 0, "regions": 0}
    with _lock:
        for region in _regions():
            native, eager, seconds, _ = _deltas(region)
            nodes = sum(region.record.region_ops[region.record_index].values())
            totals["calls"] += native
            totals["fallback_calls"] += eager
            totals["total_ms"] += 1e3 * seconds
            totals["total_nodes"] += native * nodes
            totals["regions"] += 1
    return totals


def profiling_stats() -> dict:
    """Totals since the last :func:`reset_stats` over the live compiled models: ``calls`` (native plan
    runs; a model whose graph is split into regions makes one per region per call), ``fallback_calls``
    (region calls that ran in PyTorch), ``total_ms`` (milliseconds inside the plans' kernels),
    ``total_nodes`` (FX compute nodes executed natively) and ``regions``."""
    return _totals()


def reset_stats() -> None:
    """Starts :func:`profiling_stats` and :func:`coverage_report` from zero (the plans' own counters
    keep running; this records where they stand)."""
    from .backend import diagnostics

    with _lock:
        _baselines.clear()
        for region in _regions():
            native, eager, _ = region.run_counts()
            _baselines[region] = (native, eager, region.run_seconds())
        with diagnostics._lock:
            diagnostics.COMPILE_FALLBACKS.clear()


class profile:  # noqa: N801 - TorchBurn's name, used as ``with torchburn.profile() as p``
    """A context manager that measures the block: ``wall_time_ms`` (wall clock of the whole block),
    ``engine`` (the engine that ran the plans), and what the compiled models did inside it: ``calls``,
    ``fallback_calls``, ``kernel_ms`` (time inside the plans) and ``nodes``."""

    def __init__(self) -> None:
        self.wall_time_ms: float = 0.0
        self.engine: str = _engine()
        self.calls = 0
        self.fallback_calls = 0
        self.kernel_ms = 0.0
        self.nodes = 0
        self._start: Optional[dict] = None
        self._t0 = 0.0

    def __enter__(self) -> "profile":
        self.engine = _engine()
        self._start = _totals()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall_time_ms = 1e3 * (time.perf_counter() - self._t0)
        end, start = _totals(), self._start or {}
        self.calls = end["calls"] - start.get("calls", 0)
        self.fallback_calls = end["fallback_calls"] - start.get("fallback_calls", 0)
        self.kernel_ms = end["total_ms"] - start.get("total_ms", 0.0)
        self.nodes = end["total_nodes"] - start.get("total_nodes", 0)

    def __repr__(self) -> str:
        return (f"profile(wall_time_ms={self.wall_time_ms:.3f}, engine={self.engine!r}, calls={self.calls}, "
                f"fallback_calls={self.fallback_calls}, kernel_ms={self.kernel_ms:.3f}, nodes={self.nodes})")


def _engine() -> str:
    import torchburn

    active = getattr(torchburn, "active_engine", None)
    try:
        return active() if callable(active) else "native_cpu"
    except Exception:  # noqa: BLE001 - an invalid TORCHBURN_ENGINE is reported by active_engine itself
        return "native_cpu"


def _deltas(region: Any) -> tuple:
    """(native runs, PyTorch runs, plan seconds, last reason) of a region since the last reset_stats()."""
    native, eager, reason = region.run_counts()
    base_native, base_eager, base_seconds = _baselines.get(region, (0, 0, 0.0))
    return native - base_native, eager - base_eager, region.run_seconds() - base_seconds, reason


def coverage_report() -> dict:
    """Which ops the live compiled models ran natively and which in PyTorch since the last
    :func:`reset_stats`: ``native_ops`` and ``fallback_ops`` (op name -> node count, the fallbacks with
    their reason: ops not supported natively, regions that failed to lower or that ran in PyTorch at
    call time), ``native_ratio`` (native compute nodes / all), ``graphs`` (graphs compiled or run since
    the reset) and ``runtime_fallbacks`` (regions handed to PyTorch at call time, with the reason)."""
    from .backend import diagnostics

    native: dict = {}
    with diagnostics._lock:
        fallback = dict(diagnostics.COMPILE_FALLBACKS)
    runtime, graphs = [], 0
    with _lock:
        for record in diagnostics.live_records():
            ran = False
            for index, region in enumerate(record.runners):
                native_runs, eager_runs, _, reason = _deltas(region)
                ops = record.region_ops[index]
                if eager_runs:
                    why = reason or "no plan ran"
                    runtime.append({"graph": record.kind, "region": index, "nodes": sum(ops.values()),
                                    "native_runs": native_runs, "pytorch_runs": eager_runs, "reason": why})
                    for label, count in ops.items():
                        key = f"{label} (region ran in PyTorch: {why})"
                        fallback[key] = fallback.get(key, 0) + count
                elif native_runs:
                    for label, count in ops.items():
                        native[label] = native.get(label, 0) + count
                ran |= bool(native_runs or eager_runs)
            graphs += ran
    total = sum(native.values()) + sum(fallback.values())
    ratio = sum(native.values()) / total if total else 1.0
    return {"native_ops": native, "fallback_ops": fallback, "native_ratio": ratio, "graphs": graphs,
            "runtime_fallbacks": runtime}


def memory_pool_stats() -> dict:
    """torchburn's allocator, under TorchBurn's memory-pool keys: ``pooled_bytes`` (freed blocks kept
    for reuse), ``live_bytes``, ``peak_bytes``, ``allocations``, ``reuse_hits`` (allocations served from
    the pool) and ``hit_rate``. Our pool is the size-class recycler of the C allocator, not a separate
    buffer pool; plans run in their own planned arenas, which do not appear here."""
    stats = _C.memory_stats()
    allocations = stats["allocations"]
    return {"pooled_bytes": stats["bytes_cached"], "live_bytes": stats["bytes_live"], "peak_bytes": stats["bytes_peak"],
            "allocations": allocations, "frees": stats["frees"], "reuse_hits": stats["reuse_hits"],
            "hit_rate": stats["reuse_hits"] / allocations if allocations else 0.0}


def clear_memory_pool() -> None:
    """Returns the allocator's pooled (freed, cached) blocks to the system."""
    _C.memory_trim()
