"""The recorder of turbo_torch.compile: the graph under construction, the recording entry points that
wrap turbo_torch's ops during one capture, and the taints that refuse data-dependent control flow.

A recording entry runs the real eager op, then asks its lowering to append the matching graph
node(s); every tensor the capture knows maps to a graph value by identity. Ops called from inside a
recorded op are not recorded (the outer op is the node), so a composite such as F.layer_norm becomes
one layer_norm node, not the dozen eager ops it is made of."""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

import turbo_torch as _tt
from torchburn import _C

OPS = _C.graph_op_table()


def _first_index(names: list) -> dict:
    table: dict = {}
    for i, name in enumerate(names):
        table.setdefault(name, i)
    return table


UNARY = _first_index(OPS["unary"])
BINARY = _first_index(OPS["binary"])
COMPARE = _first_index(OPS["compare"])
REDUCE = _first_index(OPS["reduce"])
DTYPES = {_tt.float32: "float32", _tt.float64: "float64", _tt.int64: "int64", _tt.int32: "int32", _tt.bool: "bool"}

state = threading.local()
patch_lock = threading.RLock()


class Abort(Exception):
    """Raised by a lowering: the op cannot be captured (the message is the refusal reason)."""


class Recorder:
    """The graph under construction: tensor identity -> graph value."""

    def __init__(self) -> None:
        self.graph = _C.Graph()
        self.values: dict = {}
        self.keep: list = []  # every tensor seen, alive until the end (ids stay unique)
        self.versions: list = []
        self.inputs: list = []  # how to fetch each graph input at replay: ("arg", i) / (module, table, key) /
        #                         ("const", tensor): a tensor the lowering made (index lists, weights)
        self.reason: Optional[str] = None

    def add_input(self, tensor: Any, source: tuple) -> None:
        if id(tensor) in self.values or tensor.dtype not in DTYPES:
            return
        value = self.graph.input(DTYPES[tensor.dtype], list(tensor.shape), list(tensor.stride()))
        self.know(tensor, value)
        self.inputs.append(source)

    def constant(self, tensor: Any) -> int:
        """A tensor computed while lowering (e.g. the source indices of a resampling) as a graph input that
        every replay passes again: its values depend only on the signature (shapes, arguments)."""
        value = self.graph.input(dtype_name(tensor), list(tensor.shape), list(tensor.stride()))
        self.inputs.append(("const", tensor))
        self.keep.append(tensor)
        self.versions.append(tensor._version)
        return value

    def know(self, tensor: Any, value: int) -> None:
        """Maps an eager tensor to a graph value (no check: the caller built it from the same op)."""
        self.values[id(tensor)] = value
        self.keep.append(tensor)
        self.versions.append(tensor._version)

    def value(self, tensor: Any) -> int:
        if not isinstance(tensor, _tt.Tensor):
            raise Abort(f"expected a tensor, got {type(tensor).__name__}")
        value = self.values.get(id(tensor))
        if value is None:
            raise Abort("a tensor made by an op that was not captured reaches a captured op")
        return value

    def add(self, op: str, inputs: list, params: dict) -> int:
        """Appends a node; returns its first output value."""
        return self.graph.node(op, inputs, params)

    def result(self, out: Any, value: int, what: str) -> None:
        """Checks that graph value `value` has the eager result's dtype and shape, then maps them."""
        dtype, shape, _ = self.graph.value_info(value)
        if list(shape) != list(out.shape) or dtype != DTYPES.get(out.dtype):
            raise Abort(f"{what}: graph gives {dtype}{list(shape)}, eager gave {out.dtype}{list(out.shape)}")
        self.know(out, value)

    def node(self, op: str, inputs: list, params: dict, out: Any) -> int:
        value = self.add(op, inputs, params)
        self.result(out, value, op)
        return value

    def view(self, value: int, shape: Any) -> int:
        shape = [int(s) for s in shape]
        return self.add("view", [value], {"ndim": len(shape), "shape": shape})

    def scalar(self, number: Any, dtype: str) -> int:
        """A 0-d constant of the graph (a FULL node)."""
        return self.add("full", [], {"dtype": dtype, "ndim": 0, "shape": [], "value": float(number)})


def recorder() -> Optional[Recorder]:
    return getattr(state, "recorder", None)


def dtype_name(t: Any) -> str:
    name = DTYPES.get(t.dtype)
    if name is None:
        raise Abort(f"dtype {t.dtype}")
    return name


def bind(args: tuple, kwargs: dict, spec: tuple, what: str) -> dict:
    """The arguments of a call by name: spec is ((name, default), ...) in positional order."""
    if len(args) > len(spec):
        raise Abort(f"{what}: too many arguments")
    bound = {name: default for name, default in spec}
    for (name, _), value in zip(spec, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name not in bound:
            raise Abort(f"{what}: argument {name!r}")
        bound[name] = value
    return bound


def _has_tensor(out: Any) -> bool:
    if isinstance(out, _tt.Tensor):
        return True
    return isinstance(out, (tuple, list)) and any(isinstance(o, _tt.Tensor) for o in out)


def recording(original: Callable, lower: Callable, accept: Optional[Callable] = None, name: str = "") -> Callable:
    """The entry point installed in place of `original` (called `name` in refusal reasons) during a
    capture. accept(*args, **kwargs), when given, says whether this call is lowered as one node
    group; when it says no, the call runs with recording left on, so the ops it is made of are
    recorded one by one."""
    def entry(*args: Any, **kwargs: Any) -> Any:
        r = recorder()
        if r is None or r.reason is not None or getattr(state, "depth", 0):
            return original(*args, **kwargs)
        if accept is not None and not accept(*args, **kwargs):
            return original(*args, **kwargs)
        state.depth = 1
        try:
            out = original(*args, **kwargs)
        finally:
            state.depth = 0
        if not _has_tensor(out):
            return out  # nothing the graph needs to know (e.g. a comparison with None)
        try:
            lower(r, out, args, kwargs)
        except Abort as e:
            r.reason = f"{name}: {e}"
        except Exception as e:  # the graph builder refused the node
            r.reason = f"{name}: graph: {e}"
        return out
    entry.__wrapped__ = original
    return entry


def taint(original: Callable, what: str) -> Callable:
    def entry(*args: Any, **kwargs: Any) -> Any:
        r = recorder()
        if r is not None and r.reason is None:
            r.reason = f"{what}: a tensor becomes a Python value (data-dependent control flow)"
        return original(*args, **kwargs)
    return entry


TAINTS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "__array__", "__repr__",
          "__str__", "__format__")


class Patched:
    """Installs the recording entry points for the duration of one capture (under a global lock).

    functions: (owner, attribute name, lowering[, accept]) tuples; modules: (class, lowering[, accept])
    tuples, whose forward is wrapped (the lowering gets (module, *args) as args)."""

    def __init__(self, functions: list, modules: list) -> None:
        self.functions, self.modules = functions, modules

    def __enter__(self) -> "Patched":
        patch_lock.acquire()
        self.saved: list = []
        try:
            for cls, lower, *accept in self.modules:
                accept = accept[0] if accept else None
                self._set(cls, "forward", recording(cls.__dict__["forward"], lower, accept, cls.__name__))
            for owner, name, lower, *accept in self.functions:
                original = getattr(owner, name, None)
                if original is not None:
                    accept = accept[0] if accept else None
                    label = f"{getattr(owner, '__name__', type(owner).__name__).split('.')[-1]}.{name}"
                    self._set(owner, name, recording(original, lower, accept, label))
            for name in TAINTS:
                self._set(_tt.Tensor, name, taint(getattr(_tt.Tensor, name), name))
            for name in ("equal", "allclose", "is_nonzero"):
                if hasattr(_tt, name):
                    self._set(_tt, name, taint(getattr(_tt, name), name))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _set(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        self.saved.append((owner, name, had, vars(owner).get(name)))
        setattr(owner, name, value)

    def __exit__(self, *exc: Any) -> None:
        try:
            for owner, name, had, old in reversed(self.saved):
                if had:
                    setattr(owner, name, old)
                else:
                    delattr(owner, name)
        finally:
            patch_lock.release()
