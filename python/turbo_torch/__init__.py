"""turbo_torch: ``import turbo_torch as torch`` — PyTorch's eager API on torchburn's C core.

Tensors, dispatch, type promotion, kernels and autograd are C (``torchburn._C``); this package is the
thin layer that gives them PyTorch's names and signatures. PyTorch does not need to be installed.

Example::

    >>> import turbo_torch as torch
    >>> x = torch.tensor([[1., 2.], [3., 4.]], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([[2., 4.],
            [6., 8.]])
"""
from __future__ import annotations

import builtins
import math as _math
from typing import Any, Optional, Sequence

from torchburn import _C

from . import _types
from ._tensor_str import tensor_repr as _tensor_repr
from ._types import (Size, bfloat16, device, dtype, float16, float32, float64, int8, int16, int32, int64,
                     uint8)

bool = _types.bool_  # noqa: A001 - torch.bool
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
cfloat = None

Tensor = _C.EagerTensor
_C._tt_setup(_types.ALL_DTYPES, Size, device("cpu"), _tensor_repr)

__version__ = "0.1.0"
_py_bool, _py_int, _py_float = builtins.bool, builtins.int, builtins.float


def _dtype(d: Any) -> Optional[dtype]:
    if d is None or isinstance(d, dtype):
        return d
    if d is _py_float:
        return float64
    if d is _py_int:
        return int64
    if d is _py_bool:
        return _types.bool_
    if isinstance(d, str):
        name = d.replace("torch.", "")
        if name in _types.BY_NAME:
            return _types.BY_NAME[name]
    raise TypeError(f"expected a turbo_torch.dtype, got {d!r}")


def get_default_dtype() -> dtype:
    """The default float dtype (float32 unless set_default_dtype changed it)."""
    return _C._tt_get_default_dtype()


def set_default_dtype(d: dtype) -> None:
    """Sets the dtype of float Python scalars and float tensor creation (float32 or float64)."""
    _C._tt_set_default_dtype(_dtype(d))


def is_tensor(obj: Any) -> _py_bool:
    return isinstance(obj, Tensor)


def is_floating_point(x: Tensor) -> _py_bool:
    return x.dtype.is_floating_point


def numel(x: Tensor) -> _py_int:
    return x.numel()


# ---- creation ----------------------------------------------------------------------------------

def _flatten(data: Any, shape: list, flat: list, depth: _py_int = 0) -> None:
    if isinstance(data, Tensor):
        if len(shape) <= depth:
            shape.extend(data.shape)
        flat.extend(data.reshape(-1).tolist() if data.ndim else [data.item()])
        return
    if isinstance(data, (list, tuple)):
        if len(shape) <= depth:
            shape.append(len(data))
        elif shape[depth] != len(data):
            raise ValueError(f"expected sequence of length {shape[depth]} at dim {depth} (got {len(data)})")
        for item in data:
            _flatten(item, shape, flat, depth + 1)
        if len(data) == 0 and len(shape) == depth + 1:
            return
        return
    if len(shape) > depth and depth < len(shape):
        raise ValueError(f"expected sequence of length {shape[depth]} at dim {depth} (got a scalar)")
    flat.append(data)


def _infer_dtype(flat: list) -> dtype:
    if builtins.any(isinstance(v, _py_float) for v in flat):
        return get_default_dtype()
    if builtins.any(isinstance(v, _py_bool) for v in flat) and builtins.all(isinstance(v, _py_bool) for v in flat):
        return _types.bool_
    if not flat:
        return get_default_dtype()
    for v in flat:
        if not isinstance(v, (_py_int, _py_float, _py_bool)):
            raise TypeError(f"Could not infer dtype of {type(v).__name__}")
    return int64


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False,
           pin_memory: _py_bool = False) -> Tensor:
    """A new tensor holding a copy of data (nested lists/tuples of numbers, a scalar, a Tensor, or an
    array exposing DLPack/the buffer protocol such as a numpy array)."""
    dtype = _dtype(dtype)
    if isinstance(data, Tensor):
        result = data.detach().clone() if dtype is None else data.detach().to(dtype)
    elif hasattr(data, "__dlpack__") or hasattr(data, "__array_interface__"):
        result = from_numpy(data).clone()
        if dtype is not None:
            result = result.to(dtype)
    else:
        shape: list = []
        flat: list = []
        _flatten(data, shape, flat)
        if hasattr(flat[0] if flat else None, "item"):
            flat = [v.item() for v in flat]
        result = _C._tt_from_values(flat, shape, dtype or _infer_dtype(flat))
    if requires_grad:
        result.requires_grad_(True)
    return result


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor) and (dtype is None or data.dtype is _dtype(dtype)):
        return data
    if hasattr(data, "__dlpack__") or hasattr(data, "__array_interface__"):
        result = from_numpy(data)
        return result if dtype is None else result.to(_dtype(dtype))
    return tensor(data, dtype=dtype)


def from_numpy(array: Any) -> Tensor:
    """A tensor sharing memory with a numpy array (or any DLPack / buffer-protocol producer)."""
    return _C._tt_wrap_base(_C.from_dlpack(array))


def _size(size: Sequence[Any]) -> tuple:
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        return tuple(size[0])
    return tuple(size)


def _finish(t: Tensor, requires_grad: _py_bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def full(size: Sequence[_py_int], fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: _py_bool = False, out: Any = None) -> Tensor:
    d = _dtype(dtype)
    if d is None:
        d = _types.bool_ if isinstance(fill_value, _py_bool) else int64 if isinstance(fill_value, _py_int) \
            else get_default_dtype()
    return _finish(_C._tt_full(tuple(size), fill_value, d), requires_grad)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False, out: Any = None) -> Tensor:
    return _finish(_C._tt_full(_size(size), 0.0, _dtype(dtype) or get_default_dtype()), requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False, out: Any = None) -> Tensor:
    return _finish(_C._tt_full(_size(size), 1.0, _dtype(dtype) or get_default_dtype()), requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    return zeros(*size, dtype=dtype, requires_grad=requires_grad)


def _like(x: Tensor, dtype: Any) -> tuple:
    return tuple(x.shape), _dtype(dtype) or x.dtype


def zeros_like(x: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    shape, d = _like(x, dtype)
    return _finish(_C._tt_full(shape, 0.0, d), requires_grad)


def ones_like(x: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    shape, d = _like(x, dtype)
    return _finish(_C._tt_full(shape, 1.0, d), requires_grad)


def full_like(x: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    shape, d = _like(x, dtype)
    return _finish(_C._tt_full(shape, fill_value, d), requires_grad)


empty_like = zeros_like


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: _py_bool = False, out: Any = None) -> Tensor:
    if end is None:
        start, end = 0, start
    values = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = values
    if step == 0:
        raise RuntimeError("step must be nonzero")
    d = _dtype(dtype)
    if d is None:
        d = get_default_dtype() if builtins.any(isinstance(v, _py_float) for v in values) else int64
    if not _integral(d):
        count = _math.ceil((end - start) / step)
    else:
        # as torch: an integer dtype takes the arguments truncated toward zero; int64 also counts with
        # them (integer arithmetic), the narrower types count with the original values
        values_as_given = (start, end, step)
        start, end, step = (_py_int(v) for v in values_as_given)
        if d is int64:
            if step == 0:  # a fractional step truncated to 0 (torch raises ValueError here)
                raise ValueError("step must be nonzero")
            span = end - start + step - (1 if step > 0 else -1)
            count = builtins.abs(span) // builtins.abs(step) * (1 if (span >= 0) == (step > 0) else -1)
        else:
            count = _math.ceil((values_as_given[1] - values_as_given[0]) / values_as_given[2])
    if count < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    return _finish(_C._tt_arange(_py_float(start), _py_float(step), _py_int(count), d), requires_grad)


def _integral(d: Any) -> _py_bool:
    return not d.is_floating_point and d is not _types.bool_


def linspace(start: Any, end: Any, steps: _py_int, *, dtype: Any = None, device: Any = None,
             requires_grad: _py_bool = False) -> Tensor:
    d = _dtype(dtype) or get_default_dtype()
    if _integral(d):  # torch truncates the ends toward zero first, then truncates each value
        start, end = _py_int(start), _py_int(end)
    if steps == 1:
        return _finish(_C._tt_from_values([_py_float(start)], (1,), d), requires_grad)
    step = (end - start) / (steps - 1)
    # torch computes the two halves from each end for symmetry
    half_n = steps // 2
    values = [start + step * i if i < half_n else end - step * (steps - 1 - i) for i in range(steps)]
    return _finish(_C._tt_from_values(values, (steps,), d), requires_grad)


def logspace(start: Any, end: Any, steps: _py_int, base: _py_float = 10.0, *, dtype: Any = None,
             device: Any = None, requires_grad: _py_bool = False) -> Tensor:
    d = _dtype(dtype) or get_default_dtype()
    if _integral(d):  # the exponents' ends truncated toward zero, as torch does for integer dtypes
        start, end = _py_int(start), _py_int(end)
    exponents = linspace(start, end, steps, dtype=float64)
    return _finish(pow(base, exponents).to(d), requires_grad)


def eye(n: _py_int, m: Optional[_py_int] = None, *, dtype: Any = None, device: Any = None,
        requires_grad: _py_bool = False) -> Tensor:
    m = n if m is None else m
    values = [1.0 if i == j else 0.0 for i in range(n) for j in range(m)]
    return _finish(_C._tt_from_values(values, (n, m), _dtype(dtype) or get_default_dtype()), requires_grad)


# ---- random -------------------------------------------------------------------------------------

class Generator:
    """A random number generator (xoshiro256**, not PyTorch's mt19937: same API, different streams)."""

    def __init__(self, device: Any = "cpu") -> None:
        self._state = None
        self.manual_seed(67280421310721)

    def manual_seed(self, seed: _py_int) -> "Generator":
        saved = _C._tt_get_rng_state()
        _C._tt_manual_seed(seed)
        self._state = _C._tt_get_rng_state()
        _C._tt_set_rng_state(saved)
        self._seed = seed
        return self

    def initial_seed(self) -> _py_int:
        return self._seed

    def _enter(self):
        saved = _C._tt_get_rng_state()
        _C._tt_set_rng_state(self._state)
        return saved

    def _leave(self, saved) -> None:
        self._state = _C._tt_get_rng_state()
        _C._tt_set_rng_state(saved)


_initial_seed = [67280421310721]


def set_num_threads(n: _py_int) -> None:
    """Threads the C kernels use (torch.set_num_threads: one pool serves every op)."""
    n = _py_int(n)
    if n < 1:
        raise RuntimeError("set_num_threads expects a positive integer")
    _C.set_num_threads(n)


def get_num_threads() -> _py_int:
    return _C.get_num_threads()


_interop_threads: Optional[_py_int] = None  # None: torch's default, the physical core count


def set_num_interop_threads(n: _py_int) -> None:
    """Accepted for compatibility: turbo_torch runs ops on the caller's thread (no inter-op pool), so the
    value is only remembered and reported."""
    global _interop_threads
    n = _py_int(n)
    if n < 1:
        raise RuntimeError("set_num_interop_threads expects a positive integer")
    _interop_threads = n


def get_num_interop_threads() -> _py_int:
    return _interop_threads if _interop_threads is not None else _py_int(_C.cpu_info()["physical_cores"])


def manual_seed(seed: _py_int) -> Generator:
    """Seeds the global generator (reproducible within turbo_torch; streams differ from PyTorch's)."""
    _initial_seed[0] = _py_int(seed)
    _C._tt_manual_seed(_py_int(seed))
    return default_generator


def seed() -> _py_int:
    import random as _random
    s = _random.getrandbits(63)
    manual_seed(s)
    return s


def initial_seed() -> _py_int:
    return _initial_seed[0]


default_generator = Generator()


def _random(kind: _py_int, size: tuple, d: dtype, a: _py_float, b: _py_float, generator: Any) -> Tensor:
    if generator is not None:
        saved = generator._enter()
        try:
            return _C._tt_random(kind, size, d, a, b)
        finally:
            generator._leave(saved)
    return _C._tt_random(kind, size, d, a, b)


def rand(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    return _finish(_random(0, _size(size), _dtype(dtype) or get_default_dtype(), 0.0, 1.0, generator), requires_grad)


def randn(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: _py_bool = False, **kw: Any) -> Tensor:
    return _finish(_random(1, _size(size), _dtype(dtype) or get_default_dtype(), 0.0, 1.0, generator), requires_grad)


def randint(low: _py_int, high: Any = None, size: Any = None, *, generator: Any = None, dtype: Any = None,
            device: Any = None, requires_grad: _py_bool = False) -> Tensor:
    if size is None:
        low, high, size = 0, low, high
    return _random(2, tuple(size), _dtype(dtype) or int64, _py_float(low), _py_float(high), generator)


def rand_like(x: Tensor, *, dtype: Any = None, **kw: Any) -> Tensor:
    return rand(*x.shape, dtype=dtype or x.dtype)


def randn_like(x: Tensor, *, dtype: Any = None, **kw: Any) -> Tensor:
    return randn(*x.shape, dtype=dtype or x.dtype)


def randperm(n: _py_int, *, generator: Any = None, dtype: Any = None, device: Any = None, **kw: Any) -> Tensor:
    keys = _random(0, (n,), float64, 0.0, 1.0, generator)
    return argsort(keys).to(_dtype(dtype) or int64)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None, **kw: Any) -> Tensor:
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        shape = (mean if isinstance(mean, Tensor) else std).shape
        return _random(1, tuple(shape), get_default_dtype(), 0.0, 1.0, generator) * std + mean
    return _random(1, tuple(size), get_default_dtype(), _py_float(mean), _py_float(std), generator)


def bernoulli(input: Tensor, p: Any = None, *, generator: Any = None, **kw: Any) -> Tensor:
    probs = input if p is None else full_like(input, p)
    return (_random(0, tuple(input.shape), float64, 0.0, 1.0, generator) < probs).to(input.dtype)


def multinomial(input: Tensor, num_samples: _py_int, replacement: _py_bool = False, *, generator: Any = None) -> Tensor:
    probs = input if input.ndim == 2 else input.unsqueeze(0)
    rows = []
    for row in probs.tolist():
        weights = list(row)
        picks = []
        for _ in range(num_samples):
            total = builtins.sum(weights)
            if total <= 0:
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            u = _random(0, (), float64, 0.0, total, generator).item()
            acc = 0.0
            for k, w in enumerate(weights):
                acc += w
                if u < acc:
                    break
            picks.append(k)
            if not replacement:
                weights[k] = 0.0
        rows.append(picks)
    result = tensor(rows, dtype=int64)
    return result if input.ndim == 2 else result[0]


from ._functions import *  # noqa: E402,F401,F403
from ._functions import _install_tensor_methods  # noqa: E402
from . import autograd, runtime  # noqa: E402
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from .autograd import is_inference_mode_enabled  # noqa: E402,F401

_install_tensor_methods()

result_type = _C._tt_result_type
promote_types = _C._tt_promote_types
from .serialization import load, save, load_safetensors, save_safetensors, _install_pickling  # noqa: E402,F401
_install_pickling()
from . import utils  # noqa: E402,F401

from . import nn  # noqa: E402,F401
from . import optim  # noqa: E402,F401
from . import compiler  # noqa: E402,F401
from .compiler import compile  # noqa: E402,F401
