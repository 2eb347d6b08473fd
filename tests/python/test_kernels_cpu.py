"""cpu_info() facts, the run-time GEMM cache blocking (forced through the test hook and the
TORCHBURN_GEMM_BLOCKING variable) against torch, and the TORCHBURN_DEBUG log of the choice."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torchburn
import torchburn.ops as ops
from torchburn import _C


def test_cpu_info_reports_uarch_caches_and_kernels():
    info = torchburn.cpu_info()
    for key in ("vendor", "brand", "family", "model", "stepping", "microarchitecture", "caches", "kernels",
                "features", "isa"):
        assert key in info, key
    assert isinstance(info["microarchitecture"], str) and info["microarchitecture"]
    assert set(info["kernels"]) == {"gemm_f32", "gemm_bf16", "conv", "int8_qmatmul"}
    assert info["isa"] in info["kernels"]["gemm_f32"]
    # The LLM's int8 matmul has SIMD kernels at every x86 SIMD level.
    if info["isa"] in ("avx2", "avx512"):
        assert info["kernels"]["int8_qmatmul"] != "scalar", info["kernels"]
    for level in ("l1d", "l2", "l3"):
        assert set(info["caches"][level]) == {"size_bytes", "line_bytes", "ways", "shared_by"}
    for flag in ("amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_fp16"):
        assert isinstance(info["features"][flag], bool)
    if info["isa"] in ("avx2", "avx512"):  # x86: CPUID reports the data caches
        assert info["caches"]["l1d"]["size_bytes"] >= 16 << 10
        assert info["caches"]["l2"]["size_bytes"] >= info["caches"]["l1d"]["size_bytes"]
        assert "cpuid" in info["kernels"]["gemm_f32"]


def _reference(a, b):
    return (a.double() @ b.double()).float()


@pytest.mark.parametrize("blocking", [(1, 1, 1), (1, 7, 1), (29, 13, 65), (100000, 4096, 100000)])
def test_gemm_under_forced_blocking_matches_torch(blocking):
    g = torch.Generator().manual_seed(sum(blocking))
    try:
        used = _C.gemm_set_blocking(*blocking)
        assert used["source"] == "override" and used["kc"] == blocking[1]
        for m, n, k in ((37, 45, 61), (130, 77, 300), (15, 200, 129)):
            a = torch.randn(m, k, generator=g)
            b = torch.randn(k, n, generator=g)
            torch.testing.assert_close(ops.matmul(a, b), _reference(a, b), rtol=1e-4, atol=1e-4)
            at = torch.randn(k, m, generator=g).t()  # strided (transposed) operands
            bt = torch.randn(n, k, generator=g).t()
            torch.testing.assert_close(ops.matmul(at, bt), _reference(at, bt), rtol=1e-4, atol=1e-4)
            w, bias = torch.randn(n, k, generator=g), torch.randn(n, generator=g)
            expected = torch.nn.functional.gelu(torch.nn.functional.linear(a.double(), w.double(), bias.double()))
            torch.testing.assert_close(ops.linear(a, w, bias, activation="gelu"), expected.float(), rtol=1e-4,
                                       atol=1e-4)
    finally:
        restored = _C.gemm_set_blocking(0, 0, 0)
    assert restored["source"] != "override"


def _run(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_blocking_env_override_and_debug_log():
    code = ("import torch, torchburn, torchburn.ops as o; a = torch.randn(70, 90); b = torch.randn(90, 50);"
            "torch.testing.assert_close(o.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4); o.matmul(a, b);"
            "print(torchburn.cpu_info()['kernels']['gemm_f32'])")
    done = _run(code, TORCHBURN_GEMM_BLOCKING="20,11,40", TORCHBURN_DEBUG="1")
    assert done.returncode == 0, done.stderr
    assert "kc=11" in done.stdout and "override" in done.stdout
    log = [line for line in done.stderr.splitlines() if "[torchburn] gemm " in line]
    assert len(log) == 1 and "kc=11" in log[0], done.stderr  # logged once, not per call


def test_winograd_env_switch_and_debug_log():
    code = ("import torch, torchburn; from torchburn import nn_ops, _C; x = torch.randn(12, 16, 8, 8);"
            "w = torch.randn(16, 16, 3, 3); [nn_ops.conv2d(x, w, None, 1, 1) for _ in range(3)];"
            "print(_C.conv_winograd_calls(), torchburn.cpu_info()['kernels']['conv'])")
    on = _run(code, TORCHBURN_DEBUG="1")
    assert on.returncode == 0, on.stderr
    assert on.stdout.startswith("3 ") and "winograd" in on.stdout, on.stdout
    log = [line for line in on.stderr.splitlines() if "[torchburn] conv:" in line]
    assert len(log) == 1 and "Winograd F(2x2,3x3)" in log[0], on.stderr  # logged once, not per call
    off = _run(code, TORCHBURN_DEBUG="1", TORCHBURN_CONV_WINOGRAD="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.startswith("0 ") and "winograd" not in off.stdout, off.stdout
    assert "[torchburn] conv:" not in off.stderr


def test_malformed_blocking_env_is_refused_at_import():
    done = _run("import torchburn", TORCHBURN_GEMM_BLOCKING="64,zero,128")
    assert done.returncode != 0
    assert "TORCHBURN_GEMM_BLOCKING" in done.stderr and "64,zero,128" in done.stderr


def _has_bf16_kernel():
    variant = torchburn.cpu_info()["kernels"]["gemm_bf16"]
    return "vdpbf16ps" in variant or "tdpbf16ps" in variant


def _bf16_skip_reason():
    return f"no AMX-BF16 or AVX512-BF16 kernel at ISA {torchburn.cpu_info()['isa']} on this CPU"


def _amx_usable():
    info = torchburn.cpu_info()
    return info["isa"] == "avx512" and info["features"]["amx_bf16"] and info["features"]["amx_os_enabled"] and \
        info["features"]["avx512_bf16"]


def test_amx_is_chosen_where_usable_and_switch_is_honoured():
    """Where CPUID and XCR0 allow AMX-BF16 the bf16 family runs on the tiles (not silently on the
    fallback); TORCHBURN_AMX=0 selects the AVX512-BF16 kernel; a malformed value is refused at import."""
    if not _amx_usable():
        pytest.skip("this CPU (or the OS) does not offer AMX-BF16 at the avx512 level")
    assert "amx_bf16" in torchburn.cpu_info()["kernels"]["gemm_bf16"]
    script = ("import torchburn, torch; from torchburn import ops; "
              "print(torchburn.cpu_info()['kernels']['gemm_bf16']); "
              "g = torch.Generator().manual_seed(3); a = torch.randn(97, 300, generator=g).bfloat16(); "
              "b = torch.randn(300, 70, generator=g).bfloat16(); "
              "e = (a.double() @ b.double()); print(float(((ops.matmul(a, b).double() - e).abs() / "
              "(e.abs() + 1)).max()))")
    done = _run(script, TORCHBURN_AMX="0")
    assert done.returncode == 0, done.stderr
    variant, error = done.stdout.split("\n")[:2]
    assert variant.startswith("avx512_bf16") and float(error) < 1.6e-2, done.stdout
    done = _run("import torchburn", TORCHBURN_AMX="yes")
    assert done.returncode != 0 and "TORCHBURN_AMX" in done.stderr and "yes" in done.stderr


def test_llm_prompt_gemm_uses_amx_int8_where_usable():
    """The LLM's prompt GEMM reports (and, tests/c/test_llm.c checks, runs) AMX-INT8 where CPUID and the
    OS allow it, and TORCHBURN_AMX=0 keeps VNNI."""
    info = torchburn.cpu_info()
    if not (info["isa"] == "avx512" and info["features"]["amx_int8"] and info["features"]["amx_os_enabled"]
            and info["features"]["avx512_vnni"]):
        pytest.skip("this CPU (or the OS) does not offer AMX-INT8 with AVX-512 VNNI")
    assert "amx_int8" in info["kernels"]["int8_qmatmul"], info["kernels"]
    done = _run("import torchburn; print(torchburn.cpu_info()['kernels']['int8_qmatmul'])", TORCHBURN_AMX="0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "avx512_vnni (vpdpbusd)", done.stdout


@pytest.mark.parametrize("shape", [(1, 7, 3), (33, 65, 17), (130, 90, 301), (256, 256, 256)])
def test_bf16_tensor_matmul_matches_torch(shape):
    """bf16 x bf16 runs the bf16 kernel (exact: the operands already are bf16 values); torch's CPU
    bf16 matmul also accumulates in f32 and rounds once, so both are within one bf16 rounding of the
    double product."""
    m, n, k = shape
    g = torch.Generator().manual_seed(m * n + k)
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(k, n, generator=g).bfloat16()
    exact = a.double() @ b.double()
    ours = ops.matmul(a, b)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.double(), exact.bfloat16().double(), rtol=1.6e-2, atol=1e-5 * k)
    torch.testing.assert_close(ours, torch.mm(a, b), rtol=1.6e-2, atol=1e-2)
    w = torch.randn(n, k, generator=g).bfloat16()
    lin = ops.linear(a, w)
    torch.testing.assert_close(lin, torch.nn.functional.linear(a, w), rtol=1.6e-2, atol=1e-2)


def test_matmul_precision_bf16_rounds_operands_once():
    """TORCHBURN_MATMUL_PRECISION=bf16 (here through the setter): f32 operands rounded to bf16 and the
    products accumulated in f32 — equal to the f32 product of the rounded operands, which differs
    from the f32 product of the originals (so the opt-in really took effect)."""
    if not _has_bf16_kernel():
        pytest.skip(_bf16_skip_reason())
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(150, 333, generator=g), torch.randn(333, 97, generator=g)
    rounded = (a.bfloat16().double() @ b.bfloat16().double()).float()
    assert _C.get_matmul_precision() == "highest"
    try:
        _C.set_matmul_precision("medium")
        assert _C.get_matmul_precision() == "bf16"
        low = ops.matmul(a, b)
        low_t = ops.matmul(a.t().contiguous().t(), b.t().contiguous().t())  # column-major operands
    finally:
        _C.set_matmul_precision("highest")
    torch.testing.assert_close(low, rounded, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(low_t, rounded, rtol=1e-5, atol=1e-4)
    assert (ops.matmul(a, b) - rounded).abs().max() > 1e-3  # the default (highest) does not round
    with pytest.raises(ValueError, match="tf32"):
        _C.set_matmul_precision("tf32")


def test_matmul_precision_env_is_validated():
    done = _run("import torchburn", TORCHBURN_MATMUL_PRECISION="fast")
    assert done.returncode != 0 and "TORCHBURN_MATMUL_PRECISION" in done.stderr and "fast" in done.stderr
    done = _run("from torchburn import _C; print(_C.get_matmul_precision())", TORCHBURN_MATMUL_PRECISION="medium")
    assert done.returncode == 0 and done.stdout.strip() == "bf16", done.stderr
