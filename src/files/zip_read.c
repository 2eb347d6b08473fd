/* Strict index of a stored zip archive in memory (the container of PyTorch checkpoints). Trusts no byte:
 * every offset and size is checked against the file before it is used; see zip_read.h. */
#include "zip_read.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    END_RECORD_SIZE = 22, ZIP64_LOCATOR_SIZE = 20, ZIP64_END_SIZE = 56, CENTRAL_HEADER_SIZE = 46,
    LOCAL_HEADER_SIZE = 30, MAX_COMMENT = 65535,
};
#define SIG_END 0x06054b50u
#define SIG_ZIP64_END 0x06064b50u
#define SIG_ZIP64_LOCATOR 0x07064b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_LOCAL 0x04034b50u

static uint16_t read16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t read32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t read64(const unsigned char *p) { return read32(p) | ((uint64_t)read32(p + 4) << 32); }

/* Slice-by-8: eight tables let the loop consume 8 bytes per step (about 4x the bytewise loop). Table 0 is
 * the classic reflected table of polynomial 0xEDB88320; table k advances table k-1 by one zero byte. */
static uint32_t crc_tables[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xFF];
}

uint32_t tb_zip_crc32(const unsigned char *data, size_t size) {
    pthread_once(&crc_once, crc_init);
    uint32_t crc = 0xFFFFFFFFu;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint32_t low = crc ^ read32(data + i), high = read32(data + i + 4);
        crc = crc_tables[7][low & 0xFF] ^ crc_tables[6][(low >> 8) & 0xFF] ^ crc_tables[5][(low >> 16) & 0xFF] ^
              crc_tables[4][low >> 24] ^ crc_tables[3][high & 0xFF] ^ crc_tables[2][(high >> 8) & 0xFF] ^
              crc_tables[1][(high >> 16) & 0xFF] ^ crc_tables[0][high >> 24];
    }
    for (; i < size; i++)
        crc = crc_tables[0][(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* Finds the end-of-central-directory record: the last signature whose comment reaches exactly the end. */
static tb_status find_end_record(const unsigned char *data, size_t size, size_t *out) {
    if (size < END_RECORD_SIZE)
        return tb_error_set(TB_ERR_FORMAT, "zip: file of %zu bytes is too short to be an archive (truncated?)", size);
    size_t lowest = size > END_RECORD_SIZE + MAX_COMMENT ? size - END_RECORD_SIZE - MAX_COMMENT : 0;
    for (size_t pos = size - END_RECORD_SIZE + 1; pos-- > lowest;) {
        if (read32(data + pos) == SIG_END && pos + END_RECORD_SIZE + read16(data + pos + 20) == size) {
            *out = pos;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_FORMAT, "zip: no end-of-central-directory record (truncated or not a zip archive)");
}

/* The zip64 extended-information extra field supplies, in order, each of the three values that the
 * central header set to 0xFFFFFFFF. */
static tb_status read_zip64_extra(const unsigned char *extra, size_t length, uint64_t *uncompressed,
                                  uint64_t *compressed, uint64_t *local_offset, const char *name, int name_len) {
    size_t pos = 0;
    while (pos + 4 <= length) {
        uint16_t id = read16(extra + pos), field = read16(extra + pos + 2);
        if (pos + 4 + field > length)
            return tb_error_set(TB_ERR_FORMAT, "zip: extra field of '%.*s' overruns its header", name_len, name);
        if (id == 0x0001) {
            size_t at = pos + 4, end = pos + 4 + field;
            uint64_t *values[3] = {uncompressed, compressed, local_offset};
            for (int i = 0; i < 3; i++) {
                if (*values[i] != 0xFFFFFFFFu)
                    continue;
                if (at + 8 > end)
                    return tb_error_set(TB_ERR_FORMAT, "zip: zip64 extra field of '%.*s' is too short", name_len, name);
                *values[i] = read64(extra + at);
                at += 8;
            }
            return TB_OK;
        }
        pos += 4 + field;
    }
    if (*uncompressed == 0xFFFFFFFFu || *compressed == 0xFFFFFFFFu || *local_offset == 0xFFFFFFFFu)
        return tb_error_set(TB_ERR_FORMAT, "zip: '%.*s' declares zip64 sizes without a zip64 extra field", name_len, name);
    return TB_OK;
}

static tb_status check_name(const char *name, size_t length) {
    int n = (int)(length > 200 ? 200 : length);
    if (length == 0)
        return tb_error_set(TB_ERR_FORMAT, "zip: an entry has an empty name");
    if (memchr(name, '\0', length) || memchr(name, '\\', length) || name[0] == '/')
        return tb_error_set(TB_ERR_FORMAT, "zip: entry name '%.*s' is not a plain relative path", n, name);
    size_t start = 0;
    for (size_t i = 0; i <= length; i++) {
        if (i == length || name[i] == '/') {
            if (i - start == 2 && name[start] == '.' && name[start + 1] == '.')
                return tb_error_set(TB_ERR_FORMAT, "zip: entry name '%.*s' contains a '..' component (path traversal)",
                                    n, name);
            start = i + 1;
        }
    }
    return TB_OK;
}

typedef struct span { uint64_t start, end; size_t index; } span;

static int compare_spans(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static tb_status read_directory_location(const unsigned char *data, size_t size, size_t end_pos, uint64_t *entries,
                                         uint64_t *dir_size, uint64_t *dir_offset, uint64_t *dir_limit) {
    const unsigned char *end = data + end_pos;
    if (read16(end + 4) != 0 || read16(end + 6) != 0 || read16(end + 8) != read16(end + 10))
        return tb_error_set(TB_ERR_FORMAT, "zip: multi-disk archives are not supported");
    *entries = read16(end + 10);
    *dir_size = read32(end + 12);
    *dir_offset = read32(end + 16);
    *dir_limit = end_pos;
    if (*entries != 0xFFFF && *dir_size != 0xFFFFFFFFu && *dir_offset != 0xFFFFFFFFu)
        return TB_OK;
    /* zip64: a locator just before the end record points at the zip64 end record */
    if (end_pos < ZIP64_LOCATOR_SIZE || read32(data + end_pos - ZIP64_LOCATOR_SIZE) != SIG_ZIP64_LOCATOR)
        return tb_error_set(TB_ERR_FORMAT, "zip: the end record asks for zip64 but there is no zip64 locator");
    uint64_t record = read64(data + end_pos - ZIP64_LOCATOR_SIZE + 8);
    if (record > end_pos - ZIP64_LOCATOR_SIZE || end_pos - ZIP64_LOCATOR_SIZE - record < ZIP64_END_SIZE ||
        read32(data + record) != SIG_ZIP64_END)
        return tb_error_set(TB_ERR_FORMAT, "zip: the zip64 locator points at %llu, where there is no zip64 end record",
                            (unsigned long long)record);
    const unsigned char *z = data + record;
    if (read32(z + 16) != 0 || read32(z + 20) != 0 || read64(z + 24) != read64(z + 32))
        return tb_error_set(TB_ERR_FORMAT, "zip: multi-disk archives are not supported");
    *entries = read64(z + 32);
    *dir_size = read64(z + 40);
    *dir_offset = read64(z + 48);
    *dir_limit = record;
    (void)size;
    return TB_OK;
}

static tb_status read_entry(const unsigned char *data, uint64_t dir_offset, uint64_t *pos, uint64_t dir_end,
                            tb_zip_entry *entry, span *extent) {
    const unsigned char *h = data + *pos;
    if (dir_end - *pos < CENTRAL_HEADER_SIZE || read32(h) != SIG_CENTRAL)
        return tb_error_set(TB_ERR_FORMAT, "zip: central directory header at %llu is missing or truncated",
                            (unsigned long long)*pos);
    uint16_t flags = read16(h + 8), method = read16(h + 10);
    uint32_t crc = read32(h + 16);
    uint64_t compressed = read32(h + 20), uncompressed = read32(h + 24);
    size_t name_len = read16(h + 28), extra_len = read16(h + 30), comment_len = read16(h + 32);
    uint64_t local = read32(h + 42);
    if (dir_end - *pos - CENTRAL_HEADER_SIZE < name_len + extra_len + comment_len)
        return tb_error_set(TB_ERR_FORMAT, "zip: central directory header at %llu overruns the directory",
                            (unsigned long long)*pos);
    const char *name = (const char *)h + CENTRAL_HEADER_SIZE;
    int n = (int)(name_len > 200 ? 200 : name_len);
    tb_status status = check_name(name, name_len);
    if (status == TB_OK)
        status = read_zip64_extra(h + CENTRAL_HEADER_SIZE + name_len, extra_len, &uncompressed, &compressed, &local,
                                  name, n);
    if (status != TB_OK)
        return status;
    if (flags & 0x41)
        return tb_error_set(TB_ERR_FORMAT, "zip: '%.*s' is encrypted", n, name);
    if (method != 0)
        return tb_error_set(TB_ERR_FORMAT, "zip: '%.*s' is compressed (method %u); only stored entries are supported",
                            n, name, method);
    if (compressed != uncompressed)
        return tb_error_set(TB_ERR_FORMAT, "zip: stored entry '%.*s' declares %llu compressed but %llu uncompressed bytes",
                            n, name, (unsigned long long)compressed, (unsigned long long)uncompressed);
    if (local > dir_offset || dir_offset - local < LOCAL_HEADER_SIZE)
        return tb_error_set(TB_ERR_FORMAT, "zip: local header of '%.*s' at %llu is outside the data area", n, name,
                            (unsigned long long)local);
    const unsigned char *l = data + local;
    size_t local_name = read16(l + 26), local_extra = read16(l + 28);
    if (read32(l) != SIG_LOCAL || local_name != name_len)
        return tb_error_set(TB_ERR_FORMAT, "zip: local header of '%.*s' at %llu is missing or disagrees with the "
                            "central directory", n, name, (unsigned long long)local);
    uint64_t start = local + LOCAL_HEADER_SIZE + local_name + local_extra;
    if (start > dir_offset || memcmp(l + LOCAL_HEADER_SIZE, name, name_len) != 0)
        return tb_error_set(TB_ERR_FORMAT, "zip: local header of '%.*s' disagrees with the central directory", n, name);
    if (uncompressed > dir_offset - start)
        return tb_error_set(TB_ERR_FORMAT, "zip: '%.*s' declares %llu bytes at %llu but the data area ends at %llu "
                            "(truncated or lying sizes)", n, name, (unsigned long long)uncompressed,
                            (unsigned long long)start, (unsigned long long)dir_offset);
    if (tb_zip_crc32(data + start, (size_t)uncompressed) != crc)
        return tb_error_set(TB_ERR_FORMAT, "zip: CRC-32 mismatch in '%.*s' (corrupt file)", n, name);
    entry->name = name;
    entry->name_length = name_len;
    entry->data_offset = start;
    entry->size = uncompressed;
    extent->start = local;
    extent->end = start + uncompressed;
    *pos += CENTRAL_HEADER_SIZE + name_len + extra_len + comment_len;
    return TB_OK;
}

static tb_status check_overlaps_and_duplicates(const tb_zip_entry *entries, span *spans, size_t count) {
    qsort(spans, count, sizeof *spans, compare_spans);
    for (size_t i = 1; i < count; i++) {
        if (spans[i].start < spans[i - 1].end) {
            const tb_zip_entry *e = &entries[spans[i].index];
            return tb_error_set(TB_ERR_FORMAT, "zip: entry '%.*s' overlaps another entry", (int)e->name_length, e->name);
        }
    }
    /* Distinct starts of non-overlapping spans do not make names distinct; names need their own check. */
    for (size_t i = 0; i < count; i++)
        for (size_t j = i + 1; j < count && count <= 4096; j++)
            if (entries[i].name_length == entries[j].name_length &&
                memcmp(entries[i].name, entries[j].name, entries[i].name_length) == 0)
                return tb_error_set(TB_ERR_FORMAT, "zip: entry '%.*s' appears twice", (int)entries[i].name_length,
                                    entries[i].name);
    if (count > 4096)
        return tb_error_set(TB_ERR_FORMAT, "zip: %zu entries is more than a checkpoint has (limit 4096)", count);
    return TB_OK;
}

tb_status tb_zip_index(const unsigned char *data, size_t size, tb_zip_entry **entries_out, size_t *count_out) {
    *entries_out = NULL;
    *count_out = 0;
    size_t end_pos = 0;
    uint64_t count = 0, dir_size = 0, dir_offset = 0, dir_limit = 0;
    tb_status status = find_end_record(data, size, &end_pos);
    if (status == TB_OK)
        status = read_directory_location(data, size, end_pos, &count, &dir_size, &dir_offset, &dir_limit);
    if (status != TB_OK)
        return status;
    if (dir_offset > dir_limit || dir_size > dir_limit - dir_offset)
        return tb_error_set(TB_ERR_FORMAT, "zip: central directory (%llu bytes at %llu) lies outside the file "
                            "(truncated or lying end record)", (unsigned long long)dir_size,
                            (unsigned long long)dir_offset);
    if (count > dir_size / CENTRAL_HEADER_SIZE)
        return tb_error_set(TB_ERR_FORMAT, "zip: end record declares %llu entries, more than a %llu-byte directory holds",
                            (unsigned long long)count, (unsigned long long)dir_size);
    tb_zip_entry *entries = calloc(count ? (size_t)count : 1, sizeof *entries);
    span *spans = calloc(count ? (size_t)count : 1, sizeof *spans);
    if (!entries || !spans) {
        free(entries);
        free(spans);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "zip: no memory for %llu entries", (unsigned long long)count);
    }
    uint64_t pos = dir_offset, dir_end = dir_offset + dir_size;
    for (size_t i = 0; status == TB_OK && i < count; i++) {
        status = read_entry(data, dir_offset, &pos, dir_end, &entries[i], &spans[i]);
        spans[i].index = i;
    }
    if (status == TB_OK && pos != dir_end)
        status = tb_error_set(TB_ERR_FORMAT, "zip: central directory has %llu bytes after its %llu declared entries",
                              (unsigned long long)(dir_end - pos), (unsigned long long)count);
    if (status == TB_OK)
        status = check_overlaps_and_duplicates(entries, spans, (size_t)count);
    free(spans);
    if (status != TB_OK) {
        free(entries);
        return status;
    }
    *entries_out = entries;
    *count_out = (size_t)count;
    return TB_OK;
}
