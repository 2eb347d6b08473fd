"""Quantized weights for CPU inference: int8 per output row and grouped int4, their matmul kernels,
and :class:`QuantizedLinear`, a drop-in ``torch.nn.Linear`` replacement.

Formats (see ``docs/quantization.md`` for byte diagrams and tolerances):

* **int8**: ``q`` int8 ``[N, K]`` and ``scales`` float32 ``[N]``; ``w ~ q * scales[:, None]`` with
  ``scales = max|w| / 127`` per row and ``q = clamp(round(w / s), -127, 127)``.
* **int4 grouped**: ``packed`` uint8 ``[N, K/2]`` and ``scales`` float32 ``[N, K/group_size]``; per group of
  ``group_size`` consecutive input features ``s = max|w| / 7``, ``q = clamp(round(w / s), -8, 7)``, stored as
  the nibble ``q + 8``; element ``2j`` is the low nibble of byte ``j``, element ``2j + 1`` the high one.

NaN weights propagate (their whole group dequantizes to NaN); infinite weights are refused with a
``ValueError`` naming the element. Everything runs on the CPU; CUDA tensors raise ``TypeError``.

Example::

    >>> import torch, torchburn as tb
    >>> weight = torch.randn(1024, 4096)
    >>> packed, scales = tb.quantize_weight_int4_grouped(weight, group_size=64)
    >>> packed.shape, scales.shape
    (torch.Size([1024, 2048]), torch.Size([1024, 64]))
    >>> layer = tb.QuantizedLinear.from_float(torch.nn.Linear(4096, 1024), quant_type="int4", group_size=64)
    >>> layer(torch.randn(8, 4096)).shape
    torch.Size([8, 1024])

The matmul is the custom op ``torch.ops.torchburn.quant_linear``, so modules using it run in eager mode,
under ``torch.compile`` (any backend: Inductor calls it as an external kernel) and with autograd (the
input and bias get gradients; the quantized weights are constants).
"""
from __future__ import annotations

import contextlib
import fnmatch
import warnings
from typing import Iterator, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from . import _C

__all__ = [
    "GROUP_SIZES",
    "quantize_weight_int8",
    "quantize_weight_int4_grouped",
    "quantize_weight_int4",
    "dequantize_weight_int8",
    "dequantize_weight_int4_grouped",
    "w8a32_linear",
    "w4a32_grouped_linear",
    "QuantizedLinear",
    "quantize_model",
    "available_kernels",
    "use_kernel",
]

#: The int4 group sizes the kernels support.
GROUP_SIZES = (32, 64, 128, 256)
_ACTIVATIONS = ("f32", "int8")
_kernel_name = "auto"


# ---- argument checks -------------------------------------------------------------------------------


def _as_tensor(value, name: str, fn: str) -> Tensor:
    if not isinstance(value, Tensor):
        try:
            value = torch.as_tensor(value)
        except Exception as error:  # noqa: BLE001 - re-raised with the argument named
            raise TypeError(f"{fn}: {name} must be a tensor or array, got {type(value).__name__}") from error
    if value.device.type != "cpu":
        raise TypeError(
            f"{fn}: {name} is on device '{value.device}'; torchburn's quantized kernels run on the CPU "
            f"(move it with .cpu())"
        )
    return value


def _float_weight(weight, fn: str) -> Tensor:
    weight = _as_tensor(weight, "weight", fn)
    if weight.dim() != 2:
        raise ValueError(f"{fn}: weight must be 2-D [out_features, in_features], got shape {tuple(weight.shape)}")
    if not weight.is_floating_point():
        raise TypeError(f"{fn}: weight must be a floating-point tensor, got {weight.dtype}")
    return weight.detach().to(torch.float32).contiguous()


def _check_group_size(group_size, fn: str) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in GROUP_SIZES:
        raise ValueError(f"{fn}: group_size must be one of {GROUP_SIZES}, got {group_size!r}")
    return group_size


def _check_quantized(q, scales, group_size: int, fn: str) -> Tuple[Tensor, Tensor]:
    """Validates (q, scales) of one format; group_size 0 means int8. Returns contiguous CPU tensors
    (scales as float32)."""
    if not isinstance(q, Tensor) or q.device.type != "cpu":
        q = _as_tensor(q, "q" if fn.startswith("dequantize") else "weight", fn)
    if not isinstance(scales, Tensor) or scales.device.type != "cpu":
        scales = _as_tensor(scales, "scales", fn)
    int8 = group_size == 0
    if q.dtype != (torch.int8 if int8 else torch.uint8):
        what = "int8 [N, K]" if int8 else "uint8 [N, K/2] (two int4 per byte)"
        raise TypeError(f"{fn}: quantized weight must be {what}, got dtype {q.dtype}")
    if q.dim() != 2:
        raise ValueError(f"{fn}: quantized weight must be 2-D, got shape {tuple(q.shape)}")
    n, width = q.shape
    k = width if int8 else 2 * width
    if not int8 and k % group_size != 0:
        raise ValueError(
            f"{fn}: K = {k} (packed width {width} x 2) is not a multiple of group_size = {group_size}"
        )
    want = (n,) if int8 else (n, k // group_size)
    if scales.shape != want:
        raise ValueError(
            f"{fn}: scales must have shape {want} for a weight of {n} x {k}"
            f"{'' if int8 else f' with group_size={group_size}'}, got {tuple(scales.shape)}"
        )
    if scales.dtype != torch.float32:
        if not scales.is_floating_point():
            raise TypeError(f"{fn}: scales must be floating point (float32), got {scales.dtype}")
        scales = scales.to(torch.float32)
    if not q.is_contiguous():
        q = q.contiguous()
    if not scales.is_contiguous():
        scales = scales.contiguous()
    return q, scales


# ---- quantize / dequantize --------------------------------------------------------------------------


def quantize_weight_int8(w) -> Tuple[Tensor, Tensor]:
    """Quantizes a ``[N, K]`` float weight to int8 per output row.

    Returns ``(q, scales)``: ``q`` int8 ``[N, K]``, ``scales`` float32 ``[N]``.

    >>> q, s = quantize_weight_int8(torch.tensor([[0.5, -1.0, 0.25]]))
    >>> q.tolist(), round(s.item() * 127, 6)
    ([[64, -127, 32]], 1.0)
    """
    w = _float_weight(w, "quantize_weight_int8")
    n, k = w.shape
    q = torch.empty((n, k), dtype=torch.int8)
    scales = torch.empty((n,), dtype=torch.float32)
    _C.quant_quantize(w, q, scales, 0)
    return q, scales


def quantize_weight_int4_grouped(weight, group_size: int = 64) -> Tuple[Tensor, Tensor]:
    """Quantizes a ``[N, K]`` float weight to symmetric int4 in groups of ``group_size`` along K.

    Returns ``(packed, scales)``: ``packed`` uint8 ``[N, K/2]`` (element ``2j`` in the low nibble of byte
    ``j``, stored as ``q + 8``), ``scales`` float32 ``[N, K/group_size]``. ``K`` must be a multiple of
    ``group_size`` (32, 64, 128 or 256).

    >>> packed, scales = quantize_weight_int4_grouped(torch.randn(4, 64), group_size=32)
    >>> packed.dtype, tuple(packed.shape), tuple(scales.shape)
    (torch.uint8, (4, 32), (4, 2))
    """
    group_size = _check_group_size(group_size, "quantize_weight_int4_grouped")
    w = _float_weight(weight, "quantize_weight_int4_grouped")
    n, k = w.shape
    if k % group_size != 0:
        raise ValueError(
            f"quantize_weight_int4_grouped: in_features K = {k} is not a multiple of group_size = {group_size}; "
            f"pick a group size that divides K or pad the weight's columns with zeros"
        )
    packed = torch.empty((n, k // 2), dtype=torch.uint8)
    scales = torch.empty((n, k // group_size), dtype=torch.float32)
    _C.quant_quantize(w, packed, scales, group_size)
    return packed, scales


def quantize_weight_int4(w) -> Tuple[Tensor, Tensor]:
    """Quantizes a ``[N, K]`` float weight to symmetric int4 per output channel (TorchBurn's name): one
    scale per row, ``s = max|w| / 7``, ``q = clamp(round(w / s), -8, 7)`` (round half to even), packed
    like the grouped format (``q + 8``, element ``2j`` in the low nibble of byte ``j``). ``K`` must be
    even. The result equals :func:`quantize_weight_int4_grouped` with ``group_size = K``, with the
    scales as ``[N]``.

    >>> packed, scales = quantize_weight_int4(torch.tensor([[0.7, -1.4, 0.1, 0.0]]))
    >>> packed.tolist(), round(scales.item() * 7, 6)
    ([[28, 136]], 1.4)
    """
    w = _float_weight(w, "quantize_weight_int4")
    n, k = w.shape
    if k % 2 != 0:
        raise ValueError(f"quantize_weight_int4: in_features K = {k} must be even (two int4 values per byte)")
    if torch.isinf(w).any():
        row, col = (int(i) for i in torch.nonzero(torch.isinf(w))[0])
        raise ValueError(f"quantize_weight_int4: weight[{row}, {col}] is infinite; int4 cannot represent it")
    scales = w.abs().amax(dim=1) / 7.0 if k else torch.zeros(n)
    nan_rows = torch.isnan(w).any(dim=1)
    scales = torch.where(nan_rows, torch.full_like(scales, float("nan")), scales)
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))[:, None]
    q = torch.where(scales[:, None] > 0, torch.round(w / safe).clamp(-8, 7), torch.zeros_like(w))
    q = torch.nan_to_num(q, nan=0.0).to(torch.int16) + 8
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    return packed.contiguous(), scales.contiguous()


def dequantize_weight_int8(q, scales) -> Tensor:
    """The float32 ``[N, K]`` weight ``q * scales[:, None]`` (one f32 rounding)."""
    q, scales = _check_quantized(q, scales, 0, "dequantize_weight_int8")
    w = torch.empty(tuple(q.shape), dtype=torch.float32)
    _C.quant_dequantize(q, scales, w, 0)
    return w


def dequantize_weight_int4_grouped(packed, scales, group_size: int = 64) -> Tensor:
    """The float32 ``[N, K]`` weight ``(nibble - 8) * scale`` of a grouped-int4 weight."""
    group_size = _check_group_size(group_size, "dequantize_weight_int4_grouped")
    packed, scales = _check_quantized(packed, scales, group_size, "dequantize_weight_int4_grouped")
    w = torch.empty((packed.shape[0], packed.shape[1] * 2), dtype=torch.float32)
    _C.quant_dequantize(packed, scales, w, group_size)
    return w


# ---- the matmul custom op ---------------------------------------------------------------------------


def _quant_linear_impl(
    x: Tensor, weight: Tensor, scales: Tensor, bias: Optional[Tensor], group_size: int, act_int8: bool
) -> Tensor:
    fn = "quant_linear"
    if not isinstance(x, Tensor) or x.device.type != "cpu":
        x = _as_tensor(x, "input", fn)
    if not x.is_floating_point():
        raise TypeError(f"{fn}: input must be floating point, got {x.dtype}")
    weight, scales = _check_quantized(weight, scales, group_size, fn)
    n = weight.shape[0]
    k = weight.shape[1] if group_size == 0 else 2 * weight.shape[1]
    if x.dim() == 0 or x.shape[-1] != k:
        raise ValueError(f"{fn}: input has shape {tuple(x.shape)}, its last dim must be in_features = {k}")
    if bias is not None:
        if not isinstance(bias, Tensor) or bias.device.type != "cpu":
            bias = _as_tensor(bias, "bias", fn)
        if bias.shape != (n,):
            raise ValueError(f"{fn}: bias must have shape ({n},), got {tuple(bias.shape)}")
        if bias.dtype != torch.float32 or not bias.is_contiguous():
            bias = bias.to(torch.float32).contiguous()
    x2 = x if x.dim() == 2 else x.reshape(-1, k)
    if x2.dtype != torch.float32:
        x2 = x2.to(torch.float32)
    rows = x2.shape[0]
    if rows > 1 and (x2.stride(1) != 1 or x2.stride(0) < k):
        x2 = x2.contiguous()
    out = torch.empty((rows, n), dtype=torch.float32)
    if rows > 0 and n > 0 and k > 0:
        # Addresses, not DLPack: everything above was checked, and the import would cost more than a
        # small layer's product (see _C.quant_linear_raw).
        _C.quant_linear_raw(
            x2.data_ptr(), rows, k, x2.stride(0), weight.data_ptr(), n, scales.data_ptr(),
            0 if bias is None else bias.data_ptr(), out.data_ptr(), n, group_size, act_int8, _kernel_name,
        )
    elif rows > 0 and n > 0:  # K == 0: an empty sum
        out.copy_(bias.expand(rows, n) if bias is not None else torch.zeros(rows, n))
    if x.dim() != 2:
        out = out.reshape(*x.shape[:-1], n)
    return out if x.dtype == torch.float32 else out.to(x.dtype)


def _linear(x, weight, scales, bias, group_size: int, act_int8: bool) -> Tensor:
    """Runs the custom op when something needs it (tracing, compiling, autograd), else its body
    directly: the op's Python dispatch alone costs ~15 us per call."""
    if (
        torch.compiler.is_compiling()
        or torch.jit.is_tracing()
        or torch._C._are_functorch_transforms_active()
        or (torch.is_grad_enabled() and (getattr(x, "requires_grad", False) or getattr(bias, "requires_grad", False)))
        or any(
            isinstance(t, Tensor) and type(t) is not Tensor and not isinstance(t, nn.Parameter)
            for t in (x, weight, scales, bias)
        )
    ):
        return quant_linear(x, weight, scales, bias, group_size, act_int8)
    return _quant_linear_impl(x, weight, scales, bias, group_size, act_int8)


@torch.library.custom_op("torchburn::quant_linear", mutates_args=())
def quant_linear(
    x: Tensor, weight: Tensor, scales: Tensor, bias: Optional[Tensor], group_size: int, act_int8: bool
) -> Tensor:
    """``x @ dequant(weight).T + bias`` on torchburn's kernels. ``group_size == 0``: int8 per-row weight
    ``[N, K]``; otherwise grouped int4 packed as ``[N, K/2]``. ``act_int8`` quantizes each row of ``x`` to
    int8 on the fly (W8A8 / W4A8 with VNNI)."""
    return _quant_linear_impl(x, weight, scales, bias, group_size, act_int8)


@quant_linear.register_fake
def _quant_linear_fake(x, weight, scales, bias, group_size, act_int8):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _quant_linear_setup(ctx, inputs, output):
    x, weight, scales, bias, group_size, _ = inputs
    ctx.save_for_backward(weight, scales)
    ctx.group_size = group_size
    ctx.has_bias = bias is not None
    ctx.x_dtype = x.dtype


def _quant_linear_backward(ctx, grad):
    # d/dx of x @ W.T is grad @ W with the dequantized weight (a straight-through estimate for A8).
    weight, scales = ctx.saved_tensors
    if ctx.group_size == 0:
        w = dequantize_weight_int8(weight, scales)
    else:
        w = dequantize_weight_int4_grouped(weight, scales, ctx.group_size)
    grad32 = grad.to(torch.float32)
    grad_x = (grad32 @ w).to(ctx.x_dtype)
    grad_bias = grad32.reshape(-1, grad32.shape[-1]).sum(0) if ctx.has_bias else None
    return grad_x, None, None, grad_bias, None, None


torch.library.register_autograd(
    "torchburn::quant_linear", _quant_linear_backward, setup_context=_quant_linear_setup
)


def _check_activations(activations: str, fn: str) -> bool:
    if activations not in _ACTIVATIONS:
        raise ValueError(f"{fn}: activations must be one of {_ACTIVATIONS}, got {activations!r}")
    return activations == "int8"


def w8a32_linear(x, q, scales, bias=None, *, activations: str = "f32") -> Tensor:
    """``x @ dequant(q, scales).T + bias`` for an int8 per-row weight (``q`` int8 ``[N, K]``, ``scales``
    ``[N]``), without materializing the float weight. ``activations="int8"`` runs W8A8 instead.

    >>> q, s = quantize_weight_int8(torch.randn(16, 64))
    >>> w8a32_linear(torch.randn(3, 64), q, s).shape
    torch.Size([3, 16])
    """
    act_int8 = _check_activations(activations, "w8a32_linear")
    return _linear(_as_tensor(x, "input", "w8a32_linear"), q, scales, bias, 0, act_int8)


def w4a32_grouped_linear(x, packed, scales, bias=None, group_size: int = 64, *, activations: str = "f32") -> Tensor:
    """``x @ dequant(packed, scales).T + bias`` for a grouped-int4 weight (``packed`` uint8 ``[N, K/2]``,
    ``scales`` ``[N, K/group_size]``). ``activations="int8"`` runs W4A8 instead.

    >>> packed, s = quantize_weight_int4_grouped(torch.randn(16, 128), group_size=64)
    >>> w4a32_grouped_linear(torch.randn(2, 5, 128), packed, s).shape
    torch.Size([2, 5, 16])
    """
    group_size = _check_group_size(group_size, "w4a32_grouped_linear")
    act_int8 = _check_activations(activations, "w4a32_grouped_linear")
    return _linear(_as_tensor(x, "input", "w4a32_grouped_linear"), packed, scales, bias, group_size, act_int8)


# ---- modules ----------------------------------------------------------------------------------------


def _resolve_quant_type(quant_type: Optional[str], bits: Optional[int], fn: str) -> str:
    by_bits = {8: "int8", 4: "int4"}
    if bits is not None and bits not in by_bits:
        raise ValueError(f"{fn}: bits must be 8 or 4, got {bits!r}")
    if quant_type is None:
        return by_bits[bits] if bits is not None else "int8"
    if quant_type not in ("int8", "int4"):
        raise ValueError(f"{fn}: quant_type must be 'int8' or 'int4', got {quant_type!r}")
    if bits is not None and by_bits[bits] != quant_type:
        raise ValueError(f"{fn}: quant_type={quant_type!r} contradicts bits={bits}")
    return quant_type


class QuantizedLinear(nn.Module):
    """A ``torch.nn.Linear`` whose weight is stored quantized (int8 per row, or grouped int4).

    Buffers (saved in ``state_dict``): ``weight`` (int8 ``[out, in]`` or uint8 ``[out, in/2]``) and
    ``scales`` (float32 ``[out]`` or ``[out, in/group_size]``); ``bias`` is a float32 parameter. Build one
    from a float layer with :meth:`from_float`, or construct it empty and ``load_state_dict``.

    Args:
        in_features, out_features, bias: as for ``nn.Linear``.
        quant_type: ``"int8"`` (default) or ``"int4"``; ``bits=8`` / ``bits=4`` is accepted instead.
        group_size: int4 group size along ``in_features`` (32, 64, 128, 256); ignored for int8.
        activations: ``"f32"`` (exact dequantized-weight arithmetic, the default) or ``"int8"`` (each
            input row quantized to int8 on the fly: faster batched matmuls, see docs for the error bound).

    >>> layer = QuantizedLinear.from_float(nn.Linear(256, 32), quant_type="int4", group_size=64)
    >>> layer(torch.randn(4, 256)).shape
    torch.Size([4, 32])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        quant_type: Optional[str] = None,
        group_size: int = 64,
        *,
        bits: Optional[int] = None,
        activations: str = "f32",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        fn = "QuantizedLinear"
        quant_type = _resolve_quant_type(quant_type, bits, fn)
        _check_activations(activations, fn)
        if device is not None and torch.device(device).type != "cpu":
            raise TypeError(f"{fn}: device '{device}' is not supported; torchburn's quantized kernels run on the CPU")
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{fn}: {name} must be a non-negative int, got {value!r}")
        if quant_type == "int4":
            group_size = _check_group_size(group_size, fn)
            if in_features % group_size != 0:
                raise ValueError(
                    f"{fn}: in_features = {in_features} is not a multiple of group_size = {group_size} (int4 groups "
                    f"run along in_features); choose a group size that divides it or use quant_type='int8'"
                )
            weight = torch.full((out_features, in_features // 2), 0x88, dtype=torch.uint8)  # q = 0
            scales = torch.zeros((out_features, in_features // group_size), dtype=torch.float32)
        else:
            weight = torch.zeros((out_features, in_features), dtype=torch.int8)
            scales = torch.zeros((out_features,), dtype=torch.float32)
        self.in_features = in_features
        self.out_features = out_features
        self.quant_type = quant_type
        self.group_size = group_size
        self.activations = activations
        self.register_buffer("weight", weight)
        self.register_buffer("scales", scales)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=torch.float32))
        else:
            self.register_parameter("bias", None)

    @property
    def bits(self) -> int:
        return 8 if self.quant_type == "int8" else 4

    @property
    def _group_arg(self) -> int:
        return 0 if self.quant_type == "int8" else self.group_size

    @classmethod
    def from_float(
        cls,
        linear: nn.Linear,
        quant_type: Optional[str] = None,
        group_size: int = 64,
        *,
        bits: Optional[int] = None,
        activations: str = "f32",
    ) -> "QuantizedLinear":
        """Quantizes a float ``nn.Linear`` (its weight is read, not modified)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"QuantizedLinear.from_float expects an nn.Linear, got {type(linear).__name__}")
        layer = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            quant_type=quant_type,
            group_size=group_size,
            bits=bits,
            activations=activations,
        )
        if layer.quant_type == "int4":
            layer.weight, layer.scales = quantize_weight_int4_grouped(linear.weight, layer.group_size)
        else:
            layer.weight, layer.scales = quantize_weight_int8(linear.weight)
        if linear.bias is not None:
            with torch.no_grad():
                layer.bias.copy_(_as_tensor(linear.bias, "bias", "QuantizedLinear.from_float").to(torch.float32))
        return layer

    def forward(self, x: Tensor) -> Tensor:
        return _linear(x, self.weight, self.scales, self.bias, self._group_arg, self.activations == "int8")

    def dequantize(self) -> Tensor:
        """The float32 weight ``[out_features, in_features]`` this layer computes with."""
        if self.quant_type == "int4":
            return dequantize_weight_int4_grouped(self.weight, self.scales, self.group_size)
        return dequantize_weight_int8(self.weight, self.scales)

    def to_float(self) -> nn.Linear:
        """An ``nn.Linear`` with the dequantized weight."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(self.dequantize())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.quant_type == "int4" else ""
        acts = "" if self.activations == "f32" else f", activations={self.activations!r}"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"quant_type={self.quant_type!r}{group}{acts}"
        )


def _excluded(name: str, patterns: Sequence[str]) -> bool:
    last = name.rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(last, p) for p in patterns)


def quantize_model(
    model: nn.Module,
    quant_type: Optional[str] = None,
    group_size: int = 64,
    exclude: Sequence[str] = ("lm_head",),
    *,
    bits: Optional[int] = None,
    activations: str = "f32",
    exclude_modules: Optional[Sequence[str]] = None,
    backend: str = "cpu",
) -> nn.Module:
    """Replaces every ``nn.Linear`` in ``model`` (in place) by a :class:`QuantizedLinear` and returns it.

    ``quant_type`` is ``"int4"`` (the default) or ``"int8"``; ``bits=4`` / ``bits=8`` is accepted instead.

    ``exclude`` holds names or glob patterns matched against each layer's qualified name and its last
    component (default: keep ``lm_head`` in float); ``exclude_modules`` is TorchBurn's name for it.
    ``backend`` must be ``"cpu"`` (TorchBurn's argument; torchburn's quantized kernels are CPU ones).
    For int4, a layer whose ``in_features`` is not a multiple of ``group_size`` stays in float with a
    warning.

    >>> mlp = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    >>> _ = quantize_model(mlp, quant_type="int8")
    >>> type(mlp[0]).__name__
    'QuantizedLinear'
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_model expects an nn.Module, got {type(model).__name__}")
    if quant_type is None and bits is None:
        quant_type = "int4"
    quant_type = _resolve_quant_type(quant_type, bits, "quantize_model")
    if backend != "cpu":
        raise ValueError(f"quantize_model: backend={backend!r} is not available; torchburn quantizes for 'cpu'")
    if exclude_modules is not None:
        if tuple(exclude) != ("lm_head",):
            raise TypeError("quantize_model: pass exclude or exclude_modules, not both")
        exclude = tuple(exclude_modules) if not isinstance(exclude_modules, str) else (exclude_modules,)
    if isinstance(exclude, str):
        exclude = (exclude,)
    if isinstance(model, nn.Linear):
        raise TypeError("quantize_model: pass a model containing Linear layers; use QuantizedLinear.from_float for one")
    targets = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and not isinstance(module, QuantizedLinear) and not _excluded(name, exclude):
            targets.append((name, module))
    for name, linear in targets:
        if quant_type == "int4" and linear.in_features % group_size != 0:
            warnings.warn(
                f"quantize_model: '{name}' kept in float: in_features = {linear.in_features} is not a multiple "
                f"of group_size = {group_size}",
                stacklevel=2,
            )
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        quantized = QuantizedLinear.from_float(linear, quant_type, group_size, activations=activations)
        setattr(parent, child, quantized)
    return model


# ---- kernel selection (tests and benchmarks) --------------------------------------------------------


def available_kernels() -> list:
    """Names of the quantized-matmul kernel families this CPU runs, e.g. ``['scalar', 'avx2', ...]``."""
    return list(_C.quant_kernels())


@contextlib.contextmanager
def use_kernel(name: str) -> Iterator[None]:
    """Runs the quantized matmuls in the block with one kernel family (``"auto"`` follows
    ``TORCHBURN_ISA``). Not thread-safe: meant for tests and benchmarks.

    >>> with use_kernel("scalar"):
    ...     _ = w8a32_linear(torch.randn(1, 32), *quantize_weight_int8(torch.randn(4, 32)))
    """
    global _kernel_name
    if name != "auto" and name not in available_kernels():
        raise ValueError(f"use_kernel: kernel {name!r} is not available on this CPU; have {available_kernels()}")
    previous, _kernel_name = _kernel_name, name
    try:
        yield
    finally:
        _kernel_name = previous
