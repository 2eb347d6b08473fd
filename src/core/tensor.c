/* Tensor storage, creation, views and shape utilities. Copies live in tensor_copy.c. */
#include "torchburn/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchburn/alloc.h"

/* ---- storage ---- */

tb_status tb_storage_wrap(void *data, size_t nbytes, bool read_only, tb_storage_release_fn release,
                          void *release_context, tb_storage **out) {
    *out = NULL;
    tb_storage *storage = NULL;
    TB_TRY(tb_alloc(sizeof *storage, TB_ALLOC_DEFAULT, (void **)&storage));
    atomic_init(&storage->refcount, 1);
    storage->data = data;
    storage->nbytes = nbytes;
    storage->read_only = read_only;
    storage->release = release;
    storage->release_context = release_context;
    storage->version = 0;
    atomic_init(&storage->exported, false);
    storage->owner_versioned = false;
    atomic_init(&storage->derived, NULL);
    *out = storage;
    return TB_OK;
}

tb_status tb_storage_wrap_versioned(void *data, size_t nbytes, tb_storage_release_fn release, void *release_context,
                                    tb_storage **out) {
    TB_TRY(tb_storage_wrap(data, nbytes, true, release, release_context, out));
    (*out)->owner_versioned = true;
    return TB_OK;
}

static void release_tb_alloc(void *context, void *data, size_t nbytes) {
    (void)context;
    (void)nbytes;
    tb_free(data);
}

tb_status tb_storage_new(size_t nbytes, unsigned alloc_flags, tb_storage **out) {
    void *data = NULL;
    TB_TRY(tb_alloc(nbytes, alloc_flags, &data));
    tb_status status = tb_storage_wrap(data, nbytes, false, release_tb_alloc, NULL, out);
    if (status != TB_OK)
        tb_free(data);
    return status;
}

void tb_storage_retain(tb_storage *storage) {
    if (storage)
        atomic_fetch_add_explicit(&storage->refcount, 1, memory_order_relaxed);
}

void tb_storage_release(tb_storage *storage) {
    if (!storage)
        return;
    if (atomic_fetch_sub_explicit(&storage->refcount, 1, memory_order_acq_rel) != 1)
        return;
    tb_storage_derived *derived = atomic_load_explicit(&storage->derived, memory_order_acquire);
    if (derived)
        derived->free(derived);
    if (storage->release)
        storage->release(storage->release_context, storage->data, storage->nbytes);
    tb_free(storage);
}

bool tb_storage_cacheable(const tb_storage *storage) {
    return storage && ((storage->release == release_tb_alloc && !storage->read_only) || storage->owner_versioned) &&
           !atomic_load_explicit(&storage->exported, memory_order_acquire);
}

void tb_storage_mark_exported(tb_storage *storage) {
    if (!storage)
        return;
    atomic_store_explicit(&storage->exported, true, memory_order_release);
    tb_storage_derived *derived = atomic_exchange_explicit(&storage->derived, NULL, memory_order_acq_rel);
    if (derived)
        derived->free(derived);
}

tb_storage_derived *tb_storage_derived_take(tb_storage *storage) {
    return storage ? atomic_exchange_explicit(&storage->derived, NULL, memory_order_acq_rel) : NULL;
}

void tb_storage_derived_put(tb_storage *storage, tb_storage_derived *derived) {
    if (!derived)
        return;
    tb_storage_derived *expected = NULL;
    if (!tb_storage_cacheable(storage) ||
        !atomic_compare_exchange_strong_explicit(&storage->derived, &expected, derived, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        derived->free(derived);
        return;
    }
    /* exported between the check and the store: take it back out */
    if (atomic_load_explicit(&storage->exported, memory_order_acquire)) {
        tb_storage_derived *mine = atomic_exchange_explicit(&storage->derived, NULL, memory_order_acq_rel);
        if (mine)
            mine->free(mine);
    }
}

/* ---- shapes ---- */

tb_status tb_shape_check(int ndim, const int64_t *shape, tb_dtype dtype, int64_t *numel_out) {
    if (ndim < 0 || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "tensors have 0 to %d dims, got %d", TB_MAX_DIMS, ndim);
    if (!tb_dtype_valid((int)dtype))
        return tb_error_set(TB_ERR_DTYPE, "invalid dtype %d", (int)dtype);
    int64_t numel = 1;
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return tb_error_set(TB_ERR_SHAPE, "dim %d has negative size %lld", d, (long long)shape[d]);
        if (shape[d] == 0)
            empty = true;
    }
    for (int d = 0; d < ndim && !empty; d++) {
        if (__builtin_mul_overflow(numel, shape[d], &numel))
            return tb_error_set(TB_ERR_SHAPE, "element count of a %d-dim shape overflows int64", ndim);
    }
    if (empty)
        numel = 0;
    int64_t bytes;
    if (__builtin_mul_overflow(numel, (int64_t)tb_dtype_size(dtype), &bytes))
        return tb_error_set(TB_ERR_SHAPE, "byte size of %lld %s elements overflows int64", (long long)numel,
                            tb_dtype_name(dtype));
    if (numel_out)
        *numel_out = numel;
    return TB_OK;
}

void tb_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= shape[d] > 1 ? shape[d] : 1;
    }
}

const char *tb_shape_string(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

int64_t tb_tensor_numel(const tb_tensor *tensor) {
    int64_t numel = 1;
    for (int d = 0; d < tensor->ndim; d++)
        numel *= tensor->shape[d];
    return numel;
}

bool tb_tensor_is_contiguous(const tb_tensor *tensor) {
    int64_t expected = 1;
    for (int d = tensor->ndim - 1; d >= 0; d--) {
        if (tensor->shape[d] == 0)
            return true;
        if (tensor->shape[d] != 1 && tensor->strides[d] != expected)
            return false;
        expected *= tensor->shape[d];
    }
    return true;
}

/* ---- creation ---- */

tb_status tb_tensor_empty(tb_dtype dtype, int ndim, const int64_t *shape, unsigned alloc_flags, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int64_t numel;
    TB_TRY(tb_shape_check(ndim, shape, dtype, &numel));
    tb_storage *storage;
    TB_TRY(tb_storage_new((size_t)numel * tb_dtype_size(dtype), alloc_flags, &storage));
    out->storage = storage;
    out->dtype = dtype;
    out->ndim = ndim;
    if (ndim > 0) /* shape may be NULL for 0-dim tensors */
        memcpy(out->shape, shape, (size_t)ndim * sizeof(int64_t));
    tb_contiguous_strides(ndim, out->shape, out->strides);
    out->offset = 0;
    return TB_OK;
}

tb_status tb_tensor_from_storage(tb_storage *storage, tb_dtype dtype, int ndim, const int64_t *shape,
                                 const int64_t *strides, int64_t offset, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    int64_t numel;
    TB_TRY(tb_shape_check(ndim, shape, dtype, &numel));
    int64_t contiguous[TB_MAX_DIMS];
    if (!strides) {
        tb_contiguous_strides(ndim, shape, contiguous);
        strides = contiguous;
    }
    if (offset < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "negative storage offset %lld", (long long)offset);
    if (numel > 0) {
        /* highest element index reached; every stride must be >= 0 */
        int64_t last = offset;
        for (int d = 0; d < ndim; d++) {
            if (strides[d] < 0)
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "negative stride %lld in dim %d is not supported",
                                    (long long)strides[d], d);
            int64_t reach;
            if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) || __builtin_add_overflow(last, reach, &last))
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "strides overflow the address range");
        }
        int64_t end_bytes;
        if (__builtin_mul_overflow(last + 1, (int64_t)tb_dtype_size(dtype), &end_bytes) ||
            (uint64_t)end_bytes > storage->nbytes)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                "view reaches element %lld of %s but the storage holds %zu bytes", (long long)last,
                                tb_dtype_name(dtype), storage->nbytes);
    }
    tb_storage_retain(storage);
    out->storage = storage;
    out->dtype = dtype;
    out->ndim = ndim;
    if (ndim > 0) {
        memcpy(out->shape, shape, (size_t)ndim * sizeof(int64_t));
        memcpy(out->strides, strides, (size_t)ndim * sizeof(int64_t));
    }
    out->offset = offset;
    return TB_OK;
}

void tb_tensor_retain(const tb_tensor *tensor, tb_tensor *out) {
    tb_storage_retain(tensor->storage);
    if (out != tensor)
        *out = *tensor;
}

void tb_tensor_release(tb_tensor *tensor) {
    tb_storage_release(tensor->storage);
    memset(tensor, 0, sizeof *tensor);
}

/* ---- views ---- */

tb_status tb_normalize_dim(int64_t dim, int ndim, int *out) {
    int64_t range = ndim > 0 ? ndim : 1; /* a 0-dim tensor accepts dim 0 / -1 like torch */
    if (dim < -range || dim >= range)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "dim %lld is out of range for a %d-dim tensor", (long long)dim, ndim);
    *out = (int)(dim < 0 ? dim + range : dim);
    return TB_OK;
}

/* Starts a view of `tensor` in *out sharing its storage (reference taken by the caller on success). */
static void begin_view(const tb_tensor *tensor, tb_tensor *out) {
    if (out != tensor)
        *out = *tensor;
}

static void finish_view(const tb_tensor *source_storage_owner, tb_tensor *out) {
    (void)source_storage_owner;
    tb_storage_retain(out->storage);
}

tb_status tb_tensor_slice(const tb_tensor *tensor, int64_t dim, int64_t start, int64_t stop, int64_t step, tb_tensor *out) {
    int d;
    if (tensor->ndim == 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "slice: cannot slice a 0-dim tensor");
    TB_TRY(tb_normalize_dim(dim, tensor->ndim, &d));
    if (step <= 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "slice: step must be positive, got %lld", (long long)step);
    int64_t size = tensor->shape[d];
    if (start < 0)
        start += size;
    if (stop < 0)
        stop += size;
    start = start < 0 ? 0 : (start > size ? size : start);
    stop = stop < start ? start : (stop > size ? size : stop);
    tb_tensor view;
    begin_view(tensor, &view);
    view.offset += start * tensor->strides[d];
    view.shape[d] = (stop - start + step - 1) / step;
    view.strides[d] = tensor->strides[d] * step;
    if (view.shape[d] == 0)
        view.offset = tensor->offset;
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_select(const tb_tensor *tensor, int64_t dim, int64_t index, tb_tensor *out) {
    int d;
    if (tensor->ndim == 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "select: cannot index a 0-dim tensor");
    TB_TRY(tb_normalize_dim(dim, tensor->ndim, &d));
    int64_t size = tensor->shape[d];
    if (index < -size || index >= size)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "select: index %lld is out of range for dim %d of size %lld",
                            (long long)index, d, (long long)size);
    if (index < 0)
        index += size;
    tb_tensor view;
    begin_view(tensor, &view);
    view.offset += index * tensor->strides[d];
    for (int i = d; i < tensor->ndim - 1; i++) {
        view.shape[i] = tensor->shape[i + 1];
        view.strides[i] = tensor->strides[i + 1];
    }
    view.ndim--;
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_transpose(const tb_tensor *tensor, int64_t dim0, int64_t dim1, tb_tensor *out) {
    int a, b;
    TB_TRY(tb_normalize_dim(dim0, tensor->ndim, &a));
    TB_TRY(tb_normalize_dim(dim1, tensor->ndim, &b));
    tb_tensor view;
    begin_view(tensor, &view);
    if (tensor->ndim > 0) {
        view.shape[a] = tensor->shape[b];
        view.shape[b] = tensor->shape[a];
        view.strides[a] = tensor->strides[b];
        view.strides[b] = tensor->strides[a];
    }
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_permute(const tb_tensor *tensor, int ndim, const int64_t *dims, tb_tensor *out) {
    if (ndim != tensor->ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "permute: got %d dims for a %d-dim tensor", ndim, tensor->ndim);
    bool used[TB_MAX_DIMS] = {false};
    tb_tensor view;
    begin_view(tensor, &view);
    for (int i = 0; i < ndim; i++) {
        int d;
        TB_TRY(tb_normalize_dim(dims[i], ndim, &d));
        if (used[d])
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "permute: dim %d appears twice", d);
        used[d] = true;
        view.shape[i] = tensor->shape[d];
        view.strides[i] = tensor->strides[d];
    }
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_expand(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out) {
    if (ndim < tensor->ndim || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "expand: cannot expand a %d-dim tensor to %d dims", tensor->ndim, ndim);
    tb_tensor view;
    begin_view(tensor, &view);
    int lead = ndim - tensor->ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        int source = i - lead;
        int64_t target = shape[i];
        if (source >= 0) {
            int64_t size = tensor->shape[source];
            if (target == -1)
                target = size;
            if (size == target) {
                view.shape[i] = size;
                view.strides[i] = tensor->strides[source];
            } else if (size == 1 && target >= 0) {
                view.shape[i] = target;
                view.strides[i] = 0;
            } else {
                char a[128], b[128];
                return tb_error_set(TB_ERR_SHAPE, "expand: cannot expand shape %s to %s (dim %d: %lld vs %lld)",
                                    tb_shape_string(tensor->ndim, tensor->shape, a, sizeof a),
                                    tb_shape_string(ndim, shape, b, sizeof b), i, (long long)size, (long long)target);
            }
        } else {
            if (target < 0)
                return tb_error_set(TB_ERR_SHAPE, "expand: new leading dim %d must be >= 0, got %lld", i, (long long)target);
            view.shape[i] = target;
            view.strides[i] = 0;
        }
    }
    view.ndim = ndim;
    TB_TRY(tb_shape_check(ndim, view.shape, view.dtype, NULL));
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

/* Resolves one -1 entry and checks the element count matches. */
static tb_status infer_shape(const tb_tensor *tensor, int ndim, const int64_t *shape, int64_t *resolved) {
    if (ndim < 0 || ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "view: tensors have 0 to %d dims, got %d", TB_MAX_DIMS, ndim);
    int64_t numel = tb_tensor_numel(tensor);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0)
                return tb_error_set(TB_ERR_SHAPE, "view: only one dim may be -1");
            infer = i;
        } else if (shape[i] < 0) {
            return tb_error_set(TB_ERR_SHAPE, "view: invalid size %lld in dim %d", (long long)shape[i], i);
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            return tb_error_set(TB_ERR_SHAPE, "view: shape overflows int64");
        }
        resolved[i] = shape[i];
    }
    char a[128], b[128];
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return tb_error_set(TB_ERR_SHAPE, "view: shape %s is invalid for input of size %lld",
                                tb_shape_string(ndim, shape, a, sizeof a), (long long)numel);
        resolved[infer] = numel / known;
    } else if (known != numel) {
        return tb_error_set(TB_ERR_SHAPE, "view: shape %s is invalid for input of shape %s (%lld elements)",
                            tb_shape_string(ndim, shape, a, sizeof a),
                            tb_shape_string(tensor->ndim, tensor->shape, b, sizeof b), (long long)numel);
    }
    return TB_OK;
}

tb_status tb_tensor_view(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out) {
    int64_t resolved[TB_MAX_DIMS];
    TB_TRY(infer_shape(tensor, ndim, shape, resolved));
    int64_t new_strides[TB_MAX_DIMS];
    int64_t numel = tb_tensor_numel(tensor);
    if (numel == 0 || tb_tensor_is_contiguous(tensor)) {
        tb_contiguous_strides(ndim, resolved, new_strides);
    } else {
        /* Old dims group into chunks that are contiguous among themselves; each new dim must lie
         * inside one chunk, and takes strides from that chunk's base stride. */
        int view_dim = ndim - 1;
        int64_t chunk_base_stride = tensor->strides[tensor->ndim - 1];
        int64_t tensor_numel = 1, view_numel = 1;
        for (int d = tensor->ndim - 1; d >= 0; d--) {
            tensor_numel *= tensor->shape[d];
            bool chunk_ends = d == 0 || (tensor->shape[d - 1] != 1 &&
                                         tensor->strides[d - 1] != tensor_numel * chunk_base_stride);
            if (!chunk_ends)
                continue;
            while (view_dim >= 0 && (view_numel < tensor_numel || resolved[view_dim] == 1)) {
                new_strides[view_dim] = view_numel * chunk_base_stride;
                view_numel *= resolved[view_dim];
                view_dim--;
            }
            if (view_numel != tensor_numel)
                return tb_error_set(TB_ERR_UNSUPPORTED, "view: the strides of this tensor do not allow this view; use reshape");
            if (d > 0) {
                chunk_base_stride = tensor->strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
        if (view_dim != -1)
            return tb_error_set(TB_ERR_UNSUPPORTED, "view: the strides of this tensor do not allow this view; use reshape");
    }
    tb_tensor view;
    begin_view(tensor, &view);
    view.ndim = ndim;
    memcpy(view.shape, resolved, (size_t)ndim * sizeof(int64_t));
    memcpy(view.strides, new_strides, (size_t)ndim * sizeof(int64_t));
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_reshape(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out) {
    tb_status status = tb_tensor_view(tensor, ndim, shape, out);
    if (status != TB_ERR_UNSUPPORTED)
        return status;
    tb_error_clear();
    tb_tensor contiguous;
    TB_TRY(tb_tensor_contiguous(tensor, tensor->dtype, &contiguous));
    status = tb_tensor_view(&contiguous, ndim, shape, out);
    tb_tensor_release(&contiguous);
    return status;
}

tb_status tb_tensor_unsqueeze(const tb_tensor *tensor, int64_t dim, tb_tensor *out) {
    if (tensor->ndim >= TB_MAX_DIMS)
        return tb_error_set(TB_ERR_SHAPE, "unsqueeze: a tensor has at most %d dims", TB_MAX_DIMS);
    int d;
    if (dim < -(tensor->ndim + 1) || dim > tensor->ndim)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "unsqueeze: dim %lld is out of range for a %d-dim tensor",
                            (long long)dim, tensor->ndim);
    d = (int)(dim < 0 ? dim + tensor->ndim + 1 : dim);
    tb_tensor view;
    begin_view(tensor, &view);
    for (int i = tensor->ndim; i > d; i--) {
        view.shape[i] = tensor->shape[i - 1];
        view.strides[i] = tensor->strides[i - 1];
    }
    view.shape[d] = 1;
    view.strides[d] = d + 1 < tensor->ndim + 1 ? tensor->strides[d] * tensor->shape[d] : 1;
    if (d == tensor->ndim)
        view.strides[d] = 1;
    view.ndim = tensor->ndim + 1;
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_tensor_squeeze(const tb_tensor *tensor, int64_t dim, bool squeeze_all, tb_tensor *out) {
    int target = -1;
    if (!squeeze_all && tensor->ndim > 0)
        TB_TRY(tb_normalize_dim(dim, tensor->ndim, &target));
    tb_tensor view;
    begin_view(tensor, &view);
    int kept = 0;
    for (int i = 0; i < tensor->ndim; i++) {
        bool drop = tensor->shape[i] == 1 && (squeeze_all || i == target);
        if (!drop) {
            view.shape[kept] = tensor->shape[i];
            view.strides[kept] = tensor->strides[i];
            kept++;
        }
    }
    view.ndim = kept;
    *out = view;
    finish_view(tensor, out);
    return TB_OK;
}

tb_status tb_broadcast_shapes(int ndim_a, const int64_t *shape_a, int ndim_b, const int64_t *shape_b, int *ndim_out,
                              int64_t *shape_out) {
    int ndim = ndim_a > ndim_b ? ndim_a : ndim_b;
    int64_t result[TB_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int ia = i - (ndim - ndim_a), ib = i - (ndim - ndim_b);
        int64_t a = ia >= 0 ? shape_a[ia] : 1;
        int64_t b = ib >= 0 ? shape_b[ib] : 1;
        if (a == b || b == 1) {
            result[i] = a;
        } else if (a == 1) {
            result[i] = b;
        } else {
            char sa[128], sb[128];
            return tb_error_set(TB_ERR_SHAPE, "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                                tb_shape_string(ndim_a, shape_a, sa, sizeof sa),
                                tb_shape_string(ndim_b, shape_b, sb, sizeof sb), i, (long long)a, (long long)b);
        }
    }
    *ndim_out = ndim;
    memcpy(shape_out, result, (size_t)ndim * sizeof(int64_t));
    return TB_OK;
}
