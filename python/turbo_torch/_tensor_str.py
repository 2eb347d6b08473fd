"""repr() of turbo_torch tensors, formatted like PyTorch's (precision 4, shared width, scientific
notation when the magnitudes ask for it, integer-valued floats as ``1.``, summarised past 1000
elements)."""
from __future__ import annotations

import math
from typing import Any, List

from torchburn import _C

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80


def _float_formatter(values: List[float]):
    finite = [abs(v) for v in values if math.isfinite(v)]
    int_mode = all(v == math.floor(v) for v in values if math.isfinite(v))
    sci = False
    if finite:
        nonzero = [v for v in finite if v != 0]
        if nonzero:
            big, small = max(nonzero), min(nonzero)
            if int_mode:
                sci = big / small > 1000.0 or big > 1e8
            else:
                sci = big / small > 1000.0 or big > 1e8 or small < 1e-4
    if int_mode and not sci:
        def fmt(v: float) -> str:
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return f"{v:.0f}."
    elif sci:
        def fmt(v: float) -> str:
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return f"{v:.{PRECISION}e}"
    else:
        def fmt(v: float) -> str:
            if math.isnan(v):
                return "nan"
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return f"{v:.{PRECISION}f}"
    return fmt


def _nested(flat: List[Any], shape: tuple, fmt, width: int, indent: int, summarize: bool) -> str:
    if len(shape) == 0:
        return fmt(flat[0]).rjust(width)
    if len(shape) == 1:
        n = shape[0]
        if summarize and n > 2 * EDGEITEMS:
            items = [fmt(v).rjust(width) for v in flat[:EDGEITEMS]] + ["..."] + \
                    [fmt(v).rjust(width) for v in flat[n - EDGEITEMS:]]
        else:
            items = [fmt(v).rjust(width) for v in flat]
        per_line = max(1, (LINEWIDTH - indent) // (width + 2))
        lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    step = 1
    for s in shape[1:]:
        step *= s
    n = shape[0]
    rows = []
    indices = list(range(n))
    if summarize and n > 2 * EDGEITEMS:
        indices = list(range(EDGEITEMS)) + [None] + list(range(n - EDGEITEMS, n))
    for i in indices:
        if i is None:
            rows.append("...")
        else:
            rows.append(_nested(flat[i * step:(i + 1) * step], shape[1:], fmt, width, indent + 1, summarize))
    separator = "," + "\n" * (len(shape) - 1) + " " * (indent + 1)
    return "[" + separator.join(rows) + "]"


def _summary_values(flat: List[Any], shape: tuple) -> List[Any]:
    """The elements that are printed when summarising (the edges of every dim)."""
    if len(shape) <= 1:
        n = shape[0] if shape else 1
        if n > 2 * EDGEITEMS:
            return flat[:EDGEITEMS] + flat[n - EDGEITEMS:]
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    n = shape[0]
    idx = range(n) if n <= 2 * EDGEITEMS else list(range(EDGEITEMS)) + list(range(n - EDGEITEMS, n))
    out: List[Any] = []
    for i in idx:
        out += _summary_values(flat[i * step:(i + 1) * step], shape[1:])
    return out


def tensor_repr(t: Any) -> str:
    from . import _types

    shape = tuple(t.shape)
    dtype = t.dtype
    flat = t._flat_values()
    numel = len(flat)
    summarize = numel > THRESHOLD
    suffixes = []
    default = _C._tt_get_default_dtype()
    if numel == 0:
        # as torch prints it: the shape unless it is (0,); the dtype unless it is the default float
        # dtype (with no elements, int64 or bool cannot be read off the values)
        body = "[]"
        if len(shape) != 1:
            suffixes.append(f"size={tuple(shape)}")
        if dtype is not default:
            suffixes.append(f"dtype={dtype!r}")
    else:
        shown = _summary_values(flat, shape) if summarize else flat
        if dtype is _types.bool_:
            fmt = lambda v: "True" if v else "False"  # noqa: E731
        elif dtype.is_floating_point:
            fmt = _float_formatter([float(v) for v in shown])
        else:
            fmt = lambda v: str(int(v))  # noqa: E731
        # non-finite values are not padded to, and do not widen, the column (as torch prints them)
        finite = [v for v in shown if not (isinstance(v, float) and not math.isfinite(v))]
        width = max(len(fmt(v)) for v in (finite or shown))
        body = _nested(flat, shape, fmt, width, len("tensor("), summarize)
    if numel and dtype not in (default, _types.int64, _types.bool_):
        suffixes.append(f"dtype={dtype!r}")
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    text = "tensor(" + body
    if suffixes:
        text += ", " + ", ".join(suffixes)
    return text + ")"
