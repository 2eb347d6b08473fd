/* AVX-512 vector math for the GEMM epilogue and attention softmax (exp, erf-GELU, tanh, sigmoid, ...).
 * Only for translation units under x86_avx512/: every function is static inline, so each including
 * file gets its own copy compiled with the AVX-512 flags. Accuracy: a few ulp for exp/tanh/sigmoid;
 * erf uses Abramowitz-Stegun 7.1.26 (|abs error| < 1.5e-7, the same formula PyTorch's vectorized erf
 * uses). NaN inputs give NaN. */
#ifndef TORCHBURN_GEMM_MATH_AVX512_H
#define TORCHBURN_GEMM_MATH_AVX512_H

#include <immintrin.h>

#include "kernels/gemm.h"

/* exp(x): x = n ln2 + r with |r| <= ln2/2, e^r by a degree-7 polynomial, then scalef by 2^n (which
 * produces inf, subnormals and 0 correctly). The clamp keeps n finite; operand order propagates NaN. */
static inline __m512 tb_exp_avx512(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606820309417e-06f), r);
    /* Taylor coefficients 1/j! (|r| <= 0.347: truncation < 6e-9 relative) */
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline __m512 tb_sigmoid_avx512(__m512 x) {
    __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, tb_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

/* tanh: odd Taylor series up to x^13 for |x| < 0.4 (relative error < 1e-8 there), else
 * sign(x) * (1 - 2 / (exp(2|x|) + 1)). */
static inline __m512 tb_tanh_avx512(__m512 x) {
    __m512 sign_bit = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign_bit, x);
    __m512 e = tb_exp_avx512(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_or_ps(big, _mm512_and_ps(x, sign_bit));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(21844.0f / 6081075.0f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1382.0f / 155925.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(62.0f / 2835.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-17.0f / 315.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.0f / 15.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x);
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.4f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

/* erf by Abramowitz-Stegun 7.1.26: 1 - t P(t) exp(-x^2), t = 1 / (1 + p|x|), sign restored. */
static inline __m512 tb_erf_avx512(__m512 x) {
    __m512 sign_bit = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign_bit, x);
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), ax, one));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    __m512 e = tb_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
    __m512 y = _mm512_fnmadd_ps(p, e, one);
    return _mm512_or_ps(y, _mm512_and_ps(x, sign_bit));
}

/* One vector through an activation (TB_ACTIVATION_GELU is the exact erf form). */
static inline __m512 tb_activation_avx512(__m512 x, tb_activation activation) {
    switch (activation) {
    case TB_ACTIVATION_RELU:
        return _mm512_max_ps(_mm512_setzero_ps(), x); /* second operand returned for NaN */
    case TB_ACTIVATION_GELU: {
        __m512 half_x = _mm512_mul_ps(x, _mm512_set1_ps(0.5f));
        __m512 erf = tb_erf_avx512(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
        return _mm512_fmadd_ps(half_x, erf, half_x);
    }
    case TB_ACTIVATION_GELU_TANH: {
        /* x/2 (1 + tanh(u)) == x * sigmoid(2u): no cancellation for negative x */
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 u = _mm512_mul_ps(_mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x),
                                 _mm512_set1_ps(2.0f * 0.79788456080286535588f));
        return _mm512_mul_ps(x, tb_sigmoid_avx512(u));
    }
    case TB_ACTIVATION_SILU:
        return _mm512_mul_ps(x, tb_sigmoid_avx512(x));
    case TB_ACTIVATION_SIGMOID:
        return tb_sigmoid_avx512(x);
    case TB_ACTIVATION_TANH:
        return tb_tanh_avx512(x);
    default:
        return x;
    }
}

#endif
