"""turbo_torch.nn.utils: gradient clipping and parameter vectors."""
from __future__ import annotations

import math
from typing import Any, Iterable

import turbo_torch as torch


def _grads(parameters: Any) -> list:
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    return [p for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: Any = None) -> torch.Tensor:
    params = _grads(parameters)
    if not params:
        return torch.tensor(0.0)
    norms = torch.stack([torch.norm(p.grad.detach(), norm_type) for p in params])
    total = torch.norm(norms, norm_type)
    if error_if_nonfinite and not bool(torch.isfinite(total)):
        raise RuntimeError(f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, "
                           "so it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for p in params:
            p.grad.mul_(coefficient.to(p.grad.dtype))
    return total


def clip_grad_value_(parameters: Any, clip_value: float, foreach: Any = None) -> None:
    with torch.no_grad():
        for p in _grads(parameters):
            p.grad.copy_(torch.clamp(p.grad, -clip_value, clip_value))


def parameters_to_vector(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: torch.Tensor, parameters: Iterable[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(p.shape))
            offset += n
