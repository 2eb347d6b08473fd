/* 2-D convolution forward and backward in double, for float64 tensors (torch computes them in
 * double, so the float32 packed-GEMM path would lose precision): im2col / col2im of
 * kernels/ref/conv_ref.c over column tiles and plain double GEMM loops. Work is split in fixed
 * (image, group) slots so results do not depend on thread scheduling. */
#include <string.h>

#include "ops/ops_nn_internal.h"

/* Doubles of im2col scratch per task (columns per tile = this / K, at least one). */
enum { CONV_F64_TILE_DOUBLES = 1 << 16 };

typedef struct conv_f64_job {
    const tb_conv_shape *s;
    const double *x;    /* [N, C_in, H, W] */
    const double *w;    /* [C_out, K] */
    const double *bias; /* [C_out] or NULL (forward) */
    const double *dy;   /* [N, C_out, OH, OW] (backward) */
    double *y;          /* forward output [N, C_out, OH, OW] */
    double *dx;         /* backward: [N, C_in, H, W] zeroed, or NULL */
    double *dw;         /* backward: [slots, C_out, K] zeroed partial sums, or NULL */
    int64_t tile, slots, tasks;
    tb_nn_failure failure;
} conv_f64_job;

static int64_t column_tile(const tb_conv_shape *s) {
    int64_t spatial = s->out_h * s->out_w, tile = CONV_F64_TILE_DOUBLES / (s->k > 0 ? s->k : 1);
    if (tile < 1)
        tile = 1;
    return tile < spatial ? tile : spatial;
}

/* Tasks are (image, group, column tile): y[co, j] = bias[co] + sum_q w[co, q] * col[q, j]. */
static void forward_tasks(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_f64_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w, k = s->k, tiles = (spatial + job->tile - 1) / job->tile;
    double *col = (double *)tb_ops_scratch(0, 2 * k * job->tile);
    if (!col) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t task = begin; task < end; task++) {
        int64_t tile = task % tiles, n = task / tiles / s->groups, g = task / tiles % s->groups;
        const double *x = job->x + (n * s->in_channels + g * s->in_per_group) * s->in_h * s->in_w;
        int64_t c0 = tile * job->tile;
        int64_t c1 = c0 + job->tile < spatial ? c0 + job->tile : spatial, width = c1 - c0;
        tb_im2col_f64(&s->geometry, x, c0, c1, col, width);
        for (int64_t i = 0; i < s->out_per_group; i++) {
            int64_t co = g * s->out_per_group + i;
            double *row = job->y + (n * s->out_channels + co) * spatial + c0;
            const double *w = job->w + co * k;
            double start = job->bias ? job->bias[co] : 0.0;
            for (int64_t j = 0; j < width; j++)
                row[j] = start;
            for (int64_t q = 0; q < k; q++) {
                double a = w[q];
                const double *src = col + q * width;
                for (int64_t j = 0; j < width; j++)
                    row[j] += a * src[j];
            }
        }
    }
}

/* Slot `slot` runs tasks [slot * tasks / slots, (slot + 1) * tasks / slots) in order, adding
 * dW_g[co, q] += sum_j dY[co, j] * col[q, j] into its own partial buffer, and for dx forms
 * dcol[q, j] = sum_co W_g[co, q] * dY[co, j] and scatters it back with col2im. */
static void backward_slots(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_f64_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w, k = s->k, plane = s->in_h * s->in_w;
    double *col = (double *)tb_ops_scratch(0, 2 * k * job->tile);
    if (!col) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t slot = begin; slot < end; slot++) {
        double *dw = job->dw ? job->dw + slot * s->out_channels * k : NULL;
        int64_t first = slot * job->tasks / job->slots, last = (slot + 1) * job->tasks / job->slots;
        for (int64_t task = first; task < last; task++) {
            int64_t n = task / s->groups, g = task % s->groups;
            int64_t in_offset = (n * s->in_channels + g * s->in_per_group) * plane;
            const double *dy = job->dy + (n * s->out_channels + g * s->out_per_group) * spatial;
            for (int64_t c0 = 0; c0 < spatial; c0 += job->tile) {
                int64_t c1 = c0 + job->tile < spatial ? c0 + job->tile : spatial, width = c1 - c0;
                if (dw) {
                    tb_im2col_f64(&s->geometry, job->x + in_offset, c0, c1, col, width);
                    for (int64_t i = 0; i < s->out_per_group; i++) {
                        const double *d = dy + i * spatial + c0;
                        double *out = dw + (g * s->out_per_group + i) * k;
                        for (int64_t q = 0; q < k; q++) {
                            const double *src = col + q * width;
                            double sum = 0.0;
                            for (int64_t j = 0; j < width; j++)
                                sum += d[j] * src[j];
                            out[q] += sum;
                        }
                    }
                }
                if (job->dx) {
                    memset(col, 0, (size_t)(k * width) * sizeof(double));
                    for (int64_t i = 0; i < s->out_per_group; i++) {
                        const double *d = dy + i * spatial + c0;
                        const double *w = job->w + (g * s->out_per_group + i) * k;
                        for (int64_t q = 0; q < k; q++) {
                            double a = w[q];
                            double *dst = col + q * width;
                            for (int64_t j = 0; j < width; j++)
                                dst[j] += a * d[j];
                        }
                    }
                    tb_col2im_f64(&s->geometry, col, c0, c1, width, job->dx + in_offset);
                }
            }
        }
    }
}

static tb_status job_status(conv_f64_job *job, const char *name) {
    tb_status status = (tb_status)atomic_load(&job->failure.status);
    return status == TB_OK ? TB_OK : tb_error_set(status, "%s: out of memory for im2col scratch", name);
}

/* An optional [length] float vector as contiguous doubles (NULL leaves *out zeroed). */
static tb_status stage_vector_f64(const tb_tensor *v, int64_t length, const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!v)
        return TB_OK;
    if (v->ndim != 1 || v->shape[0] != length) {
        char buf[128];
        return tb_error_set(TB_ERR_SHAPE, "%s must have shape [%lld], got %s", what, (long long)length,
                            tb_shape_string(v->ndim, v->shape, buf, sizeof buf));
    }
    return tb_nn_stage_compute(v, TB_F64, what, out);
}

static const double *data_f64(const tb_tensor *t) { return t->storage ? tb_tensor_data(t) : NULL; }

tb_status tb_conv2d_f64(const tb_tensor *x_in, const tb_tensor *weight, const tb_tensor *bias,
                        const tb_conv2d_params *params, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    enum { X4, X, W, BIAS, RESULT, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    bool unbatched = false;
    tb_conv_shape s;
    tb_status status = tb_nn_view_4d(x_in, "conv2d: input", &t[X4], &unbatched);
    if (status == TB_OK)
        status = tb_conv_check("conv2d", &t[X4], weight, params, &s);
    if (status == TB_OK)
        status = tb_nn_stage_compute(&t[X4], TB_F64, "conv2d: input", &t[X]);
    if (status == TB_OK)
        status = tb_nn_stage_compute(weight, TB_F64, "conv2d: weight", &t[W]);
    if (status == TB_OK)
        status = stage_vector_f64(bias, s.out_channels, "conv2d: bias", &t[BIAS]);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F64, 4, (int64_t[]){s.batch, s.out_channels, s.out_h, s.out_w}, TB_ALLOC_DEFAULT,
                                 &t[RESULT]);
    int64_t spatial = s.out_h * s.out_w;
    if (status == TB_OK && s.batch * s.groups > 0 && spatial > 0 && s.out_per_group > 0) {
        conv_f64_job job = {.s = &s, .x = tb_tensor_data(&t[X]), .w = tb_tensor_data(&t[W]),
                            .bias = data_f64(&t[BIAS]), .y = tb_tensor_data(&t[RESULT]), .tile = column_tile(&s)};
        /* at least a few column tiles per thread when the images and groups alone do not fill them */
        int64_t threads = tb_num_threads();
        while (job.tile > 64 && s.batch * s.groups * ((spatial + job.tile - 1) / job.tile) < 4 * threads)
            job.tile = (job.tile + 1) / 2;
        atomic_init(&job.failure.status, TB_OK);
        tb_parallel_for(s.batch * s.groups * ((spatial + job.tile - 1) / job.tile), 1, forward_tasks, &job);
        status = job_status(&job, "conv2d");
    }
    if (status == TB_OK)
        status = tb_nn_drop_batch(&t[RESULT], unbatched);
    if (status == TB_OK) {
        *out = t[RESULT];
        memset(&t[RESULT], 0, sizeof t[RESULT]);
    }
    tb_nn_release_all(t, COUNT);
    return status;
}

/* Sums of dy [N, C, spatial] over N and spatial, per channel. */
static tb_status grad_bias_f64(const tb_conv_shape *s, const double *dy, tb_tensor *out) {
    TB_TRY(tb_tensor_empty(TB_F64, 1, &s->out_channels, TB_ALLOC_DEFAULT, out));
    double *sums = tb_tensor_data(out);
    int64_t spatial = s->out_h * s->out_w;
    for (int64_t c = 0; c < s->out_channels; c++) {
        double sum = 0.0;
        for (int64_t n = 0; n < s->batch; n++) {
            const double *d = dy + (n * s->out_channels + c) * spatial;
            for (int64_t j = 0; j < spatial; j++)
                sum += d[j];
        }
        sums[c] = sum;
    }
    return TB_OK;
}

tb_status tb_conv2d_backward_f64(const tb_tensor *grad_output, const tb_tensor *x_in, const tb_tensor *weight,
                                 const tb_conv2d_params *params, const bool output_mask[3], tb_tensor *grad_input,
                                 tb_tensor *grad_weight, tb_tensor *grad_bias) {
    const char *name = "convolution_backward";
    memset(grad_input, 0, sizeof *grad_input);
    memset(grad_weight, 0, sizeof *grad_weight);
    memset(grad_bias, 0, sizeof *grad_bias);
    enum { X4, DY4, DY, X, W, DX, DW_PARTIAL, DW, DB, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    bool unbatched = false;
    tb_conv_shape s;
    tb_status status = tb_conv_backward_views(grad_output, x_in, weight, params, &t[DY4], &t[X4], &unbatched, &s);
    if (status == TB_OK)
        status = tb_nn_stage_compute(&t[DY4], TB_F64, "convolution_backward: grad_output", &t[DY]);
    if (status == TB_OK && output_mask[1])
        status = tb_nn_stage_compute(&t[X4], TB_F64, "convolution_backward: input", &t[X]);
    if (status == TB_OK && output_mask[0])
        status = tb_nn_stage_compute(weight, TB_F64, "convolution_backward: weight", &t[W]);
    if (status == TB_OK && output_mask[0])
        status = tb_tensor_empty(TB_F64, 4, t[X4].shape, TB_ALLOC_ZERO, &t[DX]);
    int64_t tasks = s.batch * s.groups, threads = tb_num_threads();
    int64_t slots = tasks < threads ? tasks : threads;
    if (slots < 1)
        slots = 1;
    if (status == TB_OK && output_mask[1])
        status = tb_tensor_empty(TB_F64, 3, (int64_t[]){slots, s.out_channels, s.k}, TB_ALLOC_ZERO, &t[DW_PARTIAL]);
    if (status == TB_OK && (output_mask[0] || output_mask[1]) && tasks > 0 && s.out_h * s.out_w > 0 && s.k > 0) {
        conv_f64_job job = {.s = &s, .x = data_f64(&t[X]), .w = data_f64(&t[W]), .dy = tb_tensor_data(&t[DY]),
                            .dx = t[DX].storage ? tb_tensor_data(&t[DX]) : NULL,
                            .dw = t[DW_PARTIAL].storage ? tb_tensor_data(&t[DW_PARTIAL]) : NULL,
                            .tile = column_tile(&s), .slots = slots, .tasks = tasks};
        atomic_init(&job.failure.status, TB_OK);
        tb_parallel_for(slots, 1, backward_slots, &job);
        status = job_status(&job, name);
    }
    if (status == TB_OK && output_mask[1]) {
        status = tb_tensor_empty(TB_F64, 4, weight->shape, TB_ALLOC_DEFAULT, &t[DW]);
        if (status == TB_OK) {
            double *dw = tb_tensor_data(&t[DW]);
            const double *partial = tb_tensor_data(&t[DW_PARTIAL]);
            TB_NN_SUM_SLOT_PARTIALS(double, dw, partial, s.out_channels * s.k, slots);
            *grad_weight = t[DW];
            memset(&t[DW], 0, sizeof t[DW]);
        }
    }
    if (status == TB_OK && output_mask[0]) {
        status = tb_nn_drop_batch(&t[DX], unbatched);
        if (status == TB_OK) {
            *grad_input = t[DX];
            memset(&t[DX], 0, sizeof t[DX]);
        }
    }
    if (status == TB_OK && output_mask[2])
        status = grad_bias_f64(&s, tb_tensor_data(&t[DY]), grad_bias);
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK) {
        tb_tensor_release(grad_input);
        tb_tensor_release(grad_weight);
        tb_tensor_release(grad_bias);
    }
    return status;
}
