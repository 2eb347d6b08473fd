/* AVX2 kernels of the int8-activation matmul (layouts and contract in llm/llm_internal.h, scalar reference
 * in llm/llm_qmatmul.c), for x86 CPUs without AVX-512 VNNI. They read the same prepared activation rows and
 * give the reference's bits exactly: per (activation row, weight row) 16 f32 lane accumulators (two ymm,
 * lanes 0-7 and 8-15) updated once per block by a fused multiply-add of the lane's exact int32 dot, then the
 * reference's left-to-right sum of the 16 lanes. So every output row has the same bits whatever the number
 * of rows in the call, which makes rows() the server's batched decode kernel as well (batch_rows).
 *   int4: 32 packed bytes (8 lanes x 8 k) split into low nibbles (even k) and high nibbles (odd k), u8 0..15;
 *         vpmaddubsw against the de-interleaved s8 activations gives int16 pair sums (|sum| <= 2*15*127 each,
 *         both halves added: <= 7620), vpmaddwd by 1 makes the 4-byte lane sums, plus the -8 * sum(xq) seed.
 *   int8: vpmaddubsw is u8 x s8 with saturating int16 pair sums, so the VNNI reading (w + 128 unsigned) could
 *         overflow (2 * 255 * 127); instead |w| x (x with w's sign): |pair| <= 2 * 128 * 127 < 32767. This is
 *         sum(w * x) directly, which equals the reference's seed + sum((w + 128) x) exactly, so the seeds of
 *         the int8 layout are not read.
 * Tiles of NR weight rows x MB activation rows for M > 1: a weight half-block is unpacked once and feeds every
 * activation row of the tile (weights read from memory once per call). 1 x 4 keeps the 8 accumulators, the
 * unpacked half-block and its scales in registers; on Zen 3 it ran M = 8 on a 4864 x 896 int4 matrix 1.5x
 * faster than 2 x 2 (which spilled) and 2 x 4. Decode (M = 1) streams one weight row at a time with a
 * software prefetch, as the VNNI kernels do. The 16 lanes of 8 outputs are summed together (lane_sums). */
#include <immintrin.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "llm/llm_row_blocks.h"

#define TB_INLINE static inline __attribute__((always_inline))

enum { NR = 1, MB = 4, PREFETCH_BYTES = 4096 };
_Static_assert(MB == 4, "tile_lanes has one copy per row count 1..4");

/* Weight scales of the 16 lanes of int4 block b (lane l covers k in [128b + 8l, +8)): lanes 0-7 in s[0],
 * 8-15 in s[1]; lanes at or past k get 0 (their dots are 0, so the lane keeps its value, as the reference
 * skips them) and never read past the row's scales. */
TB_INLINE void int4_lane_scales(const float *scales, int64_t b, int64_t k, int64_t group, __m256 s[2]) {
    if (128 * b + 128 <= k) {
        if (group == 32) {
            const __m256 four = _mm256_castps128_ps256(_mm_loadu_ps(scales + 4 * b));
            s[0] = _mm256_permutevar8x32_ps(four, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
            s[1] = _mm256_permutevar8x32_ps(four, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3));
            return;
        }
        if (group == 64) {
            s[0] = _mm256_broadcast_ss(scales + 2 * b);
            s[1] = _mm256_broadcast_ss(scales + 2 * b + 1);
            return;
        }
        if (group % 128 == 0) {
            s[0] = s[1] = _mm256_broadcast_ss(scales + 128 * b / group);
            return;
        }
    }
    float lanes[16];
    for (int l = 0; l < 16; l++)
        lanes[l] = 128 * b + 8 * l < k ? scales[(128 * b + 8 * l) / group] : 0.0f;
    s[0] = _mm256_loadu_ps(lanes);
    s[1] = _mm256_loadu_ps(lanes + 8);
}

/* The exact int32 lane dots of one int4 half-block: lo/hi are the unpacked nibbles of 32 packed bytes, a the
 * activation block, h the half (lanes 8h..8h+7). */
TB_INLINE __m256i int4_half_dot(__m256i lo, __m256i hi, const unsigned char *a, int h) {
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(a + 32 * h))),
                                           _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 64 + 32 * h))));
    return _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)),
                            _mm256_loadu_si256((const __m256i *)(a + 128 + 32 * h)));
}

TB_INLINE __m256 int4_half_step(__m256i lo, __m256i hi, __m256 w_scales, const unsigned char *a, int h, __m256 acc) {
    const __m256 lane_scales = _mm256_mul_ps(w_scales, _mm256_loadu_ps((const float *)(a + 192 + 32 * h)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(int4_half_dot(lo, hi, a, h)), lane_scales, acc);
}

TB_INLINE void int4_unpack(const uint8_t *packed, __m256i *lo, __m256i *hi) {
    const __m256i low = _mm256_set1_epi8(15);
    const __m256i bytes = _mm256_loadu_si256((const __m256i *)packed);
    *lo = _mm256_and_si256(bytes, low);
    *hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
}

/* One int8 half-block (32 weights, lanes 8h..8h+7): exact sum(w * x) per 4-k lane, scaled and accumulated. */
TB_INLINE __m256 int8_half_step(__m256i w, const unsigned char *a, int h, __m256 acc) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(a + 32 * h));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    const __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_loadu_ps((const float *)(a + 128 + 32 * h)), acc);
}

/* The reference's sum of the 16 lanes, left to right from 0. */
TB_INLINE float lane_sum(const float lanes[16]) {
    float total = 0.0f;
    for (int l = 0; l < 16; l++)
        total += lanes[l];
    return total;
}

/* 8 x 8 transpose: r[i] holds element i of the 8 input vectors. */
TB_INLINE void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* totals[j] = lane_sum(lanes[j]) for j < count, eight at a time: the 16 lanes of 8 outputs are transposed
 * so the left-to-right sum becomes 16 vertical adds (same order, same bits) instead of a 16-add chain per
 * output that serialized the decode loop. */
static void lane_sums(const float (*lanes)[16], int64_t count, float *totals) {
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
        __m256 low[8], high[8];
        for (int i = 0; i < 8; i++) {
            low[i] = _mm256_loadu_ps(lanes[j + i]);
            high[i] = _mm256_loadu_ps(lanes[j + i] + 8);
        }
        transpose8(low);
        transpose8(high);
        __m256 total = _mm256_setzero_ps();
        for (int l = 0; l < 8; l++)
            total = _mm256_add_ps(total, low[l]);
        for (int l = 0; l < 8; l++)
            total = _mm256_add_ps(total, high[l]);
        _mm256_storeu_ps(totals + j, total);
    }
    for (; j < count; j++)
        totals[j] = lane_sum(lanes[j]);
}

/* The row's last partial block (K % 128 for int4, K % 64 for int8) copied behind zeros, so that no load
 * reads past the row; the zero weights meet zero activation padding. */
TB_INLINE const uint8_t *tail_block(const uint8_t *row, int64_t offset, int64_t bytes, uint8_t buffer[64]) {
    memset(buffer, 0, 64);
    memcpy(buffer, row + offset, (size_t)bytes);
    return buffer;
}

/* ---- decode: one activation row, one weight row at a time ---- */

TB_INLINE void int4_row_lanes(const uint8_t *row, const float *scales, const unsigned char *act, int64_t k,
                              int64_t group, float lanes[16]) {
    const int64_t blocks = (k + 127) / 128, full = k / 128;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    uint8_t buffer[64];
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *packed = row + 64 * b;
        if (b == full)
            packed = tail_block(row, 64 * b, (k - 128 * b + 1) / 2, buffer);
        else
            _mm_prefetch((const char *)packed + PREFETCH_BYTES, _MM_HINT_T0);
        const unsigned char *a = act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
        __m256 ws[2];
        int4_lane_scales(scales, b, k, group, ws);
        __m256i lo, hi;
        int4_unpack(packed, &lo, &hi);
        acc0 = int4_half_step(lo, hi, ws[0], a, 0, acc0);
        int4_unpack(packed + 32, &lo, &hi);
        acc1 = int4_half_step(lo, hi, ws[1], a, 1, acc1);
    }
    _mm256_storeu_ps(lanes, acc0);
    _mm256_storeu_ps(lanes + 8, acc1);
}

static void int8_row_lanes(const uint8_t *row, const unsigned char *act, int64_t k, float lanes[16]) {
    const int64_t blocks = (k + 63) / 64, full = k / 64;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    uint8_t buffer[64];
    for (int64_t c = 0; c < blocks; c++) {
        const uint8_t *w = row + 64 * c;
        if (c == full)
            w = tail_block(row, 64 * c, k - 64 * c, buffer);
        else
            _mm_prefetch((const char *)w + PREFETCH_BYTES, _MM_HINT_T0);
        const unsigned char *a = act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
        acc0 = int8_half_step(_mm256_loadu_si256((const __m256i *)w), a, 0, acc0);
        acc1 = int8_half_step(_mm256_loadu_si256((const __m256i *)(w + 32)), a, 1, acc1);
    }
    _mm256_storeu_ps(lanes, acc0);
    _mm256_storeu_ps(lanes + 8, acc1);
}

/* y[n] for weight rows [n_begin, n_end), eight rows' lanes summed at once. */
static void row_vector_avx2(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += 8) {
        const int64_t count = n_end - n0 < 8 ? n_end - n0 : 8;
        float lanes[8][16], totals[8];
        for (int64_t j = 0; j < count; j++) {
            const int64_t n = n0 + j;
            const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
            const float *scales = w->scales + n * w->scales_per_row;
            if (w->type == TB_QUANT_INT8)
                int8_row_lanes(row, run->act, w->k, lanes[j]);
            else if (w->group_size == 64)
                int4_row_lanes(row, scales, run->act, w->k, 64, lanes[j]);
            else if (w->group_size == 32)
                int4_row_lanes(row, scales, run->act, w->k, 32, lanes[j]);
            else
                int4_row_lanes(row, scales, run->act, w->k, w->group_size, lanes[j]);
        }
        lane_sums((const float(*)[16])lanes, count, totals);
        for (int64_t j = 0; j < count; j++) {
            const int64_t n = n0 + j;
            const float value = w->type == TB_QUANT_INT8 ? totals[j] * w->scales[n] : totals[j];
            run->y[n] = value + (run->bias ? run->bias[n] : 0.0f);
        }
    }
}

/* ---- tiles: NR weight rows x mb activation rows ---- */

/* lanes[i * NR + r] = the 16 lane sums of activation row i (< mb) with weight row r. */
TB_INLINE void int4_tile(const uint8_t *const *rows, const float *const *scales, const unsigned char *act,
                         int64_t ld_act, int mb, int64_t k, int64_t group, float (*lanes)[16]) {
    const int64_t blocks = (k + 127) / 128, full = k / 128;
    __m256 acc[MB][NR][2];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
    uint8_t buffers[NR][64];
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *packed[NR];
        __m256 ws[NR][2];
        for (int r = 0; r < NR; r++) {
            packed[r] = b == full ? tail_block(rows[r], 64 * b, (k - 128 * b + 1) / 2, buffers[r]) : rows[r] + 64 * b;
            int4_lane_scales(scales[r], b, k, group, ws[r]);
        }
        for (int h = 0; h < 2; h++) {
            __m256i lo[NR], hi[NR];
            for (int r = 0; r < NR; r++)
                int4_unpack(packed[r] + 32 * h, &lo[r], &hi[r]);
            for (int i = 0; i < mb; i++) {
                const unsigned char *a = act + i * ld_act + b * TB_LLM_QACT_INT4_BLOCK_BYTES;
                for (int r = 0; r < NR; r++)
                    acc[i][r][h] = int4_half_step(lo[r], hi[r], ws[r][h], a, h, acc[i][r][h]);
            }
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++) {
            _mm256_storeu_ps(lanes[i * NR + r], acc[i][r][0]);
            _mm256_storeu_ps(lanes[i * NR + r] + 8, acc[i][r][1]);
        }
}

TB_INLINE void int8_tile(const uint8_t *const *rows, const unsigned char *act, int64_t ld_act, int mb, int64_t k,
                         float (*lanes)[16]) {
    const int64_t blocks = (k + 63) / 64, full = k / 64;
    __m256 acc[MB][NR][2];
    for (int i = 0; i < MB; i++)
        for (int r = 0; r < NR; r++)
            acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
    uint8_t buffers[NR][64];
    for (int64_t c = 0; c < blocks; c++) {
        const uint8_t *block[NR];
        for (int r = 0; r < NR; r++)
            block[r] = c == full ? tail_block(rows[r], 64 * c, k - 64 * c, buffers[r]) : rows[r] + 64 * c;
        for (int h = 0; h < 2; h++) {
            __m256i w[NR];
            for (int r = 0; r < NR; r++)
                w[r] = _mm256_loadu_si256((const __m256i *)(block[r] + 32 * h));
            for (int i = 0; i < mb; i++) {
                const unsigned char *a = act + i * ld_act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
                for (int r = 0; r < NR; r++)
                    acc[i][r][h] = int8_half_step(w[r], a, h, acc[i][r][h]);
            }
        }
    }
    for (int i = 0; i < mb; i++)
        for (int r = 0; r < NR; r++) {
            _mm256_storeu_ps(lanes[i * NR + r], acc[i][r][0]);
            _mm256_storeu_ps(lanes[i * NR + r] + 8, acc[i][r][1]);
        }
}

static void tile_lanes(const tb_quant_weight *w, const uint8_t *const *rows, const float *const *scales,
                       const unsigned char *act, int64_t ld_act, int64_t mb, float (*lanes)[16]) {
#define TILE(MBV)                                                                                      \
    do {                                                                                               \
        if (w->type == TB_QUANT_INT8)                                                                  \
            int8_tile(rows, act, ld_act, MBV, w->k, lanes);                                            \
        else if (w->group_size == 64)                                                                  \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, 64, lanes);                                \
        else if (w->group_size == 32)                                                                  \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, 32, lanes);                                \
        else                                                                                           \
            int4_tile(rows, scales, act, ld_act, MBV, w->k, w->group_size, lanes);                     \
    } while (0)
    switch (mb) { /* the row count is a constant in each copy (its accumulators stay in registers) */
    case 1: TILE(1); break;
    case 2: TILE(2); break;
    case 3: TILE(3); break;
    default: TILE(4); break;
    }
#undef TILE
}

/* The row-block loop's dots for up to CHUNK activation rows: tiles of up to MB rows, then the lanes of all
 * of them summed together (dots[i * NR + r]). */
enum { CHUNK = 8 };
static void dots_for(const tb_quant_weight *w, const uint8_t *const *rows, const float *const *scales,
                     const unsigned char *act, int64_t ld_act, int64_t mb, float *dots) {
    float lanes[CHUNK * NR][16];
    for (int64_t i = 0; i < mb; i += MB)
        tile_lanes(w, rows, scales, act + i * ld_act, ld_act, mb - i < MB ? mb - i : MB, lanes + i * NR);
    lane_sums((const float(*)[16])lanes, mb * NR, dots);
}

static void rows_avx2(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    if (run->m == 1)
        row_vector_avx2(run, n_begin, n_end);
    else
        tb_llm_row_blocks(run, n_begin, n_end, NR, CHUNK, dots_for);
}

const tb_llm_qkernels tb_llm_qkernels_avx2 = {.name = "avx2",
                                              .prepare = tb_llm_qact_prepare_ref,
                                              .rows = rows_avx2,
                                              .gemm_xt_bytes = tb_llm_gemm_xt_bytes_avx2,
                                              .gemm_prepare = tb_llm_gemm_prepare_avx2,
                                              .gemm_rows = tb_llm_gemm_rows_avx2,
                                              .batch_rows = rows_avx2};
