/* AVX2 FMA throughput loop for the peak-GFLOP/s probe: 12 independent ymm chains. */
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
