/* The F(2x2, 3x3) input and output transforms (contracts in kernels/conv_winograd.h) as plain C
 * loops over runs of tiles in one tile row, written so that every inner loop is contiguous: the
 * including file's flags vectorize them at its ISA's width. All static.
 *
 * Input: B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. For a run of tiles tx0 .. tx0 +
 * len - 1 of tile row ty, the four input rows are read as even and odd columns (tile k's four columns
 * are even[k], odd[k], even[k + 1], odd[k + 1]) and combined into the rows of B^T d in the same pass;
 * then the column combination, a contiguous loop over k.
 * Output: A^T M A with A^T = [1 1 1 0; 0 1 -1 -1], summed in the order written below. */
#ifndef TB_SIMD_WINOGRAD_BODY_H
#define TB_SIMD_WINOGRAD_BODY_H

#include <string.h>

#include "kernels/conv_winograd.h"

/* U = G g G^T (G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]) of `count` <= WINOGRAD_FILTERS 3x3
 * filters g[c * 9 + a] (each times *scale when scale is non-NULL: one f32 product, as folding first),
 * into u[xi * u_stride + c]. Summed in double, which holds these sums of weights times 1, 1/2, 1/4
 * exactly unless the weights' exponents lie about 29 binades apart, then rounded once: the same bits
 * at every ISA. Loops over the filters, so they vectorize. */
enum { WINOGRAD_FILTERS = 64 };

static void winograd_filters(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride) {
    double w[9][WINOGRAD_FILTERS], t[4][3][WINOGRAD_FILTERS];
    for (int64_t c = 0; c < count; c++)
        for (int a = 0; a < 9; a++)
            w[a][c] = scale ? (double)(g[c * 9 + a] * *scale) : (double)g[c * 9 + a];
    for (int kw = 0; kw < 3; kw++) /* G g */
        for (int64_t c = 0; c < count; c++) {
            const double g0 = w[kw][c], g1 = w[3 + kw][c], g2 = w[6 + kw][c];
            t[0][kw][c] = g0;
            t[1][kw][c] = 0.5 * (g0 + g1 + g2);
            t[2][kw][c] = 0.5 * (g0 - g1 + g2);
            t[3][kw][c] = g2;
        }
    for (int i = 0; i < 4; i++) { /* (G g) G^T */
        float *restrict u0 = u + (4 * i) * u_stride, *restrict u1 = u + (4 * i + 1) * u_stride;
        float *restrict u2 = u + (4 * i + 2) * u_stride, *restrict u3 = u + (4 * i + 3) * u_stride;
        for (int64_t c = 0; c < count; c++) {
            const double a = t[i][0][c], b = t[i][1][c], d = t[i][2][c];
            u0[c] = (float)a;
            u1[c] = (float)(0.5 * (a + b + d));
            u2[c] = (float)(0.5 * (a - b + d));
            u3[c] = (float)d;
        }
    }
}

/* Rows of B^T d on the even and odd input columns, from four input rows (f0 .. f3, each read at 2k and
 * 2k + 1): rows d0 - d2, d1 + d2, d2 - d1, d1 - d3. */
static void winograd_rows_span(const float *restrict f0, const float *restrict f1, const float *restrict f2,
                               const float *restrict f3, float *restrict re0, float *restrict ro0,
                               float *restrict re1, float *restrict ro1, float *restrict re2, float *restrict ro2,
                               float *restrict re3, float *restrict ro3, int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; k++) {
        const float e0 = f0[2 * k], o0 = f0[2 * k + 1], e1 = f1[2 * k], o1 = f1[2 * k + 1];
        const float e2 = f2[2 * k], o2 = f2[2 * k + 1], e3 = f3[2 * k], o3 = f3[2 * k + 1];
        re0[k] = e0 - e2;
        ro0[k] = o0 - o2;
        re1[k] = e1 + e2;
        ro1[k] = o1 + o2;
        re2[k] = e2 - e1;
        ro2[k] = o2 - o1;
        re3[k] = e1 - e3;
        ro3[k] = o1 - o3;
    }
}

/* The row combinations for tiles [tx0, tx0 + len] of the tile row whose input rows start at iy0 (len + 1
 * entries: the last tile reads entry len), reading zero outside the plane. zeros: 2 (len + 1) zeros. */
static void winograd_rows(const tb_winograd_geometry *geo, const float *plane, int64_t iy0, int64_t tx0, int64_t len,
                          const float *zeros, float *re[4], float *ro[4]) {
    const int64_t count = len + 1, col0 = 2 * tx0 - geo->pad_left; /* input column of entry 0's even value */
    const float *row[4], *from[4];
    for (int r = 0; r < 4; r++) {
        const int64_t iy = iy0 + r;
        row[r] = iy >= 0 && iy < geo->in_h ? plane + iy * geo->in_w : NULL;
        from[r] = row[r] ? row[r] + col0 : zeros; /* read at 2k, 2k + 1 for k in [lo, hi) only */
    }
    /* k in [lo, hi): both columns inside the plane */
    int64_t lo = col0 >= 0 ? 0 : (-col0 + 1) / 2;
    const int64_t span = geo->in_w - 1 - col0; /* 2k + 1 <= span */
    int64_t hi = span >= 1 ? (span - 1) / 2 + 1 : 0;
    if (hi > count)
        hi = count;
    if (lo > hi)
        lo = hi;
    winograd_rows_span(from[0], from[1], from[2], from[3], re[0], ro[0], re[1], ro[1], re[2], ro[2], re[3], ro[3], lo,
                       hi);
    /* the edge entries (at most one or two at each end), reading zero outside the plane */
    for (int64_t k = lo > 0 ? 0 : hi; k < count; k = k + 1 == lo ? hi : k + 1) {
        float e[4], o[4];
        for (int r = 0; r < 4; r++) {
            const int64_t c = col0 + 2 * k;
            e[r] = row[r] && c >= 0 && c < geo->in_w ? row[r][c] : 0.0f;
            o[r] = row[r] && c + 1 >= 0 && c + 1 < geo->in_w ? row[r][c + 1] : 0.0f;
        }
        re[0][k] = e[0] - e[2];
        ro[0][k] = o[0] - o[2];
        re[1][k] = e[1] + e[2];
        ro[1][k] = o[1] + o[2];
        re[2][k] = e[2] - e[1];
        ro[2][k] = o[2] - o[1];
        re[3][k] = e[1] - e[3];
        ro[3][k] = o[1] - o[3];
    }
}

/* How many channels ahead the input transform prefetches its rows: the planes of many channels are too
 * far apart for the hardware prefetcher (as for the panel im2col, kernels/nn_kernels.h). */
enum { WINOGRAD_PREFETCH_CHANNELS = 4 };

static void winograd_prefetch_rows(const tb_winograd_geometry *geo, const float *plane, int64_t iy0, int64_t tx0,
                                   int64_t count) {
    int64_t col0 = 2 * tx0 - geo->pad_left, col1 = col0 + 2 * count;
    col0 = col0 < 0 ? 0 : col0;
    col1 = col1 > geo->in_w ? geo->in_w : col1;
    for (int64_t iy = iy0 < 0 ? 0 : iy0; iy < iy0 + 4 && iy < geo->in_h && col1 > col0; iy++)
        for (const char *line = (const char *)(plane + iy * geo->in_w + col0);
             line < (const char *)(plane + iy * geo->in_w + col1); line += 64)
            __builtin_prefetch(line, 0, 3);
}

/* (.) B over the columns of one row of B^T d: tile k's columns are even[k], odd[k], even[k + 1], odd[k + 1]. */
static void winograd_columns(const float *restrict even, const float *restrict odd, float *restrict v0,
                             float *restrict v1, float *restrict v2, float *restrict v3, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        v0[k] = even[k] - even[k + 1];
        v1[k] = odd[k] + even[k + 1];
        v2[k] = even[k + 1] - odd[k];
        v3[k] = odd[k] - odd[k + 1];
    }
}

static void winograd_input(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1, int64_t channels,
                           int nr, float *v, int64_t v_xi_stride, float *work) {
    const int64_t per_image = geo->tiles_h * geo->tiles_w, plane = geo->in_h * geo->in_w;
    const int64_t stride = geo->tiles_w + 2; /* floats per work array */
    float *re[4], *ro[4];
    for (int r = 0; r < 4; r++) {
        re[r] = work + (2 * r) * stride;
        ro[r] = work + (2 * r + 1) * stride;
    }
    float *zeros = work + 8 * stride; /* 2 stride */
    memset(zeros, 0, (size_t)(2 * stride) * sizeof(float));
    const int64_t panel_floats = channels * nr;
    /* channel by channel, and within a channel the block's tile rows in order: consecutive tile rows
     * read overlapping input rows of one plane (L1 hits, a stream the hardware prefetcher follows) */
    for (int64_t c = 0; c < channels; c++) {
        for (int64_t t = t0; t < t1;) {
            const int64_t n = t / per_image, rest = t % per_image, ty = rest / geo->tiles_w, tx0 = rest % geo->tiles_w;
            const int64_t len = geo->tiles_w - tx0 < t1 - t ? geo->tiles_w - tx0 : t1 - t;
            const int64_t iy0 = 2 * ty - geo->pad_top;
            const float *p = x + n * geo->x_image_stride + c * plane;
            if (c + WINOGRAD_PREFETCH_CHANNELS < channels)
                winograd_prefetch_rows(geo, p + WINOGRAD_PREFETCH_CHANNELS * plane, iy0, tx0, len + 1);
            winograd_rows(geo, p, iy0, tx0, len, zeros, re, ro);
            /* then (.) B, into the panels of positions 4i .. 4i + 3, a run not crossing a panel at a time */
            for (int64_t k0 = 0; k0 < len;) {
                const int64_t local = t - t0 + k0, q = local / nr, lane = local % nr;
                const int64_t run = nr - lane < len - k0 ? nr - lane : len - k0;
                float *at = v + q * panel_floats + c * nr + lane;
                for (int i = 0; i < 4; i++)
                    winograd_columns(re[i] + k0, ro[i] + k0, at + (4 * i) * v_xi_stride, at + (4 * i + 1) * v_xi_stride,
                                     at + (4 * i + 2) * v_xi_stride, at + (4 * i + 3) * v_xi_stride, run);
                k0 += run;
            }
            t += len;
        }
    }
    /* zero lanes of the last panel past t1 (the micro-kernel reads whole panels) */
    const int64_t used = t1 - t0, padded = (used + nr - 1) / nr * nr;
    if (padded > used) {
        const int64_t q = used / nr, lane0 = used % nr;
        for (int xi = 0; xi < TB_WINOGRAD_POSITIONS; xi++)
            for (int64_t c = 0; c < channels; c++)
                memset(v + xi * v_xi_stride + q * panel_floats + c * nr + lane0, 0,
                       (size_t)(nr - lane0) * sizeof(float));
    }
}

/* out = (a + b) + c and out = (a - b) - c, then + shift (the bias) only where `shifted`: the first
 * stage of A^T M A adds nothing (an added 0 would cost an add per element and turn -0 into +0). Inlined
 * with `shifted` constant, so each use compiles to its own loop. */
static inline __attribute__((always_inline)) void winograd_sum3(const float *restrict a, const float *restrict b,
                                                                const float *restrict c, float *restrict out,
                                                                int64_t n, bool shifted, float shift) {
    for (int64_t k = 0; k < n; k++)
        out[k] = shifted ? a[k] + b[k] + c[k] + shift : a[k] + b[k] + c[k];
}

static inline __attribute__((always_inline)) void winograd_diff3(const float *restrict a, const float *restrict b,
                                                                 const float *restrict c, float *restrict out,
                                                                 int64_t n, bool shifted, float shift) {
    for (int64_t k = 0; k < n; k++)
        out[k] = shifted ? a[k] - b[k] - c[k] + shift : a[k] - b[k] - c[k];
}

/* x = max(0, x) as the GEMM epilogue's relu computes it: NaN and -0 pass through. */
static void winograd_relu(float *restrict x, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        x[k] = x[k] < 0.0f ? 0.0f : x[k];
}

/* out[2k] = a[k], out[2k + 1] = b[k] for k < pairs, and out[2 pairs] = a[pairs] when odd. */
static void winograd_interleave(const float *restrict a, const float *restrict b, float *restrict out, int64_t cols) {
    const int64_t pairs = cols / 2;
    for (int64_t k = 0; k < pairs; k++) {
        out[2 * k] = a[k];
        out[2 * k + 1] = b[k];
    }
    if (cols & 1)
        out[2 * pairs] = a[pairs];
}

/* The same plus the residual laid out like out. */
static void winograd_interleave_add(const float *restrict a, const float *restrict b, const float *restrict residual,
                                    float *restrict out, int64_t cols) {
    const int64_t pairs = cols / 2;
    for (int64_t k = 0; k < pairs; k++) {
        out[2 * k] = a[k] + residual[2 * k];
        out[2 * k + 1] = b[k] + residual[2 * k + 1];
    }
    if (cols & 1)
        out[2 * pairs] = a[pairs] + residual[2 * pairs];
}

/* Whether any of x[0, n) is NaN or infinite (x - x is 0 only for finite x). */
static bool winograd_any_nonfinite(const float *restrict x, int64_t n) {
    int bad = 0;
    for (int64_t k = 0; k < n; k++)
        bad |= !(x[k] - x[k] == 0.0f);
    return bad != 0;
}

static bool winograd_output(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride, int64_t ldm,
                            int rows, int64_t t0, int64_t t1, const float *bias, tb_activation activation,
                            const float *residual, float *y, tb_gemm_epilogue_fn epilogue, float *work) {
    const int64_t per_image = geo->tiles_h * geo->tiles_w, out_plane = geo->out_h * geo->out_w;
    const int64_t stride = (t1 - t0 > geo->tiles_w ? t1 - t0 : geo->tiles_w) + 2;
    float *r[8], *out[4]; /* rows 0 and 1 of A^T M (4 columns each), then the 2 x 2 outputs */
    for (int q = 0; q < 8; q++)
        r[q] = work + q * stride;
    for (int q = 0; q < 4; q++)
        out[q] = work + (8 + q) * stride;
    /* no activation and relu are applied here, with the residual; other activations go through the
     * micro-kernel table's epilogue (which then adds the residual) */
    const bool inline_activation = activation == TB_ACTIVATION_NONE || activation == TB_ACTIVATION_RELU;
    const int64_t count = t1 - t0;
    bool nonfinite = false;
    for (int i = 0; i < rows; i++) {
        /* the transform over the block's tiles at once (long contiguous loops), then each tile row's
         * run of outputs to its place */
        const float *mi = m + i * ldm;
#define M_AT(xi) (mi + (xi) * m_xi_stride)
        for (int j = 0; j < 4; j++) {
            winograd_sum3(M_AT(j), M_AT(4 + j), M_AT(8 + j), r[j], count, false, 0.0f);
            winograd_diff3(M_AT(4 + j), M_AT(8 + j), M_AT(12 + j), r[4 + j], count, false, 0.0f);
        }
#undef M_AT
        const float b = bias ? bias[i] : 0.0f;
        winograd_sum3(r[0], r[1], r[2], out[0], count, true, b);
        winograd_diff3(r[1], r[2], r[3], out[1], count, true, b);
        winograd_sum3(r[4], r[5], r[6], out[2], count, true, b);
        winograd_diff3(r[5], r[6], r[7], out[3], count, true, b);
        if (activation == TB_ACTIVATION_RELU)
            for (int q = 0; q < 4; q++)
                winograd_relu(out[q], count);
        for (int64_t t = t0; t < t1;) {
            const int64_t n = t / per_image, rest = t % per_image, ty = rest / geo->tiles_w, tx0 = rest % geo->tiles_w;
            const int64_t len = geo->tiles_w - tx0 < t1 - t ? geo->tiles_w - tx0 : t1 - t, k = t - t0;
            const int64_t oy = 2 * ty, ox = 2 * tx0;
            const int out_rows = oy + 1 < geo->out_h ? 2 : 1;
            const int64_t out_cols = 2 * len <= geo->out_w - ox ? 2 * len : geo->out_w - ox;
            float *row0 = y + n * geo->y_image_stride + i * out_plane + oy * geo->out_w + ox;
            const float *res0 = residual ? residual + (row0 - y) : NULL;
            if (res0 && inline_activation) {
                winograd_interleave_add(out[0] + k, out[1] + k, res0, row0, out_cols);
                if (out_rows == 2)
                    winograd_interleave_add(out[2] + k, out[3] + k, res0 + geo->out_w, row0 + geo->out_w, out_cols);
            } else {
                winograd_interleave(out[0] + k, out[1] + k, row0, out_cols);
                if (out_rows == 2)
                    winograd_interleave(out[2] + k, out[3] + k, row0 + geo->out_w, out_cols);
            }
            if (!inline_activation) {
                tb_gemm_epilogue e = {
                    .bias_kind = TB_BIAS_NONE, .activation = activation, .residual = res0,
                    .residual_row_stride = geo->out_w,
                };
                epilogue(row0, geo->out_w, out_rows, (int)out_cols, &e);
            }
            nonfinite |= winograd_any_nonfinite(row0, out_cols);
            if (out_rows == 2)
                nonfinite |= winograd_any_nonfinite(row0 + geo->out_w, out_cols);
            t += len;
        }
    }
    return nonfinite;
}

#endif
