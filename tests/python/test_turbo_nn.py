"""turbo_torch.nn against torch.nn: the same module built on both sides, the torch weights loaded into
ours through load_state_dict, then outputs, input gradients and parameter gradients compared; losses
in every reduction; Module semantics (registration, state_dict keys and errors, repr, hooks)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import turbo_torch as tt  # noqa: E402
from turbo_torch import nn as tnn  # noqa: E402


def to_tt(x):
    if isinstance(x, torch.Tensor):
        values = x.detach()
        result = tt.tensor(values.tolist() if values.ndim else values.item(),
                           dtype=getattr(tt, str(values.dtype).replace("torch.", ""))).reshape(tuple(values.shape))
        return result
    return x


def to_np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double().numpy()
    return np.array(x.detach().tolist(), dtype=np.float64).reshape(tuple(x.shape))


def copy_state(torch_module, ours):
    ours.load_state_dict({k: to_tt(v) for k, v in torch_module.state_dict().items()})


def close(a, b, rtol=1e-5, atol=1e-5, what=""):
    np.testing.assert_allclose(to_np(b), to_np(a), rtol=rtol, atol=atol, err_msg=what)


MODULES = [
    ("Linear", lambda m: m.Linear(6, 4), (3, 6)),
    ("Linear no bias", lambda m: m.Linear(6, 4, bias=False), (2, 5, 6)),
    ("Bilinear", None, None),
    ("Sequential MLP", lambda m: m.Sequential(m.Linear(8, 16), m.GELU(), m.Linear(16, 4), m.Tanh()), (5, 8)),
    ("LayerNorm", lambda m: m.LayerNorm(6), (3, 6)),
    ("LayerNorm 2d", lambda m: m.LayerNorm((4, 6), elementwise_affine=True), (2, 4, 6)),
    ("RMSNorm", lambda m: m.RMSNorm(6, eps=1e-6), (3, 6)),
    ("GroupNorm", lambda m: m.GroupNorm(2, 4), (3, 4, 5)),
    ("BatchNorm1d eval", lambda m: m.BatchNorm1d(4).eval(), (6, 4)),
    ("BatchNorm1d train", lambda m: m.BatchNorm1d(4), (6, 4)),
    ("BatchNorm2d train", lambda m: m.BatchNorm2d(3), (2, 3, 4, 4)),
    ("Dropout eval", lambda m: m.Sequential(m.Linear(4, 4), m.Dropout(0.5)).eval(), (3, 4)),
    ("Flatten", lambda m: m.Sequential(m.Flatten(), m.Linear(12, 2)), (2, 3, 4)),
    ("Unflatten", lambda m: m.Unflatten(1, (2, 3)), (4, 6)),
    ("Identity", lambda m: m.Identity(), (3,)),
] + [(name, (lambda name: lambda m: getattr(m, name)())(name), (4, 5)) for name in
     ["ReLU", "ReLU6", "Sigmoid", "Tanh", "SiLU", "Mish", "SELU", "Hardsigmoid", "Hardswish", "LogSigmoid",
      "Softsign", "Tanhshrink", "GELU", "ELU", "CELU", "LeakyReLU", "Softplus", "Hardtanh"]] + [
    ("GELU tanh", lambda m: m.GELU(approximate="tanh"), (4, 5)),
    ("LeakyReLU 0.2", lambda m: m.LeakyReLU(0.2), (4, 5)),
    ("Softmax", lambda m: m.Softmax(dim=1), (4, 5)),
    ("LogSoftmax", lambda m: m.LogSoftmax(dim=-1), (4, 5)),
]


@pytest.mark.parametrize("name,build,shape", [m for m in MODULES if m[1] is not None], ids=[m[0] for m in MODULES
                                                                                           if m[1] is not None])
def test_module_matches_torch(name, build, shape):
    torch.manual_seed(0)
    ref = build(torch.nn).double()
    ours = build(tnn).double()
    copy_state(ref, ours)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    xo = to_tt(x).requires_grad_(True)
    y = ref(x)
    yo = ours(xo)
    close(y, yo, what="output")
    g = torch.randn(*y.shape, dtype=torch.float64)
    y.backward(g)
    yo.backward(to_tt(g))
    close(x.grad, xo.grad, what="input grad")
    for (k, p), (k2, po) in zip(ref.named_parameters(), ours.named_parameters()):
        assert k == k2
        close(p.grad, po.grad, what=f"grad of {k}")
    for (k, b), (k2, bo) in zip(ref.named_buffers(), ours.named_buffers()):
        assert k == k2
        close(b, bo, what=f"buffer {k}")
    assert repr(ours) == repr(ref)


def test_bilinear_and_embedding():
    torch.manual_seed(0)
    ref = torch.nn.Bilinear(3, 4, 2).double()
    ours = tnn.Bilinear(3, 4, 2).double()
    copy_state(ref, ours)
    a, b = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    close(ref(a, b), ours(to_tt(a), to_tt(b)))
    emb = torch.nn.Embedding(10, 3, padding_idx=0).double()
    ours_emb = tnn.Embedding(10, 3, padding_idx=0).double()
    copy_state(emb, ours_emb)
    idx = torch.tensor([[0, 3, 3], [9, 0, 1]])
    y, yo = emb(idx), ours_emb(to_tt(idx))
    close(y, yo)
    g = torch.randn(*y.shape, dtype=torch.float64)
    y.backward(g)
    yo.backward(to_tt(g))
    close(emb.weight.grad, ours_emb.weight.grad)
    assert repr(ours_emb) == repr(emb)


LOSSES = [
    ("MSELoss", lambda m, r: m.MSELoss(reduction=r), "float"),
    ("L1Loss", lambda m, r: m.L1Loss(reduction=r), "float"),
    ("SmoothL1Loss", lambda m, r: m.SmoothL1Loss(reduction=r, beta=0.5), "float"),
    ("HuberLoss", lambda m, r: m.HuberLoss(reduction=r, delta=0.7), "float"),
    ("BCELoss", lambda m, r: m.BCELoss(reduction=r), "prob"),
    ("BCEWithLogitsLoss", lambda m, r: m.BCEWithLogitsLoss(reduction=r), "binary"),
    ("BCEWithLogitsLoss pos_weight", lambda m, r: m.BCEWithLogitsLoss(reduction=r, pos_weight=m_tensor(m, [1.0, 2.0, 0.5, 3.0])), "binary"),
    ("CrossEntropyLoss", lambda m, r: m.CrossEntropyLoss(reduction=r), "class"),
    ("CrossEntropyLoss weight", lambda m, r: m.CrossEntropyLoss(weight=m_tensor(m, [1.0, 2.0, 0.5, 3.0]), reduction=r), "class"),
    ("CrossEntropyLoss ignore", lambda m, r: m.CrossEntropyLoss(ignore_index=1, reduction=r), "class"),
    ("CrossEntropyLoss smoothing", lambda m, r: m.CrossEntropyLoss(label_smoothing=0.1, reduction=r), "class"),
    ("CrossEntropyLoss probabilities", lambda m, r: m.CrossEntropyLoss(reduction=r), "probs"),
    ("NLLLoss", lambda m, r: m.NLLLoss(reduction=r), "logclass"),
    ("KLDivLoss", lambda m, r: m.KLDivLoss(reduction=r if r != "mean" else "batchmean"), "kl"),
]


def m_tensor(m, values):
    if m is torch.nn:
        return torch.tensor(values, dtype=torch.float64)
    return tt.tensor(values, dtype=tt.float64)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name,build,kind", LOSSES, ids=[l[0] for l in LOSSES])
def test_loss_matches_torch(name, build, kind, reduction):
    torch.manual_seed(1)
    x = torch.randn(6, 4, dtype=torch.float64)
    if kind == "prob":
        x = torch.sigmoid(x)
        target = torch.rand(6, 4, dtype=torch.float64)
    elif kind == "binary":
        target = (torch.rand(6, 4) > 0.5).double()
    elif kind == "class":
        target = torch.tensor([0, 1, 3, 2, 1, 0])
    elif kind == "logclass":
        x = torch.log_softmax(x, 1)
        target = torch.tensor([0, 1, 3, 2, 1, 0])
    elif kind == "probs":
        target = torch.softmax(torch.randn(6, 4, dtype=torch.float64), 1)
    elif kind == "kl":
        x = torch.log_softmax(x, 1)
        target = torch.softmax(torch.randn(6, 4, dtype=torch.float64), 1)
    else:
        target = torch.randn(6, 4, dtype=torch.float64)
    x.requires_grad_(True)
    xo = to_tt(x.detach()).requires_grad_(True)
    loss = build(torch.nn, reduction)(x, target)
    ours = build(tnn, reduction)(xo, to_tt(target))
    close(loss, ours, what="loss")
    g = torch.randn(*loss.shape, dtype=torch.float64) if loss.ndim else torch.tensor(1.0, dtype=torch.float64)
    loss.backward(g)
    ours.backward(to_tt(g))
    close(x.grad, xo.grad, what="grad")


def test_cross_entropy_spatial_and_1d():
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])
    xo = to_tt(x.detach()).requires_grad_(True)
    close(torch.nn.functional.cross_entropy(x, t), tnn.functional.cross_entropy(xo, to_tt(t)))
    v = torch.randn(5, dtype=torch.float64)
    close(torch.nn.functional.cross_entropy(v, torch.tensor(2)), tnn.functional.cross_entropy(to_tt(v), tt.tensor(2)))


# ---- Module semantics ----

class Net(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 2)
        self.register_buffer("steps", tt.zeros(1))
        self.register_buffer("scratch", tt.zeros(2), persistent=False)
        self.blocks = tnn.ModuleList([tnn.Linear(2, 2), tnn.ReLU()])
        self.scale = tnn.Parameter(tt.ones(1))

    def forward(self, x):
        x = self.fc(x)
        for block in self.blocks:
            x = block(x)
        return x * self.scale


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        x = self.fc(x)
        for block in self.blocks:
            x = block(x)
        return x * self.scale


def test_registration_and_state_dict_like_torch():
    ours, ref = Net(), TorchNet()
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in ref.named_modules()]
    assert repr(ours).replace("Net(", "X(") == repr(ref).replace("TorchNet(", "X(")
    copy_state(ref, ours)
    x = torch.randn(4, 3)
    close(ref(x), ours(to_tt(x)))
    # strict loading errors name the keys like torch
    bad = {k: to_tt(v) for k, v in ref.state_dict().items()}
    bad.pop("fc.bias")
    bad["extra.weight"] = tt.zeros(1)
    with pytest.raises(RuntimeError) as ours_error:
        ours.load_state_dict(bad)
    with pytest.raises(RuntimeError) as torch_error:
        ref.load_state_dict({k: torch.tensor(v.tolist()) for k, v in bad.items()})
    assert str(ours_error.value).replace("Net:", "X:") == str(torch_error.value).replace("TorchNet:", "X:")
    result = ours.load_state_dict(bad, strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == []
    wrong = {k: to_tt(v) for k, v in ref.state_dict().items()}
    wrong["fc.weight"] = tt.zeros(5, 5)
    with pytest.raises(RuntimeError, match="size mismatch for fc.weight"):
        ours.load_state_dict(wrong)


def test_train_eval_zero_grad_hooks_apply_to():
    net = Net()
    assert net.training and net.fc.training
    net.eval()
    assert not net.training and not net.blocks[0].training
    net.train()
    out = net(tt.randn(2, 3)).sum()
    out.backward()
    assert net.fc.weight.grad is not None
    net.zero_grad()
    assert net.fc.weight.grad is None
    seen = []
    handle = net.fc.register_forward_hook(lambda m, inp, outp: seen.append(tuple(outp.shape)))
    pre = net.register_forward_pre_hook(lambda m, inp: (inp[0] * 0,))
    y = net(tt.ones(2, 3))
    assert seen == [(2, 2)]
    handle.remove()
    pre.remove()
    net(tt.ones(2, 3))
    assert seen == [(2, 2)]
    names = []
    net.apply(lambda m: names.append(type(m).__name__))
    assert names[-1] == "Net" and "Linear" in names
    net.to(tt.float64)
    assert net.fc.weight.dtype is tt.float64 and isinstance(net.fc.weight, tnn.Parameter)
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    with pytest.raises(TypeError):
        net.fc = 3
        net.scale = tt.ones(1)


def _hook_script(nn, T):
    """The same hook program on torch.nn or turbo_torch.nn; returns what it observed."""
    seen = []

    class Scale(nn.Module):
        def forward(self, x, scale=1.0, *, shift=0.0):
            return x * scale + shift

    m = Scale()
    # with_kwargs pre-hooks get (args, kwargs) and may return both, replaced
    h1 = m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "shift": kwargs.get("shift", 0) + 1}),
                                     with_kwargs=True)
    h2 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))  # plain: args only
    h3 = m.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(("pre", sorted(kwargs))),
                                     with_kwargs=True, prepend=True)
    h4 = m.register_forward_hook(lambda mod, args, kwargs, out: out + kwargs["shift"], with_kwargs=True)
    h5 = m.register_forward_hook(lambda mod, args, out: seen.append(("post", float(out.sum()))))
    seen.append(float(m(T([1.0, 2.0]), 3.0, shift=0.5).sum()))
    h1.remove()
    seen.append(float(m(T([1.0, 2.0]), shift=0.0).sum()))
    h4.remove()
    seen.append(float(m(T([1.0, 2.0])).sum()))
    for h in (h2, h3, h5):
        h.remove()
    # always_call hooks still run when forward raises; other hooks do not
    m.register_forward_hook(lambda mod, args, out: seen.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: seen.append(("never", out)))
    try:
        m(T([1.0]), "not a number")
    except TypeError:
        seen.append("raised")
    bad = Scale()
    bad.register_forward_pre_hook(lambda mod, args, kwargs: args, with_kwargs=True)
    try:
        bad(T([1.0, 2.0, 3.0]))
    except RuntimeError as error:
        seen.append(str(error).split(",")[0])
    return seen


def test_forward_hooks_with_kwargs_and_always_call_like_torch():
    expected = _hook_script(torch.nn, lambda v: torch.tensor(v))
    assert "raised" in expected and ("always", None) in expected
    assert _hook_script(tnn, lambda v: tt.tensor(v)) == expected


def test_parameter_and_init_distributions():
    p = tnn.Parameter(tt.zeros(3))
    assert isinstance(p, tt.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p) == repr(torch.nn.Parameter(torch.zeros(3)))
    w = tt.empty(400, 300)
    tnn.init.kaiming_uniform_(w, a=5 ** 0.5)
    bound = 1 / 300 ** 0.5
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.9 * bound
    tnn.init.xavier_normal_(w)
    std = float(w.std())
    assert abs(std - (2 / 700) ** 0.5) < 0.05 * (2 / 700) ** 0.5
    tnn.init.trunc_normal_(w, std=1.0, a=-2, b=2)
    assert float(w.abs().max()) <= 2
    q = tt.empty(5, 3)
    tnn.init.orthogonal_(q)
    np.testing.assert_allclose(to_np(q.t() @ q), np.eye(3), atol=1e-5)


def test_clip_grad_norm_matches_torch():
    ref = torch.nn.Linear(4, 3)
    ours = tnn.Linear(4, 3)
    copy_state(ref, ours)
    x = torch.randn(5, 4) * 10
    ref(x).pow(2).sum().backward()
    ours(to_tt(x)).pow(2).sum().backward()
    total_t = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    total_o = tnn.utils.clip_grad_norm_(ours.parameters(), 1.0)
    close(total_t, total_o, rtol=1e-4)
    close(ref.weight.grad, ours.weight.grad, rtol=1e-4)


def test_seed_example_trains():
    tt.manual_seed(0)
    model = tnn.Sequential(tnn.Linear(784, 256), tnn.ReLU(), tnn.Linear(256, 10))
    x = tt.randn(64, 784)
    y = tt.randint(0, 10, (64,))
    loss_fn = tnn.CrossEntropyLoss()
    first = None
    for _ in range(5):
        loss = loss_fn(model(x), y)
        first = first if first is not None else loss.item()
        model.zero_grad()
        loss.backward()
        with tt.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad
    assert loss.item() < first


CONV_MODULES = [
    ("Conv2d", lambda m: m.Conv2d(3, 4, 3), (2, 3, 7, 6)),
    ("Conv2d stride pad", lambda m: m.Conv2d(3, 6, 3, stride=2, padding=1, bias=False), (2, 3, 9, 8)),
    ("Conv2d groups dilation", lambda m: m.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2), (1, 4, 8, 8)),
    ("Conv2d same", lambda m: m.Conv2d(3, 2, 3, padding="same"), (2, 3, 5, 5)),
    ("Conv1d", lambda m: m.Conv1d(3, 5, 3, padding=1), (2, 3, 10)),
    ("Conv2d reflect", lambda m: m.Conv2d(3, 4, 3, padding=(1, 2), padding_mode="reflect"), (2, 3, 6, 7)),
    ("Conv2d replicate same", lambda m: m.Conv2d(2, 3, 4, padding="same", padding_mode="replicate"), (1, 2, 6, 5)),
    ("Conv2d circular stride", lambda m: m.Conv2d(2, 2, 3, stride=2, padding=1, padding_mode="circular"),
     (2, 2, 7, 6)),
    ("Conv1d reflect", lambda m: m.Conv1d(3, 2, 3, padding=2, padding_mode="reflect"), (2, 3, 9)),
    ("MaxPool2d", lambda m: m.MaxPool2d(2), (2, 3, 8, 8)),
    ("MaxPool2d 3/2 pad", lambda m: m.MaxPool2d(3, 2, 1), (1, 2, 9, 7)),
    ("MaxPool1d", lambda m: m.MaxPool1d(2), (2, 3, 8)),
    ("AvgPool2d", lambda m: m.AvgPool2d(2), (2, 3, 8, 8)),
    ("AdaptiveAvgPool2d", lambda m: m.AdaptiveAvgPool2d((1, 1)), (2, 3, 7, 5)),
    ("AdaptiveAvgPool2d 3", lambda m: m.AdaptiveAvgPool2d(3), (2, 3, 7, 5)),
    ("small CNN", lambda m: m.Sequential(m.Conv2d(1, 4, 3, padding=1), m.BatchNorm2d(4), m.ReLU(), m.MaxPool2d(2),
                                         m.Flatten(), m.Linear(4 * 4 * 4, 3)), (2, 1, 8, 8)),
    # odd sizes, every geometry option, padding='same' with an even effective kernel (extra bottom/right)
    ("Conv2d rect stride dilation groups", lambda m: m.Conv2d(6, 9, (3, 2), stride=(2, 1), padding=(1, 2),
                                                              dilation=(1, 2), groups=3), (3, 6, 11, 9)),
    ("Conv2d depthwise", lambda m: m.Conv2d(4, 8, 3, padding=1, groups=4), (2, 4, 7, 5)),
    ("Conv2d 1x1", lambda m: m.Conv2d(5, 3, 1), (2, 5, 4, 3)),
    ("Conv2d same even", lambda m: m.Conv2d(3, 2, 4, padding="same"), (2, 3, 7, 6)),
    ("Conv2d same even rect", lambda m: m.Conv2d(2, 3, (2, 5), padding="same", dilation=(3, 1)), (1, 2, 6, 8)),
    ("Conv1d same even dilated", lambda m: m.Conv1d(3, 4, 2, padding="same", dilation=3), (2, 3, 11)),
    ("Conv1d stride groups", lambda m: m.Conv1d(4, 6, 3, stride=2, groups=2, bias=False), (3, 4, 13)),
    ("Conv1d unbatched", lambda m: m.Conv1d(2, 3, 3, padding=1), (2, 9)),
    ("Conv2d unbatched", lambda m: m.Conv2d(2, 3, 3, padding=1), (2, 5, 6)),
    ("MaxPool2d ceil dilation", lambda m: m.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True), (2, 3, 11, 9)),
    ("MaxPool1d stride pad", lambda m: m.MaxPool1d(3, 2, 1), (2, 3, 11)),
    ("AvgPool2d ceil no pad count", lambda m: m.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
     (2, 3, 10, 7)),
    ("AvgPool2d divisor", lambda m: m.AvgPool2d((2, 3), (1, 2), divisor_override=4), (1, 2, 5, 8)),
    ("AdaptiveAvgPool2d up", lambda m: m.AdaptiveAvgPool2d((5, 7)), (2, 2, 3, 4)),
    ("AdaptiveAvgPool2d None", lambda m: m.AdaptiveAvgPool2d((2, None)), (1, 3, 7, 5)),
    ("GroupNorm 4-d", lambda m: m.GroupNorm(3, 6), (2, 6, 5, 3)),
    ("BatchNorm2d eval", lambda m: m.BatchNorm2d(3).eval(), (2, 3, 5, 4)),
]

# float32 agrees to the float32 kernels' rounding; float64 must be computed in double (a float32 round
# trip is ~1e-7 off, so these bounds catch it)
CONV_TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,build,shape", CONV_MODULES, ids=[c[0] for c in CONV_MODULES])
def test_conv_and_pool_match_torch(name, build, shape, dtype):
    torch.manual_seed(0)
    ref = build(torch.nn).to(getattr(torch, dtype))
    ours = build(tnn).to(getattr(tt, dtype))
    copy_state(ref, ours)
    x = torch.randn(*shape, dtype=getattr(torch, dtype), requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    y, yo = ref(x), ours(xo)
    tol = CONV_TOLERANCE[dtype]
    assert yo.dtype is getattr(tt, dtype)
    close(y, yo, rtol=tol, atol=tol, what="output")
    g = torch.randn(*y.shape, dtype=y.dtype)
    y.backward(g)
    yo.backward(to_tt(g))
    assert xo.grad.dtype is getattr(tt, dtype)
    close(x.grad, xo.grad, rtol=tol, atol=tol, what="input grad")
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        assert po.grad.dtype is getattr(tt, dtype)
        close(p.grad, po.grad, rtol=tol, atol=tol, what=f"grad of {k}")
    for (k, b), (_, bo) in zip(ref.named_buffers(), ours.named_buffers()):
        close(b, bo, rtol=tol, atol=tol, what=f"buffer {k}")
    assert repr(ours) == repr(ref)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool_indices_and_special_values(dtype):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 7, 9, dtype=getattr(torch, dtype))
    x[0, 0, 1, 1] = float("nan")
    x[1, 2, :3, :3] = float("-inf")
    x[0, 1, 2, :] = float("inf")
    for kwargs in [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=1, dilation=(2, 1),
                                                                  ceil_mode=True)]:
        y, idx = torch.nn.functional.max_pool2d(x, return_indices=True, **kwargs)
        yo, idxo = tnn.functional.max_pool2d(to_tt(x), return_indices=True, **kwargs)
        assert yo.dtype is getattr(tt, dtype) and idxo.dtype is tt.int64
        np.testing.assert_array_equal(to_np(yo), to_np(y))
        assert idxo.tolist() == idx.tolist()
    y1, i1 = torch.nn.functional.max_pool1d(x[:, 0], 3, 2, 1, return_indices=True)
    yo1, io1 = tnn.functional.max_pool1d(to_tt(x[:, 0]), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(to_np(yo1), to_np(y1))
    assert io1.tolist() == i1.tolist()


def test_conv_pool_float64_stays_float64_and_refuses_mixed_dtypes():
    x = tt.randn(1, 2, 5, 5, dtype=tt.float64)
    w = tt.randn(3, 2, 3, 3, dtype=tt.float64)
    tiny = 1e-300  # representable in double, 0 in float32: a float32 round trip would lose it
    y = tnn.functional.conv2d(x * tiny, w, None)
    assert y.dtype is tt.float64 and float(y.abs().max()) > 0
    assert float(tnn.functional.avg_pool2d(x * tiny, 2).abs().max()) > 0
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        tnn.functional.conv2d(x, w.float())
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        tnn.functional.conv2d(x.float(), w)
    with pytest.raises(RuntimeError, match=r"Input type \(double\) and bias type \(float\) should be the same"):
        tnn.functional.conv2d(x, w, tt.zeros(3))
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        tnn.functional.conv_transpose2d(x, tt.randn(2, 3, 3, 3))


SEQUENCE_MODULES = [
    ("MultiheadAttention", lambda m: m.MultiheadAttention(8, 2), "mha", False),
    ("MultiheadAttention batch_first", lambda m: m.MultiheadAttention(8, 4, batch_first=True), "mha", True),
    ("TransformerEncoderLayer", lambda m: m.TransformerEncoderLayer(8, 2, 16, dropout=0.0), "seq", False),
    ("TransformerEncoderLayer norm_first gelu", lambda m: m.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, activation="gelu", norm_first=True, batch_first=True), "seq", True),
    ("TransformerEncoder 2 layers", lambda m: m.TransformerEncoder(m.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2,
                                                                    enable_nested_tensor=False), "seq", False),
    ("TransformerDecoderLayer", lambda m: m.TransformerDecoderLayer(8, 2, 16, dropout=0.0), "dec", False),
    ("LSTM", lambda m: m.LSTM(5, 6), "rnn", False),
    ("LSTM 2 layers bidirectional batch_first", lambda m: m.LSTM(5, 6, num_layers=2, bidirectional=True,
                                                                  batch_first=True), "rnn", True),
    ("GRU", lambda m: m.GRU(5, 6, num_layers=2), "rnn", False),
    ("RNN relu", lambda m: m.RNN(5, 6, nonlinearity="relu", bidirectional=True), "rnn", False),
    ("LSTM proj_size", lambda m: m.LSTM(5, 6, proj_size=3), "rnn", False),
    ("LSTM proj_size 2 layers bidirectional batch_first", lambda m: m.LSTM(5, 6, num_layers=2, bidirectional=True,
                                                                            batch_first=True, proj_size=4), "rnn", True),
    ("LSTM 3 layers bidirectional no bias", lambda m: m.LSTM(5, 4, num_layers=3, bidirectional=True, bias=False),
     "rnn", False),
    ("GRU 2 layers bidirectional batch_first", lambda m: m.GRU(5, 6, num_layers=2, bidirectional=True,
                                                                batch_first=True), "rnn", True),
    ("RNN tanh 3 layers batch_first no bias", lambda m: m.RNN(5, 3, num_layers=3, batch_first=True, bias=False),
     "rnn", True),
    ("MultiheadAttention kdim vdim", lambda m: m.MultiheadAttention(8, 2, kdim=5, vdim=3), "mha", False),
    ("MultiheadAttention add_bias_kv add_zero_attn", lambda m: m.MultiheadAttention(8, 2, add_bias_kv=True,
                                                                                     add_zero_attn=True), "mha", False),
    ("MultiheadAttention all batch_first", lambda m: m.MultiheadAttention(8, 4, kdim=6, vdim=7, add_bias_kv=True,
                                                                           add_zero_attn=True, batch_first=True),
     "mha", True),
    ("LSTMCell", lambda m: m.LSTMCell(5, 6), "cell", False),
    ("GRUCell", lambda m: m.GRUCell(5, 6), "cell", False),
]


def _flatten_outputs(y):
    if isinstance(y, (tuple, list)):
        return [t for v in y for t in _flatten_outputs(v)]
    return [] if y is None else [y]


@pytest.mark.parametrize("name,build,kind,batch_first", SEQUENCE_MODULES, ids=[s[0] for s in SEQUENCE_MODULES])
def test_sequence_modules_match_torch(name, build, kind, batch_first):
    torch.manual_seed(0)
    ref = build(torch.nn).double().eval()
    ours = build(tnn).double().eval()
    copy_state(ref, ours)
    assert list(ours.state_dict()) == list(ref.state_dict())
    shape = (3, 4, 8) if kind in ("mha", "seq", "dec") else (3, 4, 5) if kind == "rnn" else (4, 5)
    if batch_first:
        shape = (shape[1], shape[0], shape[2])
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    if kind == "mha":
        key_len = shape[1] if batch_first else shape[0]
        kp = torch.zeros(shape[1] if not batch_first else shape[0], key_len, dtype=torch.bool)
        kp[0, -1] = True
        if ref.kdim == ref.embed_dim and ref.vdim == ref.embed_dim:
            y = ref(x, x, x, key_padding_mask=kp)
            yo = ours(xo, xo, xo, key_padding_mask=to_tt(kp))
        else:  # keys and values of their own widths (and one more key than queries), plus an attn_mask
            kv_shape = (shape[0], 4, None) if batch_first else (4, shape[1], None)
            key = torch.randn(*kv_shape[:2], ref.kdim, dtype=torch.float64, requires_grad=True)
            value = torch.randn(*kv_shape[:2], ref.vdim, dtype=torch.float64, requires_grad=True)
            ko, vo = to_tt(key.detach()).requires_grad_(True), to_tt(value.detach()).requires_grad_(True)
            kp = torch.zeros(x.shape[0] if batch_first else x.shape[1], 4, dtype=torch.bool)
            kp[1, 0] = True
            am = torch.randn(3, 4, dtype=torch.float64)
            y = ref(x, key, value, key_padding_mask=kp, attn_mask=am)
            yo = ours(xo, ko, vo, key_padding_mask=to_tt(kp), attn_mask=to_tt(am))
    elif kind == "dec":
        memory = torch.randn(5, 4, 8, dtype=torch.float64)
        y = ref(x, memory)
        yo = ours(xo, to_tt(memory))
    else:
        y = ref(x)
        yo = ours(xo)
    outs_t, outs_o = _flatten_outputs(y), _flatten_outputs(yo)
    assert len(outs_t) == len(outs_o)
    for a, b in zip(outs_t, outs_o):
        close(a, b, rtol=1e-6, atol=1e-6, what="output")
    seeds = [torch.randn(*a.shape, dtype=torch.float64) for a in outs_t]
    torch.autograd.backward(outs_t, seeds)
    tt.autograd.backward(outs_o, [to_tt(s) for s in seeds])
    close(x.grad, xo.grad, rtol=1e-6, atol=1e-6, what="input grad")
    if kind == "mha" and not (ref.kdim == ref.embed_dim and ref.vdim == ref.embed_dim):
        close(key.grad, ko.grad, rtol=1e-6, atol=1e-6, what="key grad")
        close(value.grad, vo.grad, rtol=1e-6, atol=1e-6, what="value grad")
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        close(p.grad, po.grad, rtol=1e-6, atol=1e-6, what=f"grad of {k}")
    assert repr(ours) == repr(ref)


RECURRENT_CASES = [
    ("LSTM", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=3)),
    ("LSTM", dict(num_layers=1, batch_first=True, proj_size=2, bias=False)),
    ("GRU", dict(num_layers=3, bidirectional=True, batch_first=True)),
    ("RNN", dict(num_layers=2, bidirectional=True, nonlinearity="relu")),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind,kwargs", RECURRENT_CASES, ids=[f"{k}-{v}" for k, v in RECURRENT_CASES])
def test_recurrent_with_initial_state_and_unbatched(kind, kwargs, dtype):
    """Given initial states (h0 of proj_size for projected LSTMs), batched and unbatched, float32 (the fused
    C LSTM layer where it applies) and float64: outputs, final states and every gradient equal torch's."""
    torch.manual_seed(3)
    ref = getattr(torch.nn, kind)(5, 6, **kwargs).to(getattr(torch, dtype))
    ours = getattr(tnn, kind)(5, 6, **kwargs).to(getattr(tt, dtype))
    copy_state(ref, ours)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in ref.parameters()]
    tol = 1e-4 if dtype == "float32" else 1e-10
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    h_width = kwargs.get("proj_size", 0) or 6
    for batched in (True, False):
        x = torch.randn(*((2, 4, 5) if kwargs.get("batch_first") else (4, 2, 5)) if batched else (4, 5),
                        dtype=getattr(torch, dtype), requires_grad=True)
        state_shape = (layers, 2) if batched else (layers,)
        h0 = torch.randn(*state_shape, h_width, dtype=x.dtype, requires_grad=True)
        hx = (h0, torch.randn(*state_shape, 6, dtype=x.dtype, requires_grad=True)) if kind == "LSTM" else h0
        hx_o = tuple(to_tt(h.detach()).requires_grad_(True) for h in hx) if kind == "LSTM" else \
            to_tt(h0.detach()).requires_grad_(True)
        xo = to_tt(x.detach()).requires_grad_(True)
        y, yo = ref(x, hx), ours(xo, hx_o)
        outs_t, outs_o = _flatten_outputs(y), _flatten_outputs(yo)
        assert [tuple(a.shape) for a in outs_t] == [tuple(b.shape) for b in outs_o]
        for a, b in zip(outs_t, outs_o):
            close(a, b, rtol=tol, atol=tol, what="output")
        seeds = [torch.randn(*a.shape, dtype=a.dtype) for a in outs_t]
        ref.zero_grad()
        ours.zero_grad()
        torch.autograd.backward(outs_t, seeds)
        tt.autograd.backward(outs_o, [to_tt(s) for s in seeds])
        close(x.grad, xo.grad, rtol=tol, atol=tol, what="input grad")
        for a, b in zip(_flatten_outputs(hx), _flatten_outputs(hx_o)):
            close(a.grad, b.grad, rtol=tol, atol=tol, what="initial state grad")
        for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
            close(p.grad, po.grad, rtol=tol, atol=tol, what=f"grad of {k}")


def test_recurrent_and_attention_argument_errors():
    for build in (lambda m: m.LSTM(4, 3, proj_size=3), lambda m: m.LSTM(4, 3, proj_size=-1),
                  lambda m: m.GRU(4, 3, proj_size=2), lambda m: m.RNN(4, 3, proj_size=1)):
        with torch_raises_like(lambda: build(torch.nn)):
            build(tnn)
    mha = tnn.MultiheadAttention(6, 2, kdim=4, vdim=5, add_bias_kv=True)
    assert mha.in_proj_weight is None and tuple(mha.k_proj_weight.shape) == (6, 4)
    assert tuple(mha.v_proj_weight.shape) == (6, 5) and tuple(mha.bias_k.shape) == (1, 1, 6)
    assert list(mha.state_dict()) == list(torch.nn.MultiheadAttention(6, 2, kdim=4, vdim=5,
                                                                       add_bias_kv=True).state_dict())


# ---- transposed convolution (C: the input-gradient of a convolution) ----------------------------------

CONV_TRANSPOSE_MODULES = [
    ("ConvTranspose2d", lambda m: m.ConvTranspose2d(3, 4, 3), (2, 3, 5, 6), None),
    ("ConvTranspose2d stride pad output_padding", lambda m: m.ConvTranspose2d(3, 5, 3, stride=2, padding=1,
                                                                               output_padding=1), (2, 3, 7, 4), None),
    ("ConvTranspose2d groups dilation", lambda m: m.ConvTranspose2d(4, 6, 3, stride=2, padding=2, dilation=2,
                                                                     groups=2), (1, 4, 5, 7), None),
    ("ConvTranspose2d rect no bias", lambda m: m.ConvTranspose2d(3, 2, (2, 3), stride=(3, 2), padding=(0, 1),
                                                                  output_padding=(2, 1), bias=False), (2, 3, 4, 5),
     None),
    ("ConvTranspose2d output_size", lambda m: m.ConvTranspose2d(2, 3, 3, stride=2, padding=1), (1, 2, 5, 6),
     (10, 12)),
    ("ConvTranspose2d output_size 4-d", lambda m: m.ConvTranspose2d(2, 3, 3, stride=3), (2, 2, 3, 4), (2, 3, 9, 12)),
    ("ConvTranspose2d unbatched", lambda m: m.ConvTranspose2d(2, 3, 3, stride=2), (2, 4, 5), None),
    ("ConvTranspose2d depthwise", lambda m: m.ConvTranspose2d(4, 4, 3, stride=2, groups=4), (2, 4, 5, 5), None),
    ("ConvTranspose1d", lambda m: m.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 9),
     None),
    ("ConvTranspose1d output_size groups", lambda m: m.ConvTranspose1d(4, 2, 4, stride=3, groups=2), (2, 4, 7),
     (22,)),
    ("decoder", lambda m: m.Sequential(m.Conv2d(2, 4, 3, stride=2, padding=1), m.ReLU(),
                                       m.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)),
     (2, 2, 9, 8), None),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,build,shape,output_size", CONV_TRANSPOSE_MODULES,
                         ids=[c[0] for c in CONV_TRANSPOSE_MODULES])
def test_conv_transpose_matches_torch(name, build, shape, output_size, dtype):
    torch.manual_seed(0)
    ref = build(torch.nn).to(getattr(torch, dtype))
    ours = build(tnn).to(getattr(tt, dtype))
    copy_state(ref, ours)
    x = torch.randn(*shape, dtype=getattr(torch, dtype), requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    if output_size is None:
        y, yo = ref(x), ours(xo)
    else:
        y, yo = ref(x, output_size=output_size), ours(xo, output_size=output_size)
    assert tuple(yo.shape) == tuple(y.shape) and yo.dtype is getattr(tt, dtype)
    tol = CONV_TOLERANCE[dtype]
    close(y, yo, rtol=tol, atol=tol, what="output")
    g = torch.randn(*y.shape, dtype=y.dtype)
    y.backward(g)
    yo.backward(to_tt(g))
    close(x.grad, xo.grad, rtol=tol, atol=tol, what="input grad")
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        assert po.grad.dtype is getattr(tt, dtype)
        close(p.grad, po.grad, rtol=tol, atol=tol, what=f"grad of {k}")
    assert repr(ours) == repr(ref)
    if isinstance(ref, torch.nn.ConvTranspose2d) and len(shape) == 4:
        assert yo.grad_fn.name() == y.grad_fn.name()


def test_conv_transpose_functional_and_init():
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 4, 5, 6), torch.randn(4, 3, 2, 3), torch.randn(6)
    y = torch.nn.functional.conv_transpose2d(x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
                                             groups=2, dilation=(1, 2))
    yo = tnn.functional.conv_transpose2d(to_tt(x), to_tt(w), to_tt(b), stride=(2, 1), padding=(1, 0),
                                         output_padding=(1, 0), groups=2, dilation=(1, 2))
    close(y, yo, rtol=1e-4, atol=1e-4)
    y1 = torch.nn.functional.conv_transpose1d(x[:, :, 0], w[:, :, 0], None, 2, 1, 1)
    close(y1, tnn.functional.conv_transpose1d(to_tt(x[:, :, 0]), to_tt(w[:, :, 0]), None, 2, 1, 1), 1e-4, 1e-4)
    # default init: kaiming_uniform(a=sqrt(5)) with fan_in = weight.shape[1] * kernel, so |w| <= 1/sqrt(fan_in)
    m = tnn.ConvTranspose2d(8, 6, 3, groups=2)
    assert tuple(m.weight.shape) == tuple(torch.nn.ConvTranspose2d(8, 6, 3, groups=2).weight.shape)
    bound = 1 / np.sqrt(3 * 9)
    w_values = np.array(m.weight.detach().tolist())
    assert np.abs(w_values).max() <= bound and np.abs(w_values).max() > 0.8 * bound
    assert np.abs(np.array(m.bias.detach().tolist())).max() <= bound


def test_conv_transpose_errors():
    m = tnn.ConvTranspose2d(2, 3, 3, stride=2)
    with pytest.raises(ValueError, match="valid sizes range from 9 to 10"):
        m(tt.zeros(1, 2, 4, 4), output_size=(12, 12))
    with pytest.raises(RuntimeError, match="weight"):
        tnn.functional.conv_transpose2d(tt.zeros(1, 3, 4, 4), tt.zeros(2, 3, 3, 3))
    with pytest.raises(RuntimeError, match="output_padding"):
        tnn.functional.conv_transpose2d(tt.zeros(1, 2, 4, 4), tt.zeros(2, 3, 3, 3), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="zeros"):
        tnn.ConvTranspose2d(2, 3, 3, padding_mode="reflect")


# ---- interpolate / Upsample (C: src/pyext/eager_nn_resize.c) ------------------------------------------

INTERPOLATE_CASES = [
    ((2, 3, 5, 7), dict(scale_factor=2)),
    ((2, 3, 5, 7), dict(size=(9, 4))),
    ((1, 2, 6, 5), dict(scale_factor=1.7, mode="nearest")),
    ((1, 2, 6, 5), dict(scale_factor=(0.4, 2.3), mode="nearest")),
    ((1, 2, 6, 5), dict(size=(11, 3), mode="nearest-exact")),
    ((1, 2, 6, 5), dict(scale_factor=1.5, mode="nearest-exact")),
    ((2, 3, 5, 7), dict(size=(9, 4), mode="bilinear")),
    ((2, 3, 5, 7), dict(size=(9, 13), mode="bilinear", align_corners=True)),
    ((2, 3, 5, 7), dict(size=(5, 7), mode="bilinear")),
    ((1, 2, 6, 5), dict(scale_factor=(1.7, 0.6), mode="bilinear")),
    ((1, 2, 6, 5), dict(scale_factor=2.5, mode="bilinear", recompute_scale_factor=True)),
    ((1, 2, 1, 5), dict(size=(3, 1), mode="bilinear", align_corners=True)),
    ((2, 3, 7), dict(size=12, mode="linear")),
    ((2, 3, 7), dict(scale_factor=0.5, mode="linear", align_corners=True)),
    ((2, 3, 7), dict(scale_factor=2.5, mode="nearest")),
    ((2, 3, 7), dict(size=4, mode="nearest-exact")),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,kwargs", INTERPOLATE_CASES, ids=[f"{s}-{k}" for s, k in INTERPOLATE_CASES])
def test_interpolate_matches_torch(shape, kwargs, dtype):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=getattr(torch, dtype), requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    y = torch.nn.functional.interpolate(x, **kwargs)
    yo = tnn.functional.interpolate(xo, **kwargs)
    assert tuple(yo.shape) == tuple(y.shape)
    assert str(yo.dtype) == str(y.dtype)
    tol = 1e-6 if dtype == "float32" else 1e-13
    close(y, yo, rtol=tol, atol=tol, what="output")
    assert yo.grad_fn.name() == y.grad_fn.name()
    g = torch.randn(*y.shape, dtype=x.dtype)
    y.backward(g)
    yo.backward(to_tt(g))
    assert str(xo.grad.dtype) == str(x.grad.dtype)
    close(x.grad, xo.grad, rtol=tol, atol=tol, what="input grad")


def test_interpolate_strided_input_and_special_values():
    x = torch.randn(2, 6, 5, 3).transpose(1, 3)  # [2, 3, 5, 6], not contiguous
    x[0, 0, 0, 0] = float("inf")
    x[1, 2, 3, 4] = float("nan")
    xo = to_tt(x.contiguous())
    xo_strided = xo.permute(0, 3, 2, 1).contiguous().permute(0, 3, 2, 1)
    assert not xo_strided.is_contiguous()
    for kwargs in (dict(scale_factor=2), dict(size=(7, 4), mode="bilinear"), dict(size=(5, 9), mode="bilinear"),
                   dict(scale_factor=0.5, mode="bilinear", align_corners=True)):
        close(torch.nn.functional.interpolate(x, **kwargs), tnn.functional.interpolate(xo_strided, **kwargs))


UPSAMPLE_MODULES = [
    ("Upsample nearest", lambda m: m.Upsample(scale_factor=2), (2, 3, 4, 5)),
    ("Upsample bilinear size", lambda m: m.Upsample(size=(7, 9), mode="bilinear"), (2, 3, 4, 5)),
    ("Upsample bilinear align", lambda m: m.Upsample(scale_factor=(1.5, 2), mode="bilinear", align_corners=True),
     (1, 2, 4, 5)),
    ("Upsample linear", lambda m: m.Upsample(scale_factor=3, mode="linear"), (2, 3, 5)),
    ("UpsamplingNearest2d", lambda m: m.UpsamplingNearest2d(size=6), (1, 2, 3, 4)),
    ("UpsamplingBilinear2d", lambda m: m.UpsamplingBilinear2d(scale_factor=2), (1, 2, 3, 4)),
    ("decoder with Upsample", lambda m: m.Sequential(m.Conv2d(2, 3, 3, padding=1), m.Upsample(scale_factor=2,
                                                     mode="bilinear"), m.Conv2d(3, 1, 3)), (2, 2, 5, 6)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,build,shape", UPSAMPLE_MODULES, ids=[c[0] for c in UPSAMPLE_MODULES])
def test_upsample_modules_match_torch(name, build, shape, dtype):
    test_conv_and_pool_match_torch(name, build, shape, dtype)


def test_interpolate_errors():
    x = tt.zeros(1, 2, 4, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        tnn.functional.interpolate(x, size=3, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor"):
        tnn.functional.interpolate(x)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        tnn.functional.interpolate(x, size=3, align_corners=True)
    with pytest.raises(NotImplementedError, match="bilinear mode needs 4D input"):
        tnn.functional.interpolate(tt.zeros(1, 2, 4), size=3, mode="bilinear")
    with pytest.raises(NotImplementedError, match="float32 and float64"):
        tnn.functional.interpolate(tt.zeros(1, 2, 4, 4, dtype=tt.int64), size=3)
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        tnn.functional.interpolate(x, size=(3, 3, 3))
    with pytest.raises(NotImplementedError, match="bicubic"):
        tnn.functional.interpolate(x, size=3, mode="bicubic")


# ---- the fused LSTM layer (src/pyext/eager_rnn.c) ----

@pytest.mark.parametrize("layers,batch_first,bias", [(1, False, True), (2, True, True), (1, True, False)])
def test_lstm_runs_fused_and_matches_torch(monkeypatch, layers, batch_first, bias):
    from torchburn import _C

    calls = []
    fused = _C._tt_lstm_layer
    monkeypatch.setattr(_C, "_tt_lstm_layer", lambda *a: calls.append(1) or fused(*a))
    torch.manual_seed(1)
    ref = torch.nn.LSTM(5, 7, num_layers=layers, batch_first=batch_first, bias=bias)
    ours = tnn.LSTM(5, 7, num_layers=layers, batch_first=batch_first, bias=bias)
    copy_state(ref, ours)
    x = torch.randn(3, 4, 5, requires_grad=True)
    h0, c0 = torch.randn(layers, 3 if batch_first else 4, 7), torch.randn(layers, 3 if batch_first else 4, 7)
    xo = to_tt(x.detach()).requires_grad_(True)
    out, (h, c) = ref(x, (h0, c0))
    oo, (ho, co) = ours(xo, (to_tt(h0), to_tt(c0)))
    assert len(calls) == layers  # one fused call per layer, not a Python loop over time steps
    for a, b, what in ((out, oo, "output"), (h, ho, "h_n"), (c, co, "c_n")):
        close(a, b, what=what)
    # the gradients of output, h_n and c_n meet in the layer's one node
    (out.sum() + 2 * h.sum() + 3 * c.sum()).backward()
    (oo.sum() + 2 * ho.sum() + 3 * co.sum()).backward()
    close(x.grad, xo.grad, what="input grad")
    for (name, p), (_, q) in zip(ref.named_parameters(), ours.named_parameters()):
        close(p.grad, q.grad, rtol=1e-4, atol=1e-5, what=name)


def test_fused_lstm_refuses_a_modified_weight_and_a_second_backward():
    ours = tnn.LSTM(4, 3)
    out, _ = ours(tt.randn(5, 2, 4))
    with tt.no_grad():
        ours.weight_hh_l0.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out, _ = ours(tt.randn(5, 2, 4))
    loss = out.sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()



@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (2, 1)), ((3, 7), (0, 3)), ((2, 2, 5, 6), (1, 2, 3, 0)),
                                       ((1, 2, 4, 5, 3), (1, 1, 2, 0, 1, 2)),
                                       # negative pads crop (and may pad the other side)
                                       ((2, 3, 7), (-1, 2)), ((2, 3, 7), (3, -2)), ((1, 7), (-2, -3)),
                                       ((2, 2, 5, 6), (-1, 2, 1, -2)), ((1, 2, 4, 5, 3), (0, -1, -1, 1, 2, -1))])
def test_pad_modes_match_torch(mode, shape, pad):
    torch.manual_seed(2)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    y = torch.nn.functional.pad(x, pad, mode=mode)
    yo = tnn.functional.pad(xo, pad, mode=mode)
    close(y, yo, what="output")
    g = torch.randn(*y.shape, dtype=torch.float64)
    y.backward(g)
    yo.backward(to_tt(g))
    close(x.grad, xo.grad, what="input grad")  # positions copied several times add their gradients


class torch_raises_like:
    """pytest.raises with the exception type and message torch gives for `call`."""

    def __init__(self, call):
        with pytest.raises(Exception) as info:
            call()
        self.raises = pytest.raises(info.type, match=__import__("re").escape(str(info.value)))

    def __enter__(self):
        return self.raises.__enter__()

    def __exit__(self, *exc):
        return self.raises.__exit__(*exc)


def test_pad_mode_errors():
    x = tt.randn(1, 2, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        tnn.functional.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        tnn.functional.pad(x, (4, 0), mode="circular")
    for mode in ("reflect", "replicate"):
        with torch_raises_like(lambda: torch.nn.functional.pad(torch.zeros(1, 2, 3), (-2, -1), mode=mode)):
            tnn.functional.pad(x, (-2, -1), mode=mode)
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode"):
        tnn.functional.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        tnn.Conv2d(1, 1, 3, padding_mode="mirror")
