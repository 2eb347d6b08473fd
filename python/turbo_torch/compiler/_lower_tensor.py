"""Lowerings of tensor ops for turbo_torch.compile: elementwise ops of the op table, comparisons,
where/masked_fill, matmul, reductions, dtype casts and the view/shape family (view, reshape, flatten,
unsqueeze, squeeze, transpose, permute, expand, narrow, select, chunk, split, unbind, basic indexing,
cat, stack). Each lowering is (recorder, eager result, args, kwargs) -> adds the result's nodes."""
from __future__ import annotations

from typing import Any, Callable

import turbo_torch as _tt
from torchburn import _C

from ._recorder import BINARY, COMPARE, REDUCE, UNARY, Abort, Recorder, bind, dtype_name

_NUMBER = (int, float)


def _number(value: Any) -> bool:
    return type(value) in _NUMBER


# ---- elementwise ---------------------------------------------------------------------------------


def unary(name: str) -> Callable:
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        if len(args) != 1 or kwargs and any(v is not None for v in kwargs.values()):
            raise Abort(f"{name} with extra arguments")
        r.node("unary", [r.value(args[0])], {"op": UNARY[name], "dtype": dtype_name(out)}, out)
    return lower


def unary_params(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """turbo_torch._functions._unary_params(name, x, alpha, lo, hi, out): the parametric activations
    (elu, celu, leaky_relu, hardtanh, relu6, softplus, logit...) share the graph's unary params."""
    b = bind(args, kwargs, (("name", None), ("x", None), ("alpha", 0.0), ("lo", 0.0), ("hi", 0.0), ("out", None)),
             "unary")
    if b["out"] is not None:
        raise Abort(f"{b['name']}(out=...)")
    r.node("unary", [r.value(b["x"])], {"op": UNARY[b["name"]], "dtype": dtype_name(out), "alpha": float(b["alpha"]),
                                        "lo": float(b["lo"]), "hi": float(b["hi"])}, out)


def gelu(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    name = {"none": "gelu", "tanh": "gelu_tanh"}[approximate]
    r.node("unary", [r.value(args[0])], {"op": UNARY[name], "dtype": dtype_name(out)}, out)


def _operands(name: str, args: tuple, kwargs: dict, reverse: bool) -> tuple:
    if kwargs or len(args) != 2:
        raise Abort(f"{name} with extra arguments")
    return (args[1], args[0]) if reverse else args


def binary(name: str, reverse: bool = False) -> Callable:
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        a, b = _operands(name, args, kwargs, reverse)
        dtype = dtype_name(out)
        if isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor):
            if a.dtype != b.dtype:
                raise Abort(f"{name} of mixed dtypes")
            r.node("binary", [r.value(a), r.value(b)], {"op": BINARY[name], "dtype": dtype}, out)
        elif isinstance(a, _tt.Tensor) and _number(b):
            r.node("binary_scalar", [r.value(a)], {"op": BINARY[name], "dtype": dtype, "reverse": 0,
                                                   "scalar": float(b)}, out)
        elif isinstance(b, _tt.Tensor) and _number(a):
            r.node("binary_scalar", [r.value(b)], {"op": BINARY[name], "dtype": dtype, "reverse": 1,
                                                   "scalar": float(a)}, out)
        else:
            raise Abort(f"{name} of {type(a).__name__} and {type(b).__name__}")
        if out.dtype != (a.dtype if isinstance(a, _tt.Tensor) else b.dtype):
            raise Abort(f"{name}: dtype promotion")
    return lower


def compare(name: str, reverse: bool = False) -> Callable:
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        a, b = _operands(name, args, kwargs, reverse)
        if isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor):
            if a.dtype != b.dtype:
                raise Abort(f"{name} of mixed dtypes")
            r.node("compare", [r.value(a), r.value(b)], {"op": COMPARE[name]}, out)
        elif isinstance(a, _tt.Tensor) and _number(b):
            r.node("compare_scalar", [r.value(a)], {"op": COMPARE[name], "reverse": 0, "scalar": float(b)}, out)
        elif isinstance(b, _tt.Tensor) and _number(a):
            r.node("compare_scalar", [r.value(b)], {"op": COMPARE[name], "reverse": 1, "scalar": float(a)}, out)
        else:
            raise Abort(f"{name} of {type(a).__name__} and {type(b).__name__}")
    return lower


def logical(name: str, reverse: bool = False) -> Callable:
    """& | ^ : logical_* on bool tensors, bitwise_* on integers."""
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        a, b = _operands(name, args, kwargs, reverse)
        if not (isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor)) or a.dtype != b.dtype:
            raise Abort(f"{name} of a tensor and a number, or of mixed dtypes")
        op = ("logical_" if a.dtype == _tt.bool else "bitwise_") + name
        r.node("binary", [r.value(a), r.value(b)], {"op": BINARY[op], "dtype": dtype_name(out)}, out)
    return lower


def invert(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x = args[0]
    if x.dtype != _tt.bool:
        raise Abort("~ of a non-bool tensor")
    r.node("unary", [r.value(x)], {"op": UNARY["logical_not"], "dtype": "bool"}, out)


def _operand(r: Recorder, value: Any, dtype: str) -> int:
    if isinstance(value, _tt.Tensor):
        return r.value(value)
    if _number(value):
        return r.scalar(value, dtype)
    raise Abort(f"where/masked_fill of {type(value).__name__}")


def where(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("condition", None), ("input", None), ("other", None)), "where")
    if b["input"] is None or b["other"] is None:
        raise Abort("where(condition) (the indices form)")
    dtype = dtype_name(out)
    r.node("where", [r.value(b["condition"]), _operand(r, b["input"], dtype), _operand(r, b["other"], dtype)],
           {"dtype": dtype}, out)


def masked_fill(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("mask", None), ("value", None)), "masked_fill")
    dtype = dtype_name(out)
    if isinstance(b["value"], _tt.Tensor):
        raise Abort("masked_fill with a tensor value")
    r.node("where", [r.value(b["mask"]), _operand(r, b["value"], dtype), r.value(b["input"])], {"dtype": dtype}, out)


def matmul(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    a, b = args[0], args[1]
    if not (isinstance(a, _tt.Tensor) and isinstance(b, _tt.Tensor)) or a.ndim < 2 or b.ndim < 2 \
            or a.dtype != _tt.float32 or b.dtype != _tt.float32:
        raise Abort("matmul: float32 operands of 2 or more dims only")
    r.node("matmul", [r.value(a), r.value(b)], {}, out)


def _dim_mask(dim: Any, ndim: int) -> int:
    if dim is None or dim == () or dim == []:
        return 0
    dims = [dim] if isinstance(dim, int) else list(dim)
    mask = 0
    for d in dims:
        mask |= 1 << (int(d) % max(ndim, 1))
    return mask


def reduce(name: str, default_dim: Any = None) -> Callable:
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        b = bind(args, kwargs, (("input", None), ("dim", default_dim), ("keepdim", False), ("dtype", None)), name)
        x = b["input"]
        if b["dtype"] is not None or not x.dtype.is_floating_point or x.ndim == 0:
            raise Abort(f"{name}: floating-point input of 1 or more dims, no dtype=")
        r.node("reduce", [r.value(x)], {"op": REDUCE[name], "dim_mask": _dim_mask(b["dim"], x.ndim),
                                        "keepdim": int(bool(b["keepdim"])), "dtype": dtype_name(out)}, out)
    return lower


def cast(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """to(dtype) / float() / double() / type_as(): a copy node when the dtype changes."""
    x = args[0]
    if out is x:
        return
    r.node("copy", [r.value(x)], {"dtype": dtype_name(out)}, out)


def same_value(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """contiguous() / detach(): the graph's values are immutable, so the result is the input's value."""
    if out is not args[0]:
        r.know(out, r.value(args[0]))


def clone(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    r.node("copy", [r.value(args[0])], {"dtype": dtype_name(out)}, out)


# ---- shapes and views ----------------------------------------------------------------------------


def reshape(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """view, reshape, flatten, unflatten, unsqueeze, squeeze: the result's shape is all the node needs
    (the graph copies a strided input when the view cannot be expressed by strides)."""
    x = args[0]
    if out is x:
        return
    r.result(out, r.view(r.value(x), list(out.shape)), "view")


def expand(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    shape = [int(s) for s in out.shape]
    r.node("expand", [r.value(args[0])], {"ndim": len(shape), "shape": shape}, out)


def _permute(r: Recorder, out: Any, x: Any, dims: list) -> None:
    if len(dims) != x.ndim:
        raise Abort("permute: dims do not match the input")
    r.node("permute", [r.value(x)], {"ndim": len(dims), "dims": [int(d) % max(x.ndim, 1) for d in dims]}, out)


def permute(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x, dims = args[0], list(args[1:]) or list(kwargs.get("dims", ()))
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = list(dims[0])
    _permute(r, out, x, dims)


def transpose(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("dim0", None), ("dim1", None)), "transpose")
    x = b["input"]
    if x.ndim < 2:
        return same_value(r, out, (x,), {})
    dims = list(range(x.ndim))
    d0, d1 = int(b["dim0"]) % x.ndim, int(b["dim1"]) % x.ndim
    dims[d0], dims[d1] = dims[d1], dims[d0]
    _permute(r, out, x, dims)


def t(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x = args[0]
    if x.ndim < 2:
        return same_value(r, out, (x,), {})
    _permute(r, out, x, [1, 0])


def _slice(r: Recorder, value: int, dim: int, start: int, end: int, step: int = 1) -> int:
    return r.add("slice", [value], {"dim": dim, "start": int(start), "end": int(end), "step": int(step)})


def narrow(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("dim", None), ("start", None), ("length", None)), "narrow")
    x = b["input"]
    if not isinstance(b["start"], int):
        raise Abort("narrow with a tensor start")
    dim = int(b["dim"]) % x.ndim
    start = int(b["start"]) % x.shape[dim] if b["start"] < 0 else int(b["start"])
    r.result(out, _slice(r, r.value(x), dim, start, start + int(b["length"])), "narrow")


def select(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("dim", None), ("index", None)), "select")
    x = b["input"]
    if not isinstance(b["index"], int):
        raise Abort("select with a tensor index")
    dim = int(b["dim"]) % x.ndim
    index = int(b["index"]) % x.shape[dim]
    r.result(out, r.view(_slice(r, r.value(x), dim, index, index + 1), list(out.shape)), "select")


def pieces(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """chunk / split: one slice per eager piece."""
    x = args[0]
    dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
    if not isinstance(out, (tuple, list)) or not isinstance(dim, int):
        raise Abort("split into pieces: an int dim only")
    dim %= x.ndim
    value, start = r.value(x), 0
    for piece in out:
        length = piece.shape[dim]
        r.result(piece, _slice(r, value, dim, start, start + length), "split")
        start += length


def unbind(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x = args[0]
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0) % x.ndim
    value = r.value(x)
    for i, piece in enumerate(out):
        r.result(piece, r.view(_slice(r, value, dim, i, i + 1), list(piece.shape)), "unbind")


def getitem(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """Basic indexing: ints, slices with a positive step, None and Ellipsis."""
    x, index = args[0], args[1]
    items = list(index) if isinstance(index, tuple) else [index]
    if any(not (type(i) is int or i is None or i is Ellipsis or isinstance(i, slice)) for i in items):
        raise Abort("indexing with tensors, lists or bools (advanced indexing)")
    if items.count(Ellipsis) > 1:
        raise Abort("indexing with two Ellipses")
    real = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - real)
    items += [slice(None)] * (x.ndim - sum(1 for i in items if i is not None))
    value, dim, shape = r.value(x), 0, []
    for item in items:
        if item is None:
            shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step < 1:
                raise Abort("indexing with a negative step")
            if (start, stop, step) != (0, size, 1):
                value = _slice(r, value, dim, start, max(stop, start), step)
            shape.append(len(range(start, stop, step)))
        else:
            index = item + size if item < 0 else item
            value = _slice(r, value, dim, index, index + 1)
        dim += 1
    if shape != list(r.graph.value_info(value)[1]):
        value = r.view(value, shape)
    r.result(out, value, "indexing")


def cat(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("tensors", None), ("dim", 0)), "cat")
    tensors = list(b["tensors"])
    if not all(isinstance(x, _tt.Tensor) for x in tensors):
        raise Abort("cat of non-tensors")
    parts = [x for x in tensors if not (x.ndim == 1 and x.shape[0] == 0)]  # torch skips legacy empty pieces
    if not parts or any(x.dtype != out.dtype for x in parts):
        raise Abort("cat of mixed dtypes")
    r.node("cat", [r.value(x) for x in parts], {"dim": int(b["dim"]) % out.ndim}, out)


def stack(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("tensors", None), ("dim", 0)), "stack")
    tensors = list(b["tensors"])
    if not tensors or any(not isinstance(x, _tt.Tensor) or x.dtype != out.dtype for x in tensors):
        raise Abort("stack of non-tensors or mixed dtypes")
    dim = int(b["dim"]) % out.ndim
    shape = list(tensors[0].shape)
    shape.insert(dim, 1)
    r.node("cat", [r.view(r.value(x), shape) for x in tensors], {"dim": dim}, out)


# ---- the table -----------------------------------------------------------------------------------


def softmax(log: int) -> Callable:
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        x = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if dim is None or kwargs.get("dtype") is not None or x.dtype != _tt.float32:
            raise Abort("softmax: float32 with an explicit dim only")
        r.node("softmax", [r.value(x)], {"dim": int(dim) % max(x.ndim, 1), "log": log, "dtype": "float32"}, out)
    return lower


_PARAMETRIC = {"gelu", "gelu_tanh", "pow_scalar", "clamp", "logit", "softplus", "elu", "celu", "leaky_relu",
               "hardtanh", "round", "nan_to_num"}
_DUNDER_BINARY = {"add": "__add__", "sub": "__sub__", "mul": "__mul__", "div": "__truediv__", "pow": "__pow__",
                  "remainder": "__mod__", "floor_divide": "__floordiv__"}
_DUNDER_COMPARE = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__", "ge": "__ge__"}
_REVERSED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def functions() -> list:
    """(owner, name, lowering) for every tensor op entry point turbo_torch code calls."""
    F = _tt.nn.functional
    T = _tt.Tensor
    out: list = []

    def on(name: str, lower: Callable, owners: tuple = (_tt, F, T)) -> None:
        for owner in owners:
            if name in vars(owner) or owner is T and hasattr(T, name):
                out.append((owner, name, lower))

    for name, (arity, kind) in _C._tt_op_kinds().items():
        if arity == "unary" and name not in _PARAMETRIC and name in UNARY:
            on(name, unary(name))
        elif arity == "binary" and kind == "cmp":
            on(name, compare(name))
        elif arity == "binary" and name in BINARY and name not in ("add", "sub"):
            on(name, binary(name))
    for name in ("add", "sub"):  # alpha= makes these Python functions; without it they are the table ops
        on(name, binary(name))
    on("__neg__", unary("neg"), (T,))
    on("__invert__", invert, (T,))
    for name in ("and", "or", "xor"):
        on(f"__{name}__", logical(name), (T,))
        on(f"__r{name}__", logical(name, reverse=True), (T,))
    on("__abs__", unary("abs"), (T,))
    for name, dunder in _DUNDER_BINARY.items():
        on(dunder, binary(name), (T,))
        on(dunder.replace("__", "__r", 1), binary(name, reverse=True), (T,))
    for name, dunder in _DUNDER_COMPARE.items():
        on(dunder, compare(name), (T,))
    for name in ("matmul", "mm", "bmm", "__matmul__"):
        on(name, matmul)
    on("__rmatmul__", lambda r, o, a, k: matmul(r, o, (a[1], a[0]), k), (T,))
    on("where", where)
    on("masked_fill", masked_fill)
    for name in ("sum", "mean", "logsumexp"):
        on(name, reduce(name))
    on("amax", reduce("max", ()))
    on("amin", reduce("min", ()))
    for name in ("to", "float", "double", "type_as"):
        on(name, cast, (T,))
    on("contiguous", same_value)
    on("detach", same_value)
    on("clone", clone)
    for name in ("view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "view_as", "reshape_as",
                 "ravel"):
        on(name, reshape)
    on("expand", expand)
    on("expand_as", lambda r, o, a, k: expand(r, o, a[:1], {}))
    on("permute", permute)
    for name in ("transpose", "swapaxes", "swapdims"):
        on(name, transpose)
    on("t", t)
    on("narrow", narrow)
    on("select", select)
    on("chunk", pieces)
    on("split", pieces)
    on("unbind", unbind)
    on("__getitem__", getitem, (T,))
    for name in ("cat", "concat", "concatenate"):
        on(name, cat, (_tt,))
    on("stack", stack, (_tt,))
    for name, log in (("softmax", 0), ("log_softmax", 1)):
        on(name, softmax(log))
    on("gelu", gelu, (F,))
    out.append((_tt._functions, "_unary_params", unary_params))
    return out
