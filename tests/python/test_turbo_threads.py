"""torch's thread-count API on turbo_torch (programs call torch.set_num_threads first thing)."""
import pytest
import torch

import turbo_torch as tt


def test_set_get_num_threads_like_torch():
    before_tt, before_torch = tt.get_num_threads(), torch.get_num_threads()
    try:
        for n in (1, 2):
            tt.set_num_threads(n)
            torch.set_num_threads(n)
            assert tt.get_num_threads() == torch.get_num_threads() == n
        for bad in (0, -1):
            with pytest.raises(RuntimeError):
                torch.set_num_threads(bad)
            with pytest.raises(RuntimeError):
                tt.set_num_threads(bad)
        # the kernels really run with that many threads: the extension reports the same count
        from torchburn import _C
        tt.set_num_threads(1)
        assert _C.get_num_threads() == 1
    finally:
        tt.set_num_threads(before_tt)
        torch.set_num_threads(before_torch)


def test_interop_threads():
    assert tt.get_num_interop_threads() >= 1
    with pytest.raises(RuntimeError):
        tt.set_num_interop_threads(0)
