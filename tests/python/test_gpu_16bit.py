"""16-bit weights on the Vulkan engine: where the device has storageBuffer16BitAccess (lavapipe does),
a matmul's B can be bf16 or f16 words (the *_w16 kernels widen each word exactly to f32), and an LLM
loaded from a bf16/f16 checkpoint with quant="none" keeps its matrices 16-bit on the device: half the
bytes, and the same numbers, since the loader's bf16/f16 -> f32 widening (what native_cpu computes
with) is exact. TORCHBURN_VULKAN_NO_16BIT=1 is the fallback (f32 on the device), tested too.

Oracles: the f32 matmul on the same device over the widened weights (bit-identical: same kernel
order, same values), the reference engine, and native_cpu's LLM (logits within 1e-4 of the largest,
identical greedy tokens). Skips only without any Vulkan device and TORCHBURN_TEST_REQUIRE_VULKAN unset.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import torchburn.gpu as gpu
from torchburn import LLM
from test_engine import run_both, vulkan, vulkan_settings  # noqa: F401  (fixture)
from test_llm import _config_model
from test_llm_gpu import _lavapipe_counts, _private_cache, _prompt, need_gpu, save_model  # noqa: F401  (fixtures)

FORMATS = {"bf16": (torch.bfloat16, 1), "f16": (torch.float16, 2)}


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("m,n,k,trans_b", [(1, 33, 257, True), (3, 7, 5, True), (4, 65, 31, False),
                                           (9, 70, 129, True), (67, 5, 33, False)])
def test_16bit_matmul_equals_the_widened_f32_one(vulkan, fmt, m, n, k, trans_b):
    """GEMV (M <= 4) and tiled shapes, both B layouts, odd sizes (an odd count of 16-bit words)."""
    if not vulkan["storage_16bit"]:
        pytest.skip("the device lacks storageBuffer16BitAccess")
    dtype, code = FORMATS[fmt]
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    weight16 = torch.from_numpy(rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)).to(dtype)
    weight16[0, 0] = -0.0
    widened = weight16.float().numpy()
    bias = rng.standard_normal(n).astype(np.float32)
    spec = {"kind": "matmul", "m": m, "n": n, "k": k, "trans_b": int(trans_b), "a": 0, "b": 1, "c": 2, "y": 3}
    got = np.zeros((m, n), np.float32)
    gpu.engine_run("vulkan", [dict(spec, b_format=code)], [a, weight16.contiguous(), bias, got])
    (*_, same), (*_, golden) = run_both("vulkan", [spec], [a, widened, bias, np.zeros((m, n), np.float32)])
    assert np.array_equal(got, same)  # the same products in the same order
    scale = np.abs(a).astype(np.float64) @ np.abs(widened.T if trans_b else widened) + np.abs(bias)
    assert (np.abs(got - golden) <= 1e-5 * scale + 1e-6).all()


def test_16bit_operands_are_refused_without_the_feature(vulkan):
    weight = torch.ones(4, 8, dtype=torch.bfloat16)
    spec = {"kind": "matmul", "m": 1, "n": 4, "k": 8, "trans_b": 1, "a": 0, "b": 1, "y": 2, "b_format": 1}
    arrays = [np.ones((1, 8), np.float32), weight, np.zeros((1, 4), np.float32)]
    with vulkan_settings(TORCHBURN_VULKAN_NO_16BIT="1") as info:
        assert info["storage_16bit"] is False
        with pytest.raises(Exception, match="op 0"):
            gpu.engine_run("vulkan", [spec], arrays)
    with pytest.raises(Exception, match="op 0"):  # a CPU engine never takes them
        gpu.engine_run("reference", [spec], arrays)
    with pytest.raises(Exception, match="b_format"):
        gpu.engine_run("vulkan", [dict(spec, b_format=3)], arrays)


@pytest.fixture(scope="module")
def checkpoints_16bit(tmp_path_factory):
    """qwen2 (tied head, q/k/v bias) saved in bfloat16, llama saved in float16."""
    root = tmp_path_factory.mktemp("llm_gpu_16bit")
    dirs = {}
    for index, (family, dtype) in enumerate([("qwen2", torch.bfloat16), ("llama", torch.float16)]):
        torch.manual_seed(99 + index)
        dirs[family] = save_model(_config_model(family).to(dtype), family, root / family)
    return dirs


def _load_on_gpu(folder):
    before = gpu.gpu_info()["upload_bytes"]
    dev = LLM.from_pretrained(folder, quant="none", device="gpu", quiet=True)
    return dev, gpu.gpu_info()["upload_bytes"] - before


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_16bit_checkpoint_stays_16bit_on_the_gpu(checkpoints_16bit, need_gpu, family):
    if not need_gpu["storage_16bit"]:
        pytest.skip("the device lacks storageBuffer16BitAccess")
    folder = checkpoints_16bit[family]
    cpu = LLM.from_pretrained(folder, quant="none", device="cpu", exact_activations=True, quiet=True)
    ids = _prompt(40)
    want = np.asarray(cpu.logits(ids))
    expected = cpu.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[])
    dev, bytes16 = _load_on_gpu(folder)
    got16 = np.asarray(dev.logits(ids))
    assert np.abs(got16 - want).max() <= 1e-4 * float(np.abs(want).max())
    assert dev.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[]) == expected
    del dev
    with vulkan_settings(TORCHBURN_VULKAN_NO_16BIT="1") as info:  # the fallback: f32 on the device
        assert info["storage_16bit"] is False
        dev, bytes32 = _load_on_gpu(folder)
        got32 = np.asarray(dev.logits(ids))
        assert dev.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[]) == expected
        del dev
        gc.collect()
    assert np.array_equal(got16, got32)  # the kernels see the same f32 values either way
    # matrices are nearly all of the bytes (norms and biases stay f32): about half
    assert bytes16 < 0.55 * bytes32, (bytes16, bytes32)
