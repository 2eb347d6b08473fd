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
]


@pytest.mark.parametrize("name,build,shape", CONV_MODULES, ids=[c[0] for c in CONV_MODULES])
def test_conv_and_pool_match_torch(name, build, shape):
    torch.manual_seed(0)
    ref = build(torch.nn)
    ours = build(tnn)
    copy_state(ref, ours)
    x = torch.randn(*shape, requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    y, yo = ref(x), ours(xo)
    close(y, yo, rtol=1e-4, atol=1e-4, what="output")
    g = torch.randn(*y.shape)
    y.backward(g)
    yo.backward(to_tt(g))
    close(x.grad, xo.grad, rtol=1e-4, atol=1e-4, what="input grad")
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        close(p.grad, po.grad, rtol=1e-4, atol=1e-4, what=f"grad of {k}")
    assert repr(ours) == repr(ref)


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
        mask = torch.tensor([[False, False, True]] * 4) if not batch_first else torch.tensor([[False, True, False]] * 3)
        key_len = shape[1] if batch_first else shape[0]
        kp = torch.zeros(shape[1] if not batch_first else shape[0], key_len, dtype=torch.bool)
        kp[0, -1] = True
        y = ref(x, x, x, key_padding_mask=kp)
        yo = ours(xo, xo, xo, key_padding_mask=to_tt(kp))
        del mask
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
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        close(p.grad, po.grad, rtol=1e-6, atol=1e-6, what=f"grad of {k}")
    assert repr(ours) == repr(ref)


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


@pytest.mark.parametrize("name,build,shape,output_size", CONV_TRANSPOSE_MODULES,
                         ids=[c[0] for c in CONV_TRANSPOSE_MODULES])
def test_conv_transpose_matches_torch(name, build, shape, output_size):
    torch.manual_seed(0)
    ref = build(torch.nn)
    ours = build(tnn)
    copy_state(ref, ours)
    x = torch.randn(*shape, requires_grad=True)
    xo = to_tt(x.detach()).requires_grad_(True)
    if output_size is None:
        y, yo = ref(x), ours(xo)
    else:
        y, yo = ref(x, output_size=output_size), ours(xo, output_size=output_size)
    assert tuple(yo.shape) == tuple(y.shape)
    close(y, yo, rtol=1e-4, atol=1e-4, what="output")
    g = torch.randn(*y.shape)
    y.backward(g)
    yo.backward(to_tt(g))
    close(x.grad, xo.grad, rtol=1e-4, atol=1e-4, what="input grad")
    for (k, p), (_, po) in zip(ref.named_parameters(), ours.named_parameters()):
        close(p.grad, po.grad, rtol=1e-4, atol=1e-4, what=f"grad of {k}")
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


@pytest.mark.parametrize("name,build,shape", UPSAMPLE_MODULES, ids=[c[0] for c in UPSAMPLE_MODULES])
def test_upsample_modules_match_torch(name, build, shape):
    test_conv_and_pool_match_torch(name, build, shape)


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
                                       ((1, 2, 4, 5, 3), (1, 1, 2, 0, 1, 2))])
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


def test_pad_mode_errors():
    x = tt.randn(1, 2, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        tnn.functional.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        tnn.functional.pad(x, (4, 0), mode="circular")
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode"):
        tnn.functional.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        tnn.Conv2d(1, 1, 3, padding_mode="mirror")
