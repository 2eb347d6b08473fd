"""The op functions of turbo_torch and the Python-side Tensor methods.

Pointwise ops come straight from the C op table (``_C._tt_<name>``: one binding per declaration);
this file adds PyTorch's signatures where they differ (keyword scalars, overloads, rounding modes)
and composite ops built from the C primitives."""
from __future__ import annotations

import builtins
import collections
import math as _math
from typing import Any, Optional, Sequence

from torchburn import _C

from . import _types
from ._types import dtype, float32, float64, int64

Tensor = _C.EagerTensor
_py_bool, _py_int, _py_float = builtins.bool, builtins.int, builtins.float

UNARY_NAMES = _C._tt_unary_names()
BINARY_NAMES = _C._tt_binary_names()
OP_KINDS = _C._tt_op_kinds()
_UNARY = {name: i for i, name in enumerate(UNARY_NAMES)}
_BINARY = {name: i for i, name in enumerate(BINARY_NAMES)}
_REDUCE = {name: i for i, name in enumerate(_C._tt_reduce_names())}
_VIEW_FLIP, _VIEW_CAST = 8, 11  # view kinds of src/pyext/eager_shape.c

__all__ = []


def _export(name: str, fn: Any) -> None:
    globals()[name] = fn
    __all__.append(name)


# table ops bound directly (C functions: no Python frame on the call path)
_UNBOUND_UNARY = {"gelu_tanh", "pow_scalar", "clamp", "logit", "softplus", "elu", "celu", "leaky_relu", "hardtanh",
                  "round", "nan_to_num", "positive", "sgn"}
for _name in UNARY_NAMES:
    if _name not in _UNBOUND_UNARY:
        _export(_name, getattr(_C, "_tt_" + _name))
for _name in BINARY_NAMES:
    if _name not in ("div", "pow", "add", "sub"):
        _export(_name, getattr(_C, "_tt_" + _name))
_export("positive", _C._tt_positive)
_export("sgn", _C._tt_sgn)
_export("absolute", _C._tt_abs)
_export("negative", _C._tt_neg)
_export("arcsin", _C._tt_asin)
_export("arccos", _C._tt_acos)
_export("arctan", _C._tt_atan)
_export("arcsinh", _C._tt_asinh)
_export("arccosh", _C._tt_acosh)
_export("arctanh", _C._tt_atanh)
_export("arctan2", _C._tt_atan2)
_export("multiply", _C._tt_mul)
_export("greater", _C._tt_gt)
_export("greater_equal", _C._tt_ge)
_export("less", _C._tt_lt)
_export("less_equal", _C._tt_le)
_export("not_equal", _C._tt_ne)
_export("fix", _C._tt_trunc)
_export("bitwise_left_shift", _C._tt_bitwise_left_shift)
_export("bitwise_right_shift", _C._tt_bitwise_right_shift)


def _unary_params(name: str, x: Tensor, alpha: Any = 0.0, lo: Any = 0.0, hi: Any = 0.0, out: Any = None) -> Tensor:
    return _C._tt_unary_params(_UNARY[name], x, _py_float(alpha), _py_float(lo), _py_float(hi), out)


def add(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    return _C._tt_add(input, other, alpha=alpha, out=out)


def sub(input: Any, other: Any, *, alpha: Any = 1, out: Any = None) -> Tensor:
    return _C._tt_sub(input, other, alpha=alpha, out=out)


def div(input: Any, other: Any, *, rounding_mode: Optional[str] = None, out: Any = None) -> Tensor:
    if rounding_mode is None:
        return _C._tt_div(input, other, out=out)
    if rounding_mode == "floor":
        return _C._tt_floor_divide(input, other, out=out)
    if rounding_mode == "trunc":
        result = _C._tt_div(input, other)
        integral = not result.dtype.is_floating_point or not (
            (input.dtype if isinstance(input, Tensor) else _types.float32).is_floating_point or
            (other.dtype if isinstance(other, Tensor) else _types.float32).is_floating_point)
        a_int = isinstance(input, Tensor) and not input.dtype.is_floating_point
        b_int = (isinstance(other, Tensor) and not other.dtype.is_floating_point) or isinstance(other, _py_int)
        if a_int and b_int:
            return _C._tt_trunc(_C._tt_div(input.to(float64), other)).to(input.dtype if isinstance(input, Tensor) else int64)
        del integral
        return _C._tt_trunc(result, out=out)
    raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")


true_divide = divide = div


def pow(input: Any, exponent: Any, *, out: Any = None) -> Tensor:  # noqa: A001
    if isinstance(input, Tensor) and isinstance(exponent, (_py_int, _py_float)) and not isinstance(exponent, _py_bool):
        if input.dtype.is_floating_point:
            if exponent == 2:
                return _C._tt_square(input, out=out) if out is not None else _C._tt_mul(input, input)
            return _unary_params("pow_scalar", input, exponent, out=out)
        if isinstance(exponent, _py_int) and exponent < 0:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
    return _C._tt_pow(input, exponent, out=out)


float_power = lambda input, exponent: pow(input.to(float64) if isinstance(input, Tensor) else input,  # noqa: E731
                                          exponent.to(float64) if isinstance(exponent, Tensor) else exponent)


def clamp(input: Tensor, min: Any = None, max: Any = None, *, out: Any = None) -> Tensor:  # noqa: A002
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        result = input
        if min is not None:
            result = maximum(result, min if isinstance(min, Tensor) else full_like_value(result, min))
        if max is not None:
            result = minimum(result, max if isinstance(max, Tensor) else full_like_value(result, max))
        return result
    lo = -_math.inf if min is None else min
    hi = _math.inf if max is None else max
    return _unary_params("clamp", input, 0.0, lo, hi, out)


def logit(input: Tensor, eps: Optional[_py_float] = None) -> Tensor:
    return _unary_params("logit", input, -1.0 if eps is None else eps)


def full_like_value(x: Tensor, value: Any) -> Tensor:
    return _C._tt_full((), value, x.dtype)


clip = clamp


def clamp_min(input: Tensor, min: Any) -> Tensor:  # noqa: A002
    return clamp(input, min=min)


def clamp_max(input: Tensor, max: Any) -> Tensor:  # noqa: A002
    return clamp(input, max=max)


def round(input: Tensor, *, decimals: _py_int = 0, out: Any = None) -> Tensor:  # noqa: A001
    return _unary_params("round", input, decimals, out=out)


def nan_to_num(input: Tensor, nan: _py_float = 0.0, posinf: Optional[_py_float] = None,
               neginf: Optional[_py_float] = None, *, out: Any = None) -> Tensor:
    big = {_types.float32: 3.4028234663852886e38, _types.float64: 1.7976931348623157e308,
           _types.float16: 65504.0, _types.bfloat16: 3.3895313892515355e38}.get(input.dtype, 0.0)
    return _unary_params("nan_to_num", input, nan, -big if neginf is None else neginf,
                         big if posinf is None else posinf, out)


def lerp(input: Tensor, end: Tensor, weight: Any) -> Tensor:
    return input + weight * (end - input)


def square(input: Tensor) -> Tensor:
    if input.dtype is _types.bool_:  # torch squares bools as pow(x, 2): an int64 result
        input = input.to(_types.int64)
    return _C._tt_mul(input, input) if input.dtype.is_floating_point else _C._tt_square(input)


def rsub(input: Tensor, other: Any, alpha: Any = 1) -> Tensor:
    return sub(other, input, alpha=alpha) if isinstance(other, Tensor) else other - alpha * input


def where(condition: Tensor, input: Any = None, other: Any = None) -> Any:
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    return _C._tt_where(condition, input, other)


# ---- reductions -------------------------------------------------------------------------------

def _reduce(name: str, input: Tensor, dim: Any = None, keepdim: _py_bool = False, dtype: Any = None) -> Tensor:
    if dtype is not None:
        # the values in dtype first, reduced into dtype (bool: a logical and/or, as torch's)
        return _C._tt_reduce(_REDUCE[name], input.to(dtype), dim, keepdim, dtype)
    return _C._tt_reduce(_REDUCE[name], input, dim, keepdim, None)


def sum(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A001
    return _C._tt_reduce(0, input, dim, keepdim, dtype)


def mean(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, dtype: Any = None) -> Tensor:
    return _reduce("mean", input, dim, keepdim, dtype)


def nansum(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, dtype: Any = None) -> Tensor:
    return _reduce("nansum", input, dim, keepdim, dtype)


def nanmean(input: Tensor, dim: Any = None, keepdim: _py_bool = False) -> Tensor:
    count = (~isnan(input)).sum(dim, keepdim=keepdim)
    return nansum(input, dim, keepdim) / count


def prod(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, dtype: Any = None) -> Tensor:
    if isinstance(dim, (tuple, list)):
        raise TypeError("prod(): argument 'dim' (position 2) must be int, not tuple")
    return _reduce("prod", input, dim, keepdim, dtype)


def amax(input: Tensor, dim: Any = (), keepdim: _py_bool = False) -> Tensor:
    return _reduce("amax", input, None if dim == () else dim, keepdim)


def amin(input: Tensor, dim: Any = (), keepdim: _py_bool = False) -> Tensor:
    return _reduce("amin", input, None if dim == () else dim, keepdim)


def all(input: Tensor, dim: Any = None, keepdim: _py_bool = False) -> Tensor:  # noqa: A001
    return _C._tt_reduce(_REDUCE["all"], input, dim, keepdim, None)


def any(input: Tensor, dim: Any = None, keepdim: _py_bool = False) -> Tensor:  # noqa: A001
    return _C._tt_reduce(_REDUCE["any"], input, dim, keepdim, None)


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    return _C._tt_reduce(_REDUCE["count_nonzero"], input, dim, False, None)


def logsumexp(input: Tensor, dim: Any, keepdim: _py_bool = False) -> Tensor:
    return _C._tt_reduce(_REDUCE["logsumexp"], input, dim, keepdim, None)


_max_type = collections.namedtuple("max", ["values", "indices"])
_min_type = collections.namedtuple("min", ["values", "indices"])


def max(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, out: Any = None) -> Any:  # noqa: A001
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("max(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return _C._tt_reduce(_REDUCE["amax"], input, None, False, None)
    return _max_type(*_C._tt_max_dim(True, input, dim, keepdim))


def min(input: Tensor, dim: Any = None, keepdim: _py_bool = False, *, out: Any = None) -> Any:  # noqa: A001
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    if dim is None:
        if input.numel() == 0:
            raise RuntimeError("min(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return _C._tt_reduce(_REDUCE["amin"], input, None, False, None)
    return _min_type(*_C._tt_max_dim(False, input, dim, keepdim))


def argmax(input: Tensor, dim: Any = None, keepdim: _py_bool = False) -> Tensor:
    return _C._tt_argmax(True, input, dim, keepdim)


def argmin(input: Tensor, dim: Any = None, keepdim: _py_bool = False) -> Tensor:
    return _C._tt_argmax(False, input, dim, keepdim)


def _correction(unbiased: Any, correction: Any) -> _py_float:
    if correction is not None:
        return _py_float(correction)
    if unbiased is None:
        return 1.0
    return 1.0 if unbiased else 0.0


def var(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: _py_bool = False, *,
        correction: Any = None) -> Tensor:
    if isinstance(dim, _py_bool):
        dim, unbiased = None, dim
    return _C._tt_var(input, dim, _correction(unbiased, correction), keepdim, False)


def std(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: _py_bool = False, *,
        correction: Any = None) -> Tensor:
    if isinstance(dim, _py_bool):
        dim, unbiased = None, dim
    return _C._tt_var(input, dim, _correction(unbiased, correction), keepdim, True)


def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: _py_bool = False, *,
             correction: Any = None) -> tuple:
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: _py_bool = False, *,
             correction: Any = None) -> tuple:
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: _py_bool = False, dtype: Any = None) -> Tensor:
    if p == "fro" or p is None:
        p = 2
    if p == "nuc":
        raise NotImplementedError("turbo_torch: the nuclear norm is not supported yet")
    return _C._tt_norm(input if dtype is None else input.to(dtype), _py_float(p), dim, keepdim)


def cumsum(input: Tensor, dim: _py_int, *, dtype: Any = None) -> Tensor:
    return _C._tt_cumulative(False, input, dim, dtype)


def cumprod(input: Tensor, dim: _py_int, *, dtype: Any = None) -> Tensor:
    return _C._tt_cumulative(True, input, dim, dtype)


# ---- linear algebra ---------------------------------------------------------------------------

matmul = _C._tt_matmul


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"self must be a matrix" if input.ndim != 2 else "mat2 must be a matrix")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor" if input.ndim != 3 else "batch2 must be a 3D tensor")
    return matmul(input, mat2)


def mv(input: Tensor, vec: Tensor) -> Tensor:
    return matmul(input, vec)


def dot(input: Tensor, other: Tensor) -> Tensor:
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    return matmul(input, other)


inner = lambda a, b: (lambda p: p.sum(-1, dtype=p.dtype))(a * b) if a.ndim and b.ndim else a * b  # noqa: E731


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    return input.unsqueeze(1) * vec2.unsqueeze(0)


ger = outer


def scaled_sum(input: Tensor, product: Tensor, beta: Any, alpha: Any, name: str) -> Tensor:
    """beta * input + alpha * product, torch's rules for the add* family: beta == 0 ignores input (its NaN and
    inf are not propagated); with integer tensors, float alpha/beta are truncated toward zero (addr
    refuses them instead, as torch does)."""
    if not product.dtype.is_floating_point and product.dtype is not _types.bool_:
        for label, value in (("beta", beta), ("alpha", alpha)):
            if name == "addr" and isinstance(value, _py_float):
                raise RuntimeError(f"For integral input tensors, argument {label} must not be a floating point number.")
        beta, alpha = (_py_int(v) if isinstance(v, _py_float) else v for v in (beta, alpha))
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # input's values are not read: only its shape and dtype count
        shape = broadcast_shapes(tuple(input.shape), tuple(product.shape))
        if tuple(product.shape) != shape:
            product = product.expand(*shape).contiguous()
        return product.to(_C._tt_promote_types(product.dtype, input.dtype))
    return product + (input if beta == 1 else input * beta)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return scaled_sum(input, mm(mat1, mat2), beta, alpha, "addmm")


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return scaled_sum(input, bmm(batch1, batch2), beta, alpha, "baddbmm")


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return scaled_sum(input, mv(mat, vec), beta, alpha, "addmv")


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation through broadcasting multiplies and sums (any number of operands)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise RuntimeError(f"einsum(): {len(terms)} operand subscripts for {len(operands)} operands")
    if "..." in equation:
        # spell the broadcast dims out with unused letters (the widest operand decides their count)
        spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation]
        widths = [x.ndim - len(t.replace("...", "")) for t, x in zip(terms, operands)]
        width = builtins.max(widths + [0])
        terms = [t.replace("...", "".join(spare[width - w:width])) for t, w in zip(terms, widths)]
        lhs = ",".join(terms)
        if arrow:
            rhs = rhs.replace("...", "".join(spare[:width]))
        else:
            rhs = "".join(spare[:width]) + "".join(sorted(c for c in set(lhs) - set(spare) - {","} if lhs.count(c) == 1))
            arrow = "->"
        equation = lhs + "->" + rhs
    letters = []
    for t in terms:
        for c in t:
            if c not in letters:
                letters.append(c)
    if not arrow:
        rhs = "".join(sorted(c for c in letters if lhs.count(c) == 1))
    order = list(rhs) + [c for c in letters if c not in rhs]
    result = None
    for term, x in zip(terms, operands):
        # take diagonals of repeated letters within one term
        while len(set(term)) != len(term):
            for c in term:
                if term.count(c) > 1:
                    i, j = term.index(c), term.index(c, term.index(c) + 1)
                    x = diagonal(x, 0, i, j)
                    term = term[:i] + term[i + 1:j] + term[j + 1:] + c
                    break
        perm = sorted(range(len(term)), key=lambda k: order.index(term[k]))
        x = x.permute(*perm) if perm else x
        shape = []
        present = {term[k] for k in range(len(term))}
        it = iter(x.shape)
        for c in order:
            shape.append(next(it) if c in present else 1)
        x = x.reshape(shape) if shape else x
        result = x if result is None else result * x
    reduce_dims = tuple(range(len(rhs), len(order)))
    if reduce_dims:
        # the result dtype as torch's: a letter summed within one operand alone is a sum (integers and
        # bools to int64); a contraction over several operands keeps their dtype (int32 too)
        private = builtins.any(c not in rhs and builtins.sum(c in t for t in terms) == 1 for c in letters)
        result = result.sum(reduce_dims, dtype=None if private else result.dtype)
    return result


def diagonal(input: Tensor, offset: _py_int = 0, dim1: _py_int = 0, dim2: _py_int = 1) -> Tensor:
    n1, n2 = input.shape[dim1], input.shape[dim2]
    size = builtins.max(0, builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2))
    rows = [input.select(dim1 if dim1 < dim2 else dim1, 0)] if False else None
    del rows
    picks = []
    for i in range(size):
        a, b = (i, i + offset) if offset >= 0 else (i - offset, i)
        picks.append(input.select(dim2, b).select(dim1 if dim1 < dim2 else dim1 - 1, a))
    if not picks:
        shape = [s for k, s in enumerate(input.shape) if k not in (dim1 % input.ndim, dim2 % input.ndim)] + [0]
        return _C._tt_full(tuple(shape), 0.0, input.dtype)
    return stack(picks, -1)


def trace(input: Tensor) -> Tensor:
    return diagonal(input).sum()


# ---- shape ops --------------------------------------------------------------------------------

def cat(tensors: Sequence[Tensor], dim: _py_int = 0, *, out: Any = None) -> Tensor:
    return _C._tt_cat(list(tensors), dim)


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: _py_int = 0, *, out: Any = None) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    shape = tuple(tensors[0].shape)
    for t in tensors[1:]:
        if tuple(t.shape) != shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(shape)} at entry 0 and "
                               f"{list(t.shape)} at entry {tensors.index(t)}")
    ndim = len(shape) + 1
    if dim < 0:
        dim += ndim
    return _C._tt_cat([t.unsqueeze(dim) for t in tensors], dim)


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    tensors = list(tensors)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def reshape(input: Tensor, shape: Sequence[_py_int]) -> Tensor:
    return input.reshape(tuple(shape))


def flatten(input: Tensor, start_dim: _py_int = 0, end_dim: _py_int = -1) -> Tensor:
    if input.ndim == 0:
        return input.reshape(1)
    start = start_dim % input.ndim
    end = end_dim % input.ndim
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = list(input.shape)
    n = 1
    for s in shape[start:end + 1]:
        n *= s
    return input.reshape(shape[:start] + [n] + shape[end + 1:])


def unflatten(input: Tensor, dim: _py_int, sizes: Sequence[_py_int]) -> Tensor:
    dim %= input.ndim
    shape = list(input.shape)
    return input.reshape(shape[:dim] + list(sizes) + shape[dim + 1:])


def squeeze(input: Tensor, dim: Any = None) -> Tensor:
    if isinstance(dim, (tuple, list)):
        for d in sorted((d % builtins.max(input.ndim, 1) for d in dim), reverse=True):
            input = input.squeeze(d)
        return input
    return input.squeeze(dim)


def unsqueeze(input: Tensor, dim: _py_int) -> Tensor:
    return input.unsqueeze(dim)


def permute(input: Tensor, dims: Sequence[_py_int]) -> Tensor:
    return input.permute(*dims)


def transpose(input: Tensor, dim0: _py_int, dim1: _py_int) -> Tensor:
    return input.transpose(dim0, dim1)


swapaxes = swapdims = transpose


def t(input: Tensor) -> Tensor:
    return input.t()


def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:
    source = [source] if isinstance(source, _py_int) else list(source)
    destination = [destination] if isinstance(destination, _py_int) else list(destination)
    n = input.ndim
    source = [s % n for s in source]
    destination = [d % n for d in destination]
    order = [d for d in range(n) if d not in source]
    for dst, src in sorted(zip(destination, source)):
        order.insert(dst, src)
    return input.permute(*order)


moveaxis = movedim


def narrow(input: Tensor, dim: _py_int, start: _py_int, length: _py_int) -> Tensor:
    index = [slice(None)] * input.ndim
    size = input.shape[dim]
    if start < 0:
        start += size
    if start < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    index[dim] = slice(start, start + length)
    return input[tuple(index)]


def select(input: Tensor, dim: _py_int, index: _py_int) -> Tensor:
    dim %= input.ndim
    return input[(slice(None),) * dim + (index,)]


def unbind(input: Tensor, dim: _py_int = 0) -> tuple:
    return tuple(select(input, dim, i) for i in range(input.shape[dim]))


def split(tensor: Tensor, split_size_or_sections: Any, dim: _py_int = 0) -> tuple:
    size = tensor.shape[dim]
    if isinstance(split_size_or_sections, _py_int):
        step = split_size_or_sections
        if step <= 0 and size > 0:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}")
        sections = [builtins.min(step, size - i) for i in range(0, size, step)] if size else [0]
    else:
        sections = list(split_size_or_sections)
        if builtins.sum(sections) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size "
                               f"at dimension {dim}), but got split_sizes={sections}")
    out, start = [], 0
    for length in sections:
        out.append(narrow(tensor, dim, start, length))
        start += length
    return tuple(out)


def chunk(input: Tensor, chunks: _py_int, dim: _py_int = 0) -> tuple:
    size = input.shape[dim]
    step = -(-size // chunks) if chunks > 0 else 0
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0")
    return split(input, builtins.max(step, 1), dim) if size else (input,)


def tensor_split(input: Tensor, indices_or_sections: Any, dim: _py_int = 0) -> tuple:
    size = input.shape[dim]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.item() if indices_or_sections.ndim == 0 else indices_or_sections.tolist()
    if isinstance(indices_or_sections, _py_int):
        n = indices_or_sections
        base, extra = divmod(size, n)
        sizes = [base + 1] * extra + [base] * (n - extra)
        return split(input, sizes, dim)
    bounds = [0] + [builtins.min(builtins.max(i, 0), size) for i in indices_or_sections] + [size]
    return tuple(narrow(input, dim, bounds[i], builtins.max(bounds[i + 1] - bounds[i], 0)) for i in range(len(bounds) - 1))


def flip(input: Tensor, dims: Any) -> Tensor:
    dims = [dims] if isinstance(dims, _py_int) else list(dims)
    return _C._tt_view(input, _VIEW_FLIP, *dims)


def fliplr(input: Tensor) -> Tensor:
    return flip(input, [1])


def flipud(input: Tensor) -> Tensor:
    return flip(input, [0])


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    if dims is None:
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    shifts = [shifts] if isinstance(shifts, _py_int) else list(shifts)
    dims = [dims] if isinstance(dims, _py_int) else list(dims)
    for s, d in zip(shifts, dims):
        size = input.shape[d]
        if size == 0:
            continue
        s %= size
        if s:
            input = cat([narrow(input, d, size - s, s), narrow(input, d, 0, size - s)], d)
    return input


def _tri_mask(input: Tensor, diagonal: _py_int, lower: _py_bool) -> Tensor:
    rows, cols = input.shape[-2], input.shape[-1]
    r = _C._tt_arange(0.0, 1.0, rows, int64).unsqueeze(1)
    c = _C._tt_arange(0.0, 1.0, cols, int64).unsqueeze(0)
    return (c - r <= diagonal) if lower else (c - r >= diagonal)


def tril(input: Tensor, diagonal: _py_int = 0) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return where(_tri_mask(input, diagonal, True), input, _C._tt_full((), 0, input.dtype))


def triu(input: Tensor, diagonal: _py_int = 0) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return where(_tri_mask(input, diagonal, False), input, _C._tt_full((), 0, input.dtype))


def repeat_tensor(input: Tensor, *sizes: Any) -> Tensor:
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)) else sizes
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    x = input.reshape((1,) * (len(sizes) - input.ndim) + tuple(input.shape))
    # expand an inserted dim before each, then merge
    shape, expanded = [], []
    for r, s in zip(sizes, x.shape):
        shape += [1, s]
        expanded += [r, s]
    y = x.reshape(shape).expand(*expanded)
    return y.reshape([r * s for r, s in zip(sizes, x.shape)])


def tile(input: Tensor, dims: Sequence[_py_int]) -> Tensor:
    dims = tuple(dims)
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + dims
    return repeat_tensor(input, *dims)


def repeat_interleave(input: Tensor, repeats: Any = None, dim: Any = None, *, output_size: Any = None) -> Tensor:
    if isinstance(repeats, Tensor) and repeats.numel() == 1:
        repeats = repeats.item()
    if dim is None:
        input, dim = input.reshape(-1), 0
    dim %= input.ndim
    if isinstance(repeats, _py_int):
        x = input.unsqueeze(dim + 1)
        shape = list(x.shape)
        shape[dim + 1] = repeats
        y = x.expand(*shape)
        out_shape = list(input.shape)
        out_shape[dim] *= repeats
        return y.reshape(out_shape)
    counts = repeats.tolist()
    pieces = [narrow(input, dim, i, 1).expand(*[c if k == dim else s for k, s in enumerate(input.shape)])
              for i, c in enumerate(counts) for _ in [0] if c > 0]
    pieces = [narrow(input, dim, i, 1) for i, c in enumerate(counts) for _ in range(c)]
    return cat(pieces, dim) if pieces else narrow(input, dim, 0, 0)


def broadcast_shapes(*shapes: Any) -> _types.Size:
    result: list = []
    for shape in shapes:
        shape = [shape] if isinstance(shape, _py_int) else list(shape)
        for i in range(1, len(shape) + 1):
            s = shape[-i]
            if i > len(result):
                result.insert(0, s)
            elif result[-i] == 1:
                result[-i] = s
            elif s != 1 and s != result[-i]:
                raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single shape.")
    return _types.Size(result)


def broadcast_to(input: Tensor, size: Sequence[_py_int]) -> Tensor:
    return input.expand(*size)


def broadcast_tensors(*tensors: Tensor) -> tuple:
    shape = broadcast_shapes(*[t.shape for t in tensors])
    return tuple(t.expand(*shape) for t in tensors)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = [t.numel() for t in tensors]
    out = []
    for i, t in enumerate(tensors):
        view = [1] * len(tensors)
        view[i] = -1
        out.append(t.reshape(view).expand(*shape))
    if indexing == "xy" and len(tensors) >= 2:
        out = [o.transpose(0, 1) for o in out]
    return tuple(out)


# ---- softmax and activations ------------------------------------------------------------------

def softmax(input: Tensor, dim: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    if dtype is not None:
        input = input.to(dtype)
    return _C._tt_softmax(input, -1 if dim is None else dim, False)


def log_softmax(input: Tensor, dim: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    if dtype is not None:
        input = input.to(dtype)
    return _C._tt_softmax(input, -1 if dim is None else dim, True)


# ---- indexing -----------------------------------------------------------------------------------

def nonzero(input: Tensor, *, as_tuple: _py_bool = False) -> Any:
    coords = _C._tt_nonzero(input)
    if as_tuple:
        if input.ndim == 0:
            # a 0-dim input has no coordinate columns: one index 0 per hit (torch gives tensor([0]) or tensor([]))
            return (_C._tt_full((coords.shape[0],), 0, int64),)
        return tuple(coords.select(1, d) for d in range(input.ndim))
    return coords


def argwhere(input: Tensor) -> Tensor:
    return nonzero(input)


def tensor_of(values: list, d: dtype) -> Tensor:
    return _C._tt_from_values(values, (len(values),), d)


def _install_tensor_methods() -> None:
    from . import _methods
    _methods.install()


def _size_arg(size: Sequence[Any]) -> tuple:
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else tuple(size)


_NOT_EXPORTED = {"Any", "Optional", "Sequence", "dtype", "Tensor", "float32", "float64", "int64"}
__all__ = sorted(set(__all__) | {n for n, v in list(globals().items())
                                 if not n.startswith("_") and callable(v) and n not in _NOT_EXPORTED
                                 and not isinstance(v, type(collections))})


# ---- activations with parameters (torch.nn.functional's signatures) ---------------------------

def softplus(input: Tensor, beta: Any = 1.0, threshold: Any = 20.0) -> Tensor:
    return _unary_params("softplus", input, beta, 0.0, threshold)


def elu(input: Tensor, alpha: Any = 1.0, inplace: _py_bool = False) -> Tensor:
    return _unary_params("elu", input, alpha)


def celu(input: Tensor, alpha: Any = 1.0, inplace: _py_bool = False) -> Tensor:
    return _unary_params("celu", input, alpha)


def leaky_relu(input: Tensor, negative_slope: Any = 0.01, inplace: _py_bool = False) -> Tensor:
    return _unary_params("leaky_relu", input, negative_slope)


def hardtanh(input: Tensor, min_val: Any = -1.0, max_val: Any = 1.0, inplace: _py_bool = False) -> Tensor:
    return _unary_params("hardtanh", input, 0.0, min_val, max_val)


def relu6(input: Tensor, inplace: _py_bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        return _C._tt_gelu_tanh(input)
    if approximate != "none":
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    return _C._tt_gelu(input)


__all__ = sorted(set(__all__) | {"softplus", "elu", "celu", "leaky_relu", "hardtanh", "relu6", "gelu"})
