"""From an ATen FX graph to a callable: partition into maximal supported regions, lower each region to
a torchburn plan, and splice the plans back into the FX graph (unsupported nodes stay there and run
in PyTorch).

Partitioning uses torch's CapabilityBasedPartitioner (it merges supported nodes into the largest
regions that keep the graph acyclic). Views at the edge of a region whose results are only used
outside it are moved out (PyTorch makes them for free; a plan would have to copy them). A region
made only of views is left alone.

Each region becomes a :class:`Region`: its FX subgraph (kept as the eager fallback) and, for static
shapes, one Plan whose ``fallback`` is the eager subgraph, so a plan that rejects its inputs or fails
at run time never breaks the call. Regions with symbolic shapes (``dynamic=True``) specialize a plan
per concrete input signature at run time, or run eagerly when that is impossible.
"""
from __future__ import annotations

import operator
import threading
from typing import Any, Callable, Optional

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import legalize_graph

from .. import _C
from . import diagnostics, lowering, rules_nn
from .diagnostics import GraphRecord, debug, warn_once


class _Support(OperatorSupportBase):
    def __init__(self) -> None:
        super().__init__()
        self.reasons: dict = {}

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if node.op != "call_function":
            return False
        ok, reason = lowering.support(node)
        if not ok:
            self.reasons[node] = reason
        return ok


def _has_symbols(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(not isinstance(s, int) for s in value.shape)
    if isinstance(value, (list, tuple)):
        return any(_has_symbols(v) for v in value)
    return False


def _tidy(gm: torch.fx.GraphModule, part: set) -> set:
    """Moves edge views out of a partition and keeps getitems with their multi-output compute source.

    A view used only outside leaves the partition; a view used inside and outside is duplicated, the
    outside users getting PyTorch's own (free) view; a getitem of a view (split, unbind) used only
    outside leaves too. Getitems of a multi-output compute op always stay with it."""
    changed = True
    while changed:
        changed = False
        for node in list(part):
            if node not in part:
                continue
            if node.target is operator.getitem:
                source = node.args[0]
                if source not in part or (source.target in lowering.VIEW_TARGETS and node.users
                                          and all(u not in part for u in node.users)):
                    part.discard(node)
                    changed = True
                continue
            if node.target in lowering.VIEW_TARGETS:
                outside_users = [u for u in node.users if u not in part]
                if node.users and len(outside_users) == len(node.users):
                    part.discard(node)
                    changed = True
                elif outside_users:
                    with gm.graph.inserting_after(node):
                        copy = gm.graph.node_copy(node)
                    copy.meta = dict(node.meta)
                    for user in outside_users:
                        user.replace_input_with(node, copy)
                    changed = True
                continue
            for user in node.users:
                if user.target is operator.getitem and user not in part:
                    part.add(user)
                    changed = True
    return part


class Region:
    """One supported region: the eager FX subgraph and its plan(s)."""

    _EAGER = object()

    def __init__(self, name: str, gm: torch.fx.GraphModule, node_names: list, dynamic: bool) -> None:
        self.name = name
        self.gm = gm
        self.node_names = node_names
        self.dynamic = dynamic
        self.plan: Any = None
        self.plans: dict = {}
        self.lock = threading.Lock()
        self.description = ""
        self.specialized: list = []  # dynamic regions: every Plan made so far
        self.eager_calls = 0  # calls that ran this region in PyTorch, for whatever reason
        self.last_reason: Optional[str] = None
        self.__name__ = f"torchburn_{name}"  # FX names call targets after __name__

    # -- static regions --

    def build_static(self) -> Any:
        plan, hit, self.description = build_plan(self.gm)
        debug("%s: plan %s (%s), %d nodes:\n%s", self.name, plan.key[:16], "cache hit" if hit else "compiled",
              len(self.node_names), self.description.rstrip())
        plan.fallback = self.fallback
        self.plan = plan
        return plan

    def eager(self, *args: Any) -> tuple:
        self.eager_calls += 1
        out = self.gm(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def fallback(self, *args: Any) -> tuple:
        """Runs the region in PyTorch (the plan rejected its inputs or failed)."""
        plan = self.plan
        reason = getattr(plan, "last_error", None) if plan is not None else None
        if reason is None:
            reason = "inputs differ from the compiled signature"
        self.last_reason = reason
        debug("%s: this call runs in PyTorch (%s)", self.name, reason)
        warn_once(("region", self.name, reason), f"torchburn: region {self.name} ran in PyTorch: {reason}")
        return self.eager(*args)

    def plans_made(self) -> list:
        return ([self.plan] if self.plan is not None else []) + self.specialized

    def run_seconds(self) -> float:
        """Seconds spent inside this region's plans (kernels only, not the call overhead)."""
        return sum(p.run_seconds for p in self.plans_made())

    def run_counts(self) -> tuple:
        """(native_runs, pytorch_runs, last reason for a PyTorch run): calls so far that ran a plan and
        calls that ran this region in PyTorch (a plan's fallback, or no plan at all)."""
        native = sum(max(p.calls - p.fallbacks, 0) for p in self.plans_made())
        return native, self.eager_calls, self.last_reason

    # -- dynamic regions: one plan per concrete signature --

    def __call__(self, *args: Any) -> tuple:
        key = tuple((a.dtype, tuple(a.shape), a.stride(), a.device.type) if isinstance(a, torch.Tensor) else a
                    for a in args)
        plan = self.plans.get(key)
        if plan is None:
            with self.lock:
                plan = self.plans.get(key)
                if plan is None:
                    plan = self._specialize(args)
                    self.plans[key] = plan
        if plan is Region._EAGER:
            self.last_reason = "this input signature could not be specialized"
            return self.eager(*args)
        return plan(*[a for a in args if isinstance(a, torch.Tensor)])

    def _specialize(self, args: tuple) -> Any:
        try:
            metas = _concrete_metas(self.gm, args)
            plan, hit, description = build_plan(self.gm, metas)
        except Exception as error:  # noqa: BLE001 - any failure means: run this signature eagerly
            warn_once(("specialize", self.name, type(error).__name__),
                      f"torchburn: region {self.name} runs in PyTorch for some input shapes: {error}")
            return Region._EAGER
        debug("%s: specialized for %s (%s)", self.name,
              [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args], "hit" if hit else "compiled")
        tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

        def eager_with(*tensors: Any) -> tuple:
            full = list(args)
            for position, tensor in zip(tensor_positions, tensors):
                full[position] = tensor
            return self.eager(*full)

        def eager_tensors_only(*tensors: Any) -> tuple:
            self.last_reason = getattr(plan, "last_error", None) or "inputs differ from the compiled signature"
            return eager_with(*tensors)

        plan.fallback = eager_tensors_only
        self.specialized.append(plan)
        self.description = description
        out_node = next(n for n in self.gm.graph.nodes if n.op == "output")
        layouts = [_layout_strides(metas.get(o)) for o in out_node.args[0]]
        if all(strides is None for strides in layouts):
            return plan

        def restrided(*tensors: Any) -> tuple:  # the layouts the metadata promises (see _layout_strides)
            results = plan(*tensors)
            return tuple(r if strides is None else _restride(r, strides) for r, strides in zip(results, layouts))

        return restrided


def _layout_strides(value: Any) -> Optional[tuple]:
    """The strides of a non-contiguous tensor whose elements do not overlap (a permuted layout such as
    attention's [B, H, T, D] output in [B, T, H, D] memory order, or a slice of a wider tensor such as
    q of a fused qkv projection), else None. A plan returns such a value contiguous; this is the layout
    the FX metadata promises to the code after the region (views, and plans of later graphs such as
    the backward, whose input layouts come from the same metadata)."""
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return None
    shape, strides = lowering.static_shape(value), lowering.static_strides(value)
    if shape is None or strides is None:
        return None
    contiguous = lowering._contiguous_strides(shape)
    if all(size == 1 or a == b for size, a, b in zip(shape, strides, contiguous)):
        return None
    extent = 1  # every dim must step past everything the inner dims span
    for d in sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: strides[d]):
        if strides[d] < extent:
            return None  # overlapping or broadcast: left as the plan makes it
        extent = strides[d] * shape[d]
    return strides


def _restride(tensor: torch.Tensor, strides: tuple) -> torch.Tensor:
    """`tensor` with the given memory layout (plans write their outputs contiguous; PyTorch code after
    the region may rely on the layout the FX metadata promises, e.g. a view of a transposed result)."""
    if tensor.stride() == strides:
        return tensor
    result = torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype, device=tensor.device)
    if tensor.requires_grad or result.requires_grad:
        return result.copy_(tensor)
    _C.copy_into(result, tensor)  # our copy: PyTorch's would wake its OpenMP team (see copy_into)
    return result


def _torch_outputs(target: Callable) -> Callable:
    """A region without inputs (constants such as ``torch.zeros(1, 3)``): with no input tensor to take
    the output type from, a plan returns torchburn Tensors; the code after the region needs torch's."""

    def run() -> tuple:
        return tuple(torch.from_dlpack(t) for t in target())

    run.__name__ = getattr(target, "__name__", "torchburn_constants")
    return run


def _concrete_metas(gm: torch.fx.GraphModule, args: tuple) -> dict:
    """Runs the subgraph on fake tensors of the concrete input shapes, recording every node's value."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    metas: dict = {}

    class Recording(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            result = super().run_node(node)
            metas[node] = result
            return result

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_args = [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]
        Recording(gm).run(*fake_args)
    return metas


# Placeholder meta key: the input is a model weight under freeze_weights (see torchburn.backend).
FROZEN_META = "torchburn_frozen_weight"


def build_plan(gm: torch.fx.GraphModule, metas: Optional[dict] = None) -> tuple:
    """Lowers a region subgraph (placeholders = region inputs, output = tuple of region outputs) and
    compiles it. Returns (Plan, cache_hit, description). Raises on anything unsupported."""
    builder = lowering.Builder(metas)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = builder.meta(node)
            if isinstance(value, torch.Tensor):
                builder.values[node] = builder.input(node)
        elif node.op == "call_function":
            lowering.lower_node(builder, node)
        elif node.op == "output":
            for out in node.args[0]:
                builder.graph.output(builder.value(out))
        else:
            raise lowering.LoweringError(f"unexpected {node.op} node")
    plan, hit = builder.graph.compile()
    tensors = [n for n in gm.graph.nodes if n.op == "placeholder" and isinstance(builder.meta(n), torch.Tensor)]
    frozen = [i for i, n in enumerate(tensors) if n.meta.get(FROZEN_META)]
    if frozen:
        plan.freeze_inputs(frozen)
    return plan, hit, plan.describe()


def _extract(gm: torch.fx.GraphModule, part: set, name: str, all_placeholders: bool) -> tuple:
    """The region's subgraph, its external inputs and its outputs (FX nodes of gm)."""
    nodes = [n for n in gm.graph.nodes if n in part]
    inputs: list = []
    if all_placeholders:
        inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in part and arg not in inputs:
                inputs.append(arg)
    outputs = [n for n in nodes if any(u not in part for u in n.users)]
    sub = torch.fx.Graph()
    env: dict = {}
    for arg in inputs:
        env[arg] = sub.placeholder(arg.name)
        env[arg].meta = dict(arg.meta)
    for node in nodes:
        env[node] = sub.node_copy(node, lambda a: env[a])
    sub.output(tuple(env[o] for o in outputs))
    return torch.fx.GraphModule(gm, sub, class_name=name), inputs, outputs


def op_label(node: torch.fx.Node) -> str:
    label = getattr(node.target, "torchburn_label", None)  # the backend's own FX targets (rules_nn)
    return label if label is not None else str(node.target).replace("aten.", "")


def _bookkeeping(node: torch.fx.Node) -> bool:
    """Nodes the backend inserted that are not the model's compute (a dropout's seed draw)."""
    return node.target is rules_nn.dropout_seed


def _source(node: torch.fx.Node) -> torch.fx.Node:
    """The multi-output node a getitem reads (the node itself otherwise)."""
    while node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _makes_tensors(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_makes_tensors(v) for v in value)
    return isinstance(value, torch.Tensor)


def _op_counts(nodes: Any) -> dict:
    """Op name -> count over compute nodes (getitems are part of their source)."""
    counts: dict = {}
    for node in nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            counts[op_label(node)] = counts.get(op_label(node), 0) + 1
    return counts


def _record_failure(record: GraphRecord, node_names: list, ops: dict, reason: str) -> None:
    record.failed_regions.append((node_names, reason))
    for label, count in ops.items():
        key = f"{label} (in a region that failed to lower)"
        record.fallback_ops[key] = record.fallback_ops.get(key, 0) + count


class _EngineSupport(_Support):
    """The first pass's predicate when a GPU engine is active: supported natively AND taken by the
    engine, which the C engine layer decides node by node (:func:`lowering.engine_support`). The
    nodes it refuses are left to the second pass, which makes native_cpu regions of them."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: dict = {}  # node -> why the engine does not take it

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        if not super().is_node_supported(submodules, node):
            return False
        ok, note = lowering.engine_support(node)
        if not ok:
            self.refused[node] = note
            debug("engine refuses %s (%s): %s", node.name, op_label(node), note)
        return ok


def _gpu_engine() -> Optional[str]:
    """The active engine when it is a GPU one (the partitioner then asks it node by node), else None.
    A GPU that was asked for but is absent is None here; Graph.compile() reports it per region."""
    try:
        name = _C.engine_active()
    except RuntimeError:
        return None
    return None if name in ("native_cpu", "reference") else name


def compile_graph(gm: torch.fx.GraphModule, kind: str) -> tuple:
    """Partitions an ATen graph, builds its regions and rewrites it. Returns (callable, whole_plan)
    where whole_plan is the single Plan when the whole graph is one static region whose inputs are
    the graph's placeholders and whose outputs are the graph's outputs in order (then calling the
    Plan directly is equivalent and skips the FX wrapper).

    With a GPU engine active (TORCHBURN_DEVICE=gpu) partitioning takes two passes: regions of the
    nodes the engine takes (each runs there as one submission), then regions of the remaining
    natively supported nodes, which run on native_cpu; the tensors crossing between them are the
    copies each GPU region's plan reports (``engine: vulkan (...; copies per call: ...)``)."""
    record = GraphRecord(kind=kind)
    rules_nn.seed_dropouts(gm)
    computes = [(n, n.name, op_label(n), [_source(a).name for a in n.all_input_nodes]) for n in gm.graph.nodes
                if n.op == "call_function" and n.target is not operator.getitem and _makes_tensors(lowering.meta(n))
                and not _bookkeeping(n)]
    region_of: dict = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    all_tensors = all(isinstance(lowering.meta(p), torch.Tensor) for p in placeholders)
    passes = [_EngineSupport(), _Support()] if _gpu_engine() else [_Support()]
    # bookkeeping by node name: legalize_graph between passes copies the nodes (names are kept)
    inserted: set = set()  # names of the region calls and their getitems
    whole_plan = None
    for index, support in enumerate(passes):
        whole_plan = _build_pass(gm, support, record, region_of, all_tensors, placeholders, inserted) or whole_plan
        if index + 1 < len(passes):
            legalize_graph(gm)  # the region calls went in before the output: order them for the next pass
    reasons = {n.name: r for support in passes for n, r in support.reasons.items()}
    last_reasons = {n.name: r for n, r in passes[-1].reasons.items()}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem or node.name in inserted:
            continue
        if _bookkeeping(node):
            continue
        if not _makes_tensors(lowering.meta(node)):
            continue  # Python scalar arithmetic (sizes): nothing to compute natively
        if node.name in last_reasons:
            reason = last_reasons[node.name]
            record.fallback_ops[reason] = record.fallback_ops.get(reason, 0) + 1
            warn_once(("op", reason), f"torchburn: {reason} runs in PyTorch (not supported natively)")
    record.nodes = [(name, label, inputs, region_of.get(name), reasons.get(name)) for _, name, label, inputs in computes]
    legalize_graph(gm)
    gm.graph.lint()
    gm.recompile()
    diagnostics.Recorder.record(record)
    diagnostics.track(record)
    debug("%s graph: %d native ops in %d regions, %d ops in PyTorch %s", kind, sum(record.native_ops.values()),
          len(record.regions), sum(record.fallback_ops.values()), dict(record.fallback_ops) or "")
    return gm, whole_plan


def _build_pass(gm: torch.fx.GraphModule, support: _Support, record: GraphRecord, region_of: dict, all_tensors: bool,
                placeholders: list, inserted: set) -> Any:
    """One partitioning pass: the maximal regions of nodes `support` accepts become plans spliced into
    gm (the nodes they replace are erased). Returns the whole-graph Plan when this pass made one."""
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = [_tidy(gm, set(p.nodes)) for p in partitioner.propose_partitions()]
    partitions = [p for p in partitions if any(n.target not in lowering.VIEW_TARGETS for n in p)]
    calls = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    whole_plan = None
    for part in sorted(partitions, key=lambda p: min(order[n] for n in p)):
        name = f"region{len(record.runners) + len(record.failed_regions)}"
        node_names = [n.name for n in gm.graph.nodes if n in part]
        whole = len(partitions) == 1 and len(part) == calls and all_tensors
        ops = _op_counts(part)
        try:
            sub_gm, inputs, outputs = _extract(gm, part, name, all_placeholders=whole)
        except Exception as error:  # noqa: BLE001
            _record_failure(record, node_names, ops, str(error))
            continue
        dynamic = any(_has_symbols(lowering.meta(n)) for n in list(part) + inputs)
        region = Region(name, sub_gm, node_names, dynamic)
        target: Callable
        if dynamic:
            target = region
        else:
            try:
                target = region.build_static()
            except Exception as error:  # noqa: BLE001 - the region stays in PyTorch
                _record_failure(record, node_names, ops, f"{type(error).__name__}: {error}")
                warn_once(("lowering", type(error).__name__, str(error)[:80]),
                          f"torchburn: a region of {len(part)} ops runs in PyTorch: {error}")
                continue
        if not inputs:
            target = _torch_outputs(target)
        record.regions.append(node_names)
        for node in part:
            region_of[node.name] = len(record.runners)
        record.region_ops.append(ops)
        record.runners.append(region)
        region.record, region.record_index = record, len(record.runners) - 1
        for label, count in ops.items():
            record.native_ops[label] = record.native_ops.get(label, 0) + count
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        with gm.graph.inserting_before(out_node):
            call = gm.graph.call_function(target, tuple(inputs))
            call.meta["val"] = tuple(lowering.meta(o) for o in outputs)
            inserted.add(call.name)
            for i, out in enumerate(outputs):
                item = gm.graph.call_function(operator.getitem, (call, i))
                item.meta = dict(out.meta)
                inserted.add(item.name)
                strides = _layout_strides(lowering.meta(out))
                if strides is not None:
                    item = gm.graph.call_function(_restride, (item, strides))
                    item.meta = dict(out.meta)
                inserted.add(item.name)
                out.replace_all_uses_with(item, delete_user_cb=lambda user: user not in part)
        for node in reversed([n for n in gm.graph.nodes if n in part]):
            gm.graph.erase_node(node)
        if whole and not dynamic:
            returned = out_node.args[0]
            returned = list(returned) if isinstance(returned, (list, tuple)) else [returned]
            items = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.getitem]
            if ([i.args[1] for i in returned if getattr(i, "target", None) is operator.getitem] == list(range(len(outputs)))
                    and len(returned) == len(outputs) and list(inputs) == placeholders
                    and isinstance(out_node.args[0], tuple) and len(items) == len(outputs)):
                whole_plan = target
    return whole_plan
