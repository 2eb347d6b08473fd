"""turbo_torch.compile: capture a forward function's ops into a torchburn graph plan and replay it.

What is captured: one call of the function runs eagerly while a thread-local recording flag is on;
the op entry points used by PyTorch-style forward code (nn modules such as Linear, activations,
LayerNorm, Dropout, MultiheadAttention; nn.functional linear/conv1d/conv2d/batch_norm (eval)/
layer_norm/rms_norm/group_norm/embedding/pools/dropout/scaled_dot_product_attention/pad/interpolate/
conv_transpose2d, the fused LSTM layer, zeros/ones/full; the op table's unary and binary ops,
comparisons, where, matmul, reductions, views, indexing, cat/stack; see _lower_tensor.py,
_lower_nn.py, _lower_spatial.py and docs/turbo_torch.md) append nodes to a torchburn Graph whose
inputs are the call's tensor arguments and the modules' parameters and buffers (inputs, not
constants, so optimizer updates are seen). The graph compiles through the plan cache (fusion,
memory plan) into a Plan; later calls with the same signature run that plan in one C call.

Capture is refused, and that signature then runs eagerly for good (counted in stats()), when:
- any tensor reaching a recorded op or returned by the function was made by an op that was not
  recorded (an op the graph IR cannot express, a constant made inside the function, random ops);
- a layer runs in training mode (batch norm statistics, dropout);
- a tensor is converted to a Python value while recording (item, tolist, bool, float, int, index,
  numpy, printing, equal/allclose): data-dependent control flow must never be replayed;
- a tensor known to the capture was modified in place;
- the result is not a tensor or a (nested) tuple of tensors (and Nones).
A module with forward or pre-forward hooks runs eagerly (a replay would not run them).
Signature = shapes, dtypes and requires_grad of the tensor arguments, the other arguments (by
value), grad mode, and every submodule's training flag. A new signature captures again. When grad
mode is on and an input or parameter requires grad the call runs eagerly (forward-only capture).

>>> import turbo_torch as torch
>>> model = torch.compile(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU()).eval())
>>> with torch.no_grad():
...     y = model(torch.ones(3, 4)); y = model(torch.ones(3, 4))
>>> torch.compiler.stats()["replays"] >= 1
True
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import turbo_torch as _tt
from torchburn import _C

from . import _lower_nn, _lower_spatial, _lower_tensor
from ._recorder import Abort as _Abort
from ._recorder import Patched as _Patched
from ._recorder import Recorder as _Recorder
from ._recorder import state as _state

__all__ = ["compile", "reset", "stats", "CompiledFunction", "CompiledModule"]

_stats = {"captures": 0, "capture_failures": 0, "replays": 0, "eager_calls": 0, "plan_fallbacks": 0}
_wrap = _C._tt_wrap_base
_lowerings: list = []  # (functions, modules) tables, built on first use (turbo_torch.nn must be imported)


def stats() -> dict:
    """Counters: captures (graphs compiled), capture_failures, replays (calls run by a plan),
    eager_calls (calls run eagerly: refused signatures, grad mode, hooks), plan_fallbacks."""
    return dict(_stats)


def reset() -> None:
    """Zeroes the counters and forgets every compiled signature of every compiled object."""
    for key in _stats:
        _stats[key] = 0
    for obj in list(_registry):
        obj._cache.clear()
        obj._fast = None


def _tables() -> tuple:
    if not _lowerings:
        _lowerings.append((_lower_tensor.functions() + _lower_nn.functions() + _lower_spatial.functions(),
                           _lower_nn.modules()))
    return _lowerings[0]


# ---- compiled callables ----------------------------------------------------------------------

_registry: "weakref.WeakSet" = weakref.WeakSet()  # for reset(); does not keep compiled objects alive
_generation = _tt.nn.modules.module.generation  # [int]: bumped by every change of a module's members


class _Entry:
    """One captured signature: the plan, where its inputs come from, and the module tensors it reads
    (gathered again only after a module's members changed)."""

    __slots__ = ("plan", "arg_index", "nargs", "sources", "tensors", "generation", "single", "nones")

    def __init__(self, plan: Any, arg_index: tuple, sources: list, single: bool, nones: Optional[tuple]) -> None:
        self.plan, self.arg_index, self.sources, self.single = plan, arg_index, sources, single
        # the fast path passes the arguments straight to the plan: only when they are its first inputs
        self.nargs = len(arg_index) if arg_index == tuple(range(len(arg_index))) else -1
        self.nones = nones  # None (a flat tuple of tensors), or the result's nesting: 1 a tensor, 0 None, tuples
        self.generation = -1
        self.tensors: list = []

    def module_tensors(self) -> list:
        if self.generation != _generation[0]:
            self.tensors = [s[1] if len(s) == 2 else getattr(s[0], s[1])[s[2]] for s in self.sources]
            self.generation = _generation[0]
        return self.tensors


def _arg_key(args: tuple, kwargs: dict) -> Optional[tuple]:
    """The part of the signature the arguments give: (shape, dtype, requires_grad, contiguous) of each
    tensor, other arguments by value; None for argument kinds that never capture."""
    key = []
    for a in args:
        if isinstance(a, _tt.Tensor):
            key.append((a.shape, a.dtype, a.requires_grad, a.is_contiguous()))
        elif a is None or type(a) in (int, float, bool, str):
            key.append(a)
        else:
            return None
    if kwargs:
        for name in sorted(kwargs):
            a = kwargs[name]
            if isinstance(a, _tt.Tensor) or not (a is None or type(a) in (int, float, bool, str)):
                return None  # tensors by keyword: eager (the graph inputs are positional)
            key.append((name, a))
    return tuple(key)


def _closure_modules(fn: Callable) -> list:
    """The modules a compiled function reaches without taking them as arguments: a bound method's
    module, the modules in the function's closure and the module-level globals its code names (as
    they are when compiled). Their parameters and buffers become graph inputs like a compiled
    module's."""
    values = [getattr(fn, "__self__", None)]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    code, names = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    values += [names.get(name) for name in getattr(code, "co_names", ())]
    found: list = []
    for value in values:
        if isinstance(value, _tt.nn.Module) and not any(value is f for f in found):
            found.append(value)
    return found


def _structure(result: Any, outs: list) -> Any:
    """The nesting of a result (1 a tensor, 0 None, a tuple of these); its tensors are appended to outs."""
    if isinstance(result, _tt.Tensor):
        outs.append(result)
        return 1
    if result is None:
        return 0
    if isinstance(result, tuple):
        return tuple(_structure(item, outs) for item in result)
    raise _Abort("the result is not a tensor or a (nested) tuple of tensors (and Nones)")


def _rebuild(structure: Any, tensors: Any) -> Any:
    if structure == 1:
        return _wrap(next(tensors))
    if structure == 0:
        return None
    return tuple(_rebuild(item, tensors) for item in structure)


class CompiledFunction:
    """The result of turbo_torch.compile on a function: call it like the function."""

    def __init__(self, fn: Callable, module: Any = None, fullgraph: bool = False) -> None:
        self._fn = fn
        self._module = module
        self._roots = [module] if module is not None else _closure_modules(fn)
        self._fullgraph = fullgraph
        self._cache: dict = {}
        self._seen = -1  # the module generation _mode/_tensors were computed at
        self._mode: Any = None  # training flags of every submodule, or False when one has hooks
        self._tensors: list = []
        self._fast: Optional[_Entry] = None  # the entry of the last replay, tried first by the next call
        self._fast_generation: Optional[int] = None  # the module generation it was chosen at (None: no modules)
        self.last_reason: Optional[str] = None
        _registry.add(self)

    def _members(self) -> list:
        out = []
        for root in self._roots:
            for _, sub in root.named_modules():
                for table in ("_parameters", "_buffers"):
                    for name, t in getattr(sub, table).items():
                        if t is not None:
                            out.append((t, (sub, table, name)))
        return out

    def _refresh(self) -> None:
        """Recomputes what the signature needs from the module after its members changed."""
        subs = [m for root in self._roots for m in root.modules()]
        hooks = any(m._forward_hooks or m._forward_pre_hooks for m in subs)
        self._mode = False if hooks else tuple(m.training for m in subs)
        self._tensors = [t for t, _ in self._members()]
        self._seen = _generation[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._fast
        # the fast path: tensors only, no grad, modules unchanged -> the last replayed plan, whose C call
        # checks every input's dtype, shape and strides (a mismatch falls through to the full signature)
        if fast is not None and not kwargs and len(args) == fast.nargs and not _tt.is_grad_enabled() and \
                (self._fast_generation is None or self._fast_generation == _generation[0]) and \
                all(isinstance(a, _tt.Tensor) for a in args):
            outs = fast.plan(*args, *fast.module_tensors())
            if outs is not None:
                _stats["replays"] += 1
                return _wrap(outs[0]) if fast.single else self._result(fast, outs)
        mode = None
        if self._roots:
            if self._seen != _generation[0]:
                self._refresh()
            mode = self._mode
            if mode is False:  # forward hooks: a replay would skip them
                self.last_reason = "the module has forward hooks (a replay would skip them)"
                _stats["eager_calls"] += 1
                return self._fn(*args, **kwargs)
        key = _arg_key(args, kwargs)
        if key is None:
            _stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        grad = _tt.is_grad_enabled()
        if grad and (any(isinstance(a, _tt.Tensor) and a.requires_grad for a in args) or
                     any(t.requires_grad for t in self._tensors)):
            _stats["eager_calls"] += 1  # forward-only capture: autograd needs the eager graph
            return self._fn(*args, **kwargs)
        key = (key, grad, mode)
        entry = self._cache.get(key)
        if entry is None:
            return self._capture(key, args, kwargs)
        if entry is False:
            _stats["eager_calls"] += 1
            return self._fn(*args, **kwargs)
        outs = entry.plan(*[args[i] for i in entry.arg_index], *entry.module_tensors())
        if outs is None:  # the plan refused its inputs (strides...): eager, capture again next call
            self._cache.pop(key, None)
            _stats["plan_fallbacks"] += 1
            return self._fn(*args, **kwargs)
        _stats["replays"] += 1
        if entry.nargs == len(args) and not grad:
            self._fast = entry
            self._fast_generation = _generation[0] if self._roots else None
        return _wrap(outs[0]) if entry.single else self._result(entry, outs)

    @staticmethod
    def _result(entry: _Entry, outs: tuple) -> tuple:
        if entry.nones is None:
            return tuple(map(_wrap, outs))
        return _rebuild(entry.nones, iter(outs))

    def _capture(self, key: tuple, args: tuple, kwargs: dict) -> Any:
        r = _Recorder()
        for i, a in enumerate(args):
            if isinstance(a, _tt.Tensor):
                r.add_input(a, ("arg", i))
        for t, source in self._members():
            r.add_input(t, source)
        with _Patched(*_tables()):
            _state.recorder = r
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
        self.last_reason = r.reason
        if entry is None:
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
        outs: list = []
        nones = _structure(result, outs) if isinstance(result, tuple) else None
        if single:
            outs = [result]
        elif not outs:
            raise _Abort("the result is not a tensor or a (nested) tuple of tensors (and Nones)")
        elif all(n == 1 for n in nones):
            nones = None
        for o in outs:
            value = r.values.get(id(o))
            if value is None:
                raise _Abort("the result is made by an op that was not captured")
            if value < len(r.inputs):
                raise _Abort("an output is an input")
            r.graph.output(value)
        plan, _ = r.graph.compile()
        plan.fallback = lambda *tensors: None
        arg_index = tuple(s[1] for s in r.inputs if s[0] == "arg")
        sources = [s for s in r.inputs if s[0] != "arg"]
        return _Entry(plan, arg_index, sources, single, nones)


_OWN_ATTRIBUTES = {"_fn", "_module", "_roots", "_fullgraph", "_cache", "_seen", "_mode", "_tensors", "_fast",
                   "_fast_generation", "last_reason"}


class CompiledModule(CompiledFunction):
    """turbo_torch.compile(module): calls run compiled; attributes, state_dict... forward to _orig_mod."""

    def __init__(self, module: Any, fullgraph: bool = False) -> None:
        object.__setattr__(self, "_orig_mod", module)
        super().__init__(module, module, fullgraph)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orig_mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN_ATTRIBUTES:
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
