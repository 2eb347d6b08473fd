/* Linear layers of the LLM in their run format: f32 weights go to the GEMM driver for batches and to the
 * f32 GEMV kernel for single tokens (a GEMM would pack the whole weight for one row); quantized weights go
 * to the int8-activation kernels of llm_qmatmul.c where the CPU has them, else to tb_quant_matmul with f32
 * activations. */
#include "kernels/gemm.h"
#include "llm/llm_internal.h"
#include "torchburn/thread_pool.h"

enum { GEMV_ROWS = 16 };

typedef struct gemv_job {
    const tb_llm_kernels *kernels;
    const llm_matrix *w;
    const float *x;
    float *y;
} gemv_job;

static void gemv_blocks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const gemv_job *job = context;
    const llm_matrix *w = job->w;
    const int64_t first = begin * GEMV_ROWS, last = end * GEMV_ROWS < w->n ? end * GEMV_ROWS : w->n;
    job->kernels->gemv_f32(w->f32 + first * w->k, w->k, job->x, job->y + first, last - first);
    if (w->bias)
        for (int64_t j = first; j < last; j++)
            job->y[j] += w->bias[j];
}

tb_status tb_llm_matmul(const tb_llm_kernels *kernels, const tb_llm_qkernels *qkernels, const llm_matrix *w,
                        const float *x, int64_t x_stride, int64_t m, float *y) {
    if (m <= 0 || w->n == 0)
        return TB_OK;
    if (w->format != TB_LLM_QUANT_NONE && qkernels)
        return tb_llm_qmatmul(qkernels, w, x, x_stride, m, y);
    if (w->format != TB_LLM_QUANT_NONE) {
        tb_quant_matmul_desc desc = {.x = x,
                                     .m = m,
                                     .x_row_stride = x_stride,
                                     .y = y,
                                     .y_row_stride = w->n,
                                     .bias = w->bias,
                                     .act = TB_QUANT_ACT_F32,
                                     .kernel = TB_QUANT_KERNEL_AUTO};
        return tb_quant_matmul_ex(&w->q, &desc);
    }
    if (m == 1) {
        gemv_job job = {.kernels = kernels, .w = w, .x = x, .y = y};
        const int64_t blocks = (w->n + GEMV_ROWS - 1) / GEMV_ROWS;
        const int64_t block_bytes = GEMV_ROWS * w->k * 4;
        tb_parallel_for(blocks, block_bytes > 0 ? (65536 + block_bytes - 1) / block_bytes : 1, gemv_blocks, &job);
        return TB_OK;
    }
    /* B[k, n] = W[n, k]: a transposed view, packed by the driver */
    tb_gemm_desc desc = {.m = m,
                         .n = w->n,
                         .k = w->k,
                         .a = x,
                         .a_row_stride = x_stride,
                         .a_col_stride = 1,
                         .b = w->f32,
                         .b_row_stride = 1,
                         .b_col_stride = w->k,
                         .c = y,
                         .c_row_stride = w->n,
                         .alpha = 1.0f,
                         .beta = 0.0f,
                         .bias_kind = w->bias ? TB_BIAS_PER_COLUMN : TB_BIAS_NONE,
                         .bias = w->bias,
                         .activation = TB_ACTIVATION_NONE,
                         .batch = 1};
    return tb_gemm_f32(&desc);
}
