/* Tests of the Winograd F(2x2, 3x3) convolution (kernels/conv_winograd.h) at every ISA the CPU has,
 * against a naive double-precision convolution: paddings 0, 1 and 2, odd output sizes (partial tiles),
 * tiles of one block spanning rows and images, blocks and output-channel parts of several sizes
 * (thread counts 1..64), channel counts that are not whole register tiles, input channels over several
 * k blocks (a forced tiny kc), a BN scale folded while packing, the bias / relu / residual epilogue,
 * and guard bytes around every buffer the kernels write. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_winograd.h"
#include "kernels/gemm_internal.h"
#include "kernels/nn_kernels.h"
#include "tb_test.h"

typedef struct winograd_case {
    int64_t batch, in_channels, out_channels, in_h, in_w, pad;
} winograd_case;

static const winograd_case cases[] = {
    {1, 16, 16, 8, 8, 1},  {2, 17, 33, 7, 11, 1}, {3, 5, 7, 5, 5, 1},   {1, 24, 20, 9, 6, 0},
    {2, 40, 13, 6, 9, 2},  {1, 3, 70, 4, 4, 1},   {2, 64, 64, 14, 14, 1}, {1, 9, 6, 3, 3, 0},
    {4, 12, 30, 2, 2, 1},  {1, 20, 140, 6, 5, 1},
};
enum { CASE_COUNT = sizeof cases / sizeof cases[0] };

/* 64-byte aligned (the micro-kernels load B panels aligned) with 16 sentinel floats after n. */
static float *aligned_guarded(int64_t n) {
    float *p = aligned_alloc(64, (size_t)((n + 16 + 15) / 16 * 16) * sizeof(float));
    if (p)
        for (int i = 0; i < 16; i++)
            p[n + i] = -12345.0f;
    return p;
}

static int aligned_guard_ok(const float *p, int64_t n) {
    for (int i = 0; i < 16; i++)
        if (p[n + i] != -12345.0f)
            return 0;
    return 1;
}

static double naive(const winograd_case *c, const float *x, const float *w, const float *scale, int64_t n,
                    int64_t co, int64_t oh, int64_t ow) {
    double sum = 0.0;
    for (int64_t ci = 0; ci < c->in_channels; ci++)
        for (int64_t kh = 0; kh < 3; kh++)
            for (int64_t kw = 0; kw < 3; kw++) {
                int64_t ih = oh - c->pad + kh, iw = ow - c->pad + kw;
                if (ih < 0 || ih >= c->in_h || iw < 0 || iw >= c->in_w)
                    continue;
                float weight = w[((co * c->in_channels + ci) * 3 + kh) * 3 + kw];
                if (scale)
                    weight *= scale[co];
                sum += (double)weight * x[((n * c->in_channels + ci) * c->in_h + ih) * c->in_w + iw];
            }
    return sum;
}

/* One plan (isa, threads, forced kc) over one case: every task, then every output checked. mode 0:
 * no bias, no epilogue, no scale; 1: bias + relu + scale; 2: bias + relu + residual; 3: bias + gelu
 * (through the micro-kernel table's epilogue) + residual. */
static void run_case(tb_isa isa, const winograd_case *c, int64_t threads, int mode, int ci) {
    const int64_t out_h = c->in_h + 2 * c->pad - 2, out_w = c->in_w + 2 * c->pad - 2;
    tb_winograd_plan plan;
    tb_winograd_init(&plan, isa, c->batch, c->in_channels, c->out_channels, c->in_h, c->in_w, out_h, out_w, c->pad,
                     c->pad, threads);
    const int64_t x_count = c->batch * c->in_channels * c->in_h * c->in_w;
    const int64_t y_count = c->batch * c->out_channels * out_h * out_w, w_count = c->out_channels * c->in_channels * 9;
    float *x = tb_test_guarded_alloc(x_count), *w = tb_test_guarded_alloc(w_count);
    float *bias = tb_test_guarded_alloc(c->out_channels), *scale = tb_test_guarded_alloc(c->out_channels);
    float *residual = tb_test_guarded_alloc(y_count), *y = tb_test_guarded_alloc(y_count);
    float *packed = tb_test_guarded_alloc(tb_winograd_weight_floats(&plan));
    float *v = aligned_guarded(tb_winograd_v_floats(&plan)), *m = aligned_guarded(tb_winograd_m_floats(&plan));
    float *work = aligned_guarded(tb_winograd_work_floats(&plan));
    tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 700 + (uint64_t)ci);
    tb_test_fill_uniform(w, w_count, -0.5f, 0.5f, 800 + (uint64_t)ci);
    tb_test_fill_uniform(bias, c->out_channels, -1.0f, 1.0f, 900 + (uint64_t)ci);
    tb_test_fill_uniform(scale, c->out_channels, 0.5f, 1.5f, 950 + (uint64_t)ci);
    tb_test_fill_uniform(residual, y_count, -1.0f, 1.0f, 990 + (uint64_t)ci);
    for (int64_t i = 0; i < y_count; i++)
        y[i] = NAN; /* every output must be written */
    const float *use_scale = mode == 1 ? scale : NULL;
    tb_winograd_pack_weight(&plan, w, use_scale, packed);
    const tb_winograd_args args = {
        .packed = packed, .w = w, .row_scale = use_scale, .x = x, .y = y, .bias = mode ? bias : NULL,
        .activation = mode == 3 ? TB_ACTIVATION_GELU : mode ? TB_ACTIVATION_RELU : TB_ACTIVATION_NONE,
        .residual = mode >= 2 ? residual : NULL,
    };
    for (int64_t block = 0; block < tb_winograd_blocks(&plan); block++)
        for (int64_t part = 0; part < tb_winograd_parts(&plan); part++)
            tb_winograd_run(&plan, &args, block, part, v, m, work);
    double worst = 0.0;
    for (int64_t n = 0; n < c->batch; n++)
        for (int64_t co = 0; co < c->out_channels; co++)
            for (int64_t oh = 0; oh < out_h; oh++)
                for (int64_t ow = 0; ow < out_w; ow++) {
                    int64_t at = ((n * c->out_channels + co) * out_h + oh) * out_w + ow;
                    double expected = naive(c, x, w, use_scale, n, co, oh, ow);
                    if (mode == 3) {
                        expected += bias[co];
                        expected = 0.5 * expected * (1.0 + erf(expected / sqrt(2.0))) + residual[at];
                    } else if (mode) {
                        expected = fmax(expected + bias[co], 0.0) + (mode == 2 ? residual[at] : 0.0);
                    }
                    double error = fabs(expected - y[at]);
                    worst = isnan(error) ? INFINITY : fmax(worst, error);
                }
    /* |sum| <= 9 C_in * 0.5 * 1.5; a few roundings of f32 sums of that size */
    double bound = 1e-6 * (double)(c->in_channels * 9) + 1e-5;
    TB_CHECK_MSG(worst <= bound, "winograd %s case %d threads %lld mode %d: max error %g (bound %g)",
                 tb_isa_name(isa), ci, (long long)threads, mode, worst, bound);
    TB_CHECK(tb_test_guard_ok(y, y_count));
    TB_CHECK(tb_test_guard_ok(packed, tb_winograd_weight_floats(&plan)));
    TB_CHECK(aligned_guard_ok(v, tb_winograd_v_floats(&plan)));
    TB_CHECK(aligned_guard_ok(m, tb_winograd_m_floats(&plan)));
    TB_CHECK(aligned_guard_ok(work, tb_winograd_work_floats(&plan)));
    tb_test_guarded_free(x);
    tb_test_guarded_free(w);
    tb_test_guarded_free(bias);
    tb_test_guarded_free(scale);
    tb_test_guarded_free(residual);
    tb_test_guarded_free(y);
    tb_test_guarded_free(packed);
    free(v);
    free(m);
    free(work);
}

static void test_isa(tb_isa isa) {
    static const int64_t threads[] = {1, 3, 64};
    for (int ci = 0; ci < CASE_COUNT; ci++)
        for (int ti = 0; ti < 3; ti++)
            run_case(isa, &cases[ci], threads[ti], (ci + ti) % 4, ci);
    /* input channels over several k blocks: kc forced to 16 (the last block short for 17, 24, 40) */
    tb_gemm_set_blocking_override(0, 16, 0);
    for (int ci = 0; ci < CASE_COUNT; ci++)
        run_case(isa, &cases[ci], 2, ci % 4, ci);
    tb_gemm_set_blocking_override(0, 0, 0);
}

/* The plan splits work into at least `threads` tasks where the output channels allow it, and its
 * blocks are whole register tiles. */
static void test_plan_shapes(void) {
    tb_winograd_plan plan;
    tb_winograd_init(&plan, TB_ISA_SCALAR, 1, 512, 512, 7, 7, 7, 7, 1, 1, 2);
    TB_CHECK(plan.block_tiles % plan.nr == 0 && plan.part_rows % plan.mr == 0);
    TB_CHECK_MSG(tb_winograd_blocks(&plan) * tb_winograd_parts(&plan) >= 2, "tasks %lld",
                 (long long)(tb_winograd_blocks(&plan) * tb_winograd_parts(&plan)));
    TB_CHECK(plan.tiles == 16);
    tb_winograd_init(&plan, TB_ISA_SCALAR, 8, 64, 64, 56, 56, 56, 56, 1, 1, 2);
    TB_CHECK(plan.tiles == 8 * 28 * 28 && tb_winograd_parts(&plan) == 1);
}

/* NaN, infinities and values whose transform overflows: every output equals the direct convolution's
 * in kind (NaN where it is NaN, the same infinity, finite and close where it is finite), so special
 * values stay in the windows that hold them instead of spreading over the 2x2 tiles. */
static void test_special_values(tb_isa isa) {
    const winograd_case c = {2, 20, 18, 9, 10, 1};
    const int64_t out_h = c.in_h, out_w = c.in_w;
    tb_winograd_plan plan;
    tb_winograd_init(&plan, isa, c.batch, c.in_channels, c.out_channels, c.in_h, c.in_w, out_h, out_w, 1, 1, 2);
    const int64_t x_count = c.batch * c.in_channels * c.in_h * c.in_w, y_count = c.batch * c.out_channels * out_h * out_w;
    const int64_t w_count = c.out_channels * c.in_channels * 9;
    float *x = tb_test_guarded_alloc(x_count), *w = tb_test_guarded_alloc(w_count), *y = tb_test_guarded_alloc(y_count);
    float *packed = tb_test_guarded_alloc(tb_winograd_weight_floats(&plan));
    float *v = aligned_guarded(tb_winograd_v_floats(&plan)), *m = aligned_guarded(tb_winograd_m_floats(&plan));
    float *work = aligned_guarded(tb_winograd_work_floats(&plan));
    tb_test_fill_uniform(x, x_count, -1.0f, 1.0f, 1234);
    tb_test_fill_uniform(w, w_count, -0.5f, 0.5f, 1235);
    /* image 0: a NaN in channel 3 and +inf in channel 7 (at different places); image 1: a pair
     * +-3e38 whose direct sums stay finite but whose transformed differences overflow */
    x[(0 * c.in_channels + 3) * c.in_h * c.in_w + 4 * c.in_w + 5] = NAN;
    x[(0 * c.in_channels + 7) * c.in_h * c.in_w + 1 * c.in_w + 8] = INFINITY;
    x[(1 * c.in_channels + 2) * c.in_h * c.in_w + 6 * c.in_w + 2] = 3e38f;
    x[(1 * c.in_channels + 2) * c.in_h * c.in_w + 6 * c.in_w + 4] = -3e38f;
    for (int q = 0; q < 9; q++) /* channel 2's filters: 1e-38 scale so that products stay small */
        for (int64_t co = 0; co < c.out_channels; co++)
            w[(co * c.in_channels + 2) * 9 + q] *= 1e-30f;
    tb_winograd_pack_weight(&plan, w, NULL, packed);
    const tb_winograd_args args = {.packed = packed, .w = w, .x = x, .y = y, .activation = TB_ACTIVATION_NONE};
    for (int64_t block = 0; block < tb_winograd_blocks(&plan); block++)
        for (int64_t part = 0; part < tb_winograd_parts(&plan); part++)
            tb_winograd_run(&plan, &args, block, part, v, m, work);
    int64_t mismatches = 0, nans = 0, infs = 0;
    for (int64_t n = 0; n < c.batch; n++)
        for (int64_t co = 0; co < c.out_channels; co++)
            for (int64_t oh = 0; oh < out_h; oh++)
                for (int64_t ow = 0; ow < out_w; ow++) {
                    const double expected = naive(&c, x, w, NULL, n, co, oh, ow);
                    const float got = y[((n * c.out_channels + co) * out_h + oh) * out_w + ow];
                    bool same = isnan(expected) ? isnan(got)
                                : isinf(expected) ? got == (float)expected
                                                  : isfinite(got) && fabs(got - expected) <= 1e-4 * (1 + fabs(expected));
                    mismatches += !same;
                    nans += isnan(expected);
                    infs += isinf(expected) != 0;
                }
    TB_CHECK_MSG(mismatches == 0, "winograd %s special values: %lld outputs differ from the direct convolution",
                 tb_isa_name(isa), (long long)mismatches);
    TB_CHECK_MSG(nans > 0 && infs > 0, "the case must reach NaN and infinite outputs (%lld, %lld)", (long long)nans,
                 (long long)infs);
    TB_CHECK(tb_test_guard_ok(y, y_count));
    tb_test_guarded_free(x);
    tb_test_guarded_free(w);
    tb_test_guarded_free(y);
    tb_test_guarded_free(packed);
    free(v);
    free(m);
    free(work);
}

/* The weight transform gives the same bits at every ISA (its sums are exact in double), including
 * 1e30 and 1e-30 weights side by side and a folded scale. */
static void test_filters_same_bits(tb_isa isa) {
    enum { COUNT = 61 };
    float g[COUNT * 9], scale = 0.7f, expected[16 * 64], got[16 * 64];
    tb_test_fill_uniform(g, COUNT * 9, -2.0f, 2.0f, 4242);
    g[5] = 1e30f;
    g[6] = 1e-30f;
    g[7] = -3e-38f;
    for (int scaled = 0; scaled < 2; scaled++) {
        tb_winograd_filters_ref(g, COUNT, scaled ? &scale : NULL, expected, 64);
        tb_nn_kernels_for(isa)->winograd_filters(g, COUNT, scaled ? &scale : NULL, got, 64);
        int differ = 0;
        for (int xi = 0; xi < 16; xi++)
            differ += memcmp(expected + xi * 64, got + xi * 64, COUNT * sizeof(float)) != 0;
        TB_CHECK_MSG(differ == 0, "winograd filters %s (scaled %d): %d positions differ from the reference",
                     tb_isa_name(isa), scaled, differ);
        /* and the reference against the definition G g G^T in long double */
        double worst = 0.0;
        for (int c = 0; c < COUNT; c++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    static const long double G[4][3] = {{1, 0, 0}, {0.5L, 0.5L, 0.5L}, {0.5L, -0.5L, 0.5L}, {0, 0, 1}};
                    long double sum = 0;
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++) {
                            float weight = scaled ? g[c * 9 + kh * 3 + kw] * scale : g[c * 9 + kh * 3 + kw];
                            sum += G[i][kh] * G[j][kw] * weight;
                        }
                    worst = fmax(worst, (double)fabsl((long double)expected[(4 * i + j) * 64 + c] - (float)sum));
                }
        TB_CHECK_MSG(worst == 0.0, "winograd filters: differ from G g G^T rounded once by %g", worst);
    }
}

int main(void) {
    test_plan_shapes();
    static const tb_isa isas[] = {TB_ISA_SCALAR, TB_ISA_AVX2, TB_ISA_AVX512};
    for (int i = 0; i < 3; i++)
        if (tb_isa_supported(isas[i])) {
            test_isa(isas[i]);
            test_special_values(isas[i]);
            test_filters_same_bits(isas[i]);
        }
    return tb_test_finish("conv_winograd");
}
