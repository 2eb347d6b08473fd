/* The quantized-matmul driver: validates a call, picks the kernel family (TORCHBURN_ISA through
 * tb_isa_active, or an explicit one), prepares the activations into per-thread scratch, and splits
 * the output features N over the thread pool in blocks of 4 rows. */
#include <math.h>
#include <string.h>

#include "quant/quant_kernels.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/thread_pool.h"

enum { ROW_BLOCK = 4 };

static const char *const kernel_names[TB_QUANT_KERNEL_COUNT] = {"auto",    "scalar", "avx2",
                                                                "avxvnni", "avx512", "avx512vnni"};

const char *tb_quant_kernel_name(tb_quant_kernel kernel) {
    return (unsigned)kernel < TB_QUANT_KERNEL_COUNT ? kernel_names[kernel] : "invalid";
}

tb_status tb_quant_kernel_from_name(const char *name, tb_quant_kernel *out) {
    for (int i = 0; name && i < TB_QUANT_KERNEL_COUNT; i++) {
        if (strcmp(name, kernel_names[i]) == 0) {
            *out = (tb_quant_kernel)i;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                        "quant: unknown kernel '%s' (expected auto, scalar, avx2, avxvnni, avx512 or avx512vnni)",
                        name ? name : "(null)");
}

bool tb_quant_kernel_supported(tb_quant_kernel kernel) {
    const tb_cpu_features *f = tb_cpu_get_features();
    switch (kernel) {
    case TB_QUANT_KERNEL_AUTO:
    case TB_QUANT_KERNEL_SCALAR:
        return true;
#ifdef TB_HAVE_X86
    case TB_QUANT_KERNEL_AVX2:
        return tb_isa_supported(TB_ISA_AVX2);
    case TB_QUANT_KERNEL_AVXVNNI:
        return tb_isa_supported(TB_ISA_AVX2) && f->avx_vnni;
    case TB_QUANT_KERNEL_AVX512:
        return tb_isa_supported(TB_ISA_AVX512);
    case TB_QUANT_KERNEL_AVX512VNNI:
        return tb_isa_supported(TB_ISA_AVX512) && f->avx512vnni;
#endif
    default:
        (void)f;
        return false;
    }
}

tb_quant_kernel tb_quant_kernel_resolve(tb_quant_kernel kernel, tb_quant_act act) {
    if (kernel == TB_QUANT_KERNEL_AUTO) {
        switch (tb_isa_active()) {
        case TB_ISA_AVX512:
            kernel = TB_QUANT_KERNEL_AVX512VNNI;
            break;
        case TB_ISA_AVX2:
            kernel = TB_QUANT_KERNEL_AVXVNNI;
            break;
        default:
            return TB_QUANT_KERNEL_SCALAR;
        }
        /* Step down to what the CPU has (AUTO never asks for more than the active level allows). */
        if (kernel == TB_QUANT_KERNEL_AVX512VNNI && !tb_quant_kernel_supported(kernel))
            kernel = TB_QUANT_KERNEL_AVX512;
        if (kernel == TB_QUANT_KERNEL_AVXVNNI && !tb_quant_kernel_supported(kernel))
            kernel = TB_QUANT_KERNEL_AVX2;
    }
    /* Families without a kernel of their own for this activation mode run their nearest relative. */
    if (act == TB_QUANT_ACT_F32) {
        if (kernel == TB_QUANT_KERNEL_AVX512VNNI)
            return TB_QUANT_KERNEL_AVX512;
        if (kernel == TB_QUANT_KERNEL_AVXVNNI)
            return TB_QUANT_KERNEL_AVX2;
    } else if (kernel == TB_QUANT_KERNEL_AVX512) {
        return tb_quant_kernel_supported(TB_QUANT_KERNEL_AVXVNNI) ? TB_QUANT_KERNEL_AVXVNNI : TB_QUANT_KERNEL_AVX2;
    }
    return kernel;
}

static const tb_quant_impl *find_impl(tb_quant_kernel kernel, tb_quant_type type, tb_quant_act act) {
    switch (kernel) {
    case TB_QUANT_KERNEL_SCALAR:
        return tb_quant_impl_scalar(type, act);
#ifdef TB_HAVE_X86
    case TB_QUANT_KERNEL_AVX2:
        return tb_quant_impl_avx2(type, act);
    case TB_QUANT_KERNEL_AVXVNNI:
        return tb_quant_impl_avxvnni(type, act);
    case TB_QUANT_KERNEL_AVX512:
        return tb_quant_impl_avx512(type, act);
    case TB_QUANT_KERNEL_AVX512VNNI:
        return tb_quant_impl_avx512vnni(type, act);
#endif
    default:
        return NULL;
    }
}

/* Per-thread scratch for prepared activations; grows, never shrinks (one buffer per calling thread). */
static _Thread_local unsigned char *scratch;
static _Thread_local size_t scratch_capacity;

static tb_status scratch_reserve(size_t bytes) {
    if (bytes <= scratch_capacity)
        return TB_OK;
    void *grown = NULL;
    size_t capacity = bytes + bytes / 4;
    TB_TRY(tb_alloc(capacity, TB_ALLOC_DEFAULT, &grown));
    tb_free(scratch);
    scratch = grown;
    scratch_capacity = capacity;
    return TB_OK;
}

typedef struct prepare_job {
    const tb_quant_impl *impl;
    const tb_quant_weight *w;
    const float *x;
    int64_t x_row_stride;
    unsigned char *act;
    int64_t act_row_bytes;
} prepare_job;

static void prepare_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const prepare_job *job = context;
    for (int64_t m = begin; m < end; m++)
        job->impl->act_prepare(job->w, job->x + m * job->x_row_stride, job->act + m * job->act_row_bytes);
}

typedef struct rows_job {
    const tb_quant_impl *impl;
    tb_quant_run run;
} rows_job;

static void run_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const rows_job *job = context;
    int64_t n_end = end * ROW_BLOCK < job->run.w->n ? end * ROW_BLOCK : job->run.w->n;
    job->impl->rows(&job->run, begin * ROW_BLOCK, n_end);
}

static tb_status check_desc(const tb_quant_weight *w, const tb_quant_matmul_desc *d) {
    if (!w || !d)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: %s is NULL", w ? "desc" : "weight");
    TB_TRY(tb_quant_check_dims(w->type, w->n, w->k, w->group_size));
    if (w->n * w->k > 0 && (!w->data || !w->scales))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: weight data or scales is NULL");
    const bool int4 = w->type == TB_QUANT_INT4;
    if (w->row_bytes != (int4 ? w->k / 2 : w->k) || w->scales_per_row != (int4 ? w->k / w->group_size : 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "quant_matmul: inconsistent tb_quant_weight (fill it with tb_quant_weight_init)");
    if ((unsigned)d->act >= TB_QUANT_ACT_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: unknown activation mode %d", (int)d->act);
    if ((unsigned)d->kernel >= TB_QUANT_KERNEL_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: unknown kernel %d", (int)d->kernel);
    if (d->m < 0)
        return tb_error_set(TB_ERR_SHAPE, "quant_matmul: batch %lld is negative", (long long)d->m);
    if (d->m > 1 && d->x_row_stride < w->k)
        return tb_error_set(TB_ERR_SHAPE, "quant_matmul: x row stride %lld is less than K = %lld",
                            (long long)d->x_row_stride, (long long)w->k);
    if (d->m > 1 && d->y_row_stride < w->n)
        return tb_error_set(TB_ERR_SHAPE, "quant_matmul: y row stride %lld is less than N = %lld",
                            (long long)d->y_row_stride, (long long)w->n);
    if (d->m > 0 && w->n > 0 && (!d->y || (w->k > 0 && !d->x)))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: %s is NULL", d->y ? "x" : "y");
    if (d->act == TB_QUANT_ACT_INT8 && w->k > TB_QUANT_A8_MAX_K)
        return tb_error_set(TB_ERR_UNSUPPORTED, "quant_matmul: A8 kernels take K <= %d, got K = %lld",
                            (int)TB_QUANT_A8_MAX_K, (long long)w->k);
    return TB_OK;
}

tb_status tb_quant_matmul_ex(const tb_quant_weight *w, const tb_quant_matmul_desc *desc) {
    TB_TRY(check_desc(w, desc));
    tb_quant_kernel kernel = tb_quant_kernel_resolve(desc->kernel, desc->act);
    if (!tb_quant_kernel_supported(kernel))
        return tb_error_set(TB_ERR_UNSUPPORTED, "quant_matmul: kernel '%s' is not supported by this CPU (%s)",
                            tb_quant_kernel_name(kernel), tb_cpu_get_features()->brand);
    const tb_quant_impl *impl = find_impl(kernel, w->type, desc->act);
    if (!impl)
        return tb_error_set(TB_ERR_UNSUPPORTED, "quant_matmul: no '%s' kernel for this weight type",
                            tb_quant_kernel_name(kernel));
    const int64_t m_count = desc->m, n = w->n, k = w->k;
    if (m_count == 0 || n == 0)
        return TB_OK;
    if (k == 0) { /* empty sum: y = bias */
        for (int64_t m = 0; m < m_count; m++)
            for (int64_t j = 0; j < n; j++)
                desc->y[m * desc->y_row_stride + j] = desc->bias ? desc->bias[j] : 0.0f;
        return TB_OK;
    }
    /* Large batches (prefill) run in chunks of rows whose activations fit in L2 (~1 MiB), each chunk a
     * full pass over the weights; the kernels re-read activations from cache for every weight row. */
    const int64_t act_row_bytes = impl->act_row_bytes(w);
    const int64_t row_bytes = act_row_bytes > 0 ? act_row_bytes : k * (int64_t)sizeof(float);
    int64_t chunk = (int64_t)(1 << 20) / (row_bytes > 0 ? row_bytes : 1) / 8 * 8;
    chunk = chunk < 8 ? 8 : chunk;
    chunk = chunk > m_count ? m_count : chunk;
    if (act_row_bytes > 0) {
        tb_status status = scratch_reserve((size_t)(chunk * act_row_bytes));
        if (status != TB_OK)
            return tb_error_prefix(status, "quant_matmul: activation scratch");
    }
    /* Grain: at least ~32 KiB of weight bytes times batch rows per parallel chunk, so that tiny layers
     * do not pay for waking the pool more than they gain. */
    const int64_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
    const int64_t work_per_block = ROW_BLOCK * w->row_bytes * (chunk < 16 ? chunk : 16);
    const int64_t grain = work_per_block > 0 ? (32768 + work_per_block - 1) / work_per_block : 1;
    for (int64_t m0 = 0; m0 < m_count; m0 += chunk) {
        const int64_t rows = m_count - m0 < chunk ? m_count - m0 : chunk;
        rows_job job = {.impl = impl,
                        .run = {.w = w,
                                .m = rows,
                                .x = desc->x + m0 * desc->x_row_stride,
                                .x_row_stride = desc->x_row_stride,
                                .y = desc->y + m0 * desc->y_row_stride,
                                .y_row_stride = desc->y_row_stride,
                                .bias = desc->bias}};
        if (act_row_bytes > 0) {
            prepare_job prepare = {.impl = impl,
                                   .w = w,
                                   .x = job.run.x,
                                   .x_row_stride = desc->x_row_stride,
                                   .act = scratch,
                                   .act_row_bytes = act_row_bytes};
            tb_parallel_for(rows, (32768 + k - 1) / k, prepare_rows, &prepare);
            job.run.act = scratch;
            job.run.act_row_bytes = act_row_bytes;
        }
        tb_parallel_for(blocks, grain, run_rows, &job);
    }
    return TB_OK;
}

tb_status tb_quant_matmul(const tb_quant_weight *w, const float *x, int64_t batch, float *y, const float *bias) {
    if (!w)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "quant_matmul: weight is NULL");
    tb_quant_matmul_desc desc = {.x = x,
                                 .m = batch,
                                 .x_row_stride = w->k,
                                 .y = y,
                                 .y_row_stride = w->n,
                                 .bias = bias,
                                 .act = TB_QUANT_ACT_F32,
                                 .kernel = TB_QUANT_KERNEL_AUTO};
    return tb_quant_matmul_ex(w, &desc);
}
