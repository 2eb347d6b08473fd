"""Containers, linear and normalisation layers, embeddings, dropout, activations and losses as Modules,
with PyTorch's constructor arguments, default initialisation distributions and extra_repr."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import turbo_torch as torch

from torchburn import _C as _TC

from .. import functional as F
from .. import init
from .module import Module, Parameter


# ---- containers ----------------------------------------------------------------------------------

class Sequential(Module):
    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            input = module(input)
        return input

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        keys = list(self._modules)
        if not -len(keys) <= index < len(keys):
            raise IndexError(f"index {index} is out of range")
        return self._modules[keys[index]]

    def __setitem__(self, index: int, module: Module) -> None:
        key = list(self._modules)[index]
        setattr(self, key, module)

    def __delitem__(self, index: Union[int, slice]) -> None:
        keys = list(self._modules)
        for key in (keys[index] if isinstance(index, slice) else [keys[index]]):
            del self._modules[key]
        # re-number as torch does
        items = list(self._modules.values())
        self._modules.clear()
        for i, module in enumerate(items):
            self._modules[str(i)] = module

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m
        return self


class ModuleList(Module):
    def __init__(self, modules: Optional[Iterable[Module]] = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        keys = list(self._modules)
        if not -len(keys) <= index < len(keys):
            raise IndexError(f"index {index} is out of range")
        return self._modules[keys[index]]

    def __setitem__(self, index: int, module: Module) -> None:
        setattr(self, list(self._modules)[index], module)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __repr__(self) -> str:
        """Runs of identical modules print once, as '(0-1): 2 x Layer(...)' (torch's compact form)."""
        from .module import _addindent
        reprs = [repr(m) for m in self._modules.values()]
        if not reprs:
            return self._get_name() + "()"
        lines, start = [], 0
        for i in range(1, len(reprs) + 1):
            if i == len(reprs) or reprs[i] != reprs[start]:
                text = _addindent(reprs[start], 2)
                label = f"({start})" if i - start == 1 else f"({start}-{i - 1}): {i - start} x"
                lines.append(f"{label}: {text}" if i - start == 1 else f"{label} {text}")
                start = i
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules: Any) -> None:
        for key, module in (modules.items() if hasattr(modules, "items") else modules):
            self[key] = module


class ParameterList(Module):
    def __init__(self, values: Optional[Iterable[Any]] = None) -> None:
        super().__init__()
        for value in values or []:
            self.append(value)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def __getitem__(self, index: int) -> Parameter:
        return list(self._parameters.values())[index]

    def append(self, value: Any) -> "ParameterList":
        if not isinstance(value, Parameter):
            value = Parameter(value)
        self.register_parameter(str(len(self)), value)
        return self


class ParameterDict(Module):
    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        for key, value in (parameters.items() if parameters is not None else []):
            self[key] = value

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Any) -> Any:
        return torch.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Any) -> Any:
        return torch.unflatten(input, self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


# ---- linear ----------------------------------------------------------------------------------------

_linear = _TC._tt_linear

class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(torch.empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(torch.empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Any) -> Any:
        fused = _linear(input, self.weight, self.bias)  # float32: one C call (GEMM + bias, one node)
        return F.linear(input, self.weight, self.bias) if fused is None else fused

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(torch.empty(out_features, in1_features, in2_features, dtype=dtype))
        if bias:
            self.bias = Parameter(torch.empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        bound = 1 / math.sqrt(in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Any, input2: Any) -> Any:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 max_norm: Any = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Any = None, _freeze: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(torch.empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=not _freeze)
            init.normal_(self.weight)
            if padding_idx is not None:
                with torch.no_grad():
                    self.weight[padding_idx] = 0.0
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def forward(self, input: Any) -> Any:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        return text

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: Optional[int] = None, **kw: Any) -> "Embedding":
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)


# ---- normalisation and dropout -------------------------------------------------------------------

class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(torch.ones(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    def __init__(self, normalized_shape: Any, eps: Optional[float] = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(torch.ones(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, input: Any) -> Any:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(torch.ones(num_channels, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(num_channels, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _BatchNorm(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: Optional[float] = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(torch.ones(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(torch.zeros(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", torch.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, input: Any) -> Any:
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(input, self.running_mean if not self.training or self.track_running_stats else None,
                            self.running_var if not self.training or self.track_running_stats else None,
                            self.weight, self.bias, use_batch, momentum, self.eps)

    def _check_input_dim(self, input: Any) -> None:
        pass

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, input: Any) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input: Any) -> None:
        if input.ndim != 4:
            raise ValueError(f"expected 4D input (got {input.ndim}D input)")


class Dropout(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Any) -> Any:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


# ---- activations (modules) -------------------------------------------------------------------------

def _activation(name: str, fn: Any, params: Sequence[str] = (), defaults: Sequence[Any] = (),
                repr_fmt: Optional[str] = None) -> type:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Module.__init__(self)
        values = dict(zip(params, defaults))
        for key, value in zip(params, args):
            values[key] = value
        for key, value in kwargs.items():
            if key != "inplace" and key not in params:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{key}'")
            values[key] = value
        for key, value in values.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "inplace", kwargs.get("inplace", False))

    def forward(self, input: Any) -> Any:
        return fn(input, *[getattr(self, p) for p in params])

    def extra_repr(self) -> str:
        if repr_fmt is None:
            return "inplace=True" if getattr(self, "inplace", False) else ""
        return repr_fmt.format(**{p: getattr(self, p) for p in params}, inplace=getattr(self, "inplace", False))

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr})


ReLU = _activation("ReLU", lambda x: torch.relu(x))
ReLU6 = _activation("ReLU6", lambda x: F.relu6(x))
Sigmoid = _activation("Sigmoid", lambda x: torch.sigmoid(x))
Tanh = _activation("Tanh", lambda x: torch.tanh(x))
SiLU = _activation("SiLU", lambda x: torch.silu(x))
Mish = _activation("Mish", lambda x: torch.mish(x))
SELU = _activation("SELU", lambda x: torch.selu(x))
Hardsigmoid = _activation("Hardsigmoid", lambda x: torch.hardsigmoid(x))
Hardswish = _activation("Hardswish", lambda x: torch.hardswish(x))
LogSigmoid = _activation("LogSigmoid", lambda x: torch.logsigmoid(x))
Softsign = _activation("Softsign", lambda x: torch.softsign(x))
Tanhshrink = _activation("Tanhshrink", lambda x: torch.tanhshrink(x))
GELU = _activation("GELU", lambda x, approximate: F.gelu(x, approximate), ["approximate"], ["none"],
                   "approximate='{approximate}'")
ELU = _activation("ELU", lambda x, alpha: F.elu(x, alpha), ["alpha"], [1.0], "alpha={alpha}")
CELU = _activation("CELU", lambda x, alpha: F.celu(x, alpha), ["alpha"], [1.0], "alpha={alpha}")
LeakyReLU = _activation("LeakyReLU", lambda x, s: F.leaky_relu(x, s), ["negative_slope"], [0.01],
                        "negative_slope={negative_slope}")
Softplus = _activation("Softplus", lambda x, b, t: F.softplus(x, b, t), ["beta", "threshold"], [1.0, 20.0],
                       "beta={beta}, threshold={threshold}")
Hardtanh = _activation("Hardtanh", lambda x, lo, hi: F.hardtanh(x, lo, hi), ["min_val", "max_val"], [-1.0, 1.0],
                       "min_val={min_val}, max_val={max_val}")
Softmax = _activation("Softmax", lambda x, dim: F.softmax(x, dim), ["dim"], [None], "dim={dim}")
LogSoftmax = _activation("LogSoftmax", lambda x, dim: F.log_softmax(x, dim), ["dim"], [None], "dim={dim}")
Softmin = _activation("Softmin", lambda x, dim: F.softmin(x, dim), ["dim"], [None], "dim={dim}")
GLU = _activation("GLU", lambda x, dim: F.glu(x, dim), ["dim"], [-1], "dim={dim}")


# ---- losses (modules) ------------------------------------------------------------------------------

class _Loss(Module):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction


class MSELoss(_Loss):
    def forward(self, input: Any, target: Any) -> Any:
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input: Any, target: Any) -> Any:
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Any, target: Any) -> Any:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Any, target: Any) -> Any:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class _WeightedLoss(_Loss):
    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class BCELoss(_WeightedLoss):
    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight: Any = None, size_average: Any = None, reduce: Any = None, reduction: str = "mean",
                 pos_weight: Any = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Any, target: Any) -> Any:
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                 reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Any, target: Any) -> Any:
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class KLDivLoss(_Loss):
    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Any, target: Any) -> Any:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


# ---- convolution and pooling -----------------------------------------------------------------------

class _ConvNd(Module):
    def __init__(self, dims: int, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError("padding_mode must be one of ['zeros', 'reflect', 'replicate', 'circular'], but got "
                             f"padding_mode='{padding_mode}'")

        def tup(v: Any) -> tuple:
            return (v,) * dims if isinstance(v, int) else tuple(v)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = tup(kernel_size), tup(stride), tup(dilation)
        self.padding = padding if isinstance(padding, str) else tup(padding)
        # F.pad's order (last dim first, left then right), as torch keeps it for non-zero padding modes
        if self.padding == "same":
            pairs = []
            for d, k in zip(self.dilation, self.kernel_size):
                total = d * (k - 1)
                pairs.append((total // 2, total - total // 2))
        elif self.padding == "valid":
            pairs = [(0, 0)] * dims
        else:
            pairs = [(p, p) for p in self.padding]
        self._reversed_padding_repeated_twice = [v for pair in reversed(pairs) for v in pair]
        self.padding_mode, self.output_padding, self.transposed = padding_mode, (0,) * dims, False
        self.weight = Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(torch.empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.kernel_size):
            text += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.kernel_size):
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class Conv2d(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, input: Any) -> Any:
        if self.padding_mode != "zeros":
            return F.conv2d(F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode), self.weight,
                            self.bias, self.stride, 0, self.dilation, self.groups)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)

    def forward(self, input: Any) -> Any:
        if self.padding_mode != "zeros":
            return F.conv1d(F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode), self.weight,
                            self.bias, self.stride, 0, self.dilation, self.groups)
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _ConvTransposeNd(_ConvNd):
    """Weight [in_channels, out_channels / groups, *kernel] (torch's layout), the same default init as the
    convolutions (fan_in from weight.shape[1])."""

    def __init__(self, dims: int, in_channels: int, out_channels: int, kernel_size: Any, stride: Any,
                 padding: Any, output_padding: Any, groups: int, bias: bool, dilation: Any, padding_mode: str,
                 device: Any, dtype: Any) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        Module.__init__(self)
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")

        def tup(v: Any) -> tuple:
            return (v,) * dims if isinstance(v, int) else tuple(v)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = tup(kernel_size), tup(stride), tup(dilation)
        self.padding, self.output_padding = tup(padding), tup(output_padding)
        self.padding_mode, self.transposed = padding_mode, True
        self.weight = Parameter(torch.empty(in_channels, out_channels // groups, *self.kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(torch.empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _output_padding(self, input: Any, output_size: Any) -> tuple:
        """torch's rule: output_size (optionally with the batch/channel dims) picks the output_padding that
        reaches it, which must lie in [smallest, smallest + stride - 1] per dim."""
        if output_size is None:
            return self.output_padding
        dims = len(self.kernel_size)
        output_size = list(output_size)
        if len(output_size) == dims + 2 or (len(output_size) == dims + 1 and input.ndim == dims + 1):
            output_size = output_size[-dims:]
        if len(output_size) != dims:
            raise ValueError(f"ConvTranspose{dims}D: for {input.ndim}D input, output_size must have {dims} or "
                             f"{dims + 2} elements (got {len(output_size)})")
        result = []
        for d in range(dims):
            size = input.shape[input.ndim - dims + d]
            smallest = ((size - 1) * self.stride[d] - 2 * self.padding[d] +
                        self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            largest = smallest + self.stride[d] - 1
            if not smallest <= output_size[d] <= largest:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes range from "
                                 f"{smallest} to {largest} (for an input of "
                                 f"{list(input.shape[-dims:])})")
            result.append(output_size[d] - smallest)
        return tuple(result)


class ConvTranspose2d(_ConvTransposeNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                         dilation, padding_mode, device, dtype)

    def forward(self, input: Any, output_size: Any = None) -> Any:
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                         dilation, padding_mode, device, dtype)

    def forward(self, input: Any, output_size: Any = None) -> Any:
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(input, output_size), self.groups, self.dilation)


class Upsample(Module):
    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: Optional[bool] = None, recompute_scale_factor: Optional[bool] = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor: Any = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input: Any) -> Any:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = "scale_factor=" + repr(self.scale_factor)
        else:
            info = "size=" + repr(self.size)
        return info + ", mode=" + repr(self.mode)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.dilation, self.return_indices, self.ceil_mode = padding, dilation, return_indices, ceil_mode

    def forward(self, input: Any) -> Any:
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(MaxPool2d):
    def forward(self, input: Any) -> Any:
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: Optional[int] = None) -> None:
        super().__init__()
        self.kernel_size, self.stride = kernel_size, kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input: Any) -> Any:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Any) -> Any:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
