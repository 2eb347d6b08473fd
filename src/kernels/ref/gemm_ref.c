/* Scalar GEMM pieces: the portable micro-kernel and packers (the TB_ISA_SCALAR path and the fallback
 * for any ISA without its own), and a naive triple-loop reference of the whole tb_gemm_desc contract
 * (double accumulation) that tests and the reference engine compare against. */
#include <math.h>
#include <string.h>

#include "kernels/gemm_internal.h"
#include "torchburn/dtype.h"

enum { REF_MR = 4, REF_NR = 16 };

void tb_gemm_pack_a_portable(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc,
                             int mr, float *a_panel) {
    if (rows < mr)
        memset(a_panel, 0, (size_t)kc * (size_t)mr * sizeof(float));
    if (col_stride == 1) { /* row-major A: read each row contiguously, write with stride mr */
        for (int i = 0; i < rows; i++) {
            const float *src = a + i * row_stride;
            for (int64_t p = 0; p < kc; p++)
                a_panel[p * mr + i] = src[p];
        }
        return;
    }
    for (int64_t p = 0; p < kc; p++) {
        const float *src = a + p * col_stride;
        float *dst = a_panel + p * mr;
        for (int i = 0; i < rows; i++)
            dst[i] = src[i * row_stride];
    }
}

void tb_gemm_pack_b_portable(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc,
                             int nr, float *b_panel) {
    if (cols < nr)
        memset(b_panel, 0, (size_t)kc * (size_t)nr * sizeof(float));
    if (row_stride == 1 && col_stride != 1) { /* transposed B: each column is contiguous in k */
        for (int j = 0; j < cols; j++) {
            const float *src = b + j * col_stride;
            for (int64_t p = 0; p < kc; p++)
                b_panel[p * nr + j] = src[p];
        }
        return;
    }
    for (int64_t p = 0; p < kc; p++) {
        const float *src = b + p * row_stride;
        float *dst = b_panel + p * nr;
        if (col_stride == 1) {
            memcpy(dst, src, (size_t)cols * sizeof(float));
        } else {
            for (int j = 0; j < cols; j++)
                dst[j] = src[j * col_stride];
        }
    }
}

static void microkernel_ref(int64_t kc, const float *a_panel, const float *b_panel, float *c, int64_t c_row_stride,
                            int mr, int nr, float alpha, float beta) {
    float acc[REF_MR][REF_NR];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < kc; p++) {
        const float *a = a_panel + p * REF_MR;
        const float *b = b_panel + p * REF_NR;
        for (int i = 0; i < REF_MR; i++)
            for (int j = 0; j < REF_NR; j++)
                acc[i][j] += a[i] * b[j];
    }
    for (int i = 0; i < mr; i++) {
        float *row = c + i * c_row_stride;
        if (beta == 0.0f) {
            for (int j = 0; j < nr; j++)
                row[j] = alpha * acc[i][j];
        } else {
            for (int j = 0; j < nr; j++)
                row[j] = alpha * acc[i][j] + beta * row[j];
        }
    }
}

static void pack_a_ref(const float *a, int64_t row_stride, int64_t col_stride, int rows, int64_t kc, float *a_panel) {
    tb_gemm_pack_a_portable(a, row_stride, col_stride, rows, kc, REF_MR, a_panel);
}

static void pack_b_ref(const float *b, int64_t row_stride, int64_t col_stride, int cols, int64_t kc, float *b_panel) {
    tb_gemm_pack_b_portable(b, row_stride, col_stride, cols, kc, REF_NR, b_panel);
}

void tb_gemm_epilogue_portable(float *c, int64_t c_row_stride, int rows, int cols, const tb_gemm_epilogue *e) {
    for (int i = 0; i < rows; i++) {
        float *row = c + i * c_row_stride;
        const float *residual = e->residual ? e->residual + i * e->residual_row_stride : NULL;
        for (int j = 0; j < cols; j++) {
            float value = row[j];
            if (e->bias_kind == TB_BIAS_PER_COLUMN)
                value += e->bias[j];
            else if (e->bias_kind == TB_BIAS_PER_ROW)
                value += e->bias[i];
            value = tb_gemm_activation_scalar(e->activation, value);
            if (residual)
                value += residual[j];
            row[j] = value;
        }
    }
}

const tb_gemm_microkernel tb_gemm_microkernel_ref = {
    .isa_name = "scalar",
    .mr = REF_MR,
    .nr = REF_NR,
    .kc = 256,
    .mc = 128,
    .nc = 1024,
    .kernel = microkernel_ref,
    .pack_a = pack_a_ref,
    .pack_b = pack_b_ref,
    .epilogue = tb_gemm_epilogue_portable,
};

float tb_gemm_activation_scalar(tb_activation activation, float x) {
    switch (activation) {
    case TB_ACTIVATION_NONE:
        return x;
    case TB_ACTIVATION_RELU:
        return x > 0.0f ? x : (x != x ? x : 0.0f); /* NaN propagates, as torch.relu */
    case TB_ACTIVATION_GELU:
        return (float)(0.5 * (double)x * (1.0 + erf((double)x * 0.70710678118654752440)));
    case TB_ACTIVATION_GELU_TANH: {
        double xd = x;
        double inner = 0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd);
        return (float)(0.5 * xd * (1.0 + tanh(inner)));
    }
    case TB_ACTIVATION_SILU:
        return (float)((double)x / (1.0 + exp(-(double)x)));
    case TB_ACTIVATION_SIGMOID:
        return (float)(1.0 / (1.0 + exp(-(double)x)));
    case TB_ACTIVATION_TANH:
        return tanhf(x);
    default:
        return x;
    }
}

/* Element `index` of an operand given as f32 or as bf16 bits (exactly one of the two set). */
static double operand_value(const float *f32, const uint16_t *bf16, int64_t index) {
    return f32 ? (double)f32[index] : (double)tb_bf16_to_f32(bf16[index]);
}

tb_status tb_gemm_f32_reference(const tb_gemm_desc *desc) {
    TB_TRY(tb_gemm_validate(desc, "gemm_reference"));
    const tb_gemm_desc *d = desc;
    for (int64_t batch = 0; batch < d->batch; batch++) {
        const float *a = d->a ? d->a + batch * d->a_batch_stride : NULL;
        const float *b = d->b ? d->b + batch * d->b_batch_stride : NULL;
        const uint16_t *a16 = d->a_bf16 ? d->a_bf16 + batch * d->a_batch_stride : NULL;
        const uint16_t *b16 = d->b_bf16 ? d->b_bf16 + batch * d->b_batch_stride : NULL;
        float *c = d->c + batch * d->c_batch_stride;
        const float *r = d->residual ? d->residual + batch * d->residual_batch_stride : NULL;
        for (int64_t i = 0; i < d->m; i++) {
            for (int64_t j = 0; j < d->n; j++) {
                double sum = 0.0;
                if (d->alpha != 0.0f)
                    for (int64_t p = 0; p < d->k; p++)
                        sum += operand_value(a, a16, i * d->a_row_stride + p * d->a_col_stride) *
                               operand_value(b, b16, p * d->b_row_stride + j * d->b_col_stride);
                double value = (double)d->alpha * sum;
                if (d->beta != 0.0f)
                    value += (double)d->beta * (double)c[i * d->c_row_stride + j];
                if (d->bias_kind == TB_BIAS_PER_COLUMN)
                    value += d->bias[j];
                else if (d->bias_kind == TB_BIAS_PER_ROW)
                    value += d->bias[i];
                float out = tb_gemm_activation_scalar(d->activation, (float)value);
                if (r)
                    out += r[i * d->residual_row_stride + j];
                c[i * d->c_row_stride + j] = out;
            }
        }
    }
    return TB_OK;
}
