"""Lowering of ATen FX nodes to torchburn graph nodes: the builder, the rule registry and the support
check (the rules themselves are in ``rules_tensor.py`` and ``rules_nn.py``).

Each supported ATen overload has a :class:`Rule`: a ``check`` that looks only at the node's metadata
(dtypes, devices, argument values) and says whether the node can run natively, and a ``lower`` that
emits the equivalent torchburn graph node(s) through a :class:`Builder`. The partitioner asks
:func:`support` for every node; a region of supported nodes is then lowered node by node, and every
emitted value's dtype and shape is cross-checked against the FX metadata, so a mismatch makes the
region fall back to PyTorch instead of producing a wrong result.

Scalars become node params; tensor data never enters a graph (parameters are plan inputs).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch

from .. import _C

aten = torch.ops.aten

_TABLE = _C.graph_op_table()
UNARY: dict = {}
for _i, _name in enumerate(_TABLE["unary"]):  # a table op that also has a SIMD kernel: the kernel (first)
    UNARY.setdefault(_name, _i)
BINARY: dict = {}
for _i, _name in enumerate(_TABLE["binary"]):  # kernel ops first, then the op table's
    BINARY.setdefault(_name, _i)
COMPARE = {name: i for i, name in enumerate(_TABLE["compare"])}
REDUCE = {name: i for i, name in enumerate(_TABLE["reduce"])}
ACTIVATION = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4, "sigmoid": 5, "tanh": 6}

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
F32 = (torch.float32,)
INDEX = (torch.int64, torch.int32)
ANY = tuple(DTYPE_NAMES)  # every dtype torchburn can hold (views, copies, constants)


class LoweringError(Exception):
    """A node could not be lowered (the region then runs in PyTorch)."""


# ---- metadata helpers --------------------------------------------------------------------------


def meta(node: Any) -> Any:
    """The example value of an FX node (a fake tensor, a tuple of them, or a Python scalar)."""
    if isinstance(node, torch.fx.Node):
        return node.meta.get("val", node.meta.get("example_value"))
    return node


def is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def static_shape(value: torch.Tensor) -> Optional[tuple]:
    """The shape as ints, or None when it has symbolic sizes."""
    try:
        return tuple(int(s) for s in value.shape) if all(isinstance(s, int) for s in value.shape) else None
    except TypeError:
        return None


def static_strides(value: torch.Tensor) -> Optional[tuple]:
    try:
        strides = value.stride()
    except RuntimeError:
        return None
    return tuple(int(s) for s in strides) if all(isinstance(s, int) for s in strides) else None


def _tensor_ok(value: Any, dtypes: Sequence[torch.dtype]) -> bool:
    return (
        is_tensor(value)
        and value.dtype in dtypes
        and value.device.type == "cpu"
        and value.layout == torch.strided
        and not value.is_complex()
    )


def _contiguous_strides(shape: Sequence[int]) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


# ---- the builder -------------------------------------------------------------------------------


class Builder:
    """Builds one torchburn graph from an FX region. ``values`` maps FX nodes to graph value ids
    (a tuple of ids for multi-output nodes)."""

    def __init__(self, metas: Optional[dict] = None):
        self.graph = _C.Graph()
        self.values: dict = {}
        self.metas = metas  # node -> value override (dynamic specialization); None: node.meta
        self.node: Optional[torch.fx.Node] = None

    def meta(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            if self.metas is not None and arg in self.metas:
                return self.metas[arg]
            return meta(arg)
        return arg

    def scalar(self, arg: Any) -> Any:
        """A Python number for a constant or a symbolic-int node (concrete in specialization)."""
        value = self.meta(arg)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise LoweringError("symbolic scalar")
        return value

    def ints(self, args: Any) -> list:
        return [int(self.scalar(a)) for a in args]

    def value(self, arg: Any) -> int:
        if not isinstance(arg, torch.fx.Node) or arg not in self.values:
            raise LoweringError(f"input {arg} is not a graph value")
        value = self.values[arg]
        if isinstance(value, tuple):
            raise LoweringError(f"{arg} is a tuple")
        return value

    def shape(self, arg: Any) -> tuple:
        value = self.meta(arg)
        shape = static_shape(value)
        if shape is None:
            raise LoweringError("symbolic shape")
        return shape

    def dtype(self, arg: Any) -> str:
        dtype = self.meta(arg).dtype
        if dtype not in DTYPE_NAMES:
            raise LoweringError(f"dtype {dtype}")
        return DTYPE_NAMES[dtype]

    def add(self, op: str, inputs: Sequence[int], params: Optional[dict] = None) -> int:
        label = self.node.name if self.node is not None else None
        return self.graph.node(op, list(inputs), params or {}, label)

    def full(self, value: float, dtype: str, shape: Sequence[int] = ()) -> int:
        shape = list(shape)
        return self.add("full", [], {"dtype": dtype, "ndim": len(shape), "shape": shape, "value": float(value)})

    def view(self, value: int, shape: Sequence[int]) -> int:
        shape = [int(s) for s in shape]
        return self.add("view", [value], {"ndim": len(shape), "shape": shape})

    def input(self, node: torch.fx.Node) -> int:
        value = self.meta(node)
        shape, strides = static_shape(value), static_strides(value)
        if shape is None or strides is None:
            raise LoweringError("symbolic input")
        if value.dtype not in DTYPE_NAMES or value.device.type != "cpu":
            raise LoweringError(f"input of dtype {value.dtype} on {value.device}")
        return self.graph.input(DTYPE_NAMES[value.dtype], shape, strides)


# ---- rules ---------------------------------------------------------------------------------------


@dataclass
class Rule:
    lower: Callable[[Builder, torch.fx.Node], Any]
    check: Optional[Callable[[torch.fx.Node], bool]] = None
    # dtypes allowed for tensor inputs and outputs (None: the rule's check decides)
    dtypes: Optional[tuple] = FLOATS + (torch.bool,)
    # for multi-output ops: which getitem indices may be used
    outputs: Optional[tuple] = None
    # whether int64/int32 tensors (indices, targets) may appear among the inputs/outputs
    index: bool = False


RULES: dict = {}
# Rules for nodes that read or write an integer tensor (int8..int64, uint8), where RULES' elementwise
# programs (computed in float32) would not be exact: the eager core's integer math.
INTEGER_RULES: dict = {}
INTEGRAL = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def rule(*targets, check=None, dtypes=FLOATS + (torch.bool,), outputs=None, index=False, integer=False):
    def register(fn):
        for target in targets:
            (INTEGER_RULES if integer else RULES)[target] = Rule(fn, check, dtypes, outputs, index)
        return fn

    return register


def _has_integer(node: torch.fx.Node) -> bool:
    values = [meta(node)] + [meta(a) for a in _tensor_args(node)]
    return any(is_tensor(v) and v.dtype in INTEGRAL for v in values)


def rule_for(node: torch.fx.Node) -> Optional[Rule]:
    """The rule that lowers `node` (None: not supported)."""
    integer = INTEGER_RULES.get(node.target)
    if integer is not None and _has_integer(node):
        return integer
    return RULES.get(node.target)


def _tensor_args(node: torch.fx.Node) -> list:
    found = []

    def visit(a):
        if isinstance(a, torch.fx.Node):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            for item in a:
                visit(item)

    for a in node.args:
        visit(a)
    for a in node.kwargs.values():
        visit(a)
    return found


def support(node: torch.fx.Node) -> tuple:
    """(supported, reason): whether `node` can run natively."""
    if node.op != "call_function":
        return False, node.op
    if node.target is operator.getitem:
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or source.op != "call_function":
            return False, "getitem"
        ok, reason = support(source)
        return ok, reason
    rule_ = rule_for(node)
    name = str(node.target)
    if rule_ is None:
        return False, name
    out = meta(node)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    allowed = (rule_.dtypes or ()) + (INDEX if rule_.index else ())
    if rule_.dtypes is not None:
        for value in outs:
            if value is not None and is_tensor(value) and not _tensor_ok(value, allowed):
                return False, f"{name} ({value.dtype} on {value.device})"
        for arg in _tensor_args(node):
            value = meta(arg)
            if is_tensor(value) and not _tensor_ok(value, allowed):
                return False, f"{name} ({value.dtype} on {value.device})"
            if isinstance(value, (torch.SymFloat, torch.SymBool)):
                return False, f"{name} (symbolic scalar)"
    if rule_.outputs is not None:
        for user in node.users:
            if user.target is not operator.getitem or user.args[1] not in rule_.outputs:
                if user.target is operator.getitem and not user.users:
                    continue
                return False, f"{name} (output {user.args[1] if user.target is operator.getitem else '?'} used)"
    if node.target not in EMPTY_INPUT_OK and _empty_input_nonempty_output(node):
        return False, f"{name} (empty input)"
    if rule_.check is not None:
        try:
            if not rule_.check(node):
                return False, f"{name} (arguments)"
        except Exception:  # noqa: BLE001 - a check that cannot decide means "not supported"
            return False, f"{name} (arguments)"
    return True, name


def engine_support(node: torch.fx.Node) -> tuple:
    """(taken, note): whether the active engine takes `node` (the compile backend asks when a GPU engine
    is active). The node is lowered alone, together with the views it reads through (so nn.Linear's
    permuted weight is seen as the [N, K] layout it is), over fresh inputs of its operands' shapes,
    and the C engine layer answers (``Graph.engine_support``: the engine's translation of every node
    and its ``supports_op`` on the resulting ops, device limits included). Views and getitems follow
    their producer: a view alone is not a computation."""
    if node.target is operator.getitem:
        source = node.args[0]
        return engine_support(source) if isinstance(source, torch.fx.Node) else (False, "getitem")
    if node.target in VIEW_TARGETS:
        return True, "view"
    nodes: list = []

    def through(arg: torch.fx.Node) -> bool:  # a view to lower with n (a getitem only of a split or unbind)
        if arg.op != "call_function" or arg.target not in VIEW_TARGETS or arg in nodes:
            return False
        if arg.target is operator.getitem:  # of a multi-output op (attention, layer_norm): an input here
            source = arg.args[0]
            return isinstance(source, torch.fx.Node) and source.op == "call_function" and source.target in VIEW_TARGETS
        return True

    def collect(n: torch.fx.Node) -> None:  # n and the views it reads through, producers first
        for arg in _tensor_args(n):
            if through(arg):
                collect(arg)
        nodes.append(n)

    collect(node)
    builder = Builder()
    try:
        for n in nodes:
            for arg in _tensor_args(n):
                if arg not in builder.values and arg not in nodes and is_tensor(meta(arg)):
                    builder.values[arg] = builder.input(arg)
            lower_node(builder, n)
        result = builder.values[node]
        if isinstance(result, tuple):  # only the outputs something reads (layer_norm's mean/rstd rarely)
            used = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
            result = tuple(v for i, v in enumerate(result) if i in used)
        for value in result if isinstance(result, tuple) else (result,):
            if value is not None:
                builder.graph.output(value)
    except Exception as error:  # noqa: BLE001 - whatever cannot be lowered alone stays on the CPU
        return False, f"{type(error).__name__}: {error}"
    return builder.graph.engine_support()


def _numel(value: Any) -> Optional[int]:
    shape = static_shape(value) if is_tensor(value) else None
    return None if shape is None else math.prod(shape)


def _empty_input_nonempty_output(node: torch.fx.Node) -> bool:
    """Whether the node reads an empty tensor and writes a non-empty one (a reduction over nothing, say):
    only the ops in EMPTY_INPUT_OK are known to handle that natively."""
    out = meta(node)
    if isinstance(out, (tuple, list)) or _numel(out) == 0:
        return False
    return any(_numel(meta(arg)) == 0 for arg in _tensor_args(node))


def lower_node(builder: Builder, node: torch.fx.Node) -> None:
    """Emits the graph nodes of one FX node into builder.values, cross-checking the result.

    A node whose single output is empty becomes a ``full`` of that shape whatever its op: an empty
    tensor has no values to compute, and a plan never has to read an empty tensor (whose data pointer
    may be NULL, as for the ``torch.tensor([])`` a transformers cache starts from)."""
    builder.node = node
    out = builder.meta(node)
    if node.target is not operator.getitem and _numel(out) == 0 and out.dtype in DTYPE_NAMES:
        builder.values[node] = builder.full(0.0, DTYPE_NAMES[out.dtype], static_shape(out))
        return
    if node.target is operator.getitem:
        source = builder.values.get(node.args[0])
        if not isinstance(source, tuple):
            raise LoweringError("getitem of a non-tuple")
        builder.values[node] = source[node.args[1]]
        if builder.values[node] is None:
            raise LoweringError(f"{node.name}: output {node.args[1]} is not computed natively")
        _cross_check(builder, node, builder.values[node], builder.meta(node))
        return
    result = rule_for(node).lower(builder, node)
    builder.values[node] = result
    out = builder.meta(node)
    if isinstance(result, tuple):
        for value, expected in zip(result, out):
            if value is not None and is_tensor(expected):
                _cross_check(builder, node, value, expected)
    else:
        _cross_check(builder, node, result, out)


def _cross_check(builder: Builder, node: torch.fx.Node, value: int, expected: Any) -> None:
    if not is_tensor(expected):
        return
    dtype, shape, _ = builder.graph.value_info(value)
    want_shape = static_shape(expected)
    if dtype != DTYPE_NAMES.get(expected.dtype) or tuple(shape) != want_shape:
        raise LoweringError(
            f"{node.name}: torchburn infers {dtype}{list(shape)}, PyTorch has {expected.dtype}{list(expected.shape)}"
        )


# Ops that read empty inputs correctly when their output is not empty (matmul over K = 0 gives zeros;
# cat skips empty pieces).
EMPTY_INPUT_OK = {aten.cat.default, aten.mm.default, aten.bmm.default}

# Nodes that only rearrange or name data: a region made of these alone is not worth a plan.
VIEW_TARGETS = {
    aten.alias.default, aten.detach.default, aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints,
    aten.t.default, aten.transpose.int, aten.permute.default, aten.numpy_T.default, aten.expand.default,
    aten.slice.Tensor, aten.select.int, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
    operator.getitem,
}

# the rule modules register themselves into RULES on import
from . import rules_eager, rules_nn, rules_tensor  # noqa: E402,F401
