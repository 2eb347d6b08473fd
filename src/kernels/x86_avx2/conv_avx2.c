/* AVX2 convolution helpers (contracts in kernels/nn_kernels.h): im2col into a GEMM B panel and the
 * direct single-channel plane convolution, for stride-1 rows, with window borders as lane masks
 * (vmaskmov neither reads nor faults masked-off lanes). Other strides use the reference. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kernels/nn_kernels.h"
#include "kernels/x86_avx2/lanes_avx2.h"

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
                        __m256i store = tb_lanes_avx2(0, n);
                        __m256 v = _mm256_setzero_ps();
                        if (inside) {
                            __m256i in_row = tb_lanes_avx2(-(start + t0), g->in_w - (start + t0));
                            __m256i valid = _mm256_and_si256(in_row, store);
                            v = _mm256_maskload_ps(tb_float_at(row, start + t0), valid);
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
            _mm256_maskstore_ps(y + oh * g->out_w + ow0, store, acc);
        }
    }
}
