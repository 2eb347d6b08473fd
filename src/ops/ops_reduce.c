/* Reductions over tensors: sum/max/min/logsumexp, mean, var/std, argmax/argmin. The reduced dims are
 * brought into the [outer, len, inner] form the kernels take, without a copy when they already form
 * one contiguous block of a contiguous tensor, else through a permuted contiguous copy. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

typedef struct reduce_shape {
    int64_t outer, len, inner;
    int out_ndim;
    int64_t out_shape[TB_MAX_DIMS];
} reduce_shape;

/* Computes the output shape and prepares a contiguous f32 source laid out as [outer, len, inner]. */
static tb_status prepare(const tb_tensor *x, uint32_t dim_mask, bool keepdim, const char *name, tb_tensor *source,
                         reduce_shape *rs) {
    TB_TRY(tb_ops_require_float(x->dtype, name));
    int ndim = x->ndim;
    if (ndim > 0 && dim_mask >> ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: dim out of range for a %d-dim tensor", name, ndim);
    if (dim_mask == 0)
        dim_mask = ndim > 0 ? (uint32_t)((1u << ndim) - 1) : 0;
    rs->out_ndim = 0;
    for (int d = 0; d < ndim; d++) {
        bool reduced = dim_mask & (1u << d);
        if (!reduced)
            rs->out_shape[rs->out_ndim++] = x->shape[d];
        else if (keepdim)
            rs->out_shape[rs->out_ndim++] = 1;
    }
    /* contiguous block of reduced dims? */
    int first = -1, last = -1;
    for (int d = 0; d < ndim; d++) {
        if (dim_mask & (1u << d)) {
            if (first < 0)
                first = d;
            last = d;
        }
    }
    bool block = true;
    for (int d = first; d >= 0 && d <= last; d++)
        block &= (dim_mask >> d) & 1u;
    if (ndim == 0 || first < 0) {
        rs->outer = 1;
        rs->len = 1;
        rs->inner = 1;
        return tb_ops_as_f32(x, source);
    }
    if (block) {
        rs->outer = rs->len = rs->inner = 1;
        for (int d = 0; d < first; d++)
            rs->outer *= x->shape[d];
        for (int d = first; d <= last; d++)
            rs->len *= x->shape[d];
        for (int d = last + 1; d < ndim; d++)
            rs->inner *= x->shape[d];
        return tb_ops_as_f32(x, source);
    }
    /* permute: kept dims first, reduced dims last */
    int64_t perm[TB_MAX_DIMS];
    int p = 0;
    rs->outer = rs->len = 1;
    rs->inner = 1;
    for (int d = 0; d < ndim; d++)
        if (!(dim_mask & (1u << d))) {
            perm[p++] = d;
            rs->outer *= x->shape[d];
        }
    for (int d = 0; d < ndim; d++)
        if (dim_mask & (1u << d)) {
            perm[p++] = d;
            rs->len *= x->shape[d];
        }
    tb_tensor permuted;
    TB_TRY(tb_tensor_permute(x, ndim, perm, &permuted));
    tb_status status = tb_tensor_contiguous(&permuted, TB_F32, source);
    tb_tensor_release(&permuted);
    return status;
}

/* Parallel split over outer (rows) or, when outer is small, over inner blocks are not expressible with
 * the kernel contract; we split over outer and let small outer run on one thread. */
typedef struct reduce_job {
    const tb_elementwise_kernels *kernels;
    int op; /* tb_reduce_op, or -1 var, -2 argmax, -3 argmin */
    const float *x;
    int64_t len, inner;
    float *out;
    int64_t *index_out;
    float *mean_out;
    int64_t correction;
} reduce_job;

static void reduce_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    reduce_job *job = context;
    (void)thread_index;
    const float *x = job->x + begin * job->len * job->inner;
    int64_t rows = end - begin;
    int64_t out_offset = begin * job->inner;
    switch (job->op) {
    case -1:
        job->kernels->var(x, rows, job->len, job->inner, job->correction, NULL, job->out + out_offset);
        break;
    case -2:
        job->kernels->argmax(x, rows, job->len, job->inner, job->index_out + out_offset);
        break;
    case -3:
        job->kernels->argmin(x, rows, job->len, job->inner, job->index_out + out_offset);
        break;
    default:
        job->kernels->reduce[job->op](x, rows, job->len, job->inner, job->out + out_offset);
    }
}

/* Whole-tensor sum/max/min split in partial reductions across threads. */
typedef struct partial_job {
    const tb_elementwise_kernels *kernels;
    int op;
    const float *x;
    int64_t len, pieces;
    float partial[64];
} partial_job;

static void partial_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    partial_job *job = context;
    (void)thread_index;
    for (int64_t piece = begin; piece < end; piece++) {
        int64_t start = job->len * piece / job->pieces;
        int64_t stop = job->len * (piece + 1) / job->pieces;
        job->kernels->reduce[job->op](job->x + start, 1, stop - start, 1, &job->partial[piece]);
    }
}

static tb_status run_reduce(int op, const tb_tensor *x, uint32_t dim_mask, bool keepdim, int64_t correction,
                            const char *name, tb_dtype result_dtype, tb_tensor *out_f32) {
    tb_tensor source;
    reduce_shape rs;
    TB_TRY(prepare(x, dim_mask, keepdim, name, &source, &rs));
    tb_status status = tb_tensor_empty(result_dtype, rs.out_ndim, rs.out_shape, TB_ALLOC_DEFAULT, out_f32);
    if (status != TB_OK) {
        tb_tensor_release(&source);
        return status;
    }
    int64_t out_count = rs.outer * rs.inner;
    if (tb_tensor_numel(x) == 0)
        rs.len = 0; /* nothing to read (an empty input may have no data pointer at all) */
    if (out_count == 0) {
        tb_tensor_release(&source);
        return TB_OK;
    }
    if (rs.len == 0) {
        tb_tensor_release(&source);
        /* empty reduction: identity for sum, error for max/min/arg like torch */
        if (op == TB_REDUCE_SUM || op == TB_REDUCE_LOGSUMEXP || op == -1) {
            float fill = op == TB_REDUCE_SUM ? 0.0f : op == TB_REDUCE_LOGSUMEXP ? -INFINITY : NAN;
            float *y = tb_tensor_data(out_f32);
            for (int64_t i = 0; i < out_count; i++)
                y[i] = fill;
            return TB_OK;
        }
        tb_tensor_release(out_f32);
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: cannot reduce over a dimension of size 0 (no identity)", name);
    }
    const tb_elementwise_kernels *kernels = tb_elementwise_kernels_active();
    const float *xs = tb_tensor_data(&source);
    if (out_count == 1 && rs.len >= 4 * TB_OPS_GRAIN && tb_num_threads() > 1 &&
        (op == TB_REDUCE_SUM || op == TB_REDUCE_MAX || op == TB_REDUCE_MIN)) {
        partial_job job = {.kernels = kernels, .op = op, .x = xs, .len = rs.len};
        job.pieces = tb_num_threads() * 4;
        if (job.pieces > 64)
            job.pieces = 64;
        tb_parallel_for(job.pieces, 1, partial_chunk, &job);
        kernels->reduce[op](job.partial, 1, job.pieces, 1, (float *)tb_tensor_data(out_f32));
    } else {
        reduce_job job = {.kernels = kernels, .op = op, .x = xs, .len = rs.len, .inner = rs.inner,
                          .correction = correction};
        if (result_dtype == TB_I64)
            job.index_out = tb_tensor_data(out_f32);
        else
            job.out = tb_tensor_data(out_f32);
        int64_t per_row = rs.len * rs.inner;
        int64_t grain = per_row >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / per_row;
        tb_parallel_for(rs.outer, grain, reduce_chunk, &job);
    }
    tb_tensor_release(&source);
    return TB_OK;
}

tb_status tb_op_reduce(int op, const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (op < 0 || op >= TB_REDUCE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "reduce: unknown op %d", op);
    tb_tensor result;
    TB_TRY(run_reduce(op, x, dim_mask, keepdim, 0, tb_reduce_op_names[op], TB_F32, &result));
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

tb_status tb_op_mean(const tb_tensor *x, uint32_t dim_mask, bool keepdim, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_tensor result;
    TB_TRY(run_reduce(TB_REDUCE_SUM, x, dim_mask, keepdim, 0, "mean", TB_F32, &result));
    int64_t count = tb_tensor_numel(&result);
    int64_t len = count == 0 ? 0 : tb_tensor_numel(x) / count;
    if (count == 0) {
        int64_t total = tb_tensor_numel(x);
        (void)total;
    }
    float *y = tb_tensor_data(&result);
    if (len == 0) {
        for (int64_t i = 0; i < count; i++)
            y[i] = NAN; /* mean of nothing, like torch */
    } else {
        for (int64_t i = 0; i < count; i++)
            y[i] = y[i] / (float)len;
    }
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

tb_status tb_op_var(const tb_tensor *x, uint32_t dim_mask, int64_t correction, bool keepdim, bool take_sqrt, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_tensor result;
    TB_TRY(run_reduce(-1, x, dim_mask, keepdim, correction, take_sqrt ? "std" : "var", TB_F32, &result));
    if (take_sqrt) {
        float *y = tb_tensor_data(&result);
        int64_t count = tb_tensor_numel(&result);
        for (int64_t i = 0; i < count; i++)
            y[i] = sqrtf(y[i]);
    }
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

tb_status tb_op_arg_reduce(bool is_max, const tb_tensor *x, bool has_dim, int64_t dim, bool keepdim, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = is_max ? "argmax" : "argmin";
    if (!has_dim) {
        if (tb_tensor_numel(x) == 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: cannot take %s of an empty tensor", name, name);
        tb_tensor flat;
        int64_t minus_one = -1;
        TB_TRY(tb_tensor_reshape(x, 1, &minus_one, &flat));
        tb_status status = run_reduce(is_max ? -2 : -3, &flat, 1u, false, 0, name, TB_I64, out);
        tb_tensor_release(&flat);
        if (status == TB_OK && keepdim) {
            /* torch: keepdim with dim=None gives a tensor of x.ndim ones */
            int64_t ones[TB_MAX_DIMS];
            for (int d = 0; d < x->ndim; d++)
                ones[d] = 1;
            tb_tensor shaped;
            status = tb_tensor_view(out, x->ndim, ones, &shaped);
            tb_tensor_release(out);
            if (status == TB_OK)
                *out = shaped;
        }
        return status;
    }
    int d;
    TB_TRY(tb_normalize_dim(dim, x->ndim, &d));
    if (x->ndim == 0)
        return run_reduce(is_max ? -2 : -3, x, 0, keepdim, 0, name, TB_I64, out);
    return run_reduce(is_max ? -2 : -3, x, 1u << d, keepdim, 0, name, TB_I64, out);
}
