"""Fused elementwise chains and reductions on the engines (issue 17: "elementwise chains (one generated
shader per fused chain, cached), reductions").

Kernel level: a `fused` op on the reference engine equals the same chain run as separate unary/binary
ops bit for bit (the CPU engines evaluate each step with the kernel table); on Vulkan (lavapipe), the
pipeline specialized to each chain equals the reference within the unary/binary kernels' own
tolerances, for every op code, every broadcast pattern and random chains of up to 16 steps; one
pipeline is built per distinct chain and reused. `reduce` (sum, max, min, mean over [rows, len,
inner]) against the reference, NaN propagation included.

Graph level: compiled models whose elementwise chains, [B, 1] / channel broadcasts, reversed scalar
ops and reductions used to leave the GPU (nn.RMSNorm's decomposition, a BatchNorm-like channel
affine, sum/mean/amax) now run whole on the vulkan engine, equal to eager, with the chain in one
dispatch (counted through gpu_info()).
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import torchburn.gpu as gpu
from test_engine import BINARY, EXACT, SPECIAL, UNARY, assert_close, engine, run_both, run_python, vulkan  # noqa: F401


def unfused(spec, arrays_count):
    """The same chain as separate unary/binary ops (intermediates in extra arrays): (ops, extra arrays)."""
    n = spec["n"]
    ops, extra = [], []
    # register -> array index; broadcast inputs are expanded on the host by the caller
    register_array = {k: k for k in range(len(spec["inputs"]))}
    for s, step in enumerate(spec["steps"]):
        out = arrays_count + len(extra)
        extra.append(np.zeros(n, np.float32))
        lhs = register_array[step["lhs"]]
        if step["kind"] == "unary":
            ops.append({"kind": "unary", "op": step["op"], "n": n, "a": lhs, "y": out, "alpha": step.get("alpha", 0.0),
                        "lo": step.get("lo", 0.0), "hi": step.get("hi", 0.0)})
        elif step["kind"] == "binary":
            ops.append({"kind": "binary", "op": step["op"], "n": n, "b_len": n, "a": lhs,
                        "b": register_array[step["rhs"]], "y": out})
        else:
            scalar = arrays_count + len(extra)
            extra.append(np.full(n, step["scalar"], np.float32))
            a, b = (lhs, scalar) if step["kind"] == "scalar" else (scalar, lhs)
            ops.append({"kind": "binary", "op": step["op"], "n": n, "b_len": n, "a": a, "b": b, "y": out})
        register_array[4 + s] = out
    return ops, extra, register_array[3 + len(spec["steps"])]


def expand(x, n, length, inner):
    index = (np.arange(n) // inner) % length
    return x[index].copy()


@pytest.mark.parametrize("op", UNARY)
def test_each_unary_op_as_a_fused_step(engine, op):
    rng = np.random.default_rng(3)
    x = np.concatenate([SPECIAL, rng.standard_normal(1000).astype(np.float32) * 4])
    if op in ("sin", "cos"):
        x = np.where(np.abs(x) > 1e4, np.float32(3.0), x)
    step = {"kind": "unary", "op": op, "lhs": 0, "alpha": 0.01, "lo": -1.5, "hi": 2.5}
    spec = {"kind": "fused", "n": x.size, "inputs": [(x.size, 1)], "steps": [step], "a": 0, "y": 1}
    (_, got), (_, want) = run_both(engine, [spec], [x, np.zeros_like(x)])
    # the reference's fused step is the reference unary kernel, bit for bit
    plain = np.zeros_like(x)
    gpu.engine_run("reference", [{"kind": "unary", "op": op, "n": x.size, "a": 0, "y": 1, "alpha": 0.01, "lo": -1.5,
                                  "hi": 2.5}], [x, plain])
    assert np.array_equal(want, plain, equal_nan=True)
    rtol = 0.0 if op in EXACT else (1e-6 if engine == "native_cpu" else 2e-6)
    atol = 1e-9 if op in ("gelu", "gelu_tanh", "silu") else 0.0
    assert_close(got, want, rtol, atol, what=f"{engine} fused {op}")


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("kind", ["binary", "scalar", "scalar_first"])
def test_each_binary_op_as_a_fused_step(engine, op, kind):
    a = np.repeat(SPECIAL, SPECIAL.size)
    b = np.tile(SPECIAL, SPECIAL.size)
    if op == "pow":
        a = np.where(np.abs(a) > 1e20, np.float32(2.0), a)
    arrays = [a, b, np.zeros_like(a)]
    scalars = [2.0, -0.5, 3.0] if kind != "binary" else [0.0]
    for scalar in scalars:
        step = {"kind": kind, "op": op, "lhs": 0, "rhs": 1 if kind == "binary" else 0, "scalar": scalar}
        inputs = [(a.size, 1), (b.size, 1)] if kind == "binary" else [(a.size, 1)]
        spec = {"kind": "fused", "n": a.size, "inputs": inputs, "steps": [step], "a": 0, "y": 2}
        if kind == "binary":
            spec["b"] = 1
        (_, _, got), (_, _, want) = run_both(engine, [spec], arrays)
        rtol = 0.0 if op in EXACT else (1e-6 if engine == "native_cpu" else 2e-6)
        if op == "pow" and engine == "vulkan":
            rtol = 2e-5
        assert_close(got, want, rtol, what=f"{engine} fused {kind} {op} {scalar}")


SAFE_UNARY = ["neg", "abs", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "leaky_relu", "clamp", "sin"]
SAFE_BINARY = ["add", "sub", "mul", "maximum", "minimum"]
PATTERNS = {"full": lambda n, rows, cols: (n, 1), "trailing": lambda n, rows, cols: (cols, 1),
            "row": lambda n, rows, cols: (rows, cols), "scalar": lambda n, rows, cols: (1, 1),
            "middle": lambda n, rows, cols: (rows // 3, cols * 3) if rows % 3 == 0 else (rows, cols)}


def random_chain(rng, n, rows, cols, steps):
    ninputs = int(rng.integers(1, 5))
    names = ["full"] + [str(rng.choice(list(PATTERNS))) for _ in range(ninputs - 1)]
    inputs = [PATTERNS[name](n, rows, cols) for name in names]
    chain = []
    for s in range(steps):
        registers = list(range(ninputs)) + [4 + t for t in range(s)]
        lhs = 4 + s - 1 if s and rng.random() < 0.7 else int(rng.choice(registers))
        kind = str(rng.choice(["unary", "binary", "scalar", "scalar_first"]))
        if kind == "unary":
            chain.append({"kind": kind, "op": str(rng.choice(SAFE_UNARY)), "lhs": lhs, "alpha": 0.1, "lo": -2.0, "hi": 1.5})
        elif kind == "binary":
            chain.append({"kind": kind, "op": str(rng.choice(SAFE_BINARY)), "lhs": lhs, "rhs": int(rng.choice(registers))})
        else:
            chain.append({"kind": kind, "op": str(rng.choice(SAFE_BINARY)), "lhs": lhs, "scalar": float(rng.uniform(-2, 2))})
    return inputs, chain


@pytest.mark.parametrize("seed", range(12))
def test_random_chains_against_the_unfused_ops(engine, seed):
    rng = np.random.default_rng(seed)
    rows, cols = [(6, 7), (9, 33), (300, 17), (3, 1)][seed % 4]
    n = rows * cols
    inputs, steps = random_chain(rng, n, rows, cols, int(rng.integers(1, 17)))
    arrays = [rng.standard_normal(length).astype(np.float32) for length, _ in inputs]
    spec = {"kind": "fused", "n": n, "inputs": inputs, "steps": steps, "y": len(arrays)}
    for k, role in enumerate("abcd"[: len(inputs)]):
        spec[role] = k
    mine = [a.copy() for a in arrays] + [np.zeros(n, np.float32)]
    gpu.engine_run(engine, [spec], mine)
    # the oracle: the reference engine running each step as its own op over host-expanded inputs
    expanded = [expand(a, n, length, inner) for a, (length, inner) in zip(arrays, inputs)]
    expanded += [np.zeros(n, np.float32)] * (4 - len(expanded))
    ops, extra, result = unfused({"n": n, "inputs": [(n, 1)] * 4, "steps": steps}, 4)
    golden = [e.copy() for e in expanded] + extra
    gpu.engine_run("reference", ops, golden)
    want = golden[result]
    if engine == "native_cpu":
        assert_close(mine[-1], want, 1e-6, 1e-6, what=f"chain {seed}")
    else:
        assert_close(mine[-1], want, 1e-5, 1e-5, what=f"chain {seed}")
    # and the reference's own fused op equals its unfused ops bit for bit
    ref = [a.copy() for a in arrays] + [np.zeros(n, np.float32)]
    gpu.engine_run("reference", [spec], ref)
    assert np.array_equal(ref[-1], want, equal_nan=True), f"chain {seed}: reference fused != unfused"


def test_one_pipeline_per_distinct_chain(vulkan):
    x = np.linspace(-3, 3, 999, dtype=np.float32)
    y = np.zeros_like(x)

    def chain(scalar):
        return {"kind": "fused", "n": x.size, "inputs": [(x.size, 1)], "a": 0, "y": 1,
                "steps": [{"kind": "unary", "op": "tanh", "lhs": 0},
                          {"kind": "scalar", "op": "mul", "lhs": 4, "scalar": scalar},
                          {"kind": "binary", "op": "add", "lhs": 5, "rhs": 0}]}

    before = gpu.gpu_info()
    gpu.engine_run("vulkan", [chain(0.25)], [x, y])
    gpu.engine_run("vulkan", [chain(0.25), chain(0.25)], [x, y])
    middle = gpu.gpu_info()
    assert middle["specialized_pipelines"] - before["specialized_pipelines"] == 1  # built once, reused
    assert middle["dispatches"] - before["dispatches"] == 3  # one dispatch per chain
    np.testing.assert_allclose(y, np.tanh(x) * 0.25 + x, rtol=2e-6, atol=1e-6)
    gpu.engine_run("vulkan", [chain(0.5)], [x, y])  # another constant: another specialization
    assert gpu.gpu_info()["specialized_pipelines"] - middle["specialized_pipelines"] == 1
    np.testing.assert_allclose(y, np.tanh(x) * 0.5 + x, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("bad,message", [
    ({"steps": [{"kind": "unary", "op": "exp", "lhs": 5}]}, "reads register 5, which holds nothing yet"),
    ({"steps": [{"kind": "binary", "op": "add", "lhs": 0, "rhs": 1}]}, "reads register 1, which holds nothing yet"),
    ({"steps": [{"kind": "unary", "op": "exp", "lhs": 0}] * 17}, "at most 16 dicts"),
    ({"inputs": [(7, 1)]}, "does not tile n=12"),
    ({"inputs": [(12, 1), (3, 1)]}, "input 1 of 2 is missing"),
])
def test_bad_fused_ops_are_refused(vulkan, bad, message):
    spec = {"kind": "fused", "n": 12, "inputs": [(12, 1)], "steps": [{"kind": "unary", "op": "exp", "lhs": 0}],
            "a": 0, "y": 1}
    spec.update(bad)
    for engine in ("reference", "vulkan"):
        with pytest.raises(Exception, match=message):
            gpu.engine_run(engine, [spec], [np.zeros(12, np.float32), np.zeros(12, np.float32)])


@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
@pytest.mark.parametrize("rows,length,inner", [(1, 1, 1), (7, 300, 1), (70000, 3, 1), (5, 1000, 1), (4, 9, 13),
                                               (1, 257, 300), (3, 1, 5)])
def test_reduce_against_reference(engine, op, rows, length, inner):
    rng = np.random.default_rng(rows + length + inner)
    x = rng.standard_normal(rows * length * inner).astype(np.float32)
    spec = {"kind": "reduce", "op": op, "rows": rows, "len": length, "inner": inner, "a": 0, "y": 1}
    (_, got), (_, want) = run_both(engine, [spec], [x, np.zeros(rows * inner, np.float32)])
    oracle = getattr(np, op)(x.reshape(rows, length, inner).astype(np.float64), axis=1).reshape(-1)
    if op in ("max", "min"):
        assert np.array_equal(got, want) and np.array_equal(want, oracle.astype(np.float32))
    else:  # summation order differs: bounded by len * eps * sum|x|
        bound = 4 * length * 1.2e-7 * np.abs(x.reshape(rows, length, inner)).sum(axis=1).reshape(-1)
        if op == "mean":
            bound = bound / length
        assert (np.abs(got - oracle) <= bound + 1e-7).all(), f"{engine} {op}"
        assert (np.abs(want - oracle) <= bound + 1e-7).all()


def test_reduce_propagates_nan_and_infinities(engine):
    x = np.array([[1.0, np.nan, 3.0, -np.inf], [np.inf, 2.0, -1.0, 0.0], [-np.inf, -np.inf, 5.0, 1.0]], np.float32)
    for op in ("max", "min", "sum"):
        spec = {"kind": "reduce", "op": op, "rows": 3, "len": 4, "inner": 1, "a": 0, "y": 1}
        (_, got), (_, want) = run_both(engine, [spec], [x, np.zeros(3, np.float32)])
        oracle = {"max": np.max, "min": np.min, "sum": np.sum}[op](x, axis=1)
        assert np.array_equal(got, oracle, equal_nan=True), (op, got, oracle)
        assert np.array_equal(want, oracle, equal_nan=True), (op, want, oracle)


def test_logsumexp_reduce_is_cpu_only(vulkan):
    x = np.zeros(6, np.float32)
    with pytest.raises(Exception, match="no logsumexp reduction shader"):
        gpu.engine_run("vulkan", [{"kind": "reduce", "op": "logsumexp", "rows": 2, "len": 3, "inner": 1, "a": 0, "y": 1}],
                       [x, np.zeros(2, np.float32)])


# ---- compiled graphs ----

# Prepended to each compiled-model script: runs every case compiled (after a warm-up call: pipelines
# are built at first use) and eagerly, and reports the error, the GPU work of one call and explain.
MEASURE = textwrap.dedent(r"""
    import json, torch, torchburn

    def measure(cases):
        result = {}
        for name, (model, args) in cases.items():
            model.eval()
            compiled = torch.compile(model, backend="torchburn")
            with torch.no_grad():
                compiled(*args)
                before = torchburn.gpu_info()
                got = compiled(*args)
                after = torchburn.gpu_info()
                want = model(*args)
                explained = str(torchburn.explain(model, *args))
            result[name] = {"err": float((got - want).abs().max()), "scale": float(want.abs().max()),
                            "submits": after["submits"] - before["submits"],
                            "dispatches": after["dispatches"] - before["dispatches"],
                            "cpu_regions": explained.count("engine: native_cpu"), "explain": explained}
        return result
""")

COMPILED = textwrap.dedent(r"""
    import json, torch, torchburn
    torch.manual_seed(0)

    class Chain(torch.nn.Module):  # one elementwise chain: one dispatch
        def forward(self, x):
            return 1.0 - torch.sigmoid(torch.tanh(x) * 0.5 + x) / 3.0

    class Channel(torch.nn.Module):  # a BatchNorm-like channel affine: [C, 1, 1] against [N, C, H, W]
        def __init__(self):
            super().__init__()
            self.w, self.b = torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.randn(6))
        def forward(self, x):
            return torch.relu(x * self.w[:, None, None] + self.b[:, None, None])

    class Reductions(torch.nn.Module):
        def forward(self, x):
            return x.sum(-1) + x.mean(-1) * x.amax(-1) - x.amin(1).sum(-1, keepdim=True)

    class Outer(torch.nn.Module):  # [B, 1] against [1, L]: both operands broadcast
        def forward(self, x):
            return x.mean(-1, keepdim=True) * x.amax(0, keepdim=True) + x

    models = {
        "chain": (Chain(), (37, 29)),
        "rmsnorm_mlp": (torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.RMSNorm(48, eps=1e-5), torch.nn.SiLU(),
                                            torch.nn.Linear(48, 8)), (5, 7, 32)),
        "channel": (Channel(), (2, 6, 5, 7)),
        "reductions": (Reductions(), (3, 8, 40)),
        "outer": (Outer(), (9, 11)),
    }
    print(json.dumps(measure({name: (model, (torch.randn(*shape),)) for name, (model, shape) in models.items()})))
""")


def test_compiled_chains_broadcasts_and_reductions_run_whole_on_the_gpu(vulkan):
    out = run_python(MEASURE + COMPILED, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, item in result.items():
        assert item["err"] <= 2e-5 * max(1.0, item["scale"]), (name, item)
        assert item["submits"] == 1 and item["cpu_regions"] == 0, (name, item["explain"])  # nothing left the GPU
    # tanh, mul, add, sigmoid, div, rsub: one specialized dispatch
    assert result["chain"]["dispatches"] == 1, result["chain"]
    # x*w + b then relu: one dispatch over the two channel broadcasts
    assert result["channel"]["dispatches"] == 1, result["channel"]
    # Linear, pow, mean, (add eps, rsqrt), (mul by the [B, 1] row, mul weight, silu), Linear: 6 dispatches, not 9
    assert result["rmsnorm_mlp"]["dispatches"] == 6, result["rmsnorm_mlp"]


# ---- strided copies (views made contiguous) and attention ----

@pytest.mark.parametrize("case", ["transpose", "slice", "expand", "permute4", "five_dims"])
def test_strided_copy_against_numpy(engine, case):
    rng = np.random.default_rng(5)
    base = rng.standard_normal(2 * 3 * 4 * 5 * 2 * 3 + 7).astype(np.float32)
    full = base[7:].reshape(2, 3, 4, 5, 6)
    view = {"transpose": base[:60].reshape(6, 10).T, "slice": base[3:3 + 60].reshape(6, 10)[1:5, 2:9:3],
            "expand": np.broadcast_to(base[:10].reshape(1, 10), (7, 10)),
            "permute4": base[:120].reshape(2, 3, 4, 5).transpose(3, 0, 2, 1), "five_dims": full.transpose(4, 3, 2, 1, 0)}[case]
    itemsize = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // itemsize
    spec = {"kind": "strided_copy", "n": view.size, "shape": list(view.shape),
            "strides": [s // itemsize for s in view.strides], "a_offset": offset, "a": 0, "y": 1}
    (_, got), (_, want) = run_both(engine, [spec], [base, np.zeros(view.size, np.float32)])
    assert np.array_equal(got, np.ascontiguousarray(view).reshape(-1)), case
    assert np.array_equal(want, got)


def test_strided_copy_into_row_blocks_makes_a_cat(engine):
    # cat([a.T, b], dim=1) of a [4, 3] transposed view and a [4, 5] block: rows of 3 and 5 in rows of 8
    rng = np.random.default_rng(8)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    ops = [{"kind": "strided_copy", "n": 12, "shape": [4, 3], "strides": [1, 4], "row": 3, "y_stride": 8, "y_col0": 0,
            "a": 0, "y": 2},
           {"kind": "strided_copy", "n": 20, "shape": [4, 5], "strides": [5, 1], "row": 5, "y_stride": 8, "y_col0": 3,
            "a": 1, "y": 2}]
    (_, _, got), (_, _, want) = run_both(engine, ops, [a.reshape(-1), b.reshape(-1), np.zeros(32, np.float32)])
    oracle = np.concatenate([a.T, b], axis=1).reshape(-1)
    assert np.array_equal(got, oracle) and np.array_equal(want, oracle)
    with pytest.raises(Exception, match="do not fit rows of 8"):
        gpu.engine_run(engine, [dict(ops[1], y_col0=4)], [a.reshape(-1), b.reshape(-1), np.zeros(32, np.float32)])


def attention_oracle(q, k, v, mask, causal, scale):
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1).astype(np.float64)
    v = np.repeat(v, group, axis=1).astype(np.float64)
    scores = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        tq, tk = scores.shape[-2:]
        scores = np.where(np.tril(np.ones((tq, tk), bool)), scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    weights = np.where(np.isneginf(scores), 0.0, np.exp(scores - np.where(np.isneginf(top), 0.0, top)))
    total = weights.sum(-1, keepdims=True)
    out = np.einsum("bhij,bhjd->bhid", weights, v)
    return np.where(total > 0, out / np.where(total > 0, total, 1.0), 0.0)


@pytest.mark.parametrize("b,hq,hkv,tq,tk,d,dv,causal,mask", [
    (1, 1, 1, 1, 1, 1, 1, False, None), (2, 4, 4, 9, 9, 16, 16, False, None), (2, 4, 2, 70, 70, 8, 12, True, None),
    (1, 2, 1, 5, 130, 64, 64, False, "row"), (3, 2, 2, 17, 17, 33, 7, True, "full"), (1, 1, 1, 4, 300, 520, 3, False, None),
    (2, 2, 2, 6, 6, 8, 8, False, "all_masked_row")])
def test_attention_against_reference(engine, b, hq, hkv, tq, tk, d, dv, causal, mask):
    if d > 512:
        d = 512  # the op's limit; D = 512 exercises the widest shared-memory row
    rng = np.random.default_rng(tq * 31 + tk)
    q = rng.standard_normal((b, hq, tq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, tk, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, tk, dv)).astype(np.float32)
    scale = 1.0 / np.sqrt(d)
    spec = {"kind": "attention", "batch": b, "q_heads": hq, "kv_heads": hkv, "q_len": tq, "kv_len": tk, "head_dim": d,
            "value_dim": dv, "causal": int(causal), "scale": float(scale), "a": 0, "b": 1, "c": 2, "y": 3}
    arrays = [q, k, v, np.full((b, hq, tq, dv), np.nan, np.float32)]
    mask_array = None
    if mask == "row":  # [B, 1, 1, Tk] padding mask, broadcast over heads and queries
        mask_array = np.where(rng.random((b, 1, 1, tk)) < 0.3, -np.inf, 0.0).astype(np.float32)
        spec["mask_strides"] = [tk, 0, 0, 1]
    elif mask == "full":
        mask_array = rng.standard_normal((b, hq, tq, tk)).astype(np.float32)
        spec["mask_strides"] = [hq * tq * tk, tq * tk, tk, 1]
    elif mask == "all_masked_row":
        mask_array = np.zeros((1, 1, tq, tk), np.float32)
        mask_array[0, 0, 2, :] = -np.inf  # query 2 sees no key: its output is 0
        spec["mask_strides"] = [0, 0, tk, 1]
    if mask_array is not None:
        arrays.append(mask_array)
        spec["d"] = 4
    mine, golden = run_both(engine, [spec], arrays)
    got, want = mine[3], golden[3]
    oracle = attention_oracle(q, k, v, mask_array, causal, scale)
    assert np.abs(want - oracle).max() <= 1e-5, "reference vs float64"
    assert np.abs(got - oracle).max() <= 2e-5, f"{engine} vs float64: {np.abs(got - oracle).max()}"
    if mask == "all_masked_row":
        assert (got[:, :, 2] == 0).all()


COMPILED_ATTENTION = textwrap.dedent(r"""
    import json, torch, torchburn
    import torch.nn.functional as F
    torch.manual_seed(0)

    class Causal(torch.nn.Module):  # GQA with a causal mask, heads split from one projection
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(32, 64), torch.nn.Linear(32, 32)
        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split([32, 16, 16], dim=-1)
            q = q.view(b, t, 4, 8).transpose(1, 2)
            k = k.view(b, t, 2, 8).transpose(1, 2)
            v = v.view(b, t, 2, 8).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.out(y.transpose(1, 2).reshape(b, t, 32))

    class Masked(torch.nn.Module):  # an additive [B, 1, 1, T] padding mask
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    class Rope(torch.nn.Module):  # Llama's rotate_half: a cat of two negated / plain slices
        def forward(self, x, cos, sin):
            half = x.shape[-1] // 2
            rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            return x * cos + rotated * sin

    class Manual(torch.nn.Module):  # attention written out: batched q @ k^T (B read transposed) and p @ v
        def forward(self, q, k, v):
            return torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1) @ v

    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
                                          num_layers=2, enable_nested_tensor=False)
    mask = torch.zeros(2, 1, 1, 11)
    mask[0, ..., 8:] = float("-inf")
    cases = {
        "encoder": (encoder, (torch.randn(2, 13, 32),)),
        "causal_gqa": (Causal(), (torch.randn(3, 10, 32),)),
        "masked": (Masked(), (torch.randn(2, 2, 11, 8), torch.randn(2, 2, 11, 8), torch.randn(2, 2, 11, 8), mask)),
        "rope": (Rope(), (torch.randn(2, 4, 9, 16), torch.randn(9, 16), torch.randn(9, 16))),
        "manual": (Manual(), (torch.randn(2, 3, 7, 8), torch.randn(2, 3, 11, 8), torch.randn(2, 3, 11, 5))),
    }
    print(json.dumps(measure(cases)))
""")


def test_compiled_attention_models_run_whole_on_the_gpu(vulkan):
    out = run_python(MEASURE + COMPILED_ATTENTION, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, item in result.items():
        assert item["err"] <= 2e-5 * max(1.0, item["scale"]), (name, item)
        # one GPU region: projections, the head split (strided copies), attention, norms, FFN
        assert item["submits"] == 1 and item["cpu_regions"] == 0, (name, item["explain"])
        assert ("attention <- " in item["explain"]) == (name not in ("rope", "manual")), (name, item["explain"])


HF_MODELS = textwrap.dedent(r"""
    import json, torch, torchburn, transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    models = {
        "bert": transformers.BertModel(transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                               intermediate_size=128, vocab_size=100)),
        "gpt2": transformers.GPT2Model(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                                                               bos_token_id=0, eos_token_id=0)),
        "llama": transformers.LlamaModel(transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                                  num_key_value_heads=2, intermediate_size=128,
                                                                  vocab_size=100)),
    }
    result = {}
    for name, model in models.items():
        model.eval()
        ids = torch.randint(0, 100, (2, 12))
        with torch.no_grad():
            want = model(ids).last_hidden_state
            got = torch.compile(model, backend="torchburn")(ids).last_hidden_state
            explained = str(torchburn.explain(model, ids))
        result[name] = {"err": float((got - want).abs().max()), "gpu": explained.count("engine: vulkan"),
                        "cpu": explained.count("engine: native_cpu"), "explain": explained}
    print(json.dumps(result))
""")


def test_transformers_models_run_on_the_gpu_but_their_embedding_lookup(vulkan):
    pytest.importorskip("transformers")
    out = run_python(HF_MODELS, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, item in result.items():
        assert item["err"] <= 1e-5, (name, item["err"])
        # everything after the token-id lookup is one GPU region (attention, RoPE's cat, norms, MLPs);
        # the lookup reads int64 ids, which the engine does not take
        assert item["gpu"] == 1 and item["cpu"] == 1, (name, item["explain"])
        assert "(input): only float32, float16 and bfloat16 values are taken" in item["explain"], (name, item["explain"])


# ---- batched matmul ----

@pytest.mark.parametrize("batch,m,n,k", [(3, 2, 5, 7), (4, 17, 33, 65), (2, 70, 66, 9), (5, 1, 130, 64)])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("shared_b", [False, True])
def test_batched_matmul_against_reference(engine, batch, m, n, k, trans_b, shared_b):
    rng = np.random.default_rng(batch * 100 + m)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((1 if shared_b else batch,) + ((n, k) if trans_b else (k, n))).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    spec = {"kind": "matmul", "m": m, "n": n, "k": k, "trans_b": int(trans_b), "batch": batch, "a_batch": m * k,
            "b_batch": 0 if shared_b else n * k, "a": 0, "b": 1, "c": 2, "y": 3}
    (*_, got), (*_, want) = run_both(engine, [spec], [a, b, bias, np.full((batch, m, n), np.nan, np.float32)])
    bm = np.swapaxes(b, -1, -2) if trans_b else b
    oracle = np.matmul(a.astype(np.float64), bm.astype(np.float64)) + bias
    bound = 1e-5 * np.matmul(np.abs(a).astype(np.float64), np.abs(bm).astype(np.float64)) + 1e-6
    assert (np.abs(got - oracle) <= bound).all() and (np.abs(want - oracle) <= bound).all()
