"""FSDP2 (``fully_shard``) training through the compile backend, with 2 gloo processes on this machine.

The layout that reaches the backend is the one torchtitan uses: ``torch.compile`` each block, then
``fully_shard`` the blocks and the root. It trains like eager FSDP2 (same losses, parameters after 5 SGD
steps), and every forward and backward graph runs natively. Compiling the sharded root instead
(``torch.compile(fully_shard(model))``) captures no graph on torch 2.13, with any backend, so
``torchburn.compile`` warns when handed an FSDP2 module."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import torchburn  # noqa: E402
from dist_harness import run_two_ranks  # noqa: E402

WORKER = """
    import json, sys, warnings
    import torch, torch.distributed as dist
    import torchburn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchburn.backend import Explanation
    from torchburn.backend.diagnostics import Recorder

    warnings.simplefilter("ignore")
    rank, store = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    STEPS = 5

    def sharded(compile_blocks):
        torch.manual_seed(0)  # the same initial weights on both ranks, for both runs
        nn = torch.nn
        model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 256), nn.LayerNorm(256), nn.ReLU(),
                              nn.Linear(256, 4))
        for index, block in enumerate(model):
            if compile_blocks:
                model[index] = block = torch.compile(block, backend="torchburn")
            if any(True for _ in block.parameters()):
                fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def train(model, call):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        losses = []
        for _ in range(STEPS):
            x = torch.randn(16, 32, generator=generator)
            target = torch.randint(0, 4, (16,), generator=generator)
            loss = torch.nn.functional.cross_entropy(call(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, [p.full_tensor().detach().clone() for p in model.parameters()]

    eager = sharded(False)
    eager_losses, eager_params = train(eager, eager)
    with Recorder() as recorder:
        blocks = sharded(True)
        compiled_losses, compiled_params = train(blocks, blocks)
    report = Explanation(graphs=list(recorder.graphs))
    # the sharded root compiled as a whole: a counting backend is never called
    calls = []
    def counting(gm, example_inputs):
        calls.append(len(gm.graph.nodes))
        return gm.forward
    root = sharded(False)
    train(root, torch.compile(root, backend=counting))
    print(json.dumps({
        "eager_losses": eager_losses, "compiled_losses": compiled_losses,
        "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(eager_params, compiled_params)),
        "graphs": [g.kind for g in report.graphs], "native_share": report.native_share,
        "runtime_fallbacks": report.runtime_fallbacks, "fallback_ops": report.fallback_ops,
        "native_runs": [r[0] for g in report.graphs for r in g.region_runs()], "root_graphs": len(calls),
        "steps": STEPS,
    }))
    dist.destroy_process_group()
"""


def test_fully_shard_of_compiled_blocks_trains_like_eager_fsdp2(tmp_path):
    results = run_two_ranks(WORKER, tmp_path)
    for rank, result in enumerate(results):
        # the same updates: FSDP2 all-gathers parameters and reduce-scatters gradients in both runs
        assert result["compiled_losses"] == pytest.approx(result["eager_losses"], rel=1e-5, abs=1e-6), rank
        assert result["max_param_diff"] < 1e-5, result
        # one forward and one backward graph per compiled block (6 blocks), all native, run every step
        assert result["graphs"].count("forward") == 6 and result["graphs"].count("backward") == 6, result
        assert not result["runtime_fallbacks"] and not result["fallback_ops"], result
        assert result["native_share"] == 1.0, result
        assert all(runs == result["steps"] for runs in result["native_runs"]), result
        # why torchburn.compile warns about a sharded root: nothing reaches any backend
        assert result["root_graphs"] == 0, result


def test_compile_warns_about_an_fsdp2_module(tmp_path):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        with pytest.warns(UserWarning, match="fully_shard"):
            torchburn.compile(fully_shard(torch.nn.Linear(4, 4), mesh=mesh))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torchburn.compile(torch.nn.Linear(4, 4))  # an ordinary module: no warning
    finally:
        dist.destroy_process_group()
