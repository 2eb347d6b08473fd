"""Lowerings of turbo_torch.compile for F.pad, F.interpolate, F.conv_transpose2d, the fused LSTM layer and
the creation ops (zeros/ones/full and their _like forms). No graph op was added for them: each is built
from existing graph ops, with the results eager gives:
- pad: constant pads are FULL + CAT (a negative pad a SLICE); reflect/replicate/circular are one
  INDEX_SELECT per padded dim with the eager code's own source indices (F._pad_indices) as a graph
  constant, so the values are copies, exactly eager's.
- interpolate (nearest, nearest-exact on float32/float64; linear/bilinear on float32): INDEX_SELECT of
  the source rows/columns (indices and weights computed here by the rules of
  src/pyext/eager_nn_resize.c, passed as graph constants), then for the linear modes
  w0 * a + w1 * b per axis, columns first, the eager kernel's order of float operations.
- conv_transpose2d: CONV2D_BACKWARD's input gradient with grad_output = x over a broadcast zero of the
  output's shape (exactly how the eager op computes it), then the bias as a broadcast add.
- _C._tt_lstm_layer (what nn.LSTM runs for a float32 forward layer without projection): one MATMUL for
  all input projections, then per time step one MATMUL of h with W_hh^T (+ b_hh, + that step's
  projection as the residual) and the gate arithmetic as unary/binary nodes (fused by the plan). The
  other RNN paths (GRU, RNN, reverse directions, proj_size, the cells) are compositions of recorded
  ops and need only the zeros of their initial state (the creation ops here)."""
from __future__ import annotations

import struct
from typing import Any

import turbo_torch as _tt

from ._recorder import BINARY, UNARY, Abort, Recorder, bind, dtype_name


def _const(r: Recorder, values: list, dtype: Any) -> int:
    return r.constant(_tt.tensor(values, dtype=dtype))


def _index_select(r: Recorder, value: int, dim: int, index: list) -> int:
    return r.add("index_select", [value, _const(r, index, _tt.int64)], {"dim": dim})


def _full(r: Recorder, shape: list, value: float, dtype: str) -> int:
    shape = [int(s) for s in shape]
    return r.add("full", [], {"dtype": dtype, "ndim": len(shape), "shape": shape, "value": float(value)})


def _binary(r: Recorder, op: str, a: int, b: int, dtype: str = "float32") -> int:
    return r.add("binary", [a, b], {"op": BINARY[op], "dtype": dtype})


def _unary(r: Recorder, op: str, a: int, dtype: str = "float32") -> int:
    return r.add("unary", [a], {"op": UNARY[op], "dtype": dtype})


def _slice(r: Recorder, value: int, dim: int, start: int, end: int) -> int:
    return r.add("slice", [value], {"dim": dim, "start": int(start), "end": int(end), "step": 1})


def _cat(r: Recorder, values: list, dim: int) -> int:
    """CAT of any number of values (a node takes at most 64 inputs: groups of 64, then their cat)."""
    while len(values) > 64:
        values = [r.add("cat", values[i:i + 64], {"dim": dim}) if len(values[i:i + 64]) > 1 else values[i]
                  for i in range(0, len(values), 64)]
    return values[0] if len(values) == 1 else r.add("cat", values, {"dim": dim})


# ---- creation ops --------------------------------------------------------------------------------


def creation(value: Any) -> Any:
    """zeros / ones / full (value None: the fill argument) and their _like forms: a FULL constant."""
    def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        if not isinstance(out, _tt.Tensor) or out.requires_grad:
            raise Abort("a created tensor that requires grad")
        fill = value
        if fill is None:
            fill = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
            if isinstance(fill, _tt.Tensor) or not isinstance(fill, (int, float, bool)):
                raise Abort("full with a non-number fill value")
        r.node("full", [], {"dtype": dtype_name(out), "ndim": out.ndim, "shape": [int(s) for s in out.shape],
                            "value": float(fill)}, out)
    return lower


# ---- pad -----------------------------------------------------------------------------------------


def pad(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("pad", None), ("mode", "constant"), ("value", None)), "pad")
    x, pads, mode = b["input"], [int(p) for p in b["pad"]], b["mode"]
    if out is x:  # eager returns the input itself when no pad is non-zero
        return
    dtype = dtype_name(x)
    value, shape = r.value(x), list(x.shape)
    for i in range(len(pads) // 2):
        dim = x.ndim - 1 - i
        left, right = pads[2 * i], pads[2 * i + 1]
        if not (left or right):
            continue
        if mode != "constant":
            index = _tt.nn.functional._pad_indices(mode, shape[dim], left, right, dim, x.shape)
            value = _index_select(r, value, dim, index)
            shape[dim] = len(index)
            continue
        if left < 0:
            value = _slice(r, value, dim, -left, shape[dim])
            shape[dim] += left
            left = 0
        if right < 0:
            value = _slice(r, value, dim, 0, shape[dim] + right)
            shape[dim] += right
            right = 0
        fill = 0.0 if b["value"] is None else float(b["value"])
        parts = []
        for width in (left, None, right):
            if width is None:
                parts.append(value)
            elif width:
                parts.append(_full(r, shape[:dim] + [width] + shape[dim + 1:], fill, dtype))
        value = _cat(r, parts, dim)
        shape[dim] += left + right
    r.result(out, value, "pad")


# ---- interpolate ---------------------------------------------------------------------------------

_MODES = {"nearest": 0, "nearest-exact": 1, "linear": 2, "bilinear": 2}


def _round(v: float, f32: bool) -> float:
    return struct.unpack("f", struct.pack("f", v))[0] if f32 else v


def _axis_taps(mode: int, align: bool, n_in: int, n_out: int, scale_factor: Any, f32: bool) -> tuple:
    """(index0, index1, weight0, weight1) lists of one axis: the rules of axis_taps in eager_nn_resize.c."""
    if mode == 2 and align:
        scale = _round(_round(float(n_in - 1), f32) / float(n_out - 1), f32) if n_out > 1 else 0.0
    elif scale_factor is not None and scale_factor > 0.0:
        scale = _round(1.0 / scale_factor, f32)
    else:
        scale = _round(_round(float(n_in), f32) / float(n_out), f32)
    i0, i1, w0, w1 = [], [], [], []
    for o in range(n_out):
        weight0, weight1 = 1.0, 0.0
        if mode == 0:
            i = o if n_out == n_in else o >> 1 if n_out == 2 * n_in else int(_floor(_round(o * scale, f32)))
            a = c = min(i, n_in - 1)
        elif mode == 1:
            i = o if n_out == n_in else int(_floor(_round((o + 0.5) * scale, f32)))
            a = c = min(i, n_in - 1)
        elif n_out == n_in:
            a = c = o
        else:
            real = _round(scale * o, f32) if align else _round(_round(scale * _round(o + 0.5, f32), f32) - 0.5, f32)
            if not align and real < 0.0:
                real = 0.0
            i = min(int(_floor(real)), n_in - 1)
            lam = min(max(_round(real - i, f32), 0.0), 1.0)
            a, c = i, i + 1 if i < n_in - 1 else i
            weight1, weight0 = lam, _round(1.0 - lam, f32)
        i0.append(a), i1.append(c), w0.append(weight0), w1.append(weight1)
    return i0, i1, w0, w1


def _floor(v: float) -> float:
    import math
    return math.floor(v)


def interpolate(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("size", None), ("scale_factor", None), ("mode", "nearest"),
                            ("align_corners", None), ("recompute_scale_factor", None), ("antialias", False)),
             "interpolate")
    x, mode = b["input"], _MODES.get(b["mode"])
    if mode is None or x.ndim not in (3, 4):
        raise Abort(f"interpolate mode {b['mode']!r} on a {x.ndim}-d input")
    if x.dtype not in ((_tt.float32,) if mode == 2 else (_tt.float32, _tt.float64)):
        raise Abort(f"interpolate {b['mode']!r} of {x.dtype} (float32; nearest modes also float64)")
    spatial = x.ndim - 2
    scales = [None] * spatial
    if b["size"] is None and not b["recompute_scale_factor"]:
        factor = b["scale_factor"]
        scales = [float(f) for f in factor] if isinstance(factor, (list, tuple)) else [float(factor)] * spatial
    align = bool(b["align_corners"]) if mode == 2 else False
    f32 = x.dtype == _tt.float32
    value = r.value(x)
    taps = [_axis_taps(mode, align, int(x.shape[2 + d]), int(out.shape[2 + d]), scales[d], f32)
            for d in range(spatial)]
    for d in reversed(range(spatial)):  # the last axis first: eager combines columns, then rows
        dim = 2 + d
        i0, i1, w0, w1 = taps[d]
        if mode != 2:
            if i0 != list(range(x.shape[dim])):
                value = _index_select(r, value, dim, i0)
            continue
        shape = [len(w0)] + [1] * (x.ndim - 1 - dim)  # the weights broadcast along this dim
        a = _binary(r, "mul", r.view(_const(r, w0, _tt.float32), shape), _index_select(r, value, dim, i0))
        c = _binary(r, "mul", r.view(_const(r, w1, _tt.float32), shape), _index_select(r, value, dim, i1))
        value = _binary(r, "add", a, c)
    if value == r.value(x):
        value = r.add("copy", [value], {"dtype": dtype_name(x)})
    r.result(out, value, "interpolate")


# ---- transposed convolution ----------------------------------------------------------------------


def conv_transpose2d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0),
                            ("output_padding", 0), ("groups", 1), ("dilation", 1)), "conv_transpose2d")
    x, weight, bias = b["input"], b["weight"], b["bias"]
    if any(t is not None and t.dtype != _tt.float32 for t in (x, weight, bias)):
        raise Abort("conv_transpose2d: float32 only")

    def pair(v: Any) -> list:
        return [int(v)] * 2 if isinstance(v, int) else [int(v[0]), int(v[-1])]
    shape = list(out.shape) if x.ndim == 4 else [1] + list(out.shape)
    xv = r.value(x) if x.ndim == 4 else r.view(r.value(x), [1] + list(x.shape))
    zero = r.add("expand", [_full(r, [1, 1, 1, 1], 0.0, "float32")], {"ndim": 4, "shape": shape})
    params = {"stride": pair(b["stride"]), "padding": pair(b["padding"]), "dilation": pair(b["dilation"]),
              "groups": int(b["groups"]), "output_mask": [1, 0, 0]}
    value = r.add("conv2d_backward", [xv, zero, r.value(weight)], params)
    if bias is not None:
        value = _binary(r, "add", value, r.view(r.value(bias), [1, shape[1], 1, 1]))
    if x.ndim == 3:
        value = r.view(value, list(out.shape))
    r.result(out, value, "conv_transpose2d")


# ---- the fused LSTM layer ------------------------------------------------------------------------


def lstm_layer(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """_tt_lstm_layer(x [T, B, I], h0 [B, H], c0 [B, H], w_ih, w_hh, b_ih, b_hh) -> Y [T + 1, B, H]."""
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = args
    steps, batch, width = (int(s) for s in x.shape)
    hidden = int(h0.shape[1])
    bias = b_ih is not None

    def transposed(w: Any) -> int:
        return r.add("permute", [r.value(w)], {"ndim": 2, "dims": [1, 0]})
    rows = r.view(r.value(x), [steps * batch, width])
    projected = r.add("matmul", [rows, transposed(w_ih)] + ([r.value(b_ih)] if bias else []),
                      {"has_bias": int(bias)})
    projected = r.view(projected, [steps, batch, 4 * hidden])
    w_hh_t = transposed(w_hh)
    h, c = r.value(h0), r.value(c0)
    outputs = []
    for t in range(steps):
        step = r.view(_slice(r, projected, 0, t, t + 1), [batch, 4 * hidden])
        inputs = [h, w_hh_t] + ([r.value(b_hh)] if bias else []) + [step]
        gates = r.add("matmul", inputs, {"has_bias": int(bias), "has_residual": 1})
        i, f, g, o = (_slice(r, gates, 1, k * hidden, (k + 1) * hidden) for k in range(4))
        c = _binary(r, "add", _binary(r, "mul", _unary(r, "sigmoid", f), c),
                    _binary(r, "mul", _unary(r, "sigmoid", i), _unary(r, "tanh", g)))
        h = _binary(r, "mul", _unary(r, "sigmoid", o), _unary(r, "tanh", c))
        outputs.append(r.view(h, [1, batch, hidden]))
    outputs.append(r.view(c, [1, batch, hidden]))
    r.result(out, _cat(r, outputs, 0), "lstm_layer")


def functions() -> list:
    from torchburn import _C
    F = _tt.nn.functional
    out = [(F, "pad", pad), (F, "interpolate", interpolate), (F, "conv_transpose2d", conv_transpose2d),
           (_C, "_tt_lstm_layer", lstm_layer)]
    for name, value in (("zeros", 0.0), ("ones", 1.0), ("full", None), ("zeros_like", 0.0), ("ones_like", 1.0),
                        ("full_like", None)):
        out.append((_tt, name, creation(value)))
    return out
