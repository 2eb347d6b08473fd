"""The worker processes of a DataLoader with ``num_workers > 0``.

Each worker gets tasks ``((epoch, index), indices)`` (map-style) or ``((epoch, index), None)`` (iterable:
"your next batch") on its own queue and answers ``(task_id, worker_id, batch)`` on the shared result queue, where a
batch that failed is an :class:`_ExceptionWrapper` and an exhausted iterable worker answers
:data:`_STOP`. Tensors travel by pickling (turbo_torch tensors pickle as their bytes, dtype and shape).
``None`` on the task queue ends the worker.
"""
from __future__ import annotations

import random
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["WorkerInfo", "get_worker_info"]


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker knows about itself (``get_worker_info()`` inside a worker, None in the main process)."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: Optional[WorkerInfo] = None


def get_worker_info() -> Optional[WorkerInfo]:
    """The :class:`WorkerInfo` of the calling worker process, or None in the main process."""
    return _worker_info


class _Stop:
    def __repr__(self) -> str:
        return "_STOP"


_STOP = _Stop()


class _ExceptionWrapper:
    """An exception raised in a worker, re-raised in the main process with the worker's traceback."""

    def __init__(self, exc_info: Any, where: str) -> None:
        self.exc_type = exc_info[0]
        self.message = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self) -> None:
        message = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.message}"
        if self.exc_type is KeyError:  # KeyError quotes its message; keep it readable
            message = KeyErrorMessage(message)
        try:
            exception = self.exc_type(message)
        except Exception:
            raise RuntimeError(message) from None
        raise exception


class KeyErrorMessage(str):
    def __repr__(self) -> str:
        return self


def fetch(dataset: Any, indices: Any, auto_collation: bool, collate_fn: Any) -> Any:
    """One batch of a map-style dataset (shared by the main process and the workers)."""
    if auto_collation:
        getitems = getattr(dataset, "__getitems__", None)
        data = getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
    else:
        data = dataset[indices]
    return collate_fn(data)


def fetch_iterable(iterator: Any, batch_size: Any, auto_collation: bool, drop_last: bool, collate_fn: Any) -> Any:
    """The next batch of an iterable dataset; raises StopIteration when there is none."""
    if not auto_collation:
        return collate_fn(next(iterator))
    data = []
    for _ in range(batch_size):
        try:
            data.append(next(iterator))
        except StopIteration:
            break
    if not data or (drop_last and len(data) < batch_size):
        raise StopIteration
    return collate_fn(data)


def worker_loop(dataset: Any, is_iterable: bool, task_queue: Any, result_queue: Any, collate_fn: Any,
                auto_collation: bool, batch_size: Any, drop_last: bool, base_seed: int, init_fn: Any,
                worker_id: int, num_workers: int) -> None:
    global _worker_info
    import turbo_torch as torch
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % (2 ** 32))
    _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
    init_error = None
    try:
        if init_fn is not None:
            init_fn(worker_id)
        iterator = iter(dataset) if is_iterable else None
    except Exception:
        init_error = _ExceptionWrapper(sys.exc_info(), f"in DataLoader worker process {worker_id}")
    exhausted = False
    while True:
        try:
            task = task_queue.get()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if task is None:
            return
        task_id, indices = task
        if isinstance(task_id, str) and task_id == "reset":  # persistent workers: a new epoch of an iterable dataset
            exhausted = False
            if is_iterable and init_error is None:
                iterator = iter(dataset)
            continue
        if init_error is not None:
            result = init_error
        elif exhausted:
            result = _STOP
        else:
            try:
                if is_iterable:
                    result = fetch_iterable(iterator, batch_size, auto_collation, drop_last, collate_fn)
                else:
                    result = fetch(dataset, indices, auto_collation, collate_fn)
            except StopIteration:
                exhausted = True
                result = _STOP
            except Exception:
                result = _ExceptionWrapper(sys.exc_info(), f"in DataLoader worker process {worker_id}")
        try:
            result_queue.put((task_id, worker_id, result))
        except Exception:  # an unpicklable batch: report it instead of dying silently
            result_queue.put((task_id, worker_id,
                              _ExceptionWrapper(sys.exc_info(), f"in DataLoader worker process {worker_id}")))
