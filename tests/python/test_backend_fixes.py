"""Round-2 bugs of the torch.compile backend, each against PyTorch eager as the oracle: the registration race
of 8 threads compiling at once, outputs of regions without inputs, empty constant tensors (transformers'
cache starts from ``torch.tensor([])``), ``explain()`` reporting what really ran, and grouped-query
attention (``enable_gqa`` and transformers' ``repeat_kv``) on a tiny LlamaForCausalLM.

Tolerances are assert_close's float32 defaults unless a comment next to the check says why."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")

import torchburn  # noqa: E402
from torchburn.backend import Explanation, TorchburnFallbackWarning, compiler, lowering  # noqa: E402
from torchburn.backend.diagnostics import Recorder  # noqa: E402

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield


def compiled(fn, **kwargs):
    return torch.compile(fn, backend="torchburn", **kwargs)


def ran(recorder: Recorder) -> Explanation:
    """What the calls made under `recorder` really ran (the live counters of every region's plan)."""
    return Explanation(graphs=list(recorder.graphs))


# ---- (a) registration: 8 threads compiling for the first time at once ----------------------------

THREADS = """
    import sys, threading
    {imports}
    model = torch.nn.Linear(8, 4).eval()
    x = torch.randn(2, 8)
    barrier = threading.Barrier(8)
    errors, results = [], [None] * 8

    def work(i):
        try:
            barrier.wait()
            fn = torch.compile(model, backend="torchburn")  # the backend is looked up here, by name
            with torch.no_grad():
                results[i] = fn(x)
        except Exception as error:
            errors.append(f"{{type(error).__name__}}: {{error}}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with torch.no_grad():
        expected = model(x)
    for r in results:
        torch.testing.assert_close(r, expected)
    print("ok")
"""


@pytest.mark.parametrize("imports", ["import torch, torchburn", "import torch, torch._dynamo, torchburn"],
                         ids=["registry imported later", "registry imported first"])
def test_eight_threads_compile_by_name_at_once(imports):
    # a fresh interpreter: the first lookup of "torchburn" happens in the 8 threads at once
    code = textwrap.dedent(THREADS.format(imports=imports))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, TORCHBURN_QUIET="1"))
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_import_torchburn_does_not_import_torch():
    code = "import sys, torchburn; print('torch' in sys.modules, 'torch._dynamo' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_register_is_idempotent_and_thread_safe():
    import threading

    errors = []

    def work():
        try:
            torchburn.register("torchburn_test_alias")
            torchburn.register()
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fn = torch.compile(lambda x: x * 2 + 1, backend="torchburn_test_alias")
    x = torch.randn(5)
    torch.testing.assert_close(fn(x), x * 2 + 1)


# ---- (b) regions without inputs --------------------------------------------------------------------


INDEX = torch.tensor([[0, 1, 2, 0, 1, 2]])
SOURCE = torch.arange(1.0, 7.0).reshape(1, 6)


@pytest.mark.parametrize("fn", [
    lambda i, s: torch.zeros(1, 3).scatter(1, i, s),
    lambda i, s: torch.zeros(1, 3).scatter_add(1, i, s),
    lambda i, s: torch.ones(2, 3).cumsum(1) * s.sum(),
    lambda i, s: torch.ones(2, 3).cumsum(1).roll(1, 1) * s.sum(),
], ids=["scatter", "scatter_add", "cumsum", "roll"])
def test_constant_region_feeds_pytorch_ops(fn):
    # torch.zeros(1, 3) is a native region with no inputs; the op after it may run in PyTorch (roll)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)  # roll is not native
        got = compiled(fn)(INDEX, SOURCE)
    assert type(got) is torch.Tensor
    torch.testing.assert_close(got, fn(INDEX, SOURCE))


def test_whole_graph_without_inputs_returns_torch_tensors():
    def constants():
        return torch.zeros(2, 3) + 1, torch.full((4,), 2.5).exp()

    with torch.no_grad(), Recorder() as recorder:
        got = compiled(constants)()
    for g, e in zip(got, constants()):
        assert type(g) is torch.Tensor
        torch.testing.assert_close(g, e)
    assert ran(recorder).native_share == 1.0, str(ran(recorder))


# ---- (c) empty constant tensors ----------------------------------------------------------------------


def test_empty_constant_does_not_make_the_plan_fail():
    def fn(x):
        empty = torch.tensor([])  # a constant of the graph: a plan input whose data pointer is NULL
        return torch.cat([empty, x.flatten()]) * 2 + empty.numel(), empty.clone(), x.t()[:0] + 1

    x = torch.randn(3, 4)
    with torch.no_grad(), Recorder() as recorder, warnings.catch_warnings():
        warnings.simplefilter("error", TorchburnFallbackWarning)  # no region may hand a call to PyTorch
        fn_c = compiled(fn)
        for _ in range(2):
            got = fn_c(x)
    for g, e in zip(got, fn(x)):
        torch.testing.assert_close(g, e)
    report = ran(recorder)
    assert not report.runtime_fallbacks and report.native_share == 1.0, str(report)


def test_empty_kv_cache_start_runs_natively():
    # transformers' DynamicCache starts each layer from torch.tensor([]) and cats the new keys to it
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_head=4, n_layer=2, n_positions=32)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 128, (2, 12))
    with torch.no_grad(), Recorder() as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        got = compiled(model)(ids, use_cache=True).logits
        expected = model(ids, use_cache=True).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)  # tanh-GELU fused: a few ulps
    report = ran(recorder)
    assert not report.runtime_fallbacks, str(report)
    assert report.native_share >= 0.9, str(report)


def test_reduction_over_an_empty_input_stays_in_pytorch():
    # an empty input with a non-empty output (a sum over nothing) is left to PyTorch
    def fn(x, y):
        return x.sum(0) + y * 2

    x, y = torch.randn(0, 3), torch.randn(3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        torch.testing.assert_close(compiled(fn)(x, y), fn(x, y))


# ---- (d) explain() reports what really ran ------------------------------------------------------------


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()


def test_explain_counts_a_native_model_as_native():
    with torch.no_grad():
        report = torchburn.explain(mlp(), torch.randn(4, 16))
    assert report.native_share == 1.0 and not report.runtime_fallbacks and not report.fallback_ops, str(report)
    assert "100.0 %" in str(report)


class _LinearRelu(torch.nn.Module):
    def __init__(self, features_in: int, features_out: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features_in, features_out)

    def forward(self, x):
        return torch.relu(self.linear(x))


def test_explain_lists_the_regions_of_a_second_model_of_the_same_class():
    # a second model of the same class with other shapes makes Dynamo recompile the same forward code
    # with dynamic shapes; that region builds its plan at its first call, after compile time. The
    # report must still list the plan's steps (it printed only the region header before).
    torch.manual_seed(0)
    with torch.no_grad():
        first = torchburn.explain(_LinearRelu(16, 8).eval(), torch.randn(2, 16))
        second = torchburn.explain(_LinearRelu(32, 4).eval(), torch.randn(3, 32))
    for report in (first, second):
        assert report.native_share == 1.0, str(report)
        assert any(line.startswith("gemm+bias+relu <- ") for line in report.fusions), str(report)
        assert "    gemm+bias+relu <- addmm+relu" in str(report).splitlines(), str(report)
    assert second.graphs[0].runners[0].dynamic  # the case this test is about: a dynamic region
    assert "dynamic shapes" in str(second)


def test_explain_reports_regions_that_fall_back_at_run_time(monkeypatch):
    # every region builds its plan, then runs in PyTorch at call time (as a plan that rejects its
    # inputs or fails would): explain() must not count those nodes as native
    build = compiler.Region.build_static

    def plan_then_pytorch(self):
        build(self)
        return self.fallback

    monkeypatch.setattr(compiler.Region, "build_static", plan_then_pytorch)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(mlp(), torch.randn(4, 16))
    assert report.native_share == 0.0 and not report.native_ops, str(report)
    (fallback,) = report.runtime_fallbacks
    assert fallback["native_runs"] == 0 and fallback["pytorch_runs"] == 1 and fallback["nodes"] > 0
    assert "in PyTorch" in str(report)


def test_explain_reports_plan_fallbacks_with_their_reason(monkeypatch):
    # a plan that rejects its inputs hands the call to its fallback (Plan.fallbacks counts it):
    # explain() counts the region as PyTorch and says why
    build = compiler.Region.build_static

    def rejecting_plan(self):
        plan = build(self)

        def target(*tensors):  # the same values in another memory layout: the plan rejects them
            return plan(*[t.t().contiguous().t() if t.dim() == 2 else t for t in tensors])

        return target

    monkeypatch.setattr(compiler.Region, "build_static", rejecting_plan)
    model, x = mlp(), torch.randn(4, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(model, x)
    (fallback,) = report.runtime_fallbacks
    assert fallback["pytorch_runs"] == 1 and fallback["native_runs"] == 0, fallback
    assert "inputs differ" in fallback["reason"]
    assert report.native_share == 0.0 and any("inputs differ" in op for op in report.fallback_ops), str(report)


def test_explain_counts_failed_regions_as_pytorch(monkeypatch):
    # a lowering failure makes the whole region run in PyTorch: its nodes are not native
    rule = lowering.RULES[aten.addmm.default]

    def failing(b, n):
        raise lowering.LoweringError("injected lowering failure")

    monkeypatch.setitem(lowering.RULES, aten.addmm.default, lowering.Rule(failing, rule.check, rule.dtypes))
    model, x = mlp(), torch.randn(4, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        report = torchburn.explain(model, x)
        torch.testing.assert_close(compiled(model)(x), model(x))
    assert report.native_share == 0.0, str(report)
    assert any("failed to lower" in op for op in report.fallback_ops), str(report)
    assert "injected lowering failure" in str(report)


# ---- (e) grouped-query attention -------------------------------------------------------------------


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def attention_ran_natively(report: Explanation, backward: bool = False) -> None:
    native = report.native_ops
    assert native.get("_scaled_dot_product_flash_attention_for_cpu.default", 0) == 2, str(report)
    if backward:
        assert native.get("_scaled_dot_product_flash_attention_for_cpu_backward.default", 0) == 2, str(report)
    assert not any("attention" in op for op in report.fallback_ops), str(report)
    assert not report.runtime_fallbacks, str(report)


@pytest.mark.parametrize("padded", [False, True], ids=["enable_gqa", "repeat_kv"])
def test_grouped_query_llama_inference(padded):
    # without a mask transformers passes enable_gqa=True to SDPA; with a padding mask it repeats the
    # 2 key/value heads to 8 (repeat_kv: expand + reshape), which the plan reads without the copy
    model = tiny_llama().eval()
    ids = torch.randint(0, 128, (2, 16))
    kwargs = {}
    if padded:
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, :5] = 0
        kwargs["attention_mask"] = mask
    with torch.no_grad(), Recorder() as recorder, warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)  # position ids (int64) stay in PyTorch
        got = compiled(model)(ids, **kwargs).logits
        expected = model(ids, **kwargs).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)  # attention sums in another order
    report = ran(recorder)
    attention_ran_natively(report)
    assert report.native_share >= 0.9, str(report)
    if padded:
        steps = [line for g in recorder.graphs for d in g.fusions for line in d.splitlines()]
        assert report.native_ops.get("clone.default", 0) >= 4  # the repeat_kv copies in the FX graph ...
        assert not any("clone" in line for line in steps), steps  # ... are never made by the plan


def test_grouped_query_llama_training():
    model = tiny_llama().train()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchburnFallbackWarning)
        with Recorder() as recorder:
            loss_c = compiled(model)(ids, labels=ids).loss
            loss_c.backward()
        loss_e = reference(ids, labels=ids).loss
        loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-5)
    for (name, p_c), (_, p_e) in zip(model.named_parameters(), reference.named_parameters()):
        # gradients summed over the batch by differently blocked GEMMs
        torch.testing.assert_close(p_c.grad, p_e.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    attention_ran_natively(ran(recorder), backward=True)


def test_grouped_query_sdpa_directly():
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True)

    with torch.no_grad(), Recorder() as recorder:
        got = compiled(fn)(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v))
    report = ran(recorder)
    assert report.native_share == 1.0 and not report.fallback_ops, str(report)
