"""Scaled-dot-product attention in training graphs of the torch.compile backend, against PyTorch eager:
the forward's log-sum-exp output and the native backward (aten._scaled_dot_product_flash_attention_for_cpu
and its _backward), through compiled training steps of small transformers and through graphs that call
the ATen ops directly.

Tolerances are assert_close's float32 defaults unless a comment next to the check says why."""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import torchburn  # noqa: E402
from torchburn.backend import TorchburnFallbackWarning, compiler  # noqa: E402

torchburn.register()
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


class CausalSelfAttention(torch.nn.Module):
    """A GPT-style block: qkv projection, F.scaled_dot_product_attention (causal or with a mask), output
    projection, residual, layer norm."""

    def __init__(self, width: int = 32, heads: int = 4, masked: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.masked = masked
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.masked:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.norm(x + self.proj(y))


def gradients(model, inputs, seed_grad):
    """Output and d(sum(out * seed_grad)) with respect to every parameter and every input that requires
    grad, via torch.autograd.grad."""
    out = model(*inputs)
    sources = list(model.parameters()) + [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return out, torch.autograd.grad((out * seed_grad).sum(), sources)


@pytest.fixture
def region_fallbacks(monkeypatch):
    """Names of the regions whose plan handed a call to PyTorch (inputs rejected or a failed run)."""
    calls = []
    original = compiler.Region.fallback

    def recording(self, *args):
        calls.append(self.name)
        return original(self, *args)

    monkeypatch.setattr(compiler.Region, "fallback", recording)
    return calls


def check_training(model, *inputs, fallbacks):
    reference = copy.deepcopy(model)
    seed_grad = torch.randn_like(reference(*inputs))
    compiled = torch.compile(model, backend="torchburn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)  # ops torchburn lacks (not attention's)
        out_c, grads_c = gradients(compiled, inputs, seed_grad)
    assert not fallbacks, f"regions ran in PyTorch: {fallbacks}"  # every plan accepted its inputs
    out_e, grads_e = gradients(reference, inputs, seed_grad)
    torch.testing.assert_close(out_c, out_e)
    assert len(grads_c) == len(grads_e)
    names = [n for n, _ in model.named_parameters()] + ["input"] * (len(grads_c) - len(list(model.parameters())))
    for name, got, expected in zip(names, grads_c, grads_e):
        torch.testing.assert_close(got, expected, msg=lambda m: f"{name}: {m}")
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(model, *inputs)
    native = report.native_ops
    assert native.get("_scaled_dot_product_flash_attention_for_cpu_backward.default", 0) >= 1, str(report)
    assert native.get("_scaled_dot_product_flash_attention_for_cpu.default", 0) >= 1, str(report)
    assert not any("attention" in reason for reason in report.fallback_ops), str(report)
    return report


def test_causal_self_attention_training(region_fallbacks):
    torch.manual_seed(0)
    model = CausalSelfAttention().train()
    x = torch.randn(2, 9, 32, requires_grad=True)
    check_training(model, x, fallbacks=region_fallbacks)


@pytest.mark.parametrize("mask_kind", ["bool", "float", "float padding"])
def test_masked_self_attention_training(mask_kind, region_fallbacks):
    torch.manual_seed(1)
    model = CausalSelfAttention(masked=True).train()
    x = torch.randn(2, 7, 32, requires_grad=True)
    if mask_kind == "bool":
        mask = torch.rand(7, 7) > 0.3
        mask[:, 0] = True  # every row keeps a key (torch's math path gives NaN for fully masked rows)
    elif mask_kind == "float":
        mask = torch.randn(2, 1, 7, 7)
    else:  # [B, 1, 1, T] padding: the last positions of batch entry 1 are masked out
        mask = torch.zeros(2, 1, 1, 7)
        mask[1, ..., 5:] = float("-inf")
    check_training(model, x, mask, fallbacks=region_fallbacks)


def test_transformer_encoder_layer_training(region_fallbacks):
    torch.manual_seed(2)
    model = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                             batch_first=True).train()
    x = torch.randn(3, 6, 32, requires_grad=True)
    check_training(model, x, fallbacks=region_fallbacks)


# ---- the ATen ops directly -----------------------------------------------------------------------


def flash(q, k, v, causal=False, mask=None, scale=None):
    return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


CASES = {
    "plain": dict(shape=(2, 3, 5, 8), kv_len=5),
    "causal Tq < Tk": dict(shape=(1, 2, 4, 8), kv_len=9, causal=True),
    "causal Tq > Tk": dict(shape=(1, 2, 9, 8), kv_len=4, causal=True),
    "float mask with a fully masked row": dict(shape=(2, 2, 5, 4), kv_len=6, mask="float"),
    "scale": dict(shape=(1, 1, 70, 16), kv_len=130, scale=0.3),
}


def make_case(shape, kv_len, causal=False, mask=None, scale=None):
    B, H, T, D = shape
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(B, H, kv_len, D), torch.randn(B, H, kv_len, D)
    if mask == "float":
        mask = torch.randn(T, kv_len)
        mask[1] = float("-inf")
    return (q, k, v), dict(causal=causal, mask=mask, scale=scale)


@pytest.mark.parametrize("name", list(CASES))
def test_forward_logsumexp_and_backward_ops(name):
    torch.manual_seed(3)
    (q, k, v), options = make_case(**CASES[name])
    grad_out = torch.randn(q.shape[:-1] + (v.shape[-1],))

    def forward_and_backward(q, k, v, grad_out):
        out, lse = flash(q, k, v, **options)
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, options["causal"], attn_mask=options["mask"], scale=options["scale"])
        return (out, lse) + tuple(grads)

    expected = forward_and_backward(q, k, v, grad_out)
    with torch.no_grad():
        report = torchburn.explain(forward_and_backward, q, k, v, grad_out)
        assert not report.fallback_ops, str(report)
        got = torch.compile(forward_and_backward, backend="torchburn")(q, k, v, grad_out)
    for what, g, e in zip(["out", "lse", "grad_q", "grad_k", "grad_v"], got, expected):
        torch.testing.assert_close(g, e, msg=lambda m: f"{what}: {m}")
        assert torch.isfinite(g).all()
    if options["mask"] is not None:  # the fully masked row: lse 0 (torch's value) and zero gradients
        assert (got[1][:, :, 1] == 0).all() and (got[2][:, :, 1] == 0).all()


def test_logsumexp_only_is_computed():
    torch.manual_seed(4)
    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)

    def lse_only(q, k, v):
        return flash(q, k, v, causal=True)[1] * 2

    with torch.no_grad():
        got = torch.compile(lse_only, backend="torchburn")(q, k, v)
    torch.testing.assert_close(got, lse_only(q, k, v))


def test_unused_gradients_are_not_returned():
    # only grad_k is used: the kernel still computes all three, into step scratch
    torch.manual_seed(5)
    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    grad_out = torch.randn(1, 2, 6, 8)

    def grad_k_only(q, k, v, grad_out):
        out, lse = flash(q, k, v)
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, lse, 0.0, False)[1]

    with torch.no_grad():
        got = torch.compile(grad_k_only, backend="torchburn")(q, k, v, grad_out)
        report = torchburn.explain(grad_k_only, q, k, v, grad_out)
    assert not report.fallback_ops, str(report)
    torch.testing.assert_close(got, grad_k_only(q, k, v, grad_out))


def test_dropout_backward_stays_in_pytorch():
    q, k, v = torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8)
    g = torch.randn(1, 1, 4, 8)

    def with_dropout(q, k, v, g):
        out, lse = flash(q, k, v)
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, lse, 0.5, False)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(with_dropout, q, k, v, g)
    assert any("backward" in reason for reason in report.fallback_ops), str(report)


# ---- inference with a broadcast mask (BERT's padding mask) ------------------------------------------


def padding_keep(batch, length, generator):
    """[batch, length] booleans: each entry keeps a random prefix of at least one key."""
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length
    return torch.arange(length)[None, :] < lengths[:, None]


@pytest.mark.parametrize("length", [37, 131])  # odd; 131 crosses the 128-key block and the SIMD tails
@pytest.mark.parametrize("dtype", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", ["B,1,1,S", "B,1,S,S", "1,1,S,S", "B,1,S,S expanded"])
def test_broadcast_mask_inference_runs_natively(mask_shape, dtype, length, region_fallbacks):
    generator = torch.Generator().manual_seed(length)
    B, H, S, D = 3, 2, length, 16
    q, k, v = (torch.randn(B, H, S, D, generator=generator) for _ in range(3))
    if mask_shape == "B,1,1,S":
        keep = padding_keep(B, S, generator)[:, None, None, :]
    elif mask_shape == "1,1,S,S":
        keep = torch.rand(1, 1, S, S, generator=generator) > 0.4
    else:
        keep = torch.rand(B, 1, S, S, generator=generator) > 0.4
    if mask_shape != "B,1,1,S":
        keep[..., 0] = True  # every row keeps a key (torch's math path gives NaN for fully masked rows)
    if dtype == "bool":
        mask = keep
    else:  # an additive mask with finite values where kept, as models build it
        mask = torch.randn(keep.shape, generator=generator).masked_fill(~keep, float("-inf"))
    if mask_shape == "B,1,S,S expanded":  # a [B, 1, 1, S] row broadcast through a 0 stride, not copied
        mask = mask[:, :, :1].expand(B, 1, S, S)

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    with torch.no_grad():
        expected = attend(q, k, v, mask)
        got = torch.compile(attend, backend="torchburn")(q, k, v, mask)
        torch._dynamo.reset()
        report = torchburn.explain(attend, q, k, v, mask)
    assert not region_fallbacks, f"regions ran in PyTorch: {region_fallbacks}"
    assert not report.fallback_ops, str(report)
    assert any("scaled_dot_product" in op for op in report.native_ops), str(report)
    torch.testing.assert_close(got, expected)
