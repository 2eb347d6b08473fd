"""Tests of torchburn's quantization API against PyTorch: the int8 / int4 formats bit for bit against
the formulas written in torch, every quantized-matmul kernel family against a float64 torch oracle,
QuantizedLinear / quantize_model against float modules, torch.compile, autograd, and bad input."""
import io
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torchburn as tb  # noqa: E402
from torchburn import quantization as tq  # noqa: E402

KERNELS = tq.available_kernels()


# ---- oracles: the formats written in plain torch -----------------------------------------------------


def torch_int8(w):
    s = w.abs().amax(dim=1) / 127
    q = torch.where(s[:, None] > 0, torch.round(w / s[:, None]), torch.zeros_like(w)).clamp(-127, 127)
    return q.to(torch.int8), s


def torch_int4(w, group_size):
    n, k = w.shape
    g = w.reshape(n, k // group_size, group_size)
    s = g.abs().amax(dim=2) / 7
    q = torch.where(s[..., None] > 0, torch.round(g / s[..., None]), torch.zeros_like(g)).clamp(-8, 7)
    nib = (q + 8).to(torch.uint8).reshape(n, k)
    return nib[:, 0::2] | (nib[:, 1::2] << 4), s


def torch_dequant_int4(packed, scales, group_size):
    lo = (packed & 15).to(torch.float32) - 8
    hi = (packed >> 4).to(torch.float32) - 8
    q = torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)
    return q * scales.repeat_interleave(group_size, dim=1)


def quantize_rows_like_kernels(x):
    """The A8 kernels' activation quantization, in torch: s = amax/127, xq = round(x * (127/amax))."""
    amax = x.abs().amax(dim=1, keepdim=True)
    xq = torch.round(x * (127 / amax)).clamp(-127, 127)
    return xq * (amax / 127)


# ---- formats ----------------------------------------------------------------------------------------


def test_int8_matches_torch_formula_bit_for_bit():
    torch.manual_seed(0)
    w = torch.randn(64, 300) * torch.rand(64, 1) * 3
    w[5] = 0  # an all-zero row: scale 0, q 0
    q, s = tb.quantize_weight_int8(w)
    q_ref, s_ref = torch_int8(w)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert torch.equal(s, s_ref)
    assert torch.equal(q, q_ref)
    assert torch.equal(tb.dequantize_weight_int8(q, s), q.float() * s[:, None])


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_int4_matches_torch_formula_bit_for_bit(group_size):
    torch.manual_seed(group_size)
    w = torch.randn(33, 512) * 2
    w[3, :group_size] = 0
    packed, s = tb.quantize_weight_int4_grouped(w, group_size=group_size)
    packed_ref, s_ref = torch_int4(w, group_size)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (33, 256)
    assert torch.equal(s, s_ref)
    assert torch.equal(packed, packed_ref)
    back = tb.dequantize_weight_int4_grouped(packed, s, group_size=group_size)
    assert torch.equal(back, torch_dequant_int4(packed, s, group_size))


def test_round_trip_rmse():
    # N(0, 1) weights. Issue bounds: int8 <= 0.01, int4 g64 <= 0.12; tightened to the measured values
    # plus margin (measured: int8 0.0081, int4 g32 0.095, g64 0.105, g128 0.114, g256 0.122).
    torch.manual_seed(1)
    w = torch.randn(256, 4096)
    q, s = tb.quantize_weight_int8(w)
    rmse8 = (tb.dequantize_weight_int8(q, s) - w).pow(2).mean().sqrt().item()
    assert rmse8 <= 0.009, rmse8
    for group_size, bound in ((32, 0.10), (64, 0.11), (128, 0.12), (256, 0.13)):
        packed, s = tb.quantize_weight_int4_grouped(w, group_size)
        rmse4 = (tb.dequantize_weight_int4_grouped(packed, s, group_size) - w).pow(2).mean().sqrt().item()
        assert rmse4 <= bound, (group_size, rmse4)


def test_seed_example():
    weight = torch.randn(1024, 4096)
    packed_weights, scales = tb.quantize_weight_int4_grouped(weight, group_size=64)
    assert tuple(packed_weights.shape) == (1024, 2048) and tuple(scales.shape) == (1024, 64)
    layer = tb.QuantizedLinear.from_float(torch.nn.Linear(4096, 1024), quant_type="int4", group_size=64)
    out = layer(torch.randn(8, 4096))
    assert tuple(out.shape) == (8, 1024) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


# ---- kernels against a float64 oracle ---------------------------------------------------------------


def check_linear(x, w_deq, bias, y, act_int8):
    x64 = (quantize_rows_like_kernels(x) if act_int8 else x).double()
    ref = x64 @ w_deq.double().T + bias.double()
    scale = x64.abs() @ w_deq.double().abs().T  # sum_k |x_k w_k|: the f32-rounding tolerance scales with it
    err = (y.double() - ref).abs()
    tol = 1e-5 * scale + 1e-6 * bias.double().abs() + 1e-30
    assert bool((err <= tol).all()), f"max error {err.max().item():.3g}, worst ratio {(err / tol).max().item():.3g}"


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("quant_type", ["int8", "int4"])
def test_kernels_against_torch(kernel, quant_type):
    torch.manual_seed(2)
    for k in (64, 896, 4096, 4864):
        for n in (1, 7, 896):
            w = torch.randn(n, k)
            bias = torch.randn(n)
            if quant_type == "int8":
                q, s = tb.quantize_weight_int8(w)
                w_deq = tb.dequantize_weight_int8(q, s)
            else:
                q, s = tb.quantize_weight_int4_grouped(w, 64)
                w_deq = tb.dequantize_weight_int4_grouped(q, s, 64)
            for m in (1, 8) if n * k < 1_000_000 else (1, 3):
                x = torch.randn(m, k)
                for activations in ("f32", "int8"):
                    with tq.use_kernel(kernel):
                        if quant_type == "int8":
                            y = tb.w8a32_linear(x, q, s, bias, activations=activations)
                        else:
                            y = tb.w4a32_grouped_linear(x, q, s, bias, group_size=64, activations=activations)
                    check_linear(x, w_deq, bias, y, activations == "int8")


def test_a8_error_bound_against_a32():
    # |y_A8 - y_A32| <= (max|x| / 127) / 2 * sum_k |w_k| per output (plus f32 rounding): the documented bound.
    torch.manual_seed(3)
    w, x = torch.randn(96, 896), torch.randn(4, 896)
    packed, s = tb.quantize_weight_int4_grouped(w, 64)
    y32 = tb.w4a32_grouped_linear(x, packed, s)
    y8 = tb.w4a32_grouped_linear(x, packed, s, activations="int8")
    bound = x.abs().amax(1, keepdim=True) / 127 / 2 * tb.dequantize_weight_int4_grouped(packed, s).abs().sum(1)
    assert bool(((y8 - y32).abs() <= bound * 1.001 + 1e-4).all())


def test_lm_head_sized_gemv():
    # N = 151936 (Qwen2.5 vocabulary), K = 896, int4 g64: the best kernel against the torch oracle.
    n, k, g = 151936, 896, 64
    gen = torch.Generator().manual_seed(4)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=gen)
    scales = torch.rand(n, k // g, generator=gen) * 0.02 + 0.01
    x = torch.randn(1, k, generator=gen)
    y = tb.w4a32_grouped_linear(x, packed, scales, group_size=g)
    for start in range(0, n, 16384):
        rows = slice(start, min(n, start + 16384))
        w = torch_dequant_int4(packed[rows], scales[rows], g)
        check_linear(x, w, torch.zeros(w.shape[0]), y[:, rows], False)


def test_strided_and_batched_inputs():
    torch.manual_seed(5)
    packed, s = tb.quantize_weight_int4_grouped(torch.randn(24, 128), 32)
    w = tb.dequantize_weight_int4_grouped(packed, s, 32)
    big = torch.randn(2, 5, 300)
    x = big[..., 100:228]  # rows with stride 300
    y = tb.w4a32_grouped_linear(x, packed, s, group_size=32)
    assert tuple(y.shape) == (2, 5, 24)
    torch.testing.assert_close(y, x @ w.T, rtol=1e-5, atol=1e-5)
    xt = torch.randn(128, 3).T  # last dim not unit-stride: copied
    torch.testing.assert_close(tb.w4a32_grouped_linear(xt, packed, s, group_size=32), xt @ w.T, rtol=1e-5, atol=1e-5)
    empty = tb.w4a32_grouped_linear(torch.randn(0, 128), packed, s, group_size=32)
    assert tuple(empty.shape) == (0, 24)
    # the custom op (what torch.compile and autograd see) and the eager fast path agree
    x3 = torch.randn(4, 128)
    assert torch.equal(torch.ops.torchburn.quant_linear(x3, packed, s, None, 32, False),
                       tb.w4a32_grouped_linear(x3, packed, s, group_size=32))


def test_zero_copy_binding_takes_numpy_and_torch():
    np = pytest.importorskip("numpy")
    from torchburn import _C
    q, s = tb.quantize_weight_int8(torch.randn(6, 40))
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    out = torch.empty(3, 6)
    _C.quant_linear(x, q.numpy(), s, None, out, 0, False, "auto")  # numpy in, torch out, no copies
    torch.testing.assert_close(out, torch.from_numpy(x) @ tb.dequantize_weight_int8(q, s).T, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="int8"):
        _C.quant_linear(x, q.numpy().view(np.uint8), s, None, out, 0, False, "auto")
    with pytest.raises(ValueError, match="out has shape"):
        _C.quant_linear(x, q, s, None, torch.empty(2, 6), 0, False, "auto")


def test_isa_override_forces_lower_kernels():
    script = (
        "import torch, torchburn as tb; from torchburn import _C;"
        "print(_C.quant_kernel_for('auto', False), _C.quant_kernel_for('auto', True));"
        "q, s = tb.quantize_weight_int8(torch.ones(3, 16));"
        "print(float(tb.w8a32_linear(torch.ones(1, 16), q, s).sum()))"
    )
    for isa, expected in (("scalar", "scalar scalar"), ("avx2", "avx2 ")):
        if isa == "avx2" and "avx2" not in KERNELS:
            continue
        env = dict(os.environ, TORCHBURN_ISA=isa)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        first, second = out.stdout.splitlines()
        assert first.startswith(expected), first
        assert abs(float(second) - 48.0) < 1e-3


# ---- modules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quant_type, group_size, bound", [("int8", 64, 0.01), ("int4", 32, 0.09), ("int4", 64, 0.09), ("int4", 128, 0.09)]
)
def test_quantized_linear_vs_float_linear(quant_type, group_size, bound):
    # relative output error of the quantized layer against the float one it came from, nn.Linear's
    # uniform init (measured: int8 0.004, int4 g32/g64/g128 0.068-0.069)
    torch.manual_seed(6)
    linear = torch.nn.Linear(512, 256)
    layer = tb.QuantizedLinear.from_float(linear, quant_type=quant_type, group_size=group_size)
    x = torch.randn(16, 512)
    with torch.no_grad():
        ref = linear(x)
    out = layer(x)
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < bound, rel
    # and the layer computes exactly with its dequantized weight
    torch.testing.assert_close(out, torch.nn.functional.linear(x, layer.dequantize(), layer.bias), rtol=1e-5, atol=1e-5)


def test_bits_alias_and_repr():
    a = tb.QuantizedLinear.from_float(torch.nn.Linear(64, 8), bits=4, group_size=32)
    assert a.quant_type == "int4" and a.bits == 4 and a.group_size == 32
    b = tb.QuantizedLinear(64, 8, bias=False, bits=8)
    assert b.quant_type == "int8" and b.bias is None
    assert "quant_type='int4'" in repr(a) and "group_size=32" in repr(a)
    with pytest.raises(ValueError, match="contradicts"):
        tb.QuantizedLinear(64, 8, quant_type="int8", bits=4)


@pytest.mark.parametrize("quant_type", ["int8", "int4"])
def test_state_dict_round_trip(quant_type):
    torch.manual_seed(7)
    layer = tb.QuantizedLinear.from_float(torch.nn.Linear(256, 48), quant_type=quant_type, group_size=64)
    state = layer.state_dict()
    assert set(state) == {"weight", "scales", "bias"}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = tb.QuantizedLinear(256, 48, quant_type=quant_type, group_size=64)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.randn(3, 256)
    assert torch.equal(fresh(x), layer(x))
    with pytest.raises(RuntimeError):  # a layer of another format refuses the state
        tb.QuantizedLinear(256, 48, quant_type="int4" if quant_type == "int8" else "int8").load_state_dict(state)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 256)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(256, 128)
        self.odd = torch.nn.Linear(96, 128)  # 96 is not a multiple of 64
        self.lm_head = torch.nn.Linear(128, 50)

    def forward(self, x):
        h = self.down(self.act(self.up(x)))
        return self.lm_head(h + self.odd(x[..., :96]))


def test_quantize_model_on_mlp():
    torch.manual_seed(8)
    model = MLP().eval()
    x = torch.randn(4, 128)
    with torch.no_grad():
        ref = model(x)
    with pytest.warns(UserWarning, match="'odd' kept in float"):
        out_model = tb.quantize_model(model, quant_type="int4", group_size=64, exclude=("lm_head",))
    assert out_model is model
    assert isinstance(model.up, tb.QuantizedLinear) and isinstance(model.down, tb.QuantizedLinear)
    assert type(model.lm_head) is torch.nn.Linear and type(model.odd) is torch.nn.Linear
    with torch.no_grad():
        out = model(x)
    assert ((out - ref).norm() / ref.norm()).item() < 0.15
    int8_model = tb.quantize_model(MLP(), bits=8, exclude=())
    assert all(isinstance(m, tb.QuantizedLinear) for m in (int8_model.up, int8_model.odd, int8_model.lm_head))


def test_torch_compile_matches_eager():
    torch.manual_seed(9)
    model = tb.quantize_model(
        torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)), quant_type="int4"
    ).eval()
    x = torch.randn(5, 128)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model)(x)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


def test_autograd_through_quantized_linear():
    torch.manual_seed(10)
    layer = tb.QuantizedLinear.from_float(torch.nn.Linear(64, 16), quant_type="int4", group_size=32)
    x = torch.randn(3, 64, requires_grad=True)
    layer(x).square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    bias2 = layer.bias.detach().clone().requires_grad_(True)
    torch.nn.functional.linear(x2, layer.dequantize(), bias2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, bias2.grad, rtol=1e-5, atol=1e-5)


def test_low_precision_inputs_keep_their_dtype():
    layer = tb.QuantizedLinear.from_float(torch.nn.Linear(64, 8), quant_type="int8")
    x = torch.randn(2, 64)
    out = layer(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), layer(x.to(torch.bfloat16).float()), rtol=1e-2, atol=1e-2)


# ---- bad input --------------------------------------------------------------------------------------


def test_bad_weights():
    with pytest.raises(ValueError, match="2-D"):
        tb.quantize_weight_int8(torch.randn(4))
    with pytest.raises(ValueError, match="2-D"):
        tb.quantize_weight_int4_grouped(torch.randn(2, 4, 64))
    with pytest.raises(TypeError, match="floating-point"):
        tb.quantize_weight_int8(torch.ones(4, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="not a multiple of group_size"):
        tb.quantize_weight_int4_grouped(torch.randn(4, 96), group_size=64)
    with pytest.raises(ValueError, match="group_size must be one of"):
        tb.quantize_weight_int4_grouped(torch.randn(4, 96), group_size=48)
    with pytest.raises(TypeError, match="device"):
        tb.quantize_weight_int8(torch.empty(4, 8, device="meta"))


def test_inf_is_an_error_and_nan_propagates():
    w = torch.randn(3, 64)
    w[1, 5] = float("inf")
    with pytest.raises(ValueError, match=r"weight\[1, 5\] is inf"):
        tb.quantize_weight_int4_grouped(w, 32)
    w[1, 5] = -float("inf")
    with pytest.raises(ValueError, match=r"weight\[1, 5\] is -inf"):
        tb.quantize_weight_int8(w)
    w[1, 5] = float("nan")
    packed, s = tb.quantize_weight_int4_grouped(w, 32)
    assert torch.isnan(s[1, 0]) and torch.isfinite(s[1, 1]) and torch.isfinite(s[[0, 2]]).all()
    back = tb.dequantize_weight_int4_grouped(packed, s, 32)
    assert torch.isnan(back[1, :32]).all() and torch.isfinite(back[1, 32:]).all()
    y = tb.w4a32_grouped_linear(torch.randn(2, 64), packed, s, group_size=32)
    assert torch.isnan(y[:, 1]).all() and torch.isfinite(y[:, [0, 2]]).all()
    q, s8 = tb.quantize_weight_int8(w)
    assert torch.isnan(s8[1]) and torch.isnan(tb.dequantize_weight_int8(q, s8)[1]).all()


def test_bad_quantized_arguments():
    packed, s = tb.quantize_weight_int4_grouped(torch.randn(8, 128), 64)
    x = torch.randn(2, 128)
    with pytest.raises(TypeError, match="uint8"):
        tb.w4a32_grouped_linear(x, packed.to(torch.int8), s)
    with pytest.raises(ValueError, match="scales must have shape"):
        tb.w4a32_grouped_linear(x, packed, s[:, :1])
    with pytest.raises(ValueError, match="scales must have shape"):
        tb.w4a32_grouped_linear(x, packed, s, group_size=32)
    with pytest.raises(ValueError, match="last dim must be in_features"):
        tb.w4a32_grouped_linear(torch.randn(2, 64), packed, s)
    with pytest.raises(TypeError, match="floating point"):
        tb.w4a32_grouped_linear(torch.ones(2, 128, dtype=torch.int32), packed, s)
    with pytest.raises(ValueError, match="bias must have shape"):
        tb.w4a32_grouped_linear(x, packed, s, torch.zeros(3))
    with pytest.raises(TypeError, match="device"):
        tb.w4a32_grouped_linear(x.to("meta"), packed, s)
    q, s8 = tb.quantize_weight_int8(torch.randn(8, 128))
    with pytest.raises(TypeError, match="int8"):
        tb.w8a32_linear(x, q.to(torch.uint8), s8)
    with pytest.raises(ValueError, match="scales must have shape"):
        tb.w8a32_linear(x, q, s8[:4])
    with pytest.raises(ValueError, match="activations"):
        tb.w8a32_linear(x, q, s8, activations="int4")
    with pytest.raises(ValueError, match="in_features = 100 is not a multiple"):
        tb.QuantizedLinear(100, 8, quant_type="int4", group_size=64)
    with pytest.raises(TypeError, match="nn.Linear"):
        tb.QuantizedLinear.from_float(torch.nn.Conv1d(4, 4, 1))
    with pytest.raises(ValueError, match="quant_type"):
        tb.QuantizedLinear(64, 8, quant_type="fp8")
    with pytest.raises(ValueError, match="not available"):
        with tq.use_kernel("neon"):
            pass
