"""Functional ops on torchburn's kernels, with PyTorch's names and argument conventions.

Every function accepts torch tensors, numpy arrays or :class:`torchburn.Tensor` (mixing is fine) and
returns the kind of its first array argument, sharing memory through DLPack (no copies on the way in
or out). Computation is float32; float16/bfloat16 inputs are converted at load and store. These are
inference functions: they do not record autograd history.

Example::

    >>> import torch, torchburn.ops as ops
    >>> x = torch.randn(4, 8)
    >>> torch.testing.assert_close(ops.gelu(x), torch.nn.functional.gelu(x))
"""
from __future__ import annotations

import array
import math
from collections import namedtuple
from typing import Any, Optional, Sequence, Union

from . import _C

_NAMES = _C.op_names()
_UNARY = {name: i for i, name in enumerate(_NAMES["unary"])}
_BINARY = {name: i for i, name in enumerate(_NAMES["binary"])}
_COMPARE = {name: i for i, name in enumerate(_NAMES["compare"])}
_REDUCE = {name: i for i, name in enumerate(_NAMES["reduce"])}
_ACTIVATION = {name: i for i, name in enumerate(_NAMES["activation"])}

Dims = Union[int, Sequence[int], None]
MinMax = namedtuple("MinMax", ["values", "indices"])

_DTYPE_NAMES = {"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"}


def _kind(x: Any) -> str:
    if isinstance(x, _C.Tensor):
        return "torchburn"
    module = type(x).__module__
    if module == "torch" or module.startswith("torch."):
        return "torch"
    if module.startswith("numpy"):
        return "numpy"
    return "torchburn"


def _dtype_name(x: Any) -> str:
    """The dtype of an array argument as torchburn's name ('float32', ...)."""
    if isinstance(x, _C.Tensor):
        return x.dtype
    name = str(getattr(x, "dtype", "float32"))
    name = name.replace("torch.", "")
    return {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32"}.get(name, name)


def _check_device(x: Any, name: str) -> None:
    device = getattr(x, "device", None)
    if device is not None and getattr(device, "type", "cpu") not in ("cpu", None) and not isinstance(device, str):
        raise TypeError(f"{name} is on {device}; torchburn runs on the CPU: move it with .cpu() first")


def _wrap(result: _C.Tensor, like: Any) -> Any:
    kind = _kind(like)
    if kind == "torch":
        import torch

        return torch.from_dlpack(result)
    if kind == "numpy":
        import numpy

        if result.dtype == "bfloat16":
            return result  # numpy has no bfloat16
        return numpy.from_dlpack(result)
    return result


def _scalar(value: float) -> _C.Tensor:
    """A 0-dim float32 torchburn tensor holding value."""
    return _C.from_dlpack(array.array("f", [float(value)])).view(())


def _is_array(x: Any) -> bool:
    return not isinstance(x, (int, float, bool))


# ---- unary -------------------------------------------------------------------------------------


def _unary(name: str, x: Any, alpha: float = 0.0, lo: float = -math.inf, hi: float = math.inf) -> Any:
    _check_device(x, "input")
    return _wrap(_C.unary(_UNARY[name], x, float(alpha), float(lo), float(hi)), x)


def neg(x: Any) -> Any:
    """-x."""
    return _unary("neg", x)


def abs(x: Any) -> Any:  # noqa: A001 - PyTorch's name
    """|x|."""
    return _unary("abs", x)


def exp(x: Any) -> Any:
    """e**x."""
    return _unary("exp", x)


def log(x: Any) -> Any:
    """Natural logarithm."""
    return _unary("log", x)


def sqrt(x: Any) -> Any:
    """Square root."""
    return _unary("sqrt", x)


def rsqrt(x: Any) -> Any:
    """1 / sqrt(x)."""
    return _unary("rsqrt", x)


def sin(x: Any) -> Any:
    """Sine."""
    return _unary("sin", x)


def cos(x: Any) -> Any:
    """Cosine."""
    return _unary("cos", x)


def tanh(x: Any) -> Any:
    """Hyperbolic tangent."""
    return _unary("tanh", x)


def sigmoid(x: Any) -> Any:
    """1 / (1 + e**-x)."""
    return _unary("sigmoid", x)


def relu(x: Any) -> Any:
    """max(x, 0), NaN propagating."""
    return _unary("relu", x)


def gelu(x: Any, approximate: str = "none") -> Any:
    """GELU: the exact erf form by default, the tanh form with ``approximate="tanh"``."""
    if approximate == "none":
        return _unary("gelu", x)
    if approximate == "tanh":
        return _unary("gelu_tanh", x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: Any) -> Any:
    """x * sigmoid(x)."""
    return _unary("silu", x)


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Any:
    """x if x > 0 else negative_slope * x."""
    return _unary("leaky_relu", x, alpha=negative_slope)


def clamp(x: Any, min: Optional[float] = None, max: Optional[float] = None) -> Any:  # noqa: A002
    """Clamps to [min, max] (either may be None); NaN stays NaN."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must not be None")
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    return _unary("clamp", x, lo=lo, hi=hi)


# ---- binary ------------------------------------------------------------------------------------


def _promote(a: str, b: str) -> str:
    return a if a == b else "float32"


def _binary(name: str, a: Any, b: Any) -> Any:
    like = a if _is_array(a) else b
    if not _is_array(a) and not _is_array(b):
        raise TypeError(f"{name}: at least one argument must be a tensor")
    _check_device(like, "input")
    if _is_array(a) and _is_array(b):
        dtype = _promote(_dtype_name(a), _dtype_name(b))
    else:
        dtype = _dtype_name(like)
    a = a if _is_array(a) else _scalar(a)
    b = b if _is_array(b) else _scalar(b)
    return _wrap(_C.binary(_BINARY[name], a, b, dtype), like)


def add(a: Any, b: Any, alpha: float = 1) -> Any:
    """a + alpha * b, broadcasting."""
    if alpha != 1:
        b = mul(b, alpha) if _is_array(b) else b * alpha
    return _binary("add", a, b)


def sub(a: Any, b: Any, alpha: float = 1) -> Any:
    """a - alpha * b, broadcasting."""
    if alpha != 1:
        b = mul(b, alpha) if _is_array(b) else b * alpha
    return _binary("sub", a, b)


def mul(a: Any, b: Any) -> Any:
    """a * b, broadcasting."""
    return _binary("mul", a, b)


def div(a: Any, b: Any, rounding_mode: Optional[str] = None) -> Any:
    """True division a / b, broadcasting (rounding modes are not supported)."""
    if rounding_mode is not None:
        raise ValueError("div: only rounding_mode=None (true division) is supported")
    return _binary("div", a, b)


def pow(a: Any, b: Any) -> Any:  # noqa: A001
    """a ** b, broadcasting."""
    return _binary("pow", a, b)


def maximum(a: Any, b: Any) -> Any:
    """Elementwise maximum; NaN if either is NaN."""
    return _binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Any:
    """Elementwise minimum; NaN if either is NaN."""
    return _binary("minimum", a, b)


def _compare(name: str, a: Any, b: Any) -> Any:
    like = a if _is_array(a) else b
    a = a if _is_array(a) else _scalar(a)
    b = b if _is_array(b) else _scalar(b)
    return _wrap(_C.compare(_COMPARE[name], a, b), like)


def eq(a: Any, b: Any) -> Any:
    """a == b -> bool."""
    return _compare("eq", a, b)


def ne(a: Any, b: Any) -> Any:
    """a != b -> bool."""
    return _compare("ne", a, b)


def lt(a: Any, b: Any) -> Any:
    """a < b -> bool."""
    return _compare("lt", a, b)


def le(a: Any, b: Any) -> Any:
    """a <= b -> bool."""
    return _compare("le", a, b)


def gt(a: Any, b: Any) -> Any:
    """a > b -> bool."""
    return _compare("gt", a, b)


def ge(a: Any, b: Any) -> Any:
    """a >= b -> bool."""
    return _compare("ge", a, b)


def where(condition: Any, a: Any, b: Any) -> Any:
    """condition ? a : b, broadcasting all three."""
    like = a if _is_array(a) else (b if _is_array(b) else condition)
    if _is_array(a) and _is_array(b):
        dtype = _promote(_dtype_name(a), _dtype_name(b))
    elif _is_array(a) or _is_array(b):
        dtype = _dtype_name(a if _is_array(a) else b)
    else:
        dtype = "float32"
    a = a if _is_array(a) else _scalar(a)
    b = b if _is_array(b) else _scalar(b)
    return _wrap(_C.where(condition, a, b, dtype), like)


# ---- reductions --------------------------------------------------------------------------------


def sum(x: Any, dim: Dims = None, keepdim: bool = False) -> Any:  # noqa: A001
    """Sum over dims (all when None)."""
    return _wrap(_C.reduce(_REDUCE["sum"], x, dim, keepdim), x)


def mean(x: Any, dim: Dims = None, keepdim: bool = False) -> Any:
    """Mean over dims (all when None)."""
    return _wrap(_C.reduce(-1, x, dim, keepdim), x)


def logsumexp(x: Any, dim: Dims, keepdim: bool = False) -> Any:
    """log(sum(exp(x))) over dims, computed stably."""
    return _wrap(_C.reduce(_REDUCE["logsumexp"], x, dim, keepdim), x)


def amax(x: Any, dim: Dims = (), keepdim: bool = False) -> Any:
    """Maximum over dims; NaN if any is NaN."""
    return _wrap(_C.reduce(_REDUCE["max"], x, None if dim == () else dim, keepdim), x)


def amin(x: Any, dim: Dims = (), keepdim: bool = False) -> Any:
    """Minimum over dims; NaN if any is NaN."""
    return _wrap(_C.reduce(_REDUCE["min"], x, None if dim == () else dim, keepdim), x)


def max(x: Any, dim: Optional[int] = None, keepdim: bool = False) -> Any:  # noqa: A001
    """Like torch.max: the overall maximum, or (values, indices) along dim."""
    if dim is None:
        return amax(x)
    return MinMax(amax(x, dim, keepdim), argmax(x, dim, keepdim))


def min(x: Any, dim: Optional[int] = None, keepdim: bool = False) -> Any:  # noqa: A001
    """Like torch.min: the overall minimum, or (values, indices) along dim."""
    if dim is None:
        return amin(x)
    return MinMax(amin(x, dim, keepdim), argmin(x, dim, keepdim))


def argmax(x: Any, dim: Optional[int] = None, keepdim: bool = False) -> Any:
    """Index of the first maximum (a NaN counts as the maximum), int64."""
    return _wrap(_C.arg_reduce(True, x, dim, keepdim), x)


def argmin(x: Any, dim: Optional[int] = None, keepdim: bool = False) -> Any:
    """Index of the first minimum (a NaN counts as the minimum), int64."""
    return _wrap(_C.arg_reduce(False, x, dim, keepdim), x)


def _correction(unbiased: Optional[bool], correction: Optional[float]) -> float:
    if correction is not None:
        if unbiased is not None:
            raise ValueError("pass either unbiased or correction, not both")
        if isinstance(correction, bool) or not isinstance(correction, (int, float)) or math.isnan(correction):
            raise ValueError(f"correction must be a number, got {correction!r}")
        return correction
    return 1 if unbiased is None or unbiased else 0


def _reduced_count(x: Any, dim: Dims) -> int:
    shape = tuple(x.shape)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return math.prod(shape)
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return math.prod(shape[d] for d in dims) if all(-len(shape) <= d < len(shape) for d in dims) else 1


def _var(x: Any, dim: Dims, unbiased: Optional[bool], keepdim: bool, correction: Optional[float], root: bool) -> Any:
    c = _correction(unbiased, correction)
    n = _reduced_count(x, dim)
    if float(c).is_integer() and 0 <= c < n:  # the kernel's integer divisor N - c
        return _wrap(_C.var(x, dim, int(c), keepdim, root), x)
    # a fractional correction, or one >= N: torch divides the sum of squares by max(0, N - c), i.e.
    # the population variance times N / max(0, N - c) (inf, or NaN for a zero sum, when N - c <= 0)
    population = _wrap(_C.var(x, dim, 0, keepdim, False), x)
    factor = n / (n - c) if n - c > 0 else math.inf
    scaled = mul(population, factor)
    return sqrt(scaled) if root else scaled


def var(x: Any, dim: Dims = None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
        correction: Optional[float] = None) -> Any:
    """Variance over dims with Bessel's correction by default (``unbiased``/``correction`` as torch,
    fractional corrections and ``correction >= N`` included)."""
    return _var(x, dim, unbiased, keepdim, correction, False)


def std(x: Any, dim: Dims = None, unbiased: Optional[bool] = None, keepdim: bool = False, *,
        correction: Optional[float] = None) -> Any:
    """Standard deviation over dims (``unbiased``/``correction`` as torch)."""
    return _var(x, dim, unbiased, keepdim, correction, True)


# ---- nn ----------------------------------------------------------------------------------------


def softmax(x: Any, dim: int) -> Any:
    """Softmax along dim."""
    return _wrap(_C.softmax(x, dim, False), x)


def log_softmax(x: Any, dim: int) -> Any:
    """log(softmax(x)) along dim, computed stably."""
    return _wrap(_C.softmax(x, dim, True), x)


def _normalized_ndim(normalized_shape: Union[int, Sequence[int]], x: Any) -> int:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    x_shape = tuple(x.shape)
    if len(shape) == 0 or len(shape) > len(x_shape) or tuple(x_shape[len(x_shape) - len(shape):]) != shape:
        raise ValueError(f"normalized_shape {list(shape)} does not match the trailing dims of input of shape {list(x_shape)}")
    return len(shape)


def layer_norm(x: Any, normalized_shape: Union[int, Sequence[int]], weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Any:
    """LayerNorm over the trailing ``normalized_shape`` dims."""
    return _wrap(_C.layer_norm(x, _normalized_ndim(normalized_shape, x), weight, bias, float(eps)), x)


def rms_norm(x: Any, normalized_shape: Union[int, Sequence[int], Any], weight: Any = None,
             eps: Optional[float] = None) -> Any:
    """RMSNorm over the trailing dims: x * rsqrt(mean(x**2) + eps) * weight.

    Accepts torch's signature ``rms_norm(x, normalized_shape, weight=None, eps=None)`` (eps None means
    float32's machine epsilon, as torch) and the short form ``rms_norm(x, weight, eps)`` where the
    second argument is the weight tensor.
    """
    if _is_array(normalized_shape) and not isinstance(normalized_shape, (list, tuple)) and hasattr(normalized_shape, "shape"):
        weight, normalized_shape = normalized_shape, tuple(normalized_shape.shape)
        if eps is None and isinstance(weight, float):
            eps = weight
    if eps is None:
        eps = 1.1920928955078125e-07
    return _wrap(_C.rms_norm(x, _normalized_ndim(normalized_shape, x), weight, float(eps)), x)


def embedding(input: Any, weight: Any) -> Any:  # noqa: A002
    """Rows of weight [V, E] selected by integer indices (torch.nn.functional.embedding)."""
    return _wrap(_C.embedding(weight, input), weight)


def rotary_embedding(x: Any, cos: Any, sin: Any, interleaved: bool = False) -> Any:
    """Rotary position embedding of x [..., T, D] with cos/sin [T, D/2].

    Split-half form (``interleaved=False``, as Llama/Qwen in HF transformers): pairs (x[i], x[i+D/2]);
    interleaved form: pairs (x[2i], x[2i+1]). Each pair (a, b) becomes (a*cos - b*sin, b*cos + a*sin).
    """
    return _wrap(_C.rope(x, cos, sin, bool(interleaved)), x)


# ---- linear algebra ----------------------------------------------------------------------------


def matmul(a: Any, b: Any) -> Any:
    """torch.matmul semantics: 1-D/2-D products and batched products with broadcast batch dims."""
    return _wrap(_C.matmul(a, b), a)


def mm(a: Any, b: Any) -> Any:
    """2-D matrix product."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"mm: expected 2-D tensors, got {len(a.shape)}-D and {len(b.shape)}-D")
    return matmul(a, b)


def bmm(a: Any, b: Any) -> Any:
    """Batched 3-D matrix product (no broadcasting)."""
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: expected 3-D tensors with equal batch, got {list(a.shape)} and {list(b.shape)}")
    return matmul(a, b)


def linear(x: Any, w: Any, b: Any = None, activation: Optional[str] = None, residual: Any = None) -> Any:
    """activation(x @ w.T + b) + residual, fused in one GEMM epilogue.

    activation: None, "relu", "gelu" (exact erf), "gelu_tanh", "silu", "sigmoid" or "tanh".
    """
    name = "none" if activation is None else activation
    if name not in _ACTIVATION:
        raise ValueError(f"linear: unknown activation {activation!r}; expected one of {sorted(_ACTIVATION)}")
    return _wrap(_C.linear(x, w, b, _ACTIVATION[name], residual), x)


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Any:
    """torch.nn.functional.scaled_dot_product_attention (inference: dropout_p must be 0).

    Tiled with an online softmax: memory is O(T*D), not O(T^2).
    """
    if dropout_p != 0.0:
        raise ValueError("scaled_dot_product_attention: dropout is not supported (inference only); pass dropout_p=0")
    if scale is not None and not math.isfinite(scale):
        raise ValueError(f"scaled_dot_product_attention: scale must be a finite number or None, got {scale}")
    return _wrap(_C.attention(query, key, value, attn_mask, bool(is_causal), scale, bool(enable_gqa)), query)


# ---- shapes and dtypes -------------------------------------------------------------------------


def cat(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Concatenates along dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    return _wrap(_C.cat(tensors, dim), tensors[0])


def stack(tensors: Sequence[Any], dim: int = 0) -> Any:
    """Stacks along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    return _wrap(_C.stack(tensors, dim), tensors[0])


def to(x: Any, dtype: Any) -> Any:
    """A copy of x converted to dtype (a name like "float16" or a torch dtype)."""
    name = _dtype_name(type("D", (), {"dtype": dtype})()) if not isinstance(dtype, str) else dtype
    if name not in _DTYPE_NAMES:
        raise TypeError(f"to: unsupported dtype {dtype!r}")
    return _wrap(_C.cast(x, name), x)


def copy(x: Any) -> Any:
    """A contiguous copy of x in its own dtype."""
    return to(x, _dtype_name(x))


# Convolution, pooling, normalization, losses and the backward ops live in nn_ops (re-exported here).
try:
    from .nn_ops import *  # noqa: F401,F403,E402
except ImportError:  # pragma: no cover - nn_ops is being built
    pass
