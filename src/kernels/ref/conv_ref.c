/* Portable convolution helpers: im2col and its adjoint col2im (float and double), and a direct single-channel plane
 * convolution (depthwise). Contracts in kernels/nn_kernels.h. */
#include <string.h>

#include "kernels/nn_kernels.h"

/* Output columns [*lo, *hi) of a row for which iw = ow * stride - pad + offset lies in [0, in_w). */
static void valid_range(int64_t out_w, int64_t in_w, int64_t stride, int64_t first, int64_t *lo, int64_t *hi) {
    /* first = -pad + offset = iw at ow = 0; need 0 <= first + ow * stride < in_w */
    int64_t a = first >= 0 ? 0 : (-first + stride - 1) / stride;
    int64_t b = in_w - first <= 0 ? 0 : (in_w - first + stride - 1) / stride;
    if (b > out_w)
        b = out_w;
    if (a > b)
        a = b;
    *lo = a;
    *hi = b;
}

/* im2col, its adjoint and their row gather, one body for float and double (T, SUFFIX):
 *   gather_segment_SUFFIX copies output columns [ow0, ow1) of one (c, kh, kw, oh) row segment into dst. */
#define COLUMN_LOOPS(T, SUFFIX)                                                                                 \
    static void gather_segment_##SUFFIX(const tb_window_geometry *g, const T *x_row, int64_t first, int64_t ow0,  \
                                        int64_t ow1, T *dst) {                                                    \
        int64_t lo, hi;                                                                                           \
        valid_range(g->out_w, g->in_w, g->stride_w, first, &lo, &hi);                                             \
        if (lo < ow0)                                                                                             \
            lo = ow0;                                                                                             \
        if (hi > ow1)                                                                                             \
            hi = ow1;                                                                                             \
        if (lo > hi)                                                                                              \
            lo = hi = ow1;                                                                                        \
        int64_t t = 0;                                                                                            \
        for (int64_t ow = ow0; ow < lo; ow++)                                                                     \
            dst[t++] = 0;                                                                                         \
        if (g->stride_w == 1) {                                                                                   \
            if (hi > lo)                                                                                          \
                memcpy(dst + t, x_row + first + lo, (size_t)(hi - lo) * sizeof(T));                              \
            t += hi - lo;                                                                                         \
        } else {                                                                                                  \
            const T *src = x_row + first + lo * g->stride_w;                                                      \
            for (int64_t ow = lo; ow < hi; ow++, src += g->stride_w)                                              \
                dst[t++] = *src;                                                                                  \
        }                                                                                                         \
        for (int64_t ow = hi > ow0 ? hi : ow0; ow < ow1; ow++)                                                    \
            dst[t++] = 0;                                                                                         \
    }                                                                                                             \
                                                                                                                  \
    void tb_im2col_##SUFFIX(const tb_window_geometry *g, const T *x, int64_t col_begin, int64_t col_end, T *col,  \
                            int64_t ld) {                                                                         \
        int64_t plane = g->in_h * g->in_w;                                                                        \
        for (int64_t c = 0; c < g->channels; c++) {                                                               \
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {                                                        \
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {                                                    \
                    int64_t r = (c * g->kernel_h + kh) * g->kernel_w + kw;                                        \
                    T *dst = col + r * ld;                                                                        \
                    int64_t first = kw * g->dilation_w - g->pad_left;                                             \
                    int64_t j = col_begin;                                                                        \
                    while (j < col_end) {                                                                         \
                        int64_t oh = j / g->out_w, ow0 = j % g->out_w;                                            \
                        int64_t ow1 = g->out_w;                                                                   \
                        if (ow1 - ow0 > col_end - j)                                                              \
                            ow1 = ow0 + (col_end - j);                                                            \
                        int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;                          \
                        if (ih < 0 || ih >= g->in_h)                                                              \
                            memset(dst, 0, (size_t)(ow1 - ow0) * sizeof(T));                                      \
                        else                                                                                      \
                            gather_segment_##SUFFIX(g, x + c * plane + ih * g->in_w, first, ow0, ow1, dst);       \
                        dst += ow1 - ow0;                                                                         \
                        j += ow1 - ow0;                                                                           \
                    }                                                                                             \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }                                                                                                             \
                                                                                                                  \
    void tb_col2im_##SUFFIX(const tb_window_geometry *g, const T *col, int64_t col_begin, int64_t col_end,        \
                            int64_t ld, T *x) {                                                                   \
        int64_t plane = g->in_h * g->in_w;                                                                        \
        for (int64_t c = 0; c < g->channels; c++) {                                                               \
            T *x_plane = x + c * plane;                                                                           \
            for (int64_t kh = 0; kh < g->kernel_h; kh++) {                                                        \
                for (int64_t kw = 0; kw < g->kernel_w; kw++) {                                                    \
                    int64_t r = (c * g->kernel_h + kh) * g->kernel_w + kw;                                        \
                    const T *src = col + r * ld;                                                                  \
                    int64_t first = kw * g->dilation_w - g->pad_left;                                             \
                    int64_t lo, hi;                                                                               \
                    valid_range(g->out_w, g->in_w, g->stride_w, first, &lo, &hi);                                 \
                    int64_t j = col_begin;                                                                        \
                    while (j < col_end) {                                                                         \
                        int64_t oh = j / g->out_w, ow0 = j % g->out_w;                                            \
                        int64_t ow1 = g->out_w;                                                                   \
                        if (ow1 - ow0 > col_end - j)                                                              \
                            ow1 = ow0 + (col_end - j);                                                            \
                        int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;                          \
                        if (ih >= 0 && ih < g->in_h) {                                                            \
                            T *d = x_plane + ih * g->in_w;                                                        \
                            int64_t a = lo > ow0 ? lo : ow0, b = hi < ow1 ? hi : ow1;                             \
                            if (g->stride_w == 1) {                                                               \
                                for (int64_t ow = a; ow < b; ow++)                                                \
                                    d[first + ow] += src[ow - ow0];                                               \
                            } else {                                                                              \
                                for (int64_t ow = a; ow < b; ow++)                                                \
                                    d[first + ow * g->stride_w] += src[ow - ow0];                                 \
                            }                                                                                     \
                        }                                                                                         \
                        src += ow1 - ow0;                                                                         \
                        j += ow1 - ow0;                                                                           \
                    }                                                                                             \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

COLUMN_LOOPS(float, f32)
COLUMN_LOOPS(double, f64)

void tb_conv2d_plane_f32(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y) {
    int64_t out_plane = g->out_h * g->out_w;
    for (int64_t j = 0; j < out_plane; j++)
        y[j] = bias;
    for (int64_t kh = 0; kh < g->kernel_h; kh++) {
        for (int64_t kw = 0; kw < g->kernel_w; kw++) {
            float weight = w[kh * g->kernel_w + kw];
            int64_t first = kw * g->dilation_w - g->pad_left;
            int64_t lo, hi;
            valid_range(g->out_w, g->in_w, g->stride_w, first, &lo, &hi);
            for (int64_t oh = 0; oh < g->out_h; oh++) {
                int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                if (ih < 0 || ih >= g->in_h)
                    continue;
                const float *src = x + ih * g->in_w;
                float *dst = y + oh * g->out_w;
                if (g->stride_w == 1) {
                    for (int64_t ow = lo; ow < hi; ow++)
                        dst[ow] += weight * src[first + ow];
                } else {
                    for (int64_t ow = lo; ow < hi; ow++)
                        dst[ow] += weight * src[first + ow * g->stride_w];
                }
            }
        }
    }
}

void tb_im2col_panel_ref(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel) {
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
                    if (ih < 0 || ih >= g->in_h)
                        memset(dst + seg->dst, 0, (size_t)seg->len * sizeof(float));
                    else
                        gather_segment_f32(g, x + c * plane + ih * g->in_w, first, seg->ow0, seg->ow0 + seg->len,
                                       dst + seg->dst);
                }
                for (int t = cols; t < nr; t++)
                    dst[t] = 0.0f;
            }
        }
    }
}
