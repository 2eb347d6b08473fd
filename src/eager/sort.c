/* sort / argsort along a dim for every dtype: a stable merge sort of (value, index) pairs in double
 * (floats; NaN sorts as the largest value, as in PyTorch) or int64 (integers), so equal values keep
 * their order in both directions. */
#include <math.h>
#include <string.h>

#include "eager/eager_internal.h"
#include "torchburn/alloc.h"

typedef struct sort_item {
    double f;
    int64_t i; /* integer value (integer dtypes) */
    int64_t index;
} sort_item;

/* a before b? (stable: called only to decide strict order) */
static int before(const sort_item *a, const sort_item *b, bool integral, bool descending) {
    if (integral)
        return descending ? a->i > b->i : a->i < b->i;
    bool an = isnan(a->f), bn = isnan(b->f);
    if (an || bn) /* NaN is the largest */
        return descending ? (an && !bn) : (!an && bn);
    return descending ? a->f > b->f : a->f < b->f;
}

static void merge_sort(sort_item *items, sort_item *scratch, int64_t n, bool integral, bool descending) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                scratch[k++] = before(&items[j], &items[i], integral, descending) ? items[j++] : items[i++];
            while (i < mid)
                scratch[k++] = items[i++];
            while (j < hi)
                scratch[k++] = items[j++];
        }
        memcpy(items, scratch, sizeof *items * (size_t)n);
    }
}

tb_status tb_eager_sort(const tb_tensor *x, int64_t dim_in, bool descending, tb_tensor *values, tb_tensor *indices) {
    memset(values, 0, sizeof *values);
    memset(indices, 0, sizeof *indices);
    int dim = 0;
    if (x->ndim > 0)
        TB_TRY(tb_normalize_dim(dim_in, x->ndim, &dim));
    bool integral = tb_dtype_category_of(x->dtype) != TB_CATEGORY_FLOATING;
    tb_domain domain = integral ? TB_DOMAIN_I64 : TB_DOMAIN_F64;
    /* move dim last, contiguous in the domain type */
    int64_t order[TB_MAX_DIMS], inverse[TB_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != dim)
            order[k++] = d;
    if (x->ndim)
        order[k++] = dim;
    for (int d = 0; d < x->ndim; d++)
        inverse[order[d]] = d;
    tb_tensor permuted, work;
    TB_TRY(tb_tensor_permute(x, x->ndim, order, &permuted));
    tb_status status = tb_tensor_contiguous(&permuted, tb_domain_dtype(domain), &work);
    tb_tensor_release(&permuted);
    if (status != TB_OK)
        return status;
    int64_t len = x->ndim ? x->shape[dim] : 1, n = tb_tensor_numel(&work), rows = len ? n / len : 0;
    tb_tensor sorted_values, sorted_indices;
    status = tb_tensor_empty(work.dtype, work.ndim, work.shape, 0, &sorted_values);
    if (status == TB_OK) {
        status = tb_tensor_empty(TB_I64, work.ndim, work.shape, 0, &sorted_indices);
        if (status != TB_OK)
            tb_tensor_release(&sorted_values);
    }
    sort_item *items = NULL, *scratch = NULL;
    if (status == TB_OK && len > 0) {
        status = tb_alloc(sizeof *items * (size_t)len, 0, (void **)&items);
        if (status == TB_OK)
            status = tb_alloc(sizeof *items * (size_t)len, 0, (void **)&scratch);
    }
    for (int64_t r = 0; status == TB_OK && r < rows; r++) {
        for (int64_t i = 0; i < len; i++) {
            items[i].index = i;
            if (integral)
                items[i].i = ((const int64_t *)tb_tensor_data(&work))[r * len + i];
            else
                items[i].f = ((const double *)tb_tensor_data(&work))[r * len + i];
        }
        merge_sort(items, scratch, len, integral, descending);
        for (int64_t i = 0; i < len; i++) {
            if (integral)
                ((int64_t *)tb_tensor_data(&sorted_values))[r * len + i] = items[i].i;
            else
                ((double *)tb_tensor_data(&sorted_values))[r * len + i] = items[i].f;
            ((int64_t *)tb_tensor_data(&sorted_indices))[r * len + i] = items[i].index;
        }
    }
    tb_free(items);
    tb_free(scratch);
    tb_tensor_release(&work);
    if (status != TB_OK)
        return status;
    tb_tensor back_values, back_indices;
    status = tb_tensor_permute(&sorted_values, x->ndim, inverse, &back_values);
    if (status == TB_OK) {
        status = tb_tensor_contiguous(&back_values, x->dtype, values);
        tb_tensor_release(&back_values);
    }
    if (status == TB_OK)
        status = tb_tensor_permute(&sorted_indices, x->ndim, inverse, &back_indices);
    if (status == TB_OK) {
        status = tb_tensor_contiguous(&back_indices, TB_I64, indices);
        tb_tensor_release(&back_indices);
    }
    tb_tensor_release(&sorted_values);
    tb_tensor_release(&sorted_indices);
    if (status != TB_OK) {
        tb_tensor_release(values);
        tb_tensor_release(indices);
    }
    return status;
}
