/* Standalone timing of the LLM's int8-activation matmul (not a test, not part of the library): the
 * Qwen2.5-0.5B layer shapes (int4, group 64) at the row counts of decode (1), batched decode (8), a
 * server prompt chunk (64) and a generate() prompt chunk (256), through tb_llm_qmatmul with the kernel
 * family the CPU picks (or TORCHBURN_QFAMILY=avx2 / scalar to force one); TORCHBURN_QFORMAT=int8 times
 * int8 weights instead. Build against a built library, e.g.:
 *   gcc -O2 -Iinclude -Isrc -DTB_HAVE_X86 tools/qmatmul_timing.c build/rel/libtorchburn.a -lm -lpthread -o /tmp/qmatmul_timing
 * Run: TORCHBURN_NUM_THREADS=1 /tmp/qmatmul_timing [seconds_per_case [M]] (M: only that row count)
 * Prints the median time per call and GMAC/s (multiply-adds of the integer dots per second). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "timing_common.h"

static const tb_llm_qkernels *family(void) {
    const char *name = getenv("TORCHBURN_QFAMILY");
#ifdef TB_HAVE_X86
    if (name && strcmp(name, "avx2") == 0)
        return &tb_llm_qkernels_avx2;
#endif
    if (name && strcmp(name, "scalar") == 0)
        return &tb_llm_qkernels_ref;
    return tb_llm_qkernels_active();
}

int main(int argc, char **argv) {
    const double budget = argc > 1 ? atof(argv[1]) : 0.5;
    const int64_t only_rows = argc > 2 ? atoll(argv[2]) : 0;
    const tb_llm_qkernels *kernels = family();
    if (!kernels) {
        fprintf(stderr, "no int8-activation kernels on this CPU\n");
        return 1;
    }
    const int64_t shapes[][2] = {{4864, 896}, {896, 4864}, {1152, 896}};
    const int64_t rows[] = {1, 8, 64, 256};
    printf("family %s, %s weights\n", kernels->name,
           getenv("TORCHBURN_QFORMAT") && strcmp(getenv("TORCHBURN_QFORMAT"), "int8") == 0 ? "int8" : "int4 g64");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t n = shapes[s][0], k = shapes[s][1], group = 64;
        const char *format = getenv("TORCHBURN_QFORMAT");
        const bool int8 = format && strcmp(format, "int8") == 0;
        float *w = malloc(sizeof(float) * (size_t)(n * k));
        for (int64_t i = 0; i < n * k; i++)
            w[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
        uint8_t *packed = malloc((size_t)(int8 ? n * k : n * k / 2));
        float *scales = malloc(sizeof(float) * (size_t)(n * k / group));
        llm_matrix matrix = {.n = n, .k = k, .format = int8 ? TB_LLM_QUANT_INT8 : TB_LLM_QUANT_INT4};
        const tb_status quantized = int8 ? tb_quantize_int8(w, n, k, (int8_t *)packed, scales)
                                         : tb_llm_quantize_int4(w, n, k, group, packed, scales);
        if (quantized != TB_OK ||
            tb_llm_matrix_bind(&matrix, packed, scales, group) != TB_OK) {
            fprintf(stderr, "quantize failed\n");
            return 1;
        }
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            const int64_t m = rows[r];
            if (only_rows && m != only_rows)
                continue;
            float *x = malloc(sizeof(float) * (size_t)(m * k)), *y = malloc(sizeof(float) * (size_t)(m * n));
            for (int64_t i = 0; i < m * k; i++)
                x[i] = (float)((i * 104729) % 1999 - 999) / 999.0f;
            enum { ROUNDS = 9 };
            double times[ROUNDS];
            const double start = now_seconds();
            int calls = 0;
            while (now_seconds() - start < budget / ROUNDS || calls < 2) {
                if (tb_llm_qmatmul(kernels, &matrix, x, k, m, y) != TB_OK)
                    return 1;
                calls++;
            }
            for (int round = 0; round < ROUNDS; round++) {
                const double t0 = now_seconds();
                for (int c = 0; c < calls; c++)
                    if (tb_llm_qmatmul(kernels, &matrix, x, k, m, y) != TB_OK)
                        return 1;
                times[round] = (now_seconds() - t0) / calls;
            }
            qsort(times, ROUNDS, sizeof times[0], compare_doubles);
            const double t = times[ROUNDS / 2];
            printf("N=%5lld K=%5lld M=%3lld  %9.1f us  %6.1f GMAC/s\n", (long long)n, (long long)k, (long long)m,
                   t * 1e6, (double)(m * n * k) / t * 1e-9);
            free(x);
            free(y);
        }
        free(w);
        free(packed);
        free(scales);
    }
    return 0;
}
