"""SGD, Adam, AdamW, RMSprop and Adagrad with PyTorch's hyperparameters, defaults, checks and state
names. Each step gathers a param group's tensors and runs one C foreach call (src/eager/optim.c)."""
from __future__ import annotations

from typing import Any, Iterable

from .. import full_like, zeros_like
from .optimizer import (_ADAGRAD, _ADAM, _AMSGRAD, _CENTERED, _DECOUPLED, _MAXIMIZE, _NESTEROV, _RMSPROP, _SGD,
                        Optimizer, _foreach_step, _new_step)

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, Nesterov, weight decay (``torch.optim.SGD``)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None) -> None:
        _check(lr >= 0.0, f"Invalid learning rate: {lr}")
        _check(momentum >= 0.0, f"Invalid momentum value: {momentum}")
        _check(weight_decay >= 0.0, f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, differentiable=differentiable,
                        fused=fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def _group_step(self, group: dict[str, Any], params: list) -> None:
        self._check_flags(group)
        momentum = group["momentum"]
        buffers, fresh = [], []
        for p in params:
            if momentum != 0:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                fresh.append(buf is None)
                if buf is None:
                    buf = state["momentum_buffer"] = zeros_like(p)
                buffers.append(buf)
        flags = (_NESTEROV if group["nesterov"] else 0) | (_MAXIMIZE if group["maximize"] else 0)
        _foreach_step(_SGD, params, [p.grad for p in params], (buffers if momentum != 0 else None, None, None),
                      None, fresh if momentum != 0 else None, lr=group["lr"], weight_decay=group["weight_decay"],
                      momentum=momentum, dampening=group["dampening"], flags=flags)


class Adam(Optimizer):
    """Adam (``torch.optim.Adam``); ``decoupled_weight_decay=True`` is AdamW."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False) -> None:
        _check(0.0 <= lr, f"Invalid learning rate: {lr}")
        _check(0.0 <= eps, f"Invalid epsilon value: {eps}")
        _check(0.0 <= betas[0] < 1.0, f"Invalid beta parameter at index 0: {betas[0]}")
        _check(0.0 <= betas[1] < 1.0, f"Invalid beta parameter at index 1: {betas[1]}")
        _check(0.0 <= weight_decay, f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _group_step(self, group: dict[str, Any], params: list) -> None:
        self._check_flags(group)
        amsgrad = group["amsgrad"]
        exp_avgs, exp_avg_sqs, max_sqs, steps = [], [], [], []
        for p in params:
            state = self.state[p]
            if len(state) == 0:
                state["step"] = _new_step()
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = zeros_like(p)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if amsgrad:
                max_sqs.append(state["max_exp_avg_sq"])
            steps.append(state["step"])
        beta1, beta2 = group["betas"]
        flags = ((_AMSGRAD if amsgrad else 0) | (_MAXIMIZE if group["maximize"] else 0)
                 | (_DECOUPLED if group["decoupled_weight_decay"] else 0))
        _foreach_step(_ADAM, params, [p.grad for p in params], (exp_avgs, exp_avg_sqs, max_sqs if amsgrad else None),
                      steps, None, lr=group["lr"], weight_decay=group["weight_decay"], beta1=beta1, beta2=beta2,
                      eps=group["eps"], flags=flags)


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class RMSprop(Optimizer):
    """RMSprop with alpha, eps, momentum and the centered variant (``torch.optim.RMSprop``)."""

    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False) -> None:
        _check(0.0 <= lr, f"Invalid learning rate: {lr}")
        _check(0.0 <= eps, f"Invalid epsilon value: {eps}")
        _check(0.0 <= momentum, f"Invalid momentum value: {momentum}")
        _check(0.0 <= weight_decay, f"Invalid weight_decay value: {weight_decay}")
        _check(0.0 <= alpha, f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach, maximize=maximize,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    def _group_step(self, group: dict[str, Any], params: list) -> None:
        self._check_flags(group)
        momentum, centered = group["momentum"], group["centered"]
        square_avgs, buffers, grad_avgs, steps = [], [], [], []
        for p in params:
            state = self.state[p]
            if len(state) == 0:
                state["step"] = _new_step()
                state["square_avg"] = zeros_like(p)
                if momentum > 0:
                    state["momentum_buffer"] = zeros_like(p)
                if centered:
                    state["grad_avg"] = zeros_like(p)
            square_avgs.append(state["square_avg"])
            if momentum > 0:
                buffers.append(state["momentum_buffer"])
            if centered:
                grad_avgs.append(state["grad_avg"])
            steps.append(state["step"])
        flags = (_CENTERED if centered else 0) | (_MAXIMIZE if group["maximize"] else 0)
        _foreach_step(_RMSPROP, params, [p.grad for p in params],
                      (square_avgs, buffers if momentum > 0 else None, grad_avgs if centered else None), steps, None,
                      lr=group["lr"], weight_decay=group["weight_decay"], momentum=momentum, alpha=group["alpha"],
                      eps=group["eps"], flags=flags)


class Adagrad(Optimizer):
    """Adagrad with lr_decay and initial_accumulator_value (``torch.optim.Adagrad``)."""

    def __init__(self, params: Iterable, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None) -> None:
        _check(0.0 <= lr, f"Invalid learning rate: {lr}")
        _check(0.0 <= lr_decay, f"Invalid lr_decay value: {lr_decay}")
        _check(0.0 <= weight_decay, f"Invalid weight_decay value: {weight_decay}")
        _check(0.0 <= initial_accumulator_value,
               f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        _check(0.0 <= eps, f"Invalid epsilon value: {eps}")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach, maximize=maximize,
                        differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:  # Adagrad creates its state up front, as PyTorch does
            for p in group["params"]:
                state = self.state[p]
                state["step"] = _new_step()
                state["sum"] = full_like(p, group["initial_accumulator_value"])

    def _group_step(self, group: dict[str, Any], params: list) -> None:
        self._check_flags(group)
        sums, steps = [], []
        for p in params:
            state = self.state[p]
            if len(state) == 0:  # a group added after construction
                state["step"] = _new_step()
                state["sum"] = full_like(p, group["initial_accumulator_value"])
            sums.append(state["sum"])
            steps.append(state["step"])
        _foreach_step(_ADAGRAD, params, [p.grad for p in params], (sums, None, None), steps, None, lr=group["lr"],
                      weight_decay=group["weight_decay"], lr_decay=group["lr_decay"], eps=group["eps"],
                      flags=_MAXIMIZE if group["maximize"] else 0)
