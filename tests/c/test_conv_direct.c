/* Tests of the direct (implicit-GEMM) convolution kernels against a naive double-precision
 * convolution: rows of stride 1 and 2 with borders, dilation, row strides, windows taller than the image,
 * panel splits of 1..33 output channels, odd slot ranges (a tile with one vector), relu in registers
 * and the activation + residual epilogue, guard bytes around every output, allocation failures, and the
 * packed-weight cache on the weight storage. */
#include <math.h>

#include <string.h>

#include "kernels/conv_winograd.h"
#include "kernels/gemm.h"
#include "kernels/nn_kernels.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/ops_nn.h"

typedef struct direct_case {
    int64_t channels, in_h, in_w, kernel_h, kernel_w, stride_h, pad_top, pad_left, dilation_h, dilation_w, stride_w;
} direct_case;

static const direct_case cases[] = {
    {3, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1},  {2, 12, 33, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 5, 40, 3, 3, 2, 1, 1, 1, 1, 1},
    {2, 10, 17, 5, 5, 1, 2, 2, 1, 1, 1}, {1, 12, 29, 3, 2, 1, 2, 0, 2, 3, 1}, {3, 6, 20, 1, 1, 1, 0, 0, 1, 1, 1},
    {1, 4, 70, 3, 7, 1, 1, 3, 1, 1, 1},  {2, 3, 24, 8, 8, 1, 4, 4, 1, 1, 1},  {1, 9, 20, 2, 9, 3, 0, 8, 1, 2, 1},
    {0, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1},
    /* stride 2 along rows (AVX-512 only) */
    {3, 9, 33, 3, 3, 2, 1, 1, 1, 1, 2}, {2, 12, 64, 3, 3, 2, 1, 1, 1, 1, 2}, {1, 5, 70, 7, 7, 2, 3, 3, 1, 1, 2},
    {2, 10, 40, 5, 3, 1, 2, 0, 1, 2, 2}, {3, 6, 31, 1, 1, 2, 0, 0, 1, 1, 2}, {1, 4, 45, 2, 9, 1, 0, 8, 1, 2, 2},
    /* more input channels than one pass sums (AVX-512 splits them into chunks) */
    {40, 5, 20, 3, 3, 1, 1, 1, 1, 1, 1}, {21, 4, 37, 7, 7, 2, 3, 3, 1, 1, 2}, {300, 2, 17, 1, 1, 1, 0, 0, 1, 1, 1},
};
enum { CASE_COUNT = sizeof cases / sizeof cases[0] };

static tb_window_geometry geometry_of(const direct_case *c) {
    tb_window_geometry g = {
        .channels = c->channels, .in_h = c->in_h, .in_w = c->in_w, .kernel_h = c->kernel_h, .kernel_w = c->kernel_w,
        .stride_h = c->stride_h, .stride_w = c->stride_w > 1 ? c->stride_w : 1, .pad_top = c->pad_top,
        .pad_left = c->pad_left,
        .dilation_h = c->dilation_h, .dilation_w = c->dilation_w,
    };
    g.out_h = (c->in_h + 2 * c->pad_top - c->dilation_h * (c->kernel_h - 1) - 1) / c->stride_h + 1;
    g.out_w = (c->in_w + 2 * c->pad_left - c->dilation_w * (c->kernel_w - 1) - 1) / g.stride_w + 1;
    return g;
}

static double naive(const tb_window_geometry *g, const float *x, const float *w, int64_t i, int64_t j) {
    int64_t oh = j / g->out_w, ow = j % g->out_w, taps = g->kernel_h * g->kernel_w;
    double sum = 0.0;
    for (int64_t c = 0; c < g->channels; c++)
        for (int64_t kh = 0; kh < g->kernel_h; kh++)
            for (int64_t kw = 0; kw < g->kernel_w; kw++) {
                int64_t ih = oh * g->stride_h - g->pad_top + kh * g->dilation_h;
                int64_t iw = ow * g->stride_w - g->pad_left + kw * g->dilation_w;
                if (ih >= 0 && ih < g->in_h && iw >= 0 && iw < g->in_w)
                    sum += (double)w[i * g->channels * taps + c * taps + kh * g->kernel_w + kw] *
                           x[(c * g->in_h + ih) * g->in_w + iw];
            }
    return sum;
}

static void test_direct(tb_isa isa) {
    const tb_nn_kernels *kernels = tb_nn_kernels_for(isa);
    if (!kernels->conv_direct)
        return;
    static const int64_t ms[] = {1, 8, 14, 15, 16, 29, 33};
    for (int ci = 0; ci < CASE_COUNT; ci++) {
        tb_window_geometry g = geometry_of(&cases[ci]);
        if (g.stride_w > kernels->conv_direct_max_stride)
            continue;
        int64_t k = g.channels * g.kernel_h * g.kernel_w, spatial = g.out_h * g.out_w;
        int64_t lanes = kernels->conv_direct_lanes, slots = g.out_h * ((g.out_w + lanes - 1) / lanes);
        int64_t x_count = g.channels * g.in_h * g.in_w;
        float *x = tb_test_guarded_alloc(x_count > 0 ? x_count : 1);
        tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 300 + (uint64_t)ci);
        for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++) {
            int64_t m = ms[mi];
            /* mode 0: no bias, no epilogue; 1: bias + relu (in registers); 2: bias + relu + residual */
            int mode = (ci + mi) % 3;
            bool fused = mode > 0;
            float *w = tb_test_guarded_alloc(m * k > 0 ? m * k : 1), *packed = tb_test_guarded_alloc(m * k > 0 ? m * k : 1);
            float *bias = tb_test_guarded_alloc(m), *residual = tb_test_guarded_alloc(m * spatial);
            float *y = tb_test_guarded_alloc(m * spatial);
            tb_test_fill_uniform(w, m * k, -1.0f, 1.0f, 400 + (uint64_t)(ci * 16 + mi));
            tb_test_fill_uniform(bias, m, -1.0f, 1.0f, 500 + (uint64_t)mi);
            tb_test_fill_uniform(residual, m * spatial, -1.0f, 1.0f, 600 + (uint64_t)ci);
            tb_conv_direct_pack(m, k, kernels->conv_direct_rows, w, NULL, packed);
            TB_CHECK(tb_test_guard_ok(packed, m * k > 0 ? m * k : 1));
            tb_conv_direct_args args = {
                .g = &g, .x = x, .packed = packed, .m = m, .bias = fused ? bias : NULL,
                .activation = fused ? TB_ACTIVATION_RELU : TB_ACTIVATION_NONE, .residual = mode == 2 ? residual : NULL,
                .y = y, .ldy = spatial,
            };
            /* an odd split: the first range ends with a one-vector tile */
            int64_t split = slots / 2 | 1;
            if (split > slots)
                split = slots;
            kernels->conv_direct(&args, 0, split);
            kernels->conv_direct(&args, split, slots);
            double worst = 0.0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < spatial; j++) {
                    double expected = naive(&g, x, w, i, j);
                    if (fused)
                        expected = fmax(expected + bias[i], 0.0) + (mode == 2 ? residual[i * spatial + j] : 0.0);
                    worst = fmax(worst, fabs(expected - y[i * spatial + j]));
                }
            TB_CHECK_MSG(worst < 1e-4, "conv_direct %s case %d m %lld: max error %g", kernels->isa_name, ci,
                         (long long)m, worst);
            TB_CHECK(tb_test_guard_ok(y, m * spatial));
            tb_test_guarded_free(w);
            tb_test_guarded_free(packed);
            tb_test_guarded_free(bias);
            tb_test_guarded_free(residual);
            tb_test_guarded_free(y);
        }
        tb_test_guarded_free(x);
    }
}

/* The panel split: heights differ by at most one, cover [0, m) in order, and never exceed the limit. */
static void test_panel_rows(void) {
    static const int limits[] = {6, 14};
    for (int li = 0; li < 2; li++) {
        int limit = limits[li];
        for (int64_t m = 1; m <= 100; m++) {
            int64_t next = 0;
            int low = limit, high = 0;
            for (int p = 0; p < tb_conv_direct_panels(m, limit); p++) {
                int64_t row0;
                int rows = tb_conv_direct_panel_rows(m, limit, p, &row0);
                TB_CHECK(row0 == next && rows >= 1 && rows <= limit);
                next += rows;
                low = rows < low ? rows : low;
                high = rows > high ? rows : high;
            }
            TB_CHECK_MSG(next == m && high - low <= 1, "panel split of %lld rows by %d", (long long)m, limit);
        }
    }
}

/* Every allocation of one convolution failing in turn: a clean TB_ERR_OUT_OF_MEMORY saying what
 * failed, an untouched (zeroed) output, nothing leaked (the sanitizer build checks), and success once
 * memory is back. Returns whether a failure was the workers' im2col scratch. */
static bool check_out_of_memory(const int64_t xs[4], const int64_t ws[4], bool bn_scale) {
    tb_tensor x, w, scale, out;
    int64_t channels = ws[0];
    TB_CHECK(tb_tensor_empty(TB_F32, 4, xs, TB_ALLOC_ZERO, &x) == TB_OK);
    TB_CHECK(tb_tensor_empty(TB_F32, 4, ws, TB_ALLOC_ZERO, &w) == TB_OK);
    TB_CHECK(tb_tensor_empty(TB_F32, 1, &channels, TB_ALLOC_ZERO, &scale) == TB_OK);
    tb_conv2d_params params = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
    tb_conv2d_epilogue epilogue = {.scale = &scale, .activation = TB_ACTIVATION_RELU};
    tb_status status = TB_ERR_OUT_OF_MEMORY;
    int64_t successes = 0;
    bool scratch_failed = false;
    for (; status == TB_ERR_OUT_OF_MEMORY && successes < 64; successes++) {
        memset(&out, 0, sizeof out);
        tb_alloc_fail_after(successes);
        status = tb_op_conv2d_fused(&x, &w, NULL, &params, bn_scale ? &epilogue : NULL, &out);
        tb_alloc_fail_after(-1);
        if (status != TB_ERR_OUT_OF_MEMORY)
            continue;
        bool scratch = strstr(tb_error_message(), "im2col scratch") != NULL ||
                       strstr(tb_error_message(), "Winograd transforms' scratch") != NULL;
        scratch_failed |= scratch;
        TB_CHECK_MSG(out.storage == NULL && (scratch || strstr(tb_error_message(), "allocation of") != NULL),
                     "after %lld allocations: '%s'", (long long)successes, tb_error_message());
    }
    TB_CHECK_MSG(status == TB_OK && successes > 1, "%s after %lld allocations", tb_status_name(status),
                 (long long)successes);
    tb_tensor_release(&out);
    tb_tensor_release(&x);
    tb_tensor_release(&w);
    tb_tensor_release(&scale);
    return scratch_failed;
}

/* The direct path (staging, packed weights, output), then the packed path (3-wide rows are too narrow
 * for the direct one), the packed path over concatenated images (batch 2 of 3x3 planes) and the
 * Winograd path (24 channels, 192 tiles), with the BN scale applied while packing. Each case has a larger k than the one before (the scalar ISA has no
 * direct path, so its first case already takes the packed one), so it needs a larger scratch and its
 * workers' scratch is allocated, and fails, inside the loop. */
static void test_out_of_memory(void) {
    static const int64_t direct_x[4] = {2, 4, 6, 20}, direct_w[4] = {16, 4, 3, 3};
    static const int64_t packed_x[4] = {1, 8, 3, 3}, packed_w[4] = {16, 8, 3, 3};
    static const int64_t images_x[4] = {2, 16, 3, 3}, images_w[4] = {16, 16, 3, 3};
    static const int64_t winograd_x[4] = {12, 24, 8, 8}, winograd_w[4] = {24, 24, 3, 3}; /* 192 tiles */
    /* without the packed-weight cache, whose allocations (absorbed when they fail) would move the
     * scratch's turn; then with it: every failure still clean */
    const bool prepack = tb_gemm_prepack_enabled();
    tb_gemm_set_prepack(false);
    check_out_of_memory(direct_x, direct_w, false);
    TB_CHECK_MSG(check_out_of_memory(packed_x, packed_w, true), "packed path: its scratch never failed");
    TB_CHECK_MSG(check_out_of_memory(images_x, images_w, true), "concatenated images: their scratch never failed");
    const int64_t winograd_calls = tb_winograd_calls();
    TB_CHECK_MSG(check_out_of_memory(winograd_x, winograd_w, true), "Winograd path: its scratch never failed");
    TB_CHECK_MSG(tb_winograd_calls() > winograd_calls, "the Winograd case did not take the Winograd path");
    tb_gemm_set_prepack(true);
    (void)check_out_of_memory(direct_x, direct_w, false);
    (void)check_out_of_memory(packed_x, packed_w, true);
    tb_gemm_set_prepack(prepack);
}

/* The packed-weight cache on the weight's storage: packed on the second call, reused on the third with
 * the same bits as packing every call; a write (version bump), a new BN scale and another view of the
 * same storage each repack; memory the caller does not version is never cached. Direct path (wide
 * rows), packed path (narrow rows), with and without a BN scale. */
static void test_weight_cache(void) {
    static const int64_t shapes[2][2][4] = {{{2, 4, 6, 20}, {16, 4, 3, 3}}, {{1, 8, 3, 3}, {16, 8, 3, 3}}};
    const bool prepack = tb_gemm_prepack_enabled();
    for (int c = 0; c < 4; c++) {
        const int64_t *xs = shapes[c / 2][0], *ws = shapes[c / 2][1];
        const bool bn = c % 2 == 1;
        int64_t channels = ws[0], wshape[4] = {2 * ws[0], ws[1], ws[2], ws[3]}; /* two weights in one storage */
        tb_tensor x, w2, w, other, scale, got, want;
        TB_CHECK(tb_tensor_empty(TB_F32, 4, xs, 0, &x) == TB_OK && tb_tensor_empty(TB_F32, 4, wshape, 0, &w2) == TB_OK);
        TB_CHECK(tb_tensor_empty(TB_F32, 1, &channels, 0, &scale) == TB_OK);
        float *xd = tb_tensor_data(&x), *wd = tb_tensor_data(&w2), *sd = tb_tensor_data(&scale);
        for (int64_t i = 0; i < xs[0] * xs[1] * xs[2] * xs[3]; i++)
            xd[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
        for (int64_t i = 0; i < 2 * ws[0] * ws[1] * ws[2] * ws[3]; i++)
            wd[i] = (float)((i * 53) % 31) / 15.0f - 1.0f;
        for (int64_t i = 0; i < channels; i++)
            sd[i] = 0.5f + (float)i / 8.0f;
        const int64_t half = ws[0] * ws[1] * ws[2] * ws[3];
        TB_CHECK(tb_tensor_from_storage(w2.storage, TB_F32, 4, ws, NULL, 0, &w) == TB_OK);
        TB_CHECK(tb_tensor_from_storage(w2.storage, TB_F32, 4, ws, NULL, half, &other) == TB_OK);
        tb_conv2d_params params = {.stride = {1, 1}, .padding = {1, 1}, .dilation = {1, 1}, .groups = 1};
        tb_conv2d_epilogue epilogue = {.scale = bn ? &scale : NULL, .activation = TB_ACTIVATION_NONE};
        bool same = true;
        for (int step = 0; step < 7; step++) {
            const tb_tensor *weight = step == 5 || step == 6 ? &other : &w;
            if (step == 3) {
                wd[7] += 0.25f;
                w2.storage->version++;
            }
            if (step == 4 && bn)
                sd[3] *= 2.0f;
            tb_weight_cache_counts before, after;
            tb_weight_cache_counts_get(&before);
            tb_gemm_set_prepack(true);
            TB_CHECK(tb_op_conv2d_fused(&x, weight, NULL, &params, &epilogue, &got) == TB_OK);
            tb_weight_cache_counts_get(&after);
            tb_gemm_set_prepack(false);
            TB_CHECK(tb_op_conv2d_fused(&x, weight, NULL, &params, &epilogue, &want) == TB_OK);
            same &= memcmp(tb_tensor_data(&got), tb_tensor_data(&want), (size_t)tb_tensor_numel(&got) * sizeof(float)) == 0;
            /* a pack on the second call at one key: steps 1, 4 (the write at 3 rekeyed; with BN the new
             * scale at 4 rekeys again instead) and 6 (the other view at 5 rekeyed); a hit at 2 */
            const int64_t packs = after.conv_packs - before.conv_packs, hits = after.conv_hits - before.conv_hits;
            static const int64_t plain[7][2] = {{0, 0}, {1, 0}, {0, 1}, {0, 0}, {1, 0}, {0, 0}, {1, 0}};
            static const int64_t scaled[7][2] = {{0, 0}, {1, 0}, {0, 1}, {0, 0}, {0, 0}, {0, 0}, {1, 0}};
            const int64_t *expect = bn ? scaled[step] : plain[step];
            TB_CHECK_MSG(packs == expect[0] && hits == expect[1], "case %d step %d: %lld packs, %lld hits", c, step,
                         (long long)packs, (long long)hits);
            tb_tensor_release(&got);
            tb_tensor_release(&want);
        }
        TB_CHECK_MSG(same, "case %d: cached packed weights gave other bits", c);
        /* wrapped memory nobody versions: never cached */
        tb_storage *wrapped = NULL;
        tb_tensor ww;
        TB_CHECK(tb_storage_wrap(wd, (size_t)half * sizeof(float), false, NULL, NULL, &wrapped) == TB_OK);
        TB_CHECK(tb_tensor_from_storage(wrapped, TB_F32, 4, ws, NULL, 0, &ww) == TB_OK);
        tb_storage_release(wrapped);
        tb_gemm_set_prepack(true);
        tb_weight_cache_counts before, after;
        tb_weight_cache_counts_get(&before);
        for (int i = 0; i < 3; i++) {
            TB_CHECK(tb_op_conv2d_fused(&x, &ww, NULL, &params, &epilogue, &got) == TB_OK);
            tb_tensor_release(&got);
        }
        tb_weight_cache_counts_get(&after);
        TB_CHECK(after.conv_packs == before.conv_packs && after.conv_hits == before.conv_hits);
        tb_tensor_release(&ww);
        tb_tensor_release(&x);
        tb_tensor_release(&w);
        tb_tensor_release(&other);
        tb_tensor_release(&w2);
        tb_tensor_release(&scale);
    }
    tb_gemm_set_prepack(prepack);
}

int main(void) {
    test_panel_rows();
    test_out_of_memory();
    test_weight_cache();
    static const tb_isa isas[] = {TB_ISA_SCALAR, TB_ISA_AVX2, TB_ISA_AVX512};
    for (int i = 0; i < 3; i++)
        if (tb_isa_supported(isas[i]))
            test_direct(isas[i]);
    return tb_test_finish("conv_direct");
}
