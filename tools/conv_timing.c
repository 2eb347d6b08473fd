/* Standalone timing of one f32 convolution through tb_op_conv2d (not a test, not part of the library).
 * Build against a built library, e.g.:
 *   gcc -O2 -Iinclude -Isrc tools/conv_timing.c build/rel/libtorchburn.a -lm -lpthread -o /tmp/conv_timing
 * Run: TORCHBURN_NUM_THREADS=1 /tmp/conv_timing N C_IN C_OUT SIZE [KERNEL STRIDE PAD] [seconds]
 * Prints the median time per call and the direct-convolution GFLOP/s (2 N OH OW C_out C_in KH KW per
 * call, whatever the algorithm). TORCHBURN_CONV_WINOGRAD=0 compares the path without Winograd. */
#include <stdio.h>
#include <stdlib.h>

#include "torchburn/ops_nn.h"
#include "torchburn/alloc.h"
#include "torchburn/tensor.h"
#include "timing_common.h"

static void fill(tb_tensor *t, unsigned seed, float scale) {
    float *p = tb_tensor_data(t);
    for (int64_t i = 0; i < tb_tensor_numel(t); i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s N C_IN C_OUT SIZE [KERNEL STRIDE PAD] [seconds]\n", argv[0]);
        return 2;
    }
    int64_t n = atoll(argv[1]), cin = atoll(argv[2]), cout = atoll(argv[3]), size = atoll(argv[4]);
    int64_t kernel = argc > 5 ? atoll(argv[5]) : 3, stride = argc > 6 ? atoll(argv[6]) : 1;
    int64_t pad = argc > 7 ? atoll(argv[7]) : kernel / 2;
    double budget = argc > 8 ? atof(argv[8]) : 2.0;
    int64_t xs[4] = {n, cin, size, size}, ws[4] = {cout, cin, kernel, kernel}, bs[1] = {cout};
    tb_tensor x, w, b, y = {0};
    if (tb_tensor_empty(TB_F32, 4, xs, TB_ALLOC_DEFAULT, &x) != TB_OK ||
        tb_tensor_empty(TB_F32, 4, ws, TB_ALLOC_DEFAULT, &w) != TB_OK ||
        tb_tensor_empty(TB_F32, 1, bs, TB_ALLOC_DEFAULT, &b) != TB_OK) {
        fprintf(stderr, "error: %s\n", tb_error_message());
        return 1;
    }
    fill(&x, 1, 2.0f);
    fill(&w, 2, 0.1f);
    fill(&b, 3, 1.0f);
    tb_conv2d_params p = {.stride = {stride, stride}, .padding = {pad, pad}, .dilation = {1, 1}, .groups = 1};
    enum { ROUNDS = 7 };
    double samples[ROUNDS], start = now_seconds();
    int calls = 0;
    while (calls < 3 || now_seconds() - start < budget / ROUNDS / 4) {
        tb_tensor_release(&y);
        if (tb_op_conv2d(&x, &w, &b, &p, &y) != TB_OK) {
            fprintf(stderr, "error: %s\n", tb_error_message());
            return 1;
        }
        calls++;
    }
    int per_round = calls * 4 > 1 ? calls * 4 : 1;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < per_round; i++) {
            tb_tensor_release(&y);
            if (tb_op_conv2d(&x, &w, &b, &p, &y) != TB_OK)
                return 1;
        }
        samples[r] = (now_seconds() - t0) / per_round;
    }
    qsort(samples, ROUNDS, sizeof samples[0], compare_doubles);
    int64_t out = (size + 2 * pad - kernel) / stride + 1;
    double flops = 2.0 * (double)(n * out * out * cout * cin * kernel * kernel);
    printf("conv %lldx%lldx%lldx%lld -> %lld, %lldx%lld/%lld: %.3f ms, %.1f GFLOP/s (direct-equivalent)\n",
           (long long)n, (long long)cin, (long long)size, (long long)size, (long long)cout, (long long)kernel,
           (long long)kernel, (long long)stride, samples[ROUNDS / 2] * 1e3, flops / samples[ROUNDS / 2] / 1e9);
    tb_tensor_release(&y);
    tb_tensor_release(&x);
    tb_tensor_release(&w);
    tb_tensor_release(&b);
    return 0;
}
