"""Lowering rules for the ops the graph computes through the eager core (src/graph/exec_eager.c):
reductions with indices (argmax/argmin, max/min along a dim), cumsum/cumprod, prod/all/any, vector
norms, gather, scatter (replace, add and the sum/prod/amax/amin reductions), index_select and index_add.

Their gradients need no rule of their own: aot_autograd writes them with ATen ops that lower here
too (gather's backward is a scatter_add, index_select's an index_add, max's a scatter, cumsum's a
flipped cumsum or a sum).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from .. import _C
from .lowering import FLOATS, Builder, LoweringError, meta, rule

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


@rule(aten.max.dim, aten.min.dim, check=_ndim_ok, dtypes=FLOATS, index=True)
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


@rule(aten.cumsum.default, aten.cumprod.default, check=_ndim_ok, dtypes=FLOATS)
def _scan(b: Builder, n: torch.fx.Node) -> int:
    return b.add("scan", [b.value(n.args[0])], {"dim": _dim(b, n, n.args[1]), "is_prod": int(n.target == aten.cumprod.default),
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


@rule(aten.gather.default, check=lambda n: not _arg(n, 3, "sparse_grad", False), dtypes=FLOATS, index=True)
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
      aten.scatter.value_reduce, check=_scatter_check, dtypes=FLOATS, index=True)
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


@rule(aten.index_select.default, dtypes=FLOATS, index=True)
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
