"""turbo_torch.compile against eager turbo_torch and PyTorch (the oracle): captured forwards replay
natively (stats), new shapes capture again, data-dependent control flow and uncaptured ops fall back
with correct answers, grad mode runs eagerly with correct gradients."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import turbo_torch as tt  # noqa: E402

nn = tt.nn


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _pair(build):
    """The same model in turbo_torch and torch, torch's initial state loaded into turbo's."""
    torch.manual_seed(0)
    ref = build(torch)
    ours = build(tt)
    ours.load_state_dict({k: tt.from_numpy(v.detach().numpy().copy()) for k, v in ref.state_dict().items()})
    return ours, ref


def _mlp(lib):
    class NeuralNetwork(lib.nn.Module):  # the quickstart program's model
        def __init__(self):
            super().__init__()
            self.flatten = lib.nn.Flatten()
            self.linear_relu_stack = lib.nn.Sequential(lib.nn.Linear(28 * 28, 512), lib.nn.ReLU(),
                                                       lib.nn.Linear(512, 512), lib.nn.ReLU(), lib.nn.Linear(512, 10))

        def forward(self, x):
            return self.linear_relu_stack(self.flatten(x))
    return NeuralNetwork()


def _block(lib):
    class Block(lib.nn.Module):  # a transformer-style feed-forward block with a residual and a softmax head
        def __init__(self):
            super().__init__()
            self.norm = lib.nn.LayerNorm(32)
            self.up = lib.nn.Linear(32, 64)
            self.act = lib.nn.GELU()
            self.down = lib.nn.Linear(64, 32)
            self.drop = lib.nn.Dropout(0.1)
            self.head = lib.nn.Linear(32, 5)

        def forward(self, x):
            h = x + self.drop(self.down(self.act(self.up(self.norm(x)))))
            return lib.softmax(self.head(h), dim=-1), lib.nn.functional.log_softmax(self.head(h), -1)
    return Block()


def _run(model, x, lib):
    with lib.no_grad():
        return model(x)


def _check(ours, ref, xs, replayed=True):
    compiled = tt.compile(ours)
    for x in xs:
        eager = _run(ours, tt.from_numpy(x.copy()), tt)
        first = _run(compiled, tt.from_numpy(x.copy()), tt)
        before = tt.compiler.stats()["replays"]
        again = _run(compiled, tt.from_numpy(x.copy()), tt)
        want = _run(ref, torch.from_numpy(x.copy()), torch)
        if replayed:
            assert tt.compiler.stats()["replays"] == before + 1, compiled.last_reason
        for got in (first, again):
            got = got if isinstance(got, tuple) else (got,)
            exp = want if isinstance(want, tuple) else (want,)
            eag = eager if isinstance(eager, tuple) else (eager,)
            assert len(got) == len(exp)
            for g, w, e in zip(got, exp, eag):
                assert isinstance(g, tt.Tensor)
                np.testing.assert_allclose(_np(g), _np(w), rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(_np(g), _np(e), rtol=1e-5, atol=1e-6)
    return compiled


def test_mlp_forward_replays_and_matches_torch():
    ours, ref = _pair(_mlp)
    ours.eval(), ref.eval()
    rng = np.random.default_rng(1)
    compiled = _check(ours, ref, [rng.standard_normal((64, 1, 28, 28)).astype(np.float32)])
    assert compiled.last_reason is None
    assert torch.compile(ref)(torch.zeros(2, 1, 28, 28)).shape == (2, 10)  # torch.compile accepts the same model


def test_block_with_layernorm_gelu_softmax_dropout_eval():
    ours, ref = _pair(_block)
    ours.eval(), ref.eval()
    rng = np.random.default_rng(2)
    _check(ours, ref, [rng.standard_normal((8, 32)).astype(np.float32)])


def test_shape_change_captures_again():
    ours, ref = _pair(_mlp)
    rng = np.random.default_rng(3)
    tt.compiler.reset()
    _check(ours, ref, [rng.standard_normal((n, 1, 28, 28)).astype(np.float32) for n in (4, 9)])
    assert tt.compiler.stats()["captures"] == 2


def test_optimizer_updates_are_seen():
    ours, _ = _pair(_mlp)
    compiled = tt.compile(ours)
    x = tt.randn(4, 1, 28, 28)
    with tt.no_grad():
        compiled(x)
        compiled(x)
        for p in ours.parameters():
            p.mul_(0.5)
        want = ours(x)
        before = tt.compiler.stats()["replays"]
        got = compiled(x)
    assert tt.compiler.stats()["replays"] == before + 1
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6)


def test_elementwise_chain_and_matmul_bias_gelu_function():
    def f(x, w, b):
        y = tt.nn.functional.gelu(x @ w + b)
        return (tt.exp(-y) * 2.0 + 1.0) / (y.relu() + 1.5) - tt.sigmoid(y)

    def f_torch(x, w, b):
        y = torch.nn.functional.gelu(x @ w + b)
        return (torch.exp(-y) * 2.0 + 1.0) / (y.relu() + 1.5) - torch.sigmoid(y)

    compiled = tt.compile(f)
    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((6, 16), (16, 8), (8,)))
    with tt.no_grad():
        compiled(*(tt.from_numpy(a.copy()) for a in (x, w, b)))
        before = tt.compiler.stats()["replays"]
        got = compiled(*(tt.from_numpy(a.copy()) for a in (x, w, b)))
    assert tt.compiler.stats()["replays"] == before + 1, compiled.last_reason
    want = torch.compile(f_torch)(*(torch.from_numpy(a.copy()) for a in (x, w, b)))
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-5, atol=1e-6)


def test_decorator_with_arguments_and_module_attributes_forward():
    @tt.compile(fullgraph=True)
    def g(x):
        return tt.softmax(x * 3.0, dim=1)

    x = tt.randn(3, 7)
    with tt.no_grad():
        g(x)
        got = g(x)
    np.testing.assert_allclose(_np(got), torch.softmax(torch.from_numpy(_np(x)) * 3.0, 1).numpy(), rtol=1e-6)
    ours, _ = _pair(_mlp)
    compiled = tt.compile(ours)
    assert compiled._orig_mod is ours and compiled.flatten is ours.flatten
    assert list(compiled.state_dict()) == list(ours.state_dict())


def test_data_dependent_control_flow_falls_back_correctly():
    def f(x):
        y = x * 2.0
        if y.sum() > 0:  # a tensor -> Python bool while recording
            return y + 1.0
        return y - 1.0

    compiled = tt.compile(f)
    tt.compiler.reset()
    pos, neg = tt.ones(3), -tt.ones(3)
    with tt.no_grad():
        outs = [compiled(pos), compiled(neg), compiled(pos), compiled(neg)]
    for got, x in zip(outs, (pos, neg, pos, neg)):
        np.testing.assert_allclose(_np(got), _np(f(x)))
    assert tt.compiler.stats()["replays"] == 0 and tt.compiler.stats()["capture_failures"] == 1
    assert "Python value" in compiled.last_reason

    def g(x):
        return x * float((x * 1.0).max().item())

    cg = tt.compile(g)
    with tt.no_grad():
        for v in (1.0, 3.0):
            np.testing.assert_allclose(_np(cg(tt.full((2,), v))), _np(g(tt.full((2,), v))))
    with pytest.raises(RuntimeError, match="capture failed"):
        tt.compile(f, fullgraph=True)(pos)


def test_uncaptured_ops_and_inplace_refuse_capture():
    def f(x):
        return tt.cumsum(x, 0) + 1.0  # cumsum has no recording entry point: the plan would miss it

    def h(x):
        x.add_(1.0)  # an in-place change of an input
        return x * 2.0

    cf, ch = tt.compile(f), tt.compile(h)
    x = tt.arange(4.0)
    with tt.no_grad():
        for _ in range(2):
            np.testing.assert_allclose(_np(cf(x)), np.cumsum(_np(x)) + 1.0)
        a, b = tt.arange(4.0), tt.arange(4.0)
        for _ in range(2):
            np.testing.assert_allclose(_np(ch(a)), _np(h(b)))
    assert cf.last_reason and ch.last_reason


def test_forward_hooks_keep_running_eager():
    ours, _ = _pair(_mlp)
    seen = []
    ours.flatten.register_forward_hook(lambda module, inputs, output: seen.append(1))
    compiled = tt.compile(ours)
    with tt.no_grad():
        for _ in range(3):
            compiled(tt.randn(2, 1, 28, 28))
    assert len(seen) == 3 and "hooks" in compiled.last_reason


def test_grad_mode_runs_eager_with_correct_grads():
    ours, ref = _pair(_mlp)
    compiled = tt.compile(ours)
    x = np.random.default_rng(5).standard_normal((4, 1, 28, 28)).astype(np.float32)
    before = tt.compiler.stats()
    compiled(tt.from_numpy(x.copy())).sum().backward()
    ref(torch.from_numpy(x)).sum().backward()
    after = tt.compiler.stats()
    assert after["eager_calls"] == before["eager_calls"] + 1 and after["captures"] == before["captures"]
    for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(_np(p.grad), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_bad_arguments():
    with pytest.raises(TypeError, match="function or a Module"):
        tt.compile(3)
    with pytest.raises(ValueError, match="unknown backend"):
        tt.compile(lambda x: x, backend="nope")
