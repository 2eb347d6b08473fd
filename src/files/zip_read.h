/* A strict reader of stored (uncompressed) zip archives held in memory, as PyTorch's torch.save writes
 * them: every byte of the central directory and of each local header is checked before an entry is
 * handed out. Internal to torchburn (used by turbo_torch.load). */
#ifndef TB_FILES_ZIP_READ_H
#define TB_FILES_ZIP_READ_H

#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

typedef struct tb_zip_entry {
    const char *name;     /* points into the archive (not NUL-terminated) */
    size_t name_length;
    uint64_t data_offset; /* first byte of the stored data inside the archive */
    uint64_t size;        /* bytes of data (stored: compressed == uncompressed) */
} tb_zip_entry;

/* Indexes the archive data[0, size). On success *entries is a malloc'd array of *count entries (free()
 * it) in central-directory order. Checks: the end record (and its zip64 form) lies at the end and points
 * at a central directory inside the file; each central header is complete, stored, unencrypted, with
 * equal sizes; its local header matches its name and lies before the central directory; entries do not
 * overlap; names are non-empty relative paths without '..' components, backslashes or NUL, and unique;
 * the CRC-32 of each entry matches. Returns TB_ERR_FORMAT naming the problem otherwise. */
tb_status tb_zip_index(const unsigned char *data, size_t size, tb_zip_entry **entries, size_t *count);

/* The CRC-32 (IEEE 802.3, as zip uses) of data[0, size). */
uint32_t tb_zip_crc32(const unsigned char *data, size_t size);

#endif
