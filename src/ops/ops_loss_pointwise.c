/* Elementwise losses and their backward ops: mse, smooth_l1 (beta), binary_cross_entropy (weight) and
 * binary_cross_entropy_with_logits (weight, pos_weight), with ATen's formulas. Per-element values are
 * computed in parallel, then reduced in index order in double (deterministic). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

typedef enum pointwise_kind {
    MSE,
    SMOOTH_L1,
    BCE,
    BCE_LOGITS,
    MSE_BACKWARD,
    SMOOTH_L1_BACKWARD,
    BCE_BACKWARD,
} pointwise_kind;

typedef struct pointwise_job {
    pointwise_kind kind;
    const float *x, *target, *weight, *pos_weight, *grad; /* all expanded to the result shape */
    float *out;
    float beta;  /* smooth_l1 */
    float norm;  /* backward: 1/numel for mean, else 1 */
    atomic_int out_of_range;
} pointwise_job;

/* log(sigmoid(x)) without overflow. */
static float log_sigmoid(float x) { return fminf(x, 0.0f) - log1pf(expf(-fabsf(x))); }

static void pointwise_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    pointwise_job *job = context;
    const float *x = job->x, *t = job->target, *w = job->weight, *pw = job->pos_weight, *g = job->grad;
    float *out = job->out;
    for (int64_t i = begin; i < end; i++) {
        float value = 0.0f;
        switch (job->kind) {
        case MSE: {
            float d = x[i] - t[i];
            value = d * d;
            break;
        }
        case SMOOTH_L1: {
            float z = fabsf(x[i] - t[i]);
            value = job->beta == 0.0f ? z : (z < job->beta ? 0.5f * z * z / job->beta : z - 0.5f * job->beta);
            break;
        }
        case BCE:
            if (!(x[i] >= 0.0f && x[i] <= 1.0f)) {
                atomic_store(&job->out_of_range, 1);
                return;
            }
            value = (t[i] - 1.0f) * fmaxf(log1pf(-x[i]), -100.0f) - t[i] * fmaxf(logf(x[i]), -100.0f);
            break;
        case BCE_LOGITS: {
            float ls = log_sigmoid(x[i]);
            if (pw)
                ls *= (pw[i] - 1.0f) * t[i] + 1.0f;
            value = (1.0f - t[i]) * x[i] - ls;
            break;
        }
        case MSE_BACKWARD:
            value = 2.0f * job->norm * (x[i] - t[i]) * g[i];
            break;
        case SMOOTH_L1_BACKWARD: {
            float d = x[i] - t[i], gn = job->norm * g[i];
            value = d <= -job->beta ? -gn : d >= job->beta ? gn : d * gn / job->beta;
            break;
        }
        case BCE_BACKWARD:
            value = job->norm * g[i] * (x[i] - t[i]) / fmaxf((1.0f - x[i]) * x[i], 1e-12f);
            break;
        }
        if (w)
            value *= w[i];
        out[i] = value;
    }
}

/* Sum of n floats: fixed chunks summed in parallel (tb_nn_sum), chunk sums added in order, so the
 * result does not depend on the thread count. */
enum { SUM_CHUNK = 1 << 16 };

typedef struct sum_job {
    const float *values;
    int64_t count;
    double *chunk_sums;
} sum_job;

static void sum_chunks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    sum_job *job = context;
    for (int64_t chunk = begin; chunk < end; chunk++) {
        int64_t first = chunk * SUM_CHUNK, n = job->count - first < SUM_CHUNK ? job->count - first : SUM_CHUNK;
        job->chunk_sums[chunk] = tb_nn_sum(job->values + first, n);
    }
}

static tb_status chunked_sum(const float *values, int64_t count, double *out) {
    int64_t chunks = (count + SUM_CHUNK - 1) / SUM_CHUNK;
    if (chunks <= 1) {
        *out = tb_nn_sum(values, count);
        return TB_OK;
    }
    tb_tensor sums;
    TB_TRY(tb_tensor_empty(TB_F64, 1, &chunks, TB_ALLOC_DEFAULT, &sums));
    sum_job job = {.values = values, .count = count, .chunk_sums = tb_tensor_data(&sums)};
    tb_parallel_for(chunks, 1, sum_chunks, &job);
    double total = 0.0;
    for (int64_t chunk = 0; chunk < chunks; chunk++)
        total += job.chunk_sums[chunk];
    tb_tensor_release(&sums);
    *out = total;
    return TB_OK;
}

static const char *const kind_names[] = {
    [MSE] = "mse_loss", [SMOOTH_L1] = "smooth_l1_loss", [BCE] = "binary_cross_entropy",
    [BCE_LOGITS] = "binary_cross_entropy_with_logits", [MSE_BACKWARD] = "mse_loss_backward",
    [SMOOTH_L1_BACKWARD] = "smooth_l1_loss_backward", [BCE_BACKWARD] = "binary_cross_entropy_backward",
};

/* The operands of one call; NULL entries are absent. exact_target: target must have x's shape (the
 * BCE losses) instead of broadcasting with it. */
typedef struct pointwise_args {
    const tb_tensor *x, *target, *weight, *pos_weight, *grad;
    bool exact_target;
} pointwise_args;

static tb_status pointwise_run(pointwise_job *job, const pointwise_args *a, int reduction, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = kind_names[job->kind];
    bool backward = job->kind >= MSE_BACKWARD;
    char what[96];
    if (reduction < TB_REDUCTION_NONE || reduction > TB_REDUCTION_SUM)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", name,
                            reduction);
    const tb_tensor *operands[5] = {a->x, a->target, a->weight, a->pos_weight, a->grad};
    static const char *const labels[5] = {"input", "target", "weight", "pos_weight", "grad_output"};
    for (int i = 0; i < 5; i++) {
        if (!operands[i])
            continue;
        snprintf(what, sizeof what, "%s: %s", name, labels[i]);
        TB_TRY(tb_ops_require_float(operands[i]->dtype, what));
    }
    int ndim = a->x->ndim;
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, a->x->shape, (size_t)ndim * sizeof(int64_t));
    if (a->exact_target) {
        bool ok = a->target->ndim == ndim;
        for (int d = 0; ok && d < ndim; d++)
            ok = a->target->shape[d] == shape[d];
        if (!ok) {
            char s1[128], s2[128];
            return tb_error_set(TB_ERR_SHAPE, "%s: target size %s must be the same as input size %s", name,
                                tb_shape_string(a->target->ndim, a->target->shape, s1, sizeof s1),
                                tb_shape_string(ndim, shape, s2, sizeof s2));
        }
    } else {
        tb_status status = tb_broadcast_shapes(ndim, shape, a->target->ndim, a->target->shape, &ndim, shape);
        if (status != TB_OK)
            return tb_error_prefix(status, "%s: input and target", name);
    }
    if (backward && reduction == TB_REDUCTION_NONE) {
        tb_status status = tb_broadcast_shapes(ndim, shape, a->grad->ndim, a->grad->shape, &ndim, shape);
        if (status != TB_OK)
            return tb_error_prefix(status, "%s: grad_output", name);
    } else if (backward && tb_tensor_numel(a->grad) != 1) {
        return tb_error_set(TB_ERR_SHAPE, "%s: grad_output must have one element for a reduced loss, got %lld", name,
                            (long long)tb_tensor_numel(a->grad));
    }
    tb_tensor t[6];
    memset(t, 0, sizeof t);
    tb_status status = TB_OK;
    for (int i = 0; i < 5 && status == TB_OK; i++) {
        if (!operands[i])
            continue;
        snprintf(what, sizeof what, "%s: %s", name, labels[i]);
        if (i == 4 && reduction != TB_REDUCTION_NONE) {
            tb_tensor flat;
            int64_t one = 1;
            status = tb_tensor_reshape(operands[i], 0, &one, &flat);
            if (status == TB_OK) {
                status = tb_nn_stage_expanded(&flat, ndim, shape, what, &t[i]);
                tb_tensor_release(&flat);
            }
        } else {
            status = tb_nn_stage_expanded(operands[i], ndim, shape, what, &t[i]);
        }
    }
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, ndim, shape, TB_ALLOC_DEFAULT, &t[5]);
    int64_t count = status == TB_OK ? tb_tensor_numel(&t[5]) : 0;
    if (status == TB_OK) {
        job->x = tb_tensor_data(&t[0]);
        job->target = tb_tensor_data(&t[1]);
        job->weight = tb_nn_data(&t[2]);
        job->pos_weight = tb_nn_data(&t[3]);
        job->grad = tb_nn_data(&t[4]);
        job->out = tb_tensor_data(&t[5]);
        job->norm = backward && reduction == TB_REDUCTION_MEAN ? 1.0f / (float)count : 1.0f;
        atomic_init(&job->out_of_range, 0);
        if (count > 0)
            tb_parallel_for(count, TB_OPS_GRAIN, pointwise_chunk, job);
        if (atomic_load(&job->out_of_range))
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: all elements of input should be between 0 and 1", name);
    }
    tb_dtype dtype = a->x->dtype;
    if (!a->exact_target)
        dtype = tb_ops_promote(dtype, a->target->dtype);
    if (status == TB_OK && (backward || reduction == TB_REDUCTION_NONE)) {
        status = tb_ops_finish_dtype(&t[5], dtype, out);
    } else if (status == TB_OK) {
        double sum = 0.0;
        status = chunked_sum(tb_tensor_data(&t[5]), count, &sum);
        if (reduction == TB_REDUCTION_MEAN)
            sum /= (double)count; /* empty input: NaN, as torch */
        tb_tensor scalar = {0};
        int64_t one = 1; /* a valid (unused) shape pointer for the 0-dim tensor */
        if (status == TB_OK)
            status = tb_tensor_empty(TB_F32, 0, &one, TB_ALLOC_DEFAULT, &scalar);
        if (status == TB_OK) {
            *(float *)tb_tensor_data(&scalar) = (float)sum;
            status = tb_ops_finish_dtype(&scalar, dtype, out);
        }
    }
    tb_nn_release_all(t, 6);
    return status;
}

tb_status tb_op_mse_loss(const tb_tensor *x, const tb_tensor *target, int reduction, tb_tensor *out) {
    pointwise_job job = {.kind = MSE};
    pointwise_args a = {.x = x, .target = target};
    return pointwise_run(&job, &a, reduction, out);
}

tb_status tb_op_mse_loss_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *target,
                                  int reduction, tb_tensor *out) {
    pointwise_job job = {.kind = MSE_BACKWARD};
    pointwise_args a = {.x = x, .target = target, .grad = grad_output};
    return pointwise_run(&job, &a, reduction, out);
}

static tb_status check_beta(const char *name, float beta, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!(beta >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: beta must be >= 0, got %g", name, (double)beta);
    return TB_OK;
}

tb_status tb_op_smooth_l1_loss(const tb_tensor *x, const tb_tensor *target, int reduction, float beta, tb_tensor *out) {
    TB_TRY(check_beta("smooth_l1_loss", beta, out));
    pointwise_job job = {.kind = SMOOTH_L1, .beta = beta};
    pointwise_args a = {.x = x, .target = target};
    return pointwise_run(&job, &a, reduction, out);
}

tb_status tb_op_smooth_l1_loss_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *target,
                                        int reduction, float beta, tb_tensor *out) {
    TB_TRY(check_beta("smooth_l1_loss_backward", beta, out));
    pointwise_job job = {.kind = SMOOTH_L1_BACKWARD, .beta = beta};
    pointwise_args a = {.x = x, .target = target, .grad = grad_output};
    return pointwise_run(&job, &a, reduction, out);
}

tb_status tb_op_binary_cross_entropy(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight,
                                     int reduction, tb_tensor *out) {
    pointwise_job job = {.kind = BCE};
    pointwise_args a = {.x = x, .target = target, .weight = weight, .exact_target = true};
    return pointwise_run(&job, &a, reduction, out);
}

tb_status tb_op_binary_cross_entropy_backward(const tb_tensor *grad_output, const tb_tensor *x,
                                              const tb_tensor *target, const tb_tensor *weight, int reduction,
                                              tb_tensor *out) {
    pointwise_job job = {.kind = BCE_BACKWARD};
    pointwise_args a = {.x = x, .target = target, .weight = weight, .grad = grad_output, .exact_target = true};
    return pointwise_run(&job, &a, reduction, out);
}

tb_status tb_op_binary_cross_entropy_with_logits(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight,
                                                 const tb_tensor *pos_weight, int reduction, tb_tensor *out) {
    pointwise_job job = {.kind = BCE_LOGITS};
    pointwise_args a = {.x = x, .target = target, .weight = weight, .pos_weight = pos_weight, .exact_target = true};
    return pointwise_run(&job, &a, reduction, out);
}
