"""Lowerings of nn ops for turbo_torch.compile: linear, conv1d/conv2d, batch norm (eval), layer norm,
RMS norm, group norm, embedding, max/avg/adaptive pooling, dropout (eval), scaled_dot_product_attention, and the
module forwards recorded as a whole (Linear, activations, Flatten, Softmax, LayerNorm, Dropout,
Identity, MultiheadAttention). Each maps to the graph ops the torch.compile backend lowers to."""
from __future__ import annotations

import math
from typing import Any, Callable

import turbo_torch as _tt

from . import _lower_tensor as T
from ._recorder import BINARY, UNARY, Abort, Recorder, bind, dtype_name


def _numel(shape: Any) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _pair(value: Any) -> list:
    if isinstance(value, int):
        return [value, value]
    value = [int(v) for v in value]
    return value * 2 if len(value) == 1 else value


def _float32(*tensors: Any) -> None:
    for t in tensors:
        if t is not None and t.dtype != _tt.float32:
            raise Abort(f"float32 only (got {t.dtype})")


# ---- linear --------------------------------------------------------------------------------------


def _linear_value(r: Recorder, x: Any, weight: Any, bias: Any) -> int:
    """x @ weight.T + bias as graph values (x viewed as rows when it has more than 2 dims)."""
    _float32(x, weight, bias)
    if weight.ndim != 2 or x.ndim < 1:
        raise Abort("linear: a 2-d weight only")
    xv = r.value(x)
    if x.ndim != 2:
        xv = r.view(xv, [_numel(x.shape[:-1]), x.shape[-1]])
    wt = r.add("permute", [r.value(weight)], {"ndim": 2, "dims": [1, 0]})
    inputs = [xv, wt] + ([r.value(bias)] if bias is not None else [])
    return r.add("matmul", inputs, {"has_bias": int(bias is not None)})


def linear_nodes(r: Recorder, out: Any, x: Any, weight: Any, bias: Any) -> None:
    value = _linear_value(r, x, weight, bias)
    if x.ndim != 2:
        value = r.view(value, list(out.shape))
    r.result(out, value, "linear")


def linear(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("weight", None), ("bias", None)), "linear")
    linear_nodes(r, out, b["input"], b["weight"], b["bias"])


# ---- convolution ---------------------------------------------------------------------------------


def _conv_padding(padding: Any, kernel: list, dilation: list, stride: list) -> list:
    if padding == "valid":
        return [0] * len(kernel)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        if any(s != 1 for s in stride) or any(t % 2 for t in totals):
            raise Abort("conv: padding='same' with a stride or an even effective kernel")
        return [t // 2 for t in totals]
    if isinstance(padding, str):
        raise Abort(f"conv: padding {padding!r}")
    return padding


def _conv_nodes(r: Recorder, xv: int, wv: int, bias: Any, stride: list, padding: list, dilation: list,
                groups: int) -> int:
    inputs = [xv, wv] + ([r.value(bias)] if bias is not None else [])
    return r.add("conv2d", inputs, {"stride": stride, "padding": padding, "dilation": dilation, "groups": int(groups),
                                    "has_bias": int(bias is not None)})


_CONV_SPEC = (("input", None), ("weight", None), ("bias", None), ("stride", 1), ("padding", 0), ("dilation", 1),
              ("groups", 1))


def _conv_args(args: tuple, kwargs: dict, spatial: int) -> tuple:
    """The bound arguments, input and weight of F.conv1d (spatial 1) / F.conv2d (spatial 2)."""
    what = f"conv{spatial}d"
    b = bind(args, kwargs, _CONV_SPEC, what)
    x, weight = b["input"], b["weight"]
    _float32(x, weight, b["bias"])
    if x.ndim not in (spatial + 1, spatial + 2) or weight.ndim != spatial + 2:
        raise Abort(f"{what}: batched or unbatched input with a {spatial + 2}-d weight")
    return b, x, weight


def conv2d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b, x, weight = _conv_args(args, kwargs, 2)
    stride, dilation = _pair(b["stride"]), _pair(b["dilation"])
    padding = _pair(_conv_padding(b["padding"], list(weight.shape[2:]), dilation, stride))
    xv = r.value(x) if x.ndim == 4 else r.view(r.value(x), [1] + list(x.shape))
    value = _conv_nodes(r, xv, r.value(weight), b["bias"], stride, padding, dilation, b["groups"])
    if x.ndim == 3:
        value = r.view(value, list(out.shape))
    r.result(out, value, "conv2d")


def conv1d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    """A convolution over [N, C, L] as conv2d over [N, C, 1, L]."""
    b, x, weight = _conv_args(args, kwargs, 1)

    def one(v: Any) -> int:
        return int(v) if isinstance(v, int) else int(v[0])
    stride, dilation = [1, one(b["stride"])], [1, one(b["dilation"])]
    padding = b["padding"]
    padding = [0] + [one(p) for p in _conv_padding(padding, [weight.shape[2]], [dilation[1]], [stride[1]])] \
        if isinstance(padding, str) else [0, one(padding)]
    batch = [x.shape[0]] if x.ndim == 3 else [1]
    xv = r.view(r.value(x), batch + [x.shape[-2], 1, x.shape[-1]])
    wv = r.view(r.value(weight), [weight.shape[0], weight.shape[1], 1, weight.shape[2]])
    value = _conv_nodes(r, xv, wv, b["bias"], stride, padding, dilation, b["groups"])
    r.result(out, r.view(value, list(out.shape)), "conv1d")


# ---- normalisation -------------------------------------------------------------------------------


def batch_norm(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("running_mean", None), ("running_var", None), ("weight", None),
                            ("bias", None), ("training", False), ("momentum", 0.1), ("eps", 1e-5)), "batch_norm")
    if b["training"] or b["running_mean"] is None or b["running_var"] is None:
        raise Abort("batch_norm in training mode (batch statistics and running-stat updates are not captured)")
    x = b["input"]
    if x.ndim < 2:
        raise Abort("batch_norm: [N, C, ...] input")
    inputs = [r.value(x), r.value(b["running_mean"]), r.value(b["running_var"])]
    inputs += [r.value(t) for t in (b["weight"], b["bias"]) if t is not None]
    r.node("batch_norm", inputs, {"has_weight": int(b["weight"] is not None), "has_bias": int(b["bias"] is not None),
                                  "eps": float(b["eps"])}, out)


def layer_norm_nodes(r: Recorder, out: Any, x: Any, normalized_shape: Any, weight: Any, bias: Any,
                     eps: float) -> None:
    _float32(x)
    inputs = [r.value(x)] + [r.value(t) for t in (weight, bias) if t is not None]
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    r.node("layer_norm", inputs, {"normalized_ndim": len(shape), "has_weight": int(weight is not None),
                                  "has_bias": int(bias is not None), "epilogue": 0, "eps": float(eps)}, out)


def layer_norm(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("normalized_shape", None), ("weight", None), ("bias", None),
                            ("eps", 1e-5)), "layer_norm")
    layer_norm_nodes(r, out, b["input"], b["normalized_shape"], b["weight"], b["bias"], b["eps"])


def rms_norm(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("normalized_shape", None), ("weight", None), ("eps", None)), "rms_norm")
    x, weight, shape = b["input"], b["weight"], b["normalized_shape"]
    _float32(x)
    eps = b["eps"] if b["eps"] is not None else 1.1920928955078125e-07  # float32's epsilon, as eager uses
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    inputs = [r.value(x)] + ([r.value(weight)] if weight is not None else [])
    r.node("rms_norm", inputs, {"normalized_ndim": len(shape), "has_weight": int(weight is not None), "has_bias": 0,
                                "epilogue": 0, "eps": float(eps)}, out)


def group_norm(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("num_groups", None), ("weight", None), ("bias", None), ("eps", 1e-5)),
             "group_norm")
    x = b["input"]
    _float32(x)
    if x.ndim < 2:
        raise Abort("group_norm: [N, C, ...] input")
    inputs = [r.value(x)] + [r.value(t) for t in (b["weight"], b["bias"]) if t is not None]
    r.node("group_norm", inputs, {"groups": int(b["num_groups"]), "has_weight": int(b["weight"] is not None),
                                  "has_bias": int(b["bias"] is not None), "eps": float(b["eps"])}, out)


# ---- embedding, pooling, dropout, attention ------------------------------------------------------


def embedding(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("weight", None), ("padding_idx", None), ("max_norm", None),
                            ("norm_type", 2.0), ("scale_grad_by_freq", False), ("sparse", False)), "embedding")
    if b["max_norm"] is not None:
        raise Abort("embedding with max_norm (it renormalizes the weight in place)")
    r.node("embedding", [r.value(b["weight"]), r.value(b["input"])], {}, out)


def _pool_params(kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> dict:
    kernel = _pair(kernel)
    stride = kernel if stride is None or stride == [] or stride == () else _pair(stride)
    return {"kernel": kernel, "stride": stride, "padding": _pair(padding), "dilation": _pair(dilation),
            "ceil_mode": int(bool(ceil_mode))}


_MAX_POOL_SPEC = (("input", None), ("kernel_size", None), ("stride", None), ("padding", 0), ("dilation", 1),
                  ("ceil_mode", False), ("return_indices", False))


def _max_pool_results(r: Recorder, out: Any, first: int, shape: Any) -> None:
    values, indices = (out if isinstance(out, tuple) else (out, None))
    r.result(values, first if shape is None else r.view(first, list(values.shape)), "max_pool")
    if indices is not None:
        r.result(indices, first + 1 if shape is None else r.view(first + 1, list(indices.shape)), "max_pool")


def max_pool2d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, _MAX_POOL_SPEC, "max_pool2d")
    x = b["input"]
    params = _pool_params(b["kernel_size"], b["stride"], b["padding"], b["dilation"], b["ceil_mode"])
    _max_pool_results(r, out, r.add("max_pool2d", [r.value(x)], params), None)


def max_pool1d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, _MAX_POOL_SPEC, "max_pool1d")
    x = b["input"]

    def one(v: Any) -> int:
        return int(v) if isinstance(v, int) else int(v[0])
    stride = b["stride"] if b["stride"] is not None else b["kernel_size"]
    params = _pool_params((1, one(b["kernel_size"])), (1, one(stride)), (0, one(b["padding"])),
                          (1, one(b["dilation"])), b["ceil_mode"])
    xv = r.view(r.value(x), list(x.shape[:-1]) + [1, x.shape[-1]])
    _max_pool_results(r, out, r.add("max_pool2d", [xv], params), "1d")


def avg_pool2d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("kernel_size", None), ("stride", None), ("padding", 0),
                            ("ceil_mode", False), ("count_include_pad", True), ("divisor_override", None)), "avg_pool2d")
    params = _pool_params(b["kernel_size"], b["stride"], b["padding"], 1, b["ceil_mode"])
    params.update(count_include_pad=int(bool(b["count_include_pad"])), divisor_override=int(b["divisor_override"] or 0))
    r.node("avg_pool2d", [r.value(b["input"])], params, out)


def adaptive_avg_pool2d(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    x = args[0]
    r.node("adaptive_avg_pool2d", [r.value(x)], {"output_size": [int(out.shape[-2]), int(out.shape[-1])]}, out)


def dropout(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("input", None), ("p", 0.5), ("training", True), ("inplace", False)), "dropout")
    if b["training"] and b["p"] > 0:
        raise Abort("dropout in training mode (random)")
    T.same_value(r, out, (b["input"],), {})


def _attention_value(r: Recorder, q: int, k: int, v: int, mask: Any, causal: bool, scale: float, gqa: bool,
                     layout: Any = None) -> int:
    """mask: None, a graph value, or a tensor known to the recorder."""
    params = {"causal": int(bool(causal)), "has_mask": int(mask is not None), "scale": float(scale),
              "enable_gqa": int(bool(gqa))}
    if layout:
        params["layout"] = layout
    if isinstance(mask, _tt.Tensor):
        mask = r.value(mask)
    return r.add("attention", [q, k, v] + ([mask] if mask is not None else []), params)


def scaled_dot_product_attention(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, (("query", None), ("key", None), ("value", None), ("attn_mask", None), ("dropout_p", 0.0),
                            ("is_causal", False), ("scale", None), ("enable_gqa", False)), "scaled_dot_product_attention")
    q, k, v, mask = b["query"], b["key"], b["value"], b["attn_mask"]
    _float32(q, k, v)
    if b["dropout_p"] > 0:
        raise Abort("scaled_dot_product_attention with dropout (random)")
    if q.ndim not in (3, 4) or mask is not None and (b["is_causal"] or mask.dtype not in (_tt.bool, _tt.float32)):
        raise Abort("scaled_dot_product_attention: 3-d/4-d q, k, v; a bool/float32 mask or is_causal")
    scale = b["scale"] if b["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    gqa = q.ndim == 4 and k.shape[1] != q.shape[1]
    r.result(out, _attention_value(r, r.value(q), r.value(k), r.value(v), mask, b["is_causal"], scale, gqa),
             "attention")


# ---- modules recorded as a whole -----------------------------------------------------------------

_MHA_SPEC = (("self", None), ("query", None), ("key", None), ("value", None), ("key_padding_mask", None),
             ("need_weights", True), ("attn_mask", None), ("average_attn_weights", True), ("is_causal", False))


def _mha_accept(*args: Any, **kwargs: Any) -> bool:
    """MultiheadAttention becomes projections + one attention node when it returns no weights (masks:
    bool or float key_padding_mask [B, Tk], attn_mask [Tq, Tk] or [B * H, Tq, Tk]); otherwise its ops
    are recorded one by one."""
    try:
        b = bind(args, kwargs, _MHA_SPEC, "MultiheadAttention")
    except Abort:
        return False
    m, q, k, v = b["self"], b["query"], b["key"], b["value"]
    masks = [t for t in (b["key_padding_mask"], b["attn_mask"]) if t is not None]
    return (not b["need_weights"] and all(isinstance(t, _tt.Tensor) and t.dtype in (_tt.bool, _tt.float32)
                                          for t in masks)
            and (b["key_padding_mask"] is None or b["key_padding_mask"].ndim == 2)
            and (b["attn_mask"] is None or b["attn_mask"].ndim in (2, 3))
            and all(isinstance(t, _tt.Tensor) and t.ndim == 3 and t.dtype == _tt.float32 for t in (q, k, v))
            and not (m.dropout > 0 and m.training) and m.bias_k is None and not m.add_zero_attn)


def _additive_mask(r: Recorder, mask: Any) -> int:
    """MultiheadAttention's mask rule: a bool mask's True positions are left out (-inf), a float mask
    is added to the scores."""
    if mask.dtype != _tt.bool:
        return r.value(mask)
    return r.add("where", [r.value(mask), r.scalar(-math.inf, "float32"), r.scalar(0.0, "float32")],
                 {"dtype": "float32"})


def _mha_mask(r: Recorder, m: Any, attn_mask: Any, key_padding_mask: Any, batch: int, q_len: int,
              kv_len: int) -> Any:
    """The additive mask over the [B, H, Tq, Tk] scores (None without masks)."""
    mask = None
    if attn_mask is not None:
        mask = _additive_mask(r, attn_mask)
        if attn_mask.ndim == 3:  # [B * H, Tq, Tk]
            mask = r.view(mask, [batch, m.num_heads, q_len, kv_len])
    if key_padding_mask is not None:
        padding = r.view(_additive_mask(r, key_padding_mask), [batch, 1, 1, kv_len])
        mask = padding if mask is None else r.add("binary", [mask, padding], {"op": BINARY["add"], "dtype": "float32"})
    return mask


def multihead_attention(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
    b = bind(args, kwargs, _MHA_SPEC, "MultiheadAttention")
    m, query, key, value = b["self"], b["query"], b["key"], b["value"]
    result = out[0]
    e, h = m.embed_dim, m.num_heads
    d = e // h
    # rows of [T, B, E] (or [B, T, E] when batch_first): project, then view as [.., .., H, D] heads
    first, second = (1, 0) if m.batch_first else (0, 1)  # dims of (T, B) in the input
    weight, bias = m.in_proj_weight, m.in_proj_bias
    wv, bv = r.value(weight), r.value(bias) if bias is not None else None

    def project(x: Any, part: int) -> int:
        w = r.add("slice", [wv], {"dim": 0, "start": part * e, "end": (part + 1) * e, "step": 1})
        inputs = [r.view(r.value(x), [_numel(x.shape[:2]), e]), r.add("permute", [w], {"ndim": 2, "dims": [1, 0]})]
        if bv is not None:
            inputs.append(r.add("slice", [bv], {"dim": 0, "start": part * e, "end": (part + 1) * e, "step": 1}))
        rows = r.add("matmul", inputs, {"has_bias": int(bv is not None)})
        heads = r.view(rows, list(x.shape[:2]) + [h, d])
        dims = [second, 2, first, 3]  # -> [B, H, T, D]
        return r.add("permute", [heads], {"ndim": 4, "dims": dims})

    if query is key and key is value:  # self-attention: one GEMM over the whole in_proj_weight
        inputs = [r.view(r.value(query), [_numel(query.shape[:2]), e]),
                  r.add("permute", [wv], {"ndim": 2, "dims": [1, 0]})] + ([bv] if bv is not None else [])
        rows = r.add("matmul", inputs, {"has_bias": int(bv is not None)})
        qkv = r.view(rows, list(query.shape[:2]) + [3, h, d])

        def part(p: int) -> int:
            one = r.add("slice", [qkv], {"dim": 2, "start": p, "end": p + 1, "step": 1})
            heads = r.view(one, list(query.shape[:2]) + [h, d])
            return r.add("permute", [heads], {"ndim": 4, "dims": [second, 2, first, 3]})
        q, k, v = part(0), part(1), part(2)
    else:
        q, k, v = project(query, 0), project(key, 1), project(value, 2)
    # the output laid out as [T, B, H, D] (or [B, T, H, D]) in memory, so the out projection reads rows
    layout = [0, 2, 1, 3] if m.batch_first else [2, 0, 1, 3]
    batch = query.shape[second]
    mask = _mha_mask(r, m, b["attn_mask"], b["key_padding_mask"], batch, query.shape[first], key.shape[first])
    causal = b["is_causal"] and b["attn_mask"] is None  # eager makes the causal mask only without attn_mask
    attended = _attention_value(r, q, k, v, mask, causal, 1.0 / math.sqrt(d), False, layout)
    to_rows = [0, 2, 1, 3] if m.batch_first else [2, 0, 1, 3]  # [B, H, T, D] -> that memory order
    rows = r.view(r.add("permute", [attended], {"ndim": 4, "dims": to_rows}), [_numel(query.shape[:2]), e])
    outp = m.out_proj
    inputs = [rows, r.add("permute", [r.value(outp.weight)], {"ndim": 2, "dims": [1, 0]})]
    if outp.bias is not None:
        inputs.append(r.value(outp.bias))
    projected = r.add("matmul", inputs, {"has_bias": int(outp.bias is not None)})
    r.result(result, r.view(projected, list(result.shape)), "MultiheadAttention")


def modules() -> list:
    """(class, lowering[, accept]) of the module forwards recorded as one node group: the lowering
    gets (module, *args)."""
    nn = _tt.nn

    def act(name: str) -> Callable:
        def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
            r.node("unary", [r.value(args[1])], {"op": UNARY[name], "dtype": dtype_name(out)}, out)
        return lower

    def module_linear(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        linear_nodes(r, out, args[1], args[0].weight, args[0].bias)

    def module_gelu(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        T.gelu(r, out, (args[1], args[0].approximate), {})

    def module_softmax(log: int) -> Callable:
        def lower(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
            T.softmax(log)(r, out, (args[1], args[0].dim), {})
        return lower

    def module_layer_norm(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        m = args[0]
        layer_norm_nodes(r, out, args[1], m.normalized_shape, m.weight, m.bias, m.eps)

    def module_dropout(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        dropout(r, out, (args[1], args[0].p, args[0].training), {})

    def module_identity(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        T.same_value(r, out, (args[1],), {})

    def module_flatten(r: Recorder, out: Any, args: tuple, kwargs: dict) -> None:
        T.reshape(r, out, (args[1],), {})

    return [(nn.Linear, module_linear), (nn.ReLU, act("relu")), (nn.GELU, module_gelu), (nn.SiLU, act("silu")),
            (nn.Sigmoid, act("sigmoid")), (nn.Tanh, act("tanh")), (nn.Flatten, module_flatten),
            (nn.Softmax, module_softmax(0)), (nn.LogSoftmax, module_softmax(1)), (nn.LayerNorm, module_layer_norm),
            (nn.Dropout, module_dropout), (nn.Identity, module_identity),
            (nn.MultiheadAttention, multihead_attention, _mha_accept)]


def functions() -> list:
    F = _tt.nn.functional
    return [(F, "linear", linear), (F, "conv2d", conv2d), (F, "conv1d", conv1d), (F, "batch_norm", batch_norm),
            (F, "layer_norm", layer_norm), (F, "rms_norm", rms_norm), (F, "group_norm", group_norm), (F, "embedding", embedding),
            (F, "max_pool2d", max_pool2d), (F, "max_pool1d", max_pool1d), (F, "avg_pool2d", avg_pool2d),
            (F, "adaptive_avg_pool2d", adaptive_avg_pool2d), (F, "dropout", dropout),
            (F, "scaled_dot_product_attention", scaled_dot_product_attention)]
