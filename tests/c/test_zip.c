/* Tests of the checkpoint zip index (src/files/zip_read.c): archives built byte by byte here, the CRC-32
 * check value, every truncation, lying sizes and offsets, zip64 extra fields, names that escape the
 * archive, compressed and duplicate entries. Python tests cover real torch.save files. */
#include <stdlib.h>
#include <string.h>

#include "files/zip_read.h"
#include "tb_test.h"

typedef struct builder {
    unsigned char bytes[4096];
    size_t size;
} builder;

static void put16(builder *b, unsigned v) { b->bytes[b->size++] = v & 0xFF; b->bytes[b->size++] = (v >> 8) & 0xFF; }
static void put32(builder *b, uint32_t v) { put16(b, v & 0xFFFF); put16(b, v >> 16); }
static void put64(builder *b, uint64_t v) { put32(b, (uint32_t)v); put32(b, (uint32_t)(v >> 32)); }
static void put(builder *b, const void *data, size_t n) { memcpy(b->bytes + b->size, data, n); b->size += n; }

typedef struct entry_spec {
    const char *name;
    const char *data;
    unsigned method;
    int zip64; /* central header sizes/offset 0xFFFFFFFF with a zip64 extra field */
} entry_spec;

/* An archive of the entries (stored), with its central directory and end record. */
static void build(builder *b, const entry_spec *entries, int n) {
    uint32_t offsets[8];
    b->size = 0;
    for (int i = 0; i < n; i++) {
        offsets[i] = (uint32_t)b->size;
        size_t len = strlen(entries[i].data);
        put32(b, 0x04034b50u); put16(b, 20); put16(b, 0); put16(b, entries[i].method); put32(b, 0);
        put32(b, tb_zip_crc32((const unsigned char *)entries[i].data, len)); put32(b, (uint32_t)len);
        put32(b, (uint32_t)len); put16(b, (unsigned)strlen(entries[i].name)); put16(b, 0);
        put(b, entries[i].name, strlen(entries[i].name));
        put(b, entries[i].data, len);
    }
    size_t dir = b->size;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(entries[i].data);
        int z = entries[i].zip64;
        put32(b, 0x02014b50u); put16(b, 20); put16(b, 20); put16(b, 0); put16(b, entries[i].method); put32(b, 0);
        put32(b, tb_zip_crc32((const unsigned char *)entries[i].data, len));
        put32(b, z ? 0xFFFFFFFFu : (uint32_t)len); put32(b, z ? 0xFFFFFFFFu : (uint32_t)len);
        put16(b, (unsigned)strlen(entries[i].name)); put16(b, z ? 28 : 0); put16(b, 0); put16(b, 0); put16(b, 0);
        put32(b, 0); put32(b, z ? 0xFFFFFFFFu : offsets[i]);
        put(b, entries[i].name, strlen(entries[i].name));
        if (z) {
            put16(b, 1); put16(b, 24); put64(b, len); put64(b, len); put64(b, offsets[i]);
        }
    }
    size_t dir_size = b->size - dir;
    put32(b, 0x06054b50u); put16(b, 0); put16(b, 0); put16(b, (unsigned)n); put16(b, (unsigned)n);
    put32(b, (uint32_t)dir_size); put32(b, (uint32_t)dir); put16(b, 0);
}

static tb_status index_of(const builder *b, size_t size, size_t *count, tb_zip_entry *first) {
    tb_zip_entry *entries = NULL;
    tb_status status = tb_zip_index(b->bytes, size, &entries, count);
    if (status == TB_OK && *count > 0 && first)
        *first = entries[0];
    free(entries);
    return status;
}

static void expect_error(const builder *b, const char *fragment) {
    size_t count;
    tb_status status = index_of(b, b->size, &count, NULL);
    TB_CHECK_MSG(status == TB_ERR_FORMAT && strstr(tb_error_message(), fragment), "expected '%s', got '%s'",
                 fragment, tb_error_message());
}

int main(void) {
    TB_CHECK(tb_zip_crc32((const unsigned char *)"123456789", 9) == 0xCBF43926u); /* the standard check value */
    { /* the 8-byte steps agree with a bytewise reference at every length and alignment */
        unsigned char buffer[300];
        for (int i = 0; i < 300; i++)
            buffer[i] = (unsigned char)(i * 7 + 3);
        for (size_t start = 0; start < 8; start++) {
            for (size_t n = 0; n + start <= 300; n += 13) {
                uint32_t crc = 0xFFFFFFFFu;
                for (size_t k = 0; k < n; k++) {
                    crc ^= buffer[start + k];
                    for (int bit = 0; bit < 8; bit++)
                        crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
                }
                TB_CHECK(tb_zip_crc32(buffer + start, n) == (crc ^ 0xFFFFFFFFu));
            }
        }
    }

    builder b;
    entry_spec good[] = {{"archive/data.pkl", "\x80\x02N.", 0, 0}, {"archive/data/0", "abcdefgh", 0, 1}};
    build(&b, good, 2);
    size_t count = 0;
    tb_zip_entry first = {0};
    TB_CHECK(index_of(&b, b.size, &count, &first) == TB_OK && count == 2);
    TB_CHECK(first.name_length == 16 && memcmp(first.name, "archive/data.pkl", 16) == 0);
    TB_CHECK(first.size == 4 && memcmp(b.bytes + first.data_offset, "\x80\x02N.", 4) == 0);

    for (size_t cut = 0; cut < b.size; cut++) { /* every truncation is an error, never a read past the end */
        tb_status status = index_of(&b, cut, &count, NULL);
        TB_CHECK_MSG(status == TB_ERR_FORMAT, "cut at %zu: %s", cut, tb_error_message());
    }

    entry_spec traversal[] = {{"archive/../../etc/passwd", "x", 0, 0}};
    build(&b, traversal, 1);
    expect_error(&b, "path traversal");
    entry_spec absolute[] = {{"/etc/passwd", "x", 0, 0}};
    build(&b, absolute, 1);
    expect_error(&b, "not a plain relative path");
    entry_spec compressed[] = {{"a/data.pkl", "x", 8, 0}};
    build(&b, compressed, 1);
    expect_error(&b, "compressed");
    entry_spec twice[] = {{"a/x", "1", 0, 0}, {"a/x", "2", 0, 0}};
    build(&b, twice, 2);
    expect_error(&b, "appears twice");

    build(&b, good, 2);
    b.bytes[30 + 16] ^= 1; /* a data byte: the CRC no longer matches */
    expect_error(&b, "CRC-32 mismatch");

    build(&b, good, 1);
    size_t dir = b.size - 22 - (46 + 16);
    builder lying = b;
    memcpy(lying.bytes + dir + 20, "\xF0\xFF\xFF\x0F", 4); /* sizes far beyond the file */
    memcpy(lying.bytes + dir + 24, "\xF0\xFF\xFF\x0F", 4);
    expect_error(&lying, "declares 268435440 bytes");
    lying = b;
    memcpy(lying.bytes + dir + 20, "\xFF\xFF\xFF\xFF", 4); /* zip64 marker without the extra field */
    memcpy(lying.bytes + dir + 24, "\xFF\xFF\xFF\xFF", 4);
    expect_error(&lying, "zip64");
    lying = b;
    memcpy(lying.bytes + b.size - 6, "\x00\x10\x00\x00", 4); /* central directory offset past the end */
    expect_error(&lying, "lies outside the file");
    lying = b;
    lying.bytes[b.size - 12] = 9; /* 9 entries declared in a 62-byte directory */
    lying.bytes[b.size - 14] = 9;
    expect_error(&lying, "more than a");

    return tb_test_finish("zip");
}
