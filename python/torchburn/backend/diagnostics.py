"""Logging and warnings of the compile backend.

* ``TORCHBURN_DEBUG=1`` logs every decision (graphs, regions, fusions, cache hits, fallbacks) to
  stderr through the ``torchburn.backend`` logger.
* An op that runs in PyTorch instead of natively is reported once per op kind with a
  :class:`TorchburnFallbackWarning`; ``TORCHBURN_QUIET=1`` silences those warnings.
* :class:`Recorder` collects what the backend did, for :func:`torchburn.explain`.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
import warnings
from dataclasses import dataclass, field
from typing import Optional

logger = logging.getLogger("torchburn.backend")
_configured = False
_lock = threading.Lock()
_warned: set = set()


class TorchburnFallbackWarning(UserWarning):
    """An op or a region runs in PyTorch instead of torchburn's kernels (results are unchanged)."""


def debug_enabled() -> bool:
    return os.environ.get("TORCHBURN_DEBUG", "0") not in ("", "0")


def quiet() -> bool:
    return os.environ.get("TORCHBURN_QUIET", "0") not in ("", "0")


def debug(message: str, *args) -> None:
    global _configured
    if not debug_enabled():
        return
    if not _configured:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[torchburn] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        _configured = True
    logger.debug(message, *args)


def warn_once(kind: str, message: str) -> None:
    """Warns once per `kind` per process (unless TORCHBURN_QUIET=1)."""
    with _lock:
        if kind in _warned:
            return
        _warned.add(kind)
    debug("%s", message)
    if not quiet():
        warnings.warn(message, TorchburnFallbackWarning, stacklevel=3)


@dataclass(eq=False)
class GraphRecord:
    """What the backend did with one ATen graph.

    ``native_ops``/``regions``/``fusions`` describe the regions that were lowered to plans (at compile
    time); ``fallback_ops`` the nodes left to PyTorch then, by reason (unsupported ops, and the nodes of
    regions whose lowering failed, listed with their reason in ``failed_regions``). Whether a lowered
    region really ran natively is only known after calls: :meth:`region_runs` reads the live counters
    of each region's plan(s)."""

    kind: str  # "inference", "forward" or "backward"
    native_ops: dict = field(default_factory=dict)  # op name -> count (in lowered regions)
    fallback_ops: dict = field(default_factory=dict)  # op name (with reason) -> count
    regions: list = field(default_factory=list)  # per lowered region: list of FX node names
    failed_regions: list = field(default_factory=list)  # (node names, reason)
    region_ops: list = field(default_factory=list)  # per lowered region: op name -> count
    runners: list = field(default_factory=list)  # per lowered region: its compiler.Region
    # compute nodes in graph order: (name, op name, input node names, lowered region index or None,
    # why it is not supported natively or None)
    nodes: list = field(default_factory=list)

    @property
    def fusions(self) -> list:
        """Per lowered region: its plan's step listing, read live from the region. A region with
        symbolic shapes (Dynamo marks a frame dynamic when it sees the same code with other shapes,
        e.g. a second model of the same class) makes its plan at its first call, so a listing taken at
        compile time would be empty; an uncalled dynamic region has an empty listing."""
        return [runner.description for runner in self.runners]

    def region_runs(self) -> list:
        """Per lowered region: ``(native_runs, fallbacks, reason)`` so far — calls that ran the plan,
        calls that went to PyTorch, and the last reason a call went to PyTorch (None if none did)."""
        return [runner.run_counts() for runner in self.runners]


# Every GraphRecord with a lowered region stays reachable while its compiled model lives (each Region
# holds its record), for torchburn.profiling_stats() / coverage_report(); compile-time fallbacks are
# summed here because a graph without regions keeps no record alive.
LIVE_RECORDS: "weakref.WeakSet[GraphRecord]" = weakref.WeakSet()
COMPILE_FALLBACKS: dict = {}


def track(record: GraphRecord) -> None:
    with _lock:
        if record.runners:
            LIVE_RECORDS.add(record)
        for key, count in record.fallback_ops.items():
            COMPILE_FALLBACKS[key] = COMPILE_FALLBACKS.get(key, 0) + count


def live_records() -> list:
    with _lock:
        return list(LIVE_RECORDS)


class Recorder:
    """Collects GraphRecords while active (used by torchburn.explain)."""

    _active: Optional["Recorder"] = None

    def __init__(self) -> None:
        self.graphs: list = []

    def __enter__(self) -> "Recorder":
        Recorder._active = self
        return self

    def __exit__(self, *exc) -> None:
        Recorder._active = None

    @classmethod
    def record(cls, graph: GraphRecord) -> None:
        if cls._active is not None:
            cls._active.graphs.append(graph)
