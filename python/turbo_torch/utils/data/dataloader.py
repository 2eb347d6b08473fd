"""DataLoader of turbo_torch.utils.data: batches from a dataset through a sampler and a collate function,
in this process or in ``num_workers`` worker processes — torch.utils.data.DataLoader's arguments, errors,
``len`` rules and batch order (with workers, batches still come back in sampler order).

Example::

    >>> import turbo_torch as torch
    >>> from turbo_torch.utils.data import DataLoader, TensorDataset
    >>> loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
    >>> [batch[0].tolist() for batch in loader]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
"""
from __future__ import annotations

import itertools
import multiprocessing
import queue
import time
from typing import Any, Callable, Dict, List, Optional

from . import _worker
from ._collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader"]

_POLL_SECONDS = 0.5  # how often a waiting loader checks that its workers are alive


class _InfiniteConstantSampler(Sampler):
    """The sampler of an iterable dataset: its values are ignored."""

    def __iter__(self) -> Any:
        while True:
            yield None


class DataLoader:
    """Iterates over ``dataset`` in batches. See torch.utils.data.DataLoader for every argument; here
    ``pin_memory`` is accepted and ignored (CPU only) and ``multiprocessing_context`` defaults to fork."""

    def __init__(self, dataset: Any, batch_size: Optional[int] = 1, shuffle: Optional[bool] = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Optional[Callable] = None, pin_memory: bool = False, drop_last: bool = False,
                 timeout: float = 0, worker_init_fn: Optional[Callable] = None, multiprocessing_context: Any = None,
                 generator: Any = None, *, prefetch_factor: Optional[int] = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._is_iterable = isinstance(dataset, IterableDataset)
        if self._is_iterable:
            if isinstance(shuffle, bool) and shuffle:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 f"sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified batch_sampler option, but got "
                                 f"batch_sampler={batch_sampler}")
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None:
            if self._is_iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._iterator: Any = None

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def _next_seed(self) -> int:
        """The base seed of an epoch's workers, drawn from the loader's generator as torch does."""
        import turbo_torch as torch
        return int(torch.randint(0, 2 ** 62, (), generator=self.generator).item())

    def __iter__(self) -> Any:
        if self.num_workers == 0:
            return _SingleProcessIterator(self)
        if self.persistent_workers:
            if self._iterator is None:
                self._iterator = _MultiProcessIterator(self)
            else:
                self._iterator._reset(first=False)
            return self._iterator
        return _MultiProcessIterator(self)

    def __len__(self) -> int:
        if self._is_iterable:
            length = len(self.dataset)
            if self.batch_size is not None:
                if self.drop_last:
                    return length // self.batch_size
                return -(-length // self.batch_size)
            return length
        return len(self._index_sampler)


class _SingleProcessIterator:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._base_seed = loader._next_seed()
        if loader._is_iterable:
            self._dataset_iter = iter(loader.dataset)
        else:
            self._sampler_iter = iter(loader._index_sampler)

    def __iter__(self) -> "_SingleProcessIterator":
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        loader = self._loader
        if loader._is_iterable:
            return _worker.fetch_iterable(self._dataset_iter, loader.batch_size, loader._auto_collation,
                                          loader.drop_last, loader.collate_fn)
        indices = next(self._sampler_iter)
        return _worker.fetch(loader.dataset, indices, loader._auto_collation, loader.collate_fn)


class _MultiProcessIterator:
    """Hands tasks to the workers round-robin (at most prefetch_factor per worker in flight) and yields
    their batches in task order."""

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        context = loader.multiprocessing_context
        if context is None or isinstance(context, str):
            context = multiprocessing.get_context(context or "fork")
        self._base_seed = loader._next_seed()
        self._result_queue = context.Queue()
        self._task_queues: List[Any] = []
        self._workers: List[Any] = []
        for worker_id in range(loader.num_workers):
            task_queue = context.SimpleQueue()  # synchronous puts: no feeder thread to lose at shutdown
            process = context.Process(
                target=_worker.worker_loop, daemon=True,
                args=(loader.dataset, loader._is_iterable, task_queue, self._result_queue, loader.collate_fn,
                      loader._auto_collation, loader.batch_size, loader.drop_last, self._base_seed,
                      loader.worker_init_fn, worker_id, loader.num_workers))
            process.start()
            self._task_queues.append(task_queue)
            self._workers.append(process)
        self._shut_down = False
        self._reset(first=True)

    def _reset(self, first: bool) -> None:
        loader = self._loader
        if not loader._is_iterable:
            self._sampler_iter = iter(loader._index_sampler)
        elif not first:
            for task_queue in self._task_queues:
                task_queue.put(("reset", None))
        self._epoch = getattr(self, "_epoch", -1) + 1  # results of an abandoned epoch are dropped
        self._send_index = 0
        self._receive_index = 0
        self._task_worker: Dict[int, int] = {}
        self._results: Dict[int, Any] = {}
        self._active = [True] * loader.num_workers
        self._worker_cycle = itertools.cycle(range(loader.num_workers))
        for _ in range(loader.prefetch_factor * loader.num_workers):
            self._put_task()

    def _put_task(self) -> None:
        if not any(self._active):
            return
        worker_id = next(self._worker_cycle)
        while not self._active[worker_id]:
            worker_id = next(self._worker_cycle)
        if self._loader._is_iterable:
            indices = None
        else:
            indices = next(self._sampler_iter, _worker._STOP)
            if indices is _worker._STOP:
                return
        self._task_queues[worker_id].put(((self._epoch, self._send_index), indices))
        self._task_worker[self._send_index] = worker_id
        self._send_index += 1

    def _get_result(self) -> Any:
        deadline = time.monotonic() + self._loader.timeout if self._loader.timeout > 0 else None
        while True:
            wait = _POLL_SECONDS if deadline is None else max(0.0, min(_POLL_SECONDS, deadline - time.monotonic()))
            try:
                return self._result_queue.get(timeout=wait)
            except queue.Empty:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                self._shutdown()
                raise RuntimeError(f"DataLoader timed out after {self._loader.timeout} seconds")
            dead = [str(w.pid) for w in self._workers if w.exitcode is not None]
            if dead:
                self._shutdown()
                raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly")

    def __iter__(self) -> "_MultiProcessIterator":
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        while True:
            if self._receive_index >= self._send_index:
                if not self._loader.persistent_workers:
                    self._shutdown()
                raise StopIteration
            if self._receive_index not in self._results:
                (epoch, task_index), worker_id, data = self._get_result()
                if epoch == self._epoch:
                    self._results[task_index] = data
                continue
            data = self._results.pop(self._receive_index)
            worker_id = self._task_worker.pop(self._receive_index)
            self._receive_index += 1
            if data is _worker._STOP or isinstance(data, _worker._Stop):
                self._active[worker_id] = False
                continue
            self._put_task()
            if isinstance(data, _worker._ExceptionWrapper):
                data.reraise()
            return data

    def _shutdown(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        for task_queue in self._task_queues:
            try:
                task_queue.put(None)
            except Exception:
                pass
        for process in self._workers:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1)
        self._result_queue.cancel_join_thread()
        self._result_queue.close()
        for task_queue in self._task_queues:
            task_queue.close()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:
            pass
