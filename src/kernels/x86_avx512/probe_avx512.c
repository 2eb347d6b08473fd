/* AVX-512 FMA throughput loop for the peak-GFLOP/s probe: 12 independent zmm chains hide the FMA
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
