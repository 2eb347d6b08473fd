/* Tests of tb_gemm_f32 at every ISA this CPU supports against a double-precision triple loop written
 * here: edge shapes, transposed operands, strided/padded C, alpha/beta (beta = 0 with NaN-filled C),
 * every bias kind and activation, residuals, batches with broadcast strides, several thread counts,
 * guarded output buffers, bad arguments and allocation failure. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/dtype.h"
#include "torchburn/thread_pool.h"

static const int64_t sizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 127, 129, 255, 256, 257};
enum { SIZE_COUNT = sizeof sizes / sizeof sizes[0] };
static const char *const activation_names[TB_ACTIVATION_COUNT] = {"none", "relu",    "gelu",   "gelu_tanh",
                                                                  "silu", "sigmoid", "tanh"};

typedef struct gemm_case {
    int64_t m, n, k, batch;
    bool trans_a, trans_b;
    int64_t c_pad, residual_pad;
    float alpha, beta;
    tb_bias_kind bias_kind;
    tb_activation activation;
    bool residual;
    bool broadcast_b; /* b_batch_stride = 0 */
    bool bf16;        /* TB_GEMM_PRECISION_BF16: the reference multiplies bf16-rounded A and B */
    bool prepacked;   /* B packed first with tb_gemm_pack_b (then NaN in B itself for the packed path) */
    bool bf16_operands; /* A and B handed over as bf16 bits (a_bf16 / b_bf16) of the bf16-rounded values */
    uint64_t seed;
} gemm_case;

static double activation_double(tb_activation activation, double x) {
    switch (activation) {
    case TB_ACTIVATION_RELU: return x > 0 ? x : 0.0;
    case TB_ACTIVATION_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case TB_ACTIVATION_GELU_TANH: return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case TB_ACTIVATION_SILU: return x / (1.0 + exp(-x));
    case TB_ACTIVATION_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case TB_ACTIVATION_TANH: return tanh(x);
    default: return x;
    }
}

static int failures_reported;

/* Runs one case at `isa` and compares every output element with the double reference. */
static const char *isa_label(tb_isa isa) { return isa == TB_ISA_COUNT ? "reference" : tb_isa_name(isa); }

static void run_case(const gemm_case *t, tb_isa isa) {
    int64_t m = t->m, n = t->n, k = t->k, batch = t->batch;
    /* A: [batch][m][k] stored row-major, or as its transpose [batch][k][m] (col strides) */
    int64_t a_size = m * k + 3, b_size = k * n + 5;
    int64_t c_row_stride = n + t->c_pad, c_size = m * c_row_stride + 2;
    int64_t r_row_stride = n + t->residual_pad, r_size = m * r_row_stride + 1;
    float *a = tb_test_guarded_alloc(a_size * batch + 1);
    float *b = tb_test_guarded_alloc(b_size * (t->broadcast_b ? 1 : batch) + 1);
    float *c = tb_test_guarded_alloc(c_size * batch + 1);
    float *c_before = malloc(sizeof(float) * (size_t)(c_size * batch + 1));
    float *bias = tb_test_guarded_alloc((m > n ? m : n) + 1);
    float *residual = tb_test_guarded_alloc(r_size * batch + 1);
    TB_CHECK(a && b && c && c_before && bias && residual);
    if (!a || !b || !c || !c_before || !bias || !residual)
        return;
    tb_test_fill_uniform(a, a_size * batch + 1, -1.0f, 1.0f, t->seed);
    tb_test_fill_uniform(b, b_size * (t->broadcast_b ? 1 : batch) + 1, -1.0f, 1.0f, t->seed + 1);
    tb_test_fill_uniform(bias, (m > n ? m : n) + 1, -1.0f, 1.0f, t->seed + 2);
    tb_test_fill_uniform(residual, r_size * batch + 1, -1.0f, 1.0f, t->seed + 3);
    if (t->beta == 0.0f) {
        for (int64_t i = 0; i < c_size * batch + 1; i++)
            c[i] = NAN; /* beta == 0 must never read C */
    } else {
        tb_test_fill_uniform(c, c_size * batch + 1, -1.0f, 1.0f, t->seed + 4);
    }
    memcpy(c_before, c, sizeof(float) * (size_t)(c_size * batch + 1));

    tb_gemm_desc d = {0};
    d.m = m;
    d.n = n;
    d.k = k;
    d.a = a;
    d.a_row_stride = t->trans_a ? 1 : k;
    d.a_col_stride = t->trans_a ? m : 1;
    d.b = b;
    d.b_row_stride = t->trans_b ? 1 : n;
    d.b_col_stride = t->trans_b ? k : 1;
    d.c = c;
    d.c_row_stride = c_row_stride;
    d.alpha = t->alpha;
    d.beta = t->beta;
    d.bias_kind = t->bias_kind;
    d.bias = t->bias_kind == TB_BIAS_NONE ? NULL : bias;
    d.activation = t->activation;
    d.residual = t->residual ? residual : NULL;
    d.residual_row_stride = r_row_stride;
    d.batch = batch;
    d.a_batch_stride = a_size;
    d.b_batch_stride = t->broadcast_b ? 0 : b_size;
    d.c_batch_stride = c_size;
    d.residual_batch_stride = r_size;
    d.precision = t->bf16 ? TB_GEMM_PRECISION_BF16 : TB_GEMM_PRECISION_HIGHEST;
    uint16_t *a16 = NULL, *b16 = NULL;
    int64_t a_count = a_size * batch + 1, b_count = b_size * (t->broadcast_b ? 1 : batch) + 1;
    if (t->bf16_operands) {
        a16 = malloc(sizeof(uint16_t) * (size_t)a_count);
        b16 = malloc(sizeof(uint16_t) * (size_t)b_count);
        TB_CHECK(a16 && b16);
        for (int64_t i = 0; a16 && i < a_count; i++)
            a16[i] = tb_f32_to_bf16(a[i]);
        for (int64_t i = 0; b16 && i < b_count; i++)
            b16[i] = tb_f32_to_bf16(b[i]);
        d.a = NULL;
        d.b = NULL;
        d.a_bf16 = a16;
        d.b_bf16 = b16;
    }
    tb_gemm_packed_b *packed = NULL;
    float *b_saved = NULL;
    size_t b_bytes = sizeof(float) * (size_t)(b_size * (t->broadcast_b ? 1 : batch) + 1);
    if (t->prepacked && isa != TB_ISA_COUNT && k > 0 && (batch == 1 || t->broadcast_b)) {
        tb_status packed_status = tb_gemm_pack_b(k, n, b, d.b_row_stride, d.b_col_stride, isa, d.precision, &packed);
        TB_CHECK_MSG(packed_status == TB_OK, "pack_b: %s", tb_error_message());
        d.b_packed = packed;
        if (m > TB_GEMM_SMALL_M_MAX) { /* the packed path must not read B at all */
            b_saved = malloc(b_bytes);
            TB_CHECK(b_saved != NULL);
            if (b_saved) {
                memcpy(b_saved, b, b_bytes);
                for (int64_t i = 0; i < b_size * (t->broadcast_b ? 1 : batch) + 1; i++)
                    b[i] = NAN;
            }
        }
    }
    /* isa == TB_ISA_COUNT stands for the library's naive reference, checked like the kernels */
    tb_status status = isa == TB_ISA_COUNT ? tb_gemm_f32_reference(&d) : tb_gemm_f32_isa(&d, isa);
    free(a16);
    free(b16);
    if (t->bf16_operands && isa != TB_ISA_COUNT && !tb_gemm_bf16_operands_supported(isa)) {
        /* where the kernel cannot read bf16 it says so; C is untouched */
        TB_CHECK_MSG(status == TB_ERR_UNSUPPORTED && strstr(tb_error_message(), "bf16"), "%s: got %s",
                     isa_label(isa), tb_status_name(status));
        TB_CHECK(memcmp(c, c_before, sizeof(float) * (size_t)(c_size * batch + 1)) == 0 || t->beta == 0.0f);
        status = TB_ERR_UNSUPPORTED; /* nothing to compare */
    } else {
        TB_CHECK_MSG(status == TB_OK, "%s: %s", isa_label(isa), tb_error_message());
    }
    if (b_saved) {
        memcpy(b, b_saved, b_bytes);
        free(b_saved);
    }
    tb_gemm_packed_b_free(packed);
    /* the product the kernel must have computed: of the operands rounded to bf16 where the ISA runs the bf16
     * kernel; bf16 precision permits, never demands, so the other ISAs and the reference compute in f32 */
    bool bf16_ran = t->bf16_operands || (t->bf16 && isa != TB_ISA_COUNT &&
                    tb_gemm_microkernel_for_precision((tb_isa)isa, TB_GEMM_PRECISION_BF16)->packed_bytes == 2);
    if (bf16_ran) {
        for (int64_t i = 0; i < a_size * batch + 1; i++)
            a[i] = tb_bf16_to_f32(tb_f32_to_bf16(a[i]));
        for (int64_t i = 0; i < b_size * (t->broadcast_b ? 1 : batch) + 1; i++)
            b[i] = tb_bf16_to_f32(tb_f32_to_bf16(b[i]));
    }

    const double eps = 1.0 / (1 << 23);
    int bad = 0;
    for (int64_t e = 0; e < batch && status == TB_OK; e++) {
        const float *ae = a + e * d.a_batch_stride, *be = b + e * d.b_batch_stride;
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++) {
                double sum = 0.0, magnitude = 0.0;
                for (int64_t p = 0; p < k; p++) {
                    double product = (double)ae[i * d.a_row_stride + p * d.a_col_stride] *
                                     (double)be[p * d.b_row_stride + j * d.b_col_stride];
                    sum += product;
                    magnitude += fabs(product);
                }
                int64_t at = e * c_size + i * c_row_stride + j;
                double value = t->alpha * sum;
                double tolerance = 2.0 * sqrt((double)k + 1.0) * eps * fabs(t->alpha) * magnitude;
                if (t->beta != 0.0f) {
                    value += t->beta * (double)c_before[at];
                    tolerance += 2.0 * eps * fabs(t->beta * (double)c_before[at]);
                }
                if (t->bias_kind == TB_BIAS_PER_COLUMN)
                    value += bias[j];
                else if (t->bias_kind == TB_BIAS_PER_ROW)
                    value += bias[i];
                tolerance += 2.0 * eps * fabs(value) + 1e-30;
                if (t->activation != TB_ACTIVATION_NONE) {
                    double activated = activation_double(t->activation, value);
                    tolerance = 1.2 * tolerance + 1e-6 * (1.0 + fabs(value));
                    value = activated;
                }
                if (t->residual) {
                    value += residual[e * r_size + i * r_row_stride + j];
                    tolerance += 2.0 * eps * fabs(value);
                }
                double got = c[at];
                if (!(fabs(got - value) <= tolerance)) {
                    bad++;
                    if (failures_reported < 10) {
                        failures_reported++;
                        fprintf(stderr,
                                "  %s m=%lld n=%lld k=%lld batch=%lld tA=%d tB=%d beta=%g bias=%d act=%s res=%d: "
                                "C[%lld][%lld][%lld] = %.9g, expected %.9g (tol %.3g)\n",
                                isa_label(isa), (long long)m, (long long)n, (long long)k, (long long)batch,
                                t->trans_a, t->trans_b, t->beta, t->bias_kind, activation_names[t->activation],
                                t->residual, (long long)e, (long long)i, (long long)j, got, value, tolerance);
                    }
                }
            }
            /* the padding between rows of C is never written */
            for (int64_t j = n; j < c_row_stride && i + 1 < m; j++) {
                int64_t at = e * c_size + i * c_row_stride + j;
                if (memcmp(&c[at], &c_before[at], sizeof(float)) != 0)
                    bad++;
            }
        }
    }
    TB_CHECK_MSG(bad == 0, "%s: %d wrong elements (m=%lld n=%lld k=%lld)", isa_label(isa), bad, (long long)m,
                 (long long)n, (long long)k);
    TB_CHECK(tb_test_guard_ok(c, c_size * batch + 1));
    TB_CHECK(tb_test_guard_ok(a, a_size * batch + 1));
    tb_test_guarded_free(a);
    tb_test_guarded_free(b);
    tb_test_guarded_free(c);
    tb_test_guarded_free(bias);
    tb_test_guarded_free(residual);
    free(c_before);
}

static gemm_case plain(int64_t m, int64_t n, int64_t k, uint64_t seed) {
    gemm_case t = {.m = m, .n = n, .k = k, .batch = 1, .alpha = 1.0f, .beta = 0.0f, .seed = seed};
    return t;
}

static void for_each_isa(const gemm_case *t);

/* The blocking computed from CPUID is whole register tiles; the override and its env form replace it
 * (rounded to whole tiles) and a malformed TORCHBURN_GEMM_BLOCKING is refused with its text named. */
static void test_blocking_choice(void) {
    for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
        const tb_gemm_microkernel *uk = tb_gemm_microkernel_for((tb_isa)isa);
        tb_gemm_blocking b = tb_gemm_blocking_for(uk);
        TB_CHECK_MSG(b.mc >= uk->mr && b.mc % uk->mr == 0 && b.nc >= uk->nr && b.nc % uk->nr == 0 && b.kc >= 16,
                     "%s: blocking mc=%lld kc=%lld nc=%lld", uk->isa_name, (long long)b.mc, (long long)b.kc,
                     (long long)b.nc);
        tb_gemm_set_blocking_override(1, 5, 1);
        b = tb_gemm_blocking_for(uk);
        TB_CHECK(b.mc == uk->mr && b.kc == 5 && b.nc == uk->nr && strcmp(b.source, "override") == 0);
        tb_gemm_set_blocking_override(0, 0, 0);
        TB_CHECK(strcmp(tb_gemm_blocking_for(uk).source, "override") != 0);
    }
    setenv("TORCHBURN_GEMM_BLOCKING", "16,x,32", 1);
    TB_CHECK(tb_gemm_blocking_init() == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "16,x,32") != NULL);
    setenv("TORCHBURN_GEMM_BLOCKING", "16,0,32", 1);
    TB_CHECK(tb_gemm_blocking_init() == TB_ERR_INVALID_ARGUMENT);
    setenv("TORCHBURN_GEMM_BLOCKING", "30,9,70", 1);
    TB_CHECK(tb_gemm_blocking_init() == TB_OK);
    TB_CHECK(tb_gemm_blocking_for(tb_gemm_microkernel_for(TB_ISA_SCALAR)).kc == 9);
    unsetenv("TORCHBURN_GEMM_BLOCKING");
    tb_gemm_set_blocking_override(0, 0, 0);
}

/* TB_GEMM_PRECISION_BF16 on each bf16 kernel this CPU has -- AMX-BF16 tiles, then (AMX switched off)
 * the AVX512-BF16 one: odd sizes (odd k: a half-empty last pair; k off the 32-deep tile chunk), every
 * operand layout, k blocks, epilogues, alpha/beta, threads, forced tiny blocking; against the double
 * product of the bf16-rounded operands. A kernel the CPU lacks is skipped with the reason. */
static void test_bf16_kernel(uint64_t *seed, const char *expected) {
    static const int64_t shapes[][3] = {{1, 1, 1},     {3, 5, 2},      {14, 32, 32},   {15, 33, 33},
                                        {29, 47, 129}, {64, 64, 64},   {100, 90, 513}, {7, 300, 1031},
                                        {130, 70, 9},  {32, 32, 31},   {65, 96, 95},   {33, 31, 1}};
    const int shape_count = (int)(sizeof shapes / sizeof shapes[0]);
    for (int blocking = 0; blocking < 2; blocking++) {
        tb_gemm_set_blocking_override(blocking ? 1 : 0, blocking ? 6 : 0, blocking ? 1 : 0);
        for (int s = 0; s < shape_count; s++)
            for (int layout = 0; layout < 4; layout++) {
                gemm_case t = plain(shapes[s][0], shapes[s][1], shapes[s][2], (*seed)++);
                t.bf16 = true;
                t.trans_a = layout & 1;
                t.trans_b = layout >> 1;
                t.c_pad = s % 3;
                t.beta = s % 4 == 1 ? 0.5f : s % 4 == 2 && layout < 2 ? 1.0f : 0.0f;
                t.alpha = s % 5 == 3 ? -1.5f : 1.0f;
                t.bias_kind = (tb_bias_kind)(s % 3);
                t.activation = (tb_activation)((s + layout) % TB_ACTIVATION_COUNT);
                t.residual = s % 2 == 1;
                t.batch = s == 4 ? 2 : 1;
                run_case(&t, TB_ISA_AVX512);
                t.bf16_operands = true; /* the same product from bf16 tensors read in place */
                t.seed = (*seed)++;
                run_case(&t, TB_ISA_AVX512);
            }
    }
    tb_gemm_set_blocking_override(0, 0, 0);
    gemm_case t = plain(200, 260, 700, (*seed)++); /* several threads' cells */
    t.bf16 = true;
    t.trans_b = true;
    run_case(&t, TB_ISA_AVX512);
    t.bf16_operands = true;
    run_case(&t, TB_ISA_AVX512);
    t = plain(96, 64, 1100, (*seed)++); /* whole tiles, beta 1 read through the tiles, several k blocks */
    t.bf16 = true;
    t.beta = 1.0f;
    run_case(&t, TB_ISA_AVX512);
    t.bf16_operands = true;
    t.trans_a = true;
    run_case(&t, TB_ISA_AVX512);
    for (int variant = 0; variant < 2; variant++) { /* prepacked B in the kernel's layout */
        t = plain(70, 100, 600, (*seed)++);
        t.bf16 = true;
        t.prepacked = true;
        t.trans_b = variant;
        t.bias_kind = TB_BIAS_PER_COLUMN;
        run_case(&t, TB_ISA_AVX512);
    }
    /* the process default reaches a DEFAULT-precision descriptor (the same kernel) */
    tb_gemm_set_default_precision(TB_GEMM_PRECISION_BF16);
    TB_CHECK(strcmp(tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_DEFAULT)->isa_name,
                    expected) == 0);
    TB_CHECK(tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_HIGHEST)->packed_bytes != 2);
    tb_gemm_set_default_precision(TB_GEMM_PRECISION_HIGHEST);
    TB_CHECK(tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_DEFAULT)->packed_bytes != 2);
}

static void test_bf16_precision(uint64_t *seed) {
    const tb_cpu_features *f = tb_cpu_get_features();
    bool amx_usable = f->amx_bf16 && f->avx512bf16 && tb_isa_supported(TB_ISA_AVX512) && tb_cpu_amx_request();
    const char *chosen = tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_BF16)->isa_name;
    /* where the CPU and the OS allow AMX it must be the one chosen, not silently the fallback */
    TB_CHECK_MSG(strcmp(chosen, "amx_bf16") == 0 || !amx_usable, "bf16 products run on %s although AMX is usable",
                 chosen);
    if (amx_usable)
        test_bf16_kernel(seed, "amx_bf16");
    else
        fprintf(stderr, "test_gemm: AMX bf16 kernel not tested: %s\n",
                !f->amx_bf16 ? "this CPU has no AMX-BF16"
                : !f->amx_os ? "the OS does not enable the AMX tile state (XCR0)"
                             : "the OS refused the AMX permission (arch_prctl) or there is no AVX-512 level");
    tb_gemm_set_amx_allowed(false);
    if (tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_BF16)->packed_bytes == 2)
        test_bf16_kernel(seed, "avx512_bf16");
    else
        fprintf(stderr, "test_gemm: bf16 kernel not tested: this CPU has no AVX512-BF16 at the avx512 level\n");
    tb_gemm_set_amx_allowed(true);
}

/* Odd shapes, strides and epilogues under forced tiny blocks (one register tile per mc/nc block, k
 * blocks of 1 or 7 with a short last one) and forced huge ones, so every block edge of the loop
 * nest runs at every ISA. */
static void test_forced_blocking(uint64_t *seed) {
    test_blocking_choice();
    static const int64_t blockings[][3] = {{1, 1, 1}, {1, 7, 1}, {15, 7, 33}, {100000, 4096, 100000}};
    for (size_t bi = 0; bi < sizeof blockings / sizeof blockings[0]; bi++) {
        tb_gemm_set_blocking_override(blockings[bi][0], blockings[bi][1], blockings[bi][2]);
        for (int s = 0; s < 6; s++) {
            gemm_case t = plain(17 + 13 * s, 33 + 9 * s, s == 0 ? 1 : 129 + 50 * s, (*seed)++);
            if (blockings[bi][1] == 1)
                t.k = 3 + s; /* kc = 1: keep the k loop short */
            t.trans_a = s & 1;
            t.trans_b = (s >> 1) & 1;
            t.c_pad = s % 3 * 3;
            t.beta = s % 3 == 1 ? 1.0f : 0.0f;
            t.bias_kind = (tb_bias_kind)(s % 3);
            t.activation = (tb_activation)(s % TB_ACTIVATION_COUNT);
            t.residual = s % 2 == 0;
            t.residual_pad = 1;
            t.batch = s == 4 ? 2 : 1;
            for_each_isa(&t);
        }
    }
    tb_gemm_set_blocking_override(0, 0, 0);
}

static void for_each_isa(const gemm_case *t) {
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        if (tb_isa_supported((tb_isa)isa))
            run_case(t, (tb_isa)isa);
    if (t->m * t->n * t->k * t->batch < 1000000)
        run_case(t, TB_ISA_COUNT); /* the naive reference too, where it is quick */
}

/* The first GEMM of the process: the packing scratch does not exist yet, so an allocation failure must
 * come back as a status (and the next call must work). */
static void test_allocation_failure(void) {
    float a[64 * 64], b[64 * 64], c[64 * 64];
    tb_test_fill_uniform(a, 64 * 64, -1, 1, 1);
    tb_test_fill_uniform(b, 64 * 64, -1, 1, 2);
    tb_gemm_desc d = {.m = 64, .n = 64, .k = 64, .a = a, .a_row_stride = 64, .a_col_stride = 1, .b = b,
                      .b_row_stride = 64, .b_col_stride = 1, .c = c, .c_row_stride = 64, .alpha = 1.0f, .batch = 1};
    tb_alloc_fail_after(0);
    tb_status status = tb_gemm_f32_isa(&d, TB_ISA_SCALAR);
    tb_alloc_fail_after(-1);
    TB_CHECK_MSG(status == TB_ERR_OUT_OF_MEMORY, "got %s", tb_status_name(status));
    TB_CHECK(strstr(tb_error_message(), "gemm") != NULL);
    TB_CHECK(tb_gemm_f32_isa(&d, TB_ISA_SCALAR) == TB_OK);
}

static void test_bad_arguments(void) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4];
    tb_gemm_desc good = {.m = 2, .n = 2, .k = 2, .a = a, .a_row_stride = 2, .a_col_stride = 1, .b = b,
                         .b_row_stride = 2, .b_col_stride = 1, .c = c, .c_row_stride = 2, .alpha = 1.0f, .batch = 1};
    TB_CHECK(tb_gemm_f32(&good) == TB_OK);
    TB_CHECK(c[0] == 7.0f && c[1] == 10.0f && c[2] == 15.0f && c[3] == 22.0f);
    TB_CHECK(tb_gemm_f32(NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_gemm_desc d = good;
    d.m = -1;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "negative") != NULL);
    d = good;
    d.a = NULL;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.c = NULL;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.c_row_stride = 1;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.bias_kind = TB_BIAS_PER_COLUMN;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.activation = TB_ACTIVATION_COUNT;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.residual = c;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.batch = 2;
    d.c_batch_stride = 1;
    TB_CHECK(tb_gemm_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    /* empty products are fine with NULL pointers */
    tb_gemm_desc empty = {.m = 0, .n = 5, .k = 3, .batch = 1};
    TB_CHECK(tb_gemm_f32(&empty) == TB_OK);
    empty.m = 3;
    empty.batch = 0;
    TB_CHECK(tb_gemm_f32(&empty) == TB_OK);
    /* an ISA the CPU lacks (NEON on x86, AVX on ARM) is refused */
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        if (!tb_isa_supported((tb_isa)isa))
            TB_CHECK(tb_gemm_f32_isa(&good, (tb_isa)isa) == TB_ERR_UNSUPPORTED);
    TB_CHECK(tb_gemm_f32_isa(&good, TB_ISA_COUNT) == TB_ERR_UNSUPPORTED);
    /* the library's own reference agrees on the small product */
    float c2[4];
    d = good;
    d.c = c2;
    TB_CHECK(tb_gemm_f32_reference(&d) == TB_OK && memcmp(c, c2, sizeof c) == 0);
}

/* The epilogue activations alone (k = 0, beta = 1, so C holds x) over [-12, 12] against double libm:
 * a few ulp, plus the 1.5e-7 absolute erf error (scaled by |x| / 2) of the vectorized exact GELU. */
static void test_activation_accuracy(void) {
    enum { N = 2001, M = 3 };
    static float c[M * N];
    for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
        if (!tb_isa_supported((tb_isa)isa))
            continue;
        for (int act = 1; act < TB_ACTIVATION_COUNT; act++) {
            for (int i = 0; i < M * N; i++)
                c[i] = -12.0f + 24.0f * (float)(i % N) / (float)(N - 1) + 1e-3f * (float)(i / N);
            tb_gemm_desc d = {.m = M, .n = N, .k = 0, .c = c, .c_row_stride = N, .alpha = 1.0f, .beta = 1.0f,
                              .activation = (tb_activation)act, .batch = 1};
            TB_CHECK(tb_gemm_f32_isa(&d, (tb_isa)isa) == TB_OK);
            int bad = 0;
            for (int i = 0; i < M * N; i++) {
                double x = -12.0f + 24.0f * (float)(i % N) / (float)(N - 1) + 1e-3f * (float)(i / N);
                double expected = activation_double((tb_activation)act, (float)x);
                double tolerance = 8.0 / (1 << 23) * fabs(expected) + 2e-7 * fabs(x) + 1e-37;
                if (!(fabs(c[i] - expected) <= tolerance)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s %s(%.9g) = %.9g, expected %.9g\n", tb_isa_name((tb_isa)isa),
                                activation_names[act], x, c[i], expected);
                }
            }
            TB_CHECK_MSG(bad == 0, "%s %s: %d inaccurate values", tb_isa_name((tb_isa)isa), activation_names[act], bad);
        }
    }
    /* NaN goes through every activation */
    for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
        if (!tb_isa_supported((tb_isa)isa))
            continue;
        for (int act = 1; act < TB_ACTIVATION_COUNT; act++) {
            float x[3] = {NAN, 1.0f, NAN};
            tb_gemm_desc d = {.m = 1, .n = 3, .k = 0, .c = x, .c_row_stride = 3, .alpha = 1.0f, .beta = 1.0f,
                              .activation = (tb_activation)act, .batch = 1};
            TB_CHECK(tb_gemm_f32_isa(&d, (tb_isa)isa) == TB_OK);
            TB_CHECK_MSG(isnan(x[0]) && !isnan(x[1]) && isnan(x[2]), "%s %s", tb_isa_name((tb_isa)isa),
                         activation_names[act]);
        }
    }
}

/* Prepacked B: every layout, odd sizes around the register tile and the k block, epilogues, batches
 * sharing one B, bf16 precision, forced tiny blockings; and a packed B that does not fit is refused. */
static void test_prepacked_b(uint64_t *seed) {
    static const int64_t shapes[][3] = {{9, 1, 1}, {15, 17, 31}, {64, 512, 784}, {33, 47, 129}, {129, 257, 600},
                                        {7, 300, 130}, {200, 33, 1000}, {16, 10, 512}};
    const bool bf16_kernel = tb_gemm_microkernel_for_precision(TB_ISA_AVX512, TB_GEMM_PRECISION_BF16)->packed_bytes == 2;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int variant = 0; variant < 4; variant++) {
            gemm_case t = plain(shapes[si][0], shapes[si][1], shapes[si][2], (*seed)++);
            t.prepacked = true;
            t.trans_b = variant & 1; /* nn.Linear's weight is the transposed layout */
            t.trans_a = variant == 2;
            t.bias_kind = (tb_bias_kind)(variant % 3);
            t.activation = (tb_activation)((variant + (int)si) % TB_ACTIVATION_COUNT);
            t.residual = variant == 3;
            t.beta = variant == 1 ? 1.0f : 0.0f;
            t.batch = variant == 3 ? 3 : 1;
            t.broadcast_b = variant == 3;
            t.bf16 = si % 3 == 2 && variant < 2 && bf16_kernel; /* bf16 packing where the kernel exists */
            for_each_isa(&t);
        }
    static const int64_t blockings[][3] = {{1, 7, 1}, {15, 7, 33}};
    for (size_t bi = 0; bi < 2; bi++) {
        tb_gemm_set_blocking_override(blockings[bi][0], blockings[bi][1], blockings[bi][2]);
        gemm_case t = plain(40, 70, 100, (*seed)++);
        t.prepacked = true;
        t.trans_b = bi == 0;
        for_each_isa(&t);
        tb_gemm_set_blocking_override(0, 0, 0);
    }
    /* a mismatched packed B is an error, never a wrong product */
    float a[20 * 30], b[30 * 21], c[20 * 21];
    tb_test_fill_uniform(a, 20 * 30, -1, 1, 5);
    tb_test_fill_uniform(b, 30 * 21, -1, 1, 6);
    tb_gemm_packed_b *packed = NULL;
    TB_CHECK(tb_gemm_pack_b(30, 20, b, 21, 1, TB_ISA_SCALAR, TB_GEMM_PRECISION_HIGHEST, &packed) == TB_OK);
    TB_CHECK(tb_gemm_packed_b_bytes(packed) >= 30 * 20 * sizeof(float));
    TB_CHECK(tb_gemm_packed_b_matches(packed, 30, 20, TB_ISA_SCALAR, TB_GEMM_PRECISION_HIGHEST));
    TB_CHECK(!tb_gemm_packed_b_matches(packed, 30, 21, TB_ISA_SCALAR, TB_GEMM_PRECISION_HIGHEST));
    tb_gemm_desc d = {.m = 20, .n = 21, .k = 30, .a = a, .a_row_stride = 30, .a_col_stride = 1, .b = b,
                      .b_row_stride = 21, .b_col_stride = 1, .c = c, .c_row_stride = 21, .alpha = 1.0f, .batch = 1,
                      .b_packed = packed};
    tb_status status = tb_gemm_f32_isa(&d, TB_ISA_SCALAR);
    TB_CHECK_MSG(status == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "packed B"), "got %s: %s",
                 tb_status_name(status), tb_error_message());
    d.n = 20;
    tb_gemm_set_blocking_override(0, 8, 0); /* a new blocking: the packed B no longer fits */
    TB_CHECK(!tb_gemm_packed_b_matches(packed, 30, 20, TB_ISA_SCALAR, TB_GEMM_PRECISION_HIGHEST));
    status = tb_gemm_f32_isa(&d, TB_ISA_SCALAR);
    TB_CHECK_MSG(status == TB_ERR_INVALID_ARGUMENT, "got %s", tb_status_name(status));
    tb_gemm_set_blocking_override(0, 0, 0);
    static float c2[2 * 20 * 21];
    d.c = c2;
    d.batch = 2;
    d.a_batch_stride = 0;
    d.b_batch_stride = 1; /* B differs per batch entry: one packed B cannot serve them */
    d.c_batch_stride = 20 * 21;
    status = tb_gemm_f32_isa(&d, TB_ISA_SCALAR);
    TB_CHECK_MSG(status == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "batch"), "got %s: %s",
                 tb_status_name(status), tb_error_message());
    tb_gemm_packed_b_free(packed);
    TB_CHECK(tb_gemm_pack_b(0, 5, b, 5, 1, TB_ISA_SCALAR, TB_GEMM_PRECISION_HIGHEST, &packed) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(packed == NULL);
    tb_gemm_packed_b_free(NULL);
}

int main(void) {
    test_allocation_failure();
    test_bad_arguments();
    test_activation_accuracy();
    uint64_t seed = 100;
    test_prepacked_b(&seed);

    /* every (m, n) pair from the edge sizes at small and medium k */
    static const int64_t ks[] = {0, 1, 17, 64};
    for (int im = 0; im < SIZE_COUNT; im++)
        for (int in = 0; in < SIZE_COUNT; in++) {
            gemm_case t = plain(sizes[im], sizes[in], ks[(im + in) % 4], seed++);
            if (sizes[im] * sizes[in] > 64 * 257)
                t.k = ks[(im + in) % 3];
            for_each_isa(&t);
        }
    /* a sample of full triples, each with a different mix of layout options */
    for (int s = 0; s < 40; s++) {
        gemm_case t = plain(sizes[(s * 5 + 3) % SIZE_COUNT], sizes[(s * 7 + 1) % SIZE_COUNT],
                            sizes[(s * 11 + 6) % SIZE_COUNT], seed++);
        t.trans_a = s & 1;
        t.trans_b = (s >> 1) & 1;
        t.c_pad = (s % 3) * 5;
        t.beta = (s % 4 == 1) ? 1.0f : (s % 4 == 3) ? -0.5f : 0.0f;
        t.alpha = (s % 5 == 2) ? 0.75f : 1.0f;
        for_each_isa(&t);
    }
    /* every bias kind x activation, with and without residual, on an odd shape */
    for (int bias = 0; bias < 3; bias++)
        for (int act = 0; act < TB_ACTIVATION_COUNT; act++)
            for (int res = 0; res < 2; res++) {
                gemm_case t = plain(33, 47, 129, seed++);
                t.bias_kind = (tb_bias_kind)bias;
                t.activation = (tb_activation)act;
                t.residual = res;
                t.residual_pad = 3;
                t.beta = res ? 1.0f : 0.0f;
                t.trans_b = act & 1;
                for_each_isa(&t);
            }
    /* few rows (the unpacked small-m path): both B layouts, k past one k block, odd n, epilogue */
    for (int64_t m = 1; m <= 9; m++) {
        gemm_case t = plain(m, 300 + 37 * m, m == 3 ? 2100 : 130 + m, seed++);
        t.trans_b = m & 1;
        t.trans_a = m == 4;
        t.beta = m % 3 == 0 ? 1.0f : 0.0f;
        t.c_pad = m % 2 ? 3 : 0;
        t.bias_kind = m % 2 ? TB_BIAS_PER_COLUMN : TB_BIAS_PER_ROW;
        t.activation = (tb_activation)(m % TB_ACTIVATION_COUNT);
        t.residual = m % 4 == 1;
        t.batch = m == 2 ? 3 : 1;
        for_each_isa(&t);
    }
    /* epilogue with k == 0 and with alpha == 0 (C = beta C + bias ...) */
    {
        gemm_case t = plain(17, 33, 0, seed++);
        t.bias_kind = TB_BIAS_PER_ROW;
        t.activation = TB_ACTIVATION_GELU;
        t.residual = true;
        for_each_isa(&t);
        t = plain(17, 33, 9, seed++);
        t.alpha = 0.0f;
        t.beta = 2.0f;
        t.bias_kind = TB_BIAS_PER_COLUMN;
        t.activation = TB_ACTIVATION_SILU;
        for_each_isa(&t);
    }
    /* batches (with B broadcast), k split into several blocks, several thread counts */
    for (int threads = 1; threads <= 3; threads++) {
        TB_CHECK(tb_set_num_threads(threads) == TB_OK);
        gemm_case t = plain(65, 129, 300, seed++);
        t.batch = 3;
        t.trans_a = true;
        t.bias_kind = TB_BIAS_PER_COLUMN;
        t.activation = TB_ACTIVATION_GELU;
        t.residual = true;
        t.c_pad = 7;
        for_each_isa(&t);
        t = plain(256, 256, 256, seed++);
        t.beta = 1.0f;
        for_each_isa(&t);
        t = plain(128, 1024, 512, seed++);
        t.trans_b = true;
        t.bias_kind = TB_BIAS_PER_COLUMN;
        t.activation = TB_ACTIVATION_GELU;
        for_each_isa(&t);
        t = plain(30, 70, 520, seed++);
        t.batch = 5;
        t.broadcast_b = true;
        t.beta = 1.0f;
        for_each_isa(&t);
    }
    TB_CHECK(tb_set_num_threads(tb_physical_cores()) == TB_OK);
    /* bf16 operands at every ISA: read in place where the kernel can, a clear UNSUPPORTED elsewhere,
     * and the reference reads them too */
    for (int s = 0; s < 4; s++) {
        gemm_case t = plain(40 + 9 * s, 50 + 17 * s, 70 + 31 * s, seed++);
        t.bf16_operands = true;
        t.trans_a = s & 1;
        t.trans_b = s >> 1;
        t.bias_kind = TB_BIAS_PER_COLUMN;
        t.activation = TB_ACTIVATION_GELU;
        for_each_isa(&t);
    }
    {
        tb_gemm_desc bad = {.m = 2, .n = 2, .k = 2, .a_bf16 = (const uint16_t[4]){0}, .b = (const float[4]){0},
                            .c = (float[4]){0}, .c_row_stride = 2, .a_row_stride = 2, .a_col_stride = 1,
                            .b_row_stride = 2, .b_col_stride = 1, .alpha = 1.0f, .batch = 1};
        tb_status status = tb_gemm_f32(&bad); /* a bf16 A with an f32 B is refused, never misread */
        TB_CHECK_MSG(status == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "bf16"), "got %s",
                     tb_status_name(status));
    }
    test_forced_blocking(&seed);
    test_bf16_precision(&seed);
    return tb_test_finish("test_gemm");
}
