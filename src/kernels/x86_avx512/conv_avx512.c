/* AVX-512 convolution helpers (contracts in kernels/nn_kernels.h): im2col into a GEMM B panel at any
 * stride and the direct single-channel plane convolution for stride-1 rows. Window borders become lane
 * masks: masked-off lanes of a masked load or gather are neither read nor faulted, so a row segment
 * that hangs over the padding loads its valid part in one instruction and zeros elsewhere. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"
#include "kernels/x86_avx512/lanes_avx512.h"

/* entries of the per-panel precomputed tables below */
enum { PANEL_TABLE = 256 };

/* Stride 2: output lane l reads column 2l of the 32 loaded as lo (lanes 0-15) and hi (16-31). */
static inline __m512 even_lanes(__m512 lo, __m512 hi) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(lo, even, hi);
}

void tb_im2col_panel_avx512(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel) {
    tb_panel_segment segments[64];
    int64_t stride = g->stride_w;
    /* the gather's 32-bit column indices must hold every column a chunk can name */
    int64_t reach = g->in_w + g->pad_left + g->kernel_w * g->dilation_w + 64 * stride;
    int count = nr <= 64 && reach <= INT32_MAX / 2 ? tb_panel_segments(g, j0, cols, segments) : 0;
    if (count == 0 || g->kernel_h * count > PANEL_TABLE || g->kernel_w * count > PANEL_TABLE) {
        tb_im2col_panel_ref(g, x, j0, cols, nr, panel);
        return;
    }
    /* Everything that does not depend on the channel, computed once per panel: the input row of each
     * (kh, segment) (-1 outside the image), and the first input column and the lane masks of each
     * (kw, segment) chunk of 16 outputs. Stride 1 reads the chunk's 16 columns; stride 2 its 32 columns
     * (valid: the low 16, valid_high: the high 16) and keeps the even ones; larger strides gather
     * column first + l * stride into lane l (valid: the lanes inside the row). */
    int64_t row_offset[PANEL_TABLE], start[PANEL_TABLE];
    __mmask16 valid[PANEL_TABLE][4], valid_high[PANEL_TABLE][4];
    const __m512i lane_columns = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                    _mm512_set1_epi32((int)stride));
    for (int s = 0; s < count; s++) {
        for (int64_t kh = 0; kh < g->kernel_h; kh++) {
            int64_t ih = segments[s].oh * g->stride_h - g->pad_top + kh * g->dilation_h;
            row_offset[kh * count + s] = ih >= 0 && ih < g->in_h ? ih * g->in_w : -1;
        }
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            int64_t e = kw * count + s, first = kw * g->dilation_w - g->pad_left + segments[s].ow0 * stride;
            start[e] = first;
            for (int q = 0; q < 4; q++) {
                int n = segments[s].len - 16 * q; /* outputs of this chunk (lanes past it are not read) */
                int64_t col = first + 16 * q * stride;
                __mmask16 store = tb_lanes_avx512(0, n);
                if (stride == 1) {
                    valid[e][q] = tb_lanes_avx512(-col, g->in_w - col) & store;
                } else if (stride == 2) {
                    valid[e][q] = tb_lanes_avx512(-col, g->in_w - col) & tb_lanes_avx512(0, 2 * n);
                    valid_high[e][q] = tb_lanes_avx512(-(col + 16), g->in_w - (col + 16)) & tb_lanes_avx512(0, 2 * n - 16);
                } else {
                    __m512i column = _mm512_add_epi32(_mm512_set1_epi32((int)col), lane_columns);
                    valid[e][q] = _mm512_cmpge_epi32_mask(column, _mm512_setzero_si512()) &
                                  _mm512_cmplt_epi32_mask(column, _mm512_set1_epi32((int)g->in_w)) & store;
                }
            }
        }
    }
    int64_t plane = g->in_h * g->in_w;
    const __m512 zero = _mm512_setzero_ps();
    float *dst = panel;
    for (int64_t c = 0; c < g->channels; c++) {
        const float *base = x + c * plane;
        if (c + TB_IM2COL_PREFETCH_CHANNELS < g->channels)
            tb_im2col_prefetch_rows(g, base + TB_IM2COL_PREFETCH_CHANNELS * plane, segments, count, row_offset, start);
        for (int64_t kh = 0; kh < g->kernel_h; kh++) {
            const int64_t *rows = row_offset + kh * count;
            for (int64_t kw = 0; kw < g->kernel_w; kw++, dst += nr) {
                for (int s = 0; s < count; s++) {
                    float *d = dst + segments[s].dst;
                    int chunks = (segments[s].len + 15) / 16;
                    /* Whole 16-lane stores: lanes past the segment land on panel entries that later
                     * segments/rows (or the tail zeroing) overwrite, or in the scratch's slack; masked
                     * stores are several times slower on some cores. */
                    if (rows[s] < 0) {
                        for (int q = 0; q < chunks; q++)
                            _mm512_storeu_ps(d + 16 * q, zero);
                        continue;
                    }
                    const float *row = base + rows[s];
                    int64_t e = kw * count + s, first = start[e];
                    for (int q = 0; q < chunks; q++) {
                        const float *at = tb_float_at(row, first + 16 * q * stride);
                        __m512 v;
                        if (stride == 1)
                            v = _mm512_maskz_loadu_ps(valid[e][q], at);
                        else if (stride == 2)
                            v = even_lanes(_mm512_maskz_loadu_ps(valid[e][q], at),
                                           _mm512_maskz_loadu_ps(valid_high[e][q], tb_float_at(at, 16)));
                        else
                            v = _mm512_mask_i32gather_ps(zero, valid[e][q],
                                                         _mm512_add_epi32(_mm512_set1_epi32((int)(first + 16 * q * stride)),
                                                                          lane_columns),
                                                         row, 4);
                        _mm512_storeu_ps(d + 16 * q, v);
                    }
                }
                for (int t = cols; t < nr; t++)
                    dst[t] = 0.0f;
            }
        }
    }
}

enum { PLANE_ROWS = 8, PLANE_MAX_KERNEL_W = 32, ZERO_ROW = 4096 };

/* Rows above/below the image read from here, so one column mask per tap serves all eight rows. */
static const float zero_row_avx512[ZERO_ROW];

/* Eight output rows at a time: eight independent FMA chains hide the FMA latency. */
void tb_conv2d_plane_avx512(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y) {
    if (g->stride_w != 1 || g->kernel_w > PLANE_MAX_KERNEL_W || g->in_w > ZERO_ROW) {
        tb_conv2d_plane_f32(g, x, w, bias, y);
        return;
    }
    const __m512 start_value = _mm512_set1_ps(bias);
    for (int64_t ow0 = 0; ow0 < g->out_w; ow0 += 16) {
        int n = g->out_w - ow0 < 16 ? (int)(g->out_w - ow0) : 16;
        __mmask16 store = (__mmask16)(((uint32_t)1 << n) - 1);
        __mmask16 column_mask[PLANE_MAX_KERNEL_W];
        int64_t column_start[PLANE_MAX_KERNEL_W];
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            column_start[kw] = ow0 - g->pad_left + kw * g->dilation_w;
            column_mask[kw] = tb_lanes_avx512(-column_start[kw], g->in_w - column_start[kw]) & store;
        }
        for (int64_t oh0 = 0; oh0 < g->out_h; oh0 += PLANE_ROWS) {
            __m512 acc[PLANE_ROWS];
            for (int r = 0; r < PLANE_ROWS; r++)
                acc[r] = start_value;
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {
                const float *rows[PLANE_ROWS];
                for (int r = 0; r < PLANE_ROWS; r++) {
                    int64_t ih = (oh0 + r) * g->stride_h - g->pad_top + kh * g->dilation_h;
                    bool inside = oh0 + r < g->out_h && ih >= 0 && ih < g->in_h;
                    rows[r] = inside ? x + ih * g->in_w : zero_row_avx512;
                }
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {
                    __m512 weight = _mm512_set1_ps(w[kh * g->kernel_w + kw]);
                    __mmask16 mask = column_mask[kw];
                    for (int r = 0; r < PLANE_ROWS; r++) {
                        __m512 v = _mm512_maskz_loadu_ps(mask, tb_float_at(rows[r], column_start[kw]));
                        acc[r] = _mm512_fmadd_ps(weight, v, acc[r]);
                    }
                }
            }
            for (int r = 0; r < PLANE_ROWS && oh0 + r < g->out_h; r++)
                _mm512_mask_storeu_ps(y + (oh0 + r) * g->out_w + ow0, store, acc[r]);
        }
    }
}
