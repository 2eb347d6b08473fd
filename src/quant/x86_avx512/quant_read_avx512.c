/* The AVX-512 read loop of the bandwidth probe (quant_bench.c): 64-byte loads into four independent
 * accumulators and the software prefetch 8 KiB ahead, as the AVX-512 GEMV kernels stream. */
#include <immintrin.h>

#include "quant/quant_kernels.h"

uint64_t tb_quant_read_bytes_avx512(const void *data, int64_t bytes) {
    const __m512i *p = data;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0, count = bytes / 64;
    for (; i + 4 <= count; i += 4) {
        _mm_prefetch((const char *)(p + i) + 8192, _MM_HINT_T0); /* as the kernels do */
        _mm_prefetch((const char *)(p + i) + 8192 + 128, _MM_HINT_T0);
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 1));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 2));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 3));
    }
    for (; i < count; i++)
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}
