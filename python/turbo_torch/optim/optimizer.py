"""torch.optim.Optimizer for turbo_torch: param groups, per-parameter state, state_dict in PyTorch's
format (state keyed by parameter index, param_groups with 'params' index lists).

The subclasses gather one param group's tensors into lists and hand them to one C call
(``_C._tt_optim_step``), which updates every parameter in place without recording autograd.

Example::

    >>> import turbo_torch as torch
    >>> w = torch.zeros(3, requires_grad=True)
    >>> opt = torch.optim.SGD([w], lr=0.1)
    >>> (w - 1.0).pow(2).sum().backward(); opt.step(); opt.zero_grad()
    >>> w.tolist()
    [0.20000000298023224, 0.20000000298023224, 0.20000000298023224]
"""
from __future__ import annotations

from collections import defaultdict
from copy import deepcopy
from itertools import chain
from typing import Any, Callable, Iterable

from .. import Tensor, enable_grad, float32, float64, get_default_dtype, tensor
from torchburn import _C

__all__ = ["Optimizer", "required"]

# Kinds and flags of _C._tt_optim_step (src/pyext/eager_optim.c).
_SGD, _ADAM, _RMSPROP, _ADAGRAD = 0, 1, 2, 3
_NESTEROV, _MAXIMIZE, _AMSGRAD, _DECOUPLED, _CENTERED = 1, 2, 4, 8, 16


class _RequiredParameter:
    """Singleton marking a hyperparameter a param group must give (``lr`` of a bare SGD)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _step_dtype():
    return float64 if get_default_dtype() == float64 else float32


def _new_step() -> Tensor:
    return tensor(0.0, dtype=_step_dtype())


def _foreach_step(kind: int, params: list, grads: list, states: tuple, steps, fresh, *, lr=0.0, weight_decay=0.0,
                  momentum=0.0, dampening=0.0, beta1=0.0, beta2=0.0, eps=0.0, alpha=0.0, lr_decay=0.0,
                  flags=0) -> None:
    if not params:
        return
    s0, s1, s2 = states
    _C._tt_optim_step(kind, params, grads, s0, s1, s2, steps, fresh, float(lr), float(weight_decay),
                      float(momentum), float(dampening), float(beta1), float(beta2), float(eps), float(alpha),
                      float(lr_decay), flags)


class Optimizer:
    """Base class of all optimizers (``torch.optim.Optimizer``).

    params: an iterable of tensors, of (name, tensor) pairs, or of dicts defining param groups.
    defaults: the default hyperparameters of a group.
    """

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__module__}.{type(params).__name__}")
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += "\n" + f"Parameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a group (a dict with 'params' and optional per-group hyperparameters)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                            "tensors in sets will change between runs. Please use a list instead.")
        else:
            param_group["params"] = list(params)
        extracted, names = [], []
        for entry in param_group["params"]:
            if isinstance(entry, tuple) and len(entry) == 2:
                names.append(entry[0])
                extracted.append(entry[1])
            else:
                extracted.append(entry)
        if names:
            if len(names) != len(extracted):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        param_group["params"] = extracted
        for param in extracted:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                f"{type(param).__module__}.{type(param).__name__}")
            if not param.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        if len({id(p) for p in extracted}) != len(extracted):
            import warnings

            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen = {id(p) for group in self.param_groups for p in group["params"]}
        if any(id(p) in seen for p in extracted):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Resets the gradients of all parameters (to None, or to zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    grad = p.grad
                    if grad.grad_fn is not None:
                        grad.detach_()
                    else:
                        grad.requires_grad_(False)
                    grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """{'state': {index: {...}}, 'param_groups': [{..., 'params': [index, ...]}]}, as PyTorch writes it."""
        mapping: dict[int, int] = {}
        start = 0
        packed_groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                mapping.setdefault(id(p), i)
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            packed_groups.append(packed)
        packed_state = {(mapping[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": packed_state, "param_groups": packed_groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Loads a state_dict of this class (ours or PyTorch's structure with turbo_torch tensors)."""
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError("optimizer state_dict must be a dict with 'state' and 'param_groups'")
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = dict(zip(chain.from_iterable(s["params"] for s in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))

        def cast(param: Tensor, value: Any, key: Any = None) -> Any:
            if isinstance(value, Tensor):
                if key == "step":
                    return value
                if param.is_floating_point() and value.dtype != param.dtype:
                    return value.to(dtype=param.dtype)
                return value
            if isinstance(value, dict):
                return {k: cast(param, v, k) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(cast(param, v, key) for v in value)
            return value

        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = cast(param, value)
                step = state[param].get("step")
                if step is not None and not isinstance(step, Tensor):
                    state[param]["step"] = tensor(float(step), dtype=_step_dtype())
            else:
                state[key] = value
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            for name, default in self.defaults.items():
                saved.setdefault(name, default)
            new_groups.append(saved)
        self.state = state
        self.param_groups = new_groups

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Runs one update of every parameter with a gradient; returns closure()'s loss if given."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._group_step(group, params)
        return loss

    def _group_step(self, group: dict[str, Any], params: list) -> None:
        raise NotImplementedError

    @staticmethod
    def _check_flags(group: dict[str, Any]) -> None:
        for name in ("fused", "capturable", "differentiable"):
            if group.get(name):
                raise RuntimeError(f"turbo_torch.optim: {name}=True is not supported")
