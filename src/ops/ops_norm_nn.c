/* Normalization forwards that also return their statistics: batch norm (training with batch
 * statistics and momentum-updated running stats, or evaluation with running stats), the eval fold
 * into a per-channel scale/shift, group norm, and native_layer_norm (mean/rstd for the backward).
 * Statistics accumulate in double so the variance of large channels stays accurate. */
#include <math.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

/* ---- batch norm ---- */

typedef struct batch_norm_job {
    const float *x;                   /* [N, C, S] */
    float *y;                         /* [N, C, S] */
    int64_t batch, channels, spatial;
    bool training;
    const float *weight, *bias;       /* [C] or NULL */
    const float *running_mean, *running_var;
    float eps;
    float *mean, *invstd, *var_unbiased; /* [C] outputs (training) */
} batch_norm_job;

static void batch_norm_channels(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    batch_norm_job *job = context;
    int64_t count = job->batch * job->spatial;
    for (int64_t c = begin; c < end; c++) {
        float mean, invstd;
        if (job->training) {
            double sum = 0.0;
            for (int64_t n = 0; n < job->batch; n++)
                sum += tb_nn_sum(job->x + (n * job->channels + c) * job->spatial, job->spatial);
            mean = count > 0 ? (float)(sum / (double)count) : NAN;
            double squares = 0.0;
            for (int64_t n = 0; n < job->batch; n++)
                squares += tb_nn_sum_sq(job->x + (n * job->channels + c) * job->spatial, job->spatial, mean);
            double var = count > 0 ? squares / (double)count : NAN;
            invstd = (float)(1.0 / sqrt(var + (double)job->eps));
            job->mean[c] = mean;
            job->invstd[c] = invstd;
            job->var_unbiased[c] = (float)(squares / (double)(count - 1));
        } else {
            mean = job->running_mean[c];
            invstd = 1.0f / sqrtf(job->running_var[c] + job->eps);
        }
        /* y = x * alpha + beta, the form PyTorch's CPU kernel uses */
        float alpha = invstd * (job->weight ? job->weight[c] : 1.0f);
        float beta = (job->bias ? job->bias[c] : 0.0f) - mean * alpha;
        for (int64_t n = 0; n < job->batch; n++) {
            const float *row = job->x + (n * job->channels + c) * job->spatial;
            float *out = job->y + (n * job->channels + c) * job->spatial;
            for (int64_t s = 0; s < job->spatial; s++)
                out[s] = row[s] * alpha + beta;
        }
    }
}

/* A [C] tensor of `dtype` from f32 values. */
static tb_status vector_out(const float *values, int64_t count, tb_dtype dtype, tb_tensor *out) {
    tb_tensor f32 = {0};
    TB_TRY(tb_tensor_empty(TB_F32, 1, &count, TB_ALLOC_DEFAULT, &f32));
    if (count > 0)
        memcpy(tb_tensor_data(&f32), values, (size_t)count * sizeof(float));
    return tb_ops_finish_dtype(&f32, dtype, out);
}

tb_status tb_op_batch_norm(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias,
                           const tb_tensor *running_mean, const tb_tensor *running_var, bool training, float momentum,
                           float eps, tb_tensor *out, tb_tensor *save_mean, tb_tensor *save_invstd,
                           tb_tensor *new_running_mean, tb_tensor *new_running_var) {
    tb_tensor *outputs[5] = {out, save_mean, save_invstd, new_running_mean, new_running_var};
    for (int i = 0; i < 5; i++)
        if (outputs[i])
            memset(outputs[i], 0, sizeof *outputs[i]);
    TB_TRY(tb_ops_require_float(x->dtype, "batch_norm: input"));
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "batch_norm: input must be [N, C, *] (at least 2-D), got %d dims", x->ndim);
    if (!training && (!running_mean || !running_var))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "batch_norm: running_mean and running_var are required in "
                            "evaluation mode (training=False)");
    if ((running_mean == NULL) != (running_var == NULL))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "batch_norm: pass both running_mean and running_var, or neither");
    if (!(eps >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "batch_norm: eps must be >= 0");
    int64_t channels = x->shape[1], batch = x->shape[0], spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->shape[d];
    enum { X, W, B, RM, RV, RESULT, STATS, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage(x, "batch_norm: input", &t[X]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(weight, channels, "batch_norm: weight", &t[W]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(bias, channels, "batch_norm: bias", &t[B]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(running_mean, channels, "batch_norm: running_mean", &t[RM]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(running_var, channels, "batch_norm: running_var", &t[RV]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &t[RESULT]);
    int64_t stats_shape[2] = {3, channels};
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 2, stats_shape, TB_ALLOC_DEFAULT, &t[STATS]);
    float *stats = status == TB_OK ? tb_tensor_data(&t[STATS]) : NULL;
    if (status == TB_OK) {
        batch_norm_job job = {
            .x = tb_tensor_data(&t[X]), .y = tb_tensor_data(&t[RESULT]), .batch = batch, .channels = channels,
            .spatial = spatial, .training = training, .weight = tb_nn_data(&t[W]), .bias = tb_nn_data(&t[B]),
            .running_mean = tb_nn_data(&t[RM]), .running_var = tb_nn_data(&t[RV]), .eps = eps,
            .mean = stats, .invstd = stats + channels, .var_unbiased = stats + 2 * channels,
        };
        int64_t per = batch * spatial;
        if (channels > 0)
            tb_parallel_for(channels, per >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (per > 0 ? per : 1), batch_norm_channels,
                            &job);
    }
    /* statistics take the parameters' dtype (f32 params with a bf16 input give f32 stats, as ATen) */
    tb_dtype stats_dtype = weight ? weight->dtype : running_mean ? running_mean->dtype : x->dtype;
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&t[RESULT], x->dtype, out);
    for (int i = 0; i < 2 && status == TB_OK; i++) {
        tb_tensor *target = i == 0 ? save_mean : save_invstd;
        if (target)
            status = vector_out(stats + i * channels, training ? channels : 0, stats_dtype, target);
    }
    if (status == TB_OK && running_mean) {
        const float *rm = tb_tensor_data(&t[RM]), *rv = tb_tensor_data(&t[RV]);
        for (int i = 0; i < 2 && status == TB_OK; i++) {
            tb_tensor *target = i == 0 ? new_running_mean : new_running_var;
            const tb_tensor *source = i == 0 ? running_mean : running_var;
            if (!target)
                continue;
            if (!training) { /* unchanged, as a copy (outputs never alias inputs) */
                status = vector_out(i == 0 ? rm : rv, channels, source->dtype, target);
                continue;
            }
            /* new = (1 - momentum) * running + momentum * batch statistic (unbiased variance) */
            const float *running = i == 0 ? rm : rv, *batch_stat = i == 0 ? stats : stats + 2 * channels;
            float *scratch = stats + channels; /* invstd was already exported: reuse its row */
            for (int64_t c = 0; c < channels; c++)
                scratch[c] = momentum * batch_stat[c] + (1.0f - momentum) * running[c];
            status = vector_out(scratch, channels, source->dtype, target);
        }
    }
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK)
        for (int i = 0; i < 5; i++)
            if (outputs[i])
                tb_tensor_release(outputs[i]);
    return status;
}

tb_status tb_op_batch_norm_fold(const tb_tensor *weight, const tb_tensor *bias, const tb_tensor *running_mean,
                                const tb_tensor *running_var, float eps, tb_tensor *scale, tb_tensor *shift) {
    memset(scale, 0, sizeof *scale);
    memset(shift, 0, sizeof *shift);
    if (!running_mean || !running_var)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "batch_norm_fold: running_mean and running_var are required");
    if (running_mean->ndim != 1)
        return tb_error_set(TB_ERR_SHAPE, "batch_norm_fold: running_mean must be 1-D [C], got %d dims", running_mean->ndim);
    int64_t channels = running_mean->shape[0];
    enum { W, B, RM, RV, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage_vector(weight, channels, "batch_norm_fold: weight", &t[W]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(bias, channels, "batch_norm_fold: bias", &t[B]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(running_mean, channels, "batch_norm_fold: running_mean", &t[RM]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(running_var, channels, "batch_norm_fold: running_var", &t[RV]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 1, &channels, TB_ALLOC_DEFAULT, scale);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 1, &channels, TB_ALLOC_DEFAULT, shift);
    if (status == TB_OK) {
        const float *w = tb_nn_data(&t[W]), *b = tb_nn_data(&t[B]);
        const float *rm = tb_tensor_data(&t[RM]), *rv = tb_tensor_data(&t[RV]);
        float *sc = tb_tensor_data(scale), *sh = tb_tensor_data(shift);
        for (int64_t c = 0; c < channels; c++) {
            float invstd = 1.0f / sqrtf(rv[c] + eps);
            sc[c] = invstd * (w ? w[c] : 1.0f);
            sh[c] = (b ? b[c] : 0.0f) - rm[c] * sc[c];
        }
    }
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK) {
        tb_tensor_release(scale);
        tb_tensor_release(shift);
    }
    return status;
}

/* ---- group norm ---- */

typedef struct group_norm_job {
    const float *x;
    float *y;
    int64_t channels, groups, spatial;
    const float *weight, *bias;
    float eps;
    float *mean, *rstd; /* [N * groups] */
} group_norm_job;

static void group_norm_groups(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    group_norm_job *job = context;
    int64_t per_group = job->channels / job->groups;
    int64_t len = per_group * job->spatial;
    for (int64_t task = begin; task < end; task++) {
        /* task = n * groups + g; the group's channels are contiguous: len values at task * len */
        const float *x = job->x + task * len;
        float *y = job->y + task * len;
        float mean = len > 0 ? (float)(tb_nn_sum(x, len) / (double)len) : NAN;
        double var = len > 0 ? tb_nn_sum_sq(x, len, mean) / (double)len : NAN;
        float rstd = (float)(1.0 / sqrt(var + (double)job->eps));
        job->mean[task] = mean;
        job->rstd[task] = rstd;
        int64_t g = task % job->groups;
        for (int64_t cl = 0; cl < per_group; cl++) {
            int64_t c = g * per_group + cl;
            float scale = rstd * (job->weight ? job->weight[c] : 1.0f);
            float shift = (job->bias ? job->bias[c] : 0.0f) - mean * scale;
            const float *xc = x + cl * job->spatial;
            float *yc = y + cl * job->spatial;
            for (int64_t s = 0; s < job->spatial; s++)
                yc[s] = xc[s] * scale + shift;
        }
    }
}

tb_status tb_op_group_norm(const tb_tensor *x, const tb_tensor *weight, const tb_tensor *bias, int64_t groups,
                           float eps, tb_tensor *out, tb_tensor *mean, tb_tensor *rstd) {
    memset(out, 0, sizeof *out);
    if (mean)
        memset(mean, 0, sizeof *mean);
    if (rstd)
        memset(rstd, 0, sizeof *rstd);
    TB_TRY(tb_ops_require_float(x->dtype, "group_norm: input"));
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "group_norm: input must be [N, C, *] (at least 2-D), got %d dims", x->ndim);
    int64_t batch = x->shape[0], channels = x->shape[1], spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->shape[d];
    if (groups < 1 || channels % groups != 0) {
        char buf[128];
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "group_norm: num_groups (%lld) must be >= 1 and divide the "
                            "channels of input %s", (long long)groups, tb_shape_string(x->ndim, x->shape, buf, sizeof buf));
    }
    if (!(eps >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "group_norm: eps must be >= 0");
    enum { X, W, B, RESULT, MEAN, RSTD, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage(x, "group_norm: input", &t[X]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(weight, channels, "group_norm: weight", &t[W]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(bias, channels, "group_norm: bias", &t[B]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &t[RESULT]);
    int64_t stats_shape[2] = {batch, groups};
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 2, stats_shape, TB_ALLOC_DEFAULT, &t[MEAN]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, 2, stats_shape, TB_ALLOC_DEFAULT, &t[RSTD]);
    if (status == TB_OK) {
        group_norm_job job = {
            .x = tb_tensor_data(&t[X]), .y = tb_tensor_data(&t[RESULT]), .channels = channels, .groups = groups,
            .spatial = spatial, .weight = tb_nn_data(&t[W]), .bias = tb_nn_data(&t[B]), .eps = eps,
            .mean = tb_tensor_data(&t[MEAN]), .rstd = tb_tensor_data(&t[RSTD]),
        };
        int64_t per = channels / groups * spatial;
        if (batch * groups > 0)
            tb_parallel_for(batch * groups, per >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (per > 0 ? per : 1),
                            group_norm_groups, &job);
    }
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&t[RESULT], x->dtype, out);
    if (status == TB_OK && mean)
        status = tb_ops_finish_dtype(&t[MEAN], x->dtype, mean);
    if (status == TB_OK && rstd)
        status = tb_ops_finish_dtype(&t[RSTD], x->dtype, rstd);
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK) {
        tb_tensor_release(out);
        if (mean)
            tb_tensor_release(mean);
        if (rstd)
            tb_tensor_release(rstd);
    }
    return status;
}

/* ---- native_layer_norm ---- */

typedef struct layer_norm_job {
    tb_layer_norm_kernel kernel;
    const float *x, *weight, *bias;
    float *y, *mean, *rstd;
    int64_t len;
    float eps;
} layer_norm_job;

static void layer_norm_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    layer_norm_job *job = context;
    job->kernel(job->x + begin * job->len, job->weight, job->bias, job->y + begin * job->len, end - begin, job->len,
                job->eps, job->mean + begin, job->rstd + begin);
}

tb_status tb_op_native_layer_norm(const tb_tensor *x, int normalized_ndim, const tb_tensor *weight,
                                  const tb_tensor *bias, float eps, tb_tensor *out, tb_tensor *mean, tb_tensor *rstd) {
    memset(out, 0, sizeof *out);
    if (mean)
        memset(mean, 0, sizeof *mean);
    if (rstd)
        memset(rstd, 0, sizeof *rstd);
    TB_TRY(tb_ops_require_float(x->dtype, "native_layer_norm: input"));
    if (normalized_ndim < 1 || normalized_ndim > x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "native_layer_norm: normalized_shape has %d dims but the input has %d",
                            normalized_ndim, x->ndim);
    if (!(eps >= 0.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "native_layer_norm: eps must be >= 0");
    int axis = x->ndim - normalized_ndim;
    int64_t rows = 1, len = 1;
    for (int d = 0; d < x->ndim; d++)
        *(d < axis ? &rows : &len) *= x->shape[d];
    enum { X, W, B, RESULT, MEAN, RSTD, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    int64_t stats_shape[TB_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        stats_shape[d] = d < axis ? x->shape[d] : 1;
    tb_status status = tb_nn_stage(x, "native_layer_norm: input", &t[X]);
    if (status == TB_OK)
        status = tb_ops_stage_normalized_param(weight, x, normalized_ndim, "native_layer_norm: weight", &t[W]);
    if (status == TB_OK)
        status = tb_ops_stage_normalized_param(bias, x, normalized_ndim, "native_layer_norm: bias", &t[B]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_DEFAULT, &t[RESULT]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, stats_shape, TB_ALLOC_DEFAULT, &t[MEAN]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, stats_shape, TB_ALLOC_DEFAULT, &t[RSTD]);
    if (status == TB_OK && rows > 0) {
        layer_norm_job job = {
            .kernel = tb_elementwise_kernels_active()->layer_norm, .x = tb_tensor_data(&t[X]),
            .weight = tb_nn_data(&t[W]), .bias = tb_nn_data(&t[B]), .y = tb_tensor_data(&t[RESULT]),
            .mean = tb_tensor_data(&t[MEAN]), .rstd = tb_tensor_data(&t[RSTD]), .len = len, .eps = eps,
        };
        if (len > 0) {
            tb_parallel_for(rows, len >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / len, layer_norm_rows, &job);
        } else {
            /* an empty normalized shape: the mean and rstd of no values are NaN */
            for (int64_t r = 0; r < rows; r++) {
                job.mean[r] = NAN;
                job.rstd[r] = NAN;
            }
        }
    }
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&t[RESULT], x->dtype, out);
    if (status == TB_OK && mean)
        status = tb_ops_finish_dtype(&t[MEAN], x->dtype, mean);
    if (status == TB_OK && rstd)
        status = tb_ops_finish_dtype(&t[RSTD], x->dtype, rstd);
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK) {
        tb_tensor_release(out);
        if (mean)
            tb_tensor_release(mean);
        if (rstd)
            tb_tensor_release(rstd);
    }
    return status;
}
