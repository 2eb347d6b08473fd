/* AVX2 convolution helpers (contracts in kernels/nn_kernels.h): im2col into a GEMM B panel and the
 * direct single-channel plane convolution, with window borders as lane masks (vmaskmov neither reads
 * nor faults masked-off lanes, nor does a masked gather). The plane convolution takes stride-1 rows
 * only; other strides use the reference there. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"
#include "kernels/x86_avx2/lanes_avx2.h"

/* (tap, segment) entries and 8-column chunks of the per-panel tables */
enum { PANEL_TABLE = 64, PANEL_CHUNKS = 2 };

void tb_im2col_panel_avx2(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel) {
    tb_panel_segment segments[64];
    int count = nr <= 8 * PANEL_CHUNKS ? tb_panel_segments(g, j0, cols, segments) : 0;
    int64_t stride = g->stride_w;
    /* the gather's 32-bit column indices must hold every column a chunk can name */
    int64_t reach = g->in_w + g->pad_left + g->kernel_w * g->dilation_w + 8 * PANEL_CHUNKS * stride;
    if (count == 0 || g->kernel_h * count > PANEL_TABLE || g->kernel_w * count > PANEL_TABLE || reach > INT32_MAX / 2) {
        tb_im2col_panel_ref(g, x, j0, cols, nr, panel);
        return;
    }
    /* Everything that does not depend on the channel, computed once per panel: the input row of each
     * (kh, segment) (-1 outside the image), and the first input column and the lane masks of each
     * (kw, segment) chunk of 8 (stride 2: of its 16 input columns, low and high half). */
    int64_t row_offset[PANEL_TABLE], start[PANEL_TABLE];
    __m256i mask[PANEL_TABLE][PANEL_CHUNKS], mask_high[PANEL_TABLE][PANEL_CHUNKS];
    bool inside[PANEL_TABLE][PANEL_CHUNKS]; /* every column the chunk reads lies in the row: plain loads */

    for (int s = 0; s < count; s++) {
        for (int64_t kh = 0; kh < g->kernel_h; kh++) {
            int64_t ih = segments[s].oh * g->stride_h - g->pad_top + kh * g->dilation_h;
            row_offset[kh * count + s] = ih >= 0 && ih < g->in_h ? ih * g->in_w : -1;
        }
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            int64_t e = kw * count + s, first = kw * g->dilation_w - g->pad_left + segments[s].ow0 * stride;
            start[e] = first;
            for (int q = 0; q < PANEL_CHUNKS; q++) {
                int64_t col = first + 8 * q * stride;
                inside[e][q] = stride <= 2 && col >= 0 && col + 8 * stride <= g->in_w;
                if (stride <= 2) {
                    mask[e][q] = tb_lanes_avx2(-col, g->in_w - col);
                    mask_high[e][q] = tb_lanes_avx2(-(col + 8), g->in_w - (col + 8));
                } else { /* lane l reads column col + l * stride */
                    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                    __m256i column = _mm256_add_epi32(_mm256_set1_epi32((int)col),
                                                      _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)stride)));
                    mask[e][q] = _mm256_and_si256(_mm256_cmpgt_epi32(column, _mm256_set1_epi32(-1)),
                                                  _mm256_cmpgt_epi32(_mm256_set1_epi32((int)g->in_w), column));
                    mask_high[e][q] = column;
                }
            }
        }
    }
    int64_t plane = g->in_h * g->in_w;
    const __m256 zero = _mm256_setzero_ps();
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
                    int chunks = (segments[s].len + 7) / 8;
                    /* Whole 8-lane stores: lanes past the segment land on panel entries that later
                     * segments or rows (or the tail zeroing) overwrite, or in the scratch's slack. */
                    if (rows[s] < 0) {
                        for (int q = 0; q < chunks; q++)
                            _mm256_storeu_ps(d + 8 * q, zero);
                        continue;
                    }
                    const float *row = base + rows[s];
                    int64_t e = kw * count + s;
                    for (int q = 0; q < chunks; q++) {
                        const float *at = tb_float_at(row, start[e] + 8 * q * stride);
                        __m256 v;
                        if (inside[e][q] && stride == 1) {
                            v = _mm256_loadu_ps(at);
                        } else if (inside[e][q]) {
                            __m256 even = _mm256_shuffle_ps(_mm256_loadu_ps(at), _mm256_loadu_ps(at + 8),
                                                            _MM_SHUFFLE(2, 0, 2, 0));
                            v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
                        } else if (stride == 1) {
                            v = _mm256_maskload_ps(at, mask[e][q]);
                        } else if (stride == 2) { /* the even lanes of 16 columns */
                            __m256 even = _mm256_shuffle_ps(_mm256_maskload_ps(at, mask[e][q]),
                                                            _mm256_maskload_ps(tb_float_at(at, 8), mask_high[e][q]),
                                                            _MM_SHUFFLE(2, 0, 2, 0)); /* 0 2 8 10 | 4 6 12 14 */
                            v = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
                        } else {
                            v = _mm256_mask_i32gather_ps(zero, row, mask_high[e][q], _mm256_castsi256_ps(mask[e][q]), 4);
                        }
                        _mm256_storeu_ps(d + 8 * q, v);
                    }
                }
                for (int t = cols; t < nr; t++)
                    dst[t] = 0.0f;
            }
        }
    }
}

void tb_conv2d_plane_avx2(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y) {
    if (g->stride_w != 1) {
        tb_conv2d_plane_f32(g, x, w, bias, y);
        return;
    }
    for (int64_t oh = 0; oh < g->out_h; oh++) {
        for (int64_t ow0 = 0; ow0 < g->out_w; ow0 += 8) {
            int n = g->out_w - ow0 < 8 ? (int)(g->out_w - ow0) : 8;
            __m256i store = tb_lanes_avx2(0, n);
            __m256 acc = _mm256_set1_ps(bias);
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {
                int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                if (ih < 0 || ih >= g->in_h)
                    continue;
                const float *row = x + ih * g->in_w;
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {
                    int64_t start = ow0 - g->pad_left + kw * g->dilation_w;
                    __m256i valid = _mm256_and_si256(tb_lanes_avx2(-start, g->in_w - start), store);
                    __m256 v = _mm256_maskload_ps(tb_float_at(row, start), valid);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * g->kernel_w + kw]), v, acc);
                }
            }
            if (n == 8) /* plain stores for whole vectors (masked stores are slow on AMD parts) */
                _mm256_storeu_ps(y + oh * g->out_w + ow0, acc);
            else
                _mm256_maskstore_ps(y + oh * g->out_w + ow0, store, acc);
        }
    }
}
