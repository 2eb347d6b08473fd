"""Neural-network ops on torchburn's kernels: convolution, pooling, normalization, losses and the
backward ops that ``aot_autograd`` emits, re-exported by :mod:`torchburn.ops`.

Two families of names:

* ``torch.nn.functional`` names and signatures (``conv2d``, ``max_pool2d``, ``batch_norm``,
  ``cross_entropy``, ...), for direct use;
* ATen names and signatures (``convolution``, ``convolution_backward``, ``native_batch_norm``,
  ``nll_loss_forward``, ``_log_softmax_backward_data``, ...), so the ``torch.compile`` backend can map
  graph nodes one to one. Optional results an ``output_mask`` skips are ``None``.

Inputs may be torch tensors, numpy arrays or :class:`torchburn.Tensor`; results come back as the kind
of the first array argument. float32/float16/bfloat16 are computed in float32 and rounded once;
float64 raises ``TypeError``. Bad shapes or arguments raise ``ValueError`` naming the argument.
``dropout`` in evaluation mode (or with ``p=0``) is the identity; training-mode dropout is not
provided (its random mask could not match PyTorch's generator).

Example::

    >>> import torch, torchburn.ops as ops
    >>> x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    >>> torch.testing.assert_close(ops.conv2d(x, w, padding=1),
    ...                            torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple, Union

from . import _C

__all__ = [
    # torch.nn.functional
    "conv2d", "conv2d_fused", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
    "batch_norm", "batch_norm_fold", "group_norm", "dropout", "cross_entropy", "nll_loss", "mse_loss",
    "smooth_l1_loss", "l1_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    # ATen forward ops
    "convolution", "max_pool2d_with_indices", "_adaptive_avg_pool2d", "native_batch_norm",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training", "native_group_norm",
    "native_layer_norm", "nll_loss_forward", "nll_loss2d_forward",
    # ATen backward ops
    "convolution_backward", "threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward",
    "tanh_backward", "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm_backward",
    "native_group_norm_backward", "native_batch_norm_backward", "max_pool2d_with_indices_backward",
    "avg_pool2d_backward", "_adaptive_avg_pool2d_backward", "adaptive_max_pool2d_backward",
    "nll_loss_backward", "nll_loss2d_backward", "mse_loss_backward", "smooth_l1_loss_backward",
    "binary_cross_entropy_backward", "embedding_dense_backward",
]

IntPair = Union[int, Sequence[int]]
_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
# _C.pointwise_loss kinds
_MSE, _SMOOTH_L1, _BCE, _BCE_LOGITS, _MSE_BACKWARD, _SMOOTH_L1_BACKWARD, _BCE_BACKWARD = range(7)


def _ops() -> Any:
    # imported lazily: torchburn.ops re-exports this module at the end of its own import
    from . import ops

    return ops


def _wrap(result: Any, like: Any) -> Any:
    """Converts a _C result (Tensor, None or tuple of them) to the kind of `like`."""
    if result is None:
        return None
    if isinstance(result, tuple):
        return tuple(_wrap(item, like) for item in result)
    return _ops()._wrap(result, like)


def _check(x: Any, name: str) -> None:
    _ops()._check_device(x, name)


def _plain(x: Any) -> Any:
    # aot_autograd hands tensors that require grad to compiled graphs; torch's __dlpack__ refuses them
    # (the import would retry through detach() after the exception; detaching first is cheaper)
    return x.detach() if getattr(x, "requires_grad", False) else x


def _call(function: Any, *args: Any) -> Any:
    """Calls a _C function with torch tensors detached from autograd (a view, no copy)."""
    return function(*(_plain(a) for a in args))


def _pair(value: IntPair, name: str) -> Tuple[int, int]:
    """An int or a 1/2-sequence of ints as (height, width)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int):
        return (value, value)
    try:
        items = tuple(int(v) for v in value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}") from None
    if len(items) == 1:
        return (items[0], items[0])
    if len(items) != 2:
        raise ValueError(f"{name} must have 1 or 2 values (height, width), got {list(items)}")
    return items


def _reduction(reduction: str, size_average: Optional[bool] = None, reduce: Optional[bool] = None) -> int:
    if size_average is not None or reduce is not None:  # torch's legacy arguments
        if reduce is None:
            reduce = True
        if size_average is None:
            size_average = True
        reduction = "none" if not reduce else ("mean" if size_average else "sum")
    if isinstance(reduction, int) and not isinstance(reduction, bool) and reduction in (0, 1, 2):
        return reduction
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    return _REDUCTIONS[reduction]


def _activation(activation: Optional[str]) -> int:
    table = _ops()._ACTIVATION
    name = "none" if activation is None else activation
    if name not in table:
        raise ValueError(f"activation must be None or one of {sorted(table)}, got {activation!r}")
    return table[name]


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    name = str(dtype).replace("torch.", "")
    return {"float": "float32", "half": "float16", "double": "float64"}.get(name, name)


def _ndim(x: Any) -> int:
    return len(tuple(x.shape))


# ---- convolution ---------------------------------------------------------------------------------


def _conv_padding(padding: Union[str, IntPair], stride: Tuple[int, int], dilation: Tuple[int, int],
                  weight: Any) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """(padding, extra bottom/right padding) for an int/pair or 'same'/'valid'."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding != "same":
            raise ValueError(f"conv2d: padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
        if stride != (1, 1):
            raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
        kernel = tuple(weight.shape)[2:]
        if len(kernel) != 2:
            raise ValueError(f"conv2d: weight must be 4-D [C_out, C_in / groups, KH, KW], got shape {list(weight.shape)}")
        total = [dilation[i] * (kernel[i] - 1) for i in range(2)]
        left = tuple(t // 2 for t in total)
        return left, tuple(total[i] - 2 * left[i] for i in range(2))
    return _pair(padding, "padding"), (0, 0)


def conv2d_fused(input: Any, weight: Any, bias: Any = None, stride: IntPair = 1,  # noqa: A002
                 padding: Union[str, IntPair] = 0, dilation: IntPair = 1, groups: int = 1, *, scale: Any = None,
                 shift: Any = None, activation: Optional[str] = None, residual: Any = None) -> Any:
    """2-D convolution with a fused epilogue: ``activation((conv + bias) * scale + shift) + residual``.

    ``scale``/``shift`` are per output channel ([C_out]); an eval-mode BatchNorm after the convolution
    folds into them (see :func:`batch_norm_fold`). ``activation`` is None, "relu", "gelu", "gelu_tanh",
    "silu", "sigmoid" or "tanh".
    """
    _check(input, "input")
    stride_pair, dilation_pair = _pair(stride, "stride"), _pair(dilation, "dilation")
    pad, extra = _conv_padding(padding, stride_pair, dilation_pair, weight)
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv2d: groups must be an int, got {groups!r}")
    result = _call(_C.conv2d, input, weight, bias, stride_pair, pad, extra, dilation_pair, groups, scale, shift,
                       _activation(activation), residual)
    return _wrap(result, input)


def conv2d(input: Any, weight: Any, bias: Any = None, stride: IntPair = 1,  # noqa: A002
           padding: Union[str, IntPair] = 0, dilation: IntPair = 1, groups: int = 1) -> Any:
    """torch.nn.functional.conv2d (NCHW or CHW input; groups and depthwise included)."""
    return conv2d_fused(input, weight, bias, stride, padding, dilation, groups)


def convolution(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],  # noqa: A002
                dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Any:
    """aten::convolution for 2-D, non-transposed convolutions."""
    if transposed:
        raise NotImplementedError("convolution: transposed convolution is not supported by torchburn")
    if len(tuple(weight.shape)) != 4:
        raise NotImplementedError(f"convolution: only 2-D convolution is supported (weight shape {list(weight.shape)})")
    return conv2d(input, weight, bias, stride, padding, dilation, groups)


def convolution_backward(grad_output: Any, input: Any, weight: Any, bias_sizes: Optional[Sequence[int]],  # noqa: A002
                         stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                         output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]) -> Tuple[Any, Any, Any]:
    """aten::convolution_backward (2-D, non-transposed): (grad_input, grad_weight, grad_bias)."""
    if transposed:
        raise NotImplementedError("convolution_backward: transposed convolution is not supported by torchburn")
    _check(grad_output, "grad_output")
    mask = tuple(bool(m) for m in output_mask)
    if mask[2] and bias_sizes is None:
        mask = (mask[0], mask[1], False)
    result = _call(_C.conv2d_backward, grad_output, input, weight, _pair(stride, "stride"), _pair(padding, "padding"),
                                _pair(dilation, "dilation"), int(groups), mask)
    return _wrap(result, grad_output)


# ---- pooling -------------------------------------------------------------------------------------


def _pool_stride(stride: Optional[IntPair], kernel: Tuple[int, int]) -> Tuple[int, int]:
    if stride is None or (not isinstance(stride, int) and len(tuple(stride)) == 0):
        return kernel
    return _pair(stride, "stride")


def max_pool2d_with_indices(input: Any, kernel_size: IntPair, stride: Optional[IntPair] = None,  # noqa: A002
                            padding: IntPair = 0, dilation: IntPair = 1, ceil_mode: bool = False) -> Tuple[Any, Any]:
    """aten::max_pool2d_with_indices: (values, int64 indices into each input plane)."""
    _check(input, "input")
    kernel = _pair(kernel_size, "kernel_size")
    result = _call(_C.max_pool2d, input, kernel, _pool_stride(stride, kernel), _pair(padding, "padding"),
                           _pair(dilation, "dilation"), bool(ceil_mode))
    return _wrap(result, input)


def max_pool2d(input: Any, kernel_size: IntPair, stride: Optional[IntPair] = None, padding: IntPair = 0,  # noqa: A002
               dilation: IntPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """torch.nn.functional.max_pool2d (NaN wins a window, as torch)."""
    values, indices = max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    return (values, indices) if return_indices else values


def avg_pool2d(input: Any, kernel_size: IntPair, stride: Optional[IntPair] = None, padding: IntPair = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Optional[int] = None) -> Any:
    """torch.nn.functional.avg_pool2d."""
    _check(input, "input")
    kernel = _pair(kernel_size, "kernel_size")
    result = _call(_C.avg_pool2d, input, kernel, _pool_stride(stride, kernel), _pair(padding, "padding"), bool(ceil_mode),
                           bool(count_include_pad), divisor_override)
    return _wrap(result, input)


def _adaptive_size(input: Any, output_size: Union[int, Sequence[Optional[int]]]) -> Tuple[int, int]:
    shape = tuple(input.shape)
    if len(shape) not in (3, 4):
        raise ValueError(f"adaptive pooling: input must be 3-D [C, H, W] or 4-D [N, C, H, W], got shape {list(shape)}")
    if isinstance(output_size, int):
        return (output_size, output_size)
    sizes = tuple(output_size)
    if len(sizes) == 1:
        sizes = (sizes[0], sizes[0])
    if len(sizes) != 2:
        raise ValueError(f"adaptive pooling: output_size must have 1 or 2 values, got {list(sizes)}")
    return tuple(shape[-2 + i] if sizes[i] is None else int(sizes[i]) for i in range(2))


def adaptive_avg_pool2d(input: Any, output_size: Union[int, Sequence[Optional[int]]]) -> Any:  # noqa: A002
    """torch.nn.functional.adaptive_avg_pool2d (None in output_size keeps that input size)."""
    _check(input, "input")
    out_h, out_w = _adaptive_size(input, output_size)
    return _wrap(_call(_C.adaptive_avg_pool2d, input, out_h, out_w), input)


def _adaptive_avg_pool2d(input: Any, output_size: Sequence[int]) -> Any:  # noqa: A002
    """aten::_adaptive_avg_pool2d."""
    return adaptive_avg_pool2d(input, output_size)


def adaptive_max_pool2d(input: Any, output_size: Union[int, Sequence[Optional[int]]],  # noqa: A002
                        return_indices: bool = False) -> Any:
    """torch.nn.functional.adaptive_max_pool2d."""
    _check(input, "input")
    out_h, out_w = _adaptive_size(input, output_size)
    values, indices = _wrap(_call(_C.adaptive_max_pool2d, input, out_h, out_w), input)
    return (values, indices) if return_indices else values


def max_pool2d_with_indices_backward(grad_output: Any, input: Any, kernel_size: IntPair,  # noqa: A002
                                     stride: IntPair, padding: IntPair, dilation: IntPair, ceil_mode: bool,
                                     indices: Any) -> Any:
    """aten::max_pool2d_with_indices_backward: scatters grad_output to the recorded indices."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.max_pool2d_backward, grad_output, input, indices), grad_output)


def adaptive_max_pool2d_backward(grad_output: Any, input: Any, indices: Any) -> Any:  # noqa: A002
    """aten::adaptive_max_pool2d_backward."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.max_pool2d_backward, grad_output, input, indices), grad_output)


def avg_pool2d_backward(grad_output: Any, input: Any, kernel_size: IntPair, stride: IntPair,  # noqa: A002
                        padding: IntPair, ceil_mode: bool, count_include_pad: bool,
                        divisor_override: Optional[int]) -> Any:
    """aten::avg_pool2d_backward."""
    _check(grad_output, "grad_output")
    kernel = _pair(kernel_size, "kernel_size")
    result = _call(_C.avg_pool2d_backward, grad_output, input, kernel, _pool_stride(stride, kernel), _pair(padding, "padding"),
                                    bool(ceil_mode), bool(count_include_pad), divisor_override)
    return _wrap(result, grad_output)


def _adaptive_avg_pool2d_backward(grad_output: Any, input: Any) -> Any:  # noqa: A002
    """aten::_adaptive_avg_pool2d_backward."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.adaptive_avg_pool2d_backward, grad_output, input), grad_output)


# ---- normalization -------------------------------------------------------------------------------


def _assign(destination: Any, source: _C.Tensor) -> None:
    """destination[...] = source, in place (running statistics)."""
    kind = _ops()._kind(destination)
    if kind == "torch":
        import torch

        with torch.no_grad():
            destination.copy_(torch.from_dlpack(source))
    elif kind == "numpy":
        import numpy

        destination[...] = numpy.from_dlpack(source)
    else:
        if destination.dtype == "bfloat16":
            raise TypeError("batch_norm: cannot update bfloat16 torchburn running statistics in place")
        destination.numpy()[...] = source.numpy()


def native_batch_norm(input: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any,  # noqa: A002
                      training: bool, momentum: float, eps: float) -> Tuple[Any, Any, Any]:
    """aten::native_batch_norm: (out, save_mean, save_invstd); updates the running stats in place when
    training (save_* are empty tensors in evaluation mode, as ATen)."""
    _check(input, "input")
    out, save_mean, save_invstd, new_mean, new_var = _call(_C.batch_norm, 
        input, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps))
    if training and running_mean is not None:
        _assign(running_mean, new_mean)
        _assign(running_var, new_var)
    return _wrap((out, save_mean, save_invstd), input)


def _native_batch_norm_legit_functional(input: Any, weight: Any, bias: Any, running_mean: Any,  # noqa: A002
                                        running_var: Any, training: bool, momentum: float,
                                        eps: float) -> Tuple[Any, Any, Any, Any, Any]:
    """aten::_native_batch_norm_legit_functional: (out, save_mean, save_invstd, new_running_mean,
    new_running_var), without mutating anything."""
    _check(input, "input")
    result = _call(_C.batch_norm, input, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps))
    return _wrap(result, input)


def _native_batch_norm_legit_no_training(input: Any, weight: Any, bias: Any, running_mean: Any,  # noqa: A002
                                         running_var: Any, momentum: float, eps: float) -> Tuple[Any, Any, Any]:
    """aten::_native_batch_norm_legit_no_training: (out, empty, empty)."""
    out, save_mean, save_invstd, _, _ = _native_batch_norm_legit_functional(
        input, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, save_mean, save_invstd


def batch_norm(input: Any, running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,  # noqa: A002
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Any:
    """torch.nn.functional.batch_norm (running stats updated in place when training)."""
    shape = tuple(input.shape)
    if training:
        count = math.prod(shape) // shape[1] if len(shape) >= 2 and shape[1] else 0
        if count == 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input size {list(shape)}")
    return native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)[0]


def batch_norm_fold(running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,
                    eps: float = 1e-5) -> Tuple[Any, Any]:
    """Per-channel (scale, shift) with ``batch_norm(x, eval) == x * scale + shift``, for
    :func:`conv2d_fused`. float32 results."""
    return _wrap(_call(_C.batch_norm_fold, weight, bias, running_mean, running_var, float(eps)), running_mean)


def native_batch_norm_backward(grad_out: Any, input: Any, weight: Any, running_mean: Any,  # noqa: A002
                               running_var: Any, save_mean: Any, save_invstd: Any, train: bool, eps: float,
                               output_mask: Sequence[bool]) -> Tuple[Any, Any, Any]:
    """aten::native_batch_norm_backward: (grad_input, grad_weight, grad_bias)."""
    _check(grad_out, "grad_out")
    result = _call(_C.batch_norm_backward, grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                                    bool(train), float(eps), tuple(bool(m) for m in output_mask))
    return _wrap(result, grad_out)


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:  # noqa: A002
    """torch.nn.functional.group_norm."""
    _check(input, "input")
    return _wrap(_call(_C.group_norm, input, weight, bias, int(num_groups), float(eps))[0], input)


def _check_group_sizes(name: str, input: Any, n: int, c: int, hxw: int) -> None:  # noqa: A002
    shape = tuple(input.shape)
    if len(shape) < 2 or shape[0] != n or shape[1] != c or math.prod(shape[2:]) != hxw:
        raise ValueError(f"{name}: N={n}, C={c}, HxW={hxw} do not match input of shape {list(shape)}")


def native_group_norm(input: Any, weight: Any, bias: Any, N: int, C: int, HxW: int, group: int,  # noqa: A002,N803
                      eps: float) -> Tuple[Any, Any, Any]:
    """aten::native_group_norm: (out, mean [N, group], rstd [N, group])."""
    _check(input, "input")
    _check_group_sizes("native_group_norm", input, N, C, HxW)
    return _wrap(_call(_C.group_norm, input, weight, bias, int(group), float(eps)), input)


def native_group_norm_backward(grad_out: Any, input: Any, mean: Any, rstd: Any, weight: Any, N: int,  # noqa: A002,N803
                               C: int, HxW: int, group: int, output_mask: Sequence[bool]) -> Tuple[Any, Any, Any]:
    """aten::native_group_norm_backward: (grad_input, grad_weight, grad_bias)."""
    _check(grad_out, "grad_out")
    _check_group_sizes("native_group_norm_backward", input, N, C, HxW)
    result = _call(_C.group_norm_backward, grad_out, input, mean, rstd, weight, int(group), tuple(bool(m) for m in output_mask))
    return _wrap(result, grad_out)


def native_layer_norm(input: Any, normalized_shape: Union[int, Sequence[int]], weight: Any, bias: Any,  # noqa: A002
                      eps: float) -> Tuple[Any, Any, Any]:
    """aten::native_layer_norm: (out, mean, rstd), mean/rstd shaped input.shape[:-k] + [1] * k."""
    _check(input, "input")
    ndim = _ops()._normalized_ndim(normalized_shape, input)
    return _wrap(_call(_C.native_layer_norm, input, ndim, weight, bias, float(eps)), input)


def native_layer_norm_backward(grad_out: Any, input: Any, normalized_shape: Union[int, Sequence[int]],  # noqa: A002
                               mean: Any, rstd: Any, weight: Any, bias: Any,
                               output_mask: Sequence[bool]) -> Tuple[Any, Any, Any]:
    """aten::native_layer_norm_backward: (grad_input, grad_weight, grad_bias)."""
    _check(grad_out, "grad_out")
    ndim = _ops()._normalized_ndim(normalized_shape, input)
    mask = tuple(bool(m) for m in output_mask)
    # ATen returns None for the grad of an absent parameter
    mask = (mask[0], mask[1] and weight is not None, mask[2] and bias is not None)
    result = _call(_C.layer_norm_backward, grad_out, input, ndim, mean, rstd, weight, bias, mask)
    return _wrap(result, grad_out)


def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:  # noqa: A002
    """Dropout in evaluation mode (``training=False``) or with ``p=0``: the identity, returning input.

    Training-mode dropout is not provided: its random mask could not match PyTorch's generator.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p}")
    if training and p > 0.0:
        raise NotImplementedError("dropout: training mode is not supported by torchburn; use training=False")
    return input


# ---- activation / softmax / embedding backward ------------------------------------------------------


def threshold_backward(grad_output: Any, self: Any, threshold: float) -> Any:
    """aten::threshold_backward: grad where self > threshold, else 0 (relu's backward with 0)."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.threshold_backward, grad_output, self, float(threshold)), grad_output)


def _activation_backward(name: str, grad_output: Any, saved: Any) -> Any:
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.activation_backward, _ops()._ACTIVATION[name], grad_output, saved), grad_output)


def gelu_backward(grad_output: Any, self: Any, approximate: str = "none") -> Any:
    """aten::gelu_backward (approximate "none": erf form; "tanh")."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu_backward: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation_backward("gelu" if approximate == "none" else "gelu_tanh", grad_output, self)


def silu_backward(grad_output: Any, self: Any) -> Any:
    """aten::silu_backward (self is the forward input)."""
    return _activation_backward("silu", grad_output, self)


def sigmoid_backward(grad_output: Any, output: Any) -> Any:
    """aten::sigmoid_backward (output is the forward result)."""
    return _activation_backward("sigmoid", grad_output, output)


def tanh_backward(grad_output: Any, output: Any) -> Any:
    """aten::tanh_backward (output is the forward result)."""
    return _activation_backward("tanh", grad_output, output)


def _softmax_backward_data(grad_output: Any, output: Any, dim: int, input_dtype: Any) -> Any:
    """aten::_softmax_backward_data: output * (grad - sum(grad * output, dim))."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.softmax_backward, grad_output, output, int(dim), False, _dtype_name(input_dtype)), grad_output)


def _log_softmax_backward_data(grad_output: Any, output: Any, dim: int, input_dtype: Any) -> Any:
    """aten::_log_softmax_backward_data: grad - exp(output) * sum(grad, dim)."""
    _check(grad_output, "grad_output")
    return _wrap(_call(_C.softmax_backward, grad_output, output, int(dim), True, _dtype_name(input_dtype)), grad_output)


def embedding_dense_backward(grad_output: Any, indices: Any, num_weights: int, padding_idx: int,
                             scale_grad_by_freq: bool) -> Any:
    """aten::embedding_dense_backward: [num_weights, E] sums of grad rows per index."""
    _check(grad_output, "grad_output")
    result = _call(_C.embedding_backward, grad_output, indices, int(num_weights), int(padding_idx), bool(scale_grad_by_freq))
    return _wrap(result, grad_output)


# ---- losses -------------------------------------------------------------------------------------


def nll_loss_forward(self: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> Tuple[Any, Any]:
    """aten::nll_loss_forward (any [N, C, ...] input): (output, total_weight)."""
    _check(self, "input")
    return _wrap(_call(_C.nll_loss, self, target, weight, _reduction(reduction), int(ignore_index)), self)


def nll_loss_backward(grad_output: Any, self: Any, target: Any, weight: Any, reduction: int, ignore_index: int,
                      total_weight: Any) -> Any:
    """aten::nll_loss_backward."""
    _check(grad_output, "grad_output")
    result = _call(_C.nll_loss_backward, grad_output, self, target, weight, _reduction(reduction), int(ignore_index),
                                  total_weight)
    return _wrap(result, grad_output)


nll_loss2d_forward = nll_loss_forward
nll_loss2d_backward = nll_loss_backward


def nll_loss(input: Any, target: Any, weight: Any = None, size_average: Optional[bool] = None,  # noqa: A002
             ignore_index: int = -100, reduce: Optional[bool] = None, reduction: str = "mean") -> Any:
    """torch.nn.functional.nll_loss (input holds log-probabilities)."""
    return nll_loss_forward(input, target, weight, _reduction(reduction, size_average, reduce), ignore_index)[0]


def cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Optional[bool] = None,  # noqa: A002
                  ignore_index: int = -100, reduce: Optional[bool] = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Any:
    """torch.nn.functional.cross_entropy: class-index targets (int64, with ignore_index, weight and
    label smoothing) or class-probability targets (a float tensor shaped like input)."""
    _check(input, "input")
    code = _reduction(reduction, size_average, reduce)
    return _wrap(_call(_C.cross_entropy, input, target, weight, code, int(ignore_index), float(label_smoothing)), input)


def _pointwise(kind: int, grad: Any, input: Any, target: Any, weight: Any, pos_weight: Any,  # noqa: A002
               reduction: int, beta: float = 0.0) -> Any:
    like = grad if grad is not None else input
    _check(like, "input")
    return _wrap(_call(_C.pointwise_loss, kind, grad, input, target, weight, pos_weight, reduction, float(beta)), like)


def _weighted(kind: int, input: Any, target: Any, weight: Any, code: int, name: str) -> Any:  # noqa: A002
    """torch's weighted mse/l1: per-element loss * weight; mean divides by sum(weight)."""
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError(f"{name}: weight and input must have the same size, got {list(weight.shape)} and "
                         f"{list(input.shape)}")
    ops = _ops()
    weight = _plain(weight)
    weighted = ops.mul(_pointwise(kind, None, input, target, None, None, 0), weight)
    if code == 0:
        return weighted
    total = ops.sum(weighted)
    return total if code == 2 else ops.div(total, ops.sum(weight))


def mse_loss(input: Any, target: Any, size_average: Optional[bool] = None, reduce: Optional[bool] = None,  # noqa: A002
             reduction: str = "mean", weight: Any = None) -> Any:
    """torch.nn.functional.mse_loss (input and target broadcast; optional elementwise weight)."""
    code = _reduction(reduction, size_average, reduce)
    if weight is not None:
        return _weighted(_MSE, input, target, weight, code, "mse_loss")
    return _pointwise(_MSE, None, input, target, None, None, code)


def mse_loss_backward(grad_output: Any, self: Any, target: Any, reduction: int) -> Any:
    """aten::mse_loss_backward."""
    return _pointwise(_MSE_BACKWARD, grad_output, self, target, None, None, _reduction(reduction))


def smooth_l1_loss(input: Any, target: Any, size_average: Optional[bool] = None,  # noqa: A002
                   reduce: Optional[bool] = None, reduction: str = "mean", beta: float = 1.0) -> Any:
    """torch.nn.functional.smooth_l1_loss (beta=0 is the L1 loss)."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    return _pointwise(_SMOOTH_L1, None, input, target, None, None, _reduction(reduction, size_average, reduce), beta)


def smooth_l1_loss_backward(grad_output: Any, self: Any, target: Any, reduction: int, beta: float) -> Any:
    """aten::smooth_l1_loss_backward."""
    return _pointwise(_SMOOTH_L1_BACKWARD, grad_output, self, target, None, None, _reduction(reduction), beta)


def l1_loss(input: Any, target: Any, size_average: Optional[bool] = None, reduce: Optional[bool] = None,  # noqa: A002
            reduction: str = "mean", weight: Any = None) -> Any:
    """torch.nn.functional.l1_loss (smooth_l1 with beta=0; optional elementwise weight)."""
    code = _reduction(reduction, size_average, reduce)
    if weight is not None:
        return _weighted(_SMOOTH_L1, input, target, weight, code, "l1_loss")
    return _pointwise(_SMOOTH_L1, None, input, target, None, None, code, 0.0)


def binary_cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Optional[bool] = None,  # noqa: A002
                         reduce: Optional[bool] = None, reduction: str = "mean") -> Any:
    """torch.nn.functional.binary_cross_entropy (input probabilities in [0, 1]; logs clamped at -100)."""
    return _pointwise(_BCE, None, input, target, weight, None, _reduction(reduction, size_average, reduce))


def binary_cross_entropy_backward(grad_output: Any, self: Any, target: Any, weight: Any = None,
                                  reduction: int = 1) -> Any:
    """aten::binary_cross_entropy_backward."""
    return _pointwise(_BCE_BACKWARD, grad_output, self, target, weight, None, _reduction(reduction))


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None,  # noqa: A002
                                     size_average: Optional[bool] = None, reduce: Optional[bool] = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Any:
    """torch.nn.functional.binary_cross_entropy_with_logits (weight and pos_weight broadcast)."""
    return _pointwise(_BCE_LOGITS, None, input, target, weight, pos_weight, _reduction(reduction, size_average, reduce))
