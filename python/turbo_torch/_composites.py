"""Ops that PyTorch defines as compositions of others (addcmul, kron, rot90, diff, cross, ...), written
here from the C primitives so their gradients come from the C autograd nodes. Each is checked by the
OpInfo conformance layer (tests/python/test_turbo_opinfo.py) against PyTorch's own sample inputs."""
from __future__ import annotations

import builtins
import collections
import math
from typing import Any, Optional, Sequence

from torchburn import _C

from . import _functions as F
from . import _types

Tensor = _C.EagerTensor
_py_int, _py_float, _py_bool = builtins.int, builtins.float, builtins.bool


def _m():
    from . import _methods
    return _methods


def _widened(fn, *tensors: Tensor) -> Tensor:
    """fn(*tensors), computed in float32 when the result is a 16-bit float and rounded once at the end,
    as torch's fused kernels compute them (each step rounded to half drifts by several ulps)."""
    result_dtype = _C._tt_result_type(*tensors)
    if result_dtype not in (_types.float16, _types.bfloat16):
        return fn(*tensors)
    return fn(*(t.to(_types.float32) for t in tensors)).to(result_dtype)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    return _widened(lambda x, a, b: x + value * a * b if value != 1 else x + a * b, input, tensor1, tensor2)


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Any = 1) -> Tensor:
    return _widened(lambda x, a, b: x + value * (a / b) if value != 1 else x + a / b, input, tensor1, tensor2)


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return F.scaled_sum(input, F.outer(vec1, vec2), beta, alpha, "addr")


def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    products = F.bmm(batch1, batch2)
    return F.scaled_sum(input, products.sum(0, dtype=products.dtype), beta, alpha, "addbmm")


def aminmax(input: Tensor, *, dim: Optional[_py_int] = None, keepdim: _py_bool = False) -> Any:
    result = collections.namedtuple("aminmax", ["min", "max"])
    if dim is None:
        return result(F.amin(input).reshape([1] * input.ndim if keepdim else []),
                      F.amax(input).reshape([1] * input.ndim if keepdim else []))
    return result(F.amin(input, dim, keepdim), F.amax(input, dim, keepdim))


def atleast_1d(*tensors: Any) -> Any:
    out = [t.reshape(1) if t.ndim == 0 else t for t in _tensors(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors: Any) -> Any:
    out = [t.reshape(1, 1) if t.ndim == 0 else t.unsqueeze(0) if t.ndim == 1 else t for t in _tensors(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors: Any) -> Any:
    def lift(t: Tensor) -> Tensor:
        if t.ndim == 0:
            return t.reshape(1, 1, 1)
        if t.ndim == 1:
            return t.reshape(1, -1, 1)
        if t.ndim == 2:
            return t.unsqueeze(-1)
        return t
    out = [lift(t) for t in _tensors(tensors)]
    return out[0] if len(out) == 1 else tuple(out)


def _tensors(tensors: Sequence[Any]) -> list:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return list(tensors[0])
    return list(tensors)


def block_diag(*tensors: Tensor) -> Tensor:
    mats = [t.reshape(1, -1) if t.ndim == 1 else t.reshape(1, 1) if t.ndim == 0 else t for t in tensors]
    if not mats:
        return _C._tt_full((1, 0), 0.0, _types.float32)
    dtype = mats[0].dtype
    for m in mats[1:]:
        dtype = F_promote(dtype, m.dtype)
    cols = builtins.sum(m.shape[1] for m in mats)
    rows, start = [], 0
    for m in mats:
        left = _C._tt_full((m.shape[0], start), 0, dtype)
        right = _C._tt_full((m.shape[0], cols - start - m.shape[1]), 0, dtype)
        rows.append(F.cat([left, m.to(dtype), right], 1))
        start += m.shape[1]
    return F.cat(rows, 0)


def F_promote(a: Any, b: Any) -> Any:
    return _C._tt_promote_types(a, b)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    if len(tensors) == 1:
        return tensors[0]
    grids = F.meshgrid(*tensors, indexing="ij")
    return F.stack([g.reshape(-1) for g in grids], 1)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    return F.cat([t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors], 1)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    return F.cat(list(atleast_3d(*tensors)) if len(tensors) > 1 else [atleast_3d(*tensors)], 2)


def hsplit(input: Tensor, sections: Any) -> tuple:
    return F.tensor_split(input, sections, 0 if input.ndim == 1 else 1)


def vsplit(input: Tensor, sections: Any) -> tuple:
    if input.ndim < 2:
        raise RuntimeError(f"torch.vsplit requires a tensor with at least 2 dimension, but got a tensor with "
                           f"{input.ndim} dimensions!")
    return F.tensor_split(input, sections, 0)


def dsplit(input: Tensor, sections: Any) -> tuple:
    if input.ndim < 3:
        raise RuntimeError(f"torch.dsplit requires a tensor with at least 3 dimension, but got a tensor with "
                           f"{input.ndim} dimensions!")
    return F.tensor_split(input, sections, 2)


def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    return input.clone()


def contiguous(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return input.contiguous()


def cross(input: Tensor, other: Tensor, dim: Optional[_py_int] = None) -> Tensor:
    a, b = F.broadcast_tensors(input, other)
    if dim is None:
        dim = next(d for d, s in enumerate(a.shape) if s == 3)
    a0, a1, a2 = (F.select(a, dim, i) for i in range(3))
    b0, b1, b2 = (F.select(b, dim, i) for i in range(3))
    return F.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], dim)


def _cumulative_extreme(input: Tensor, dim: _py_int, is_max: _py_bool) -> Any:
    result = collections.namedtuple("cummax" if is_max else "cummin", ["values", "indices"])
    if input.ndim == 0:
        return result(input.clone(), _C._tt_full((), 0, _types.int64))
    moved = F.movedim(input, dim, -1)
    rows = moved.reshape(-1, moved.shape[-1]).tolist() if moved.numel() else []
    index_rows = []
    for row in rows:
        best, picks = 0, []
        for i, v in enumerate(row):
            current = row[best]
            nan_v = isinstance(v, _py_float) and math.isnan(v)
            nan_c = isinstance(current, _py_float) and math.isnan(current)
            if nan_v or (not nan_c and (v >= current if is_max else v <= current)):
                best = i
            picks.append(best)
        index_rows.append(picks)
    shape = list(moved.shape)
    indices = _C._tt_from_values([i for r in index_rows for i in r], tuple(shape), _types.int64)
    values = F.gather(moved, moved.ndim - 1, indices) if moved.numel() else moved.clone()
    return result(F.movedim(values, -1, dim), F.movedim(indices, -1, dim))


def cummax(input: Tensor, dim: _py_int) -> Any:
    return _cumulative_extreme(input, dim, True)


def cummin(input: Tensor, dim: _py_int) -> Any:
    return _cumulative_extreme(input, dim, False)


def logcumsumexp(input: Tensor, dim: _py_int) -> Tensor:
    """A running logaddexp along dim (stable for every prefix, and exact at -inf/inf)."""
    if input.ndim == 0 or input.numel() == 0:
        return input.clone()
    pieces = F.unbind(input, dim)
    running = [pieces[0]]
    for piece in pieces[1:]:
        running.append(F.logaddexp(running[-1], piece))
    return F.stack(running, dim)


def deg2rad(input: Tensor) -> Tensor:
    return input * (math.pi / 180.0)


def rad2deg(input: Tensor) -> Tensor:
    return input * (180.0 / math.pi)


def diag(input: Tensor, diagonal: _py_int = 0) -> Tensor:
    if input.ndim == 1:
        n = input.shape[0] + builtins.abs(diagonal)
        return diag_embed(input, diagonal) if n else _C._tt_full((0, 0), 0, input.dtype)
    if input.ndim != 2:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{input.ndim}D")
    return F.diagonal(input, diagonal)


def diag_embed(input: Tensor, offset: _py_int = 0, dim1: _py_int = -2, dim2: _py_int = -1) -> Tensor:
    m = input.shape[-1]
    k = builtins.abs(offset)
    n = m + k
    # E[i, j] = 1 where j == i + offset (rows of the last-dim vector), then pad the missing rows with zeros
    columns = [i + offset if offset >= 0 else i for i in range(m)]
    mask = _C._tt_from_values([1 if j == columns[i] else 0 for i in range(m) for j in range(n)], (m, n), input.dtype)
    base = input.unsqueeze(-1) * mask
    if k:
        pad = _C._tt_full(tuple(input.shape[:-1]) + (k, n), 0, input.dtype)
        base = F.cat([base, pad] if offset > 0 else [pad, base], -2)
    nd = input.ndim + 1
    d1, d2 = dim1 % nd, dim2 % nd
    if (d1, d2) != (nd - 2, nd - 1):
        base = F.movedim(base, (nd - 2, nd - 1), (d1, d2))
    return base


def F_eye(n: _py_int, dtype: Any) -> Tensor:
    values = [1 if i == j else 0 for i in range(n) for j in range(n)]
    return _C._tt_from_values(values, (n, n), dtype)


def diagflat(input: Tensor, offset: _py_int = 0) -> Tensor:
    return diag(input.reshape(-1), offset)


def diff(input: Tensor, n: _py_int = 1, dim: _py_int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    if n == 0:
        return input  # torch ignores prepend/append when n is 0
    def edge(t: Any) -> Tensor:
        if not isinstance(t, Tensor):
            t = _C._tt_full((), t, input.dtype)
        if t.ndim == 0:  # a scalar is broadcast to a size-1 slice along dim
            shape = list(input.shape)
            shape[dim % input.ndim] = 1
            return t.expand(*shape)
        return t
    if prepend is not None:
        input = F.cat([edge(prepend), input], dim)
    if append is not None:
        input = F.cat([input, edge(append)], dim)
    for _ in range(n):
        size = input.shape[dim]
        if size == 0:
            break
        a = F.narrow(input, dim, 1, size - 1)
        b = F.narrow(input, dim, 0, size - 1)
        input = F.logical_xor(a, b) if input.dtype is _types.bool_ else a - b
    return input


def dist(input: Tensor, other: Tensor, p: Any = 2) -> Tensor:
    return F.norm(input - other, p)


def equal(input: Tensor, other: Tensor) -> _py_bool:
    return tuple(input.shape) == tuple(other.shape) and _py_bool(F.eq(input, other).all())


def isclose(input: Tensor, other: Any, rtol: _py_float = 1e-5, atol: _py_float = 1e-8, equal_nan: _py_bool = False) -> Tensor:
    if not isinstance(other, Tensor):
        other = _C._tt_full((), other, input.dtype)
    if input.dtype is _types.bool_ or not input.dtype.is_floating_point:
        return F.eq(input, other) if input.dtype is _types.bool_ else F.le(F.abs(input - other), atol + rtol * F.abs(other))
    close = F.eq(input, other) | (F.isfinite(input) & F.isfinite(other) &
                                  F.le(F.abs(input - other), atol + rtol * F.abs(other)))
    if equal_nan:
        close = close | (F.isnan(input) & F.isnan(other))
    return close


def allclose(input: Tensor, other: Tensor, rtol: _py_float = 1e-5, atol: _py_float = 1e-8, equal_nan: _py_bool = False) -> _py_bool:
    return _py_bool(isclose(input, other, rtol, atol, equal_nan).all())


def isin(elements: Any, test_elements: Any, *, assume_unique: _py_bool = False, invert: _py_bool = False) -> Tensor:
    if not isinstance(elements, Tensor):
        elements = _C._tt_full((), elements, _types.float32 if isinstance(elements, _py_float) else _types.int64)
    values = set(test_elements.reshape(-1).tolist() if isinstance(test_elements, Tensor) else [test_elements])
    flat = [(v in values) != invert for v in elements.reshape(-1).tolist()]
    return _C._tt_from_values(flat, tuple(elements.shape), _types.bool_)


def isreal(input: Tensor) -> Tensor:
    return _C._tt_full(tuple(input.shape), True, _types.bool_)


def heaviside(input: Tensor, values: Tensor) -> Tensor:
    zero = _C._tt_full((), 0, input.dtype)
    one = _C._tt_full((), 1, input.dtype)
    return F.where(F.eq(input, 0), values.to(input.dtype), F.where(F.gt(input, 0), one, zero))


def kron(input: Tensor, other: Tensor) -> Tensor:
    nd = builtins.max(input.ndim, other.ndim)
    a = input.reshape((1,) * (nd - input.ndim) + tuple(input.shape))
    b = other.reshape((1,) * (nd - other.ndim) + tuple(other.shape))
    a_shape, b_shape = [], []
    for sa, sb in zip(a.shape, b.shape):
        a_shape += [sa, 1]
        b_shape += [1, sb]
    product = a.reshape(a_shape) * b.reshape(b_shape)
    return product.reshape([sa * sb for sa, sb in zip(a.shape, b.shape)])


def ldexp(input: Tensor, other: Tensor) -> Tensor:
    return input * F.pow(2.0, other)


def logaddexp2(input: Tensor, other: Tensor) -> Tensor:
    ln2 = math.log(2.0)
    return F.logaddexp(input * ln2, other * ln2) / ln2


def msort(input: Tensor) -> Tensor:
    return _m().sort(input, 0).values


def narrow_copy(input: Tensor, dim: _py_int, start: _py_int, length: _py_int) -> Tensor:
    return F.narrow(input, dim, start, length).clone()


def ravel(input: Tensor) -> Tensor:
    return input.reshape(-1)


def rot90(input: Tensor, k: _py_int = 1, dims: Sequence[_py_int] = (0, 1)) -> Tensor:
    d0, d1 = dims
    k %= 4
    if k == 1:
        return F.flip(input, [d1]).transpose(d0, d1)
    if k == 2:
        return F.flip(input, [d0, d1])
    if k == 3:
        return F.flip(input, [d0]).transpose(d0, d1)
    return input.clone()


def select_scatter(input: Tensor, src: Tensor, dim: _py_int, index: _py_int) -> Tensor:
    dim %= input.ndim
    size = input.shape[dim]
    index %= size
    parts = [F.narrow(input, dim, 0, index), src.unsqueeze(dim), F.narrow(input, dim, index + 1, size - index - 1)]
    return F.cat(parts, dim)


def slice_scatter(input: Tensor, src: Tensor, dim: _py_int = 0, start: Optional[_py_int] = None,
                  end: Optional[_py_int] = None, step: _py_int = 1) -> Tensor:
    dim %= input.ndim
    size = input.shape[dim]
    start, end, step = slice(start, end, step).indices(size)
    positions = list(range(start, end, step))
    if not positions:
        return input.clone()
    index = _C._tt_from_values(positions, (len(positions),), _types.int64)
    shape = [1] * input.ndim
    shape[dim] = len(positions)
    full_index = index.reshape(shape).expand(*src.shape)
    with_zeros = _C._tt_scatter(input, dim, full_index.contiguous(), _C._tt_full(tuple(src.shape), 0, input.dtype), 0)
    return _C._tt_scatter(with_zeros, dim, full_index.contiguous(), src, 1) if True else None


def split_with_sizes(input: Tensor, split_sizes: Sequence[_py_int], dim: _py_int = 0) -> tuple:
    return F.split(input, list(split_sizes), dim)


def sum_to_size(input: Tensor, *size: Any) -> Tensor:
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else tuple(size)
    if not size:  # torch sums everything for the empty size, with sum's dtype (bool -> int64) even for 0-dim
        return input.sum()
    lead = input.ndim - len(size)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if s == 1 and input.shape[lead + i] != 1)
    return input.sum(dims, keepdim=True).reshape(size) if dims else input


def take_along_dim(input: Tensor, indices: Tensor, dim: Optional[_py_int] = None) -> Tensor:
    if dim is None:
        return _m().take(input, indices.reshape(-1))
    shape = F.broadcast_shapes(*[tuple(s if d != dim % input.ndim else 1 for d, s in enumerate(t.shape))
                                 for t in (input, indices)])
    a_shape = list(shape)
    a_shape[dim % input.ndim] = input.shape[dim]
    i_shape = list(shape)
    i_shape[dim % input.ndim] = indices.shape[dim]
    return F.gather(input.expand(*a_shape), dim, indices.expand(*i_shape).contiguous())


def tensordot(a: Tensor, b: Tensor, dims: Any = 2, out: Any = None) -> Tensor:
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, _py_int):
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = [list(d) if isinstance(d, (list, tuple)) else [d] for d in dims]
    if len(dims_a) != len(dims_b):
        raise RuntimeError(f"tensordot: both dimension lists should have the same length, got {len(dims_a)} "
                           f"and {len(dims_b)}")
    dims_a = [d % a.ndim for d in dims_a]
    dims_b = [d % b.ndim for d in dims_b]
    for da, db in zip(dims_a, dims_b):
        # a contracted size-1 dimension broadcasts against the other side: that side is summed first
        if b.shape[db] == 1 and a.shape[da] != 1:
            a = a.sum(da, keepdim=True, dtype=a.dtype)
        elif a.shape[da] == 1 and b.shape[db] != 1:
            b = b.sum(db, keepdim=True, dtype=b.dtype)
        elif a.shape[da] != b.shape[db]:
            raise RuntimeError(f"tensordot: contracted dimensions need to match, but first has size {a.shape[da]} "
                               f"in dim {da} and second has size {b.shape[db]} in dim {db}")
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = 1
    for d in dims_a:
        k *= a.shape[d]
    left = a.permute(*(free_a + dims_a)).reshape(-1, k)
    right = b.permute(*(dims_b + free_b)).reshape(k, -1)
    return F.matmul(left, right).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


def trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: _py_int = -1) -> Tensor:
    size = y.shape[dim]
    if size == 0:
        return y.sum(dim)
    a, b = F.narrow(y, dim, 1, size - 1), F.narrow(y, dim, 0, size - 1)
    if isinstance(x, Tensor):
        spacing = diff(x, dim=dim if x.ndim == y.ndim else -1)
        if x.ndim == 1 and y.ndim > 1:
            shape = [1] * y.ndim
            shape[dim] = size - 1
            spacing = spacing.reshape(shape)
        return ((a + b) * spacing).sum(dim) / 2
    spacing = 1.0 if dx is None and x is None else (x if dx is None else dx)
    return (a + b).sum(dim) * (spacing / 2)


trapz = trapezoid


def cumulative_trapezoid(y: Tensor, x: Any = None, *, dx: Any = None, dim: _py_int = -1) -> Tensor:
    size = y.shape[dim]
    if size == 0:
        return y
    a, b = F.narrow(y, dim, 1, size - 1), F.narrow(y, dim, 0, size - 1)
    if isinstance(x, Tensor):
        spacing = diff(x, dim=dim if x.ndim == y.ndim else -1)
        if x.ndim == 1 and y.ndim > 1:
            shape = [1] * y.ndim
            shape[dim] = size - 1
            spacing = spacing.reshape(shape)
        return F.cumsum((a + b) * spacing / 2, dim)
    spacing = 1.0 if dx is None and x is None else (x if dx is None else dx)
    return F.cumsum((a + b) * (spacing / 2), dim)


def vdot(input: Tensor, other: Tensor) -> Tensor:
    return F.dot(input, other)


def unique_consecutive(input: Tensor, return_inverse: _py_bool = False, return_counts: _py_bool = False,
                       dim: Any = None) -> Any:
    """Runs of equal elements (dim None: of the flattened input) or of equal slices along dim collapse to
    one; NaN equals nothing."""
    if dim is None:
        flat = _unique_consecutive_slices(input.reshape(-1), True, return_counts, 0)
        result = [flat[0]]
        if return_inverse:
            result.append(flat[1].reshape(tuple(input.shape)))
        if return_counts:
            result.append(flat[2])
        return result[0] if len(result) == 1 else tuple(result)
    return _unique_consecutive_slices(input, return_inverse, return_counts, dim)


def _unique_consecutive_slices(input: Tensor, return_inverse: _py_bool, return_counts: _py_bool, dim: _py_int) -> Any:
    """unique_consecutive along dim: runs of equal slices (all elements equal) collapse."""
    if input.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-input.ndim}, {input.ndim - 1}], "
                         f"but got {dim})")
    dim %= input.ndim
    n = input.shape[dim]
    rows = F.movedim(input, dim, 0).reshape(n, -1).tolist() if n else []
    kept, inverse, counts = [], [], []
    for i, row in enumerate(rows):
        if not kept or rows[kept[-1]] != row:
            kept.append(i)
            counts.append(0)
        counts[-1] += 1
        inverse.append(len(kept) - 1)
    result = [_m().index_select(input, dim, _C._tt_from_values(kept, (len(kept),), _types.int64))]
    if return_inverse:
        result.append(_C._tt_from_values(inverse, (n,), _types.int64))
    if return_counts:
        result.append(_C._tt_from_values(counts, (len(counts),), _types.int64))
    return result[0] if len(result) == 1 else tuple(result)


def _order_statistic(input: Tensor, dim: Optional[_py_int], keepdim: _py_bool, pick, name: str,
                     ignore_nan: _py_bool = False) -> Any:
    """Values and indices at a rank chosen by pick(n) of the sorted slices (NaN counts as largest)."""
    result = collections.namedtuple(name, ["values", "indices"])
    if dim is None:
        flat = input.reshape(-1)
        if flat.numel() == 0:
            raise RuntimeError(f"{name}() input tensor cannot be empty")
        values, indices = _m().sort(flat)
        n = flat.numel() if not ignore_nan else builtins.max(1, flat.numel() - _py_int(F.isnan(flat).sum()))
        if not ignore_nan and _py_bool(F.isnan(flat).any()):
            k = _py_int(F.argmax(F.isnan(flat).to(_types.int64)))
            return flat[k]
        return values[pick(n)]
    dim %= builtins.max(input.ndim, 1)
    if input.ndim == 0:
        return result(input.clone(), _C._tt_full((), 0, _types.int64))
    moved = F.movedim(input, dim, -1)
    values, indices = _m().sort(moved, -1)
    n = moved.shape[-1]
    picks = []
    for row_values in values.reshape(-1, n).tolist():
        nans = builtins.sum(1 for v in row_values if isinstance(v, _py_float) and math.isnan(v))
        if nans and not ignore_nan:
            picks.append(n - nans)  # the first NaN (sorted last)
        else:
            picks.append(pick(builtins.max(1, n - nans)))
    rows = values.reshape(-1, n)
    index = _C._tt_from_values(picks, (len(picks), 1), _types.int64)
    v = F.gather(rows, 1, index).reshape(list(moved.shape[:-1]))
    i = F.gather(indices.reshape(-1, n), 1, index).reshape(list(moved.shape[:-1]))
    if keepdim:
        v, i = v.unsqueeze(dim), i.unsqueeze(dim)
    return result(v, i)


def median(input: Tensor, dim: Optional[_py_int] = None, keepdim: _py_bool = False) -> Any:
    return _order_statistic(input, dim, keepdim, lambda n: (n - 1) // 2, "median")


def nanmedian(input: Tensor, dim: Optional[_py_int] = None, keepdim: _py_bool = False) -> Any:
    return _order_statistic(input, dim, keepdim, lambda n: (n - 1) // 2, "nanmedian", ignore_nan=True)


def kthvalue(input: Tensor, k: _py_int, dim: _py_int = -1, keepdim: _py_bool = False) -> Any:
    return _order_statistic(input, dim, keepdim, lambda n: k - 1, "kthvalue")


def _index_mask(input: Tensor, dim: _py_int, index: Tensor) -> Tensor:
    """A bool tensor broadcastable to input: True at the positions `index` names along dim."""
    if input.ndim == 0:
        if bool((index.reshape(-1) != 0).any()) if index.numel() else False:
            raise IndexError("index out of range for a 0-dim tensor (only 0 is valid)")
        return _C._tt_full((), index.numel() > 0, _types.bool_)
    size = input.shape[dim]
    flags = _C._tt_scatter(_C._tt_full((size,), 0, _types.int64), 0, index.reshape(-1).contiguous(), 1, 0)
    view = [1] * input.ndim
    view[dim] = size
    return (flags != 0).reshape(view)


def index_copy(input: Tensor, dim: _py_int, index: Tensor, source: Tensor) -> Tensor:
    dim %= builtins.max(input.ndim, 1)
    if input.ndim == 0:
        # one element: index [0] takes source's value (a where, so that each side gets its gradient)
        return F.where(_index_mask(input, dim, index), source.reshape(()), input)
    shape = [1] * input.ndim
    shape[dim] = index.numel()
    full = index.reshape(shape).expand(*source.shape).contiguous()
    return _C._tt_scatter(input, dim, full, source, 0)


def index_fill(input: Tensor, dim: _py_int, index: Tensor, value: Any) -> Tensor:
    dim %= builtins.max(input.ndim, 1)
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"index_fill_(): Expected 0-dim value tensor, but got a tensor with {value.ndim} dimension(s).")
        # a tensor value keeps its gradient: the sum of the gradient at the filled positions
        return F.where(_index_mask(input, dim, index), value.to(input.dtype), input)
    if input.ndim == 0:
        return F.where(_index_mask(input, dim, index), _C._tt_full((), value, input.dtype), input)
    shape = list(input.shape)
    shape[dim] = index.numel()
    view = [1] * input.ndim
    view[dim] = index.numel()
    full = index.reshape(view).expand(*shape).contiguous()
    return _C._tt_scatter(input, dim, full, value, 0)


def scalar_tensor(s: Any, *, dtype: Any = None, device: Any = None, **kw: Any) -> Tensor:
    return _C._tt_full((), s, dtype or _C._tt_get_default_dtype())


def repeat(input: Tensor, *sizes: Any) -> Tensor:
    return F.repeat_tensor(input, *sizes)


def expand_as(input: Tensor, other: Tensor) -> Tensor:
    return input.expand(*other.shape)


def view_as(input: Tensor, other: Tensor) -> Tensor:
    return input.view(*other.shape)


def reshape_as(input: Tensor, other: Tensor) -> Tensor:
    return input.reshape(*other.shape)


def expand(input: Tensor, *size: Any) -> Tensor:
    return input.expand(*size)


def view(input: Tensor, *shape: Any) -> Tensor:
    return input.view(*shape)


def cov(input: Tensor, *, correction: _py_int = 1, fweights: Any = None, aweights: Any = None) -> Tensor:
    """torch.cov: rows are variables, columns observations; fweights (integer repeat counts) and aweights
    (float importance) weight the observations, with NumPy's normalisation."""
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with {input.ndim} dimensions")
    if input.dtype is _types.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    if not input.dtype.is_floating_point:  # integer input: computed in the default float dtype, as torch
        input = input.to(_C._tt_get_default_dtype())
    x = input.reshape(1, -1) if input.ndim < 2 else input
    n = x.shape[1]
    weights = None
    for name, w in (("fweights", fweights), ("aweights", aweights)):
        if w is None:
            continue
        if w.ndim > 1:
            raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got {name} with {w.ndim} dimensions")
        if w.numel() != n:
            raise RuntimeError(f"cov(): expected {name} to have the same numel as there are observations in the "
                               f"input but got {w.numel()} != {n}")
        if name == "fweights" and w.dtype.is_floating_point:
            raise RuntimeError("cov(): expected fweights to have integral dtype but got fweights with "
                               f"{repr(w.dtype).replace('turbo_torch.', '')} dtype")
        if name == "aweights" and not w.dtype.is_floating_point:
            raise RuntimeError("cov(): expected aweights to have floating point dtype but got aweights with "
                               f"{repr(w.dtype).replace('turbo_torch.', '')} dtype")
        if bool((w < 0).any()):
            raise RuntimeError(f"cov(): {name} cannot be negative")
        w = w.reshape(-1)
        weights = w if weights is None else weights * w
    if weights is None:
        centered = x - F.mean(x, 1, keepdim=True)
        c = F.matmul(centered, centered.t()) / builtins.max(n - correction, 0)
    else:
        # the weights keep their own dtype (as in torch): with float32 aweights on float64 input the
        # normalisation is float32 arithmetic there too
        total = weights.sum()
        average = (x * weights).sum(1, keepdim=True) / total
        if aweights is None:
            norm = total - correction
        else:
            norm = total - correction * (weights * aweights.reshape(-1)).sum() / total
        norm = F.clamp(norm, min=0)
        centered = x - average
        c = F.matmul(centered * weights, centered.t()) / norm
    return c.reshape(()) if input.ndim < 2 or x.shape[0] == 1 else c


def corrcoef(input: Tensor) -> Tensor:
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = F.sqrt(F.diagonal(c))
    return F.clamp(c / d.unsqueeze(1) / d.unsqueeze(0), -1, 1)


NAMES = [n for n, v in list(globals().items()) if callable(v) and not n.startswith("_") and n not in
         ("Tensor", "Any", "Optional", "Sequence", "F_promote", "F_eye") and getattr(v, "__module__", None) == __name__]
