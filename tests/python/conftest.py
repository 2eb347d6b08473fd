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


def _switched_on(get, set_):
    before = get()
    set_(True)
    yield
    set_(before)


@pytest.fixture
def prepack_on():
    """Packed-weight caching on for the test (TORCHBURN_PREPACK may have turned it off), restored after."""
    yield from _switched_on(_C.get_prepack, _C.set_prepack)


@pytest.fixture
def winograd_on():
    """The Winograd convolution path on for the test (TORCHBURN_CONV_WINOGRAD may have turned it off)."""
    yield from _switched_on(_C.conv_get_winograd, _C.conv_set_winograd)
