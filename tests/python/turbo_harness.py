"""The conformance harness for turbo_torch (in the style of tinygrad's helper_test_op): one lambda runs
under real PyTorch and under turbo_torch on the same data; shapes, dtypes, values and (for float
inputs that require grad) gradients from autograd.grad must agree, and so must the exception class
when PyTorch raises."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

import turbo_torch as tt

DTYPES = {"float32": (torch.float32, tt.float32), "float64": (torch.float64, tt.float64),
          "float16": (torch.float16, tt.float16), "bfloat16": (torch.bfloat16, tt.bfloat16),
          "int8": (torch.int8, tt.int8), "uint8": (torch.uint8, tt.uint8), "int16": (torch.int16, tt.int16),
          "int32": (torch.int32, tt.int32), "int64": (torch.int64, tt.int64), "bool": (torch.bool, tt.bool)}
TOLERANCE = {"float32": (1.3e-6 * 4, 1e-5), "float64": (1e-7, 1e-7), "float16": (1e-3, 1e-3),
             "bfloat16": (1.6e-2, 1e-2)}


def make_input(shape: Sequence[int], dtype: str, low: float = -3.0, high: float = 3.0, seed: int = 0,
               transpose: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        array = rng.integers(0, 2, size=shape).astype(bool)
    elif dtype in ("int8", "uint8", "int16", "int32", "int64"):
        lo = 0 if dtype == "uint8" else max(int(low), -100)
        array = rng.integers(lo, max(int(high), lo + 1) + 1, size=shape).astype(dtype)
    else:
        array = rng.uniform(low, high, size=shape).astype(np.float64)
    return array


def to_pair(array: np.ndarray, dtype: str, transpose: bool = False):
    torch_dtype, tt_dtype = DTYPES[dtype]
    a = torch.tensor(array).to(torch_dtype)
    b = tt.tensor(array.tolist() if array.ndim else array.item(), dtype=tt_dtype).reshape(array.shape)
    if transpose and a.ndim >= 2:
        a = a.transpose(-1, -2).contiguous().transpose(-1, -2)
        b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
        assert not b.is_contiguous() or b.shape[-1] == 1 or b.shape[-2] == 1
    return a, b


def to_numpy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy()
    if isinstance(x, tt.Tensor):
        x = x.detach()
        if x.dtype is tt.bfloat16:
            x = x.float()
        return np.array(x.tolist(), dtype=str(x.dtype).replace("torch.", "") if x.dtype is not tt.bfloat16 else "float32").reshape(tuple(x.shape))
    return x


def dtype_name(d: Any) -> str:
    return str(d).replace("torch.", "")


def compare(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{where}: expected a sequence, got {type(actual)}"
        assert len(expected) == len(actual), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, rtol, atol, f"{where}[{i}]")
        return
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, tt.Tensor), f"{where}: expected a Tensor, got {type(actual)}"
        assert tuple(expected.shape) == tuple(actual.shape), f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert dtype_name(expected.dtype) == dtype_name(actual.dtype), \
            f"{where}: dtype {actual.dtype} != {expected.dtype}"
        e, a = to_numpy(expected), to_numpy(actual)
        if e.dtype.kind in "fc":
            if rtol == 0 and atol == 0:  # integer inputs with a float result: that dtype's tolerance
                rtol, atol = TOLERANCE.get(dtype_name(expected.dtype), (1e-6, 1e-6))
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(a, e, err_msg=where)
        return
    if isinstance(expected, torch.dtype):
        assert dtype_name(expected) == dtype_name(actual), f"{where}: {actual} != {expected}"
        return
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float) and math.isnan(actual), where
        return
    assert expected == actual, f"{where}: {actual!r} != {expected!r}"


def check_op(fn: Callable[[Any, Sequence[Any]], Any], shapes: Sequence[Sequence[int]], dtype: str = "float32",
             grad: bool = True, low: float = -3.0, high: float = 3.0, transpose: bool = False,
             rtol: float | None = None, atol: float | None = None, inputs: Sequence[np.ndarray] | None = None) -> None:
    """Runs fn(module, tensors) under torch and turbo_torch and compares results and gradients."""
    arrays = list(inputs) if inputs is not None else [make_input(s, dtype, low, high, seed=i) for i, s in enumerate(shapes)]
    pairs = [to_pair(a, dtype, transpose) for a in arrays]
    floating = dtype.startswith("float") or dtype == "bfloat16"
    want_grad = grad and floating and dtype in ("float32", "float64")
    torch_inputs = [p[0].clone().requires_grad_(want_grad) for p in pairs]
    tt_inputs = [p[1].clone().requires_grad_(want_grad) if want_grad else p[1] for p in pairs]
    default_rtol, default_atol = TOLERANCE.get(dtype, (0, 0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    try:
        expected = fn(torch, torch_inputs)
    except Exception as error:  # the same exception class must come out of turbo_torch
        try:
            fn(tt, tt_inputs)
        except Exception as ours:
            assert isinstance(ours, type(error)) or type(error).__name__ == type(ours).__name__, \
                f"torch raised {type(error).__name__}: {error}; turbo_torch raised {type(ours).__name__}: {ours}"
            return
        raise AssertionError(f"torch raised {type(error).__name__}: {error}; turbo_torch did not raise")
    actual = fn(tt, tt_inputs)
    compare(expected, actual, rtol, atol)
    if not want_grad:
        return
    outputs_t = [o for o in (expected if isinstance(expected, (tuple, list)) else [expected])
                 if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outputs_t:
        return
    outputs_o = [o for o in (actual if isinstance(actual, (tuple, list)) else [actual])
                 if isinstance(o, tt.Tensor) and o.requires_grad]
    assert len(outputs_o) == len(outputs_t), "turbo_torch outputs do not require grad like torch's"
    seeds = [make_input(tuple(o.shape), dtype, -1, 1, seed=100 + i) for i, o in enumerate(outputs_t)]
    grads_t = torch.autograd.grad(outputs_t, torch_inputs, [torch.tensor(s).to(o.dtype) for s, o in zip(seeds, outputs_t)],
                                  allow_unused=True)
    grads_o = tt.autograd.grad(outputs_o, tt_inputs, [tt.tensor(s.tolist() if s.ndim else s.item(), dtype=o.dtype)
                                                      .reshape(s.shape) for s, o in zip(seeds, outputs_o)],
                               allow_unused=True)
    for i, (gt, go) in enumerate(zip(grads_t, grads_o)):
        if gt is None:
            assert go is None or float(go.abs().sum()) == 0, f"grad[{i}]: torch gives None"
            continue
        assert go is not None, f"grad[{i}]: turbo_torch gives None"
        compare(gt, go, max(rtol, 1e-5) * 10, max(atol, 1e-5) * 10, f"grad[{i}]")
