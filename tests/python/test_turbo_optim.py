"""turbo_torch.optim and optim.lr_scheduler against real PyTorch: 10-step parameter trajectories of
every optimizer and option set from identical initial values, param groups, state_dict round trips
and interchange with torch's state_dict structure, and 30-step lr sequences of the schedulers."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import turbo_torch as tt  # noqa: E402
from torchburn import _C  # noqa: E402

# (atol, rtol) per dtype: float32 params drift by float32 rounding of the loss gradients and of the
# update (torch rounds after every op, our C step once per stored value); float64 only by op order.
TOL = {"float32": (2e-6, 2e-5), "float64": (1e-12, 1e-11)}
STEPS = 10

OPTIMIZER_CASES = [
    ("SGD", {"lr": 0.05}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1, "maximize": True}),
    ("SGD", {"lr": 0.05, "weight_decay": 0.2}),
    ("Adam", {"lr": 0.05}),
    ("Adam", {"lr": 0.05, "amsgrad": True}),
    ("Adam", {"lr": 0.05, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.05, "betas": (0.8, 0.9), "eps": 1e-4, "maximize": True}),
    ("Adam", {"lr": 0.05, "amsgrad": True, "weight_decay": 0.1, "maximize": True}),
    ("AdamW", {"lr": 0.05}),
    ("AdamW", {"lr": 0.05, "amsgrad": True, "weight_decay": 0.3}),
    ("AdamW", {"lr": 0.05, "weight_decay": 0.1, "maximize": True, "betas": (0.5, 0.6)}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "centered": True}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "eps": 1e-4, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.1}),
    ("Adagrad", {"lr": 0.1, "initial_accumulator_value": 0.5, "weight_decay": 0.1}),
    ("Adagrad", {"lr": 0.1, "eps": 1e-3, "maximize": True}),
]


def _data(dtype: str):
    rng = np.random.default_rng(7)
    return {"w": rng.uniform(-1, 1, (4, 3)).astype(dtype), "b": rng.uniform(-1, 1, (3,)).astype(dtype),
            "x": rng.uniform(-1, 1, (5, 4)).astype(dtype), "y": rng.uniform(-1, 1, (5, 3)).astype(dtype)}


class Problem:
    """loss = mean((x @ w + b - y)^2) + sum(w^3)/10 in one library, from fixed initial values."""

    def __init__(self, lib, dtype: str) -> None:
        self.lib = lib
        data = _data(dtype)
        self.x, self.y = (lib.from_numpy(data[k].copy()) for k in ("x", "y"))
        self.params = [lib.from_numpy(data[k].copy()).requires_grad_(True) for k in ("w", "b")]

    def loss(self):
        w, b = self.params
        return ((self.x @ w + b - self.y) ** 2).mean() + (w ** 3).sum() / 10

    def train(self, optimizer, steps: int) -> list:
        trajectory = []
        for _ in range(steps):
            optimizer.zero_grad()
            self.loss().backward()
            optimizer.step()
            trajectory.append([p.detach().numpy().copy() for p in self.params])
        return trajectory


def _assert_close(ours: list, theirs: list, dtype: str, what: str) -> None:
    atol, rtol = TOL[dtype]
    for step, (a_params, b_params) in enumerate(zip(ours, theirs)):
        for i, (a, b) in enumerate(zip(a_params, b_params)):
            np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=f"{what}: step {step + 1}, param {i}")


def _optimizers(name: str, options: dict, dtype: str):
    ours, theirs = Problem(tt, dtype), Problem(torch, dtype)
    return ours, getattr(tt.optim, name)(ours.params, **options, foreach=False), theirs, getattr(torch.optim, name)(
        theirs.params, **options, foreach=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,options", OPTIMIZER_CASES, ids=[f"{n}-{o}" for n, o in OPTIMIZER_CASES])
def test_trajectory_matches_torch(name: str, options: dict, dtype: str) -> None:
    ours, opt, theirs, ref = _optimizers(name, options, dtype)
    _assert_close(ours.train(opt, STEPS), theirs.train(ref, STEPS), dtype, f"{name}{options}")
    # the state tensors carry the same values under the same names
    for p, q in zip(ours.params, theirs.params):
        mine, torchs = opt.state[p], ref.state[q]
        assert set(mine) == set(k for k, v in torchs.items() if v is not None)
        for key, value in torchs.items():
            if value is not None:
                atol, rtol = TOL[dtype]
                np.testing.assert_allclose(mine[key].numpy(), value.numpy(), atol=atol, rtol=rtol, err_msg=key)
                assert mine[key].dtype.itemsize == value.dtype.itemsize, key


# Parameters big enough together for the C step to split its (parameter, chunk) items over threads:
# sizes off the 256-element chunk, an empty one, one smaller than a chunk.
BIG_SHAPES = [(300, 257), (1000,), (0,), (7,), (129, 513), (65536,)]
BIG_CASES = [("SGD", {"lr": 0.05}), ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
             ("Adam", {"lr": 0.05, "amsgrad": True}), ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
             ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5}), ("Adagrad", {"lr": 0.1})]


def _big_run(lib, name: str, options: dict, steps: int = 3) -> list:
    rng = np.random.default_rng(11)
    values = [rng.uniform(-1, 1, s).astype("float32") for s in BIG_SHAPES]
    grads = [[rng.uniform(-1, 1, s).astype("float32") for s in BIG_SHAPES] for _ in range(steps)]
    params = [lib.from_numpy(v).requires_grad_(True) for v in values]
    opt = getattr(lib.optim, name)(params, **options)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = lib.from_numpy(g.copy())
        opt.step()
    return [p.detach().numpy().copy() for p in params]


@pytest.mark.parametrize("name,options", BIG_CASES, ids=[f"{n}-{o}" for n, o in BIG_CASES])
def test_threaded_step_matches_torch_and_one_thread(name: str, options: dict) -> None:
    import torchburn
    before = torchburn.get_num_threads()
    try:
        torchburn.set_num_threads(1)
        alone = _big_run(tt, name, options)
        torchburn.set_num_threads(2)
        split = _big_run(tt, name, options)
    finally:
        torchburn.set_num_threads(before)
    theirs = _big_run(torch, name, options)
    atol, rtol = TOL["float32"]
    for i, (a, b, c) in enumerate(zip(split, alone, theirs)):
        np.testing.assert_array_equal(a, b, err_msg=f"{name}: param {i}, 2 threads vs 1")
        np.testing.assert_allclose(a, c, atol=atol, rtol=rtol, err_msg=f"{name}: param {i} vs torch")


SGD_EXACT = [{"lr": 1e-2}, {"lr": 0.1, "momentum": 0.9}, {"lr": 0.1, "momentum": 0.9, "dampening": 0.3},
             {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-2},
             {"lr": 0.1, "weight_decay": 0.1, "maximize": True},
             {"lr": 0.1, "momentum": 0.5, "maximize": True, "weight_decay": 1e-3, "nesterov": True}]


@pytest.mark.parametrize("options", SGD_EXACT, ids=[str(o) for o in SGD_EXACT])
@pytest.mark.parametrize("foreach", [False, True])
def test_float32_sgd_is_torch_bit_for_bit(options: dict, foreach: bool, isa: str) -> None:
    """float32 SGD computes in float32 with torch's roundings (a fused multiply-add per add(alpha=)), so
    10 steps give torch's parameters and momentum buffers exactly, at every ISA level (sizes off the
    8-lane vector and the 256-element chunk; two threads split the large one)."""
    import torchburn
    rng = np.random.default_rng(5)
    shapes = [(1003,), (64, 33), (7,), (300, 257)]
    start = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(STEPS)]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in start]
    ours = [tt.tensor(v.copy(), requires_grad=True) for v in start]
    ref = torch.optim.SGD(theirs, foreach=foreach, **options)
    opt = tt.optim.SGD(ours, **options)
    before = torchburn.get_num_threads()
    try:
        torchburn.set_num_threads(2)
        for step in range(STEPS):
            for a, b, g in zip(theirs, ours, grads[step]):
                a.grad, b.grad = torch.tensor(g), tt.tensor(g)
            ref.step()
            opt.step()
            for i, (a, b) in enumerate(zip(theirs, ours)):
                np.testing.assert_array_equal(b.detach().numpy(), a.detach().numpy(), err_msg=f"step {step}, {i}")
    finally:
        torchburn.set_num_threads(before)
    if options.get("momentum"):
        for a, b in zip(theirs, ours):
            np.testing.assert_array_equal(opt.state[b]["momentum_buffer"].numpy(),
                                          ref.state[a]["momentum_buffer"].numpy())


def test_param_groups_with_different_options() -> None:
    ours, theirs = Problem(tt, "float32"), Problem(torch, "float32")

    def groups(params):
        return [{"params": [params[0]], "lr": 0.1, "momentum": 0.9}, {"params": [params[1]], "nesterov": False}]

    opt = tt.optim.SGD(groups(ours.params), lr=0.02, weight_decay=0.05, foreach=False)
    ref = torch.optim.SGD(groups(theirs.params), lr=0.02, weight_decay=0.05, foreach=False)
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in ref.param_groups]
    _assert_close(ours.train(opt, STEPS), theirs.train(ref, STEPS), "float32", "two groups")


def test_add_param_group_and_zero_grad() -> None:
    ours, theirs = Problem(tt, "float32"), Problem(torch, "float32")
    opt = tt.optim.Adam([ours.params[0]], lr=0.05, foreach=False)
    ref = torch.optim.Adam([theirs.params[0]], lr=0.05, foreach=False)
    opt.add_param_group({"params": ours.params[1], "lr": 0.01, "amsgrad": True})
    ref.add_param_group({"params": theirs.params[1], "lr": 0.01, "amsgrad": True})
    _assert_close(ours.train(opt, STEPS), theirs.train(ref, STEPS), "float32", "add_param_group")
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any().item() for p in ours.params)
    opt.zero_grad()
    assert all(p.grad is None for p in ours.params)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [ours.params[0]]})


def _plain(sd: dict, convert) -> dict:
    """A deep copy of an optimizer state_dict with every tensor passed through convert."""
    def walk(value):
        if isinstance(value, (torch.Tensor, tt.Tensor)):
            return convert(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value
    return walk(sd)


def _to_tt(t):
    return tt.from_numpy(t.detach().numpy().copy())


def _to_torch(t):
    return torch.from_numpy(t.detach().numpy().copy())


def _structure(sd: dict) -> dict:
    """The state_dict with tensors replaced by (dtype itemsize, shape)."""
    return _plain(sd, lambda t: (t.dtype.itemsize, tuple(t.shape)))


@pytest.mark.parametrize("name,options", [("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.05, "amsgrad": True}),
                                          ("AdamW", {"lr": 0.05}), ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9}),
                                          ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}), ("SGD", {"lr": 0.05})])
def test_state_dict_round_trip_and_torch_interchange(name: str, options: dict) -> None:
    ours, opt, theirs, ref = _optimizers(name, options, "float32")
    ours.train(opt, 3)
    theirs.train(ref, 3)
    # the same structure as PyTorch's: index keys, state names, group entries
    assert _structure(opt.state_dict()) == _structure(ref.state_dict())

    # round trip: a fresh optimizer on copies of the params continues exactly like the original
    clone = Problem(tt, "float32")
    for p, q in zip(clone.params, ours.params):
        p.detach().copy_(q.detach())
    opt2 = getattr(tt.optim, name)(clone.params, **options, foreach=False)
    opt2.load_state_dict(_plain(opt.state_dict(), lambda t: t.clone()))
    a, b = ours.train(opt, 4), clone.train(opt2, 4)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)

    # torch's state_dict (tensors converted) loaded into ours gives torch's next steps, and back
    mine = Problem(tt, "float32")
    for p, q in zip(mine.params, theirs.params):
        p.detach().copy_(_to_tt(q))
    opt3 = getattr(tt.optim, name)(mine.params, **options, foreach=False)
    opt3.load_state_dict(_plain(ref.state_dict(), _to_tt))
    back = Problem(torch, "float32")
    for p, q in zip(back.params, ours.params):
        p.detach().copy_(_to_torch(q))
    ref2 = getattr(torch.optim, name)(back.params, **options, foreach=False)
    ref2.load_state_dict(_plain(opt.state_dict(), _to_torch))
    _assert_close(mine.train(opt3, 5), theirs.train(ref, 5), "float32", "torch state_dict into ours")
    _assert_close(ours.train(opt, 5), back.train(ref2, 5), "float32", "our state_dict into torch")


def test_load_state_dict_errors_like_torch() -> None:
    ours = Problem(tt, "float32")
    opt = tt.optim.Adam(ours.params)
    other = tt.optim.Adam([ours.params[0]])
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict(other.state_dict())
    two = tt.optim.Adam([{"params": [ours.params[0]]}, {"params": [ours.params[1]]}])
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict(two.state_dict())


@pytest.mark.parametrize("make", [
    lambda lib, p: lib.optim.SGD(p, lr=-1.0), lambda lib, p: lib.optim.SGD(p, lr=0.1, nesterov=True),
    lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=-0.5), lambda lib, p: lib.optim.Adam(p, betas=(1.0, 0.9)),
    lambda lib, p: lib.optim.Adam(p, eps=-1.0), lambda lib, p: lib.optim.AdamW(p, weight_decay=-1.0),
    lambda lib, p: lib.optim.RMSprop(p, alpha=-1.0), lambda lib, p: lib.optim.Adagrad(p, lr_decay=-1.0),
    lambda lib, p: lib.optim.Adagrad(p, initial_accumulator_value=-1.0), lambda lib, p: lib.optim.Adam([]),
    lambda lib, p: lib.optim.Adam(p[0]), lambda lib, p: lib.optim.Adam([p[0] * 2]),
    lambda lib, p: lib.optim.Adam([{"params": [p[0]]}, {"params": [p[0]]}]),
])
def test_constructor_errors_like_torch(make) -> None:
    with pytest.raises(Exception) as expected:
        make(torch, Problem(torch, "float32").params)
    with pytest.raises(type(expected.value)) as got:
        make(tt, Problem(tt, "float32").params)
    # the same message (a Tensor's type name is torch.FloatTensor there)
    assert str(got.value).split(" but got ")[0] == str(expected.value).split(" but got ")[0]


def test_repr_like_torch() -> None:
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad"):
        ours = getattr(tt.optim, name)(Problem(tt, "float32").params, lr=0.1)
        theirs = getattr(torch.optim, name)(Problem(torch, "float32").params, lr=0.1)
        assert repr(ours) == repr(theirs)


def test_step_runs_without_autograd_and_bumps_versions() -> None:
    ours, theirs = Problem(tt, "float32"), Problem(torch, "float32")
    for lib, problem, make in ((tt, ours, tt.optim.Adam), (torch, theirs, torch.optim.Adam)):
        opt = make(problem.params, lr=0.1)
        problem.loss().backward()
        w = problem.params[0]
        saved = (w * w).sum()  # mul saves w: a step changes w in place
        opt.step()
        assert w.is_leaf and w.grad_fn is None and w.requires_grad
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            saved.backward()


def test_closure_and_params_without_grad() -> None:
    ours, theirs = Problem(tt, "float32"), Problem(torch, "float32")
    extra_t, extra_r = tt.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    opt = tt.optim.SGD(ours.params + [extra_t], lr=0.1, momentum=0.9, foreach=False)
    ref = torch.optim.SGD(theirs.params + [extra_r], lr=0.1, momentum=0.9, foreach=False)

    def closure(problem, optimizer):
        def run():
            optimizer.zero_grad()
            loss = problem.loss()
            loss.backward()
            return loss
        return run

    for _ in range(3):
        la = opt.step(closure(ours, opt))
        lb = ref.step(closure(theirs, ref))
        assert abs(la.item() - lb.item()) <= 1e-5 * max(1.0, abs(lb.item()))
    assert extra_t.tolist() == [1.0, 1.0] and extra_t not in opt.state
    _assert_close([[p.detach().numpy() for p in ours.params]], [[p.detach().numpy() for p in theirs.params]],
                  "float32", "closure")


def test_c_step_refuses_bad_tensors_without_writing() -> None:
    p = tt.ones(3, requires_grad=True)
    before = p.detach().clone()
    exp_avg, exp_avg_sq, step = tt.zeros(3), tt.zeros(3), tt.tensor(0.0)
    good = dict(lr=0.1, weight_decay=0.0, momentum=0.0, dampening=0.0, beta1=0.9, beta2=0.99, eps=1e-8, alpha=0.0,
                lr_decay=0.0, flags=0)

    def call(params, grads, s0, s1, steps):
        _C._tt_optim_step(1, params, grads, s0, s1, None, steps, None, *good.values())

    q = tt.ones(3, requires_grad=True)
    cases = [
        (RuntimeError, "shape", lambda: call([q, p], [tt.ones(3), tt.ones(4)], [tt.zeros(3), exp_avg],
                                             [tt.zeros(3), exp_avg_sq], [tt.tensor(0.0), step])),
        (RuntimeError, "dtype", lambda: call([p], [tt.ones(3, dtype=tt.float64)], [exp_avg], [exp_avg_sq], [step])),
        (RuntimeError, "float32 and float64", lambda: call([tt.ones(3, dtype=tt.int64)], [tt.ones(3, dtype=tt.int64)],
                                                        [tt.zeros(3, dtype=tt.int64)], [tt.zeros(3, dtype=tt.int64)],
                                                        [step])),
        (RuntimeError, "contiguous", lambda: call([p], [tt.ones(6)[::2]], [exp_avg], [exp_avg_sq], [step])),
        (RuntimeError, "0-dim", lambda: call([p], [tt.ones(3)], [exp_avg], [exp_avg_sq], [tt.zeros(1)])),
        (RuntimeError, "no exp_avg_sq", lambda: call([p], [tt.ones(3)], [exp_avg], None, [step])),
        (ValueError, "list of 1", lambda: call([p], [], [exp_avg], [exp_avg_sq], [step])),
        (TypeError, "must be a Tensor", lambda: call([p], [[1.0, 2.0, 3.0]], [exp_avg], [exp_avg_sq], [step])),
    ]
    for error, message, run in cases:
        with pytest.raises(error, match=message):
            run()
    # nothing was written, not even the first (valid) parameter of the shape case
    assert p.tolist() == before.tolist() and q.tolist() == [1.0, 1.0, 1.0]
    assert exp_avg.tolist() == [0.0] * 3 and step.item() == 0.0


# ---------------------------------------------------------------------------------------------- schedulers

SCHEDULER_CASES = [
    ("StepLR", {"step_size": 4, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [3, 7, 7, 20], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 10}),
    ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.001}),
    ("LinearLR", {}),
    ("LinearLR", {"start_factor": 0.5, "end_factor": 0.1, "total_iters": 12}),
    ("OneCycleLR", {"max_lr": 0.5, "total_steps": 30}),
    ("OneCycleLR", {"max_lr": [0.5, 0.2], "total_steps": 31, "anneal_strategy": "linear", "three_phase": True}),
    ("OneCycleLR", {"max_lr": 1.0, "epochs": 4, "steps_per_epoch": 8, "pct_start": 0.25, "div_factor": 10.0}),
]


def _scheduled(lib, optimizer: str = "SGD"):
    params = [lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)]
    groups = [{"params": [params[0]], "lr": 0.1}, {"params": [params[1]], "lr": 0.01}]
    kwargs = {"momentum": 0.9} if optimizer == "SGD" else {}
    return getattr(lib.optim, optimizer)(groups, **kwargs)


def _lambda_factory(lib_name):
    return {"lr_lambda": [lambda epoch: 0.95 ** epoch, lambda epoch: 1.0 / (epoch + 1)]}


def _run_scheduler(lib, name: str, options: dict, optimizer: str = "SGD", steps: int = 30):
    opt = _scheduled(lib, optimizer)
    sched = getattr(lib.optim.lr_scheduler, name)(opt, **options)
    lrs = [sched.get_last_lr()]
    momenta = []
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
        momenta.append([g.get("momentum", g.get("betas")) for g in opt.param_groups])
    return lrs, momenta, sched, opt


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
@pytest.mark.parametrize("name,options", SCHEDULER_CASES + [("LambdaLR", None)],
                         ids=[f"{n}-{o}" for n, o in SCHEDULER_CASES] + ["LambdaLR"])
def test_scheduler_lr_sequence_equals_torch(name: str, options: dict | None, optimizer: str) -> None:
    options = options if options is not None else _lambda_factory(name)
    ours = _run_scheduler(tt, name, options, optimizer)
    theirs = _run_scheduler(torch, name, options, optimizer)
    assert ours[0] == theirs[0]  # the same float operations in the same order: exactly equal
    assert ours[1] == theirs[1]
    assert [{k: v for k, v in g.items() if k != "params"} for g in ours[3].param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in theirs[3].param_groups]
    mine, torchs = ours[2].state_dict(), theirs[2].state_dict()
    assert mine.keys() == torchs.keys() and all(mine[k] == torchs[k] for k in mine if k != "lr_lambdas")


@pytest.mark.parametrize("name,options", SCHEDULER_CASES[:7], ids=[n for n, _ in SCHEDULER_CASES[:7]])
def test_scheduler_state_dict_resume(name: str, options: dict) -> None:
    full, _, _, _ = _run_scheduler(tt, name, options, steps=20)
    opt = _scheduled(tt)
    sched = getattr(tt.optim.lr_scheduler, name)(opt, **options)
    for _ in range(8):
        opt.step()
        sched.step()
    saved_sched, saved_opt = copy.deepcopy(sched.state_dict()), opt.state_dict()
    opt2 = _scheduled(tt)  # the usual resume: build both, then load both
    sched2 = getattr(tt.optim.lr_scheduler, name)(opt2, **options)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    resumed = [sched2.get_last_lr()]
    for _ in range(12):
        opt2.step()
        sched2.step()
        resumed.append(sched2.get_last_lr())
    assert resumed == full[8:]


def test_closed_form_with_epoch_argument() -> None:
    for name, options in SCHEDULER_CASES[:7]:
        seqs = []
        for lib in (tt, torch):
            opt = _scheduled(lib)
            sched = getattr(lib.optim.lr_scheduler, name)(opt, **options)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                seqs.append([(sched.step(e), sched.get_last_lr())[1] for e in (3, 9, 4, 15)])
        assert seqs[0] == seqs[1], name


@pytest.mark.parametrize("options", [{}, {"mode": "max", "factor": 0.5, "patience": 2, "threshold_mode": "abs",
                                          "threshold": 0.05, "cooldown": 3, "min_lr": [0.02, 0.001]},
                                     {"patience": 1, "eps": 0.05, "cooldown": 1}])
def test_reduce_lr_on_plateau_equals_torch(options: dict) -> None:
    metrics = [1.0, 0.9, 0.85, 0.85, 0.86, 0.9, 0.84, 0.84, 0.84, 0.95, 1.2, 0.5, 0.5, 0.5, 0.51, 0.49] * 3
    results = []
    for lib in (tt, torch):
        opt = _scheduled(lib)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **options)
        lrs = []
        for value in metrics:
            opt.step()
            sched.step(value)
            lrs.append(sched.get_last_lr())
        results.append((lrs, {k: v for k, v in sched.state_dict().items()}))
    assert results[0][0] == results[1][0]
    assert results[0][1] == results[1][1]


@pytest.mark.parametrize("make", [
    lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, start_factor=0.0),
    lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, end_factor=1.5),
    lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1),
    lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=0),
    lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10, pct_start=2.0),
    lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.1], total_steps=10),
    lambda lib, o: lib.optim.lr_scheduler.ReduceLROnPlateau(o, factor=1.0),
    lambda lib, o: lib.optim.lr_scheduler.ReduceLROnPlateau(o, mode="avg"),
    lambda lib, o: lib.optim.lr_scheduler.StepLR(object(), 3),
    lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, [lambda e: 1.0]),
])
def test_scheduler_errors_like_torch(make) -> None:
    with pytest.raises(Exception) as expected:
        make(torch, _scheduled(torch))
    with pytest.raises(type(expected.value)) as got:
        make(tt, _scheduled(tt))
    assert str(got.value) == str(expected.value)


def test_one_cycle_past_total_steps_raises_like_torch() -> None:
    for lib in (tt, torch):
        opt = _scheduled(lib)
        sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
        for _ in range(3):
            opt.step()
            sched.step()
        with pytest.raises(ValueError, match="Tried to step 4 times"):
            sched.step()


def test_scheduler_warns_when_stepped_before_optimizer() -> None:
    opt = _scheduled(tt)
    sched = tt.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()


def test_optim_runs_without_torch() -> None:
    import subprocess
    import sys
    program = "\n".join([
        "import sys", "sys.modules['torch'] = None", "import turbo_torch as torch",
        "w = torch.ones(3, requires_grad=True)",
        "opt = torch.optim.AdamW([w], lr=0.1)",
        "sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=5)",
        "for _ in range(5):",
        "    opt.zero_grad(); (w * w).sum().backward(); opt.step(); sched.step()",
        "assert w.tolist()[0] < 1.0, w", "print('ok')"])
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_a_parameter_listed_twice_is_updated_in_order_on_any_thread_count():
    """The threaded step runs a repeated parameter's slots serially (never two threads on one tensor)."""
    import torchburn

    results, before = [], torchburn.get_num_threads()
    try:
        for threads in (1, 2):
            torchburn.set_num_threads(threads)
            tt.manual_seed(0)
            p = tt.randn(300, 300, requires_grad=True)
            q = tt.randn(300, 300, requires_grad=True)
            with pytest.warns(UserWarning, match="duplicate parameters"):
                optimizer = tt.optim.SGD([p, q, p], lr=0.1)
            for _ in range(3):
                optimizer.zero_grad()
                (p * q).sum().backward()
                optimizer.step()
            results.append(p.detach().numpy().copy())
    finally:
        torchburn.set_num_threads(before)
    assert np.array_equal(results[0], results[1])
