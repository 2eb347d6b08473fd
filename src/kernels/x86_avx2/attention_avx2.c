/* AVX2 online-softmax helpers for attention.c (row max, exp-and-sum, row scale, mask rows); contracts in
 * gemm_internal.h. The Q K^T and P V products use the AVX2 GEMM micro-kernel. */
#include <immintrin.h>
#include <math.h>

#include "kernels/gemm_internal.h"
#include "kernels/x86_avx2/gemm_math_avx2.h"

static float row_max_avx2(const float *x, int64_t n) {
    __m256 best = _mm256_set1_ps(-INFINITY), nan_seen = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        nan_seen = _mm256_or_ps(nan_seen, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        best = _mm256_max_ps(best, v);
    }
    if (_mm256_movemask_ps(nan_seen))
        return NAN;
    float lanes[8];
    _mm256_storeu_ps(lanes, best);
    float result = lanes[0];
    for (int i = 1; i < 8; i++)
        result = lanes[i] > result ? lanes[i] : result;
    for (; j < n; j++) {
        if (x[j] != x[j])
            return x[j];
        result = x[j] > result ? x[j] : result;
    }
    return result;
}

static float exp_sum_avx2(float *x, int64_t n, float shift) {
    __m256 vshift = _mm256_set1_ps(shift), sum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = tb_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vshift));
        _mm256_storeu_ps(x + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float lanes[8], total = 0.0f;
    _mm256_storeu_ps(lanes, sum);
    for (int i = 0; i < 8; i++)
        total += lanes[i];
    if (j < n) {
        float tail[8] = {0};
        for (int64_t t = j; t < n; t++)
            tail[t - j] = x[t] - shift;
        __m256 e = tb_exp_avx2(_mm256_loadu_ps(tail));
        _mm256_storeu_ps(tail, e);
        for (int64_t t = j; t < n; t++) {
            x[t] = tail[t - j];
            total += tail[t - j];
        }
    }
    return total;
}

static void scale_avx2(float *x, int64_t n, float factor) {
    __m256 f = _mm256_set1_ps(factor);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), f));
    for (; j < n; j++)
        x[j] *= factor;
}

static void add_mask_avx2(float *x, const float *mask, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(mask + j)));
    for (; j < n; j++)
        x[j] += mask[j];
}

static void bool_mask_avx2(float *x, const uint8_t *keep, int64_t n) {
    const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i flags = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(keep + j)));
        __m256 dropped = _mm256_castsi256_ps(_mm256_cmpeq_epi32(flags, _mm256_setzero_si256()));
        _mm256_storeu_ps(x + j, _mm256_blendv_ps(_mm256_loadu_ps(x + j), minus_inf, dropped));
    }
    for (; j < n; j++)
        if (!keep[j])
            x[j] = -INFINITY;
}

const tb_attention_kernels tb_attention_kernels_avx2 = {
    .isa_name = "avx2",
    .row_max = row_max_avx2,
    .exp_sum = exp_sum_avx2,
    .scale = scale_avx2,
    .add_mask = add_mask_avx2,
    .bool_mask = bool_mask_avx2,
};
