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


@pytest.fixture
def prepack_on():
    """Packed-weight caching on for the test (TORCHBURN_PREPACK may have turned it off), restored after."""
    before = _C.get_prepack()
    _C.set_prepack(True)
    yield
    _C.set_prepack(before)
