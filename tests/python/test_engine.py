"""The engine layer: selection through C (TORCHBURN_ENGINE / TORCHBURN_DEVICE, in fresh processes),
the reference engine as the golden path, and every Vulkan kernel against the reference engine on
whatever Vulkan device exists (Mesa's lavapipe in CI, forced with TORCHBURN_VULKAN_ALLOW_CPU=1).

Vulkan tests skip only when no Vulkan device exists at all and TORCHBURN_TEST_REQUIRE_VULKAN is not
1; .ci/run installs lavapipe and sets it, so in CI they always run.

Tolerances (Vulkan vs reference): exact for neg, abs, relu, leaky_relu, clamp, sqrt, add, sub, mul,
maximum, minimum and matmul/softmax structure aside; otherwise relative 2e-6 (elementwise
transcendental, div, pow), matmul 1e-5 * sum|a||b|, softmax/norms 1e-5 relative + 1e-6 absolute.
Denormal inputs are left out and results below FLT_MIN compare with an absolute FLT_MIN: Vulkan
allows devices to flush denormals, and lavapipe does.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import torchburn
import torchburn.gpu as gpu

FLT_MIN = float(np.finfo(np.float32).tiny)
UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "gelu",
         "gelu_tanh", "silu", "leaky_relu", "clamp"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
EXACT = {"neg", "abs", "relu", "leaky_relu", "clamp", "sqrt", "add", "sub", "mul", "maximum", "minimum"}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 100.0, -100.0, 88.5, -88.5, 1.0, -1.0,
                    0.5, -0.5, 2.0, -2.0, 3.0, 1e30, -1e30], dtype=np.float32)


# a build without <vulkan/vulkan.h> has the stub engine: every Vulkan reason is then this one
NO_VULKAN_BUILD = "headers were absent" in gpu.gpu_info()["reason"]
LOADER_MISSING = "headers were absent" if NO_VULKAN_BUILD else "could not be loaded"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBURN_")}
    full_env.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


# ---- selection (fresh processes: the choice is made at import) ----


def test_engine_names_and_default():
    assert gpu.engine_names() == ["native_cpu", "reference", "vulkan"]
    result = run_python("import torchburn; print(torchburn.active_engine())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "native_cpu"


@pytest.mark.parametrize("name", ["reference", "burn", "REFERENCE"])
def test_reference_engine_forces_scalar_single_thread(name):
    code = ("import torchburn; i = torchburn.cpu_info(); "
            "print(torchburn.active_engine(), i['isa'], i['num_threads'])")
    result = run_python(code, TORCHBURN_ENGINE=name, TORCHBURN_NUM_THREADS="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["reference", "scalar", "1"]


def test_reference_engine_runs_the_front_doors():
    code = ("import torch, torchburn, torchburn.ops as ops\n"
            "torch.manual_seed(0)\n"
            "x, w, b = torch.randn(33, 65), torch.randn(17, 65), torch.randn(17)\n"
            "y = ops.linear(x, w, b, activation='gelu')\n"
            "torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w.T + b), rtol=1e-4, atol=1e-4)\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4)).eval()\n"
            "c = torch.compile(m, backend='torchburn')\n"
            "inp = torch.randn(5, 8)\n"
            "torch.testing.assert_close(c(inp), m(inp), rtol=1e-4, atol=1e-5)\n"
            "print(torchburn.active_engine(), torchburn.cpu_info()['isa'])\n")
    result = run_python(code, TORCHBURN_ENGINE="reference")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["reference", "scalar"]


def test_unknown_engine_fails_at_import():
    result = run_python("import torchburn", TORCHBURN_ENGINE="cuda")
    assert result.returncode != 0
    assert "TORCHBURN_ENGINE='cuda' is not an engine" in result.stderr and "reference" in result.stderr


def test_bad_device_and_contradictions_fail_at_import():
    result = run_python("import torchburn", TORCHBURN_DEVICE="tpu")
    assert result.returncode != 0 and "TORCHBURN_DEVICE='tpu'" in result.stderr
    result = run_python("import torchburn", TORCHBURN_ENGINE="reference", TORCHBURN_DEVICE="gpu")
    assert result.returncode != 0 and "contradicts TORCHBURN_DEVICE=gpu" in result.stderr
    if "avx2" in torchburn.cpu_info()["supported_isas"]:
        result = run_python("import torchburn", TORCHBURN_ENGINE="reference", TORCHBURN_ISA="avx2")
        assert result.returncode != 0 and "TORCHBURN_ISA='avx2' contradicts" in result.stderr


def test_hidden_loader_is_quietly_unavailable():
    code = ("import torchburn; i = torchburn.gpu_info(); "
            "print(torchburn.gpu_available(), torchburn.gpu_backend(), torchburn.active_engine()); print(i['reason'])")
    result = run_python(code, TORCHBURN_VULKAN_LOADER="/nonexistent/libvulkan.so.1", TORCHBURN_DEVICE="auto")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    first, reason = result.stdout.splitlines()
    assert first.split() == ["False", "none", "native_cpu"]
    assert LOADER_MISSING in reason and (NO_VULKAN_BUILD or "/nonexistent/libvulkan.so.1" in reason)


def test_no_driver_is_quietly_unavailable():
    missing = "/nonexistent/icd.json"
    code = "import torchburn; print(torchburn.gpu_available()); print(torchburn.gpu_info()['reason'])"
    result = run_python(code, VK_ICD_FILENAMES=missing, VK_DRIVER_FILES=missing)
    assert result.returncode == 0, result.stderr
    available, reason = result.stdout.splitlines()
    assert available == "False"
    assert reason  # no driver, or (no loader at all on this machine) the loader; either way quietly


def test_gpu_request_without_gpu_is_a_clear_error():
    code = ("import torchburn\n"
            "try:\n    torchburn.active_engine()\nexcept RuntimeError as e:\n    print('error:', e)\n")
    result = run_python(code, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_LOADER="/nonexistent/libvulkan.so.1")
    assert result.returncode == 0, result.stderr
    assert "TORCHBURN_DEVICE=gpu asks for a GPU, but there is none usable" in result.stdout
    assert LOADER_MISSING in result.stdout


def test_settings_that_make_vulkan_unavailable():
    code = "import torchburn; print(torchburn.gpu_info()['reason'])"
    result = run_python(code, TORCHBURN_WGPU_BACKEND="metal")
    assert ("headers were absent" if NO_VULKAN_BUILD else "only GPU backend is vulkan") in result.stdout
    result = run_python(code, TORCHBURN_WGPU_BACKEND="vulkan", TORCHBURN_VULKAN_LOADER="/nonexistent/x.so")
    assert LOADER_MISSING in result.stdout  # vulkan is accepted; the (hidden) loader decides


# ---- Vulkan (lavapipe in CI) ----


@pytest.fixture(scope="module")
def vulkan():
    saved = os.environ.get("TORCHBURN_VULKAN_ALLOW_CPU")
    os.environ["TORCHBURN_VULKAN_ALLOW_CPU"] = "1"
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    gpu.reset()
    info = gpu.gpu_info()
    if not info["available"]:
        if os.environ.get("TORCHBURN_TEST_REQUIRE_VULKAN") == "1":
            pytest.fail(f"a Vulkan device is required here: {info['reason']}")
        pytest.skip(f"no Vulkan device: {info['reason']}")
    yield info
    if saved is None:
        os.environ.pop("TORCHBURN_VULKAN_ALLOW_CPU")
    else:
        os.environ["TORCHBURN_VULKAN_ALLOW_CPU"] = saved
    gpu.reset()


def assert_close(got, want, rtol, atol=0.0, what=""):
    got, want = np.asarray(got), np.asarray(want)
    same_nan = np.isnan(got) == np.isnan(want)
    assert same_nan.all(), f"{what}: NaN mismatch at {np.flatnonzero(~same_nan)[:8]}"
    finite = np.isfinite(want)
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all(), f"{what}: infinities differ"
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    bound = rtol * np.abs(want[finite]) + max(atol, FLT_MIN)
    bad = err > bound
    assert not bad.any(), (f"{what}: {bad.sum()} values off, worst at {np.flatnonzero(bad)[:4]}: "
                           f"got {got[finite][bad][:4]} want {want[finite][bad][:4]}")


def run_both(engine, ops, arrays):
    """Runs on `engine` and on reference (each on its own copies); returns both sets of arrays."""
    mine = [np.array(a, copy=True) for a in arrays]
    golden = [np.array(a, copy=True) for a in arrays]
    gpu.engine_run(engine, ops, mine)
    gpu.engine_run("reference", ops, golden)
    return mine, golden


def unary_inputs(n, rng):
    x = rng.standard_normal(n).astype(np.float32) * 4
    x[: min(n, SPECIAL.size)] = SPECIAL[: min(n, SPECIAL.size)]
    return x


ENGINES = ["native_cpu", "vulkan"]


@pytest.fixture(params=ENGINES)
def engine(request):
    if request.param == "vulkan":
        request.getfixturevalue("vulkan")
    return request.param


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("n", [1, 7, 255, 257, 4099, 70001])
def test_unary_against_reference(engine, op, n):
    rng = np.random.default_rng(n)
    x = unary_inputs(n, rng)
    if op in ("sin", "cos"):
        x = np.where(np.abs(x) > 1e4, np.float32(3.0), x)  # GPU sin/cos promise accuracy on moderate arguments
    spec = {"kind": "unary", "op": op, "n": n, "a": 0, "y": 1, "alpha": 0.01, "lo": -1.5, "hi": 2.5}
    (_, got), (_, want) = run_both(engine, [spec], [x, np.zeros_like(x)])
    # Negative tails of gelu, gelu_tanh and silu are exp(-large) computed in f32: the rounding of the
    # exponent (relative 6e-8 of a value up to ~90) makes the result's relative error grow there, so
    # those ops also get 1e-9 absolute (the SIMD tables' own bounds, e.g. gelu 3 ulps + 1e-11 |x|, are in
    # test_kernels_elementwise.c).
    rtol, atol = (0.0, 0.0) if op in EXACT else (2e-6, 0.0)
    if op in ("gelu", "gelu_tanh", "silu"):
        atol = 1e-9
    if engine == "native_cpu" and op not in EXACT:
        rtol = 1e-6
    assert_close(got, want, rtol, atol, what=f"{engine} {op} n={n}")


def test_unary_in_place(vulkan):
    x = unary_inputs(1000, np.random.default_rng(1))
    want = np.empty_like(x)
    gpu.engine_run("reference", [{"kind": "unary", "op": "gelu", "n": 1000, "a": 0, "y": 1}], [x, want])
    gpu.engine_run("vulkan", [{"kind": "unary", "op": "gelu", "n": 1000, "a": 0, "y": 0}], [x])
    assert_close(x, want, 2e-6, 1e-9, what="in-place gelu")


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("b_len", ["full", "scalar", "row"])
def test_binary_against_reference(engine, op, b_len):
    rng = np.random.default_rng(7)
    # every pair of special values, then random rows
    a = np.concatenate([np.repeat(SPECIAL, SPECIAL.size), rng.standard_normal(3 * 257).astype(np.float32) * 3])
    n = a.size
    length = {"full": n, "scalar": 1, "row": SPECIAL.size}[b_len]
    b = np.tile(SPECIAL, n // SPECIAL.size + 1)[:length].copy() if b_len != "full" else \
        np.concatenate([np.tile(SPECIAL, SPECIAL.size), rng.standard_normal(3 * 257).astype(np.float32)])
    if b_len == "row" and n % length:
        a = a[: n - n % length].copy()
        n = a.size
    if op == "pow":
        a = np.where(np.abs(a) > 1e20, np.float32(2.0), a)  # pow of huge magnitudes: outside GPU exp2/log2 accuracy
    spec = {"kind": "binary", "op": op, "n": n, "b_len": length, "a": 0, "b": 1, "y": 2}
    (_, _, got), (_, _, want) = run_both(engine, [spec], [a, b, np.zeros_like(a)])
    rtol = 0.0 if op in EXACT else (1e-6 if engine == "native_cpu" else 2e-6)
    if op == "pow" and engine == "vulkan":
        rtol = 2e-5  # exp2(y * log2|x|): the rounding of the product grows with |y log2 x|
    assert_close(got, want, rtol, what=f"{engine} {op} b_len={length}")


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 33, 65), (64, 64, 64), (3, 129, 1), (5, 7, 0), (1, 300, 1000),
                                   (100, 1, 37), (4, 513, 77), (2, 5, 0), (65, 130, 17)])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_against_reference(engine, m, n, k, trans_b, bias):
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    spec = {"kind": "matmul", "m": m, "n": n, "k": k, "trans_b": int(trans_b), "a": 0, "b": 1, "c": 2 if bias else None,
            "y": 3}
    (*_, got), (*_, want) = run_both(engine, [spec], [a, b, c, y])
    scale = np.abs(a).astype(np.float64) @ np.abs(b.T if trans_b else b) + (np.abs(c) if bias else 0)
    assert np.isfinite(got).all()
    assert (np.abs(got - want) <= 1e-5 * scale + 1e-6).all(), np.abs(got - want).max()
    expected = a.astype(np.float64) @ (b.T if trans_b else b) + (c if bias else 0)
    assert (np.abs(want - expected) <= 1e-5 * scale + 1e-6).all()  # the reference itself


@pytest.mark.parametrize("m,n,k,col0,stride", [(3, 5, 7, 2, 11), (70, 65, 33, 0, 130), (1, 9, 64, 9, 18), (4, 1, 3, 6, 7)])
@pytest.mark.parametrize("trans_b", [False, True])
def test_matmul_into_a_column_block(engine, m, n, k, col0, stride, trans_b):
    """y_stride / y_col0: the product lands in columns [col0, col0 + n) of rows `stride` apart (how a
    weight split by rows runs, one op per part); every other element keeps its sentinel."""
    rng = np.random.default_rng(m + n + k + col0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    y = np.full((m, stride), 7.0, np.float32)
    spec = {"kind": "matmul", "m": m, "n": n, "k": k, "trans_b": int(trans_b), "a": 0, "b": 1, "c": 2, "y": 3,
            "y_stride": stride, "y_col0": col0}
    (*_, got), (*_, want) = run_both(engine, [spec], [a, b, c, y])
    expected = a.astype(np.float64) @ (b.T if trans_b else b) + c
    scale = np.abs(a).astype(np.float64) @ np.abs(b.T if trans_b else b) + np.abs(c)
    for result in (got, want):
        block = result[:, col0:col0 + n]
        assert (np.abs(block - expected) <= 1e-5 * scale + 1e-6).all()
        outside = np.delete(result, np.s_[col0:col0 + n], axis=1)
        assert (outside == 7.0).all()


def test_column_block_out_of_range_is_refused(vulkan):
    a, b, y = np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32), np.zeros((2, 6), np.float32)
    for engine in ("reference", "vulkan"):
        with pytest.raises(ValueError, match=r"output columns \[3, 7\) do not fit rows of y_stride 6"):
            gpu.engine_run(engine, [{"kind": "matmul", "m": 2, "n": 4, "k": 3, "trans_b": 1, "a": 0, "b": 1, "y": 2,
                                     "y_stride": 6, "y_col0": 3}], [a, b, y])
        with pytest.raises(ValueError, match="y_stride 0"):
            gpu.engine_run(engine, [{"kind": "matmul", "m": 2, "n": 4, "k": 3, "trans_b": 1, "a": 0, "b": 1, "y": 2,
                                     "y_col0": 1}], [a, b, y])


class vulkan_settings:
    """Runs a block with TORCHBURN_VULKAN_* settings applied (the engine re-probed) and restored; the
    block's engine buffers must all be gone at its end (collected here) for the re-probe."""

    def __init__(self, **env: str) -> None:
        self.env, self.saved = env, {}

    def __enter__(self):
        gc.collect()  # buffers of an earlier failed test, held by its traceback
        for key, value in self.env.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value
        gpu.reset()
        return gpu.gpu_info()

    def __exit__(self, *exc):
        gc.collect()
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        gpu.reset()


ROW_OPS_CASES = [(4, 255), (6, 257), (3, 1000), (37, 3)]


def _row_ops_against_reference(what):
    """softmax (with -inf, +inf and NaN rows), log_softmax, both norms and the GEMV matmul: every
    kernel built on reduce.glsl, against the reference engine."""
    for rows, length in ROW_OPS_CASES:
        rng = np.random.default_rng(rows * length)
        x = softmax_rows(rows, length, rng)
        for log in (0, 1):
            spec = {"kind": "softmax", "rows": rows, "len": length, "log": log, "a": 0, "y": 1}
            (_, got), (_, want) = run_both("vulkan", [spec], [x, np.zeros_like(x)])
            assert_close(got, want, 1e-5, 1e-5, what=f"{what} softmax log={log} {rows}x{length}")
        finite = (rng.standard_normal((rows, length)) * 3 + 1).astype(np.float32)
        w = rng.standard_normal(length).astype(np.float32)
        for kind in ("rms_norm", "layer_norm"):
            spec = {"kind": kind, "rows": rows, "len": length, "eps": 1e-5, "a": 0, "b": 1, "y": 2}
            (*_, got), (*_, want) = run_both("vulkan", [spec], [finite, w, np.zeros_like(finite)])
            assert_close(got, want, 1e-4, 1e-5, what=f"{what} {kind} {rows}x{length}")
        b = rng.standard_normal((33, length)).astype(np.float32)
        spec = {"kind": "matmul", "m": 2, "n": 33, "k": length, "trans_b": 1, "a": 0, "b": 1, "y": 2}
        (*_, got), (*_, want) = run_both("vulkan", [spec], [finite[:2].copy(), b, np.zeros((2, 33), np.float32)])
        scale = np.abs(finite[:2]).astype(np.float64) @ np.abs(b.T)
        assert (np.abs(got - want) <= 1e-5 * scale + 1e-6).all(), what


def test_subgroup_reductions_and_their_fallback(vulkan):
    """Where the device has subgroup arithmetic (lavapipe: subgroups of 8) the reductions use it (the
    *_subgroup SPIR-V); TORCHBURN_VULKAN_NO_SUBGROUP=1 forces the shared-memory tree. Both agree with
    the reference engine."""
    assert isinstance(vulkan["subgroup_reductions"], bool)
    _row_ops_against_reference("default")
    with vulkan_settings(TORCHBURN_VULKAN_NO_SUBGROUP="1") as info:
        assert info["subgroup_reductions"] is False
        _row_ops_against_reference("shared-memory fallback")
    if vulkan["device_type"] == "cpu":  # lavapipe reports arithmetic + vote: CI runs the subgroup path
        assert vulkan["subgroup_reductions"] is True


def test_forced_staging_copies(vulkan):
    """TORCHBURN_VULKAN_FORCE_STAGING=1: buffers in device memory the host never maps, every upload and
    download a vkCmdCopyBuffer through the staging buffer (the discrete-GPU path): inside the run's one
    submit when they fit the 16 MiB staging buffer (test_gpu_batching.py), else chunked, a submit each."""
    with vulkan_settings(TORCHBURN_VULKAN_FORCE_STAGING="1") as info:
        assert info["staging"] is True
        rng = np.random.default_rng(3)
        a, w = rng.standard_normal((9, 40)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)
        bias = rng.standard_normal(24).astype(np.float32)
        ops = [{"kind": "matmul", "m": 9, "n": 24, "k": 40, "trans_b": 1, "a": 0, "b": 1, "c": 2, "y": 3},
               {"kind": "unary", "op": "silu", "n": 9 * 24, "a": 3, "y": 3},
               {"kind": "softmax", "rows": 9, "len": 24, "a": 3, "y": 4}]
        before = gpu.gpu_info()
        (*_, h, got), (*_, want_h, want) = run_both("vulkan", ops, [a, w, bias, np.zeros((9, 24), np.float32),
                                                                     np.zeros((9, 24), np.float32)])
        after = gpu.gpu_info()
        assert after["submits"] - before["submits"] == 1
        assert after["transfers"] - before["transfers"] == 0
        assert after["batched_copies"] - before["batched_copies"] == 5 + 2  # 5 arrays up, the 2 written ones down
        assert_close(h, want_h, 1e-5, 1e-5, what="staged matmul + silu")
        assert_close(got, want, 1e-5, 1e-6, what="staged softmax")
        big = rng.standard_normal(5_000_000).astype(np.float32)  # 20 MB: two chunks each way
        before = gpu.gpu_info()["transfers"]
        out = big.copy()
        gpu.engine_run("vulkan", [{"kind": "unary", "op": "neg", "n": big.size, "a": 0, "y": 0}], [out])
        assert gpu.gpu_info()["transfers"] - before == 4
        assert np.array_equal(out, -big)
    assert gpu.gpu_info()["staging"] is (vulkan["staging"])  # restored


def test_grid_stride_loops_with_capped_dispatches(vulkan):
    """Every kernel with dispatches capped at 3 workgroups per dimension (TORCHBURN_VULKAN_MAX_WORKGROUPS),
    so each grid-stride loop runs several rounds; the real 65,535 limit is crossed by the softmax test
    with 70,000 rows."""
    os.environ["TORCHBURN_VULKAN_MAX_WORKGROUPS"] = "3"
    try:
        gpu.reset()
        assert gpu.gpu_info()["limits"]["max_workgroup_count"] == (3, 3, 3)
        rng = np.random.default_rng(5)
        a, w, c = (rng.standard_normal(s).astype(np.float32) for s in ((200, 17), (300, 17), (300,)))
        x = rng.standard_normal((37, 129)).astype(np.float32)
        ops = [
            {"kind": "matmul", "m": 200, "n": 300, "k": 17, "trans_b": 1, "a": 0, "b": 1, "c": 2, "y": 3},
            {"kind": "unary", "op": "silu", "n": 60000, "a": 3, "y": 4},
            {"kind": "binary", "op": "sub", "n": 60000, "b_len": 300, "a": 4, "b": 2, "y": 4},
            {"kind": "softmax", "rows": 37, "len": 129, "a": 5, "y": 6},
            {"kind": "layer_norm", "rows": 37, "len": 129, "eps": 1e-5, "a": 5, "y": 7},
            {"kind": "rms_norm", "rows": 37, "len": 129, "eps": 1e-5, "a": 5, "y": 8},
            {"kind": "matmul", "m": 3, "n": 300, "k": 17, "trans_b": 1, "a": 0, "b": 1, "c": 2, "y": 9},  # gemv
            {"kind": "matmul", "m": 2, "n": 300, "k": 17, "trans_b": 0, "a": 0, "b": 1, "y": 10},
        ]
        arrays = [a, w, c, np.zeros((200, 300), np.float32), np.zeros(60000, np.float32), x] + \
            [np.zeros_like(x) for _ in range(3)] + [np.zeros((3, 300), np.float32), np.zeros((2, 300), np.float32)]
        mine, golden = run_both("vulkan", ops, arrays)
        for index in (3, 4, 6, 7, 8, 9, 10):
            assert_close(mine[index], golden[index], 1e-5, 1e-5, what=f"array {index}")
    finally:
        del os.environ["TORCHBURN_VULKAN_MAX_WORKGROUPS"]
        gpu.reset()


def softmax_rows(rows, length, rng):
    x = (rng.standard_normal((rows, length)) * 5).astype(np.float32)
    if rows >= 4:
        x[1, :] = -np.inf          # all -inf row: NaN
        x[2, length // 2] = np.inf  # +inf: NaN row in torch's formula (inf - inf)
        x[3, 0] = np.nan
    return x


@pytest.mark.parametrize("rows,length", [(1, 1), (5, 7), (4, 255), (6, 257), (3, 1000), (4, 3001), (300, 3)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_against_reference(engine, rows, length, log):
    x = softmax_rows(rows, length, np.random.default_rng(rows + length))
    spec = {"kind": "softmax", "rows": rows, "len": length, "log": int(log), "a": 0, "y": 1}
    (_, got), (_, want) = run_both(engine, [spec], [x, np.zeros_like(x)])
    atol = 1e-6 if not log else 1e-5
    assert_close(got, want, 1e-5, atol, what=f"{engine} softmax log={log}")


@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("rows,length", [(1, 1), (3, 7), (5, 256), (2, 257), (4, 4099), (300, 2)])
@pytest.mark.parametrize("affine", [False, True])
def test_norms_against_reference(engine, kind, rows, length, affine):
    rng = np.random.default_rng(rows * 7 + length)
    x = (rng.standard_normal((rows, length)) * 3 + 1).astype(np.float32)
    w = rng.standard_normal(length).astype(np.float32)
    bias = rng.standard_normal(length).astype(np.float32)
    spec = {"kind": kind, "rows": rows, "len": length, "eps": 1e-5, "a": 0, "y": 3,
            "b": 1 if affine else None, "c": 2 if affine and kind == "layer_norm" else None}
    (*_, got), (*_, want) = run_both(engine, [spec], [x, w, bias, np.zeros_like(x)])
    # f32 statistics: x - mean carries the rounding of mean (~eps |mean|), which the normalization scales
    # by rstd (large when a row barely varies), so the bound is in units of eps (|x| + |mean|) rstd |w|
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True) if kind == "layer_norm" else 0.0
    ms = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(ms + 1e-5)
    scale = (np.abs(x64) + np.abs(mean)) * rstd * (np.abs(w) if affine else 1.0)
    bound = 1e-5 * np.abs(want) + 16 * 6e-8 * scale + 1e-6 * (np.abs(bias) if affine else 0.0) + 1e-7
    assert np.isfinite(got).all()
    assert (np.abs(got - want) <= bound).all(), f"{engine} {kind}: worst {np.abs(got - want).max()}"


def test_rows_beyond_65535_workgroups(vulkan):
    x = softmax_rows(70000, 3, np.random.default_rng(9))  # one workgroup per row: more than a dispatch holds
    spec = {"kind": "softmax", "rows": 70000, "len": 3, "a": 0, "y": 1}
    (_, got), (_, want) = run_both("vulkan", [spec], [x, np.zeros_like(x)])
    assert_close(got, want, 1e-5, 1e-6, what="softmax 70000 rows")


def test_norm_special_values(vulkan):
    x = np.array([[1.0, np.nan, 2.0], [np.inf, 1.0, 1.0], [0.0, 0.0, 0.0]], np.float32)
    for kind in ("rms_norm", "layer_norm"):
        spec = {"kind": kind, "rows": 3, "len": 3, "eps": 1e-6, "a": 0, "y": 1}
        (_, got), (_, want) = run_both("vulkan", [spec], [x, np.zeros_like(x)])
        assert_close(got, want, 1e-5, 1e-6, what=kind)


def test_sequence_is_one_submission(vulkan):
    rng = np.random.default_rng(11)
    a, w = rng.standard_normal((9, 40)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)
    bias, gamma = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    h, out = np.zeros((9, 24), np.float32), np.zeros((9, 24), np.float32)
    ops = [
        {"kind": "matmul", "m": 9, "n": 24, "k": 40, "trans_b": 1, "a": 0, "b": 1, "c": 2, "y": 4},
        {"kind": "unary", "op": "silu", "n": 9 * 24, "a": 4, "y": 4},
        {"kind": "binary", "op": "mul", "n": 9 * 24, "b_len": 24, "a": 4, "b": 3, "y": 4},
        {"kind": "rms_norm", "rows": 9, "len": 24, "eps": 1e-6, "a": 4, "b": 3, "y": 5},
    ]
    before = gpu.gpu_info()
    (*_, got_h, got), (*_, want_h, want) = run_both("vulkan", ops, [a, w, bias, gamma, h, out])
    after = gpu.gpu_info()
    assert after["submits"] - before["submits"] == 1
    assert after["dispatches"] - before["dispatches"] == 4
    assert_close(got_h, want_h, 1e-5, 1e-5, what="chain intermediate")
    assert_close(got, want, 1e-5, 1e-5, what="chain")


def test_bad_ops_are_refused(vulkan):
    x, y = np.zeros(8, np.float32), np.zeros(4, np.float32)
    for engine in ("reference", "vulkan"):
        with pytest.raises(ValueError, match="operand y needs 32 bytes"):
            gpu.engine_run(engine, [{"kind": "unary", "op": "exp", "n": 8, "a": 0, "y": 1}], [x, y])
        with pytest.raises(ValueError, match="unknown unary op 'expm1'"):
            gpu.engine_run(engine, [{"kind": "unary", "op": "expm1", "n": 8, "a": 0, "y": 1}], [x, y])
        with pytest.raises(ValueError, match="must not alias"):
            gpu.engine_run(engine, [{"kind": "matmul", "m": 2, "n": 2, "k": 2, "a": 0, "b": 0, "y": 0}], [x])
        with pytest.raises(ValueError, match="divide n"):
            gpu.engine_run(engine, [{"kind": "binary", "op": "add", "n": 8, "b_len": 3, "a": 0, "b": 0, "y": 0}], [x])
        with pytest.raises(ValueError, match="len must be >= 1"):
            gpu.engine_run(engine, [{"kind": "softmax", "rows": 1, "len": 0, "a": 0, "y": 0}], [x])
        with pytest.raises(IndexError):
            gpu.engine_run(engine, [{"kind": "unary", "op": "exp", "n": 8, "a": 5, "y": 0}], [x])
        with pytest.raises(TypeError, match="contiguous float32"):
            gpu.engine_run(engine, [], [np.zeros(4, np.float64)])


def test_operand_beyond_max_storage_buffer_range_is_refused(vulkan):
    limit = vulkan["limits"]["max_storage_buffer_range"]
    if limit > 1 << 28:
        pytest.skip(f"maxStorageBufferRange is {limit} bytes; too large to exceed in a test")
    n = limit // 4 + 1
    x = np.zeros(n, np.float32)
    with pytest.raises(RuntimeError, match="maxStorageBufferRange"):
        gpu.engine_run("vulkan", [{"kind": "unary", "op": "neg", "n": n, "a": 0, "y": 0}], [x])


def test_gpu_info_facts(vulkan):
    info = vulkan
    assert info["backend"] == "Vulkan" and torchburn.gpu_backend() == "Vulkan" and torchburn.gpu_available()
    assert info["adapter_name"] and info["api_version"].count(".") == 2
    for key in ("available", "adapter_name", "backend", "vram_bytes", "device_override", "driver", "limits"):
        assert key in info
    limits = info["limits"]
    assert limits["max_storage_buffer_range"] > 0 and min(limits["max_workgroup_count"]) >= 65535
    assert limits["max_shared_memory_bytes"] >= 16384 and limits["max_workgroup_invocations"] >= 256
    assert torchburn.active_engine() == "native_cpu"  # the in-process selection is unchanged by a probe


def test_forced_gpu_selection_on_a_cpu_type_device(vulkan):
    code = "import torchburn; print(torchburn.active_engine(), torchburn.gpu_info()['device_type'])"
    forced = run_python(code, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split()[0] == "vulkan"
    auto = run_python(code, TORCHBURN_DEVICE="auto", TORCHBURN_VULKAN_ALLOW_CPU="1")
    expected = "native_cpu" if vulkan["device_type"] == "cpu" else "vulkan"
    assert auto.stdout.split()[0] == expected  # auto never picks a CPU-type Vulkan device
    index = run_python(code, TORCHBURN_DEVICE="gpu", TORCHBURN_GPU_INDEX=str(vulkan["device_index"]))
    assert index.stdout.split()[0] == "vulkan", index.stdout + index.stderr
    bad = run_python("import torchburn; print(torchburn.gpu_info()['reason'])", TORCHBURN_GPU_INDEX="99")
    assert "TORCHBURN_GPU_INDEX='99' (this machine has" in bad.stdout


# ---- compiled graphs on TORCHBURN_DEVICE=gpu ----

COMPILED_MODELS = r"""
import json, torch, torchburn
torch.manual_seed(0)

class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(48, 48), torch.nn.LayerNorm(48, eps=1e-6)
    def forward(self, x):
        return self.norm(x + torch.tanh(self.fc(x)) * 0.5)

class Unsupported(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).var(-1)  # a variance: native in torchburn, not on the vulkan engine

class Mixed(torch.nn.Module):  # GPU (fc1, relu) -> native_cpu (var) -> GPU (broadcast mul, fc2)
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 8)
    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.fc2(h * h.var(-1, keepdim=True))

models = {
    "mlp": (torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)), (5, 64)),
    "norm_softmax": (torch.nn.Sequential(torch.nn.Linear(33, 65), torch.nn.SiLU(), torch.nn.LayerNorm(65),
                                         torch.nn.Linear(65, 7), torch.nn.LogSoftmax(-1)), (3, 11, 33)),
    "residual_norm": (Residual(), (9, 48)),
    "relu_sigmoid": (torch.nn.Sequential(torch.nn.Linear(16, 16, bias=False), torch.nn.ReLU(), torch.nn.Sigmoid()), (4, 16)),
    "unsupported": (Unsupported(), (6, 20)),
    "mixed": (Mixed(), (5, 24)),
}
result = {}
for name, (model, shape) in models.items():
    model.eval()
    x = torch.randn(*shape)
    before = torchburn.gpu_info()["submits"]
    with torch.no_grad():
        got = torch.compile(model, backend="torchburn")(x)
        want = model(x)
    after = torchburn.gpu_info()["submits"]
    with torch.no_grad():
        explained = torchburn.explain(model, x)
    result[name] = {"err": float((got - want).abs().max()), "scale": float(want.abs().max()),
                    "submits": after - before, "explain": str(explained), "native_share": explained.native_share}
print(json.dumps(result))
"""


def test_compiled_models_on_the_gpu_engine(vulkan):
    import json

    out = run_python(COMPILED_MODELS, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, item in result.items():
        assert item["err"] <= 1e-5 * max(1.0, item["scale"]), (name, item)
    for name in ("mlp", "norm_softmax", "residual_norm", "relu_sigmoid"):
        assert result[name]["submits"] == 1, (name, result[name])  # the whole graph in one submission
    assert "engine: vulkan (" in result["mlp"]["explain"], result["mlp"]["explain"]
    # the partitioner asks the engine node by node: relu runs on the GPU, the variance on native_cpu
    assert result["unsupported"]["submits"] == 1
    assert "engine: native_cpu (engine vulkan does not take node" in result["unsupported"]["explain"]
    mixed = result["mixed"]
    assert mixed["submits"] == 2, mixed  # two GPU regions around one native_cpu region
    assert mixed["explain"].count("engine: vulkan (") == 2, mixed["explain"]
    assert "copies per call: " in mixed["explain"] and "engine: native_cpu (" in mixed["explain"], mixed["explain"]
    assert mixed["native_share"] == 1.0  # nothing left to PyTorch


def test_compile_with_gpu_requested_but_absent_runs_in_pytorch_and_says_why():
    code = ("import torch, torchburn, warnings\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()\n"
            "x = torch.randn(2, 8)\n"
            "with torch.no_grad():\n"
            "    got = torch.compile(m, backend='torchburn')(x)\n"
            "    assert torch.equal(got, m(x))\n")
    out = run_python(code, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_LOADER="/nonexistent/libvulkan.so.1")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TORCHBURN_DEVICE=gpu asks for a GPU, but there is none usable" in out.stderr


def test_explain_lists_the_regions_of_a_second_model_of_the_same_class_on_the_gpu_engine(vulkan):
    # the second model of a class recompiles its forward with dynamic shapes; its region makes its
    # plan at the first call, and explain must still list the plan (and the engine that ran it)
    code = textwrap.dedent("""
        import torch, torchburn
        class M(torch.nn.Module):
            def __init__(self, i, o):
                super().__init__()
                self.fc = torch.nn.Linear(i, o)
            def forward(self, x):
                return torch.relu(self.fc(x))
        with torch.no_grad():
            for i, o, rows in ((16, 8, 2), (32, 4, 3)):
                print(torchburn.explain(M(i, o).eval(), torch.randn(rows, i)))
                print("----")
    """)
    out = run_python(code, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1", TORCHBURN_QUIET="1")
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = out.stdout.split("----")[:2]
    for report in (first, second):
        assert "    gemm+bias+relu <- addmm+relu" in report and "    engine: vulkan (" in report, report
    assert "dynamic shapes" in second, second
