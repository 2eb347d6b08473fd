"""Decompositions applied while tracing to ATen: fused PyTorch kernels that torchburn cannot call are
rewritten into the ATen ops they are made of (which torchburn then fuses its own way).

* ``aten._transformer_encoder_layer_fwd`` — the fast path of ``nn.TransformerEncoderLayer`` in
  inference (batch_first, no mask): QKV projection, attention, output projection, residuals, layer
  norms and the feed-forward block, with the exact (erf) GELU or ReLU the layer was built with.
* ``aten._native_multi_head_attention`` — the fast path of ``nn.MultiheadAttention`` when the
  attention weights are not requested.

Anything outside those conditions returns ``NotImplemented`` and stays the fused PyTorch op.

PyTorch's own decompositions of a few activations (hardshrink, softshrink, logsigmoid, glu, prelu)
are applied too, so that they run as native elementwise programs.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int, num_heads: int,
               qkv_weight: torch.Tensor, qkv_bias: Optional[torch.Tensor], proj_weight: torch.Tensor,
               proj_bias: Optional[torch.Tensor]) -> torch.Tensor:
    """Multi-head attention on batch-first [B, T, E] inputs, as the fused kernels compute it."""
    batch, q_len, _ = query.shape
    kv_len = key.shape[1]
    head_dim = embed_dim // num_heads
    if query is key and key is value:
        q, k, v = F.linear(query, qkv_weight, qkv_bias).split(embed_dim, dim=-1)
    else:
        w_q, w_k, w_v = qkv_weight.split(embed_dim, dim=0)
        b_q, b_k, b_v = qkv_bias.split(embed_dim, dim=0) if qkv_bias is not None else (None, None, None)
        q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
    q = q.view(batch, q_len, num_heads, head_dim).transpose(1, 2)
    k = k.view(batch, kv_len, num_heads, head_dim).transpose(1, 2)
    v = v.view(batch, kv_len, num_heads, head_dim).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v)
    out = out.transpose(1, 2).reshape(batch, q_len, embed_dim)
    return F.linear(out, proj_weight, proj_bias)


def transformer_encoder_layer_fwd(src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
                                  qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                                  use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
                                  norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
                                  ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
                                  ffn_bias_2: torch.Tensor, mask: Optional[torch.Tensor] = None,
                                  mask_type: Optional[int] = None) -> Any:
    if mask is not None or src.dim() != 3 or src.is_nested or embed_dim % num_heads != 0:
        return NotImplemented
    shape = [embed_dim]

    def block(x: torch.Tensor) -> torch.Tensor:
        return _attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias)

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
        return F.linear(hidden, ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = src + block(F.layer_norm(src, shape, norm_weight_1, norm_bias_1, eps))
        return x + feed_forward(F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps))
    x = F.layer_norm(src + block(src), shape, norm_weight_1, norm_bias_1, eps)
    return F.layer_norm(x + feed_forward(x), shape, norm_weight_2, norm_bias_2, eps)


def native_multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
                                num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
                                proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: Optional[torch.Tensor] = None,
                                need_weights: bool = True, average_attn_weights: bool = True,
                                mask_type: Optional[int] = None) -> Any:
    if need_weights or mask is not None or query.dim() != 3 or query.is_nested or embed_dim % num_head != 0:
        return NotImplemented
    out = _attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias)
    return out, out.new_empty(0)


DECOMPOSITIONS = {
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
    aten._native_multi_head_attention.default: native_multi_head_attention,
}

# Activations that PyTorch itself decomposes into elementwise ATen ops (torch._decomp), which then fuse
# natively: hardshrink, softshrink, logsigmoid, glu and prelu, with the backward ops PyTorch has
# decompositions for.
_ELEMENTWISE_DECOMPOSED = [
    aten.hardshrink.default, aten.softshrink.default, aten.log_sigmoid_forward.default,
    aten.log_sigmoid_backward.default, aten.glu.default, aten.glu_backward.default, aten._prelu_kernel.default,
    aten._prelu_kernel_backward.default,
]
try:
    from torch._decomp import get_decompositions

    DECOMPOSITIONS.update(get_decompositions(_ELEMENTWISE_DECOMPOSED))
except ImportError:  # an older torch without the table: those ops stay PyTorch's
    pass
