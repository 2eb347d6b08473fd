/* AVX-512 online-softmax helpers for attention.c (row max, exp-and-sum, row scale, mask rows); contracts in
 * gemm_internal.h. The Q K^T and P V products use the AVX-512 GEMM micro-kernel. */
#include <immintrin.h>
#include <math.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx512/gemm_math_avx512.h"

static inline __mmask16 mask_first(int64_t count) {
    return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u);
}

static float row_max_avx512(const float *x, int64_t n) {
    __m512 best = _mm512_set1_ps(-INFINITY);
    __mmask16 nan_seen = 0;
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = mask_first(n - j);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + j);
        nan_seen |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_max_ps(best, v);
    }
    if (nan_seen)
        return NAN;
    return _mm512_reduce_max_ps(best);
}

static float exp_sum_avx512(float *x, int64_t n, float shift) {
    __m512 vshift = _mm512_set1_ps(shift), sum = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = tb_exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + j), vshift));
        _mm512_storeu_ps(x + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (j < n) {
        __mmask16 m = mask_first(n - j);
        __m512 e = tb_exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vshift));
        _mm512_mask_storeu_ps(x + j, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

static void scale_avx512(float *x, int64_t n, float factor) {
    __m512 f = _mm512_set1_ps(factor);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = mask_first(n - j);
        _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), f));
    }
}

static void add_mask_avx512(float *x, const float *mask, int64_t n) {
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = mask_first(n - j);
        __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + j), _mm512_maskz_loadu_ps(m, mask + j));
        _mm512_mask_storeu_ps(x + j, m, sum);
    }
}

static void bool_mask_avx512(float *x, const uint8_t *keep, int64_t n) {
    const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = mask_first(n - j);
        __m128i bytes = _mm_maskz_loadu_epi8(m, keep + j);
        __mmask16 dropped = _mm_mask_cmpeq_epi8_mask(m, bytes, _mm_setzero_si128());
        _mm512_mask_storeu_ps(x + j, dropped, minus_inf);
    }
}

const tb_attention_kernels tb_attention_kernels_avx512 = {
    .isa_name = "avx512",
    .row_max = row_max_avx512,
    .exp_sum = exp_sum_avx512,
    .scale = scale_avx512,
    .add_mask = add_mask_avx512,
    .bool_mask = bool_mask_avx512,
};
