/* Index ops of the eager layer over every dtype: index_select, index_add, gather, scatter (with
 * sum/prod/amax/amin reductions), nonzero, and advanced indexing (x[indices], index_put). Inputs are
 * made contiguous first; indices are int64 and checked against the indexed dim
 * (an error names the bad index, never an out-of-bounds access). */
#include <math.h>
#include <string.h>

#include "eager/eager_internal.h"

/* [outer, size, inner] geometry of a contiguous tensor around dim. */
static void split_at(const tb_tensor *t, int dim, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++)
        *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++)
        *inner *= t->shape[d];
}

static tb_status check_index(int64_t value, int64_t size, int64_t *out) {
    if (value < -size || value >= size)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "index %lld is out of bounds for dimension with size %lld",
                            (long long)value, (long long)size);
    *out = value < 0 ? value + size : value;
    return TB_OK;
}

tb_status tb_eager_index_select(const tb_tensor *x, int64_t dim_in, const tb_tensor *index, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int dim = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim_in, x->ndim, &dim));
    if (index->ndim > 1)
        return tb_error_set(TB_ERR_SHAPE, "index_select(): Index is supposed to be a vector");
    if (tb_dtype_category_of(index->dtype) != TB_CATEGORY_INTEGRAL)
        return tb_error_set(TB_ERR_DTYPE, "index_select(): Expected dtype int32/int64 for index");
    tb_tensor xc, ic;
    TB_TRY(tb_tensor_contiguous(x, x->dtype, &xc));
    tb_status status = tb_tensor_contiguous(index, TB_I64, &ic);
    if (status != TB_OK) {
        tb_tensor_release(&xc);
        return status;
    }
    int64_t n = tb_tensor_numel(&ic), outer, inner, size = x->ndim ? x->shape[dim] : 1;
    split_at(&xc, dim, &outer, &inner);
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    if (x->ndim)
        shape[dim] = n;
    status = tb_tensor_empty(x->dtype, x->ndim, shape, 0, out);
    const int64_t *idx = tb_tensor_data(&ic);
    size_t width = tb_dtype_size(x->dtype), run = (size_t)inner * width;
    for (int64_t k = 0; status == TB_OK && k < n; k++) {
        int64_t j = 0;
        status = check_index(idx[k], size, &j);
        for (int64_t o = 0; status == TB_OK && o < outer; o++)
            memcpy((char *)tb_tensor_data(out) + ((o * n + k) * inner) * (int64_t)width,
                   (const char *)tb_tensor_data(&xc) + ((o * size + j) * inner) * (int64_t)width, run);
    }
    tb_tensor_release(&xc);
    tb_tensor_release(&ic);
    if (status != TB_OK)
        tb_tensor_release(out);
    return status;
}

/* Reduction of scatter/index_add: 0 replace, 1 add, 2 multiply, 3 amax, 4 amin. */
static double combine_f(int reduce, double a, double b) {
    switch (reduce) {
    case 1: return a + b;
    case 2: return a * b;
    case 3: return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
    case 4: return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
    default: return b;
    }
}
static int64_t combine_i(int reduce, int64_t a, int64_t b) {
    switch (reduce) {
    case 1: return (int64_t)((uint64_t)a + (uint64_t)b);
    case 2: return (int64_t)((uint64_t)a * (uint64_t)b);
    case 3: return a > b ? a : b;
    case 4: return a < b ? a : b;
    default: return b;
    }
}

tb_status tb_eager_index_add(const tb_tensor *x, int64_t dim_in, const tb_tensor *index, const tb_tensor *source,
                             double alpha, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int dim = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim_in, x->ndim, &dim));
    tb_domain domain = tb_domain_of(x->dtype) == TB_DOMAIN_I64 ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    tb_tensor acc, src, ic;
    TB_TRY(tb_tensor_contiguous(x, tb_domain_dtype(domain), &acc));
    if (acc.storage == x->storage) { /* must not write into x */
        tb_tensor copy;
        tb_status status = tb_tensor_empty(acc.dtype, acc.ndim, acc.shape, 0, &copy);
        if (status == TB_OK)
            status = tb_tensor_copy(&copy, &acc);
        tb_tensor_release(&acc);
        if (status != TB_OK)
            return status;
        acc = copy;
    }
    tb_status status = tb_tensor_contiguous(source, tb_domain_dtype(domain), &src);
    if (status != TB_OK) {
        tb_tensor_release(&acc);
        return status;
    }
    status = tb_tensor_contiguous(index, TB_I64, &ic);
    int64_t n = status == TB_OK ? tb_tensor_numel(&ic) : 0, outer, inner, size = x->ndim ? x->shape[dim] : 1;
    split_at(&acc, dim, &outer, &inner);
    if (status == TB_OK && (source->ndim != x->ndim || (x->ndim && source->shape[dim] != n) ||
                            tb_tensor_numel(source) != outer * n * inner))
        status = tb_error_set(TB_ERR_SHAPE, "index_add_(): source must have the shape of self with dim %d of size %lld",
                              dim, (long long)n);
    const int64_t *idx = status == TB_OK ? tb_tensor_data(&ic) : NULL;
    for (int64_t k = 0; status == TB_OK && k < n; k++) {
        int64_t j = 0;
        status = check_index(idx[k], size, &j);
        for (int64_t o = 0; status == TB_OK && o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t to = (o * size + j) * inner + i, from = (o * n + k) * inner + i;
                if (domain == TB_DOMAIN_F64)
                    ((double *)tb_tensor_data(&acc))[to] += alpha * ((const double *)tb_tensor_data(&src))[from];
                else
                    ((int64_t *)tb_tensor_data(&acc))[to] += (int64_t)alpha * ((const int64_t *)tb_tensor_data(&src))[from];
            }
    }
    tb_tensor_release(&src);
    tb_tensor_release(&ic);
    if (status == TB_OK)
        status = tb_tensor_contiguous(&acc, x->dtype, out);
    tb_tensor_release(&acc);
    return status;
}

/* Walks index positions of a contiguous index tensor of shape ishape; calls back with the flat
 * offset into a tensor of `shape` where dim's coordinate is replaced by the index value. */
typedef struct gather_walk {
    int ndim, dim;
    const int64_t *ishape, *shape;
} gather_walk;

static tb_status walk_offset(const gather_walk *w, int64_t position, int64_t index_value, int64_t *offset,
                             int64_t *same_offset, const int64_t *src_shape) {
    int64_t rest = position, off = 0, off_src = 0, stride = 1, stride_src = 1;
    for (int d = w->ndim - 1; d >= 0; d--) {
        int64_t c = rest % w->ishape[d];
        rest /= w->ishape[d];
        int64_t target = d == w->dim ? index_value : c;
        if (d == w->dim && (index_value < 0 || index_value >= w->shape[d]))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "index %lld is out of bounds for dimension %d with size %lld",
                                (long long)index_value, d, (long long)w->shape[d]);
        off += target * stride;
        stride *= w->shape[d];
        if (src_shape) {
            off_src += c * stride_src;
            stride_src *= src_shape[d];
        }
    }
    *offset = off;
    if (same_offset)
        *same_offset = off_src;
    return TB_OK;
}

static tb_status check_index_shape(const tb_tensor *x, const tb_tensor *index, int dim, const char *what) {
    if (tb_tensor_numel(index) == 0)
        return TB_OK; /* an empty index selects nothing, whatever its rank (as torch) */
    if (index->ndim != x->ndim && !(x->ndim == 0 && index->ndim <= 1))
        return tb_error_set(TB_ERR_SHAPE, "%s(): Index tensor must have the same number of dimensions as input tensor",
                            what);
    for (int d = 0; d < index->ndim && x->ndim; d++)
        if (d != dim && index->shape[d] > x->shape[d])
            return tb_error_set(TB_ERR_SHAPE, "Size does not match at dimension %d expected index [%lld] to be no "
                                "larger than self [%lld] apart from dimension %d", d, (long long)index->shape[d],
                                (long long)x->shape[d], dim);
    if (tb_dtype_category_of(index->dtype) != TB_CATEGORY_INTEGRAL)
        return tb_error_set(TB_ERR_DTYPE, "%s(): Expected dtype int64 for index", what);
    return TB_OK;
}

tb_status tb_eager_gather(const tb_tensor *x, int64_t dim_in, const tb_tensor *index, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int dim = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim_in, x->ndim, &dim));
    TB_TRY(check_index_shape(x, index, dim, "gather"));
    tb_tensor xc, ic;
    TB_TRY(tb_tensor_contiguous(x, x->dtype, &xc));
    tb_status status = tb_tensor_contiguous(index, TB_I64, &ic);
    if (status != TB_OK) {
        tb_tensor_release(&xc);
        return status;
    }
    status = tb_tensor_empty(x->dtype, index->ndim, index->shape, 0, out);
    int64_t n = tb_tensor_numel(&ic);
    size_t width = tb_dtype_size(x->dtype);
    int64_t ones[TB_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
    gather_walk w = {x->ndim ? x->ndim : 1, dim, index->ndim ? index->shape : ones, x->ndim ? x->shape : ones};
    const int64_t *idx = tb_tensor_data(&ic);
    for (int64_t k = 0; status == TB_OK && k < n; k++) {
        int64_t off = 0;
        int64_t v = idx[k] < 0 ? idx[k] + w.shape[dim] : idx[k];
        status = walk_offset(&w, k, v, &off, NULL, NULL);
        if (status == TB_OK)
            memcpy((char *)tb_tensor_data(out) + k * (int64_t)width, (const char *)tb_tensor_data(&xc) + off * (int64_t)width,
                   width);
    }
    tb_tensor_release(&xc);
    tb_tensor_release(&ic);
    if (status != TB_OK)
        tb_tensor_release(out);
    return status;
}

tb_status tb_eager_scatter(const tb_tensor *x, int64_t dim_in, const tb_tensor *index, tb_eager_operand src, int reduce,
                           tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int dim = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim_in, x->ndim, &dim));
    TB_TRY(check_index_shape(x, index, dim, "scatter"));
    if (src.tensor)
        for (int d = 0; d < index->ndim; d++)
            if (src.tensor->ndim != index->ndim || index->shape[d] > src.tensor->shape[d])
                return tb_error_set(TB_ERR_SHAPE, "scatter(): Expected index [%lld] to be no larger than src [%lld] at "
                                    "dimension %d", (long long)index->shape[d],
                                    (long long)(src.tensor->ndim > d ? src.tensor->shape[d] : 0), d);
    tb_domain domain = tb_domain_of(x->dtype) == TB_DOMAIN_I64 ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    tb_tensor acc, sc = {0}, ic;
    TB_TRY(tb_tensor_empty(tb_domain_dtype(domain), x->ndim, x->shape, 0, &acc));
    tb_status status = tb_tensor_copy(&acc, x);
    if (status == TB_OK && src.tensor)
        status = tb_tensor_contiguous(src.tensor, tb_domain_dtype(domain), &sc);
    if (status == TB_OK)
        status = tb_tensor_contiguous(index, TB_I64, &ic);
    if (status != TB_OK) {
        tb_tensor_release(&acc);
        tb_tensor_release(&sc);
        return status;
    }
    int64_t n = tb_tensor_numel(&ic);
    int64_t ones[TB_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
    gather_walk w = {x->ndim ? x->ndim : 1, dim, index->ndim ? index->shape : ones, x->ndim ? x->shape : ones};
    const int64_t *idx = tb_tensor_data(&ic);
    for (int64_t k = 0; status == TB_OK && k < n; k++) {
        int64_t off = 0, soff = 0;
        int64_t v = idx[k] < 0 ? idx[k] + w.shape[dim] : idx[k];
        status = walk_offset(&w, k, v, &off, &soff, src.tensor ? (src.tensor->ndim ? src.tensor->shape : ones) : NULL);
        if (status != TB_OK)
            break;
        if (domain == TB_DOMAIN_F64) {
            double *a = (double *)tb_tensor_data(&acc) + off;
            double value = src.tensor ? ((const double *)tb_tensor_data(&sc))[soff] : src.f;
            *a = combine_f(reduce, *a, value);
        } else {
            int64_t *a = (int64_t *)tb_tensor_data(&acc) + off;
            int64_t value = src.tensor ? ((const int64_t *)tb_tensor_data(&sc))[soff] : src.i;
            *a = combine_i(reduce, *a, value);
        }
    }
    tb_tensor_release(&sc);
    tb_tensor_release(&ic);
    if (status == TB_OK)
        status = tb_tensor_contiguous(&acc, x->dtype, out);
    tb_tensor_release(&acc);
    return status;
}

tb_status tb_eager_nonzero(const tb_tensor *x, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_tensor flags;
    TB_TRY(tb_tensor_contiguous(x, TB_BOOL, &flags));
    int64_t n = tb_tensor_numel(&flags), count = 0;
    const uint8_t *f = tb_tensor_data(&flags);
    for (int64_t i = 0; i < n; i++)
        count += f[i] != 0;
    int64_t shape[2] = {count, x->ndim};
    tb_status status = tb_tensor_empty(TB_I64, 2, shape, 0, out);
    if (status == TB_OK) {
        int64_t *o = tb_tensor_data(out), row = 0;
        for (int64_t i = 0; i < n; i++) {
            if (!f[i])
                continue;
            int64_t rest = i;
            for (int d = x->ndim - 1; d >= 0; d--) {
                o[row * x->ndim + d] = rest % x->shape[d];
                rest /= x->shape[d];
            }
            row++;
        }
    }
    tb_tensor_release(&flags);
    return status;
}

/* ---- advanced indexing: x[indices] and index_put ---- */

/* The geometry of x[indices]. Each indexed dim d has a contiguous int64 tensor of the broadcast
 * shape B (index[d].storage NULL: not indexed). The result is viewed as rows (the dims after the last
 * indexed dim form each row's contiguous run); row_dims lists the row dims outermost first, each an
 * x dim (xdim >= 0) or a dim of B (xdim -1). */
typedef struct advanced_index {
    tb_tensor index[TB_MAX_DIMS];
    int count; /* indexed dims */
    int64_t bshape[TB_MAX_DIMS], bnumel;
    int bndim;
    int nrow_dims;
    int64_t row_size[2 * TB_MAX_DIMS];
    int row_xdim[2 * TB_MAX_DIMS];
    int64_t rows, run;
    int out_ndim;
    int64_t out_shape[TB_MAX_DIMS];
} advanced_index;

static void advanced_release(advanced_index *a) {
    for (int d = 0; d < TB_MAX_DIMS; d++)
        tb_tensor_release(&a->index[d]);
}

/* Entry k of indices, as the int64 index tensors of the dims it covers, starting at *dim. */
static tb_status take_entry(const tb_tensor *x, const tb_tensor *entry, int *dim, advanced_index *a) {
    if (!entry) {
        (*dim)++;
        return TB_OK;
    }
    if (entry->dtype == TB_BOOL || entry->dtype == TB_U8) {
        if (entry->ndim == 0)
            return tb_error_set(TB_ERR_UNSUPPORTED, "index: a 0-dim boolean index is not supported");
        if (*dim + entry->ndim > x->ndim)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "too many indices for tensor of dimension %d", x->ndim);
        for (int j = 0; j < entry->ndim; j++)
            if (entry->shape[j] != x->shape[*dim + j])
                return tb_error_set(TB_ERR_SHAPE, "The shape of the mask [%lld] at index %d does not match the shape "
                                    "of the indexed tensor [%lld] at index %d", (long long)entry->shape[j], j,
                                    (long long)x->shape[*dim + j], *dim + j);
        tb_tensor coords; /* [count, entry->ndim] */
        TB_TRY(tb_eager_nonzero(entry, &coords));
        tb_status status = TB_OK;
        for (int j = 0; j < entry->ndim && status == TB_OK; j++) {
            tb_tensor column;
            status = tb_tensor_select(&coords, 1, j, &column);
            if (status == TB_OK)
                status = tb_tensor_contiguous(&column, TB_I64, &a->index[*dim + j]);
            tb_tensor_release(&column);
        }
        tb_tensor_release(&coords);
        a->count += entry->ndim;
        *dim += entry->ndim;
        return status;
    }
    if (tb_dtype_category_of(entry->dtype) != TB_CATEGORY_INTEGRAL)
        return tb_error_set(TB_ERR_DTYPE, "tensors used as indices must be long, int, byte or bool tensors, got %s",
                            tb_dtype_name(entry->dtype));
    if (*dim >= x->ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "too many indices for tensor of dimension %d", x->ndim);
    a->count++;
    return tb_tensor_contiguous(entry, TB_I64, &a->index[(*dim)++]);
}

static tb_status advanced_prepare(const tb_tensor *x, int nindices, const tb_tensor *const *indices,
                                  advanced_index *a) {
    memset(a, 0, sizeof *a);
    int dim = 0;
    tb_status status = TB_OK;
    for (int k = 0; k < nindices && status == TB_OK; k++)
        status = take_entry(x, indices[k], &dim, a);
    if (status == TB_OK && dim > x->ndim)
        status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "too many indices for tensor of dimension %d", x->ndim);
    if (status == TB_OK && a->count == 0)
        status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "index: no index tensor given");
    /* broadcast the index tensors together */
    int first = -1, last = -1;
    for (int d = 0; d < x->ndim && status == TB_OK; d++) {
        if (!a->index[d].storage)
            continue;
        if (first < 0) {
            a->bndim = a->index[d].ndim;
            memcpy(a->bshape, a->index[d].shape, sizeof a->bshape);
            first = d;
        } else {
            int64_t shape[TB_MAX_DIMS];
            int ndim;
            status = tb_broadcast_shapes(a->bndim, a->bshape, a->index[d].ndim, a->index[d].shape, &ndim, shape);
            if (status != TB_OK)
                status = tb_error_set(TB_ERR_SHAPE, "shape mismatch: indexing tensors could not be broadcast together");
            a->bndim = ndim;
            memcpy(a->bshape, shape, sizeof shape);
        }
        last = d;
    }
    for (int d = 0; d < x->ndim && status == TB_OK; d++) {
        tb_tensor *t = &a->index[d];
        if (!t->storage || (t->ndim == a->bndim && !memcmp(t->shape, a->bshape, sizeof(int64_t) * (size_t)a->bndim)))
            continue;
        tb_tensor expanded, dense;
        status = tb_tensor_expand(t, a->bndim, a->bshape, &expanded);
        if (status == TB_OK) {
            status = tb_tensor_empty(TB_I64, a->bndim, a->bshape, 0, &dense);
            if (status == TB_OK && (status = tb_tensor_copy(&dense, &expanded)) == TB_OK) {
                tb_tensor_release(t);
                *t = dense;
            } else if (status == TB_OK) {
                tb_tensor_release(&dense);
            }
            tb_tensor_release(&expanded);
        }
    }
    if (status != TB_OK) {
        advanced_release(a);
        return status;
    }
    bool adjacent = true;
    for (int d = first; d <= last; d++)
        adjacent &= a->index[d].storage != NULL;
    a->bnumel = 1;
    for (int d = 0; d < a->bndim; d++)
        a->bnumel *= a->bshape[d];
    a->run = 1;
    for (int d = last + 1; d < x->ndim; d++)
        a->run *= x->shape[d];
    /* row dims: adjacent: x[:first], B; else B, the non-indexed x dims before last */
    int r = 0;
    if (adjacent)
        for (int d = 0; d < first; d++)
            a->row_size[r] = x->shape[d], a->row_xdim[r++] = d;
    for (int d = 0; d < a->bndim; d++)
        a->row_size[r] = a->bshape[d], a->row_xdim[r++] = -1;
    if (!adjacent)
        for (int d = 0; d < last; d++)
            if (!a->index[d].storage)
                a->row_size[r] = x->shape[d], a->row_xdim[r++] = d;
    a->nrow_dims = r;
    a->rows = 1;
    for (int k = 0; k < r; k++)
        a->rows *= a->row_size[k];
    a->out_ndim = r + x->ndim - 1 - last;
    if (a->out_ndim > TB_MAX_DIMS) {
        advanced_release(a);
        return tb_error_set(TB_ERR_SHAPE, "index: the result would have %d dims, more than %d", a->out_ndim, TB_MAX_DIMS);
    }
    memcpy(a->out_shape, a->row_size, sizeof(int64_t) * (size_t)r);
    for (int d = last + 1; d < x->ndim; d++)
        a->out_shape[r++] = x->shape[d];
    return TB_OK;
}

/* The element offset in contiguous x (x_strides) of row `row`'s run. */
static tb_status advanced_offset(const advanced_index *a, const tb_tensor *x, const int64_t *x_strides, int64_t row,
                                 int64_t *offset) {
    int64_t rest = row, off = 0, flat = 0, scale = 1;
    for (int k = a->nrow_dims - 1; k >= 0; k--) {
        int64_t c = rest % a->row_size[k];
        rest /= a->row_size[k];
        if (a->row_xdim[k] >= 0) {
            off += c * x_strides[a->row_xdim[k]];
        } else {
            flat += c * scale;
            scale *= a->row_size[k];
        }
    }
    for (int d = 0; d < x->ndim; d++) {
        if (!a->index[d].storage)
            continue;
        int64_t j = 0;
        TB_TRY(check_index(((const int64_t *)tb_tensor_data(&a->index[d]))[flat], x->shape[d], &j));
        off += j * x_strides[d];
    }
    *offset = off;
    return TB_OK;
}

tb_status tb_eager_index(const tb_tensor *x, int nindices, const tb_tensor *const *indices, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    advanced_index a;
    TB_TRY(advanced_prepare(x, nindices, indices, &a));
    tb_tensor xc;
    tb_status status = tb_tensor_contiguous(x, x->dtype, &xc);
    if (status == TB_OK)
        status = tb_tensor_empty(x->dtype, a.out_ndim, a.out_shape, 0, out);
    int64_t strides[TB_MAX_DIMS];
    tb_contiguous_strides(x->ndim, x->shape, strides);
    size_t width = tb_dtype_size(x->dtype), run = (size_t)a.run * width;
    for (int64_t r = 0; status == TB_OK && r < a.rows && a.run; r++) {
        int64_t off = 0;
        status = advanced_offset(&a, x, strides, r, &off);
        if (status == TB_OK)
            memcpy((char *)tb_tensor_data(out) + r * (int64_t)run, (const char *)tb_tensor_data(&xc) + off * (int64_t)width,
                   run);
    }
    tb_tensor_release(&xc);
    advanced_release(&a);
    if (status != TB_OK)
        tb_tensor_release(out);
    return status;
}

tb_status tb_eager_index_put(const tb_tensor *x, int nindices, const tb_tensor *const *indices, const tb_tensor *values,
                             bool accumulate, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    advanced_index a;
    TB_TRY(advanced_prepare(x, nindices, indices, &a));
    tb_domain domain = tb_domain_of(x->dtype) == TB_DOMAIN_I64 ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    tb_dtype work = accumulate ? tb_domain_dtype(domain) : x->dtype;
    tb_tensor acc = {0}, expanded = {0}, vals = {0};
    tb_status status = tb_tensor_expand(values, a.out_ndim, a.out_shape, &expanded);
    if (status != TB_OK)
        status = tb_error_set(TB_ERR_SHAPE, "shape mismatch: value tensor of %d dims cannot be broadcast to the "
                              "indexing result of %d dims", values->ndim, a.out_ndim);
    if (status == TB_OK && (status = tb_tensor_empty(work, a.out_ndim, a.out_shape, 0, &vals)) == TB_OK)
        status = tb_tensor_copy(&vals, &expanded);
    if (status == TB_OK && (status = tb_tensor_empty(work, x->ndim, x->shape, 0, &acc)) == TB_OK)
        status = tb_tensor_copy(&acc, x);
    int64_t strides[TB_MAX_DIMS];
    tb_contiguous_strides(x->ndim, x->shape, strides);
    size_t width = tb_dtype_size(work);
    for (int64_t r = 0; status == TB_OK && r < a.rows && a.run; r++) {
        int64_t off = 0;
        status = advanced_offset(&a, x, strides, r, &off);
        if (status != TB_OK)
            break;
        if (!accumulate) {
            memcpy((char *)tb_tensor_data(&acc) + off * (int64_t)width,
                   (const char *)tb_tensor_data(&vals) + r * a.run * (int64_t)width, (size_t)a.run * width);
        } else if (domain == TB_DOMAIN_F64) {
            double *to = (double *)tb_tensor_data(&acc) + off;
            const double *from = (const double *)tb_tensor_data(&vals) + r * a.run;
            for (int64_t i = 0; i < a.run; i++)
                to[i] += from[i];
        } else {
            int64_t *to = (int64_t *)tb_tensor_data(&acc) + off;
            const int64_t *from = (const int64_t *)tb_tensor_data(&vals) + r * a.run;
            for (int64_t i = 0; i < a.run; i++)
                to[i] = (int64_t)((uint64_t)to[i] + (uint64_t)from[i]);
        }
    }
    tb_tensor_release(&expanded);
    tb_tensor_release(&vals);
    advanced_release(&a);
    if (status == TB_OK && work == x->dtype) {
        *out = acc; /* ownership moves to the caller */
        return TB_OK;
    }
    if (status == TB_OK)
        status = tb_tensor_contiguous(&acc, x->dtype, out);
    tb_tensor_release(&acc);
    return status;
}
