"""turbo_torch.compile: capture a forward function's ops into a torchburn graph plan and replay it.

What is captured: one call of the function runs eagerly while a thread-local recording flag is on;
the op entry points used by PyTorch-style forward code (the nn leaf modules Linear, ReLU, GELU,
SiLU, Sigmoid, Tanh, Flatten, Softmax, LogSoftmax, LayerNorm, Dropout/Identity; the functions
turbo_torch.relu/... and nn.functional.linear/relu/gelu/softmax/log_softmax/layer_norm; the Tensor
operators + - * / @ and view/reshape/flatten/relu/...) append a node to a torchburn Graph whose
inputs are the call's tensor arguments and the module's parameters and buffers (inputs, not
constants, so optimizer updates are seen). The graph compiles through the plan cache (fusion,
memory plan) into a Plan; later calls with the same signature run that plan in one C call.

Capture is refused, and that signature then runs eagerly for good (counted in stats()), when:
- any tensor reaching a recorded op or returned by the function was made by an op that was not
  recorded (an op the graph IR cannot express, a constant made inside the function, random ops);
- a tensor is converted to a Python value while recording (item, tolist, bool, float, int, index,
  numpy, printing, equal/allclose): data-dependent control flow must never be replayed;
- a tensor known to the capture was modified in place;
- the result is not a tensor or a tuple/list of tensors;
- a module has forward or pre-forward hooks (a replay would not run them).
Signature = shapes, dtypes and requires_grad of the tensor arguments, the other arguments (by
value), grad mode, and the module's training flag. A new signature captures again. When grad mode is
on and an input or parameter requires grad the call runs eagerly (forward-only capture)."""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Optional

import turbo_torch as _tt
from torchburn import _C

__all__ = ["compile", "reset", "stats", "CompiledFunction", "CompiledModule"]

_OPS = _C.graph_op_table()
_UNARY: dict = {}
for _i, _name in enumerate(_OPS["unary"]):
    _UNARY.setdefault(_name, _i)
_BINARY: dict = {}
for _i, _name in enumerate(_OPS["binary"]):
    _BINARY.setdefault(_name, _i)
_DTYPES = {_tt.float32: "float32", _tt.float64: "float64", _tt.int64: "int64", _tt.int32: "int32",
           _tt.bool: "bool"}

_state = threading.local()
_patch_lock = threading.RLock()
_stats = {"captures": 0, "capture_failures": 0, "replays": 0, "eager_calls": 0, "plan_fallbacks": 0}
_wrap = _C._tt_wrap_base


def stats() -> dict:
    """Counters: captures (graphs compiled), capture_failures, replays (calls run by a plan),
    eager_calls (calls run eagerly: refused signatures, grad mode), plan_fallbacks."""
    return dict(_stats)


def reset() -> None:
    """Zeroes the counters and forgets every compiled signature of every compiled object."""
    for key in _stats:
        _stats[key] = 0
    for obj in list(_registry):
        obj._cache.clear()


class _Abort(Exception):
    pass


class _Recorder:
    """The graph under construction: tensor identity -> graph value."""

    def __init__(self) -> None:
        self.graph = _C.Graph()
        self.values: dict = {}
        self.keep: list = []  # every tensor seen, alive until the end (ids stay unique)
        self.versions: list = []
        self.inputs: list = []  # how to fetch each graph input at replay: ("arg", i) / ("attr", module, dict, key)
        self.reason: Optional[str] = None

    def add_input(self, tensor: Any, source: tuple) -> None:
        if id(tensor) in self.values or tensor.dtype not in _DTYPES:
            return
        value = self.graph.input(_DTYPES[tensor.dtype], list(tensor.shape), list(tensor.stride()))
        self._know(tensor, value)
        self.inputs.append(source)

    def _know(self, tensor: Any, value: int) -> None:
        self.values[id(tensor)] = value
        self.keep.append(tensor)
        self.versions.append(tensor._version)

    def value(self, tensor: Any) -> int:
        value = self.values.get(id(tensor))
        if value is None:
            raise _Abort("a tensor made by an op that was not captured reaches a captured op")
        return value

    def node(self, op: str, inputs: list, params: dict, out: Any) -> None:
        value = self.graph.node(op, inputs, params)
        dtype, shape, _ = self.graph.value_info(value)
        if list(shape) != list(out.shape) or dtype != _DTYPES.get(out.dtype):
            raise _Abort(f"{op}: graph gives {dtype}{list(shape)}, eager gave {out.dtype}{list(out.shape)}")
        self._know(out, value)

    def view(self, value: int, shape: Any) -> int:
        shape = [int(s) for s in shape]
        return self.graph.node("view", [value], {"ndim": len(shape), "shape": shape})


def _recorder() -> Optional[_Recorder]:
    return getattr(_state, "recorder", None)


# ---- lowerings: (recorder, result, args, kwargs) -> adds the node of result -------------------


def _dtype_name(t: Any) -> str:
    name = _DTYPES.get(t.dtype)
    if name is None:
        raise _Abort(f"dtype {t.dtype}")
    return name


def _unary(name: str) -> Callable:
    def lower(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        if len(args) != 1 or kwargs and any(v is not None for v in kwargs.values()):
            raise _Abort(f"{name} with extra arguments")
        r.node("unary", [r.value(args[0])], {"op": _UNARY[name], "dtype": _dtype_name(out)}, out)
    return lower


def _gelu(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    name = {"none": "gelu", "tanh": "gelu_tanh"}[approximate]
    r.node("unary", [r.value(args[0])], {"op": _UNARY[name], "dtype": _dtype_name(out)}, out)


def _binary(name: str, reverse: bool = False) -> Callable:
    def lower(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        if kwargs or len(args) != 2:
            raise _Abort(f"{name} with extra arguments")
        a, b = (args[1], args[0]) if reverse else args
        dtype = _dtype_name(out)
        if isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor):
            if a.dtype != b.dtype:
                raise _Abort(f"{name} of mixed dtypes")
            r.node("binary", [r.value(a), r.value(b)], {"op": _BINARY[name], "dtype": dtype}, out)
        elif isinstance(a, _tt.Tensor) and type(b) in (int, float):
            r.node("binary_scalar", [r.value(a)], {"op": _BINARY[name], "dtype": dtype, "reverse": 0,
                                                   "scalar": float(b)}, out)
        elif isinstance(b, _tt.Tensor) and type(a) in (int, float):
            r.node("binary_scalar", [r.value(b)], {"op": _BINARY[name], "dtype": dtype, "reverse": 1,
                                                   "scalar": float(a)}, out)
        else:
            raise _Abort(f"{name} of {type(a).__name__} and {type(b).__name__}")
        if out.dtype != (a.dtype if isinstance(a, _tt.Tensor) else b.dtype):
            raise _Abort(f"{name}: dtype promotion")
    return lower


def _linear_nodes(r: _Recorder, out: Any, x: Any, weight: Any, bias: Any) -> None:
    if x.dtype != _tt.float32 or weight.ndim != 2 or x.ndim < 1:
        raise _Abort("linear: only float32 with a 2-d weight")
    xv = r.value(x)
    if x.ndim != 2:
        xv = r.view(xv, [_numel(x.shape[:-1]), x.shape[-1]])
    wt = r.graph.node("permute", [r.value(weight)], {"ndim": 2, "dims": [1, 0]})
    inputs = [xv, wt] + ([r.value(bias)] if bias is not None else [])
    value = r.graph.node("matmul", inputs, {"has_bias": int(bias is not None)})
    if x.ndim != 2:
        value = r.view(value, list(out.shape))
    dtype, shape, _ = r.graph.value_info(value)
    if list(shape) != list(out.shape):
        raise _Abort("linear: shape")
    r._know(out, value)


def _numel(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _linear(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x, weight = args[0], args[1]
    bias = kwargs.get("bias", args[2] if len(args) > 2 else None)
    _linear_nodes(r, out, x, weight, bias)


def _matmul(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    a, b = args
    if not (isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor)) or a.ndim != 2 or b.ndim != 2 \
            or a.dtype != _tt.float32 or b.dtype != _tt.float32:
        raise _Abort("matmul: only 2-d float32")
    r.node("matmul", [r.value(a), r.value(b)], {}, out)


def _softmax(log: int) -> Callable:
    def lower(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        x = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None or kwargs.get("dtype") is not None or x.dtype != _tt.float32:
            raise _Abort("softmax: float32 with an explicit dim only")
        r.node("softmax", [r.value(x)], {"dim": int(dim) % x.ndim, "log": log, "dtype": "float32"}, out)
    return lower


def _layer_norm_nodes(r: _Recorder, out: Any, x: Any, normalized_shape: Any, weight: Any, bias: Any,
                      eps: float) -> None:
    if x.dtype != _tt.float32:
        raise _Abort("layer_norm: float32 only")
    inputs = [r.value(x)] + [r.value(t) for t in (weight, bias) if t is not None]
    r.node("layer_norm", inputs, {"normalized_ndim": len(tuple(normalized_shape)),
                                  "has_weight": int(weight is not None),
                                  "has_bias": int(bias is not None), "epilogue": 0, "eps": float(eps)}, out)


def _layer_norm(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    bound = dict(zip(names, args), **kwargs)
    _layer_norm_nodes(r, out, bound["input"], bound["normalized_shape"], bound.get("weight"), bound.get("bias"),
                      bound.get("eps", 1e-5))


def _reshape(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x = args[0]
    if not x.is_contiguous():
        raise _Abort("view of a non-contiguous tensor")
    value = r.view(r.value(x), list(out.shape))
    r._know(out, value)


def _identity(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    if out is not args[0]:
        r._know(out, r.value(args[0]))


# ---- the recording entry points --------------------------------------------------------------


def _recording(original: Callable, lower: Callable) -> Callable:
    def entry(*args: Any, **kwargs: Any) -> Any:
        r = _recorder()
        if r is None or r.reason is not None or getattr(_state, "depth", 0):
            return original(*args, **kwargs)
        _state.depth = 1
        try:
            out = original(*args, **kwargs)
        finally:
            _state.depth = 0
        try:
            if not isinstance(out, _tt.Tensor):
                raise _Abort("op result is not a tensor")
            lower(r, out, args, kwargs)
        except _Abort as e:
            r.reason = str(e)
        except Exception as e:  # the graph builder refused the node
            r.reason = f"graph: {e}"
        return out
    entry.__wrapped__ = original
    return entry


def _module_lowerings() -> list:
    nn = _tt.nn

    def linear(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        m, x = args[0], args[1]
        _linear_nodes(r, out, x, m.weight, m.bias)

    def act(name: str) -> Callable:
        def lower(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
            r.node("unary", [r.value(args[1])], {"op": _UNARY[name], "dtype": _dtype_name(out)}, out)
        return lower

    def gelu(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        _gelu(r, out, (args[1], args[0].approximate), {})

    def flatten(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        _reshape(r, out, (args[1],), {})

    def softmax(log: int) -> Callable:
        def lower(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
            _softmax(log)(r, out, (args[1], args[0].dim), {})
        return lower

    def layer_norm(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        m = args[0]
        _layer_norm_nodes(r, out, args[1], m.normalized_shape, m.weight, m.bias, m.eps)

    def dropout(r: _Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        m = args[0]
        if m.training and m.p > 0:
            raise _Abort("dropout in training mode")
        _identity(r, out, (args[1],), {})

    return [(nn.Linear, linear), (nn.ReLU, act("relu")), (nn.GELU, gelu), (nn.SiLU, act("silu")),
            (nn.Sigmoid, act("sigmoid")), (nn.Tanh, act("tanh")), (nn.Flatten, flatten),
            (nn.Softmax, softmax(0)), (nn.LogSoftmax, softmax(1)), (nn.LayerNorm, layer_norm),
            (nn.Dropout, dropout), (nn.Identity, lambda r, out, args, kw: _identity(r, out, (args[1],), {}))]


def _function_lowerings() -> list:
    F = _tt.nn.functional
    out = []
    for owner in (_tt, F):
        for name in ("relu", "sigmoid", "tanh", "silu", "exp", "neg", "abs", "sqrt", "rsqrt"):
            if hasattr(owner, name):
                out.append((owner, name, _unary(name)))
    out += [(F, "gelu", _gelu), (F, "linear", _linear), (F, "softmax", _softmax(0)), (F, "log_softmax", _softmax(1)),
            (_tt, "softmax", _softmax(0)), (_tt, "log_softmax", _softmax(1)), (F, "layer_norm", _layer_norm),
            (_tt, "matmul", _matmul), (_tt, "mm", _matmul), (_tt, "flatten", _reshape), (_tt, "reshape", _reshape),
            (_tt, "add", _binary("add")), (_tt, "sub", _binary("sub")), (_tt, "mul", _binary("mul")),
            (_tt, "div", _binary("div"))]
    T = _tt.Tensor
    out += [(T, "__add__", _binary("add")), (T, "__radd__", _binary("add", True)), (T, "__sub__", _binary("sub")),
            (T, "__rsub__", _binary("sub", True)), (T, "__mul__", _binary("mul")),
            (T, "__rmul__", _binary("mul", True)), (T, "__truediv__", _binary("div")),
            (T, "__rtruediv__", _binary("div", True)), (T, "__matmul__", _matmul), (T, "add", _binary("add")),
            (T, "mul", _binary("mul")), (T, "view", _reshape), (T, "reshape", _reshape), (T, "flatten", _reshape)]
    for name in ("relu", "sigmoid", "tanh", "exp"):
        out.append((T, name, _unary(name)))
    out.append((T, "__neg__", _unary("neg")))
    return out


def _taint(original: Callable, what: str) -> Callable:
    def entry(*args: Any, **kwargs: Any) -> Any:
        r = _recorder()
        if r is not None and r.reason is None:
            r.reason = f"{what}: a tensor becomes a Python value (data-dependent control flow)"
        return original(*args, **kwargs)
    return entry


_TAINTS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "__array__", "__repr__",
           "__str__", "__format__")


class _Patched:
    """Installs the recording entry points for the duration of one capture (under a global lock)."""

    def __enter__(self) -> "_Patched":
        _patch_lock.acquire()
        self.saved = []
        try:
            for cls, lower in _module_lowerings():
                self._set(cls, "forward", _recording(cls.__dict__["forward"], lower))
            for owner, name, lower in _function_lowerings():
                original = getattr(owner, name, None)
                if original is not None:
                    self._set(owner, name, _recording(original, lower))
            for name in _TAINTS:
                self._set(_tt.Tensor, name, _taint(getattr(_tt.Tensor, name), name))
            for name in ("equal", "allclose", "is_nonzero"):
                if hasattr(_tt, name):
                    self._set(_tt, name, _taint(getattr(_tt, name), name))
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
            _patch_lock.release()


# ---- compiled callables ----------------------------------------------------------------------

_registry: "weakref.WeakSet" = weakref.WeakSet()  # for reset(); does not keep compiled objects alive


class _Entry:
    __slots__ = ("plan", "sources", "single", "nout")

    def __init__(self, plan: Any, sources: list, single: bool, nout: int) -> None:
        self.plan, self.sources, self.single, self.nout = plan, sources, single, nout


def _flatten_args(args: tuple, kwargs: dict) -> tuple:
    key = []
    for a in list(args) + [kwargs[k] for k in sorted(kwargs)]:
        if isinstance(a, _tt.Tensor):
            key.append((tuple(a.shape), a.dtype, a.requires_grad, a.is_contiguous()))
        elif a is None or type(a) in (int, float, bool, str):
            key.append(("v", a))
        else:
            return None  # unhashable / unknown argument kinds: eager
    return tuple(key) + tuple(sorted(kwargs))


class CompiledFunction:
    """The result of turbo_torch.compile on a function: call it like the function."""

    def __init__(self, fn: Callable, module: Any = None, fullgraph: bool = False) -> None:
        self._fn = fn
        self._module = module
        self._fullgraph = fullgraph
        self._cache: dict = {}
        self.last_reason: Optional[str] = None
        _registry.add(self)

    def _params(self) -> list:
        out = []
        if self._module is not None:
            for _, sub in self._module.named_modules():
                for kind in ("_parameters", "_buffers"):
                    for name, t in getattr(sub, kind).items():
                        if t is not None:
                            out.append((t, ("attr", sub, kind, name)))
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module
        key = _flatten_args(args, kwargs)
        if key is None:
            _stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        grad = _tt.is_grad_enabled()
        if grad and (any(isinstance(a, _tt.Tensor) and a.requires_grad for a in args) or
                     module is not None and any(p.requires_grad for p in module.parameters())):
            _stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        key = (key, grad, module.training if module is not None else None)
        entry = self._cache.get(key)
        if entry is None:
            return self._capture(key, args, kwargs)
        if entry is False:
            _stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        tensors = [args[s[1]] if s[0] == "arg" else getattr(s[1], s[2])[s[3]] for s in entry.sources]
        plan = entry.plan
        refused = plan.fallbacks
        outs = plan(*tensors)
        if plan.fallbacks != refused:  # the plan refused its inputs (strides...): eager, capture again next call
            self._cache.pop(key, None)
            _stats["plan_fallbacks"] += 1
            return self._fn(*args, **kwargs)
        _stats["replays"] += 1
        if entry.single:
            return _wrap(outs[0])
        return tuple(_wrap(o) for o in outs)

    def _capture(self, key: tuple, args: tuple, kwargs: dict) -> Any:
        r = _Recorder()
        if self._module is not None and any(getattr(sub, "_forward_hooks", None) or
                                            getattr(sub, "_forward_pre_hooks", None)
                                            for sub in self._module.modules()):
            r.reason = "the module has forward hooks (a replay would skip them)"
        for i, a in enumerate(args):
            if isinstance(a, _tt.Tensor):
                r.add_input(a, ("arg", i))
        for t, source in self._params():
            r.add_input(t, source)
        with _Patched():
            _state.recorder = r if r.reason is None else None
            try:
                result = self._fn(*args, **kwargs)
            finally:
                _state.recorder = None
        entry = None
        if r.reason is None:
            try:
                entry = self._finish(r, result)
            except _Abort as e:
                r.reason = str(e)
            except Exception as e:
                r.reason = f"graph: {e}"
        if entry is None:
            self.last_reason = r.reason
            if self._fullgraph:
                raise RuntimeError(f"turbo_torch.compile(fullgraph=True): capture failed: {r.reason}")
            self._cache[key] = False
            _stats["capture_failures"] += 1
            _stats["eager_calls"] += 1
            return result
        self._cache[key] = entry
        _stats["captures"] += 1
        return result

    def _finish(self, r: _Recorder, result: Any) -> _Entry:
        for t, version in zip(r.keep, r.versions):
            if t._version != version:
                raise _Abort("a tensor was modified in place during capture")
        single = isinstance(result, _tt.Tensor)
        outs = [result] if single else list(result) if isinstance(result, (tuple, list)) else None
        if not outs or isinstance(result, list) or not all(isinstance(o, _tt.Tensor) for o in outs):
            raise _Abort("the result is not a tensor or a tuple of tensors")
        for o in outs:
            value = r.value(o)
            if value < len(r.inputs):
                raise _Abort("an output is an input")
            r.graph.output(value)
        plan, _ = r.graph.compile()
        sources = [s[:2] if s[0] == "arg" else s for s in r.inputs]
        plan.fallback = lambda *tensors: None
        return _Entry(plan, sources, single, len(outs))


class CompiledModule(CompiledFunction):
    """turbo_torch.compile(module): calls run compiled; attributes, state_dict... forward to _orig_mod."""

    def __init__(self, module: Any, fullgraph: bool = False) -> None:
        object.__setattr__(self, "_orig_mod", module)
        super().__init__(module, module, fullgraph)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") and name in ("_fn", "_module", "_fullgraph", "_cache") or name == "last_reason":
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_mod!r})"


def compile(model: Any = None, *, fullgraph: bool = False, dynamic: Any = None, backend: Any = None,
            mode: Any = None, options: Any = None, disable: bool = False) -> Any:
    """turbo_torch.compile(fn_or_module) or @turbo_torch.compile / @turbo_torch.compile(...)."""
    if backend not in (None, "inductor", "torchburn"):
        raise ValueError(f"turbo_torch.compile: unknown backend {backend!r} (turbo_torch has its own)")
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if not callable(model):
        raise TypeError(f"turbo_torch.compile expects a function or a Module, got {type(model).__name__}")
    if disable:
        return model
    if isinstance(model, _tt.nn.Module):
        return CompiledModule(model, fullgraph)
    return CompiledFunction(model, None, fullgraph)
