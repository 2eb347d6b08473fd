"""turbo_torch.nn.functional: PyTorch's functional layer API over the C ops (activations come straight
from the op table; layers and losses are compositions whose gradients come from the C nodes)."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import turbo_torch as torch
from torchburn import _C as _TC
from turbo_torch import _functions as _F

Tensor = torch.Tensor


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


# ---- activations ---------------------------------------------------------------------------------

relu = torch.relu
sigmoid = torch.sigmoid
tanh = torch.tanh
silu = torch.silu
mish = torch.mish
selu = torch.selu
hardsigmoid = torch.hardsigmoid
hardswish = torch.hardswish
logsigmoid = torch.logsigmoid
softsign = torch.softsign
tanhshrink = torch.tanhshrink
gelu = _F.gelu
elu = _F.elu
celu = _F.celu
leaky_relu = _F.leaky_relu
hardtanh = _F.hardtanh
relu6 = _F.relu6
softplus = _F.softplus


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return torch.where(input > threshold, input, torch.full_like(input, value))


def glu(input: Tensor, dim: int = -1) -> Tensor:
    a, b = torch.chunk(input, 2, dim)
    return a * torch.sigmoid(b)


def softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return torch.softmax(input, -1 if dim is None else dim, dtype=dtype)


def log_softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return torch.log_softmax(input, -1 if dim is None else dim, dtype=dtype)


def softmin(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    return torch.softmax(-input, -1 if dim is None else dim, dtype=dtype)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    norm = torch.norm(input, p, dim, keepdim=True)
    return input / torch.clamp(norm, min=eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    dot = (x1 * x2).sum(dim)
    n1 = torch.norm(x1, 2, dim)
    n2 = torch.norm(x2, 2, dim)
    return dot / torch.clamp(n1 * n2, min=eps) if False else dot / (torch.clamp(n1, min=eps) * torch.clamp(n2, min=eps))


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    return torch.norm(x1 - x2 + eps, p, -1, keepdim=keepdim)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    if tensor.dtype is not torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    if tensor.numel() and (int(tensor.min().item()) < 0 or int(tensor.max().item()) >= num_classes):
        raise RuntimeError("Class values must be smaller than num_classes." if int(tensor.max().item()) >= num_classes
                           else "Class values must be non-negative.")
    classes = torch.arange(num_classes)
    return (tensor.unsqueeze(-1) == classes).to(torch.int64)


# ---- layers --------------------------------------------------------------------------------------

def linear(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    fused = _TC._tt_linear(input, weight, bias)  # float32: one GEMM with the bias in its epilogue
    if fused is not None:
        return fused
    out = input @ weight.t() if weight.ndim == 2 else input @ weight
    return out if bias is None else out + bias


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    out = torch.einsum("bi,oij,bj->bo", input1.reshape(-1, input1.shape[-1]), weight, input2.reshape(-1, input2.shape[-1]))
    out = out.reshape(list(input1.shape[:-1]) + [weight.shape[0]])
    return out if bias is None else out + bias


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0
    keep = (torch.rand(*input.shape, dtype=input.dtype) >= p).to(input.dtype)
    return input * keep * (1.0 / (1.0 - p))


def embedding(input: Tensor, weight: Tensor, padding_idx: Optional[int] = None, max_norm: Any = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("turbo_torch: embedding max_norm/scale_grad_by_freq/sparse are not supported yet")
    flat = input.reshape(-1)
    out = torch.index_select(weight, 0, flat)
    if padding_idx is not None and weight.requires_grad:
        # the padding row gets no gradient: mask its rows out of the gradient path
        keep = (flat != (padding_idx % weight.shape[0])).to(weight.dtype).unsqueeze(1)
        out = out * keep + (out * (1 - keep)).detach()
    return out.reshape(list(input.shape) + [weight.shape[1]])


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    dims = tuple(range(input.ndim - len(tuple(normalized_shape)), input.ndim))
    mean = input.mean(dims, keepdim=True)
    centered = input - mean
    var = (centered * centered).mean(dims, keepdim=True)
    out = centered * torch.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(input: Tensor, normalized_shape: Sequence[int], weight: Optional[Tensor] = None,
             eps: Optional[float] = None) -> Tensor:
    dims = tuple(range(input.ndim - len(tuple(normalized_shape)), input.ndim))
    if eps is None:
        eps = {torch.float32: 1.1920928955078125e-07, torch.float64: 2.220446049250313e-16}.get(input.dtype, 1e-6)
    out = input * torch.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return out if weight is None else out * weight


def group_norm(input: Tensor, num_groups: int, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5) -> Tensor:
    n, c = input.shape[0], input.shape[1]
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(-1, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdim=True)
    out = (centered * torch.rsqrt(var + eps)).reshape(input.shape)
    shape = [1, c] + [1] * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def batch_norm(input: Tensor, running_mean: Optional[Tensor], running_var: Optional[Tensor],
               weight: Optional[Tensor] = None, bias: Optional[Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    dims = (0,) + tuple(range(2, input.ndim))
    shape = [1, input.shape[1]] + [1] * (input.ndim - 2)
    if training:
        mean = input.mean(dims)
        var = input.var(dims, correction=0)
        if running_mean is not None:
            n = input.numel() // input.shape[1]
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                running_var.mul_(1 - momentum).add_(var.detach() * (momentum * n / max(n - 1, 1)))
    else:
        mean, var = running_mean, running_var
    out = (input - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _pad_indices(mode: str, n: int, left: int, right: int, dim: int, shape: Any) -> list:
    """The source index of every output position along one dimension of a non-constant pad. A negative
    pad crops, as torch does: reflect and replicate index relative to the uncropped input (output o
    reads position o - left, reflected or clamped at the original edges); circular wraps the cropped
    part, like torch's _pad_circular."""
    size = n + left + right
    if mode == "reflect":
        if left >= n or right >= n:
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, "
                               f"but got: padding ({left}, {right}) at dimension {dim} of input {list(shape)}")
        if size < 1:
            raise RuntimeError(f"input (W: {n}) is too small. Calculated output W: {size}")
        return [abs(i) if i < n else 2 * (n - 1) - i for i in (o - left for o in range(size))]
    if mode == "replicate":
        if n == 0:
            raise RuntimeError(f"padding: input of size {list(shape)} is empty along dimension {dim}")
        if size < 1:
            raise RuntimeError(f"input (W: {n}) is too small. Calculated output W: {size}")
        return [min(max(o - left, 0), n - 1) for o in range(size)]
    if left > n or right > n:
        raise RuntimeError("Padding value causes wrapping around more than once.")
    if size < 0:
        raise RuntimeError(f"Negative padding value is resulting in an empty dimension: size {n} + pads "
                           f"({left}, {right}) along dimension {dim}")
    kept = list(range(max(-left, 0), n - max(-right, 0)))
    m, lead, trail = len(kept), max(left, 0), max(right, 0)
    if m == 0:
        return []
    return [kept[(m - lead + i) % m] for i in range(lead)] + kept + [kept[i % m] for i in range(trail)]


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: Optional[float] = None) -> Tensor:
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if mode != "constant":
        # PyTorch's rule: the last len(pad)/2 dims of a batched or unbatched 1-3-d input; every output
        # position copies an input position (one index_select per dim, so autograd adds the grads back)
        if value is not None and value != 0:
            raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument.")
        spatial = len(pad) // 2
        if spatial > 3 or input.ndim not in (spatial + 1, spatial + 2):
            raise NotImplementedError(f"Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now "
                                      f"(got a {input.ndim}-d input and {len(pad)} pad values)")
        out = input
        for i in range(spatial):
            dim = input.ndim - 1 - i
            left, right = pad[2 * i], pad[2 * i + 1]
            if left or right:
                index = _pad_indices(mode, out.shape[dim], left, right, dim, input.shape)
                out = out.index_select(dim, torch.tensor(index, dtype=torch.int64))
        return out
    out = input
    fill = 0.0 if value is None else value
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        if left < 0:
            out = torch.narrow(out, dim, -left, out.shape[dim] + left)
            left = 0
        if right < 0:
            out = torch.narrow(out, dim, 0, out.shape[dim] + right)
            right = 0
        parts = []
        if left:
            shape = list(out.shape)
            shape[dim] = left
            parts.append(torch.full(shape, fill, dtype=out.dtype))
        parts.append(out)
        if right:
            shape = list(out.shape)
            shape[dim] = right
            parts.append(torch.full(shape, fill, dtype=out.dtype))
        out = torch.cat(parts, dim) if len(parts) > 1 else out
    return out


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Optional[Tensor] = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> Tensor:
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key = torch.repeat_interleave(key, repeat, -3)
        value = torch.repeat_interleave(value, repeat, -3)
    scores = (query @ key.transpose(-2, -1)) * scale
    tq, tk = query.shape[-2], key.shape[-2]
    if is_causal:
        causal = torch.ones(tq, tk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype is torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores, -1)
    if dropout_p > 0:
        weights = dropout(weights, dropout_p)
    return weights @ value


# ---- losses --------------------------------------------------------------------------------------

def mse_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
             weight: Optional[Tensor] = None) -> Tensor:
    diff = input - target
    return _reduce(diff * diff if weight is None else weight * diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    return _reduce(torch.abs(input - target), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    diff = torch.abs(input - target)
    if beta == 0:
        return _reduce(diff, reduction)
    loss = torch.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Optional[Tensor] = None) -> Tensor:
    diff = torch.abs(input - target)
    loss = torch.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta))
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Tensor:
    log_p = torch.clamp(torch.log(input), min=-100.0)
    log_q = torch.clamp(torch.log(1 - input), min=-100.0)
    loss = -(target * log_p + (1 - target) * log_q)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Optional[Tensor] = None,
                                     size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                                     pos_weight: Optional[Tensor] = None) -> Tensor:
    log_sig = torch.logsigmoid(input)
    log_one_minus = torch.logsigmoid(-input)
    if pos_weight is not None:
        loss = -(pos_weight * target * log_sig + (1 - target) * log_one_minus)
    else:
        loss = -(target * log_sig + (1 - target) * log_one_minus)
    return _reduce(loss if weight is None else loss * weight, reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    if input.ndim == 1:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    c = input.shape[1]
    if input.ndim > 2:  # (N, C, d1, ...) -> (N*d1*..., C)
        input = torch.movedim(input, 1, -1).reshape(-1, c)
        target = target.reshape(-1)
    valid = target != ignore_index
    safe_target = torch.where(valid, target, torch.zeros_like(target))
    if bool(((safe_target < 0) | (safe_target >= c)).any()):
        raise IndexError(f"Target {int(safe_target.max().item())} is out of bounds.")
    picked = -torch.gather(input, 1, safe_target.unsqueeze(1)).squeeze(1)
    w = torch.ones(c, dtype=input.dtype) if weight is None else weight
    sample_w = torch.index_select(w, 0, safe_target) * valid.to(input.dtype)
    loss = picked * sample_w
    if reduction == "mean":
        return loss.sum() / sample_w.sum()
    if reduction == "none" and target.ndim:
        return loss
    return _reduce(loss, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Optional[Tensor] = None, size_average: Any = None,
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    class_dim = 0 if input.ndim == 1 else 1
    log_p = torch.log_softmax(input, class_dim)
    c = input.shape[class_dim]
    if target.dtype.is_floating_point:  # class probabilities
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / c
        shape = [1] * input.ndim
        shape[class_dim] = c
        per = -(log_p * target * (weight.reshape(shape) if weight is not None else 1)).sum(class_dim)
        if reduction == "mean":
            return per.sum() / (per.numel() // 1 if per.ndim else 1) if per.ndim else per
        return _reduce(per, reduction)
    nll = nll_loss(log_p, target, weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return nll
    # smoothing: mix with the mean of -log p over classes (weighted), ignoring ignore_index rows
    lp = log_p if log_p.ndim <= 2 else torch.movedim(log_p, 1, -1).reshape(-1, c)
    t = target.reshape(-1) if log_p.ndim > 2 else target
    if lp.ndim == 1:
        lp, t = lp.unsqueeze(0), t.unsqueeze(0)
    valid = (t != ignore_index).to(input.dtype)
    w = torch.ones(c, dtype=input.dtype) if weight is None else weight
    smooth = -(lp * w).sum(1) * valid / c
    if reduction == "mean":
        safe_t = torch.where(t != ignore_index, t, torch.zeros_like(t))
        denom = (torch.index_select(w, 0, safe_t) * valid).sum() if weight is not None else valid.sum()
        smooth_term = smooth.sum() / denom
    elif reduction == "sum":
        smooth_term = smooth.sum()
    else:
        smooth_term = smooth.reshape(target.shape) if target.ndim else smooth.reshape(())
    return (1 - label_smoothing) * nll + label_smoothing * smooth_term


def kl_div(input: Tensor, target: Tensor, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    loss = torch.exp(target) * (target - input) if log_target else torch.xlogy(target, target) - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    eps = 1e-12
    cos = (input1 * input2).sum(-1) / torch.sqrt(((input1 * input1).sum(-1) + eps) * ((input2 * input2).sum(-1) + eps))
    zero = torch.zeros_like(cos)
    loss = torch.where(target == 1, 1 - cos, torch.maximum(zero, cos - margin))
    return _reduce(loss, reduction)


# ---- convolution and pooling (float32 / float64 C kernels with autograd) ---------------------------

from torchburn import _C as _TC  # noqa: E402

_NN_MAX_POOL2D, _NN_AVG_POOL2D, _NN_ADAPTIVE_AVG_POOL2D = 1, 2, 3


def _pair(v: Any) -> tuple:
    return (v, v) if isinstance(v, int) else tuple(v)


def _same_padding(kernel: tuple, dilation: tuple) -> tuple:
    """padding='same' as torch splits it: total // 2 on both sides, and the odd element of an even
    effective kernel as extra padding at the bottom/right ((top, left) or (top, left, extra_h, extra_w))."""
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    if any(t % 2 for t in totals):
        return tuple(t // 2 for t in totals) + tuple(t % 2 for t in totals)
    return tuple(t // 2 for t in totals)


def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    dilation = _pair(dilation)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            if _pair(stride) != (1, 1):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            padding = _same_padding(tuple(weight.shape[2:]), dilation)
        else:
            raise RuntimeError(f"Invalid padding string '{padding}'")
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    out = _TC._tt_conv2d(x, weight, bias, _pair(stride), _pair(padding), dilation, groups)
    return out if batched else out.squeeze(0)


def conv1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    def one(v: Any) -> int:
        return v if isinstance(v, int) else v[0]
    if isinstance(padding, str):
        pad2: Any = padding
    else:
        pad2 = (0, one(padding))
    batched = input.ndim == 3
    x = (input if batched else input.unsqueeze(0)).unsqueeze(2)
    out = conv2d(x, weight.unsqueeze(2), bias, (1, one(stride)), pad2, (1, one(dilation)), groups).squeeze(2)
    return out if batched else out.squeeze(0)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """Runs in C as the input-gradient of a convolution (src/pyext/eager_nn.c); float32."""
    if input.ndim not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got input of "
                           f"size: {list(input.shape)}")
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    out = _TC._tt_conv_transpose2d(x, weight, bias, _pair(stride), _pair(padding), _pair(output_padding), groups,
                                   _pair(dilation))
    return out if batched else out.squeeze(0)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    def one(v: Any) -> int:
        return v if isinstance(v, int) else v[0]
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to conv_transpose1d, but got input of "
                           f"size: {list(input.shape)}")
    batched = input.ndim == 3
    x = (input if batched else input.unsqueeze(0)).unsqueeze(2)
    out = conv_transpose2d(x, weight.unsqueeze(2), bias, (1, one(stride)), (0, one(padding)),
                           (0, one(output_padding)), groups, (1, one(dilation))).squeeze(2)
    return out if batched else out.squeeze(0)


_INTERPOLATE_MODES = {"nearest": 0, "nearest-exact": 1, "linear": 2, "bilinear": 2}


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None,
                antialias: bool = False) -> Tensor:
    """Resamples [N, C, W] (nearest, nearest-exact, linear) or [N, C, H, W] (nearest, nearest-exact, bilinear)
    float32/float64 input in C (src/pyext/eager_nn_resize.c) with torch's index rules and backward.

    >>> interpolate(torch.ones(1, 1, 2, 2), scale_factor=2, mode="bilinear").shape
    turbo_torch.Size([1, 1, 4, 4])
    """
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {list(input.shape[2:])} and output size of {size}. "
                                 f"Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                                 f"(o1, o2, ...,oK) format.")
            output_size = [int(v) for v in size]
        else:
            output_size = [int(size)] * dim
        scales: list = [None] * dim
    elif scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got "
                                 f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of "
                                 f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) "
                                 f"format and scale_factor in (s1, s2, ...,sK) format.")
            scales = [float(v) for v in scale_factor]
        else:
            scales = [float(scale_factor)] * dim
        output_size = [int(input.shape[2 + i] * scales[i]) for i in range(dim)]
        if recompute_scale_factor:
            scales = [None] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if antialias:
        raise NotImplementedError("turbo_torch: interpolate(antialias=True) is not supported yet")
    if mode == "linear" and input.ndim != 3:
        raise NotImplementedError(f"Got {input.ndim}D input, but linear mode needs 3D input")
    if mode == "bilinear" and input.ndim != 4:
        raise NotImplementedError(f"Got {input.ndim}D input, but bilinear mode needs 4D input")
    if mode not in _INTERPOLATE_MODES:
        raise NotImplementedError(f"turbo_torch: interpolate mode '{mode}' is not supported yet (nearest, "
                                  f"nearest-exact, linear, bilinear are)")
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"turbo_torch: interpolate takes 3-D or 4-D input, got {input.ndim}-D")
    return _TC._tt_interpolate(input, _INTERPOLATE_MODES[mode], bool(align_corners), tuple(output_size),
                               tuple(scales))


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: Optional[bool] = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    stride = kernel_size if stride is None or stride == [] else stride
    values, indices = _TC._tt_pool2d(_NN_MAX_POOL2D, input, _pair(kernel_size), _pair(stride), _pair(padding),
                                      _pair(dilation), ceil_mode, True, None)
    return (values, indices) if return_indices else values


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    def one(v: Any) -> int:
        return v if isinstance(v, int) else v[0]
    stride = kernel_size if stride is None else stride
    result = max_pool2d(input.unsqueeze(-2), (1, one(kernel_size)), (1, one(stride)), (0, one(padding)),
                        (1, one(dilation)), ceil_mode, return_indices)
    if return_indices:
        return result[0].squeeze(-2), result[1].squeeze(-2)
    return result.squeeze(-2)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Optional[int] = None) -> Tensor:
    stride = kernel_size if stride is None or stride == [] else stride
    return _TC._tt_pool2d(_NN_AVG_POOL2D, input, _pair(kernel_size), _pair(stride), _pair(padding), (1, 1),
                          ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    size = _pair(output_size)
    size = tuple(input.shape[-2 + i] if s is None else s for i, s in enumerate(size))
    return _TC._tt_pool2d(_NN_ADAPTIVE_AVG_POOL2D, input, size, 1, 0, 1, False, True, None)
