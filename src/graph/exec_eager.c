/* Graph ops computed by the eager core (eager.h), so that one piece of code serves turbo_torch and the
 * compile backend: max/min along a dim with indices, sort, cumsum/cumprod/logcumsumexp, the reductions
 * of tb_eager_reduce (prod, all, any, ...), vector norms, gather, scatter, index_select, index_add,
 * flip, roll, tril/triu, advanced indexing (index, index_put), and pointwise ops on integer tensors
 * (exact, where the graph's elementwise programs compute in float32).
 *
 * Each op's shape inference follows PyTorch (errors name the bad input); its step views the planned
 * inputs as tensors, calls the eager function, and adopts the freshly allocated result as the
 * output's location (tb_exec_adopt casts when the eager core computed in a wider dtype). */
#include <string.h>

#include "graph/graph_internal.h"
#include "torchburn/eager.h"

typedef const tb_value_info *const *infos;

static bool is_integral(tb_dtype dtype) { return tb_dtype_category_of(dtype) == TB_CATEGORY_INTEGRAL; }

static tb_status expect_index(const tb_value_info *index, const char *op) {
    if (!is_integral(index->dtype))
        return tb_error_set(TB_ERR_DTYPE, "%s: index has dtype %s; expected an integer dtype", op,
                            tb_dtype_name(index->dtype));
    return TB_OK;
}

static tb_status check_dim(int64_t dim, const tb_value_info *x, int *out) {
    *out = 0;
    return x->ndim == 0 && (dim == 0 || dim == -1) ? TB_OK : tb_normalize_dim(dim, x->ndim, out);
}

/* ---- shape inference ---- */

tb_status tb_infer_max_dim(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int dim;
    TB_TRY(check_dim(p->max_dim.dim, in[0], &dim));
    if (in[0]->ndim > 0 && in[0]->shape[dim] == 0)
        return tb_error_set(TB_ERR_SHAPE, "%s: reduction dim %d has size 0", p->max_dim.is_max ? "max" : "min", dim);
    int64_t mask = in[0]->ndim > 0 ? 1ll << dim : 0;
    TB_TRY(tb_reduced_shape(in[0], mask, p->max_dim.keepdim, in[0]->dtype, &out[0]));
    if (in[0]->ndim == 0)
        tb_info_contiguous(&out[0], in[0]->dtype, 0, NULL);
    tb_info_contiguous(&out[1], TB_I64, out[0].ndim, out[0].shape);
    return TB_OK;
}

tb_status tb_infer_sort(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int dim;
    TB_TRY(check_dim(p->sort.dim, in[0], &dim));
    tb_info_contiguous(&out[0], in[0]->dtype, in[0]->ndim, in[0]->shape);
    tb_info_contiguous(&out[1], TB_I64, in[0]->ndim, in[0]->shape);
    return TB_OK;
}

tb_status tb_infer_scan(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int dim;
    TB_TRY(check_dim(p->scan.dim, in[0], &dim));
    if (!tb_dtype_valid((int)p->scan.dtype))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "invalid dtype %lld", (long long)p->scan.dtype);
    tb_info_contiguous(out, (tb_dtype)p->scan.dtype, in[0]->ndim, in[0]->shape);
    return TB_OK;
}

tb_status tb_infer_eager_reduce(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_eager_reduce *r = &p->eager_reduce;
    if (r->op < 0 || r->op >= TB_EAGER_REDUCE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unknown reduction %lld", (long long)r->op);
    if (!tb_dtype_valid((int)r->dtype))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "invalid dtype %lld", (long long)r->dtype);
    return tb_reduced_shape(in[0], r->dim_mask, r->keepdim, (tb_dtype)r->dtype, out);
}

tb_status tb_infer_gather(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *index = in[1];
    int dim;
    TB_TRY(check_dim(p->index.dim, x, &dim));
    TB_TRY(expect_index(index, "gather"));
    if (index->ndim != x->ndim && !(index->ndim <= 1 && x->ndim <= 1))
        return tb_error_set(TB_ERR_SHAPE, "gather: index has %d dims, the input %d", index->ndim, x->ndim);
    for (int d = 0; d < index->ndim && index->ndim == x->ndim; d++)
        if (d != dim && index->shape[d] > x->shape[d])
            return tb_error_set(TB_ERR_SHAPE, "gather: index size %lld exceeds the input's %lld in dim %d",
                                (long long)index->shape[d], (long long)x->shape[d], d);
    tb_info_contiguous(out, x->dtype, index->ndim, index->shape);
    return TB_OK;
}

tb_status tb_infer_scatter(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *index = in[1];
    int dim;
    TB_TRY(check_dim(p->index.dim, x, &dim));
    TB_TRY(expect_index(index, "scatter"));
    if (p->index.reduce < 0 || p->index.reduce > 4)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "scatter: unknown reduction %lld", (long long)p->index.reduce);
    if (n != 2 + (p->index.has_src ? 1 : 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "scatter: %d inputs do not match has_src", n);
    if (index->ndim != x->ndim || (n == 3 && in[2]->ndim != x->ndim))
        return tb_error_set(TB_ERR_SHAPE, "scatter: index and src must have the input's %d dims", x->ndim);
    tb_info_contiguous(out, x->dtype, x->ndim, x->shape);
    return TB_OK;
}

tb_status tb_infer_index_select(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *index = in[1];
    int dim;
    TB_TRY(check_dim(p->index.dim, x, &dim));
    TB_TRY(expect_index(index, "index_select"));
    if (index->ndim > 1)
        return tb_error_set(TB_ERR_SHAPE, "index_select: the index must be 0-D or 1-D, got %d dims", index->ndim);
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (x->ndim > 0)
        shape[dim] = index->ndim ? index->shape[0] : 1;
    tb_info_contiguous(out, x->dtype, x->ndim, shape);
    return TB_OK;
}

tb_status tb_infer_index_add(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *index = in[1], *source = in[2];
    int dim;
    TB_TRY(check_dim(p->index.dim, x, &dim));
    TB_TRY(expect_index(index, "index_add"));
    if (index->ndim > 1)
        return tb_error_set(TB_ERR_SHAPE, "index_add: the index must be 0-D or 1-D, got %d dims", index->ndim);
    int64_t count = index->ndim ? index->shape[0] : 1;
    bool fits = source->ndim == x->ndim;
    for (int d = 0; fits && d < x->ndim; d++)
        fits = source->shape[d] == (d == dim ? count : x->shape[d]);
    if (!fits && !(x->ndim == 0 && source->ndim <= 1))
        return tb_error_set(TB_ERR_SHAPE, "index_add: source must have the input's shape with %lld rows in dim %d",
                            (long long)count, dim);
    tb_info_contiguous(out, x->dtype, x->ndim, x->shape);
    return TB_OK;
}

tb_status tb_infer_rearrange(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0];
    if (x->ndim < 32 && x->ndim > 0 && p->rearrange.dim_mask >> x->ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "flip: dim mask 0x%llx names a dim past the input's %d",
                            (unsigned long long)p->rearrange.dim_mask, x->ndim);
    tb_info_contiguous(out, x->dtype, x->ndim, x->shape);
    return TB_OK;
}

tb_status tb_infer_triangle(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    if (in[0]->ndim < 2)
        return tb_error_set(TB_ERR_SHAPE, "%s: input tensor must have at least 2 dimensions, got %d",
                            p->triangle.upper ? "triu" : "tril", in[0]->ndim);
    tb_info_contiguous(out, in[0]->dtype, in[0]->ndim, in[0]->shape);
    return TB_OK;
}

/* The shape of x[indices] for the integer index values in[0..] of the dims in mask (PyTorch's
 * placement: the broadcast index shape where the first indexed dim was when they are adjacent, else
 * first); the same rule as tb_eager_index. */
static tb_status advanced_shape(const tb_value_info *x, int64_t mask, int count, infos indices, int *ndim,
                                int64_t *shape) {
    if (mask <= 0 || (x->ndim < 63 && mask >> x->ndim))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "index: index mask 0x%llx does not fit the input's %d dims",
                            (unsigned long long)mask, x->ndim);
    if (count != __builtin_popcountll((unsigned long long)mask))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "index: %d index inputs for %d indexed dims", count,
                            __builtin_popcountll((unsigned long long)mask));
    int bndim = 0;
    int64_t bshape[TB_MAX_DIMS] = {0};
    for (int k = 0; k < count; k++) {
        if (!is_integral(indices[k]->dtype))
            return tb_error_set(TB_ERR_DTYPE, "index: index %d has dtype %s; expected an integer dtype", k,
                                tb_dtype_name(indices[k]->dtype));
        if (k == 0) {
            bndim = indices[0]->ndim;
            memcpy(bshape, indices[0]->shape, sizeof bshape);
        } else if (tb_broadcast_shapes(bndim, bshape, indices[k]->ndim, indices[k]->shape, &bndim, bshape) != TB_OK) {
            return tb_error_set(TB_ERR_SHAPE, "index: shape mismatch: indexing tensors could not be broadcast together");
        }
    }
    int first = __builtin_ctzll((unsigned long long)mask), last = 63 - __builtin_clzll((unsigned long long)mask);
    bool adjacent = __builtin_popcountll((unsigned long long)mask) == last - first + 1;
    int r = 0;
    int64_t result[3 * TB_MAX_DIMS];
    if (adjacent)
        for (int d = 0; d < first; d++)
            result[r++] = x->shape[d];
    for (int d = 0; d < bndim; d++)
        result[r++] = bshape[d];
    for (int d = 0; d < x->ndim; d++)
        if (!(mask >> d & 1) && (!adjacent || d > last))
            result[r++] = x->shape[d];
    if (r > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "index: the result would have %d dims, more than %d", r, TB_MAX_DIMS);
    *ndim = r;
    memcpy(shape, result, sizeof(int64_t) * (size_t)r);
    return TB_OK;
}

tb_status tb_infer_index(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    TB_TRY(advanced_shape(in[0], p->advanced_index.index_mask, n - 1, in + 1, &ndim, shape));
    tb_info_contiguous(out, in[0]->dtype, ndim, shape);
    return TB_OK;
}

tb_status tb_infer_index_put(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_value_info *x = in[0], *values = in[1];
    int ndim, bndim;
    int64_t shape[TB_MAX_DIMS], broadcast[TB_MAX_DIMS];
    TB_TRY(advanced_shape(x, p->advanced_index.index_mask, n - 2, in + 2, &ndim, shape));
    if (values->ndim > ndim || tb_broadcast_shapes(ndim, shape, values->ndim, values->shape, &bndim, broadcast) != TB_OK ||
        bndim != ndim || memcmp(broadcast, shape, sizeof(int64_t) * (size_t)ndim))
        return tb_error_set(TB_ERR_SHAPE, "index_put: values of %d dims do not broadcast to the indexed shape", values->ndim);
    tb_info_contiguous(out, x->dtype, x->ndim, x->shape);
    return TB_OK;
}

tb_status tb_infer_eager_pointwise(const tb_graph_params *p, int n, infos in, tb_value_info *out) {
    const tb_params_pointwise *q = &p->pointwise;
    if (q->op < 0 || q->op >= (q->binary ? TB_PW_BINARY_COUNT : TB_PW_UNARY_COUNT))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "eager_pointwise: unknown op %lld", (long long)q->op);
    if (!tb_dtype_valid((int)q->dtype) || !tb_dtype_valid((int)q->compute_dtype))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "eager_pointwise: invalid dtype");
    if (n != (q->binary && q->scalar_side == 0 ? 2 : 1))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "eager_pointwise: %d inputs for a %s op", n,
                            q->binary ? (q->scalar_side ? "binary op with a scalar" : "binary") : "unary");
    int ndim = in[0]->ndim;
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, in[0]->shape, sizeof shape);
    if (n == 2 && tb_broadcast_shapes(in[0]->ndim, in[0]->shape, in[1]->ndim, in[1]->shape, &ndim, shape) != TB_OK)
        return tb_error_set(TB_ERR_SHAPE, "eager_pointwise: shapes do not broadcast");
    tb_info_contiguous(out, (tb_dtype)q->dtype, ndim, shape);
    return TB_OK;
}

/* ---- execution ---- */

/* The index list of INDEX / INDEX_PUT: one entry per dim up to the last indexed one, NULL where not
 * indexed; returns the entry count. */
static int index_list(int64_t mask, tb_tensor *indices, const tb_tensor **list) {
    int count = 0, k = 0;
    for (int d = 0; d < TB_MAX_DIMS && mask >> d; d++, count++)
        list[d] = mask >> d & 1 ? &indices[k++] : NULL;
    return count;
}

static tb_status exec_eager(const tb_exec_context *context, const tb_step *step) {
    enum { MAX = 10 };
    tb_storage storages[MAX];
    tb_tensor in[MAX];
    for (int i = 0; i < step->ninputs && i < MAX; i++)
        if (!tb_exec_tensor(context, step->inputs[i], &storages[i], &in[i]))
            return tb_error_set(TB_ERR_INTERNAL, "%s: input %d has no data", tb_graph_op_name(step->op), i);
    bool want[2];
    for (int o = 0; o < 2; o++)
        want[o] = o < step->noutputs && step->outputs[o] >= 0 && context->plan->locs[step->outputs[o]].base >= 0;
    tb_tensor out[2];
    memset(out, 0, sizeof out);
    const tb_graph_params *p = &step->params;
    tb_status status;
    switch (step->op) {
    case TB_OP_MAX_DIM:
        status = tb_eager_max_dim(p->max_dim.is_max != 0, &in[0], p->max_dim.dim, p->max_dim.keepdim != 0,
                                  want[0] ? &out[0] : NULL, want[1] ? &out[1] : NULL);
        break;
    case TB_OP_SORT:
        status = tb_eager_sort(&in[0], p->sort.dim, p->sort.descending != 0, &out[0], &out[1]);
        break;
    case TB_OP_SCAN:
        status = tb_eager_cumulative((tb_eager_scan_op)p->scan.op, &in[0], p->scan.dim, (tb_dtype)p->scan.dtype, &out[0]);
        break;
    case TB_OP_EAGER_REDUCE:
        status = tb_eager_reduce((tb_eager_reduce_op)p->eager_reduce.op, &in[0], (uint32_t)p->eager_reduce.dim_mask,
                                 p->eager_reduce.keepdim != 0, (tb_dtype)p->eager_reduce.dtype, &out[0]);
        break;
    case TB_OP_VECTOR_NORM:
        status = tb_eager_norm(&in[0], p->eager_reduce.p, (uint32_t)p->eager_reduce.dim_mask,
                               p->eager_reduce.keepdim != 0, (tb_dtype)p->eager_reduce.dtype, &out[0]);
        break;
    case TB_OP_GATHER:
        status = tb_eager_gather(&in[0], p->index.dim, &in[1], &out[0]);
        break;
    case TB_OP_SCATTER: {
        tb_eager_operand src = {p->index.has_src ? &in[2] : NULL, p->index.value, (int64_t)p->index.value};
        status = tb_eager_scatter(&in[0], p->index.dim, &in[1], src, (int)p->index.reduce, &out[0]);
        break;
    }
    case TB_OP_INDEX_SELECT:
        status = tb_eager_index_select(&in[0], p->index.dim, &in[1], &out[0]);
        break;
    case TB_OP_INDEX_ADD:
        status = tb_eager_index_add(&in[0], p->index.dim, &in[1], &in[2], p->index.alpha, &out[0]);
        break;
    case TB_OP_FLIP:
        status = tb_eager_flip(&in[0], (uint32_t)p->rearrange.dim_mask, &out[0]);
        break;
    case TB_OP_ROLL:
        status = tb_eager_roll(&in[0], p->rearrange.shifts, &out[0]);
        break;
    case TB_OP_TRIANGLE:
        status = tb_eager_triangle(&in[0], p->triangle.diagonal, p->triangle.upper != 0, &out[0]);
        break;
    case TB_OP_INDEX: {
        const tb_tensor *list[TB_MAX_DIMS];
        int count = index_list(p->advanced_index.index_mask, &in[1], list);
        status = tb_eager_index(&in[0], count, list, &out[0]);
        break;
    }
    case TB_OP_INDEX_PUT: {
        const tb_tensor *list[TB_MAX_DIMS];
        int count = index_list(p->advanced_index.index_mask, &in[2], list);
        status = tb_eager_index_put(&in[0], count, list, &in[1], p->advanced_index.accumulate != 0, &out[0]);
        break;
    }
    case TB_OP_EAGER_POINTWISE: {
        const tb_params_pointwise *q = &p->pointwise;
        tb_pw_params params = {.alpha = q->alpha, .lo = q->lo, .hi = q->hi};
        if (!q->binary) {
            status = tb_eager_unary((tb_pw_unary)q->op, &in[0], &params, (tb_dtype)q->compute_dtype, (tb_dtype)q->dtype,
                                    &out[0]);
            break;
        }
        tb_eager_operand scalar = {NULL, q->scalar, (int64_t)q->scalar}, first = {&in[0], 0, 0};
        tb_eager_operand second = q->scalar_side ? scalar : (tb_eager_operand){&in[1], 0, 0};
        status = tb_eager_binary((tb_pw_binary)q->op, q->scalar_side == 2 ? scalar : first,
                                 q->scalar_side == 2 ? first : second, &params, (tb_dtype)q->compute_dtype,
                                 (tb_dtype)q->dtype, &out[0]);
        break;
    }
    default:
        status = tb_error_set(TB_ERR_INTERNAL, "no eager lowering for %s", tb_graph_op_name(step->op));
    }
    for (int o = 0; o < step->noutputs && o < 2 && status == TB_OK; o++)
        if (want[o])
            status = tb_exec_adopt(context, step->outputs[o], &out[o]);
    tb_tensor_release(&out[0]);
    tb_tensor_release(&out[1]);
    return status;
}

tb_status tb_lower_eager(tb_planner *planner, int node) { return tb_lower_dynamic_step(planner, node, exec_eager); }
