"""The LLM forward on the Vulkan engine against the CPU forward, on whatever Vulkan device exists
(Mesa's lavapipe in CI, admitted with TORCHBURN_VULKAN_ALLOW_CPU=1): tiny random models of the four
families (built as tests/python/test_llm.py builds them), f32, int8 and int4 weights.

Oracle: native_cpu with exact_activations=True (W8A32 / W4A32, the product the GPU computes: every
weight dequantized exactly, f32 multiply-adds), itself checked against transformers in test_llm.py.
Tolerance (documented in docs/engines.md): the logits of every prompt position within 1e-4 of the
largest logit magnitude (only the summation order differs), and the same greedy tokens. int4 is held
to the same bound, since GPU and CPU dequantize the same int4 blocks exactly.
Skipped, with the reason, only when no Vulkan device exists and TORCHBURN_TEST_REQUIRE_VULKAN is not 1
(.ci/run sets it, so CI always runs these).
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch

import torchburn.gpu as gpu
from torchburn import LLM
from test_engine import vulkan_settings
from test_llm import FAMILIES, TEMPLATES, _config_model, _train_tokenizer


@pytest.fixture(scope="module", autouse=True)
def _lavapipe_counts():
    old = os.environ.get("TORCHBURN_VULKAN_ALLOW_CPU")
    os.environ["TORCHBURN_VULKAN_ALLOW_CPU"] = "1"
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    gpu.reset()
    yield
    gc.collect()  # models of failed tests are held by their tracebacks until collected
    if old is None:
        os.environ.pop("TORCHBURN_VULKAN_ALLOW_CPU", None)
    else:
        os.environ["TORCHBURN_VULKAN_ALLOW_CPU"] = old
    try:
        gpu.reset()
    except ValueError:  # buffers still alive (a failure's traceback): the next reset probes again
        pass


@pytest.fixture(scope="module")
def need_gpu(_lavapipe_counts):
    info = gpu.gpu_info()
    if not info["available"]:
        if os.environ.get("TORCHBURN_TEST_REQUIRE_VULKAN") == "1":
            pytest.fail(f"TORCHBURN_TEST_REQUIRE_VULKAN=1 but no Vulkan device: {info['reason']}")
        pytest.skip(f"no Vulkan device: {info['reason']}")
    return info


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHBURN_CACHE_DIR", str(tmp_path / "tbcache"))


def save_model(model, family, folder):
    """A transformers model of `family` with its tokenizer files, loadable by LLM.from_pretrained."""
    template, bos, eos = TEMPLATES[family]
    model.save_pretrained(folder)
    _train_tokenizer(bos).save(str(folder / "tokenizer.json"))
    config = {"chat_template": template, "eos_token": eos, "model_max_length": 512}
    if bos is not None:
        config["bos_token"] = bos
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm_gpu_models")
    dirs = {}
    for index, family in enumerate(FAMILIES):
        torch.manual_seed(4321 + index)
        dirs[family] = save_model(_config_model(family), family, root / family)
    return dirs


def _prompt(count, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(10, 200, size=count)]


# 70 positions: two attention tiles of 64, past mistral's sliding window of 16
PROMPT = 70
NEW_TOKENS = 6


@pytest.mark.parametrize("quant", ["none", "int8", "int4"])
@pytest.mark.parametrize("family", FAMILIES)
def test_gpu_matches_cpu(models, need_gpu, family, quant):
    cpu = LLM.from_pretrained(models[family], quant=quant, device="cpu", exact_activations=True, quiet=True)
    dev = LLM.from_pretrained(models[family], quant=quant, device="gpu", quiet=True)
    assert dev.device == "gpu" and dev._model.on_gpu and not cpu._model.on_gpu
    ids = _prompt(PROMPT)
    want = np.asarray(cpu.logits(ids))
    got = np.asarray(dev.logits(ids))
    bound = 1e-4 * float(np.abs(want).max())
    assert np.abs(got - want).max() <= bound, (np.abs(got - want).max(), bound)
    expected = cpu.generate_tokens(ids, max_tokens=NEW_TOKENS, temperature=0.0, stop_token_ids=[])
    tokens = dev.generate_tokens(ids, max_tokens=NEW_TOKENS, temperature=0.0, stop_token_ids=[])
    assert tokens == expected
    # the cache continues across calls (chat-style): a further prompt after the generated tokens
    more = _prompt(5, seed=1)
    assert (dev.generate_tokens(ids + tokens + more, max_tokens=3, temperature=0.0, stop_token_ids=[]) ==
            cpu.generate_tokens(ids + tokens + more, max_tokens=3, temperature=0.0, stop_token_ids=[]))


# 12 KiB: below the int4 LM head (400 x 32 bytes), so every quant format splits it (f32: 9 parts, int8: 3,
# int4: 2) and most layer matrices too; prompt chunks of 7 rows (a logits row is 1600 bytes); the KV cache
# of a layer (2 kv heads x 16 dims x 4 bytes per position) holds 96 positions.
SMALL_RANGE = 12288
MODES = {"split": {"TORCHBURN_VULKAN_MAX_BUFFER_RANGE": str(SMALL_RANGE)},
         "staging": {"TORCHBURN_VULKAN_FORCE_STAGING": "1"},
         "no_subgroup": {"TORCHBURN_VULKAN_NO_SUBGROUP": "1"},
         "split_staging": {"TORCHBURN_VULKAN_MAX_BUFFER_RANGE": str(SMALL_RANGE), "TORCHBURN_VULKAN_FORCE_STAGING": "1"}}


@pytest.mark.parametrize("quant", ["none", "int8", "int4"])
@pytest.mark.parametrize("family", ["qwen2", "mistral"])
@pytest.mark.parametrize("mode", list(MODES))
def test_gpu_modes_match_cpu(models, need_gpu, mode, family, quant):
    """The device-limit paths on lavapipe: weights split by rows across buffers (a lowered
    maxStorageBufferRange), device-local buffers with staging copies (forced), shared-memory
    reductions (subgroups off); same logits bound and greedy tokens as test_gpu_matches_cpu. qwen2 has
    the tied head (the embedding uploaded as LM head, split) and q/k/v bias (split with the rows)."""
    cpu = LLM.from_pretrained(models[family], quant=quant, device="cpu", exact_activations=True, quiet=True)
    ids = _prompt(PROMPT)
    want = np.asarray(cpu.logits(ids))
    expected = cpu.generate_tokens(ids, max_tokens=NEW_TOKENS, temperature=0.0, stop_token_ids=[])
    with vulkan_settings(**MODES[mode]) as info:
        assert info["staging"] == ("staging" in mode or need_gpu["staging"])
        assert info["subgroup_reductions"] == (mode != "no_subgroup" and need_gpu["subgroup_reductions"])
        if "split" in mode:
            assert info["limits"]["max_storage_buffer_range"] == SMALL_RANGE
        dev = LLM.from_pretrained(models[family], quant=quant, device="gpu", quiet=True)
        got = np.asarray(dev.logits(ids))
        bound = 1e-4 * float(np.abs(want).max())
        assert np.abs(got - want).max() <= bound, (np.abs(got - want).max(), bound)
        assert dev.generate_tokens(ids, max_tokens=NEW_TOKENS, temperature=0.0, stop_token_ids=[]) == expected
        if "staging" in mode:
            after = gpu.gpu_info()  # every copy went through the staging buffer, mostly inside runs
            assert after["batched_copies"] > info["batched_copies"]
        del dev


def test_split_weights_run_one_dispatch_per_part(models, need_gpu):
    """With the lowered limit a decode step launches one qmatmul per part of each split matrix: more
    dispatches than unsplit, same single submit per step."""
    def decode_dispatches():
        dev = LLM.from_pretrained(models["qwen2"], quant="int8", device="gpu", quiet=True)
        before = gpu.gpu_info()
        dev.logits([17])  # one token: the shape of a decode step
        after = gpu.gpu_info()
        del dev
        gc.collect()
        return after["dispatches"] - before["dispatches"], after["submits"] - before["submits"]

    whole, whole_submits = decode_dispatches()
    with vulkan_settings(TORCHBURN_VULKAN_MAX_BUFFER_RANGE=str(SMALL_RANGE)):
        split, split_submits = decode_dispatches()
    assert split_submits == whole_submits
    # int8 LM head 400 x 64 bytes -> 3 parts; gate_up (256 x 64) -> 2 parts per layer: at least 2 + 2 more
    assert split >= whole + 4, (whole, split)


def test_kv_cache_beyond_the_buffer_limit_is_a_clear_error(models, need_gpu):
    with vulkan_settings(TORCHBURN_VULKAN_MAX_BUFFER_RANGE=str(SMALL_RANGE)):
        dev = LLM.from_pretrained(models["llama"], quant="int8", device="gpu", quiet=True)
        with pytest.raises(Exception, match=r"KV cache of 100 positions .* maxStorageBufferRange \(12288 bytes: "
                                            r"96 positions fit\)"):
            dev.logits(_prompt(100))
        del dev


def test_one_submit_per_step(models, need_gpu):
    dev = LLM.from_pretrained(models["qwen3"], quant="int8", device="gpu", quiet=True)
    ids = _prompt(20)
    before = gpu.gpu_info()["submits"]
    dev.logits(ids)  # the whole prompt, every position's logits: one command-buffer submit
    assert gpu.gpu_info()["submits"] - before == 1
    before = gpu.gpu_info()["submits"]
    dev.generate_tokens(ids, max_tokens=5, temperature=0.0, stop_token_ids=[])
    # prompt: one run (its last row's LM head included); then one per decoded token after the first
    assert gpu.gpu_info()["submits"] - before == 1 + 4


def test_gpu_refusals(models, need_gpu):
    with pytest.raises(ValueError, match="float16"):
        LLM.from_pretrained(models["llama"], quant="none", device="gpu", kv_cache_dtype="float16", quiet=True)
    with pytest.raises(ValueError, match="unknown device"):
        LLM.from_pretrained(models["llama"], quant="none", device="tpu", quiet=True)


def _run(code, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHBURN_")}
    full_env.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)


def test_hidden_loader_means_cpu(models, tmp_path):
    code = (
        "import torchburn, torchburn.gpu as g\n"
        "from torchburn import LLM\n"
        "assert g.gpu_available() is False\n"
        f"folder = {str(models['qwen2'])!r}\n"
        "assert LLM.from_pretrained(folder, quant='none', device='auto', quiet=True).device == 'cpu'\n"
        "try:\n"
        "    LLM.from_pretrained(folder, quant='none', device='gpu', quiet=True)\n"
        "except ValueError as e:\n"
        "    assert 'no usable GPU' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('device=gpu did not fail')\n"
        "print('ok')\n")
    result = _run(code, TORCHBURN_VULKAN_LOADER=str(tmp_path / "no-libvulkan.so.1"), TORCHBURN_VULKAN_ALLOW_CPU="1",
                  TORCHBURN_CACHE_DIR=str(tmp_path / "c"))
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_auto_skips_cpu_devices(models, tmp_path, need_gpu):
    if need_gpu["device_type"] != "cpu":
        pytest.skip("the Vulkan device here is a real GPU; auto takes it")
    code = (f"from torchburn import LLM\n"
            f"print(LLM.from_pretrained({str(models['qwen2'])!r}, quant='none', device='auto', quiet=True).device)\n")
    assert _run(code, TORCHBURN_CACHE_DIR=str(tmp_path / "c")).stdout.strip() == "cpu"
    assert _run(code, TORCHBURN_CACHE_DIR=str(tmp_path / "c"), TORCHBURN_VULKAN_ALLOW_CPU="1").stdout.strip() == "gpu"
