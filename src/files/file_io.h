/* Internal helpers of the model-files layer: bounded whole-file reads, refcounted read-only mappings
 * shared by the tensors taken from a file, and path manipulation. Not part of the public API. */
#ifndef TB_FILES_FILE_IO_H
#define TB_FILES_FILE_IO_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "torchburn/status.h"

/* Reads all of `path` into a malloc'd buffer (NUL-terminated for convenience; *size excludes the NUL).
 * TB_ERR_IO naming the path when it cannot be opened or read or is not a regular file (a FIFO is refused
 * without blocking: nothing is read before the type is known); TB_ERR_FORMAT when
 * it is larger than max_bytes (checked before reading, so a huge file costs nothing). */
tb_status tb_files_read_all(const char *path, size_t max_bytes, char **data, size_t *size);

/* A read-only view of a whole file, kept alive by a reference count: the handle that opened it holds one
 * reference and every tensor storage viewing it holds one. */
typedef struct tb_mapping {
    atomic_long refcount;
    const unsigned char *data;
    size_t size;
    bool owned; /* munmap on the last release (false for caller-owned memory) */
} tb_mapping;

/* Maps the regular file `path` read-only (MAP_PRIVATE; an empty file gets a valid empty mapping).
 * TB_ERR_IO naming the path on failure. */
tb_status tb_mapping_open(const char *path, tb_mapping **out);
/* A mapping object over caller-owned memory (never unmapped). */
tb_status tb_mapping_borrow(const void *data, size_t size, tb_mapping **out);
void tb_mapping_retain(tb_mapping *mapping);
void tb_mapping_release(tb_mapping *mapping);
/* A tb_storage_release_fn whose context is a tb_mapping: drops one reference. */
void tb_mapping_storage_release(void *context, void *data, size_t nbytes);

/* True when something (of any type, a dangling link included) is at path, or it cannot be told (an error
 * other than ENOENT): callers then open it and report the real problem. */
bool tb_path_exists(const char *path);
/* True when path names a directory. */
bool tb_path_is_directory(const char *path);
/* A malloc'd "dir/name" (dir may be "" or end with '/'); NULL when out of memory. */
char *tb_path_join(const char *dir, const char *name);
/* A malloc'd copy of the folder part of path ("." when none); NULL when out of memory. */
char *tb_path_dirname(const char *path);
/* The last component of path (points into it). */
const char *tb_path_basename(const char *path);

#endif
