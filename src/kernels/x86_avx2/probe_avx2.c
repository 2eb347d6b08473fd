/* AVX2 FMA throughput loop for the peak-GFLOP/s probe and the wide-load read sweep of the bandwidth probe: 12 independent ymm chains. */
#include <immintrin.h>

#include "kernels/probe_kernels.h"

double tb_fma_loop_avx2(int64_t iterations, float *sink) {
    __m256 acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t it = 0; it < iterations; it++) {
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    __m256 total = acc[0];
    for (int i = 1; i < 12; i++)
        total = _mm256_add_ps(total, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, total);
    for (int i = 0; i < 8; i++)
        *sink += lanes[i];
    return (double)iterations * 12 * 8 * 2;
}

float tb_read_sum_avx2(const float *x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 * 8 <= n; i += 4 * 8) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 2 * 8));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 3 * 8));
    }
    __m256 total = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float lanes[8], sum = 0.0f;
    _mm256_storeu_ps(lanes, total);
    for (int lane = 0; lane < 8; lane++)
        sum += lanes[lane];
    for (; i < n; i++)
        sum += x[i];
    return sum;
}
