/* Standalone timing of the GEMM and attention kernels (not a test, not part of the library).
 * Build against a built library, e.g.:
 *   gcc -O2 -Iinclude -Isrc tools/gemm_timing.c build/libtorchburn.a -lm -lpthread -o /tmp/gemm_timing
 * Run: TORCHBURN_NUM_THREADS=2 /tmp/gemm_timing [seconds_per_case]
 * Prints the median time per call and GFLOP/s for the shapes the performance targets name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "torchburn/thread_pool.h"
#include "timing_common.h"

typedef tb_status (*run_fn)(const void *desc);
static tb_status run_gemm(const void *desc) { return tb_gemm_f32((const tb_gemm_desc *)desc); }
static tb_status run_attention(const void *desc) { return tb_attention_f32((const tb_attention_desc *)desc); }

/* Median seconds per call over `rounds` timed rounds of a call count sized to ~budget/rounds. */
static double time_call(run_fn fn, const void *desc, double budget) {
    enum { ROUNDS = 7 };
    if (fn(desc) != TB_OK) {
        fprintf(stderr, "error: %s\n", tb_error_message());
        exit(1);
    }
    double start = now_seconds();
    int calls = 0;
    while (now_seconds() - start < budget / ROUNDS / 4) {
        (void)fn(desc);
        calls++;
    }
    int per_round = calls * 4 > 1 ? calls * 4 : 1;
    double samples[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < per_round; i++)
            (void)fn(desc);
        samples[r] = (now_seconds() - t0) / per_round;
    }
    qsort(samples, ROUNDS, sizeof samples[0], compare_doubles);
    return samples[ROUNDS / 2];
}

static float *random_floats(size_t n) {
    float *x = malloc(n * sizeof(float));
    if (!x)
        exit(1);
    uint64_t state = 0x9E3779B97F4A7C15ull + n;
    for (size_t i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        x[i] = (float)((double)(state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    return x;
}

static void gemm_case(const char *name, int64_t m, int64_t n, int64_t k, bool linear_gelu, double budget) {
    float *a = random_floats((size_t)(m * k)), *b = random_floats((size_t)(k * n)), *c = random_floats((size_t)(m * n));
    float *bias = random_floats((size_t)n);
    tb_gemm_desc d = {.m = m, .n = n, .k = k, .a = a, .a_row_stride = k, .a_col_stride = 1, .b = b,
                      .b_row_stride = n, .b_col_stride = 1, .c = c, .c_row_stride = n, .alpha = 1.0f, .batch = 1};
    if (linear_gelu) { /* y = gelu(x W^T + b), W stored [n, k] like nn.Linear.weight */
        d.b_row_stride = 1;
        d.b_col_stride = k;
        d.bias_kind = TB_BIAS_PER_COLUMN;
        d.bias = bias;
        d.activation = TB_ACTIVATION_GELU;
    }
    double seconds = time_call(run_gemm, &d, budget);
    double flops = 2.0 * (double)m * (double)n * (double)k;
    printf("%-34s %9.1f us %8.1f GFLOP/s\n", name, seconds * 1e6, flops / seconds * 1e-9);
    free(a);
    free(b);
    free(c);
    free(bias);
}

static void attention_case(const char *name, int64_t batch, int64_t heads, int64_t t, int64_t dim, bool causal,
                           double budget) {
    size_t count = (size_t)(batch * heads * t * dim);
    float *q = random_floats(count), *k = random_floats(count), *v = random_floats(count), *out = random_floats(count);
    tb_attention_desc d = {.batch = batch, .q_heads = heads, .kv_heads = heads, .q_len = t, .kv_len = t,
                           .head_dim = dim, .value_dim = dim, .causal = causal, .scale = 1.0f / sqrtf((float)dim)};
    int64_t strides[4] = {heads * t * dim, t * dim, dim, 1};
    d.q = q;
    d.k = k;
    d.v = v;
    d.out = out;
    memcpy(d.q_strides, strides, sizeof strides);
    memcpy(d.k_strides, strides, sizeof strides);
    memcpy(d.v_strides, strides, sizeof strides);
    memcpy(d.out_strides, strides, sizeof strides);
    double seconds = time_call(run_attention, &d, budget);
    double flops = 4.0 * (double)(batch * heads) * (double)t * (double)t * (double)dim * (causal ? 0.5 : 1.0);
    printf("%-34s %9.1f us %8.1f GFLOP/s (useful)\n", name, seconds * 1e6, flops / seconds * 1e-9);
    free(q);
    free(k);
    free(v);
    free(out);
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 1.0;
    printf("isa=%s threads=%d\n", tb_isa_name(tb_isa_active()), tb_num_threads());
    gemm_case("gemm 1024x1024x1024", 1024, 1024, 1024, false, budget);
    gemm_case("gemm 256x256x256", 256, 256, 256, false, budget);
    gemm_case("gemm 128x1024x512 (skinny)", 128, 1024, 512, false, budget);
    gemm_case("linear 128x512->1024 +bias+gelu", 128, 1024, 512, true, budget);
    attention_case("sdpa B4 H8 T128 D64 causal", 4, 8, 128, 64, true, budget);
    attention_case("sdpa B4 H8 T128 D64", 4, 8, 128, 64, false, budget);
    return 0;
}
