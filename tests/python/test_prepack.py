"""Prepacked GEMM weights (issue 13): a packed copy of a Linear weight is kept with the weight's storage
and reused while the weight is unchanged; every way of changing the weight (in-place ops, setitem,
optimizer steps, load_state_dict, writes through numpy/DLPack/data_ptr exports) must give the new
result — compared with torch on the same numbers — and the tests check that the cache really was
used, so they fail if prepacking silently stops or goes stale."""
import numpy as np
import pytest
import torch

import turbo_torch as tt
from torchburn import _C


def _weights(n=48, k=40, seed=0):
    g = np.random.default_rng(seed)
    w = tt.tensor(g.standard_normal((n, k)).astype(np.float32))
    b = tt.tensor(g.standard_normal(n).astype(np.float32))
    return w, b


def _x(m=64, k=40, seed=1):
    return tt.tensor(np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32))


def _check(x, w, b):
    got = tt.nn.functional.linear(x, w, b)
    # the oracle reads copies through tt -> numpy; compute it from values, not from an export of w
    want = torch.nn.functional.linear(torch.tensor(x.tolist()), torch.tensor(w.detach().tolist()),
                                      torch.tensor(b.detach().tolist()))
    np.testing.assert_allclose(np.array(got.tolist(), dtype=np.float32), want.numpy(), rtol=1e-5, atol=1e-5)


pytestmark = pytest.mark.usefixtures("prepack_on")


def test_packed_on_second_call_and_reused():
    w, b = _weights()
    x = _x()
    _check(x, w, b)
    assert _C.prepacked_bytes(w) == 0  # the first product at a version does not pack
    _check(x, w, b)
    assert _C.prepacked_bytes(w) >= 48 * 40 * 4
    _check(x, w, b)
    assert _C.prepacked_bytes(w) >= 48 * 40 * 4


@pytest.mark.parametrize("how", ["add_", "setitem", "copy_", "mul_", "zero_", "normal_", "data_add_", "data_setitem"])
def test_in_place_change_repacks(how):
    w, b = _weights()
    x = _x()
    _check(x, w, b)
    _check(x, w, b)
    assert _C.prepacked_bytes(w) > 0
    with tt.no_grad():
        if how == "add_":
            w.add_(0.5)
        elif how == "setitem":
            w[3, 7] = 100.0
        elif how == "copy_":
            w.copy_(tt.ones(48, 40))
        elif how == "mul_":
            w[:, 1:3].mul_(-2.0)  # through a view: the storage is shared
        elif how == "zero_":
            w.zero_()
        elif how == "data_add_":
            w.data.add_(1.0)  # .data shares the storage, and the version counter is per storage
        elif how == "data_setitem":
            w.data[5] = 2.0
        else:
            w.normal_()
    _check(x, w, b)  # the stale copy must not be used
    assert _C.prepacked_bytes(w) == 0  # dropped at the new version, repacked on the next call
    _check(x, w, b)
    assert _C.prepacked_bytes(w) > 0


def test_view_of_other_rows_is_not_confused():
    w, b = _weights(96, 40)
    x = _x()
    top, bottom = w[:48], w[48:]
    _check(x, top, b[:48])
    _check(x, top, b[:48])
    _check(x, bottom, b[48:])  # same storage, another view: must not reuse top's packing
    _check(x, top.t().contiguous().t(), b[:48])


def test_optimizer_step_and_load_state_dict():
    tt.manual_seed(0)
    lin = tt.nn.Linear(40, 48)
    x = _x()
    for _ in range(2):
        _check(x, lin.weight, lin.bias)
    assert _C.prepacked_bytes(lin.weight) > 0
    opt = tt.optim.SGD(lin.parameters(), lr=0.1)
    lin(x).sum().backward()
    opt.step()  # the C foreach step writes the weight in place
    _check(x, lin.weight, lin.bias)
    other = tt.nn.Linear(40, 48)
    lin.load_state_dict(other.state_dict())
    _check(x, lin.weight, lin.bias)
    _check(x, lin.weight, lin.bias)


def test_exported_memory_is_never_cached():
    w, b = _weights()
    x = _x()
    _check(x, w, b)
    _check(x, w, b)
    assert _C.prepacked_bytes(w) > 0
    view = w.numpy()  # shares memory: numpy writes bypass the version counter
    assert _C.prepacked_bytes(w) == 0
    view[0, :] = 42.0
    _check(x, w, b)
    _check(x, w, b)
    view[1, :] = -3.0
    _check(x, w, b)
    assert _C.prepacked_bytes(w) == 0
    w2, _ = _weights(seed=5)
    w2.data_ptr()
    _check(x, w2, b)
    _check(x, w2, b)
    assert _C.prepacked_bytes(w2) == 0


def test_wrapped_memory_is_never_cached():
    arr = np.random.default_rng(3).standard_normal((48, 40)).astype(np.float32)
    w = tt.from_numpy(arr)
    _, b = _weights()
    x = _x()
    _check(x, w, b)
    _check(x, w, b)
    assert _C.prepacked_bytes(w) == 0
    arr[:] = 1.0
    _check(x, w, b)


def test_few_rows_and_disabled():
    w, b = _weights()
    x = _x(m=4)
    for _ in range(3):
        _check(x, w, b)
    assert _C.prepacked_bytes(w) == 0  # few rows read W in place: nothing to pack
    _C.set_prepack(False)
    x = _x()
    for _ in range(3):
        _check(x, w, b)
    assert _C.prepacked_bytes(w) == 0


def test_module_inference_loop_keeps_its_packing():
    tt.manual_seed(0)
    model = tt.nn.Sequential(tt.nn.Linear(40, 64), tt.nn.ReLU(), tt.nn.Linear(64, 10)).eval()
    x = _x()
    ref = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    ref.load_state_dict({k: torch.tensor(v.tolist()) for k, v in model.state_dict().items()})
    with tt.no_grad():
        for _ in range(3):
            got = model(x)
    assert _C.prepacked_bytes(model[0].weight) > 0 and _C.prepacked_bytes(model[2].weight) > 0
    want = ref(torch.tensor(x.tolist())).detach().numpy()
    np.testing.assert_allclose(np.array(got.tolist(), dtype=np.float32), want, rtol=1e-5, atol=1e-5)
