/* Rounding f32 to bfloat16 pairs (two bf16 in one 32-bit slot, the even k in the low half), shared by
 * the AVX512-BF16 packers and the AMX tile packers. Rounding is tb_f32_to_bf16's: round to nearest
 * even, NaN kept quiet, no denormal flush (vcvtne2ps2bf16 would flush denormals, so it is not used).
 * Include only from files compiled with AVX-512 F and BW. */
#ifndef TORCHBURN_KERNELS_BF16_PAIRS_AVX512_H
#define TORCHBURN_KERNELS_BF16_PAIRS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "torchburn/dtype.h"

/* bf16 bits of 16 floats in the low halves of 32-bit lanes (high halves zero). */
static inline __m512i tb_round_bf16_avx512(__m512 v) {
    __m512i bits = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
}

/* Pair slots (x[2t], x[2t + 1]) for t < 16 from 32 consecutive floats lo (0..15) and hi (16..31). */
static inline __m512 tb_bf16_pairs_of_consecutive(__m512 lo, __m512 hi) {
    const __m512i index = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                           26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_castsi512_ps(
        _mm512_permutex2var_epi16(tb_round_bf16_avx512(lo), index, tb_round_bf16_avx512(hi)));
}

/* Pair slots (even[t], odd[t]) for t < 16. */
static inline __m512 tb_bf16_pairs_of_rows(__m512 even, __m512 odd) {
    return _mm512_castsi512_ps(
        _mm512_or_si512(tb_round_bf16_avx512(even), _mm512_slli_epi32(tb_round_bf16_avx512(odd), 16)));
}

static inline uint32_t tb_bf16_pair_scalar(float even, float odd) {
    return (uint32_t)tb_f32_to_bf16(even) | (uint32_t)tb_f32_to_bf16(odd) << 16;
}

#endif
