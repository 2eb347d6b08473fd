/* The tensor: a refcounted storage plus a NumPy-like view (dtype, shape, strides in elements, offset
 * in elements, up to 8 dims). Views share storage; tb_tensor is a small value type that owns one
 * storage reference (copy with tb_tensor_retain, drop with tb_tensor_release).
 *
 * Shape letters used across torchburn: B batch, T sequence, C channels, H heads, D head dim,
 * M/N/K matrix dims (C[M,N] = A[M,K] @ B[K,N]). */
#ifndef TORCHBURN_TENSOR_H
#define TORCHBURN_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/dtype.h"
#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TB_MAX_DIMS = 8 };

/* Called when the last reference to a storage goes: frees or unmaps external memory. */
typedef void (*tb_storage_release_fn)(void *release_context, void *data, size_t nbytes);

typedef struct tb_storage {
    atomic_long refcount;
    void *data;                    /* 64-byte aligned when allocated by torchburn */
    size_t nbytes;                 /* bytes addressable from data */
    bool read_only;                /* writes through this storage are refused */
    tb_storage_release_fn release; /* NULL: data came from tb_alloc */
    void *release_context;
    uint64_t version;              /* bumped by in-place writes: the eager layer's autograd version
                                      counter, shared by every view of the storage */
    atomic_bool exported;          /* the raw memory was handed out (DLPack, buffer protocol, numpy,
                                      data_ptr): writes may now bypass `version` */
    bool owner_versioned;          /* external memory whose owner bumps `version` whenever it may have
                                      changed (a compiled plan's frozen weights): derived data may be
                                      cached on it (tb_storage_wrap_versioned) */
    _Atomic(struct tb_storage_derived *) derived; /* cache of data computed from these bytes */
} tb_storage;

/* Data derived from a storage's bytes and cached with it (e.g. a prepacked GEMM operand). The owner
 * validates it against `version` (and whatever layout it keyed on) before use; it is freed with the
 * storage. */
typedef struct tb_storage_derived {
    void (*free)(struct tb_storage_derived *self);
} tb_storage_derived;

/* Whether derived data of `storage` may be cached: its memory is torchburn's own (tb_storage_new) and
 * was never exported, so every write to it goes through code that bumps `version`, or its owner
 * promised to bump `version` itself (tb_storage_wrap_versioned). Other memory wrapped from elsewhere
 * (numpy, DLPack, torch) or exported can change behind our back: never cached. */
TB_API bool tb_storage_cacheable(const tb_storage *storage);
/* Marks the raw memory as handed out (the export paths call it); caching stops for good. */
TB_API void tb_storage_mark_exported(tb_storage *storage);
/* Takes the cached derived data (NULL when none): the caller owns it until it puts it back, so two
 * threads never use one cache entry at once. */
TB_API tb_storage_derived *tb_storage_derived_take(tb_storage *storage);
/* Puts `derived` (may be NULL) back as the storage's cache; when the storage is not cacheable or
 * another thread put one back first, `derived` is freed instead. */
TB_API void tb_storage_derived_put(tb_storage *storage, tb_storage_derived *derived);

typedef struct tb_tensor {
    tb_storage *storage;
    tb_dtype dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    int64_t strides[TB_MAX_DIMS]; /* in elements; may be 0 (broadcast) or negative-free (we never
                                     produce negative strides and refuse to import them) */
    int64_t offset;               /* in elements from storage->data */
} tb_tensor;

/* ---- storage ---- */

/* Wraps external memory (not copied). `release` runs when the last reference goes (may be NULL for
 * memory that outlives torchburn). */
TB_API TB_NODISCARD tb_status tb_storage_wrap(void *data, size_t nbytes, bool read_only,
                                              tb_storage_release_fn release, void *release_context,
                                              tb_storage **out);
/* Wraps external memory read-only for an owner that bumps `version` (storage->version++) before every
 * use after the bytes may have changed, so derived data (packed weights) can be cached on it. */
TB_API TB_NODISCARD tb_status tb_storage_wrap_versioned(void *data, size_t nbytes, tb_storage_release_fn release,
                                                        void *release_context, tb_storage **out);
TB_API TB_NODISCARD tb_status tb_storage_new(size_t nbytes, unsigned alloc_flags, tb_storage **out);
TB_API void tb_storage_retain(tb_storage *storage);
TB_API void tb_storage_release(tb_storage *storage);

/* ---- creation and lifetime ---- */

/* Checks ndim and dims (>= 0) and that the element count and byte size fit in int64. */
TB_API TB_NODISCARD tb_status tb_shape_check(int ndim, const int64_t *shape, tb_dtype dtype, int64_t *numel_out);

/* A new contiguous tensor (alloc_flags: TB_ALLOC_ZERO to zero-fill). */
TB_API TB_NODISCARD tb_status tb_tensor_empty(tb_dtype dtype, int ndim, const int64_t *shape,
                                              unsigned alloc_flags, tb_tensor *out);

/* A view of `storage` (which gains a reference). strides NULL means contiguous. Checks that every
 * addressable element lies inside the storage. */
TB_API TB_NODISCARD tb_status tb_tensor_from_storage(tb_storage *storage, tb_dtype dtype, int ndim,
                                                     const int64_t *shape, const int64_t *strides,
                                                     int64_t offset, tb_tensor *out);

/* Another reference to the same view. */
TB_API void tb_tensor_retain(const tb_tensor *tensor, tb_tensor *out);
/* Drops the reference and zeroes *tensor. Safe on a zeroed tensor. */
TB_API void tb_tensor_release(tb_tensor *tensor);

/* ---- queries ---- */

TB_API int64_t tb_tensor_numel(const tb_tensor *tensor);
TB_API bool tb_tensor_is_contiguous(const tb_tensor *tensor);
static inline void *tb_tensor_data(const tb_tensor *tensor) {
    return (char *)tensor->storage->data + tensor->offset * (int64_t)tb_dtype_size(tensor->dtype);
}
/* Fills strides for a contiguous row-major layout of shape. */
TB_API void tb_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
/* A readable "[2, 3, 4]" rendering into buf (for messages). Returns buf. */
TB_API const char *tb_shape_string(int ndim, const int64_t *shape, char *buf, size_t size);

/* ---- views (share storage; out gets its own reference) ---- */

/* dims may be negative (counted from the end); a bad dim is an error naming it. */
TB_API TB_NODISCARD tb_status tb_normalize_dim(int64_t dim, int ndim, int *out);

TB_API TB_NODISCARD tb_status tb_tensor_slice(const tb_tensor *tensor, int64_t dim, int64_t start,
                                              int64_t stop, int64_t step, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_tensor_select(const tb_tensor *tensor, int64_t dim, int64_t index, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_tensor_transpose(const tb_tensor *tensor, int64_t dim0, int64_t dim1, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_tensor_permute(const tb_tensor *tensor, int ndim, const int64_t *dims, tb_tensor *out);
/* Broadcasts to `shape` (ndim >= tensor's; -1 keeps a dim) with zero strides, like torch.expand. */
TB_API TB_NODISCARD tb_status tb_tensor_expand(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out);
/* A view with a new shape (one entry may be -1). TB_ERR_UNSUPPORTED when the strides do not allow a
 * view; tb_tensor_reshape then copies. */
TB_API TB_NODISCARD tb_status tb_tensor_view(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_tensor_reshape(const tb_tensor *tensor, int ndim, const int64_t *shape, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_tensor_unsqueeze(const tb_tensor *tensor, int64_t dim, tb_tensor *out);
/* dim: a dim to squeeze (must be size 1... or not, as torch: a no-op when not 1); squeeze_all: all. */
TB_API TB_NODISCARD tb_status tb_tensor_squeeze(const tb_tensor *tensor, int64_t dim, bool squeeze_all, tb_tensor *out);

/* ---- copies ---- */

/* dst <- src, broadcasting src to dst's shape, converting dtype, any strides. dst must be writable
 * and must not partially overlap src. Parallel for large tensors. */
TB_API TB_NODISCARD tb_status tb_tensor_copy(tb_tensor *dst, const tb_tensor *src);
/* A contiguous tensor with src's values in `dtype` (src itself, retained, when it already is one). */
TB_API TB_NODISCARD tb_status tb_tensor_contiguous(const tb_tensor *src, tb_dtype dtype, tb_tensor *out);
/* The broadcast of two shapes (NumPy rules), or TB_ERR_SHAPE naming both. */
TB_API TB_NODISCARD tb_status tb_broadcast_shapes(int ndim_a, const int64_t *shape_a, int ndim_b,
                                                  const int64_t *shape_b, int *ndim_out, int64_t *shape_out);
/* Merges, in place, the dims of `shape` that two operands walked with strides_a and strides_b (in any
 * one unit each) can both step through as one (stride[d - 1] == stride[d] * shape[d] for both), and
 * drops size-1 dims; returns the number of dims left, 0 when every dim had size 1. */
TB_API int tb_dims_merge(int ndim, int64_t *shape, int64_t *strides_a, int64_t *strides_b);
/* Counts copies made because a layout or dtype conversion was unavoidable (stats). */
TB_API uint64_t tb_tensor_copy_count(void);
TB_API void tb_tensor_note_copy(void);

#ifdef __cplusplus
}
#endif
#endif
