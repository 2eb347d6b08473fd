"""Convolutions at ResNet layer shapes (the 7x7/2 stem, 3x3 stride 1/2 at 64-512 channels, 1x1/2
projections) against torch, at batch 1 (where output channels are split over threads and the
direct path gives way to the packed one) and batch 2, with the fused BN-fold (scale/shift), ReLU and
residual epilogue, and with the GEMM blocking forced tiny so every column-group edge runs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchburn
from torchburn import _C, nn_ops

SHAPES = [  # (c_in, c_out, size, kernel, stride, padding)
    (3, 64, 64, 7, 2, 3),
    (64, 64, 28, 3, 1, 1),
    (64, 128, 28, 3, 2, 1),
    (64, 128, 28, 1, 2, 0),
    (128, 256, 14, 3, 2, 1),
    (256, 256, 14, 3, 1, 1),
    (256, 512, 7, 3, 2, 1),
    (512, 512, 7, 3, 1, 1),
    (96, 100, 9, 3, 1, 1),  # channels that are not whole register tiles
]


def check_conv(batch, cin, cout, size, kernel, stride, padding, seed):
    """The fused BN-fold (scale/shift), ReLU and residual epilogue against a float64 torch
    reference, and the plain convolution against torch's; returns (x, w) for further checks."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, cin, size, size, generator=g)
    w = torch.randn(cout, cin, kernel, kernel, generator=g) / (cin * kernel * kernel) ** 0.5
    bias = torch.randn(cout, generator=g)
    scale, shift = torch.rand(cout, generator=g) + 0.5, torch.randn(cout, generator=g)
    conv = F.conv2d(x.double(), w.double(), bias.double(), stride, padding)
    residual = torch.randn(conv.shape, generator=g)
    expected = torch.relu(conv * scale.double()[:, None, None] + shift.double()[:, None, None]) + residual.double()
    got = nn_ops.conv2d_fused(x, w, bias, stride, padding, scale=scale, shift=shift, activation="relu",
                              residual=residual)
    torch.testing.assert_close(got, expected.float(), rtol=1e-4, atol=1e-4)
    plain = nn_ops.conv2d(x, w, None, stride, padding)
    torch.testing.assert_close(plain, F.conv2d(x, w, None, stride, padding), rtol=1e-4, atol=1e-4)
    return x, w


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_conv_resnet_shapes_with_fused_epilogue(shape, batch):
    cin, cout = shape[:2]
    check_conv(batch, *shape, seed=cin * 7 + cout + batch)


def test_conv_under_forced_small_k_blocks():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 160, 10, 10, generator=g)
    w = torch.randn(200, 160, 3, 3, generator=g) / 38.0
    try:
        _C.gemm_set_blocking(0, 40, 0)  # k blocks of 40 over K = 1440, a short last one
        got = nn_ops.conv2d(x, w, None, 1, 1)
    finally:
        _C.gemm_set_blocking(0, 0, 0)
    torch.testing.assert_close(got, F.conv2d(x, w, None, 1, 1), rtol=1e-4, atol=1e-4)


# Late-stage planes of a batch concatenate their columns into shared GEMM panels (ops_conv.c,
# concatenate_images): panels that straddle images, 1x1 stride-1 convolutions routed there, a single
# panel split over output channels, channels that are not whole register tiles, the fused epilogue.
@pytest.mark.parametrize("shape", [  # (batch, c_in, c_out, size, kernel, stride, padding)
    (3, 64, 100, 7, 3, 1, 1),
    (5, 48, 70, 5, 3, 1, 1),
    (3, 256, 96, 7, 1, 1, 0),
    (4, 40, 30, 9, 1, 1, 0),
    (2, 32, 64, 4, 3, 1, 1),   # 32 columns in all: one panel, output channels split over threads
    (3, 32, 29, 14, 3, 2, 1),
], ids=lambda s: "x".join(map(str, s)))
def test_conv_concatenated_images(shape):
    batch, cin, _, _, _, stride, padding = shape
    x, w = check_conv(*shape, seed=batch * 100 + cin)
    try:
        _C.gemm_set_blocking(0, 40, 0)  # short k blocks: the concatenated C accumulates over several
        blocked = nn_ops.conv2d(x, w, None, stride, padding)
    finally:
        _C.gemm_set_blocking(0, 0, 0)
    torch.testing.assert_close(blocked, F.conv2d(x, w, None, stride, padding), rtol=1e-4, atol=1e-4)


# Winograd F(2x2, 3x3) (kernels/conv_winograd.h): 3x3 stride-1 convolutions of 16+ channels. The
# counter proves which path ran; the other paths stay reachable (and tested above) with it off.
WINOGRAD_SHAPES = [  # (batch, c_in, c_out, size, padding); torch's weights are not cached, so >= 192 tiles
    (12, 16, 16, 8, 1),
    (2, 64, 64, 28, 1),
    (12, 17, 33, 7, 1),   # odd plane: partial tiles, tiles of one block across images
    (12, 24, 20, 9, 0),
    (12, 40, 17, 6, 2),
    (12, 256, 256, 7, 1),
    (8, 96, 100, 9, 1),
]


@pytest.mark.parametrize("shape", WINOGRAD_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_winograd_against_float64(shape, winograd_on):
    """As accurate as torch's own float32 convolution against float64 (within 2x plus a rounding),
    with the fused BN-fold / ReLU / residual epilogue, and really on the Winograd path."""
    batch, cin, cout, size, padding = shape
    g = torch.Generator().manual_seed(batch * 1000 + cin)
    x = torch.randn(batch, cin, size, size, generator=g)
    w = torch.randn(cout, cin, 3, 3, generator=g) / (cin * 9) ** 0.5
    bias = torch.randn(cout, generator=g)
    exact = F.conv2d(x.double(), w.double(), bias.double(), 1, padding)
    torch_error = (F.conv2d(x, w, bias, 1, padding).double() - exact).abs().max().item()
    calls = _C.conv_winograd_calls()
    got = nn_ops.conv2d(x, w, bias, 1, padding)
    assert _C.conv_winograd_calls() == calls + 1
    error = (got.double() - exact).abs().max().item()
    assert error <= 2 * torch_error + 1e-6, (error, torch_error)
    scale, shift = torch.rand(cout, generator=g) + 0.5, torch.randn(cout, generator=g)
    residual = torch.randn(exact.shape, generator=g)
    expected = torch.relu(exact * scale.double()[:, None, None] + shift.double()[:, None, None]) + residual.double()
    fused = nn_ops.conv2d_fused(x, w, bias, 1, padding, scale=scale, shift=shift, activation="relu",
                                residual=residual)
    assert _C.conv_winograd_calls() == calls + 2
    torch.testing.assert_close(fused, expected.float(), rtol=1e-4, atol=1e-4)


def test_winograd_only_where_it_applies(winograd_on):
    """Strided, dilated, grouped, 5x5 and shallow (< 16 channel) convolutions keep their paths; the
    switch turns the path off and the other paths give the same answer to rounding."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 32, 12, 12, generator=g)  # 216 tiles
    w3 = torch.randn(32, 32, 3, 3, generator=g) / 17.0
    calls = _C.conv_winograd_calls()
    nn_ops.conv2d(x, w3, None, 2, 1)
    nn_ops.conv2d(x, w3, None, 1, 2, dilation=2)
    nn_ops.conv2d(x, torch.randn(32, 8, 3, 3, generator=g), None, 1, 1, groups=4)
    nn_ops.conv2d(x, torch.randn(16, 32, 5, 5, generator=g), None, 1, 2)
    nn_ops.conv2d(x[:, :8], torch.randn(32, 8, 3, 3, generator=g), None, 1, 1)
    # a weight the cache cannot keep (torch's memory) on too few tiles: the transform would not pay
    nn_ops.conv2d(x[:1, :, :7, :7], w3, None, 1, 1)
    assert _C.conv_winograd_calls() == calls
    on = nn_ops.conv2d(x, w3, None, 1, 1)
    assert _C.conv_winograd_calls() == calls + 1
    _C.conv_set_winograd(False)
    off = nn_ops.conv2d(x, w3, None, 1, 1)
    assert _C.conv_winograd_calls() == calls + 1
    torch.testing.assert_close(on, off, rtol=1e-5, atol=1e-5)
    assert not torch.equal(on, off)  # a different summation: the switch really changed the path
    assert "winograd" not in torchburn.cpu_info()["kernels"]["conv"]


def test_winograd_weight_cache_follows_the_weight(winograd_on):
    """The transformed weights are cached on the weight's storage; an in-place change is seen."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 16, 10, 10, generator=g)
    w = torch.randn(16, 16, 3, 3, generator=g) / 12.0
    for _ in range(3):
        first = nn_ops.conv2d(x, w, None, 1, 1)
    torch.testing.assert_close(first, F.conv2d(x, w, None, 1, 1), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        w.mul_(-2.0)
    torch.testing.assert_close(nn_ops.conv2d(x, w, None, 1, 1), F.conv2d(x, w, None, 1, 1), rtol=1e-4, atol=1e-4)


def test_winograd_special_values_stay_in_their_windows(winograd_on):
    """NaN and infinities land exactly where torch's convolution puts them (the transform would spread
    them over whole 2x2 tiles; those outputs are recomputed directly), and the rest stays close."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 16, 10, 9, generator=g)
    x[0, 3, 4, 5] = float("nan")
    x[1, 7, 0, 8] = float("inf")
    x[2, 0, 9, 0] = float("-inf")
    w = torch.randn(24, 16, 3, 3, generator=g) / 12.0
    calls = _C.conv_winograd_calls()
    got = nn_ops.conv2d_fused(x, w, None, 1, 1, activation="relu")
    assert _C.conv_winograd_calls() == calls + 1
    expected = torch.relu(F.conv2d(x, w, None, 1, 1))
    assert torch.equal(torch.isnan(got), torch.isnan(expected))
    assert torch.equal(torch.isposinf(got), torch.isposinf(expected))
    assert torch.equal(torch.isneginf(got), torch.isneginf(expected))
    assert torch.isnan(expected).any() and torch.isinf(expected).any()
    finite = torch.isfinite(expected)
    torch.testing.assert_close(got[finite], expected[finite], rtol=1e-4, atol=1e-4)
