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


# ---- indexing ops: C kernels with autograd nodes (src/eager/index.c, src/pyext/eager_shape.c) ----

def _long_index(index: Any) -> Tensor:
    if isinstance(index, Tensor):
        return index
    from . import tensor
    return tensor(index, dtype=_types.int64)


def index_select(input: Tensor, dim: _py_int, index: Tensor) -> Tensor:
    return _C._tt_index_select(input, dim, _long_index(index))


def _nonzero(x: Tensor) -> Tensor:
    return _C._tt_nonzero(x)


def _getitem_advanced(self: Tensor, index: Any) -> Tensor:
    """Advanced indexing with PyTorch's placement rules: tensor (or list) indices are broadcast
    together; their result dims go where the first of them is when they are adjacent, else first."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for item in index:
        if isinstance(item, (list, tuple)):
            from . import tensor
            item = tensor(item)
        if isinstance(item, Tensor) and item.dtype in (_types.bool_, _types.uint8):
            # a mask stands for one long index per masked dim (its nonzero coordinates)
            coords = _nonzero(item)
            if item.ndim == 0:
                items.append(None)
                items.append(coords.new_zeros(0) if not item.item() else _C._tt_full((1,), 0, _types.int64))
                continue
            items.extend(coords.select(1, k) for k in range(item.ndim))
            continue
        items.append(item)
    # expand the ellipsis
    if builtins.any(i is Ellipsis for i in items):
        k = items.index(Ellipsis)
        used = builtins.sum(1 for i in items if i is not None and i is not Ellipsis)
        items = items[:k] + [slice(None)] * (self.ndim - used) + items[k + 1:]
    used = builtins.sum(1 for i in items if i is not None)
    if used > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
    items += [slice(None)] * (self.ndim - used)
    # apply the basic parts first, remembering where each tensor index goes in the viewed tensor
    basic, tensors, dim = [], [], 0
    for item in items:
        if isinstance(item, Tensor):
            basic.append(slice(None))
            tensors.append((dim, item))
            dim += 1
        elif item is None:
            basic.append(None)
            dim += 1
        elif isinstance(item, _py_int):
            basic.append(item)
        else:
            basic.append(item)
            dim += 1
    view = self[tuple(basic)]
    positions = [d for d, _ in tensors]
    shape = F.broadcast_shapes(*[t.shape for _, t in tensors])
    # linear index over the indexed dims (moved to the front, in order)
    sizes = [view.shape[d] for d in positions]
    linear = None
    for (d, t), size in zip(tensors, sizes):
        t = t.expand(*shape) if tuple(t.shape) != tuple(shape) else t
        bad = (t >= size) | (t < -size)
        if bad.any().item():
            value = t[bad].reshape(-1)[0].item() if t.numel() else 0
            raise IndexError(f"index {value} is out of bounds for dimension {d} with size {size}")
        t = F.remainder(t, size) if size else t
        linear = t if linear is None else linear * size + t
    rest = [d for d in range(view.ndim) if d not in positions]
    moved = view.permute(*(positions + rest)) if positions + rest != list(range(view.ndim)) else view
    flat = moved.reshape([-1] + [moved.shape[k] for k in range(len(positions), moved.ndim)])
    picked = index_select(flat, 0, linear.reshape(-1)).reshape(list(shape) + list(flat.shape[1:]))
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if adjacent and positions[0] > 0:
        nd = len(shape)
        order = list(range(nd, nd + positions[0])) + list(range(nd)) + list(range(nd + positions[0], picked.ndim))
        picked = picked.permute(*order)
    return picked


def _setitem_advanced(self: Tensor, index: Any, value: Any) -> None:
    if self.requires_grad and _C._tt_is_grad_enabled():
        raise NotImplementedError("turbo_torch: advanced-index assignment into a tensor that requires grad is not "
                                  "supported yet")
    with _no_grad():
        positions = _getitem_advanced(_C._tt_arange(0.0, 1.0, self.numel(), _types.int64).reshape(list(self.shape)), index)
        flat_positions = positions.reshape(-1)
        if isinstance(value, Tensor):
            values = value.to(self.dtype).expand(*positions.shape).reshape(-1)
        else:
            values = _C._tt_full(tuple(flat_positions.shape), value, self.dtype)
        flat = self.reshape(-1)
        updated = _C._tt_scatter(flat.contiguous(), 0, flat_positions, values, 0)
        self.copy_(updated.reshape(list(self.shape)))


def _setitem_autograd(self: Tensor, index: Any, value: Any) -> None:
    """x[index] = value inside an autograd graph: the new contents are computed out of place by a scatter
    (gradient: zero at the assigned positions for x, the gathered gradient for value), written into x,
    and x takes the scatter's history. Errors PyTorch raises for saved tensors of x still apply."""
    with _no_grad():
        positions = _getitem_any(_C._tt_arange(0.0, 1.0, self.numel(), _types.int64).reshape(list(self.shape)), index)
    flat_positions = positions.reshape(-1).contiguous()
    if not isinstance(value, Tensor):
        value = _C._tt_full((), value, self.dtype)
    source = value.to(self.dtype).expand(*positions.shape).reshape(-1)
    updated = _C._tt_scatter(self.reshape(-1), 0, flat_positions, source, 0).reshape(list(self.shape))
    with _no_grad():
        self.copy_(updated)
    _C._tt_adopt_history(self, updated)


def _getitem_any(t: Tensor, index: Any) -> Tensor:
    return t[index]


def _no_grad():
    from .autograd import no_grad
    return no_grad()


def gather(input: Tensor, dim: _py_int, index: Tensor, *, sparse_grad: _py_bool = False) -> Tensor:
    return _C._tt_gather(input, dim, index)


def take(input: Tensor, index: Tensor) -> Tensor:
    flat = input.reshape(-1)
    size = flat.shape[0]
    idx = index.reshape(-1)
    return index_select(flat, 0, F.remainder(idx, size) if size else idx).reshape(list(index.shape))


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
    return index_select(a.reshape(-1), 0, _nonzero(m.reshape(-1)).select(1, 0))


_REDUCE_CODES = {None: 0, "add": 1, "sum": 1, "multiply": 2, "prod": 2, "amax": 3, "amin": 4}


def scatter(input: Tensor, dim: _py_int, index: Tensor, src: Any = None, *, value: Any = None, reduce: Any = None) -> Tensor:
    return _C._tt_scatter(input, dim, index, value if src is None else src, _REDUCE_CODES[reduce])


def scatter_add(input: Tensor, dim: _py_int, index: Tensor, src: Tensor) -> Tensor:
    return _C._tt_scatter(input, dim, index, src, 1)


def scatter_reduce(input: Tensor, dim: _py_int, index: Tensor, src: Tensor, reduce: str, *, include_self: _py_bool = True) -> Tensor:
    if reduce == "mean" or not include_self:
        raise NotImplementedError("turbo_torch: scatter_reduce with reduce='mean' or include_self=False is not supported yet")
    return _C._tt_scatter(input, dim, index, src, _REDUCE_CODES[reduce])


def index_add(input: Tensor, dim: _py_int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    return _C._tt_index_add(input, dim, index, source, _py_float(alpha))


def topk(input: Tensor, k: _py_int, dim: _py_int = -1, largest: _py_bool = True, sorted: _py_bool = True) -> Any:
    values, indices = sort(input, dim, descending=largest)
    if input.ndim == 0:
        import collections
        return collections.namedtuple("topk", ["values", "indices"])(values, indices)
    import collections
    return collections.namedtuple("topk", ["values", "indices"])(F.narrow(values, dim, 0, k), F.narrow(indices, dim, 0, k))


_sort_type = None


def sort(input: Tensor, dim: _py_int = -1, descending: _py_bool = False, stable: _py_bool = False) -> Any:
    """Stable sort (C merge sort; NaN sorts as the largest), values differentiable through the indices."""
    global _sort_type
    if _sort_type is None:
        import collections
        _sort_type = collections.namedtuple("sort", ["values", "indices"])
    if isinstance(dim, _py_bool):  # sort(x, descending) positional form
        dim, descending = -1, dim
    values, indices = _C._tt_sort(input, dim, descending)
    return _sort_type(values, indices)


def argsort(input: Tensor, dim: _py_int = -1, descending: _py_bool = False, stable: _py_bool = False) -> Tensor:
    return sort(input, dim, descending).indices


def unique(input: Tensor, sorted: _py_bool = True, return_inverse: _py_bool = False, return_counts: _py_bool = False,
           dim: Any = None) -> Any:
    """Sorted unique values (or unique slices along dim), with inverse indices and counts."""
    if dim is None:
        values = input.reshape(-1).tolist()
        keys = values
        distinct = builtins.sorted(set(values))
        result = _C._tt_from_values(distinct, (len(distinct),), input.dtype)
    else:
        dim %= builtins.max(input.ndim, 1)
        moved = F.movedim(input, dim, 0)
        keys = [tuple(_flat(row)) for row in moved.tolist()] if moved.shape[0] else []
        distinct = builtins.sorted(set(keys))
        positions = [keys.index(k) for k in distinct]
        result = F.movedim(index_select(moved, 0, _long_index(positions)), 0, dim) if positions else input
    extras = []
    if return_inverse:
        where_index = {v: i for i, v in enumerate(distinct)}
        shape = tuple(input.shape) if dim is None else (len(keys),)
        extras.append(_C._tt_from_values([where_index[v] for v in keys], shape, _types.int64))
    if return_counts:
        counts = collections_counter(keys)
        extras.append(_C._tt_from_values([counts[v] for v in distinct], (len(distinct),), _types.int64))
    return (result, *extras) if extras else result


def _flat(value: Any) -> list:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


def collections_counter(keys: list) -> dict:
    counts: dict = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return counts


def install() -> None:
    import turbo_torch as tt
    for name in ("index_select", "gather", "take", "masked_fill", "masked_select", "scatter", "scatter_add",
                 "scatter_reduce", "index_add", "topk", "sort", "argsort", "unique"):
        setattr(tt, name, globals()[name])
        setattr(F, name, globals()[name])
    _C._tt_set_index_hooks(_getitem_advanced, _setitem_advanced, _setitem_autograd)
    _install_composites()

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
        "__deepcopy__": _deepcopy,
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


def _deepcopy(self: Tensor, memo: dict) -> Tensor:
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol "
                           "at the moment.  If you were attempting to deepcopy a module, this may be because of a "
                           "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
    result = self.detach().clone()
    if self.requires_grad:
        result.requires_grad_(True)
    memo[id(self)] = result
    return result


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


def _install_composites() -> None:
    """Module functions (and methods, where torch has them) for the composites of _composites.py."""
    import turbo_torch as tt
    from . import _composites as C
    methods = {"addcmul", "addcdiv", "addr", "addbmm", "aminmax", "cross", "cummax", "cummin", "logcumsumexp",
               "deg2rad", "rad2deg", "diag", "diag_embed", "diagflat", "diff", "dist", "equal", "isclose", "allclose",
               "heaviside", "kron", "ldexp", "logaddexp2", "msort", "narrow_copy", "ravel", "rot90", "sum_to_size",
               "take_along_dim", "vdot", "unique_consecutive", "median", "nanmedian", "kthvalue", "index_copy",
               "index_fill", "hsplit", "vsplit", "dsplit", "isreal", "isin", "select_scatter", "slice_scatter",
               "split_with_sizes", "cov", "corrcoef", "trapz", "tensordot"}
    for name in C.NAMES + ["trapz"]:
        fn = getattr(C, name)
        if not hasattr(tt, name):
            setattr(tt, name, fn)
        if name in methods and not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    for name in ("index_copy", "index_fill", "index_add", "scatter", "scatter_add", "masked_fill"):
        base = getattr(tt, name)
        setattr(Tensor, name + "_", (lambda base: lambda self, *a, **k: _inplace_result(self, base(self, *a, **k)))(base))


def _inplace_result(self: Tensor, result: Tensor) -> Tensor:
    if self.requires_grad and self.is_leaf and _C._tt_is_grad_enabled():
        _inplace_leaf_error()
    if _C._tt_is_grad_enabled() and (self.requires_grad or result.requires_grad):
        raise NotImplementedError("turbo_torch: this in-place index op inside an autograd graph is not supported yet; "
                                  "use its out-of-place form")
    self.copy_(result)
    return self
