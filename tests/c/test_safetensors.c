/* Tests of the safetensors reader, writer and checkpoint folders: 40+ hand-made malformed files each
 * with its expected message, valid files with every dtype, 0-dim and empty tensors, zero-copy views that
 * outlive the handle, misaligned data, the writer against bytes captured from the `safetensors` package,
 * atomic replacement, and sharded index folders including hostile indexes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/safetensors.h"

/* ---- building files in memory ---- */

typedef struct blob {
    unsigned char *bytes;
    size_t size;
} blob;

/* 8-byte length + header + `data_size` bytes of pattern. header_length_override (when not ~0) replaces
 * the length field. */
static blob make_blob(const char *header, size_t header_size, size_t data_size, uint64_t header_length_override) {
    blob b;
    b.size = 8 + header_size + data_size;
    b.bytes = malloc(b.size ? b.size : 1);
    uint64_t length = header_length_override != ~0ull ? header_length_override : header_size;
    for (int i = 0; i < 8; i++)
        b.bytes[i] = (unsigned char)(length >> (8 * i));
    memcpy(b.bytes + 8, header, header_size);
    for (size_t i = 0; i < data_size; i++)
        b.bytes[8 + header_size + i] = (unsigned char)(i * 37 + 11);
    return b;
}

static blob make_file(const char *header, size_t data_size) {
    return make_blob(header, strlen(header), data_size, ~0ull);
}

typedef struct bad_case {
    const char *name;
    const char *header; /* NULL: raw bytes case handled separately */
    size_t data_size;
    const char *error;
} bad_case;

#define T(name, body) "\"" name "\":" body
static const bad_case bad_cases[] = {
    {"header_not_json", "{abc", 0, "bad.safetensors: header: line 1, column 2: expected a string key"},
    {"header_array", "[]", 0, "header is not a JSON object"},
    {"header_leading_space", " {}", 0, "must start with '{'"},
    {"header_trailing_garbage", "{} x", 0, "after the document"},
    {"header_nul_padding", "{}\0\0\0\0\0\0", 0, "byte 0x00 after the document"},
    {"header_invalid_utf8_name", "{\"\xff\":{}}", 0, "invalid UTF-8 byte 0xff"},
    {"header_lone_surrogate_name", "{\"\\udc00\":{}}", 0, "lone low surrogate"},
    {"duplicate_names", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}") ","
                        T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}") "}", 2, "duplicate key \"w\""},
    {"bad_dtype", "{" T("w", "{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}") "}", 4,
     "tensor 'w' unknown dtype 'F33'"},
    {"sub_byte_dtype", "{" T("w", "{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}") "}", 1, "sub-byte"},
    {"lowercase_dtype", "{" T("w", "{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}") "}", 4, "unknown dtype 'f32'"},
    {"dtype_not_string", "{" T("w", "{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}") "}", 4,
     "dtype must be a string, got integer"},
    {"negative_shape", "{" T("w", "{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}") "}", 4,
     "tensor 'w' shape[0] is negative (-1)"},
    {"shape_2_pow_63", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,1]}") "}", 1,
     "shape[0] = 9.2233720368547758e+18 is not a non-negative 64-bit integer"},
    {"shape_fraction", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}") "}", 1,
     "shape[0] = 1.5 is not"},
    {"shape_string", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}") "}", 1,
     "shape[0] must be an integer, got string"},
    {"shape_not_array", "{" T("w", "{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}") "}", 1,
     "shape must be an array of integers, got integer"},
    {"shape_nine_dims", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}") "}", 1,
     "has 9 dims"},
    {"shape_overflow", "{" T("w", "{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}") "}", 4,
     "shape [4294967296, 4294967296] × F32 overflows a 64-bit byte count"},
    {"shape_overflow_int64", "{" T("w", "{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]}") "}",
     8, "overflows"},
    {"offsets_size_mismatch", "{" T("lm_head.weight", "{\"dtype\":\"F32\",\"shape\":[32,64],\"data_offsets\":[0,4096]}") "}",
     4096, "bad.safetensors: tensor 'lm_head.weight' data_offsets [0, 4096] do not match shape [32, 64] × F32 = 8192 bytes"},
    {"offsets_reversed", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}") "}", 4,
     "data_offsets [4, 0] end before they begin"},
    {"offsets_past_end", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}") "}", 4,
     "data_offsets [2, 6] run past the end of the data section (4 bytes)"},
    {"offsets_huge", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[18446744073709551600,0]}") "}", 16,
     "data_offsets[0] must be a non-negative 64-bit integer"},
    {"offsets_negative", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}") "}", 1,
     "data_offsets[0] must be a non-negative"},
    {"offsets_wrong_length", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}") "}", 1,
     "data_offsets must be an array of 2 integers"},
    {"offsets_float", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}") "}", 1,
     "data_offsets[1] must be a non-negative"},
    {"overlap", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") ","
                T("b", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}") "}", 6,
     "tensor 'b' data_offsets [2, 6] overlap tensor 'a' (which ends at 4)"},
    {"same_range_twice", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") ","
                         T("b", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") "}", 4, "overlap tensor"},
    {"gap", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") ","
            T("b", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}") "}", 12,
     "tensor 'b' data_offsets [8, 12] leave a gap: bytes [4, 8) belong to no tensor"},
    {"not_from_zero", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}") "}", 8,
     "bytes [0, 4) belong to no tensor"},
    {"trailing_bytes", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") "}", 7,
     "3 trailing bytes: the data section has 7 bytes but the tensors end at 4"},
    {"trailing_bytes_no_tensors", "{}", 1, "1 trailing bytes"},
    {"missing_dtype", "{" T("w", "{\"shape\":[1],\"data_offsets\":[0,1]}") "}", 1, "tensor 'w' is missing 'dtype'"},
    {"missing_offsets", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1]}") "}", 1, "is missing 'data_offsets'"},
    {"unknown_field", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}") "}", 1,
     "has unknown field 'extra'"},
    {"entry_not_object", "{" T("w", "[1]") "}", 0, "tensor 'w' entry must be an object, got array"},
    {"metadata_not_object", "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ must be an object of strings, got array"},
    {"metadata_non_string", "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value of 'k' must be a string, got integer"},
    {"metadata_nul", "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "__metadata__ entry 'k' contains a NUL"},
    {"metadata_deep_nesting", "{\"__metadata__\":{\"k\":[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]}}", 0, "nesting deeper than 8"},
    {"name_with_nul", "{" T("a\\u0000b", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}") "}", 1,
     "name contains a NUL character"},
    {"number_2_pow_63_offsets", "{" T("w", "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,9223372036854775808]}") "}",
     1, "data_offsets[1] must be a non-negative 64-bit integer"},
    {"empty_in_the_middle_of_a_tensor", "{" T("a", "{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}") ","
                                        T("e", "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}") "}", 4,
     "tensor 'e' data_offsets [2, 2] overlap tensor 'a'"},
};

static void check_rejected(const char *name, const unsigned char *bytes, size_t size, const char *error) {
    tb_safetensors_t *file = NULL;
    tb_status status = tb_safetensors_open_memory(bytes, size, "bad.safetensors", &file);
    TB_CHECK_MSG(status == TB_ERR_FORMAT && file == NULL, "%s: accepted (status %s)", name, tb_status_name(status));
    TB_CHECK_MSG(strstr(tb_error_message(), error) != NULL, "%s: message '%s' lacks '%s'", name, tb_error_message(),
                 error);
    TB_CHECK_MSG(strncmp(tb_error_message(), "bad.safetensors: ", 17) == 0, "%s: message '%s' lacks the file", name,
                 tb_error_message());
    tb_safetensors_close(file);
}

static void test_malformed(void) {
    int total = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        size_t header_size = strcmp(c->name, "header_nul_padding") == 0 ? 8 : strlen(c->header);
        blob b = make_blob(c->header, header_size, c->data_size, ~0ull);
        check_rejected(c->name, b.bytes, b.size, c->error);
        free(b.bytes);
        total++;
    }
    /* cases about the length prefix itself */
    unsigned char raw[16] = {0};
    check_rejected("empty_file", raw, 0, "file is 0 bytes, too short for the 8-byte header length");
    check_rejected("seven_bytes", raw, 7, "file is 7 bytes, too short");
    blob b = make_blob("{}", 2, 0, ~0ull - 1);
    check_rejected("huge_header_length", b.bytes, b.size, "header length 18446744073709551614 is more than the limit");
    free(b.bytes);
    b = make_blob("{}", 2, 0, 100000001);
    check_rejected("header_length_over_limit", b.bytes, b.size, "more than the limit of 100000000 bytes");
    free(b.bytes);
    b = make_blob("{}      ", 8, 0, 64);
    check_rejected("header_length_past_eof", b.bytes, b.size, "header length 64 runs past the end of the file (16 bytes)");
    free(b.bytes);
    b = make_blob("{}", 2, 0, 0);
    check_rejected("header_length_zero", b.bytes, b.size, "header is not a JSON object");
    free(b.bytes);
    b = make_blob("{\"a\":", 5, 0, ~0ull);
    check_rejected("header_truncated_json", b.bytes, b.size, "unexpected end of input");
    free(b.bytes);
    total += 7;
    TB_CHECK_MSG(total >= 30, "only %d malformed cases", total);
    printf("safetensors: %d malformed files rejected with their expected messages\n", total);
}

/* ---- valid files ---- */

static void test_valid_memory(void) {
    const char *header =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"\xc3\xa9\"},"
        T("f64", "{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}") ","
        T("f32", "{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]}") ","
        T("empty", "{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[32,32]}") ","
        T("bf16", "{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[32,36]}") ","
        T("f8", "{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[36,39]}") ","
        T("flag", "{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[39,40]}") "}";
    size_t header_length = strlen(header);
    size_t padded = (header_length + 7) / 8 * 8;
    char padded_header[1024];
    memset(padded_header, ' ', padded);
    memcpy(padded_header, header, header_length);
    blob b = make_blob(padded_header, padded, 40, ~0ull);
    tb_safetensors_t *file = NULL;
    TB_CHECK_MSG(tb_safetensors_open_memory(b.bytes, b.size, "ok.safetensors", &file) == TB_OK, "%s",
                 tb_error_message());
    if (!file) {
        free(b.bytes);
        return;
    }
    TB_CHECK(tb_safetensors_count(file) == 6);
    TB_CHECK(tb_safetensors_metadata_count(file) == 2);
    TB_CHECK(strcmp(tb_safetensors_metadata_get(file, "format"), "pt") == 0);
    TB_CHECK(strcmp(tb_safetensors_metadata_get(file, "note"), "\xc3\xa9") == 0);
    TB_CHECK(tb_safetensors_metadata_get(file, "absent") == NULL);
    tb_safetensors_info info;
    TB_CHECK(tb_safetensors_info_at(file, 1, &info) == TB_OK && strcmp(info.name, "f32") == 0 && info.ndim == 2 &&
             info.shape[0] == 2 && info.shape[1] == 3 && info.dtype == TB_SAFETENSORS_F32 && info.data_offset == 8 &&
             info.nbytes == 24);
    tb_tensor t;
    TB_CHECK(tb_safetensors_get(file, "f32", &t) == TB_OK);
    TB_CHECK(t.dtype == TB_F32 && t.ndim == 2 && t.storage->read_only);
    const unsigned char *data_section = b.bytes + 8 + padded;
    TB_CHECK(tb_tensor_data(&t) == data_section + 8); /* zero copy */
    tb_tensor_release(&t);
    TB_CHECK(tb_safetensors_get(file, "f64", &t) == TB_OK && t.ndim == 0 && tb_tensor_numel(&t) == 1);
    tb_tensor_release(&t);
    TB_CHECK(tb_safetensors_get(file, "empty", &t) == TB_OK && t.ndim == 2 && tb_tensor_numel(&t) == 0);
    tb_tensor_release(&t);
    TB_CHECK(tb_safetensors_get(file, "flag", &t) == TB_OK && t.dtype == TB_BOOL);
    tb_tensor_release(&t);
    /* F8 is recognised and readable as bytes, but torchburn tensors cannot hold it */
    TB_CHECK(tb_safetensors_get(file, "f8", &t) == TB_ERR_DTYPE);
    TB_CHECK(strstr(tb_error_message(), "tensor 'f8'") != NULL && strstr(tb_error_message(), "F8_E4M3") != NULL);
    size_t index;
    TB_CHECK(tb_safetensors_find(file, "f8", &index) == TB_OK && index == 4);
    TB_CHECK(tb_safetensors_data_at(file, index) == data_section + 36);
    TB_CHECK(tb_safetensors_get(file, "nope", &t) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "ok.safetensors: no tensor named 'nope'") != NULL);
    TB_CHECK(tb_safetensors_info_at(file, 6, &info) == TB_ERR_INVALID_ARGUMENT);
    tb_safetensors_close(file);
    free(b.bytes);

    /* an empty file: no tensors at all */
    b = make_blob("{}      ", 8, 0, ~0ull);
    TB_CHECK(tb_safetensors_open_memory(b.bytes, b.size, NULL, &file) == TB_OK && tb_safetensors_count(file) == 0);
    tb_safetensors_close(file);
    free(b.bytes);
}

/* A header length that is not a multiple of 8 leaves data misaligned: the reader copies (counted). */
static void test_misaligned(void) {
    blob b = make_file("{" T("w", "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}") "}", 8);
    tb_safetensors_t *file = NULL;
    TB_CHECK(tb_safetensors_open_memory(b.bytes, b.size, "odd.safetensors", &file) == TB_OK);
    uint64_t copies = tb_tensor_copy_count();
    tb_tensor t;
    TB_CHECK(tb_safetensors_get(file, "w", &t) == TB_OK);
    bool aligned = ((uintptr_t)(b.bytes + b.size - 8)) % 4 == 0;
    if (!aligned) {
        TB_CHECK(tb_tensor_copy_count() == copies + 1);
        TB_CHECK((uintptr_t)tb_tensor_data(&t) % 4 == 0);
    }
    TB_CHECK(memcmp(tb_tensor_data(&t), b.bytes + b.size - 8, 8) == 0);
    tb_tensor_release(&t);
    tb_safetensors_close(file);
    free(b.bytes);
}

/* Allocation failures at every tb_alloc site give TB_ERR_OUT_OF_MEMORY and leak nothing (ASan build). */
static void test_allocation_failures(void) {
    blob b = make_file("{" T("w", "{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}") "}", 2);
    int failures = 0;
    for (int64_t k = 0; k < 8; k++) {
        tb_alloc_fail_after(k);
        tb_safetensors_t *file = NULL;
        tb_tensor t = {0};
        tb_status status = tb_safetensors_open_memory(b.bytes, b.size, "oom.safetensors", &file);
        if (status == TB_OK)
            status = tb_safetensors_get(file, "w", &t);
        tb_alloc_fail_after(-1);
        TB_CHECK_MSG(status == TB_OK || status == TB_ERR_OUT_OF_MEMORY, "k=%lld: %s", (long long)k, tb_error_message());
        failures += status != TB_OK;
        tb_tensor_release(&t);
        tb_safetensors_close(file);
    }
    TB_CHECK(failures > 0);
    free(b.bytes);
}

/* ---- files on disk ---- */

static char temp_dir[64];

static char *temp_path(const char *name) {
    static char paths[8][256];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, 256, "%s/%s", temp_dir, name);
    return path;
}

static bool write_bytes(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* Bytes written by safetensors 0.8.0 (Python) for: c=float64 2.5 (0-dim), b=float32 arange(6) [2,3],
 * e=float16 zeros [0,4], a=int8 [1,-2,3], "w\"\n\u00e9"=bool [True, False]; metadata {"format": "pt"}. */
static const char reference_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},\"c\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},\"b\":{"
    "\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_"
    "offsets\":[32,32]},\"a\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[32,35]},\"w\\\"\\n\xc3\xa9\":{\"dtype\""
    ":\"BOOL\",\"shape\":[2],\"data_offsets\":[35,37]}}       ";
static const unsigned char reference_data[37] = {0,    0,    0,    0,    0,    0,    4,    0x40, 0, 0,    0,    0,   0,
                                                 0,    0x80, 0x3f, 0,    0,    0,    0x40, 0,    0, 0x40, 0x40, 0,   0,
                                                 0x80, 0x40, 0,    0,    0xa0, 0x40, 0x01, 0xfe, 3, 1,    0};

static void test_writer(void) {
    double c = 2.5;
    float bvals[6] = {0, 1, 2, 3, 4, 5};
    int8_t avals[3] = {1, -2, 3};
    uint8_t wvals[2] = {1, 0};
    tb_safetensors_entry entries[5] = {
        {.name = "b", .dtype = TB_SAFETENSORS_F32, .ndim = 2, .shape = {2, 3}, .data = bvals},
        {.name = "a", .dtype = TB_SAFETENSORS_I8, .ndim = 1, .shape = {3}, .data = avals},
        {.name = "c", .dtype = TB_SAFETENSORS_F64, .ndim = 0, .data = &c},
        {.name = "e", .dtype = TB_SAFETENSORS_F16, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "w\"\n\xc3\xa9", .dtype = TB_SAFETENSORS_BOOL, .ndim = 1, .shape = {2}, .data = wvals},
    };
    const char *keys[] = {"format"}, *values[] = {"pt"};
    const char *path = temp_path("written.safetensors");
    TB_CHECK_MSG(tb_safetensors_write(path, entries, 5, keys, values, 1) == TB_OK, "%s", tb_error_message());
    FILE *f = fopen(path, "rb");
    unsigned char got[1024];
    size_t size = f ? fread(got, 1, sizeof got, f) : 0;
    if (f)
        fclose(f);
    size_t header_length = sizeof reference_header - 1;
    TB_CHECK_MSG(size == 8 + header_length + sizeof reference_data, "size %zu", size);
    TB_CHECK(got[0] == (header_length & 0xff) && got[1] == (header_length >> 8));
    TB_CHECK_MSG(memcmp(got + 8, reference_header, header_length) == 0, "header differs: %.*s", (int)header_length,
                 got + 8);
    TB_CHECK(memcmp(got + 8 + header_length, reference_data, sizeof reference_data) == 0);

    /* read back through the mapping; views outlive the handle */
    tb_safetensors_t *file = NULL;
    TB_CHECK_MSG(tb_safetensors_open(path, &file) == TB_OK, "%s", tb_error_message());
    tb_tensor t = {0};
    TB_CHECK(file && tb_safetensors_get(file, "b", &t) == TB_OK);
    tb_safetensors_close(file);
    /* replacing the file atomically does not disturb the live mapping */
    entries[0].data = avals;
    entries[0].dtype = TB_SAFETENSORS_U8;
    entries[0].shape[0] = 3, entries[0].ndim = 1;
    TB_CHECK(tb_safetensors_write(path, entries, 1, NULL, NULL, 0) == TB_OK);
    TB_CHECK(t.storage && memcmp(tb_tensor_data(&t), bvals, sizeof bvals) == 0);
    tb_tensor_release(&t);

    /* no metadata: no __metadata__ key; empty metadata: an empty object (as the package does) */
    char *header;
    size_t header_size;
    uint64_t data_size;
    TB_CHECK(tb_safetensors_serialize_header(NULL, 0, NULL, NULL, 0, &header, &header_size, &data_size) == TB_OK);
    TB_CHECK(header_size == 16 && memcmp(header, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0 && data_size == 0);
    free(header);
    TB_CHECK(tb_safetensors_serialize_header(NULL, 0, keys, values, 0, &header, &header_size, &data_size) == TB_OK);
    TB_CHECK(header_size == 8 + 24 && memcmp(header + 8, "{\"__metadata__\":{}}     ", 24) == 0);
    free(header);

    /* rejected arguments leave no file behind */
    const char *bad_path = temp_path("bad.safetensors");
    tb_safetensors_entry dup[2] = {entries[1], entries[1]};
    TB_CHECK(tb_safetensors_write(bad_path, dup, 2, NULL, NULL, 0) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "duplicate tensor name 'a'") != NULL);
    tb_safetensors_entry dup_across_dtypes[2] = {entries[1], entries[2]};
    dup_across_dtypes[1].name = "a";
    TB_CHECK(tb_safetensors_write(bad_path, dup_across_dtypes, 2, NULL, NULL, 0) == TB_ERR_INVALID_ARGUMENT);
    tb_safetensors_entry reserved = entries[1];
    reserved.name = "__metadata__";
    TB_CHECK(tb_safetensors_write(bad_path, &reserved, 1, NULL, NULL, 0) == TB_ERR_INVALID_ARGUMENT);
    tb_safetensors_entry bad_utf8 = entries[1];
    bad_utf8.name = "\xc0\xaf";
    TB_CHECK(tb_safetensors_write(bad_path, &bad_utf8, 1, NULL, NULL, 0) == TB_ERR_INVALID_ARGUMENT);
    tb_safetensors_entry negative = entries[1];
    negative.shape[0] = -3;
    TB_CHECK(tb_safetensors_write(bad_path, &negative, 1, NULL, NULL, 0) == TB_ERR_INVALID_ARGUMENT);
    struct stat st;
    TB_CHECK(stat(bad_path, &st) != 0);
    TB_CHECK(tb_safetensors_write("/nonexistent-dir/x.safetensors", entries + 1, 1, NULL, NULL, 0) == TB_ERR_IO);
    TB_CHECK(strstr(tb_error_message(), "/nonexistent-dir/x.safetensors") != NULL);

    /* entry_from_tensor: contiguous tensors only */
    tb_tensor tensor, transposed;
    int64_t shape[2] = {2, 3};
    TB_CHECK(tb_tensor_empty(TB_BF16, 2, shape, TB_ALLOC_ZERO, &tensor) == TB_OK);
    tb_safetensors_entry e;
    TB_CHECK(tb_safetensors_entry_from_tensor("x", &tensor, &e) == TB_OK && e.dtype == TB_SAFETENSORS_BF16 &&
             e.ndim == 2 && e.data == tb_tensor_data(&tensor));
    TB_CHECK(tb_tensor_transpose(&tensor, 0, 1, &transposed) == TB_OK);
    TB_CHECK(tb_safetensors_entry_from_tensor("x", &transposed, &e) == TB_ERR_INVALID_ARGUMENT);
    tb_tensor_release(&transposed);
    tb_tensor_release(&tensor);
}

static void test_open_errors(void) {
    tb_safetensors_t *file = NULL;
    TB_CHECK(tb_safetensors_open(temp_path("missing.safetensors"), &file) == TB_ERR_IO);
    TB_CHECK(strstr(tb_error_message(), "missing.safetensors: cannot open") != NULL);
    TB_CHECK(tb_safetensors_open(temp_dir, &file) == TB_ERR_IO);
    TB_CHECK(strstr(tb_error_message(), "not a regular file") != NULL);
    /* a FIFO with no writer: refused at once (opening it blocking would wait forever) */
    const char *fifo = temp_path("fifo.safetensors");
    TB_CHECK(mkfifo(fifo, 0600) == 0);
    TB_CHECK(tb_safetensors_open(fifo, &file) == TB_ERR_IO);
    TB_CHECK(strstr(tb_error_message(), "not a regular file (a FIFO)") != NULL);
    unlink(fifo);
    const char *path = temp_path("short.safetensors");
    TB_CHECK(write_bytes(path, "\x10\0\0", 3));
    TB_CHECK(tb_safetensors_open(path, &file) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "short.safetensors: file is 3 bytes") != NULL);
    TB_CHECK(write_bytes(path, "", 0));
    TB_CHECK(tb_safetensors_open(path, &file) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "file is 0 bytes") != NULL);
}

/* ---- checkpoint folders ---- */

static void write_shard(const char *name, const char *tensor_a, const char *tensor_b) {
    float values[4] = {1, 2, 3, 4};
    tb_safetensors_entry entries[2] = {
        {.name = tensor_a, .dtype = TB_SAFETENSORS_F32, .ndim = 1, .shape = {2}, .data = values},
        {.name = tensor_b, .dtype = TB_SAFETENSORS_F32, .ndim = 2, .shape = {1, 2}, .data = values + 2},
    };
    TB_CHECK(tb_safetensors_write(temp_path(name), entries, 2, NULL, NULL, 0) == TB_OK);
}

static void write_index(const char *body) {
    const char *path = temp_path("model.safetensors.index.json");
    TB_CHECK(write_bytes(path, body, strlen(body)));
}

static void check_checkpoint_error(const char *what, const char *error) {
    tb_checkpoint_t *ckpt = NULL;
    tb_status status = tb_checkpoint_open(temp_dir, &ckpt);
    TB_CHECK_MSG(status != TB_OK && ckpt == NULL, "%s: accepted", what);
    TB_CHECK_MSG(strstr(tb_error_message(), error) != NULL, "%s: message '%s' lacks '%s'", what, tb_error_message(),
                 error);
    tb_checkpoint_close(ckpt);
}

static void test_checkpoint(void) {
    write_shard("model-00001-of-00002.safetensors", "layers.0.w", "layers.0.b");
    write_shard("model-00002-of-00002.safetensors", "layers.1.w", "lm_head.weight");
    write_index("{\"metadata\":{\"total_size\":32},\"weight_map\":{"
                "\"layers.0.w\":\"model-00001-of-00002.safetensors\",\"layers.0.b\":\"model-00001-of-00002.safetensors\","
                "\"layers.1.w\":\"model-00002-of-00002.safetensors\","
                "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    tb_checkpoint_t *ckpt = NULL;
    TB_CHECK_MSG(tb_checkpoint_open(temp_dir, &ckpt) == TB_OK, "%s", tb_error_message());
    if (ckpt) {
        TB_CHECK(tb_checkpoint_count(ckpt) == 4 && tb_checkpoint_shard_count(ckpt) == 2);
        TB_CHECK(strcmp(tb_checkpoint_name_at(ckpt, 0), "layers.0.b") == 0);
        TB_CHECK(strcmp(tb_checkpoint_name_at(ckpt, 3), "lm_head.weight") == 0);
        tb_tensor t;
        TB_CHECK(tb_checkpoint_get(ckpt, "lm_head.weight", &t) == TB_OK && t.ndim == 2 &&
                 ((const float *)tb_tensor_data(&t))[1] == 4.0f);
        tb_checkpoint_close(ckpt);
        TB_CHECK(((const float *)tb_tensor_data(&t))[0] == 3.0f); /* outlives the checkpoint */
        tb_tensor_release(&t);
    }
    TB_CHECK(tb_checkpoint_open(temp_path("model.safetensors.index.json"), &ckpt) == TB_OK);
    tb_safetensors_info info;
    TB_CHECK(ckpt && tb_checkpoint_info(ckpt, "layers.1.w", &info) == TB_OK && info.shape[0] == 2);
    TB_CHECK(tb_checkpoint_info(ckpt, "nope", &info) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(strstr(tb_error_message(), "no tensor named 'nope'") != NULL);
    tb_checkpoint_close(ckpt);

    write_index("{\"weight_map\":{\"layers.0.w\":\"../etc/passwd\"}}");
    check_checkpoint_error("path traversal", "not a plain file name");
    write_index("{\"weight_map\":{\"layers.0.w\":\"/abs.safetensors\"}}");
    check_checkpoint_error("absolute shard", "not a plain file name");
    write_index("{\"weight_map\":{\"layers.0.w\":\"..\"}}");
    check_checkpoint_error("dotdot shard", "not a plain file name");
    write_index("{\"weight_map\":{\"layers.0.w\":\"model-00003.safetensors\"}}");
    check_checkpoint_error("missing shard", "model-00003.safetensors: cannot open");
    write_index("{\"weight_map\":{\"layers.9.w\":\"model-00001-of-00002.safetensors\"}}");
    check_checkpoint_error("tensor not in shard", "puts tensor 'layers.9.w' in 'model-00001-of-00002.safetensors', which has no such tensor");
    write_index("{\"weight_map\":{\"layers.0.w\":7}}");
    check_checkpoint_error("shard not a string", "weight_map entry 'layers.0.w' must be a shard file name, got integer");
    write_index("{\"metadata\":{}}");
    check_checkpoint_error("no weight_map", "'weight_map' must be an object");
    write_index("{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}");
    check_checkpoint_error("duplicate in index", "duplicate key \"a\"");
    write_index("[1");
    check_checkpoint_error("index not JSON", "model.safetensors.index.json: line 1, column 3");
    /* a shard that is itself malformed is reported through the index */
    TB_CHECK(write_bytes(temp_path("model-00002-of-00002.safetensors"), "\x02\0\0\0\0\0\0\0{}x", 11));
    write_index("{\"weight_map\":{\"layers.1.w\":\"model-00002-of-00002.safetensors\"}}");
    check_checkpoint_error("bad shard", "1 trailing bytes");

    /* a folder with a single model.safetensors */
    unlink(temp_path("model.safetensors.index.json"));
    check_checkpoint_error("empty folder", "no model.safetensors.index.json or model.safetensors");
    write_shard("model.safetensors", "x", "y");
    TB_CHECK(tb_checkpoint_open(temp_dir, &ckpt) == TB_OK && tb_checkpoint_count(ckpt) == 2);
    tb_tensor t;
    TB_CHECK(ckpt && tb_checkpoint_get(ckpt, "y", &t) == TB_OK);
    tb_tensor_release(&t);
    tb_checkpoint_close(ckpt);
}

static void cleanup(void) {
    const char *names[] = {"written.safetensors", "short.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(temp_path(names[i]));
    rmdir(temp_dir);
}

int main(void) {
    snprintf(temp_dir, sizeof temp_dir, "/tmp/tb_safetensors_XXXXXX");
    if (!mkdtemp(temp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_malformed();
    test_valid_memory();
    test_misaligned();
    test_allocation_failures();
    test_writer();
    test_open_errors();
    test_checkpoint();
    cleanup();
    return tb_test_finish("safetensors");
}
