"""The op table is the single source of the eager ops: every declared op must have its binding, a
module function or method in turbo_torch, and a conformance case that compares it with PyTorch."""
import pathlib
import re

import turbo_torch as tt
from torchburn import _C

CONFORMANCE = (pathlib.Path(__file__).parent / "test_turbo_conformance.py").read_text()
# internal or spelled differently in torch (gelu_tanh is gelu(approximate='tanh'); pow_scalar is x ** float)
INTERNAL = {"gelu_tanh", "pow_scalar"}


def test_every_table_op_is_bound_and_tested():
    missing_binding, missing_api, missing_test = [], [], []
    for name in _C._tt_unary_names() + _C._tt_binary_names():
        if not hasattr(_C, "_tt_" + name):
            missing_binding.append(name)
        if name in INTERNAL:
            continue
        if not hasattr(tt, name) and not hasattr(tt.Tensor, name):
            missing_api.append(name)
        if not re.search(r'["\']' + re.escape(name) + r'["\']', CONFORMANCE):
            missing_test.append(name)
    assert not missing_binding, f"ops without a C binding: {missing_binding}"
    assert not missing_api, f"ops not reachable from turbo_torch: {missing_api}"
    assert not missing_test, f"ops without a conformance case: {missing_test}"


def test_table_kinds_are_known():
    kinds = _C._tt_op_kinds()
    assert set(k for _, k in kinds.values()) <= {"float", "same", "test", "arith", "fdiv", "cmp", "logic", "bits"}
    assert kinds["exp"] == ("unary", "float") and kinds["add"] == ("binary", "arith") and kinds["lt"] == ("binary", "cmp")
