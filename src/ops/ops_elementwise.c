/* Elementwise ops over tensors: unary, binary, compare and where, with broadcasting, strides and
 * float dtypes, split across the thread pool. */
#include <string.h>

#include "ops/ops_internal.h"

/* ---- unary ---- */

typedef struct unary_job {
    tb_unary_kernel kernel;
    tb_unary_params params;
    const void *x;
    void *y;
    tb_dtype dtype;
    int failed;
} unary_job;

static void unary_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    unary_job *job = context;
    (void)thread_index;
    int64_t n = end - begin;
    if (job->dtype == TB_F32) {
        job->kernel((const float *)job->x + begin, (float *)job->y + begin, n, &job->params);
        return;
    }
    /* f16/bf16: stage through a thread-local f32 buffer */
    float *buffer = tb_ops_scratch(0, n);
    if (!buffer) {
        job->failed = 1;
        return;
    }
    size_t size = tb_dtype_size(job->dtype);
    tb_dtype_table[job->dtype].to_f32((const char *)job->x + begin * (int64_t)size, buffer, n);
    job->kernel(buffer, buffer, n, &job->params);
    tb_dtype_table[job->dtype].from_f32(buffer, (char *)job->y + begin * (int64_t)size, n);
}

tb_status tb_op_unary(int op, const tb_tensor *x, float alpha, float lo, float hi, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (op < 0 || op >= TB_UNARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unary: unknown op %d", op);
    TB_TRY(tb_ops_require_float(x->dtype, tb_unary_op_names[op]));
    tb_tensor source;
    TB_TRY(tb_tensor_contiguous(x, x->dtype, &source));
    tb_status status = tb_tensor_empty(x->dtype, x->ndim, x->shape, TB_ALLOC_DEFAULT, out);
    if (status != TB_OK) {
        tb_tensor_release(&source);
        return status;
    }
    unary_job job = {
        .kernel = tb_elementwise_kernels_active()->unary[op],
        .params = {.alpha = alpha, .lo = lo, .hi = hi},
        .x = tb_tensor_data(&source),
        .y = tb_tensor_data(out),
        .dtype = x->dtype,
    };
    tb_parallel_for(tb_tensor_numel(x), TB_OPS_GRAIN, unary_chunk, &job);
    tb_tensor_release(&source);
    if (job.failed) {
        tb_tensor_release(out);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for scratch", tb_unary_op_names[op]);
    }
    return TB_OK;
}

/* ---- broadcasting n-ary loops ---- */

/* The operands of a broadcast elementwise op: inputs are f32 (staged when needed) and the output is
 * contiguous f32 or bool. */
typedef struct nary_job {
    tb_broadcast_iter iter;
    const char *inputs[3];
    int input_count;
    char *output;
    size_t output_size;
    int kind; /* 0 binary, 1 compare, 2 where */
    tb_binary_kernel binary;
    tb_compare_kernel compare;
    tb_where_kernel where;
    int failed;
} nary_job;

/* Returns a pointer to `len` f32 values of input `o` for the row at `offset`, with step 0 or 1 in
 * *step; gathers into scratch when the row stride is neither. */
static const float *row_input(const nary_job *job, int o, int64_t offset, int64_t *step, int slot) {
    int64_t stride = job->iter.strides[o][job->iter.ndim - 1];
    const float *base = (const float *)job->inputs[o] + offset;
    if (stride == 0 || stride == 1 || job->iter.row_len == 1) {
        *step = job->iter.row_len == 1 ? 0 : stride;
        return base;
    }
    float *buffer = tb_ops_scratch(slot, job->iter.row_len);
    if (!buffer)
        return NULL;
    for (int64_t i = 0; i < job->iter.row_len; i++)
        buffer[i] = base[i * stride];
    *step = 1;
    return buffer;
}

static void nary_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    nary_job *job = context;
    (void)thread_index;
    int64_t len = job->iter.row_len;
    for (int64_t row = begin; row < end; row++) {
        int64_t offsets[TB_OPS_MAX_OPERANDS];
        tb_broadcast_iter_offsets(&job->iter, row, offsets);
        char *y = job->output + offsets[job->input_count] * (int64_t)job->output_size;
        if (job->kind == 2) {
            int64_t cond_stride = job->iter.strides[0][job->iter.ndim - 1];
            const uint8_t *cond = (const uint8_t *)job->inputs[0] + offsets[0];
            int64_t cond_step = len == 1 ? 0 : cond_stride;
            if (cond_step > 1) {
                float *gathered = tb_ops_scratch(3, (len + 3) / 4);
                if (!gathered) {
                    job->failed = 1;
                    return;
                }
                uint8_t *bytes = (uint8_t *)gathered;
                for (int64_t i = 0; i < len; i++)
                    bytes[i] = cond[i * cond_stride];
                cond = bytes;
                cond_step = 1;
            }
            int64_t a_step, b_step;
            const float *a = row_input(job, 1, offsets[1], &a_step, 1);
            const float *b = row_input(job, 2, offsets[2], &b_step, 2);
            if (!a || !b) {
                job->failed = 1;
                return;
            }
            job->where(cond, cond_step, a, a_step, b, b_step, (float *)y, len);
            continue;
        }
        int64_t a_step, b_step;
        const float *a = row_input(job, 0, offsets[0], &a_step, 1);
        const float *b = row_input(job, 1, offsets[1], &b_step, 2);
        if (!a || !b) {
            job->failed = 1;
            return;
        }
        if (job->kind == 0)
            job->binary(a, a_step, b, b_step, (float *)y, len);
        else
            job->compare(a, a_step, b, b_step, (uint8_t *)y, len);
    }
}

/* Runs a broadcast op: inputs[] are already f32 (or bool for where's cond); out_f32 is allocated. */
static tb_status run_nary(nary_job *job, const tb_tensor *const *inputs, int count, tb_tensor *result) {
    int64_t strides[TB_OPS_MAX_OPERANDS][TB_MAX_DIMS];
    for (int o = 0; o < count; o++) {
        tb_ops_expanded_strides(inputs[o], result->ndim, result->shape, strides[o]);
        job->inputs[o] = tb_tensor_data(inputs[o]);
    }
    tb_ops_expanded_strides(result, result->ndim, result->shape, strides[count]);
    tb_broadcast_iter_init(&job->iter, result->ndim, result->shape, count + 1, (const int64_t(*)[TB_MAX_DIMS])strides);
    job->input_count = count;
    job->output = tb_tensor_data(result);
    job->output_size = tb_dtype_size(result->dtype);
    if (tb_tensor_numel(result) == 0)
        return TB_OK;
    int64_t grain = job->iter.row_len >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / job->iter.row_len;
    tb_parallel_for(job->iter.rows, grain, nary_rows, job);
    if (job->failed)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "elementwise op: out of memory for scratch");
    return TB_OK;
}

/* Stages a float input as f32 with its own strides when it already is f32 (no copy), else converts. */
static tb_status stage_f32(const tb_tensor *x, tb_tensor *out) {
    if (x->dtype == TB_F32) {
        tb_tensor_retain(x, out);
        return TB_OK;
    }
    return tb_ops_as_f32(x, out);
}

static tb_status broadcast_op(int kind, int op, const tb_tensor *const *args, int count, tb_dtype out_dtype,
                              const char *name, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int ndim = 0;
    int64_t shape[TB_MAX_DIMS];
    ndim = args[0]->ndim;
    memcpy(shape, args[0]->shape, sizeof shape);
    for (int i = 1; i < count; i++) {
        tb_status status = tb_broadcast_shapes(ndim, shape, args[i]->ndim, args[i]->shape, &ndim, shape);
        if (status != TB_OK)
            return tb_error_prefix(status, "%s", name);
    }
    tb_tensor staged[3] = {{0}};
    const tb_tensor *staged_ptrs[3];
    tb_status status = TB_OK;
    for (int i = 0; i < count && status == TB_OK; i++) {
        if (kind == 2 && i == 0) {
            tb_tensor_retain(args[0], &staged[0]);
        } else {
            status = tb_ops_require_float(args[i]->dtype, name);
            if (status == TB_OK)
                status = stage_f32(args[i], &staged[i]);
        }
        staged_ptrs[i] = &staged[i];
    }
    tb_tensor result = {0};
    tb_dtype compute_dtype = kind == 1 ? TB_BOOL : TB_F32;
    if (status == TB_OK)
        status = tb_tensor_empty(compute_dtype, ndim, shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK) {
        const tb_elementwise_kernels *kernels = tb_elementwise_kernels_active();
        nary_job job = {.kind = kind};
        if (kind == 0)
            job.binary = kernels->binary[op];
        else if (kind == 1)
            job.compare = kernels->compare[op];
        else
            job.where = kernels->where;
        status = run_nary(&job, staged_ptrs, count, &result);
    }
    for (int i = 0; i < count; i++)
        tb_tensor_release(&staged[i]);
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    if (kind == 1) {
        *out = result;
        return TB_OK;
    }
    return tb_ops_finish_dtype(&result, out_dtype, out);
}

tb_status tb_op_binary(int op, const tb_tensor *a, const tb_tensor *b, tb_dtype out_dtype, tb_tensor *out) {
    if (op < 0 || op >= TB_BINARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "binary: unknown op %d", op);
    TB_TRY(tb_ops_require_float(out_dtype, tb_binary_op_names[op]));
    const tb_tensor *args[2] = {a, b};
    return broadcast_op(0, op, args, 2, out_dtype, tb_binary_op_names[op], out);
}

tb_status tb_op_compare(int op, const tb_tensor *a, const tb_tensor *b, tb_tensor *out) {
    if (op < 0 || op >= TB_COMPARE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "compare: unknown op %d", op);
    const tb_tensor *args[2] = {a, b};
    return broadcast_op(1, op, args, 2, TB_BOOL, tb_compare_op_names[op], out);
}

tb_status tb_op_where(const tb_tensor *cond, const tb_tensor *a, const tb_tensor *b, tb_dtype out_dtype, tb_tensor *out) {
    if (cond->dtype != TB_BOOL)
        return tb_error_set(TB_ERR_DTYPE, "where: condition must be bool, got %s", tb_dtype_name(cond->dtype));
    TB_TRY(tb_ops_require_float(out_dtype, "where"));
    const tb_tensor *args[3] = {cond, a, b};
    return broadcast_op(2, 0, args, 3, out_dtype, "where", out);
}
