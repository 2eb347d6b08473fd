/* Lane masks for the AVX-512 window kernels (convolution, pooling). Include only from files compiled
 * with the AVX-512 flags (this folder). */
#ifndef TORCHBURN_KERNELS_X86_AVX512_LANES_AVX512_H
#define TORCHBURN_KERNELS_X86_AVX512_LANES_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes l of [0, 16) with lo <= l < hi (lo and hi may lie anywhere). */
static inline __mmask16 tb_lanes_avx512(int64_t lo, int64_t hi) {
    if (lo < 0)
        lo = 0;
    if (hi > 16)
        hi = 16;
    if (hi <= lo)
        return 0;
    return (__mmask16)((((uint32_t)1 << hi) - 1) & ~(((uint32_t)1 << lo) - 1));
}

#endif
