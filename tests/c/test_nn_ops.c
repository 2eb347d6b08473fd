/* Tests of the convolution kernels: every ISA's panel im2col against the definition (exactly), the
 * direct plane convolution and the packed conv GEMM against naive double-precision loops, guard bytes
 * around every output, and the nn ops' argument checks (error codes, zeroed outputs, no crash). */
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/conv_gemm.h"
#include "kernels/nn_kernels.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/ops_nn.h"

typedef struct geometry_case {
    int64_t channels, in_h, in_w, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w;
} geometry_case;

static const geometry_case cases[] = {
    {3, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1},    {2, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1},
    {4, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1},    {2, 10, 17, 5, 5, 1, 1, 2, 2, 1, 1}, {2, 11, 11, 3, 3, 2, 2, 1, 1, 1, 1},
    {1, 12, 13, 3, 2, 1, 1, 2, 0, 2, 3},  {3, 6, 6, 1, 1, 1, 1, 0, 0, 1, 1},   {1, 4, 70, 3, 7, 1, 1, 1, 3, 1, 1},
    {2, 3, 1, 3, 1, 1, 1, 1, 0, 1, 1},    {1, 8, 8, 4, 4, 3, 2, 3, 3, 1, 1},   {1, 9, 20, 2, 9, 1, 1, 0, 8, 1, 2},
    /* rows wide enough for whole vectors inside the row at stride 2 (a stem-like 7x7/2), larger
     * strides (gathered: a patchify 4x4/4, stride 3 with dilation), a 1x1/2 projection */
    {3, 20, 40, 7, 7, 2, 2, 3, 3, 1, 1},  {2, 9, 37, 3, 3, 2, 2, 1, 1, 1, 1},  {2, 16, 48, 4, 4, 4, 4, 0, 0, 1, 1},
    {1, 10, 50, 3, 3, 1, 3, 1, 2, 1, 2},  {1, 6, 33, 1, 1, 2, 2, 0, 0, 1, 1},
    /* rows of several 16-lane chunks at stride 2 and 3 (AVX-512: 32 columns loaded per chunk, gathers) */
    {2, 8, 130, 3, 3, 2, 2, 1, 1, 1, 1},  {1, 5, 200, 3, 5, 1, 3, 1, 2, 1, 1},
};
enum { CASE_COUNT = sizeof cases / sizeof cases[0] };

static tb_window_geometry geometry_of(const geometry_case *c) {
    tb_window_geometry g = {
        .channels = c->channels, .in_h = c->in_h, .in_w = c->in_w, .kernel_h = c->kernel_h, .kernel_w = c->kernel_w,
        .stride_h = c->stride_h, .stride_w = c->stride_w, .pad_top = c->pad_top, .pad_left = c->pad_left,
        .dilation_h = c->dilation_h, .dilation_w = c->dilation_w,
    };
    g.out_h = (c->in_h + 2 * c->pad_top - c->dilation_h * (c->kernel_h - 1) - 1) / c->stride_h + 1;
    g.out_w = (c->in_w + 2 * c->pad_left - c->dilation_w * (c->kernel_w - 1) - 1) / c->stride_w + 1;
    return g;
}

/* The im2col entry (row r, output column j) from its definition. */
static float im2col_value(const tb_window_geometry *g, const float *x, int64_t r, int64_t j) {
    int64_t kw = r % g->kernel_w, kh = (r / g->kernel_w) % g->kernel_h, c = r / (g->kernel_w * g->kernel_h);
    int64_t oh = j / g->out_w, ow = j % g->out_w;
    int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
    int64_t iw = ow * g->stride_w - g->pad_left + kw * g->dilation_w;
    if (ih < 0 || ih >= g->in_h || iw < 0 || iw >= g->in_w)
        return 0.0f;
    return x[(c * g->in_h + ih) * g->in_w + iw];
}

static const tb_isa isas[] = {TB_ISA_SCALAR, TB_ISA_AVX2, TB_ISA_AVX512};

static void test_im2col_panels(void) {
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        tb_window_geometry g = geometry_of(&cases[ci]);
        int64_t k = g.channels * g.kernel_h * g.kernel_w, spatial = g.out_h * g.out_w;
        int64_t x_count = g.channels * g.in_h * g.in_w;
        float *x = tb_test_guarded_alloc(x_count);
        tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 10 + (uint64_t)ci);
        for (int ii = 0; ii < 3; ii++) {
            if (!tb_isa_supported(isas[ii]))
                continue;
            const tb_nn_kernels *kernels = tb_nn_kernels_for(isas[ii]);
            static const int widths[] = {16, 32, 64};
            for (int wi = 0; wi < 3; wi++) {
                int nr = widths[wi];
                float *panel = tb_test_guarded_alloc(k * nr + TB_PANEL_SLACK);
                for (int64_t j0 = 0; j0 < spatial; j0 += 5) {
                    int cols = (int)(spatial - j0 < nr ? spatial - j0 : nr);
                    if (j0 % 3 == 1 && cols > 1)
                        cols--; /* partial panels too */
                    kernels->im2col_panel(&g, x, j0, cols, nr, panel);
                    int bad = 0;
                    for (int64_t r = 0; r < k && !bad; r++)
                        for (int t = 0; t < nr && !bad; t++) {
                            float expected = t < cols ? im2col_value(&g, x, r, j0 + t) : 0.0f;
                            bad = panel[r * nr + t] != expected;
                        }
                    TB_CHECK_MSG(!bad, "im2col_panel %s case %d j0 %lld cols %d nr %d", kernels->isa_name, ci,
                                 (long long)j0, cols, nr);
                }
                TB_CHECK(tb_test_guard_ok(panel, k * nr + TB_PANEL_SLACK));
                tb_test_guarded_free(panel);
            }
        }
        TB_CHECK(tb_test_guard_ok(x, x_count));
        tb_test_guarded_free(x);
    }
}

static void test_plane_convolution(void) {
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        tb_window_geometry g = geometry_of(&cases[ci]);
        int64_t x_count = g.in_h * g.in_w, y_count = g.out_h * g.out_w, taps = g.kernel_h * g.kernel_w;
        float *x = tb_test_guarded_alloc(x_count), *w = tb_test_guarded_alloc(taps), *y = tb_test_guarded_alloc(y_count);
        tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 50 + (uint64_t)ci);
        tb_test_fill_uniform(w, taps, -1.0f, 1.0f, 70 + (uint64_t)ci);
        for (int ii = 0; ii < 3; ii++) {
            if (!tb_isa_supported(isas[ii]))
                continue;
            const tb_nn_kernels *kernels = tb_nn_kernels_for(isas[ii]);
            kernels->conv2d_plane(&g, x, w, 0.25f, y);
            double worst = 0.0;
            for (int64_t j = 0; j < y_count; j++) {
                double sum = 0.25;
                for (int64_t r = 0; r < taps; r++)
                    sum += (double)w[r] * im2col_value(&g, x, r, j);
                worst = fmax(worst, fabs(sum - y[j]));
            }
            TB_CHECK_MSG(worst < 1e-5, "conv2d_plane %s case %d: max error %g", kernels->isa_name, ci, worst);
            TB_CHECK(tb_test_guard_ok(y, y_count));
        }
        tb_test_guarded_free(x);
        tb_test_guarded_free(w);
        tb_test_guarded_free(y);
    }
}

/* Every ISA's max pooling against the reference, exactly (values and int64 indices), with NaN, -inf
 * and ties planted. */
static void test_max_pool_planes(void) {
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        tb_window_geometry g = geometry_of(&cases[ci]);
        int64_t x_count = g.in_h * g.in_w, y_count = g.out_h * g.out_w;
        float *x = tb_test_guarded_alloc(x_count), *y = tb_test_guarded_alloc(y_count);
        float *expected = tb_test_guarded_alloc(y_count);
        int64_t *index = malloc((size_t)y_count * sizeof(int64_t)), *expected_index = malloc((size_t)y_count * sizeof(int64_t));
        tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 130 + (uint64_t)ci);
        for (int64_t i = 0; i < x_count; i += 7)
            x[i] = (i / 7) % 3 == 0 ? NAN : (i / 7) % 3 == 1 ? -INFINITY : 0.5f;
        tb_max_pool2d_plane_f32(&g, x, expected, expected_index);
        for (int ii = 1; ii < 3; ii++) {
            if (!tb_isa_supported(isas[ii]))
                continue;
            const tb_nn_kernels *kernels = tb_nn_kernels_for(isas[ii]);
            kernels->max_pool2d_plane(&g, x, y, index);
            int bad = 0;
            for (int64_t j = 0; j < y_count; j++) {
                int same_value = (isnan(y[j]) && isnan(expected[j])) || y[j] == expected[j];
                if (!same_value || index[j] != expected_index[j])
                    bad++;
            }
            TB_CHECK_MSG(!bad, "max_pool2d_plane %s case %d: %d outputs differ", kernels->isa_name, ci, bad);
            TB_CHECK(tb_test_guard_ok(y, y_count));
        }
        tb_test_guarded_free(x);
        tb_test_guarded_free(y);
        tb_test_guarded_free(expected);
        free(index);
        free(expected_index);
    }
}

/* An output size as the pooling ops compute it (PyTorch's pooling_output_shape); 0 when the window
 * does not fit. */
static int64_t pooled_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
    int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    if (numerator < 0)
        return 0;
    int64_t out = numerator / stride + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

/* Fills a plane: kind 0 is uniform in [-1, 1) with NaN, -inf, ties (0.5) and both zeros planted, kind
 * 1 is all -inf but a sparse NaN (so windows of -inf only, and NaN among them). */
static void fill_pool_input(float *x, int64_t count, int kind, uint64_t seed) {
    static const float planted[] = {NAN, -INFINITY, 0.5f, -0.0f, 0.0f, 0.5f};
    if (kind == 0) {
        tb_test_fill_uniform(x, count, -1.0f, 1.0f, seed);
        for (int64_t i = (int64_t)(seed % 3); i < count; i += 3)
            x[i] = planted[(i / 3 + (int64_t)seed) % 6];
    } else {
        for (int64_t i = 0; i < count; i++)
            x[i] = i % 11 == 10 ? NAN : -INFINITY;
    }
}

/* A plane buffer between two unmapped pages: a plane placed flush against either end faults on any
 * load past that end. */
typedef struct fenced_planes {
    char *map;
    size_t page, body;
} fenced_planes;

/* Runs every SIMD max pooling on g (input `source`) with the plane flush against each fence, with and
 * without indices, and compares values and indices with the reference bitwise. Returns the number
 * of runs that differ; reports them while *reports_left lasts. */
static int max_pool_runs_differing(const tb_window_geometry *g, const float *source, const fenced_planes *fence,
                                   float *y, int64_t *index, float *expected, int64_t *expected_index,
                                   int *reports_left) {
    int64_t x_count = g->in_h * g->in_w, y_count = g->out_h * g->out_w;
    int differing = 0;
    tb_max_pool2d_plane_f32(g, source, expected, expected_index);
    for (int ii = 1; ii < 3; ii++) {
        if (!tb_isa_supported(isas[ii]))
            continue;
        const tb_nn_kernels *kernels = tb_nn_kernels_for(isas[ii]);
        for (int at_end = 0; at_end <= 1; at_end++) {
            float *x = (float *)(void *)(fence->map + fence->page);
            if (at_end)
                x += fence->body / sizeof(float) - (size_t)x_count;
            memcpy(x, source, (size_t)x_count * sizeof(float));
            for (int with_index = 0; with_index <= 1; with_index++) {
                memset(y, 0xA5, (size_t)y_count * sizeof(float));
                memset(index, 0xA5, (size_t)y_count * sizeof(int64_t));
                kernels->max_pool2d_plane(g, x, y, with_index ? index : NULL);
                bool same = memcmp(y, expected, (size_t)y_count * sizeof(float)) == 0;
                if (with_index)
                    same &= memcmp(index, expected_index, (size_t)y_count * sizeof(int64_t)) == 0;
                if (same)
                    continue;
                differing++;
                if ((*reports_left)-- > 0)
                    fprintf(stderr, "max_pool2d_plane %s: in %lldx%lld kernel %lldx%lld stride %lldx2 pad %lld "
                            "dilation %lld out %lldx%lld index %d differs\n", kernels->isa_name, (long long)g->in_h,
                            (long long)g->in_w, (long long)g->kernel_h, (long long)g->kernel_w, (long long)g->stride_h,
                            (long long)g->pad_left, (long long)g->dilation_w, (long long)g->out_h,
                            (long long)g->out_w, with_index);
            }
        }
    }
    return differing;
}

/* Stride-2 max pooling (two loads and an even/odd pick per tap) at every ISA against the reference,
 * bitwise, with and without indices: widths 1..70 cover the 8- and 16-lane tails and both borders;
 * kernels 2 and 3, padding 0 and 1, dilation 1 and 2 (which makes windows with no element in range),
 * row strides 1 and 2 and ceil mode (windows hanging over the bottom and right edges), on heights
 * that give whole and partial groups of rows. Planes are read flush against an unmapped page. */
static void test_max_pool_stride2(void) {
    enum { MAX_IN_H = 13, MAX_IN_W = 70, MAX_OUT = (MAX_IN_H + 2) * (MAX_IN_W / 2 + 2) };
    static const int64_t heights[] = {1, 7, MAX_IN_H};
    fenced_planes fence = {.page = (size_t)sysconf(_SC_PAGESIZE)};
    fence.body = (MAX_IN_H * MAX_IN_W * sizeof(float) + fence.page - 1) / fence.page * fence.page;
    fence.map = mmap(NULL, fence.body + 2 * fence.page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TB_CHECK(fence.map != MAP_FAILED);
    if (fence.map == MAP_FAILED)
        return;
    mprotect(fence.map, fence.page, PROT_NONE);
    mprotect(fence.map + fence.page + fence.body, fence.page, PROT_NONE);
    float *source = malloc(MAX_IN_H * MAX_IN_W * sizeof(float)), *expected = malloc(MAX_OUT * sizeof(float));
    int64_t *expected_index = malloc(MAX_OUT * sizeof(int64_t));
    int geometries = 0, differing = 0, reports_left = 5;
    /* bits of `variant`: kernel_w - 2, kernel_h - 2, pad, dilation - 1, stride_h - 1, ceil_mode */
    for (int variant = 0; variant < 64; variant++) {
        int64_t kernel_w = 2 + (variant & 1), kernel_h = 2 + (variant >> 1 & 1), pad = variant >> 2 & 1;
        int64_t dilation = 1 + (variant >> 3 & 1), stride_h = 1 + (variant >> 4 & 1);
        bool ceil_mode = variant >> 5 & 1;
        for (int hi = 0; hi < 3; hi++)
            for (int64_t in_w = 1; in_w <= MAX_IN_W; in_w++) {
                int64_t in_h = heights[hi];
                tb_window_geometry g = {
                    .channels = 1, .in_h = in_h, .in_w = in_w, .kernel_h = kernel_h, .kernel_w = kernel_w,
                    .stride_h = stride_h, .stride_w = 2, .pad_top = pad, .pad_left = pad, .dilation_h = dilation,
                    .dilation_w = dilation, .out_h = pooled_size(in_h, kernel_h, pad, stride_h, dilation, ceil_mode),
                    .out_w = pooled_size(in_w, kernel_w, pad, 2, dilation, ceil_mode),
                };
                if (g.out_h < 1 || g.out_w < 1)
                    continue;
                fill_pool_input(source, in_h * in_w, geometries % 4 == 3, (uint64_t)geometries);
                geometries++;
                /* int64 indices in a guarded float buffer of twice the count */
                int64_t y_count = g.out_h * g.out_w;
                float *y = tb_test_guarded_alloc(y_count), *index = tb_test_guarded_alloc(2 * y_count);
                differing += max_pool_runs_differing(&g, source, &fence, y, (int64_t *)(void *)index, expected,
                                                     expected_index, &reports_left);
                TB_CHECK(tb_test_guard_ok(y, y_count));
                TB_CHECK(tb_test_guard_ok(index, 2 * y_count));
                tb_test_guarded_free(y);
                tb_test_guarded_free(index);
            }
    }
    TB_CHECK_MSG(differing == 0, "stride-2 max pooling: %d runs over %d geometries differ", differing, geometries);
    free(source);
    free(expected);
    free(expected_index);
    munmap(fence.map, fence.body + 2 * fence.page);
}

/* The packed conv GEMM (bias + residual epilogue) against a naive double-precision convolution. */
static void test_conv_gemm(void) {
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        tb_window_geometry g = geometry_of(&cases[ci]);
        int64_t k = g.channels * g.kernel_h * g.kernel_w, spatial = g.out_h * g.out_w;
        static const int64_t ms[] = {1, 5, 16, 33};
        int64_t m = ms[ci % 4];
        int64_t x_count = g.channels * g.in_h * g.in_w;
        float *x = tb_test_guarded_alloc(x_count), *w = tb_test_guarded_alloc(m * k), *bias = tb_test_guarded_alloc(m);
        float *residual = tb_test_guarded_alloc(m * spatial), *y = tb_test_guarded_alloc(m * spatial);
        tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 90 + (uint64_t)ci);
        tb_test_fill_uniform(w, m * k, -1.0f, 1.0f, 91 + (uint64_t)ci);
        tb_test_fill_uniform(bias, m, -1.0f, 1.0f, 92 + (uint64_t)ci);
        tb_test_fill_uniform(residual, m * spatial, -1.0f, 1.0f, 93 + (uint64_t)ci);
        for (int ii = 0; ii < 3; ii++) {
            if (!tb_isa_supported(isas[ii]))
                continue;
            tb_conv_gemm plan;
            tb_conv_gemm_init(&plan, isas[ii], m, k);
            int64_t packed_count = tb_conv_gemm_weight_floats(&plan), scratch_count = tb_conv_gemm_scratch_floats(&plan);
            /* the B panel scratch must be 64-byte aligned (the micro-kernels use aligned loads) */
            float *packed = tb_test_guarded_alloc(packed_count), *scratch_base = tb_test_guarded_alloc(scratch_count + 16);
            float *scratch = (float *)(((uintptr_t)scratch_base + 63) & ~(uintptr_t)63);
            tb_conv_gemm_pack_weight(&plan, w, NULL, packed);
            /* two column ranges, as two tasks would split the plane */
            int64_t split = spatial / 3;
            tb_conv_gemm_run(&plan, packed, &g, x, 0, split, scratch, y, spatial, bias, TB_ACTIVATION_NONE, residual);
            tb_conv_gemm_run(&plan, packed, &g, x, split, spatial, scratch, y, spatial, bias, TB_ACTIVATION_NONE, residual);
            double worst = 0.0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < spatial; j++) {
                    double sum = bias[i];
                    for (int64_t r = 0; r < k; r++)
                        sum += (double)w[i * k + r] * im2col_value(&g, x, r, j);
                    sum += residual[i * spatial + j];
                    worst = fmax(worst, fabs(sum - y[i * spatial + j]));
                }
            TB_CHECK_MSG(worst < 1e-4, "conv_gemm isa %d case %d: max error %g", (int)isas[ii], ci, worst);
            TB_CHECK(tb_test_guard_ok(y, m * spatial));
            TB_CHECK(tb_test_guard_ok(scratch_base, scratch_count + 16));
            tb_test_guarded_free(packed);
            tb_test_guarded_free(scratch_base);
        }
        tb_test_guarded_free(x);
        tb_test_guarded_free(w);
        tb_test_guarded_free(bias);
        tb_test_guarded_free(residual);
        tb_test_guarded_free(y);
    }
}

/* float64 conv2d through the op (grouped, every geometry case) against a naive double loop: it must
 * compute in double (errors ~1e-15; a float32 round trip is ~1e-7 off), return float64, and its
 * backward must be the adjoint: <conv(x), g> = <x, dx> and = <w, dw>. */
static void test_conv2d_f64(void) {
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        const geometry_case *c = &cases[ci];
        int64_t groups = c->channels > 1 && c->channels % 2 == 0 ? 2 : 1, out_channels = 2 * groups;
        int64_t xs[4] = {2, c->channels, c->in_h, c->in_w};
        int64_t ws[4] = {out_channels, c->channels / groups, c->kernel_h, c->kernel_w};
        tb_conv2d_params p = {.stride = {c->stride_h, c->stride_w}, .padding = {c->pad_top, c->pad_left},
                              .dilation = {c->dilation_h, c->dilation_w}, .groups = groups};
        tb_tensor x, w, y, g, dx, dw, db;
        TB_CHECK(tb_tensor_empty(TB_F64, 4, xs, TB_ALLOC_DEFAULT, &x) == TB_OK);
        TB_CHECK(tb_tensor_empty(TB_F64, 4, ws, TB_ALLOC_DEFAULT, &w) == TB_OK);
        double *xv = tb_tensor_data(&x), *wv = tb_tensor_data(&w);
        for (int64_t i = 0; i < tb_tensor_numel(&x); i++)
            xv[i] = sin(0.37 * (double)i + ci) * (1.0 + 1e-9 * (double)i);
        for (int64_t i = 0; i < tb_tensor_numel(&w); i++)
            wv[i] = cos(0.71 * (double)i - ci);
        TB_CHECK(tb_op_conv2d(&x, &w, NULL, &p, &y) == TB_OK);
        TB_CHECK(y.dtype == TB_F64 && y.ndim == 4);
        tb_window_geometry geo = geometry_of(c);
        geo.channels = c->channels / groups;
        TB_CHECK(y.shape[2] == geo.out_h && y.shape[3] == geo.out_w);
        const double *yv = tb_tensor_data(&y);
        int64_t spatial = geo.out_h * geo.out_w, k = geo.channels * c->kernel_h * c->kernel_w, plane = c->in_h * c->in_w;
        double worst = 0.0, forward_dot = 0.0;
        for (int64_t n = 0; n < 2; n++)
            for (int64_t co = 0; co < out_channels; co++)
                for (int64_t j = 0; j < spatial; j++) {
                    int64_t group = co / (out_channels / groups);
                    const double *xg = xv + (n * c->channels + group * geo.channels) * plane;
                    double sum = 0.0;
                    for (int64_t r = 0; r < k; r++) {
                        int64_t kw = r % c->kernel_w, kh = (r / c->kernel_w) % c->kernel_h;
                        int64_t ih = j / geo.out_w * c->stride_h - c->pad_top + kh * c->dilation_h;
                        int64_t iw = j % geo.out_w * c->stride_w - c->pad_left + kw * c->dilation_w;
                        if (ih >= 0 && ih < c->in_h && iw >= 0 && iw < c->in_w)
                            sum += wv[co * k + r] * xg[r / (c->kernel_w * c->kernel_h) * plane + ih * c->in_w + iw];
                    }
                    double got = yv[(n * out_channels + co) * spatial + j];
                    worst = fmax(worst, fabs(sum - got));
                    forward_dot += got * got; /* g = y below */
                }
        TB_CHECK_MSG(worst < 1e-12, "conv2d f64 case %d: max error %g", ci, worst);
        bool mask[3] = {true, true, true};
        tb_tensor_retain(&y, &g);
        TB_CHECK(tb_op_conv2d_backward(&g, &x, &w, &p, mask, &dx, &dw, &db) == TB_OK);
        TB_CHECK(dx.dtype == TB_F64 && dw.dtype == TB_F64 && db.dtype == TB_F64);
        double x_dot = 0.0, w_dot = 0.0;
        const double *dxv = tb_tensor_data(&dx), *dwv = tb_tensor_data(&dw);
        for (int64_t i = 0; i < tb_tensor_numel(&x); i++)
            x_dot += xv[i] * dxv[i];
        for (int64_t i = 0; i < tb_tensor_numel(&w); i++)
            w_dot += wv[i] * dwv[i];
        /* y is linear in x and in w: <y, y> = <x, dL/dx> = <w, dL/dw> for L = <y, y> / 2 */
        TB_CHECK_MSG(fabs(x_dot - forward_dot) <= 1e-11 * fmax(1.0, forward_dot) &&
                         fabs(w_dot - forward_dot) <= 1e-11 * fmax(1.0, forward_dot),
                     "conv2d_backward f64 case %d: %g %g %g", ci, forward_dot, x_dot, w_dot);
        tb_tensor t[] = {x, w, y, g, dx, dw, db};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            tb_tensor_release(&t[i]);
    }
}

static int is_zeroed(const tb_tensor *t) { return t->storage == NULL; }

static void test_bad_arguments(void) {
    int64_t xs[4] = {1, 4, 6, 6}, ws[4] = {2, 4, 3, 3};
    tb_tensor x, w, out, indices;
    TB_CHECK(tb_tensor_empty(TB_F32, 4, xs, TB_ALLOC_ZERO, &x) == TB_OK);
    TB_CHECK(tb_tensor_empty(TB_F32, 4, ws, TB_ALLOC_ZERO, &w) == TB_OK);
    tb_conv2d_params ok = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    TB_CHECK(tb_op_conv2d(&x, &w, NULL, &ok, &out) == TB_OK);
    TB_CHECK(out.ndim == 4 && out.shape[1] == 2 && out.shape[2] == 6);
    tb_tensor_release(&out);
    tb_conv2d_params bad = ok;
    bad.stride[1] = 0;
    TB_CHECK(tb_op_conv2d(&x, &w, NULL, &bad, &out) == TB_ERR_INVALID_ARGUMENT && is_zeroed(&out));
    bad = ok;
    bad.padding[0] = -1;
    TB_CHECK(tb_op_conv2d(&x, &w, NULL, &bad, &out) == TB_ERR_INVALID_ARGUMENT && is_zeroed(&out));
    bad = ok;
    bad.groups = 3;
    TB_CHECK(tb_op_conv2d(&x, &w, NULL, &bad, &out) == TB_ERR_INVALID_ARGUMENT && is_zeroed(&out));
    tb_conv2d_epilogue epilogue = {.activation = 99};
    TB_CHECK(tb_op_conv2d_fused(&x, &w, NULL, &ok, &epilogue, &out) == TB_ERR_INVALID_ARGUMENT && is_zeroed(&out));
    tb_pool2d_params pool = {.kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
    TB_CHECK(tb_op_max_pool2d(&x, &pool, &out, &indices) == TB_OK);
    TB_CHECK(out.shape[2] == 3 && indices.dtype == TB_I64);
    tb_tensor_release(&out);
    tb_tensor_release(&indices);
    pool.padding[0] = 2;
    TB_CHECK(tb_op_max_pool2d(&x, &pool, &out, &indices) == TB_ERR_INVALID_ARGUMENT && is_zeroed(&out) &&
             is_zeroed(&indices));
    tb_tensor_release(&x);
    tb_tensor_release(&w);
}

/* max_pool2d_into / avg_pool2d_into write exactly what the allocating ops return into caller memory
 * (float32 and float64, batched and unbatched, indices optional), stay inside it (guard bytes), and
 * refuse a dtype they would have to convert and a NULL destination. */
static void test_pool_into(void) {
    const int64_t xs[4] = {2, 3, 7, 6};
    tb_pool2d_params pool = {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1},
                             .ceil_mode = true};
    for (int f64 = 0; f64 < 2; f64++) {
        for (int unbatched = 0; unbatched < 2; unbatched++) {
            tb_tensor x = {0};
            tb_dtype dtype = f64 ? TB_F64 : TB_F32;
            TB_CHECK(tb_tensor_empty(dtype, unbatched ? 3 : 4, unbatched ? xs + 1 : xs, TB_ALLOC_ZERO, &x) == TB_OK);
            int64_t n = tb_tensor_numel(&x);
            for (int64_t i = 0; i < n; i++) {
                double v = (double)((i * 37) % 23) - 11.0;
                if (f64)
                    ((double *)tb_tensor_data(&x))[i] = v;
                else
                    ((float *)tb_tensor_data(&x))[i] = (float)v;
            }
            for (int average = 0; average < 2; average++) {
                tb_tensor want = {0}, want_index = {0};
                TB_CHECK((average ? tb_op_avg_pool2d(&x, &pool, &want)
                                  : tb_op_max_pool2d(&x, &pool, &want, &want_index)) == TB_OK);
                int64_t count = tb_tensor_numel(&want), bytes = count * (int64_t)tb_dtype_size(dtype);
                /* guarded float buffers: the values take bytes / 4 floats, the indices 2 per element */
                float *y = tb_test_guarded_alloc(bytes / 4), *index = tb_test_guarded_alloc(2 * count);
                for (int with_index = 0; with_index < 2 - average; with_index++) {
                    TB_CHECK((average ? tb_op_avg_pool2d_into(&x, &pool, y)
                                      : tb_op_max_pool2d_into(&x, &pool, y, with_index ? (int64_t *)index : NULL)) ==
                             TB_OK);
                    TB_CHECK_MSG(memcmp(y, tb_tensor_data(&want), (size_t)bytes) == 0,
                                 "pool into: f64 %d unbatched %d average %d: values differ", f64, unbatched, average);
                    if (with_index)
                        TB_CHECK(memcmp(index, tb_tensor_data(&want_index), (size_t)count * sizeof(int64_t)) == 0);
                    TB_CHECK(tb_test_guard_ok(y, bytes / 4));
                    TB_CHECK(tb_test_guard_ok(index, 2 * count));
                }
                tb_test_guarded_free(y);
                tb_test_guarded_free(index);
                tb_tensor_release(&want);
                tb_tensor_release(&want_index);
            }
            tb_tensor_release(&x);
        }
    }
    tb_tensor half = {0};
    float sink[64];
    TB_CHECK(tb_tensor_empty(TB_F16, 4, (int64_t[]){1, 1, 4, 4}, TB_ALLOC_ZERO, &half) == TB_OK);
    pool = (tb_pool2d_params){.kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}};
    TB_CHECK(tb_op_max_pool2d_into(&half, &pool, sink, NULL) == TB_ERR_DTYPE);
    TB_CHECK(tb_op_avg_pool2d_into(&half, &pool, sink) == TB_ERR_DTYPE);
    TB_CHECK(tb_op_max_pool2d_into(&half, &pool, NULL, NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_tensor_release(&half);
}

int main(void) {
    test_im2col_panels();
    test_plane_convolution();
    test_max_pool_planes();
    test_max_pool_stride2();
    test_conv_gemm();
    test_conv2d_f64();
    test_bad_arguments();
    test_pool_into();
    return tb_test_finish("nn_ops");
}
