"""turbo_torch.nn.init: PyTorch's initialisation functions (same distributions and gains; the random
streams are turbo_torch's own)."""
from __future__ import annotations

import math
from typing import Any, Optional

import turbo_torch as torch

Tensor = torch.Tensor


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    linear = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"}
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fans(tensor: Tensor) -> tuple:
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fill(tensor: Tensor, values: Tensor) -> Tensor:
    with torch.no_grad():
        tensor.copy_(values)
    return tensor


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    return _fill(tensor, torch.rand(*tensor.shape, dtype=tensor.dtype, generator=generator) * (b - a) + a)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    return _fill(tensor, torch.randn(*tensor.shape, dtype=tensor.dtype, generator=generator) * std + mean)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator: Any = None) -> Tensor:
    # inverse-CDF sampling of the truncated normal (as torch does)
    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = torch.rand(*tensor.shape, dtype=torch.float64, generator=generator) * (2 * hi - 2 * lo) + (2 * lo - 1)
    values = torch.clamp(torch.erfinv(u) * (std * math.sqrt(2.0)) + mean, a, b)
    return _fill(tensor, values.to(tensor.dtype))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, torch.full(tuple(tensor.shape), val, dtype=tensor.dtype))


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def eye_(tensor: Tensor) -> Tensor:
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, torch.eye(*tensor.shape, dtype=tensor.dtype))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    fan_in, fan_out = _fans(tensor)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator: Any = None) -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator: Any = None) -> Tensor:
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """Gram-Schmidt on a random normal matrix (a QR with positive diagonal, as torch's)."""
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = torch.randn(rows, cols, dtype=torch.float64, generator=generator)
    a = flat.t() if rows < cols else flat
    q_columns = []
    for j in range(a.shape[1]):
        v = a[:, j]
        for q in q_columns:
            v = v - (q * v).sum() * q
        q_columns.append(v / torch.norm(v))
    q = torch.stack(q_columns, 1)
    if rows < cols:
        q = q.t()
    return _fill(tensor, (q * gain).reshape(tuple(tensor.shape)).to(tensor.dtype))
