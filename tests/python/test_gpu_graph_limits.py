"""Compiled graphs against the Vulkan device's maxStorageBufferRange (lowered with
TORCHBURN_VULKAN_MAX_BUFFER_RANGE so small models reach it): nn.Linear weights larger than the limit
are split by rows into parts that fit (one matmul per part, still one submit per call), and what
cannot be split runs on native_cpu with the sizes named in explain. Oracle: eager PyTorch.
Skips only without any Vulkan device and TORCHBURN_TEST_REQUIRE_VULKAN unset (CI sets it).
"""
from __future__ import annotations

import json

from test_engine import run_python, vulkan  # noqa: F401  (fixture)

LIMITS = r"""
import json, torch, torchburn
torch.manual_seed(0)

class KN(torch.nn.Module):  # a [K, N] weight read as it is: not split
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 96))
    def forward(self, x):
        return torch.relu(x @ self.w)

models = {
    # 96 x 64 x 4 = 24576 bytes > 8192: three parts of 32 rows, bias split with them
    "split": (torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)), (5, 64)),
    "split_no_bias": (torch.nn.Sequential(torch.nn.Linear(64, 70, bias=False), torch.nn.ReLU()), (3, 64)),
    "kn": (KN(), (5, 64)),
    "wide_activation": (torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()), (200, 16)),
}
result = {}
for name, (model, shape) in models.items():
    model.eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        torch._dynamo.reset()
        explained = str(torchburn.explain(model, x))
        compiled = torch.compile(model, backend="torchburn")
        compiled(x)
        before = torchburn.gpu_info()["submits"]
        got = compiled(x)
        submits = torchburn.gpu_info()["submits"] - before
        want = model(x)
    result[name] = {"err": float((got - want).abs().max()), "scale": float(want.abs().max()), "submits": submits,
                    "explain": explained}
print(json.dumps(result))
"""


def test_compiled_weights_beyond_the_buffer_limit(vulkan):
    out = run_python(LIMITS, TORCHBURN_DEVICE="gpu", TORCHBURN_VULKAN_ALLOW_CPU="1",
                     TORCHBURN_VULKAN_MAX_BUFFER_RANGE="8192")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, item in result.items():
        assert item["err"] <= 1e-5 * max(1.0, item["scale"]), (name, item)
    split = result["split"]
    # 3 parts + gelu + the second (unsplit) Linear, whole graph on the GPU in one submit; the split
    # weight is uploaded once, as its parts
    assert "engine: vulkan (5 ops, one submission per call; copies per call: 30120 bytes in" in split["explain"], split
    assert "engine: native_cpu" not in split["explain"] and split["submits"] == 1, split
    assert "engine: vulkan (4 ops" in result["split_no_bias"]["explain"], result["split_no_bias"]  # 3 parts + relu
    kn = result["kn"]["explain"]
    assert "engine: native_cpu (engine vulkan does not take node" in kn, kn
    assert "B takes 24576 bytes, more than maxStorageBufferRange (8192)" in kn, kn
    wide = result["wide_activation"]["explain"]
    assert "largest operand takes 12800 bytes, maxStorageBufferRange is 8192" in wide, wide
