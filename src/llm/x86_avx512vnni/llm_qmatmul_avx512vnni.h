/* Helpers shared by the AVX-512 VNNI int8-activation kernels (llm_qmatmul_avx512vnni.c and the batched
 * decode rows of llm_batch_rows_avx512vnni.c, the prompt GEMMs of llm_gemm_avx512vnni.c and
 * x86_amx/llm_gemm_amx.c); include only from files compiled with VNNI flags (AMX flags include them). */
#ifndef TORCHBURN_LLM_QMATMUL_AVX512VNNI_H
#define TORCHBURN_LLM_QMATMUL_AVX512VNNI_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "torchburn/quant.h"

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

/* 32 values (n valid) -> int8 (natural order) and the block scale; same arithmetic as
 * tb_llm_qact_prepare_block. Shared by the VNNI and AMX prompt GEMMs. */
TB_INLINE __m256i tb_llm_quantize32_avx512vnni(const float *x, int64_t n, float *scale) {
    const __mmask16 m0 = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? (__mmask16)0xffff : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1);
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x), v1 = _mm512_maskz_loadu_ps(m1, x + 16);
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    const __m512 largest = _mm512_set1_ps(3.4028235e38f);
    if ((_mm512_cmp_ps_mask(a0, largest, _CMP_LE_OQ) & _mm512_cmp_ps_mask(a1, largest, _CMP_LE_OQ)) != 0xffff) {
        *scale = __builtin_nanf("");
        return _mm256_setzero_si256();
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(inverse), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    __m512 q0 = _mm512_roundscale_ps(_mm512_mul_ps(v0, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 q1 = _mm512_roundscale_ps(_mm512_mul_ps(v1, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q0 = _mm512_min_ps(_mm512_max_ps(q0, lo), hi);
    q1 = _mm512_min_ps(_mm512_max_ps(q1, lo), hi);
    const __m128i b0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q0)), b1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q1));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
}

/* 16 rows of 8 dwords (q[i]: row i, e.g. 32 int8 of one k block) -> 8 stores of 16 dwords: out + quad *
 * stride holds dword `quad` of rows 0..15 (the VNNI GEMM's transposed activations, the AMX B tile). Rows
 * i and i + 8 share a zmm, each half is transposed 8 x 8, then the halves are put back in row order. */
TB_INLINE void tb_llm_transpose16x8_avx512vnni(const __m256i q[16], unsigned char *out, int64_t stride) {
    __m512i z[8], t[8], u[8];
    for (int i = 0; i < 8; i++)
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(q[i]), q[i + 8], 1);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* per 128-bit lane: rows i..i+3 of quads (l, l + 4) */
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int quad = 0; quad < 4; quad++) {
        /* [u_lo.lane0 | u_lo.lane2 | u_hi.lane0 | u_hi.lane2] then reorder to rows 0-3, 4-7, 8-11, 12-15 */
        const __m512i low = _mm512_shuffle_i32x4(u[quad], u[quad + 4], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i high = _mm512_shuffle_i32x4(u[quad], u[quad + 4], _MM_SHUFFLE(3, 1, 3, 1));
        _mm512_storeu_si512(out + quad * stride, _mm512_shuffle_i32x4(low, low, _MM_SHUFFLE(3, 1, 2, 0)));
        _mm512_storeu_si512(out + (quad + 4) * stride,
                            _mm512_shuffle_i32x4(high, high, _MM_SHUFFLE(3, 1, 2, 0)));
    }
}

/* One weight row as s8 q values (zero past K, up to kb * 32) and, when `corrections` is not NULL,
 * 128 * sum(q) per 32-block (the +128 offset of the u8 activations of the VNNI GEMM). */
TB_INLINE void tb_llm_unpack_row_avx512vnni(const tb_quant_weight *w, int64_t n, int64_t kb, int8_t *q,
                                            int32_t *corrections) {
    const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
    const int64_t k = w->k;
    if (w->type == TB_QUANT_INT4) {
        const __m512i low = _mm512_set1_epi16(15), eight = _mm512_set1_epi8(8);
        int64_t i = 0;
        for (; i + 64 <= k; i += 64) { /* 32 packed bytes -> 64 values in k order */
            const __m512i words = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(row + i / 2)));
            const __m512i pairs =
                _mm512_or_si512(_mm512_and_si512(words, low), _mm512_slli_epi16(_mm512_srli_epi16(words, 4), 8));
            _mm512_storeu_si512(q + i, _mm512_sub_epi8(pairs, eight));
        }
        for (; i < k; i += 2) {
            q[i] = (int8_t)((row[i / 2] & 15) - 8);
            q[i + 1] = (int8_t)((row[i / 2] >> 4) - 8);
        }
    } else {
        memcpy(q, row, (size_t)k);
    }
    memset(q + k, 0, (size_t)(kb * 32 - k));
    if (!corrections)
        return;
    for (int64_t b = 0; b < kb; b++) {
        int32_t sum = 0;
        for (int e = 0; e < 32; e++)
            sum += q[32 * b + e];
        corrections[b] = 128 * sum;
    }
}

#endif
