"""Ops the compile backend computes through the eager core (src/graph/exec_eager.c) and the rules added
with them, against PyTorch eager as the oracle: values under no_grad, values and input gradients with
grad enabled, and that the graph op really ran in a plan (its step is in the region's listing and no
compute node of the forward graph was left to PyTorch)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import torchburn  # noqa: E402
from torchburn.backend import Explanation, TorchburnFallbackWarning  # noqa: E402
from torchburn.backend.diagnostics import Recorder  # noqa: E402

torchburn.register()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def _x(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


X = _x(4, 6)
INDEX = torch.randint(0, 4, (4, 6), generator=torch.Generator().manual_seed(1))
ROWS = torch.tensor([0, 2, 1, 2])  # repeated on purpose: index_add accumulates
B3 = _x(2, 4, 5)

# name: (function, float inputs (differentiable), other inputs, the graph step that must run, grad?)
CASES = {
    "argmax": (lambda x: x.argmax(1), [X], [], "max_dim", False),
    "argmax_all_keepdim": (lambda x: x.argmax(keepdim=True), [X], [], "max_dim", False),
    "argmin": (lambda x: x.argmin(0), [X], [], "max_dim", False),
    "max_dim": (lambda x: x.max(1).values * 2 + x.max(1).indices.float(), [X], [], "max_dim", True),
    "min_dim_keepdim": (lambda x: x.min(0, keepdim=True).values.exp(), [X], [], "max_dim", True),
    "cumsum": (lambda x: x.cumsum(1) * x, [X], [], "scan", True),
    "cumprod": (lambda x: x.cumprod(0) + 1, [X], [], "scan", True),
    "prod_dim": (lambda x: x.prod(1), [X], [], "eager_reduce", True),
    "prod_all": (lambda x: (x * 0.9).prod(), [X], [], "eager_reduce", True),
    "any_all": (lambda x: (x > 0).any(1).float() + (x > 1).all(), [X], [], "eager_reduce", False),
    "vector_norm": (lambda x: torch.linalg.vector_norm(x, dim=1), [X], [], "vector_norm", True),
    "norm_p1_keepdim": (lambda x: x.norm(p=1, dim=-1, keepdim=True) * x, [X], [], "vector_norm", True),
    "norm_inf": (lambda x: torch.linalg.vector_norm(x, ord=float("inf")), [X], [], "vector_norm", False),
    "gather": (lambda x, i: x.gather(0, i) * 2, [X], [INDEX], "gather", True),
    "scatter": (lambda x, i: torch.zeros(4, 6).scatter(0, i, x), [X], [INDEX], "scatter", False),
    "scatter_add": (lambda x, i: torch.zeros(4, 6).scatter_add(0, i, x).tanh(), [X], [INDEX], "scatter", True),
    "scatter_value": (lambda x, i: x.scatter(1, i, 2.5), [X], [INDEX], "scatter", True),
    "scatter_reduce_sum": (lambda x, i: x.scatter_reduce(0, i, x * 2, "sum"), [X], [INDEX], "scatter", True),
    "scatter_reduce_amax": (lambda x, i: x.scatter_reduce(0, i, x * 2, "amax"), [X], [INDEX], "scatter", False),
    "index_select": (lambda x, j: x.index_select(0, j).sigmoid(), [X], [ROWS], "index_select", True),
    "index_add": (lambda x, j: x.index_add(0, j, x * 3, alpha=0.5), [X], [ROWS], "index_add", True),
    "sort": (lambda x: x.sort(1, descending=True).values * 2 + x.sort(0).indices.float(), [X], [], "sort", True),
    "sort_stable": (lambda x: torch.sort(x, dim=0, stable=True).values.tanh(), [X], [], "sort", True),
    "topk": (lambda x: x.topk(3, 1).values.exp() + x.topk(3, 1, largest=False).indices.float(), [X], [], "sort", True),
    "flip": (lambda x: x.flip(1) * x, [X], [], "flip", True),
    "flip_dims": (lambda b: b.flip((0, -1)).exp(), [B3], [], "flip", True),
    "roll": (lambda x: x.roll((1, -2), (0, 1)) * x, [X], [], "roll", True),
    "roll_flat": (lambda b: b.roll(7) + 1, [B3], [], "roll", True),
    "tril": (lambda x: x.tril(1) * 2, [X], [], "triangle", True),
    "triu_batched": (lambda b: b.triu(-1).sin(), [B3], [], "triangle", True),
    "logcumsumexp": (lambda x: x.logcumsumexp(1) * 2, [X], [], "scan", True),
    "logcumsumexp_dim0": (lambda x: (x * 30).logcumsumexp(0), [X], [], "scan", True),
    "index_rows": (lambda x, j: x[j] * 2, [X], [ROWS], "index", True),
    "index_negative": (lambda x, j: x[:, j - 3].exp(), [X], [ROWS], "index", True),
    "index_two_dims": (lambda b, j: b[j[:2] % 2, :, j[1:3]] * 3, [B3], [ROWS], "index", True),
    "index_broadcast_middle": (lambda b, j: b[:, j[:2, None], j[None, :3]].tanh(), [B3], [ROWS.view(2, 2)[0].repeat(2, 1)],
                               "index", True),
    "index_put_accumulate": (lambda x, j: x.index_put((j,), x[:4] * 2, accumulate=True), [X], [ROWS], "index_put", True),
    "index_put_assign": (lambda x, j: x.index_put((j[:3],), x[0] * 5), [X], [torch.tensor([3, 0, 1])], "index_put",
                         True),
    "cumsum_bool": (lambda x: (x > 0).cumsum(1) + x, [X], [], "scan", True),
    "integer_arithmetic": (lambda x, i: x * ((i - 1).relu() * 3 + 2 ** 40 - (i == 2).long() * 2 ** 40).float(),
                           [X], [INDEX], "eager_pointwise", True),
}


def _fallbacks(recorder, kind):
    return {op: c for g in recorder.graphs if g.kind == kind for op, c in g.fallback_ops.items()}


def _steps(recorder, kind):
    return "\n".join(str(f) for g in recorder.graphs if g.kind == kind for f in g.fusions)


@pytest.mark.parametrize("name", list(CASES))
def test_op_runs_natively_and_matches_eager(name):
    fn, floats, others, step, differentiable = CASES[name]
    compiled = torch.compile(fn, backend="torchburn")
    with torch.no_grad(), Recorder() as recorder:
        got = compiled(*floats, *others)
    torch.testing.assert_close(got, fn(*floats, *others))
    assert step in _steps(recorder, "inference"), _steps(recorder, "inference")
    report = Explanation(graphs=list(recorder.graphs))
    assert report.native_share == 1.0 and not report.runtime_fallbacks, str(report)
    if not differentiable:
        return

    leaves = [x.clone().requires_grad_() for x in floats]
    expected_leaves = [x.clone().requires_grad_() for x in floats]
    weight = _x(*fn(*floats, *others).shape, seed=7)
    torch._dynamo.reset()
    with Recorder() as recorder:
        out = torch.compile(fn, backend="torchburn")(*leaves, *others)
        (out * weight).sum().backward()
    expected = fn(*expected_leaves, *others)
    (expected * weight).sum().backward()
    torch.testing.assert_close(out, expected)
    for got_leaf, want_leaf in zip(leaves, expected_leaves):
        torch.testing.assert_close(got_leaf.grad, want_leaf.grad)
    assert step in _steps(recorder, "forward"), _steps(recorder, "forward")
    assert not _fallbacks(recorder, "forward"), _fallbacks(recorder, "forward")
    assert not Explanation(graphs=list(recorder.graphs)).runtime_fallbacks


# every backward graph runs wholly natively (cumprod's counts zeros with integer ops; the backward of
# cumsum, logcumsumexp and prod flips; that of x[j] is an index_put)
NATIVE_BACKWARD = [name for name, case in CASES.items() if case[4]]


@pytest.mark.parametrize("name", NATIVE_BACKWARD)
def test_backward_runs_natively(name):
    fn, floats, others, step, _ = CASES[name]
    leaves = [x.clone().requires_grad_() for x in floats]
    with Recorder() as recorder:
        torch.compile(fn, backend="torchburn")(*leaves, *others).sum().backward()
    assert [g for g in recorder.graphs if g.kind == "backward"]
    assert not _fallbacks(recorder, "backward"), _fallbacks(recorder, "backward")


OTHER_CASES = {
    "celu": (lambda x: F.celu(x, 0.5), "celu"),
    "selu": (lambda x: F.selu(x), "elu"),
    "logit_eps": (lambda x: torch.logit(x.sigmoid() * 1.2 - 0.1, eps=0.05), "logit"),
    "addmm_alpha_beta": (lambda x: torch.addmm(x[:, :4], x, x.t()[:, :4], beta=0.5, alpha=2.0), "addmm"),
    "addmm_beta0": (lambda x: torch.addmm(x[:, :4] + 100, x, x.t()[:, :4], beta=0.0), "addmm"),
    "rms_norm": (lambda x: F.rms_norm(x, (6,), x[0] + 2), "mean"),  # add_ inside must not split the region
    # PyTorch's decompositions, fused natively
    "hardshrink": (lambda x: F.hardshrink(x, 0.7), "where"),
    "softshrink": (lambda x: F.softshrink(x, 0.3), "where"),
    "logsigmoid": (lambda x: F.logsigmoid(x), "log1p"),
    "glu": (lambda x: F.glu(x, -1), "sigmoid"),
    "prelu": (lambda x: F.prelu(x, x[0, :1].abs() * 0.1 + 0.2), "where"),
}


@pytest.mark.parametrize("name", list(OTHER_CASES))
@pytest.mark.parametrize("grad", [False, True])
def test_rules_run_natively(name, grad):
    fn, op = OTHER_CASES[name]
    x = X.clone().requires_grad_(grad)
    xe = X.clone().requires_grad_(grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchburnFallbackWarning)
        with torch.set_grad_enabled(grad), Recorder() as recorder:
            got = torch.compile(fn, backend="torchburn")(x)
    expected = fn(xe)
    torch.testing.assert_close(got, expected)
    kind = "forward" if grad else "inference"
    native = {o for g in recorder.graphs if g.kind == kind for o in g.native_ops}
    assert any(op in o for o in native), native
    assert not _fallbacks(recorder, kind), _fallbacks(recorder, kind)
    if grad:
        got.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)


def _run_both(fn, x, grad):
    """fn compiled and eager on copies of x (leaves when grad), values compared; returns (got, expected,
    leaf, expected_leaf, recorder)."""
    leaf, expected_leaf = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
    with torch.set_grad_enabled(grad), Recorder() as recorder:
        got = torch.compile(fn, backend="torchburn")(leaf)
    expected = fn(expected_leaf)
    torch.testing.assert_close(got, expected)
    return got, expected, leaf, expected_leaf, recorder


@pytest.mark.parametrize("grad", [False, True])
def test_baddbmm(grad):
    def fn(b):
        return (torch.baddbmm(b[:, :, :4], b, b.transpose(1, 2)[:, :, :4])
                + torch.baddbmm(b[0, :, :4], b, b.transpose(1, 2)[:, :, :4], beta=0.5, alpha=2.0))

    got, expected, b, be, recorder = _run_both(fn, B3, grad)
    kind = "forward" if grad else "inference"
    assert {g.kind for g in recorder.graphs} >= {kind}
    assert not _fallbacks(recorder, kind), _fallbacks(recorder, kind)
    assert any("baddbmm" in o for g in recorder.graphs for o in g.native_ops)
    if grad:
        got.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(b.grad, be.grad)


def test_integer_pointwise_is_exact():
    """Integer arithmetic runs in the eager core's int64 (the graph's float32 programs would round 2**40 + 1)."""
    fn = lambda i: ((i * 3 + (2 ** 40 + 1)) // 2 - (i != 0).long()).clamp(max=2 ** 39 + 3) + i.clamp(1, 2)  # noqa: E731
    with torch.no_grad(), Recorder() as recorder:
        got = torch.compile(fn, backend="torchburn")(INDEX)
    assert got.dtype == torch.int64 and torch.equal(got, fn(INDEX))
    assert "eager_pointwise" in _steps(recorder, "inference")
    report = Explanation(graphs=list(recorder.graphs))
    assert report.native_share == 1.0 and not report.runtime_fallbacks, str(report)


@pytest.mark.parametrize("make", [lambda: torch.arange(6), lambda: torch.arange(3, 20, 3)[:6],
                                  lambda: torch.arange(10, 4, -1), lambda: torch.arange(2, 8, dtype=torch.int32)])
def test_integer_arange_runs_natively(make):
    fn = lambda i: i[0] * make() + 1  # noqa: E731
    with torch.no_grad(), Recorder() as recorder:
        got = torch.compile(fn, backend="torchburn")(INDEX)
    assert torch.equal(got, fn(INDEX)) and got.dtype == fn(INDEX).dtype
    report = Explanation(graphs=list(recorder.graphs))
    assert report.native_share == 1.0 and not report.runtime_fallbacks, str(report)


def test_index_put_in_place_assignment():
    """x[j] = v on a clone (functionalized to index_put) and x[mask-free int index] += v, natively."""
    def fn(x, j):
        y = x.clone()
        y[j] = x[:3] * 2
        y[:, j[:2]] += 1.0
        return y

    j = torch.tensor([3, 0, 1])
    with torch.no_grad(), Recorder() as recorder:
        got = torch.compile(fn, backend="torchburn")(X, j)
    torch.testing.assert_close(got, fn(X, j))
    assert "index_put" in _steps(recorder, "inference")
    assert Explanation(graphs=list(recorder.graphs)).native_share == 1.0


def test_bad_advanced_index_falls_back_to_pytorch_error():
    fn = torch.compile(lambda x, j: x[j] * 2, backend="torchburn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        with torch.no_grad():
            fn(X, ROWS)
            with pytest.raises(IndexError, match="out of bounds"):
                fn(X, torch.tensor([0, 9]))


@pytest.mark.parametrize("grad", [False, True])
def test_safe_softmax_zeroes_fully_masked_rows(grad):
    """aten._safe_softmax (masked attention in transformers' BERT/GPT-2 under grad): rows that are all
    -inf give 0, not NaN, natively and in the gradient."""
    x = X.clone()
    x[1] = -float("inf")
    x[2, :3] = -float("inf")
    weight = _x(4, 6, seed=3)
    fn = lambda x: torch.ops.aten._safe_softmax(x * 2, -1) * weight  # noqa: E731
    got, expected, leaf, expected_leaf, recorder = _run_both(fn, x, grad)
    kind = "forward" if grad else "inference"
    assert not _fallbacks(recorder, kind), _fallbacks(recorder, kind)
    assert Explanation(graphs=list(recorder.graphs)).native_share == 1.0
    if grad:
        got.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(leaf.grad, expected_leaf.grad)


def test_bad_index_is_a_clear_error_or_pytorch_error():
    """An out-of-range index must not read out of bounds: the plan reports it and the call falls back
    to PyTorch, which raises its own error."""
    fn = torch.compile(lambda x, i: x.gather(0, i) * 2, backend="torchburn")
    bad = INDEX.clone()
    bad[0, 0] = 99
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        with torch.no_grad(), pytest.raises(RuntimeError, match="out of bounds"):
            fn(X, bad)


# ---- layout fixes between plans ---------------------------------------------------------------------


def test_copy_into_matches_torch_and_checks_shapes():
    src = _x(2, 3, 4, 5)
    dst = torch.empty_strided(src.shape, (60, 5, 15, 1))  # [B, H, T, D] in [B, T, H, D] memory order
    torchburn._C.copy_into(dst, src)
    assert torch.equal(dst, src)
    with pytest.raises(ValueError, match="shapes differ"):
        torchburn._C.copy_into(torch.empty(2, 3), torch.empty(3, 2))


def test_restride_does_not_use_pytorch_copy(monkeypatch):
    """A region output that must keep a strided layout (attention's output saved for the backward) is
    copied by torchburn: torch's copy_ would wake PyTorch's OpenMP team, whose spinning threads then
    slow the next plan down (the GPT-2 block's grad-on forward took twice as long)."""
    from torchburn.backend import compiler

    src = _x(2, 3, 4, 5)

    def no_torch_copy(*args, **kwargs):
        raise AssertionError("torch copy_ used")

    monkeypatch.setattr(torch.Tensor, "copy_", no_torch_copy)
    got = compiler._restride(src, (60, 5, 15, 1))
    assert got.stride() == (60, 5, 15, 1)
    assert torch.equal(got, src)
