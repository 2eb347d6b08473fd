/* Graph ops computed by the eager core (eager.h), so that one piece of code serves turbo_torch and the
 * compile backend: max/min along a dim with indices, sort, cumsum/cumprod, the reductions of
 * tb_eager_reduce (prod, all, any, ...), vector norms, gather, scatter, index_select and index_add.
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

/* ---- execution ---- */

static tb_status exec_eager(const tb_exec_context *context, const tb_step *step) {
    enum { MAX = 3 };
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
        status = tb_eager_cumulative(p->scan.is_prod != 0, &in[0], p->scan.dim, (tb_dtype)p->scan.dtype, &out[0]);
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
