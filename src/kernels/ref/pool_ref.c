/* Portable pooling kernels over one plane: max (with indices), average and adaptive average/max, and
 * the adjoints of the average ones, for float and double from one body. Contracts in
 * kernels/nn_kernels.h; the window arithmetic follows PyTorch's CPU kernels so values, divisors and
 * tie-breaking agree. */
#include <math.h>

#include "kernels/nn_kernels.h"

/* The clipped window of output (oh, ow) and its divisor; false when the window holds no input. */
static bool avg_window(const tb_window_geometry *g, bool count_include_pad, int64_t divisor_override, int64_t oh,
                       int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1, int64_t *divisor) {
    int64_t hs = oh * g->stride_h - g->pad_top, ws = ow * g->stride_w - g->pad_left;
    int64_t he = hs + g->kernel_h, we = ws + g->kernel_w;
    if (he > g->in_h + g->pad_top)
        he = g->in_h + g->pad_top;
    if (we > g->in_w + g->pad_left)
        we = g->in_w + g->pad_left;
    int64_t padded_area = (he - hs) * (we - ws);
    if (hs < 0)
        hs = 0;
    if (ws < 0)
        ws = 0;
    if (he > g->in_h)
        he = g->in_h;
    if (we > g->in_w)
        we = g->in_w;
    *h0 = hs, *h1 = he, *w0 = ws, *w1 = we;
    if (hs >= he || ws >= we)
        return false;
    if (divisor_override > 0)
        *divisor = divisor_override;
    else
        *divisor = count_include_pad ? padded_area : (he - hs) * (we - ws);
    return true;
}

static int64_t window_start(int64_t i, int64_t out, int64_t in) { return i * in / out; }
static int64_t window_end(int64_t i, int64_t out, int64_t in) { return ((i + 1) * in + out - 1) / out; }

/* Every plane kernel for element type T, named tb_*_plane_SUFFIX. */
#define POOL_PLANE_LOOPS(T, SUFFIX)                                                                              \
    void tb_max_pool2d_plane_##SUFFIX(const tb_window_geometry *g, const T *x, T *y, int64_t *index) {           \
        for (int64_t oh = 0; oh < g->out_h; oh++) {                                                              \
            int64_t h_start = oh * g->stride_h - g->pad_top;                                                     \
            int64_t h_end = h_start + (g->kernel_h - 1) * g->dilation_h + 1;                                     \
            if (h_end > g->in_h)                                                                                 \
                h_end = g->in_h;                                                                                 \
            while (h_start < 0)                                                                                  \
                h_start += g->dilation_h;                                                                        \
            for (int64_t ow = 0; ow < g->out_w; ow++) {                                                          \
                int64_t w_start = ow * g->stride_w - g->pad_left;                                                \
                int64_t w_end = w_start + (g->kernel_w - 1) * g->dilation_w + 1;                                 \
                if (w_end > g->in_w)                                                                             \
                    w_end = g->in_w;                                                                             \
                while (w_start < 0)                                                                              \
                    w_start += g->dilation_w;                                                                    \
                int64_t best_index = h_start * g->in_w + w_start;                                                \
                T best = -INFINITY;                                                                              \
                for (int64_t ih = h_start; ih < h_end; ih += g->dilation_h) {                                    \
                    const T *row = x + ih * g->in_w;                                                             \
                    for (int64_t iw = w_start; iw < w_end; iw += g->dilation_w) {                                \
                        /* selects rather than branches: on real data the comparison is unpredictable */         \
                        T value = row[iw];                                                                       \
                        bool take = value > best || isnan(value);                                                \
                        best = take ? value : best;                                                              \
                        best_index = take ? ih * g->in_w + iw : best_index;                                      \
                    }                                                                                            \
                }                                                                                                \
                int64_t j = oh * g->out_w + ow;                                                                  \
                y[j] = best;                                                                                     \
                if (index)                                                                                       \
                    index[j] = best_index;                                                                       \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void tb_avg_pool2d_plane_##SUFFIX(const tb_window_geometry *g, bool count_include_pad,                       \
                                      int64_t divisor_override, const T *x, T *y) {                              \
        for (int64_t oh = 0; oh < g->out_h; oh++) {                                                              \
            for (int64_t ow = 0; ow < g->out_w; ow++) {                                                          \
                int64_t h0, h1, w0, w1, divisor;                                                                 \
                T *out = y + oh * g->out_w + ow;                                                                 \
                if (!avg_window(g, count_include_pad, divisor_override, oh, ow, &h0, &h1, &w0, &w1, &divisor)) { \
                    *out = 0;                                                                                    \
                    continue;                                                                                    \
                }                                                                                                \
                T sum = 0;                                                                                       \
                for (int64_t ih = h0; ih < h1; ih++)                                                             \
                    for (int64_t iw = w0; iw < w1; iw++)                                                         \
                        sum += x[ih * g->in_w + iw];                                                             \
                *out = sum / (T)divisor;                                                                         \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void tb_avg_pool2d_backward_plane_##SUFFIX(const tb_window_geometry *g, bool count_include_pad,              \
                                               int64_t divisor_override, const T *dy, T *dx) {                   \
        for (int64_t oh = 0; oh < g->out_h; oh++) {                                                              \
            for (int64_t ow = 0; ow < g->out_w; ow++) {                                                          \
                int64_t h0, h1, w0, w1, divisor;                                                                 \
                if (!avg_window(g, count_include_pad, divisor_override, oh, ow, &h0, &h1, &w0, &w1, &divisor))   \
                    continue;                                                                                    \
                T share = dy[oh * g->out_w + ow] / (T)divisor;                                                   \
                for (int64_t ih = h0; ih < h1; ih++)                                                             \
                    for (int64_t iw = w0; iw < w1; iw++)                                                         \
                        dx[ih * g->in_w + iw] += share;                                                          \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void tb_adaptive_avg_pool2d_plane_##SUFFIX(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,         \
                                               const T *x, T *y) {                                               \
        for (int64_t oh = 0; oh < out_h; oh++) {                                                                 \
            int64_t h0 = window_start(oh, out_h, in_h), h1 = window_end(oh, out_h, in_h);                        \
            for (int64_t ow = 0; ow < out_w; ow++) {                                                             \
                int64_t w0 = window_start(ow, out_w, in_w), w1 = window_end(ow, out_w, in_w);                    \
                T sum = 0;                                                                                       \
                for (int64_t ih = h0; ih < h1; ih++)                                                             \
                    for (int64_t iw = w0; iw < w1; iw++)                                                         \
                        sum += x[ih * in_w + iw];                                                                \
                y[oh * out_w + ow] = sum / (T)((h1 - h0) * (w1 - w0));                                           \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void tb_adaptive_avg_pool2d_backward_plane_##SUFFIX(int64_t in_h, int64_t in_w, int64_t out_h,               \
                                                        int64_t out_w, const T *dy, T *dx) {                     \
        for (int64_t oh = 0; oh < out_h; oh++) {                                                                 \
            int64_t h0 = window_start(oh, out_h, in_h), h1 = window_end(oh, out_h, in_h);                        \
            for (int64_t ow = 0; ow < out_w; ow++) {                                                             \
                int64_t w0 = window_start(ow, out_w, in_w), w1 = window_end(ow, out_w, in_w);                    \
                T share = dy[oh * out_w + ow] / (T)((h1 - h0) * (w1 - w0));                                      \
                for (int64_t ih = h0; ih < h1; ih++)                                                             \
                    for (int64_t iw = w0; iw < w1; iw++)                                                         \
                        dx[ih * in_w + iw] += share;                                                             \
            }                                                                                                    \
        }                                                                                                        \
    }                                                                                                            \
                                                                                                                 \
    void tb_adaptive_max_pool2d_plane_##SUFFIX(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,         \
                                               const T *x, T *y, int64_t *index) {                               \
        for (int64_t oh = 0; oh < out_h; oh++) {                                                                 \
            int64_t h0 = window_start(oh, out_h, in_h), h1 = window_end(oh, out_h, in_h);                        \
            for (int64_t ow = 0; ow < out_w; ow++) {                                                             \
                int64_t w0 = window_start(ow, out_w, in_w), w1 = window_end(ow, out_w, in_w);                    \
                int64_t best_index = h0 * in_w + w0;                                                             \
                T best = -INFINITY;                                                                              \
                for (int64_t ih = h0; ih < h1; ih++) {                                                           \
                    for (int64_t iw = w0; iw < w1; iw++) {                                                       \
                        T value = x[ih * in_w + iw];                                                             \
                        if (value > best || isnan(value)) {                                                      \
                            best = value;                                                                        \
                            best_index = ih * in_w + iw;                                                         \
                        }                                                                                        \
                    }                                                                                            \
                }                                                                                                \
                y[oh * out_w + ow] = best;                                                                       \
                if (index)                                                                                       \
                    index[oh * out_w + ow] = best_index;                                                         \
            }                                                                                                    \
        }                                                                                                        \
    }

POOL_PLANE_LOOPS(float, f32)
POOL_PLANE_LOOPS(double, f64)
