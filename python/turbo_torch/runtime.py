"""turbo_torch.runtime: the dispatch cache of the eager layer.

Every pointwise call resolves (op, operand dtypes, whether each operand is a Python scalar, a 0-dim
tensor or a tensor with dims, the default dtype) to the dtype it computes in and the dtype of its
result. That resolution is cached in C (512 direct-mapped slots); the key holds everything the
resolution reads, so a call with another dtype, another scalar kind or another default dtype can
never reuse a stale entry. Shapes and strides are not in the key because they do not change the
dtype decision: broadcasting and the contiguous fast paths are decided by the kernel on each call
(both are O(ndim) checks).
"""
from __future__ import annotations

from typing import Dict

from torchburn import _C


def cache_info() -> Dict[str, int]:
    """{"hits", "misses", "size", "capacity", "enabled"} of the dispatch cache."""
    return _C._tt_cache_info()


def cache_clear() -> None:
    """Empties the dispatch cache and zeroes its counters."""
    _C._tt_cache_clear()


def cache_enable(enabled: bool = True) -> None:
    """Turns the cache on or off (off: every call resolves afresh; for measurements)."""
    _C._tt_cache_enable(bool(enabled))
