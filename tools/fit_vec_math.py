"""Regenerates the polynomial coefficients of src/kernels/simd/vec_math.h (a developer tool, not a test).

Each fit is a near-minimax polynomial found with Lawson's iteratively reweighted least squares in
double precision against mpmath reference values; the GELU tables additionally round their
coefficients to float one at a time, refitting the remaining ones after each rounding.

Usage: python tools/fit_vec_math.py [exp|log|sin|cos|tanh|gelu32|gelu8 ...]   (needs numpy, mpmath)
Prints C initialisers and the maximum weighted error of each fit.
"""

import sys

import mpmath as mp
import numpy as np

mp.mp.dps = 40


def chebyshev_nodes(lo: float, hi: float, count: int) -> np.ndarray:
    k = np.arange(count)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / count)


def lawson(powers, target, weight, variable, iterations=300):
    """Minimax-like fit of sum_j c_j variable**powers[j] to target, minimising max |error| * weight."""
    basis = np.stack([variable**p for p in powers], 1)
    w = np.ones_like(variable) / len(variable)
    for _ in range(iterations):
        root = np.sqrt(w)
        coefficients, *_ = np.linalg.lstsq(basis * (root * weight)[:, None], target * weight * root, rcond=None)
        error = np.abs((basis @ coefficients - target) * weight)
        w = w * error
        w /= w.sum()
    return coefficients, float(np.max(np.abs((basis @ coefficients - target) * weight)))


def as_c(values) -> str:
    return ", ".join("%.9ef" % float(np.float32(v)) for v in values)


def fit_exp():
    # e^r = 1 + r + r^2 Q(r), |r| <= ln2/2, relative error
    r = chebyshev_nodes(-0.34658, 0.34658, 8000)
    target = np.array([float((mp.exp(v) - 1 - v) / v**2) for v in r])
    c, e = lawson(range(5), target, r**2 / np.exp(r), r)
    print("exp Q (ascending): %s  /* %.2g */" % (as_c(c), e))


def fit_log():
    # log(1 + f) = f - f^2/2 + f^3 Q(f), f in [sqrt(1/2) - 1, sqrt(2) - 1]
    f = chebyshev_nodes(np.sqrt(0.5) - 1, np.sqrt(2) - 1, 8000)
    target = np.array([float((mp.log1p(v) - v + v * v / 2) / v**3) for v in f])
    c, e = lawson(range(8), target, np.abs(f**3 / np.log1p(f)), f, 600)
    print("log Q (ascending): %s  /* %.2g */" % (as_c(c), e))


def fit_sin():
    # sin r = r + r^3 S(r^2), |r| <= pi/4
    r = chebyshev_nodes(1e-4, np.pi / 4 + 1e-3, 8000)
    target = np.array([float((mp.sin(v) - v) / v**3) for v in r])
    c, e = lawson(range(3), target, r**3 / np.sin(r), r * r)
    print("sin S (ascending in r^2): %s  /* %.2g */" % (as_c(c), e))


def fit_cos():
    # cos r = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4
    r = chebyshev_nodes(1e-4, np.pi / 4 + 1e-3, 8000)
    target = np.array([float((mp.cos(v) - 1 + v * v / 2) / v**4) for v in r])
    c, e = lawson(range(3), target, r**4 / np.cos(r), r * r)
    print("cos C (ascending in r^2): %s  /* %.2g */" % (as_c(c), e))


def fit_tanh():
    # tanh x = x + x^3 T(x^2), |x| < 0.625
    x = chebyshev_nodes(1e-4, 0.625, 8000)
    target = np.array([float((mp.tanh(v) - v) / v**3) for v in x])
    c, e = lawson(range(5), target, x**3 / np.tanh(x), x * x)
    print("tanh T (ascending in x^2): %s  /* %.2g */" % (as_c(c), e))


def fit_gelu(intervals: int, width: float, degree: int, floor: float = 1e-5, from_right: bool = False):
    """Q(a) = Phi(-a) on intervals centred on k*width, local variable v = a/width - k in [-1/2, 1/2];
    from_right: intervals [k, k+1)*width, local variable v = k + 1 - a/width in (0, 1] (a/width itself in
    the first interval), in which Q's Taylor
    coefficients are all positive in the tail (Q decreases, so Q(k + 1 - v) increases with v), so that
    Horner's sums do not cancel however steep Q is across the interval."""
    table = [[0.0] * intervals for _ in range(degree + 1)]
    worst = 0.0
    for k in range(intervals):
        if from_right:
            v = chebyshev_nodes(0.0, 1.0, 400)
            # interval 0 takes v = a itself: 1 - a would round for a < 1/2, and Q is mild there
            target = np.array([float(mp.ncdf(-(x if k == 0 else k + 1 - x) * width)) for x in v])
        else:
            v = chebyshev_nodes(0.0 if k == 0 else -0.5, 0.5, 300)
            target = np.array([float(mp.ncdf(-(k + x) * width)) for x in v])
        weight = 1 / np.maximum(target, floor)
        fixed = []
        for j in range(degree + 1):  # round one coefficient, refit the rest
            rest = target - sum(c * v**i for i, c in enumerate(fixed))
            c, _ = lawson(range(j, degree + 1), rest, weight, v, 200)
            fixed.append(float(np.float32(c[0])))
        error = np.max(np.abs(sum(c * v**i for i, c in enumerate(fixed)) - target) * weight)
        worst = max(worst, float(error))
        for j in range(degree + 1):
            table[j][k] = fixed[j]
    print("/* %d intervals of width %g, degree %d: max |error| / max(Q, %g) = %.2g */" % (intervals, width, degree, floor, worst))
    print("static const float vmath_gelu_q[%d][%d] = {" % (degree + 1, intervals))
    for row in table:
        print("    {%s}," % as_c(row))
    print("};")


FITS = {
    "exp": fit_exp,
    "log": fit_log,
    "sin": fit_sin,
    "cos": fit_cos,
    "tanh": fit_tanh,
    "gelu32": lambda: fit_gelu(32, 0.25, 6),  # AVX-512: two-register vpermt2ps tables
    "gelu8": lambda: fit_gelu(8, 1.0, 9, from_right=True),  # AVX2: one vpermps (16 entries: two and a blend)
}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(FITS):
        FITS[name]()
