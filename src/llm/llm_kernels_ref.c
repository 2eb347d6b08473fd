/* Scalar reference of the LLM kernels (contracts in llm_internal.h) and the per-ISA table selection.
 * The SIMD tables are tested against these in tests/c/test_llm.c. */
#include <math.h>

#include "llm/llm_internal.h"
#include "torchburn/dtype.h"

static void gemv_f32_ref(const float *w, int64_t k, const float *x, float *y, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        const float *row = w + j * k;
        float sum = 0.0f;
        for (int64_t p = 0; p < k; p++)
            sum += row[p] * x[p];
        y[j] = sum;
    }
}

static float key_at_ref(const void *keys, bool f16, int64_t index) {
    return f16 ? tb_f16_to_f32(((const uint16_t *)keys)[index]) : ((const float *)keys)[index];
}

static void attn_scores_ref(const float *q, int64_t groups, int64_t d, const void *key_blocks, bool keys_f16,
                            int64_t blocks, float scale, float *scores, int64_t score_stride) {
    for (int64_t g = 0; g < groups; g++)
        for (int64_t j = 0; j < blocks * TB_LLM_KEY_BLOCK; j++) {
            const int64_t block = j / TB_LLM_KEY_BLOCK, lane = j % TB_LLM_KEY_BLOCK;
            float sum = 0.0f;
            for (int64_t i = 0; i < d; i++)
                sum += q[g * d + i] * key_at_ref(key_blocks, keys_f16, (block * d + i) * TB_LLM_KEY_BLOCK + lane);
            scores[g * score_stride + j] = sum * scale;
        }
}

static void attn_values_ref(const float *p, int64_t groups, int64_t p_stride, const void *values, bool values_f16,
                            int64_t len, int64_t d, float *out) {
    for (int64_t g = 0; g < groups; g++)
        for (int64_t i = 0; i < d; i++) {
            float sum = 0.0f;
            for (int64_t j = 0; j < len; j++)
                sum += p[g * p_stride + j] * key_at_ref(values, values_f16, j * d + i);
            out[g * d + i] = sum;
        }
}

static void softmax_ref(float *x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inverse = 1.0f / sum;
    for (int64_t i = 0; i < n; i++)
        x[i] *= inverse;
}

static void silu_mul_ref(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void rms_norm_ref(const float *x, const float *weight, float *y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float rstd = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = weight[i] * (x[i] * rstd);
}

static void to_f16_ref(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = tb_f32_to_f16(x[i]);
}

static int64_t argmax_ref(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

const tb_llm_kernels tb_llm_kernels_ref = {
    .name = "scalar",
    .gemv_f32 = gemv_f32_ref,
    .attn_scores = attn_scores_ref,
    .attn_values = attn_values_ref,
    .softmax = softmax_ref,
    .silu_mul = silu_mul_ref,
    .rms_norm = rms_norm_ref,
    .to_f16 = to_f16_ref,
    .argmax = argmax_ref,
};

const tb_llm_kernels *tb_llm_kernels_for(tb_isa isa) {
#ifdef TB_HAVE_X86
    if (isa == TB_ISA_AVX512 && tb_isa_supported(TB_ISA_AVX512))
        return &tb_llm_kernels_avx512;
    if ((isa == TB_ISA_AVX2 || isa == TB_ISA_AVX512) && tb_isa_supported(TB_ISA_AVX2))
        return &tb_llm_kernels_avx2;
#endif
    (void)isa;
    return &tb_llm_kernels_ref;
}

const tb_llm_kernels *tb_llm_kernels_active(void) { return tb_llm_kernels_for(tb_isa_active()); }
