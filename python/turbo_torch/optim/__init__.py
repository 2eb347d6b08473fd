"""turbo_torch.optim: PyTorch's optimizers and learning-rate schedulers (see docs/turbo_torch.md)."""
from . import lr_scheduler  # noqa: F401
from ._optimizers import SGD, Adagrad, Adam, AdamW, RMSprop  # noqa: F401
from .optimizer import Optimizer  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
