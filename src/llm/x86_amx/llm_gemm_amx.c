/* AMX-INT8 GEMM for prompts (M >= 16 activation rows) on int4/int8 weights in the API layout, with the
 * bits of the AVX-512 VNNI GEMM (x86_avx512vnni/llm_gemm_avx512vnni.c): activations quantized to int8 per
 * 32-block by the same arithmetic, the same exact int32 dot per (row, column, 32-block), scaled by the
 * same f32 product (activation scale x weight scale) and accumulated by one fma per block in k order.
 *
 * tdpbssd multiplies signed activations by signed weights, so no +128 offset and no correction term are
 * needed (the VNNI kernel's dot minus its correction is this dot, exactly). One block of 32 k is one tile
 * product: A = 16 activation rows x 32 bytes, B = 8 quads x 16 weight columns x 4 bytes ("VNNI" layout),
 * C = 16 x 16 int32. Each 16 x 16 output block keeps its f32 sums in 16 zmm; after every k block its C tile
 * goes to an L1 buffer (DEPTH buffers) and AVX-512 applies the scales (3 vector ops per 16 outputs). Two
 * tile sets alternate, and the scales of block b - DEPTH + 1 are applied after block b's product is
 * issued, so the tile and vector units overlap (DEPTH 4 measured best of 2-6 on a Xeon with AMX: 2.1x the
 * VNNI GEMM). What limits it (perf): the tile store of each block waits for its product, so the tile
 * unit idles between dependent zero/load/product/store chains; a K of 32 per product also uses half of
 * what one tdpbssd can do (the per-32-block scales forbid summing two blocks in one product).
 *
 * Blocking: rows in chunks of MC (from the L2 size CPUID reports) so a chunk's activations stay in L2
 * while the thread's 32-column weight panels pass over them; each panel is unpacked to s8 and transposed
 * to the B layout once per chunk.
 *
 * Prepared activations ("xt"), Mp = M rounded up to 16, KB = ceil(K / 32), KP = 32 KB:
 *   s8 [Mp][KP]: xq[m, k] (0 past M and K), then f32 scales [KB][Mp] (0 past M). */
#include <immintrin.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "llm/x86_avx512vnni/llm_qmatmul_avx512vnni.h"
#include "torchburn/cpu.h"

enum { LANES = 16, PANEL = 32, TILE_BLOCK_BYTES = 8 * 64, DEPTH = 4 };

int64_t tb_llm_gemm_xt_bytes_amx(int64_t m, int64_t k) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (k + 31) / 32;
    return mp * kb * 32 + kb * mp * 4;
}

void tb_llm_gemm_prepare_amx(const float *x, int64_t x_stride, int64_t m, int64_t k, int64_t group_begin,
                             int64_t group_end, unsigned char *xt) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (k + 31) / 32, kp = kb * 32;
    float *scales = (float *)(xt + mp * kp);
    for (int64_t row = group_begin * LANES; row < group_end * LANES; row++) {
        unsigned char *q = xt + row * kp;
        for (int64_t b = 0; b < kb; b++) {
            float scale = 0.0f;
            const __m256i values = row < m ? tb_llm_quantize32_avx512vnni(x + row * x_stride + 32 * b,
                                                                          k - 32 * b < 32 ? k - 32 * b : 32, &scale)
                                           : _mm256_setzero_si256();
            _mm256_storeu_si256((__m256i *)(q + 32 * b), values);
            scales[b * mp + row] = scale;
        }
    }
}

/* The palette-1 configuration: tiles 0-1 A (16 x 32 B), 2-3 B (8 x 64 B), 4-5 C (16 x 64 B); 6-7 unused. */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure_tiles(void) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.rows[t] = t >= 6 ? 0 : t >= 2 && t < 4 ? 8 : 16;
        config.colsb[t] = t >= 6 ? 0 : t < 2 ? 32 : 64;
    }
    _tile_loadconfig(&config);
}

/* Per-thread scratch: the panel's s8 rows [PANEL][KP], its B tiles [KB][2][8][64] and weight scales
 * [KB][PANEL]. */
static _Thread_local unsigned char *scratch;
static _Thread_local size_t scratch_capacity;

static float block_scale(const tb_quant_weight *w, const float *scales, int64_t b) {
    return w->type == TB_QUANT_INT4 ? scales[b * 32 / w->group_size] : scales[0];
}

/* Columns [n0, n0 + nc) of w into the B layout; columns past nc are zero with scale 0. */
static void unpack_panel(const tb_quant_weight *w, int64_t n0, int64_t nc, int64_t kb, int8_t *rows,
                         unsigned char *tiles, float *weight_scales) {
    const int64_t kp = kb * 32;
    for (int64_t c = 0; c < PANEL; c++) {
        if (c < nc) {
            tb_llm_unpack_row_avx512vnni(w, n0 + c, kb, rows + c * kp, NULL);
            const float *scales = w->scales + (n0 + c) * w->scales_per_row;
            for (int64_t b = 0; b < kb; b++)
                weight_scales[b * PANEL + c] = block_scale(w, scales, b);
        } else {
            memset(rows + c * kp, 0, (size_t)kp);
            for (int64_t b = 0; b < kb; b++)
                weight_scales[b * PANEL + c] = 0.0f;
        }
    }
    /* B[quad][column] = the 4 bytes of k = 32b + 4 quad .. + 3 of that column: a 16 x 8 dword transpose */
    for (int64_t b = 0; b < kb; b++)
        for (int half = 0; half < 2; half++) {
            const int8_t *base = rows + half * LANES * kp + 32 * b;
            __m256i q[LANES];
            for (int c = 0; c < LANES; c++)
                q[c] = _mm256_loadu_si256((const __m256i *)(base + c * kp));
            tb_llm_transpose16x8_avx512vnni(q, tiles + (b * 2 + half) * TILE_BLOCK_BYTES, 64);
        }
}

/* acc[r] += dots[r] * (xs[r] * ws) for the 16 rows of a stored C tile (dots: 16 x 16 int32). */
#define APPLY_SCALES(dots, xs, ws)                                                                               \
    do {                                                                                                         \
        const __m512 w_ = _mm512_loadu_ps(ws);                                                                   \
        _Pragma("GCC unroll 16") for (int r = 0; r < LANES; r++) acc[r] =                                        \
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((dots) + r * LANES)),                          \
                            _mm512_mul_ps(_mm512_set1_ps((xs)[r]), w_), acc[r]);                                \
    } while (0)

/* One k block's tile product into C tile `c` (A tile `ta`, B tile `tb`), stored to `dots`. */
#define TILE_BLOCK(ta, tb, c, a, t, dots)                                                                        \
    do {                                                                                                         \
        _tile_zero(c);                                                                                           \
        _tile_loadd(ta, a, kp);                                                                                  \
        _tile_loadd(tb, t, 64);                                                                                  \
        _tile_dpbssd(c, ta, tb);                                                                                 \
        _tile_stored(c, dots, 64);                                                                               \
    } while (0)

/* The 16 x 16 output block of activation rows xq[16][kp] (scales xs[b * mp + r]) and one B-tile column of
 * the panel (tiles[b * 2 * TILE_BLOCK_BYTES], weight scales ws[b * PANEL]), over every k block, into
 * acc[16] (registers), with the tile-set alternation and scale lag described at the top. */
static void block(const unsigned char *xq, int64_t kp, const float *xs, int64_t mp, int64_t kb,
                  const unsigned char *tiles, const float *ws, __m512 acc[LANES]) {
    int32_t dots[DEPTH][LANES * LANES] __attribute__((aligned(64)));
    for (int r = 0; r < LANES; r++)
        acc[r] = _mm512_setzero_ps();
    const int64_t tile_stride = 2 * TILE_BLOCK_BYTES;
    for (int64_t b = 0; b < kb + DEPTH - 1; b++) {
        if (b < kb) {
            if (b & 1)
                TILE_BLOCK(1, 3, 5, xq + 32 * b, tiles + b * tile_stride, dots[b % DEPTH]);
            else
                TILE_BLOCK(0, 2, 4, xq + 32 * b, tiles + b * tile_stride, dots[b % DEPTH]);
        }
        const int64_t done = b - (DEPTH - 1);
        if (done >= 0)
            APPLY_SCALES(dots[done % DEPTH], xs + done * mp, ws + done * PANEL);
    }
}

/* y rows [0, m) x columns [n_begin, n_end): false when scratch could not be allocated. */
bool tb_llm_gemm_rows_amx(const tb_quant_weight *w, const unsigned char *xt, int64_t m, float *y, int64_t y_stride,
                          const float *bias, int64_t n_begin, int64_t n_end) {
    const int64_t mp = (m + LANES - 1) / LANES * LANES, kb = (w->k + 31) / 32, kp = kb * 32;
    const size_t rows_bytes = (size_t)(PANEL * kp), tiles_bytes = (size_t)(kb * 2 * TILE_BLOCK_BYTES);
    const size_t needed = rows_bytes + tiles_bytes + (size_t)(kb * PANEL) * sizeof(float);
    if (tb_llm_thread_scratch_reserve(&scratch, &scratch_capacity, needed) != TB_OK)
        return false;
    int8_t *panel_rows = (int8_t *)scratch;
    unsigned char *tiles = scratch + rows_bytes;
    float *weight_scales = (float *)(scratch + rows_bytes + tiles_bytes);
    const float *xs = (const float *)(xt + mp * kp);
    /* rows per chunk: half the L2 for the chunk's activations, in whole 32-row blocks */
    const int64_t l2 = tb_cpu_get_features()->l2.size_bytes > 0 ? tb_cpu_get_features()->l2.size_bytes : 1 << 20;
    int64_t mc = l2 / 2 / kp / PANEL * PANEL;
    mc = mc < PANEL ? PANEL : mc > 1024 ? 1024 : mc;
    configure_tiles();
    for (int64_t c0 = 0; c0 < mp; c0 += mc) {
        const int64_t c1 = c0 + mc < mp ? c0 + mc : mp;
        for (int64_t n0 = n_begin; n0 < n_end; n0 += PANEL) {
            const int64_t nc = n_end - n0 < PANEL ? n_end - n0 : PANEL;
            unpack_panel(w, n0, nc, kb, panel_rows, tiles, weight_scales);
            float bias_row[PANEL] __attribute__((aligned(64)));
            for (int64_t c = 0; c < PANEL; c++)
                bias_row[c] = bias && c < nc ? bias[n0 + c] : 0.0f; /* + 0.0f also when there is no bias, as VNNI */
            for (int64_t m0 = c0; m0 < c1; m0 += LANES)
                for (int half = 0; half < 2 && half * LANES < nc; half++) {
                    __m512 acc[LANES];
                    block(xt + m0 * kp, kp, xs + m0, mp, kb, tiles + half * TILE_BLOCK_BYTES,
                          weight_scales + half * LANES, acc);
                    const int64_t cols = nc - half * LANES < LANES ? nc - half * LANES : LANES;
                    const __mmask16 mask = (__mmask16)((1u << cols) - 1);
                    const __m512 bias_v = _mm512_load_ps(bias_row + half * LANES);
                    for (int r = 0; r < LANES && m0 + r < m; r++)
                        _mm512_mask_storeu_ps(y + (m0 + r) * y_stride + n0 + half * LANES, mask,
                                              _mm512_add_ps(acc[r], bias_v));
                }
        }
    }
    _tile_release();
    return true;
}
