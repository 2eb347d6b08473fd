/* AVX-512 FMA throughput loop for the peak-GFLOP/s probe and the wide-load read sweep of the bandwidth probe: 12 independent zmm chains hide the FMA
 * latency on two FMA ports. */
#include <immintrin.h>

#include "kernels/probe_kernels.h"

double tb_fma_loop_avx512(int64_t iterations, float *sink) {
    __m512 acc[12];
    for (int i = 0; i < 12; i++)
        acc[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t it = 0; it < iterations; it++) {
        for (int i = 0; i < 12; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    __m512 total = acc[0];
    for (int i = 1; i < 12; i++)
        total = _mm512_add_ps(total, acc[i]);
    *sink += _mm512_reduce_add_ps(total);
    return (double)iterations * 12 * 16 * 2;
}

float tb_read_sum_avx512(const float *x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 * 16 <= n; i += 4 * 16) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 2 * 16));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 3 * 16));
    }
    __m512 total = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    float lanes[16], sum = 0.0f;
    _mm512_storeu_ps(lanes, total);
    for (int lane = 0; lane < 16; lane++)
        sum += lanes[lane];
    for (; i < n; i++)
        sum += x[i];
    return sum;
}
