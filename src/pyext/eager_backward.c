/* The backward formulas of turbo_torch's autograd nodes, one case per node kind: given the gradient
 * of a node's output, the gradients of its inputs (before summing down broadcast dims and casting to
 * each input's dtype, which the engine does). Everything here is tb_tensor-level C. */
#include "eager.h"

#include <math.h>

#include "torchburn/alloc.h"

/* Shapes g (reduced over `mask` without keepdim) back to x's rank with size-1 dims, then expands. */
static tb_status expand_reduced(const tb_tensor *g, uint32_t mask, int keepdim, int ndim, const int64_t *shape,
                                tb_tensor *out) {
    int64_t kept[TB_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        kept[d] = (mask == 0 || (mask >> d & 1)) ? 1 : shape[d];
    tb_tensor r;
    TB_TRY(tb_tensor_reshape(g, ndim, kept, &r));
    tb_status status = tb_tensor_expand(&r, ndim, shape, out);
    tb_tensor_release(&r);
    (void)keepdim;
    return status;
}

static tb_status binary(int op, const tb_tensor *a, const tb_tensor *b, tb_tensor *out) {
    tb_dtype d = tb_promote_types(a->dtype, b->dtype);
    memset(out, 0, sizeof *out);
    return tb_eager_binary((tb_pw_binary)op, (tb_eager_operand){.tensor = a}, (tb_eager_operand){.tensor = b}, NULL,
                           tb_pw_binary_compute_dtype((tb_pw_binary)op, d, TB_F32),
                           tb_pw_binary_result_dtype((tb_pw_binary)op, d, TB_F32), out);
}

static tb_status binary_scalar(int op, const tb_tensor *a, double s, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_dtype d = tb_pw_binary_result_dtype((tb_pw_binary)op, a->dtype, TB_F32);
    return tb_eager_binary((tb_pw_binary)op, (tb_eager_operand){.tensor = a}, (tb_eager_operand){.f = s, .i = (int64_t)s},
                           NULL, tb_pw_binary_compute_dtype((tb_pw_binary)op, a->dtype, TB_F32), d, out);
}

static tb_status zeros_like_shape(tb_dtype dtype, int ndim, const int64_t *shape, tb_tensor *out) {
    return tb_eager_full(dtype, ndim, shape, 0.0, out);
}

/* The transpose of the last two dims (a view). */
static tb_status mT(const tb_tensor *x, tb_tensor *out) { return tb_tensor_transpose(x, -1, -2, out); }

static tb_status matmul_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    const tb_tensor *a = &node->saved[0].tensor, *b = &node->saved[1].tensor;
    tb_tensor a2, b2, g2;
    /* lift vectors: a [K] -> [1, K], b [K] -> [K, 1], g accordingly */
    int av = a->ndim == 1, bv = b->ndim == 1;
    TB_TRY(av ? tb_tensor_unsqueeze(a, 0, &a2) : (tb_tensor_retain(a, &a2), TB_OK));
    TB_TRY(bv ? tb_tensor_unsqueeze(b, -1, &b2) : (tb_tensor_retain(b, &b2), TB_OK));
    tb_tensor gt = {0};
    tb_status status = TB_OK;
    if (av && bv) {
        status = tb_tensor_reshape(g, 2, (int64_t[]){1, 1}, &g2);
    } else if (av) {
        status = tb_tensor_unsqueeze(g, -2, &g2);
    } else if (bv) {
        status = tb_tensor_unsqueeze(g, -1, &g2);
    } else {
        tb_tensor_retain(g, &g2);
    }
    if (status == TB_OK && node->edges[0]) {
        tb_tensor bt;
        status = mT(&b2, &bt);
        if (status == TB_OK) {
            status = tb_eager_matmul(&g2, &bt, &gt);
            tb_tensor_release(&bt);
        }
        if (status == TB_OK) {
            status = tb_eager_sum_to(&gt, a2.ndim > gt.ndim ? gt.ndim : a2.ndim, a2.shape, &grads[0]);
            if (status == TB_OK && a2.ndim < gt.ndim) {
                tb_tensor_release(&grads[0]);
                status = tb_eager_sum_to(&gt, a2.ndim, a2.shape, &grads[0]);
            }
            tb_tensor_release(&gt);
        }
        if (status == TB_OK && av) {
            tb_tensor v;
            status = tb_tensor_reshape(&grads[0], 1, a->shape, &v);
            tb_tensor_release(&grads[0]);
            grads[0] = v;
        }
    }
    if (status == TB_OK && node->edges[1]) {
        tb_tensor at;
        status = mT(&a2, &at);
        if (status == TB_OK) {
            status = tb_eager_matmul(&at, &g2, &gt);
            tb_tensor_release(&at);
        }
        if (status == TB_OK) {
            status = tb_eager_sum_to(&gt, b2.ndim, b2.shape, &grads[1]);
            tb_tensor_release(&gt);
        }
        if (status == TB_OK && bv) {
            tb_tensor v;
            status = tb_tensor_reshape(&grads[1], 1, b->shape, &v);
            tb_tensor_release(&grads[1]);
            grads[1] = v;
        }
    }
    tb_tensor_release(&a2);
    tb_tensor_release(&b2);
    tb_tensor_release(&g2);
    return status;
}

static tb_status reduce_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    uint32_t mask = (uint32_t)node->ints[0];
    int keepdim = (int)node->ints[1];
    int ndim = node->in_ndim[0];
    const int64_t *shape = node->in_shape[0];
    tb_tensor ge;
    TB_TRY(expand_reduced(g, mask, keepdim, ndim, shape, &ge));
    tb_status status = TB_OK;
    const tb_tensor *x = &node->saved[0].tensor, *y = &node->saved[1].tensor;
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        if (mask == 0 || (mask >> d & 1))
            count *= shape[d];
    switch (node->op) {
    case TB_EAGER_REDUCE_SUM: case TB_EAGER_REDUCE_NANSUM:
        if (node->op == TB_EAGER_REDUCE_NANSUM) {
            tb_tensor isnan = {0}, zero = {0};
            status = tb_eager_unary(TB_PW_ISNAN, x, NULL, x->dtype, TB_BOOL, &isnan);
            if (status == TB_OK)
                status = tb_eager_where(&isnan, (tb_eager_operand){.f = 0}, (tb_eager_operand){.tensor = &ge}, g->dtype, &grads[0]);
            tb_tensor_release(&isnan);
            tb_tensor_release(&zero);
        } else {
            status = tb_tensor_contiguous(&ge, g->dtype, &grads[0]);
        }
        break;
    case TB_EAGER_REDUCE_MEAN: status = binary_scalar(TB_PWB_DIV, &ge, (double)count, &grads[0]); break;
    case TB_EAGER_REDUCE_PROD: status = tb_eager_prod_backward(x, mask, &ge, &grads[0]); break;
    case TB_EAGER_REDUCE_AMAX: case TB_EAGER_REDUCE_AMIN: {
        /* ties share the gradient evenly */
        tb_tensor ye, is_extreme = {0}, hits = {0}, counts = {0}, counts_e, share = {0};
        status = expand_reduced(y, mask, keepdim, ndim, shape, &ye);
        if (status == TB_OK) {
            status = binary(TB_PWB_EQ, x, &ye, &is_extreme);
            tb_tensor_release(&ye);
        }
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_POSITIVE, &is_extreme, NULL, TB_BOOL, g->dtype, &hits);
        if (status == TB_OK)
            status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, &hits, mask, true, g->dtype, &counts);
        if (status == TB_OK) {
            status = tb_tensor_expand(&counts, ndim, shape, &counts_e);
            if (status == TB_OK) {
                status = binary(TB_PWB_DIV, &hits, &counts_e, &share);
                tb_tensor_release(&counts_e);
            }
        }
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &ge, &share, &grads[0]);
        tb_tensor_release(&is_extreme);
        tb_tensor_release(&hits);
        tb_tensor_release(&counts);
        tb_tensor_release(&share);
        break;
    }
    case TB_EAGER_REDUCE_LOGSUMEXP: {
        tb_tensor ye, diff = {0}, e = {0};
        status = expand_reduced(y, mask, keepdim, ndim, shape, &ye);
        if (status == TB_OK) {
            status = binary(TB_PWB_SUB, x, &ye, &diff);
            tb_tensor_release(&ye);
        }
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_EXP, &diff, NULL, diff.dtype, diff.dtype, &e);
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &ge, &e, &grads[0]);
        tb_tensor_release(&diff);
        tb_tensor_release(&e);
        break;
    }
    default: status = tb_error_set(TB_ERR_UNSUPPORTED, "the derivative of %s is not implemented", node->name);
    }
    tb_tensor_release(&ge);
    return status;
}

/* d var / dx = 2 (x - mean) / (N - correction); std: divided by 2 std. */
static tb_status var_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    uint32_t mask = (uint32_t)node->ints[0];
    int ndim = node->in_ndim[0];
    const int64_t *shape = node->in_shape[0];
    const tb_tensor *x = &node->saved[0].tensor, *y = &node->saved[1].tensor;
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        if (mask == 0 || (mask >> d & 1))
            count *= shape[d];
    tb_tensor mean = {0}, centered = {0}, scaled = {0}, ge, factor = {0}, ye;
    tb_status status = tb_eager_reduce(TB_EAGER_REDUCE_MEAN, x, mask, true, x->dtype, &mean);
    if (status == TB_OK)
        status = binary(TB_PWB_SUB, x, &mean, &centered);
    double denom = (double)count - node->params.alpha;
    if (status == TB_OK)
        status = binary_scalar(TB_PWB_MUL, &centered, 2.0 / denom, &scaled); /* N - c may be negative, as in torch */
    if (status == TB_OK)
        status = expand_reduced(g, mask, 0, ndim, shape, &ge);
    if (status == TB_OK) {
        if (node->ints[2]) { /* std: g / (2 std) */
            status = expand_reduced(y, mask, 0, ndim, shape, &ye);
            if (status == TB_OK) {
                tb_tensor twice = {0};
                status = binary_scalar(TB_PWB_MUL, &ye, 2.0, &twice);
                if (status == TB_OK)
                    status = binary(TB_PWB_DIV, &ge, &twice, &factor);
                tb_tensor_release(&twice);
                tb_tensor_release(&ye);
            }
        } else {
            tb_tensor_retain(&ge, &factor);
        }
        tb_tensor_release(&ge);
    }
    if (status == TB_OK)
        status = binary(TB_PWB_MUL, &factor, &scaled, &grads[0]);
    tb_tensor_release(&mean);
    tb_tensor_release(&centered);
    tb_tensor_release(&scaled);
    tb_tensor_release(&factor);
    return status;
}

static tb_status norm_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    uint32_t mask = (uint32_t)node->ints[0];
    int ndim = node->in_ndim[0];
    const int64_t *shape = node->in_shape[0];
    const tb_tensor *x = &node->saved[0].tensor, *y = &node->saved[1].tensor;
    double p = node->params.alpha;
    tb_tensor ge, ye, sign = {0}, absx = {0}, t1 = {0}, t2 = {0}, t3 = {0};
    TB_TRY(expand_reduced(g, mask, 0, ndim, shape, &ge));
    tb_status status = expand_reduced(y, mask, 0, ndim, shape, &ye);
    if (status == TB_OK)
        status = tb_eager_unary(TB_PW_SIGN, x, NULL, x->dtype, x->dtype, &sign);
    if (status == TB_OK && p == 1) {
        status = binary(TB_PWB_MUL, &ge, &sign, &grads[0]);
    } else if (status == TB_OK && p == 2) {
        /* x / norm, 0 where norm is 0 */
        status = binary(TB_PWB_DIV, x, &ye, &t1);
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_NAN_TO_NUM, &t1, &(tb_pw_params){0, -INFINITY, INFINITY}, t1.dtype, t1.dtype, &t2);
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &ge, &t2, &grads[0]);
    } else if (status == TB_OK && isinf(p)) {
        tb_tensor eq = {0}, hits = {0}, counts = {0}, ce;
        status = tb_eager_unary(TB_PW_ABS, x, NULL, x->dtype, x->dtype, &absx);
        if (status == TB_OK)
            status = binary(TB_PWB_EQ, &absx, &ye, &eq);
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_POSITIVE, &eq, NULL, TB_BOOL, g->dtype, &hits);
        if (status == TB_OK)
            status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, &hits, mask, true, g->dtype, &counts);
        if (status == TB_OK) {
            status = tb_tensor_expand(&counts, ndim, shape, &ce);
            if (status == TB_OK) {
                status = binary(TB_PWB_DIV, &hits, &ce, &t1);
                tb_tensor_release(&ce);
            }
        }
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &t1, &sign, &t2);
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &ge, &t2, &grads[0]);
        tb_tensor_release(&eq);
        tb_tensor_release(&hits);
        tb_tensor_release(&counts);
    } else if (status == TB_OK) {
        /* sign(x) |x|^(p-1) / norm^(p-1) */
        status = tb_eager_unary(TB_PW_ABS, x, NULL, x->dtype, x->dtype, &absx);
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_POW_SCALAR, &absx, &(tb_pw_params){p - 1, 0, 0}, x->dtype, x->dtype, &t1);
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_POW_SCALAR, &ye, &(tb_pw_params){p - 1, 0, 0}, ye.dtype, ye.dtype, &t2);
        if (status == TB_OK) {
            tb_tensor q = {0};
            status = binary(TB_PWB_DIV, &t1, &t2, &q);
            if (status == TB_OK)
                status = binary(TB_PWB_MUL, &q, &sign, &t3);
            tb_tensor_release(&q);
        }
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &ge, &t3, &grads[0]);
    }
    tb_tensor_release(&ge);
    tb_tensor_release(&ye);
    tb_tensor_release(&sign);
    tb_tensor_release(&absx);
    tb_tensor_release(&t1);
    tb_tensor_release(&t2);
    tb_tensor_release(&t3);
    return status;
}

/* values of max/min along dim: the gradient goes to the selected index. */
static tb_status max_dim_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    int ndim = node->in_ndim[0];
    const int64_t *shape = node->in_shape[0];
    int dim = (int)node->ints[0];
    const tb_tensor *indices = &node->saved[0].tensor;
    TB_TRY(zeros_like_shape(g->dtype, ndim, shape, &grads[0]));
    if (ndim == 0)
        return tb_tensor_copy(&grads[0], g);
    /* iterate over the output positions */
    int64_t outer = 1, inner = 1, len = shape[dim];
    for (int d = 0; d < dim; d++)
        outer *= shape[d];
    for (int d = dim + 1; d < ndim; d++)
        inner *= shape[d];
    tb_tensor gc, ic;
    TB_TRY(tb_tensor_contiguous(g, TB_F64, &gc));
    tb_status status = tb_tensor_contiguous(indices, TB_I64, &ic);
    if (status != TB_OK) {
        tb_tensor_release(&gc);
        return status;
    }
    tb_tensor acc;
    status = tb_eager_full(TB_F64, ndim, shape, 0.0, &acc);
    if (status == TB_OK) {
        const double *gv = tb_tensor_data(&gc);
        const int64_t *iv = tb_tensor_data(&ic);
        double *av = tb_tensor_data(&acc);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = iv[o * inner + i];
                av[(o * len + k) * inner + i] += gv[o * inner + i];
            }
        status = tb_tensor_copy(&grads[0], &acc);
        tb_tensor_release(&acc);
    }
    tb_tensor_release(&gc);
    tb_tensor_release(&ic);
    return status;
}

/* Moves dim last and makes a contiguous f64 copy ([rows, len]); order receives the permutation. */
static tb_status rows_along(const tb_tensor *t, int dim, int64_t *order, tb_tensor *out) {
    int k = 0;
    for (int i = 0; i < t->ndim; i++)
        if (i != dim)
            order[k++] = i;
    if (t->ndim)
        order[k++] = dim;
    tb_tensor permuted;
    TB_TRY(tb_tensor_permute(t, t->ndim, order, &permuted));
    tb_status status = tb_tensor_contiguous(&permuted, TB_F64, out);
    tb_tensor_release(&permuted);
    return status;
}

/* cumsum: the reversed cumulative sum of g. cumprod: dx_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k,
 * evaluated directly (O(len^2)) on rows with a zero and as sum_{j >= i} g_j y_j / x_i elsewhere. */
static tb_status cumulative_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    int ndim = node->in_ndim[0];
    int dim = (int)node->ints[0];
    int64_t order[TB_MAX_DIMS], inverse[TB_MAX_DIMS];
    tb_tensor gw = {0}, xw = {0}, out = {0};
    tb_status status = rows_along(g, dim, order, &gw);
    if (status == TB_OK && node->op)
        status = rows_along(&node->saved[0].tensor, dim, order, &xw);
    if (status == TB_OK)
        status = tb_tensor_empty(TB_F64, gw.ndim, gw.shape, 0, &out);
    if (status == TB_OK) {
        int64_t len = ndim ? node->in_shape[0][dim] : 1, n = tb_tensor_numel(&gw), rows = len ? n / len : 0;
        const double *gv = tb_tensor_data(&gw);
        const double *xv = node->op ? tb_tensor_data(&xw) : NULL;
        double *o = tb_tensor_data(&out);
        for (int64_t r = 0; r < rows; r++) {
            const double *gr = gv + r * len;
            double *orow = o + r * len;
            if (!node->op) {
                double acc = 0;
                for (int64_t i = len - 1; i >= 0; i--)
                    orow[i] = acc += gr[i];
                continue;
            }
            const double *xr = xv + r * len;
            int has_zero = 0;
            for (int64_t i = 0; i < len; i++)
                has_zero |= xr[i] == 0;
            if (!has_zero) {
                /* sum_{j >= i} g_j y_j, divided by x_i */
                double y = 1, acc = 0;
                for (int64_t i = 0; i < len; i++)
                    orow[i] = (y *= xr[i]) * gr[i];
                for (int64_t i = len - 1; i >= 0; i--) {
                    acc += orow[i];
                    orow[i] = acc / xr[i];
                }
                continue;
            }
            double prefix = 1;
            for (int64_t i = 0; i < len; i++) {
                double q = prefix, acc = 0;
                for (int64_t j = i; j < len; j++) {
                    if (j > i)
                        q *= xr[j];
                    acc += gr[j] * q;
                }
                orow[i] = acc;
                prefix *= xr[i];
            }
        }
        for (int i = 0; i < ndim; i++)
            inverse[order[i]] = i;
        tb_tensor back;
        status = tb_tensor_permute(&out, ndim, inverse, &back);
        if (status == TB_OK) {
            status = tb_tensor_contiguous(&back, g->dtype, &grads[0]);
            tb_tensor_release(&back);
        }
    }
    tb_tensor_release(&gw);
    tb_tensor_release(&xw);
    tb_tensor_release(&out);
    return status;
}

/* softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g). */
static tb_status softmax_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    const tb_tensor *y = &node->saved[1].tensor;
    uint32_t mask = 1u << node->ints[0];
    tb_tensor t = {0}, s = {0}, d = {0}, e = {0};
    tb_status status;
    if (!node->ints[1]) {
        status = binary(TB_PWB_MUL, g, y, &t);
        if (status == TB_OK)
            status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, &t, mask, true, t.dtype, &s);
        if (status == TB_OK)
            status = binary(TB_PWB_SUB, g, &s, &d);
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, y, &d, &grads[0]);
    } else {
        status = tb_eager_reduce(TB_EAGER_REDUCE_SUM, g, mask, true, g->dtype, &s);
        if (status == TB_OK)
            status = tb_eager_unary(TB_PW_EXP, y, NULL, y->dtype, y->dtype, &e);
        if (status == TB_OK)
            status = binary(TB_PWB_MUL, &e, &s, &t);
        if (status == TB_OK)
            status = binary(TB_PWB_SUB, g, &t, &grads[0]);
    }
    tb_tensor_release(&t);
    tb_tensor_release(&s);
    tb_tensor_release(&d);
    tb_tensor_release(&e);
    return status;
}

/* zeros of the input's shape with g written into the view the forward took */
static tb_status scatter_into_view(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    TB_TRY(zeros_like_shape(g->dtype, node->in_ndim[0], node->in_shape[0], &grads[0]));
    tb_tensor view;
    tb_status status = node->kind == TT_NODE_SLICE
                           ? tb_tensor_slice(&grads[0], node->ints[0], node->ints[1], node->ints[2], node->ints[3], &view)
                           : tb_tensor_select(&grads[0], node->ints[0], node->ints[1], &view);
    if (status == TB_OK) {
        status = tb_tensor_copy(&view, g);
        tb_tensor_release(&view);
    }
    return status;
}

static tb_status cat_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    int64_t dim = node->ints[0], start = 0;
    for (int i = 0; i < node->n_edges; i++) {
        int64_t len = node->in_ndim[i] ? node->in_shape[i][dim] : 0;
        if (node->ints[1] && node->in_ndim[i] == 1 && node->in_shape[i][0] == 0)
            len = 0; /* legacy empty [0] inputs take no slice */
        if (node->edges[i]) {
            tb_tensor view;
            TB_TRY(tb_tensor_slice(g, dim, start, start + len, 1, &view));
            grads[i] = view;
        }
        start += len;
    }
    return TB_OK;
}

static tb_status flip_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    return tb_eager_flip(g, (uint32_t)node->ints[0], &grads[0]); /* flip is its own inverse */
}

tb_status tt_node_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
tb_status tt_nn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);
tb_status tt_rnn_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads);

tb_status tt_node_backward(tt_node *node, const tb_tensor *g, tb_tensor *grads) {
    switch (node->kind) {
    case TT_NODE_UNARY: {
        /* one of x (slot 0) and y (slot 1) is saved; the derivative formula ignores the other */
        const tb_tensor *saved = node->saved[0].present ? &node->saved[0].tensor : &node->saved[1].tensor;
        return tb_eager_unary_backward((tb_pw_unary)node->op, g, saved, saved, &node->params, &grads[0]);
    }
    case TT_NODE_BINARY: {
        for (int which = 0; which < 2; which++) {
            if (!node->edges[which])
                continue;
            tb_eager_operand a = node->saved[0].present ? (tb_eager_operand){.tensor = &node->saved[0].tensor}
                                                        : (tb_eager_operand){.f = node->scalars[0]};
            tb_eager_operand b = node->saved[1].present ? (tb_eager_operand){.tensor = &node->saved[1].tensor}
                                                        : (tb_eager_operand){.f = node->scalars[1]};
            const tb_tensor *y = node->saved[2].present ? &node->saved[2].tensor : NULL;
            TB_TRY(tb_eager_binary_backward((tb_pw_binary)node->op, which, g, a, b, y, &node->params, &grads[which]));
        }
        return TB_OK;
    }
    case TT_NODE_REDUCE: return reduce_backward(node, g, grads);
    case TT_NODE_VAR: return var_backward(node, g, grads);
    case TT_NODE_NORM: return norm_backward(node, g, grads);
    case TT_NODE_MAX_DIM: return max_dim_backward(node, g, grads);
    case TT_NODE_CUMULATIVE: return cumulative_backward(node, g, grads);
    case TT_NODE_MATMUL: return matmul_backward(node, g, grads);
    case TT_NODE_SOFTMAX: return softmax_backward(node, g, grads);
    case TT_NODE_VIEW: return tb_tensor_reshape(g, node->in_ndim[0], node->in_shape[0], &grads[0]);
    case TT_NODE_EXPAND: case TT_NODE_CAST:
        /* sum broadcast dims / cast back: the engine's sum_to and cast do it */
        tb_tensor_retain(g, &grads[0]);
        return TB_OK;
    case TT_NODE_PERMUTE: {
        int64_t inverse[TB_MAX_DIMS];
        for (int d = 0; d < g->ndim; d++)
            inverse[node->ints[d]] = d;
        return tb_tensor_permute(g, g->ndim, inverse, &grads[0]);
    }
    case TT_NODE_SLICE: case TT_NODE_SELECT: return scatter_into_view(node, g, grads);
    case TT_NODE_CAT: return cat_backward(node, g, grads);
    case TT_NODE_FLIP: return flip_backward(node, g, grads);
    case TT_NODE_WHERE: case TT_NODE_MASKED_FILL: {
        /* saved[0]: the condition (True picks input 0) */
        const tb_tensor *cond = &node->saved[0].tensor;
        for (int which = 0; which < 2; which++) {
            if (!node->edges[which])
                continue;
            tb_eager_operand zero = {.f = 0};
            tb_eager_operand grad = {.tensor = g};
            TB_TRY(tb_eager_where(cond, which == 0 ? grad : zero, which == 0 ? zero : grad, g->dtype, &grads[which]));
        }
        return TB_OK;
    }
    case TT_NODE_NN: return tt_nn_backward(node, g, grads);
    case TT_NODE_RNN: return tt_rnn_backward(node, g, grads);
    case TT_NODE_INDEX: { /* index_select: add g's rows back at their indices */
        tb_tensor zeros;
        TB_TRY(zeros_like_shape(g->dtype, node->in_ndim[0], node->in_shape[0], &zeros));
        tb_status status = tb_eager_index_add(&zeros, node->ints[0], &node->saved[0].tensor, g, 1.0, &grads[0]);
        tb_tensor_release(&zeros);
        return status;
    }
    case TT_NODE_GATHER: {
        tb_tensor zeros;
        TB_TRY(zeros_like_shape(g->dtype, node->in_ndim[0], node->in_shape[0], &zeros));
        tb_status status = tb_eager_scatter(&zeros, node->ints[0], &node->saved[0].tensor, (tb_eager_operand){.tensor = g},
                                            1, &grads[0]);
        tb_tensor_release(&zeros);
        return status;
    }
    case TT_NODE_SCATTER: { /* ints[1]: reduce (0 replace, 1 add) */
        if (node->edges[0]) {
            if (node->ints[1] == 0)
                TB_TRY(tb_eager_scatter(g, node->ints[0], &node->saved[0].tensor, (tb_eager_operand){.f = 0}, 0, &grads[0]));
            else
                tb_tensor_retain(g, &grads[0]);
        }
        if (node->edges[1])
            TB_TRY(tb_eager_gather(g, node->ints[0], &node->saved[0].tensor, &grads[1]));
        return TB_OK;
    }
    case TT_NODE_INDEX_ADD: {
        if (node->edges[0])
            tb_tensor_retain(g, &grads[0]);
        if (node->edges[1]) {
            tb_tensor picked;
            TB_TRY(tb_eager_index_select(g, node->ints[0], &node->saved[0].tensor, &picked));
            tb_status status = binary_scalar(TB_PWB_MUL, &picked, node->params.alpha, &grads[1]);
            tb_tensor_release(&picked);
            return status;
        }
        return TB_OK;
    }
    default:
        return tb_error_set(TB_ERR_UNSUPPORTED, "the derivative of %s is not implemented", node->name);
    }
}
