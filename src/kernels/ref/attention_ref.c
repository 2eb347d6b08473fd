/* Scalar online-softmax and mask-row helpers for attention.c (the TB_ISA_SCALAR path); contracts in
 * gemm_internal.h. */
#include <math.h>

#include "kernels/gemm_internal.h"

static float row_max_ref(const float *x, int64_t n) {
    float best = x[0];
    for (int64_t j = 1; j < n; j++) {
        if (x[j] != x[j])
            return x[j];
        if (x[j] > best)
            best = x[j];
    }
    return best;
}

static float exp_sum_ref(float *x, int64_t n, float shift) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        x[j] = expf(x[j] - shift);
        sum += x[j];
    }
    return sum;
}

static void scale_ref(float *x, int64_t n, float factor) {
    for (int64_t j = 0; j < n; j++)
        x[j] *= factor;
}

static void add_mask_ref(float *x, const float *mask, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        x[j] += mask[j];
}

static void bool_mask_ref(float *x, const uint8_t *keep, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        if (!keep[j])
            x[j] = -INFINITY;
}

const tb_attention_kernels tb_attention_kernels_ref = {
    .isa_name = "scalar",
    .row_max = row_max_ref,
    .exp_sum = exp_sum_ref,
    .scale = scale_ref,
    .add_mask = add_mask_ref,
    .bool_mask = bool_mask_ref,
};
