/* AVX-512 direct convolution for rows of stride 1 or 2 (contract in kernels/nn_kernels.h): an
 * implicit GEMM whose B operand is read straight from the input planes. A tile is two 16-lane output
 * vectors (each a run of one output row); for every window tap the two vectors' input runs are fixed
 * offsets from the channel's plane, so the k loop is "two masked loads (stride 2: four, and a
 * permute keeping the even columns), 2 x ROWS FMAs" with no im2col buffer. Window borders and rows
 * outside the image become lane masks (masked-off lanes are neither read nor faulted), computed once
 * per tile and reused across channels and weight panels. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/gemm_internal.h"
#include "kernels/nn_kernels.h"
#include "kernels/x86_avx512/lanes_avx512.h"

enum { LANES = 16, MAX_ROWS = 14 }; /* 28 accumulators + 2 B vectors + 1 broadcast of the 32 registers */

/* One tile's per-tap tables: input offset (within a channel plane) and lane masks of each vector
 * (stride 2 reads 32 input columns per vector: `mask` covers the first 16, `mask_high` the next). */
typedef struct tile_taps {
    int64_t offset[2][TB_CONV_DIRECT_MAX_TAPS];
    __mmask16 mask[2][TB_CONV_DIRECT_MAX_TAPS];
    __mmask16 mask_high[2][TB_CONV_DIRECT_MAX_TAPS];
} tile_taps;

/* Lane l of a stride-2 vector is input column 2l of its run: the even lanes of two loads. */
static inline __m512 load_stride2(__mmask16 low, __mmask16 high, const float *x) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(low, x), even, _mm512_maskz_loadu_ps(high, tb_float_at(x, 16)));
}

/* Where one panel's rows of a tile go: row 0 of each vector's output, the lanes stored. */
typedef struct tile_out {
    float *y0, *y1;
    int64_t ldy;
    __mmask16 store0, store1;
    bool relu;
    bool prefetch; /* fetch each next input channel ahead */
} tile_out;

/* Accumulates ROWS output channels over the two vectors of a tile, starting from the row biases; relu
 * (the usual activation after a convolution) is applied in registers, anything else afterwards by the
 * GEMM epilogue (inlining every activation here would spill the accumulators). */
static inline __attribute__((always_inline)) void tile_rows(const int ROWS, const bool STRIDE2,
                                                            const tb_window_geometry *g,
                                                            const tile_taps *t, int taps, const float *x,
                                                            const float *a, const float *bias,
                                                            const tile_out *out) {
    __m512 acc0[MAX_ROWS], acc1[MAX_ROWS];
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; i++) {
        acc0[i] = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
        acc1[i] = acc0[i];
    }
    const int64_t plane = g->in_h * g->in_w;
    for (int64_t c = 0; c < g->channels; c++, x += plane) {
        /* the next channel's runs are a plane apart, too far for the hardware prefetcher to follow
         * (with few channels everything stays in cache and the prefetches would only cost issue slots) */
        if (out->prefetch && c + 1 < g->channels)
            for (int tap = 0; tap < taps; tap++) {
                _mm_prefetch((const char *)tb_float_at(x + plane, t->offset[0][tap]), _MM_HINT_T0);
                _mm_prefetch((const char *)tb_float_at(x + plane, t->offset[1][tap]), _MM_HINT_T0);
                if (STRIDE2) {
                    _mm_prefetch((const char *)tb_float_at(x + plane, t->offset[0][tap] + LANES), _MM_HINT_T0);
                    _mm_prefetch((const char *)tb_float_at(x + plane, t->offset[1][tap] + LANES), _MM_HINT_T0);
                }
            }
        for (int tap = 0; tap < taps; tap++) {
            __m512 b0, b1;
            if (STRIDE2) {
                b0 = load_stride2(t->mask[0][tap], t->mask_high[0][tap], tb_float_at(x, t->offset[0][tap]));
                b1 = load_stride2(t->mask[1][tap], t->mask_high[1][tap], tb_float_at(x, t->offset[1][tap]));
            } else {
                b0 = _mm512_maskz_loadu_ps(t->mask[0][tap], tb_float_at(x, t->offset[0][tap]));
                b1 = _mm512_maskz_loadu_ps(t->mask[1][tap], tb_float_at(x, t->offset[1][tap]));
            }
#pragma GCC unroll 16
            for (int i = 0; i < ROWS; i++) {
                __m512 ai = _mm512_set1_ps(a[i]);
                acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
                acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
            }
            a += ROWS;
        }
    }
    if (out->relu) {
        const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int i = 0; i < ROWS; i++) {
            acc0[i] = _mm512_max_ps(zero, acc0[i]); /* the second operand is returned for NaN, as torch.relu */
            acc1[i] = _mm512_max_ps(zero, acc1[i]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < ROWS; i++) {
        _mm512_mask_storeu_ps(out->y0 + i * out->ldy, out->store0, acc0[i]);
        _mm512_mask_storeu_ps(out->y1 + i * out->ldy, out->store1, acc1[i]);
    }
}

typedef void (*rows_fn)(const tb_window_geometry *, const tile_taps *, int, const float *, const float *,
                        const float *, const tile_out *);

#define TB_ROWS_FN(rows)                                                                                       \
    static void rows_##rows(const tb_window_geometry *g, const tile_taps *t, int taps, const float *x,         \
                            const float *a, const float *bias, const tile_out *out) {                          \
        tile_rows(rows, false, g, t, taps, x, a, bias, out);                                                   \
    }                                                                                                          \
    static void rows_##rows##_stride2(const tb_window_geometry *g, const tile_taps *t, int taps, const float *x, \
                                      const float *a, const float *bias, const tile_out *out) {                \
        tile_rows(rows, true, g, t, taps, x, a, bias, out);                                                    \
    }
TB_ROWS_FN(1) TB_ROWS_FN(2) TB_ROWS_FN(3) TB_ROWS_FN(4) TB_ROWS_FN(5) TB_ROWS_FN(6) TB_ROWS_FN(7)
TB_ROWS_FN(8) TB_ROWS_FN(9) TB_ROWS_FN(10) TB_ROWS_FN(11) TB_ROWS_FN(12) TB_ROWS_FN(13) TB_ROWS_FN(14)
#undef TB_ROWS_FN

static const rows_fn rows_by_count[2][MAX_ROWS + 1] = {
    {NULL, rows_1, rows_2, rows_3, rows_4, rows_5, rows_6, rows_7, rows_8, rows_9, rows_10, rows_11, rows_12,
     rows_13, rows_14},
    {NULL, rows_1_stride2, rows_2_stride2, rows_3_stride2, rows_4_stride2, rows_5_stride2, rows_6_stride2,
     rows_7_stride2, rows_8_stride2, rows_9_stride2, rows_10_stride2, rows_11_stride2, rows_12_stride2,
     rows_13_stride2, rows_14_stride2},
};

/* Output row and first column of vector slot s, and its lane count. */
static inline void slot_position(const tb_window_geometry *g, int64_t slot, int64_t *oh, int64_t *ow0, int *lanes) {
    int64_t per_row = (g->out_w + LANES - 1) / LANES;
    *oh = slot / per_row;
    *ow0 = (slot % per_row) * LANES;
    *lanes = (int)(g->out_w - *ow0 < LANES ? g->out_w - *ow0 : LANES);
}

static void fill_taps(const tb_window_geometry *g, int v, int64_t oh, int64_t ow0, __mmask16 store, tile_taps *t) {
    int tap = 0;
    for (int64_t kh = 0; kh < g->kernel_h; kh++) {
        int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
        bool row_inside = ih >= 0 && ih < g->in_h;
        for (int64_t kw = 0; kw < g->kernel_w; kw++, tap++) {
            int64_t iw0 = ow0 * g->stride_w - g->pad_left + kw * g->dilation_w;
            t->offset[v][tap] = row_inside ? ih * g->in_w + iw0 : 0;
            if (g->stride_w == 1) {
                t->mask[v][tap] = row_inside ? (__mmask16)(tb_lanes_avx512(-iw0, g->in_w - iw0) & store) : 0;
            } else { /* 32 input columns; the odd ones are read and dropped by the permute */
                t->mask[v][tap] = row_inside ? tb_lanes_avx512(-iw0, g->in_w - iw0) : 0;
                t->mask_high[v][tap] = row_inside ? tb_lanes_avx512(-(iw0 + LANES), g->in_w - (iw0 + LANES)) : 0;
            }
        }
    }
}

void tb_conv_direct_avx512(const tb_conv_direct_args *args, int64_t slot_begin, int64_t slot_end) {
    const tb_window_geometry *g = args->g;
    const int taps = (int)(g->kernel_h * g->kernel_w);
    const int64_t k = g->channels * taps;
    const int panels = tb_conv_direct_panels(args->m, MAX_ROWS);
    /* relu runs in registers unless a residual follows it */
    bool relu = args->activation == TB_ACTIVATION_RELU && !args->residual;
    bool post = !relu && (args->activation != TB_ACTIVATION_NONE || args->residual);
    tile_taps t;
    for (int64_t slot = slot_begin; slot < slot_end; slot += 2) {
        int64_t oh[2], ow0[2];
        int lanes[2] = {0, 0};
        __mmask16 store[2] = {0, 0};
        for (int v = 0; v < 2; v++) {
            if (slot + v >= slot_end) {
                for (int tap = 0; tap < taps; tap++) {
                    t.mask[v][tap] = t.mask_high[v][tap] = 0;
                    t.offset[v][tap] = 0;
                }
                oh[v] = oh[0];
                ow0[v] = ow0[0];
                continue;
            }
            slot_position(g, slot + v, &oh[v], &ow0[v], &lanes[v]);
            store[v] = tb_lanes_avx512(0, lanes[v]);
            fill_taps(g, v, oh[v], ow0[v], store[v], &t);
        }
        int64_t out0 = oh[0] * g->out_w + ow0[0], out1 = oh[1] * g->out_w + ow0[1];
        for (int p = 0; p < panels; p++) {
            int64_t row0;
            int rows = tb_conv_direct_panel_rows(args->m, MAX_ROWS, p, &row0);
            float *y = args->y + row0 * args->ldy;
            tile_out out = {.y0 = y + out0, .y1 = y + out1, .ldy = args->ldy, .store0 = store[0], .store1 = store[1],
                            .relu = relu, .prefetch = g->channels >= 8};
            const float *bias = args->bias ? args->bias + row0 : NULL;
            rows_by_count[g->stride_w == 2][rows](g, &t, taps, args->x, args->packed + row0 * k, bias, &out);
            for (int v = 0; v < 2 && post; v++) {
                if (!lanes[v])
                    continue;
                int64_t at_out = v ? out1 : out0;
                tb_gemm_epilogue e = {
                    .bias_kind = TB_BIAS_NONE,
                    .activation = relu ? TB_ACTIVATION_NONE : args->activation,
                    .residual = args->residual ? args->residual + row0 * args->ldy + at_out : NULL,
                    .residual_row_stride = args->ldy,
                };
                tb_gemm_microkernel_avx512.epilogue(y + at_out, args->ldy, rows, lanes[v], &e);
            }
        }
    }
}
