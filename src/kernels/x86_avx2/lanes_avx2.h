/* Lane masks for the AVX2 window kernels (convolution). Include only from files compiled with the
 * AVX2 flags (this folder). */
#ifndef TORCHBURN_KERNELS_X86_AVX2_LANES_AVX2_H
#define TORCHBURN_KERNELS_X86_AVX2_LANES_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* All-ones in lanes l of [0, 8) with lo <= l < hi (lo and hi may lie anywhere): the sign bit selects
 * a lane for _mm256_maskload_ps / _mm256_maskstore_ps. */
static inline __m256i tb_lanes_avx2(int64_t lo, int64_t hi) {
    if (lo < 0)
        lo = 0;
    if (lo > 8)
        lo = 8;
    if (hi > 8)
        hi = 8;
    if (hi < lo)
        hi = lo;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i at_least_lo = _mm256_cmpgt_epi32(lanes, _mm256_set1_epi32((int)lo - 1));
    __m256i below_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), lanes);
    return _mm256_and_si256(at_least_lo, below_hi);
}

#endif
