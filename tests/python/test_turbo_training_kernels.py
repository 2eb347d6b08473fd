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
