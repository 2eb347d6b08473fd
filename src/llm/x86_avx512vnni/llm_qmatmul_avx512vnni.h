/* Helpers shared by the AVX-512 VNNI int8-activation kernels (llm_qmatmul_avx512vnni.c and the batched
 * decode rows of llm_batch_rows_avx512vnni.c); include only from files compiled with VNNI flags. */
#ifndef TORCHBURN_LLM_QMATMUL_AVX512VNNI_H
#define TORCHBURN_LLM_QMATMUL_AVX512VNNI_H

#include <immintrin.h>
#include <stdint.h>

#define TB_INLINE static inline __attribute__((always_inline))

/* Per-lane weight scales of int4 block b (lane l covers k in [128b + 8l, +8)); never reads past the row's
 * `groups` scales. `group` is a constant after inlining for 32 and 64. */
TB_INLINE __m512 int4_lane_scales_avx512vnni(const float *scales, int64_t b, int64_t group, int64_t groups) {
    if (group == 32 || group == 64) {
        const int64_t per_block = 128 / group, first = b * per_block;
        const int64_t valid = groups - first < per_block ? groups - first : per_block;
        __m128 few;
        if (valid == per_block && group == 64) /* two broadcasts: no cross-lane permute */
            return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(scales + first)),
                                      _mm256_broadcast_ss(scales + first + 1), 1);
        if (valid == per_block && group == 32)
            few = _mm_loadu_ps(scales + first);
        else if (valid == per_block)
            few = _mm_castpd_ps(_mm_load_sd((const double *)(scales + first)));
        else
            few = _mm_maskz_loadu_ps((__mmask8)((1u << valid) - 1), scales + first);
        const __m512i pick = group == 32 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                                         : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(few));
    }
    return _mm512_set1_ps(scales[b * 128 / group]);
}

#endif
