/* Matmul of int4/int8 weights (the API layout of torchburn/quant.h, unchanged) with activations quantized
 * to int8 in blocks of 32 values along K (scale = max|x| / 127 per block, like llama.cpp's Q8_0): integer
 * dot products over runs of 8 (int4) or 4 (int8) consecutive k are exact in int32 and are scaled per block
 * in f32. Per-block activation scales keep outlier channels from flattening the rest of a row (which a
 * single scale per row would), and the integer dots make decode bandwidth-bound instead of bound by
 * unpacking weights to f32. The prepared activation layouts below are shared by the scalar reference
 * (here), the AVX-512 VNNI kernels (x86_avx512vnni/llm_qmatmul_avx512vnni.c) and the AVX2 ones
 * (x86_avx2/llm_qmatmul_avx2.c). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/gemm.h"
#include "llm/llm_internal.h"
#include "torchburn/cpu.h"
#include "torchburn/thread_pool.h"

enum { M_TILE = 64, GEMM_MIN_ROWS = 16 };

int64_t tb_llm_qact_row_bytes(tb_llm_quant format, int64_t k) {
    return format == TB_LLM_QUANT_INT4 ? (k + 127) / 128 * TB_LLM_QACT_INT4_BLOCK_BYTES
                                       : (k + 63) / 64 * TB_LLM_QACT_INT8_BLOCK_BYTES;
}

void tb_llm_quantize_blocks32(const float *x, int64_t n, int8_t xq[32], float *scale) {
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        finite &= a <= 3.4028235e38f; /* false for inf and NaN */
        amax = a > amax ? a : amax;
    }
    if (!finite) { /* the block (and every output it reaches) becomes NaN */
        *scale = NAN;
        memset(xq, 0, 32);
        return;
    }
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    *scale = amax / 127.0f;
    for (int64_t i = 0; i < 32; i++) {
        float q = i < n ? rintf(x[i] * inverse) : 0.0f;
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
        xq[i] = (int8_t)q;
    }
}

/* xq[0..k) and the 32-block scales d[0..k/32) (k padded to a multiple of 32 with zeros). */
static void quantize_blocks(const float *x, int64_t k, int8_t *xq, float *d) {
    for (int64_t b = 0; b * 32 < k; b++)
        tb_llm_quantize_blocks32(x + 32 * b, k - 32 * b < 32 ? k - 32 * b : 32, xq + 32 * b, &d[b]);
}

void tb_llm_qact_prepare_block(tb_llm_quant format, const float *x, int64_t n, unsigned char *out) {
    enum { MAX_CHUNK = 128 };
    int8_t xq[MAX_CHUNK];
    float d[MAX_CHUNK / 32];
    memset(xq, 0, sizeof xq);
    for (int i = 0; i < MAX_CHUNK / 32; i++)
        d[i] = 0.0f;
    quantize_blocks(x, n, xq, d);
    int32_t seeds[16];
    float lane_scales[16];
    if (format == TB_LLM_QUANT_INT4) {
        for (int i = 0; i < 64; i++) {
            out[i] = (unsigned char)xq[2 * i];
            out[64 + i] = (unsigned char)xq[2 * i + 1];
        }
        for (int lane = 0; lane < 16; lane++) {
            int32_t sum = 0;
            for (int e = 0; e < 8; e++)
                sum += xq[8 * lane + e];
            seeds[lane] = -8 * sum; /* cancels the +8 of the stored nibbles */
            lane_scales[lane] = d[lane / 4];
        }
        memcpy(out + 128, seeds, sizeof seeds);
        memcpy(out + 192, lane_scales, sizeof lane_scales);
    } else {
        memcpy(out, xq, 64);
        for (int lane = 0; lane < 16; lane++) {
            int32_t sum = 0;
            for (int e = 0; e < 4; e++)
                sum += xq[4 * lane + e];
            seeds[lane] = -128 * sum; /* weights are read as w + 128 (unsigned) */
            lane_scales[lane] = d[lane / 8];
        }
        memcpy(out + 64, seeds, sizeof seeds);
        memcpy(out + 128, lane_scales, sizeof lane_scales);
    }
}

void tb_llm_qact_prepare_ref(tb_llm_quant format, const float *x, int64_t k, unsigned char *dst) {
    const int64_t step = format == TB_LLM_QUANT_INT4 ? 128 : 64;
    const int64_t bytes = format == TB_LLM_QUANT_INT4 ? TB_LLM_QACT_INT4_BLOCK_BYTES : TB_LLM_QACT_INT8_BLOCK_BYTES;
    for (int64_t c = 0; c * step < k; c++)
        tb_llm_qact_prepare_block(format, x + c * step, k - c * step < step ? k - c * step : step, dst + c * bytes);
}

/* ---- scalar reference of the rows kernels (same lane structure and fused roundings as the SIMD ones) ---- */

static float int4_lane_scale(const tb_quant_weight *w, const float *scales, int64_t b, int lane) {
    return scales[(128 * b + 8 * lane) / w->group_size];
}

static void rows_ref(const tb_llm_qrun *run, int64_t n_begin, int64_t n_end) {
    const tb_quant_weight *w = run->w;
    const bool int4 = w->type == TB_QUANT_INT4;
    const int64_t chunks = int4 ? (w->k + 127) / 128 : (w->k + 63) / 64;
    for (int64_t n = n_begin; n < n_end; n++) {
        const uint8_t *row = (const uint8_t *)w->data + n * w->row_bytes;
        const float *scales = w->scales + n * w->scales_per_row;
        for (int64_t m = 0; m < run->m; m++) {
            const unsigned char *act = run->act + m * run->act_row_bytes;
            float lanes[16] = {0};
            for (int64_t c = 0; c < chunks; c++) {
                int32_t seeds[16];
                float xs[16];
                if (int4) {
                    const unsigned char *a = act + c * TB_LLM_QACT_INT4_BLOCK_BYTES;
                    memcpy(seeds, a + 128, sizeof seeds);
                    memcpy(xs, a + 192, sizeof xs);
                    for (int lane = 0; lane < 16; lane++) {
                        int32_t sum = seeds[lane];
                        for (int e = 0; e < 4; e++) {
                            const int64_t byte = 64 * c + 4 * lane + e;
                            const int packed = 2 * byte < w->k ? row[byte] : 0;
                            sum += (packed & 15) * (int8_t)a[4 * lane + e] + (packed >> 4) * (int8_t)a[64 + 4 * lane + e];
                        }
                        if (128 * c + 8 * lane < w->k)
                            lanes[lane] = fmaf((float)sum, int4_lane_scale(w, scales, c, lane) * xs[lane], lanes[lane]);
                    }
                } else {
                    const unsigned char *a = act + c * TB_LLM_QACT_INT8_BLOCK_BYTES;
                    memcpy(seeds, a + 64, sizeof seeds);
                    memcpy(xs, a + 128, sizeof xs);
                    for (int lane = 0; lane < 16; lane++) {
                        int32_t sum = seeds[lane];
                        for (int e = 0; e < 4; e++) {
                            const int64_t k = 64 * c + 4 * lane + e;
                            const int value = k < w->k ? (int8_t)row[k] + 128 : 0;
                            sum += value * (int8_t)a[4 * lane + e];
                        }
                        lanes[lane] = fmaf((float)sum, xs[lane], lanes[lane]);
                    }
                }
            }
            float total = 0.0f;
            for (int lane = 0; lane < 16; lane++)
                total += lanes[lane];
            if (!int4)
                total *= scales[0];
            run->y[m * run->y_row_stride + n] = total + (run->bias ? run->bias[n] : 0.0f);
        }
    }
}

/* every output row of rows_ref depends on its activation row alone, so it is its own batch kernel */
const tb_llm_qkernels tb_llm_qkernels_ref = {
    .name = "scalar", .prepare = tb_llm_qact_prepare_ref, .rows = rows_ref, .batch_rows = rows_ref};

const tb_llm_qkernels *tb_llm_qkernels_active(void) {
#ifdef TB_HAVE_X86
    const tb_isa isa = tb_isa_active();
    const tb_cpu_features *features = tb_cpu_get_features();
    if (isa == TB_ISA_AVX512 && features->avx512vnni)
        return features->amx_int8 && tb_gemm_amx_allowed() && tb_cpu_amx_request() ? &tb_llm_qkernels_amx
                                                                                    : &tb_llm_qkernels_avx512vnni;
    if ((isa == TB_ISA_AVX2 || isa == TB_ISA_AVX512) && tb_isa_supported(TB_ISA_AVX2))
        return &tb_llm_qkernels_avx2;
#endif
    return NULL;
}

/* ---- driver ---- */

static _Thread_local unsigned char *prepared;
static _Thread_local size_t prepared_capacity;

typedef struct qprepare_job {
    const tb_llm_qkernels *kernels;
    tb_llm_quant format;
    const float *x;
    int64_t x_stride, k, row_bytes;
    unsigned char *out;
} qprepare_job;

static void prepare_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const qprepare_job *job = context;
    for (int64_t m = begin; m < end; m++)
        job->kernels->prepare(job->format, job->x + m * job->x_stride, job->k, job->out + m * job->row_bytes);
}

typedef struct qrows_job {
    const tb_llm_qkernels *kernels;
    tb_llm_qrun run;
} qrows_job;

/* Chunks of 4-row blocks; within a chunk, activations in tiles of M_TILE rows so that a tile's prepared
 * rows stay in L2 while every weight row of the chunk passes over them. */
static void qrows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const qrows_job *job = context;
    const int64_t n_begin = begin * 4, n_end = end * 4 < job->run.w->n ? end * 4 : job->run.w->n;
    for (int64_t m0 = 0; m0 < job->run.m; m0 += M_TILE) {
        tb_llm_qrun tile = job->run;
        tile.m = job->run.m - m0 < M_TILE ? job->run.m - m0 : M_TILE;
        tile.act = job->run.act + m0 * job->run.act_row_bytes;
        tile.y = job->run.y + m0 * job->run.y_row_stride;
        job->kernels->rows(&tile, n_begin, n_end);
    }
}

/* ---- the prompt GEMM path ---- */

typedef struct gemm_prepare_job {
    const tb_llm_qkernels *kernels;
    const float *x;
    int64_t x_stride, m, k;
    unsigned char *xt;
} gemm_prepare_job;

static void gemm_prepare_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const gemm_prepare_job *job = context;
    job->kernels->gemm_prepare(job->x, job->x_stride, job->m, job->k, begin, end, job->xt);
}

typedef struct gemm_job {
    const tb_llm_qkernels *kernels;
    const llm_matrix *w;
    const unsigned char *xt;
    int64_t m;
    float *y;
    atomic_int failed;
} gemm_job;

static void gemm_columns(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    gemm_job *job = context;
    const int64_t n_end = end * 4 < job->w->n ? end * 4 : job->w->n;
    if (!job->kernels->gemm_rows(&job->w->q, job->xt, job->m, job->y, job->w->n, job->w->bias, begin * 4, n_end))
        atomic_store(&job->failed, 1);
}

static tb_status qgemm(const tb_llm_qkernels *kernels, const llm_matrix *w, const float *x, int64_t x_stride, int64_t m,
                       float *y) {
    TB_TRY(tb_llm_thread_scratch_reserve(&prepared, &prepared_capacity, (size_t)kernels->gemm_xt_bytes(m, w->k)));
    gemm_prepare_job prepare = {.kernels = kernels, .x = x, .x_stride = x_stride, .m = m, .k = w->k, .xt = prepared};
    tb_parallel_for((m + 15) / 16, 1, gemm_prepare_rows, &prepare);
    gemm_job job = {.kernels = kernels, .w = w, .xt = prepared, .m = m, .y = y};
    atomic_init(&job.failed, 0);
    tb_parallel_for((w->n + 3) / 4, 4, gemm_columns, &job);
    if (atomic_load(&job.failed))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory for GEMM scratch");
    return TB_OK;
}

tb_status tb_llm_qmatmul(const tb_llm_qkernels *kernels, const llm_matrix *w, const float *x, int64_t x_stride,
                         int64_t m, float *y) {
    if (kernels->gemm_rows && m >= GEMM_MIN_ROWS)
        return qgemm(kernels, w, x, x_stride, m, y);
    const int64_t row_bytes = tb_llm_qact_row_bytes(w->format, w->k);
    TB_TRY(tb_llm_thread_scratch_reserve(&prepared, &prepared_capacity, (size_t)(m * row_bytes)));
    qprepare_job prepare = {.kernels = kernels,
                            .format = w->format, .x = x, .x_stride = x_stride, .k = w->k, .row_bytes = row_bytes,
                            .out = prepared};
    tb_parallel_for(m, w->k > 0 ? (16384 + w->k - 1) / w->k : 1, prepare_rows, &prepare);
    qrows_job job = {.kernels = kernels,
                     .run = {.w = &w->q, .m = m, .act = prepared, .act_row_bytes = row_bytes, .y = y,
                             .y_row_stride = w->n, .bias = w->bias}};
    const int64_t blocks = (w->n + 3) / 4;
    const int64_t work = 4 * w->q.row_bytes * (m < 16 ? m : 16);
    tb_parallel_for(blocks, work > 0 ? (32768 + work - 1) / work : 1, qrows, &job);
    return TB_OK;
}
