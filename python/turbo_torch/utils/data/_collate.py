"""default_collate / default_convert of turbo_torch.utils.data: how a list of samples becomes a batch,
with torch's output types, shapes and dtypes (tensors stacked on a new dim 0; Python floats -> float64,
ints -> int64, bools -> bool tensors; strings kept as lists; mappings, namedtuples and sequences
collated per field; tuples come back as lists, as torch does)."""
from __future__ import annotations

import collections.abc
import copy
from typing import Any

__all__ = ["default_collate", "default_convert"]

_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_numpy(obj: Any) -> bool:
    return type(obj).__module__ == "numpy"


def default_convert(data: Any) -> Any:
    """Turns numpy arrays (and numpy arrays inside containers) into tensors; leaves everything else."""
    import turbo_torch as torch
    if isinstance(data, torch.Tensor):
        return data
    if _is_numpy(data) and type(data).__name__ == "ndarray":
        if data.dtype.kind in "SUO":
            return data
        return torch.as_tensor(data)
    if _is_numpy(data) and type(data).__name__ not in ("str_", "bytes_") and hasattr(data, "dtype"):
        return torch.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            clone = copy.copy(data)
            clone.update({key: default_convert(data[key]) for key in data})
            return clone
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def default_collate(batch: Any) -> Any:
    """Collates a list of samples into a batch (see the module docstring for the rules)."""
    import turbo_torch as torch
    elem = batch[0]
    if isinstance(elem, torch.Tensor):
        return torch.stack(list(batch), 0)
    if _is_numpy(elem) and type(elem).__name__ not in ("str_", "bytes_"):
        if type(elem).__name__ in ("ndarray", "memmap"):
            if elem.dtype.kind in "SUO":
                raise TypeError(_ERROR.format(elem.dtype))
            return default_collate([torch.as_tensor(b) for b in batch])
        if elem.shape == ():  # numpy scalars keep their dtype (np.float32 -> float32)
            import numpy
            return torch.from_numpy(numpy.asarray(batch))
    if isinstance(elem, float):
        return torch.tensor(batch, dtype=torch.float64)
    if isinstance(elem, int):
        return torch.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        try:
            clone = copy.copy(elem)
            clone.update({key: default_collate([d[key] for d in batch]) for key in elem})
            return clone
        except TypeError:
            return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(samples) for samples in transposed]
        try:
            return type(elem)([default_collate(samples) for samples in transposed])
        except TypeError:
            return [default_collate(samples) for samples in transposed]
    raise TypeError(_ERROR.format(type(elem)))
