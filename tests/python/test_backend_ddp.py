"""Distributed data parallel training through the compile backend, with 2 gloo processes on this machine:
``DDP(torch.compile(model, backend="torchburn"))`` trains like eager DDP (same losses and parameters
after 10 SGD steps), the graphs DDPOptimizer splits at bucket boundaries all run natively, and
``torchburn.compile`` warns when handed a DDP-wrapped module (which Dynamo does not trace into)."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import torchburn  # noqa: E402
from dist_harness import run_two_ranks  # noqa: E402

WORKER = """
    import json, os, sys, warnings
    import torch, torch.distributed as dist
    import torchburn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchburn.backend import Explanation
    from torchburn.backend.diagnostics import Recorder

    warnings.simplefilter("ignore")
    rank, store = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)

    def model():
        torch.manual_seed(0)  # the same initial weights on both ranks, for both runs
        nn = torch.nn
        return nn.Sequential(nn.Linear(32, 512), nn.GELU(), nn.Linear(512, 512), nn.LayerNorm(512), nn.ReLU(),
                             nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 4))  # 2.2 MB of parameters

    def train(ddp):
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
        generator = torch.Generator().manual_seed(100 + rank)  # each rank its own data
        losses = []
        for _ in range(10):
            x = torch.randn(16, 32, generator=generator)
            target = torch.randint(0, 4, (16,), generator=generator)
            loss = torch.nn.functional.cross_entropy(ddp(x), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, [p.detach().clone() for p in ddp.parameters()]

    # 1 MB buckets (the smallest DDP allows after its 1 MB first bucket): DDPOptimizer splits the
    # forward graph at each bucket boundary
    eager_losses, eager_params = train(DDP(model(), bucket_cap_mb=1))
    with Recorder() as recorder:
        compiled_losses, compiled_params = train(DDP(torch.compile(model(), backend="torchburn"), bucket_cap_mb=1))
    report = Explanation(graphs=list(recorder.graphs))
    print(json.dumps({
        "eager_losses": eager_losses, "compiled_losses": compiled_losses,
        "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(eager_params, compiled_params)),
        "graphs": [g.kind for g in report.graphs], "native_share": report.native_share,
        "runtime_fallbacks": report.runtime_fallbacks, "fallback_ops": report.fallback_ops,
        "native_runs": [r[0] for g in report.graphs for r in g.region_runs()],
    }))
    dist.destroy_process_group()
"""


def test_ddp_of_compiled_module_trains_like_eager_ddp(tmp_path):
    results = run_two_ranks(WORKER, tmp_path)
    for rank, result in enumerate(results):
        # the same updates: gradients are all-reduced over the ranks in both runs
        assert result["compiled_losses"] == pytest.approx(result["eager_losses"], rel=1e-5, abs=1e-6), rank
        assert result["max_param_diff"] < 1e-5, result
        # DDPOptimizer handed the backend several bucketed forward graphs, and their backward graphs
        assert result["graphs"].count("forward") >= 2 and result["graphs"].count("backward") >= 2, result
        assert not result["runtime_fallbacks"] and not result["fallback_ops"], result
        assert result["native_share"] == 1.0, result
        assert all(runs == 10 for runs in result["native_runs"]), result  # every step ran every plan


def test_compile_warns_about_a_ddp_wrapped_module(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapped = DDP(torch.nn.Linear(4, 4))
        with pytest.warns(UserWarning, match="DistributedDataParallel"):
            torchburn.compile(wrapped)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torchburn.compile(torch.nn.Linear(4, 4))  # an ordinary module: no warning
    finally:
        dist.destroy_process_group()
