/* AVX2 vector math for the GEMM epilogue and attention softmax (exp, erf-GELU, tanh, sigmoid, ...).
 * Only for translation units under x86_avx2/: every function is static inline, so each including file
 * gets its own copy compiled with the AVX2 flags. Same formulas and accuracy as the AVX-512 version. */
#ifndef TORCHBURN_GEMM_MATH_AVX2_H
#define TORCHBURN_GEMM_MATH_AVX2_H

#include <immintrin.h>

#include "kernels/gemm.h"

/* exp(x): x = n ln2 + r, e^r by a degree-7 polynomial, times 2^n built in two halves so that results
 * down to subnormals and up to inf come out of ordinary multiplies. Operand order propagates NaN. */
static inline __m256 tb_exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606820309417e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);          /* in [-150, 128] */
    __m256i n1 = _mm256_srai_epi32(ni, 1);        /* both halves in [-75, 64]: normal scale factors */
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static inline __m256 tb_sigmoid_avx2(__m256 x) {
    __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, tb_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

/* tanh: odd Taylor series up to x^13 for |x| < 0.4, else sign(x) * (1 - 2 / (exp(2|x|) + 1)). */
static inline __m256 tb_tanh_avx2(__m256 x) {
    __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign_bit, x);
    __m256 e = tb_exp_avx2(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.0f),
                               _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign_bit));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(21844.0f / 6081075.0f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1382.0f / 155925.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(62.0f / 2835.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-17.0f / 315.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.0f / 15.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
    __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.4f), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, small, is_small);
}

/* erf by Abramowitz-Stegun 7.1.26 (|abs error| < 1.5e-7). */
static inline __m256 tb_erf_avx2(__m256 x) {
    __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign_bit, x);
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, one));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 e = tb_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
    __m256 y = _mm256_fnmadd_ps(p, e, one);
    return _mm256_or_ps(y, _mm256_and_ps(x, sign_bit));
}

static inline __m256 tb_activation_avx2(__m256 x, tb_activation activation) {
    switch (activation) {
    case TB_ACTIVATION_RELU:
        return _mm256_max_ps(_mm256_setzero_ps(), x); /* second operand returned for NaN */
    case TB_ACTIVATION_GELU: {
        __m256 half_x = _mm256_mul_ps(x, _mm256_set1_ps(0.5f));
        __m256 erf = tb_erf_avx2(_mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f)));
        return _mm256_fmadd_ps(half_x, erf, half_x);
    }
    case TB_ACTIVATION_GELU_TANH: {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 u = _mm256_mul_ps(_mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x),
                                 _mm256_set1_ps(2.0f * 0.79788456080286535588f));
        return _mm256_mul_ps(x, tb_sigmoid_avx2(u));
    }
    case TB_ACTIVATION_SILU:
        return _mm256_mul_ps(x, tb_sigmoid_avx2(x));
    case TB_ACTIVATION_SIGMOID:
        return tb_sigmoid_avx2(x);
    case TB_ACTIVATION_TANH:
        return tb_tanh_avx2(x);
    default:
        return x;
    }
}

#endif
