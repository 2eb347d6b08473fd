/* AVX-512 convolution helpers (contracts in kernels/nn_kernels.h): im2col into a GEMM B panel and the
 * direct single-channel plane convolution, for stride-1 rows. Window borders become lane masks:
 * masked-off lanes of a masked load are neither read nor faulted, so a row segment that hangs over
 * the padding loads its valid part in one instruction and zeros elsewhere. Other strides use the
 * reference. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"
#include "kernels/x86_avx512/lanes_avx512.h"

enum { PANEL_TABLE = 256 }; /* entries of the per-panel precomputed tables below */

void tb_im2col_panel_avx512(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel) {
    tb_panel_segment segments[64];
    int count = g->stride_w == 1 && nr <= 64 ? tb_panel_segments(g, j0, cols, segments) : 0;
    if (count == 0 || g->kernel_h * count > PANEL_TABLE || g->kernel_w * count > PANEL_TABLE) {
        tb_im2col_panel_ref(g, x, j0, cols, nr, panel);
        return;
    }
    /* Everything that does not depend on the channel, computed once per panel: the input row of each
     * (kh, segment) (-1 outside the image), and the first input column and the lane masks of each
     * (kw, segment) chunk of 16. */
    int64_t row_offset[PANEL_TABLE], start[PANEL_TABLE];
    __mmask16 valid[PANEL_TABLE][4], store[64][4];
    for (int s = 0; s < count; s++) {
        for (int q = 0; q < 4; q++) {
            int n = segments[s].len - 16 * q;
            store[s][q] = n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)(((uint32_t)1 << n) - 1);
        }
        for (int64_t kh = 0; kh < g->kernel_h; kh++) {
            int64_t ih = segments[s].oh * g->stride_h - g->pad_top + kh * g->dilation_h;
            row_offset[kh * count + s] = ih >= 0 && ih < g->in_h ? ih * g->in_w : -1;
        }
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            int64_t first = kw * g->dilation_w - g->pad_left + segments[s].ow0;
            start[kw * count + s] = first;
            for (int q = 0; q < 4; q++)
                valid[kw * count + s][q] = tb_lanes_avx512(-(first + 16 * q), g->in_w - (first + 16 * q)) & store[s][q];
        }
    }
    int64_t plane = g->in_h * g->in_w;
    const __m512 zero = _mm512_setzero_ps();
    float *dst = panel;
    for (int64_t c = 0; c < g->channels; c++) {
        const float *base = x + c * plane;
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
                    int64_t first = start[kw * count + s];
                    for (int q = 0; q < chunks; q++)
                        _mm512_storeu_ps(d + 16 * q,
                                         _mm512_maskz_loadu_ps(valid[kw * count + s][q],
                                                               tb_float_at(row, first + 16 * q)));
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
