"""Shared fixtures: run op tests at every ISA level this CPU supports (set in-process, the same switch
TORCHBURN_ISA drives at import)."""
import pytest

import torchburn
from torchburn import _C

SUPPORTED_ISAS = torchburn.cpu_info()["supported_isas"]
BEST_ISA = torchburn.cpu_info()["best_isa"]


@pytest.fixture(params=SUPPORTED_ISAS)
def isa(request):
    _C.set_isa(request.param)
    yield request.param
    _C.set_isa(BEST_ISA)
