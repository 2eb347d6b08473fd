/* Neural-network ops over tensors: softmax/log_softmax, layer_norm, rms_norm, rotary embedding and
 * embedding lookup. */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

/* ---- softmax ---- */

typedef struct softmax_job {
    tb_softmax_kernel kernel;
    float *y;
    const float *x;
    int64_t len, inner;
    bool log;
} softmax_job;

static void softmax_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    softmax_job *job = context;
    (void)thread_index;
    int64_t offset = begin * job->len * job->inner;
    job->kernel(job->x + offset, job->y + offset, end - begin, job->len, job->inner, job->log);
}

tb_status tb_op_softmax(const tb_tensor *x, int64_t dim, bool log, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = log ? "log_softmax" : "softmax";
    TB_TRY(tb_ops_require_float(x->dtype, name));
    int d;
    TB_TRY(tb_normalize_dim(dim, x->ndim, &d));
    tb_tensor source, result;
    TB_TRY(tb_ops_as_f32(x, &source));
    tb_status status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &result);
    if (status != TB_OK) {
        tb_tensor_release(&source);
        return status;
    }
    softmax_job job = {.kernel = tb_elementwise_kernels_active()->softmax, .x = tb_tensor_data(&source),
                       .y = tb_tensor_data(&result), .len = 1, .inner = 1, .log = log};
    int64_t outer = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (i < d)
            outer *= x->shape[i];
        else if (i == d)
            job.len = x->shape[i];
        else
            job.inner *= x->shape[i];
    }
    if (tb_tensor_numel(x) > 0) {
        int64_t per = job.len * job.inner;
        tb_parallel_for(outer, per >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / per, softmax_chunk, &job);
    }
    tb_tensor_release(&source);
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

/* ---- layer_norm / rms_norm ---- */

typedef struct norm_job {
    const tb_elementwise_kernels *kernels;
    bool rms;
    const float *x, *weight, *bias;
    float *y;
    int64_t len;
    float eps;
} norm_job;

static void norm_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    norm_job *job = context;
    (void)thread_index;
    int64_t offset = begin * job->len;
    if (job->rms)
        job->kernels->rms_norm(job->x + offset, job->weight, job->y + offset, end - begin, job->len, job->eps);
    else
        job->kernels->layer_norm(job->x + offset, job->weight, job->bias, job->y + offset, end - begin, job->len,
                                 job->eps, NULL, NULL);
}

static tb_status run_norm(bool rms, const tb_tensor *x, int normalized_ndim, const tb_tensor *weight,
                          const tb_tensor *bias, float eps, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = rms ? "rms_norm" : "layer_norm";
    TB_TRY(tb_ops_require_float(x->dtype, name));
    if (normalized_ndim < 1 || normalized_ndim > x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "%s: normalized_shape has %d dims but the input has %d", name,
                            normalized_ndim, x->ndim);
    if (!(eps >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: eps must be >= 0", name);
    tb_tensor w, b, source, result = {0};
    TB_TRY(tb_ops_stage_normalized_param(weight, x, normalized_ndim, rms ? "rms_norm: weight" : "layer_norm: weight", &w));
    tb_status status = tb_ops_stage_normalized_param(bias, x, normalized_ndim, "layer_norm: bias", &b);
    if (status == TB_OK)
        status = tb_ops_as_f32(x, &source);
    else
        memset(&source, 0, sizeof source);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK) {
        norm_job job = {.kernels = tb_elementwise_kernels_active(), .rms = rms, .x = tb_tensor_data(&source),
                        .weight = w.storage ? tb_tensor_data(&w) : NULL, .bias = b.storage ? tb_tensor_data(&b) : NULL,
                        .y = tb_tensor_data(&result), .len = 1, .eps = eps};
        for (int i = x->ndim - normalized_ndim; i < x->ndim; i++)
            job.len *= x->shape[i];
        int64_t numel = tb_tensor_numel(x);
        if (numel > 0 && job.len > 0) {
            int64_t rows = numel / job.len;
            tb_parallel_for(rows, job.len >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / job.len, norm_chunk, &job);
        }
    }
    tb_tensor_release(&w);
    tb_tensor_release(&b);
    tb_tensor_release(&source);
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

tb_status tb_op_layer_norm(const tb_tensor *x, int normalized_ndim, const tb_tensor *weight, const tb_tensor *bias,
                           float eps, tb_tensor *out) {
    return run_norm(false, x, normalized_ndim, weight, bias, eps, out);
}

tb_status tb_op_rms_norm(const tb_tensor *x, int normalized_ndim, const tb_tensor *weight, float eps, tb_tensor *out) {
    return run_norm(true, x, normalized_ndim, weight, NULL, eps, out);
}

/* ---- rotary embedding ---- */

typedef struct rope_job {
    tb_rope_kernel kernel;
    const float *x;
    float *y;
    const float *cos, *sin;   /* f32 expanded to [rows, half] */
    int64_t cos_row_stride;   /* elements between rows of cos/sin (0 = broadcast) */
    int64_t cos_period;       /* rows repeat every cos_period x-rows (the T dim) */
    int64_t dim, half;
    bool interleaved;
} rope_job;

static void rope_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    rope_job *job = context;
    (void)thread_index;
    for (int64_t row = begin; row < end; row++) {
        int64_t t = row % job->cos_period;
        job->kernel(job->x + row * job->dim, job->cos + t * job->half, job->sin + t * job->half, job->y + row * job->dim,
                    job->half, job->interleaved);
    }
}

tb_status tb_op_rope(const tb_tensor *x, const tb_tensor *cos, const tb_tensor *sin, bool interleaved, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_ops_require_float(x->dtype, "rotary_embedding: x"));
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "rotary_embedding: x must be [..., T, D], got %d dims", x->ndim);
    int64_t seq = x->shape[x->ndim - 2], dim = x->shape[x->ndim - 1];
    if (dim % 2 != 0)
        return tb_error_set(TB_ERR_SHAPE, "rotary_embedding: the last dim of x must be even, got %lld", (long long)dim);
    int64_t half = dim / 2;
    const tb_tensor *tables[2] = {cos, sin};
    tb_tensor staged[2] = {{0}};
    tb_status status = TB_OK;
    for (int i = 0; i < 2 && status == TB_OK; i++) {
        const tb_tensor *t = tables[i];
        const char *what = i == 0 ? "cos" : "sin";
        status = tb_ops_require_float(t->dtype, what);
        if (status != TB_OK)
            break;
        if (t->ndim < 1 || t->shape[t->ndim - 1] != half || (t->ndim >= 2 && t->shape[t->ndim - 2] != seq && t->shape[t->ndim - 2] != 1)) {
            char a[128];
            status = tb_error_set(TB_ERR_SHAPE, "rotary_embedding: %s must be [T, D/2] = [%lld, %lld], got %s", what,
                                  (long long)seq, (long long)half, tb_shape_string(t->ndim, t->shape, a, sizeof a));
            break;
        }
        for (int d = 0; d < t->ndim - 2; d++)
            if (t->shape[d] != 1)
                status = tb_error_set(TB_ERR_SHAPE, "rotary_embedding: %s must not vary over batch/head dims", what);
        if (status != TB_OK)
            break;
        int64_t shape[2] = {seq, half};
        tb_tensor flat, expanded;
        int64_t flat_shape[2] = {t->ndim >= 2 ? t->shape[t->ndim - 2] : 1, half};
        status = tb_tensor_reshape(t, 2, flat_shape, &flat);
        if (status == TB_OK) {
            status = tb_tensor_expand(&flat, 2, shape, &expanded);
            tb_tensor_release(&flat);
        }
        if (status == TB_OK) {
            status = tb_tensor_contiguous(&expanded, TB_F32, &staged[i]);
            tb_tensor_release(&expanded);
        }
    }
    tb_tensor source = {0}, result = {0};
    if (status == TB_OK)
        status = tb_ops_as_f32(x, &source);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK && tb_tensor_numel(x) > 0) {
        rope_job job = {.kernel = tb_elementwise_kernels_active()->rope, .x = tb_tensor_data(&source),
                        .y = tb_tensor_data(&result), .cos = tb_tensor_data(&staged[0]), .sin = tb_tensor_data(&staged[1]),
                        .cos_period = seq, .dim = dim, .half = half, .interleaved = interleaved};
        int64_t rows = tb_tensor_numel(x) / dim;
        tb_parallel_for(rows, dim >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / dim, rope_chunk, &job);
    }
    tb_tensor_release(&staged[0]);
    tb_tensor_release(&staged[1]);
    tb_tensor_release(&source);
    if (status != TB_OK) {
        tb_tensor_release(&result);
        return status;
    }
    return tb_ops_finish_dtype(&result, x->dtype, out);
}

/* ---- embedding ---- */

tb_status tb_op_embedding(const tb_tensor *weight, const tb_tensor *indices, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (weight->ndim != 2)
        return tb_error_set(TB_ERR_SHAPE, "embedding: weight must be 2-D [num_embeddings, dim], got %d dims", weight->ndim);
    if (indices->dtype != TB_I64 && indices->dtype != TB_I32)
        return tb_error_set(TB_ERR_DTYPE, "embedding: indices must be int64 or int32, got %s", tb_dtype_name(indices->dtype));
    if (indices->ndim + 1 > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "embedding: indices have too many dims");
    int64_t rows = weight->shape[0], dim = weight->shape[1];
    tb_tensor index_source, weight_source;
    TB_TRY(tb_tensor_contiguous(indices, TB_I64, &index_source));
    tb_status status = tb_tensor_contiguous(weight, weight->dtype, &weight_source);
    if (status != TB_OK) {
        tb_tensor_release(&index_source);
        return status;
    }
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, indices->shape, (size_t)indices->ndim * sizeof(int64_t));
    shape[indices->ndim] = dim;
    status = tb_tensor_empty(weight->dtype, indices->ndim + 1, shape, TB_ALLOC_DEFAULT, out);
    if (status == TB_OK) {
        const int64_t *index = tb_tensor_data(&index_source);
        int64_t count = tb_tensor_numel(&index_source);
        size_t row_bytes = (size_t)dim * tb_dtype_size(weight->dtype);
        const char *table = tb_tensor_data(&weight_source);
        char *y = tb_tensor_data(out);
        for (int64_t i = 0; i < count; i++) {
            if (index[i] < 0 || index[i] >= rows) {
                status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "embedding: index %lld at position %lld is out of range [0, %lld)",
                                      (long long)index[i], (long long)i, (long long)rows);
                break;
            }
            memcpy(y + (size_t)i * row_bytes, table + (size_t)index[i] * row_bytes, row_bytes);
        }
        if (status != TB_OK)
            tb_tensor_release(out);
    }
    tb_tensor_release(&index_source);
    tb_tensor_release(&weight_source);
    return status;
}
