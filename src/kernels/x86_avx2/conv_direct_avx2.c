/* AVX2 direct convolution for stride-1 rows (contract in kernels/nn_kernels.h): the AVX-512 kernel's
 * scheme (x86_avx512/conv_direct_avx512.c) on 8-lane vectors. A tile is two 8-lane output runs; each
 * window tap reads both runs straight from the input plane with _mm256_maskload_ps, whose masked-off
 * lanes are neither read nor faulted, so borders and rows outside the image cost nothing extra (tiles
 * whose runs all lie inside their rows use plain loads). With
 * 16 registers a panel holds at most 6 output channels (12 accumulators, 2 B vectors, 1 broadcast). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm_internal.h"
#include "kernels/nn_kernels.h"
#include "kernels/x86_avx2/lanes_avx2.h"

enum { LANES = 8, MAX_ROWS = 6 };

/* One tile's per-tap tables: input offset (within a channel plane) and lane mask of each vector. */
typedef struct tile_taps {
    int64_t offset[2][TB_CONV_DIRECT_MAX_TAPS];
    __m256i mask[2][TB_CONV_DIRECT_MAX_TAPS];
} tile_taps;

typedef struct tile_out {
    float *y0, *y1;
    int64_t ldy;
    __m256i store0, store1;
    bool whole; /* both runs store all 8 lanes */
    bool relu;
} tile_out;

/* ROWS output channels over the two vectors of a tile, from the row biases; relu in registers. */
static inline __attribute__((always_inline)) void tile_rows(const int ROWS, const bool INSIDE,
                                                            const tb_window_geometry *g,
                                                            const tile_taps *t, int taps, const float *x,
                                                            const float *a, const float *bias,
                                                            const tile_out *out) {
    __m256 acc0[MAX_ROWS], acc1[MAX_ROWS];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++) {
        acc0[i] = bias ? _mm256_set1_ps(bias[i]) : _mm256_setzero_ps();
        acc1[i] = acc0[i];
    }
    const int64_t plane = g->in_h * g->in_w;
    for (int64_t c = 0; c < g->channels; c++, x += plane) {
        for (int tap = 0; tap < taps; tap++) {
            __m256 b0, b1;
            if (INSIDE) { /* every tap's runs lie inside their rows: plain loads */
                b0 = _mm256_loadu_ps(x + t->offset[0][tap]);
                b1 = _mm256_loadu_ps(x + t->offset[1][tap]);
            } else {
                b0 = _mm256_maskload_ps(tb_float_at(x, t->offset[0][tap]), t->mask[0][tap]);
                b1 = _mm256_maskload_ps(tb_float_at(x, t->offset[1][tap]), t->mask[1][tap]);
            }
#pragma GCC unroll 8
            for (int i = 0; i < ROWS; i++) {
                __m256 ai = _mm256_broadcast_ss(a + i);
                acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
                acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
            }
            a += ROWS;
        }
    }
    if (out->relu) {
        const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < ROWS; i++) {
            acc0[i] = _mm256_max_ps(zero, acc0[i]); /* the second operand is returned for NaN, as torch.relu */
            acc1[i] = _mm256_max_ps(zero, acc1[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < ROWS; i++) {
        if (out->whole) { /* plain stores when both runs are 8 lanes (masked stores are slow on AMD parts) */
            _mm256_storeu_ps(out->y0 + i * out->ldy, acc0[i]);
            _mm256_storeu_ps(out->y1 + i * out->ldy, acc1[i]);
        } else {
            _mm256_maskstore_ps(out->y0 + i * out->ldy, out->store0, acc0[i]);
            _mm256_maskstore_ps(out->y1 + i * out->ldy, out->store1, acc1[i]);
        }
    }
}

typedef void (*rows_fn)(const tb_window_geometry *, const tile_taps *, int, const float *, const float *,
                        const float *, const tile_out *);

#define TB_ROWS_FN(rows)                                                                                       \
    static void rows_##rows(const tb_window_geometry *g, const tile_taps *t, int taps, const float *x,         \
                            const float *a, const float *bias, const tile_out *out) {                          \
        tile_rows(rows, false, g, t, taps, x, a, bias, out);                                                   \
    }                                                                                                          \
    static void rows_##rows##_inside(const tb_window_geometry *g, const tile_taps *t, int taps, const float *x, \
                                     const float *a, const float *bias, const tile_out *out) {                 \
        tile_rows(rows, true, g, t, taps, x, a, bias, out);                                                    \
    }
TB_ROWS_FN(1) TB_ROWS_FN(2) TB_ROWS_FN(3) TB_ROWS_FN(4) TB_ROWS_FN(5) TB_ROWS_FN(6)
#undef TB_ROWS_FN

/* [whether every run lies inside its rows][output channels] */
static const rows_fn rows_by_count[2][MAX_ROWS + 1] = {
    {NULL, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6},
    {NULL, rows_1_inside, rows_2_inside, rows_3_inside, rows_4_inside, rows_5_inside, rows_6_inside},
};

/* Fills run v's taps; returns whether every tap reads 8 whole columns inside an image row. */
static bool fill_taps(const tb_window_geometry *g, int v, int64_t oh, int64_t ow0, int lanes, tile_taps *t) {
    int tap = 0;
    bool inside = true;
    for (int64_t kh = 0; kh < g->kernel_h; kh++) {
        int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
        bool row_inside = ih >= 0 && ih < g->in_h;
        for (int64_t kw = 0; kw < g->kernel_w; kw++, tap++) {
            int64_t iw0 = ow0 - g->pad_left + kw * g->dilation_w;
            int64_t lo = -iw0, hi = g->in_w - iw0 < lanes ? g->in_w - iw0 : lanes;
            t->mask[v][tap] = row_inside ? tb_lanes_avx2(lo, hi) : _mm256_setzero_si256();
            t->offset[v][tap] = row_inside ? ih * g->in_w + iw0 : 0;
            inside = inside && row_inside && iw0 >= 0 && iw0 + LANES <= g->in_w;
        }
    }
    return inside;
}

void tb_conv_direct_avx2(const tb_conv_direct_args *args, int64_t slot_begin, int64_t slot_end) {
    const tb_window_geometry *g = args->g;
    const int taps = (int)(g->kernel_h * g->kernel_w);
    const int64_t k = g->channels * taps;
    const int panels = tb_conv_direct_panels(args->m, MAX_ROWS);
    const int64_t per_row = (g->out_w + LANES - 1) / LANES;
    /* relu runs in registers unless a residual follows it */
    bool relu = args->activation == TB_ACTIVATION_RELU && !args->residual;
    bool post = !relu && (args->activation != TB_ACTIVATION_NONE || args->residual);
    tile_taps t;
    for (int64_t slot = slot_begin; slot < slot_end; slot += 2) {
        int64_t out[2] = {0, 0};
        int lanes[2] = {0, 0};
        __m256i store[2];
        /* when every tap of both runs lies inside its rows the loads need no masks: plain loads are
         * 16% faster for 64 channels of 56x56 on Zen 3 */
        bool inside = true;
        for (int v = 0; v < 2; v++) {
            if (slot + v >= slot_end) {
                for (int tap = 0; tap < taps; tap++) {
                    t.mask[v][tap] = _mm256_setzero_si256();
                    t.offset[v][tap] = 0;
                }
                store[v] = _mm256_setzero_si256();
                out[v] = out[0];
                inside = false;
                continue;
            }
            int64_t oh = (slot + v) / per_row, ow0 = ((slot + v) % per_row) * LANES;
            lanes[v] = (int)(g->out_w - ow0 < LANES ? g->out_w - ow0 : LANES);
            store[v] = tb_lanes_avx2(0, lanes[v]);
            inside &= fill_taps(g, v, oh, ow0, lanes[v], &t);
            out[v] = oh * g->out_w + ow0;
        }
        for (int p = 0; p < panels; p++) {
            int64_t row0;
            int rows = tb_conv_direct_panel_rows(args->m, MAX_ROWS, p, &row0);
            float *y = args->y + row0 * args->ldy;
            tile_out o = {.y0 = y + out[0], .y1 = y + out[1], .ldy = args->ldy, .store0 = store[0], .store1 = store[1],
                          .whole = lanes[0] == LANES && lanes[1] == LANES, .relu = relu};
            rows_by_count[inside][rows](g, &t, taps, args->x, args->packed + row0 * k, args->bias ? args->bias + row0 : NULL,
                                &o);
            for (int v = 0; v < 2 && post; v++) {
                if (!lanes[v])
                    continue;
                tb_gemm_epilogue e = {
                    .bias_kind = TB_BIAS_NONE,
                    .activation = relu ? TB_ACTIVATION_NONE : args->activation,
                    .residual = args->residual ? args->residual + row0 * args->ldy + out[v] : NULL,
                    .residual_row_stride = args->ldy,
                };
                tb_gemm_microkernel_avx2.epilogue(y + out[v], args->ldy, rows, lanes[v], &e);
            }
        }
    }
}
