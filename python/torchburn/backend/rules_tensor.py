"""Lowering rules for views, copies, constants, elementwise ops and reductions (see lowering.py)."""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from .. import _C
from .lowering import ANY, BINARY, COMPARE, FLOATS, REDUCE, UNARY, Builder, LoweringError, is_tensor, meta, rule

aten = torch.ops.aten


# ---- views ---------------------------------------------------------------------------------------


def _identity(b: Builder, n: torch.fx.Node) -> int:
    return b.value(n.args[0])


rule(aten.alias.default, aten.detach.default, dtypes=ANY)(_identity)


@rule(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
      aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints, dtypes=ANY)
def _view(b: Builder, n: torch.fx.Node) -> int:
    return b.view(b.value(n.args[0]), b.shape(n))


@rule(aten.t.default, aten.transpose.int, aten.permute.default, aten.numpy_T.default, dtypes=ANY)
def _permute(b: Builder, n: torch.fx.Node) -> int:
    x = b.value(n.args[0])
    ndim = len(b.shape(n.args[0]))
    dims = list(range(ndim))
    if n.target == aten.permute.default:
        dims = [d % ndim for d in b.ints(n.args[1])] if ndim else []
    elif n.target == aten.transpose.int:
        if ndim:
            d0, d1 = (int(b.scalar(d)) % ndim for d in n.args[1:3])
            dims[d0], dims[d1] = dims[d1], dims[d0]
    elif ndim == 2:
        dims = [1, 0]
    elif ndim > 2:
        dims = list(reversed(dims))
    return b.add("permute", [x], {"ndim": ndim, "dims": dims})


@rule(aten.expand.default, dtypes=ANY)
def _expand(b: Builder, n: torch.fx.Node) -> int:
    shape = list(b.shape(n))
    return b.add("expand", [b.value(n.args[0])], {"ndim": len(shape), "shape": shape})


def _clamp_index(value: Optional[int], size: int, default: int) -> int:
    if value is None:
        return default
    value = int(value)
    return max(min(value, size), -size - 1)


@rule(aten.slice.Tensor, dtypes=ANY)
def _slice(b: Builder, n: torch.fx.Node) -> int:
    args = list(n.args) + [None] * (5 - len(n.args))
    x, dim, start, end, step = args[:5]
    shape = b.shape(x)
    dim = int(b.scalar(dim if dim is not None else n.kwargs.get("dim", 0))) % max(len(shape), 1)
    size = shape[dim]
    start = _clamp_index(b.scalar(start if start is not None else n.kwargs.get("start")), size, 0)
    end = _clamp_index(b.scalar(end if end is not None else n.kwargs.get("end")), size, size)
    step = int(b.scalar(step if step is not None else n.kwargs.get("step", 1)))
    return b.add("slice", [b.value(x)], {"dim": dim, "start": start, "end": end, "step": step})


@rule(aten.select.int, dtypes=ANY)
def _select(b: Builder, n: torch.fx.Node) -> int:
    x, dim, index = n.args
    shape = b.shape(x)
    dim = int(b.scalar(dim)) % len(shape)
    index = int(b.scalar(index))
    index = index + shape[dim] if index < 0 else index
    sliced = b.add("slice", [b.value(x)], {"dim": dim, "start": index, "end": index + 1, "step": 1})
    return b.view(sliced, b.shape(n))


def _split_sizes(b: Builder, n: torch.fx.Node) -> tuple:
    x = n.args[0]
    shape = b.shape(x)
    dim = int(b.scalar(n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0))) % len(shape)
    if n.target == aten.split.Tensor:
        chunk = int(b.scalar(n.args[1]))
        sizes = [min(chunk, shape[dim] - s) for s in range(0, shape[dim], chunk)] or [0]
    else:
        sizes = b.ints(n.args[1])
    return dim, sizes


@rule(aten.split.Tensor, aten.split_with_sizes.default, dtypes=ANY)
def _split(b: Builder, n: torch.fx.Node) -> tuple:
    dim, sizes = _split_sizes(b, n)
    x = b.value(n.args[0])
    outs, start = [], 0
    for size in sizes:
        outs.append(b.add("slice", [x], {"dim": dim, "start": start, "end": start + size, "step": 1}))
        start += size
    return tuple(outs)


@rule(aten.unbind.int, dtypes=ANY)
def _unbind(b: Builder, n: torch.fx.Node) -> tuple:
    shape = b.shape(n.args[0])
    dim = int(b.scalar(n.args[1] if len(n.args) > 1 else 0)) % len(shape)
    x = b.value(n.args[0])
    out_shape = [s for d, s in enumerate(shape) if d != dim]
    return tuple(
        b.view(b.add("slice", [x], {"dim": dim, "start": i, "end": i + 1, "step": 1}), out_shape)
        for i in range(shape[dim])
    )


# ---- copies, constants ---------------------------------------------------------------------------


def _copy_check(n: torch.fx.Node) -> bool:
    memory_format = n.kwargs.get("memory_format")
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        return False
    device = n.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    return n.kwargs.get("layout") in (None, torch.strided)


@rule(aten.clone.default, aten._to_copy.default, aten.lift_fresh_copy.default, check=_copy_check,
      dtypes=FLOATS + (torch.bool, torch.int8, torch.uint8, torch.int16), index=True)
def _copy(b: Builder, n: torch.fx.Node) -> int:
    return b.add("copy", [b.value(n.args[0])], {"dtype": b.dtype(n)})


def _full_value(b: Builder, n: torch.fx.Node) -> float:
    t = n.target
    if t in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default):
        return 0.0
    if t in (aten.ones.default, aten.ones_like.default, aten.new_ones.default):
        return 1.0
    if t == aten.scalar_tensor.default:
        return float(b.scalar(n.args[0]))
    if t in (aten.full.default, aten.full_like.default, aten.new_full.default):
        return float(b.scalar(n.args[1] if len(n.args) > 1 else n.kwargs["fill_value"]))
    raise LoweringError(str(t))


def _full_check(n: torch.fx.Node) -> bool:
    value = meta(n)
    return is_tensor(value) and _copy_check(n)


@rule(aten.full.default, aten.zeros.default, aten.ones.default, aten.scalar_tensor.default, aten.full_like.default,
      aten.zeros_like.default, aten.ones_like.default, aten.new_zeros.default, aten.new_ones.default,
      aten.new_full.default, check=_full_check, dtypes=ANY)
def _full(b: Builder, n: torch.fx.Node) -> int:
    return b.full(_full_value(b, n), b.dtype(n), b.shape(n))


# ---- elementwise ---------------------------------------------------------------------------------

_UNARY_TARGETS = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.exp.default: "exp", aten.log.default: "log",
    aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt", aten.sin.default: "sin", aten.cos.default: "cos",
    aten.tanh.default: "tanh", aten.sigmoid.default: "sigmoid", aten.relu.default: "relu", aten.silu.default: "silu",
    aten.erf.default: "erf", aten.reciprocal.default: "reciprocal", aten.log1p.default: "log1p",
    aten.expm1.default: "expm1", aten.floor.default: "floor", aten.ceil.default: "ceil", aten.round.default: "round",
    aten.trunc.default: "trunc", aten.sign.default: "sign", aten.square.default: "square",
    aten.logical_not.default: "logical_not", aten.bitwise_not.default: "logical_not",
    aten.hardsigmoid.default: "hardsigmoid", aten.hardswish.default: "hardswish", aten.mish.default: "mish",
    aten.tan.default: "tan", aten.atan.default: "atan", aten.log2.default: "log2", aten.exp2.default: "exp2",
    aten.sgn.default: "sign",  # on real tensors (the norm's backward)
}


def _is_bool_only(n: torch.fx.Node) -> bool:
    return n.target != aten.bitwise_not.default or meta(n).dtype == torch.bool


# Every other parameter-free op of the op table (include/torchburn/op_table.h) lowers by its name: the
# graph evaluates table ops by their scalar formulas, so a new table op is lowerable with no edit here.
_TABLE_PARAMETRIC = {"softplus", "elu", "celu", "leaky_relu", "hardtanh", "logit", "round", "nan_to_num", "clamp",
                     "pow_scalar", "gelu", "gelu_tanh", "bitwise_not", "sgn"}
for _name, (_arity, _kind) in _C._tt_op_kinds().items():
    _packet = getattr(aten, _name, None)
    if _arity == "unary" and _name not in _TABLE_PARAMETRIC and _packet is not None and hasattr(_packet, "default"):
        _UNARY_TARGETS.setdefault(_packet.default, _name)


@rule(*_UNARY_TARGETS, check=_is_bool_only)
def _unary(b: Builder, n: torch.fx.Node) -> int:
    return b.add("unary", [b.value(n.args[0])], {"op": UNARY[_UNARY_TARGETS[n.target]], "dtype": b.dtype(n)})


def _unary_with(name: str, b: Builder, n: torch.fx.Node, **params) -> int:
    params.setdefault("lo", -math.inf)
    params.setdefault("hi", math.inf)
    return b.add("unary", [b.value(n.args[0])], {"op": UNARY[name], "dtype": b.dtype(n), **params})


@rule(aten.gelu.default)
def _gelu(b: Builder, n: torch.fx.Node) -> int:
    approximate = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
    return _unary_with("gelu_tanh" if approximate == "tanh" else "gelu", b, n)


@rule(aten.leaky_relu.default)
def _leaky_relu(b: Builder, n: torch.fx.Node) -> int:
    slope = b.scalar(n.args[1]) if len(n.args) > 1 else n.kwargs.get("negative_slope", 0.01)
    return _unary_with("leaky_relu", b, n, alpha=float(slope))


def _float_or_none(x: Any) -> bool:
    return x is None or isinstance(x, (int, float)) and not isinstance(x, bool)


@rule(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default, aten.hardtanh.default,
      check=lambda n: all(_float_or_none(a) for a in n.args[1:]))
def _clamp(b: Builder, n: torch.fx.Node) -> int:
    args = list(n.args[1:])
    if n.target == aten.clamp_min.default:
        lo, hi = args[0], None
    elif n.target == aten.clamp_max.default:
        lo, hi = None, args[0]
    elif n.target == aten.hardtanh.default:
        lo = args[0] if len(args) > 0 else -1.0
        hi = args[1] if len(args) > 1 else 1.0
    else:
        lo = args[0] if len(args) > 0 else n.kwargs.get("min")
        hi = args[1] if len(args) > 1 else n.kwargs.get("max")
    return _unary_with("clamp", b, n, lo=-math.inf if lo is None else float(lo), hi=math.inf if hi is None else float(hi))


@rule(aten.elu.default, check=lambda n: all(float(a) == 1.0 for a in n.args[3:4]))
def _elu(b: Builder, n: torch.fx.Node) -> int:
    """elu(x, alpha, scale, input_scale) with input_scale 1 (selu: scale * elu(x, alpha))."""
    alpha = float(n.args[1]) if len(n.args) > 1 else 1.0
    scale = float(n.args[2]) if len(n.args) > 2 else 1.0
    out = _unary_with("elu", b, n, alpha=alpha)
    if scale != 1.0:
        out = b.add("binary_scalar", [out], {"op": BINARY["mul"], "dtype": b.dtype(n), "scalar": scale})
    return out


@rule(aten.celu.default)
def _celu(b: Builder, n: torch.fx.Node) -> int:
    return _unary_with("celu", b, n, alpha=float(n.args[1]) if len(n.args) > 1 else float(n.kwargs.get("alpha", 1.0)))


@rule(aten.logit.default, check=lambda n: _float_or_none(n.args[1] if len(n.args) > 1 else n.kwargs.get("eps")))
def _logit(b: Builder, n: torch.fx.Node) -> int:
    eps = n.args[1] if len(n.args) > 1 else n.kwargs.get("eps")
    return _unary_with("logit", b, n, alpha=-1.0 if eps is None else float(eps))


@rule(aten.softplus.default)
def _softplus(b: Builder, n: torch.fx.Node) -> int:
    beta = float(n.args[1]) if len(n.args) > 1 else 1.0
    threshold = float(n.args[2]) if len(n.args) > 2 else 20.0
    return _unary_with("softplus", b, n, alpha=beta, hi=threshold)


_BINARY_TARGETS = {
    aten.add.Tensor: "add", aten.sub.Tensor: "sub", aten.mul.Tensor: "mul", aten.div.Tensor: "div",
    aten.add.Scalar: "add", aten.sub.Scalar: "sub", aten.mul.Scalar: "mul", aten.div.Scalar: "div",
    aten.pow.Tensor_Tensor: "pow", aten.pow.Tensor_Scalar: "pow", aten.maximum.default: "maximum",
    aten.minimum.default: "minimum", aten.remainder.Tensor: "remainder", aten.remainder.Scalar: "remainder",
    aten.fmod.Tensor: "fmod", aten.fmod.Scalar: "fmod", aten.atan2.default: "atan2",
    aten.logical_and.default: "logical_and", aten.logical_or.default: "logical_or",
    # on bool tensors (the rule's dtypes keep integers out): what cumprod's backward writes
    aten.bitwise_and.Tensor: "logical_and", aten.bitwise_or.Tensor: "logical_or",
}


# every other float-valued binary op of the op table (hypot, copysign, xlogy, logaddexp, fmax, ...)
for _name, (_arity, _kind) in _C._tt_op_kinds().items():
    _packet = getattr(aten, _name, None)
    if _arity == "binary" and _kind in ("arith", "fdiv") and _packet is not None:
        for _overload in ("Tensor", "default"):
            if hasattr(_packet, _overload):
                _BINARY_TARGETS.setdefault(getattr(_packet, _overload), _name)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) or isinstance(x, bool)


def _binary_check(n: torch.fx.Node) -> bool:
    alpha = n.kwargs.get("alpha", 1)
    return _number(alpha) and (n.args and isinstance(n.args[0], torch.fx.Node))


@rule(*_BINARY_TARGETS, check=_binary_check)
def _binary(b: Builder, n: torch.fx.Node) -> int:
    op = BINARY[_BINARY_TARGETS[n.target]]
    dtype = b.dtype(n)
    x, y = n.args[0], n.args[1]
    alpha = n.kwargs.get("alpha", 1)
    xv = b.value(x)
    if not isinstance(y, torch.fx.Node):
        scalar = float(b.scalar(y)) * (float(alpha) if _BINARY_TARGETS[n.target] in ("add", "sub") else 1.0)
        return b.add("binary_scalar", [xv], {"op": op, "dtype": dtype, "scalar": scalar})
    yv = b.value(y)
    if alpha != 1:
        yv = b.add("binary_scalar", [yv], {"op": BINARY["mul"], "dtype": b.dtype(y), "scalar": float(alpha)})
    return b.add("binary", [xv, yv], {"op": op, "dtype": dtype})


@rule(aten.rsub.Scalar, aten.rsub.Tensor, check=lambda n: not isinstance(n.args[1], torch.fx.Node))
def _rsub(b: Builder, n: torch.fx.Node) -> int:
    x = b.value(n.args[0])
    alpha = float(n.kwargs.get("alpha", n.args[2] if len(n.args) > 2 else 1))
    if alpha != 1.0:
        x = b.add("binary_scalar", [x], {"op": BINARY["mul"], "dtype": b.dtype(n.args[0]), "scalar": alpha})
    return b.add("binary_scalar", [x], {"op": BINARY["sub"], "dtype": b.dtype(n), "scalar": float(b.scalar(n.args[1])),
                                       "reverse": 1})


@rule(aten.pow.Scalar)
def _pow_scalar(b: Builder, n: torch.fx.Node) -> int:
    return b.add("binary_scalar", [b.value(n.args[1])],
                 {"op": BINARY["pow"], "dtype": b.dtype(n), "scalar": float(b.scalar(n.args[0])), "reverse": 1})


_COMPARE_TARGETS = {}
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _COMPARE_TARGETS[getattr(aten, _name).Tensor] = _name
    _COMPARE_TARGETS[getattr(aten, _name).Scalar] = _name


@rule(*_COMPARE_TARGETS)
def _compare(b: Builder, n: torch.fx.Node) -> int:
    op = COMPARE[_COMPARE_TARGETS[n.target]]
    x, y = n.args[0], n.args[1]
    if isinstance(y, torch.fx.Node):
        return b.add("compare", [b.value(x), b.value(y)], {"op": op})
    return b.add("compare_scalar", [b.value(x)], {"op": op, "scalar": float(b.scalar(y))})


def _operand(b: Builder, arg: Any, dtype: str) -> int:
    if isinstance(arg, torch.fx.Node):
        return b.value(arg)
    return b.full(float(b.scalar(arg)), dtype)


@rule(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def _where(b: Builder, n: torch.fx.Node) -> int:
    dtype = b.dtype(n)
    return b.add("where", [b.value(n.args[0]), _operand(b, n.args[1], dtype), _operand(b, n.args[2], dtype)],
                 {"dtype": dtype})


@rule(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(b: Builder, n: torch.fx.Node) -> int:
    dtype = b.dtype(n)
    return b.add("where", [b.value(n.args[1]), _operand(b, n.args[2], dtype), b.value(n.args[0])], {"dtype": dtype})


# activation backward ops (grad, saved)
_BACKWARD = {
    aten.silu_backward.default: "silu_backward",
    aten.sigmoid_backward.default: "sigmoid_backward",
    aten.tanh_backward.default: "tanh_backward",
}


@rule(*_BACKWARD)
def _activation_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("binary", [b.value(n.args[0]), b.value(n.args[1])],
                 {"op": BINARY[_BACKWARD[n.target]], "dtype": b.dtype(n)})


@rule(aten.gelu_backward.default)
def _gelu_backward(b: Builder, n: torch.fx.Node) -> int:
    approximate = n.kwargs.get("approximate", n.args[2] if len(n.args) > 2 else "none")
    op = BINARY["gelu_tanh_backward" if approximate == "tanh" else "gelu_backward"]
    return b.add("binary", [b.value(n.args[0]), b.value(n.args[1])], {"op": op, "dtype": b.dtype(n)})


@rule(aten.threshold_backward.default, check=lambda n: _number(n.args[2]))
def _threshold_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("binary", [b.value(n.args[0]), b.value(n.args[1])],
                 {"op": BINARY["threshold_backward"], "dtype": b.dtype(n), "alpha": float(n.args[2])})


# ---- reductions ----------------------------------------------------------------------------------


def _dim_mask(b: Builder, x: Any, dims: Any) -> int:
    ndim = len(b.shape(x))
    if dims is None:
        return 0
    if isinstance(dims, int):
        dims = [dims]
    dims = b.ints(dims)
    if not dims:
        return 0
    mask = 0
    for d in dims:
        mask |= 1 << (d % max(ndim, 1))
    return mask


def _reduce_check(n: torch.fx.Node) -> bool:
    return len(meta(n.args[0]).shape) <= 8


@rule(aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default, aten.logsumexp.default,
      aten.sum.default, aten.mean.default, check=_reduce_check, dtypes=FLOATS)
def _reduce(b: Builder, n: torch.fx.Node) -> int:
    t = n.target
    x = n.args[0]
    if t in (aten.sum.default, aten.mean.default):
        dims, keepdim = None, False
    else:
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        keepdim = bool(n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False))
    op = {aten.sum.dim_IntList: "sum", aten.sum.default: "sum", aten.mean.dim: "mean", aten.mean.default: "mean",
          aten.amax.default: "max", aten.amin.default: "min", aten.logsumexp.default: "logsumexp"}[t]
    return b.add("reduce", [b.value(x)], {"op": REDUCE[op], "dim_mask": _dim_mask(b, x, dims), "keepdim": int(keepdim),
                                         "dtype": b.dtype(n)})


@rule(aten.var.correction, aten.std.correction, check=_reduce_check, dtypes=FLOATS)
def _var(b: Builder, n: torch.fx.Node) -> int:
    x = n.args[0]
    dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
    correction = n.kwargs.get("correction", 1)
    correction = 1 if correction is None else correction
    keepdim = bool(n.kwargs.get("keepdim", False))
    return b.add("var", [b.value(x)], {"dim_mask": _dim_mask(b, x, dims), "correction": int(correction),
                                      "keepdim": int(keepdim), "take_sqrt": int(n.target == aten.std.correction)})
