"""torchburn: a C11 runtime that makes PyTorch-style workloads fast on ordinary CPUs.

Three front doors share one C core:

* ``torch.compile(model, backend="torchburn")`` — a compiler backend (see :mod:`torchburn.backend`);
* :class:`torchburn.LLM` — run Qwen / Llama / Mistral checkpoints from safetensors;
* ``import turbo_torch as torch`` — a drop-in eager API.

Example::

    >>> import torchburn
    >>> torchburn.cpu_info()["isa"] in ("scalar", "avx2", "avx512", "neon")
    True
    >>> torchburn.active_engine()
    'native_cpu'
"""
from __future__ import annotations

import importlib
import os
from typing import Any

import sys


def _cli_import_error(error: ValueError) -> None:
    """A bad TORCHBURN_* setting (e.g. TORCHBURN_ISA=bogus) under the command line tools ends with one
    error line and exit status 2 instead of an import traceback; library imports still raise."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    is_cli = os.path.basename(argv[0] if argv else "").startswith("torchburn") or any(
        a == "-m" and b.startswith("torchburn") for a, b in zip(argv, argv[1:]))
    if is_cli and "TORCHBURN_" in str(error):
        print(f"torchburn: error: {error}", file=sys.stderr)
        raise SystemExit(2)


try:
    from . import _C
except ValueError as _error:
    _cli_import_error(_error)
    raise
from ._C import Tensor, from_dlpack
from .gpu import active_engine, gpu_available, gpu_backend, gpu_info

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "from_dlpack",
    "cpu_info",
    "active_engine",
    "gpu_available",
    "gpu_info",
    "gpu_backend",
    "memory_stats",
    "set_num_threads",
    "get_num_threads",
    "ops",
]


def cpu_info() -> dict[str, Any]:
    """Facts about this CPU and how torchburn uses it.

    Returns a dict with ``vendor``, ``brand``, ``features`` (flag -> bool), ``isa`` (the kernel level
    in use: ``TORCHBURN_ISA`` or the best supported), ``best_isa``, ``supported_isas``,
    ``physical_cores`` and ``num_threads``.
    """
    return _C.cpu_info()


def memory_stats() -> dict[str, int]:
    """Allocator statistics: bytes live/peak/cached, allocations, frees, pool reuse hits, failures,
    and ``copies`` (layout/dtype conversions the ops layer could not avoid)."""
    return _C.memory_stats()


def set_num_threads(n: int) -> None:
    """Sets the number of threads torchburn's kernels use (>= 1)."""
    _C.set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads torchburn's kernels use."""
    return _C.get_num_threads()


# Submodules and names loaded on first use, so `import torchburn` stays light (and torch optional).
_LAZY = {
    "ops": ("torchburn.ops", None),
    "bench": ("torchburn.bench", None),
    "quantization": ("torchburn.quantization", None),
    "llm": ("torchburn.llm", None),
    "backend": ("torchburn.backend", None),
    "tokenizer": ("torchburn.tokenizer", None),
    "files": ("torchburn.files", None),
}


def _register_lazy(module: str, names: list[str]) -> None:
    for name in names:
        _LAZY[name] = (module, name)
        __all__.append(name)


_register_lazy(
    "torchburn.quantization",
    [
        "quantize_weight_int8",
        "quantize_weight_int4_grouped",
        "quantize_weight_int4",
        "dequantize_weight_int8",
        "dequantize_weight_int4_grouped",
        "w8a32_linear",
        "w4a32_grouped_linear",
        "QuantizedLinear",
        "quantize_model",
    ],
)
_register_lazy("torchburn.files", ["safetensors_load", "safetensors_save", "load_config", "Checkpoint"])
_register_lazy("torchburn.tokenizer", ["Tokenizer", "DecodeStream"])
_register_lazy(
    "torchburn.backend", ["compile", "register", "cache_stats", "cache_clear", "set_cache_size", "explain", "Explanation"]
)
_register_lazy("torchburn.llm", ["LLM"])
_register_lazy("torchburn.profiler", ["supported_ops", "profile", "profiling_stats", "reset_stats", "coverage_report",
                                      "memory_pool_stats", "clear_memory_pool"])
_register_lazy("torchburn.visualize", ["visualize", "GraphVisualization"])


# `torch.compile(m, backend="torchburn")` finds the backend without a race (see _registration.py)
from . import _registration  # noqa: E402

_registration.install()


def __getattr__(name: str) -> Any:
    entry = _LAZY.get(name)
    if entry is None:
        raise AttributeError(f"module 'torchburn' has no attribute {name!r}")
    module_name, attribute = entry
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
