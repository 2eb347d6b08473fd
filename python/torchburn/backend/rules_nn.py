"""Lowering rules for softmax, norms, linear algebra, convolution, attention, pooling, embeddings,
concatenation, losses and their backward ops (see lowering.py)."""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch

from .lowering import (BINARY, COMPARE, DTYPE_NAMES, F32, FLOATS, REDUCE, Builder, _contiguous_strides, meta, rule,
                       static_shape,
                       static_strides)

aten = torch.ops.aten


# ---- softmax, norms ------------------------------------------------------------------------------


@rule(aten._softmax.default, aten._log_softmax.default, dtypes=FLOATS)
def _softmax(b: Builder, n: torch.fx.Node) -> int:
    return b.add("softmax", [b.value(n.args[0])], {"dim": int(n.args[1]), "log": int(n.target == aten._log_softmax.default),
                                                  "dtype": b.dtype(n)})


@rule(aten._safe_softmax.default, check=lambda n: len(n.args) < 3 or n.args[2] is None, dtypes=FLOATS)
def _safe_softmax(b: Builder, n: torch.fx.Node) -> int:
    """softmax, with 0 for rows that are all -inf (PyTorch's masked-attention softmax, where a plain
    softmax gives NaN)."""
    x = n.args[0]
    dim = int(n.args[1]) % max(len(b.shape(x)), 1)
    dtype = b.dtype(n)
    probs = b.add("softmax", [b.value(x)], {"dim": dim, "log": 0, "dtype": dtype})
    row_max = b.add("reduce", [b.value(x)], {"op": REDUCE["max"], "dim_mask": 1 << dim, "keepdim": 1, "dtype": b.dtype(x)})
    empty = b.add("compare_scalar", [row_max], {"op": COMPARE["eq"], "scalar": -math.inf})
    return b.add("where", [empty, b.full(0.0, dtype), probs], {"dtype": dtype})


@rule(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default, dtypes=FLOATS)
def _softmax_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("softmax_backward", [b.value(n.args[0]), b.value(n.args[1])],
                 {"dim": int(n.args[2]), "log": int(n.target == aten._log_softmax_backward_data.default),
                  "dtype": b.dtype(n)})


def _optional_inputs(b: Builder, *args) -> tuple:
    present = [a for a in args if a is not None]
    return [b.value(a) for a in present], [int(a is not None) for a in args]


def _layer_norm_check(n: torch.fx.Node) -> bool:
    x = meta(n.args[0])
    used = {u.args[1] for u in n.users if u.target is operator.getitem and u.users}
    return x.dtype == torch.float32 or not (used - {0})


@rule(aten.native_layer_norm.default, check=_layer_norm_check, dtypes=FLOATS)
def _layer_norm(b: Builder, n: torch.fx.Node) -> tuple:
    x, shape, weight, bias, eps = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    first = b.add("layer_norm", [b.value(x)] + inputs,
                  {"normalized_ndim": len(shape), "has_weight": has_w, "has_bias": has_b, "eps": float(eps)})
    return (first, first + 1, first + 2)


@rule(aten.native_layer_norm_backward.default, dtypes=FLOATS)
def _layer_norm_backward(b: Builder, n: torch.fx.Node) -> tuple:
    grad, x, shape, mean, rstd, weight, bias, mask = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    first = b.add("layer_norm_backward", [b.value(grad), b.value(x), b.value(mean), b.value(rstd)] + inputs,
                  {"normalized_ndim": len(shape), "has_weight": has_w, "has_bias": has_b,
                   "output_mask": [int(m) for m in mask]})
    return tuple(first + i if mask[i] else None for i in range(3))


@rule(aten.native_group_norm.default, check=lambda n: meta(n.args[0]).dtype == torch.float32, dtypes=FLOATS)
def _group_norm(b: Builder, n: torch.fx.Node) -> tuple:
    x, weight, bias, _n, _c, _hw, group, eps = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    first = b.add("group_norm", [b.value(x)] + inputs,
                  {"groups": int(group), "has_weight": has_w, "has_bias": has_b, "eps": float(eps)})
    return (first, first + 1, first + 2)


@rule(aten.native_group_norm_backward.default, dtypes=FLOATS)
def _group_norm_backward(b: Builder, n: torch.fx.Node) -> tuple:
    grad, x, mean, rstd, weight, _n, _c, _hw, group, mask = n.args
    inputs, (has_w,) = _optional_inputs(b, weight)
    first = b.add("group_norm_backward", [b.value(grad), b.value(x), b.value(mean), b.value(rstd)] + inputs,
                  {"groups": int(group), "has_weight": has_w, "output_mask": [int(m) for m in mask]})
    return tuple(first + i if mask[i] else None for i in range(3))


def _empty_stats(b: Builder, n: torch.fx.Node) -> tuple:
    """The save_mean/save_invstd outputs of an eval batch norm: empty tensors (made only if used)."""
    outs = b.meta(n)
    used = {u.args[1] for u in n.users if u.target is operator.getitem and u.users}
    return tuple(b.full(0.0, DTYPE_NAMES[outs[i].dtype], static_shape(outs[i])) if i in used else None
                 for i in (1, 2))


def _batch_norm_stats_empty(n: torch.fx.Node) -> bool:
    outs = meta(n)
    return all(static_shape(outs[i]) is not None and math.prod(static_shape(outs[i])) == 0 for i in (1, 2))


@rule(aten._native_batch_norm_legit_no_training.default,
      check=lambda n: len(meta(n.args[0]).shape) >= 2 and _batch_norm_stats_empty(n), dtypes=FLOATS)
def _batch_norm_eval(b: Builder, n: torch.fx.Node) -> tuple:
    x, weight, bias, mean, var, _momentum, eps = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    out = b.add("batch_norm", [b.value(x), b.value(mean), b.value(var)] + inputs,
                {"has_weight": has_w, "has_bias": has_b, "eps": float(eps)})
    return (out,) + _empty_stats(b, n)


@rule(aten.native_batch_norm.default,
      check=lambda n: (len(meta(n.args[0]).shape) >= 2 and not n.args[5] and n.args[3] is not None
                       and _batch_norm_stats_empty(n)), dtypes=FLOATS)
def _native_batch_norm_eval(b: Builder, n: torch.fx.Node) -> tuple:
    x, weight, bias, mean, var, _training, _momentum, eps = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    out = b.add("batch_norm", [b.value(x), b.value(mean), b.value(var)] + inputs,
                {"has_weight": has_w, "has_bias": has_b, "eps": float(eps)})
    return (out,) + _empty_stats(b, n)


@rule(aten._native_batch_norm_legit_functional.default, check=lambda n: bool(n.args[5]), dtypes=FLOATS)
def _batch_norm_train(b: Builder, n: torch.fx.Node) -> tuple:
    x, weight, bias, running_mean, running_var, _training, momentum, eps = n.args
    inputs, (has_w, has_b) = _optional_inputs(b, weight, bias)
    has_running = running_mean is not None and running_var is not None
    if has_running:
        inputs += [b.value(running_mean), b.value(running_var)]
    first = b.add("batch_norm_train", [b.value(x)] + inputs,
                  {"has_weight": has_w, "has_bias": has_b, "has_running": int(has_running),
                   "momentum": float(momentum), "eps": float(eps)})
    return tuple(first + i for i in range(5))


@rule(aten.native_batch_norm_backward.default, dtypes=FLOATS)
def _batch_norm_backward(b: Builder, n: torch.fx.Node) -> tuple:
    grad, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask = n.args
    inputs = [b.value(grad), b.value(x)]
    has_w = weight is not None
    if has_w:
        inputs.append(b.value(weight))
    has_running = running_mean is not None and running_var is not None
    if has_running:
        inputs += [b.value(running_mean), b.value(running_var)]
    has_save = save_mean is not None and save_invstd is not None
    if has_save:
        inputs += [b.value(save_mean), b.value(save_invstd)]
    first = b.add("batch_norm_backward", inputs,
                  {"train": int(bool(train)), "has_weight": int(has_w), "has_running": int(has_running),
                   "has_save": int(has_save), "output_mask": [int(m) for m in mask], "eps": float(eps)})
    return tuple(first + i if mask[i] else None for i in range(3))


# ---- linear algebra ------------------------------------------------------------------------------

def _addmm_check(n: torch.fx.Node) -> bool:
    return all(isinstance(n.kwargs.get(k, 1), (int, float)) and _16bit_matmul_ok(n) for k in ("beta", "alpha"))


def _16bit_matmul_ok(n: torch.fx.Node) -> bool:
    """16-bit (float16/bfloat16) matmuls are lowered only while a GPU engine is active: there they run
    as f32 products over exactly widened operands, rounded once to the 16-bit dtype (what PyTorch's
    CPU kernels compute, up to summation order), with a 16-bit weight read as 16-bit words by the
    engine's *_w16 kernels. On native_cpu they stay in PyTorch, whose 16-bit GEMMs we do not beat."""
    if meta(n).dtype == torch.float32:
        return True
    from .compiler import _gpu_engine

    return _gpu_engine() is not None


def _f32(b: Builder, node: Any) -> int:
    """`node`'s value as float32: itself, or an exact widening copy of a 16-bit value. A 16-bit
    transposed 2-D weight (nn.Linear's `t`) is widened before the transpose, so the engine sees the
    [N, K] weight as a graph input it can read 16-bit."""
    if meta(node).dtype == torch.float32:
        return b.value(node)
    if isinstance(node, torch.fx.Node) and node.target == torch.ops.aten.t.default and len(b.shape(node)) == 2:
        return b.add("permute", [_f32(b, node.args[0])], {"ndim": 2, "dims": [1, 0]})
    return b.add("copy", [b.value(node)], {"dtype": "float32"})


def _rounded(b: Builder, n: torch.fx.Node, value: int) -> int:
    """A float32 result of a 16-bit op, rounded to the op's dtype (no-op for float32 ops)."""
    return value if meta(n).dtype == torch.float32 else b.add("copy", [value], {"dtype": b.dtype(n)})


def _scaled_add(b: Builder, n: torch.fx.Node) -> int:
    """beta * input + alpha * (b1 @ b2) for addmm/baddbmm with scalars other than 1 (beta 0 ignores
    input, NaN included, as PyTorch does)."""
    bias, x, w = n.args[:3]
    beta, alpha = float(n.kwargs.get("beta", 1)), float(n.kwargs.get("alpha", 1))
    product = b.add("matmul", [_f32(b, x), _f32(b, w)], {})
    if alpha != 1.0:
        product = b.add("binary_scalar", [product], {"op": BINARY["mul"], "dtype": "float32", "scalar": alpha})
    if beta == 0.0:
        return _rounded(b, n, product)
    bias_v = _f32(b, bias)
    if beta != 1.0:
        bias_v = b.add("binary_scalar", [bias_v], {"op": BINARY["mul"], "dtype": "float32", "scalar": beta})
    return _rounded(b, n, b.add("binary", [product, bias_v], {"op": BINARY["add"], "dtype": "float32"}))


@rule(aten.baddbmm.default, check=_addmm_check, dtypes=F32)
def _baddbmm(b: Builder, n: torch.fx.Node) -> int:
    if n.kwargs.get("beta", 1) == 1 and n.kwargs.get("alpha", 1) == 1 and b.shape(n.args[0]) == b.shape(n):
        return b.add("matmul", [b.value(n.args[1]), b.value(n.args[2]), b.value(n.args[0])], {"has_residual": 1})
    return _scaled_add(b, n)


@rule(aten.addmm.default, check=_addmm_check, dtypes=FLOATS)
def _addmm(b: Builder, n: torch.fx.Node) -> int:
    if n.kwargs.get("beta", 1) != 1 or n.kwargs.get("alpha", 1) != 1:
        return _scaled_add(b, n)
    bias, x, w = n.args[:3]
    out_shape = b.shape(n)
    bias_shape = b.shape(bias)
    numel = math.prod(bias_shape) if bias_shape else 1
    if numel == out_shape[1] and (not bias_shape or bias_shape[-1] == out_shape[1]) and out_shape[1] > 0:
        bias_v = _f32(b, bias)
        if len(bias_shape) != 1:
            bias_v = b.view(bias_v, [out_shape[1]])
        return _rounded(b, n, b.add("matmul", [_f32(b, x), _f32(b, w), bias_v], {"has_bias": 1}))
    if tuple(bias_shape) == tuple(out_shape):
        return _rounded(b, n, b.add("matmul", [_f32(b, x), _f32(b, w), _f32(b, bias)], {"has_residual": 1}))
    product = b.add("matmul", [_f32(b, x), _f32(b, w)], {})
    return _rounded(b, n, b.add("binary", [product, _f32(b, bias)], {"op": BINARY["add"], "dtype": "float32"}))


@rule(aten.mm.default, aten.bmm.default, check=_16bit_matmul_ok, dtypes=FLOATS)
def _mm(b: Builder, n: torch.fx.Node) -> int:
    return _rounded(b, n, b.add("matmul", [_f32(b, n.args[0]), _f32(b, n.args[1])], {}))


def _conv_check(n: torch.fx.Node) -> bool:
    x = meta(n.args[0])
    transposed, output_padding = n.args[6], n.args[7]
    padding = n.args[4]
    return (len(x.shape) == 4 and not transposed and all(p == 0 for p in output_padding)
            and not isinstance(padding, str) and len(n.args[3]) == 2)


@rule(aten.convolution.default, check=_conv_check, dtypes=F32)
def _conv(b: Builder, n: torch.fx.Node) -> int:
    x, w, bias, stride, padding, dilation, _t, _op, groups = n.args
    inputs = [b.value(x), b.value(w)]
    if bias is not None:
        inputs.append(b.value(bias))
    return b.add("conv2d", inputs, {"stride": b.ints(stride), "padding": b.ints(padding), "dilation": b.ints(dilation),
                                    "groups": int(groups), "has_bias": int(bias is not None)})


def _conv_backward_check(n: torch.fx.Node) -> bool:
    x = meta(n.args[1])
    return len(x.shape) == 4 and not n.args[7] and all(p == 0 for p in n.args[8])


@rule(aten.convolution_backward.default, check=_conv_backward_check, dtypes=F32)
def _conv_backward(b: Builder, n: torch.fx.Node) -> tuple:
    grad, x, w, _bias_sizes, stride, padding, dilation, _t, _op, groups, mask = n.args
    first = b.add("conv2d_backward", [b.value(grad), b.value(x), b.value(w)],
                  {"stride": b.ints(stride), "padding": b.ints(padding), "dilation": b.ints(dilation),
                   "groups": int(groups), "output_mask": [int(m) for m in mask]})
    return tuple(first + i if mask[i] else None for i in range(3))


def _attention_check(n: torch.fx.Node) -> bool:
    dropout = n.args[3] if len(n.args) > 3 else n.kwargs.get("dropout_p", 0.0)
    mask = n.kwargs.get("attn_mask")
    q = meta(n.args[0])
    if mask is not None and meta(mask).dtype not in (torch.bool, torch.float32):
        return False
    if float(dropout) != 0.0 or len(q.shape) not in (3, 4):
        return False
    q_heads, kv_heads = _heads(q, meta(n.args[1]))
    return q_heads == kv_heads or (len(q.shape) == 4 and kv_heads > 0 and q_heads % kv_heads == 0)


def _heads(q: torch.Tensor, k: torch.Tensor) -> tuple:
    """(query heads, key/value heads) of [B, H, T, D] tensors (1, 1 for 3-D)."""
    return (int(q.shape[1]), int(k.shape[1])) if len(q.shape) == 4 else (1, 1)


def _repeated_kv_source(b: Builder, arg: torch.fx.Node, q_heads: int) -> Optional[torch.fx.Node]:
    """x when `arg` is transformers' ``repeat_kv(x, n)``: x[:, :, None] expanded to [B, Hkv, n, T, D]
    (cloned when reshaped) and viewed as [B, Hkv * n, T, D]. The attention kernel reads x once per
    query-head group instead (grouped-query attention), so the repeated copy is never made."""
    node = arg
    if node.op != "call_function" or node.target not in (aten.view.default, aten._unsafe_view.default,
                                                         aten.reshape.default):
        return None
    node = node.args[0]
    if isinstance(node, torch.fx.Node) and node.target in (aten.clone.default, aten.contiguous.default):
        node = node.args[0]
    if not isinstance(node, torch.fx.Node) or node.target != aten.expand.default:
        return None
    unsqueezed = node.args[0]
    if not isinstance(unsqueezed, torch.fx.Node) or unsqueezed.target != aten.unsqueeze.default:
        return None
    source = unsqueezed.args[0]
    if not isinstance(source, torch.fx.Node) or source not in b.values or int(unsqueezed.args[1]) not in (2, -3):
        return None
    source_shape, expanded = b.shape(source), b.shape(node)
    if len(source_shape) != 4 or len(expanded) != 5:
        return None
    batch, kv_heads, length, dim = source_shape
    if expanded[:2] != (batch, kv_heads) or expanded[3:] != (length, dim) or b.shape(arg) != (
            batch, q_heads, length, dim) or expanded[2] * kv_heads != q_heads:
        return None
    return source


def _layout_of(value: torch.Tensor) -> Optional[list]:
    """Physical order of a dense tensor's dims (outermost first), when not contiguous."""
    strides = static_strides(value)
    shape = static_shape(value)
    if strides is None or shape is None or strides == _contiguous_strides(shape):
        return None
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    expected, step = {}, 1
    for d in reversed(order):
        expected[d] = step
        step *= shape[d]
    if any(shape[d] > 1 and expected[d] != strides[d] for d in order) or order[-1] != len(shape) - 1:
        return None
    return order


@rule(aten._scaled_dot_product_flash_attention_for_cpu.default, aten.scaled_dot_product_attention.default,
      check=_attention_check, outputs=(0, 1), dtypes=F32 + (torch.bool,))
def _attention(b: Builder, n: torch.fx.Node) -> Any:
    q, k, v = n.args[:3]
    causal = n.args[4] if len(n.args) > 4 else n.kwargs.get("is_causal", False)
    if n.target == aten.scaled_dot_product_attention.default:
        mask = n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")
        causal = n.args[5] if len(n.args) > 5 else n.kwargs.get("is_causal", False)
    else:
        mask = n.kwargs.get("attn_mask")
    scale = n.kwargs.get("scale")
    head_dim = b.shape(q)[-1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)
    out_meta = b.meta(n)
    out_meta = out_meta[0] if isinstance(out_meta, (tuple, list)) else out_meta
    layout = _layout_of(out_meta) if len(out_meta.shape) == 4 else None
    q_heads, _ = _heads(b.meta(q), b.meta(k))
    if len(b.shape(q)) == 4:
        k = _repeated_kv_source(b, k, q_heads) or k
        v = _repeated_kv_source(b, v, q_heads) or v
    kv_heads = _heads(b.meta(q), b.meta(k))[1]
    inputs = [b.value(q), b.value(k), b.value(v)] + ([b.value(mask)] if mask is not None else [])
    params = {"causal": int(bool(causal)), "has_mask": int(mask is not None), "scale": scale,
              "enable_gqa": int(q_heads != kv_heads or q_heads != _heads(b.meta(q), b.meta(v))[1])}
    if layout:
        params["layout"] = layout
    out = b.add("attention", inputs, params)
    if n.target == aten.scaled_dot_product_attention.default:
        return out
    return (out, out + 1)  # output, logsumexp [B, H, T] (torch's CPU flash kernel's second output)


def _attention_backward_check(n: torch.fx.Node) -> bool:
    dropout = n.args[6]
    mask = n.kwargs.get("attn_mask")
    if mask is not None and meta(mask).dtype not in (torch.bool, torch.float32):
        return False
    return float(dropout) == 0.0 and len(meta(n.args[1]).shape) in (3, 4)


@rule(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, check=_attention_backward_check,
      dtypes=F32 + (torch.bool,))
def _attention_backward(b: Builder, n: torch.fx.Node) -> tuple:
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None)
    grad, q, k, v, out, lse, _dropout, causal = n.args[:8]
    mask = n.kwargs.get("attn_mask")
    scale = n.kwargs.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(b.shape(q)[-1])
    inputs = [b.value(a) for a in (grad, q, k, v, out, lse)] + ([b.value(mask)] if mask is not None else [])
    first = b.add("attention_backward", inputs,
                  {"causal": int(bool(causal)), "has_mask": int(mask is not None), "scale": scale,
                   "enable_gqa": int(b.shape(q)[1] != b.shape(k)[1]) if len(b.shape(q)) == 4 else 0})
    return (first, first + 1, first + 2)


@rule(aten.embedding.default, check=lambda n: not (len(n.args) > 4 and n.args[4]), dtypes=FLOATS, index=True)
def _embedding(b: Builder, n: torch.fx.Node) -> int:
    return b.add("embedding", [b.value(n.args[0]), b.value(n.args[1])], {})


@rule(aten.embedding_dense_backward.default, dtypes=FLOATS, index=True)
def _embedding_backward(b: Builder, n: torch.fx.Node) -> int:
    grad, indices, num_weights, padding_idx, scale = n.args
    return b.add("embedding_backward", [b.value(grad), b.value(indices)],
                 {"num_weights": int(num_weights), "padding_idx": int(padding_idx), "scale_grad_by_freq": int(scale)})


def _cat_pieces(n: torch.fx.Node) -> list:
    """The tensors cat really joins: PyTorch skips 1-D empty tensors among n-D ones (the legacy rule a
    transformers cache relies on when it starts from ``torch.tensor([])``)."""
    ndim = len(meta(n).shape)
    return [t for t in n.args[0] if ndim == 1 or tuple(meta(t).shape) != (0,)]


def _cat_check(n: torch.fx.Node) -> bool:
    tensors = _cat_pieces(n)
    dtypes = {meta(t).dtype for t in tensors}
    shapes = {len(meta(t).shape) for t in tensors}
    return len(dtypes) == 1 and len(shapes) == 1 and 0 < len(tensors) <= 64


@rule(aten.cat.default, check=_cat_check, dtypes=FLOATS + (torch.bool,))
def _cat(b: Builder, n: torch.fx.Node) -> int:
    dim = int(n.args[1]) if len(n.args) > 1 else int(n.kwargs.get("dim", 0))
    pieces = _cat_pieces(n)
    if len(pieces) == 1:
        return b.value(pieces[0])
    return b.add("cat", [b.value(t) for t in pieces], {"dim": dim})


@rule(aten.stack.default, check=lambda n: 0 < len(n.args[0]) <= 64, dtypes=FLOATS + (torch.bool,))
def _stack(b: Builder, n: torch.fx.Node) -> int:
    dim = int(n.args[1]) if len(n.args) > 1 else int(n.kwargs.get("dim", 0))
    out_shape = b.shape(n)
    dim = dim % len(out_shape)
    item_shape = list(out_shape)
    item_shape[dim] = 1
    return b.add("cat", [b.view(b.value(t), item_shape) for t in n.args[0]], {"dim": dim})


def _scatter_back(b: Builder, n: torch.fx.Node, grad: Any, dim: int, start: int, length: int) -> int:
    """The gradient of a select/slice: `grad` placed at [start, start + length) of dim in zeros of the
    input's shape, as a cat of zero blocks around it (no scatter op needed)."""
    shape = list(b.shape(n))
    dim %= len(shape)
    parts = []
    if start > 0:
        parts.append(b.full(0.0, b.dtype(n), shape[:dim] + [start] + shape[dim + 1:]))
    parts.append(grad)
    rest = shape[dim] - start - length
    if rest > 0:
        parts.append(b.full(0.0, b.dtype(n), shape[:dim] + [rest] + shape[dim + 1:]))
    return parts[0] if len(parts) == 1 else b.add("cat", parts, {"dim": dim})


def _select_backward_check(n: torch.fx.Node) -> bool:
    return len(meta(n).shape) > 0 and meta(n).numel() > 0


@rule(aten.select_backward.default, check=_select_backward_check, dtypes=FLOATS)
def _select_backward(b: Builder, n: torch.fx.Node) -> int:
    grad, _, dim, index = n.args
    shape = list(b.shape(n))
    dim = int(dim) % len(shape)
    index = int(index) % shape[dim]
    item = shape[:dim] + [1] + shape[dim + 1:]
    return _scatter_back(b, n, b.view(b.value(grad), item), dim, index, 1)


def _slice_bounds(n: torch.fx.Node) -> Optional[tuple]:
    """(dim, start, length) of a step-1 slice_backward, clamped like Python slicing, else None."""
    _, sizes, dim, start, end, step = n.args
    if int(step) != 1 or len(meta(n).shape) == 0:
        return None
    dim = int(dim) % len(sizes)
    size = int(sizes[dim])
    first, last, _ = slice(int(start), int(end)).indices(size)
    return dim, first, max(last - first, 0)


@rule(aten.slice_backward.default, check=lambda n: _slice_bounds(n) is not None and meta(n).numel() > 0,
      dtypes=FLOATS)
def _slice_backward(b: Builder, n: torch.fx.Node) -> int:
    dim, start, length = _slice_bounds(n)
    if length == 0:
        return b.full(0.0, b.dtype(n), b.shape(n))
    return _scatter_back(b, n, b.value(n.args[0]), dim, start, length)


# ---- pooling -------------------------------------------------------------------------------------


def _pair(value: Any, default: Any = None) -> list:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    if isinstance(value, int):
        return [value, value]
    value = list(value)
    return value * 2 if len(value) == 1 else value


def _pool_args(n: torch.fx.Node, with_dilation: bool, offset: int = 0) -> dict:
    a = list(n.args[1 + offset:])
    kernel = _pair(a[0])
    stride = _pair(a[1] if len(a) > 1 else None, kernel)
    padding = _pair(a[2] if len(a) > 2 else 0)
    if with_dilation:
        dilation = _pair(a[3] if len(a) > 3 else 1)
        ceil_mode = bool(a[4]) if len(a) > 4 else False
        return {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation,
                "ceil_mode": int(ceil_mode)}
    ceil_mode = bool(a[3]) if len(a) > 3 else False
    count_include_pad = bool(a[4]) if len(a) > 4 else True
    divisor = a[5] if len(a) > 5 else None
    return {"kernel": kernel, "stride": stride, "padding": padding, "dilation": [1, 1], "ceil_mode": int(ceil_mode),
            "count_include_pad": int(count_include_pad), "divisor_override": int(divisor or 0)}


def _4d(n: torch.fx.Node) -> bool:
    return len(meta(n.args[0]).shape) in (3, 4)


@rule(aten.max_pool2d_with_indices.default, check=_4d, dtypes=FLOATS, index=True)
def _max_pool(b: Builder, n: torch.fx.Node) -> tuple:
    first = b.add("max_pool2d", [b.value(n.args[0])], _pool_args(n, True))
    return (first, first + 1)


@rule(aten.max_pool2d_with_indices_backward.default, dtypes=FLOATS, index=True)
def _max_pool_backward(b: Builder, n: torch.fx.Node) -> int:
    grad, x = n.args[0], n.args[1]
    indices = n.args[7]
    return b.add("max_pool2d_backward", [b.value(grad), b.value(x), b.value(indices)], _pool_args(n, True, offset=1))


@rule(aten.avg_pool2d.default, check=_4d, dtypes=FLOATS)
def _avg_pool(b: Builder, n: torch.fx.Node) -> int:
    return b.add("avg_pool2d", [b.value(n.args[0])], _pool_args(n, False))


@rule(aten.avg_pool2d_backward.default, dtypes=FLOATS)
def _avg_pool_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("avg_pool2d_backward", [b.value(n.args[0]), b.value(n.args[1])], _pool_args(n, False, offset=1))


@rule(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default, check=_4d, dtypes=FLOATS)
def _adaptive_pool(b: Builder, n: torch.fx.Node) -> int:
    shape = b.shape(n)
    return b.add("adaptive_avg_pool2d", [b.value(n.args[0])], {"output_size": [shape[-2], shape[-1]]})


@rule(aten._adaptive_avg_pool2d_backward.default, dtypes=FLOATS)
def _adaptive_pool_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("adaptive_avg_pool2d_backward", [b.value(n.args[0]), b.value(n.args[1])], {})


# ---- dropout -------------------------------------------------------------------------------------

_DROPOUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.bool)


def dropout_seed() -> torch.Tensor:
    """One int64 from PyTorch's default generator: the seed of a native dropout mask. The backend puts
    one before each training-mode dropout of a graph (``seed_dropouts``); it runs in PyTorch, so
    ``torch.manual_seed`` reproduces the masks."""
    return torch.randint(-(2 ** 63), 2 ** 63 - 1, (), dtype=torch.int64)


def seeded_native_dropout(x: torch.Tensor, p: float, seed: torch.Tensor) -> tuple:
    """``aten.native_dropout(x, p, True)`` whose keep mask is drawn natively from `seed`. Run in
    PyTorch (its region fell back) it is PyTorch's own dropout, from PyTorch's generator."""
    return torch.ops.aten.native_dropout.default(x, p, True)


dropout_seed.torchburn_label = "dropout seed"
seeded_native_dropout.torchburn_label = "native_dropout.default"
seeded_native_dropout.torchburn_aten = aten.native_dropout.default  # what supported_ops() reports


def seed_dropouts(gm: torch.fx.GraphModule) -> int:
    """Gives every training-mode ``native_dropout`` of a floating-point tensor a seed input drawn
    from PyTorch's generator (the only part left in PyTorch): the mask and the scaling then run
    natively, and a dropout no longer splits a region in two. Returns how many were rewritten.

    The masks are not PyTorch's (its CPU generator's Mersenne Twister stream is not reproduced; as
    with inductor, a compiled dropout is a different draw from the same distribution), but each
    element is kept with probability 1 - p, kept values are scaled by 1 / (1 - p) as PyTorch does,
    and the backward uses the forward's mask."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.native_dropout.default:
            continue
        x, p = node.args[0], node.args[1]
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
        value = meta(x) if isinstance(x, torch.fx.Node) else None
        if train is False or not isinstance(value, torch.Tensor) or value.dtype not in _DROPOUT_DTYPES[:3]:
            continue
        if not isinstance(p, (int, float)) or not 0.0 <= float(p) <= 1.0:
            continue
        with gm.graph.inserting_before(node):
            seed = gm.graph.call_function(dropout_seed, ())
        seed.meta["val"] = torch.empty((), dtype=torch.int64)
        node.target, node.args, node.kwargs = seeded_native_dropout, (x, float(p), seed), {}
        count += 1
    return count


@rule(seeded_native_dropout, dtypes=_DROPOUT_DTYPES, index=True)
def _dropout(b: Builder, n: torch.fx.Node) -> tuple:
    x, p, seed = n.args
    dtype = b.dtype(x)
    keep = b.add("dropout_mask", [b.value(x), b.value(seed)], {"p": float(p)})
    kept = b.add("binary", [b.value(x), keep], {"op": BINARY["mul"], "dtype": dtype})
    p1m = 1.0 - float(p)
    scale = 0.0 if p1m == 0.0 else 1.0 / p1m  # PyTorch's: output = input * mask * scale
    out = b.add("binary_scalar", [kept], {"op": BINARY["mul"], "dtype": dtype, "scalar": scale})
    return (out, keep)


@rule(aten.native_dropout_backward.default, dtypes=_DROPOUT_DTYPES)
def _dropout_backward(b: Builder, n: torch.fx.Node) -> int:
    grad, mask, scale = n.args
    dtype = b.dtype(n)
    kept = b.add("binary", [b.value(grad), b.value(mask)], {"op": BINARY["mul"], "dtype": dtype})
    return b.add("binary_scalar", [kept], {"op": BINARY["mul"], "dtype": dtype, "scalar": float(b.scalar(scale))})


# ---- losses --------------------------------------------------------------------------------------


@rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default, dtypes=FLOATS, index=True)
def _nll_loss(b: Builder, n: torch.fx.Node) -> tuple:
    x, target, weight, reduction, ignore_index = n.args
    inputs = [b.value(x), b.value(target)] + ([b.value(weight)] if weight is not None else [])
    first = b.add("nll_loss", inputs, {"reduction": int(reduction), "ignore_index": int(ignore_index),
                                       "has_weight": int(weight is not None)})
    return (first, first + 1)


@rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default, dtypes=FLOATS, index=True)
def _nll_loss_backward(b: Builder, n: torch.fx.Node) -> int:
    grad, x, target, weight, reduction, ignore_index, total_weight = n.args
    inputs = [b.value(grad), b.value(x), b.value(target), b.value(total_weight)]
    if weight is not None:
        inputs.append(b.value(weight))
    return b.add("nll_loss_backward", inputs, {"reduction": int(reduction), "ignore_index": int(ignore_index),
                                               "has_weight": int(weight is not None)})


def _reduction(n: torch.fx.Node, index: int, default: int = 1) -> int:
    return int(n.args[index]) if len(n.args) > index else int(n.kwargs.get("reduction", default))


@rule(aten.mse_loss.default, dtypes=FLOATS)
def _mse(b: Builder, n: torch.fx.Node) -> int:
    return b.add("mse_loss", [b.value(n.args[0]), b.value(n.args[1])], {"reduction": _reduction(n, 2)})


@rule(aten.mse_loss_backward.default, dtypes=FLOATS)
def _mse_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("mse_loss_backward", [b.value(a) for a in n.args[:3]], {"reduction": _reduction(n, 3)})


@rule(aten.smooth_l1_loss.default, dtypes=FLOATS)
def _smooth_l1(b: Builder, n: torch.fx.Node) -> int:
    beta = float(n.args[3]) if len(n.args) > 3 else float(n.kwargs.get("beta", 1.0))
    return b.add("smooth_l1_loss", [b.value(n.args[0]), b.value(n.args[1])], {"reduction": _reduction(n, 2), "beta": beta})


@rule(aten.smooth_l1_loss_backward.default, dtypes=FLOATS)
def _smooth_l1_backward(b: Builder, n: torch.fx.Node) -> int:
    return b.add("smooth_l1_loss_backward", [b.value(a) for a in n.args[:3]],
                 {"reduction": _reduction(n, 3), "beta": float(n.args[4])})


@rule(aten.binary_cross_entropy.default, dtypes=FLOATS)
def _bce(b: Builder, n: torch.fx.Node) -> int:
    weight = n.args[2] if len(n.args) > 2 else n.kwargs.get("weight")
    inputs = [b.value(n.args[0]), b.value(n.args[1])] + ([b.value(weight)] if weight is not None else [])
    return b.add("binary_cross_entropy", inputs, {"reduction": _reduction(n, 3), "has_weight": int(weight is not None)})


@rule(aten.binary_cross_entropy_backward.default, dtypes=FLOATS)
def _bce_backward(b: Builder, n: torch.fx.Node) -> int:
    weight = n.args[3] if len(n.args) > 3 else n.kwargs.get("weight")
    inputs = [b.value(a) for a in n.args[:3]] + ([b.value(weight)] if weight is not None else [])
    return b.add("binary_cross_entropy_backward", inputs,
                 {"reduction": _reduction(n, 4), "has_weight": int(weight is not None)})
