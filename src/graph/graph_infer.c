/* Shape and dtype inference for every graph op (the `infer` column of TB_GRAPH_OP_LIST), following
 * PyTorch's semantics. Each function checks its inputs and fills its outputs' tb_value_info; errors
 * name the offending input (the builder prefixes the op name). */
#include <string.h>

#include "graph/graph_internal.h"

typedef const tb_value_info *const *infos;

static tb_status expect_float(const tb_value_info *info, const char *what) {
    if (!tb_dtype_is_float(info->dtype))
        return tb_error_set(TB_ERR_DTYPE, "%s has dtype %s; only float32/float16/bfloat16 are computed natively", what,
                            tb_dtype_name(info->dtype));
    return TB_OK;
}

static tb_status expect_f32(const tb_value_info *info, const char *what) {
    if (info->dtype != TB_F32)
        return tb_error_set(TB_ERR_DTYPE, "%s has dtype %s; this op runs on float32 only", what,
                            tb_dtype_name(info->dtype));
    return TB_OK;
}

static tb_status expect_ndim(const tb_value_info *info, int ndim, const char *what) {
    if (info->ndim != ndim) {
        char buf[96];
        return tb_error_set(TB_ERR_SHAPE, "%s must be %d-D, got shape %s", what, ndim,
                            tb_shape_string(info->ndim, info->shape, buf, sizeof buf));
    }
    return TB_OK;
}

static tb_status expect_vector(const tb_value_info *info, int64_t length, const char *what) {
    if (info->ndim != 1 || info->shape[0] != length) {
        char buf[96];
        return tb_error_set(TB_ERR_SHAPE, "%s must have shape [%lld], got %s", what, (long long)length,
                            tb_shape_string(info->ndim, info->shape, buf, sizeof buf));
    }
    return TB_OK;
}

static tb_status check_dtype_param(int64_t dtype) {
    if (!tb_dtype_valid((int)dtype))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "invalid dtype %lld", (long long)dtype);
    return TB_OK;
}

static tb_status check_shape_param(int64_t ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "ndim %lld is out of range", (long long)ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return tb_error_set(TB_ERR_SHAPE, "size %lld of dim %d is negative", (long long)shape[d], d);
    int64_t numel;
    return tb_shape_check((int)ndim, shape, TB_F64, &numel);
}

static void like(tb_value_info *out, const tb_value_info *x, tb_dtype dtype) {
    tb_info_contiguous(out, dtype, x->ndim, x->shape);
}

static void scalar_info(tb_value_info *out, tb_dtype dtype) { tb_info_contiguous(out, dtype, 0, NULL); }

tb_status tb_infer_input(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(check_dtype_param(p->input.dtype));
    TB_TRY(check_shape_param(p->input.ndim, p->input.shape));
    tb_info_contiguous(out, (tb_dtype)p->input.dtype, (int)p->input.ndim, p->input.shape);
    for (int d = 0; d < out->ndim; d++) {
        if (p->input.strides[d] < 0)
            return tb_error_set(TB_ERR_SHAPE, "negative stride in dim %d", d);
        out->strides[d] = p->input.strides[d];
    }
    return TB_OK;
}

tb_status tb_infer_full(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(check_dtype_param(p->full.dtype));
    TB_TRY(check_shape_param(p->full.ndim, p->full.shape));
    tb_info_contiguous(out, (tb_dtype)p->full.dtype, (int)p->full.ndim, p->full.shape);
    return TB_OK;
}

/* The strides of a view of (shape, strides) as new_shape, or false when the layout does not allow a
 * view (PyTorch's rule: each run of old dims that is contiguous with itself maps to whole new dims). */
bool tb_view_strides(const tb_value_info *x, int ndim, const int64_t *new_shape, int64_t *new_strides) {
    if (tb_info_numel(x) == 0 || x->ndim == 0) {
        tb_contiguous_strides(ndim, new_shape, new_strides);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = x->strides[x->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int tensor_d = x->ndim - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= x->shape[tensor_d];
        if (tensor_d == 0 ||
            (x->shape[tensor_d - 1] != 1 && x->strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
                new_strides[view_d] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return false;
            if (tensor_d > 0) {
                chunk_base_stride = x->strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

tb_status tb_infer_view(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(check_shape_param(p->shape.ndim, p->shape.shape));
    tb_info_contiguous(out, in[0]->dtype, (int)p->shape.ndim, p->shape.shape);
    if (tb_info_numel(out) != tb_info_numel(in[0])) {
        char a[96], b[96];
        return tb_error_set(TB_ERR_SHAPE, "cannot view shape %s as %s",
                            tb_shape_string(in[0]->ndim, in[0]->shape, a, sizeof a),
                            tb_shape_string(out->ndim, out->shape, b, sizeof b));
    }
    int64_t strides[TB_MAX_DIMS];
    if (tb_view_strides(in[0], out->ndim, out->shape, strides))
        memcpy(out->strides, strides, sizeof strides); /* else: lowering copies into a contiguous buffer */
    return TB_OK;
}

tb_status tb_infer_permute(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    if (p->permute.ndim != x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "permutation has %lld dims, input has %d", (long long)p->permute.ndim, x->ndim);
    *out = *x;
    int seen = 0;
    for (int d = 0; d < x->ndim; d++) {
        int64_t src = p->permute.dims[d];
        if (src < 0)
            src += x->ndim;
        if (src < 0 || src >= x->ndim || (seen & (1 << src)))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dims is not a permutation (entry %d)", d);
        seen |= 1 << src;
        out->shape[d] = x->shape[src];
        out->strides[d] = x->strides[src];
    }
    return TB_OK;
}

tb_status tb_infer_expand(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    int ndim = (int)p->shape.ndim;
    if (ndim < x->ndim || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "cannot expand %d dims to %d", x->ndim, ndim);
    memset(out, 0, sizeof *out);
    out->dtype = x->dtype;
    out->ndim = ndim;
    for (int d = ndim - 1; d >= 0; d--) {
        int xd = d - (ndim - x->ndim);
        int64_t target = p->shape.shape[d];
        if (xd < 0) {
            if (target < 0)
                return tb_error_set(TB_ERR_SHAPE, "size -1 for new leading dim %d", d);
            out->shape[d] = target;
            out->strides[d] = 0;
        } else if (target == -1 || target == x->shape[xd]) {
            out->shape[d] = x->shape[xd];
            out->strides[d] = x->strides[xd];
        } else if (x->shape[xd] == 1 && target >= 0) {
            out->shape[d] = target;
            out->strides[d] = 0;
        } else {
            return tb_error_set(TB_ERR_SHAPE, "cannot expand size %lld to %lld in dim %d", (long long)x->shape[xd],
                                (long long)target, d);
        }
    }
    return TB_OK;
}

/* Normalized [start, end) of a slice, PyTorch-style clamping. */
void tb_slice_bounds(const tb_params_slice *s, int64_t size, int64_t *start, int64_t *end) {
    int64_t a = s->start, b = s->end;
    if (a < 0)
        a += size;
    if (b < 0)
        b += size;
    a = a < 0 ? 0 : (a > size ? size : a);
    b = b < a ? a : (b > size ? size : b);
    *start = a;
    *end = b;
}

tb_status tb_infer_slice(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    int dim;
    TB_TRY(tb_normalize_dim(p->slice.dim, x->ndim, &dim));
    if (p->slice.step < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "slice step must be >= 1, got %lld", (long long)p->slice.step);
    int64_t start, end;
    tb_slice_bounds(&p->slice, x->shape[dim], &start, &end);
    *out = *x;
    out->shape[dim] = (end - start + p->slice.step - 1) / p->slice.step;
    out->strides[dim] = x->strides[dim] * p->slice.step;
    return TB_OK;
}

static tb_status broadcast(int count, infos in, tb_value_info *out, tb_dtype dtype) {
    int ndim = 0;
    int64_t shape[TB_MAX_DIMS] = {0};
    for (int i = 0; i < count; i++) {
        int64_t next[TB_MAX_DIMS];
        int next_ndim;
        TB_TRY(tb_broadcast_shapes(ndim, shape, in[i]->ndim, in[i]->shape, &next_ndim, next));
        ndim = next_ndim;
        memcpy(shape, next, sizeof shape);
    }
    tb_info_contiguous(out, dtype, ndim, shape);
    return TB_OK;
}

tb_status tb_infer_unary(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->unary.op < 0 || p->unary.op >= TB_GRAPH_UNARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown unary op %lld", (long long)p->unary.op);
    TB_TRY(check_dtype_param(p->unary.dtype));
    like(out, in[0], (tb_dtype)p->unary.dtype);
    return TB_OK;
}

tb_status tb_infer_unary_like(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->scalar.op < 0 || p->scalar.op >= TB_GRAPH_BINARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown binary op %lld", (long long)p->scalar.op);
    TB_TRY(check_dtype_param(p->scalar.dtype));
    like(out, in[0], (tb_dtype)p->scalar.dtype);
    return TB_OK;
}

tb_status tb_infer_binary(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->binary.op < 0 || p->binary.op >= TB_GRAPH_BINARY_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown binary op %lld", (long long)p->binary.op);
    TB_TRY(check_dtype_param(p->binary.dtype));
    return broadcast(2, in, out, (tb_dtype)p->binary.dtype);
}

tb_status tb_infer_compare(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->compare.op < 0 || p->compare.op >= TB_COMPARE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown comparison %lld", (long long)p->compare.op);
    return broadcast(n, in, out, TB_BOOL);
}

tb_status tb_infer_where(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (in[0]->dtype != TB_BOOL)
        return tb_error_set(TB_ERR_DTYPE, "condition must be bool, got %s", tb_dtype_name(in[0]->dtype));
    TB_TRY(check_dtype_param(p->dtype.dtype));
    return broadcast(3, in, out, (tb_dtype)p->dtype.dtype);
}

tb_status tb_infer_copy(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(check_dtype_param(p->dtype.dtype));
    like(out, in[0], (tb_dtype)p->dtype.dtype);
    return TB_OK;
}

tb_status tb_infer_fused(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(check_dtype_param(p->fused.dtype));
    return broadcast(n, in, out, (tb_dtype)p->fused.dtype);
}

tb_status tb_reduced_shape(const tb_value_info *x, int64_t mask, int64_t keepdim, tb_dtype dtype,
                               tb_value_info *out) {
    if (mask < 0 || (x->ndim < 32 && (mask >> x->ndim) != 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dim mask 0x%llx names dims beyond %d", (long long)mask, x->ndim);
    int64_t shape[TB_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        bool reduced = mask == 0 || (mask & (1ll << d));
        if (!reduced)
            shape[ndim++] = x->shape[d];
        else if (keepdim)
            shape[ndim++] = 1;
    }
    tb_info_contiguous(out, dtype, ndim, shape);
    return TB_OK;
}

tb_status tb_infer_reduce(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->reduce.op < 0 || p->reduce.op >= TB_GRAPH_REDUCE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown reduction %lld", (long long)p->reduce.op);
    TB_TRY(expect_float(in[0], "input"));
    TB_TRY(check_dtype_param(p->reduce.dtype));
    return tb_reduced_shape(in[0], p->reduce.dim_mask, p->reduce.keepdim, (tb_dtype)p->reduce.dtype, out);
}

tb_status tb_infer_var(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "input"));
    return tb_reduced_shape(in[0], p->var.dim_mask, p->var.keepdim, in[0]->dtype, out);
}

tb_status tb_infer_softmax(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "input"));
    int dim;
    TB_TRY(tb_normalize_dim(p->softmax.dim, in[0]->ndim > 0 ? in[0]->ndim : 1, &dim));
    TB_TRY(check_dtype_param(p->softmax.dtype));
    like(out, in[0], (tb_dtype)p->softmax.dtype);
    return TB_OK;
}

tb_status tb_infer_softmax_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "grad"));
    TB_TRY(check_dtype_param(p->softmax.dtype));
    like(out, in[0], (tb_dtype)p->softmax.dtype);
    return TB_OK;
}

/* weight/bias of a layer/RMS norm must have the trailing normalized shape of x. */
static tb_status check_trailing(const tb_value_info *x, int normalized, const tb_value_info *param, const char *what) {
    if (param->ndim != normalized)
        return tb_error_set(TB_ERR_SHAPE, "%s must have %d dims", what, normalized);
    for (int d = 0; d < normalized; d++)
        if (param->shape[d] != x->shape[x->ndim - normalized + d])
            return tb_error_set(TB_ERR_SHAPE, "%s does not match the normalized shape of the input", what);
    return TB_OK;
}

static tb_status norm_common(const tb_params_norm *p, int n, infos in, int max_params) {
    const tb_value_info *x = in[0];
    TB_TRY(expect_float(x, "input"));
    if (p->normalized_ndim < 1 || p->normalized_ndim > x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "normalized_ndim %lld for a %d-D input", (long long)p->normalized_ndim, x->ndim);
    int expected = 1 + (p->has_weight ? 1 : 0) + (p->has_bias ? 1 : 0);
    if ((p->epilogue ? n < expected : n != expected) || expected > 1 + max_params)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_bias", n);
    for (int i = 1; i < expected; i++)
        TB_TRY(check_trailing(x, (int)p->normalized_ndim, in[i], i == 1 && p->has_weight ? "weight" : "bias"));
    for (int i = expected; i < n; i++) { /* epilogue operands broadcast to x */
        int ndim;
        int64_t shape[TB_MAX_DIMS];
        TB_TRY(tb_broadcast_shapes(x->ndim, x->shape, in[i]->ndim, in[i]->shape, &ndim, shape));
        if (ndim != x->ndim || memcmp(shape, x->shape, sizeof(int64_t) * (size_t)ndim) != 0)
            return tb_error_set(TB_ERR_SHAPE, "epilogue input %d does not broadcast to the input", i);
    }
    if (p->epilogue && x->dtype != TB_F32)
        return tb_error_set(TB_ERR_DTYPE, "a norm epilogue needs float32");
    return TB_OK;
}

tb_status tb_infer_layer_norm(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(norm_common(&p->norm, n, in, 2));
    const tb_value_info *x = in[0];
    like(&out[0], x, x->dtype);
    int64_t stat_shape[TB_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        stat_shape[d] = d < x->ndim - p->norm.normalized_ndim ? x->shape[d] : 1;
    tb_info_contiguous(&out[1], x->dtype, x->ndim, stat_shape);
    tb_info_contiguous(&out[2], x->dtype, x->ndim, stat_shape);
    return TB_OK;
}

tb_status tb_infer_rms_norm(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (p->norm.has_bias)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "RMS norm has no bias");
    TB_TRY(norm_common(&p->norm, n, in, 1));
    like(out, in[0], in[0]->dtype);
    return TB_OK;
}

static tb_status channel_params(const tb_value_info *x, int first, int count, int n, infos in, const char *what) {
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "input must be [N, C, ...], got %d dims", x->ndim);
    for (int i = first; i < first + count && i < n; i++)
        TB_TRY(expect_vector(in[i], x->shape[1], what));
    return TB_OK;
}

tb_status tb_infer_group_norm(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    TB_TRY(expect_float(x, "input"));
    if (n != 1 + (p->group_norm.has_weight ? 1 : 0) + (p->group_norm.has_bias ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_bias", n);
    TB_TRY(channel_params(x, 1, 2, n, in, "weight/bias"));
    int64_t groups = p->group_norm.groups;
    if (groups < 1 || x->shape[1] % groups != 0)
        return tb_error_set(TB_ERR_SHAPE, "%lld groups do not divide %lld channels", (long long)groups,
                            (long long)x->shape[1]);
    like(&out[0], x, x->dtype);
    int64_t stat_shape[2] = {x->shape[0], groups};
    tb_info_contiguous(&out[1], x->dtype, 2, stat_shape);
    tb_info_contiguous(&out[2], x->dtype, 2, stat_shape);
    return TB_OK;
}

tb_status tb_infer_batch_norm(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    TB_TRY(expect_float(x, "input"));
    if (n != 3 + (p->batch_norm.has_weight ? 1 : 0) + (p->batch_norm.has_bias ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_bias", n);
    TB_TRY(channel_params(x, 1, 4, n, in, "running stats/weight/bias"));
    like(out, x, x->dtype);
    return TB_OK;
}

tb_status tb_infer_batch_norm_train(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_batch_norm_train *b = &p->batch_norm_train;
    const tb_value_info *x = in[0];
    TB_TRY(expect_float(x, "input"));
    if (n != 1 + (b->has_weight ? 1 : 0) + (b->has_bias ? 1 : 0) + (b->has_running ? 2 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_bias/has_running", n);
    TB_TRY(channel_params(x, 1, 4, n, in, "weight/bias/running stats"));
    like(&out[0], x, x->dtype);
    int64_t channels[1] = {x->shape[1]}, empty[1] = {0};
    tb_info_contiguous(&out[1], x->dtype, 1, channels);
    tb_info_contiguous(&out[2], x->dtype, 1, channels);
    tb_info_contiguous(&out[3], x->dtype, 1, b->has_running ? channels : empty);
    tb_info_contiguous(&out[4], x->dtype, 1, b->has_running ? channels : empty);
    return TB_OK;
}

tb_status tb_infer_matmul(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_matmul *m = &p->matmul;
    const tb_value_info *a = in[0], *b = in[1];
    TB_TRY(expect_f32(a, "a"));
    TB_TRY(expect_f32(b, "b"));
    if (a->ndim < 2 || b->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "operands must be at least 2-D (got %d and %d dims)", a->ndim, b->ndim);
    if (n != 2 + (m->has_bias ? 1 : 0) + (m->has_residual ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_bias/has_residual", n);
    if (m->activation < 0 || m->activation >= TB_ACTIVATION_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown activation %lld", (long long)m->activation);
    int64_t k = a->shape[a->ndim - 1];
    if (b->shape[b->ndim - 2] != k) {
        char sa[96], sb[96];
        return tb_error_set(TB_ERR_SHAPE, "cannot multiply %s by %s", tb_shape_string(a->ndim, a->shape, sa, sizeof sa),
                            tb_shape_string(b->ndim, b->shape, sb, sizeof sb));
    }
    int batch_ndim;
    int64_t batch[TB_MAX_DIMS];
    TB_TRY(tb_broadcast_shapes(a->ndim - 2, a->shape, b->ndim - 2, b->shape, &batch_ndim, batch));
    batch[batch_ndim] = a->shape[a->ndim - 2];
    batch[batch_ndim + 1] = b->shape[b->ndim - 1];
    tb_info_contiguous(out, TB_F32, batch_ndim + 2, batch);
    int next = 2;
    if (m->has_bias) {
        TB_TRY(expect_f32(in[next], "bias"));
        TB_TRY(expect_vector(in[next], b->shape[b->ndim - 1], "bias"));
        next++;
    }
    if (m->has_residual) {
        const tb_value_info *r = in[next];
        TB_TRY(expect_f32(r, "residual"));
        if (r->ndim != out->ndim || memcmp(r->shape, out->shape, sizeof(int64_t) * (size_t)out->ndim) != 0)
            return tb_error_set(TB_ERR_SHAPE, "residual must have the output's shape");
    }
    return TB_OK;
}

/* Output size of a window sweep, PyTorch's pooling_output_shape (ceil_mode drops a last window that
 * would start inside the right padding). */
static int64_t window_out(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
    int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
    if (span < 0)
        return 0;
    int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

tb_status tb_infer_conv2d(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_conv2d *c = &p->conv2d;
    const tb_value_info *x = in[0], *w = in[1];
    TB_TRY(expect_f32(x, "input"));
    TB_TRY(expect_f32(w, "weight"));
    TB_TRY(expect_ndim(x, 4, "input"));
    TB_TRY(expect_ndim(w, 4, "weight"));
    if (n != 2 + (c->has_bias ? 1 : 0) + (c->has_bn ? 4 : 0) + (c->has_residual ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_bias/has_bn/has_residual", n);
    for (int i = 0; i < 2; i++)
        if (c->stride[i] < 1 || c->dilation[i] < 1 || c->padding[i] < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "bad stride/padding/dilation");
    if (c->groups < 1 || x->shape[1] != w->shape[1] * c->groups || w->shape[0] % c->groups != 0)
        return tb_error_set(TB_ERR_SHAPE, "input channels %lld do not match weight %lld x groups %lld",
                            (long long)x->shape[1], (long long)w->shape[1], (long long)c->groups);
    if (c->activation < 0 || c->activation >= TB_ACTIVATION_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown activation %lld", (long long)c->activation);
    int64_t shape[4] = {x->shape[0], w->shape[0],
                        window_out(x->shape[2], w->shape[2], c->padding[0], c->stride[0], c->dilation[0], false),
                        window_out(x->shape[3], w->shape[3], c->padding[1], c->stride[1], c->dilation[1], false)};
    if (shape[2] < 1 || shape[3] < 1)
        return tb_error_set(TB_ERR_SHAPE, "the kernel is larger than the padded input");
    tb_info_contiguous(out, TB_F32, 4, shape);
    int vectors = (c->has_bias ? 1 : 0) + (c->has_bn ? 4 : 0);
    for (int i = 2; i < 2 + vectors; i++) {
        TB_TRY(expect_f32(in[i], "bias/batch norm parameter"));
        TB_TRY(expect_vector(in[i], w->shape[0], "bias/batch norm parameter"));
    }
    if (c->has_residual) {
        const tb_value_info *r = in[n - 1];
        TB_TRY(expect_f32(r, "residual"));
        if (r->ndim != 4 || memcmp(r->shape, shape, sizeof shape) != 0)
            return tb_error_set(TB_ERR_SHAPE, "residual must have the output's shape");
    }
    return TB_OK;
}

static tb_status pool_shape(const tb_params_pool *p, const tb_value_info *x, bool max_pool, int64_t *oh, int64_t *ow) {
    TB_TRY(expect_float(x, "input"));
    if (x->ndim != 4 && x->ndim != 3)
        return tb_error_set(TB_ERR_SHAPE, "input must be [N, C, H, W] or [C, H, W]");
    for (int i = 0; i < 2; i++) {
        int64_t dilation = max_pool ? p->dilation[i] : 1;
        if (p->kernel[i] < 1 || p->stride[i] < 1 || dilation < 1 || p->padding[i] < 0 || p->padding[i] * 2 > p->kernel[i])
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "bad kernel/stride/padding/dilation");
    }
    int h = x->ndim - 2;
    *oh = window_out(x->shape[h], p->kernel[0], p->padding[0], p->stride[0], max_pool ? p->dilation[0] : 1, p->ceil_mode);
    *ow = window_out(x->shape[h + 1], p->kernel[1], p->padding[1], p->stride[1], max_pool ? p->dilation[1] : 1,
                     p->ceil_mode);
    if (*oh < 1 || *ow < 1)
        return tb_error_set(TB_ERR_SHAPE, "the output would be empty");
    return TB_OK;
}

static void pooled(tb_value_info *out, const tb_value_info *x, int64_t oh, int64_t ow, tb_dtype dtype) {
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 2] = oh;
    shape[x->ndim - 1] = ow;
    tb_info_contiguous(out, dtype, x->ndim, shape);
}

tb_status tb_infer_max_pool2d(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int64_t oh = 0, ow = 0;
    TB_TRY(pool_shape(&p->pool, in[0], true, &oh, &ow));
    pooled(&out[0], in[0], oh, ow, in[0]->dtype);
    pooled(&out[1], in[0], oh, ow, TB_I64);
    return TB_OK;
}

tb_status tb_infer_avg_pool2d(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int64_t oh = 0, ow = 0;
    TB_TRY(pool_shape(&p->pool, in[0], false, &oh, &ow));
    pooled(out, in[0], oh, ow, in[0]->dtype);
    return TB_OK;
}

tb_status tb_infer_adaptive_pool(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "input"));
    if (in[0]->ndim != 4 && in[0]->ndim != 3)
        return tb_error_set(TB_ERR_SHAPE, "input must be [N, C, H, W] or [C, H, W]");
    if (p->adaptive_pool.output_size[0] < 1 || p->adaptive_pool.output_size[1] < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "output size must be >= 1");
    pooled(out, in[0], p->adaptive_pool.output_size[0], p->adaptive_pool.output_size[1], in[0]->dtype);
    return TB_OK;
}

tb_status tb_infer_embedding(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *w = in[0], *idx = in[1];
    TB_TRY(expect_float(w, "weight"));
    TB_TRY(expect_ndim(w, 2, "weight"));
    if (idx->dtype != TB_I64 && idx->dtype != TB_I32)
        return tb_error_set(TB_ERR_DTYPE, "indices must be int64 or int32, got %s", tb_dtype_name(idx->dtype));
    if (idx->ndim + 1 > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "indices have too many dims");
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = w->shape[1];
    tb_info_contiguous(out, w->dtype, idx->ndim + 1, shape);
    return TB_OK;
}

tb_status tb_infer_attention(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_attention *a = &p->attention;
    const tb_value_info *q = in[0], *k = in[1], *v = in[2];
    TB_TRY(expect_f32(q, "query"));
    TB_TRY(expect_f32(k, "key"));
    TB_TRY(expect_f32(v, "value"));
    int nd = q->ndim;
    if ((nd != 3 && nd != 4) || k->ndim != nd || v->ndim != nd)
        return tb_error_set(TB_ERR_SHAPE, "query/key/value must all be 3-D or 4-D");
    if (n != 3 + (a->has_mask ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_mask", n);
    if (q->shape[0] != k->shape[0] || k->shape[0] != v->shape[0] || q->shape[nd - 1] != k->shape[nd - 1] ||
        k->shape[nd - 2] != v->shape[nd - 2])
        return tb_error_set(TB_ERR_SHAPE, "query/key/value shapes do not agree");
    if (nd == 4) {
        int64_t hq = q->shape[1], hk = k->shape[1];
        if (hk != v->shape[1] || hk < 1 || (hq != hk && (!a->enable_gqa || hq % hk != 0)))
            return tb_error_set(TB_ERR_SHAPE, "query heads %lld and key/value heads %lld do not agree", (long long)hq,
                                (long long)hk);
    }
    int64_t shape[4];
    memcpy(shape, q->shape, sizeof(int64_t) * (size_t)nd);
    shape[nd - 1] = v->shape[nd - 1];
    tb_info_contiguous(out, TB_F32, nd, shape);
    bool has_layout = false;
    for (int d = 0; d < 4; d++)
        has_layout |= a->layout[d] != 0;
    if (has_layout) {
        /* physical order layout[0] (outermost) .. layout[nd - 1] (innermost, must be the last dim) */
        int seen = 0;
        int64_t stride = 1;
        for (int i = nd - 1; i >= 0; i--) {
            int64_t d = a->layout[i];
            if (d < 0 || d >= nd || (seen & (1 << d)))
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "layout is not a permutation of the output dims");
            seen |= 1 << d;
            out->strides[d] = stride;
            stride *= shape[d];
        }
        if (out->strides[nd - 1] != 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "layout must keep the last dim innermost");
    }
    int64_t lse_shape[3] = {q->shape[0], q->shape[1], nd == 4 ? q->shape[2] : 0};
    tb_info_contiguous(&out[1], TB_F32, nd - 1, lse_shape);
    if (a->has_mask) {
        const tb_value_info *m = in[3];
        if (m->dtype != TB_BOOL && m->dtype != TB_F32)
            return tb_error_set(TB_ERR_DTYPE, "mask must be bool or float32, got %s", tb_dtype_name(m->dtype));
        int64_t scores[4] = {nd == 4 ? q->shape[0] : 1, nd == 4 ? q->shape[1] : q->shape[0], q->shape[nd - 2],
                             k->shape[nd - 2]};
        int bn;
        int64_t b[TB_MAX_DIMS];
        TB_TRY(tb_broadcast_shapes(4, scores, m->ndim, m->shape, &bn, b));
        if (bn != 4 || memcmp(b, scores, sizeof scores) != 0)
            return tb_error_set(TB_ERR_SHAPE, "mask does not broadcast to the attention scores");
    }
    return TB_OK;
}

static bool same_shape(const tb_value_info *a, const tb_value_info *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

tb_status tb_infer_attention_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    /* grad_out, q, k, v, out, lse, [mask]: the forward's own checks on q, k, v, mask */
    const tb_value_info *forward_in[4] = {in[1], in[2], in[3], n > 6 ? in[6] : NULL};
    tb_value_info forward_out[2];
    tb_params_attention plain = p->attention;
    memset(plain.layout, 0, sizeof plain.layout);
    tb_graph_params forward_params;
    memset(&forward_params, 0, sizeof forward_params);
    forward_params.attention = plain;
    TB_TRY(tb_infer_attention(&forward_params, n - 3, forward_in, forward_out));
    const tb_value_info *grad = in[0], *o = in[4], *lse = in[5];
    TB_TRY(expect_f32(grad, "grad_out"));
    TB_TRY(expect_f32(o, "out"));
    TB_TRY(expect_f32(lse, "logsumexp"));
    if (!same_shape(grad, &forward_out[0]) || !same_shape(o, &forward_out[0]))
        return tb_error_set(TB_ERR_SHAPE, "grad_out and out must have the attention output's shape");
    if (!same_shape(lse, &forward_out[1]))
        return tb_error_set(TB_ERR_SHAPE, "logsumexp must be [B, H, T] of the query");
    for (int i = 0; i < 3; i++)
        like(&out[i], in[1 + i], TB_F32);
    return TB_OK;
}

tb_status tb_infer_cat(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *first = in[0];
    int dim;
    TB_TRY(tb_normalize_dim(p->cat.dim, first->ndim, &dim));
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        if (in[i]->dtype != first->dtype || in[i]->ndim != first->ndim)
            return tb_error_set(TB_ERR_SHAPE, "input %d differs in dtype or rank from input 0", i);
        for (int d = 0; d < first->ndim; d++)
            if (d != dim && in[i]->shape[d] != first->shape[d])
                return tb_error_set(TB_ERR_SHAPE, "input %d differs from input 0 in dim %d", i, d);
        shape[dim] += in[i]->shape[dim];
    }
    tb_info_contiguous(out, first->dtype, first->ndim, shape);
    return TB_OK;
}

tb_status tb_infer_conv2d_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *g = in[0], *x = in[1], *w = in[2];
    TB_TRY(expect_float(g, "grad"));
    TB_TRY(expect_ndim(x, 4, "input"));
    TB_TRY(expect_ndim(w, 4, "weight"));
    like(&out[0], x, x->dtype);
    like(&out[1], w, w->dtype);
    int64_t channels[1] = {w->shape[0]};
    tb_info_contiguous(&out[2], w->dtype, 1, channels);
    return TB_OK;
}

tb_status tb_infer_like_input1(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "grad"));
    like(out, in[1], in[1]->dtype);
    return TB_OK;
}

tb_status tb_infer_batch_norm_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_batch_norm_backward *b = &p->batch_norm_backward;
    const tb_value_info *x = in[1];
    TB_TRY(expect_float(in[0], "grad"));
    if (n != 2 + (b->has_weight ? 1 : 0) + (b->has_running ? 2 : 0) + (b->has_save ? 2 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_running/has_save", n);
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "input must be [N, C, ...]");
    like(&out[0], x, x->dtype);
    int64_t channels[1] = {x->shape[1]};
    tb_info_contiguous(&out[1], x->dtype, 1, channels);
    tb_info_contiguous(&out[2], x->dtype, 1, channels);
    return TB_OK;
}

tb_status tb_infer_layer_norm_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_layer_norm_backward *b = &p->layer_norm_backward;
    const tb_value_info *x = in[1];
    TB_TRY(expect_float(in[0], "grad"));
    if (n != 4 + (b->has_weight ? 1 : 0) + (b->has_bias ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight/has_bias", n);
    if (b->normalized_ndim < 1 || b->normalized_ndim > x->ndim)
        return tb_error_set(TB_ERR_SHAPE, "normalized_ndim %lld for a %d-D input", (long long)b->normalized_ndim, x->ndim);
    like(&out[0], x, x->dtype);
    int nn = (int)b->normalized_ndim;
    tb_info_contiguous(&out[1], x->dtype, nn, x->shape + x->ndim - nn);
    tb_info_contiguous(&out[2], x->dtype, nn, x->shape + x->ndim - nn);
    return TB_OK;
}

tb_status tb_infer_group_norm_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[1];
    TB_TRY(expect_float(in[0], "grad"));
    if (n != 4 + (p->group_norm_backward.has_weight ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight", n);
    if (x->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "input must be [N, C, ...]");
    like(&out[0], x, x->dtype);
    int64_t channels[1] = {x->shape[1]};
    tb_info_contiguous(&out[1], x->dtype, 1, channels);
    tb_info_contiguous(&out[2], x->dtype, 1, channels);
    return TB_OK;
}

tb_status tb_infer_embedding_backward(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *g = in[0];
    TB_TRY(expect_float(g, "grad"));
    if (g->ndim < 1 || p->embedding_backward.num_weights < 0)
        return tb_error_set(TB_ERR_SHAPE, "bad grad or num_weights");
    int64_t shape[2] = {p->embedding_backward.num_weights, g->shape[g->ndim - 1]};
    tb_info_contiguous(out, g->dtype, 2, shape);
    return TB_OK;
}

tb_status tb_infer_nll_loss(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *t = in[1];
    TB_TRY(expect_float(x, "input"));
    if (n != 2 + (p->loss.has_weight ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%d inputs do not match has_weight", n);
    if (p->loss.reduction == 0)
        like(&out[0], t, x->dtype);
    else
        scalar_info(&out[0], x->dtype);
    scalar_info(&out[1], x->dtype);
    return TB_OK;
}

tb_status tb_infer_loss(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    TB_TRY(expect_float(in[0], "input"));
    if (p->loss.reduction < 0 || p->loss.reduction > 2)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown reduction %lld", (long long)p->loss.reduction);
    if (p->loss.reduction == 0)
        return broadcast(2, in, out, in[0]->dtype);
    scalar_info(out, in[0]->dtype);
    return TB_OK;
}
