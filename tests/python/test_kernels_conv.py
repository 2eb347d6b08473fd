"""Convolutions at ResNet layer shapes (the 7x7/2 stem, 3x3 stride 1/2 at 64-512 channels, 1x1/2
projections) against torch, at batch 1 (where output channels are split over threads and the
direct path gives way to the packed one) and batch 2, with the fused BN-fold (scale/shift), ReLU and
residual epilogue, and with the GEMM blocking forced tiny so every column-group edge runs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

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
