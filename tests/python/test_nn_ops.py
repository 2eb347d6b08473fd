"""torchburn's nn ops (convolution, pooling, normalization, losses, backward ops) against PyTorch 2.13.

Tolerances are torch.testing.assert_close's float32 defaults (rtol 1.3e-6, atol 1e-5) unless a wider
one is given next to the check with its reason. The last tests run aot_autograd's forward and backward
graphs of an MLP and a small CNN training step with every supported aten node replaced by its
torchburn op (same name, same signature) and compare the gradients with eager PyTorch.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torchburn.ops as ops
from torchburn.nn_ops import _pair

aten = torch.ops.aten
torch.manual_seed(0)

# A convolution output sums K = C_in/groups * KH * KW products of O(1) values; summing in another order
# than oneDNN moves the result by a few ulps of the partial sums (~K * 2^-24 * |x||w|), above atol 1e-5
# for the larger K here.
CONV_TOL = dict(rtol=1e-5, atol=5e-5)


def check(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, equal_nan=True, **kw)


# ---- convolution ----------------------------------------------------------------------------------

CONV_CASES = [
    # (N, C_in, H, W, C_out, (KH, KW), stride, padding, dilation, groups, bias)
    (2, 3, 9, 9, 4, (3, 3), 1, 1, 1, 1, True),
    (2, 3, 9, 9, 4, (3, 3), 1, 0, 1, 1, False),
    (1, 4, 10, 7, 6, (2, 3), (2, 1), (1, 0), 1, 1, True),
    (2, 4, 11, 11, 4, (3, 3), 2, 2, 2, 1, True),
    (2, 6, 8, 8, 6, (3, 3), 1, 1, 1, 3, True),     # grouped
    (2, 8, 9, 9, 8, (3, 3), 1, 1, 1, 8, True),     # depthwise
    (2, 4, 9, 9, 8, (5, 5), 2, 2, 1, 4, False),    # depthwise with channel multiplier 2
    (3, 16, 6, 6, 8, (1, 1), 1, 0, 1, 1, True),    # pointwise: no im2col
    (2, 6, 6, 6, 4, (1, 1), 2, 0, 1, 2, True),     # strided 1x1
    (2, 3, 33, 35, 5, (3, 3), 1, 1, 1, 1, True),   # several column tiles
    (0, 3, 8, 8, 4, (3, 3), 1, 1, 1, 1, True),     # empty batch
    (1, 2, 3, 3, 3, (3, 3), 1, 0, 1, 1, True),     # 1x1 output
    # rows of >= 12 outputs with stride_w 1 take the direct (implicit GEMM) kernel where the ISA has one
    (2, 3, 12, 12, 16, (3, 3), 1, 1, 1, 1, True),   # 16 channels as two panels of 8
    (1, 5, 17, 40, 29, (5, 3), (2, 1), (2, 1), (1, 2), 1, True),  # stride_h 2, dilated columns, 3 panels
    (2, 8, 9, 31, 15, (3, 3), 1, 0, 1, 1, False),  # 29 columns: a full and a 13-lane vector per row
    (1, 4, 20, 47, 31, (7, 7), 1, 3, (2, 1), 1, True),  # 49 taps, dilated rows
    (2, 6, 16, 16, 12, (1, 3), 1, (0, 1), 1, 3, True),  # grouped
    (1, 16, 8, 64, 64, (3, 3), 1, 1, 1, 1, True),  # 64 channels as 5 panels
    (1, 2, 6, 20, 3, (8, 8), 1, 4, 1, 1, True),    # 64 taps (the direct limit), window taller than the image
    (1, 2, 5, 20, 3, (9, 9), 1, 4, 1, 1, True),    # 81 taps: im2col panels
    (2, 8, 16, 40, 16, (3, 3), 2, 1, 1, 1, True),  # stride 2: the direct kernel where the ISA takes it
    (1, 3, 15, 61, 29, (7, 7), 2, 3, 1, 1, False),  # a ResNet-style stem: 7x7 stride 2
    (1, 4, 9, 50, 6, (3, 5), (1, 2), (1, 2), (1, 2), 2, True),  # stride 2 with dilated columns, grouped
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(isa, case):
    n, cin, h, w, cout, kernel, stride, padding, dilation, groups, has_bias = case
    x = torch.randn(n, cin, h, w)
    weight = torch.randn(cout, cin // groups, *kernel)
    bias = torch.randn(cout) if has_bias else None
    expected = F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    check(ops.conv2d(x, weight, bias, stride, padding, dilation, groups), expected, **CONV_TOL)
    check(ops.convolution(x, weight, bias, _pair(stride, "s"), _pair(padding, "p"),
                          _pair(dilation, "d"), False, [0, 0], groups), expected, **CONV_TOL)


def test_conv2d_padding_modes_and_layouts():
    x = torch.randn(2, 3, 10, 9)
    for kernel, dilation in [((3, 3), 1), ((4, 2), 1), ((2, 5), (2, 1))]:
        weight = torch.randn(5, 3, *kernel)
        for padding in ["same", "valid"]:
            check(ops.conv2d(x, weight, padding=padding, dilation=dilation),
                  F.conv2d(x, weight, padding=padding, dilation=dilation), **CONV_TOL)
    weight = torch.randn(5, 3, 3, 3)
    # unbatched input, non-contiguous input and weight, numpy in -> numpy out
    check(ops.conv2d(x[0], weight, padding=1), F.conv2d(x[0], weight, padding=1), **CONV_TOL)
    xt = torch.randn(2, 10, 9, 3).permute(0, 3, 1, 2)
    wt = torch.randn(3, 3, 3, 5).permute(3, 2, 0, 1)
    check(ops.conv2d(xt, wt, stride=2), F.conv2d(xt, wt, stride=2), **CONV_TOL)
    result = ops.conv2d(x.numpy(), weight.numpy(), padding=1)
    assert isinstance(result, np.ndarray)
    check(torch.from_numpy(result), F.conv2d(x, weight, padding=1), **CONV_TOL)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
@pytest.mark.parametrize("width", [9, 21])  # 21: the direct kernel's epilogue, where the ISA has one
def test_conv2d_fused_epilogue(isa, activation, width):
    x = torch.randn(2, 4, 9, width)
    weight, bias = torch.randn(6, 4, 3, 3), torch.randn(6)
    scale, shift = torch.rand(6) + 0.5, torch.randn(6)
    residual = torch.randn(2, 6, 9, width)
    act = {None: lambda v: v, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
           "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[activation]
    conv = F.conv2d(x, weight, bias, padding=1)
    expected = act(conv * scale[:, None, None] + shift[:, None, None]) + residual
    actual = ops.conv2d_fused(x, weight, bias, padding=1, scale=scale, shift=shift, activation=activation,
                              residual=residual)
    # scale is folded into the weights, so the products round differently from conv-then-scale
    check(actual, expected, rtol=1e-5, atol=1e-4)
    # depthwise (direct kernel) epilogue, residual broadcast over the batch
    dw = torch.randn(4, 1, 3, 3)
    expected = act(F.conv2d(x, dw, None, padding=1, groups=4) + 0.0) + residual[0, :4]
    check(ops.conv2d_fused(x, dw, None, padding=1, groups=4, activation=activation, residual=residual[0, :4]),
          expected, **CONV_TOL)


def test_conv2d_batch_norm_fold():
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    bn = torch.nn.BatchNorm2d(8)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.uniform_(-1, 1)
    model = torch.nn.Sequential(conv, bn, torch.nn.ReLU()).eval()
    x = torch.randn(2, 3, 12, 12)
    scale, shift = ops.batch_norm_fold(bn.running_mean, bn.running_var, bn.weight.detach(), bn.bias.detach(), bn.eps)
    with torch.no_grad():
        expected = model(x)
        actual = ops.conv2d_fused(x, conv.weight.detach(), conv.bias.detach(), padding=1, scale=scale, shift=shift,
                                  activation="relu")
    check(actual, expected, **CONV_TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_conv2d_half_dtypes(dtype):
    x, weight, bias = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    actual = ops.conv2d(x.to(dtype), weight.to(dtype), bias.to(dtype), padding=1)
    assert actual.dtype == dtype
    # computed in f32 from the rounded inputs and rounded once at the end
    expected = F.conv2d(x.to(dtype).float(), weight.to(dtype).float(), bias.to(dtype).float(), padding=1).to(dtype)
    check(actual.float(), expected.float(), rtol=1e-2 if dtype == torch.bfloat16 else 2e-3, atol=1e-2)


def test_conv2d_bad_inputs():
    x, weight = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    # float64 computes in double (src/ops/ops_conv_f64.c), it is never narrowed to float32
    got = ops.conv2d(x.double() * 1e-300, weight.double(), padding=1)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, F.conv2d(x.double() * 1e-300, weight.double(), padding=1), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="input must be 3-D"):
        ops.conv2d(x[0, 0], weight)
    with pytest.raises(ValueError, match="weight must be 4-D"):
        ops.conv2d(x, weight[0])
    with pytest.raises(ValueError, match="expects input with 4 channels"):
        ops.conv2d(x[:, :3], weight)
    with pytest.raises(ValueError, match="groups"):
        ops.conv2d(x, torch.randn(6, 2, 3, 3), groups=3)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        ops.conv2d(x, weight, padding=-1)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        ops.conv2d(x, weight, stride=0)
    with pytest.raises(ValueError, match="smaller than the"):
        ops.conv2d(torch.randn(1, 4, 2, 2), weight)
    with pytest.raises(ValueError, match="bias must have shape"):
        ops.conv2d(x, weight, torch.randn(5))
    with pytest.raises(ValueError, match="strided"):
        ops.conv2d(x, weight, stride=2, padding="same")
    with pytest.raises(ValueError, match="activation"):
        ops.conv2d_fused(x, weight, activation="swish")


# Stride 1 computes grad_input as a convolution of grad_output with the flipped weights (dilation and
# groups included) unless padding > dilation * (kernel - 1); these add cases on both sides of that.
BACKWARD_CASES = [
    (2, 3, 9, 9, 4, (3, 3), 1, "same", 1, 1, True),
    (2, 4, 10, 9, 6, (3, 3), 1, 2, 2, 2, True),      # dilated and grouped
    (1, 3, 7, 7, 5, (3, 3), 1, 3, 1, 1, False),      # padding > kernel - 1: the col2im path
    (2, 5, 14, 16, 7, (2, 3), 1, (1, 0), 1, 1, True),  # even kernel, uneven padding
    (1, 16, 20, 24, 24, (3, 3), 1, 1, 1, 1, False),  # rows wide enough for the direct kernel
]


@pytest.mark.parametrize("case", [c for c in CONV_CASES if c[0] > 0] + BACKWARD_CASES)
def test_convolution_backward(case):
    n, cin, h, w, cout, kernel, stride, padding, dilation, groups, has_bias = case
    if padding == "same":
        padding = 1
    x = torch.randn(n, cin, h, w)
    weight = torch.randn(cout, cin // groups, *kernel)
    pair = lambda v: list(_pair(v, "v"))  # noqa: E731
    out = F.conv2d(x, weight, None, stride, padding, dilation, groups)
    grad = torch.randn_like(out)
    args = (pair(stride), pair(padding), pair(dilation), False, [0, 0], groups)
    for mask in ([True, True, True], [False, True, True], [True, False, False]):
        expected = aten.convolution_backward(grad, x, weight, [cout], *args, mask)
        actual = ops.convolution_backward(grad, x, weight, [cout], *args, mask)
        for a, e in zip(actual, expected):
            if e is None:
                assert a is None
            else:
                # grad_weight sums N * OH * OW products per element
                check(a, e, rtol=1e-4, atol=1e-4)


# ---- pooling ---------------------------------------------------------------------------------------

MAX_POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), 1, True),
    (3, 1, 1, 2, False),
    (2, 3, 0, 1, True),
    (4, 3, 2, (1, 2), True),
]


@pytest.mark.parametrize("case", MAX_POOL_CASES)
def test_max_pool2d(case):
    kernel, stride, padding, dilation, ceil_mode = case
    x = torch.randn(2, 3, 11, 10)
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, 3:6, 3:6] = float("-inf")
    expected, expected_indices = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    actual, indices = ops.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    check(actual, expected, rtol=0, atol=0)
    assert torch.equal(indices, expected_indices)
    check(ops.max_pool2d(x[0], kernel, stride, padding, dilation, ceil_mode),
          F.max_pool2d(x[0], kernel, stride, padding, dilation, ceil_mode), rtol=0, atol=0)
    grad = torch.randn_like(expected)
    k, s = _pair(kernel, "k"), _pair(stride if stride is not None else kernel, "s")
    args = (list(k), list(s), list(_pair(padding, "p")), list(_pair(dilation, "d")), ceil_mode)
    check(ops.max_pool2d_with_indices_backward(grad, x, *args, indices),
          aten.max_pool2d_with_indices_backward(grad, x, *args, expected_indices))


AVG_POOL_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2), (2, 1), (1, 1), True, True, None),
    (3, 2, 1, True, True, 5),
    (4, 3, 2, True, False, None),
]


@pytest.mark.parametrize("case", AVG_POOL_CASES)
def test_avg_pool2d(case):
    kernel, stride, padding, ceil_mode, include_pad, divisor = case
    x = torch.randn(2, 3, 11, 10)
    expected = F.avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad, divisor)
    check(ops.avg_pool2d(x, kernel, stride, padding, ceil_mode, include_pad, divisor), expected)
    grad = torch.randn_like(expected)
    k = list(_pair(kernel, "k"))
    s = list(_pair(stride, "s")) if stride is not None else k
    args = (k, s, list(_pair(padding, "p")), ceil_mode, include_pad, divisor)
    check(ops.avg_pool2d_backward(grad, x, *args), aten.avg_pool2d_backward(grad, x, *args))


@pytest.mark.parametrize("output_size", [1, (3, 4), (5, 7), (11, 10), (None, 3), (13, 2)])
def test_adaptive_pools(output_size):
    x = torch.randn(2, 3, 11, 10)
    x[0, 1, 2, 2] = float("nan")
    expected = F.adaptive_avg_pool2d(x, output_size)
    check(ops.adaptive_avg_pool2d(x, output_size), expected)
    grad = torch.randn_like(expected)
    check(ops._adaptive_avg_pool2d_backward(grad, x), aten._adaptive_avg_pool2d_backward(grad, x))
    values, indices = F.adaptive_max_pool2d(x, output_size, return_indices=True)
    ours, our_indices = ops.adaptive_max_pool2d(x, output_size, return_indices=True)
    check(ours, values, rtol=0, atol=0)
    assert torch.equal(our_indices, indices)
    check(ops.adaptive_max_pool2d_backward(grad, x, our_indices), aten.adaptive_max_pool2d_backward(grad, x, indices))
    check(ops.adaptive_avg_pool2d(x[0], output_size), F.adaptive_avg_pool2d(x[0], output_size))


def test_pool_bad_inputs():
    x = torch.randn(1, 2, 6, 6)
    with pytest.raises(ValueError, match="at most half"):
        ops.max_pool2d(x, 3, padding=2)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        ops.avg_pool2d(x, 2, stride=0)
    with pytest.raises(ValueError, match="too large"):
        ops.max_pool2d(x, 7)
    with pytest.raises(ValueError, match="input must be 3-D"):
        ops.max_pool2d(x[0, 0], 2)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        ops.avg_pool2d(x, 2, padding=-1)
    assert ops.max_pool2d(x.double(), 2).dtype == torch.float64  # computed in double
    torch.testing.assert_close(ops.avg_pool2d(x.double() * 1e-300, 3, padding=1),
                               F.avg_pool2d(x.double() * 1e-300, 3, padding=1), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="outside the input plane"):
        ops.max_pool2d_with_indices_backward(torch.ones(1, 2, 3, 3), x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                             torch.full((1, 2, 3, 3), 99))


# ---- normalization ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7), (3, 4, 5, 6)])
def test_batch_norm(shape):
    c = shape[1]
    x = torch.randn(*shape) * 2 + 1
    weight, bias = torch.rand(c) + 0.5, torch.randn(c)
    running_mean, running_var = torch.randn(c), torch.rand(c) + 0.5
    # eval
    check(ops.batch_norm(x, running_mean, running_var, weight, bias, False, 0.1, 1e-5),
          F.batch_norm(x, running_mean, running_var, weight, bias, False, 0.1, 1e-5))
    # training: output, saved stats and the in-place running update
    ours_mean, ours_var = running_mean.clone(), running_var.clone()
    theirs_mean, theirs_var = running_mean.clone(), running_var.clone()
    out, save_mean, save_invstd = ops.native_batch_norm(x, weight, bias, ours_mean, ours_var, True, 0.1, 1e-5)
    e_out, e_mean, e_invstd = aten.native_batch_norm(x, weight, bias, theirs_mean, theirs_var, True, 0.1, 1e-5)
    check(out, e_out)
    check(save_mean, e_mean)
    check(save_invstd, e_invstd)
    check(ours_mean, theirs_mean)
    check(ours_var, theirs_var)
    functional = ops._native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var, True, 0.1, 1e-5)
    expected = aten._native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var, True, 0.1, 1e-5)
    for a, e in zip(functional, expected):
        check(a, e)
    no_training = ops._native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var, 0.1, 1e-5)
    expected = aten._native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var, 0.1, 1e-5)
    for a, e in zip(no_training, expected):
        check(a, e)
    # F.batch_norm training without running stats, and without affine parameters
    check(ops.batch_norm(x, None, None, None, None, True), F.batch_norm(x, None, None, None, None, True))
    # backward, train and eval
    grad = torch.randn_like(x)
    for train in (True, False):
        mean_arg, invstd_arg = (e_mean, e_invstd) if train else (None, None)
        expected = aten.native_batch_norm_backward(grad, x, weight, running_mean, running_var, mean_arg, invstd_arg,
                                                   train, 1e-5, [True, True, True])
        actual = ops.native_batch_norm_backward(grad, x, weight, running_mean, running_var, mean_arg, invstd_arg,
                                                train, 1e-5, [True, True, True])
        for a, e in zip(actual, expected):
            # grad_input subtracts two O(1) means from dy: a few ulps of those sums
            check(a, e, rtol=1e-5, atol=3e-5)


def test_batch_norm_half_and_errors():
    x = torch.randn(4, 3, 5)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    actual = ops.batch_norm(x.bfloat16(), running_mean, running_var, training=False)
    assert actual.dtype == torch.bfloat16
    check(actual.float(), F.batch_norm(x.bfloat16().float(), running_mean, running_var).bfloat16().float())
    with pytest.raises(ValueError, match="running_mean and running_var are required"):
        ops.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        ops.batch_norm(torch.randn(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match="weight must have shape"):
        ops.batch_norm(x, running_mean, running_var, torch.ones(4))
    with pytest.raises(TypeError, match="float64"):
        ops.batch_norm(x.double(), running_mean.double(), running_var.double())


@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 4), 3), ((3, 4, 7), 4), ((2, 6), 2), ((1, 8, 3, 3), 1)])
def test_group_norm(shape, groups):
    n, c = shape[0], shape[1]
    hxw = math.prod(shape[2:])
    x = torch.randn(*shape) * 3 + 2
    weight, bias = torch.rand(c) + 0.5, torch.randn(c)
    check(ops.group_norm(x, groups, weight, bias), F.group_norm(x, groups, weight, bias))
    out, mean, rstd = ops.native_group_norm(x, weight, bias, n, c, hxw, groups, 1e-5)
    e_out, e_mean, e_rstd = aten.native_group_norm(x, weight, bias, n, c, hxw, groups, 1e-5)
    check(out, e_out)
    check(mean, e_mean)
    check(rstd, e_rstd)
    grad = torch.randn_like(x)
    actual = ops.native_group_norm_backward(grad, x, mean, rstd, weight, n, c, hxw, groups, [True, True, True])
    expected = aten.native_group_norm_backward(grad, x, e_mean, e_rstd, weight, n, c, hxw, groups, [True, True, True])
    for a, e in zip(actual, expected):
        check(a, e, rtol=1e-5, atol=3e-5)  # as batch norm: differences of O(1) means
    with pytest.raises(ValueError, match="num_groups"):
        ops.group_norm(x, 5 if c % 5 else 7)


@pytest.mark.parametrize("shape,normalized", [((4, 16), [16]), ((2, 3, 10), [10]), ((2, 3, 4, 5), [4, 5])])
def test_native_layer_norm(shape, normalized):
    x = torch.randn(*shape) * 2 + 0.5
    weight, bias = torch.rand(normalized) + 0.5, torch.randn(normalized)
    actual = ops.native_layer_norm(x, normalized, weight, bias, 1e-5)
    expected = aten.native_layer_norm(x, normalized, weight, bias, 1e-5)
    for a, e in zip(actual, expected):
        check(a, e)
    grad = torch.randn_like(x)
    for w, b, mask in [(weight, bias, [True, True, True]), (None, None, [True, True, True]),
                       (weight, bias, [False, True, False])]:
        out = ops.native_layer_norm_backward(grad, x, normalized, expected[1], expected[2], w, b, mask)
        ref = aten.native_layer_norm_backward(grad, x, normalized, expected[1], expected[2], weight, bias, mask)
        for i, (a, e) in enumerate(zip(out, ref)):
            if not mask[i] or (i == 1 and w is None) or (i == 2 and b is None):
                assert a is None
            elif i == 0 and w is None:
                unweighted = aten.native_layer_norm_backward(grad, x, normalized, expected[1], expected[2],
                                                             torch.ones_like(weight), None, [True, False, False])[0]
                check(a, unweighted, rtol=1e-5, atol=3e-5)
            else:
                check(a, e, rtol=1e-5, atol=3e-5)  # differences of O(1) row means


def test_dropout_eval_is_identity():
    x = torch.randn(3, 4)
    assert ops.dropout(x, 0.5, training=False) is x
    assert ops.dropout(x, 0.0) is x
    with pytest.raises(NotImplementedError):
        ops.dropout(x, 0.5, training=True)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ops.dropout(x, 1.5, training=False)


# ---- activation, softmax and embedding backward ------------------------------------------------------


def test_activation_backward():
    x = torch.randn(5, 37) * 3
    x[0, :4] = torch.tensor([0.0, -0.0, float("nan"), float("inf")])
    grad = torch.randn_like(x)
    check(ops.threshold_backward(grad, x, 0), aten.threshold_backward(grad, x, 0))
    check(ops.threshold_backward(grad, x, 0.5), aten.threshold_backward(grad, x, 0.5))
    finite = x.nan_to_num(0.0, 10.0, -10.0)
    for approximate in ("none", "tanh"):
        # erf/tanh evaluated by libm vs Sleef: a few ulps
        check(ops.gelu_backward(grad, finite, approximate), aten.gelu_backward(grad, finite, approximate=approximate),
              rtol=1e-5, atol=1e-5)
    check(ops.silu_backward(grad, finite), aten.silu_backward(grad, finite), rtol=1e-5, atol=1e-5)
    y = torch.sigmoid(finite)
    check(ops.sigmoid_backward(grad, y), aten.sigmoid_backward(grad, y))
    y = torch.tanh(finite)
    check(ops.tanh_backward(grad, y), aten.tanh_backward(grad, y))
    # broadcasting and bf16
    check(ops.threshold_backward(grad, x[0], 0), aten.threshold_backward(grad, x[0], 0))
    check(ops.silu_backward(grad.bfloat16(), finite.bfloat16()).float(),
          aten.silu_backward(grad.bfloat16().float(), finite.bfloat16().float()).bfloat16().float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_backward(dim):
    x = torch.randn(4, 7, 5)
    grad = torch.randn_like(x)
    y = torch.softmax(x, dim)
    check(ops._softmax_backward_data(grad, y, dim, torch.float32), aten._softmax_backward_data(grad, y, dim, torch.float32))
    y = torch.log_softmax(x, dim)
    check(ops._log_softmax_backward_data(grad, y, dim, torch.float32),
          aten._log_softmax_backward_data(grad, y, dim, torch.float32))


def test_embedding_dense_backward():
    indices = torch.tensor([[0, 2, 4, 2], [5, 2, 0, 1]])
    grad = torch.randn(2, 4, 6)
    for padding_idx in (-1, 2):
        for scale in (False, True):
            check(ops.embedding_dense_backward(grad, indices, 7, padding_idx, scale),
                  aten.embedding_dense_backward(grad, indices, 7, padding_idx, scale))
    with pytest.raises(ValueError, match="out of range"):
        ops.embedding_dense_backward(grad, indices, 5, -1, False)


# ---- losses ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("use_weight", [False, True])
def test_cross_entropy_indices(reduction, smoothing, use_weight):
    x = torch.randn(6, 5) * 3
    target = torch.tensor([0, 4, -100, 2, 2, 1])
    weight = torch.rand(5) + 0.2 if use_weight else None
    kw = dict(weight=weight, reduction=reduction, label_smoothing=smoothing)
    check(ops.cross_entropy(x, target, **kw), F.cross_entropy(x, target, **kw))
    # K-dim input [N, C, d1, d2] with a different ignore_index
    x4 = torch.randn(2, 5, 3, 4)
    t4 = torch.randint(0, 5, (2, 3, 4))
    t4[0, 0, 0] = 3
    kw["ignore_index"] = 3
    check(ops.cross_entropy(x4, t4, **kw), F.cross_entropy(x4, t4, **kw))
    # unbatched [C] with a 0-dim target
    check(ops.cross_entropy(x[0], target[0], **{k: v for k, v in kw.items() if k != "ignore_index"}),
          F.cross_entropy(x[0], target[0], **{k: v for k, v in kw.items() if k != "ignore_index"}))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_probabilities(reduction):
    x = torch.randn(4, 6, 3)
    target = torch.softmax(torch.randn(4, 6, 3), 1)
    weight = torch.rand(6) + 0.5
    for kw in (dict(), dict(weight=weight), dict(label_smoothing=0.3), dict(weight=weight, label_smoothing=0.1)):
        check(ops.cross_entropy(x, target, reduction=reduction, **kw), F.cross_entropy(x, target, reduction=reduction, **kw))


def test_nll_loss_forward_backward():
    logp = torch.log_softmax(torch.randn(6, 5), 1)
    target = torch.tensor([0, 4, -100, 2, 2, 1])
    weight = torch.rand(5) + 0.2
    for w in (None, weight):
        for reduction in (0, 1, 2):
            out, total = ops.nll_loss_forward(logp, target, w, reduction, -100)
            e_out, e_total = aten.nll_loss_forward(logp, target, w, reduction, -100)
            check(out, e_out)
            check(total, e_total)
            grad = torch.randn_like(e_out)
            check(ops.nll_loss_backward(grad, logp, target, w, reduction, -100, total),
                  aten.nll_loss_backward(grad, logp, target, w, reduction, -100, e_total))
    # every target ignored: mean is NaN, as torch
    ignored = torch.full((6,), -100)
    check(ops.nll_loss(logp, ignored), F.nll_loss(logp, ignored))
    # 2-D spatial (nll_loss2d) and legacy size_average
    logp4 = torch.log_softmax(torch.randn(2, 5, 3, 3), 1)
    t4 = torch.randint(0, 5, (2, 3, 3))
    out, total = ops.nll_loss2d_forward(logp4, t4, weight, 1, -100)
    e_out, e_total = aten.nll_loss2d_forward(logp4, t4, weight, 1, -100)
    check(out, e_out)
    check(ops.nll_loss2d_backward(torch.tensor(1.5), logp4, t4, weight, 1, -100, total),
          aten.nll_loss2d_backward(torch.tensor(1.5), logp4, t4, weight, 1, -100, e_total))
    check(ops.nll_loss(logp, target, size_average=False), F.nll_loss(logp, target, reduction="sum"))


def test_loss_bad_inputs():
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="target 7 at position 1 is out of range"):
        ops.cross_entropy(x, torch.tensor([0, 7, 1, 2]))
    with pytest.raises(ValueError, match="target has shape"):
        ops.cross_entropy(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction"):
        ops.mse_loss(x, x, reduction="average")
    with pytest.raises(ValueError, match="label_smoothing"):
        ops.cross_entropy(x, torch.tensor([0, 1, 2, 3]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ops.binary_cross_entropy(x, torch.rand(4, 5))
    with pytest.raises(ValueError, match="same as input size"):
        ops.binary_cross_entropy_with_logits(x, torch.rand(4, 1))
    with pytest.raises(TypeError, match="target must be an int64"):
        ops.nll_loss(x, torch.tensor([True, False, True, True]))
    with pytest.raises(TypeError, match="float64"):
        ops.mse_loss(x.double(), x.double())


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_pointwise_losses(reduction):
    x, target = torch.randn(3, 4, 5), torch.randn(3, 4, 5)
    check(ops.mse_loss(x, target, reduction=reduction), F.mse_loss(x, target, reduction=reduction))
    check(ops.mse_loss(x, target[0], reduction=reduction), F.mse_loss(x, target[0].expand_as(x), reduction=reduction))
    weight = torch.rand(3, 4, 5)
    check(ops.mse_loss(x, target, reduction=reduction, weight=weight),
          F.mse_loss(x, target, reduction=reduction, weight=weight))
    check(ops.l1_loss(x, target, reduction=reduction), F.l1_loss(x, target, reduction=reduction))
    for beta in (1.0, 0.5, 0.0):
        check(ops.smooth_l1_loss(x, target, reduction=reduction, beta=beta),
              F.smooth_l1_loss(x, target, reduction=reduction, beta=beta))
    probs, labels = torch.rand(3, 4, 5).clamp(1e-3, 1 - 1e-3), torch.rand(3, 4, 5)
    probs[0, 0, 0], probs[0, 0, 1] = 0.0, 1.0  # logs clamped at -100
    check(ops.binary_cross_entropy(probs, labels, reduction=reduction),
          F.binary_cross_entropy(probs, labels, reduction=reduction))
    bce_weight = torch.rand(5)
    check(ops.binary_cross_entropy(probs, labels, weight=bce_weight, reduction=reduction),
          F.binary_cross_entropy(probs, labels, weight=bce_weight.expand_as(probs), reduction=reduction))
    logits = torch.randn(3, 4, 5) * 4
    logits[0, 0, :2] = torch.tensor([100.0, -100.0])
    pos_weight = torch.rand(5) * 3
    for kw in (dict(), dict(weight=bce_weight), dict(pos_weight=pos_weight), dict(weight=bce_weight, pos_weight=pos_weight)):
        # log1p/exp via libm vs Sleef: a few ulps of O(1) terms
        check(ops.binary_cross_entropy_with_logits(logits, labels, reduction=reduction, **kw),
              F.binary_cross_entropy_with_logits(logits, labels, reduction=reduction, **kw), rtol=1e-5, atol=1e-5)
    # backward ops
    code = {"none": 0, "mean": 1, "sum": 2}[reduction]
    grad = torch.randn(3, 4, 5) if reduction == "none" else torch.tensor(0.7)
    check(ops.mse_loss_backward(grad, x, target, code), aten.mse_loss_backward(grad, x, target, code))
    for beta in (1.0, 0.5):
        check(ops.smooth_l1_loss_backward(grad, x, target, code, beta),
              aten.smooth_l1_loss_backward(grad, x, target, code, beta))
    check(ops.binary_cross_entropy_backward(grad, probs, labels, None, code),
          aten.binary_cross_entropy_backward(grad, probs, labels, None, code))
    full_weight = bce_weight.expand_as(probs).contiguous()
    check(ops.binary_cross_entropy_backward(grad, probs, labels, full_weight, code),
          aten.binary_cross_entropy_backward(grad, probs, labels, full_weight, code))


def test_losses_half_dtypes_and_large_inputs():
    x = torch.randn(64, 1000)
    target = torch.randint(0, 1000, (64,))
    for dtype in (torch.bfloat16, torch.float16):
        actual = ops.cross_entropy(x.to(dtype), target)
        assert actual.dtype == dtype
        # computed in f32 from the rounded logits, rounded once
        check(actual.float(), F.cross_entropy(x.to(dtype).float(), target).to(dtype).float())
    # many rows in parallel and a reduction over > 65536 elements in several chunks
    check(ops.cross_entropy(x, target, label_smoothing=0.1), F.cross_entropy(x, target, label_smoothing=0.1))
    big, big_target = torch.randn(300, 1000), torch.randn(300, 1000)
    # sums of 300k O(1) terms: float rounding of the torch reference is ~1e-7 relative
    check(ops.mse_loss(big, big_target), F.mse_loss(big, big_target), rtol=1e-5, atol=1e-5)
    check(ops.mse_loss(big, big_target, reduction="sum"), F.mse_loss(big, big_target, reduction="sum"), rtol=1e-5,
          atol=1e-3)


def test_empty_batches():
    x = torch.randn(0, 3, 8, 8)
    check(ops.max_pool2d(x, 2), F.max_pool2d(x, 2))
    check(ops.avg_pool2d(x, 2), F.avg_pool2d(x, 2))
    check(ops.adaptive_avg_pool2d(x, 3), F.adaptive_avg_pool2d(x, 3))
    check(ops.group_norm(x, 3), F.group_norm(x, 3))
    check(ops.conv2d_fused(x, torch.randn(4, 3, 3, 3), padding=1, activation="relu"),
          F.relu(F.conv2d(x, torch.randn(4, 3, 3, 3), padding=1)))
    check(ops.mse_loss(torch.randn(0, 4), torch.randn(0, 4), reduction="sum"),
          F.mse_loss(torch.randn(0, 4), torch.randn(0, 4), reduction="sum"))


# ---- aot_autograd training graphs run on torchburn ops ---------------------------------------------------

# aten overload -> torchburn op with the same name and signature
TORCHBURN_ATEN = {
    aten.convolution.default: ops.convolution,
    aten.convolution_backward.default: ops.convolution_backward,
    aten._native_batch_norm_legit_functional.default: ops._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training.default: ops._native_batch_norm_legit_no_training,
    aten.native_batch_norm_backward.default: ops.native_batch_norm_backward,
    aten.max_pool2d_with_indices.default: ops.max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward.default: ops.max_pool2d_with_indices_backward,
    aten.threshold_backward.default: ops.threshold_backward,
    aten.native_layer_norm.default: ops.native_layer_norm,
    aten.native_layer_norm_backward.default: ops.native_layer_norm_backward,
    aten.gelu_backward.default: ops.gelu_backward,
    aten._log_softmax_backward_data.default: ops._log_softmax_backward_data,
    aten.nll_loss_forward.default: ops.nll_loss_forward,
    aten.nll_loss_backward.default: ops.nll_loss_backward,
    aten.avg_pool2d.default: ops.avg_pool2d,
    aten.avg_pool2d_backward.default: ops.avg_pool2d_backward,
    aten._adaptive_avg_pool2d.default: ops._adaptive_avg_pool2d,
    aten._adaptive_avg_pool2d_backward.default: ops._adaptive_avg_pool2d_backward,
}


def run_training_step(model, x, y, replace):
    """Gradients and loss of one cross-entropy step, compiled through aot_autograd; with replace, every
    aten node listed in TORCHBURN_ATEN runs on torchburn."""
    from torch._dynamo.backends.common import aot_autograd
    from functorch.compile import make_boxed_func

    used = set()

    def compiler(gm, example_inputs):
        if replace:
            for node in gm.graph.nodes:
                if node.op == "call_function" and node.target in TORCHBURN_ATEN:
                    used.add(str(node.target))
                    node.target = TORCHBURN_ATEN[node.target]
            gm.recompile()
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler)

    def step(inputs, labels):
        loss = F.cross_entropy(model(inputs), labels)
        loss.backward()
        return loss

    model.zero_grad()
    loss = torch.compile(step, backend=backend, dynamic=False)(x, y)
    return loss.detach(), [p.grad.clone() for p in model.parameters()], used


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_step_graphs(kind):
    torch.manual_seed(3)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                    torch.nn.LayerNorm(64), torch.nn.Linear(64, 10))
        x = torch.randn(8, 32)
    else:
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                    torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                    torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
                                    torch.nn.Linear(64, 10))
        x = torch.randn(4, 3, 12, 12)
    y = torch.randint(0, 10, (x.shape[0],))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    loss, grads, _ = run_training_step(model, x, y, replace=False)
    model.load_state_dict(state)
    our_loss, our_grads, used = run_training_step(model, x, y, replace=True)
    expected_ops = {"aten.native_layer_norm_backward.default", "aten.nll_loss_backward.default"} if kind == "mlp" else \
        {"aten.convolution_backward.default", "aten.native_batch_norm_backward.default"}
    assert expected_ops <= used, used
    check(our_loss, loss, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(our_grads, grads):
        # gradients pass through several reductions (batch norm, conv weight sums)
        check(ours, theirs, rtol=1e-4, atol=1e-4)
