/* AVX2 convolution helpers (contracts in kernels/nn_kernels.h): im2col into a GEMM B panel and the
 * direct single-channel plane convolution, for stride-1 rows, with window borders as lane masks
 * (vmaskmov neither reads nor faults masked-off lanes). Other strides use the reference. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"

/* Lane mask (all-ones lanes) of lanes l in [0, 8) with lo <= l < hi. */
static inline __m256i lane_range_avx2(int64_t lo, int64_t hi) {
    if (lo < -1)
        lo = -1;
    if (lo > 8)
        lo = 8;
    if (hi < 0)
        hi = 0;
    if (hi > 8)
        hi = 8;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i above = _mm256_cmpgt_epi32(lanes, _mm256_set1_epi32((int)lo - 1));
    __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), lanes);
    return _mm256_and_si256(above, below);
}

static inline const float *row_at_avx2(const float *row, int64_t index) {
    return (const float *)((uintptr_t)row + (uintptr_t)(index * (int64_t)sizeof(float)));
}

void tb_im2col_panel_avx2(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel) {
    if (g->stride_w != 1 || nr > 64) {
        tb_im2col_panel_ref(g, x, j0, cols, nr, panel);
        return;
    }
    tb_panel_segment segments[64];
    int count = tb_panel_segments(g, j0, cols, segments);
    int64_t plane = g->in_h * g->in_w;
    float *dst = panel;
    for (int64_t c = 0; c < g->channels; c++) {
        for (int64_t kh = 0; kh < g->kernel_h; kh++) {
            for (int64_t kw = 0; kw < g->kernel_w; kw++, dst += nr) {
                int64_t first = kw * g->dilation_w - g->pad_left;
                for (int s = 0; s < count; s++) {
                    const tb_panel_segment *seg = &segments[s];
                    int64_t ih = seg->oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                    float *d = dst + seg->dst;
                    bool inside = ih >= 0 && ih < g->in_h;
                    const float *row = x + c * plane + (inside ? ih : 0) * g->in_w;
                    int64_t start = first + seg->ow0;
                    for (int t0 = 0; t0 < seg->len; t0 += 8) {
                        int n = seg->len - t0 < 8 ? seg->len - t0 : 8;
                        __m256i store = lane_range_avx2(0, n);
                        __m256 v = _mm256_setzero_ps();
                        if (inside) {
                            __m256i valid = _mm256_and_si256(lane_range_avx2(-(start + t0), g->in_w - (start + t0)), store);
                            v = _mm256_maskload_ps(row_at_avx2(row, start + t0), valid);
                        }
                        _mm256_maskstore_ps(d + t0, store, v);
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
            __m256i store = lane_range_avx2(0, n);
            __m256 acc = _mm256_set1_ps(bias);
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {
                int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                if (ih < 0 || ih >= g->in_h)
                    continue;
                const float *row = x + ih * g->in_w;
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {
                    int64_t start = ow0 - g->pad_left + kw * g->dilation_w;
                    __m256i valid = _mm256_and_si256(lane_range_avx2(-start, g->in_w - start), store);
                    __m256 v = _mm256_maskload_ps(row_at_avx2(row, start), valid);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(w[kh * g->kernel_w + kw]), v, acc);
                }
            }
            _mm256_maskstore_ps(y + oh * g->out_w + ow0, store, acc);
        }
    }
}

/* Max pooling of one plane, 8 output columns at a time with one gather per window tap (a masked load
 * for stride 1) and lane-wise selects; the first in-range tap of a lane is always taken. */
void tb_max_pool2d_plane_avx2(const tb_window_geometry *g, const float *x, float *y, int64_t *index) {
    if (g->in_h * g->in_w >= INT32_MAX) {
        tb_max_pool2d_plane_f32(g, x, y, index);
        return;
    }
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 minus_infinity = _mm256_set1_ps(-INFINITY);
    for (int64_t oh = 0; oh < g->out_h; oh++) {
        for (int64_t ow0 = 0; ow0 < g->out_w; ow0 += 8) {
            int n = g->out_w - ow0 < 8 ? (int)(g->out_w - ow0) : 8;
            __m256i store = lane_range_avx2(0, n);
            __m256i column0 = _mm256_add_epi32(_mm256_set1_epi32((int)(ow0 * g->stride_w - g->pad_left)),
                                               _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int)g->stride_w)));
            __m256 best = minus_infinity;
            __m256i best_index = _mm256_setzero_si256();
            __m256i seen = _mm256_setzero_si256();
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {
                int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                if (ih < 0 || ih >= g->in_h)
                    continue;
                const float *row = x + ih * g->in_w;
                __m256i row_base = _mm256_set1_epi32((int)(ih * g->in_w));
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {
                    __m256i column = _mm256_add_epi32(column0, _mm256_set1_epi32((int)(kw * g->dilation_w)));
                    __m256i valid = _mm256_and_si256(
                        store, _mm256_and_si256(_mm256_cmpgt_epi32(column, _mm256_set1_epi32(-1)),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32((int)g->in_w), column)));
                    __m256 v;
                    if (g->stride_w == 1) {
                        int64_t first = ow0 - g->pad_left + kw * g->dilation_w;
                        v = _mm256_blendv_ps(minus_infinity, _mm256_maskload_ps(row_at_avx2(row, first), valid),
                                             _mm256_castsi256_ps(valid));
                    } else {
                        v = _mm256_mask_i32gather_ps(minus_infinity, row, column, _mm256_castsi256_ps(valid), 4);
                    }
                    __m256 better = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                    __m256 take = _mm256_and_ps(_mm256_castsi256_ps(valid),
                                                _mm256_or_ps(better, _mm256_castsi256_ps(_mm256_xor_si256(
                                                                         seen, _mm256_set1_epi32(-1)))));
                    best = _mm256_blendv_ps(best, v, take);
                    best_index = _mm256_castps_si256(_mm256_blendv_ps(
                        _mm256_castsi256_ps(best_index), _mm256_castsi256_ps(_mm256_add_epi32(row_base, column)), take));
                    seen = _mm256_or_si256(seen, valid);
                }
            }
            int64_t j = oh * g->out_w + ow0;
            _mm256_maskstore_ps(y + j, store, best);
            if (index) {
                __m256i low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(best_index));
                __m256i high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(best_index, 1));
                __m256i store_low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(store));
                __m256i store_high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(store, 1));
                _mm256_maskstore_epi64((long long *)(index + j), store_low, low);
                _mm256_maskstore_epi64((long long *)(index + j + 4), store_high, high);
            }
        }
    }
}
