"""torchburn.ops against PyTorch 2.13 as the oracle, at every supported ISA.

Tolerances are torch.testing.assert_close's float32 defaults (rtol 1.3e-6, atol 1e-5) unless a wider
one is given next to the op with its reason.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torchburn
import torchburn.ops as ops

SIZES = [0, 1, 3, 7, 15, 16, 17, 31, 33, 127, 129, 1023]
SPECIALS = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-40, -1e-40, 88.5, -88.5,
                         1e30, -1e30, 3.0, -3.0, 0.5])

torch.manual_seed(0)


def check(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, equal_nan=True, **kw)


def strided_inputs(n):
    """Contiguous, step-2 strided, and transposed variants of random data with n elements per row."""
    base = torch.randn(3, 2 * n) * 3
    yield "contiguous", base[:, :n].contiguous()
    yield "step2", base[:, ::2]
    yield "transposed", torch.randn(n, 3).t() * 3


UNARY = {
    "neg": (ops.neg, torch.neg, {}),
    "abs": (ops.abs, torch.abs, {}),
    "exp": (ops.exp, torch.exp, {}),
    "log": (ops.log, torch.log, {}),
    "sqrt": (ops.sqrt, torch.sqrt, {}),
    "rsqrt": (ops.rsqrt, torch.rsqrt, {}),
    "sin": (ops.sin, torch.sin, {}),
    "cos": (ops.cos, torch.cos, {}),
    "tanh": (ops.tanh, torch.tanh, {}),
    "sigmoid": (ops.sigmoid, torch.sigmoid, {}),
    "relu": (ops.relu, torch.relu, {}),
    "gelu": (ops.gelu, F.gelu, {}),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), {}),
    "silu": (ops.silu, F.silu, {}),
    "leaky_relu": (lambda x: ops.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2), {}),
    "clamp": (lambda x: ops.clamp(x, -1.5, 2.0), lambda x: torch.clamp(x, -1.5, 2.0), {}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(isa, name):
    ours, theirs, tol = UNARY[name]
    for n in SIZES:
        for layout, x in strided_inputs(n):
            if name in ("log", "sqrt", "rsqrt"):
                x = x.abs() + 1e-3
            check(ours(x), theirs(x), **tol, msg=lambda m: f"{name} n={n} {layout}: {m}")
    expected = theirs(SPECIALS)
    if name == "gelu":
        # Documented deviation: PyTorch 2.13's CPU kernel returns NaN for gelu(+inf); the function's
        # value there is +inf (x * Phi(x) with Phi(+inf) = 1), which is what we return.
        expected[SPECIALS == float("inf")] = float("inf")
    check(ours(SPECIALS), expected, **tol)
    check(ours(torch.tensor(0.7)), theirs(torch.tensor(0.7)), **tol)  # 0-dim
    wide = torch.linspace(-100, 100, 4001)
    check(ours(wide), theirs(wide), **tol)


def test_unary_trig_large_arguments(isa):
    x = torch.linspace(-1e4, 1e4, 100003)
    check(ops.sin(x), torch.sin(x))
    check(ops.cos(x), torch.cos(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unary_half_dtypes(isa, dtype):
    x = (torch.randn(1025) * 3).to(dtype)
    for name in ("exp", "gelu", "silu", "tanh", "relu"):
        ours, theirs, _ = UNARY[name]
        out = ours(x)
        assert out.dtype == dtype
        # one rounding to the half type: torch computes these in float32 and rounds once as well
        check(out, theirs(x))


BINARY = {
    "add": (ops.add, torch.add),
    "sub": (ops.sub, torch.sub),
    "mul": (ops.mul, torch.mul),
    "div": (ops.div, torch.div),
    "pow": (ops.pow, torch.pow),
    "maximum": (ops.maximum, torch.maximum),
    "minimum": (ops.minimum, torch.minimum),
}

BROADCAST_SHAPES = [((), ()), ((5,), ()), ((), (5,)), ((4, 1), (1, 7)), ((2, 3, 1), (3, 17)), ((1023,), (1023,)),
                    ((0, 3), (1, 3)), ((3, 129), (129,))]


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(isa, name):
    ours, theirs = BINARY[name]
    for shape_a, shape_b in BROADCAST_SHAPES:
        a = torch.randn(shape_a) * 2
        b = torch.randn(shape_b) * 2
        if name == "pow":
            a = a.abs() + 0.1
        check(ours(a, b), theirs(a, b), msg=lambda m: f"{name} {shape_a} {shape_b}: {m}")
    for n in SIZES:
        a_variants = list(strided_inputs(n))
        for (la, a), (lb, b) in zip(a_variants, reversed(a_variants)):
            if name == "pow":
                a = a.abs() + 0.1
            check(ours(a, b), theirs(a, b), msg=lambda m: f"{name} n={n} {la}/{lb}: {m}")
    # scalars on either side keep the tensor's dtype, like torch
    a = torch.randn(33)
    if name not in ("maximum", "minimum"):
        check(ours(a.abs() + 0.1, 2.5), theirs(a.abs() + 0.1, 2.5))
        check(ours(1.5, a.abs() + 0.1), theirs(1.5, a.abs() + 0.1))
    s = SPECIALS
    check(ours(s, s.flip(0)), theirs(s, s.flip(0)))


def test_binary_dtype_promotion(isa):
    a = torch.randn(64, dtype=torch.float16)
    b = torch.randn(64, dtype=torch.bfloat16)
    assert ops.add(a, a).dtype == torch.float16
    assert ops.add(a, b).dtype == torch.float32
    check(ops.add(a, b), torch.add(a, b))
    check(ops.mul(a, 3.0), a * 3.0)


COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


@pytest.mark.parametrize("name", COMPARE)
def test_compare(isa, name):
    for shape_a, shape_b in BROADCAST_SHAPES:
        a = torch.randint(-2, 3, shape_a).float()
        b = torch.randint(-2, 3, shape_b).float()
        assert torch.equal(getattr(ops, name)(a, b), getattr(torch, name)(a, b))
    s = SPECIALS
    assert torch.equal(getattr(ops, name)(s, s.flip(0)), getattr(torch, name)(s, s.flip(0)))
    assert torch.equal(getattr(ops, name)(s, 0.0), getattr(torch, name)(s, 0.0))


def test_where(isa):
    for shape_a, shape_b in BROADCAST_SHAPES:
        a, b = torch.randn(shape_a), torch.randn(shape_b)
        cond = torch.randn(torch.broadcast_shapes(shape_a, shape_b)) > 0
        check(ops.where(cond, a, b), torch.where(cond, a, b))
    cond = torch.randn(7, 1) > 0
    strided = torch.randn(7, 5)[:, ::2]
    check(ops.where(cond, strided, 0.5), torch.where(cond, strided, 0.5))
    with pytest.raises(TypeError, match="bool"):
        ops.where(torch.ones(3), torch.ones(3), torch.ones(3))


REDUCE_SHAPES = [(7,), (3, 17), (4, 5, 6), (2, 3, 4, 5), (1023,), (129, 33), (1, 1), (5, 0)]
REDUCE_DIMS = [None, 0, -1, (0, 2), (1,), (0, 1, 2)]


def valid_dims(shape, dims):
    if dims is None:
        return True
    dims = (dims,) if isinstance(dims, int) else dims
    return all(-len(shape) <= d < len(shape) for d in dims)


@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean(isa, keepdim):
    for shape in REDUCE_SHAPES:
        x = torch.randn(shape)
        for dims in REDUCE_DIMS:
            if not valid_dims(shape, dims):
                continue
            kw = {} if dims is None else {"dim": dims, "keepdim": keepdim}
            check(ops.sum(x, **kw), torch.sum(x, **kw), msg=lambda m: f"sum {shape} {dims}: {m}")
            check(ops.mean(x, **kw), torch.mean(x, **kw), msg=lambda m: f"mean {shape} {dims}: {m}")
    big = torch.randn(1 << 20)
    # a million-element sum: torch and we both accumulate in float32 with different orders
    check(ops.sum(big), torch.sum(big), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_arg(isa, keepdim):
    for shape in REDUCE_SHAPES:
        x = torch.randn(shape)
        if x.numel() == 0:
            continue
        for dim in range(-len(shape), len(shape)):
            values, indices = ops.max(x, dim, keepdim)
            check(values, torch.amax(x, dim, keepdim))
            assert torch.equal(indices, torch.argmax(x, dim, keepdim))
            values, indices = ops.min(x, dim, keepdim)
            check(values, torch.amin(x, dim, keepdim))
            assert torch.equal(indices, torch.argmin(x, dim, keepdim))
        check(ops.amax(x), torch.amax(x))
        assert torch.equal(ops.argmax(x), torch.argmax(x))
        assert torch.equal(ops.argmin(x), torch.argmin(x))
    with_nan = torch.tensor([[1.0, float("nan"), 5.0], [2.0, 3.0, float("inf")]])
    check(ops.amax(with_nan, 1), torch.amax(with_nan, 1))
    assert torch.equal(ops.argmax(with_nan, 1), torch.argmax(with_nan, 1))
    assert torch.equal(ops.argmin(with_nan, 1), torch.argmin(with_nan, 1))


@pytest.mark.parametrize("correction", [0, 1])
def test_var_std_logsumexp(isa, correction):
    for shape in REDUCE_SHAPES:
        x = torch.randn(shape) * 3 + 100  # a large mean exposes one-pass variance formulas
        if x.numel() == 0:
            continue
        for dims in REDUCE_DIMS:
            if not valid_dims(shape, dims):
                continue
            check(ops.var(x, dims, correction=correction), torch.var(x, dims, correction=correction), rtol=1e-5, atol=1e-4)
            check(ops.std(x, dims, correction=correction, keepdim=True),
                  torch.std(x, dims, correction=correction, keepdim=True), rtol=1e-5, atol=1e-4)
            if dims is not None:
                check(ops.logsumexp(x - 100, dims), torch.logsumexp(x - 100, dims))
    inf_rows = torch.tensor([[float("-inf"), float("-inf")], [float("inf"), 1.0], [float("nan"), 1.0]])
    check(ops.logsumexp(inf_rows, 1), torch.logsumexp(inf_rows, 1))


def test_softmax(isa):
    for shape in [(7,), (3, 17), (4, 5, 6), (2, 1023), (129, 33), (2, 0)]:
        x = torch.randn(shape) * 5
        for dim in range(-len(shape), len(shape)):
            check(ops.softmax(x, dim), torch.softmax(x, dim))
            check(ops.log_softmax(x, dim), torch.log_softmax(x, dim))
    special = torch.tensor([[float("-inf"), 0.0, 1.0], [float("-inf")] * 3, [float("nan"), 0.0, 1.0], [1e30, 1e30, 0.0]])
    check(ops.softmax(special, -1), torch.softmax(special, -1))
    check(ops.log_softmax(special, -1), torch.log_softmax(special, -1))
    x = torch.randn(64, 200)[:, ::2]
    check(ops.softmax(x, 1), torch.softmax(x, 1))
    check(ops.softmax(x.half(), 1), torch.softmax(x.half(), 1))


def test_layer_norm_rms_norm(isa):
    for shape in [(7,), (3, 17), (4, 5, 6), (2, 1023), (129, 33)]:
        x = torch.randn(shape) * 2 + 50
        n = shape[-1]
        w, b = torch.randn(n), torch.randn(n)
        # mean 50: the variance must be computed stably; torch's own kernel uses a two-pass/Welford form
        check(ops.layer_norm(x, n, w, b, 1e-5), F.layer_norm(x, (n,), w, b, 1e-5), rtol=1e-5, atol=1e-4)
        check(ops.layer_norm(x, n), F.layer_norm(x, (n,)), rtol=1e-5, atol=1e-4)
        check(ops.rms_norm(x, n, w, 1e-6), F.rms_norm(x, (n,), w, 1e-6))
        check(ops.rms_norm(x, (n,)), F.rms_norm(x, (n,)))
    x = torch.randn(4, 5, 6)
    w2 = torch.randn(5, 6)
    check(ops.layer_norm(x, (5, 6), w2, None), F.layer_norm(x, (5, 6), w2, None), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="normalized_shape"):
        ops.layer_norm(x, 7)


def test_matmul_shapes(isa):
    cases = [((3,), (3,)), ((4, 3), (3,)), ((3,), (3, 5)), ((4, 3), (3, 5)), ((2, 4, 3), (3, 5)),
             ((2, 4, 3), (2, 3, 5)), ((2, 1, 4, 3), (3, 3, 5)), ((0, 3), (3, 5)), ((4, 0), (0, 5)),
             ((17, 33), (33, 129)), ((127, 129), (129, 31))]
    for shape_a, shape_b in cases:
        a, b = torch.randn(shape_a), torch.randn(shape_b)
        # GEMM sums in a different order than MKL: allow K * eps relative error
        check(ops.matmul(a, b), torch.matmul(a, b), rtol=1e-5, atol=1e-4, msg=lambda m: f"{shape_a}@{shape_b}: {m}")
    a, b = torch.randn(64, 48), torch.randn(80, 64)
    check(ops.matmul(a.t(), b.t()), a.t() @ b.t(), rtol=1e-5, atol=1e-4)
    check(ops.matmul(a[::2], b[:48, ::2]), a[::2] @ b[:48, ::2], rtol=1e-5, atol=1e-4)
    check(ops.bmm(torch.randn(3, 5, 7), torch.randn(3, 7, 2)).shape, torch.Size([3, 5, 2]))
    with pytest.raises(ValueError, match="cannot be multiplied"):
        ops.matmul(torch.randn(3, 4), torch.randn(5, 6))


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_linear_epilogue(isa, activation):
    x, w, b = torch.randn(37, 65), torch.randn(33, 65), torch.randn(33)
    r = torch.randn(37, 33)
    reference = F.linear(x, w, b)
    reference = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
                 "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[activation](reference) + r
    check(ops.linear(x, w, b, activation=activation, residual=r), reference, rtol=1e-5, atol=1e-4)
    x3 = torch.randn(2, 5, 65)
    check(ops.linear(x3, w), F.linear(x3, w), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa(isa, causal):
    for (b, h, tq, tk, d) in [(1, 1, 1, 1, 8), (2, 3, 17, 17, 16), (1, 2, 5, 33, 64), (4, 8, 128, 128, 64), (1, 1, 129, 129, 7)]:
        q, k, v = torch.randn(b, h, tq, d), torch.randn(b, h, tk, d), torch.randn(b, h, tk, d)
        check(ops.scaled_dot_product_attention(q, k, v, is_causal=causal),
              F.scaled_dot_product_attention(q, k, v, is_causal=causal), rtol=1e-5, atol=1e-5)
    q, k, v = torch.randn(2, 8, 9, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    check(ops.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
          F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True), rtol=1e-5, atol=1e-5)


def test_sdpa_masks_and_layouts(isa):
    q, k, v = torch.randn(2, 3, 11, 16), torch.randn(2, 3, 13, 16), torch.randn(2, 3, 13, 8)
    bool_mask = torch.rand(11, 13) > 0.3
    bool_mask[:, 0] = True
    float_mask = torch.randn(2, 1, 11, 13)
    check(ops.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
          F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask), rtol=1e-5, atol=1e-5)
    check(ops.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3),
          F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3), rtol=1e-5, atol=1e-5)
    # [B, T, H, D] storage seen as [B, H, T, D] (the usual transpose after a QKV projection)
    qt = torch.randn(2, 11, 3, 16).transpose(1, 2)
    check(ops.scaled_dot_product_attention(qt, k, v), F.scaled_dot_product_attention(qt, k, v), rtol=1e-5, atol=1e-5)
    # 3-D inputs
    check(ops.scaled_dot_product_attention(q[0], k[0], v[0]), F.scaled_dot_product_attention(q[0], k[0], v[0]),
          rtol=1e-5, atol=1e-5)
    # a fully masked row: compare with what torch returns
    mask = torch.ones(11, 13, dtype=torch.bool)
    mask[3] = False
    check(ops.scaled_dot_product_attention(q, k, v, attn_mask=mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
          rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="enable_gqa"):
        ops.scaled_dot_product_attention(torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))


def rope_reference(x, cos, sin, interleaved):
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1)
        return out.flatten(-2)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope(isa, interleaved):
    for shape in [(5, 8), (2, 3, 17, 64), (1, 4, 1, 2)]:
        x = torch.randn(shape)
        t, d = shape[-2], shape[-1]
        angles = torch.arange(t)[:, None] * (10000 ** (-torch.arange(d // 2) / (d // 2)))[None, :]
        cos, sin = torch.cos(angles), torch.sin(angles)
        check(ops.rotary_embedding(x, cos, sin, interleaved), rope_reference(x, cos, sin, interleaved))


def test_embedding_cat_stack_to(isa):
    w = torch.randn(50, 16)
    idx = torch.randint(0, 50, (3, 7))
    check(ops.embedding(idx, w), F.embedding(idx, w))
    with pytest.raises(ValueError, match="out of range"):
        ops.embedding(torch.tensor([50]), w)
    parts = [torch.randn(2, 3), torch.randn(4, 3), torch.randn(0, 3)]
    check(ops.cat(parts, 0), torch.cat(parts, 0))
    mixed = [torch.randn(2, 3).t(), torch.randn(3, 5)]
    check(ops.cat(mixed, 1), torch.cat(mixed, 1))
    stacked = [torch.randn(2, 3) for _ in range(4)]
    check(ops.stack(stacked, 1), torch.stack(stacked, 1))
    x = torch.randn(5, 7)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool, torch.uint8):
        check(ops.to(x * 10, dtype), (x * 10).to(dtype))
    special = SPECIALS
    check(ops.to(special, torch.float16), special.half())
    check(ops.to(special, torch.bfloat16), special.bfloat16())


def test_numpy_and_torchburn_inputs(isa):
    a = np.random.rand(4, 5).astype(np.float32)
    out = ops.exp(a)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.exp(a), rtol=1.3e-6, atol=1e-5)
    t = torchburn.from_dlpack(a)
    out = ops.add(t, t)
    assert isinstance(out, torchburn.Tensor)
    np.testing.assert_allclose(np.from_dlpack(out), 2 * a)


def test_bad_inputs():
    with pytest.raises(TypeError, match="float64"):
        ops.exp(torch.randn(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="int64"):
        ops.exp(torch.arange(3))
    with pytest.raises(ValueError, match="broadcast"):
        ops.add(torch.randn(3), torch.randn(4))
    with pytest.raises(TypeError, match="must be a tensor"):
        ops.exp("not a tensor")
    with pytest.raises(ValueError, match="out of range"):
        ops.softmax(torch.randn(3), 2)
    with pytest.raises(ValueError, match="approximate"):
        ops.gelu(torch.randn(3), approximate="fast")
    with pytest.raises(ValueError, match="features"):
        ops.linear(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(ValueError, match="dropout"):
        ops.scaled_dot_product_attention(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4), dropout_p=0.1)
    x = torch.randn(3, requires_grad=True)
    check(ops.exp(x), torch.exp(x.detach()))  # inputs that require grad are read through a detached view
