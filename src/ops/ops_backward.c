/* Backward ops of the activations (threshold/relu, gelu exact and tanh, silu, sigmoid, tanh), of
 * softmax/log_softmax, and of the embedding lookup, with ATen's formulas and argument conventions. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

/* ---- activations ---- */

typedef struct activation_backward_job {
    int activation; /* tb_activation, or -1 for threshold */
    float threshold;
    const float *grad, *saved;
    float *out;
} activation_backward_job;

static float gelu_derivative(float x) {
    const float alpha = (float)M_SQRT1_2, beta = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    float cdf = 0.5f * (1.0f + erff(x * alpha));
    float pdf = beta * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

static float gelu_tanh_derivative(float x) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    float x_sq = x * x;
    float inner = beta * (x + kappa * x_sq * x);
    float t = tanhf(inner);
    float left = 0.5f * x, right = 1.0f + t;
    return 0.5f * right + left * (1.0f - t * t) * beta * (1.0f + 3.0f * kappa * x_sq);
}

static void activation_backward_chunk(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    activation_backward_job *job = context;
    const float *g = job->grad, *v = job->saved;
    float *out = job->out;
    switch (job->activation) {
    case -1:
        for (int64_t i = begin; i < end; i++)
            out[i] = v[i] <= job->threshold ? 0.0f : g[i];
        break;
    case TB_ACTIVATION_RELU:
        for (int64_t i = begin; i < end; i++)
            out[i] = v[i] <= 0.0f ? 0.0f : g[i];
        break;
    case TB_ACTIVATION_GELU:
        for (int64_t i = begin; i < end; i++)
            out[i] = g[i] * gelu_derivative(v[i]);
        break;
    case TB_ACTIVATION_GELU_TANH:
        for (int64_t i = begin; i < end; i++)
            out[i] = g[i] * gelu_tanh_derivative(v[i]);
        break;
    case TB_ACTIVATION_SILU:
        for (int64_t i = begin; i < end; i++) {
            float s = 1.0f / (1.0f + expf(-v[i]));
            out[i] = g[i] * s * (1.0f + v[i] * (1.0f - s));
        }
        break;
    case TB_ACTIVATION_SIGMOID: /* v is the forward output */
        for (int64_t i = begin; i < end; i++)
            out[i] = g[i] * (1.0f - v[i]) * v[i];
        break;
    case TB_ACTIVATION_TANH: /* v is the forward output */
        for (int64_t i = begin; i < end; i++)
            out[i] = g[i] * (1.0f - v[i] * v[i]);
        break;
    default:
        break;
    }
}

static tb_status activation_backward(const char *name, int activation, float threshold, const tb_tensor *grad,
                                     const tb_tensor *saved, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    char what[96], saved_what[96];
    snprintf(what, sizeof what, "%s: grad_output", name);
    TB_TRY(tb_ops_require_float(grad->dtype, what));
    snprintf(saved_what, sizeof saved_what, "%s: %s", name,
             activation == TB_ACTIVATION_SIGMOID || activation == TB_ACTIVATION_TANH ? "output" : "input");
    TB_TRY(tb_ops_require_float(saved->dtype, saved_what));
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    tb_status status = tb_broadcast_shapes(grad->ndim, grad->shape, saved->ndim, saved->shape, &ndim, shape);
    if (status != TB_OK)
        return tb_error_prefix(status, "%s", name);
    tb_tensor t[3];
    memset(t, 0, sizeof t);
    status = tb_nn_stage_expanded(grad, ndim, shape, what, &t[0]);
    if (status == TB_OK)
        status = tb_nn_stage_expanded(saved, ndim, shape, saved_what, &t[1]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, ndim, shape, TB_ALLOC_DEFAULT, &t[2]);
    if (status == TB_OK) {
        activation_backward_job job = {.activation = activation, .threshold = threshold, .grad = tb_tensor_data(&t[0]),
                                       .saved = tb_tensor_data(&t[1]), .out = tb_tensor_data(&t[2])};
        int64_t count = tb_tensor_numel(&t[2]);
        if (count > 0)
            tb_parallel_for(count, TB_OPS_GRAIN, activation_backward_chunk, &job);
        status = tb_ops_finish_dtype(&t[2], tb_ops_promote(grad->dtype, saved->dtype), out);
    }
    tb_nn_release_all(t, 3);
    return status;
}

tb_status tb_op_threshold_backward(const tb_tensor *grad, const tb_tensor *x, float threshold, tb_tensor *out) {
    return activation_backward("threshold_backward", -1, threshold, grad, x, out);
}

tb_status tb_op_activation_backward(int activation, const tb_tensor *grad, const tb_tensor *saved, tb_tensor *out) {
    static const char *const names[TB_ACTIVATION_COUNT] = {
        "none", "relu_backward", "gelu_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
    };
    if (activation <= TB_ACTIVATION_NONE || activation >= TB_ACTIVATION_COUNT) {
        memset(out, 0, sizeof *out);
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "activation_backward: unknown or identity activation %d", activation);
    }
    return activation_backward(names[activation], activation, 0.0f, grad, saved, out);
}

/* ---- softmax ---- */

typedef struct softmax_backward_job {
    const float *grad, *y;
    float *out;
    int64_t len, inner;
    bool log;
} softmax_backward_job;

static void softmax_backward_outer(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    softmax_backward_job *job = context;
    int64_t len = job->len, inner = job->inner;
    for (int64_t o = begin; o < end; o++) {
        const float *g = job->grad + o * len * inner, *y = job->y + o * len * inner;
        float *out = job->out + o * len * inner;
        for (int64_t i = 0; i < inner; i++) {
            float sum = 0.0f;
            if (job->log) {
                for (int64_t r = 0; r < len; r++)
                    sum += g[r * inner + i];
                for (int64_t r = 0; r < len; r++)
                    out[r * inner + i] = g[r * inner + i] - expf(y[r * inner + i]) * sum;
            } else {
                for (int64_t r = 0; r < len; r++)
                    sum += g[r * inner + i] * y[r * inner + i];
                for (int64_t r = 0; r < len; r++)
                    out[r * inner + i] = y[r * inner + i] * (g[r * inner + i] - sum);
            }
        }
    }
}

tb_status tb_op_softmax_backward(const tb_tensor *grad, const tb_tensor *output, int64_t dim, bool log,
                                 tb_dtype out_dtype, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = log ? "_log_softmax_backward_data" : "_softmax_backward_data";
    char what[96];
    snprintf(what, sizeof what, "%s: grad_output", name);
    TB_TRY(tb_ops_require_float(grad->dtype, what));
    snprintf(what, sizeof what, "%s: output", name);
    TB_TRY(tb_ops_require_float(output->dtype, what));
    snprintf(what, sizeof what, "%s: input_dtype", name);
    TB_TRY(tb_ops_require_float(out_dtype, what));
    bool same = grad->ndim == output->ndim;
    for (int d = 0; same && d < grad->ndim; d++)
        same = grad->shape[d] == output->shape[d];
    if (!same) {
        char a[128], b[128];
        return tb_error_set(TB_ERR_SHAPE, "%s: grad_output %s and output %s must have the same shape", name,
                            tb_shape_string(grad->ndim, grad->shape, a, sizeof a),
                            tb_shape_string(output->ndim, output->shape, b, sizeof b));
    }
    int d;
    if (output->ndim == 0) {
        if (dim != 0 && dim != -1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: dim %lld is out of range for a 0-dim tensor", name,
                                (long long)dim);
        d = -1;
    } else {
        TB_TRY(tb_normalize_dim(dim, output->ndim, &d));
    }
    tb_tensor t[3];
    memset(t, 0, sizeof t);
    snprintf(what, sizeof what, "%s: grad_output", name);
    tb_status status = tb_nn_stage(grad, what, &t[0]);
    if (status == TB_OK) {
        snprintf(what, sizeof what, "%s: output", name);
        status = tb_nn_stage(output, what, &t[1]);
    }
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, output->ndim, output->shape, TB_ALLOC_DEFAULT, &t[2]);
    if (status == TB_OK && tb_tensor_numel(output) > 0) {
        softmax_backward_job job = {.grad = tb_tensor_data(&t[0]), .y = tb_tensor_data(&t[1]),
                                    .out = tb_tensor_data(&t[2]), .len = 1, .inner = 1, .log = log};
        int64_t outer = 1;
        for (int i = 0; i < output->ndim; i++) {
            if (i < d)
                outer *= output->shape[i];
            else if (i == d)
                job.len = output->shape[i];
            else
                job.inner *= output->shape[i];
        }
        int64_t per = job.len * job.inner;
        tb_parallel_for(outer, per >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / per, softmax_backward_outer, &job);
    }
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&t[2], out_dtype, out);
    tb_nn_release_all(t, 3);
    return status;
}

/* ---- embedding ---- */

typedef struct embedding_backward_job {
    const float *grad;
    const int64_t *indices;
    const float *scale; /* per row 1/count, or NULL */
    float *out;
    int64_t count, dim, padding_idx;
} embedding_backward_job;

/* Columns [begin, end) of every row: each task owns whole columns, so no two threads add into the same
 * element and the summation order is the index order. */
static void embedding_backward_columns(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    embedding_backward_job *job = context;
    for (int64_t i = 0; i < job->count; i++) {
        int64_t row = job->indices[i];
        if (row == job->padding_idx)
            continue;
        const float *g = job->grad + i * job->dim;
        float *o = job->out + row * job->dim;
        float scale = job->scale ? job->scale[row] : 1.0f;
        for (int64_t e = begin; e < end; e++)
            o[e] += g[e] * scale;
    }
}

tb_status tb_op_embedding_backward(const tb_tensor *grad, const tb_tensor *indices, int64_t num_weights,
                                   int64_t padding_idx, bool scale_grad_by_freq, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_ops_require_float(grad->dtype, "embedding_dense_backward: grad_output"));
    if (num_weights < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "embedding_dense_backward: num_weights must be >= 0, got %lld",
                            (long long)num_weights);
    int64_t count = tb_tensor_numel(indices);
    bool ok = grad->ndim == indices->ndim + 1;
    for (int d = 0; ok && d < indices->ndim; d++)
        ok = grad->shape[d] == indices->shape[d];
    if (!ok) {
        char a[128], b[128];
        return tb_error_set(TB_ERR_SHAPE, "embedding_dense_backward: grad_output %s must be indices.shape + [E] "
                            "(indices %s)", tb_shape_string(grad->ndim, grad->shape, a, sizeof a),
                            tb_shape_string(indices->ndim, indices->shape, b, sizeof b));
    }
    int64_t dim = grad->shape[grad->ndim - 1];
    tb_tensor t[4];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage(grad, "embedding_dense_backward: grad_output", &t[0]);
    if (status == TB_OK)
        status = tb_nn_stage_index(indices, "embedding_dense_backward: indices", &t[1]);
    int64_t shape[2] = {num_weights, dim};
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 2, shape, TB_ALLOC_ZERO, &t[2]);
    const int64_t *index = status == TB_OK ? tb_tensor_data(&t[1]) : NULL;
    for (int64_t i = 0; status == TB_OK && i < count; i++)
        if (index[i] < 0 || index[i] >= num_weights)
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "embedding_dense_backward: index %lld at position %lld is "
                                  "out of range [0, %lld)", (long long)index[i], (long long)i, (long long)num_weights);
    if (status == TB_OK && scale_grad_by_freq) {
        status = tb_tensor_empty(TB_F32, 1, &num_weights, TB_ALLOC_ZERO, &t[3]);
        if (status == TB_OK) {
            float *frequency = tb_tensor_data(&t[3]);
            for (int64_t i = 0; i < count; i++)
                frequency[index[i]] += 1.0f;
            for (int64_t r = 0; r < num_weights; r++)
                frequency[r] = frequency[r] > 0.0f ? 1.0f / frequency[r] : 0.0f;
        }
    }
    if (status == TB_OK && count > 0 && dim > 0) {
        embedding_backward_job job = {.grad = tb_tensor_data(&t[0]), .indices = index, .scale = tb_nn_data(&t[3]),
                                      .out = tb_tensor_data(&t[2]), .count = count, .dim = dim,
                                      .padding_idx = padding_idx < 0 ? -1 : padding_idx};
        int64_t grain = count >= TB_OPS_GRAIN ? 16 : (TB_OPS_GRAIN / count > dim ? dim : TB_OPS_GRAIN / count);
        tb_parallel_for(dim, grain > 0 ? grain : 1, embedding_backward_columns, &job);
    }
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&t[2], grad->dtype, out);
    tb_nn_release_all(t, 4);
    return status;
}
