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


# ---- whole models: the CNN, the Transformer encoder classifier, embedding + LayerNorm --------------


def _cnn(lib):  # tests/programs/cnn_batchnorm.py's model
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Dropout(0.3), nn.Linear(8, 4))


def _encoder(lib, batch_first=True, norm_first=False, activation="relu"):
    nn = lib.nn

    class Classifier(nn.Module):  # tests/programs/transformer_classifier.py's model
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=batch_first, norm_first=norm_first,
                                               activation=activation)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 3)

        def forward(self, x):
            h = self.encoder(self.embed(x) if batch_first else self.embed(x).transpose(0, 1))
            return self.head(h.mean(1 if batch_first else 0))
    return Classifier()


def _embed_norm(lib):
    nn = lib.nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 16, padding_idx=0)
            self.norm = nn.LayerNorm(16)
            self.out = nn.Linear(16, 5)

        def forward(self, tokens):
            return lib.log_softmax(self.out(self.norm(self.embed(tokens))), dim=-1)
    return Tagger()


def _plan_kernels(compiled):
    return " ".join(e.plan.describe() for e in compiled._cache.values() if e)


def test_cnn_with_batchnorm_eval_compiles_whole():
    ours, ref = _pair(_cnn)
    ours.eval(), ref.eval()
    rng = np.random.default_rng(6)
    tt.compiler.reset()
    compiled = _check(ours, ref, [rng.standard_normal((n, 1, 12, 12)).astype(np.float32) for n in (4, 1)])
    assert compiled.last_reason is None and tt.compiler.stats()["capture_failures"] == 0
    assert "conv" in _plan_kernels(compiled)


@pytest.mark.parametrize("batch_first,norm_first,activation", [(True, False, "relu"), (False, True, "gelu")])
def test_transformer_encoder_classifier_eval_compiles_whole(batch_first, norm_first, activation):
    ours, ref = _pair(lambda lib: _encoder(lib, batch_first, norm_first, activation))
    ours.eval(), ref.eval()
    rng = np.random.default_rng(7)
    tt.compiler.reset()
    compiled = _check(ours, ref, [rng.integers(0, 50, (4, 12)).astype(np.int64)])
    assert compiled.last_reason is None and tt.compiler.stats()["capture_failures"] == 0
    assert "attention" in _plan_kernels(compiled)  # MultiheadAttention became one attention node


def test_embedding_layernorm_model_compiles_whole():
    ours, ref = _pair(_embed_norm)
    ours.eval(), ref.eval()
    rng = np.random.default_rng(8)
    compiled = _check(ours, ref, [rng.integers(0, 20, (3, 7)).astype(np.int64)])
    assert compiled.last_reason is None


# ---- single ops: compiled == eager turbo_torch == torch, and the call replayed a plan -------------


def _check_fn(make, arrays):
    """make(lib) -> a function of tensors; compiled turbo_torch against eager turbo_torch and torch."""
    fn, fn_torch = make(tt), make(torch)
    compiled = tt.compile(fn)
    ours = [tt.from_numpy(a.copy()) for a in arrays]
    with tt.no_grad():
        compiled(*ours)
        before = tt.compiler.stats()["replays"]
        got = compiled(*ours)
        assert tt.compiler.stats()["replays"] == before + 1, compiled.last_reason
        eager = fn(*ours)
    with torch.no_grad():
        want = fn_torch(*[torch.from_numpy(a.copy()) for a in arrays])
    got, eager, want = ((v if isinstance(v, tuple) else (v,)) for v in (got, eager, want))
    for g, e, w in zip(got, eager, want):
        np.testing.assert_allclose(_np(g), _np(e), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(g), w.numpy(), rtol=1e-4, atol=1e-5)


_rng = np.random.default_rng(9)


def _f(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


_OPS = {
    "conv2d_stride_groups_dilation": (lambda lib: lambda x, w, b: lib.nn.functional.conv2d(
        x, w, b, stride=2, padding=2, dilation=2, groups=2), [_f(2, 4, 9, 9), _f(6, 2, 3, 3), _f(6)]),
    "conv2d_same_unbatched": (lambda lib: lambda x, w: lib.nn.functional.conv2d(x, w, padding="same"),
                              [_f(3, 7, 7), _f(5, 3, 3, 3)]),
    "conv1d": (lambda lib: lambda x, w, b: lib.relu(lib.nn.functional.conv1d(x, w, b, stride=2, padding=1)),
               [_f(2, 3, 11), _f(4, 3, 3), _f(4)]),
    "batch_norm_eval_1d": (lambda lib: lambda x, m, v, w, b: lib.nn.functional.batch_norm(x, m, v, w, b, False),
                           [_f(5, 3, 4), _f(3), np.abs(_f(3)) + 0.5, _f(3), _f(3)]),
    "rms_norm": (lambda lib: lambda x, w: (lib.nn.functional.rms_norm(x, (6,), w),
                                           lib.nn.functional.rms_norm(x, (4, 6), eps=1e-3)), [_f(3, 4, 6), _f(6)]),
    "group_norm": (lambda lib: lambda x, w, b: lib.nn.functional.group_norm(x, 2, w, b), [_f(2, 4, 3, 3), _f(4), _f(4)]),
    "pools": (lambda lib: lambda x: (lib.nn.functional.max_pool2d(x, 3, 2, 1), lib.nn.functional.avg_pool2d(x, 2),
                                     lib.nn.functional.adaptive_avg_pool2d(x, (2, 3)),
                                     lib.nn.functional.max_pool1d(x.flatten(2), 4)), [_f(2, 3, 8, 8)]),
    "max_pool_indices": (lambda lib: lambda x: lib.nn.functional.max_pool2d(x, 2, return_indices=True),
                         [_f(1, 2, 6, 6)]),
    "sdpa_causal_and_mask": (lambda lib: lambda q, k, v, m: (
        lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)),
        [_f(2, 3, 5, 8), _f(2, 3, 5, 8), _f(2, 3, 5, 8), _f(5, 5)]),
    "activations": (lambda lib: lambda x: (lib.nn.functional.leaky_relu(x, 0.2), lib.nn.functional.elu(x),
                                           lib.nn.functional.hardtanh(x, -0.5, 0.5), lib.nn.functional.softplus(x, 2.0),
                                           lib.nn.functional.relu6(x * 4), lib.nn.functional.silu(x),
                                           lib.nn.functional.gelu(x, approximate="tanh"), lib.tanh(x).exp()),
                    [_f(4, 6)]),
    "views": (lambda lib: lambda x: (x.transpose(0, 2).reshape(5, -1), x.permute(2, 0, 1).contiguous(),
                                     x.unsqueeze(1).squeeze(1) * 2, x[:, 1:3, ::2] + 1, x[0, ..., None] - 1,
                                     x.mT @ x, lib.cat([x, x * 2], dim=1), lib.stack([x, -x], 1),
                                     x.flatten(1).t() + 0, x.narrow(2, 1, 3) * 1, x.select(1, 2) * 1,
                                     x[:1].expand(3, 4, 5) + 0),
              [_f(3, 4, 5)]),
    "split_and_chunk": (lambda lib: lambda x: tuple(p * 1 for p in (*x.chunk(3, 1), *lib.split(x, [1, 4], 1),
                                                                    *x.unbind(0))), [_f(2, 5)]),
    "reductions": (lambda lib: lambda x: (x.sum(), x.mean(1), x.sum((0, 2), keepdim=True), x.amax(-1),
                                          lib.logsumexp(x, 1), lib.softmax(x, dim=0)), [_f(3, 4, 5)]),
    "where_compare_masked_fill": (lambda lib: lambda x, y: (lib.where(x > y, x, y), (x >= 0.5) & (y < 0.0),
                                                            x.masked_fill(y > 0, -1.0), lib.maximum(x, y),
                                                            lib.where(x < 0, 0.0, x), x ** 2, 1 - x),
                                  [_f(4, 5), _f(4, 5)]),
    "batched_matmul_linear_3d": (lambda lib: lambda a, b, w: (lib.bmm(a, b), lib.nn.functional.linear(a, w)),
                                 [_f(2, 3, 4), _f(2, 4, 5), _f(6, 4)]),
}


@pytest.mark.parametrize("name", sorted(_OPS))
def test_captured_op_matches_eager_and_torch(name):
    make, arrays = _OPS[name]
    _check_fn(make, arrays)


def test_multihead_attention_forms():
    """need_weights=True (the default): recorded op by op; without weights (self- and cross-attention,
    bool key_padding_mask + float [B * H, Tq, Tk] attn_mask; a function calling the module from its
    closure): one attention node."""
    torch.manual_seed(1)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours = tt.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    ours.load_state_dict({k: tt.from_numpy(v.detach().numpy().copy()) for k, v in ref.state_dict().items()})
    q, kv = _f(2, 5, 16), _f(2, 7, 16)
    padding = np.array([[False] * 6 + [True], [False] * 7])
    scores_mask = _f(2 * 4, 5, 7)
    for args, kwargs in [((q, q, q), {}), ((q, kv, kv), {"need_weights": False}),
                         ((q, q, q), {"is_causal": False, "need_weights": False}),
                         ((q, kv, kv, padding, scores_mask), {"need_weights": False})]:
        def call(module, query, key, value, *masks, kwargs=kwargs):
            return module(query, key, value, *masks[:1], attn_mask=masks[1] if masks else None, **kwargs)
        compiled = tt.compile(lambda *a: call(ours, *a))  # ours: a module in the closure
        with tt.no_grad():
            compiled(*(tt.from_numpy(a.copy()) for a in args))
            before = tt.compiler.stats()["replays"]
            got = compiled(*(tt.from_numpy(a.copy()) for a in args))
        assert tt.compiler.stats()["replays"] == before + 1, compiled.last_reason
        with torch.no_grad():
            want = call(ref, *(torch.from_numpy(a.copy()) for a in args))
        np.testing.assert_allclose(_np(got[0]), want[0].numpy(), rtol=1e-4, atol=1e-5)
        if kwargs.get("need_weights", True):
            np.testing.assert_allclose(_np(got[1]), want[1].numpy(), rtol=1e-4, atol=1e-5)
        else:
            assert got[1] is None and "attention" in _plan_kernels(compiled)


# ---- refusals keep answers right and say why -------------------------------------------------------


def _compiled_cnn(train):
    ours, _ = _pair(_cnn)
    ours.train(train)
    return ours, tt.compile(ours), tt.randn(4, 1, 12, 12)


def test_training_mode_layers_refuse_with_a_reason():
    ours, compiled, x = _compiled_cnn(True)
    with tt.no_grad():
        compiled(x)
    assert "batch_norm in training mode" in compiled.last_reason
    ours.eval()
    ours[9].train()  # only the dropout in training mode: a submodule's flag is part of the signature
    with tt.no_grad():
        compiled(x)
    assert "dropout in training mode" in compiled.last_reason
    ours[9].eval()
    with tt.no_grad():
        compiled(x)
        before = tt.compiler.stats()["replays"]
        got = compiled(x)
        want = ours(x)
    assert tt.compiler.stats()["replays"] == before + 1 and compiled.last_reason is None
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-6)


def test_uncapturable_forms_refuse_with_a_reason():
    conv = tt.nn.Conv2d(2, 2, 3, padding=1).eval()
    x = tt.randn(2, 3, 8)
    cases = [(lambda a: tt.cumsum(a, -1) * 2, x, "not captured"),
             (lambda a: conv(tt.cumsum(a, -1)), tt.randn(1, 2, 5, 5), "not captured"),
             (lambda a: a[tt.tensor([0, 1])] * 2, x, "advanced indexing"),
             (lambda a: tt.nn.functional.dropout(a, 0.5), x, "dropout in training mode")]
    for fn, arg, reason in cases:
        compiled = tt.compile(fn)
        with tt.no_grad():
            for _ in range(2):
                if "dropout" not in reason:
                    np.testing.assert_allclose(_np(compiled(arg)), _np(fn(arg)), rtol=1e-6)
                else:
                    assert compiled(arg).shape == arg.shape
        assert reason in compiled.last_reason, compiled.last_reason


def test_module_changes_after_capture_are_seen():
    ours, compiled, x = _compiled_cnn(False)
    with tt.no_grad():
        compiled(x)
        ours[10].weight = nn.Parameter(tt.randn(4, 8))  # a replaced parameter is read again
        ours[10].bias = nn.Parameter(tt.randn(4))
        before = tt.compiler.stats()["replays"]
        got = compiled(x)
        assert tt.compiler.stats()["replays"] == before + 1
        np.testing.assert_allclose(_np(got), _np(ours(x)), rtol=1e-5, atol=1e-6)
        seen = []
        handle = ours[2].register_forward_hook(lambda m, i, o: seen.append(1))  # a hook added later runs
        compiled(x)
        assert seen == [1]
        handle.remove()
        before = tt.compiler.stats()["replays"]
        compiled(x)
        assert seen == [1] and tt.compiler.stats()["replays"] == before + 1


def test_fast_path_falls_through_to_the_signature():
    """The replay fast path tries the last plan first; any mismatch (shape, strides, a Python number
    argument, grad mode) must take the full signature and give the eager answer."""
    def f(x, scale=1.0):
        return tt.relu(x @ x.t()) * scale

    compiled = tt.compile(f)
    tt.compiler.reset()
    a, b = tt.randn(3, 4), tt.randn(5, 4)
    wide = tt.randn(4, 3).t()  # non-contiguous [3, 4]
    with tt.no_grad():
        for x, args in [(a, ()), (a, ()), (b, ()), (b, ()), (a, ()), (wide, ()), (wide, ()), (a, (2.0,)),
                        (a, (3.0,)), (a, ())]:
            np.testing.assert_allclose(_np(compiled(x, *args)), _np(f(x, *args)), rtol=1e-6)
    stats = tt.compiler.stats()
    assert stats["captures"] == 5 and stats["capture_failures"] == 0  # a, b, wide, scale 2, scale 3
    assert stats["replays"] == 5
    x = tt.randn(3, 4, requires_grad=True)
    y = compiled(x)  # grad mode with an input that requires grad: eager, with a gradient
    y.sum().backward()
    assert x.grad is not None and tt.compiler.stats()["eager_calls"] == stats["eager_calls"] + 1


# ---- pad, interpolate, transposed convolution, recurrent layers, creation ops (captured, not eager) ----


def _captured(fn, *args):
    """Runs fn compiled twice under no_grad; fullgraph=True raises if the capture was refused, and the
    second call must be a replay. Returns (eager turbo_torch result, replayed result)."""
    compiled = tt.compile(fn, fullgraph=True)
    with tt.no_grad():
        compiled(*args)
        before = tt.compiler.stats()["replays"]
        got = compiled(*args)
        want = fn(*args)
    assert tt.compiler.stats()["replays"] == before + 1 and compiled.last_reason is None
    return want, got


def _leaves(value):
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _against(fn_tt, fn_torch, *arrays, rtol=1e-6, atol=1e-6, exact=True):
    """The compiled replay equals eager turbo_torch (bit for bit when exact) and is close to torch."""
    want, got = _captured(fn_tt, *[tt.from_numpy(a.copy()) for a in arrays])
    ref = fn_torch(*[torch.from_numpy(a.copy()) for a in arrays])
    for g, w, r in zip(_leaves(got), _leaves(want), _leaves(ref), strict=True):
        assert tuple(g.shape) == tuple(r.shape) and str(g.dtype).split(".")[-1] == str(r.dtype).split(".")[-1]
        if exact:
            np.testing.assert_array_equal(_np(g), _np(w))
        else:
            np.testing.assert_allclose(_np(g), _np(w), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(g), r.detach().numpy(), rtol=rtol, atol=atol)


_RNG = np.random.default_rng(12)


def _data(*shape, dtype=np.float32):
    return _RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("pads,mode,value", [((1, 2), "constant", None), ((1, 2, 3, 0), "constant", 1.5),
                                             ((-1, 2, 3, -2), "constant", None), ((2, 1, 1, 2), "reflect", None),
                                             ((-1, 2, 1, 0), "reflect", None), ((2, 3, 0, 1), "replicate", None),
                                             ((1, 2, 2, 1), "circular", None), ((0, 0), "constant", None)])
def test_pad_is_captured(pads, mode, value):
    x = _data(2, 3, 5, 7)
    kw = {} if value is None else {"value": value}
    _against(lambda a: tt.nn.functional.pad(a, pads, mode, **kw) * 2,
             lambda a: torch.nn.functional.pad(a, pads, mode, **kw) * 2, x)


@pytest.mark.parametrize("padding_mode", ["reflect", "replicate", "circular"])
def test_conv_padding_modes_are_captured(padding_mode):
    ours, ref = _pair(lambda lib: lib.nn.Conv2d(3, 4, 3, padding=1, padding_mode=padding_mode))
    _against(ours.eval(), ref.eval(), _data(2, 3, 6, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,kw", [((2, 3, 5, 7), {"scale_factor": 2}), ((2, 3, 5, 7), {"size": (7, 4)}),
                                      ((2, 3, 5, 7), {"scale_factor": 1.5}),
                                      ((2, 3, 5, 7), {"size": (9, 11), "mode": "nearest-exact"}),
                                      ((2, 3, 5, 7), {"size": (9, 11), "mode": "bilinear"}),
                                      ((2, 3, 5, 7), {"scale_factor": 1.7, "mode": "bilinear", "align_corners": True}),
                                      ((2, 3, 8, 6), {"size": (3, 4), "mode": "bilinear"}),
                                      ((1, 2, 4, 4), {"scale_factor": (2, 0.5), "mode": "bilinear"}),
                                      ((2, 3, 9), {"scale_factor": 2.5, "mode": "linear"}),
                                      ((2, 3, 9), {"size": 4})])
def test_interpolate_is_captured(shape, kw):
    _against(lambda a: tt.nn.functional.interpolate(a, **kw), lambda a: torch.nn.functional.interpolate(a, **kw),
             _data(*shape), rtol=1e-5, atol=1e-6)


def test_interpolate_nearest_float64_and_upsample_module_are_captured():
    _against(lambda a: tt.nn.functional.interpolate(a, scale_factor=3), lambda a: torch.nn.functional.interpolate(
        a, scale_factor=3), _data(1, 2, 3, 4, dtype=np.float64))
    ours, ref = tt.nn.Upsample(scale_factor=2, mode="bilinear"), torch.nn.Upsample(scale_factor=2, mode="bilinear")
    _against(ours, ref, _data(2, 3, 4, 5), rtol=1e-5)


@pytest.mark.parametrize("kw,shape", [({"stride": 2, "padding": 1, "output_padding": 1}, (2, 4, 5, 6)),
                                      ({"stride": (1, 2), "groups": 2, "dilation": 2, "bias": False}, (2, 4, 5, 6)),
                                      ({"stride": 3, "padding": (0, 1)}, (4, 5, 6))])
def test_conv_transpose2d_is_captured(kw, shape):
    ours, ref = _pair(lambda lib: lib.nn.ConvTranspose2d(4, 6, (3, 2), **kw))
    _against(ours.eval(), ref.eval(), _data(*shape), rtol=1e-5, atol=1e-5)


def test_conv_transpose1d_is_captured():
    ours, ref = _pair(lambda lib: lib.nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1))
    _against(ours.eval(), ref.eval(), _data(2, 3, 7), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind,kw,shape", [
    ("LSTM", {}, (5, 2, 7)), ("LSTM", {"num_layers": 2, "batch_first": True}, (2, 70, 7)),
    ("LSTM", {"num_layers": 2, "bidirectional": True}, (5, 3, 7)), ("LSTM", {"proj_size": 4}, (4, 2, 7)),
    ("LSTM", {}, (6, 7)), ("GRU", {"num_layers": 2}, (5, 2, 7)),
    ("GRU", {"bidirectional": True, "batch_first": True}, (3, 4, 7)), ("RNN", {"nonlinearity": "relu"}, (5, 2, 7))])
def test_recurrent_layers_are_captured(kind, kw, shape):
    ours, ref = _pair(lambda lib: getattr(lib.nn, kind)(7, 6, **kw))
    _against(ours.eval(), ref.eval(), _data(*shape), rtol=1e-5, atol=1e-5, exact=False)


def test_recurrent_layers_with_initial_state_and_cells_are_captured():
    ours, ref = _pair(lambda lib: lib.nn.LSTM(7, 6, num_layers=2))
    _against(lambda x, h, c: ours(x, (h, c)), lambda x, h, c: ref(x, (h, c)), _data(5, 2, 7), _data(2, 2, 6),
             _data(2, 2, 6), rtol=1e-5, atol=1e-5, exact=False)
    for kind in ("LSTMCell", "GRUCell"):
        ours, ref = _pair(lambda lib: getattr(lib.nn, kind)(7, 6))
        _against(ours, ref, _data(3, 7), rtol=1e-5, atol=1e-5)
    ours, ref = _pair(lambda lib: lib.nn.GRUCell(7, 6))
    _against(ours, ref, _data(3, 7), _data(3, 6), rtol=1e-5, atol=1e-5)


def test_char_lstm_language_model_is_captured_whole():
    def build(lib):
        class CharLM(lib.nn.Module):  # tests/programs/char_lstm.py's model
            def __init__(self):
                super().__init__()
                self.embed = lib.nn.Embedding(20, 16)
                self.lstm = lib.nn.LSTM(16, 32, num_layers=2, batch_first=True)
                self.head = lib.nn.Linear(32, 20)

            def forward(self, x):
                out, _ = self.lstm(self.embed(x))
                return self.head(out)
        return CharLM()
    ours, ref = _pair(build)
    tokens = _RNG.integers(0, 20, (4, 24)).astype(np.int64)
    _against(ours.eval(), ref.eval(), tokens, rtol=1e-5, atol=1e-5, exact=False)


def test_creation_ops_are_captured_and_guarded():
    _against(lambda a: a * tt.full((2, 3), 2.5) + tt.ones_like(a) - tt.zeros(3),
             lambda a: a * torch.full((2, 3), 2.5) + torch.ones_like(a) - torch.zeros(3), _data(2, 3))

    def mutated(a):
        z = tt.zeros(2, 3)
        z.add_(1)  # the FULL node would replay the zeros: refused
        return a + z
    compiled = tt.compile(mutated)
    with tt.no_grad():
        for _ in range(2):
            np.testing.assert_array_equal(_np(compiled(tt.ones(2, 3))), np.full((2, 3), 2, np.float32))
    assert "modified in place" in compiled.last_reason
