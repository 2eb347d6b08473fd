/* 2-D pooling over NCHW (or CHW) tensors: max (with indices), average, adaptive average/max, and
 * their backward ops, one plane per task on the kernels of kernels/nn_kernels.h. float64 tensors
 * compute in double (the portable f64 planes); every other float dtype in float32. Shape rules and
 * error cases follow PyTorch's pooling_output_shape / pool2d_shape_check. */
#include <stdio.h>
#include <string.h>

#include "ops/ops_nn_internal.h"

typedef enum pool_kind {
    POOL_MAX,
    POOL_AVG,
    POOL_AVG_BACKWARD,
    POOL_ADAPTIVE_AVG,
    POOL_ADAPTIVE_AVG_BACKWARD,
    POOL_ADAPTIVE_MAX,
    POOL_SCATTER, /* max / adaptive max backward: dx[index[j]] += dy[j] */
} pool_kind;

typedef struct pool_job {
    pool_kind kind;
    tb_window_geometry g; /* in/out sizes always set; the window fields for the non-adaptive kinds */
    bool count_include_pad;
    int64_t divisor_override;
    bool f64;       /* x and y hold doubles (else floats) */
    const void *x;  /* input planes (dy for the backward kinds) */
    void *y;        /* output planes (dx for the backward kinds, zeroed) */
    int64_t *index;
    const int64_t *index_in;
    tb_max_pool2d_plane_fn max_pool; /* the active ISA's */
    atomic_int bad_index;
} pool_job;

/* dx[index[j]] += dy[j] over plane p of pool_planes (reads its job, p, where, in_plane, out_plane); on an
 * index outside the plane it sets bad_index and returns from the task. */
#define SCATTER_PLANE(T)                                                                         \
    do {                                                                                         \
        const T *from = (const T *)job->x + p * out_plane;                                       \
        T *to = (T *)job->y + p * in_plane;                                                      \
        for (int64_t j = 0; j < out_plane; j++) {                                                \
            if (where[j] < 0 || where[j] >= in_plane) {                                          \
                atomic_store(&job->bad_index, 1);                                                \
                return;                                                                          \
            }                                                                                    \
            to[where[j]] += from[j];                                                             \
        }                                                                                        \
    } while (0)

static void pool_planes(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    pool_job *job = context;
    const tb_window_geometry *g = &job->g;
    int64_t in_plane = g->in_h * g->in_w, out_plane = g->out_h * g->out_w;
    for (int64_t p = begin; p < end; p++) {
        /* forward kinds read an input plane and write an output plane, backward kinds the reverse */
        const float *x_in = (const float *)job->x + p * in_plane, *dy = (const float *)job->x + p * out_plane;
        float *y_out = (float *)job->y + p * out_plane, *dx = (float *)job->y + p * in_plane;
        const double *x_in64 = (const double *)job->x + p * in_plane, *dy64 = (const double *)job->x + p * out_plane;
        double *y_out64 = (double *)job->y + p * out_plane, *dx64 = (double *)job->y + p * in_plane;
        int64_t *index = job->index ? job->index + p * out_plane : NULL;
        bool f64 = job->f64;
        switch (job->kind) {
        case POOL_MAX:
            if (f64)
                tb_max_pool2d_plane_f64(g, x_in64, y_out64, index);
            else
                job->max_pool(g, x_in, y_out, index);
            break;
        case POOL_AVG:
            if (f64)
                tb_avg_pool2d_plane_f64(g, job->count_include_pad, job->divisor_override, x_in64, y_out64);
            else
                tb_avg_pool2d_plane_f32(g, job->count_include_pad, job->divisor_override, x_in, y_out);
            break;
        case POOL_AVG_BACKWARD:
            if (f64)
                tb_avg_pool2d_backward_plane_f64(g, job->count_include_pad, job->divisor_override, dy64, dx64);
            else
                tb_avg_pool2d_backward_plane_f32(g, job->count_include_pad, job->divisor_override, dy, dx);
            break;
        case POOL_ADAPTIVE_AVG:
            if (f64)
                tb_adaptive_avg_pool2d_plane_f64(g->in_h, g->in_w, g->out_h, g->out_w, x_in64, y_out64);
            else
                tb_adaptive_avg_pool2d_plane_f32(g->in_h, g->in_w, g->out_h, g->out_w, x_in, y_out);
            break;
        case POOL_ADAPTIVE_AVG_BACKWARD:
            if (f64)
                tb_adaptive_avg_pool2d_backward_plane_f64(g->in_h, g->in_w, g->out_h, g->out_w, dy64, dx64);
            else
                tb_adaptive_avg_pool2d_backward_plane_f32(g->in_h, g->in_w, g->out_h, g->out_w, dy, dx);
            break;
        case POOL_ADAPTIVE_MAX:
            if (f64)
                tb_adaptive_max_pool2d_plane_f64(g->in_h, g->in_w, g->out_h, g->out_w, x_in64, y_out64, index);
            else
                tb_adaptive_max_pool2d_plane_f32(g->in_h, g->in_w, g->out_h, g->out_w, x_in, y_out, index);
            break;
        case POOL_SCATTER: {
            const int64_t *where = job->index_in + p * out_plane;
            if (f64)
                SCATTER_PLANE(double);
            else
                SCATTER_PLANE(float);
            break;
        }
        }
    }
}

/* Runs job over `planes` planes (after x/y/index are set). */
static void pool_run(pool_job *job, int64_t planes) {
    int64_t work = (job->g.in_h * job->g.in_w) + (job->g.out_h * job->g.out_w);
    int64_t grain = work >= TB_OPS_GRAIN ? 1 : TB_OPS_GRAIN / (work > 0 ? work : 1);
    atomic_init(&job->bad_index, 0);
    job->max_pool = tb_nn_kernels_for(tb_isa_active())->max_pool2d_plane;
    if (planes > 0 && work > 0)
        tb_parallel_for(planes, grain, pool_planes, job);
}

/* One output size (PyTorch's pooling_output_shape): floor or ceil division, and with ceil_mode the
 * last window must start inside the input or the left padding. */
static int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
    int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    int64_t out = (numerator >= 0 ? numerator / stride : -((-numerator + stride - 1) / stride)) + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

/* Validates params against a 4-D view of x and fills the window geometry (channels = 1). */
static tb_status pool_check(const char *name, const tb_tensor *x4, const tb_pool2d_params *p, bool average,
                            tb_window_geometry *g) {
    static const char *const axes[2] = {"height", "width"};
    for (int i = 0; i < 2; i++) {
        if (p->kernel[i] < 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: kernel_size must be >= 1, got %lld (%s)", name,
                                (long long)p->kernel[i], axes[i]);
        if (p->stride[i] < 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: stride must be >= 1, got %lld (%s)", name,
                                (long long)p->stride[i], axes[i]);
        if (p->dilation[i] < 1 || (average && p->dilation[i] != 1))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: dilation must be %s, got %lld (%s)", name,
                                average ? "1" : ">= 1", (long long)p->dilation[i], axes[i]);
        if (p->padding[i] < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: padding must be >= 0, got %lld (%s)", name,
                                (long long)p->padding[i], axes[i]);
        if (p->padding[i] > p->kernel[i] / 2)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: padding (%lld) must be at most half of kernel_size "
                                "(%lld) (%s)", name, (long long)p->padding[i], (long long)p->kernel[i], axes[i]);
    }
    if (average && p->divisor_override < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: divisor_override must be > 0, got %lld", name,
                            (long long)p->divisor_override);
    if (x4->shape[1] == 0 || x4->shape[2] == 0 || x4->shape[3] == 0) {
        char buf[128];
        return tb_error_set(TB_ERR_SHAPE, "%s: input %s must have non-zero channels, height and width", name,
                            tb_shape_string(x4->ndim, x4->shape, buf, sizeof buf));
    }
    int64_t out_h = pool_output_size(x4->shape[2], p->kernel[0], p->padding[0], p->stride[0], p->dilation[0], p->ceil_mode);
    int64_t out_w = pool_output_size(x4->shape[3], p->kernel[1], p->padding[1], p->stride[1], p->dilation[1], p->ceil_mode);
    if (out_h < 1 || out_w < 1)
        return tb_error_set(TB_ERR_SHAPE, "%s: input size %lldx%lld gives output size %lldx%lld; the window (kernel "
                            "%lldx%lld, padding %lldx%lld, dilation %lldx%lld) is too large", name,
                            (long long)x4->shape[2], (long long)x4->shape[3], (long long)out_h, (long long)out_w,
                            (long long)p->kernel[0], (long long)p->kernel[1], (long long)p->padding[0],
                            (long long)p->padding[1], (long long)p->dilation[0], (long long)p->dilation[1]);
    *g = (tb_window_geometry){
        .channels = 1, .in_h = x4->shape[2], .in_w = x4->shape[3], .out_h = out_h, .out_w = out_w,
        .kernel_h = p->kernel[0], .kernel_w = p->kernel[1], .stride_h = p->stride[0], .stride_w = p->stride[1],
        .pad_top = p->padding[0], .pad_left = p->padding[1], .dilation_h = p->dilation[0], .dilation_w = p->dilation[1],
    };
    return TB_OK;
}

/* Where a forward pooling writes: caller memory (y, and index for max pooling when wanted), or tensors
 * it allocates into *out / *indices (indices NULL: not wanted). */
typedef struct pool_dest {
    void *y;
    int64_t *index;
    tb_tensor *out, *indices;
} pool_dest;

/* Forward pooling: stages x, writes [N, C, OH, OW] values (+ int64 indices when wanted) into the
 * caller's memory or into fresh tensors, then restores the caller's batching and dtype. Caller memory
 * takes x's own dtype, float32 or float64 (the dtypes computed without a conversion pass). */
static tb_status pool_forward(const char *name, pool_job *job, const tb_tensor *x, const tb_tensor *x4,
                              const pool_dest *dest) {
    tb_tensor staged = {0}, result = {0}, index = {0};
    bool unbatched = x->ndim == 3, into = dest->y != NULL;
    bool want_index = into ? dest->index != NULL : dest->indices != NULL;
    int64_t shape[4] = {x4->shape[0], x4->shape[1], job->g.out_h, job->g.out_w};
    job->f64 = x->dtype == TB_F64;
    if (into && x->dtype != TB_F32 && x->dtype != TB_F64)
        return tb_error_set(TB_ERR_DTYPE, "%s: writing into caller memory needs float32 or float64 (got %s)", name,
                            tb_dtype_name(x->dtype));
    tb_status status = tb_nn_stage_compute(x4, job->f64 ? TB_F64 : TB_F32, name, &staged);
    if (status == TB_OK && !into)
        status = tb_tensor_empty(job->f64 ? TB_F64 : TB_F32, 4, shape, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK && want_index && !into)
        status = tb_tensor_empty(TB_I64, 4, shape, TB_ALLOC_DEFAULT, &index);
    if (status == TB_OK) {
        job->x = tb_tensor_data(&staged);
        job->y = into ? dest->y : tb_tensor_data(&result);
        job->index = !want_index ? NULL : into ? dest->index : tb_tensor_data(&index);
        pool_run(job, shape[0] * shape[1]);
    }
    if (!into) {
        if (status == TB_OK)
            status = tb_nn_drop_batch(&result, unbatched);
        if (status == TB_OK && want_index)
            status = tb_nn_drop_batch(&index, unbatched);
        if (status == TB_OK)
            status = tb_ops_finish_dtype(&result, x->dtype, dest->out);
        if (status == TB_OK && want_index) {
            *dest->indices = index;
            memset(&index, 0, sizeof index);
        }
    }
    tb_tensor_release(&staged);
    tb_tensor_release(&result);
    tb_tensor_release(&index);
    return status;
}

static tb_status max_pool2d(const tb_tensor *x, const tb_pool2d_params *params, const pool_dest *dest) {
    TB_TRY(tb_nn_require_float(x->dtype, "max_pool2d: input"));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, "max_pool2d: input", &x4, &unbatched));
    pool_job job = {.kind = POOL_MAX};
    tb_status status = pool_check("max_pool2d", &x4, params, false, &job.g);
    if (status == TB_OK)
        status = pool_forward("max_pool2d: input", &job, x, &x4, dest);
    tb_tensor_release(&x4);
    return status;
}

static tb_status avg_pool2d(const tb_tensor *x, const tb_pool2d_params *params, const pool_dest *dest) {
    TB_TRY(tb_nn_require_float(x->dtype, "avg_pool2d: input"));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, "avg_pool2d: input", &x4, &unbatched));
    pool_job job = {.kind = POOL_AVG, .count_include_pad = params->count_include_pad,
                    .divisor_override = params->divisor_override};
    tb_status status = pool_check("avg_pool2d", &x4, params, true, &job.g);
    if (status == TB_OK)
        status = pool_forward("avg_pool2d: input", &job, x, &x4, dest);
    tb_tensor_release(&x4);
    return status;
}

tb_status tb_op_max_pool2d(const tb_tensor *x, const tb_pool2d_params *params, tb_tensor *out, tb_tensor *indices) {
    memset(out, 0, sizeof *out);
    if (indices)
        memset(indices, 0, sizeof *indices);
    return max_pool2d(x, params, &(pool_dest){.out = out, .indices = indices});
}

tb_status tb_op_max_pool2d_into(const tb_tensor *x, const tb_pool2d_params *params, void *y, int64_t *indices) {
    if (!y)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "max_pool2d: no output memory");
    return max_pool2d(x, params, &(pool_dest){.y = y, .index = indices});
}

tb_status tb_op_avg_pool2d(const tb_tensor *x, const tb_pool2d_params *params, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    return avg_pool2d(x, params, &(pool_dest){.out = out});
}

tb_status tb_op_avg_pool2d_into(const tb_tensor *x, const tb_pool2d_params *params, void *y) {
    if (!y)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "avg_pool2d: no output memory");
    return avg_pool2d(x, params, &(pool_dest){.y = y});
}

static tb_status adaptive_check(const char *name, const tb_tensor *x4, int64_t out_h, int64_t out_w,
                                tb_window_geometry *g) {
    if (out_h < 0 || out_w < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: output_size must be >= 0, got (%lld, %lld)", name,
                            (long long)out_h, (long long)out_w);
    if (x4->shape[1] == 0 || x4->shape[2] == 0 || x4->shape[3] == 0) {
        char buf[128];
        return tb_error_set(TB_ERR_SHAPE, "%s: input %s must have non-zero channels, height and width", name,
                            tb_shape_string(x4->ndim, x4->shape, buf, sizeof buf));
    }
    *g = (tb_window_geometry){.channels = 1, .in_h = x4->shape[2], .in_w = x4->shape[3], .out_h = out_h, .out_w = out_w};
    return TB_OK;
}

static tb_status adaptive_forward(pool_kind kind, const char *name, const char *what, const tb_tensor *x,
                                  int64_t out_h, int64_t out_w, tb_tensor *out, tb_tensor *indices) {
    memset(out, 0, sizeof *out);
    if (indices)
        memset(indices, 0, sizeof *indices);
    TB_TRY(tb_nn_require_float(x->dtype, what));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, what, &x4, &unbatched));
    pool_job job = {.kind = kind};
    tb_status status = adaptive_check(name, &x4, out_h, out_w, &job.g);
    if (status == TB_OK)
        status = pool_forward(what, &job, x, &x4, &(pool_dest){.out = out, .indices = indices});
    tb_tensor_release(&x4);
    return status;
}

tb_status tb_op_adaptive_avg_pool2d(const tb_tensor *x, int64_t out_h, int64_t out_w, tb_tensor *out) {
    return adaptive_forward(POOL_ADAPTIVE_AVG, "adaptive_avg_pool2d", "adaptive_avg_pool2d: input", x, out_h, out_w,
                            out, NULL);
}

tb_status tb_op_adaptive_max_pool2d(const tb_tensor *x, int64_t out_h, int64_t out_w, tb_tensor *out,
                                    tb_tensor *indices) {
    return adaptive_forward(POOL_ADAPTIVE_MAX, "adaptive_max_pool2d", "adaptive_max_pool2d: input", x, out_h, out_w,
                            out, indices);
}

/* ---- backward ---- */

/* Checks grad_output (and indices when given) against the forward's output shape [N, C, OH, OW] in the
 * caller's batching, then runs job with dy -> dx (zeroed, shaped like x). */
static tb_status pool_backward(const char *name, pool_job *job, const tb_tensor *grad_output, const tb_tensor *x,
                               const tb_tensor *x4, const tb_tensor *indices, tb_tensor *out) {
    bool unbatched = x->ndim == 3;
    int64_t expected[4] = {x4->shape[0], x4->shape[1], job->g.out_h, job->g.out_w};
    const int64_t *want = unbatched ? expected + 1 : expected;
    int want_ndim = unbatched ? 3 : 4;
    const tb_tensor *checks[2] = {grad_output, indices};
    const char *labels[2] = {"grad_output", "indices"};
    for (int i = 0; i < 2; i++) {
        const tb_tensor *t = checks[i];
        if (!t)
            continue;
        bool ok = t->ndim == want_ndim;
        for (int d = 0; ok && d < want_ndim; d++)
            ok = t->shape[d] == want[d];
        if (!ok) {
            char a[128], b[128];
            return tb_error_set(TB_ERR_SHAPE, "%s: %s has shape %s but the pooled output is %s", name, labels[i],
                                tb_shape_string(t->ndim, t->shape, a, sizeof a), tb_shape_string(want_ndim, want, b, sizeof b));
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s: grad_output", name);
    tb_tensor staged = {0}, index = {0}, result = {0};
    job->f64 = grad_output->dtype == TB_F64;
    tb_status status = tb_nn_stage_compute(grad_output, job->f64 ? TB_F64 : TB_F32, what, &staged);
    if (status == TB_OK && indices) {
        snprintf(what, sizeof what, "%s: indices", name);
        status = tb_nn_stage_index(indices, what, &index);
    }
    if (status == TB_OK)
        status = tb_tensor_empty(job->f64 ? TB_F64 : TB_F32, 4, x4->shape, TB_ALLOC_ZERO, &result);
    if (status == TB_OK) {
        job->x = tb_tensor_data(&staged);
        job->y = tb_tensor_data(&result);
        job->index_in = indices ? tb_tensor_data(&index) : NULL;
        pool_run(job, x4->shape[0] * x4->shape[1]);
        if (atomic_load(&job->bad_index))
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: an index is outside the input plane [0, %lld)", name,
                                  (long long)(job->g.in_h * job->g.in_w));
    }
    if (status == TB_OK)
        status = tb_nn_drop_batch(&result, unbatched);
    if (status == TB_OK)
        status = tb_ops_finish_dtype(&result, grad_output->dtype, out);
    tb_tensor_release(&staged);
    tb_tensor_release(&index);
    tb_tensor_release(&result);
    return status;
}

tb_status tb_op_max_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *indices,
                                    tb_tensor *out) {
    memset(out, 0, sizeof *out);
    const char *name = "max_pool2d_backward";
    TB_TRY(tb_nn_require_float(grad_output->dtype, "max_pool2d_backward: grad_output"));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, "max_pool2d_backward: input", &x4, &unbatched));
    int64_t out_h = grad_output->ndim >= 2 ? grad_output->shape[grad_output->ndim - 2] : 0;
    int64_t out_w = grad_output->ndim >= 2 ? grad_output->shape[grad_output->ndim - 1] : 0;
    pool_job job = {.kind = POOL_SCATTER,
                    .g = {.channels = 1, .in_h = x4.shape[2], .in_w = x4.shape[3], .out_h = out_h, .out_w = out_w}};
    tb_status status = pool_backward(name, &job, grad_output, x, &x4, indices, out);
    tb_tensor_release(&x4);
    return status;
}

tb_status tb_op_avg_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x, const tb_pool2d_params *params,
                                    tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_nn_require_float(grad_output->dtype, "avg_pool2d_backward: grad_output"));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, "avg_pool2d_backward: input", &x4, &unbatched));
    pool_job job = {.kind = POOL_AVG_BACKWARD, .count_include_pad = params->count_include_pad,
                    .divisor_override = params->divisor_override};
    tb_status status = pool_check("avg_pool2d_backward", &x4, params, true, &job.g);
    if (status == TB_OK)
        status = pool_backward("avg_pool2d_backward", &job, grad_output, x, &x4, NULL, out);
    tb_tensor_release(&x4);
    return status;
}

tb_status tb_op_adaptive_avg_pool2d_backward(const tb_tensor *grad_output, const tb_tensor *x, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_nn_require_float(grad_output->dtype, "adaptive_avg_pool2d_backward: grad_output"));
    tb_tensor x4;
    bool unbatched;
    TB_TRY(tb_nn_view_4d(x, "adaptive_avg_pool2d_backward: input", &x4, &unbatched));
    int64_t out_h = grad_output->ndim >= 2 ? grad_output->shape[grad_output->ndim - 2] : 0;
    int64_t out_w = grad_output->ndim >= 2 ? grad_output->shape[grad_output->ndim - 1] : 0;
    pool_job job = {.kind = POOL_ADAPTIVE_AVG_BACKWARD};
    tb_status status = adaptive_check("adaptive_avg_pool2d_backward", &x4, out_h, out_w, &job.g);
    if (status == TB_OK)
        status = pool_backward("adaptive_avg_pool2d_backward", &job, grad_output, x, &x4, NULL, out);
    tb_tensor_release(&x4);
    return status;
}
