"""Lowering rules for the ops the graph computes through the eager core (src/graph/exec_eager.c):
reductions with indices (argmax/argmin, max/min along a dim), cumsum/cumprod/logcumsumexp, prod/all/
any, vector norms, gather, scatter (replace, add and the sum/prod/amax/amin reductions), index_select,
index_add, flip, roll, tril/triu and advanced indexing with integer index tensors (index, index_put).

Their gradients need no rule of their own: aot_autograd writes them with ATen ops that lower here
too (gather's backward is a scatter_add, index_select's an index_add, max's a scatter, cumsum's a
flipped cumsum, logcumsumexp's flipped logcumsumexps, x[i]'s an index_put with accumulate, roll's a
roll back, tril's a tril).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from .. import _C
from .lowering import DTYPE_NAMES, FLOATS, INDEX, INTEGRAL, Builder, LoweringError, is_tensor, meta, rule

aten = torch.ops.aten

EAGER_REDUCE = {name: i for i, name in enumerate(_C._tt_reduce_names())}

_VALUES = FLOATS + (torch.bool,)


def _arg(n: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    return n.args[index] if len(n.args) > index else n.kwargs.get(name, default)


def _dim(b: Builder, n: torch.fx.Node, value: Any) -> int:
    ndim = len(b.shape(n.args[0]))
    dim = int(b.scalar(value))
    return dim % ndim if ndim else 0


def _dim_mask(b: Builder, x: torch.fx.Node, dims: Optional[Any]) -> int:
    ndim = len(b.shape(x))
    if dims is None:
        return 0
    if isinstance(dims, (int, torch.SymInt)):
        dims = [dims]
    if len(dims) == 0:
        return 0
    mask = 0
    for d in dims:
        mask |= 1 << (int(b.scalar(d)) % max(ndim, 1))
    return mask


def _ndim_ok(n: torch.fx.Node) -> bool:
    return len(meta(n.args[0]).shape) <= 8


# ---- max/min along a dim, argmax/argmin ----------------------------------------------------------


@rule(aten.max.dim, aten.min.dim, check=_ndim_ok, dtypes=_VALUES, index=True)
def _max_dim(b: Builder, n: torch.fx.Node) -> tuple:
    keepdim = bool(_arg(n, 2, "keepdim", False))
    first = b.add("max_dim", [b.value(n.args[0])], {"dim": _dim(b, n, n.args[1]), "keepdim": int(keepdim),
                                                    "is_max": int(n.target == aten.max.dim)})
    return first, first + 1


@rule(aten.argmax.default, aten.argmin.default, check=_ndim_ok, dtypes=FLOATS, index=True)
def _argmax(b: Builder, n: torch.fx.Node) -> int:
    dim = _arg(n, 1, "dim")
    keepdim = bool(_arg(n, 2, "keepdim", False))
    x = b.value(n.args[0])
    if dim is None:  # over all elements: the flat index
        flat = b.view(x, [math.prod(b.shape(n.args[0]))])
        first = b.add("max_dim", [flat], {"dim": 0, "keepdim": 0, "is_max": int(n.target == aten.argmax.default)})
        return b.view(first + 1, b.shape(n))
    first = b.add("max_dim", [x], {"dim": _dim(b, n, dim), "keepdim": int(keepdim),
                                   "is_max": int(n.target == aten.argmax.default)})
    return first + 1


# ---- cumulative ops ------------------------------------------------------------------------------


_SCAN = {aten.cumsum.default: 0, aten.cumprod.default: 1, aten.logcumsumexp.default: 2}


@rule(*_SCAN, check=_ndim_ok, dtypes=_VALUES, index=True)
def _scan(b: Builder, n: torch.fx.Node) -> int:
    """Integer and bool inputs too (cumprod's backward counts zeros with an int64 cumsum of a mask)."""
    if n.target == aten.logcumsumexp.default and meta(n).dtype not in FLOATS:
        raise LoweringError("logcumsumexp of an integer tensor")
    return b.add("scan", [b.value(n.args[0])], {"dim": _dim(b, n, n.args[1]), "op": _SCAN[n.target],
                                                "dtype": b.dtype(n)})


# ---- reductions of the eager core ----------------------------------------------------------------


_REDUCTIONS = {
    aten.prod.default: "prod", aten.prod.dim_int: "prod", aten.all.default: "all", aten.all.dim: "all",
    aten.all.dims: "all", aten.any.default: "any", aten.any.dim: "any", aten.any.dims: "any",
    aten.nansum.default: "nansum", aten.count_nonzero.dim_IntList: "count_nonzero",
    aten.count_nonzero.default: "count_nonzero",
}


@rule(*_REDUCTIONS, check=_ndim_ok, dtypes=_VALUES, index=True)
def _eager_reduce(b: Builder, n: torch.fx.Node) -> int:
    x = n.args[0]
    full = n.target in (aten.prod.default, aten.all.default, aten.any.default, aten.nansum.default,
                        aten.count_nonzero.default) and len(n.args) < 2
    dims = None if full else n.args[1]
    keepdim = False if full else bool(_arg(n, 2, "keepdim", False))
    return b.add("eager_reduce", [b.value(x)], {"op": EAGER_REDUCE[_REDUCTIONS[n.target]], "dim_mask": _dim_mask(b, x, dims),
                                                "keepdim": int(keepdim), "dtype": b.dtype(n)})


def _norm_check(n: torch.fx.Node) -> bool:
    ord_ = _arg(n, 1, "ord", 2)
    return _ndim_ok(n) and isinstance(ord_, (int, float)) and not isinstance(ord_, bool)


@rule(aten.linalg_vector_norm.default, check=_norm_check, dtypes=FLOATS)
def _vector_norm(b: Builder, n: torch.fx.Node) -> int:
    x = n.args[0]
    dims = _arg(n, 2, "dim")
    keepdim = bool(_arg(n, 3, "keepdim", False))
    return b.add("vector_norm", [b.value(x)], {"op": 0, "dim_mask": _dim_mask(b, x, dims), "keepdim": int(keepdim),
                                               "dtype": b.dtype(n), "p": float(_arg(n, 1, "ord", 2))})


# ---- index ops -----------------------------------------------------------------------------------


@rule(aten.gather.default, check=lambda n: not _arg(n, 3, "sparse_grad", False), dtypes=_VALUES, index=True)
def _gather(b: Builder, n: torch.fx.Node) -> int:
    return b.add("gather", [b.value(n.args[0]), b.value(n.args[2])], {"dim": _dim(b, n, n.args[1])})


_SCATTER_REDUCE = {"sum": 1, "prod": 2, "amax": 3, "amin": 4}


def _scatter_check(n: torch.fx.Node) -> bool:
    if n.target == aten.scatter_reduce.two:
        return n.args[4] in _SCATTER_REDUCE and bool(_arg(n, 5, "include_self", True))
    if n.target in (aten.scatter.reduce, aten.scatter.value_reduce):
        return n.kwargs.get("reduce", n.args[4] if len(n.args) > 4 else None) in ("add", "multiply")
    return True


@rule(aten.scatter.src, aten.scatter.value, aten.scatter_add.default, aten.scatter_reduce.two, aten.scatter.reduce,
      aten.scatter.value_reduce, check=_scatter_check, dtypes=_VALUES, index=True)
def _scatter(b: Builder, n: torch.fx.Node) -> int:
    x, dim, index, src = n.args[:4]
    reduce = 0
    if n.target == aten.scatter_add.default:
        reduce = 1
    elif n.target == aten.scatter_reduce.two:
        reduce = _SCATTER_REDUCE[n.args[4]]
    elif n.target in (aten.scatter.reduce, aten.scatter.value_reduce):
        reduce = {"add": 1, "multiply": 2}[n.kwargs.get("reduce", n.args[4] if len(n.args) > 4 else None)]
    inputs = [b.value(x), b.value(index)]
    params = {"dim": _dim(b, n, dim), "reduce": reduce, "has_src": int(isinstance(src, torch.fx.Node))}
    if isinstance(src, torch.fx.Node):
        inputs.append(b.value(src))
    else:
        params["value"] = float(b.scalar(src))
    return b.add("scatter", inputs, params)


@rule(aten.index_select.default, dtypes=_VALUES, index=True)
def _index_select(b: Builder, n: torch.fx.Node) -> int:
    return b.add("index_select", [b.value(n.args[0]), b.value(n.args[2])], {"dim": _dim(b, n, n.args[1])})


@rule(aten.index_add.default, dtypes=FLOATS, index=True)
def _index_add(b: Builder, n: torch.fx.Node) -> int:
    alpha = _arg(n, 4, "alpha", 1)
    if not isinstance(alpha, (int, float)):
        raise LoweringError("index_add alpha")
    return b.add("index_add", [b.value(n.args[0]), b.value(n.args[2]), b.value(n.args[3])],
                 {"dim": _dim(b, n, n.args[1]), "alpha": float(alpha)})


# ---- sort, topk ----------------------------------------------------------------------------------


def _sort_args(n: torch.fx.Node) -> tuple:
    if n.target == aten.sort.stable:
        return n.kwargs.get("dim", -1), bool(n.kwargs.get("descending", False))
    return _arg(n, 1, "dim", -1), bool(_arg(n, 2, "descending", False))


@rule(aten.sort.default, aten.sort.stable, check=_ndim_ok, dtypes=FLOATS, index=True)
def _sort(b: Builder, n: torch.fx.Node) -> tuple:
    """A stable sort (NaN largest): what PyTorch's CPU sort gives, stable or not, for distinct values;
    ties keep their input order."""
    dim, descending = _sort_args(n)
    first = b.add("sort", [b.value(n.args[0])], {"dim": _dim(b, n, dim), "descending": int(descending)})
    return first, first + 1


@rule(aten.topk.default, check=lambda n: _ndim_ok(n) and bool(_arg(n, 4, "sorted", True)), dtypes=FLOATS, index=True)
def _topk(b: Builder, n: torch.fx.Node) -> tuple:
    """The first k of a sort along dim (largest: descending)."""
    k = int(b.scalar(n.args[1]))
    dim = _dim(b, n, _arg(n, 2, "dim", -1))
    largest = bool(_arg(n, 3, "largest", True))
    first = b.add("sort", [b.value(n.args[0])], {"dim": dim, "descending": int(largest)})
    return tuple(b.add("slice", [first + o], {"dim": dim, "start": 0, "end": k, "step": 1}) for o in range(2))


# ---- rearrangements: flip, roll, tril/triu ------------------------------------------------------


def _mask_of(b: Builder, x: torch.fx.Node, dims: Any) -> int:
    ndim = max(len(b.shape(x)), 1)
    mask = 0
    for d in ([dims] if isinstance(dims, (int, torch.SymInt)) else dims):
        mask |= 1 << (int(b.scalar(d)) % ndim)
    return mask


@rule(aten.flip.default, check=_ndim_ok, dtypes=_VALUES, index=True)
def _flip(b: Builder, n: torch.fx.Node) -> int:
    x = n.args[0]
    if not b.shape(x):  # a 0-dim tensor flips to itself
        return b.add("copy", [b.value(x)], {"dtype": b.dtype(n)})
    return b.add("flip", [b.value(x)], {"dim_mask": _mask_of(b, x, n.args[1]), "shifts": [0] * 8})


@rule(aten.roll.default, check=_ndim_ok, dtypes=_VALUES, index=True)
def _roll(b: Builder, n: torch.fx.Node) -> int:
    """roll(x, shifts, dims); without dims over the flattened tensor."""
    x = n.args[0]
    shape = b.shape(x)
    shifts = [int(b.scalar(s)) for s in (n.args[1] if isinstance(n.args[1], (list, tuple)) else [n.args[1]])]
    dims = _arg(n, 2, "dims", [])
    dims = [dims] if isinstance(dims, int) else list(dims)
    value = b.value(x)
    if not dims:
        if len(shifts) != 1:
            raise LoweringError("roll without dims takes one shift")
        flat = b.view(value, [math.prod(shape)])
        return b.view(b.add("roll", [flat], {"dim_mask": 0, "shifts": shifts + [0] * 7}), shape)
    if len(dims) != len(shifts) or not shape:
        raise LoweringError("roll: shifts and dims differ in length")
    per_dim = [0] * 8
    for s, d in zip(shifts, dims):
        per_dim[int(b.scalar(d)) % len(shape)] += s
    return b.add("roll", [value], {"dim_mask": 0, "shifts": per_dim})


@rule(aten.tril.default, aten.triu.default, check=lambda n: 2 <= len(meta(n.args[0]).shape) <= 8, dtypes=_VALUES,
      index=True)
def _triangle(b: Builder, n: torch.fx.Node) -> int:
    return b.add("triangle", [b.value(n.args[0])], {"diagonal": int(b.scalar(_arg(n, 1, "diagonal", 0))),
                                                    "upper": int(n.target == aten.triu.default)})


# ---- advanced indexing ---------------------------------------------------------------------------


def _index_check(n: torch.fx.Node) -> bool:
    """Integer index tensors only: a bool mask selects a data-dependent number of elements."""
    x, indices = n.args[0], n.args[1]
    ndim = len(meta(x).shape)
    if not 0 < len(indices) <= min(ndim, 8) or all(i is None for i in indices):
        return False
    return all(i is None or (isinstance(i, torch.fx.Node) and meta(i).dtype in INDEX) for i in indices)


def _index_inputs(b: Builder, indices: Any) -> tuple:
    mask, values = 0, []
    for d, index in enumerate(indices):
        if index is not None:
            mask |= 1 << d
            values.append(b.value(index))
    return mask, values


@rule(aten.index.Tensor, aten._unsafe_index.Tensor, check=_index_check, dtypes=_VALUES, index=True)
def _index(b: Builder, n: torch.fx.Node) -> int:
    mask, indices = _index_inputs(b, n.args[1])
    return b.add("index", [b.value(n.args[0])] + indices, {"index_mask": mask, "accumulate": 0})


@rule(aten.index_put.default, aten._unsafe_index_put.default, check=_index_check, dtypes=_VALUES, index=True)
def _index_put(b: Builder, n: torch.fx.Node) -> int:
    """x.index_put(indices, values, accumulate) (out of place; index_put_ is functionalized to it)."""
    if meta(n.args[2]).dtype != meta(n.args[0]).dtype:
        raise LoweringError("index_put: values of another dtype")
    mask, indices = _index_inputs(b, n.args[1])
    accumulate = bool(_arg(n, 3, "accumulate", False))
    return b.add("index_put", [b.value(n.args[0]), b.value(n.args[2])] + indices,
                 {"index_mask": mask, "accumulate": int(accumulate)})


# ---- pointwise ops on integer tensors ------------------------------------------------------------

_KINDS = _C._tt_op_kinds()  # name -> (arity, kind), in the op table's enum order per arity
_PW_INDEX = {}
for _arity in ("unary", "binary"):
    for _i, _name in enumerate(k for k, v in _KINDS.items() if v[0] == _arity):
        _PW_INDEX[_name] = _i
# ops whose table entry takes parameters: only clamp has a meaning on integers (its bounds are lo/hi)
_PARAMETRIC = {"softplus", "elu", "celu", "leaky_relu", "hardtanh", "logit", "nan_to_num", "pow_scalar", "gelu",
               "gelu_tanh", "round"}
_PW_TARGETS = {}
for _name, (_arity, _kind) in _KINDS.items():
    _packet = getattr(aten, _name, None)
    for _overload in ("default",) if _arity == "unary" else ("Tensor", "Scalar", "default"):
        if _packet is not None and hasattr(_packet, _overload) and _name not in _PARAMETRIC:
            _PW_TARGETS[getattr(_packet, _overload)] = _name
_PW_TARGETS[aten.clamp_min.default] = _PW_TARGETS[aten.clamp_max.default] = "clamp"
_NON_FLOAT64 = tuple(t for t in DTYPE_NAMES if t != torch.float64)


def _example(value: Any) -> Any:
    """A stand-in for result_type: a tensor of the value's dtype and rank class, or the scalar."""
    if is_tensor(value):
        return torch.empty(() if value.ndim == 0 else (1,), dtype=value.dtype)
    return value


def _pointwise_check(n: torch.fx.Node) -> bool:
    name = _PW_TARGETS[n.target]
    count = 1 if _KINDS[name][0] == "unary" else 2
    if name == "clamp":
        return all(a is None or isinstance(a, (int, float)) for a in list(n.args[1:3]) + list(n.kwargs.values()))
    if len(n.args) < count or not isinstance(n.args[0], torch.fx.Node) or len(meta(n).shape) > 8:
        return False
    alpha = _arg(n, 2, "alpha", 1) if count == 2 else 1
    return all(isinstance(a, (torch.fx.Node, int, float, bool)) for a in n.args[:count]) and \
        isinstance(alpha, (int, float))


@rule(*_PW_TARGETS, check=_pointwise_check, dtypes=_NON_FLOAT64, index=True, integer=True)
def _integer_pointwise(b: Builder, n: torch.fx.Node) -> int:
    """A pointwise op of the op table on integer tensors, computed exactly by the eager core (the index
    arithmetic of position ids and of cumprod's backward: sub, relu, eq on int64)."""
    name = _PW_TARGETS[n.target]
    arity, kind = _KINDS[name]
    out = b.dtype(n)
    if arity == "unary":
        compute = b.dtype(n.args[0]) if kind == "test" else out
        params = {"op": _PW_INDEX[name], "binary": 0, "compute_dtype": compute, "dtype": out}
        if name == "clamp":
            lo, hi = _arg(n, 1, "min"), _arg(n, 2, "max")
            if n.target == aten.clamp_max.default:
                lo, hi = None, n.args[1]
            params.update(lo=-math.inf if lo is None else float(lo), hi=math.inf if hi is None else float(hi))
        return b.add("eager_pointwise", [b.value(n.args[0])], params)
    x, y = n.args[0], n.args[1]
    promoted = torch.result_type(_example(b.meta(x)), _example(b.meta(y)))
    compute = DTYPE_NAMES[promoted] if kind in ("cmp", "logic", "bits") else out
    params = {"op": _PW_INDEX[name], "binary": 1, "compute_dtype": compute, "dtype": out,
              "alpha": float(_arg(n, 2, "alpha", 1))}
    if isinstance(y, torch.fx.Node):
        return b.add("eager_pointwise", [b.value(x), b.value(y)], {**params, "scalar_side": 0})
    return b.add("eager_pointwise", [b.value(x)], {**params, "scalar_side": 1, "scalar": float(b.scalar(y))})


def _arange_check(n: torch.fx.Node) -> bool:
    return all(isinstance(a, int) and not isinstance(a, bool) for a in n.args) and len(meta(n).shape) == 1


@rule(aten.arange.default, aten.arange.start, aten.arange.start_step, check=_arange_check, dtypes=_NON_FLOAT64,
      index=True, integer=True)
def _arange(b: Builder, n: torch.fx.Node) -> int:
    """An integer arange (position ids, cache positions) as start - step + step * cumsum(ones), exact
    in int64. Float aranges stay in PyTorch (its rounding of start + i * step is its own)."""
    args = list(n.args)
    start, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
    count = b.shape(n)[0]
    dtype = b.dtype(n)
    counted = b.add("scan", [b.full(1.0, dtype, [count])], {"dim": 0, "op": 0, "dtype": dtype})
    scaled = b.add("eager_pointwise", [counted], {"op": _PW_INDEX["mul"], "binary": 1, "scalar_side": 1,
                                                  "scalar": float(step), "compute_dtype": dtype, "dtype": dtype,
                                                  "alpha": 1.0})
    return b.add("eager_pointwise", [scaled], {"op": _PW_INDEX["add"], "binary": 1, "scalar_side": 1,
                                               "scalar": float(start - step), "compute_dtype": dtype, "dtype": dtype,
                                               "alpha": 1.0})
