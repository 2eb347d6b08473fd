"""turbo_torch.nn: Module, Parameter, layers, losses, functional and init with PyTorch's semantics."""
from . import functional, init, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules.module import Buffer, Module, Parameter  # noqa: F401
