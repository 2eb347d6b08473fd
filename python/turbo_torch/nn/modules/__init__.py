"""Modules of turbo_torch.nn."""
from .layers import *  # noqa: F401,F403
from .layers import _Loss, _WeightedLoss  # noqa: F401
from .module import Buffer, Module, Parameter  # noqa: F401
from .sequence import *  # noqa: F401,F403
