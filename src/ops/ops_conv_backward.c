/* 2-D convolution backward (aten::convolution_backward, not transposed): grad_input through
 * W^T @ dY and col2im, grad_weight through dY @ im2col(x)^T accumulated over images, grad_bias as
 * per-channel sums. Work is split into fixed slots of (image, group) tasks so the summation order,
 * and hence the result, does not depend on thread scheduling. */
#include <string.h>

#include "ops/ops_nn_internal.h"

enum { CONV_BACKWARD_TILE_FLOATS = 1 << 17, CONV_BACKWARD_TILE_ALIGN = 32 };

typedef struct conv_backward_job {
    const tb_conv_shape *s;
    const float *dy; /* [N, C_out, OH, OW] */
    const float *x;  /* [N, C_in, H, W] (grad_weight) */
    const float *w;  /* [C_out, K] (grad_input) */
    float *dx;       /* [N, C_in, H, W] zeroed, or NULL */
    float *dw;       /* [slots, C_out, K] zeroed partial sums, or NULL */
    int64_t slots, tasks, tile;
    tb_nn_failure failure;
} conv_backward_job;

static tb_status backward_tile(conv_backward_job *job, int64_t n, int64_t g, int64_t c0, int64_t c1, float *col,
                               float *dw) {
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w, width = c1 - c0;
    const float *dy = job->dy + (n * s->out_channels + g * s->out_per_group) * spatial + c0;
    int64_t in_offset = (n * s->in_channels + g * s->in_per_group) * s->in_h * s->in_w;
    if (job->dw) {
        /* dW_g[co, q] += sum_j dY[co, j] * col[q, j] */
        tb_im2col_f32(&s->geometry, job->x + in_offset, c0, c1, col, width);
        tb_gemm_desc d = {
            .m = s->out_per_group, .n = s->k, .k = width,
            .a = dy, .a_row_stride = spatial, .a_col_stride = 1,
            .b = col, .b_row_stride = 1, .b_col_stride = width,
            .c = dw + g * s->out_per_group * s->k, .c_row_stride = s->k,
            .alpha = 1.0f, .beta = 1.0f, .batch = 1,
        };
        TB_TRY(tb_gemm_f32(&d));
    }
    if (job->dx) {
        /* dcol[q, j] = sum_co W_g[co, q] * dY[co, j], then scattered back onto the input planes */
        tb_gemm_desc d = {
            .m = s->k, .n = width, .k = s->out_per_group,
            .a = job->w + g * s->out_per_group * s->k, .a_row_stride = 1, .a_col_stride = s->k,
            .b = dy, .b_row_stride = spatial, .b_col_stride = 1,
            .c = col, .c_row_stride = width,
            .alpha = 1.0f, .beta = 0.0f, .batch = 1,
        };
        TB_TRY(tb_gemm_f32(&d));
        tb_col2im_f32(&s->geometry, col, c0, c1, width, job->dx + in_offset);
    }
    return TB_OK;
}

/* Slot `slot` handles tasks [slot * tasks / slots, (slot + 1) * tasks / slots) in order, accumulating
 * grad_weight into its own partial buffer. */
static void backward_slots(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    conv_backward_job *job = context;
    const tb_conv_shape *s = job->s;
    int64_t spatial = s->out_h * s->out_w;
    int64_t need = s->k * job->tile;
    float *col = tb_ops_scratch(0, need > 0 ? need : 1);
    if (!col) {
        tb_nn_fail(&job->failure, TB_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t slot = begin; slot < end; slot++) {
        float *dw = job->dw ? job->dw + slot * s->out_channels * s->k : NULL;
        int64_t first = slot * job->tasks / job->slots, last = (slot + 1) * job->tasks / job->slots;
        for (int64_t task = first; task < last; task++) {
            int64_t n = task / s->groups, g = task % s->groups;
            for (int64_t c0 = 0; c0 < spatial; c0 += job->tile) {
                int64_t c1 = c0 + job->tile < spatial ? c0 + job->tile : spatial;
                tb_status status = backward_tile(job, n, g, c0, c1, col, dw);
                if (status != TB_OK) {
                    tb_nn_fail(&job->failure, status);
                    return;
                }
            }
        }
    }
}

typedef struct bias_job {
    const float *dy;
    double *sums;
    int64_t batch, channels, spatial;
} bias_job;

static void bias_channels(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    bias_job *job = context;
    for (int64_t c = begin; c < end; c++) {
        double sum = 0.0;
        for (int64_t n = 0; n < job->batch; n++)
            sum += tb_nn_sum(job->dy + (n * job->channels + c) * job->spatial, job->spatial);
        job->sums[c] = sum;
    }
}

static tb_status grad_bias_of(const tb_conv_shape *s, const float *dy, tb_dtype dtype, tb_tensor *out) {
    tb_tensor sums = {0}, result = {0};
    int64_t count = s->out_channels;
    TB_TRY(tb_tensor_empty(TB_F64, 1, &count, TB_ALLOC_DEFAULT, &sums));
    bias_job job = {.dy = dy, .sums = tb_tensor_data(&sums), .batch = s->batch, .channels = count,
                    .spatial = s->out_h * s->out_w};
    tb_parallel_for(count, 1, bias_channels, &job);
    tb_status status = tb_tensor_empty(TB_F32, 1, &count, TB_ALLOC_DEFAULT, &result);
    if (status == TB_OK) {
        float *r = tb_tensor_data(&result);
        for (int64_t c = 0; c < count; c++)
            r[c] = (float)job.sums[c];
        status = tb_ops_finish_dtype(&result, dtype, out);
    }
    tb_tensor_release(&sums);
    tb_tensor_release(&result);
    return status;
}

/* For stride 1 the input gradient is itself a convolution: dX = conv2d(dY, W') with W'[ci, co] the
 * (kh, kw)-flipped W[co, ci] per group and padding dilation * (kernel - 1) - padding, so it runs on the
 * forward kernels (direct or packed) with no col2im scatter. Fills *params when that applies. */
static bool input_grad_as_conv(const tb_conv_shape *s, const tb_conv2d_params *p, tb_conv2d_params *params) {
    const int64_t kernel[2] = {s->kernel_h, s->kernel_w}, in[2] = {s->in_h, s->in_w}, out[2] = {s->out_h, s->out_w};
    memset(params, 0, sizeof *params);
    params->groups = p->groups;
    for (int i = 0; i < 2; i++) {
        int64_t pad = p->dilation[i] * (kernel[i] - 1) - p->padding[i];
        if (p->stride[i] != 1 || p->extra_padding[i] != 0 || pad < 0 ||
            out[i] + 2 * pad - p->dilation[i] * (kernel[i] - 1) != in[i])
            return false;
        params->stride[i] = 1;
        params->padding[i] = pad;
        params->dilation[i] = p->dilation[i];
    }
    return true;
}

/* W' of input_grad_as_conv: [C_in, C_out / groups, KH, KW], w'[g * ipg + ci, co, kh, kw] =
 * w[g * opg + co, ci, KH - 1 - kh, KW - 1 - kw]. */
static tb_status flipped_weight(const tb_conv_shape *s, const float *w, tb_tensor *out) {
    int64_t shape[4] = {s->in_channels, s->out_per_group, s->kernel_h, s->kernel_w};
    TB_TRY(tb_tensor_empty(TB_F32, 4, shape, TB_ALLOC_DEFAULT, out));
    float *f = tb_tensor_data(out);
    int64_t taps = s->kernel_h * s->kernel_w, ipg = s->in_per_group, opg = s->out_per_group;
    for (int64_t g = 0; g < s->groups; g++)
        for (int64_t co = 0; co < opg; co++)
            for (int64_t ci = 0; ci < ipg; ci++) {
                const float *src = w + ((g * opg + co) * ipg + ci) * taps;
                float *dst = f + ((g * ipg + ci) * opg + co) * taps;
                for (int64_t t = 0; t < taps; t++)
                    dst[taps - 1 - t] = src[t];
            }
    return TB_OK;
}

tb_status tb_op_conv2d_backward(const tb_tensor *grad_output, const tb_tensor *x_in, const tb_tensor *weight,
                                const tb_conv2d_params *params, const bool output_mask[3], tb_tensor *grad_input,
                                tb_tensor *grad_weight, tb_tensor *grad_bias) {
    memset(grad_input, 0, sizeof *grad_input);
    memset(grad_weight, 0, sizeof *grad_weight);
    memset(grad_bias, 0, sizeof *grad_bias);
    TB_TRY(tb_nn_require_float(grad_output->dtype, "convolution_backward: grad_output"));
    TB_TRY(tb_nn_require_float(x_in->dtype, "convolution_backward: input"));
    TB_TRY(tb_nn_require_float(weight->dtype, "convolution_backward: weight"));
    if (tb_ops_promote(tb_ops_promote(grad_output->dtype, x_in->dtype), weight->dtype) == TB_F64)
        return tb_conv2d_backward_f64(grad_output, x_in, weight, params, output_mask, grad_input, grad_weight,
                                      grad_bias);
    enum { X4, DY4, DY, X, W, W_FLIPPED, DX, DW_PARTIAL, DW, COUNT };
    tb_tensor t[COUNT];
    memset(t, 0, sizeof t);
    bool unbatched = false;
    tb_conv_shape s;
    tb_status status = tb_conv_backward_views(grad_output, x_in, weight, params, &t[DY4], &t[X4], &unbatched, &s);
    if (status == TB_OK)
        status = tb_nn_stage(&t[DY4], "convolution_backward: grad_output", &t[DY]);
    if (status == TB_OK && output_mask[1])
        status = tb_nn_stage(&t[X4], "convolution_backward: input", &t[X]);
    if (status == TB_OK && output_mask[0])
        status = tb_nn_stage(weight, "convolution_backward: weight", &t[W]);
    tb_conv2d_params transposed;
    bool as_conv = status == TB_OK && output_mask[0] && s.batch > 0 && s.out_h * s.out_w > 0 &&
                   input_grad_as_conv(&s, params, &transposed);
    if (status == TB_OK && output_mask[0])
        status = tb_tensor_empty(TB_F32, 4, t[X4].shape, as_conv ? TB_ALLOC_DEFAULT : TB_ALLOC_ZERO, &t[DX]);
    if (status == TB_OK && as_conv)
        status = flipped_weight(&s, tb_tensor_data(&t[W]), &t[W_FLIPPED]);
    if (status == TB_OK && as_conv && tb_tensor_numel(&t[DX]) > 0)
        status = tb_op_conv2d_fused_into(&t[DY], &t[W_FLIPPED], NULL, &transposed, NULL, tb_tensor_data(&t[DX]));
    int64_t spatial = s.out_h * s.out_w;
    int64_t tasks = s.batch * s.groups;
    int64_t threads = tb_num_threads();
    int64_t slots = tasks < threads ? tasks : threads;
    if (slots < 1)
        slots = 1;
    if (status == TB_OK && output_mask[1]) {
        int64_t shape[3] = {slots, s.out_channels, s.k};
        status = tb_tensor_empty(TB_F32, 3, shape, TB_ALLOC_ZERO, &t[DW_PARTIAL]);
    }
    if (status == TB_OK && ((output_mask[0] && !as_conv) || output_mask[1]) && tasks > 0 && spatial > 0 && s.k > 0) {
        int64_t tile = CONV_BACKWARD_TILE_FLOATS / s.k;
        tile = (tile + CONV_BACKWARD_TILE_ALIGN - 1) / CONV_BACKWARD_TILE_ALIGN * CONV_BACKWARD_TILE_ALIGN;
        if (tile > spatial)
            tile = spatial;
        conv_backward_job job = {
            .s = &s, .dy = tb_tensor_data(&t[DY]), .x = tb_nn_data(&t[X]), .w = tb_nn_data(&t[W]),
            .dx = as_conv ? NULL : tb_nn_data(&t[DX]), .dw = tb_nn_data(&t[DW_PARTIAL]), .slots = slots, .tasks = tasks,
            .tile = tile,
        };
        atomic_init(&job.failure.status, TB_OK);
        if (slots == 1)
            backward_slots(&job, 0, 1, 0); /* outside a parallel region the GEMMs can use the threads */
        else
            tb_parallel_for(slots, 1, backward_slots, &job);
        status = (tb_status)atomic_load(&job.failure.status);
        if (status != TB_OK)
            status = tb_error_set(status, "convolution_backward: out of memory for im2col/GEMM scratch");
    }
    if (status == TB_OK && output_mask[1]) {
        status = tb_tensor_empty(TB_F32, 4, weight->shape, TB_ALLOC_DEFAULT, &t[DW]);
        if (status == TB_OK) {
            float *dw = tb_tensor_data(&t[DW]);
            const float *partial = tb_tensor_data(&t[DW_PARTIAL]);
            TB_NN_SUM_SLOT_PARTIALS(float, dw, partial, s.out_channels * s.k, slots);
            status = tb_ops_finish_dtype(&t[DW], weight->dtype, grad_weight);
        }
    }
    if (status == TB_OK && output_mask[0]) {
        status = tb_nn_drop_batch(&t[DX], unbatched);
        if (status == TB_OK)
            status = tb_ops_finish_dtype(&t[DX], x_in->dtype, grad_input);
    }
    if (status == TB_OK && output_mask[2])
        status = grad_bias_of(&s, tb_tensor_data(&t[DY]), grad_output->dtype, grad_bias);
    tb_nn_release_all(t, COUNT);
    if (status != TB_OK) {
        tb_tensor_release(grad_input);
        tb_tensor_release(grad_weight);
        tb_tensor_release(grad_bias);
    }
    return status;
}
