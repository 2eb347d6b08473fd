"""turbo_torch against real PyTorch: every case runs one lambda under both (see turbo_harness.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import turbo_torch as tt  # noqa: E402
from turbo_harness import check_op, make_input  # noqa: E402

FLOAT_DTYPES = ["float32", "float64"]
ALL_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"]
SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 4), (0,), (4, 0)]

# (name, domain low, high) for float unary ops; domains keep values where both libraries are defined
UNARY_FLOAT = [
    ("exp", -3, 3), ("exp2", -3, 3), ("expm1", -3, 3), ("log", 0.1, 4), ("log2", 0.1, 4), ("log10", 0.1, 4),
    ("log1p", -0.5, 3), ("sqrt", 0.1, 4), ("rsqrt", 0.2, 4), ("sin", -3, 3), ("cos", -3, 3), ("tan", -1, 1),
    ("asin", -0.9, 0.9), ("acos", -0.9, 0.9), ("atan", -3, 3), ("sinh", -2, 2), ("cosh", -2, 2),
    ("tanh", -3, 3), ("asinh", -3, 3), ("acosh", 1.1, 4), ("atanh", -0.9, 0.9), ("sigmoid", -4, 4),
    ("erf", -2, 2), ("erfc", -2, 2), ("erfinv", -0.9, 0.9), ("lgamma", 0.2, 4), ("digamma", 0.3, 4),
    ("reciprocal", 0.5, 3), ("sinc", -2, 2), ("frac", -3, 3), ("logit", 0.1, 0.9),
    ("neg", -3, 3), ("abs", -3, 3), ("sign", -3, 3), ("floor", -3, 3), ("ceil", -3, 3), ("round", -3, 3),
    ("trunc", -3, 3), ("relu", -3, 3), ("square", -3, 3),
]
NN_UNARY = ["relu", "gelu", "silu", "mish", "softplus", "elu", "celu", "selu", "leaky_relu", "hardtanh",
            "hardsigmoid", "hardswish", "logsigmoid", "softsign", "tanhshrink"]


def nn_call(m, name, x):
    return getattr(torch.nn.functional, name)(x) if m is torch else getattr(tt, name)(x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["float16", "bfloat16"])
@pytest.mark.parametrize("name,low,high", UNARY_FLOAT)
def test_unary_float(name, low, high, dtype):
    check_op(lambda m, x: getattr(m, name)(x[0]), [(3, 5)], dtype, low=low, high=high)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", ["exp", "tanh", "abs", "sqrt", "neg"])
def test_unary_shapes(name, shape):
    check_op(lambda m, x: getattr(m, name)(x[0]), [shape], "float32", low=0.1, high=3)


@pytest.mark.parametrize("name", ["exp", "sin", "sqrt", "neg", "abs", "floor", "sign", "sigmoid", "relu"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "bool"])
def test_unary_integer_inputs(name, dtype):
    if dtype == "bool" and name == "neg":
        pass  # torch raises; the harness checks we raise the same class
    check_op(lambda m, x: getattr(m, name)(x[0]), [(2, 5)], dtype, low=0, high=9)


@pytest.mark.parametrize("name", NN_UNARY)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_activations(name, dtype):
    check_op(lambda m, x: nn_call(m, name, x[0]), [(4, 6)], dtype, low=-4, high=4)


@pytest.mark.parametrize("fn", [
    lambda f, x: f.softplus(x, beta=2.0, threshold=3.0), lambda f, x: f.elu(x, alpha=0.5),
    lambda f, x: f.celu(x, alpha=2.0), lambda f, x: f.leaky_relu(x, 0.2), lambda f, x: f.hardtanh(x, -0.5, 2.0),
    lambda f, x: f.relu6(x * 3), lambda f, x: f.gelu(x, approximate="tanh"),
])
def test_activation_parameters(fn):
    check_op(lambda m, x: fn(torch.nn.functional if m is torch else tt, x[0]), [(4, 6)], "float64", low=-4, high=4)


def test_transposed_input():
    check_op(lambda m, x: m.exp(x[0]) * 2, [(4, 5)], "float32", transpose=True)
    check_op(lambda m, x: x[0] + x[1], [(4, 5), (4, 5)], "float64", transpose=True)


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 1e30, -2.5])


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "abs", "neg", "sign", "floor", "relu", "tanh", "sigmoid",
                                  "isnan", "isinf", "isfinite", "signbit", "reciprocal", "round", "trunc", "erf"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_special_values(name, dtype):
    check_op(lambda m, x: getattr(m, name)(x[0]), None, dtype, grad=False, inputs=[SPECIAL])


BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "pow",
          "remainder", "fmod", "floor_divide", "copysign", "eq", "ne", "lt", "le", "gt", "ge",
          "logical_and", "logical_or", "logical_xor", "xlogy", "logaddexp"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_float(name, dtype):
    low = 0.5 if name in ("pow", "xlogy") else -3
    # torch records floor_divide but raises "derivative not implemented" at backward: compare forward only
    check_op(lambda m, x: getattr(m, name)(x[0], x[1]), [(3, 4), (3, 4)], dtype, low=low, high=3,
             grad=name != "floor_divide")


@pytest.mark.parametrize("shapes", [[(3, 1), (1, 4)], [(2, 3, 4), (4,)], [(5,), ()], [(), ()], [(0, 3), (1, 3)],
                                    [(2, 1, 3), (4, 1)]])
@pytest.mark.parametrize("name", ["add", "mul", "sub", "div", "maximum", "lt"])
def test_binary_broadcast(name, shapes):
    check_op(lambda m, x: getattr(m, name)(x[0], x[1]), shapes, "float32")


def test_binary_broadcast_error():
    check_op(lambda m, x: x[0] + x[1], [(3, 4), (5,)], "float32")


INT_BINARY = ["add", "sub", "mul", "floor_divide", "remainder", "fmod", "maximum", "minimum", "bitwise_and",
              "bitwise_or", "bitwise_xor", "eq", "lt", "ge", "div"]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
@pytest.mark.parametrize("name", INT_BINARY)
def test_binary_integer(name, dtype):
    a = make_input((3, 4), dtype, -20, 20, seed=1)
    b = make_input((3, 4), dtype, 1, 7, seed=2)
    if dtype != "uint8":
        b = b * np.where(make_input((3, 4), "bool", seed=3), 1, -1).astype(dtype)
    check_op(lambda m, x: getattr(m, name)(x[0], x[1]), None, dtype, inputs=[a, b])


def test_integer_division_by_zero():
    a = np.array([1, 2, 3], dtype=np.int64)
    b = np.array([1, 0, 3], dtype=np.int64)
    check_op(lambda m, x: x[0] // x[1], None, "int64", inputs=[a, b])


# type promotion: tensor-tensor, tensor-scalar, 0-dim tensors
PROMOTION_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool"]


@pytest.mark.parametrize("left", PROMOTION_DTYPES)
@pytest.mark.parametrize("right", PROMOTION_DTYPES)
def test_promotion_tensor_tensor(left, right):
    a = make_input((2, 3), left, 0, 5, seed=1)
    b = make_input((2, 3), right, 0, 5, seed=2)

    def fn(m, _):
        x = m.tensor(a.tolist(), dtype=getattr(m, left))
        y = m.tensor(b.tolist(), dtype=getattr(m, right))
        return x + y, x * y, x < y, m.result_type(x, y)
    check_op(fn, [], "float32", grad=False, rtol=1e-2, atol=1e-2, inputs=[])


@pytest.mark.parametrize("dtype", PROMOTION_DTYPES)
@pytest.mark.parametrize("scalar", [2, 2.5, True, -3])
def test_promotion_scalar(dtype, scalar):
    a = make_input((4,), dtype, 0, 5, seed=1)

    def fn(m, _):
        x = m.tensor(a.tolist(), dtype=getattr(m, dtype))
        return x * scalar, scalar + x, x / 2, m.result_type(x, scalar)
    check_op(fn, [], "float32", grad=False, rtol=1e-2, atol=1e-2, inputs=[])


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float16", "int64"])
def test_promotion_zero_dim(dtype):
    def fn(m, _):
        x = m.tensor([1, 2, 3], dtype=getattr(m, dtype))
        return x + m.tensor(2.5), x + m.tensor(2, dtype=m.int64), x * m.tensor(3.0, dtype=m.float64)
    check_op(fn, [], "float32", grad=False, rtol=1e-3, atol=1e-3, inputs=[])


def test_promote_types_table():
    names = PROMOTION_DTYPES + ["int16"]
    for a in names:
        for b in names:
            expected = str(torch.promote_types(getattr(torch, a), getattr(torch, b)))
            assert repr(tt.promote_types(getattr(tt, a), getattr(tt, b))) == expected, (a, b)


REDUCTIONS = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "nansum"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False),
                                         ((0, 2), True), ((), False)])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions(name, dim, keepdim, dtype):
    if name == "logsumexp" and dim in (None, ()):
        dim = (0, 1, 2)
    if dim is None:
        check_op(lambda m, x: getattr(m, name)(x[0]), [(3, 4, 2)], dtype, low=0.5, high=1.5)
    else:
        check_op(lambda m, x: getattr(m, name)(x[0], dim, keepdim=keepdim), [(3, 4, 2)], dtype, low=0.5, high=1.5)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("name", ["sum", "prod", "amax", "amin", "all", "any"])
def test_reductions_integer(name, dtype):
    check_op(lambda m, x: (getattr(m, name)(x[0]), getattr(m, name)(x[0], 1)), [(3, 4)], dtype, low=0, high=5)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_max_min_dim(name, dim, keepdim, dtype):
    check_op(lambda m, x: tuple(getattr(m, name)(x[0], dim, keepdim=keepdim)), [(4, 5)], dtype)
    check_op(lambda m, x: getattr(m, name)(x[0]), [(4, 5)], dtype)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_arg_reductions(name, dim):
    check_op(lambda m, x: getattr(m, name)(x[0], dim) if dim is not None else getattr(m, name)(x[0]), [(4, 5)], "float32")


@pytest.mark.parametrize("name", ["std", "var"])
@pytest.mark.parametrize("correction", [0, 1, 0.5, 7])
@pytest.mark.parametrize("dim", [None, 1])
def test_std_var(name, correction, dim):
    check_op(lambda m, x: getattr(m, name)(x[0], dim, correction=correction), [(3, 6)], "float64")


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("dim", [None, 1])
def test_vector_norm(p, dim):
    grad = p not in (0,)
    check_op(lambda m, x: m.linalg.vector_norm(x[0], p, dim) if m is torch else m.norm(x[0], p, dim),
             [(3, 5)], "float64", grad=grad)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumulative(name, dim):
    check_op(lambda m, x: getattr(m, name)(x[0], dim), [(3, 4)], "float64", low=0.5, high=2)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dim", [0, -1, 1])
def test_softmax(name, dtype, dim):
    check_op(lambda m, x: getattr(m, name)(x[0], dim), [(3, 4, 5)], dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["int64", "int32"])
@pytest.mark.parametrize("shapes", [[(3, 4), (4, 5)], [(4,), (4,)], [(4,), (4, 3)], [(3, 4), (4,)],
                                    [(2, 3, 4), (2, 4, 5)], [(2, 3, 4), (4, 5)], [(5, 1, 3, 4), (2, 4, 2)],
                                    [(1, 7), (7, 1)], [(0, 3), (3, 2)]])
def test_matmul(shapes, dtype):
    check_op(lambda m, x: x[0] @ x[1], shapes, dtype, low=-3, high=3, rtol=1e-4 if dtype == "float32" else None,
             atol=1e-4 if dtype == "float32" else None)


def test_matmul_errors():
    check_op(lambda m, x: m.matmul(x[0], x[1]), [(3, 4), (5, 6)], "float32")
    check_op(lambda m, x: m.mm(x[0], x[1]), [(3,), (3, 2)], "float32")


@pytest.mark.parametrize("fn", [
    lambda m, x: m.mm(x[0], x[1].t()), lambda m, x: m.outer(x[0][0], x[1][0]),
    lambda m, x: m.dot(x[0][0], x[1][1]), lambda m, x: m.addmm(x[0][:, :3], x[0], x[1].t()),
    lambda m, x: m.einsum("ij,kj->ik", x[0], x[1]), lambda m, x: m.einsum("ij->j", x[0]),
    lambda m, x: m.einsum("ij,ij->i", x[0], x[1]),
])
def test_linear_algebra_forms(fn):
    check_op(fn, [(3, 4), (3, 4)], "float64")


VIEWS = [
    lambda m, x: x[0].view(6, 4), lambda m, x: x[0].reshape(-1), lambda m, x: x[0].permute(2, 0, 1),
    lambda m, x: x[0].transpose(0, 2), lambda m, x: x[0].unsqueeze(1), lambda m, x: x[0][:, :1].squeeze(1),
    lambda m, x: x[0].flatten(), lambda m, x: x[0].flatten(1), lambda m, x: m.unflatten(x[0], 2, (2, 2)),
    lambda m, x: x[0][:, :1].expand(2, 5, 4), lambda m, x: x[0].narrow(1, 1, 2), lambda m, x: x[0].select(2, 3),
    lambda m, x: m.unbind(x[0], 1), lambda m, x: m.chunk(x[0], 2, 2), lambda m, x: m.split(x[0], 2, 1),
    lambda m, x: m.split(x[0], [1, 2], 1), lambda m, x: x[0].contiguous(), lambda m, x: x[0].mT,
    lambda m, x: x[0].T, lambda m, x: m.flip(x[0], [0, 2]), lambda m, x: m.roll(x[0], 1, 1),
    lambda m, x: m.roll(x[0], (1, -1), (0, 2)), lambda m, x: m.movedim(x[0], 0, -1),
    lambda m, x: x[0].repeat(2, 1, 1), lambda m, x: m.tile(x[0], (2,)),
    lambda m, x: m.repeat_interleave(x[0], 2, 1), lambda m, x: m.tril(x[0][0]), lambda m, x: m.triu(x[0][0], 1),
    lambda m, x: m.cat([x[0], x[0] * 2], 1), lambda m, x: m.stack([x[0], x[0]], 0),
    lambda m, x: m.stack([x[0], x[0]], -1), lambda m, x: x[0].clone(), lambda m, x: m.squeeze(x[0][:1]),
]


@pytest.mark.parametrize("index", range(len(VIEWS)))
def test_views_and_shapes(index):
    check_op(VIEWS[index], [(2, 3, 4)], "float32")


def test_view_aliasing():
    x = tt.zeros(2, 3)
    v = x.view(6)
    v[1] = 5.0
    assert x[0, 1].item() == 5.0
    t = x.t()
    assert t.stride() == (1, 3) and not t.is_contiguous()
    assert x[:, 1:].storage_offset() == 1
    assert x.data_ptr() == v.data_ptr()
    s = x[0]
    s += 1
    assert x[0].tolist() == [1.0, 6.0, 1.0]
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(6)


INDEXING = [
    lambda m, x: x[0][1], lambda m, x: x[0][-1], lambda m, x: x[0][1:3], lambda m, x: x[0][::2],
    lambda m, x: x[0][:, 1:5:2], lambda m, x: x[0][None], lambda m, x: x[0][..., 1], lambda m, x: x[0][:, None, 2],
    lambda m, x: x[0][1, 2], lambda m, x: x[0][m.tensor([0, 2])], lambda m, x: x[0][[0, 0, 3]],
    lambda m, x: x[0][:, m.tensor([1, 0])], lambda m, x: x[0][x[0] > 0], lambda m, x: x[0][m.tensor([True, False, True, False])],
    lambda m, x: x[0][m.tensor([0, 1]), m.tensor([2, 3])], lambda m, x: x[0][-5:100],
    lambda m, x: m.index_select(x[0], 1, m.tensor([4, 0, 4])), lambda m, x: m.gather(x[0], 1, m.tensor([[0, 1], [2, 3], [4, 0], [1, 1]])),
    lambda m, x: m.masked_fill(x[0], x[0] < 0, 0.5), lambda m, x: m.masked_select(x[0], x[0] > 0),
    lambda m, x: m.where(x[0] > 0, x[0], 0.0), lambda m, x: m.where(x[0] > 0, x[0], x[0] * 3),
    lambda m, x: m.take(x[0], m.tensor([0, 5, 19])), lambda m, x: m.nonzero(x[0] > 0),
    lambda m, x: m.scatter(x[0], 1, m.tensor([[0], [1], [2], [3]]), 9.0),
    lambda m, x: m.scatter_add(x[0], 0, m.tensor([[0, 1, 2, 3, 0]]), x[0][:1]),
]


@pytest.mark.parametrize("index", range(len(INDEXING)))
def test_indexing(index):
    check_op(INDEXING[index], [(4, 5)], "float32", grad=index not in (23, 24, 25))


def test_nonzero_of_0_dim_tensors():
    for value in (2.0, 0.0):
        for as_tuple in (False, True):
            expected = torch.nonzero(torch.tensor(value), as_tuple=as_tuple)
            actual = tt.nonzero(tt.tensor(value), as_tuple=as_tuple)
            for e, a in zip(expected if as_tuple else [expected], actual if as_tuple else [actual]):
                assert tuple(a.shape) == tuple(e.shape) and repr(a.dtype) == str(e.dtype), (value, as_tuple, a, e)
                assert a.tolist() == e.tolist()


def test_index_errors():
    check_op(lambda m, x: x[0][4], [(4, 5)], "float32")
    check_op(lambda m, x: x[0][0, 0, 0], [(4, 5)], "float32")


def test_setitem():
    for m in (torch, tt):
        x = m.zeros(3, 4)
        x[1] = 2.0
        x[:, 0] = m.tensor([7.0, 8.0, 9.0])
        x[0, 1:3] = 5
        x[x > 8] = -1.0
        x[m.tensor([2])] = 4.0
        if m is torch:
            expected = x.tolist()
        else:
            assert x.tolist() == expected


SORTS = [lambda m, x: tuple(m.sort(x[0], 1)), lambda m, x: tuple(m.sort(x[0], 0, descending=True)),
         lambda m, x: m.argsort(x[0], 1), lambda m, x: tuple(m.topk(x[0], 2, 1)),
         lambda m, x: m.unique(m.tensor([3, 1, 2, 3, 1]))]


@pytest.mark.parametrize("index", range(len(SORTS)))
def test_sorting(index):
    check_op(SORTS[index], [(3, 5)], "float32", grad=False)


MISC = [lambda m, x: m.clamp(x[0], -1, 1), lambda m, x: m.clamp(x[0], min=0.5), lambda m, x: m.clamp(x[0], max=-0.5),
        lambda m, x: m.lerp(x[0], x[1], 0.3), lambda m, x: m.nan_to_num(x[0] / 0), lambda m, x: x[0] ** 2,
        lambda m, x: x[0] ** 3, lambda m, x: 2 ** x[0], lambda m, x: 1 - x[0],
        lambda m, x: 3 / x[0], lambda m, x: -x[0], lambda m, x: abs(x[0]), lambda m, x: x[0] // 0.7,
        lambda m, x: x[0] % 0.7, lambda m, x: x[0] % -0.7, lambda m, x: m.div(x[0], x[1], rounding_mode="floor"),
        lambda m, x: m.div(x[0], x[1], rounding_mode="trunc"), lambda m, x: m.sub(x[0], x[1], alpha=2),
        lambda m, x: m.add(x[0], x[1], alpha=0.5), lambda m, x: m.round(x[0], decimals=1),
        lambda m, x: (x[0] > 0) & (x[1] > 0), lambda m, x: ~(x[0] > 0), lambda m, x: (x[0] > 0) | (x[1] < 0),
        lambda m, x: (x[0] > 0) ^ (x[1] < 0)]


@pytest.mark.parametrize("index", range(len(MISC)))
def test_misc_math(index):
    grad = index not in (12, 15)  # floor division: torch raises "derivative not implemented"
    check_op(MISC[index], [(3, 4), (3, 4)], "float32", grad=grad)


def test_misc_math_abs_pow():
    check_op(lambda m, x: x[0].abs() ** 0.5, [(3, 4)], "float32")


CREATION = [
    lambda m: m.zeros(2, 3), lambda m: m.ones((2, 3), dtype=m.int32), lambda m: m.full((2,), 3),
    lambda m: m.full((2,), 2.5), lambda m: m.full((2,), True), lambda m: m.arange(5), lambda m: m.arange(1, 4, 0.5),
    lambda m: m.arange(10, 0, -3), lambda m: m.linspace(0, 1, 5), lambda m: m.linspace(-2, 3, 7, dtype=m.float64),
    lambda m: m.logspace(0, 2, 3), lambda m: m.eye(3), lambda m: m.eye(2, 4), lambda m: m.zeros_like(m.ones(2, 2)),
    lambda m: m.ones_like(m.zeros(3, dtype=m.int8)), lambda m: m.full_like(m.zeros(2), 7),
    lambda m: m.tensor([[1, 2], [3, 4]]), lambda m: m.tensor([1.5, 2]), lambda m: m.tensor(True),
    lambda m: m.tensor([]), lambda m: m.tensor(3), lambda m: m.tensor([[True, False]]),
    lambda m: m.tensor([1, 2], dtype=m.float16), lambda m: m.empty(0, 3).shape,
    lambda m: m.tensor([2 ** 40, -5]), lambda m: m.tensor([0.1, 0.2], dtype=m.float64),
]


@pytest.mark.parametrize("index", range(len(CREATION)))
def test_creation(index):
    check_op(lambda m, x: CREATION[index](m), [], "float32", grad=False, inputs=[])


def test_float64_is_exact():
    x = tt.tensor([1.0 + 2 ** -40], dtype=tt.float64)
    y = (x * 3 - 3).item()
    assert y == (1.0 + 2 ** -40) * 3 - 3
    big = tt.tensor([2 ** 62 + 1])
    assert (big + 1).item() == 2 ** 62 + 2
    assert (big * 2).tolist() == [(2 ** 63 + 2) - 2 ** 64]


def test_repr_matches_torch():
    cases = [lambda m: m.tensor([[1., 2.]]), lambda m: m.tensor([1.5, -2.25, 3.0]), lambda m: m.tensor([1, 2, 3]),
             lambda m: m.tensor([True, False]), lambda m: m.tensor(3.0), lambda m: m.tensor([1e-5, 1.0]),
             lambda m: m.tensor([1, 2], dtype=m.int32), lambda m: m.tensor([0.5], dtype=m.float64),
             lambda m: m.zeros(2, 2, 2), lambda m: m.tensor([1.0], requires_grad=True),
             lambda m: m.tensor([1.0], requires_grad=True) * 2, lambda m: m.tensor([float("nan"), float("inf"), 1.0]),
             lambda m: m.tensor([123456.0, 1.0]), lambda m: m.arange(12.).reshape(3, 4)]
    # empty tensors: the shape unless it is (0,), the dtype unless it is the default float dtype
    cases += [(lambda d, shape: lambda m: m.zeros(shape, dtype=getattr(m, d)))(d, shape)
              for d in ("float32", "float64", "int64", "bool", "int8") for shape in ((0,), (0, 3), (2, 0, 1))]
    for make in cases:
        assert repr(make(tt)) == repr(make(torch)), repr(make(torch))
    try:
        torch.set_default_dtype(torch.float64)
        tt.set_default_dtype(tt.float64)
        for make in cases:
            assert repr(make(tt)) == repr(make(torch)), repr(make(torch))
    finally:
        torch.set_default_dtype(torch.float32)
        tt.set_default_dtype(tt.float32)


def test_item_tolist_numpy():
    x = tt.tensor([[1.5, 2.0]])
    assert x.tolist() == [[1.5, 2.0]]
    assert x[0, 1].item() == 2.0 and isinstance(tt.tensor(3).item(), int)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tt.from_numpy(a)
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    n = t.numpy()
    n[1, 2] = -1
    assert t[1, 2].item() == -1
    assert float(tt.tensor([2.5])) == 2.5 and int(tt.tensor([3])) == 3
    with pytest.raises(RuntimeError):
        tt.tensor([1, 2]).item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(tt.tensor([1, 2]))


# ---- autograd ----

def test_autograd_chain_and_accumulation():
    for m in (torch, tt):
        w = m.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
        b = m.tensor([0.1, -0.2], requires_grad=True)
        x = m.tensor([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.5]])
        for _ in range(2):
            loss = m.tanh(x @ w + b).sum()
            loss.backward()
        if m is torch:
            expected = (w.grad.tolist(), b.grad.tolist(), loss.grad_fn.name())
        else:
            got = (w.grad.tolist(), b.grad.tolist(), loss.grad_fn.name())
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)


def test_leaf_and_nonleaf():
    x = tt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert x.is_leaf and not y.is_leaf and y.requires_grad and x.grad_fn is None
    assert y.grad_fn.name() == "MulBackward0"
    y.retain_grad()
    z = (y * y).sum()
    z.backward()
    assert y.grad.tolist() == [4.0, 8.0]
    assert x.grad.tolist() == [8.0, 16.0]


def test_backward_twice_and_retain_graph():
    x = tt.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = (tx.exp() * tx).sum()
    ty.backward(retain_graph=True)
    ty.backward()
    np.testing.assert_allclose(x.grad.tolist(), tx.grad.tolist(), rtol=1e-6)


def test_inplace_version_counter():
    for m in (torch, tt):
        a = m.tensor([1.0, 2.0], requires_grad=True)
        e = (a * 1).exp()
        e.detach()  # exp saves only its result: modifying the input afterwards is fine
        b = a * 1
        c = b.sin()  # sin saves its input (exp would save only its result, and not notice)
        b.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            c.sum().backward()
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            a.add_(1)


def test_inplace_on_nonleaf_gradient():
    check_op(lambda m, x: (x[0] * 2).mul_(x[1]).add_(1).exp_(), [(3,), (3,)], "float64")


def test_grad_modes():
    x = tt.tensor([1.0], requires_grad=True)
    with tt.no_grad():
        assert not (x * 2).requires_grad
        with tt.enable_grad():
            assert (x * 2).requires_grad
    with tt.inference_mode():
        assert not (x * 2).requires_grad
    tt.set_grad_enabled(False)
    assert not tt.is_grad_enabled()
    tt.set_grad_enabled(True)

    @tt.no_grad()
    def f(v):
        return v * 2
    assert not f(x).requires_grad
    assert (x * 2).requires_grad


def test_autograd_grad_and_hooks():
    x = tt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x ** 3).sum()
    (g,) = tt.autograd.grad(y, x)
    assert x.grad is None
    np.testing.assert_allclose(g.tolist(), [3.0, 12.0, 27.0])
    seen = []
    x.register_hook(lambda grad: seen.append(grad.tolist()) or grad * 2)
    (x * x).sum().backward()
    assert seen == [[2.0, 4.0, 6.0]] and x.grad.tolist() == [4.0, 8.0, 12.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        tt.tensor([1.0]).sum().backward()
    with pytest.raises(RuntimeError, match="implicitly created only for scalar"):
        (x * 2).backward()
    z = tt.tensor([1.0], requires_grad=True)
    assert tt.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)[1] is None
    with pytest.raises(RuntimeError, match="not have been used"):
        tt.autograd.grad((x * 2).sum(), [x, z])


def test_detach_and_requires_grad_rules():
    x = tt.tensor([1.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.data_ptr() == x.data_ptr()
    with pytest.raises(RuntimeError, match="floating point"):
        tt.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        (x * 2).requires_grad_(False)


def test_broadcast_gradients():
    check_op(lambda m, x: (x[0] * x[1] + x[2]).sum(), [(4, 1, 3), (5, 1), (3,)], "float64")
    check_op(lambda m, x: x[0].expand(3, 4) * x[1], [(1, 4), (3, 4)], "float64")


def test_mixed_dtype_gradients():
    def fn(m, x):
        return x[0] * x[0].to(m.float32)
    check_op(fn, [(3,)], "float64")


def test_deep_graph_frees_without_recursion():
    x = tt.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(20000):
        y = y * 1.0
    y.sum().backward()
    assert x.grad.item() == 1.0
    del y


# ---- errors ----

ERRORS = [lambda m, x: x[0] + m.ones(5), lambda m, x: x[0].view(7), lambda m, x: x[0].sum(3),
          lambda m, x: m.cat([x[0], m.ones(2, 2)], 0), lambda m, x: x[0].permute(0),
          lambda m, x: m.tensor([1, 2]).mean(), lambda m, x: m.tensor([True]) - m.tensor([False]),
          lambda m, x: -m.tensor([True]), lambda m, x: m.zeros(2).bitwise_and(m.zeros(2)),
          lambda m, x: m.tensor([1, 2]).float().requires_grad_().add_(1)]


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_errors_match_torch(index):
    check_op(ERRORS[index], [(3, 4)], "float32", grad=False)


# ---- the dispatch cache ----

def test_dispatch_cache_hits_and_no_stale_reuse():
    tt.runtime.cache_clear()
    a = tt.ones(4)
    b = tt.ones(4)
    a + b
    info = tt.runtime.cache_info()
    assert info["misses"] == 1 and info["hits"] == 0
    for _ in range(5):
        a + b
    assert tt.runtime.cache_info()["hits"] == 5
    # a different dtype, scalar kind or shape class must resolve afresh and give torch's answer
    r = a.to(tt.int32) + 2
    assert r.dtype is tt.int32
    r = a.to(tt.int32) + 2.5
    assert r.dtype is tt.float32
    r = a.to(tt.float64) + b
    assert r.dtype is tt.float64
    r = a + tt.tensor(2.0, dtype=tt.float64)
    assert r.dtype is tt.float32
    r = tt.ones(4, dtype=tt.int64) + tt.tensor(2.0, dtype=tt.float64)
    assert r.dtype is tt.float64  # a 0-dim tensor of a higher category wins with its own dtype
    assert tt.runtime.cache_info()["misses"] >= 5
    # shapes are not in the key: broadcasting is still exact on a hit
    assert (tt.ones(2, 1) + tt.ones(3)).shape == (2, 3)
    tt.set_default_dtype(tt.float64)
    try:
        assert (tt.ones(4, dtype=tt.int32) + 2.5).dtype is tt.float64
    finally:
        tt.set_default_dtype(tt.float32)
    assert (tt.ones(4, dtype=tt.int32) + 2.5).dtype is tt.float32


REMAINING = [("sgn", "float32"), ("positive", "float32"), ("isposinf", "float64"), ("isneginf", "float64"),
             ("logical_not", "float32"), ("bitwise_not", "int32"), ("bitwise_not", "bool"), ("bitwise_not", "float32")]


@pytest.mark.parametrize("name,dtype", REMAINING)
def test_remaining_unary(name, dtype):
    inputs = [SPECIAL] if dtype.startswith("float") else None
    check_op(lambda m, x: getattr(m, name)(x[0]), [(3, 4)], dtype, grad=False, inputs=inputs)


@pytest.mark.parametrize("name", ["nextafter", "bitwise_left_shift", "bitwise_right_shift"])
def test_remaining_binary(name):
    if name == "nextafter":
        check_op(lambda m, x: m.nextafter(x[0], x[1]), [(3, 4), (3, 4)], "float64", grad=False)
        return
    a = make_input((3, 4), "int64", -50, 50, seed=1)
    b = make_input((3, 4), "int64", 0, 5, seed=2)
    check_op(lambda m, x: getattr(m, name)(x[0], x[1]), None, "int64", inputs=[a, b])


@pytest.mark.parametrize("fn", [lambda m, x: m.clamp(x[0], -0.5, 0.5), lambda m, x: m.nan_to_num(x[0]),
                                lambda m, x: m.nan_to_num(x[0], nan=1.0, posinf=2.0, neginf=-2.0)])
def test_clamp_and_nan_to_num_special(fn):  # ops: "clamp", "nan_to_num"
    check_op(fn, None, "float32", grad=False, inputs=[SPECIAL])


def _assign(m, x, index, value_fn):
    y = x[0] * 2
    y[index] = value_fn(m, x)
    return y * x[1]


SETITEM_GRAD = [
    lambda m, x: _assign(m, x, 0, lambda m, x: 5.0),
    lambda m, x: _assign(m, x, (slice(None), 1), lambda m, x: x[1][:, 2] * 3),
    lambda m, x: _assign(m, x, (slice(1, 3),), lambda m, x: x[1][0]),
    lambda m, x: _assign(m, x, x[0] > 0, lambda m, x: 0.5),
    lambda m, x: _assign(m, x, m.tensor([0, 2]), lambda m, x: x[1][1:3].exp()),
]


@pytest.mark.parametrize("index", range(len(SETITEM_GRAD)))
def test_setitem_inside_autograd(index):
    check_op(SETITEM_GRAD[index], [(3, 4), (3, 4)], "float64")


def test_setitem_value_requires_grad_into_plain_tensor():
    def fn(m, x):
        buffer = m.zeros(3, 4, dtype=m.float64)
        buffer[1] = x[0][0]
        return buffer * 2
    check_op(fn, [(3, 4)], "float64")


def test_setitem_on_leaf_requiring_grad_is_refused():
    check_op(lambda m, x: x[0].__setitem__(0, 1.0), [(3,)], "float64")


def test_integer_ranges_truncate_like_torch():
    """arange/linspace/logspace with an integer dtype take their float arguments truncated toward zero
    (int64 arange also counts in integers), as torch does."""
    cases = [("arange", (0.0, -8.000001, -4.0), "int64"), ("arange", (0, 5, 0.5), "int32"),
             ("arange", (-0.5, 5.9, 1.5), "int64"), ("arange", (-0.5, 5.9, 1.5), "int32"),
             ("arange", (10, 0.5, -3), "int64"), ("arange", (10, 0.5, -3), "int16"), ("arange", (0, 3.5), "int64"),
             ("arange", (1, -7, -2), "int64"), ("arange", (3, 3), "int64"), ("arange", (0, 3.5), "float32"),
             ("linspace", (4.3, -3, 50), "int64"), ("linspace", (-2.5, 2.5, 3), "int64"),
             ("linspace", (0.9, 10.9, 4), "int32"), ("logspace", (0, 1.2, 2), "int64"),
             ("logspace", (0.5, 2.7, 4), "int64"), ("linspace", (0.5, 2.7, 4), "float64")]
    for name, args, d in cases:
        expected = getattr(torch, name)(*args, dtype=getattr(torch, d))
        actual = getattr(tt, name)(*args, dtype=getattr(tt, d))
        assert actual.tolist() == expected.tolist() and repr(actual.dtype) == str(expected.dtype), (name, args, d)
    for m in (torch, tt):
        with pytest.raises(ValueError, match="step must be nonzero"):  # 0.5 truncated to 0
            m.arange(0, 5, 0.5, dtype=m.int64)
        with pytest.raises(RuntimeError, match="step must be nonzero"):
            m.arange(0, 5, 0, dtype=m.int64)


def test_reductions_in_bool_and_cov_of_integers():
    for make in (lambda m: m.sum(m.tensor([1, -1]), dtype=m.bool), lambda m: m.tensor([1, -1]).sum(dtype=m.bool),
                 lambda m: m.sum(m.tensor([[0., 0.], [0., 2.]]), 1, dtype=m.bool),
                 lambda m: m.tensor([2, 3]).prod(dtype=m.bool), lambda m: m.tensor([[1.5, 0.0]]).prod(1, dtype=m.bool),
                 lambda m: m.cov(m.tensor([[1, 2, 3], [4, 5, 7]])), lambda m: m.corrcoef(m.tensor([[1, 2, 3], [4, 5, 7]]))):
        expected, actual = make(torch), make(tt)
        assert repr(actual.dtype) == str(expected.dtype)
        torch.testing.assert_close(torch.tensor(actual.tolist(), dtype=expected.dtype), expected)
    with pytest.raises(RuntimeError, match="bool dtype is not supported"):
        tt.cov(tt.tensor([[True, False]]))
