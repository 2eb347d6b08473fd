/* Classification losses: nll_loss (forward with total_weight, and backward) and cross_entropy (class
 * indices with ignore_index, class weights and label smoothing, or class probabilities), following
 * ATen's reduction rules. Inputs are viewed as [N, C, S] (S = product of the trailing dims; a 1-D [C]
 * input is N = S = 1 with a 0-dim target). Sums accumulate in double in index order. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

typedef struct class_layout {
    int64_t batch, classes, inner; /* x viewed as [batch, classes, inner] */
} class_layout;

/* Checks x against a class-index target (target_shape = x.shape without dim 1; 0-dim for 1-D x). */
static tb_status class_check(const char *name, const tb_tensor *x, const tb_tensor *target, bool probabilities,
                             class_layout *layout) {
    if (x->ndim < 1)
        return tb_error_set(TB_ERR_SHAPE, "%s: input must be [C] or [N, C, ...], got a 0-dim tensor", name);
    layout->batch = x->ndim == 1 ? 1 : x->shape[0];
    layout->classes = x->ndim == 1 ? x->shape[0] : x->shape[1];
    layout->inner = 1;
    for (int d = 2; d < x->ndim; d++)
        layout->inner *= x->shape[d];
    int64_t expected[TB_MAX_DIMS];
    int expected_ndim = 0;
    if (probabilities) {
        expected_ndim = x->ndim;
        memcpy(expected, x->shape, (size_t)x->ndim * sizeof(int64_t));
    } else {
        for (int d = 0; d < x->ndim; d++)
            if (d != (x->ndim == 1 ? 0 : 1))
                expected[expected_ndim++] = x->shape[d];
    }
    bool ok = target->ndim == expected_ndim;
    for (int d = 0; ok && d < expected_ndim; d++)
        ok = target->shape[d] == expected[d];
    if (!ok) {
        char a[128], b[128], c[128];
        return tb_error_set(TB_ERR_SHAPE, "%s: target has shape %s but input %s needs target shape %s", name,
                            tb_shape_string(target->ndim, target->shape, a, sizeof a),
                            tb_shape_string(x->ndim, x->shape, b, sizeof b),
                            tb_shape_string(expected_ndim, expected, c, sizeof c));
    }
    return TB_OK;
}

/* Every target is ignore_index or in [0, classes). */
static tb_status check_targets(const char *name, const int64_t *target, int64_t count, int64_t classes,
                               int64_t ignore_index) {
    for (int64_t i = 0; i < count; i++)
        if (target[i] != ignore_index && (target[i] < 0 || target[i] >= classes))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: target %lld at position %lld is out of range [0, %lld) "
                                "(and is not ignore_index %lld)", name, (long long)target[i], (long long)i,
                                (long long)classes, (long long)ignore_index);
    return TB_OK;
}

static tb_status check_reduction(const char *name, int reduction) {
    if (reduction < TB_REDUCTION_NONE || reduction > TB_REDUCTION_SUM)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %d", name,
                            reduction);
    return TB_OK;
}

/* A 0-dim tensor of dtype holding value. */
static tb_status scalar_out(double value, tb_dtype dtype, tb_tensor *out) {
    tb_tensor f32 = {0};
    int64_t one = 1; /* a valid (unused) shape pointer for the 0-dim tensor */
    TB_TRY(tb_tensor_empty(TB_F32, 0, &one, TB_ALLOC_DEFAULT, &f32));
    *(float *)tb_tensor_data(&f32) = (float)value;
    return tb_ops_finish_dtype(&f32, dtype, out);
}

/* The class-index loss terms of every position, in parallel over the batch rows n: log-probabilities
 * are x itself (nll) or log_softmax(x) over the classes (cross_entropy, through the vectorized
 * softmax kernel into per-thread scratch). Row sums land in per-row slots and are added in row order,
 * so the result does not depend on the thread count. */
typedef struct class_loss {
    const float *x, *weight;
    const int64_t *target;
    class_layout layout;
    int64_t ignore_index;
    bool logits, smoothing;
    float *per_element; /* [batch * inner] nll part, for reduction none (or NULL) */
    float *per_smooth;  /* [batch * inner] smooth part (or NULL) */
    double *row_sums;   /* [batch][3]: nll, smooth, weight */
    tb_softmax_kernel log_softmax;
    atomic_int failed;
    double nll_sum, smooth_sum, weight_sum;
} class_loss;

static void class_loss_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    class_loss *job = context;
    const class_layout *l = &job->layout;
    int64_t row_len = l->classes * l->inner;
    float *scratch = job->logits ? tb_ops_scratch(1, row_len > 0 ? row_len : 1) : NULL;
    if (job->logits && !scratch) {
        atomic_store(&job->failed, 1);
        return;
    }
    for (int64_t n = begin; n < end; n++) {
        const float *logp = job->x + n * row_len;
        if (job->logits) {
            job->log_softmax(logp, scratch, 1, l->classes, l->inner, true);
            logp = scratch;
        }
        double nll_sum = 0.0, smooth_sum = 0.0, weight_sum = 0.0;
        for (int64_t s = 0; s < l->inner; s++) {
            int64_t position = n * l->inner + s, t = job->target[position];
            float nll = 0.0f, smooth = 0.0f;
            if (t != job->ignore_index) {
                float w = job->weight ? job->weight[t] : 1.0f;
                nll = -logp[t * l->inner + s] * w;
                weight_sum += w;
                if (job->smoothing) {
                    float total = 0.0f;
                    for (int64_t c = 0; c < l->classes; c++)
                        total += logp[c * l->inner + s] * (job->weight ? job->weight[c] : 1.0f);
                    smooth = -total;
                }
            }
            nll_sum += nll;
            smooth_sum += smooth;
            if (job->per_element)
                job->per_element[position] = nll;
            if (job->per_smooth)
                job->per_smooth[position] = smooth;
        }
        job->row_sums[3 * n] = nll_sum;
        job->row_sums[3 * n + 1] = smooth_sum;
        job->row_sums[3 * n + 2] = weight_sum;
    }
}

static tb_status class_loss_run(class_loss *job) {
    const class_layout *l = &job->layout;
    job->nll_sum = job->smooth_sum = job->weight_sum = 0.0;
    if (l->batch == 0)
        return TB_OK;
    tb_tensor sums = {0};
    int64_t shape[2] = {l->batch, 3};
    TB_TRY(tb_tensor_empty(TB_F64, 2, shape, TB_ALLOC_DEFAULT, &sums));
    job->row_sums = tb_tensor_data(&sums);
    job->log_softmax = tb_elementwise_kernels_active()->softmax;
    atomic_init(&job->failed, 0);
    int64_t per_row = l->classes * l->inner;
    tb_parallel_for(l->batch, per_row >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (per_row > 0 ? per_row : 1),
                    class_loss_rows, job);
    for (int64_t n = 0; n < l->batch; n++) {
        job->nll_sum += job->row_sums[3 * n];
        job->smooth_sum += job->row_sums[3 * n + 1];
        job->weight_sum += job->row_sums[3 * n + 2];
    }
    tb_tensor_release(&sums);
    if (atomic_load(&job->failed))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "cross_entropy: out of memory for log_softmax scratch");
    return TB_OK;
}

/* Stages x, target (int64) and weight for a class-index loss. t[]: X, TARGET, WEIGHT. */
static tb_status stage_class_inputs(const char *name, const tb_tensor *x, const tb_tensor *target,
                                    const tb_tensor *weight, const class_layout *layout, int64_t ignore_index,
                                    tb_tensor *t) {
    char what[96];
    snprintf(what, sizeof what, "%s: input", name);
    TB_TRY(tb_nn_stage(x, what, &t[0]));
    snprintf(what, sizeof what, "%s: target", name);
    TB_TRY(tb_nn_stage_index(target, what, &t[1]));
    snprintf(what, sizeof what, "%s: weight", name);
    TB_TRY(tb_nn_stage_vector(weight, layout->classes, what, &t[2]));
    return check_targets(name, tb_tensor_data(&t[1]), tb_tensor_numel(target), layout->classes, ignore_index);
}

tb_status tb_op_nll_loss(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight, int reduction,
                         int64_t ignore_index, tb_tensor *out, tb_tensor *total_weight) {
    memset(out, 0, sizeof *out);
    if (total_weight)
        memset(total_weight, 0, sizeof *total_weight);
    const char *name = "nll_loss";
    TB_TRY(tb_ops_require_float(x->dtype, "nll_loss: input"));
    TB_TRY(check_reduction(name, reduction));
    class_layout layout;
    TB_TRY(class_check(name, x, target, false, &layout));
    tb_tensor t[4];
    memset(t, 0, sizeof t);
    tb_status status = stage_class_inputs(name, x, target, weight, &layout, ignore_index, t);
    if (status == TB_OK && reduction == TB_REDUCTION_NONE)
        status = tb_tensor_empty(TB_F32, target->ndim, target->shape, TB_ALLOC_DEFAULT, &t[3]);
    class_loss job = {.layout = layout, .ignore_index = ignore_index};
    if (status == TB_OK) {
        job.x = tb_tensor_data(&t[0]);
        job.weight = tb_nn_data(&t[2]);
        job.target = tb_tensor_data(&t[1]);
        job.per_element = tb_nn_data(&t[3]);
        status = class_loss_run(&job);
    }
    if (status == TB_OK) {
        if (reduction == TB_REDUCTION_NONE)
            status = tb_ops_finish_dtype(&t[3], x->dtype, out);
        else
            status = scalar_out(reduction == TB_REDUCTION_SUM ? job.nll_sum : job.nll_sum / job.weight_sum, x->dtype,
                                out);
        if (status == TB_OK && total_weight)
            status = scalar_out(reduction == TB_REDUCTION_NONE ? 0.0 : job.weight_sum, x->dtype, total_weight);
    }
    tb_nn_release_all(t, 4);
    if (status != TB_OK) {
        tb_tensor_release(out);
        if (total_weight)
            tb_tensor_release(total_weight);
    }
    return status;
}

tb_status tb_op_nll_loss_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *target,
                                  const tb_tensor *weight, int reduction, int64_t ignore_index,
                                  const tb_tensor *total_weight, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = "nll_loss_backward";
    TB_TRY(tb_ops_require_float(grad_output->dtype, "nll_loss_backward: grad_output"));
    TB_TRY(tb_ops_require_float(x->dtype, "nll_loss_backward: input"));
    TB_TRY(check_reduction(name, reduction));
    class_layout layout;
    TB_TRY(class_check(name, x, target, false, &layout));
    int64_t positions = layout.batch * layout.inner;
    if (reduction == TB_REDUCTION_NONE ? tb_tensor_numel(grad_output) != positions : tb_tensor_numel(grad_output) != 1)
        return tb_error_set(TB_ERR_SHAPE, "nll_loss_backward: grad_output has %lld elements, expected %lld",
                            (long long)tb_tensor_numel(grad_output),
                            (long long)(reduction == TB_REDUCTION_NONE ? positions : 1));
    if (reduction == TB_REDUCTION_MEAN && (!total_weight || tb_tensor_numel(total_weight) != 1))
        return tb_error_set(TB_ERR_SHAPE, "nll_loss_backward: total_weight must be a 1-element tensor for reduction=mean");
    tb_tensor t[6];
    memset(t, 0, sizeof t);
    tb_status status = stage_class_inputs(name, x, target, weight, &layout, ignore_index, t);
    if (status == TB_OK)
        status = tb_nn_stage(grad_output, "nll_loss_backward: grad_output", &t[3]);
    if (status == TB_OK && total_weight)
        status = tb_nn_stage(total_weight, "nll_loss_backward: total_weight", &t[4]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, x->ndim, x->shape, TB_ALLOC_ZERO, &t[5]);
    if (status == TB_OK) {
        const int64_t *tgt = tb_tensor_data(&t[1]);
        const float *w = tb_nn_data(&t[2]), *g = tb_tensor_data(&t[3]);
        float *dx = tb_tensor_data(&t[5]);
        float total = reduction == TB_REDUCTION_MEAN ? *(const float *)tb_tensor_data(&t[4]) : 1.0f;
        for (int64_t n = 0; n < layout.batch; n++) {
            for (int64_t s = 0; s < layout.inner; s++) {
                int64_t position = n * layout.inner + s, c = tgt[position];
                if (c == ignore_index)
                    continue;
                float grad = reduction == TB_REDUCTION_NONE ? g[position] : g[0];
                if (reduction == TB_REDUCTION_MEAN)
                    grad /= total;
                dx[(n * layout.classes + c) * layout.inner + s] = -grad * (w ? w[c] : 1.0f);
            }
        }
        status = tb_ops_finish_dtype(&t[5], x->dtype, out);
    }
    tb_nn_release_all(t, 6);
    return status;
}

/* Cross entropy with class-probability targets, per batch row n (in parallel, row sums added in order):
 * loss[n, s] = -sum_c w[c] * log_softmax(x)[n, c, s] * (target[n, c, s] * (1 - eps) + eps / C). */
typedef struct probability_loss {
    const float *x, *target, *weight;
    class_layout layout;
    float smoothing;
    float *loss;      /* [batch * inner] */
    double *row_sums; /* [batch] */
    tb_softmax_kernel log_softmax;
    atomic_int failed;
} probability_loss;

static void probability_loss_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    probability_loss *job = context;
    const class_layout *l = &job->layout;
    int64_t row_len = l->classes * l->inner;
    float *logp = tb_ops_scratch(1, row_len > 0 ? row_len : 1);
    if (!logp) {
        atomic_store(&job->failed, 1);
        return;
    }
    float spread = job->smoothing / (float)l->classes, keep = 1.0f - job->smoothing;
    for (int64_t n = begin; n < end; n++) {
        job->log_softmax(job->x + n * row_len, logp, 1, l->classes, l->inner, true);
        const float *p = job->target + n * row_len;
        double row_sum = 0.0;
        for (int64_t s = 0; s < l->inner; s++) {
            float sum = 0.0f;
            for (int64_t c = 0; c < l->classes; c++) {
                float probability = p[c * l->inner + s];
                if (job->smoothing > 0.0f)
                    probability = probability * keep + spread;
                sum += logp[c * l->inner + s] * probability * (job->weight ? job->weight[c] : 1.0f);
            }
            job->loss[n * l->inner + s] = -sum;
            row_sum += -sum;
        }
        job->row_sums[n] = row_sum;
    }
}

static tb_status cross_entropy_probabilities(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight,
                                             const class_layout *l, int reduction, float smoothing, tb_tensor *out) {
    tb_tensor t[5];
    memset(t, 0, sizeof t);
    tb_status status = tb_nn_stage(x, "cross_entropy: input", &t[0]);
    if (status == TB_OK)
        status = tb_nn_stage(target, "cross_entropy: target (probabilities)", &t[1]);
    if (status == TB_OK)
        status = tb_nn_stage_vector(weight, l->classes, "cross_entropy: weight", &t[2]);
    int64_t shape[TB_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != (x->ndim == 1 ? 0 : 1))
            shape[ndim++] = x->shape[d];
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F32, ndim, shape, TB_ALLOC_DEFAULT, &t[3]);
    int64_t batch = l->batch > 0 ? l->batch : 1;
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F64, 1, &batch, TB_ALLOC_DEFAULT, &t[4]);
    double total = 0.0;
    if (status == TB_OK && l->batch > 0) {
        probability_loss job = {
            .x = tb_tensor_data(&t[0]), .target = tb_tensor_data(&t[1]), .weight = tb_nn_data(&t[2]), .layout = *l,
            .smoothing = smoothing, .loss = tb_tensor_data(&t[3]), .row_sums = tb_tensor_data(&t[4]),
            .log_softmax = tb_elementwise_kernels_active()->softmax,
        };
        atomic_init(&job.failed, 0);
        int64_t per_row = l->classes * l->inner;
        tb_parallel_for(l->batch, per_row >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (per_row > 0 ? per_row : 1),
                        probability_loss_rows, &job);
        if (atomic_load(&job.failed))
            status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "cross_entropy: out of memory for log_softmax scratch");
        for (int64_t n = 0; n < l->batch; n++)
            total += job.row_sums[n];
    }
    if (status == TB_OK && reduction == TB_REDUCTION_NONE)
        status = tb_ops_finish_dtype(&t[3], x->dtype, out);
    else if (status == TB_OK)
        status = scalar_out(reduction == TB_REDUCTION_SUM ? total : total / (double)(l->batch * l->inner), x->dtype, out);
    tb_nn_release_all(t, 5);
    return status;
}

tb_status tb_op_cross_entropy(const tb_tensor *x, const tb_tensor *target, const tb_tensor *weight, int reduction,
                              int64_t ignore_index, float label_smoothing, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = "cross_entropy";
    TB_TRY(tb_ops_require_float(x->dtype, "cross_entropy: input"));
    TB_TRY(check_reduction(name, reduction));
    if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "cross_entropy: label_smoothing must be in [0, 1], got %g",
                            (double)label_smoothing);
    bool probabilities = target->dtype == TB_F32 || target->dtype == TB_F16 || target->dtype == TB_BF16 ||
                         target->dtype == TB_F64;
    class_layout layout;
    TB_TRY(class_check(name, x, target, probabilities, &layout));
    if (probabilities) {
        TB_TRY(tb_ops_require_float(target->dtype, "cross_entropy: target (probabilities)"));
        return cross_entropy_probabilities(x, target, weight, &layout, reduction, label_smoothing, out);
    }
    bool smoothing = label_smoothing > 0.0f;
    tb_tensor t[5];
    memset(t, 0, sizeof t);
    tb_status status = stage_class_inputs(name, x, target, weight, &layout, ignore_index, t);
    if (status == TB_OK && reduction == TB_REDUCTION_NONE)
        status = tb_tensor_empty(TB_F32, target->ndim, target->shape, TB_ALLOC_DEFAULT, &t[3]);
    if (status == TB_OK && reduction == TB_REDUCTION_NONE && smoothing)
        status = tb_tensor_empty(TB_F32, target->ndim, target->shape, TB_ALLOC_DEFAULT, &t[4]);
    class_loss job = {.layout = layout, .ignore_index = ignore_index, .logits = true, .smoothing = smoothing};
    if (status == TB_OK) {
        job.x = tb_tensor_data(&t[0]);
        job.weight = tb_nn_data(&t[2]);
        job.target = tb_tensor_data(&t[1]);
        job.per_element = tb_nn_data(&t[3]);
        job.per_smooth = tb_nn_data(&t[4]);
        status = class_loss_run(&job);
    }
    /* ATen: (1 - eps) * nll(reduced) + eps / C * smooth(reduced); the smooth mean divides by the same
     * total weight as the nll mean */
    float keep = 1.0f - label_smoothing, spread = label_smoothing / (float)layout.classes;
    if (status == TB_OK && reduction == TB_REDUCTION_NONE) {
        if (smoothing) {
            float *nll = tb_tensor_data(&t[3]);
            const float *smooth = tb_tensor_data(&t[4]);
            for (int64_t i = 0; i < layout.batch * layout.inner; i++)
                nll[i] = keep * nll[i] + spread * smooth[i];
        }
        status = tb_ops_finish_dtype(&t[3], x->dtype, out);
    } else if (status == TB_OK) {
        double divisor = reduction == TB_REDUCTION_MEAN ? job.weight_sum : 1.0;
        double nll = job.nll_sum / divisor, smooth = job.smooth_sum / divisor;
        status = scalar_out(smoothing ? (double)keep * (float)nll + (double)spread * (float)smooth : nll, x->dtype, out);
    }
    tb_nn_release_all(t, 5);
    return status;
}
