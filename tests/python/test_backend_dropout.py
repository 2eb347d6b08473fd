"""Training-mode dropout in compiled graphs: the keep mask is drawn natively from a seed that PyTorch's
generator supplies, the scaling and the backward run natively, and a dropout no longer splits a region.
The masks are a different draw than eager PyTorch's (as with inductor), so the oracle is PyTorch's
formula applied to the mask the compiled call used: output = x * mask * (1 / (1 - p)), and
grad_x = grad * mask * (1 / (1 - p)); plus the distribution, reproducibility and independence."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import torchburn  # noqa: E402


def fresh():
    torch._dynamo.reset()
    torchburn.reset_stats()


def scale_of(p):
    return 0.0 if p == 1.0 else 1.0 / (1.0 - p)


def compiled_dropout(p):
    return torch.compile(lambda x, w: F.dropout(x, p, training=True) * w, backend="torchburn")


def run_native(fn, *args):
    """Calls fn, asserting that every region ran natively."""
    before = torchburn.profiling_stats()
    out = fn(*args)
    after = torchburn.profiling_stats()
    assert after["calls"] > before["calls"] and after["fallback_calls"] == before["fallback_calls"]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_forward_and_backward_follow_pytorchs_formula_on_the_mask_used(p, dtype):
    fresh()
    torch.manual_seed(0)
    x = (torch.rand(64, 1000) + 0.5).to(dtype).requires_grad_()  # never 0: the zeros are the mask
    w = torch.randn(1000).to(dtype)
    fn = compiled_dropout(p)
    y = run_native(fn, x, w)
    mask = y.detach() != 0
    scale = scale_of(p)
    torch.testing.assert_close(y.detach(), x.detach() * mask * scale * w, rtol=0, atol=0)
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, (g * w) * mask * scale, rtol=0, atol=0)
    kept = mask.float().mean().item()
    n = mask.numel()
    assert abs(kept - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n), kept
    report = torchburn.explain(lambda x, w: F.dropout(x, p, training=True) * w, x, w)
    assert "native_dropout.default" in report.native_ops and "native_dropout_backward.default" in report.native_ops
    assert report.native_share == 1.0, report.fallback_ops


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_edge_probabilities(p):
    fresh()
    x = (torch.rand(8, 300) + 0.5).requires_grad_()
    w = torch.ones(300)
    y = compiled_dropout(p)(x, w)
    expected = x.detach() if p == 0.0 else torch.zeros_like(x)
    torch.testing.assert_close(y.detach(), expected, rtol=0, atol=0)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x) if p == 0.0 else torch.zeros_like(x), rtol=0, atol=0)


def test_masks_follow_torch_manual_seed_and_change_between_calls():
    fresh()
    x = torch.rand(32, 512) + 0.5
    w = torch.ones(512)
    fn = compiled_dropout(0.3)
    x.requires_grad_()
    fn(x, w)  # compile
    torch.manual_seed(123)
    a = fn(x, w).detach() != 0
    b = fn(x, w).detach() != 0
    torch.manual_seed(123)
    a_again = fn(x, w).detach() != 0
    assert torch.equal(a, a_again)
    assert not torch.equal(a, b)
    torch.manual_seed(124)
    assert not torch.equal(a, fn(x, w).detach() != 0)


def test_mask_elements_look_independent():
    fresh()
    x = (torch.rand(200_000) + 0.5).requires_grad_()
    w = torch.ones(200_000)
    torch.manual_seed(7)
    keep = (compiled_dropout(0.5)(x, w).detach() != 0).double()
    n = keep.numel()
    # neighbours (both halves of one 64-bit draw, and across draws) and elements 1000 apart
    for lag in (1, 2, 3, 1000):
        a, b = keep[:-lag] - keep.mean(), keep[lag:] - keep.mean()
        r = (a * b).mean() / keep.var()
        assert abs(r.item()) < 6 / math.sqrt(n), (lag, r.item())
    # the kept share of each of 20 blocks
    for block in keep.view(20, -1):
        assert abs(block.mean().item() - 0.5) < 6 * math.sqrt(0.25 / block.numel())


def test_encoder_layer_training_step_runs_in_one_forward_and_one_backward_region():
    fresh()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.1, batch_first=True)
    x = torch.randn(2, 16, 64)
    report = torchburn.explain(layer, x)
    assert report.native_share == 1.0, report.fallback_ops
    assert report.native_ops.get("native_dropout.default", 0) >= 3
    assert len(report.regions) == 2, report.regions  # dropout no longer splits regions
    # eval mode: no dropout at all, and the result equals eager
    layer.eval()
    fresh()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(layer, backend="torchburn")(x), layer(x), rtol=1e-4, atol=1e-5)


def test_eval_mode_dropout_and_float64_stay_exact():
    fresh()
    x = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    fn = torch.compile(lambda x: F.dropout(x, 0.5, training=True) * 2, backend="torchburn")
    y = fn(x)  # float64 stays in PyTorch: still a dropout with PyTorch's scaling
    kept = y.detach() != 0
    torch.testing.assert_close(y.detach()[kept], (x.detach() * 2 * 2)[kept], rtol=0, atol=0)
    fn_eval = torch.compile(lambda x: F.dropout(x, 0.5, training=False) * 2, backend="torchburn")
    torch.testing.assert_close(fn_eval(x), x * 2)


def test_mask_does_not_depend_on_the_thread_count():
    fresh()
    x = (torch.rand(300_001) + 0.5).requires_grad_()  # odd: the last 64-bit draw is half used
    w = torch.ones(300_001)
    fn = compiled_dropout(0.25)
    before = torchburn.get_num_threads()
    masks = []
    try:
        for threads in (1, 2, 3):
            torchburn.set_num_threads(threads)
            torch.manual_seed(99)
            masks.append(fn(x, w).detach() != 0)
    finally:
        torchburn.set_num_threads(before)
    assert torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])
