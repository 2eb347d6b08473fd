"""The backward fast paths the training programs spend their time in, against torch on the same values:
relu's gradient is torch's threshold_backward(grad, result, 0) (a select), on the contiguous float32
path and on the staged (non-contiguous, float64) path, with special values in the result and in the
incoming gradient."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import turbo_torch as tt  # noqa: E402

SPECIAL = [float("nan"), -1.0, 0.0, -0.0, 2.0, float("inf"), float("-inf"), 1e-30, -1e-30]


def relu_grads(lib, values, grads, dtype, transpose):
    x = lib.tensor(values, dtype=getattr(lib, dtype)).reshape(len(values) // 3, 3)
    g = lib.tensor(grads, dtype=getattr(lib, dtype)).reshape(len(values) // 3, 3)
    if transpose:  # a non-contiguous input and gradient take the staged loop
        x, g = x.t(), g.t()
    x.requires_grad_(True)
    y = lib.nn.functional.relu(x)
    y.backward(g)
    return np.array(x.grad.tolist(), dtype=np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("transpose", [False, True])
def test_relu_backward_special_values(dtype, transpose):
    values = [v for v in SPECIAL for _ in SPECIAL]
    grads = [g for _ in SPECIAL for g in SPECIAL]  # every (result, gradient) pair once
    expected = relu_grads(torch, values, grads, dtype, transpose)
    actual = relu_grads(tt, values, grads, dtype, transpose)
    np.testing.assert_array_equal(actual, expected)  # a select is exact: NaN where torch has NaN
    assert np.array_equal(np.signbit(actual), np.signbit(expected))


def test_relu_backward_large_random_matches_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    g = rng.standard_normal((64, 512)).astype(np.float32)
    ours = tt.from_numpy(x.copy()).requires_grad_(True)
    tt.nn.ReLU()(ours).backward(tt.from_numpy(g.copy()))
    theirs = torch.from_numpy(x.copy()).requires_grad_(True)
    torch.nn.ReLU()(theirs).backward(torch.from_numpy(g.copy()))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


# ---- float32 reductions over any set of dims, read in place (batch norm, conv bias and broadcast gradients) ----

def _layout(lib, base, layout):
    """The same values as `base` (a numpy float32 array) laid out as asked: contiguous, permuted (a
    non-contiguous view), sliced with a step, or broadcast along a new leading dim (stride 0)."""
    t = lib.from_numpy(base.copy())
    if layout == "permuted":
        return lib.from_numpy(np.ascontiguousarray(np.moveaxis(base, 0, -1)).copy()).movedim(-1, 0)
    if layout == "sliced":
        wide = np.repeat(base, 2, axis=-1)
        return lib.from_numpy(wide.copy())[..., ::2]
    if layout == "expanded":
        return t.unsqueeze(0).expand(3, *base.shape)
    return t


REDUCE_CASES = [((8, 8, 12, 12), (0, 2, 3)), ((4, 6, 5), (0, 2)), ((2, 3, 600), (1,)), ((5, 7), (0,)),
                ((3, 4, 5, 6), (1, 3)), ((6, 1, 9), (0, 1)), ((7, 300), (0, 1))]


@pytest.mark.parametrize("layout", ["contiguous", "permuted", "sliced", "expanded"])
@pytest.mark.parametrize("shape,dims", REDUCE_CASES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_float32_reductions_over_any_dims_match_torch(shape, dims, layout, keepdim):
    rng = np.random.default_rng(len(shape) * 31 + sum(dims))
    base = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    ours, theirs = _layout(tt, base, layout), _layout(torch, base, layout)
    if layout == "expanded":
        dims = tuple(d + 1 for d in dims) + (0,)
    exact = theirs.double()  # ours accumulates in double and rounds once
    for name, kwargs in [("sum", {}), ("mean", {}), ("var", {"correction": 0}), ("var", {"correction": 1}),
                         ("std", {"correction": 1})]:
        got = getattr(ours, name)(dims, keepdim=keepdim, **kwargs)
        want = getattr(exact, name)(dims, keepdim=keepdim, **kwargs)
        assert tuple(got.shape) == tuple(want.shape), name
        assert got.dtype == tt.float32, name
        np.testing.assert_allclose(got.numpy(), want.float().numpy(), rtol=2e-7, atol=1e-6, err_msg=name)


def test_float32_reductions_over_any_dims_special_values():
    base = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    base[0, 1, 2] = np.nan
    base[1, 2, 0] = np.inf
    for dims in [(0, 2), (0,), (2, 0)]:
        for name in ("sum", "mean", "var"):
            got = getattr(tt.from_numpy(base.copy()), name)(dims)
            want = getattr(torch.from_numpy(base.copy()), name)(dims)
            np.testing.assert_array_equal(np.isnan(got.numpy()), np.isnan(want.numpy()), err_msg=name)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=name)


def test_float32_var_with_too_few_elements_is_inf_or_nan_like_torch():
    x = np.ones((4, 1, 3), dtype=np.float32)
    for correction in (1, 2):
        got = tt.from_numpy(x.copy()).var((1,), correction=correction)
        want = torch.from_numpy(x.copy()).var((1,), correction=correction)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


# ---- the float32 gradient of a broadcast product, read in place ----

@pytest.mark.parametrize("other_shape", [(1, 8, 1, 1), (8, 1, 1), (12,), (1,), (4, 8, 12, 12)])
@pytest.mark.parametrize("transpose_grad", [False, True])
def test_float32_product_gradient_matches_torch(other_shape, transpose_grad):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal(other_shape).astype(np.float32)
    g = rng.standard_normal((4, 8, 12, 12)).astype(np.float32)
    grads = []
    for lib in (tt, torch):
        a = lib.from_numpy(x.copy()).requires_grad_(True)
        b = lib.from_numpy(w.copy()).requires_grad_(True)
        upstream = lib.from_numpy(g.copy())
        if transpose_grad:  # a non-contiguous incoming gradient
            upstream = lib.from_numpy(np.ascontiguousarray(g.transpose(0, 1, 3, 2)).copy()).transpose(2, 3)
        (a * b).backward(upstream)
        grads.append((a.grad.numpy(), b.grad.numpy()))
    (ours_a, ours_b), (theirs_a, theirs_b) = grads
    np.testing.assert_array_equal(ours_a, theirs_a)  # one float product per element: exact
    np.testing.assert_allclose(ours_b, theirs_b, rtol=1e-5, atol=1e-4)  # summed: order may differ


# ---- broadcast copies (the staging of a broadcast operand) ----

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "bool",
                                   "uint8"])
def test_broadcast_copy_of_every_dtype_matches_torch(dtype):
    values = np.array([[1], [0], [3]], dtype=np.float64)  # [3, 1] -> [2, 3, 37] (37: not a multiple of 64 bytes)
    ours = tt.tensor(values.tolist(), dtype=getattr(tt, dtype)).expand(2, 3, 37).contiguous()
    theirs = torch.tensor(values.tolist(), dtype=getattr(torch, dtype)).expand(2, 3, 37).contiguous()
    assert ours.is_contiguous()
    np.testing.assert_array_equal(np.array(ours.tolist()), np.array(theirs.tolist()))
