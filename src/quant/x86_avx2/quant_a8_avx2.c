/* AVX2 W8A8 / W4A8 kernels without VNNI: the 256-bit kernels of quant/quant_a8_ymm.h with the u8 x s8
 * dot built from vpmaddubsw (pairs to int16, exact for the operand ranges used) and vpmaddwd. */
#include <immintrin.h>

static inline __m256i tb_quant_dot_avx2(__m256i acc, __m256i u8, __m256i s8) {
    __m256i pairs = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#define TB_QUANT_YMM_DOT(acc, u8, s8) tb_quant_dot_avx2((acc), (u8), (s8))

#include "quant/quant_a8_ymm.h"

const tb_quant_impl *tb_quant_impl_avx2_a8(tb_quant_type type) {
    return type == TB_QUANT_INT8 ? &ymm_int8_a8 : &ymm_int4_a8;
}
