"""Datasets of turbo_torch.utils.data with torch.utils.data's semantics: map-style ``Dataset`` (indexable,
sized), ``IterableDataset`` (a stream), and the combinators ``TensorDataset``, ``Subset``,
``ConcatDataset``, ``ChainDataset`` and ``random_split``.

Example::

    >>> import turbo_torch as torch
    >>> from turbo_torch.utils.data import TensorDataset, random_split
    >>> ds = TensorDataset(torch.arange(10), torch.arange(10) * 2)
    >>> train, test = random_split(ds, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    >>> len(train), len(test)
    (8, 2)
"""
from __future__ import annotations

import bisect
import itertools
import math
import warnings
from typing import Any, Iterable, List, Optional, Sequence

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "ChainDataset",
           "random_split"]


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and usually ``__len__``."""

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define ``__iter__``. With worker processes each worker runs
    its own copy; ``get_worker_info()`` tells it which share to produce."""

    def __iter__(self) -> Any:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Any) -> "ChainDataset":
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are ``tuple(t[i] for t in tensors)``; every tensor must have the same first dim."""

    def __init__(self, *tensors: Any) -> None:
        assert all(tensors[0].size(0) == tensor.size(0) for tensor in tensors), "Size mismatch between tensors"
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: List[int]) -> List[Any]:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[idx] for idx in indices])
        return [self.dataset[self.indices[idx]] for idx in indices]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The datasets one after another (map-style only)."""

    @staticmethod
    def cumsum(sequence: Iterable[Any]) -> List[int]:
        result, total = [], 0
        for dataset in sequence:
            total += len(dataset)
            result.append(total)
        return result

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = list(datasets)
        assert len(self.datasets) > 0, "datasets should not be an empty iterable"
        for d in self.datasets:
            assert not isinstance(d, IterableDataset), "ConcatDataset does not support IterableDataset"
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> Any:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another."""

    def __init__(self, datasets: Iterable[Any]) -> None:
        self.datasets = datasets

    def __iter__(self) -> Any:
        for d in self.datasets:
            assert isinstance(d, IterableDataset), "ChainDataset only supports IterableDataset"
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            assert isinstance(d, IterableDataset), "ChainDataset only supports IterableDataset"
            total += len(d)
        return total


def random_split(dataset: Any, lengths: Sequence[Any], generator: Optional[Any] = None) -> List[Subset]:
    """Splits ``dataset`` into non-overlapping random subsets of the given lengths (ints, or fractions
    summing to 1: each gets floor(fraction * n) and the remainder goes round-robin from the first)."""
    import turbo_torch as torch
    if generator is None:
        generator = torch.default_generator
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        subset_lengths: List[int] = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(int(math.floor(len(dataset) * frac)))
        remainder = len(dataset) - sum(subset_lengths)
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.")
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = torch.randperm(sum(lengths), generator=generator).tolist()
    return [Subset(dataset, indices[offset - length: offset])
            for offset, length in zip(itertools.accumulate(lengths), lengths)]
