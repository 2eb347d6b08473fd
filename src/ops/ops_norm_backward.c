/* Backward ops of the normalizations: native_layer_norm_backward, native_group_norm_backward and
 * native_batch_norm_backward (training and evaluation). With xhat = (x - mean) * rstd and g = dy * w,
 * every one is
 *     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (means over the normalized set)
 *     dw = sum dy * xhat,  db = sum dy                         (sums over everything else)
 * except evaluation batch norm, whose statistics are constants: dx = dy * w * rstd. Reductions
 * accumulate in double. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

/* Allocates the f32 outputs selected by mask: [0] like x (shape given), [1] and [2] [param_len]. */
static tb_status alloc_grads(const bool mask[3], int ndim, const int64_t *shape, int64_t param_len, tb_tensor *f32) {
    if (mask[0])
        TB_TRY(tb_tensor_empty(TB_F32, ndim, shape, TB_ALLOC_DEFAULT, &f32[0]));
    if (mask[1])
        TB_TRY(tb_tensor_empty(TB_F32, 1, &param_len, TB_ALLOC_DEFAULT, &f32[1]));
    if (mask[2])
        TB_TRY(tb_tensor_empty(TB_F32, 1, &param_len, TB_ALLOC_DEFAULT, &f32[2]));
    return TB_OK;
}

/* Converts the f32 grads into their dtypes and hands them out (params may be reshaped to param_shape). */
static tb_status finish_grads(tb_tensor *f32, tb_dtype input_dtype, tb_dtype param_dtype, int param_ndim,
                              const int64_t *param_shape, tb_tensor *grad_input, tb_tensor *grad_weight,
                              tb_tensor *grad_bias) {
    tb_tensor *outs[3] = {grad_input, grad_weight, grad_bias};
    for (int i = 0; i < 3; i++) {
        if (!f32[i].storage)
            continue;
        if (i > 0 && param_ndim != 1) {
            tb_tensor reshaped;
            TB_TRY(tb_tensor_view(&f32[i], param_ndim, param_shape, &reshaped));
            tb_tensor_release(&f32[i]);
            f32[i] = reshaped;
        }
        TB_TRY(tb_ops_finish_dtype(&f32[i], i == 0 ? input_dtype : param_dtype, outs[i]));
    }
    return TB_OK;
}

static void release_outputs(tb_tensor *a, tb_tensor *b, tb_tensor *c) {
    tb_tensor_release(a);
    tb_tensor_release(b);
    tb_tensor_release(c);
}

static tb_status check_same_shape(const char *name, const tb_tensor *grad, const tb_tensor *x) {
    bool ok = grad->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++)
        ok = grad->shape[d] == x->shape[d];
    if (ok)
        return TB_OK;
    char a[128], b[128];
    return tb_error_set(TB_ERR_SHAPE, "%s: grad_output has shape %s but input has shape %s", name,
                        tb_shape_string(grad->ndim, grad->shape, a, sizeof a), tb_shape_string(x->ndim, x->shape, b, sizeof b));
}

static tb_status check_numel(const char *name, const char *what, const tb_tensor *t, int64_t expected) {
    if (tb_tensor_numel(t) == expected)
        return TB_OK;
    return tb_error_set(TB_ERR_SHAPE, "%s: %s has %lld elements, expected %lld", name, what,
                        (long long)tb_tensor_numel(t), (long long)expected);
}

/* ---- a generic normalized-set backward ----
 * The input is viewed as [outer, channels, inner]; a normalized set is (outer index o, a contiguous
 * run of channels) with its own mean/rstd; parameters are per channel or per inner position. */

typedef struct norm_backward_job {
    const float *dy, *x, *w; /* w: per parameter index, or NULL (ones) */
    const float *mean, *rstd;
    float *dx, *dw, *db;
    /* layer norm: sets are rows of len, params per position. group norm: sets are (n, g) of
     * per_group channels x spatial, params per channel. */
    int64_t sets, set_channels, spatial, groups;
    bool params_per_position;
    int64_t param_len; /* parameters to reduce */
} norm_backward_job;

/* dx for sets [begin, end). */
static void norm_backward_dx(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    norm_backward_job *job = context;
    int64_t len = job->set_channels * job->spatial;
    for (int64_t set = begin; set < end; set++) {
        const float *dy = job->dy + set * len, *x = job->x + set * len;
        float *dx = job->dx + set * len;
        float mean = job->mean[set], rstd = job->rstd[set];
        int64_t channel0 = job->params_per_position ? 0 : (set % job->groups) * job->set_channels;
        /* sum_g = sum dy * w, sum_gx = sum dy * w * (x - mean) */
        double sum_g = 0.0, sum_gx = 0.0;
        if (job->params_per_position) {
            tb_nn_sums_dy(dy, x, job->w, len, mean, &sum_g, &sum_gx);
        } else {
            for (int64_t c = 0; c < job->set_channels; c++) {
                double g, gx, w = job->w ? job->w[channel0 + c] : 1.0;
                tb_nn_sums_dy(dy + c * job->spatial, x + c * job->spatial, NULL, job->spatial, mean, &g, &gx);
                sum_g += w * g;
                sum_gx += w * gx;
            }
        }
        float mean_g = len > 0 ? (float)(sum_g / (double)len) : 0.0f;
        float mean_gx = len > 0 ? (float)(sum_gx * rstd / (double)len) : 0.0f; /* mean of g * xhat */
        for (int64_t c = 0; c < job->set_channels; c++) {
            const float *dyc = dy + c * job->spatial, *xc = x + c * job->spatial;
            float *dxc = dx + c * job->spatial;
            const float *wp = job->w && job->params_per_position ? job->w + c * job->spatial : NULL;
            float wc = job->w && !job->params_per_position ? job->w[channel0 + c] : 1.0f;
            for (int64_t s = 0; s < job->spatial; s++) {
                float xhat = (xc[s] - mean) * rstd;
                dxc[s] = rstd * (dyc[s] * (wp ? wp[s] : wc) - mean_g - xhat * mean_gx);
            }
        }
    }
}

/* dw/db for parameter indices [begin, end): layer norm sums over rows at a fixed position (in blocks
 * of 64 positions so each row is read contiguously); group norm sums over (n, spatial) per channel. */
static void norm_backward_params(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    norm_backward_job *job = context;
    int64_t len = job->set_channels * job->spatial;
    if (job->params_per_position) {
        for (int64_t block = begin; block < end; block += 64) {
            int64_t width = end - block < 64 ? end - block : 64;
            double sum_dyx[64], sum_dy[64];
            for (int64_t j = 0; j < width; j++)
                sum_dyx[j] = sum_dy[j] = 0.0;
            for (int64_t r = 0; r < job->sets; r++) {
                const float *dy = job->dy + r * len + block, *x = job->x + r * len + block;
                double mean = job->mean[r], rstd = job->rstd[r];
                for (int64_t j = 0; j < width; j++) {
                    sum_dyx[j] += dy[j] * (x[j] - mean) * rstd;
                    sum_dy[j] += dy[j];
                }
            }
            for (int64_t j = 0; j < width; j++) {
                if (job->dw)
                    job->dw[block + j] = (float)sum_dyx[j];
                if (job->db)
                    job->db[block + j] = (float)sum_dy[j];
            }
        }
        return;
    }
    int64_t batch = job->sets / job->groups;
    for (int64_t c = begin; c < end; c++) {
        int64_t g = c / job->set_channels, cl = c % job->set_channels;
        double sum_dyx = 0.0, sum_dy = 0.0;
        for (int64_t n = 0; n < batch; n++) {
            int64_t set = n * job->groups + g;
            const float *dy = job->dy + set * len + cl * job->spatial, *x = job->x + set * len + cl * job->spatial;
            double part_dy, part_dyx;
            tb_nn_sums_dy(dy, x, NULL, job->spatial, job->mean[set], &part_dy, &part_dyx);
            sum_dy += part_dy;
            sum_dyx += part_dyx * job->rstd[set];
        }
        if (job->dw)
            job->dw[c] = (float)sum_dyx;
        if (job->db)
            job->db[c] = (float)sum_dy;
    }
}

static void norm_backward_run(norm_backward_job *job) {
    int64_t len = job->set_channels * job->spatial;
    if (job->dx && job->sets > 0)
        tb_parallel_for(job->sets, len >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (len > 0 ? len : 1), norm_backward_dx, job);
    if ((job->dw || job->db) && job->param_len > 0)
        tb_parallel_for(job->param_len, job->params_per_position ? 64 : 1, norm_backward_params, job);
}

/* Stages the common inputs of a normalized-set backward. t[]: DY, X, W, MEAN, RSTD. */
enum { NB_DY, NB_X, NB_W, NB_MEAN, NB_RSTD, NB_GRADS, NB_COUNT = NB_GRADS + 3 };

static tb_status stage_common(const char *name, const tb_tensor *grad_output, const tb_tensor *x,
                              const tb_tensor *mean, const tb_tensor *rstd, int64_t sets, tb_tensor *t) {
    char what[96];
    TB_TRY(check_same_shape(name, grad_output, x));
    TB_TRY(check_numel(name, "mean", mean, sets));
    TB_TRY(check_numel(name, "rstd", rstd, sets));
    snprintf(what, sizeof what, "%s: grad_output", name);
    TB_TRY(tb_nn_stage(grad_output, what, &t[NB_DY]));
    snprintf(what, sizeof what, "%s: input", name);
    TB_TRY(tb_nn_stage(x, what, &t[NB_X]));
    snprintf(what, sizeof what, "%s: mean", name);
    TB_TRY(tb_nn_stage(mean, what, &t[NB_MEAN]));
    snprintf(what, sizeof what, "%s: rstd", name);
    return tb_nn_stage(rstd, what, &t[NB_RSTD]);
}

static void fill_job_pointers(norm_backward_job *job, tb_tensor *t) {
    job->dy = tb_tensor_data(&t[NB_DY]);
    job->x = tb_tensor_data(&t[NB_X]);
    job->w = tb_nn_data(&t[NB_W]);
    job->mean = tb_tensor_data(&t[NB_MEAN]);
    job->rstd = tb_tensor_data(&t[NB_RSTD]);
    job->dx = tb_nn_data(&t[NB_GRADS]);
    job->dw = tb_nn_data(&t[NB_GRADS + 1]);
    job->db = tb_nn_data(&t[NB_GRADS + 2]);
}

tb_status tb_op_layer_norm_backward(const tb_tensor *grad_output, const tb_tensor *x, int normalized_ndim,
                                    const tb_tensor *mean, const tb_tensor *rstd, const tb_tensor *weight,
                                    const tb_tensor *bias, const bool output_mask[3], tb_tensor *grad_input,
                                    tb_tensor *grad_weight, tb_tensor *grad_bias) {
    memset(grad_input, 0, sizeof *grad_input);
    memset(grad_weight, 0, sizeof *grad_weight);
    memset(grad_bias, 0, sizeof *grad_bias);
    const char *name = "native_layer_norm_backward";
    TB_TRY(tb_ops_require_float(x->dtype, "native_layer_norm_backward: input"));
    if (normalized_ndim < 1 || normalized_ndim > x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "%s: normalized_shape has %d dims but the input has %d", name,
                            normalized_ndim, x->ndim);
    int axis = x->ndim - normalized_ndim;
    int64_t rows = 1, len = 1;
    for (int d = 0; d < x->ndim; d++)
        *(d < axis ? &rows : &len) *= x->shape[d];
    const tb_tensor *params[2] = {weight, bias};
    for (int i = 0; i < 2; i++) {
        const tb_tensor *p = params[i];
        bool ok = !p || p->ndim == normalized_ndim;
        for (int d = 0; p && ok && d < normalized_ndim; d++)
            ok = p->shape[d] == x->shape[axis + d];
        if (!ok) {
            char a[128], b[128];
            return tb_error_set(TB_ERR_SHAPE, "%s: %s has shape %s but the normalized shape is %s", name,
                                i == 0 ? "weight" : "bias", tb_shape_string(p->ndim, p->shape, a, sizeof a),
                                tb_shape_string(normalized_ndim, x->shape + axis, b, sizeof b));
        }
    }
    tb_tensor t[NB_COUNT];
    memset(t, 0, sizeof t);
    tb_status status = stage_common(name, grad_output, x, mean, rstd, rows, t);
    if (status == TB_OK && weight)
        status = tb_nn_stage(weight, "native_layer_norm_backward: weight", &t[NB_W]);
    if (status == TB_OK)
        status = alloc_grads(output_mask, x->ndim, x->shape, len, &t[NB_GRADS]);
    if (status == TB_OK) {
        norm_backward_job job = {.sets = rows, .set_channels = 1, .spatial = len, .groups = 1,
                                 .params_per_position = true, .param_len = len};
        fill_job_pointers(&job, t);
        norm_backward_run(&job);
    }
    const tb_tensor *param = weight ? weight : bias;
    tb_dtype param_dtype = param ? param->dtype : x->dtype;
    if (status == TB_OK)
        status = finish_grads(&t[NB_GRADS], x->dtype, param_dtype, normalized_ndim, x->shape + axis, grad_input,
                              grad_weight, grad_bias);
    tb_nn_release_all(t, NB_COUNT);
    if (status != TB_OK)
        release_outputs(grad_input, grad_weight, grad_bias);
    return status;
}

tb_status tb_op_group_norm_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *mean,
                                    const tb_tensor *rstd, const tb_tensor *weight, int64_t groups,
                                    const bool output_mask[3], tb_tensor *grad_input, tb_tensor *grad_weight,
                                    tb_tensor *grad_bias) {
    memset(grad_input, 0, sizeof *grad_input);
    memset(grad_weight, 0, sizeof *grad_weight);
    memset(grad_bias, 0, sizeof *grad_bias);
    const char *name = "native_group_norm_backward";
    TB_TRY(tb_ops_require_float(x->dtype, "native_group_norm_backward: input"));
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "%s: input must be [N, C, *] (at least 2-D), got %d dims", name, x->ndim);
    int64_t batch = x->shape[0], channels = x->shape[1], spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->shape[d];
    if (groups < 1 || channels % groups != 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: groups (%lld) must be >= 1 and divide the channels (%lld)",
                            name, (long long)groups, (long long)channels);
    tb_tensor t[NB_COUNT];
    memset(t, 0, sizeof t);
    tb_status status = stage_common(name, grad_output, x, mean, rstd, batch * groups, t);
    if (status == TB_OK)
        status = tb_nn_stage_vector(weight, channels, "native_group_norm_backward: weight", &t[NB_W]);
    if (status == TB_OK)
        status = alloc_grads(output_mask, x->ndim, x->shape, channels, &t[NB_GRADS]);
    if (status == TB_OK) {
        norm_backward_job job = {.sets = batch * groups, .set_channels = channels / groups, .spatial = spatial,
                                 .groups = groups, .params_per_position = false, .param_len = channels};
        fill_job_pointers(&job, t);
        norm_backward_run(&job);
    }
    if (status == TB_OK)
        status = finish_grads(&t[NB_GRADS], x->dtype, weight ? weight->dtype : x->dtype, 1, &channels, grad_input,
                              grad_weight, grad_bias);
    tb_nn_release_all(t, NB_COUNT);
    if (status != TB_OK)
        release_outputs(grad_input, grad_weight, grad_bias);
    return status;
}

/* ---- batch norm ---- */

typedef struct batch_norm_backward_job {
    const float *dy, *x, *w;  /* w [C] or NULL */
    const float *mean, *invstd; /* [C]: saved (train) or running mean and 1/sqrt(var + eps) (eval) */
    float *dx, *dw, *db;
    int64_t batch, channels, spatial;
    bool train;
} batch_norm_backward_job;

static void batch_norm_backward_channels(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    batch_norm_backward_job *job = context;
    int64_t count = job->batch * job->spatial;
    for (int64_t c = begin; c < end; c++) {
        float mean = job->mean[c], invstd = job->invstd[c];
        double sum_dy = 0.0, sum_dyx = 0.0;
        for (int64_t n = 0; n < job->batch; n++) {
            double part_dy, part_dyx;
            int64_t offset = (n * job->channels + c) * job->spatial;
            tb_nn_sums_dy(job->dy + offset, job->x + offset, NULL, job->spatial, mean, &part_dy, &part_dyx);
            sum_dy += part_dy;
            sum_dyx += part_dyx;
        }
        if (job->dw)
            job->dw[c] = (float)(sum_dyx * invstd);
        if (job->db)
            job->db[c] = (float)sum_dy;
        if (!job->dx)
            continue;
        float w = job->w ? job->w[c] : 1.0f;
        float mean_dy = count > 0 ? (float)(sum_dy / (double)count) : 0.0f;
        float projection = count > 0 ? (float)(sum_dyx * invstd * invstd / (double)count) : 0.0f;
        float scale = invstd * w;
        for (int64_t n = 0; n < job->batch; n++) {
            int64_t offset = (n * job->channels + c) * job->spatial;
            const float *dy = job->dy + offset, *x = job->x + offset;
            float *dx = job->dx + offset;
            if (job->train) {
                for (int64_t s = 0; s < job->spatial; s++)
                    dx[s] = (dy[s] - mean_dy - (x[s] - mean) * projection) * scale;
            } else {
                for (int64_t s = 0; s < job->spatial; s++)
                    dx[s] = dy[s] * scale;
            }
        }
    }
}

tb_status tb_op_batch_norm_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *weight,
                                    const tb_tensor *running_mean, const tb_tensor *running_var,
                                    const tb_tensor *save_mean, const tb_tensor *save_invstd, bool train, float eps,
                                    const bool output_mask[3], tb_tensor *grad_input, tb_tensor *grad_weight,
                                    tb_tensor *grad_bias) {
    memset(grad_input, 0, sizeof *grad_input);
    memset(grad_weight, 0, sizeof *grad_weight);
    memset(grad_bias, 0, sizeof *grad_bias);
    const char *name = "native_batch_norm_backward";
    TB_TRY(tb_ops_require_float(x->dtype, "native_batch_norm_backward: input"));
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "%s: input must be [N, C, *] (at least 2-D), got %d dims", name, x->ndim);
    TB_TRY(check_same_shape(name, grad_output, x));
    const tb_tensor *mean_in = train ? save_mean : running_mean;
    const tb_tensor *spread_in = train ? save_invstd : running_var;
    if (!mean_in || !spread_in)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: %s", name,
                            train ? "save_mean and save_invstd are required when train=True"
                                  : "running_mean and running_var are required when train=False");
    int64_t batch = x->shape[0], channels = x->shape[1], spatial = 1;
    for (int d = 2; d < x->ndim; d++)
        spatial *= x->shape[d];
    tb_tensor t[NB_COUNT];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage(grad_output, "native_batch_norm_backward: grad_output", &t[NB_DY]);
    if (status == TB_OK)
        status = tb_nn_stage(x, "native_batch_norm_backward: input", &t[NB_X]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(weight, channels, "native_batch_norm_backward: weight", &t[NB_W]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(mean_in, channels, train ? "native_batch_norm_backward: save_mean"
                                                             : "native_batch_norm_backward: running_mean", &t[NB_MEAN]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(spread_in, channels, train ? "native_batch_norm_backward: save_invstd"
                                                               : "native_batch_norm_backward: running_var", &t[NB_RSTD]);
    if (status == TB_OK && !train) {
        /* running_var -> invstd, in a private copy */
        tb_tensor invstd;
        status = tb_tensor_empty(TB_F32, 1, &channels, TB_ALLOC_DEFAULT, &invstd);
        if (status == TB_OK) {
            const float *var = tb_tensor_data(&t[NB_RSTD]);
            float *out = tb_tensor_data(&invstd);
            for (int64_t c = 0; c < channels; c++)
                out[c] = 1.0f / sqrtf(var[c] + eps);
            tb_tensor_release(&t[NB_RSTD]);
            t[NB_RSTD] = invstd;
        }
    }
    if (status == TB_OK)
        status = alloc_grads(output_mask, x->ndim, x->shape, channels, &t[NB_GRADS]);
    if (status == TB_OK && channels > 0) {
        batch_norm_backward_job job = {
            .dy = tb_tensor_data(&t[NB_DY]), .x = tb_tensor_data(&t[NB_X]), .w = tb_nn_data(&t[NB_W]),
            .mean = tb_tensor_data(&t[NB_MEAN]), .invstd = tb_tensor_data(&t[NB_RSTD]),
            .dx = tb_nn_data(&t[NB_GRADS]), .dw = tb_nn_data(&t[NB_GRADS + 1]), .db = tb_nn_data(&t[NB_GRADS + 2]),
            .batch = batch, .channels = channels, .spatial = spatial, .train = train,
        };
        int64_t per = batch * spatial;
        tb_parallel_for(channels, per >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (per > 0 ? per : 1),
                        batch_norm_backward_channels, &job);
    }
    if (status == TB_OK)
        status = finish_grads(&t[NB_GRADS], x->dtype, weight ? weight->dtype : x->dtype, 1, &channels, grad_input,
                              grad_weight, grad_bias);
    tb_nn_release_all(t, NB_COUNT);
    if (status != TB_OK)
        release_outputs(grad_input, grad_weight, grad_bias);
    return status;
}
