"""turbo_torch.autograd: grad mode switches and the functional entry points of the C engine."""
from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

from torchburn import _C


class _GradMode:
    """A context manager that is also a decorator (like torch.no_grad)."""

    _enabled = True

    def __enter__(self) -> None:
        self._previous = _C._tt_set_grad_enabled(self._enabled)

    def __exit__(self, *exc: Any) -> None:
        _C._tt_set_grad_enabled(self._previous)

    def __call__(self, function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self.__class__():
                return function(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Disables gradient recording inside the block."""
    _enabled = False


class enable_grad(_GradMode):
    """Enables gradient recording inside the block."""
    _enabled = True


class set_grad_enabled(_GradMode):
    """set_grad_enabled(mode): a function call and a context manager, like torch's."""

    def __init__(self, mode: bool) -> None:
        self._enabled = bool(mode)
        self._previous = _C._tt_set_grad_enabled(self._enabled)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        _C._tt_set_grad_enabled(self._previous)

    def __call__(self, function: Any) -> Any:
        mode = self._enabled
        _C._tt_set_grad_enabled(self._previous)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return function(*args, **kwargs)
        return wrapper


class inference_mode(_GradMode):
    """No recording at all inside the block (like torch.inference_mode)."""

    def __init__(self, mode: bool = True) -> None:
        self._mode = bool(mode)

    def __enter__(self) -> None:
        self._previous_inference = _C._tt_set_inference_mode(self._mode)
        self._previous = _C._tt_set_grad_enabled(not self._mode and _C._tt_is_grad_enabled())

    def __exit__(self, *exc: Any) -> None:
        _C._tt_set_grad_enabled(self._previous)
        _C._tt_set_inference_mode(self._previous_inference)

    def __call__(self, function: Any) -> Any:
        mode = self._mode

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(mode):
                return function(*args, **kwargs)
        return wrapper


def is_grad_enabled() -> bool:
    return _C._tt_is_grad_enabled()


def is_inference_mode_enabled() -> bool:
    return _C._tt_is_inference_mode_enabled()


def _as_tuple(x: Any) -> tuple:
    if x is None:
        return ()
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: Optional[bool] = None,
             create_graph: bool = False, inputs: Any = None) -> None:
    """Accumulates gradients of tensors into the leaves' .grad (torch.autograd.backward)."""
    if create_graph:
        raise NotImplementedError("turbo_torch: create_graph=True (higher-order gradients) is not supported yet")
    tensors = _as_tuple(tensors)
    grads = None if grad_tensors is None else _as_tuple(grad_tensors)
    _C._tt_backward(tensors, grads, bool(retain_graph))


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Optional[bool] = None,
         create_graph: bool = False, allow_unused: Optional[bool] = None, is_grads_batched: bool = False,
         materialize_grads: bool = False) -> tuple:
    """Gradients of outputs with respect to inputs, without touching any .grad (torch.autograd.grad)."""
    if create_graph:
        raise NotImplementedError("turbo_torch: create_graph=True (higher-order gradients) is not supported yet")
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    grads = None if grad_outputs is None else _as_tuple(grad_outputs)
    result = _C._tt_grad(outputs, inputs, grads, bool(retain_graph), bool(allow_unused) or materialize_grads)
    if materialize_grads:
        from . import zeros_like
        result = tuple(zeros_like(x) if g is None else g for x, g in zip(inputs, result))
    return result


Node = _C.EagerNode
