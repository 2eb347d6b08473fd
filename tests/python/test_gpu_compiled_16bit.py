"""Compiled graphs with float16/bfloat16 tensors on the Vulkan engine (TORCHBURN_DEVICE=gpu, lavapipe in
CI). Where the device has storageBuffer16BitAccess the engine takes 16-bit values: inputs go up as
16-bit words, every op computes in f32 and each 16-bit result is rounded to nearest even (what
PyTorch's CPU kernels do per op), outputs come down as 16-bit words, and a 16-bit nn.Linear weight is
read as 16-bit words by the *_w16 matmul kernels. Without the feature (TORCHBURN_VULKAN_NO_16BIT=1)
such regions run on native_cpu.

Oracles: PyTorch eager on the CPU. Casts and chains of exactly rounded ops (add, mul, neg, abs, relu,
maximum) must match bit for bit, special values included (±0, ±inf, ties, subnormals, overflow; a NaN
must be a NaN, its payload is not compared); transcendental ops, norms, softmax and
matmuls within the dtype's tolerance (torch.testing's float16/bfloat16 defaults; matmuls also sum in
another order). Every check also asserts that the regions ran on the vulkan engine.
Each case runs in a fresh process (the engine is chosen at import)."""
from __future__ import annotations

import json

import pytest

from test_engine import run_python, vulkan  # noqa: F401  (fixture)

GPU = {"TORCHBURN_DEVICE": "gpu", "TORCHBURN_VULKAN_ALLOW_CPU": "1", "TORCHBURN_QUIET": "1"}

MODELS = r"""
import json, sys, torch, torchburn
torch.manual_seed(0)
dtype = getattr(torch, sys.argv[1])

class Chain(torch.nn.Module):  # exactly rounded ops only: must equal eager bit for bit
    def forward(self, x, y):
        return torch.relu(x * y + x) - torch.maximum(x.abs(), y) * 0.75

class Transcendental(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * torch.sigmoid(x) + torch.exp(x * 0.25)

class Norms(torch.nn.Module):  # (nn.RMSNorm decomposes to a mean, which the engine does not take)
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(37)
    def forward(self, x):
        return torch.softmax(self.ln(x), -1), torch.log_softmax(x, -1)

class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(48, 48), torch.nn.LayerNorm(48)
    def forward(self, x):
        return self.norm(x + torch.nn.functional.gelu(self.fc(x)))

class Casts(torch.nn.Module):  # f32 -> 16-bit -> f32 round trips: bit for bit
    def forward(self, x):
        return x.to(torch.float16), x.to(torch.bfloat16), x.to(torch.float16).float() * 2

def randn(*shape):
    return (torch.randn(*shape) * 3).to(dtype)

x = randn(5, 40)
x[0, :6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-7]).to(dtype)
specials = torch.tensor([0.0, -0.0, 1.0, 65504.0, 65519.9, 65520.0, 1e9, -1e9, float("inf"), float("nan"),
                         2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26, 1e-30,
                         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,
                         3.0e38, -3.4e38, 1.00390625, 1.01171875])
casts_in = torch.cat([specials, -specials, torch.randn(4000) * 10.0 ** torch.randint(-9, 6, (4000,)).float()])
models = {
    "chain": (Chain(), (x, randn(5, 40))),
    "transcendental": (Transcendental(), (randn(7, 33),)),
    "norms": (Norms().to(dtype), (randn(3, 5, 37),)),
    "mlp": (torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)).to(dtype),
            (randn(5, 64),)),
    "gemv": (torch.nn.Sequential(torch.nn.Linear(129, 33), torch.nn.SiLU()).to(dtype), (randn(2, 129),)),
    "residual": (Residual().to(dtype), (randn(9, 48),)),
    "casts": (Casts(), (casts_in,)),
}
result = {}
for name, (model, inputs) in models.items():
    model.eval()
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend="torchburn")(*inputs)
        want = model(*inputs)
        explained = torchburn.explain(model, *inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    outs = []
    for g, w in zip(got, want):
        bits = g.dtype == w.dtype and g.dtype in (torch.float16, torch.bfloat16)
        outs.append({"dtype": str(g.dtype), "want_dtype": str(w.dtype),
                     # NaN payloads are not compared (native_cpu does not keep PyTorch's either)
                     "bits_equal": bool(torch.equal(g.view(torch.int16)[~w.isnan()], w.view(torch.int16)[~w.isnan()]))
                                   if bits else None,
                     "equal": bool(torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(0.0), w.nan_to_num(0.0)))})
        try:
            torch.testing.assert_close(g, w, equal_nan=True)
            outs[-1]["close"] = "ok"
        except AssertionError as error:
            outs[-1]["close"] = str(error)[:600]
    result[name] = {"outs": outs, "explain": str(explained), "native_share": explained.native_share}
print(json.dumps(result))
"""


def _run(fmt: str, **env: str) -> dict:
    out = run_python(MODELS.replace("sys.argv[1]", repr(fmt)), **{**GPU, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _regions(explain: str) -> list:
    return [line.strip() for line in explain.splitlines() if line.strip().startswith("engine: ")]


@pytest.mark.parametrize("fmt,mode", [("float16", "mapped"), ("bfloat16", "mapped"), ("bfloat16", "staging")])
def test_16bit_compiled_models_run_on_the_vulkan_engine_and_equal_eager(vulkan, fmt, mode):
    """`staging`: device-local buffers behind the staging buffer (a discrete GPU's path, forced)."""
    if not vulkan["storage_16bit"]:
        pytest.skip("the device lacks storageBuffer16BitAccess")
    result = _run(fmt, **({"TORCHBURN_VULKAN_FORCE_STAGING": "1"} if mode == "staging" else {}))
    for name, item in result.items():
        assert item["native_share"] == 1.0, (name, item["explain"])
        engines = _regions(item["explain"])
        assert engines and all(e.startswith("engine: vulkan (") for e in engines), (name, item["explain"])
        for out in item["outs"]:
            assert out["dtype"] == out["want_dtype"], (name, out)
            assert out["close"] == "ok", (name, out, item["explain"])
    # exactly rounded ops and casts: bit for bit (a chain computed in f32 and rounded once, or another
    # rounding of the casts, differs here)
    for name in ("chain", "casts"):
        for out in result[name]["outs"]:
            assert out["bits_equal"] is not False and out["equal"], (name, result[name]["outs"])
    # the MLP as one submission of 10 ops: widen x, widen b1, matmul (W1 read as 16-bit words by the
    # *_w16 kernel, not widened first), round, gelu, round, widen b2, matmul (W2 as words), round,
    # narrow y; x [5, 64], W1 [96, 64], b1 [96], W2 [10, 96], b2 [10] go up at 2 bytes each, y [5, 10]
    # comes down 16-bit
    mlp_in = 2 * (5 * 64 + 96 * 64 + 96 + 10 * 96 + 10)
    assert (f"engine: vulkan (10 ops, one submission per call; copies per call: {mlp_in} bytes in, {2 * 5 * 10} "
            "bytes out)") in result["mlp"]["explain"], result["mlp"]["explain"]


def test_16bit_compiled_models_fall_back_to_native_cpu_without_16bit_storage(vulkan):
    result = _run("float16", TORCHBURN_VULKAN_NO_16BIT="1")
    for name, item in result.items():  # the 16-bit matmuls too: widened on native_cpu
        assert all(out["close"] == "ok" for out in item["outs"]), (name, item)
        assert item["native_share"] == 1.0, (name, item["explain"])
    for name in ("chain", "norms", "transcendental", "mlp"):
        item = result[name]
        assert "engine: vulkan (" not in item["explain"], item["explain"]
        assert "16-bit values need storageBuffer16BitAccess" in item["explain"], item["explain"]


FORMATS = {"bfloat16": 1, "float16": 2}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_convert16_rounds_every_value_as_torch_casts(vulkan, fmt):
    """The convert16 op alone: every 16-bit pattern widened, and f32 values narrowed / rounded — ties,
    subnormals, overflow, ±0, ±inf and random bit patterns over all exponents — bit for bit as
    torch's casts (NaN stays NaN; its payload is not compared)."""
    if not vulkan["storage_16bit"]:
        pytest.skip("the device lacks storageBuffer16BitAccess")
    import numpy as np
    import torch

    import torchburn.gpu as gpu

    dtype, code = getattr(torch, fmt), FORMATS[fmt]
    words = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype).contiguous()
    widened = np.zeros(words.numel(), np.float32)
    gpu.engine_run("vulkan", [{"kind": "convert16", "code": 0, "format": code, "n": words.numel(), "a": 0, "y": 1}],
                   [words, widened])
    want = words.float().numpy()
    nan = np.isnan(want)
    assert (np.isnan(widened) == nan).all() and (widened[~nan].view(np.int32) == want[~nan].view(np.int32)).all()

    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    ties = (np.arange(1, 4096, dtype=np.uint32) << 13) | 0x1000  # f16 ties (13 dropped bits = 1000...)
    ties16 = (np.arange(1, 4096, dtype=np.uint32) << 16) | 0x8000  # bf16 ties
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65519.99, 65520, 2 ** -24, 2 ** -25, 1.5 * 2 ** -25,
                         2 ** -14, 2 ** -14 - 2 ** -25, 3.4e38, 1e-45], np.float32)
    x = np.concatenate([bits.view(np.float32), (ties + 0x38000000).view(np.float32), ties16.view(np.float32),
                        specials, -specials]).astype(np.float32)
    x[~np.isfinite(x) & ~np.isinf(x)] = np.nan  # one NaN pattern suffices (payloads not compared)
    narrowed = torch.zeros(x.size, dtype=dtype)
    rounded = np.zeros_like(x)
    gpu.engine_run("vulkan", [{"kind": "convert16", "code": 1, "format": code, "n": x.size, "a": 0, "y": 1},
                              {"kind": "convert16", "code": 2, "format": code, "n": x.size, "a": 0, "y": 2}],
                   [x, narrowed, rounded])
    want16 = torch.from_numpy(x).to(dtype)
    nan = want16.isnan()
    assert torch.equal(narrowed.isnan(), nan)
    assert torch.equal(narrowed.view(torch.int16)[~nan], want16.view(torch.int16)[~nan])
    want_rounded = want16.float().numpy()
    assert (rounded[~nan.numpy()].view(np.int32) == want_rounded[~nan.numpy()].view(np.int32)).all()
    assert np.isnan(rounded[nan.numpy()]).all()


def test_convert16_refuses_bad_ops(vulkan):
    import numpy as np
    import torch

    import torchburn.gpu as gpu

    x, words = np.ones(8, np.float32), torch.zeros(8, dtype=torch.float16)
    spec = {"kind": "convert16", "code": 1, "format": 2, "n": 8, "a": 0, "y": 1}
    with pytest.raises(Exception, match="format 3"):
        gpu.engine_run("vulkan", [dict(spec, format=3)], [x, words])
    with pytest.raises(Exception, match="code 5"):
        gpu.engine_run("vulkan", [dict(spec, code=5)], [x, words])
    with pytest.raises(Exception, match="only rounding"):
        gpu.engine_run("vulkan", [dict(spec, y=0)], [x, words])
    with pytest.raises(Exception, match="needs 32 bytes"):  # narrowing reads 8 floats
        gpu.engine_run("vulkan", [dict(spec, a=1, y=0, code=1)], [x, words])
    with pytest.raises(Exception, match="op 0"):  # a CPU engine never takes it
        gpu.engine_run("reference", [spec], [x, words])
