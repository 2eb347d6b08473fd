"""The ``torch.compile`` backend: ``torch.compile(model, backend="torchburn")``.

The backend lowers the FX graph that Dynamo captures to ATen ops, partitions it into maximal regions
that torchburn runs natively, and compiles each region into a plan (fused kernels, one planned
arena) through a structural BLAKE3-keyed cache: two modules with the same structure share one plan,
whatever their weights. Nodes torchburn does not support stay in the FX graph and run in PyTorch
(one :class:`TorchburnFallbackWarning` per op kind; ``TORCHBURN_QUIET=1`` silences them), and a
region that cannot run for any reason runs in PyTorch for that call, so results are the same either
way.

* Inference (grad disabled, or no input requires grad) is traced to ATen directly (functionalized,
  static shapes) and, when the whole graph is one region, Dynamo calls the plan itself: inputs are
  read in place, the plan runs in C with the GIL released, outputs come back as torch tensors.
* Training (an input requires grad) and dynamic shapes go through ``aot_autograd``: the forward and
  backward graphs are both compiled the same way; symbolic sizes are specialized at run time.

Example::

    >>> import torch, torchburn
    >>> model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
    >>> compiled = torch.compile(model, backend="torchburn")
    >>> x = torch.randn(32, 512)
    >>> torch.testing.assert_close(compiled(x), model(x))

Environment: ``TORCHBURN_DEBUG=1`` (log decisions to stderr), ``TORCHBURN_QUIET=1`` (no fallback
warnings), ``TORCHBURN_CACHE_SIZE`` / ``TORCHBURN_PREPARED_CACHE_SIZE`` (plan cache entries, 1024),
``TORCHBURN_PARALLEL_RUNTIME`` (``auto``: the plans' parallel loops run on PyTorch's OpenMP team when
PyTorch uses OpenMP, so the two libraries never have two sets of threads busy on the same cores;
``pool``: torchburn's own threads; ``openmp``: the OpenMP team, warn when there is none).
"""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from .. import _C
from . import diagnostics
from .compiler import compile_graph
from .decompositions import DECOMPOSITIONS
from .diagnostics import GraphRecord, Recorder, TorchburnFallbackWarning, debug, warn_once

__all__ = [
    "torchburn_backend",
    "compile",
    "register",
    "cache_stats",
    "cache_clear",
    "set_cache_size",
    "explain",
    "Explanation",
    "TorchburnFallbackWarning",
]


def _is_dynamic(gm: torch.fx.GraphModule, example_inputs: list) -> bool:
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(value, torch.Tensor) and any(not isinstance(s, int) for s in value.shape):
            return True
    return any(not isinstance(x, torch.Tensor) for x in example_inputs)


def _needs_autograd(example_inputs: list) -> bool:
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


def _trace_inference(gm: torch.fx.GraphModule, example_inputs: list) -> torch.fx.GraphModule:
    """Dynamo's graph as a functional ATen graph with fake-tensor metadata (static shapes)."""
    from torch._guards import tracing
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    # our own fake mode without a shape environment: static shapes, whatever Dynamo's mode does
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_inputs = [fake_mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x
                   for x in example_inputs]
    functional = torch.func.functionalize(gm, remove="mutations")
    with tracing(None), fake_mode, torch.no_grad():
        traced = make_fx(functional, decomposition_table=DECOMPOSITIONS, tracing_mode="real")(*fake_inputs)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    if any(_mutates(node) for node in traced.graph.nodes):
        # a composite op that decomposed below the functionalization layer (F.rms_norm's add_) left an
        # in-place op in the graph: a second functionalization over the ATen graph removes it
        functional = torch.func.functionalize(traced, remove="mutations")
        with tracing(None), fake_mode, torch.no_grad():
            traced = make_fx(functional, tracing_mode="real")(*fake_inputs)
        traced.graph.eliminate_dead_code()
        traced.recompile()
    return traced


def _mark_frozen(traced: torch.fx.GraphModule, example_inputs: list) -> None:
    """Marks the traced graph's placeholders that are model weights (``nn.Parameter`` example inputs):
    the plans reading them declare them frozen (``Plan.freeze_inputs``)."""
    from .compiler import FROZEN_META

    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    marked = 0
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.nn.Parameter):
            node.meta[FROZEN_META] = True
            marked += 1
    debug("freeze_weights: %d of %d inputs are frozen weights", marked, len(placeholders))


def _mutates(node: torch.fx.Node) -> bool:
    """Whether node writes into an intermediate tensor (writes into graph inputs are the input
    mutations functionalization keeps on purpose)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.is_mutable:
        return False
    for arg, value in zip(schema.arguments, node.args):
        written = arg.alias_info is not None and arg.alias_info.is_write
        if written and isinstance(value, torch.fx.Node) and value.op != "placeholder":
            return True
    return False


def _aot(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind: str) -> Callable:
        def compile_fn(graph: torch.fx.GraphModule, inputs: list) -> Callable:
            compiled, _ = compile_graph(graph, kind)
            return make_boxed_func(compiled.forward)

        return compile_fn

    backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                           inference_compiler=compiler("inference"), decompositions=DECOMPOSITIONS,
                           keep_inference_input_mutations=True)
    return backend(gm, example_inputs)


_parallel_runtime_lock = threading.Lock()
_parallel_runtime_chosen = False


def _share_pytorch_threads() -> None:
    """Once per process: run torchburn's parallel loops on PyTorch's OpenMP team (see
    docs/compile_backend.md, "Threads"). PyTorch's OpenMP threads spin for a while after each of its
    parallel ops; in a training step (the loss, the autograd engine's ops between the compiled
    graphs) they were spinning on the cores our pool's threads needed for the next plan. On one team,
    a thread that finishes a PyTorch op picks up torchburn's next loop, and torchburn's thread count
    follows ``torch.set_num_threads`` unless ``torchburn.set_num_threads`` or
    ``TORCHBURN_NUM_THREADS`` sets one."""
    global _parallel_runtime_chosen
    if _parallel_runtime_chosen:
        return
    with _parallel_runtime_lock:
        if _parallel_runtime_chosen:
            return
        _parallel_runtime_chosen = True
        setting = os.environ.get("TORCHBURN_PARALLEL_RUNTIME", "").strip().lower() or "auto"
        if setting not in ("auto", "pool", "openmp"):
            warnings.warn(f"torchburn: TORCHBURN_PARALLEL_RUNTIME={setting!r} is not one of auto, pool, "
                          "openmp; using auto", UserWarning, stacklevel=3)
            setting = "auto"
        if setting == "pool":
            return
        if setting == "auto" and "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            debug("PyTorch's parallel backend is not OpenMP: torchburn keeps its own thread pool")
            return
        try:
            _C.set_parallel_runtime("openmp")
            debug("parallel loops run on the OpenMP team of %s", _C.host_openmp_library())
        except RuntimeError as error:
            if setting == "openmp":
                warnings.warn(f"torchburn: TORCHBURN_PARALLEL_RUNTIME=openmp: {error}; using torchburn's own "
                              "threads", UserWarning, stacklevel=3)
            else:
                debug("keeping torchburn's thread pool: %s", error)


def torchburn_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The Dynamo backend function (``torch.compile(model, backend="torchburn")``).

    Returns a callable equivalent to ``gm``: the plan itself when the whole graph runs natively, else
    the rewritten FX graph.

    Options (``torch.compile(model, backend="torchburn", options={...})``):

    * ``freeze_weights`` (bool; default from ``TORCHBURN_FREEZE_WEIGHTS=1``): inference graphs keep the
      packed copies of their weights (``nn.Parameter`` inputs of convolutions and matmuls) between calls
      instead of packing them every call. A weight is repacked when torch's version counter or its data
      pointer changes, so optimizer steps, ``load_state_dict``, ``nn.init`` and in-place updates under
      ``no_grad`` are seen; writes through ``param.data`` bypass the counter and are **not** seen (like
      inductor's freezing, which sees no change at all). Graphs that need autograd are not frozen.
    """
    options = dict(kwargs.get("options") or {})
    freeze = bool(options.pop("freeze_weights", os.environ.get("TORCHBURN_FREEZE_WEIGHTS", "") == "1"))
    if options:
        warn_once(("options", tuple(sorted(options))),
                  f"torchburn: unknown backend option(s) {sorted(options)} (known: freeze_weights); ignored")
    _share_pytorch_threads()
    try:
        if _needs_autograd(example_inputs) or _is_dynamic(gm, example_inputs):
            debug("graph with %d inputs: aot_autograd path (%s)", len(example_inputs),
                  "training" if _needs_autograd(example_inputs) else "dynamic shapes")
            return _aot(gm, example_inputs)
        traced = _trace_inference(gm, example_inputs)
        if freeze:
            _mark_frozen(traced, example_inputs)
        compiled, whole_plan = compile_graph(traced, "inference")
        if whole_plan is not None:
            debug("the whole graph is one plan: Dynamo calls it directly")
            return whole_plan
        return compiled.forward
    except Exception as error:  # noqa: BLE001 - compiling must never break the model
        warn_once(("backend", type(error).__name__, str(error)[:100]),
                  f"torchburn: this graph runs in PyTorch ({type(error).__name__}: {error})")
        return gm.forward


def register(name: str = "torchburn") -> None:
    """Registers the backend with Dynamo under `name` (thread-safe; a no-op when a backend of that
    name exists). ``import torchburn`` already registers ``"torchburn"``; this is for other names."""
    from torch._dynamo.backends import registry

    from .._registration import register_into

    register_into(registry, name, None if name == "torchburn" else torchburn_backend)


def compile(model: Any, **kwargs: Any) -> Any:  # noqa: A001 - mirrors torch.compile
    """``torch.compile(model, backend="torchburn", **kwargs)``.

    Warns (``UserWarning``) when `model` is wrapped in ``DistributedDataParallel`` or is an FSDP2
    (``fully_shard``) module: on torch 2.13 Dynamo captures no graph through their forward, so nothing
    would reach the backend and the model would silently run in eager PyTorch. Compile the module (or
    each block), then wrap or shard it: ``DDP(torchburn.compile(model))`` (see docs/compile_backend.md)."""
    _warn_if_unreachable(model)
    register()
    return torch.compile(model, backend="torchburn", **kwargs)


def _warn_if_unreachable(model: Any) -> None:
    if not (torch.distributed.is_available() and isinstance(model, torch.nn.Module)):
        return
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        warnings.warn(
            "torchburn.compile: the model is wrapped in DistributedDataParallel; torch.compile does not "
            "capture a graph through DDP's forward (torch 2.13), so it would run in eager PyTorch without "
            "reaching torchburn. Compile the module first, then wrap it: "
            "DDP(torchburn.compile(model), ...)", UserWarning, stacklevel=3)
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        warnings.warn(
            "torchburn.compile: the model is an FSDP2 module (fully_shard); torch.compile captures no graph "
            "through its forward (torch 2.13), so it would run in eager PyTorch without reaching torchburn. "
            "Compile each block first, then shard: block = torchburn.compile(block); fully_shard(block); "
            "... fully_shard(model)", UserWarning, stacklevel=3)


def cache_stats() -> dict:
    """Statistics of the prepared-plan cache: ``{size, hits, misses, evictions, capacity}``, plus
    ``graphs``, the same for the optimized-graph cache, and ``python_size``: the Plan objects that live
    compiled models hold (TorchBurn's name for its Python-side plan cache; ours are the plans Dynamo
    keeps alive through the compiled code)."""
    stats = _C.plan_cache_stats()
    prepared = dict(stats["prepared"])
    prepared["graphs"] = dict(stats["graphs"])
    prepared["python_size"] = sum(len(region.plans_made()) for record in diagnostics.live_records()
                                  for region in record.runners)
    return prepared


def cache_clear() -> None:
    """Empties the plan caches and zeroes their counters (compiled models keep their plans)."""
    _C.plan_cache_clear()


def set_cache_size(graphs: int = 0, prepared: int = 0) -> None:
    """Sets the capacity of the optimized-graph cache and of the prepared-plan cache (0 keeps one),
    evicting the least recently used entries (the environment sets the initial sizes)."""
    _C.plan_cache_set_capacity(int(graphs), int(prepared))


@dataclass
class Explanation:
    """What torchburn did with a model (see :func:`explain`): what really ran natively, not only what
    was lowered. A region counts as native when every call made so far ran its plan; a region that
    ran in PyTorch on any call (its plan rejected the inputs or failed, or no plan ran) counts as
    PyTorch, with the reason, and so do the nodes of regions that failed to lower. Regions not called
    yet (a backward graph compiled ahead of its first use) count as neither.

    ``native_share`` is native compute nodes / all compute nodes (views that PyTorch makes for free
    outside any region are not counted)."""

    graphs: list = field(default_factory=list)  # GraphRecord per compiled ATen graph

    def _runs(self) -> list:
        """(graph, region index, native_runs, pytorch_runs, reason) per lowered region."""
        return [(g, i, native, eager, reason) for g in self.graphs
                for i, (native, eager, reason) in enumerate(g.region_runs())]

    @property
    def native_ops(self) -> dict:
        return _merge(g.region_ops[i] for g, i, native, eager, _ in self._runs() if native and not eager)

    @property
    def not_run_ops(self) -> dict:
        """Ops of lowered regions that have not been called."""
        return _merge(g.region_ops[i] for g, i, native, eager, _ in self._runs() if not native and not eager)

    @property
    def fallback_ops(self) -> dict:
        ran_in_pytorch = []
        for g, i, native, eager, reason in self._runs():
            if eager:
                why = reason or "no plan ran"
                ran_in_pytorch.append({f"{label} (region ran in PyTorch: {why})": count
                                       for label, count in g.region_ops[i].items()})
        return _merge([g.fallback_ops for g in self.graphs] + ran_in_pytorch)

    @property
    def runtime_fallbacks(self) -> list:
        """Lowered regions that ran in PyTorch on some call: dicts with ``graph`` (kind), ``region``,
        ``nodes``, ``native_runs``, ``pytorch_runs`` and ``reason``."""
        return [{"graph": g.kind, "region": i, "nodes": sum(g.region_ops[i].values()), "native_runs": native,
                 "pytorch_runs": eager, "reason": reason or "no plan ran"}
                for g, i, native, eager, reason in self._runs() if eager]

    @property
    def native_nodes(self) -> int:
        return sum(self.native_ops.values())

    @property
    def total_nodes(self) -> int:
        return self.native_nodes + sum(self.fallback_ops.values())

    @property
    def native_share(self) -> float:
        """Native compute nodes / all compute nodes (1.0 for a graph without compute nodes)."""
        total = self.total_nodes
        return self.native_nodes / total if total else 1.0

    @property
    def regions(self) -> list:
        return [r for g in self.graphs for r in g.regions]

    @property
    def fusions(self) -> list:
        return [line for g in self.graphs for d in g.fusions for line in d.splitlines()
                if " <- " in line and ("+" in line.split(" <- ")[1] or "fused" in line)]

    def __str__(self) -> str:
        lines = [f"{len(self.graphs)} graph(s), {len(self.regions)} native region(s), {self.native_nodes} of "
                 f"{self.total_nodes} compute nodes ran natively ({100 * self.native_share:.1f} %)"]
        lines.append("native ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.native_ops.items())))
        fallback = self.fallback_ops
        lines.append("PyTorch ops: " + (", ".join(f"{k} x{v}" for k, v in sorted(fallback.items())) or "none"))
        runs = {(id(g), i): (native, eager, reason) for g, i, native, eager, reason in self._runs()}
        for graph in self.graphs:
            for i, (nodes, description, runner) in enumerate(zip(graph.regions, graph.fusions, graph.runners)):
                native, eager, reason = runs[(id(graph), i)]
                ran = f"{native} native run(s), {eager} in PyTorch" + (f" ({reason})" if reason else "")
                shapes = "; dynamic shapes, one plan per input signature" if runner.dynamic else ""
                lines.append(f"{graph.kind} region {i} ({len(nodes)} nodes; {ran}{shapes}):")
                lines.extend("    " + line for line in description.splitlines())
            for nodes, reason in graph.failed_regions:
                lines.append(f"{graph.kind} region of {len(nodes)} nodes in PyTorch: {reason}")
        return "\n".join(lines)


def _merge(dicts: Any) -> dict:
    merged: dict = {}
    for d in dicts:
        for key, count in d.items():
            merged[key] = merged.get(key, 0) + count
    return merged


def explain(model: Any, *example_inputs: Any, **kwargs: Any) -> Explanation:
    """Compiles and runs `model` once on `example_inputs` and reports which ATen ops run natively,
    which run in PyTorch (and why), the native regions and the fusions made. Under autograd (an input
    or parameter requires grad) the backward graph is compiled and reported too; gradients are
    computed with ``torch.autograd.grad``, never accumulated into ``.grad``.

    Example::

        >>> report = torchburn.explain(model, torch.randn(32, 512))
        >>> print(report)            # or report.native_ops, report.fallback_ops, report.fusions
    """

    def recording_backend(gm: torch.fx.GraphModule, inputs: list) -> Callable:
        return torchburn_backend(gm, inputs)

    with Recorder() as recorder:
        compiled = torch.compile(model, backend=recording_backend, **kwargs)
        outputs = compiled(*example_inputs)
        # with autograd on, also compile the backward graph (gradients are computed, not accumulated)
        leaves = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
        if leaves:
            sources = [p for p in getattr(model, "parameters", lambda: [])() if p.requires_grad]
            sources += [x for x in example_inputs if isinstance(x, torch.Tensor) and x.requires_grad]
            if sources:
                total = sum(t.float().sum() for t in leaves)
                torch.autograd.grad(total, sources, allow_unused=True)
    return Explanation(graphs=list(recorder.graphs))
