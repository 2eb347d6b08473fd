/* safetensors files and HuggingFace checkpoint folders: a validating reader that maps the file read-only
 * and exposes each tensor as a zero-copy tb_tensor, a writer whose output is byte-identical to the
 * `safetensors` package, and a reader for sharded checkpoints (model.safetensors.index.json).
 * Every byte of a file is untrusted: a malformed file gives TB_ERR_FORMAT with a message naming the
 * file, the tensor and the rule, and no number in a file makes the reader allocate more than the
 * file's size. */
#ifndef TORCHBURN_SAFETENSORS_H
#define TORCHBURN_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"
#include "torchburn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The element types of the safetensors format, in the order of the reference implementation's enum
 * (the writer sorts tensors by this order, descending, then by name). Sub-byte types (F4, F6_*) are
 * refused. */
#define TB_SAFETENSORS_DTYPE_LIST(X) \
    X(BOOL, 1, TB_BOOL)              \
    X(U8, 1, TB_U8)                  \
    X(I8, 1, TB_I8)                  \
    X(F8_E5M2, 1, TB_DTYPE_COUNT)    \
    X(F8_E4M3, 1, TB_DTYPE_COUNT)    \
    X(F8_E8M0, 1, TB_DTYPE_COUNT)    \
    X(I16, 2, TB_I16)                \
    X(U16, 2, TB_DTYPE_COUNT)        \
    X(F16, 2, TB_F16)                \
    X(BF16, 2, TB_BF16)              \
    X(I32, 4, TB_I32)                \
    X(U32, 4, TB_DTYPE_COUNT)        \
    X(F32, 4, TB_F32)                \
    X(C64, 8, TB_DTYPE_COUNT)        \
    X(F64, 8, TB_F64)                \
    X(I64, 8, TB_I64)                \
    X(U64, 8, TB_DTYPE_COUNT)

typedef enum tb_safetensors_dtype {
#define TB_SAFETENSORS_DTYPE_ENUM(id, size, tb) TB_SAFETENSORS_##id,
    TB_SAFETENSORS_DTYPE_LIST(TB_SAFETENSORS_DTYPE_ENUM)
#undef TB_SAFETENSORS_DTYPE_ENUM
    TB_SAFETENSORS_DTYPE_COUNT
} tb_safetensors_dtype;

/* "F32", "BF16", ... ("invalid" out of range). */
TB_API const char *tb_safetensors_dtype_name(tb_safetensors_dtype dtype);
/* Bytes per element (0 out of range). */
TB_API size_t tb_safetensors_dtype_size(tb_safetensors_dtype dtype);
/* Looks up a name exactly as the format spells it ("F32"); TB_ERR_FORMAT naming it when unknown. */
TB_API TB_NODISCARD tb_status tb_safetensors_dtype_from_name(const char *name, tb_safetensors_dtype *out);
/* The torchburn dtype holding the same values; TB_ERR_DTYPE for formats torchburn cannot hold (F8_*,
 * U16/U32/U64, C64). And the reverse (every tb_dtype has one). */
TB_API TB_NODISCARD tb_status tb_safetensors_dtype_to_tb(tb_safetensors_dtype dtype, tb_dtype *out);
TB_API tb_safetensors_dtype tb_safetensors_dtype_from_tb(tb_dtype dtype);

/* ---- reading one file ---- */

typedef struct tb_safetensors tb_safetensors_t; /* an opened, validated file */

/* One tensor's header entry. `name` is UTF-8 without NUL bytes and lives as long as the file handle.
 * data_offset is from the start of the data section (byte 8 + header length). */
typedef struct tb_safetensors_info {
    const char *name;
    tb_safetensors_dtype dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    uint64_t data_offset;
    uint64_t nbytes;
} tb_safetensors_info;

/* Opens and validates `path`, then maps it read-only (no copy). Rules: the 8-byte little-endian header
 * length is at most 100,000,000 and inside the file; the header is a UTF-8 JSON object (trailing spaces
 * allowed) of tensor entries {"dtype", "shape", "data_offsets"} and an optional "__metadata__" object of
 * string values; names are unique and free of NUL; dtypes come from the format; shapes have at most
 * TB_MAX_DIMS non-negative dims; shape x dtype size equals end - begin without overflow; the tensors,
 * taken in offset order, tile the data section exactly from 0 to its end (no gap, overlap or trailing
 * byte). TB_ERR_IO when the file cannot be opened or mapped, TB_ERR_FORMAT for every rule. */
TB_API TB_NODISCARD tb_status tb_safetensors_open(const char *path, tb_safetensors_t **out);

/* The same validation on an in-memory file of `size` bytes. Nothing is copied: `data` must stay valid
 * and unchanged until the handle and every tensor taken from it are gone. `source_name` (may be NULL)
 * names the file in messages. */
TB_API TB_NODISCARD tb_status tb_safetensors_open_memory(const void *data, size_t size, const char *source_name,
                                                         tb_safetensors_t **out);

/* Drops the handle. Tensors taken from it stay valid: each holds a reference to the mapping. */
TB_API void tb_safetensors_close(tb_safetensors_t *file);

/* The name used in messages (the path as given). */
TB_API const char *tb_safetensors_source(const tb_safetensors_t *file);
/* Tensors are numbered in header (document) order. */
TB_API size_t tb_safetensors_count(const tb_safetensors_t *file);
TB_API TB_NODISCARD tb_status tb_safetensors_info_at(const tb_safetensors_t *file, size_t index,
                                                     tb_safetensors_info *out);
/* The index of tensor `name`; TB_ERR_INVALID_ARGUMENT naming it and the file when absent. */
TB_API TB_NODISCARD tb_status tb_safetensors_find(const tb_safetensors_t *file, const char *name, size_t *index);
/* The tensor's bytes inside the mapping (valid while the handle or one of its tensors lives). */
TB_API const void *tb_safetensors_data_at(const tb_safetensors_t *file, size_t index);

/* A read-only tb_tensor over the mapped bytes, sharing the mapping (no copy). When the bytes are not
 * aligned to the element size (only possible with writers other than the reference one) they are
 * copied into an aligned buffer instead, counted by tb_tensor_note_copy. TB_ERR_DTYPE for formats
 * torchburn tensors cannot hold (see tb_safetensors_dtype_to_tb). */
TB_API TB_NODISCARD tb_status tb_safetensors_get_at(const tb_safetensors_t *file, size_t index, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_safetensors_get(const tb_safetensors_t *file, const char *name, tb_tensor *out);

/* The "__metadata__" entries in document order; value NULL when the key is absent. */
TB_API size_t tb_safetensors_metadata_count(const tb_safetensors_t *file);
TB_API TB_NODISCARD tb_status tb_safetensors_metadata_at(const tb_safetensors_t *file, size_t index,
                                                         const char **key, const char **value);
TB_API const char *tb_safetensors_metadata_get(const tb_safetensors_t *file, const char *key);

/* ---- writing ---- */

/* One tensor to write: `data` holds the C-contiguous bytes of shape x dtype. */
typedef struct tb_safetensors_entry {
    const char *name;
    tb_safetensors_dtype dtype;
    int ndim;
    int64_t shape[TB_MAX_DIMS];
    const void *data;
} tb_safetensors_entry;

/* Fills an entry viewing a contiguous tensor (TB_ERR_INVALID_ARGUMENT when it is not contiguous; use
 * tb_tensor_contiguous first). The entry borrows name and the tensor's data. */
TB_API TB_NODISCARD tb_status tb_safetensors_entry_from_tensor(const char *name, const tb_tensor *tensor,
                                                               tb_safetensors_entry *out);

/* Writes a file byte-identical to the `safetensors` package's for the same tensors and metadata:
 * tensors sorted by dtype (descending, in the enum order above) then name (bytewise), compact JSON with
 * "__metadata__" first when metadata_count > 0 or metadata_keys is non-NULL, header padded with spaces
 * to a multiple of 8. The package writes metadata in hash order, so files with two or more metadata
 * entries are equal to its output only up to that order (ours: the order given). Names and metadata must
 * be valid UTF-8; names unique and not "__metadata__". The file is written next to `path` under a
 * temporary name, flushed, and renamed over `path`, so a failure never leaves a partial file there. */
TB_API TB_NODISCARD tb_status tb_safetensors_write(const char *path, const tb_safetensors_entry *entries, size_t count,
                                                   const char *const *metadata_keys,
                                                   const char *const *metadata_values, size_t metadata_count);

/* The header bytes tb_safetensors_write would produce (8-byte length prefix included), in a buffer the
 * caller frees with free(). Also returns the data section size. */
TB_API TB_NODISCARD tb_status tb_safetensors_serialize_header(const tb_safetensors_entry *entries, size_t count,
                                                              const char *const *metadata_keys,
                                                              const char *const *metadata_values,
                                                              size_t metadata_count, char **header_out,
                                                              size_t *header_size_out, uint64_t *data_size_out);

/* ---- checkpoint folders ---- */

typedef struct tb_checkpoint tb_checkpoint_t; /* a set of validated safetensors shards */

/* Opens a checkpoint: `path` is a folder holding model.safetensors.index.json (sharded) or
 * model.safetensors (single file), an index file itself, or a .safetensors file. With an index, its
 * "weight_map" (tensor name -> shard file name in the same folder; names with '/' or '..' are refused)
 * decides where each tensor lives; every shard it names is opened and validated and must hold the
 * tensors mapped to it. */
TB_API TB_NODISCARD tb_status tb_checkpoint_open(const char *path, tb_checkpoint_t **out);
TB_API void tb_checkpoint_close(tb_checkpoint_t *checkpoint);

/* Tensor names in ascending bytewise order. */
TB_API size_t tb_checkpoint_count(const tb_checkpoint_t *checkpoint);
TB_API const char *tb_checkpoint_name_at(const tb_checkpoint_t *checkpoint, size_t index);
/* The shard holding a tensor and its index there; TB_ERR_INVALID_ARGUMENT naming it when absent. */
TB_API TB_NODISCARD tb_status tb_checkpoint_locate(const tb_checkpoint_t *checkpoint, const char *name,
                                                   const tb_safetensors_t **shard, size_t *index);
TB_API TB_NODISCARD tb_status tb_checkpoint_get(const tb_checkpoint_t *checkpoint, const char *name, tb_tensor *out);
TB_API TB_NODISCARD tb_status tb_checkpoint_info(const tb_checkpoint_t *checkpoint, const char *name,
                                                 tb_safetensors_info *out);
/* Shards in the order first named by the index. */
TB_API size_t tb_checkpoint_shard_count(const tb_checkpoint_t *checkpoint);
TB_API const tb_safetensors_t *tb_checkpoint_shard_at(const tb_checkpoint_t *checkpoint, size_t index);

#ifdef __cplusplus
}
#endif
#endif
