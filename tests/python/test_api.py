"""TorchBurn's public utility API under its names: supported_ops, profile, profiling_stats, reset_stats,
coverage_report, visualize, memory_pool_stats / clear_memory_pool, cache_stats()["python_size"],
quantize_weight_int4, quantize_model's aliases, and the submodules reachable from ``import torchburn``.

Oracles: torchburn.explain (itself checked against the plans' counters in test_backend_fixes.py),
PyTorch's op registry, the grouped int4 quantizer (per-channel = one group per row) and the formula."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import torchburn  # noqa: E402
from torchburn.backend import TorchburnFallbackWarning, compiler  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()


def native_nodes(model, *inputs):
    with torch.no_grad():
        report = torchburn.explain(model, *inputs)
    torch._dynamo.reset()
    return report.native_nodes


# ---- supported_ops --------------------------------------------------------------------------------


def test_supported_ops_are_aten_ops_the_backend_lowers():
    names = torchburn.supported_ops()
    assert names == sorted(set(names)) and len(names) > 50
    for name in names:
        assert hasattr(torch.ops.aten, name), name
    for expected in ("addmm", "_softmax", "native_layer_norm", "convolution",
                     "_scaled_dot_product_flash_attention_for_cpu", "native_dropout", "native_dropout_backward"):
        assert expected in names
    assert "cummax" not in names  # not lowered: it runs in PyTorch
    overloads = torchburn.supported_ops(overloads=True)
    assert "aten.add.Tensor" in overloads and len(overloads) > len(names)


# ---- profile, profiling_stats, reset_stats --------------------------------------------------------


def test_profile_and_profiling_stats_count_native_runs():
    model, x = mlp(), torch.randn(4, 16)
    nodes = native_nodes(model, x)
    fn = torch.compile(model, backend="torchburn")
    with torch.no_grad():
        fn(x)  # compile outside the measurement
        torchburn.reset_stats()
        assert torchburn.profiling_stats()["calls"] == 0
        with torchburn.profile() as run:
            for _ in range(3):
                fn(x)
    assert run.engine == torchburn.active_engine()
    assert run.calls == 3 and run.fallback_calls == 0 and run.nodes == 3 * nodes
    assert run.wall_time_ms > 0 and run.wall_time_ms >= run.kernel_ms > 0
    stats = torchburn.profiling_stats()
    assert set(stats) >= {"calls", "total_ms", "total_nodes"}
    assert stats["calls"] == 3 and stats["total_nodes"] == 3 * nodes and stats["total_ms"] > 0
    torchburn.reset_stats()
    assert torchburn.profiling_stats()["calls"] == 0 and torchburn.profiling_stats()["total_ms"] == 0


def test_profiling_stats_count_pytorch_runs(monkeypatch):
    build = compiler.Region.build_static

    def plan_then_pytorch(self):
        build(self)
        return self.fallback

    monkeypatch.setattr(compiler.Region, "build_static", plan_then_pytorch)
    fn = torch.compile(mlp(), backend="torchburn")
    torchburn.reset_stats()
    with torch.no_grad(), warnings.catch_warnings(), torchburn.profile() as run:
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        fn(torch.randn(4, 16))
        fn(torch.randn(4, 16))
    assert run.calls == 0 and run.fallback_calls == 2 and run.nodes == 0


# ---- coverage_report ------------------------------------------------------------------------------


def test_coverage_report_names_what_ran_in_pytorch():
    def fn(x):
        return torch.cummax(torch.relu(x @ x.t()), 0).values * 2

    x = torch.randn(5, 5)
    with torch.no_grad():
        report = torchburn.explain(fn, x)
    torch._dynamo.reset()
    torchburn.reset_stats()
    compiled = torch.compile(fn, backend="torchburn")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        torch.testing.assert_close(compiled(x), fn(x))
    coverage = torchburn.coverage_report()
    assert any("cummax" in op for op in coverage["fallback_ops"]), coverage
    assert coverage["native_ops"] == report.native_ops
    assert coverage["native_ratio"] == pytest.approx(report.native_share)
    assert 0 < coverage["native_ratio"] < 1 and coverage["graphs"] >= 1 and not coverage["runtime_fallbacks"]


# ---- visualize --------------------------------------------------------------------------------------


def test_visualize_native_model(tmp_path, capsys):
    model, x = mlp(), torch.randn(4, 16)
    expected = native_nodes(model, x)
    page = tmp_path / "graph.html"
    with torch.no_grad():
        view = torchburn.visualize(model, x, output_html=str(page))
    assert view.total_compute_nodes == expected and view.native_ratio == 1.0
    printed = capsys.readouterr().out
    assert view.summary() in printed and f"{expected} of {expected}" in printed
    mermaid = view.to_mermaid()
    assert mermaid.startswith("flowchart TD") and mermaid.count(":::native") == expected
    assert "-->" in mermaid and ":::pytorch" not in mermaid
    text = page.read_text()
    assert text == view.to_html() and text.startswith("<!DOCTYPE html>") and "addmm" in text


def test_visualize_marks_pytorch_nodes_with_their_reason():
    def fn(x):
        return torch.cummax(torch.relu(x @ x.t()), 0).values * 2

    x = torch.randn(5, 5)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        view = torchburn.visualize(fn, x, print_summary=False)
    report = view.explanation
    assert view.total_compute_nodes == report.total_nodes
    assert view.native_ratio == pytest.approx(report.native_share) and view.native_ratio < 1
    (cummax,) = [n for n in view.nodes if n.status == "pytorch"]
    assert cummax.op == "cummax.default" and "cummax" in cummax.reason
    assert view.to_mermaid().count(":::pytorch") == 1
    assert "in PyTorch x1: cummax.default" in view.summary()


def test_visualize_training_graphs():
    model, x = mlp().train(), torch.randn(4, 16, requires_grad=True)
    view = torchburn.visualize(model, x, print_summary=False)
    kinds = {n.kind for n in view.nodes}
    assert kinds == {"forward", "backward"} and view.native_ratio == 1.0
    assert x.grad is None and all(p.grad is None for p in model.parameters())  # nothing accumulated


# ---- memory pool, cache ---------------------------------------------------------------------------


def test_memory_pool_stats_and_clear():
    a = torch.randn(4096)
    out = torchburn.ops.relu(torchburn.from_dlpack(a))  # a torchburn allocation, then freed
    del out
    stats = torchburn.memory_pool_stats()
    raw = torchburn.memory_stats()
    assert stats["pooled_bytes"] == raw["bytes_cached"] > 0 and stats["live_bytes"] == raw["bytes_live"]
    assert 0.0 <= stats["hit_rate"] <= 1.0 and stats["allocations"] == raw["allocations"]
    torchburn.clear_memory_pool()
    assert torchburn.memory_pool_stats()["pooled_bytes"] == 0


def test_cache_stats_python_size_counts_live_plans():
    gc.collect()
    before = torchburn.cache_stats()["python_size"]
    fn = torch.compile(mlp(), backend="torchburn")
    with torch.no_grad():
        fn(torch.randn(4, 16))
        fn(torch.randn(7, 16))  # a second shape: a second compiled graph and plan
    assert torchburn.cache_stats()["python_size"] == before + 2
    del fn
    torch._dynamo.reset()
    gc.collect()
    assert torchburn.cache_stats()["python_size"] == before


# ---- quantization names ------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [64, 128])
def test_quantize_weight_int4_equals_one_group_per_row(k):
    w = torch.randn(6, k) * torch.linspace(0.1, 3, 6)[:, None]
    packed, scales = torchburn.quantize_weight_int4(w)
    grouped, group_scales = torchburn.quantize_weight_int4_grouped(w, group_size=k)
    assert packed.dtype == torch.uint8 and packed.shape == (6, k // 2) and scales.shape == (6,)
    assert torch.equal(packed, grouped) and torch.equal(scales, group_scales.flatten())


def test_quantize_weight_int4_round_trip_and_bad_input():
    w = torch.randn(5, 100)
    w[2] = 0.0
    packed, scales = torchburn.quantize_weight_int4(w)
    low, high = (packed & 0xF).to(torch.int16) - 8, (packed >> 4).to(torch.int16) - 8
    q = torch.stack([low, high], dim=2).reshape(5, 100).float()
    torch.testing.assert_close(scales, w.abs().amax(1) / 7)
    assert ((q * scales[:, None] - w).abs() <= scales[:, None] / 2 + 1e-6).all()
    assert (q[2] == 0).all()
    with pytest.raises(ValueError, match="even"):
        torchburn.quantize_weight_int4(torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"weight\[1, 3\] is infinite"):
        bad = torch.zeros(2, 8)
        bad[1, 3] = float("inf")
        torchburn.quantize_weight_int4(bad)
    nan = torch.randn(2, 8)
    nan[0, 1] = float("nan")
    assert torch.isnan(torchburn.quantize_weight_int4(nan)[1][0])


def test_quantize_model_torchburn_arguments():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    torchburn.quantize_model(model, bits=8, exclude_modules=["0"])
    assert type(model[0]) is torch.nn.Linear and type(model[2]).__name__ == "QuantizedLinear"
    with pytest.raises(ValueError, match="backend"):
        torchburn.quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), bits=8, backend="wgpu")
    with pytest.raises(TypeError, match="not both"):
        torchburn.quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), bits=8, exclude=["x"],
                                 exclude_modules=["y"])


# ---- submodules ---------------------------------------------------------------------------------------


def test_submodules_reachable_from_import_torchburn():
    code = ("import sys, torchburn\n"
            "names = ['quantization', 'llm', 'backend', 'tokenizer', 'files']\n"
            "print(*[getattr(torchburn, n).__name__ for n in names])\n"
            "import torchburn.quantization, torchburn.files\n"
            "print(torchburn.quantization.quantize_weight_int4 is torchburn.quantize_weight_int4)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split("\n")
    assert lines[0].split() == ["torchburn.quantization", "torchburn.llm", "torchburn.backend", "torchburn.tokenizer",
                                "torchburn.files"]
    assert lines[1] == "True"


def test_visualize_shows_regions_that_ran_in_pytorch(monkeypatch):
    build = compiler.Region.build_static

    def plan_then_pytorch(self):
        build(self)
        return self.fallback

    monkeypatch.setattr(compiler.Region, "build_static", plan_then_pytorch)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        view = torchburn.visualize(mlp(), torch.randn(4, 16), print_summary=False)
    assert view.total_compute_nodes > 0 and view.native_ratio == 0.0
    assert all(n.status == "pytorch" and "inputs differ" in n.reason for n in view.nodes)
