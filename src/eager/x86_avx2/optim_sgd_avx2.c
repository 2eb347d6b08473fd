/* The AVX2 + FMA body of float32 SGD (optim_sgd.h): eight lanes at a time with vfmadd, the tail with
 * the scalar body (its fmaf an FMA instruction here), so every element gets the same roundings. */
#include <immintrin.h>
#include <math.h>

#include "eager/optim_sgd.h"

void tb_sgd_f32_avx2(const tb_sgd_f32 *k, int64_t n, float *p, const float *g, float *buf) {
    const __m256 neg_lr = _mm256_set1_ps(k->neg_lr), decay = _mm256_set1_ps(k->decay);
    const __m256 momentum = _mm256_set1_ps(k->momentum), keep = _mm256_set1_ps(k->keep);
    const __m256 sign = _mm256_set1_ps(k->maximize ? -0.0f : 0.0f); /* xor: negate under maximize */
    const bool has_decay = k->has_decay, has_momentum = k->has_momentum, nesterov = k->nesterov, fresh = k->fresh;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 vp = _mm256_loadu_ps(p + i), d = _mm256_xor_ps(_mm256_loadu_ps(g + i), sign);
        if (has_decay)
            d = _mm256_fmadd_ps(vp, decay, d);
        if (has_momentum) {
            __m256 b = fresh ? d : _mm256_fmadd_ps(d, keep, _mm256_mul_ps(_mm256_loadu_ps(buf + i), momentum));
            _mm256_storeu_ps(buf + i, b);
            d = nesterov ? _mm256_fmadd_ps(b, momentum, d) : b;
        }
        _mm256_storeu_ps(p + i, _mm256_fmadd_ps(d, neg_lr, vp));
    }
    tb_sgd_f32_scalar(k, n - i, p + i, g + i, buf ? buf + i : NULL);
}
