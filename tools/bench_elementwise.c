/* Single-thread timing of the elementwise kernel tables against memcpy, for a quick GB/s check
 * (not a test). Build: cc -O2 -Iinclude -Isrc tools/bench_elementwise.c <build>/libtorchburn.a -lm -lpthread
 * Run: ./bench_elementwise [scalar|avx2|avx512]... (default: every supported level). Prints the best of
 * several repetitions as ms and GB/s counting bytes read + written once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/elementwise.h"
#include "torchburn/cpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct bench_buffers {
    float *x, *y, *w, *b;
    uint16_t *h;
} bench_buffers;

enum { REPS = 7 };

static void report(const char *what, double seconds, double bytes) {
    printf("  %-28s %8.3f ms  %7.1f GB/s\n", what, seconds * 1e3, bytes / seconds * 1e-9);
}

/* times fn(arg) REPS times, returns the best */
#define TIME_BEST(best, statement)              \
    do {                                        \
        best = 1e30;                            \
        for (int rep_ = 0; rep_ < REPS; rep_++) { \
            double t0_ = now();                 \
            statement;                          \
            double t1_ = now() - t0_;           \
            if (t1_ < best)                     \
                best = t1_;                     \
        }                                       \
    } while (0)

static void bench_table(const tb_elementwise_kernels *k, bench_buffers *m) {
    const int64_t n = 1024 * 1024;
    const tb_unary_params p = {.alpha = 0.01f, .lo = -1, .hi = 1};
    double best;
    printf("%s:\n", k->isa_name);
    static const int unary_ops[] = {TB_UNARY_RELU, TB_UNARY_EXP, TB_UNARY_LOG, TB_UNARY_SIN, TB_UNARY_TANH, TB_UNARY_SIGMOID,
                                    TB_UNARY_GELU, TB_UNARY_GELU_TANH, TB_UNARY_SILU};
    for (size_t i = 0; i < sizeof unary_ops / sizeof unary_ops[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s 1024^2", tb_unary_op_names[unary_ops[i]]);
        TIME_BEST(best, k->unary[unary_ops[i]](m->x, m->y, n, &p));
        report(name, best, 8.0 * n);
    }
    TIME_BEST(best, k->binary[TB_BINARY_ADD](m->x, 1, m->w, 1, m->y, n));
    report("add 1024^2", best, 12.0 * n);
    TIME_BEST(best, k->reduce[TB_REDUCE_SUM](m->x, 1, n, 1, m->y));
    report("sum 1M", best, 4.0 * n);
    TIME_BEST(best, k->reduce[TB_REDUCE_SUM](m->x, 1, 1024, 1024, m->y));
    report("sum dim0 1024x1024", best, 4.0 * n);
    TIME_BEST(best, k->reduce[TB_REDUCE_MAX](m->x, 1, 1024, 1024, m->y));
    report("max dim0 1024x1024", best, 4.0 * n);
    int64_t *index = (int64_t *)m->b; /* scratch */
    TIME_BEST(best, k->argmax(m->x, 1, 1024, 1024, index));
    report("argmax dim0 1024x1024", best, 4.0 * n);
    float *mean = m->b + 4096;
    TIME_BEST(best, k->var(m->x, 1, 1024, 1024, 1, mean, m->y));
    report("var dim0 1024x1024", best, 4.0 * n);
    TIME_BEST(best, k->softmax(m->x, m->y, 1, 1024, 1024, false));
    report("softmax dim0 1024x1024", best, 8.0 * n);
    TIME_BEST(best, k->softmax(m->x, m->y, 2048, 2048, 1, false));
    report("softmax 2048x2048", best, 8.0 * 2048 * 2048);
    TIME_BEST(best, k->softmax(m->x, m->y, 2048, 2048, 1, true));
    report("log_softmax 2048x2048", best, 8.0 * 2048 * 2048);
    TIME_BEST(best, k->softmax(m->x, m->y, 16, 262144, 1, false));
    report("softmax 16x262144 (online)", best, 8.0 * 16 * 262144);
    TIME_BEST(best, k->layer_norm(m->x, m->w, m->b, m->y, 4096, 1024, 1e-5f, NULL, NULL));
    report("layer_norm 4096x1024", best, 8.0 * 4096 * 1024);
    TIME_BEST(best, k->rms_norm(m->x, m->w, m->y, 4096, 1024, 1e-6f));
    report("rms_norm 4096x1024", best, 8.0 * 4096 * 1024);
    TIME_BEST(best, k->f32_to_bf16(m->x, m->h, n));
    report("f32_to_bf16 1M", best, 6.0 * n);
    TIME_BEST(best, k->f16_to_f32(m->h, m->y, n));
    report("f16_to_f32 1M", best, 6.0 * n);
}

int main(int argc, char **argv) {
    const int64_t big = 2048 * 2048 * 2; /* covers 4096x1024 and 16x262144 */
    /* 64-byte aligned like tb_alloc and PyTorch tensors: a misaligned zmm load touches two lines */
    bench_buffers m = {aligned_alloc(64, big * 4), aligned_alloc(64, big * 4), aligned_alloc(64, big * 4),
                       aligned_alloc(64, big * 4), aligned_alloc(64, big * 2)};
    if (!m.x || !m.y || !m.w || !m.b || !m.h)
        return 1;
    srand(1);
    for (int64_t i = 0; i < big; i++) {
        m.x[i] = 6.0f * ((float)rand() / (float)RAND_MAX - 0.5f);
        m.w[i] = 1.0f + 0.1f * m.x[i];
        m.b[i] = 0.1f * m.x[i];
        m.h[i] = (uint16_t)rand();
    }
    memset(m.y, 0, big * 4);
    double best;
    TIME_BEST(best, memcpy(m.y, m.x, 1024 * 1024 * 4));
    printf("memcpy 4 MiB: %.3f ms, %.1f GB/s (read + write)\n", best * 1e3, 8.0 * 1024 * 1024 / best * 1e-9);
    for (int isa = 0; isa < TB_ISA_COUNT; isa++) {
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++)
            wanted = wanted || strcmp(argv[a], tb_isa_name((tb_isa)isa)) == 0;
        if (wanted && tb_isa_supported((tb_isa)isa) && isa != TB_ISA_NEON)
            bench_table(tb_elementwise_kernels_for((tb_isa)isa), &m);
    }
    return 0;
}
