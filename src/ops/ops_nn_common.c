/* Shared helpers of the nn ops (see ops_nn_internal.h). */
#include <string.h>

#include "ops/ops_nn_internal.h"

tb_status tb_nn_stage(const tb_tensor *x, const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_ops_require_float(x->dtype, what));
    return tb_ops_as_f32(x, out);
}

tb_status tb_nn_stage_compute(const tb_tensor *x, tb_dtype compute, const char *what, tb_tensor *out) {
    if (compute != TB_F64)
        return tb_nn_stage(x, what, out);
    memset(out, 0, sizeof *out);
    TB_TRY(tb_nn_require_float(x->dtype, what));
    return tb_tensor_contiguous(x, TB_F64, out);
}

tb_status tb_nn_stage_vector(const tb_tensor *x, int64_t length, const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!x)
        return TB_OK;
    TB_TRY(tb_ops_require_float(x->dtype, what));
    if (x->ndim != 1 || x->shape[0] != length) {
        char buf[128];
        return tb_error_set(TB_ERR_SHAPE, "%s must have shape [%lld], got %s", what, (long long)length,
                            tb_shape_string(x->ndim, x->shape, buf, sizeof buf));
    }
    return tb_ops_as_f32(x, out);
}

tb_status tb_nn_stage_index(const tb_tensor *x, const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (x->dtype != TB_I64 && x->dtype != TB_I32)
        return tb_error_set(TB_ERR_DTYPE, "%s must be an int64 (or int32) tensor, got %s", what,
                            tb_dtype_name(x->dtype));
    return tb_tensor_contiguous(x, TB_I64, out);
}

tb_status tb_nn_stage_expanded(const tb_tensor *x, int ndim, const int64_t *shape, const char *what, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    TB_TRY(tb_ops_require_float(x->dtype, what));
    tb_tensor expanded;
    tb_status status = tb_tensor_expand(x, ndim, shape, &expanded);
    if (status != TB_OK) {
        char a[128], b[128];
        return tb_error_set(TB_ERR_SHAPE, "%s of shape %s does not broadcast to %s", what,
                            tb_shape_string(x->ndim, x->shape, a, sizeof a), tb_shape_string(ndim, shape, b, sizeof b));
    }
    status = tb_ops_as_f32(&expanded, out);
    tb_tensor_release(&expanded);
    return status;
}

tb_status tb_nn_view_4d(const tb_tensor *x, const char *name, tb_tensor *out, bool *unbatched) {
    memset(out, 0, sizeof *out);
    *unbatched = x->ndim == 3;
    if (x->ndim == 4) {
        tb_tensor_retain(x, out);
        return TB_OK;
    }
    if (x->ndim == 3)
        return tb_tensor_unsqueeze(x, 0, out);
    return tb_error_set(TB_ERR_SHAPE, "%s must be 3-D [C, H, W] or 4-D [N, C, H, W], got %d dims", name, x->ndim);
}

tb_status tb_nn_drop_batch(tb_tensor *result, bool unbatched) {
    if (!unbatched || !result->storage)
        return TB_OK;
    tb_tensor squeezed;
    tb_status status = tb_tensor_select(result, 0, 0, &squeezed);
    tb_tensor_release(result);
    if (status == TB_OK)
        *result = squeezed;
    return status;
}

void tb_nn_release_all(tb_tensor *tensors, int count) {
    for (int i = 0; i < count; i++)
        tb_tensor_release(&tensors[i]);
}

tb_status tb_nn_finish(tb_tensor *f32_result, tb_dtype dtype, tb_tensor *out) {
    if (!f32_result->storage) {
        memset(out, 0, sizeof *out);
        return TB_OK;
    }
    return tb_ops_finish_dtype(f32_result, dtype, out);
}

tb_status tb_conv_backward_views(const tb_tensor *grad_output, const tb_tensor *x, const tb_tensor *weight,
                                 const tb_conv2d_params *params, tb_tensor *dy4, tb_tensor *x4, bool *unbatched,
                                 tb_conv_shape *s) {
    bool dy_unbatched = false;
    memset(dy4, 0, sizeof *dy4);
    TB_TRY(tb_nn_view_4d(x, "convolution_backward: input", x4, unbatched));
    TB_TRY(tb_nn_view_4d(grad_output, "convolution_backward: grad_output", dy4, &dy_unbatched));
    TB_TRY(tb_conv_check("convolution_backward", x4, weight, params, s));
    int64_t expected[4] = {s->batch, s->out_channels, s->out_h, s->out_w};
    bool ok = *unbatched == dy_unbatched;
    for (int i = 0; ok && i < 4; i++)
        ok = dy4->shape[i] == expected[i];
    if (!ok) {
        char a[128], b[128];
        return tb_error_set(TB_ERR_SHAPE, "convolution_backward: grad_output has shape %s but the convolution "
                            "output is %s", tb_shape_string(grad_output->ndim, grad_output->shape, a, sizeof a),
                            tb_shape_string(*unbatched ? 3 : 4, *unbatched ? expected + 1 : expected, b, sizeof b));
    }
    return TB_OK;
}

tb_status tb_conv_check(const char *name, const tb_tensor *x, const tb_tensor *weight, const tb_conv2d_params *p,
                        tb_conv_shape *s) {
    memset(s, 0, sizeof *s);
    if (x->ndim != 4)
        return tb_error_set(TB_ERR_SHAPE, "%s: input must be 4-D [N, C, H, W], got %d dims", name, x->ndim);
    if (weight->ndim != 4)
        return tb_error_set(TB_ERR_SHAPE, "%s: weight must be 4-D [C_out, C_in / groups, KH, KW], got %d dims", name,
                            weight->ndim);
    static const char *const axes[2] = {"height", "width"};
    for (int i = 0; i < 2; i++) {
        if (p->stride[i] < 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: stride must be >= 1, got %lld (%s)", name,
                                (long long)p->stride[i], axes[i]);
        if (p->dilation[i] < 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: dilation must be >= 1, got %lld (%s)", name,
                                (long long)p->dilation[i], axes[i]);
        if (p->padding[i] < 0 || p->extra_padding[i] < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: padding must be >= 0, got %lld (%s)", name,
                                (long long)(p->padding[i] < 0 ? p->padding[i] : p->extra_padding[i]), axes[i]);
    }
    if (p->groups < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: groups must be >= 1, got %lld", name, (long long)p->groups);
    s->batch = x->shape[0];
    s->in_channels = x->shape[1];
    s->in_h = x->shape[2];
    s->in_w = x->shape[3];
    s->out_channels = weight->shape[0];
    s->kernel_h = weight->shape[2];
    s->kernel_w = weight->shape[3];
    s->groups = p->groups;
    char ws[128], xs[128];
    tb_shape_string(weight->ndim, weight->shape, ws, sizeof ws);
    tb_shape_string(x->ndim, x->shape, xs, sizeof xs);
    if (s->out_channels % p->groups != 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: groups (%lld) must divide the output channels (weight.shape[0] "
                            "= %lld)", name, (long long)p->groups, (long long)s->out_channels);
    if (s->in_channels % p->groups != 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: groups (%lld) must divide the input channels (%lld)", name,
                            (long long)p->groups, (long long)s->in_channels);
    if (weight->shape[1] * p->groups != s->in_channels)
        return tb_error_set(TB_ERR_SHAPE, "%s: weight %s with groups=%lld expects input with %lld channels, but input %s "
                            "has %lld", name, ws, (long long)p->groups, (long long)(weight->shape[1] * p->groups), xs,
                            (long long)s->in_channels);
    if (s->kernel_h < 1 || s->kernel_w < 1)
        return tb_error_set(TB_ERR_SHAPE, "%s: weight %s has an empty kernel", name, ws);
    s->in_per_group = s->in_channels / p->groups;
    s->out_per_group = s->out_channels / p->groups;
    int64_t padded_h = s->in_h + 2 * p->padding[0] + p->extra_padding[0];
    int64_t padded_w = s->in_w + 2 * p->padding[1] + p->extra_padding[1];
    int64_t span_h = p->dilation[0] * (s->kernel_h - 1) + 1, span_w = p->dilation[1] * (s->kernel_w - 1) + 1;
    if (padded_h < span_h || padded_w < span_w)
        return tb_error_set(TB_ERR_SHAPE, "%s: padded input size %lldx%lld is smaller than the (dilated) kernel "
                            "%lldx%lld", name, (long long)padded_h, (long long)padded_w, (long long)span_h,
                            (long long)span_w);
    s->out_h = (padded_h - span_h) / p->stride[0] + 1;
    s->out_w = (padded_w - span_w) / p->stride[1] + 1;
    s->k = s->in_per_group * s->kernel_h * s->kernel_w;
    s->geometry = (tb_window_geometry){
        .channels = s->in_per_group,
        .in_h = s->in_h, .in_w = s->in_w, .out_h = s->out_h, .out_w = s->out_w,
        .kernel_h = s->kernel_h, .kernel_w = s->kernel_w,
        .stride_h = p->stride[0], .stride_w = p->stride[1],
        .pad_top = p->padding[0], .pad_left = p->padding[1],
        .dilation_h = p->dilation[0], .dilation_w = p->dilation[1],
    };
    return TB_OK;
}

/* Lanes and block length of the reductions below: the float partial sums of a block stay small
 * (64 values per lane) before they are added in double. */
enum { SUM_LANES = 16, SUM_BLOCK = 1024 };

double tb_nn_sum(const float *x, int64_t n) {
    double total = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += SUM_BLOCK) {
        int64_t end = n - i0 < SUM_BLOCK ? n : i0 + SUM_BLOCK, i = i0;
        float lanes[SUM_LANES] = {0};
        for (; i + SUM_LANES <= end; i += SUM_LANES)
            for (int t = 0; t < SUM_LANES; t++)
                lanes[t] += x[i + t];
        double block = 0.0;
        for (; i < end; i++)
            block += x[i];
        for (int t = 0; t < SUM_LANES; t++)
            block += lanes[t];
        total += block;
    }
    return total;
}

double tb_nn_sum_sq(const float *x, int64_t n, float mean) {
    double total = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += SUM_BLOCK) {
        int64_t end = n - i0 < SUM_BLOCK ? n : i0 + SUM_BLOCK, i = i0;
        float lanes[SUM_LANES] = {0};
        for (; i + SUM_LANES <= end; i += SUM_LANES)
            for (int t = 0; t < SUM_LANES; t++) {
                float d = x[i + t] - mean;
                lanes[t] += d * d;
            }
        double block = 0.0;
        for (; i < end; i++) {
            double d = (double)x[i] - mean;
            block += d * d;
        }
        for (int t = 0; t < SUM_LANES; t++)
            block += lanes[t];
        total += block;
    }
    return total;
}

void tb_nn_sums_dy(const float *dy, const float *x, const float *w, int64_t n, float mean, double *sum_g,
                   double *sum_gx) {
    double total_g = 0.0, total_gx = 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += SUM_BLOCK) {
        int64_t end = n - i0 < SUM_BLOCK ? n : i0 + SUM_BLOCK, i = i0;
        float lanes_g[SUM_LANES] = {0}, lanes_gx[SUM_LANES] = {0};
        if (w) {
            for (; i + SUM_LANES <= end; i += SUM_LANES)
                for (int t = 0; t < SUM_LANES; t++) {
                    float g = dy[i + t] * w[i + t];
                    lanes_g[t] += g;
                    lanes_gx[t] += g * (x[i + t] - mean);
                }
        } else {
            for (; i + SUM_LANES <= end; i += SUM_LANES)
                for (int t = 0; t < SUM_LANES; t++) {
                    lanes_g[t] += dy[i + t];
                    lanes_gx[t] += dy[i + t] * (x[i + t] - mean);
                }
        }
        double block_g = 0.0, block_gx = 0.0;
        for (; i < end; i++) {
            double g = (double)dy[i] * (w ? w[i] : 1.0f);
            block_g += g;
            block_gx += g * ((double)x[i] - mean);
        }
        for (int t = 0; t < SUM_LANES; t++) {
            block_g += lanes_g[t];
            block_gx += lanes_gx[t];
        }
        total_g += block_g;
        total_gx += block_gx;
    }
    *sum_g = total_g;
    *sum_gx = total_gx;
}
