"""turbo_torch.utils: ``data`` (datasets, samplers, DataLoader), as torch.utils."""
from . import data  # noqa: F401
