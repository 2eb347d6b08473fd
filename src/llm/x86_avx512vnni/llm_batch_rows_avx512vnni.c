/* Batched decode rows on AVX-512 VNNI: y[m, n] for several activation rows (one per sequence of a decode
 * step) with exactly the roundings of the single-row decode kernel (row_vector_avx512vnni in
 * llm_qmatmul_avx512vnni.c): per (activation row, weight row) two f32 accumulators taking the even and the
 * odd 128-k (int4) / 64-k (int8) blocks, the K tail folded into the odd one, one horizontal sum of their
 * sum. A sequence's numbers therefore do not depend on how many others share the step, while each weight
 * row is read from memory once per step for all of them (tiles of NR weight rows x MB activation rows). */
#include <immintrin.h>

#include "llm/llm_batch_internal.h"
#include "llm/llm_row_blocks.h"
#include "llm/x86_avx512vnni/llm_qmatmul_avx512vnni.h"

enum { NR = 2, MB = 4 };

/* One 128-k int4 block of NR weight rows (packed[r], lane scales w_scales[r]) against mb activation rows: each
 * activation block is loaded once and feeds every weight row; acc[i * NR + r] accumulates row pair (i, r). */
TB_INLINE void int4_block_rows(const __m512i *packed, const __m512 *w_scales, const unsigned char *act,
                               int64_t ld_act, int mb, int64_t b, __m512 *acc) {
    const __m512i low = _mm512_set1_epi8(15);
    __m512i lo[NR], hi[NR];
    for (int r = 0; r < NR; r++) {
        lo[r] = _mm512_and_si512(packed[r], low);
        hi[r] = _mm512_and_si512(_mm512_srli_epi16(packed[r], 4), low);
    }
    for (int i = 0; i < mb; i++) {
        const unsigned char *a = act + i * ld_act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
        const __m512i xe = _mm512_loadu_si512(a), xo = _mm512_loadu_si512(a + 64);
        const __m512i seed = _mm512_loadu_si512(a + 128);
        const __m512 xs = _mm512_loadu_ps((const float *)(a + 192));
        for (int r = 0; r < NR; r++) {
            __m512i dot = _mm512_dpbusd_epi32(seed, lo[r], xe);
            dot = _mm512_dpbusd_epi32(dot, hi[r], xo);
            const __m512 lane_scales = _mm512_mul_ps(w_scales[r], xs);
            acc[i * NR + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), lane_scales, acc[i * NR + r]);
        }
    }
}

TB_INLINE void int4_block_load(const uint8_t *const *rows, const float *const *scales, int64_t b, int64_t group,
                               int64_t groups, __m512i *packed, __m512 *w_scales) {
    for (int r = 0; r < NR; r++) {
        packed[r] = _mm512_loadu_si512(rows[r] + 64 * b);
        w_scales[r] = int4_lane_scales_avx512vnni(scales[r], b, group, groups);
    }
}

TB_INLINE void int4_tile(const uint8_t *const *rows, const float *const *scales, const unsigned char *act,
                         int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB][NR]) {
    const int64_t full = k / 128, groups = k / group;
    __m512 even[MB * NR], odd[MB * NR];
    for (int i = 0; i < MB * NR; i++)
        even[i] = odd[i] = _mm512_setzero_ps();
    __m512i packed[NR];
    __m512 w_scales[NR];
    int64_t b = 0;
    for (; b + 2 <= full; b += 2) {
        int4_block_load(rows, scales, b, group, groups, packed, w_scales);
        int4_block_rows(packed, w_scales, act, ld_act, mb, b, even);
        int4_block_load(rows, scales, b + 1, group, groups, packed, w_scales);
        int4_block_rows(packed, w_scales, act, ld_act, mb, b + 1, odd);
    }
    if (b < full) {
        int4_block_load(rows, scales, b, group, groups, packed, w_scales);
        int4_block_rows(packed, w_scales, act, ld_act, mb, b, even);
    }
    if (full * 128 < k) { /* the tail starts from zero and is added, as the single-row kernel does */
        const __mmask64 mask = (__mmask64)((1ull << ((k - full * 128) / 2)) - 1);
        __m512 tail[MB * NR];
        for (int i = 0; i < MB * NR; i++)
            tail[i] = _mm512_setzero_ps();
        for (int r = 0; r < NR; r++) {
            packed[r] = _mm512_maskz_loadu_epi8(mask, rows[r] + 64 * full);
            w_scales[r] = int4_lane_scales_avx512vnni(scales[r], full, group, groups);
        }
        int4_block_rows(packed, w_scales, act, ld_act, mb, full, tail);
        for (int i = 0; i < MB * NR; i++)
            odd[i] = _mm512_add_ps(odd[i], tail[i]);
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(_mm512_add_ps(even[i * NR + r], odd[i * NR + r]));
}

/* One 64-k int8 block of NR weight rows (w[r], already flipped to unsigned) against mb activation rows. */
TB_INLINE void int8_block_rows(const __m512i *w, const unsigned char *act, int64_t ld_act, int mb, int64_t c,
                               __m512 *acc) {
    for (int i = 0; i < mb; i++) {
        const unsigned char *a = act + i * ld_act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
        const __m512i xq = _mm512_loadu_si512(a), seed = _mm512_loadu_si512(a + 64);
        const __m512 xs = _mm512_loadu_ps((const float *)(a + 128));
        for (int r = 0; r < NR; r++)
            acc[i * NR + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(seed, w[r], xq)), xs,
                                              acc[i * NR + r]);
    }
}

TB_INLINE void int8_tile(const uint8_t *const *rows, const unsigned char *act, int64_t ld_act, int mb, int64_t k,
                         float dots[MB][NR]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int64_t full = k / 64;
    __m512 even[MB * NR], odd[MB * NR];
    for (int i = 0; i < MB * NR; i++)
        even[i] = odd[i] = _mm512_setzero_ps();
    __m512i w[NR];
    int64_t c = 0;
    for (; c + 2 <= full; c += 2) {
        for (int r = 0; r < NR; r++)
            w[r] = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + 64 * c), flip);
        int8_block_rows(w, act, ld_act, mb, c, even);
        for (int r = 0; r < NR; r++)
            w[r] = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + 64 * c + 64), flip);
        int8_block_rows(w, act, ld_act, mb, c + 1, odd);
    }
    if (c < full) {
        for (int r = 0; r < NR; r++)
            w[r] = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + 64 * c), flip);
        int8_block_rows(w, act, ld_act, mb, c, even);
    }
    if (full * 64 < k) { /* the tail goes straight into the odd accumulator, as the single-row kernel does */
        const __mmask64 mask = (__mmask64)((1ull << (k - full * 64)) - 1);
        for (int r = 0; r < NR; r++)
            w[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, rows[r] + 64 * full), flip);
        int8_block_rows(w, act, ld_act, mb, full, odd);
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(_mm512_add_ps(even[i * NR + r], odd[i * NR + r]));
}

static void dots_for(const tb_quant_weight *w, const uint8_t *const *rows, const float *const *scales,
                     const unsigned char *act, int64_t ld_act, int64_t mb, float *flat_dots) {
    float(*dots)[NR] = (float(*)[NR])flat_dots;
#define TILE(MBV)                                                                                      \
    do {                                                                                               \
        if (w->type == TB_QUANT_INT8)                                                                  \
            int8_tile(rows, act, ld_act, MBV, w->k, dots);                                             \
        else if (w->group_size == 64)                                                                  \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, 64, dots);                                 \
        else if (w->group_size == 32)                                                                  \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, 32, dots);                                 \
        else                                                                                           \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, w->group_size, dots);                      \
    } while (0)
    switch (mb) {
    case 1: TILE(1); break;
    case 2: TILE(2); break;
    case 3: TILE(3); break;
    default: TILE(4); break;
    }
#undef TILE
}

void tb_llm_batch_rows_avx512vnni(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    tb_llm_row_blocks(run, n_begin, n_end, NR, MB, dots_for);
}
