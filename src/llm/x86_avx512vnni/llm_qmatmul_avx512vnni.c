/* AVX-512 VNNI kernels of the int8-activation matmul (layouts and contract in llm/llm_internal.h, scalar
 * reference in llm/llm_qmatmul.c). Tiles of 4 weight rows x up to 4 activation rows; per block one
 * weight load is unpacked once and feeds every activation row, one activation load feeds 4 weight rows.
 *   int4: 64 packed bytes = 128 weights; low nibbles (even k) and high nibbles (odd k) go through two
 *         vpdpbusd against the de-interleaved activations, seeded with -8 * sum(xq) per lane; lane l covers
 *         k in [128b + 8l, +8) and is scaled by (its weight group's scale) x (its 32-block's x scale).
 *   int8: 64 weights read as unsigned (w ^ 0x80 = w + 128), one vpdpbusd seeded with -128 * sum(xq) per
 *         lane, scaled per lane by the x-block scale; the row scale multiplies the final sum. */
#include <immintrin.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "llm/llm_row_blocks.h"
#include "llm/x86_avx512vnni/llm_qmatmul_avx512vnni.h"

/* Decode streams weights from DRAM; with ~10 instructions per 64-byte line the out-of-order window alone
 * keeps too few lines in flight, so the row kernels prefetch 4 KB ahead (past a row's end that is the next
 * row, which comes next; past the matrix it is a harmless no-op). Measured: +15-25% on a Zen 5 core. */
enum { NR = 4, MB = 4, PREFETCH_BYTES = 4096 };

/* One 128-k block of one weight row against mb activation rows (full or, with `mask`, the tail). */
TB_INLINE void int4_block_avx512vnni(__m512i packed, __m512 w_scales, const unsigned char *act, int64_t ld_act,
                                     int mb, int64_t b, __m512 *acc) {
    const __m512i low = _mm512_set1_epi8(15);
    const __m512i lo = _mm512_and_si512(packed, low);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
    for (int i = 0; i < mb; i++) {
        const unsigned char *a = act + i * ld_act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
        __m512i dot = _mm512_loadu_si512(a + 128);
        dot = _mm512_dpbusd_epi32(dot, lo, _mm512_loadu_si512(a));
        dot = _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(a + 64));
        const __m512 lane_scales = _mm512_mul_ps(w_scales, _mm512_loadu_ps((const float *)(a + 192)));
        acc[i * NR] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), lane_scales, acc[i * NR]);
    }
}

/* Full 128-k blocks of 4 weight rows x mb activation rows: the 4 rows are unpacked once per block, then
 * each activation row's 4 loads feed all 4 weight rows (loads per block: 4 + 4 mb, not 16 mb). */
TB_INLINE void int4_tile_avx512vnni(const uint8_t *const *rows, const float *const *scales, const unsigned char *act,
                                    int64_t ld_act, int mb, int64_t k, int64_t group, float dots[MB][NR]) {
    const __m512i low = _mm512_set1_epi8(15);
    const int64_t full = k / 128, groups = k / group;
    __m512 acc[MB * NR];
    for (int i = 0; i < MB * NR; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < full; b++) {
        __m512i lo[NR], hi[NR];
        __m512 ws[NR];
        for (int r = 0; r < NR; r++) {
            const __m512i packed = _mm512_loadu_si512(rows[r] + 64 * b);
            lo[r] = _mm512_and_si512(packed, low);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            ws[r] = int4_lane_scales_avx512vnni(scales[r], b, group, groups);
        }
        for (int i = 0; i < mb; i++) {
            const unsigned char *a = act + i * ld_act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
            const __m512i xe = _mm512_loadu_si512(a), xo = _mm512_loadu_si512(a + 64);
            const __m512i seed = _mm512_loadu_si512(a + 128);
            const __m512 xs = _mm512_loadu_ps((const float *)(a + 192));
            for (int r = 0; r < NR; r++) {
                __m512i dot = _mm512_dpbusd_epi32(seed, lo[r], xe);
                dot = _mm512_dpbusd_epi32(dot, hi[r], xo);
                acc[i * NR + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws[r], xs), acc[i * NR + r]);
            }
        }
    }
    if (full * 128 < k) { /* tail: K % 128 in {32, 64, 96}; masked loads never read past the row */
        const __mmask64 mask = (__mmask64)((1ull << ((k - full * 128) / 2)) - 1);
        for (int r = 0; r < NR; r++)
            int4_block_avx512vnni(_mm512_maskz_loadu_epi8(mask, rows[r] + 64 * full),
                                  int4_lane_scales_avx512vnni(scales[r], full, group, groups), act, ld_act, mb, full,
                                  acc + r);
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(acc[i * NR + r]);
}

TB_INLINE void int8_block_avx512vnni(const __m512i *w, const unsigned char *act, int64_t ld_act, int mb, int64_t c,
                                     __m512 *acc) {
    for (int i = 0; i < mb; i++) {
        const unsigned char *a = act + i * ld_act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
        const __m512i xq = _mm512_loadu_si512(a), seed = _mm512_loadu_si512(a + 64);
        const __m512 lane_scales = _mm512_loadu_ps((const float *)(a + 128));
        for (int r = 0; r < NR; r++)
            acc[i * NR + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(seed, w[r], xq)), lane_scales,
                                              acc[i * NR + r]);
    }
}

TB_INLINE void int8_tile_avx512vnni(const uint8_t *const *rows, const unsigned char *act, int64_t ld_act, int mb,
                                    int64_t k, float dots[MB][NR]) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int64_t full = k / 64;
    __m512 acc[MB * NR];
    for (int i = 0; i < MB * NR; i++)
        acc[i] = _mm512_setzero_ps();
    const uint8_t *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
    for (int64_t c = 0; c < full; c++) {
        const __m512i w[NR] = {_mm512_xor_si512(_mm512_loadu_si512(r0 + 64 * c), flip),
                               _mm512_xor_si512(_mm512_loadu_si512(r1 + 64 * c), flip),
                               _mm512_xor_si512(_mm512_loadu_si512(r2 + 64 * c), flip),
                               _mm512_xor_si512(_mm512_loadu_si512(r3 + 64 * c), flip)};
        int8_block_avx512vnni(w, act, ld_act, mb, c, acc);
    }
    if (full * 64 < k) {
        const __mmask64 mask = (__mmask64)((1ull << (k - full * 64)) - 1);
        __m512i w[NR];
        for (int r = 0; r < NR; r++)
            w[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, rows[r] + 64 * full), flip);
        int8_block_avx512vnni(w, act, ld_act, mb, full, acc);
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++)
            dots[i][r] = _mm512_reduce_add_ps(acc[i * NR + r]);
}

static void int4_dots_avx512vnni(const uint8_t *const *rows, const float *const *scales, const unsigned char *act,
                                 int64_t ld_act, int64_t mb, int64_t k, int64_t group, float dots[MB][NR]) {
#define TILE(MBV)                                                                                      \
    do {                                                                                               \
        if (group == 32)                                                                               \
            int4_tile_avx512vnni(rows, scales, act, ld_act, MBV, k, 32, dots);                         \
        else if (group == 64)                                                                          \
            int4_tile_avx512vnni(rows, scales, act, ld_act, MBV, k, 64, dots);                         \
        else                                                                                           \
            int4_tile_avx512vnni(rows, scales, act, ld_act, MBV, k, group, dots);                      \
    } while (0)
    switch (mb) {
    case 1: TILE(1); break;
    case 2: TILE(2); break;
    case 3: TILE(3); break;
    default: TILE(4); break;
    }
#undef TILE
}

static void int8_dots_avx512vnni(const uint8_t *const *rows, const unsigned char *act, int64_t ld_act, int64_t mb,
                                 int64_t k, float dots[MB][NR]) {
    switch (mb) {
    case 1: int8_tile_avx512vnni(rows, act, ld_act, 1, k, dots); break;
    case 2: int8_tile_avx512vnni(rows, act, ld_act, 2, k, dots); break;
    case 3: int8_tile_avx512vnni(rows, act, ld_act, 3, k, dots); break;
    default: int8_tile_avx512vnni(rows, act, ld_act, 4, k, dots); break;
    }
}

/* Decode (one activation row): weight rows one after another, so the weights stream sequentially (four
 * interleaved row streams read markedly slower from DRAM), two accumulators per row to hide FMA latency.
 * Accumulators are plain locals: indexing an array by the loop counter sends them through memory. */
TB_INLINE __m512 int4_step_avx512vnni(const uint8_t *row, const float *scales, const unsigned char *act, int64_t b,
                                      int64_t group, int64_t groups, __m512 acc) {
    const __m512i low = _mm512_set1_epi8(15);
    const __m512i packed = _mm512_loadu_si512(row + 64 * b);
    const unsigned char *a = act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
    __m512i dot = _mm512_loadu_si512(a + 128);
    dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(packed, low), _mm512_loadu_si512(a));
    dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low), _mm512_loadu_si512(a + 64));
    const __m512 lane_scales = _mm512_mul_ps(int4_lane_scales_avx512vnni(scales, b, group, groups),
                                             _mm512_loadu_ps((const float *)(a + 192)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), lane_scales, acc);
}

TB_INLINE float int4_row_dot_avx512vnni(const uint8_t *row, const float *scales, const unsigned char *act, int64_t k,
                                        int64_t group) {
    const int64_t full = k / 128, groups = k / group;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= full; b += 2) {
        _mm_prefetch((const char *)row + 64 * b + PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)row + 64 * b + 64 + PREFETCH_BYTES, _MM_HINT_T0);
        acc0 = int4_step_avx512vnni(row, scales, act, b, group, groups, acc0);
        acc1 = int4_step_avx512vnni(row, scales, act, b + 1, group, groups, acc1);
    }
    if (b < full)
        acc0 = int4_step_avx512vnni(row, scales, act, b, group, groups, acc0);
    if (full * 128 < k) {
        __m512 tail[1] = {_mm512_setzero_ps()};
        const __mmask64 mask = (__mmask64)((1ull << ((k - full * 128) / 2)) - 1);
        int4_block_avx512vnni(_mm512_maskz_loadu_epi8(mask, row + 64 * full),
                              int4_lane_scales_avx512vnni(scales, full, group, groups), act, 0, 1, full, tail);
        acc1 = _mm512_add_ps(acc1, tail[0]);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

TB_INLINE __m512 int8_step_avx512vnni(__m512i w, const unsigned char *act, int64_t c, __m512 acc) {
    const unsigned char *a = act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(a + 64), w, _mm512_loadu_si512(a));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps((const float *)(a + 128)), acc);
}

static float int8_row_dot_avx512vnni(const uint8_t *row, const unsigned char *act, int64_t k) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int64_t full = k / 64;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 2 <= full; c += 2) {
        _mm_prefetch((const char *)row + 64 * c + PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch((const char *)row + 64 * c + 64 + PREFETCH_BYTES, _MM_HINT_T0);
        acc0 = int8_step_avx512vnni(_mm512_xor_si512(_mm512_loadu_si512(row + 64 * c), flip), act, c, acc0);
        acc1 = int8_step_avx512vnni(_mm512_xor_si512(_mm512_loadu_si512(row + 64 * c + 64), flip), act, c + 1, acc1);
    }
    if (c < full)
        acc0 = int8_step_avx512vnni(_mm512_xor_si512(_mm512_loadu_si512(row + 64 * c), flip), act, c, acc0);
    if (full * 64 < k) {
        const __mmask64 mask = (__mmask64)((1ull << (k - full * 64)) - 1);
        acc1 = int8_step_avx512vnni(_mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, row + 64 * full), flip), act, full,
                                    acc1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static void row_vector_avx512vnni(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    for (int64_t n = n_begin; n < n_end; n++) {
        const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
        const float *scales = w->scales + n * w->scales_per_row;
        float value;
        if (w->type == TB_QUANT_INT8)
            value = int8_row_dot_avx512vnni(row, run->act, w->k) * scales[0];
        else if (w->group_size == 64)
            value = int4_row_dot_avx512vnni(row, scales, run->act, w->k, 64);
        else if (w->group_size == 32)
            value = int4_row_dot_avx512vnni(row, scales, run->act, w->k, 32);
        else
            value = int4_row_dot_avx512vnni(row, scales, run->act, w->k, w->group_size);
        run->y[n] = value + (run->bias ? run->bias[n] : 0.0f);
    }
}

static void dots_avx512vnni(const tb_quant_weight *w, const uint8_t *const *rows, const float *const *scales,
                            const unsigned char *act, int64_t ld_act, int64_t mb, float *flat_dots) {
    float(*dots)[NR] = (float(*)[NR])flat_dots;
    if (w->type == TB_QUANT_INT4)
        int4_dots_avx512vnni(rows, scales, act, ld_act, mb, w->k, w->group_size, dots);
    else
        int8_dots_avx512vnni(rows, act, ld_act, mb, w->k, dots);
}

static void rows_avx512vnni(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    if (run->m == 1) {
        row_vector_avx512vnni(run, n_begin, n_end);
        return;
    }
    tb_llm_row_blocks(run, n_begin, n_end, NR, MB, dots_avx512vnni);
}

/* ---- activation preparation (bit-identical to tb_llm_qact_prepare_block) ---- */

static void prepare_avx512vnni(tb_llm_quant format, const float *x, int64_t k, unsigned char *dst) {
    const __m512i ones = _mm512_set1_epi8(1);
    if (format == TB_LLM_QUANT_INT4) {
        const int64_t full = k / 128;
        for (int64_t b = 0; b < full; b++) {
            unsigned char *out = dst + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
            float d[4];
            const __m256i q[4] = {tb_llm_quantize32_avx512vnni(x + 128 * b, 32, &d[0]),
                                  tb_llm_quantize32_avx512vnni(x + 128 * b + 32, 32, &d[1]),
                                  tb_llm_quantize32_avx512vnni(x + 128 * b + 64, 32, &d[2]),
                                  tb_llm_quantize32_avx512vnni(x + 128 * b + 96, 32, &d[3])};
            const __m512i first = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
            const __m512i second = _mm512_inserti64x4(_mm512_castsi256_si512(q[2]), q[3], 1);
            /* even k: low bytes of each 16-bit pair; odd k: high bytes (arithmetic shift keeps the sign) */
            const __m512i even = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(first)),
                                                    _mm512_cvtepi16_epi8(second), 1);
            const __m512i odd = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srai_epi16(first, 8))),
                _mm512_cvtepi16_epi8(_mm512_srai_epi16(second, 8)), 1);
            _mm512_storeu_si512(out, even);
            _mm512_storeu_si512(out + 64, odd);
            /* sums of 4, then adjacent pairs -> sums of 8 consecutive k per lane */
            const __m512i s_first = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, first);
            const __m512i s_second = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, second);
            const __m512i pick_even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const __m512i pick_odd = _mm512_add_epi32(pick_even, _mm512_set1_epi32(1));
            const __m512i sum8 = _mm512_add_epi32(_mm512_permutex2var_epi32(s_first, pick_even, s_second),
                                                  _mm512_permutex2var_epi32(s_first, pick_odd, s_second));
            _mm512_storeu_si512(out + 128, _mm512_mullo_epi32(sum8, _mm512_set1_epi32(-8)));
            const __m512 scales = _mm512_setr_ps(d[0], d[0], d[0], d[0], d[1], d[1], d[1], d[1], d[2], d[2], d[2], d[2],
                                                 d[3], d[3], d[3], d[3]);
            _mm512_storeu_ps((float *)(out + 192), scales);
        }
        if (full * 128 < k)
            tb_llm_qact_prepare_block(format, x + full * 128, k - full * 128, dst + full * TB_LLM_QACT_INT4_BLOCK_BYTES);
        return;
    }
    const int64_t full = k / 64;
    for (int64_t c = 0; c < full; c++) {
        unsigned char *out = dst + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
        float d[2];
        const __m256i q0 = tb_llm_quantize32_avx512vnni(x + 64 * c, 32, &d[0]);
        const __m256i q1 = tb_llm_quantize32_avx512vnni(x + 64 * c + 32, 32, &d[1]);
        const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
        _mm512_storeu_si512(out, xq);
        const __m512i sum4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xq);
        _mm512_storeu_si512(out + 64, _mm512_mullo_epi32(sum4, _mm512_set1_epi32(-128)));
        const __m512 scales = _mm512_mask_blend_ps((__mmask16)0xff00, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
        _mm512_storeu_ps((float *)(out + 128), scales);
    }
    if (full * 64 < k)
        tb_llm_qact_prepare_block(format, x + full * 64, k - full * 64, dst + full * TB_LLM_QACT_INT8_BLOCK_BYTES);
}

const tb_llm_qkernels tb_llm_qkernels_avx512vnni = {.name = "avx512vnni",
                                                    .prepare = prepare_avx512vnni,
                                                    .rows = rows_avx512vnni,
                                                    .gemm_xt_bytes = tb_llm_gemm_xt_bytes_avx512vnni,
                                                    .gemm_prepare = tb_llm_gemm_prepare_avx512vnni,
                                                    .gemm_rows = tb_llm_gemm_rows_avx512vnni,
                                                    .batch_rows = tb_llm_batch_rows_avx512vnni};

/* The same decode kernels with the AMX-INT8 prompt GEMM (x86_amx/llm_gemm_amx.c, same bits as the VNNI one). */
const tb_llm_qkernels tb_llm_qkernels_amx = {.name = "avx512vnni+amx",
                                             .prepare = prepare_avx512vnni,
                                             .rows = rows_avx512vnni,
                                             .gemm_xt_bytes = tb_llm_gemm_xt_bytes_amx,
                                             .gemm_prepare = tb_llm_gemm_prepare_amx,
                                             .gemm_rows = tb_llm_gemm_rows_amx,
                                             .batch_rows = tb_llm_batch_rows_avx512vnni};
