/* Contracts of the convolution-support and pooling kernels (f32, single-threaded, never allocate;
 * the portable im2col/col2im and pooling planes also exist for f64 with the same contracts).
 * The ops layer (src/ops/ops_conv*.c, ops_pool.c) splits work over threads and handles dtypes.
 *
 * A "plane" is one H x W channel image stored row-major and contiguous. Output positions of a
 * convolution or pooling window are numbered j = oh * out_w + ow. */
#ifndef TORCHBURN_KERNELS_NN_KERNELS_H
#define TORCHBURN_KERNELS_NN_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/conv_winograd.h"
#include "kernels/gemm.h"
#include "torchburn/cpu.h"

/* Geometry of a 2-D window sweep (convolution or pooling) over `channels` contiguous planes.
 * Input row ih of output row oh and kernel row kh is oh * stride_h - pad_top + kh * dilation_h (same
 * for columns with pad_left); positions outside [0, in_h) x [0, in_w) read as zero. */
typedef struct tb_window_geometry {
    int64_t channels;
    int64_t in_h, in_w, out_h, out_w;
    int64_t kernel_h, kernel_w;
    int64_t stride_h, stride_w;
    int64_t pad_top, pad_left;
    int64_t dilation_h, dilation_w;
} tb_window_geometry;

/* Address of element `index` of a row or plane, index possibly negative or past the end: for SIMD
 * masked loads, whose masked-off lanes are never touched (integer arithmetic, so forming the address
 * is defined even when it lies outside the buffer). */
static inline const float *tb_float_at(const float *base, int64_t index) {
    return (const float *)((uintptr_t)base + (uintptr_t)(index * (int64_t)sizeof(float)));
}

/* im2col over output columns [col_begin, col_end):
 *   col[r * ld + (j - col_begin)] = x[c, ih, iw] (or 0), r = (c * kernel_h + kh) * kernel_w + kw,
 * for c < channels. x is `channels` planes; ld >= col_end - col_begin. */
void tb_im2col_f32(const tb_window_geometry *g, const float *x, int64_t col_begin, int64_t col_end, float *col,
                   int64_t ld);

/* The adjoint of im2col over output columns [col_begin, col_end) (col row stride ld): for every
 * in-range (ih, iw), x[c, ih, iw] += col[r * ld + (j - col_begin)], for all `channels` planes. x must
 * be initialised (usually zeros). */
void tb_col2im_f32(const tb_window_geometry *g, const float *col, int64_t col_begin, int64_t col_end, int64_t ld,
                   float *x);
void tb_im2col_f64(const tb_window_geometry *g, const double *x, int64_t col_begin, int64_t col_end, double *col,
                   int64_t ld);
void tb_col2im_f64(const tb_window_geometry *g, const double *col, int64_t col_begin, int64_t col_end, int64_t ld,
                   double *x);

/* One output row's run of the columns [j0, j0 + cols) of a panel: output row oh, columns
 * [ow0, ow0 + len), stored at panel column `dst`. */
typedef struct tb_panel_segment {
    int64_t oh, ow0;
    int len, dst;
} tb_panel_segment;

/* Splits columns [j0, j0 + cols) into per-output-row segments (at most cols of them). Returns the count. */
static inline int tb_panel_segments(const tb_window_geometry *g, int64_t j0, int cols, tb_panel_segment *segments) {
    int count = 0;
    for (int t = 0; t < cols;) {
        int64_t j = j0 + t;
        int64_t oh = j / g->out_w, ow0 = j % g->out_w;
        int len = (int)(g->out_w - ow0 < cols - t ? g->out_w - ow0 : cols - t);
        segments[count++] = (tb_panel_segment){.oh = oh, .ow0 = ow0, .len = len, .dst = t};
        t += len;
    }
    return count;
}

/* How many channels ahead the SIMD panel im2cols prefetch. */
enum { TB_IM2COL_PREFETCH_CHANNELS = 2 };

/* Prefetches the input rows a panel reads from the plane at `ahead` (a later channel): for each (kh,
 * segment) with an input row (row_offset >= 0), the columns from the first tap's start to the last
 * tap's end. The planes are too far apart for the hardware prefetcher once there are many channels
 * (Zen 3, 64 channels of 56x56 at stride 2: 24% faster). Tables as the SIMD im2cols build them:
 * row_offset[kh * count + s], start[kw * count + s]. */
static inline void tb_im2col_prefetch_rows(const tb_window_geometry *g, const float *ahead,
                                           const tb_panel_segment *segments, int count,
                                           const int64_t *row_offset, const int64_t *start) {
    for (int64_t kh = 0; kh < g->kernel_h; kh++)
        for (int s = 0; s < count; s++) {
            int64_t r = row_offset[kh * count + s];
            if (r < 0)
                continue;
            const char *from = (const char *)tb_float_at(ahead + r, start[s]);
            const char *to = (const char *)tb_float_at(ahead + r, start[(g->kernel_w - 1) * count + s] +
                                                                      segments[s].len * g->stride_w);
            for (const char *line = from; line <= to; line += 64)
                __builtin_prefetch(line, 0, 3);
        }
}

/* im2col of output columns [j0, j0 + cols) into one k-major GEMM B panel:
 *   panel[r * nr + (j - j0)] = x[c, ih, iw] (or 0), r = (c * kernel_h + kh) * kernel_w + kw,
 * with panel columns [cols, nr) zeroed. cols <= nr <= 64. The buffer must have TB_PANEL_SLACK floats
 * beyond the K * nr panel: SIMD versions write whole vectors and may spill into them. */
enum { TB_PANEL_SLACK = 64 };
typedef void (*tb_im2col_panel_fn)(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr,
                                   float *panel);

/* Direct convolution of one input plane with one kernel_h x kernel_w filter (channels ignored):
 * y[oh, ow] = bias + sum_{kh, kw} w[kh * kernel_w + kw] * x[ih, iw] (zero outside), taps added in
 * (kh, kw) order. Used for groups with a single input channel (depthwise), where im2col + GEMM would
 * be a matrix-vector product. */
void tb_conv2d_plane_f32(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y);
typedef void (*tb_conv2d_plane_fn)(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y);

/* Max pooling of one plane (channels ignored): y[j] = the max over the window, NaN winning (the last
 * NaN seen, scanning rows then columns, as PyTorch), index[j] = ih * in_w + iw of the winner (the
 * first in-range element of the window when all are -inf). index may be NULL. */
void tb_max_pool2d_plane_f32(const tb_window_geometry *g, const float *x, float *y, int64_t *index);
typedef void (*tb_max_pool2d_plane_fn)(const tb_window_geometry *g, const float *x, float *y, int64_t *index);
void tb_max_pool2d_plane_avx2(const tb_window_geometry *g, const float *x, float *y, int64_t *index);
void tb_max_pool2d_plane_avx512(const tb_window_geometry *g, const float *x, float *y, int64_t *index);

/* Average pooling of one plane (dilation must be 1). The window [oh*s - pad, oh*s - pad + kernel) is
 * cut at in + pad for the count_include_pad divisor and at the input edges for the sum; the divisor is
 * divisor_override when > 0, else the cut window area (count_include_pad) or the in-range area. */
void tb_avg_pool2d_plane_f32(const tb_window_geometry *g, bool count_include_pad, int64_t divisor_override,
                             const float *x, float *y);
/* Its adjoint: dx (zero-initialised plane) += the share of each dy[j] in its window. */
void tb_avg_pool2d_backward_plane_f32(const tb_window_geometry *g, bool count_include_pad, int64_t divisor_override,
                                      const float *dy, float *dx);

/* Adaptive pooling of one plane: window (oh, ow) spans rows [floor(oh * in_h / out_h),
 * ceil((oh + 1) * in_h / out_h)) and likewise for columns. Max: NaN wins as above; index may be NULL. */
void tb_adaptive_avg_pool2d_plane_f32(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const float *x,
                                      float *y);
void tb_adaptive_avg_pool2d_backward_plane_f32(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                               const float *dy, float *dx);
void tb_adaptive_max_pool2d_plane_f32(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const float *x,
                                      float *y, int64_t *index);

/* The same plane kernels in double (portable only). */
void tb_max_pool2d_plane_f64(const tb_window_geometry *g, const double *x, double *y, int64_t *index);
void tb_avg_pool2d_plane_f64(const tb_window_geometry *g, bool count_include_pad, int64_t divisor_override,
                             const double *x, double *y);
void tb_avg_pool2d_backward_plane_f64(const tb_window_geometry *g, bool count_include_pad, int64_t divisor_override,
                                      const double *dy, double *dx);
void tb_adaptive_avg_pool2d_plane_f64(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const double *x,
                                      double *y);
void tb_adaptive_avg_pool2d_backward_plane_f64(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                               const double *dy, double *dx);
void tb_adaptive_max_pool2d_plane_f64(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w, const double *x,
                                      double *y, int64_t *index);

/* Direct (implicit-GEMM) convolution of one image and group for stride_w <= the ISA's
 * conv_direct_max_stride, reading the input planes in place instead of building im2col panels.
 * Output positions are grouped into "slots":
 * runs of at most `lanes` (the ISA's vector width) columns of one output row, slot s covering row
 * s / ceil(out_w / lanes) and columns from (s % ceil(out_w / lanes)) * lanes. The kernel computes the
 * slots [slot_begin, slot_end) of all m output channels:
 *   y[i, j] = activation(bias[i] + sum_p w[i, p] * im2col(x)[p, j]) + residual[i, j]
 * with p ordered like the weight [m, channels, kernel_h, kernel_w]. Weights come packed by
 * tb_conv_direct_pack into panels of at most the ISA's conv_direct_rows rows (tb_conv_direct_panel_rows).
 * Needs kernel_h * kernel_w <= TB_CONV_DIRECT_MAX_TAPS. */
enum { TB_CONV_DIRECT_MAX_TAPS = 64 };

typedef struct tb_conv_direct_args {
    const tb_window_geometry *g; /* channels = input channels of the group */
    const float *x;              /* the group's input planes */
    const float *packed;         /* tb_conv_direct_pack of the group's weights */
    int64_t m;                   /* output channels of the group */
    const float *bias;           /* m biases or NULL */
    tb_activation activation;
    const float *residual; /* laid out like y, or NULL */
    float *y;              /* output channel 0 of the group */
    int64_t ldy;           /* between output channels (out_h * out_w) */
} tb_conv_direct_args;

typedef void (*tb_conv_direct_fn)(const tb_conv_direct_args *args, int64_t slot_begin, int64_t slot_end);
void tb_conv_direct_avx2(const tb_conv_direct_args *args, int64_t slot_begin, int64_t slot_end);
void tb_conv_direct_avx512(const tb_conv_direct_args *args, int64_t slot_begin, int64_t slot_end);

/* Weight panels: m rows split into ceil(m / max_rows) panels of near-equal height (16 rows with
 * max_rows 14 run as 8 + 8, not 14 + 2: a short panel leaves the FMA units waiting on latency). */
static inline int tb_conv_direct_panels(int64_t m, int max_rows) { return (int)((m + max_rows - 1) / max_rows); }

/* Height of panel p and its first row. */
static inline int tb_conv_direct_panel_rows(int64_t m, int max_rows, int p, int64_t *row0) {
    int64_t panels = tb_conv_direct_panels(m, max_rows), base = m / panels, extra = m % panels;
    *row0 = p * base + (p < extra ? p : extra);
    return (int)(base + (p < extra ? 1 : 0));
}

/* Packs w[m, k] (row-major) into m * k floats: panel p (rows [row0, row0 + rows)) at row0 * k,
 * k-major within the panel: packed[row0 * k + q * rows + i] = w[row0 + i, q]. */
void tb_conv_direct_pack(int64_t m, int64_t k, int max_rows, const float *w, const float *row_scale, float *packed);

/* Per-ISA versions of the hot helpers: the SIMD im2col and plane convolution handle stride-1 rows and
 * fall back to the reference for other strides; the SIMD max pooling handles any window up to 32
 * columns wide (stride 1 by loads, stride 2 by paired loads and a lane shuffle, others by gathers). */
typedef struct tb_nn_kernels {
    const char *isa_name;
    tb_im2col_panel_fn im2col_panel;
    tb_conv2d_plane_fn conv2d_plane;
    tb_max_pool2d_plane_fn max_pool2d_plane;
    tb_conv_direct_fn conv_direct; /* NULL: this ISA convolves through im2col panels */
    int conv_direct_lanes;         /* its slot width */
    int conv_direct_rows;          /* its weight panel height limit */
    int conv_direct_max_stride;    /* the largest stride_w it handles */
    tb_winograd_input_fn winograd_input; /* the F(2x2, 3x3) transforms (kernels/conv_winograd.h) */
    tb_winograd_output_fn winograd_output;
    tb_winograd_filters_fn winograd_filters;
} tb_nn_kernels;

/* Which convolutions take the direct path on this CPU (ops_conv.c; cpu_info names it): stride_w up to
 * max_stride and GEMM depth (in_per_group * kh * kw) up to max_k (0: any). A measured per-vendor rule. */
typedef struct tb_conv_direct_choice {
    int max_stride;
    int64_t max_k;
} tb_conv_direct_choice;

tb_conv_direct_choice tb_conv_direct_choice_for(const tb_nn_kernels *kernels);

void tb_im2col_panel_ref(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel);
void tb_im2col_panel_avx2(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel);
void tb_im2col_panel_avx512(const tb_window_geometry *g, const float *x, int64_t j0, int cols, int nr, float *panel);
void tb_conv2d_plane_avx2(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y);
void tb_conv2d_plane_avx512(const tb_window_geometry *g, const float *x, const float *w, float bias, float *y);

/* The table for an ISA (the reference one when it is not compiled in or not supported). */
const tb_nn_kernels *tb_nn_kernels_for(tb_isa isa);

#endif
