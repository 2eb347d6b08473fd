/* The AVX2 read loop of the bandwidth probe (quant_bench.c): 32-byte loads into four accumulators,
 * software prefetch 8 KiB ahead as the kernels do. */
#include <immintrin.h>

#include "quant/quant_kernels.h"

uint64_t tb_quant_read_bytes_avx2(const void *data, int64_t bytes) {
    const __m256i *p = data;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0, count = bytes / 32;
    for (; i + 4 <= count; i += 4) {
        if ((i & 7) == 0) { /* one prefetch per 256 bytes, 8 KiB ahead, as the kernels do */
            _mm_prefetch((const char *)(p + i) + 8192, _MM_HINT_T0);
            _mm_prefetch((const char *)(p + i) + 8192 + 128, _MM_HINT_T0);
        }
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(p + i));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(p + i + 1));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(p + i + 2));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(p + i + 3));
    }
    for (; i < count; i++)
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(p + i));
    __m256i sum = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    __m128i half = _mm_add_epi64(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    return (uint64_t)(_mm_cvtsi128_si64(half) + _mm_extract_epi64(half, 1));
}
