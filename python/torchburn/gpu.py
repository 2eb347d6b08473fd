"""GPU support and the engine layer: which engine runs, whether a Vulkan GPU is usable, its facts.

torchburn's engines live in C (``src/engine/``): ``native_cpu`` (default), ``reference`` (scalar
golden kernels on one thread; ``TORCHBURN_ENGINE=reference`` or ``burn``) and ``vulkan`` (compute
shaders through the system's Vulkan loader, opened with ``dlopen``). Nothing here raises when there is
no GPU: :func:`gpu_available` is simply ``False`` and :func:`gpu_info` says why.

Example::

    >>> import torchburn
    >>> torchburn.gpu_backend() in ("Vulkan", "none")
    True
    >>> sorted(torchburn.gpu_info())[:3]
    ['adapter_name', 'api_version', 'available']

Settings (read when the engine is first probed; :func:`reset` probes again):
``TORCHBURN_DEVICE`` (cpu|auto|gpu), ``TORCHBURN_ENGINE``, ``TORCHBURN_GPU_INDEX``,
``TORCHBURN_VULKAN_ALLOW_CPU=1`` (let a CPU-type Vulkan device such as Mesa's lavapipe count as the
GPU, for tests), ``TORCHBURN_VULKAN_LOADER`` (the library to dlopen, default ``libvulkan.so.1``),
``TORCHBURN_WGPU_BACKEND`` (accepted: ``vulkan``/``auto``).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from . import _C

__all__ = [
    "gpu_available",
    "gpu_info",
    "gpu_backend",
    "active_engine",
    "engine_names",
    "engine_info",
    "engine_run",
    "reset",
]


def active_engine() -> str:
    """The engine in use: ``"native_cpu"``, ``"reference"`` or ``"vulkan"``.

    Chosen at import from ``TORCHBURN_ENGINE`` / ``TORCHBURN_DEVICE`` (``auto`` takes a Vulkan GPU
    when one exists, never a CPU-type Vulkan device). Raises ``RuntimeError`` naming the reason when
    ``TORCHBURN_DEVICE=gpu`` (or ``TORCHBURN_ENGINE=vulkan``) asked for a GPU that is not there.
    """
    return _C.engine_active()


def engine_names() -> list[str]:
    """The engines of this build, e.g. ``['native_cpu', 'reference', 'vulkan']``."""
    return _C.engine_names()


def engine_info(name: str) -> dict[str, Any]:
    """The raw facts of one engine's device (see :func:`gpu_info` for the GPU summary)."""
    return _C.engine_info(name)


def gpu_info() -> dict[str, Any]:
    """A dict describing the Vulkan GPU (quietly ``available: False`` without loader or device).

    Keys: ``available``, ``reason`` (why not, or ``""``), ``adapter_name``, ``backend`` (``"Vulkan"``
    or ``"none"``), ``vram_bytes`` (device-local heap), ``device_override`` (``TORCHBURN_DEVICE`` or
    ``None``), ``device_type`` (``discrete``, ``integrated``, ``virtual``, ``cpu``, ``other``),
    ``driver`` (name and info), ``api_version``, ``vendor_id``, ``device_id``, ``device_index``,
    ``device_count``, ``limits`` (``max_storage_buffer_range``, ``max_workgroup_count``,
    ``max_workgroup_invocations``, ``max_shared_memory_bytes``, ``subgroup_size``), ``submits`` and
    ``dispatches`` (counters of the engine's command submissions and kernel launches), ``staging``
    (buffers live in device-local memory and copies go through a staging buffer: discrete GPUs, or
    ``TORCHBURN_VULKAN_FORCE_STAGING=1``), ``transfers`` (submissions of staging copies alone),
    ``batched_copies`` (staging copies that rode in a run's own submission), ``upload_bytes``
    and ``download_bytes`` (host <-> device copies), ``subgroup_reductions`` (reductions use subgroup
    operations; ``TORCHBURN_VULKAN_NO_SUBGROUP=1`` forces the shared-memory ones), ``storage_16bit``
    (bf16/f16 matmul weights stay 16-bit on the device; ``TORCHBURN_VULKAN_NO_16BIT=1`` turns it off),
    ``specialized_pipelines`` (pipelines built for fused elementwise chains: one per distinct chain).
    """
    raw = _C.engine_info("vulkan")
    available = bool(raw["available"])
    driver = " ".join(part for part in (raw["driver_name"], raw["driver_info"]) if part)
    return {
        "available": available,
        "reason": raw["reason"],
        "adapter_name": raw["adapter_name"] if available else "",
        "backend": "Vulkan" if available else "none",
        "vram_bytes": raw["vram_bytes"] if available else 0,
        "device_override": os.environ.get("TORCHBURN_DEVICE") or None,
        "device_type": raw["device_type"],
        "driver": driver,
        "api_version": raw["api_version"],
        "vendor_id": raw["vendor_id"],
        "device_id": raw["device_id"],
        "device_index": raw["device_index"],
        "device_count": raw["device_count"],
        "limits": dict(raw["limits"]),
        "submits": raw["submits"],
        "dispatches": raw["dispatches"],
        "staging": bool(raw["staging"]),
        "transfers": raw["transfers"],
        "batched_copies": raw["batched_copies"],
        "storage_16bit": bool(raw["storage_16bit"]),
        "upload_bytes": raw["upload_bytes"],
        "download_bytes": raw["download_bytes"],
        "subgroup_reductions": bool(raw["subgroup_reductions"]),
        "specialized_pipelines": raw["specialized_pipelines"],
    }


def gpu_available() -> bool:
    """True when a Vulkan device usable by torchburn is present (never raises)."""
    return bool(_C.engine_info("vulkan")["available"])


def gpu_backend() -> str:
    """``"Vulkan"`` when a GPU is usable, else ``"none"``."""
    return "Vulkan" if gpu_available() else "none"


def reset() -> None:
    """Forgets the Vulkan probe and re-reads ``TORCHBURN_ENGINE`` / ``TORCHBURN_DEVICE``, so changed
    settings take effect (tests). Raises ``ValueError`` for an invalid setting."""
    _C.engine_vulkan_reset()
    _C.engine_select_from_env()


def engine_run(engine: str, ops: Sequence[dict[str, Any]], arrays: Sequence[Any]) -> None:
    """Runs ``ops`` in order on ``engine`` over contiguous float32 ``arrays`` (numpy, torch, ...).

    Low-level and meant for tests and benchmarks: each array is copied into an engine buffer, the ops
    run as one batch (one GPU submission), and the arrays that ops write are copied back. An op is a
    dict with ``kind`` (``unary``, ``binary``, ``matmul``, ``softmax``, ``rms_norm``, ``layer_norm``),
    ``op`` (the unary/binary name, e.g. ``"gelu"``, ``"add"``), operand indices ``a``, ``b``, ``c``,
    ``y`` into ``arrays`` and the sizes of ``torchburn/engine.h`` (``n``, ``b_len``, ``m``, ``k``,
    ``rows``, ``len``, ``trans_b``, ``log``, ``eps``, ``alpha``, ``lo``, ``hi``; a matmul may write a
    column block of a wider output with ``y_stride`` and ``y_col0``). ``convert16`` (GPU engines with
    16-bit storage) takes ``code`` (0 widen, 1 narrow, 2 round) and ``format`` (1 bfloat16, 2 float16)
    and reads or writes torch float16/bfloat16 arrays as the 16-bit words.

    Example::

        >>> import numpy as np, torchburn.gpu as gpu
        >>> x = np.array([-1.0, 2.0], dtype=np.float32); y = np.empty_like(x)
        >>> gpu.engine_run("reference", [{"kind": "unary", "op": "relu", "n": 2, "a": 0, "y": 1}], [x, y])
        >>> y.tolist()
        [0.0, 2.0]
    """
    _C.engine_run(engine, list(ops), list(arrays))
