"""Tensor methods that are not C slots: attached to turbo_torch.Tensor at import. Each forwards to the
module function of the same name (so method and function never disagree), plus conversions, indexing
helpers and in-place variants (``x.add_(y)``) of every table op."""
from __future__ import annotations

import builtins
from typing import Any

from torchburn import _C

from . import _functions as F
from . import _types

Tensor = _C.EagerTensor
_py_bool, _py_int, _py_float = builtins.bool, builtins.int, builtins.float


def _item(self: Tensor) -> Any:
    if self.numel() != 1:
        raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    if self.dtype is _types.bool_:
        return _py_bool(self._flat_values()[0])
    return self._flat_values()[0]


def _tolist(self: Tensor) -> Any:
    flat = self._flat_values()
    if self.dtype is _types.bool_:
        flat = [_py_bool(v) for v in flat]
    shape = list(self.shape)
    if not shape:
        return flat[0]

    def build(offset: _py_int, dims: list) -> Any:
        if len(dims) == 1:
            return flat[offset:offset + dims[0]]
        step = 1
        for s in dims[1:]:
            step *= s
        return [build(offset + i * step, dims[1:]) for i in range(dims[0])]
    return build(0, shape)


def _to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    target = kwargs.get("dtype")
    for a in args:
        if isinstance(a, _types.dtype):
            target = a
        elif isinstance(a, Tensor):
            target = a.dtype
    copy = kwargs.get("copy", False)
    if target is None or target is self.dtype:
        return self.clone() if copy else self
    return _C._tt_view(self, F._VIEW_CAST, target._index)


def _size(self: Tensor, dim: Any = None) -> Any:
    if dim is None:
        return self.shape
    return self.shape[dim]


def _stride(self: Tensor, dim: Any = None) -> Any:
    strides = tuple(_C.Tensor.strides.__get__(self))
    return strides if dim is None else strides[dim]


def _numpy(self: Tensor, *, force: _py_bool = False) -> Any:
    if self.requires_grad:
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
    return _C.Tensor.numpy(self)


def _type_conversion(d: _types.dtype):
    return lambda self, memory_format=None: _to(self, d)


def _iter(self: Tensor):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(F.unbind(self, 0))


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, **kw: Any) -> Tensor:
    from . import tensor
    return tensor(data, dtype=dtype or self.dtype)


def _new_full(self: Tensor, size: Any, fill: Any, *, dtype: Any = None, **kw: Any) -> Tensor:
    return _C._tt_full(tuple(size), fill, dtype or self.dtype)


def _inplace(name: str):
    if name in F._UNARY:
        op = F._UNARY[name]
        return lambda self: _C._tt_inplace(op, False, self, None, 1.0)
    op = F._BINARY[name]

    def method(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
        return _C._tt_inplace(op, True, self, other, _py_float(alpha))
    return method


# ---- indexing ops (composites over select/cat, so autograd comes from the C nodes) ----

def index_select(input: Tensor, dim: _py_int, index: Tensor) -> Tensor:
    dim %= builtins.max(input.ndim, 1)
    positions = index.reshape(-1).tolist()
    size = input.shape[dim]
    for p in positions:
        if p < -size or p >= size:
            raise IndexError(f"index out of range in self")
    if not positions:
        return F.narrow(input, dim, 0, 0)
    return F.stack([F.select(input, dim, p) for p in positions], dim)


def _getitem_advanced(self: Tensor, index: Any) -> Tensor:
    if not isinstance(index, tuple):
        index = (index,)
    # one tensor/list index (plus basic ones): select along its dim
    converted = []
    for item in index:
        if isinstance(item, (list, tuple)) and not isinstance(item, _types.Size):
            from . import tensor
            item = tensor(item)
        converted.append(item)
    tensor_positions = [k for k, item in enumerate(converted) if isinstance(item, Tensor)]
    if len(tensor_positions) == 1:
        k = tensor_positions[0]
        idx = converted[k]
        prefix = converted[:k]
        dims_before = builtins.sum(0 if (i is None or i is Ellipsis) else 1 for i in prefix
                                   if not isinstance(i, _py_int)) + builtins.sum(0 for i in prefix if isinstance(i, _py_int))
        if idx.dtype is _types.bool_ or idx.dtype is _types.uint8:
            base = self[tuple(prefix)] if prefix else self
            flat_mask = idx.reshape(-1).tolist()
            start = dims_before
            lead = list(base.shape[:start])
            n = idx.ndim
            merged = base.reshape(lead + [-1] + list(base.shape[start + n:]))
            picks = [i for i, v in enumerate(flat_mask) if v]
            result = index_select(merged, start, F.tensor_of(picks, _types.int64))
            rest = tuple(converted[k + 1:])
            return result[(slice(None),) * (start + 1) + rest] if rest else result
        base = self[tuple(prefix)] if prefix else self
        start = dims_before
        size = base.shape[start]
        flat = [p + size if p < 0 else p for p in idx.reshape(-1).tolist()]
        for p in flat:
            if p < 0 or p >= size:
                raise IndexError(f"index {p} is out of bounds for dimension {start} with size {size}")
        picked = index_select(base, start, F.tensor_of(flat, _types.int64))
        shape = list(base.shape[:start]) + list(idx.shape) + list(base.shape[start + 1:])
        result = picked.reshape(shape)
        rest = tuple(converted[k + 1:])
        return result[(slice(None),) * (start + idx.ndim) + rest] if rest else result
    # several tensor indices: broadcast them and pick element by element (torch's placement rules
    # put the broadcast dims first when the tensor indices are not adjacent)
    tensors = [converted[k] for k in tensor_positions]
    shape = F.broadcast_shapes(*[t.shape for t in tensors])
    expanded = [t.expand(*shape).reshape(-1).tolist() for t in tensors]
    if builtins.any(not isinstance(i, Tensor) for i in converted) or len(tensor_positions) != self.ndim:
        raise NotImplementedError("turbo_torch: mixing several tensor indices with slices is not supported yet")
    flat_self = self.reshape(-1)
    strides = []
    acc = 1
    for s in reversed(self.shape):
        strides.insert(0, acc)
        acc *= s
    positions = []
    for j in range(len(expanded[0])):
        pos = 0
        for d, values in enumerate(expanded):
            v = values[j]
            if v < 0:
                v += self.shape[d]
            if v < 0 or v >= self.shape[d]:
                raise IndexError(f"index {values[j]} is out of bounds for dimension {d} with size {self.shape[d]}")
            pos += v * strides[d]
        positions.append(pos)
    return index_select(flat_self, 0, F.tensor_of(positions, _types.int64)).reshape(list(shape))


def _setitem_advanced(self: Tensor, index: Any, value: Any) -> None:
    if self.requires_grad and _C._tt_is_grad_enabled():
        raise NotImplementedError("turbo_torch: advanced-index assignment into a tensor that requires grad is not "
                                  "supported yet")
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) == 1 and isinstance(index[0], Tensor) and index[0].dtype is _types.bool_:
        mask = index[0]
        if tuple(mask.shape) == tuple(self.shape[:mask.ndim]):
            flat_mask = mask.reshape(-1).tolist()
            merged = self.reshape([-1] + list(self.shape[mask.ndim:]))
            picks = [i for i, v in enumerate(flat_mask) if v]
            values = value if isinstance(value, Tensor) else None
            for j, i in enumerate(picks):
                merged[i] = value if values is None or values.ndim == 0 else (values[j] if values.shape[0] == len(picks) else values)
            if merged.data_ptr() != self.data_ptr() or not self.is_contiguous():
                raise NotImplementedError("turbo_torch: masked assignment into a non-contiguous tensor is not supported yet")
            return
    converted = [F.tensor_of([i] if isinstance(i, _py_int) else list(i), _types.int64)
                 if isinstance(i, (list, tuple)) else i for i in index]
    if len(converted) == 1 and isinstance(converted[0], Tensor):
        positions = converted[0].reshape(-1).tolist()
        values = value if isinstance(value, Tensor) else None
        for j, p in enumerate(positions):
            self[p] = value if values is None or values.ndim == 0 else values[j]
        return
    raise NotImplementedError("turbo_torch: this advanced-index assignment is not supported yet")


def gather(input: Tensor, dim: _py_int, index: Tensor) -> Tensor:
    dim %= input.ndim
    flat_input = input.reshape(-1)
    strides = []
    acc = 1
    for s in reversed(input.shape):
        strides.insert(0, acc)
        acc *= s
    idx_shape = list(index.shape)
    values = index.reshape(-1).tolist()
    positions = []
    for k, v in enumerate(values):
        rest = k
        coords = []
        for s in reversed(idx_shape):
            coords.append(rest % s)
            rest //= s
        coords.reverse()
        if v < 0 or v >= input.shape[dim]:
            raise RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {input.shape[dim]}")
        coords[dim] = v
        positions.append(builtins.sum(c * st for c, st in zip(coords, strides)))
    if not positions:
        return _C._tt_full(tuple(idx_shape), 0.0, input.dtype)
    return index_select(flat_input, 0, F.tensor_of(positions, _types.int64)).reshape(idx_shape)


def take(input: Tensor, index: Tensor) -> Tensor:
    flat = input.reshape(-1)
    return index_select(flat, 0, index.reshape(-1)).reshape(list(index.shape))


def masked_fill(input: Tensor, mask: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor")
        value = value.to(input.dtype)
    else:
        value = _C._tt_full((), value, input.dtype)
    return F.where(mask, value, input)


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    a, m = F.broadcast_tensors(input, mask)
    flat = a.reshape(-1)
    picks = [i for i, v in enumerate(m.reshape(-1).tolist()) if v]
    return index_select(flat, 0, F.tensor_of(picks, _types.int64))


def _scatter_impl(input: Tensor, dim: _py_int, index: Tensor, src: Any, reduce: Any) -> Tensor:
    out = input.detach().clone()
    dim %= input.ndim
    idx_values = index.reshape(-1).tolist()
    idx_shape = list(index.shape)
    src_is_tensor = isinstance(src, Tensor)
    src_flat = src.reshape(-1).tolist() if src_is_tensor and src.shape == index.shape else None
    flat_out = out.reshape(-1)
    strides = []
    acc = 1
    for s in reversed(out.shape):
        strides.insert(0, acc)
        acc *= s
    src_strides = []
    if src_is_tensor and src_flat is None:
        acc = 1
        for s in reversed(src.shape):
            src_strides.insert(0, acc)
            acc *= s
        src_all = src.reshape(-1).tolist()
    values = flat_out.tolist()
    for k, v in enumerate(idx_values):
        rest, coords = k, []
        for s in reversed(idx_shape):
            coords.append(rest % s)
            rest //= s
        coords.reverse()
        if src_is_tensor:
            value = src_flat[k] if src_flat is not None else src_all[builtins.sum(c * st for c, st in zip(coords, src_strides))]
        else:
            value = src
        if v < 0 or v >= out.shape[dim]:
            raise RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {out.shape[dim]}")
        coords[dim] = v
        pos = builtins.sum(c * st for c, st in zip(coords, strides))
        if reduce in ("add", "sum"):
            values[pos] += value
        elif reduce in ("multiply", "prod"):
            values[pos] *= value
        elif reduce == "amax":
            values[pos] = builtins.max(values[pos], value)
        elif reduce == "amin":
            values[pos] = builtins.min(values[pos], value)
        else:
            values[pos] = value
    return _C._tt_from_values(values, tuple(out.shape), out.dtype)


def scatter(input: Tensor, dim: _py_int, index: Tensor, src: Any = None, *, value: Any = None, reduce: Any = None) -> Tensor:
    return _scatter_impl(input, dim, index, value if src is None else src, reduce)


def scatter_add(input: Tensor, dim: _py_int, index: Tensor, src: Tensor) -> Tensor:
    return _scatter_impl(input, dim, index, src, "add")


def scatter_reduce(input: Tensor, dim: _py_int, index: Tensor, src: Tensor, reduce: str, *, include_self: _py_bool = True) -> Tensor:
    return _scatter_impl(input, dim, index, src, reduce)


def index_add(input: Tensor, dim: _py_int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    dim %= input.ndim
    result = input
    for j, p in enumerate(index.tolist()):
        pad = [F.narrow(result, dim, 0, p), F.narrow(result, dim, p, 1) + alpha * F.narrow(source, dim, j, 1),
               F.narrow(result, dim, p + 1, input.shape[dim] - p - 1)]
        result = F.cat(pad, dim)
    return result


def topk(input: Tensor, k: _py_int, dim: _py_int = -1, largest: _py_bool = True, sorted: _py_bool = True) -> Any:
    values, indices = sort(input, dim, descending=largest)
    import collections
    return collections.namedtuple("topk", ["values", "indices"])(F.narrow(values, dim, 0, k), F.narrow(indices, dim, 0, k))


def sort(input: Tensor, dim: _py_int = -1, descending: _py_bool = False, stable: _py_bool = False) -> Any:
    import collections
    import math
    dim %= builtins.max(input.ndim, 1)
    if input.ndim == 0:
        return collections.namedtuple("sort", ["values", "indices"])(input.clone(), _C._tt_full((), 0, _types.int64))
    moved = F.movedim(input, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1]).tolist() if moved.numel() else []
    order_rows = []
    for row in rows:
        def key(i: _py_int, row=row) -> Any:
            v = row[i]
            nan = isinstance(v, _py_float) and math.isnan(v)
            return (1, 0) if nan else (0, v)
        order = builtins.sorted(range(len(row)), key=key, reverse=descending)
        if descending:
            # stable descending with NaN first (torch puts NaN as the largest)
            order = builtins.sorted(range(len(row)), key=lambda i, row=row: (
                0 if (isinstance(row[i], _py_float) and math.isnan(row[i])) else 1,
                -row[i] if not (isinstance(row[i], _py_float) and math.isnan(row[i])) else 0))
        order_rows.append(order)
    shape = list(moved.shape)
    indices = _C._tt_from_values([i for r in order_rows for i in r], tuple(shape), _types.int64)
    flat_positions = [r * shape[-1] + i for r, order in enumerate(order_rows) for i in order]
    values = index_select(moved.reshape(-1), 0, F.tensor_of(flat_positions, _types.int64)).reshape(shape) \
        if flat_positions else moved.clone()
    return collections.namedtuple("sort", ["values", "indices"])(F.movedim(values, -1, dim), F.movedim(indices, -1, dim))


def argsort(input: Tensor, dim: _py_int = -1, descending: _py_bool = False, stable: _py_bool = False) -> Tensor:
    return sort(input, dim, descending).indices


def unique(input: Tensor, sorted: _py_bool = True, return_inverse: _py_bool = False, return_counts: _py_bool = False,
           dim: Any = None) -> Any:
    values = input.reshape(-1).tolist()
    distinct = builtins.sorted(set(values))
    result = _C._tt_from_values(distinct, (len(distinct),), input.dtype)
    extras = []
    if return_inverse:
        where_index = {v: i for i, v in enumerate(distinct)}
        extras.append(_C._tt_from_values([where_index[v] for v in values], tuple(input.shape), _types.int64))
    if return_counts:
        extras.append(_C._tt_from_values([values.count(v) for v in distinct], (len(distinct),), _types.int64))
    return (result, *extras) if extras else result


def install() -> None:
    import turbo_torch as tt
    for name in ("index_select", "gather", "take", "masked_fill", "masked_select", "scatter", "scatter_add",
                 "scatter_reduce", "index_add", "topk", "sort", "argsort", "unique"):
        setattr(tt, name, globals()[name])
        setattr(F, name, globals()[name])
    _C._tt_set_index_hooks(_getitem_advanced, _setitem_advanced)

    methods = {
        "item": _item, "tolist": _tolist, "to": _to, "size": _size, "stride": _stride, "numpy": _numpy,
        "__iter__": _iter, "new_tensor": _new_tensor, "new_full": _new_full,
        "new_zeros": lambda self, *size, dtype=None, **kw: _C._tt_full(F._size_arg(size), 0, dtype or self.dtype),
        "new_ones": lambda self, *size, dtype=None, **kw: _C._tt_full(F._size_arg(size), 1, dtype or self.dtype),
        "new_empty": lambda self, *size, dtype=None, **kw: _C._tt_full(F._size_arg(size), 0, dtype or self.dtype),
        "float": _type_conversion(_types.float32), "double": _type_conversion(_types.float64),
        "half": _type_conversion(_types.float16), "bfloat16": _type_conversion(_types.bfloat16),
        "long": _type_conversion(_types.int64), "int": _type_conversion(_types.int32),
        "short": _type_conversion(_types.int16), "char": _type_conversion(_types.int8),
        "byte": _type_conversion(_types.uint8), "bool": _type_conversion(_types.bool_),
        "type_as": lambda self, other: _to(self, other.dtype),
        "cpu": lambda self, *a, **k: self, "cuda": None,
        "is_floating_point": lambda self: self.dtype.is_floating_point,
        "element_size": lambda self: self.dtype.itemsize,
        "nelement": lambda self: self.numel(),
        "register_hook": lambda self, hook: (self._register_hook(hook), _Handle())[1],
        "__len__": None,
        "__array__": lambda self, dtype=None: _numpy(self) if dtype is None else _numpy(self).astype(dtype),
        "__contains__": lambda self, value: _py_bool((self == value).any()),
        "__format__": lambda self, spec: format(self.item(), spec) if self.ndim == 0 and spec else repr(self),
        "__reduce_ex__": None,
        "apply_": None,
        "repeat": F.repeat_tensor,
        "index_select": index_select, "gather": gather, "take": take, "masked_fill": masked_fill,
        "masked_select": masked_select, "scatter": scatter, "scatter_add": scatter_add,
        "scatter_reduce": scatter_reduce, "index_add": index_add, "topk": topk, "sort": sort, "argsort": argsort,
        "unique": unique,
        "masked_fill_": lambda self, mask, value: self.copy_(masked_fill(self, mask, value)),
        "copy_": _copy_,
        "zero_": lambda self: self.fill_(0),
        "fill_": _fill_,
        "uniform_": lambda self, a=0.0, b=1.0, generator=None: self.copy_(F.__dict__.get("_rand_like", None)(self, a, b)),
        "normal_": lambda self, mean=0.0, std=1.0, generator=None: self.copy_(_randn_like(self) * std + mean),
        "expand_as": lambda self, other: self.expand(*other.shape),
        "view_as": lambda self, other: self.view(*other.shape),
        "reshape_as": lambda self, other: self.reshape(*other.shape),
        "numel": None,
    }
    for name, fn in methods.items():
        if fn is not None:
            setattr(Tensor, name, fn)
    # properties
    Tensor.T = property(lambda self: self.permute(*reversed(range(self.ndim))))
    Tensor.mT = property(lambda self: self.transpose(-2, -1))
    Tensor.H = Tensor.T
    Tensor.is_cuda = property(lambda self: False)
    Tensor.is_sparse = property(lambda self: False)
    Tensor.is_quantized = property(lambda self: False)
    Tensor.is_meta = property(lambda self: False)
    Tensor.layout = property(lambda self: "torch.strided")
    Tensor.itemsize = property(lambda self: self.dtype.itemsize)
    Tensor.nbytes = property(lambda self: self.numel() * self.dtype.itemsize)

    # every module function taking the tensor first becomes a method of the same name
    skip = {"tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "empty", "arange", "linspace",
            "logspace", "eye", "rand", "randn", "randint", "randperm", "normal", "cat", "stack", "concat",
            "concatenate", "hstack", "vstack", "meshgrid", "broadcast_shapes", "broadcast_tensors", "einsum",
            "tensor_of", "full_like_value", "where"}
    for name in F.__all__ + [n for n in dir(F) if not n.startswith("_")]:
        fn = getattr(F, name, None)
        if not callable(fn) or name in skip or isinstance(fn, type) or hasattr(Tensor, name) and name in (
                "view", "reshape", "permute", "expand", "transpose", "unsqueeze", "squeeze", "t", "contiguous",
                "clone", "sum", "numel", "dim", "backward", "detach", "detach_", "requires_grad_", "retain_grad"):
            continue
        if name in ("item", "tolist", "to", "size", "stride", "numpy", "is_floating_point"):
            continue
        setattr(Tensor, name, _as_method(fn))
    Tensor.where = lambda self, condition, other: F.where(condition, self, other)
    Tensor.repeat = F.repeat_tensor
    Tensor.clamp_ = lambda self, min=None, max=None: self.copy_(F.clamp(self, min, max)) if not self.requires_grad \
        else _inplace_leaf_error()
    # in-place forms of the table's ops
    for name in list(F._UNARY) + list(F._BINARY):
        if name in ("gelu_tanh", "pow_scalar"):
            continue
        setattr(Tensor, name + "_", _inplace(name))
    for alias, name in (("mul_", "mul"), ("div_", "div"), ("sub_", "sub"), ("add_", "add"), ("pow_", "pow")):
        setattr(Tensor, alias, _inplace(name))


def _as_method(fn: Any) -> Any:
    """C functions are not descriptors: wrap them so that x.exp() passes x."""
    if isinstance(fn, type(len)):
        def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
            return fn(self, *args, **kwargs)
        method.__name__ = getattr(fn, "__name__", "method").replace("_tt_", "")
        return method
    return fn


class _Handle:
    def remove(self) -> None:
        raise NotImplementedError("turbo_torch: removing a tensor hook is not supported yet")


def _inplace_leaf_error() -> None:
    raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def _copy_(self: Tensor, src: Any, non_blocking: _py_bool = False) -> Tensor:
    if self.requires_grad and self.is_leaf and _C._tt_is_grad_enabled():
        _inplace_leaf_error()
    self[...] = src
    return self


def _fill_(self: Tensor, value: Any) -> Tensor:
    if self.requires_grad and self.is_leaf and _C._tt_is_grad_enabled():
        _inplace_leaf_error()
    self[...] = value if not isinstance(value, Tensor) else value.item()
    return self


def _randn_like(self: Tensor) -> Tensor:
    return _C._tt_random(1, tuple(self.shape), self.dtype, 0.0, 1.0)


def _rand_like(self: Tensor, a: _py_float, b: _py_float) -> Tensor:
    return _C._tt_random(0, tuple(self.shape), self.dtype, _py_float(a), _py_float(b))


F._rand_like = _rand_like
