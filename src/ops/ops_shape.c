/* Shape-building ops that copy data: cat, stack and cast. */
#include <string.h>

#include "ops/ops_internal.h"

tb_status tb_op_cat(int count, const tb_tensor *const *tensors, int64_t dim, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (count < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "cat: expected a non-empty list of tensors");
    /* torch skips legacy 1-D empty tensors; we require matching ranks except for those */
    const tb_tensor *reference = NULL;
    for (int i = 0; i < count; i++)
        if (!(tensors[i]->ndim == 1 && tensors[i]->shape[0] == 0)) {
            reference = tensors[i];
            break;
        }
    if (!reference)
        reference = tensors[0];
    if (reference->ndim == 0)
        return tb_error_set(TB_ERR_SHAPE, "cat: zero-dimensional tensors cannot be concatenated");
    int d;
    TB_TRY(tb_normalize_dim(dim, reference->ndim, &d));
    int64_t shape[TB_MAX_DIMS];
    memcpy(shape, reference->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < count; i++) {
        const tb_tensor *t = tensors[i];
        if (t->ndim == 1 && t->shape[0] == 0 && reference->ndim != 1)
            continue;
        if (t->dtype != reference->dtype)
            return tb_error_set(TB_ERR_DTYPE, "cat: tensor %d has dtype %s but tensor 0 has %s", i,
                                tb_dtype_name(t->dtype), tb_dtype_name(reference->dtype));
        if (t->ndim != reference->ndim)
            return tb_error_set(TB_ERR_SHAPE, "cat: tensor %d has %d dims but expected %d", i, t->ndim, reference->ndim);
        for (int j = 0; j < t->ndim; j++)
            if (j != d && t->shape[j] != reference->shape[j])
                return tb_error_set(TB_ERR_SHAPE, "cat: sizes must match except in dim %d; tensor %d has %lld in dim %d, expected %lld",
                                    d, i, (long long)t->shape[j], j, (long long)reference->shape[j]);
        shape[d] += t->shape[d];
    }
    TB_TRY(tb_tensor_empty(reference->dtype, reference->ndim, shape, TB_ALLOC_DEFAULT, out));
    int64_t position = 0;
    for (int i = 0; i < count; i++) {
        const tb_tensor *t = tensors[i];
        if (t->ndim == 1 && t->shape[0] == 0 && reference->ndim != 1)
            continue;
        tb_tensor slot;
        tb_status status = tb_tensor_slice(out, d, position, position + t->shape[d], 1, &slot);
        if (status == TB_OK) {
            status = tb_tensor_copy(&slot, t);
            tb_tensor_release(&slot);
        }
        if (status != TB_OK) {
            tb_tensor_release(out);
            return status;
        }
        position += t->shape[d];
    }
    return TB_OK;
}

tb_status tb_op_stack(int count, const tb_tensor *const *tensors, int64_t dim, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (count < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "stack: expected a non-empty list of tensors");
    int ndim = tensors[0]->ndim;
    if (dim < -(ndim + 1) || dim > ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "stack: dim %lld is out of range for %d-dim inputs", (long long)dim, ndim);
    int64_t d = dim < 0 ? dim + ndim + 1 : dim;
    for (int i = 1; i < count; i++) {
        bool same = tensors[i]->ndim == ndim;
        for (int j = 0; same && j < ndim; j++)
            same = tensors[i]->shape[j] == tensors[0]->shape[j];
        if (!same) {
            char a[128], b[128];
            return tb_error_set(TB_ERR_SHAPE, "stack: every tensor must have the same shape; tensor 0 is %s, tensor %d is %s",
                                tb_shape_string(ndim, tensors[0]->shape, a, sizeof a), i,
                                tb_shape_string(tensors[i]->ndim, tensors[i]->shape, b, sizeof b));
        }
    }
    enum { STACK_MAX = 4096 };
    if (count > STACK_MAX)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "stack: at most %d tensors", STACK_MAX);
    tb_tensor *views = NULL;
    TB_TRY(tb_alloc((size_t)count * sizeof *views, TB_ALLOC_ZERO, (void **)&views));
    const tb_tensor **pointers = NULL;
    tb_status status = tb_alloc((size_t)count * sizeof *pointers, TB_ALLOC_ZERO, (void **)&pointers);
    for (int i = 0; i < count && status == TB_OK; i++) {
        status = tb_tensor_unsqueeze(tensors[i], d, &views[i]);
        pointers[i] = &views[i];
    }
    if (status == TB_OK)
        status = tb_op_cat(count, (const tb_tensor *const *)pointers, d, out);
    for (int i = 0; i < count; i++)
        tb_tensor_release(&views[i]);
    tb_free(pointers);
    tb_free(views);
    return status;
}

tb_status tb_op_cast(const tb_tensor *x, tb_dtype dtype, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!tb_dtype_valid((int)dtype))
        return tb_error_set(TB_ERR_DTYPE, "cast: invalid dtype %d", (int)dtype);
    TB_TRY(tb_tensor_empty(dtype, x->ndim, x->shape, TB_ALLOC_DEFAULT, out));
    tb_status status = tb_tensor_copy(out, x);
    if (status != TB_OK)
        tb_tensor_release(out);
    return status;
}
