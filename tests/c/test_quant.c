/* Tests of the quant layer: the int8 / int4 formats (round trip, NaN and inf policy, bad dims) and
 * every quantized-matmul kernel this CPU runs against the scalar reference, over the shapes,
 * both activation modes, strides, bias, 1 and 2 threads, plus one LM-head-sized GEMV. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "torchburn/cpu.h"
#include "torchburn/quant.h"
#include "torchburn/thread_pool.h"

static uint64_t rng_state = 0x1234567ull;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

/* Approximately N(0, 1) (sum of uniforms), deterministic. */
static void fill_normal(float *out, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float sum = 0.0f;
        for (int j = 0; j < 12; j++)
            sum += (float)(next_u32() >> 8) / 16777216.0f;
        out[i] = sum - 6.0f;
    }
}

typedef struct quantized {
    tb_quant_weight view;
    void *data;
    float *scales;
    float *dequant; /* f32[N, K] */
} quantized;

static int make_weights(tb_quant_type type, int64_t n, int64_t k, int64_t group, quantized *out) {
    memset(out, 0, sizeof *out);
    float *w = malloc((size_t)(n * k + 1) * sizeof(float));
    int64_t row_bytes = type == TB_QUANT_INT8 ? k : k / 2;
    int64_t scales = type == TB_QUANT_INT8 ? n : n * (k / group);
    out->data = malloc((size_t)(n * row_bytes + 1));
    out->scales = malloc((size_t)(scales + 1) * sizeof(float));
    out->dequant = malloc((size_t)(n * k + 1) * sizeof(float));
    if (!w || !out->data || !out->scales || !out->dequant) {
        free(w);
        return 0;
    }
    fill_normal(w, n * k);
    tb_status status = type == TB_QUANT_INT8 ? tb_quantize_int8(w, n, k, out->data, out->scales)
                                             : tb_quantize_int4_grouped(w, n, k, group, out->data, out->scales);
    if (status == TB_OK)
        status = type == TB_QUANT_INT8 ? tb_dequantize_int8(out->data, out->scales, n, k, out->dequant)
                                       : tb_dequantize_int4_grouped(out->data, out->scales, n, k, group, out->dequant);
    if (status == TB_OK)
        status = tb_quant_weight_init(type, n, k, group, out->data, out->scales, &out->view);
    free(w);
    TB_CHECK_MSG(status == TB_OK, "%s", tb_error_message());
    return status == TB_OK;
}

static void free_weights(quantized *q) {
    free(q->data);
    free(q->scales);
    free(q->dequant);
}

static void test_round_trip(void) {
    const int64_t n = 64, k = 4096;
    float *w = malloc(sizeof(float) * n * k), *back = malloc(sizeof(float) * n * k);
    int8_t *q8 = malloc((size_t)(n * k));
    uint8_t *q4 = malloc((size_t)(n * k / 2));
    float *scales = malloc(sizeof(float) * n * (k / 32));
    fill_normal(w, n * k);
    TB_CHECK(tb_quantize_int8(w, n, k, q8, scales) == TB_OK);
    TB_CHECK(tb_dequantize_int8(q8, scales, n, k, back) == TB_OK);
    double se = 0.0;
    for (int64_t i = 0; i < n * k; i++)
        se += (double)(w[i] - back[i]) * (w[i] - back[i]);
    double rmse8 = sqrt(se / (double)(n * k));
    TB_CHECK_MSG(rmse8 <= 0.009, /* measured 0.0081 */ "int8 rmse %g", rmse8);
    const int64_t groups[] = {32, 64, 128, 256};
    const double bounds[] = {0.10, 0.11, 0.12, 0.13}; /* measured 0.095 / 0.105 / 0.114 / 0.122 */
    for (int g = 0; g < 4; g++) {
        TB_CHECK(tb_quantize_int4_grouped(w, n, k, groups[g], q4, scales) == TB_OK);
        TB_CHECK(tb_dequantize_int4_grouped(q4, scales, n, k, groups[g], back) == TB_OK);
        se = 0.0;
        for (int64_t i = 0; i < n * k; i++)
            se += (double)(w[i] - back[i]) * (w[i] - back[i]);
        double rmse4 = sqrt(se / (double)(n * k));
        TB_CHECK_MSG(rmse4 <= bounds[g], "int4 g%lld rmse %g", (long long)groups[g], rmse4);
        printf("round trip rmse: int4 g%lld %.4f\n", (long long)groups[g], rmse4);
    }
    printf("round trip rmse: int8 %.5f\n", rmse8);
    free(w);
    free(back);
    free(q8);
    free(q4);
    free(scales);
}

static void test_special_values(void) {
    /* One row of 64: a NaN in group 0 of 2 (g32) makes only that group NaN. Zero row gives scale 0. */
    float w[2 * 64], back[2 * 64], scales[4];
    uint8_t q4[64];
    int8_t q8[128];
    fill_normal(w, 64);
    memset(w + 64, 0, 64 * sizeof(float));
    w[5] = NAN;
    TB_CHECK(tb_quantize_int4_grouped(w, 2, 64, 32, q4, scales) == TB_OK);
    TB_CHECK(isnan(scales[0]) && isfinite(scales[1]) && scales[2] == 0.0f && scales[3] == 0.0f);
    TB_CHECK(tb_dequantize_int4_grouped(q4, scales, 2, 64, 32, back) == TB_OK);
    int group0_nan = 1, rest_finite = 1;
    for (int i = 0; i < 32; i++)
        group0_nan &= isnan(back[i]);
    for (int i = 32; i < 128; i++)
        rest_finite &= isfinite(back[i]) && (i < 64 || back[i] == 0.0f);
    TB_CHECK(group0_nan && rest_finite);
    TB_CHECK(tb_quantize_int8(w, 2, 64, q8, scales) == TB_OK);
    TB_CHECK(isnan(scales[0]) && scales[1] == 0.0f);
    /* inf is an error that names the element */
    w[5] = 1.0f;
    w[64 + 7] = -INFINITY;
    TB_CHECK(tb_quantize_int4_grouped(w, 2, 64, 32, q4, scales) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK_MSG(strstr(tb_error_message(), "weight[1, 7] is -inf") != NULL, "%s", tb_error_message());
    TB_CHECK(tb_quantize_int8(w, 2, 64, q8, scales) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "weight[1, 7]") != NULL);
    /* NaN weights make NaN outputs through every kernel */
    w[64 + 7] = NAN;
    TB_CHECK(tb_quantize_int4_grouped(w, 2, 64, 32, q4, scales) == TB_OK);
    tb_quant_weight view;
    TB_CHECK(tb_quant_weight_init(TB_QUANT_INT4, 2, 64, 32, q4, scales, &view) == TB_OK);
    float x[64], y[2];
    fill_normal(x, 64);
    for (int kernel = TB_QUANT_KERNEL_SCALAR; kernel < TB_QUANT_KERNEL_COUNT; kernel++) {
        for (int act = 0; act < TB_QUANT_ACT_COUNT; act++) {
            if (!tb_quant_kernel_supported((tb_quant_kernel)kernel))
                continue;
            tb_quant_matmul_desc d = {.x = x, .m = 1, .x_row_stride = 64, .y = y, .y_row_stride = 2,
                                      .act = (tb_quant_act)act, .kernel = (tb_quant_kernel)kernel};
            TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_OK);
            TB_CHECK_MSG(isfinite(y[0]) && isnan(y[1]), "kernel %s act %d: %g %g",
                         tb_quant_kernel_name((tb_quant_kernel)kernel), act, y[0], y[1]);
            /* an activation NaN: A32 propagates per IEEE, A8 makes the whole row NaN */
            x[3] = NAN;
            TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_OK);
            TB_CHECK(isnan(y[0]) && isnan(y[1]));
            fill_normal(x, 64);
        }
    }
}

static void test_bad_input(void) {
    float w[64] = {0}, scales[4];
    uint8_t q4[32];
    int8_t q8[64];
    TB_CHECK(tb_quantize_int4_grouped(w, 1, 64, 48, q4, scales) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "group_size") != NULL);
    TB_CHECK(tb_quantize_int4_grouped(w, 1, 48, 32, q4, scales) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "not a multiple of group_size") != NULL);
    TB_CHECK(tb_quantize_int8(w, -1, 64, q8, scales) == TB_ERR_SHAPE);
    TB_CHECK(tb_quantize_int8(NULL, 1, 64, q8, scales) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_dequantize_int4_grouped(q4, scales, 1, 64, 100, w) == TB_ERR_INVALID_ARGUMENT);
    tb_quant_weight view;
    TB_CHECK(tb_quant_weight_init(TB_QUANT_INT4, 1, 64, 32, NULL, scales, &view) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_quant_weight_init((tb_quant_type)7, 1, 64, 32, q4, scales, &view) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_quant_weight_init(TB_QUANT_INT4, 1, 64, 32, q4, scales, &view) == TB_OK);
    float x[128] = {0}, y[4];
    tb_quant_matmul_desc d = {.x = x, .m = 2, .x_row_stride = 32, .y = y, .y_row_stride = 1};
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_ERR_SHAPE); /* x stride < K */
    d.x_row_stride = 64;
    d.m = -1;
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_ERR_SHAPE);
    d.m = 1;
    d.y = NULL;
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_ERR_INVALID_ARGUMENT);
    d.y = y;
    d.kernel = (tb_quant_kernel)99;
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_ERR_INVALID_ARGUMENT);
    d.kernel = TB_QUANT_KERNEL_AUTO;
    TB_CHECK(tb_quant_matmul_ex(NULL, &d) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_OK);
    tb_quant_kernel kernel;
    TB_CHECK(tb_quant_kernel_from_name("avx512vnni", &kernel) == TB_OK && kernel == TB_QUANT_KERNEL_AVX512VNNI);
    TB_CHECK(tb_quant_kernel_from_name("sse", &kernel) == TB_ERR_INVALID_ARGUMENT);
}

/* Checks one (type, N, K, G, M) case for every supported kernel and both activation modes. */
static void check_case(tb_quant_type type, int64_t n, int64_t k, int64_t group, int64_t m) {
    quantized q;
    if (!make_weights(type, n, k, group, &q))
        return;
    const int64_t ldx = k + 3, ldy = n + 5;
    float *x = malloc(sizeof(float) * (size_t)(m * ldx)), *bias = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)(m * ldy)), *ref_a8 = malloc(sizeof(float) * (size_t)(m * ldy));
    float *y = tb_test_guarded_alloc(m * ldy);
    double *abs_sum = malloc(sizeof(double) * (size_t)(m * n)), *w_abs = malloc(sizeof(double) * (size_t)n);
    float *amax = malloc(sizeof(float) * (size_t)m);
    fill_normal(x, m * ldx);
    fill_normal(bias, n);
    for (int64_t i = 0; i < m; i++) {
        amax[i] = 0.0f;
        for (int64_t kk = 0; kk < k; kk++)
            amax[i] = fabsf(x[i * ldx + kk]) > amax[i] ? fabsf(x[i * ldx + kk]) : amax[i];
    }
    for (int64_t j = 0; j < n; j++) {
        w_abs[j] = 0.0;
        for (int64_t kk = 0; kk < k; kk++)
            w_abs[j] += fabs((double)q.dequant[j * k + kk]);
        for (int64_t i = 0; i < m; i++) {
            double s = 0.0;
            for (int64_t kk = 0; kk < k; kk++)
                s += fabs((double)x[i * ldx + kk] * q.dequant[j * k + kk]);
            abs_sum[i * n + j] = s;
        }
    }
    tb_quant_matmul_desc d = {.x = x, .m = m, .x_row_stride = ldx, .y = ref, .y_row_stride = ldy, .bias = bias,
                              .act = TB_QUANT_ACT_F32, .kernel = TB_QUANT_KERNEL_SCALAR};
    TB_CHECK(tb_quant_matmul_ex(&q.view, &d) == TB_OK);
    d.y = ref_a8;
    d.act = TB_QUANT_ACT_INT8;
    TB_CHECK(tb_quant_matmul_ex(&q.view, &d) == TB_OK);
    /* the scalar references against each other: A8 is within the activation quantization error */
    int a8_bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double bound = (amax[i] / 127.0) * 0.5 * 1.001 * w_abs[j] + 1e-5 * abs_sum[i * n + j] + 1e-6;
            a8_bad += fabs((double)ref_a8[i * ldy + j] - ref[i * ldy + j]) > bound;
        }
    TB_CHECK_MSG(a8_bad == 0, "A8 scalar vs A32 scalar: %d outputs outside the bound (N=%lld K=%lld)", a8_bad,
                 (long long)n, (long long)k);
    for (int kernel = TB_QUANT_KERNEL_SCALAR; kernel < TB_QUANT_KERNEL_COUNT; kernel++) {
        if (!tb_quant_kernel_supported((tb_quant_kernel)kernel))
            continue;
        for (int act = 0; act < TB_QUANT_ACT_COUNT; act++) {
            for (int threads = 1; threads <= 2; threads++) {
                TB_CHECK(tb_set_num_threads(threads) == TB_OK);
                const float fill = 12345.0f;
                for (int64_t i = 0; i < m * ldy; i++)
                    y[i] = fill;
                d.y = y;
                d.act = (tb_quant_act)act;
                d.kernel = (tb_quant_kernel)kernel;
                TB_CHECK(tb_quant_matmul_ex(&q.view, &d) == TB_OK);
                const float *expect = act == TB_QUANT_ACT_F32 ? ref : ref_a8;
                int bad = 0, gap_bad = 0;
                double worst = 0.0;
                for (int64_t i = 0; i < m; i++) {
                    for (int64_t j = 0; j < n; j++) {
                        double diff = fabs((double)y[i * ldy + j] - expect[i * ldy + j]);
                        /* f32 summation-order rounding; int8 A8 kernels are bit-exact with the reference */
                        double tol = (type == TB_QUANT_INT8 && act == TB_QUANT_ACT_INT8)
                                         ? 0.0
                                         : 1e-5 * abs_sum[i * n + j] + 1e-6 * fabs((double)bias[j]);
                        bad += !(diff <= tol);
                        worst = diff > worst ? diff : worst;
                    }
                    for (int64_t j = n; j < ldy; j++)
                        gap_bad += y[i * ldy + j] != fill;
                }
                TB_CHECK_MSG(bad == 0 && gap_bad == 0,
                             "%s %s %s N=%lld K=%lld G=%lld M=%lld threads=%d: %d bad (worst %g), %d gap writes",
                             tb_quant_kernel_name((tb_quant_kernel)kernel), type == TB_QUANT_INT8 ? "int8" : "int4",
                             act ? "A8" : "A32", (long long)n, (long long)k, (long long)group, (long long)m, threads,
                             bad, worst, gap_bad);
                TB_CHECK(tb_test_guard_ok(y, m * ldy));
                if (getenv("TB_QUANT_TEST_VERBOSE"))
                    printf("%-10s %s %s N=%-6lld K=%-5lld G=%-4lld M=%lld worst diff %.3g\n",
                           tb_quant_kernel_name((tb_quant_kernel)kernel), type == TB_QUANT_INT8 ? "int8" : "int4",
                           act ? "A8 " : "A32", (long long)n, (long long)k, (long long)group, (long long)m, worst);
            }
        }
    }
    free(x);
    free(bias);
    free(ref);
    free(ref_a8);
    tb_test_guarded_free(y);
    free(abs_sum);
    free(w_abs);
    free(amax);
    free_weights(&q);
}

static void test_kernels_against_reference(void) {
    const int64_t ks[] = {64, 896, 4096, 4864};
    const int64_t ns[] = {1, 7, 896};
    const int64_t ms[] = {1, 3, 8};
    for (size_t a = 0; a < sizeof ks / sizeof ks[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            int64_t m = ms[(a + b) % 3];
            if (ns[b] * ks[a] > 1000000 && m > 1)
                m = 2; /* keeps the double-precision bounds cheap */
            check_case(TB_QUANT_INT8, ns[b], ks[a], 0, m);
            check_case(TB_QUANT_INT4, ns[b], ks[a], 64, m);
        }
    /* every group size, K not a multiple of 64 or 128 (int4) and odd K (int8), several batch sizes */
    const int64_t groups[] = {32, 64, 128, 256};
    for (int g = 0; g < 4; g++)
        for (int64_t m = 1; m <= 9; m += 4)
            check_case(TB_QUANT_INT4, 13, groups[g] * 3, groups[g], m);
    check_case(TB_QUANT_INT4, 5, 32, 32, 2);
    check_case(TB_QUANT_INT4, 6, 96, 32, 5);
    for (int64_t k = 1; k <= 130; k += 43)
        check_case(TB_QUANT_INT8, 9, k, 0, 6);
    /* a batch large enough to be split into row chunks (prefill) */
    check_case(TB_QUANT_INT4, 7, 4864, 64, 100);
    check_case(TB_QUANT_INT8, 5, 4864, 0, 70);
}

/* One LM-head-sized GEMV (N = 151936, K = 896, int4 g64): the best kernel against the reference. */
static void test_lm_head(void) {
    const int64_t n = 151936, k = 896, group = 64;
    uint8_t *packed = malloc((size_t)(n * k / 2));
    float *scales = malloc(sizeof(float) * (size_t)(n * (k / group)));
    float *x = malloc(sizeof(float) * (size_t)k), *y = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)n);
    if (!packed || !scales || !x || !y || !ref) {
        TB_CHECK(!"allocation");
        return;
    }
    for (int64_t i = 0; i < n * k / 2; i++)
        packed[i] = (uint8_t)next_u32();
    for (int64_t i = 0; i < n * (k / group); i++)
        scales[i] = 0.01f + (float)(next_u32() >> 8) / 16777216.0f * 0.02f;
    fill_normal(x, k);
    tb_quant_weight view;
    TB_CHECK(tb_quant_weight_init(TB_QUANT_INT4, n, k, group, packed, scales, &view) == TB_OK);
    TB_CHECK(tb_set_num_threads(2) == TB_OK);
    tb_quant_matmul_desc d = {.x = x, .m = 1, .x_row_stride = k, .y = ref, .y_row_stride = n,
                              .act = TB_QUANT_ACT_F32, .kernel = TB_QUANT_KERNEL_SCALAR};
    TB_CHECK(tb_quant_matmul_ex(&view, &d) == TB_OK);
    TB_CHECK(tb_quant_matmul(&view, x, 1, y, NULL) == TB_OK);
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        double abs_sum = 0.0;
        const float *s = scales + j * (k / group);
        for (int64_t kk = 0; kk < k; kk++) {
            int nibble = (packed[j * k / 2 + kk / 2] >> ((kk & 1) * 4)) & 15;
            abs_sum += fabs((double)x[kk] * (nibble - 8) * s[kk / group]);
        }
        bad += !(fabs((double)y[j] - ref[j]) <= 1e-5 * abs_sum);
    }
    TB_CHECK_MSG(bad == 0, "LM head: %d outputs differ from the reference", bad);
    free(packed);
    free(scales);
    free(x);
    free(y);
    free(ref);
}

static void test_dispatch(void) {
    tb_isa best = tb_isa_best();
    TB_CHECK(tb_isa_set(TB_ISA_SCALAR) == TB_OK);
    TB_CHECK(tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_F32) == TB_QUANT_KERNEL_SCALAR);
    TB_CHECK(tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_INT8) == TB_QUANT_KERNEL_SCALAR);
    if (tb_isa_supported(TB_ISA_AVX2)) {
        TB_CHECK(tb_isa_set(TB_ISA_AVX2) == TB_OK);
        TB_CHECK(tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_F32) == TB_QUANT_KERNEL_AVX2);
        tb_quant_kernel a8 = tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_INT8);
        TB_CHECK(a8 == (tb_cpu_get_features()->avx_vnni ? TB_QUANT_KERNEL_AVXVNNI : TB_QUANT_KERNEL_AVX2));
    }
    if (tb_isa_supported(TB_ISA_AVX512)) {
        TB_CHECK(tb_isa_set(TB_ISA_AVX512) == TB_OK);
        TB_CHECK(tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_F32) == TB_QUANT_KERNEL_AVX512);
        if (tb_cpu_get_features()->avx512vnni)
            TB_CHECK(tb_quant_kernel_resolve(TB_QUANT_KERNEL_AUTO, TB_QUANT_ACT_INT8) == TB_QUANT_KERNEL_AVX512VNNI);
    }
    TB_CHECK(tb_isa_set(best) == TB_OK);
    printf("quant kernels on this CPU:");
    for (int kernel = TB_QUANT_KERNEL_SCALAR; kernel < TB_QUANT_KERNEL_COUNT; kernel++)
        if (tb_quant_kernel_supported((tb_quant_kernel)kernel))
            printf(" %s", tb_quant_kernel_name((tb_quant_kernel)kernel));
    printf("\n");
}

int main(void) {
    test_dispatch();
    test_round_trip();
    test_special_values();
    test_bad_input();
    test_kernels_against_reference();
    test_lm_head();
    return tb_test_finish("test_quant");
}
