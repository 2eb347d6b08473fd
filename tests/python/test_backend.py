"""The torch.compile backend against PyTorch eager as the oracle: model coverage (the seed model, MLPs,
a CNN, TransformerEncoderLayer, GPT-2 and BERT blocks from transformers configs with random weights),
training steps, the structural plan cache, threads, bad inputs that must fall back, the Plan API and
BLAKE3 against the `blake3` package.

Tolerances are assert_close's float32 defaults (rtol 1.3e-6, atol 1e-5) unless a comment next to the
check says why a model needs more (GEMM blocking sums in a different order than oneDNN/MKL)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")

import torchburn  # noqa: E402
import torchburn.backend  # noqa: E402
from torchburn import _C  # noqa: E402
from torchburn.backend import Explanation, TorchburnFallbackWarning  # noqa: E402
from torchburn.backend.diagnostics import Recorder  # noqa: E402

torchburn.register()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def compiled(model, **kwargs):
    return torch.compile(model, backend="torchburn", **kwargs)


def check_model(model, *inputs, rtol=None, atol=None, grad_modes=(False, True), native=1.0):
    """Compiled == eager under no_grad (inference path) and with grad enabled (aot_autograd), and the
    model really ran natively: every graph had native regions, none failed to lower, no region handed
    a call to PyTorch at run time, and at least `native` of the compute nodes ran natively (1.0 unless
    the test names the ops that stay in PyTorch)."""
    fn = compiled(model)
    for grad in grad_modes:
        with Recorder() as recorder, torch.set_grad_enabled(grad):
            expected = model(*inputs)
            got = fn(*inputs)
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
        assert recorder.graphs and all(g.regions for g in recorder.graphs), [vars(g) for g in recorder.graphs]
        assert not any(g.failed_regions for g in recorder.graphs), [g.failed_regions for g in recorder.graphs]
        report = Explanation(graphs=list(recorder.graphs))
        assert not report.runtime_fallbacks, f"grad={grad}: {report}"
        assert report.native_share >= native, f"grad={grad}: {report}"
    return fn


def assert_all_native(recorder):
    """Every compute node of the calls made under `recorder` ran natively (no run-time fallback)."""
    report = Explanation(graphs=list(recorder.graphs))
    assert not report.runtime_fallbacks and report.native_share == 1.0, str(report)


# ---- models ---------------------------------------------------------------------------------------


def seed_model():
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()


class ResidualMLP(torch.nn.Module):
    def __init__(self, d=256, hidden=512, blocks=3):
        super().__init__()
        self.inp = torch.nn.Linear(128, d)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(blocks))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, hidden) for _ in range(blocks))
        self.down = torch.nn.ModuleList(torch.nn.Linear(hidden, d) for _ in range(blocks))
        self.out = torch.nn.Linear(d, 10)

    def forward(self, x):
        x = self.inp(x)
        for norm, up, down in zip(self.norms, self.up, self.down):
            x = x + down(torch.nn.functional.silu(up(norm(x))))
        return self.out(x)


def small_cnn():
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10),
    )


def randomize_batch_norm(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model


def test_seed_model():
    model = seed_model()
    check_model(model, torch.randn(32, 512))


def test_readme_mlp():
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    check_model(model, torch.randn(64, 784))


def test_mlp_silu_layernorm_residual():
    check_model(ResidualMLP().eval(), torch.randn(64, 128))


def test_small_cnn_eval():
    model = randomize_batch_norm(small_cnn()).eval()
    check_model(model, torch.randn(8, 3, 64, 64))


def test_transformer_encoder_layer():
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).eval()
    x = torch.randn(4, 128, 256)
    # under no_grad PyTorch runs its fused fast path; torchburn decomposes it into GEMMs, attention
    # and norms, which accumulate in a different order: a few ulps more than the f32 default
    check_model(layer, x, rtol=1e-4, atol=1e-4)
    gelu_layer = torch.nn.TransformerEncoderLayer(64, 2, 128, batch_first=True, activation="gelu",
                                                  norm_first=True).eval()
    check_model(gelu_layer, torch.randn(2, 16, 64), rtol=1e-4, atol=1e-4)


def test_gpt2_block():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = transformers.GPT2Config(n_embd=128, n_head=4, n_layer=1, n_positions=128)
    config._attn_implementation = "sdpa"
    block = GPT2Block(config).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            out = self.block(x)
            return out[0] if isinstance(out, tuple) else out

    # the tanh-GELU formula is fused into one kernel (same math, different rounding): 1e-4
    check_model(Wrapper().eval(), torch.randn(2, 64, 128), rtol=1e-4, atol=1e-4)


def test_tiny_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    bert = transformers.BertModel(config).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)  # gather on int buffers stays in PyTorch
        # the mask and position arithmetic on int64 (arange, add, ge, bitwise_and, gather, index: 10 of
        # 107 nodes) stays in PyTorch; everything on floats runs natively
        check_model(Wrapper().eval(), ids, mask, rtol=1e-4, atol=1e-4, native=0.9)


def test_gelu_exact_and_tanh():
    for approximate in ("none", "tanh"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(approximate=approximate)).eval()
        check_model(model, torch.randn(8, 64) * 3)


def test_elementwise_chain_and_broadcast():
    class Chain(torch.nn.Module):
        def forward(self, x, y):
            z = torch.sigmoid(x) * y + 0.5
            z = torch.where(z > 1.0, z, -z)
            return torch.clamp(z, -2, 2).exp() / (1 + y.abs()), torch.softmax(x, dim=-1)

    check_model(Chain(), torch.randn(4, 8, 16), torch.randn(8, 1))


def test_norm_epilogue_fusion():
    class NormThenElementwise(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(48)
            self.scale = torch.nn.Parameter(torch.randn(48))

        def forward(self, x, gate):
            return torch.nn.functional.gelu(self.norm(x)) * self.scale + gate

    model = NormThenElementwise().eval()
    x, gate = torch.randn(6, 10, 48), torch.randn(10, 1)
    check_model(model, x, gate, grad_modes=(False,))
    with torch.no_grad():
        report = torchburn.explain(model, x, gate)
    assert any(line.startswith("layer_norm+elementwise") for line in report.fusions), str(report)


def _op_cases():
    F = torch.nn.functional
    g = torch.Generator().manual_seed(7)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    x = r(16, 8)
    attention = (r(2, 2, 5, 8), r(2, 2, 7, 8), r(2, 2, 7, 8))
    return {
        "transposed input": (lambda a, b: torch.relu(a @ b) + 1, (x.t(), r(16, 4)), {}),
        "sum to scalar": (lambda a: (a * 2).sum(), (x,), {}),
        "mean keepdim": (lambda a: a.mean(dim=1, keepdim=True) * a, (x,), {}),
        "bfloat16 elementwise": (lambda a: F.silu(a) * 2 + a, (x.bfloat16(),), {}),
        "float16 softmax": (lambda a: torch.softmax(a, -1), (x.half(),), {"rtol": 1e-3, "atol": 1e-3}),
        "var and std": (lambda a: (a.var(dim=0), a.std(dim=1, keepdim=True)), (x,), {}),
        "cat and stack": (lambda a, b: (torch.cat([a, b], 0).relu(), torch.stack([a, b], 1) * 2), (x, x + 1), {}),
        "expand and slice": (lambda a: a[:, 2:6].expand(2, 16, 4) + a[:, :4], (x,), {}),
        "where with scalar": (lambda a: torch.where(a > 0, a, 0.5), (x,), {}),
        "masked_fill softmax": (lambda a: a.masked_fill(a < 0, -1e9).softmax(-1), (x,), {}),
        "clamp family": (lambda a: (a.clamp(-0.5, 0.5), F.hardtanh(a), a.clamp(min=0.1)), (x,), {}),
        "pow and rsub": (lambda a: (a.pow(2), 1 - a, 2 ** a, a.abs().pow(0.5)), (x,), {}),
        "cross entropy": (lambda a, t: F.cross_entropy(a, t), (x, torch.randint(0, 8, (16,), generator=g)), {}),
        "layer_norm without affine": (lambda a: F.layer_norm(a, (8,)), (x,), {}),
        "group norm": (torch.nn.GroupNorm(2, 4).eval(), (r(2, 4, 5, 5),), {}),
        "avg pool": (torch.nn.AvgPool2d(3, 2, 1), (r(2, 3, 9, 9),), {}),
        "grouped strided conv": (torch.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2).eval(), (r(2, 4, 9, 9),),
                                 {"rtol": 1e-4, "atol": 1e-4}),
        "1x1 conv": (torch.nn.Conv2d(4, 8, 1).eval(), (r(2, 4, 9, 9),), {"rtol": 1e-4, "atol": 1e-4}),
        "attention bool mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                attention + (r(5, 7) > 0,), {"rtol": 1e-4, "atol": 1e-4}),
        "attention float mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                                 attention + (r(2, 1, 5, 7),), {"rtol": 1e-4, "atol": 1e-4}),
        "causal attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                             (attention[0], attention[0] * 2, attention[0] + 1), {"rtol": 1e-4, "atol": 1e-4}),
        "bmm": (lambda a, b: torch.bmm(a, b).tanh(), (r(3, 4, 5), r(3, 5, 6)), {"rtol": 1e-5, "atol": 1e-5}),
        "matmul broadcast": (lambda a, b: a @ b, (r(2, 3, 4, 5), r(3, 5, 6)), {"rtol": 1e-5, "atol": 1e-5}),
        "empty tensor": (lambda a: a * 2, (r(0, 4),), {}),
        "0-d input": (lambda a, b: a * b + 1, (torch.tensor(3.0), r(4)), {}),
        "NaN propagation": (lambda a: (torch.relu(a), torch.maximum(a, torch.zeros_like(a)), a.amax(0)),
                            (torch.tensor([[float("nan"), 1.0], [-1.0, 2.0]]),), {"equal_nan": True}),
        "losses": (lambda a, b: (F.mse_loss(a, b), F.smooth_l1_loss(a, b), F.binary_cross_entropy(a.sigmoid(), b.sigmoid())),
                   (x, x.flip(0)), {}),
        "embedding with padding_idx": (torch.nn.Embedding(10, 4, padding_idx=0), (torch.tensor([[0, 3, 9]]),), {}),
        "activations": (lambda a: (F.softplus(a), F.elu(a), F.mish(a), F.hardswish(a), F.leaky_relu(a, 0.2)), (x,),
                        {"rtol": 1e-5, "atol": 1e-5}),
    }


@pytest.mark.parametrize("case", list(_op_cases()))
def test_op_coverage_runs_natively(case):
    fn, inputs, tolerance = _op_cases()[case]
    with Recorder() as recorder, torch.no_grad():
        expected = fn(*inputs)
        got = compiled(fn)(*inputs)
    torch.testing.assert_close(got, expected, **tolerance)
    assert recorder.graphs and all(g.regions for g in recorder.graphs)
    for graph in recorder.graphs:
        assert not graph.failed_regions and not graph.fallback_ops, (graph.failed_regions, graph.fallback_ops)
    assert_all_native(recorder)


@pytest.mark.parametrize("seed", range(12))
def test_random_elementwise_chains(seed):
    """Random chains of unary/binary ops over broadcast operands (fused into one sweep) equal eager."""
    rng = torch.Generator().manual_seed(seed)
    unary = [torch.tanh, torch.sigmoid, torch.relu, torch.exp, torch.nn.functional.silu, torch.neg, torch.abs,
             lambda t: torch.nn.functional.gelu(t, approximate="tanh"), torch.erf, lambda t: t * t]
    binary = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum, lambda a, b: a / (b.abs() + 1)]
    shapes = [(3, 1, 5), (1, 4, 5), (3, 4, 1), (5,), (1,), (3, 4, 5)]
    inputs = [torch.randn(*shapes[int(i)], generator=rng) for i in torch.randint(0, len(shapes), (3,), generator=rng)]
    plan = [(int(torch.randint(0, 2, (1,), generator=rng)), int(torch.randint(0, 10, (1,), generator=rng)),
             int(torch.randint(0, 3, (1,), generator=rng))) for _ in range(6)]

    def fn(a, b, c):
        values = [a, b, c]
        x = a
        for kind, op, operand in plan:
            x = unary[op % len(unary)](x) if kind == 0 else binary[op % len(binary)](x, values[operand])
        return x * 0.5 + 1

    with Recorder() as recorder, torch.no_grad():
        got = compiled(fn)(*inputs)
    torch.testing.assert_close(got, fn(*inputs), rtol=1e-5, atol=1e-5)
    assert all(g.regions and not g.failed_regions and not g.fallback_ops for g in recorder.graphs)
    assert_all_native(recorder)


@pytest.mark.parametrize("seed", range(16))
def test_random_conv_blocks(seed):
    """Random convolution blocks (kernel, stride, padding, dilation, groups, widths around the direct
    kernel's vector widths; eval batch norm, activation and residual fused into the convolution;
    pooling) equal eager at every ISA this CPU supports (plans dispatch kernels at run time)."""
    rng = torch.Generator().manual_seed(100 + seed)

    def pick(*options):
        return options[int(torch.randint(0, len(options), (1,), generator=rng))]

    cin, cout = pick(1, 3, 8), pick(4, 13, 16, 29)
    groups = pick(1, 1, 2) if cin % 2 == 0 and cout % 2 == 0 else 1
    kernel = (pick(1, 3, 5), pick(1, 3, 5))
    stride, dilation = (pick(1, 1, 2), pick(1, 1, 2)), (pick(1, 2), pick(1, 1, 2))
    padding = (pick(0, 1, 2), pick(0, 1, 2))
    height, width = pick(7, 12), pick(9, 16, 17, 33, 40)
    out_size = [(size + 2 * p - d * (k - 1) - 1) // s + 1
                for size, p, d, k, s in zip((height, width), padding, dilation, kernel, stride)]
    if min(out_size) < 1:  # the drawn window does not fit: same-size padding without dilation does
        dilation, padding = (1, 1), (kernel[0] // 2, kernel[1] // 2)
    conv = torch.nn.Conv2d(cin, cout, kernel, stride, padding, dilation, groups, bias=pick(True, False))
    bn = torch.nn.BatchNorm2d(cout)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1, generator=rng)
        bn.running_var.uniform_(0.5, 2, generator=rng)
    activation = pick(torch.nn.ReLU(), torch.nn.SiLU(), torch.nn.GELU(), torch.nn.Identity())
    residual, pool = pick(True, False), pick(None, "max", "avg")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.activation = conv, bn, activation

        def forward(self, x, skip):
            y = self.activation(self.bn(self.conv(x)))
            if residual:
                y = y + skip
            if pool == "max":
                y = torch.nn.functional.max_pool2d(y, 2, ceil_mode=True)
            elif pool == "avg":
                y = torch.nn.functional.avg_pool2d(y, 2, ceil_mode=True)
            return y

    block = Block().eval()
    x = torch.randn(2, cin, height, width, generator=rng)
    with torch.no_grad():
        skip = torch.randn(block.conv(x).shape, generator=rng)
    fn = compiled(block)
    info = torchburn.cpu_info()
    try:
        for isa in info["supported_isas"]:
            _C.set_isa(isa)
            with Recorder() as recorder, torch.no_grad():
                got = fn(x, skip)
                expected = block(x, skip)
            # batch norm folds into the weights, so products round differently from conv-then-normalize
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=lambda m: f"{isa}: {m}")
            assert all(not g.failed_regions and not g.fallback_ops for g in recorder.graphs)
            assert_all_native(recorder)
    finally:
        _C.set_isa(info["best_isa"])


# ---- fallback ------------------------------------------------------------------------------------


def test_unsupported_op_falls_back_with_one_warning():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 16)

        def forward(self, x):
            return torch.cummax(self.fc(x), 1).values.relu()  # cummax: not lowered

    model = Model().eval()
    x = torch.randn(4, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = compiled(model)
        with torch.no_grad():
            torch.testing.assert_close(fn(x), model(x))
            torch.testing.assert_close(fn(x + 1), model(x + 1))
    messages = [str(w.message) for w in caught if issubclass(w.category, TorchburnFallbackWarning)]
    assert sum("cummax" in m for m in messages) <= 1  # once per op kind (maybe 0: warned earlier)
    report = torchburn.explain(model, x)
    assert any("cummax" in op for op in report.fallback_ops)
    assert "addmm.default" in report.native_ops


def test_quiet_silences_fallback_warnings():
    code = ("import warnings, torch, torchburn\n"
            "torchburn.register()\n"
            "m = torch.compile(lambda x: torch.roll(x, 1, 0) * 2, backend='torchburn')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    m(torch.randn(5))\n"
            "print(sum('torchburn' in str(x.message) for x in w))\n")
    env = dict(os.environ, TORCHBURN_QUIET="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0"


def test_debug_logs_to_stderr():
    code = ("import torch, torchburn\n"
            "torchburn.register()\n"
            "m = torch.compile(torch.nn.Linear(4, 4), backend='torchburn')\n"
            "with torch.no_grad():\n"
            "    m(torch.randn(2, 4))\n")
    env = dict(os.environ, TORCHBURN_DEBUG="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "[torchburn]" in result.stderr and "gemm" in result.stderr


def test_float64_complex_and_int_models_fall_back():
    model = torch.nn.Linear(8, 8).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        torch.testing.assert_close(compiled(model)(x), model(x))
        fn = compiled(lambda z: (z * z).sum())
        z = torch.randn(4, dtype=torch.complex64)
        torch.testing.assert_close(fn(z), (z * z).sum())
        ints = torch.arange(10)
        torch.testing.assert_close(compiled(lambda a: a * 3 + 1)(ints), ints * 3 + 1)


def test_input_mutation_and_aliasing_outputs():
    def mutate(x, y):
        x.add_(1)
        return x * y

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    a2 = a.clone()
    with torch.no_grad():
        got = compiled(mutate)(a, b)
    expected = mutate(a2, b)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(a, a2)  # the input was mutated like eager

    def alias(x):
        return x.view(-1), x.t(), x * 2

    x = torch.randn(3, 5)
    with torch.no_grad():
        outs = compiled(alias)(x)
    for got, expected in zip(outs, alias(x)):
        torch.testing.assert_close(got, expected)


def test_data_dependent_control_flow():
    def branchy(x):
        y = torch.relu(x @ x.t())
        if y.sum() > 0:
            return y * 2
        return y - 1

    x = torch.randn(6, 6)
    with torch.no_grad():
        torch.testing.assert_close(compiled(branchy)(x), branchy(x))


def test_dynamic_shapes_specialize():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    fn = compiled(model, dynamic=True)
    with torch.no_grad():
        for batch in (3, 7, 3, 12):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(fn(x), model(x))


def test_runtime_failure_falls_back_to_eager():
    # an index out of range makes the plan fail at run time; the region then runs in PyTorch, which
    # raises exactly what eager raises
    embedding = torch.nn.Embedding(10, 4)
    fn = compiled(lambda ids: embedding(ids) * 2)
    with torch.no_grad():
        good = torch.tensor([1, 2, 3])
        torch.testing.assert_close(fn(good), embedding(good) * 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TorchburnFallbackWarning)
            with pytest.raises(IndexError):
                fn(torch.tensor([1, 12, 3]))


# ---- training ------------------------------------------------------------------------------------


def training_step(model, x, target):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return loss.detach(), grads, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_step_matches_eager(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        x = torch.randn(64, 784)
    else:
        model = small_cnn()
        x = torch.randn(4, 3, 32, 32)
    target = torch.randint(0, 10, (x.shape[0],))
    reference = copy.deepcopy(model)
    loss_c, grads_c, params_c = training_step(compiled(model), x, target)
    loss_e, grads_e, params_e = training_step(reference, x, target)
    torch.testing.assert_close(loss_c, loss_e)
    # gradients are sums over the batch computed by different GEMM/convolution blockings
    for got, expected in zip(grads_c, grads_e):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for got, expected in zip(params_c, params_e):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    if kind == "cnn":  # batch norm running statistics were updated like eager
        for (name, b_c), (_, b_e) in zip(model.named_buffers(), reference.named_buffers()):
            torch.testing.assert_close(b_c, b_e, msg=name)


def test_select_and_slice_backward_run_natively():
    # the gradients of x[i] and x[a:b] (select_backward / slice_backward: zeros with the gradient
    # placed inside) are lowered, so the backward of a model that splits a fused tensor stays native
    def split_model(x, w):
        h = x @ w
        pairs = h.unflatten(-1, (2, 8))
        q, k = pairs[:, 0], pairs.select(1, -1)  # selects along a middle dim
        return (q * k.tanh() + h[:, 3:11] - h[:, -5:-1].sum(-1, keepdim=True) + h[1:, :8].mean() + h[2, 4]).sum(-1)

    x = torch.randn(6, 12, requires_grad=True)
    w = torch.randn(12, 16, requires_grad=True)
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    report = torchburn.explain(split_model, x, w)
    assert not any("select_backward" in op or "slice_backward" in op for op in report.fallback_ops), report
    assert any("select_backward" in op for op in report.native_ops), report
    assert any("slice_backward" in op for op in report.native_ops), report
    torch._dynamo.reset()
    out = compiled(split_model)(x, w)
    out.sum().backward()
    expected = split_model(x_ref, w_ref)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_strided_slice_backward_falls_back():
    # slice_backward with a step (x[:, ::2]) is not lowered: it runs in PyTorch, the rest stays
    # native, and the gradients still equal eager's
    def fn(x, w):
        h = (x @ w).tanh()
        return (h[:, ::2] * 3).sum(-1) + h[:, 1:4].sum(-1)

    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(8, 10, requires_grad=True)
    x_ref, w_ref = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(fn, x, w)
        torch._dynamo.reset()
        out = compiled(fn)(x, w)
    assert any("slice_backward" in op for op in report.fallback_ops), report
    assert any("slice_backward" in op for op in report.native_ops), report  # the step-1 slice
    out.sum().backward()
    expected = fn(x_ref, w_ref)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(w.grad, w_ref.grad)


# ---- cache ---------------------------------------------------------------------------------------


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()


def test_cache_hit_miss_and_structural_sharing():
    torchburn.cache_clear()
    a, b = mlp(1), mlp(2)  # same structure, different weights
    x = torch.randn(5, 32)
    with torch.no_grad():
        fa = compiled(a, dynamic=False)
        torch.testing.assert_close(fa(x), a(x))
        stats = torchburn.cache_stats()
        assert (stats["size"], stats["misses"], stats["hits"]) == (1, 1, 0)
        torch._dynamo.reset()  # a fresh Dynamo compile of b reaches the backend (else Dynamo reuses a's code)
        fb = compiled(b, dynamic=False)
        torch.testing.assert_close(fb(x), b(x))  # a's plan, b's weights
        stats = torchburn.cache_stats()
        assert (stats["size"], stats["misses"], stats["hits"]) == (1, 1, 1)
        for _ in range(3):  # cached calls do not touch the cache at all
            fb(x)
        assert torchburn.cache_stats()["hits"] == 1
        # a new input shape is a new plan
        y = torch.randn(9, 32)
        torch.testing.assert_close(fb(y), b(y))
        stats = torchburn.cache_stats()
        assert stats["size"] == 2 and stats["misses"] == 2


def test_cache_lru_eviction():
    torchburn.cache_clear()
    torchburn.backend.set_cache_size(graphs=2, prepared=2)
    try:
        with torch.no_grad():
            for width in (8, 16, 24):
                model = torch.nn.Linear(width, 4).eval()
                x = torch.randn(2, width)
                torch.testing.assert_close(compiled(model)(x), model(x))
        stats = torchburn.cache_stats()
        assert stats["capacity"] == 2 and stats["size"] == 2 and stats["evictions"] == 1
        assert stats["graphs"]["evictions"] == 1
    finally:
        torchburn.backend.set_cache_size(graphs=1024, prepared=1024)


def test_cache_size_from_environment():
    code = "import torchburn; s = torchburn.cache_stats(); print(s['capacity'], s['graphs']['capacity'])"
    env = dict(os.environ, TORCHBURN_PREPARED_CACHE_SIZE="3", TORCHBURN_CACHE_SIZE="5")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "5"]


# ---- threads -------------------------------------------------------------------------------------


def test_eight_threads_one_compiled_model():
    model = ResidualMLP().eval()
    fn = compiled(model)
    inputs = [torch.randn(16, 128) for _ in range(8)]
    with torch.no_grad():
        expected = [model(x) for x in inputs]
        fn(inputs[0])  # compile once up front
    results = [None] * 8
    errors = []

    def work(i):
        try:
            with torch.no_grad():
                for _ in range(20):
                    results[i] = fn(inputs[i])
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got, want in zip(results, expected):
        torch.testing.assert_close(got, want)


# ---- the graph and Plan API ----------------------------------------------------------------------


def build_linear_graph(k=8, n=16, label="x"):
    table = _C.graph_op_table()
    g = _C.Graph()
    x = g.input("float32", (4, k))
    w = g.input("float32", (n, k))
    b = g.input("float32", (n,))
    wt = g.node("permute", [w], {"ndim": 2, "dims": [1, 0]}, label)
    y = g.node("matmul", [x, wt, b], {"has_bias": 1})
    g.output(g.node("unary", [y], {"op": table["unary"].index("gelu"), "dtype": "float32"}))
    return g


def test_structural_hash_covers_structure_not_labels():
    blake3 = pytest.importorskip("blake3")
    g1, g2, g3 = build_linear_graph(label="a"), build_linear_graph(label="b"), build_linear_graph(n=17)
    assert g1.serialize() == g2.serialize() and g1.hash() == g2.hash()
    assert g1.hash() != g3.hash()
    assert g1.hash() == blake3.blake3(g1.serialize()).digest()
    strided = _C.Graph()
    contiguous = _C.Graph()
    strided.input("float32", (4, 8), (1, 4))
    contiguous.input("float32", (4, 8))
    assert strided.serialize() != contiguous.serialize()


def test_plan_call_fallback_and_mismatch():
    plan, _ = build_linear_graph().compile()
    x, w, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)
    expected = torch.nn.functional.gelu(x @ w.t() + b)
    (out,) = plan(x, w, b)
    torch.testing.assert_close(out, expected)
    assert "gemm+bias+gelu" in plan.describe()
    with pytest.raises(_C.PlanInputMismatch):
        plan(torch.randn(5, 8), w, b)
    plan.fallback = lambda *args: ("eager",)
    assert plan(torch.randn(5, 8), w, b) == ("eager",)
    assert plan(x.t().contiguous().t(), w, b) == ("eager",)  # strides differ from the plan's
    assert plan.fallbacks == 2
    # run_seconds counts time inside the plan's steps only: it grows with native runs, not fallbacks
    before = plan.run_seconds
    plan(x, w, b)
    after = plan.run_seconds
    assert after > before >= 0.0
    plan(torch.randn(5, 8), w, b)
    assert plan.run_seconds == after and plan.calls == plan.fallbacks + 3
    # numpy inputs give torchburn tensors
    np = pytest.importorskip("numpy")
    (arr,) = plan(x.numpy(), w.numpy(), b.numpy())
    np.testing.assert_allclose(np.from_dlpack(arr), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_graph_builder_rejects_bad_nodes():
    g = _C.Graph()
    x = g.input("float32", (2, 3))
    with pytest.raises(ValueError):
        g.node("matmul", [x, x], {})  # [2,3] @ [2,3]
    with pytest.raises(ValueError):
        g.node("unary", [x + 5], {})  # no such value
    with pytest.raises(ValueError):
        g.node("unary", [x], {"no_such_param": 1})
    with pytest.raises(ValueError):
        g.node("no_such_op", [x], {})


def test_blake3_matches_reference_package():
    blake3 = pytest.importorskip("blake3")
    generator = torch.Generator().manual_seed(3)
    key = bytes(range(32))
    for size in (0, 1, 63, 64, 65, 1023, 1024, 1025, 4096, 5000, 70000):
        data = bytes(torch.randint(0, 256, (size,), generator=generator, dtype=torch.uint8).tolist())
        assert _C.blake3(data) == blake3.blake3(data).digest()
        assert _C.blake3(data, length=100) == blake3.blake3(data).digest(100)
        assert _C.blake3(data, key=key) == blake3.blake3(data, key=key).digest()
        assert _C.blake3(data, derive_key_context="torchburn tests") == \
            blake3.blake3(data, derive_key_context="torchburn tests").digest()


# ---- ops of the op table lower by name (no per-op rule) ------------------------------------------

_TABLE_UNARY_CASES = ["sinc", "asinh", "acosh", "atanh", "asin", "acos", "sinh", "cosh", "log10", "erfc", "erfinv",
                      "lgamma", "digamma", "frac", "logical_not", "isnan", "isfinite", "signbit", "expm1", "exp2"]


@pytest.mark.parametrize("name", _TABLE_UNARY_CASES)
def test_table_unary_ops_lower_natively(name):
    domain = {"acosh": (1.5, 3.0), "atanh": (-0.9, 0.9), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9),
              "erfinv": (-0.9, 0.9), "lgamma": (0.5, 3.0), "digamma": (0.5, 3.0), "log10": (0.1, 3.0)}.get(name, (-2.0, 2.0))
    x = torch.empty(4, 33).uniform_(*domain)

    def fn(x):
        y = getattr(torch, name)(x)
        return y.float() * 2 if y.dtype == torch.bool else y * 2 + 1

    compiled_fn = compiled(fn)
    with Recorder() as recorder:
        got = compiled_fn(x)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-5)
    assert_all_native(recorder)


def test_plan_reduce_over_an_empty_input():
    """A plan value of 0 elements arrives without memory (NULL data): ops must see an empty tensor."""
    table = _C.graph_op_table()
    g = _C.Graph()
    x = g.input("float32", (0, 3))
    g.output(g.node("reduce", [x], {"op": table["reduce"].index("sum"), "dim_mask": 1, "keepdim": 0,
                                    "dtype": "float32"}))
    plan, _ = g.compile()
    (out,) = plan(torch.ones(0, 3))
    torch.testing.assert_close(torch.from_dlpack(out) if not isinstance(out, torch.Tensor) else out, torch.zeros(3))


@pytest.mark.parametrize("name", ["hypot", "copysign", "xlogy", "logaddexp", "fmax", "fmin", "floor_divide",
                                  "nextafter", "atan2", "remainder", "fmod"])
def test_table_binary_ops_lower_natively(name):
    a = torch.empty(3, 17).uniform_(0.5, 2.0)
    b = torch.empty(3, 17).uniform_(0.5 if name == "xlogy" else -2.0, 2.0)

    def fn(a, b):
        return getattr(torch, name)(a, b) * 2

    compiled_fn = compiled(fn)
    with Recorder() as recorder:
        got = compiled_fn(a, b)
    torch.testing.assert_close(got, fn(a, b), rtol=1e-5, atol=1e-5)
    assert_all_native(recorder)


def _forward_plans(recorder):
    return [r.plan for g in recorder.graphs if g.kind == "forward" for r in g.runners]


def test_grad_on_conv_outputs_are_written_in_place():
    """With grad on, aot_autograd saves the conv results for the backward: they are graph outputs of the
    forward plan. A float32 conv, max_pool2d (values and indices) and avg_pool2d write their results
    straight into the output buffers, so the conv/bn/relu/pool forward plan has no copy step at all (it
    had one per conv and two per max pool before), and outputs and gradients still equal eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2, ceil_mode=True)).eval()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12)
    with Recorder() as recorder:
        out = compiled(model)(x)
    plans = _forward_plans(recorder)
    assert len(plans) == 1
    steps = plans[0].describe().splitlines()
    assert sum(line.startswith("conv2d") for line in steps) == 2, steps
    assert sum(line.startswith(("max_pool2d", "avg_pool2d")) for line in steps) == 2, steps
    assert not [line for line in steps if line.startswith("copy")], steps
    expected = reference(x)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)


def test_repeated_output_shares_one_buffer():
    """A region returning a value and its detach alias (aot_autograd does so for saved activations) gets
    one output buffer: the plan marks output 1 as an alias of output 0, runs no copy, and returns the
    same tensor twice."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchburn.backend.compiler import build_plan

    def region(x):
        y = torch.relu(x * 2.0)
        return y, y.detach(), x + 1.0

    x = torch.randn(4, 16)
    gm = make_fx(region)(x)
    plan, _, description = build_plan(gm)
    assert [plan.output_alias(j) for j in range(plan.num_outputs)] == [None, 0, None]
    assert "copy" not in description, description
    y, alias, z = plan(x)
    assert alias is y
    torch.testing.assert_close(y, torch.relu(x * 2.0))
    torch.testing.assert_close(z, x + 1.0)
    for method, count, what in ((plan.output_alias, plan.num_outputs, "output"),
                                (plan.output_info, plan.num_outputs, "output"),
                                (plan.input_info, 1, "input")):
        for bad in (-1, count):
            with pytest.raises(IndexError, match=f"{what} index out of range"):
                method(bad)
