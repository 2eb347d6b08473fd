"""Command-buffer batching in the Vulkan engine's staging mode (device-local buffers: a discrete GPU's
VRAM, forced on lavapipe with TORCHBURN_VULKAN_FORCE_STAGING=1): the uploads of a compiled plan or an
LLM step ride in the same submit as its compute work and its results come back in it too, so each plan
call and each decode step is exactly one vkQueueSubmit (`submits` + 1, `transfers` + 0), and the
results still equal the oracle (eager PyTorch, native_cpu).

The counters are the engine's own (gpu_info: `submits` counts runs, `transfers` submits of copies
alone, `batched_copies` the copies recorded inside runs; test_engine.py's test_forced_staging_copies
checks a plain engine_run the same way). lavapipe runs a command buffer in order, so a missing barrier
changes no result there: the Khronos validation layer's synchronization validation checks them
(needs vulkan-validationlayers; TORCHBURN_TEST_REQUIRE_VK_VALIDATION=1, set by .ci/run, forbids the
skip). The others skip only without any Vulkan device and TORCHBURN_TEST_REQUIRE_VULKAN unset.
"""
from __future__ import annotations

import gc
import json
import os

import numpy as np
import pytest

import torchburn.gpu as gpu
from torchburn import LLM
from test_engine import run_python, vulkan, vulkan_settings  # noqa: F401  (fixture)
from test_llm_gpu import _lavapipe_counts, _private_cache, _prompt, models, need_gpu  # noqa: F401  (fixtures)


def _delta(before, after):
    return {key: after[key] - before[key] for key in ("submits", "transfers", "batched_copies")}


def test_uploads_larger_than_the_staging_buffer_still_arrive(vulkan):
    """An upload beyond the 16 MiB staging buffer goes in chunks of its own (it cannot ride in a run);
    the queue of small uploads before it is flushed first, so order is kept. Downloads that fit the
    staging buffer still ride in the run."""
    with vulkan_settings(TORCHBURN_VULKAN_FORCE_STAGING="1"):
        rng = np.random.default_rng(6)
        small = rng.standard_normal(1000).astype(np.float32)
        big = rng.standard_normal(5_000_000).astype(np.float32)  # 20 MB: two chunks each way
        out_small, out_big = small.copy(), big.copy()
        before = gpu.gpu_info()
        gpu.engine_run("vulkan", [{"kind": "unary", "op": "neg", "n": small.size, "a": 0, "y": 0},
                                  {"kind": "unary", "op": "neg", "n": big.size, "a": 1, "y": 1}], [out_small, out_big])
        delta = _delta(before, gpu.gpu_info())
        # the small array's upload is flushed before the big one's 2 chunks; its download rides in the run
        assert delta == {"submits": 1, "transfers": 1 + 2 + 2, "batched_copies": 1}, delta
        assert np.array_equal(out_small, -small) and np.array_equal(out_big, -big)


def test_copy_op_moves_rows_inside_the_run(vulkan):
    """The copy op (how the LLM hands its prompt's last row to the LM head): a range of a into y at an
    offset, between two shaders of the same submit; the CPU engines refuse it."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal(40).astype(np.float32)
    ops = [{"kind": "unary", "op": "neg", "n": 40, "a": 0, "y": 0},
           {"kind": "copy", "n": 9, "a_offset": 30, "y_col0": 3, "a": 0, "y": 1},
           {"kind": "unary", "op": "abs", "n": 16, "a": 1, "y": 2}]
    for staging in ("0", "1"):
        with vulkan_settings(TORCHBURN_VULKAN_FORCE_STAGING=staging):
            arrays = [x.copy(), np.full(16, 5, np.float32), np.zeros(16, np.float32)]
            before = gpu.gpu_info()
            gpu.engine_run("vulkan", ops, arrays)
            assert gpu.gpu_info()["submits"] - before["submits"] == 1
            want = np.full(16, 5, np.float32)
            want[3:12] = -x[30:39]
            assert np.array_equal(arrays[1], want) and np.array_equal(arrays[2], np.abs(want))
    with pytest.raises(Exception, match="op 1"):
        gpu.engine_run("native_cpu", ops, [x.copy(), np.zeros(16, np.float32), np.zeros(16, np.float32)])
    with pytest.raises(Exception, match="copy op: operand a needs 164 bytes, its buffer has 160"):
        gpu.engine_run("vulkan", [dict(ops[1], a_offset=32)], [x.copy(), np.zeros(16, np.float32)])


COMPILED = r"""
import json, torch, torchburn
torch.manual_seed(0)
models = {
    "mlp": (torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)), (5, 64)),
    "norm_softmax": (torch.nn.Sequential(torch.nn.Linear(33, 65), torch.nn.SiLU(), torch.nn.LayerNorm(65),
                                         torch.nn.Linear(65, 7), torch.nn.LogSoftmax(-1)), (3, 11, 33)),
}
keys = ("submits", "transfers", "batched_copies")
result = {}
for name, (model, shape) in models.items():
    model.eval()
    compiled = torch.compile(model, backend="torchburn")
    calls = []
    with torch.no_grad():
        for call in range(3):
            x = torch.randn(*shape)
            before = torchburn.gpu_info()
            got = compiled(x)
            after = torchburn.gpu_info()
            calls.append({"err": float((got - model(x)).abs().max()), "scale": float(model(x).abs().max()),
                          **{k: after[k] - before[k] for k in keys}})
    result[name] = calls
print(json.dumps({"staging": torchburn.gpu_info()["staging"], "result": result}))
"""


def test_compiled_plan_is_one_submit_per_call(vulkan):
    """Every call of a compiled model on the GPU with staging: its inputs (weights included: they are
    call inputs in this backend) and its output travel in its one submit."""
    out = run_python(COMPILED, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1",
                     TORCHBURN_VULKAN_FORCE_STAGING="1")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["staging"] is True
    for name, calls in data["result"].items():
        for call in calls:
            assert call["err"] <= 1e-5 * max(1.0, call["scale"]), (name, call)
            assert call["submits"] == 1 and call["transfers"] == 0, (name, call)
            assert call["batched_copies"] >= 3, (name, call)  # at least x, a weight and the output


@pytest.mark.parametrize("quant", ["none", "int8"])
def test_llm_decode_step_is_one_submit(models, need_gpu, quant):
    """With staging, a decode step's embedding and RoPE rows go up and its logits come down inside its
    one submit; so does a prompt whose last logits only are wanted (its last row is copied on the
    device for the LM head). Greedy tokens equal native_cpu's."""
    cpu = LLM.from_pretrained(models["qwen2"], quant=quant, device="cpu", exact_activations=True, quiet=True)
    ids = _prompt(20)
    expected = cpu.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[])
    with vulkan_settings(TORCHBURN_VULKAN_FORCE_STAGING="1") as info:
        assert info["staging"] is True
        dev = LLM.from_pretrained(models["qwen2"], quant=quant, device="gpu", quiet=True)
        dev.logits([16])  # the first run also carries the last of the weights queued by the load
        before = gpu.gpu_info()
        logits = np.asarray(dev.logits([17]))  # one token: a decode step's shape
        assert _delta(before, gpu.gpu_info()) == {"submits": 1, "transfers": 0, "batched_copies": 3}
        want = np.asarray(cpu.logits([17]))
        assert np.abs(logits - want).max() <= 1e-4 * float(np.abs(want).max())
        before = gpu.gpu_info()
        tokens = dev.generate_tokens(ids, max_tokens=6, temperature=0.0, stop_token_ids=[])
        delta = _delta(before, gpu.gpu_info())
        assert tokens == expected
        # the prompt: 1 submit; then 5 decode steps (the first token comes from the prompt), 1 each
        assert delta["submits"] == 1 + 5 and delta["transfers"] == 0, delta
        del dev
        gc.collect()


# Every staging path of the engine under the Khronos validation layer with synchronization validation
# (the barriers that lavapipe, running a command buffer in order, cannot show missing): queued uploads
# in a run, downloads in it, 16-bit weights, a chunked upload and download, a compiled plan, an LLM
# prompt, decode steps and a KV-cache growth (download + re-upload of the kept positions).
SYNC_PATHS = r"""
import os, numpy as np, torch, torchburn, torchburn.gpu as gpu
from torchburn import LLM
assert gpu.gpu_info()["staging"] == (os.environ.get("TORCHBURN_VULKAN_FORCE_STAGING") == "1")
rng = np.random.default_rng(0)
a, w = rng.standard_normal((9, 40)).astype(np.float32), rng.standard_normal((24, 40)).astype(np.float32)
ops = [{"kind": "matmul", "m": 9, "n": 24, "k": 40, "trans_b": 1, "a": 0, "b": 1, "y": 2},
       {"kind": "unary", "op": "silu", "n": 9 * 24, "a": 2, "y": 2}, {"kind": "softmax", "rows": 9, "len": 24, "a": 2, "y": 3}]
for _ in range(2):
    gpu.engine_run("vulkan", ops, [a, w, np.zeros((9, 24), np.float32), np.zeros((9, 24), np.float32)])
if gpu.gpu_info()["storage_16bit"]:  # the *_w16 kernels (the feature enabled at device creation)
    for m in (1, 9):
        gpu.engine_run("vulkan", [dict(ops[0], m=m, b_format=1)],
                       [a[:m].copy(), torch.from_numpy(w).to(torch.bfloat16), np.zeros((m, 24), np.float32)])
big = rng.standard_normal(5_000_000).astype(np.float32)
gpu.engine_run("vulkan", [{"kind": "unary", "op": "neg", "n": big.size, "a": 0, "y": 0}], [big])
model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)).eval()
with torch.no_grad():
    compiled = torch.compile(model, backend="torchburn")
    for _ in range(2):
        compiled(torch.randn(5, 64))
llm = LLM.from_pretrained(os.environ["TB_TEST_MODEL"], quant="int8", device="gpu", quiet=True)
ids = [int(t) for t in rng.integers(10, 200, size=20)]
llm.generate_tokens(ids, max_tokens=4, temperature=0.0, stop_token_ids=[])
llm.logits([int(t) for t in rng.integers(10, 200, size=300)])  # past 256 positions: the cache grows
print("paths done")
"""
VALIDATION_LAYER = "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"


@pytest.mark.parametrize("staging", ["1", "0"])
def test_staging_paths_pass_synchronization_validation(vulkan, models, staging):
    """No SYNC-HAZARD (nor any other validation error) on any staging path, nor in mapped mode. Seen to
    fail (READ_AFTER_WRITE on the copied buffers) with the transfer -> shader barrier after the queued
    uploads removed, and (READ_AFTER_WRITE by the copy) with the shader -> transfer barrier before the
    downloads removed."""
    if not os.path.exists(VALIDATION_LAYER):
        if os.environ.get("TORCHBURN_TEST_REQUIRE_VK_VALIDATION") == "1":  # .ci/run installs it and sets this
            pytest.fail("the Khronos validation layer is required here (apt-get install vulkan-validationlayers)")
        pytest.skip("no Khronos validation layer (vulkan-validationlayers)")
    out = run_python(SYNC_PATHS, TB_TEST_MODEL=str(models["qwen2"]), TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1",
                     TORCHBURN_VULKAN_FORCE_STAGING=staging, VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
                     VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT")
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "paths done" in out.stdout, text[-3000:]
    assert "Validation Error" not in text and "SYNC-HAZARD" not in text, text[:3000]
