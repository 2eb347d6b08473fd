"""Attention, transformer and recurrent layers with PyTorch's parameter names and layouts (so state
dicts move between the two), composed from the C ops."""
from __future__ import annotations

import copy
import math
from typing import Any, Optional, Tuple

import turbo_torch as torch
from torchburn import _C

from .. import functional as F
from .. import init
from .layers import Dropout, LayerNorm, Linear, ModuleList
from .module import Module, Parameter


class NonDynamicallyQuantizableLinear(Linear):
    pass


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: Optional[int] = None,
                 vdim: Optional[int] = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        # torch's registration order (state dict keys): packed or separate in-projections, bias, out_proj, bias_k/v
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(torch.empty(3 * embed_dim, embed_dim, dtype=dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(torch.empty(embed_dim, embed_dim, dtype=dtype))
            self.k_proj_weight = Parameter(torch.empty(embed_dim, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(torch.empty(embed_dim, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(torch.zeros(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(torch.empty(1, 1, embed_dim, dtype=dtype))
            self.bias_v = Parameter(torch.empty(1, 1, embed_dim, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        for weight in ([self.in_proj_weight] if self._qkv_same_embed_dim else
                       [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]):
            init.xavier_uniform_(weight)
        if bias:
            init.constant_(self.out_proj.bias, 0.0)
        if add_bias_kv:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None, need_weights: bool = True,
                attn_mask: Any = None, average_attn_weights: bool = True, is_causal: bool = False) -> Tuple[Any, Any]:
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        tq, batch, e = query.shape
        tk = key.shape[0]
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = torch.chunk(self.in_proj_weight, 3, 0)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b_q = b_k = b_v = None
        if self.in_proj_bias is not None:
            b_q, b_k, b_v = torch.chunk(self.in_proj_bias, 3, 0)
        h, d = self.num_heads, self.head_dim
        dtype = query.dtype
        if is_causal and attn_mask is None:
            attn_mask = torch.ones(tq, tk, dtype=torch.bool).triu(1)
        # masks as additive floats ([Tq, Tk] or [B*H, Tq, Tk]; [B, Tk]), padded with 0 for every appended key
        am = kp = None
        if attn_mask is not None:
            am = attn_mask
            if am.dtype is torch.bool:
                am = torch.zeros(tuple(am.shape), dtype=dtype).masked_fill(am, float("-inf"))
        if key_padding_mask is not None:
            kp = key_padding_mask
            if kp.dtype is torch.bool:
                kp = torch.zeros(tuple(kp.shape), dtype=dtype).masked_fill(kp, float("-inf"))
        q = F.linear(query, w_q, b_q).reshape(tq, batch * h, d).transpose(0, 1)  # [B*H, Tq, D]
        k = F.linear(key, w_k, b_k)  # [Tk, B, E]
        v = F.linear(value, w_v, b_v)
        if self.bias_k is not None and self.bias_v is not None:  # one more key/value: the learned biases
            k = torch.cat([k, self.bias_k.expand(1, batch, e)], 0)
            v = torch.cat([v, self.bias_v.expand(1, batch, e)], 0)
            tk += 1
            am = None if am is None else F.pad(am, (0, 1))
            kp = None if kp is None else F.pad(kp, (0, 1))
        k = k.reshape(tk, batch * h, d).transpose(0, 1)  # [B*H, Tk, D]
        v = v.reshape(tk, batch * h, d).transpose(0, 1)
        if self.add_zero_attn:  # and one more of zeros
            zeros = torch.zeros(batch * h, 1, d, dtype=k.dtype)
            k = torch.cat([k, zeros], 1)
            v = torch.cat([v, zeros], 1)
            tk += 1
            am = None if am is None else F.pad(am, (0, 1))
            kp = None if kp is None else F.pad(kp, (0, 1))
        scores = (q @ k.transpose(1, 2)) * (1.0 / math.sqrt(d))  # [B*H, Tq, Tk]
        mask = None
        if am is not None:
            mask = am if am.ndim == 2 else am.reshape(batch * h, tq, tk)
        if kp is not None:
            kp = kp.reshape(batch, 1, 1, tk).expand(batch, h, 1, tk).reshape(batch * h, 1, tk)
            mask = kp if mask is None else mask + kp
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, -1)
        if self.dropout > 0 and self.training:
            weights = F.dropout(weights, self.dropout)
        out = (weights @ v).transpose(0, 1).reshape(tq * batch, e)
        out = self.out_proj(out).reshape(tq, batch, e)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        if not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        w = weights.reshape(batch, h, tq, tk)
        if average_attn_weights:
            w = w.mean(1)
        if not batched:
            w = w.squeeze(0)
        return out, w


def _relu(x: Any) -> Any:
    return torch.relu(x)  # looked up per call, so turbo_torch.compile's recording entry point is seen


def _gelu(x: Any) -> Any:
    return F.gelu(x)


def _activation_fn(activation: Any) -> Any:
    if callable(activation):
        return activation
    if activation == "relu":
        return _relu
    if activation == "gelu":
        return _gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        object.__setattr__(self, "activation_relu_or_gelu", 1 if activation == "relu" else 2 if activation == "gelu" else 0)
        object.__setattr__(self, "activation", _activation_fn(activation))

    def _sa_block(self, x: Any, attn_mask: Any, key_padding_mask: Any, is_causal: bool) -> Any:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Any) -> Any:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None, is_causal: bool = False) -> Any:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x


class TransformerDecoderLayer(Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Any = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        object.__setattr__(self, "activation", _activation_fn(activation))

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Any:
        def sa(x: Any) -> Any:
            return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                                need_weights=False, is_causal=tgt_is_causal)[0])

        def mha(x: Any) -> Any:
            return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=memory_mask,
                                                     key_padding_mask=memory_key_padding_mask, need_weights=False,
                                                     is_causal=memory_is_causal)[0])

        def ff(x: Any) -> Any:
            return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            x = x + ff(self.norm3(x))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + mha(x))
            x = self.norm3(x + ff(x))
        return x


class TransformerEncoder(Module):
    def __init__(self, encoder_layer: Module, num_layers: int, norm: Optional[Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Any, mask: Any = None, src_key_padding_mask: Any = None, is_causal: Optional[bool] = None) -> Any:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out


class TransformerDecoder(Module):
    def __init__(self, decoder_layer: Module, num_layers: int, norm: Optional[Module] = None) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None, tgt_is_causal: Optional[bool] = None,
                memory_is_causal: bool = False) -> Any:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
                        bool(tgt_is_causal), memory_is_causal)
        return self.norm(out) if self.norm is not None else out


# ---- recurrent ---------------------------------------------------------------------------------------

class RNNBase(Module):
    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 nonlinearity: str = "tanh", device: Any = None, dtype: Any = None, proj_size: int = 0) -> None:
        super().__init__()
        if proj_size and self._gates != 4:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, float(dropout), bidirectional
        self.nonlinearity, self.proj_size = nonlinearity, proj_size
        directions = 2 if bidirectional else 1
        real_hidden = proj_size if proj_size > 0 else hidden_size  # the width of h (LSTM: projected)
        names = []
        for layer in range(num_layers):
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                width = input_size if layer == 0 else real_hidden * directions
                gates = self._gates * hidden_size
                setattr(self, "weight_ih" + suffix, Parameter(torch.empty(gates, width, dtype=dtype)))
                setattr(self, "weight_hh" + suffix, Parameter(torch.empty(gates, real_hidden, dtype=dtype)))
                names += ["weight_ih" + suffix, "weight_hh" + suffix]
                if bias:
                    setattr(self, "bias_ih" + suffix, Parameter(torch.empty(gates, dtype=dtype)))
                    setattr(self, "bias_hh" + suffix, Parameter(torch.empty(gates, dtype=dtype)))
                    names += ["bias_ih" + suffix, "bias_hh" + suffix]
                if proj_size > 0:
                    setattr(self, "weight_hr" + suffix, Parameter(torch.empty(proj_size, hidden_size, dtype=dtype)))
                    names += ["weight_hr" + suffix]
        object.__setattr__(self, "_flat_weights_names", names)
        stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _cell(self, x: Any, state: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Any:
        raise NotImplementedError

    def _zero_state(self, batch: int, dtype: Any) -> Any:
        directions = 2 if self.bidirectional else 1
        return torch.zeros(self.num_layers * directions, batch, self.hidden_size, dtype=dtype)

    def forward(self, input: Any, hx: Any = None) -> Any:
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        seq, batch = x.shape[0], x.shape[1]
        state = self._initial_state(hx, batch, x.dtype, batched)
        directions = 2 if self.bidirectional else 1
        finals = []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                w_ih, w_hh = getattr(self, "weight_ih" + suffix), getattr(self, "weight_hh" + suffix)
                b_ih = getattr(self, "bias_ih" + suffix) if self.bias else None
                b_hh = getattr(self, "bias_hh" + suffix) if self.bias else None
                projection = {"w_hr": getattr(self, "weight_hr" + suffix)} if self.proj_size > 0 else {}
                s = self._select_state(state, layer * directions + direction)
                out, s = self._run_layer(layer_input, s, w_ih, w_hh, b_ih, b_hh, bool(direction), **projection)
                outputs.append(out)
                finals.append(s)
            layer_input = outputs[0] if directions == 1 else torch.cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout)
        output = layer_input
        if batched and self.batch_first:
            output = output.transpose(0, 1)
        final = self._stack_states(finals)
        if not batched:
            output = output.squeeze(1)
            final = self._squeeze_state(final)
        return output, final

    def _run_layer(self, x: Any, s: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, reverse: bool,
                   **projection: Any) -> Any:
        """One layer and direction over the sequence x [T, B, I]: (outputs [T, B, H], final state)."""
        seq = x.shape[0]
        outs = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            s = self._cell(x[t], s, w_ih, w_hh, b_ih, b_hh, **projection)
            outs[t] = self._output(s)
        return torch.stack(outs, 0), s

    # plain RNN/GRU: the state is one tensor [layers*dirs, B, H]
    def _initial_state(self, hx: Any, batch: int, dtype: Any, batched: bool) -> Any:
        if hx is None:
            return self._zero_state(batch, dtype)
        return hx if batched else hx.unsqueeze(1)

    def _select_state(self, state: Any, k: int) -> Any:
        return state[k]

    def _output(self, s: Any) -> Any:
        return s

    def _stack_states(self, finals: list) -> Any:
        return torch.stack(finals, 0)

    def _squeeze_state(self, state: Any) -> Any:
        return state.squeeze(1)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


class RNN(RNNBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")

    def _cell(self, x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Any:
        pre = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
        return torch.tanh(pre) if self.nonlinearity == "tanh" else torch.relu(pre)



class GRU(RNNBase):
    _gates = 3

    def _cell(self, x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Any:
        gi = F.linear(x, w_ih, b_ih)
        gh = F.linear(h, w_hh, b_hh)
        i_r, i_z, i_n = torch.chunk(gi, 3, -1)
        h_r, h_z, h_n = torch.chunk(gh, 3, -1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


class LSTM(RNNBase):
    _gates = 4

    def _cell(self, x: Any, state: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, w_hr: Any = None) -> Any:
        """One step: h [B, P or H], c [B, H]; with proj_size, h = (o * tanh(c)) @ w_hr^T."""
        h, c = state
        gates = F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
        i, f, g, o = torch.chunk(gates, 4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h if w_hr is None else F.linear(h, w_hr), c)

    def _run_layer(self, x: Any, s: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any, reverse: bool,
                   **projection: Any) -> Any:
        # float32 forward direction without projection: the whole layer is one C op and one autograd node
        # (eager_rnn.c); it returns Y [T + 1, B, H] with the outputs h_1..h_T in Y[:T] and c_T in Y[T]
        y = None if reverse or projection else _C._tt_lstm_layer(x, s[0], s[1], w_ih, w_hh, b_ih, b_hh)
        if y is None:
            return super()._run_layer(x, s, w_ih, w_hh, b_ih, b_hh, reverse, **projection)
        seq = x.shape[0]
        return y[:seq], (y[seq - 1], y[seq])

    def _initial_state(self, hx: Any, batch: int, dtype: Any, batched: bool) -> Any:
        if hx is None:
            zero = self._zero_state(batch, dtype)
            if self.proj_size > 0:  # h is projected: [layers * dirs, B, proj_size]
                return (zero[..., :self.proj_size].contiguous(), zero)
            return (zero, zero)
        h, c = hx
        return (h, c) if batched else (h.unsqueeze(1), c.unsqueeze(1))

    def _select_state(self, state: Any, k: int) -> Any:
        return (state[0][k], state[1][k])

    def _output(self, s: Any) -> Any:
        return s[0]

    def _stack_states(self, finals: list) -> Any:
        return (torch.stack([f[0] for f in finals], 0), torch.stack([f[1] for f in finals], 0))

    def _squeeze_state(self, state: Any) -> Any:
        return (state[0].squeeze(1), state[1].squeeze(1))


class RNNCellBase(Module):
    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias, self.nonlinearity = input_size, hidden_size, bias, nonlinearity
        gates = self._gates * hidden_size
        self.weight_ih = Parameter(torch.empty(gates, input_size, dtype=dtype))
        self.weight_hh = Parameter(torch.empty(gates, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(torch.empty(gates, dtype=dtype))
            self.bias_hh = Parameter(torch.empty(gates, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            text += ", bias=False"
        return text


class LSTMCell(RNNCellBase):
    _gates = 4

    def forward(self, input: Any, hx: Any = None) -> Any:
        if hx is None:
            zero = torch.zeros(*(list(input.shape[:-1]) + [self.hidden_size]), dtype=input.dtype)
            hx = (zero, zero)
        return LSTM._cell(self, input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


class GRUCell(RNNCellBase):
    _gates = 3

    def forward(self, input: Any, hx: Any = None) -> Any:
        if hx is None:
            hx = torch.zeros(*(list(input.shape[:-1]) + [self.hidden_size]), dtype=input.dtype)
        return GRU._cell(self, input, hx, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


class RNNCell(RNNCellBase):
    def forward(self, input: Any, hx: Any = None) -> Any:
        if hx is None:
            hx = torch.zeros(*(list(input.shape[:-1]) + [self.hidden_size]), dtype=input.dtype)
        pre = F.linear(input, self.weight_ih, self.bias_ih) + F.linear(hx, self.weight_hh, self.bias_hh)
        return torch.tanh(pre) if self.nonlinearity == "tanh" else torch.relu(pre)
