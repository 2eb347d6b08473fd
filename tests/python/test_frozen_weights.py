"""Packed convolution weights kept between calls (issue 13): turbo_torch's own weights (every write bumps
their storage's version) and, under the compile backend's ``freeze_weights`` option, the torch parameters
of inference graphs (repacked when torch's ``_version`` or the data pointer changes). Each test checks the
cache counters (``_C.weight_cache_counts``), so it fails when the cache silently stops being used or goes
stale, and compares the numbers with eager PyTorch."""
import warnings

import numpy as np
import pytest
import torch

import turbo_torch as tt
from torchburn import _C


pytestmark = pytest.mark.usefixtures("prepack_on")


def _delta(before):
    after = _C.weight_cache_counts()
    return {k: after[k] - before[k] for k in after}


def _model(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),  # packed path + BN
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 10)).eval()
    with torch.no_grad():  # non-trivial BN statistics, so the folded scale matters
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model


def _compiled(model, freeze):
    torch._dynamo.reset()
    return torch.compile(model, backend="torchburn", options={"freeze_weights": freeze})


X = torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(3))


def test_frozen_weights_are_packed_once_and_reused():
    model = _model()
    with torch.no_grad():
        plain = _compiled(model, False)
        before = _C.weight_cache_counts()
        unfrozen = [plain(X) for _ in range(4)]
        assert _delta(before) == {"gemm_packs": 0, "gemm_hits": 0, "conv_packs": 0, "conv_hits": 0}
        frozen_model = _compiled(model, True)
        before = _C.weight_cache_counts()
        frozen = [frozen_model(X) for _ in range(4)]
        counts = _delta(before)
    # packed on the second call (two convolutions, one Linear), reused on the third and fourth
    assert counts == {"gemm_packs": 1, "gemm_hits": 2, "conv_packs": 2, "conv_hits": 4}, counts
    for a, b in zip(frozen, unfrozen):  # the same packing, so the same bits
        assert torch.equal(a, b)
    torch.testing.assert_close(frozen[-1], model(X), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("how", ["mul_", "load_state_dict", "init", "new_parameter", "bn_stats"])
def test_frozen_weights_follow_torch_writes(how):
    """Every write torch counts (and a replaced parameter, and new BN statistics, which fold into the
    packed weights) gives the new numbers."""
    model = _model()
    with torch.no_grad():
        compiled = _compiled(model, True)
        for _ in range(3):
            compiled(X)
        if how == "mul_":
            model[0].weight.mul_(0.5)
        elif how == "load_state_dict":
            model.load_state_dict(_model(seed=1).state_dict())
        elif how == "init":
            torch.nn.init.normal_(model[3].weight)
        elif how == "new_parameter":
            model[3].weight = torch.nn.Parameter(torch.randn_like(model[3].weight))
        else:
            model[1].running_var.mul_(3.0)
        before = _C.weight_cache_counts()
        for _ in range(3):
            torch.testing.assert_close(compiled(X), model(X), rtol=1e-4, atol=1e-4)
        counts = _delta(before)
    assert counts["conv_packs"] >= 1 and counts["conv_hits"] >= 1, counts  # repacked, then reused


def test_another_tensor_object_on_the_same_memory_repacks():
    """A parameter replaced by another tensor object on the same memory (and version counter) gets a new
    storage: the plan keys on the object too, so a freed tensor's address reused by a new one can never
    hit a stale pack."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 8, 3, padding=1)).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled = _compiled(model, True)
        for _ in range(3):
            compiled(x)
        before = _C.weight_cache_counts()
        model[2].weight = torch.nn.Parameter(model[2].weight.detach())  # same data pointer and _version
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        counts = _delta(before)
    # the first conv hits three times; the second starts over: packed on its second call, hit on the third
    assert counts["conv_packs"] == 1 and counts["conv_hits"] == 4, counts


def test_writes_through_data_are_not_seen():
    """The freeze contract (docs/compile_backend.md): ``param.data`` bypasses torch's version counter,
    so a frozen model keeps its packed weights; this also shows the packs really are reused."""
    model = _model()
    with torch.no_grad():
        compiled = _compiled(model, True)
        for _ in range(3):
            old = compiled(X)
        model[3].weight.data.mul_(0.0)
        assert torch.equal(compiled(X), old)
        assert not torch.allclose(model(X), old)


def test_unknown_backend_option_warns():
    torch._dynamo.reset()
    compiled = torch.compile(torch.nn.Linear(4, 4), backend="torchburn", options={"freeze_weight": True})
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        compiled(torch.randn(2, 4))
    assert any("freeze_weight" in str(w.message) and "freeze_weights" in str(w.message) for w in caught)


def test_turbo_torch_conv_weights_cached_and_follow_writes():
    """turbo_torch's own weights need no option: the storage's version sees every write."""
    g = np.random.default_rng(5)
    conv = tt.nn.Conv2d(4, 8, 3, padding=1)
    x = tt.tensor(g.standard_normal((2, 4, 12, 12)).astype(np.float32))

    def check():
        got = conv(x)
        want = torch.nn.functional.conv2d(torch.tensor(x.tolist()), torch.tensor(conv.weight.detach().tolist()),
                                          torch.tensor(conv.bias.detach().tolist()), padding=1)
        np.testing.assert_allclose(np.array(got.tolist(), dtype=np.float32), want.numpy(), rtol=1e-5, atol=1e-5)

    with tt.no_grad():
        before = _C.weight_cache_counts()
        for _ in range(3):
            check()
        assert _delta(before)["conv_hits"] >= 1
        conv.weight.mul_(-1.5)
        check()
        check()
        conv.weight[0, 0, 0, 0] = 7.0
        check()
