/* The safetensors reader: validates every rule of the format before anything is exposed (see the
 * contract of tb_safetensors_open), then hands out read-only tensors that view the mapped file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files/file_io.h"
#include "torchburn/json.h"
#include "torchburn/safetensors.h"

enum {
    MAX_HEADER_BYTES = 100000000, /* the reference implementation's limit */
    HEADER_MAX_DEPTH = 8,         /* root -> entry -> shape is depth 3 */
    NAME_IN_MESSAGE = 120,        /* longest name quoted in a message */
};

typedef struct tensor_entry {
    tb_safetensors_info info;
    size_t name_length;
} tensor_entry;

struct tb_safetensors {
    tb_mapping *mapping;
    char *source;
    const unsigned char *data_section;
    uint64_t data_size;
    tb_json_document *header; /* owns the name and metadata strings */
    size_t count;
    tensor_entry *tensors;    /* header order */
    size_t *by_name;          /* tensor indices sorted by name, for binary search */
    size_t metadata_count;
    const char **metadata_keys, **metadata_values;
};

/* ---- dtypes ---- */

static const struct {
    const char *name;
    size_t size;
    tb_dtype tb;
} dtype_table[TB_SAFETENSORS_DTYPE_COUNT] = {
#define TB_SAFETENSORS_DTYPE_ROW(id, size, tb) {#id, size, tb},
    TB_SAFETENSORS_DTYPE_LIST(TB_SAFETENSORS_DTYPE_ROW)
#undef TB_SAFETENSORS_DTYPE_ROW
};

const char *tb_safetensors_dtype_name(tb_safetensors_dtype dtype) {
    return (unsigned)dtype < TB_SAFETENSORS_DTYPE_COUNT ? dtype_table[dtype].name : "invalid";
}

size_t tb_safetensors_dtype_size(tb_safetensors_dtype dtype) {
    return (unsigned)dtype < TB_SAFETENSORS_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

tb_status tb_safetensors_dtype_from_name(const char *name, tb_safetensors_dtype *out) {
    for (int i = 0; i < TB_SAFETENSORS_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (tb_safetensors_dtype)i;
            return TB_OK;
        }
    }
    if (strcmp(name, "F4") == 0 || strncmp(name, "F6_", 3) == 0)
        return tb_error_set(TB_ERR_FORMAT, "dtype '%s' (sub-byte) is not supported", name);
    return tb_error_set(TB_ERR_FORMAT, "unknown dtype '%.40s'", name);
}

tb_status tb_safetensors_dtype_to_tb(tb_safetensors_dtype dtype, tb_dtype *out) {
    if ((unsigned)dtype >= TB_SAFETENSORS_DTYPE_COUNT || dtype_table[dtype].tb == TB_DTYPE_COUNT)
        return tb_error_set(TB_ERR_DTYPE, "safetensors dtype %s has no torchburn tensor type",
                            tb_safetensors_dtype_name(dtype));
    *out = dtype_table[dtype].tb;
    return TB_OK;
}

tb_safetensors_dtype tb_safetensors_dtype_from_tb(tb_dtype dtype) {
    for (int i = 0; i < TB_SAFETENSORS_DTYPE_COUNT; i++)
        if (dtype_table[i].tb == dtype)
            return (tb_safetensors_dtype)i;
    return TB_SAFETENSORS_DTYPE_COUNT;
}

/* ---- validation ---- */

static tb_status TB_PRINTF(3, 4) tensor_error(const tb_safetensors_t *file, const char *name, const char *format,
                                              ...) {
    char rule[600];
    va_list args;
    va_start(args, format);
    vsnprintf(rule, sizeof rule, format, args);
    va_end(args);
    size_t length = strlen(name);
    return tb_error_set(TB_ERR_FORMAT, "%s: tensor '%.*s%s' %s", file->source,
                        (int)(length > NAME_IN_MESSAGE ? NAME_IN_MESSAGE : length), name,
                        length > NAME_IN_MESSAGE ? "..." : "", rule);
}

static const char *shape_text(const tb_safetensors_info *info, char *buf, size_t size) {
    return tb_shape_string(info->ndim, info->shape, buf, size);
}

static tb_status parse_metadata(tb_safetensors_t *file, const tb_json_value *object) {
    if (tb_json_type_of(object) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: __metadata__ must be an object of strings, got %s", file->source,
                            tb_json_type_name(tb_json_type_of(object)));
    size_t count = tb_json_length(object);
    if (count == 0)
        return TB_OK;
    file->metadata_keys = calloc(count, sizeof *file->metadata_keys);
    file->metadata_values = calloc(count, sizeof *file->metadata_values);
    if (!file->metadata_keys || !file->metadata_values)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu metadata entries", file->source, count);
    for (size_t i = 0; i < count; i++) {
        const char *key, *text;
        size_t key_length, text_length;
        const tb_json_value *value;
        TB_TRY(tb_json_object_entry(object, i, &key, &key_length, &value));
        if (tb_json_type_of(value) != TB_JSON_STRING)
            return tb_error_set(TB_ERR_FORMAT, "%s: __metadata__ value of '%.*s' must be a string, got %s",
                                file->source, (int)(key_length > NAME_IN_MESSAGE ? NAME_IN_MESSAGE : key_length), key,
                                tb_json_type_name(tb_json_type_of(value)));
        TB_TRY(tb_json_get_string(value, &text, &text_length));
        if (memchr(key, 0, key_length) || memchr(text, 0, text_length))
            return tb_error_set(TB_ERR_FORMAT, "%s: __metadata__ entry '%.*s' contains a NUL character", file->source,
                                (int)(key_length > NAME_IN_MESSAGE ? NAME_IN_MESSAGE : key_length), key);
        file->metadata_keys[file->metadata_count] = key;
        file->metadata_values[file->metadata_count] = text;
        file->metadata_count++;
    }
    return TB_OK;
}

static tb_status parse_shape(const tb_safetensors_t *file, const char *name, const tb_json_value *shape,
                             tb_safetensors_info *info) {
    if (tb_json_type_of(shape) != TB_JSON_ARRAY)
        return tensor_error(file, name, "shape must be an array of integers, got %s",
                            tb_json_type_name(tb_json_type_of(shape)));
    size_t ndim = tb_json_length(shape);
    if (ndim > TB_MAX_DIMS)
        return tensor_error(file, name, "has %zu dims; torchburn tensors have at most %d", ndim, TB_MAX_DIMS);
    info->ndim = (int)ndim;
    for (size_t d = 0; d < ndim; d++) {
        const tb_json_value *dim = tb_json_array_at(shape, d);
        if (tb_json_type_of(dim) == TB_JSON_DOUBLE) {
            double v;
            TB_TRY(tb_json_get_double(dim, &v));
            return tensor_error(file, name, "shape[%zu] = %.17g is not a non-negative 64-bit integer", d, v);
        }
        if (tb_json_type_of(dim) != TB_JSON_INT)
            return tensor_error(file, name, "shape[%zu] must be an integer, got %s", d,
                                tb_json_type_name(tb_json_type_of(dim)));
        TB_TRY(tb_json_get_int(dim, &info->shape[d]));
        if (info->shape[d] < 0)
            return tensor_error(file, name, "shape[%zu] is negative (%lld)", d, (long long)info->shape[d]);
    }
    return TB_OK;
}

static tb_status parse_offsets(const tb_safetensors_t *file, const char *name, const tb_json_value *offsets,
                               uint64_t out[2]) {
    if (tb_json_type_of(offsets) != TB_JSON_ARRAY || tb_json_length(offsets) != 2)
        return tensor_error(file, name, "data_offsets must be an array of 2 integers [begin, end]");
    for (size_t i = 0; i < 2; i++) {
        const tb_json_value *value = tb_json_array_at(offsets, i);
        int64_t v;
        if (tb_json_type_of(value) != TB_JSON_INT || tb_json_get_int(value, &v) != TB_OK || v < 0)
            return tensor_error(file, name, "data_offsets[%zu] must be a non-negative 64-bit integer", i);
        out[i] = (uint64_t)v;
    }
    if (out[0] > out[1])
        return tensor_error(file, name, "data_offsets [%llu, %llu] end before they begin", (unsigned long long)out[0],
                            (unsigned long long)out[1]);
    return TB_OK;
}

static tb_status parse_tensor(const tb_safetensors_t *file, const char *name, size_t name_length,
                              const tb_json_value *entry, tensor_entry *out) {
    memset(out, 0, sizeof *out);
    out->info.name = name;
    out->name_length = name_length;
    if (memchr(name, 0, name_length))
        return tensor_error(file, name, "name contains a NUL character");
    if (tb_json_type_of(entry) != TB_JSON_OBJECT)
        return tensor_error(file, name, "entry must be an object, got %s", tb_json_type_name(tb_json_type_of(entry)));
    for (size_t i = 0; i < tb_json_length(entry); i++) {
        const char *key;
        size_t key_length;
        TB_TRY(tb_json_object_entry(entry, i, &key, &key_length, NULL));
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "data_offsets") != 0)
            return tensor_error(file, name, "has unknown field '%.*s' (expected dtype, shape, data_offsets)",
                                (int)(key_length > 40 ? 40 : key_length), key);
    }
    const tb_json_value *dtype = tb_json_object_get(entry, "dtype");
    const tb_json_value *shape = tb_json_object_get(entry, "shape");
    const tb_json_value *offsets = tb_json_object_get(entry, "data_offsets");
    if (!dtype || !shape || !offsets)
        return tensor_error(file, name, "is missing '%s'", !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    const char *dtype_name;
    size_t dtype_length;
    if (tb_json_get_string(dtype, &dtype_name, &dtype_length) != TB_OK)
        return tensor_error(file, name, "dtype must be a string, got %s", tb_json_type_name(tb_json_type_of(dtype)));
    if (memchr(dtype_name, 0, dtype_length) || tb_safetensors_dtype_from_name(dtype_name, &out->info.dtype) != TB_OK)
        return tensor_error(file, name, "%s", tb_error_message());
    TB_TRY(parse_shape(file, name, shape, &out->info));
    uint64_t range[2];
    TB_TRY(parse_offsets(file, name, offsets, range));

    uint64_t nbytes = tb_safetensors_dtype_size(out->info.dtype);
    bool overflow = false;
    for (int d = 0; d < out->info.ndim; d++)
        if (out->info.shape[d] == 0)
            nbytes = 0;
    for (int d = 0; d < out->info.ndim && nbytes; d++)
        overflow |= __builtin_mul_overflow(nbytes, (uint64_t)out->info.shape[d], &nbytes);
    char shape_buf[200];
    if (overflow || nbytes > (uint64_t)INT64_MAX)
        return tensor_error(file, name, "shape %s × %s overflows a 64-bit byte count",
                            shape_text(&out->info, shape_buf, sizeof shape_buf), dtype_name);
    if (range[1] - range[0] != nbytes)
        return tensor_error(file, name, "data_offsets [%llu, %llu] do not match shape %s × %s = %llu bytes",
                            (unsigned long long)range[0], (unsigned long long)range[1],
                            shape_text(&out->info, shape_buf, sizeof shape_buf), dtype_name,
                            (unsigned long long)nbytes);
    if (range[1] > file->data_size)
        return tensor_error(file, name, "data_offsets [%llu, %llu] run past the end of the data section (%llu bytes)",
                            (unsigned long long)range[0], (unsigned long long)range[1],
                            (unsigned long long)file->data_size);
    out->info.data_offset = range[0];
    out->info.nbytes = nbytes;
    return TB_OK;
}

static int compare_names(const tensor_entry *x, const tensor_entry *y) {
    size_t n = x->name_length < y->name_length ? x->name_length : y->name_length;
    int c = memcmp(x->info.name, y->info.name, n);
    if (c)
        return c;
    return x->name_length < y->name_length ? -1 : x->name_length > y->name_length;
}

/* Sorting with a merge sort keeps this reentrant (no global context) and O(n log n) on hostile input. */
static void sort_indices(size_t *items, size_t *scratch, size_t n, const tensor_entry *entries, bool by_offset) {
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                const tensor_entry *a = &entries[items[i]], *b = &entries[items[j]];
                int c;
                if (by_offset)
                    c = a->info.data_offset != b->info.data_offset ? (a->info.data_offset < b->info.data_offset ? -1 : 1)
                        : a->info.nbytes != b->info.nbytes         ? (a->info.nbytes < b->info.nbytes ? -1 : 1)
                                                                   : 0;
                else
                    c = compare_names(a, b);
                scratch[k++] = c <= 0 ? items[i++] : items[j++];
            }
            while (i < mid)
                scratch[k++] = items[i++];
            while (j < hi)
                scratch[k++] = items[j++];
        }
        memcpy(items, scratch, n * sizeof *items);
    }
}

/* The tensors, in offset order, must tile [0, data_size) exactly. */
static tb_status check_tiling(const tb_safetensors_t *file, const size_t *order) {
    uint64_t expected = 0;
    const char *previous = NULL;
    for (size_t k = 0; k < file->count; k++) {
        const tensor_entry *t = &file->tensors[order[k]];
        uint64_t begin = t->info.data_offset, end = begin + t->info.nbytes;
        if (begin < expected)
            return tensor_error(file, t->info.name, "data_offsets [%llu, %llu] overlap tensor '%.*s' (which ends at %llu)",
                                (unsigned long long)begin, (unsigned long long)end, NAME_IN_MESSAGE,
                                previous ? previous : "", (unsigned long long)expected);
        if (begin > expected)
            return tensor_error(file, t->info.name,
                                "data_offsets [%llu, %llu] leave a gap: bytes [%llu, %llu) belong to no tensor",
                                (unsigned long long)begin, (unsigned long long)end, (unsigned long long)expected,
                                (unsigned long long)begin);
        if (t->info.nbytes > 0) {
            expected = end;
            previous = t->info.name;
        }
    }
    if (expected != file->data_size)
        return tb_error_set(TB_ERR_FORMAT,
                            "%s: %llu trailing bytes: the data section has %llu bytes but the tensors end at %llu",
                            file->source, (unsigned long long)(file->data_size - expected),
                            (unsigned long long)file->data_size, (unsigned long long)expected);
    return TB_OK;
}

static tb_status parse_file(tb_safetensors_t *file) {
    const unsigned char *bytes = file->mapping->data;
    size_t size = file->mapping->size;
    if (size < 8)
        return tb_error_set(TB_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length",
                            file->source, size);
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; i--)
        header_length = header_length << 8 | bytes[i];
    if (header_length > MAX_HEADER_BYTES)
        return tb_error_set(TB_ERR_FORMAT, "%s: header length %llu is more than the limit of %d bytes", file->source,
                            (unsigned long long)header_length, MAX_HEADER_BYTES);
    if (header_length > size - 8)
        return tb_error_set(TB_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes)",
                            file->source, (unsigned long long)header_length, size);
    const char *header = (const char *)bytes + 8;
    if (header_length == 0 || header[0] != '{')
        return tb_error_set(TB_ERR_FORMAT, "%s: header is not a JSON object (it must start with '{')", file->source);
    file->data_section = bytes + 8 + header_length;
    file->data_size = size - 8 - header_length;

    char json_name[300];
    snprintf(json_name, sizeof json_name, "%s: header", file->source);
    tb_json_limits limits = {.max_bytes = MAX_HEADER_BYTES, .max_depth = HEADER_MAX_DEPTH};
    TB_TRY(tb_json_parse(header, (size_t)header_length, &limits, json_name, &file->header));
    const tb_json_value *root = tb_json_root(file->header);
    if (tb_json_type_of(root) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: header is not a JSON object", file->source);

    size_t members = tb_json_length(root);
    file->tensors = calloc(members ? members : 1, sizeof *file->tensors);
    if (!file->tensors)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu tensors", file->source, members);
    for (size_t i = 0; i < members; i++) {
        const char *key;
        size_t key_length;
        const tb_json_value *value;
        TB_TRY(tb_json_object_entry(root, i, &key, &key_length, &value));
        if (strcmp(key, "__metadata__") == 0 && key_length == 12)
            TB_TRY(parse_metadata(file, value));
        else
            TB_TRY(parse_tensor(file, key, key_length, value, &file->tensors[file->count++]));
    }

    size_t n = file->count;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    size_t *scratch = malloc((n ? n : 1) * sizeof *scratch);
    file->by_name = malloc((n ? n : 1) * sizeof *file->by_name);
    if (!order || !scratch || !file->by_name) {
        free(order);
        free(scratch);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu tensors", file->source, n);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = file->by_name[i] = i;
    sort_indices(order, scratch, n, file->tensors, true);
    sort_indices(file->by_name, scratch, n, file->tensors, false);
    tb_status status = check_tiling(file, order);
    free(order);
    free(scratch);
    return status;
}

static tb_status open_with_mapping(tb_mapping *mapping, const char *source, tb_safetensors_t **out) {
    *out = NULL;
    tb_safetensors_t *file = calloc(1, sizeof *file);
    char *source_copy = strdup(source);
    if (!file || !source_copy) {
        free(file);
        free(source_copy);
        tb_mapping_release(mapping);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", source);
    }
    file->mapping = mapping;
    file->source = source_copy;
    tb_status status = parse_file(file);
    if (status != TB_OK) {
        tb_safetensors_close(file);
        return status;
    }
    *out = file;
    return TB_OK;
}

tb_status tb_safetensors_open(const char *path, tb_safetensors_t **out) {
    if (!path || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_safetensors_open: NULL argument");
    *out = NULL;
    tb_mapping *mapping;
    TB_TRY(tb_mapping_open(path, &mapping));
    return open_with_mapping(mapping, path, out);
}

tb_status tb_safetensors_open_memory(const void *data, size_t size, const char *source_name, tb_safetensors_t **out) {
    if (!out || (!data && size))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_safetensors_open_memory: NULL argument");
    *out = NULL;
    tb_mapping *mapping;
    TB_TRY(tb_mapping_borrow(data, size, &mapping));
    return open_with_mapping(mapping, source_name ? source_name : "<memory>", out);
}

void tb_safetensors_close(tb_safetensors_t *file) {
    if (!file)
        return;
    tb_mapping_release(file->mapping);
    tb_json_free(file->header);
    free(file->tensors);
    free(file->by_name);
    free(file->metadata_keys);
    free(file->metadata_values);
    free(file->source);
    free(file);
}

/* ---- queries ---- */

const char *tb_safetensors_source(const tb_safetensors_t *file) { return file ? file->source : ""; }

size_t tb_safetensors_count(const tb_safetensors_t *file) { return file ? file->count : 0; }

tb_status tb_safetensors_info_at(const tb_safetensors_t *file, size_t index, tb_safetensors_info *out) {
    if (!file || index >= file->count)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: tensor index %zu is out of range (%zu tensors)",
                            tb_safetensors_source(file), index, tb_safetensors_count(file));
    *out = file->tensors[index].info;
    return TB_OK;
}

tb_status tb_safetensors_find(const tb_safetensors_t *file, const char *name, size_t *index) {
    if (!file || !name)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_safetensors_find: NULL argument");
    tensor_entry key = {.info.name = name, .name_length = strlen(name)};
    size_t lo = 0, hi = file->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = compare_names(&file->tensors[file->by_name[mid]], &key);
        if (c == 0) {
            *index = file->by_name[mid];
            return TB_OK;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: no tensor named '%.*s'", file->source, NAME_IN_MESSAGE, name);
}

const void *tb_safetensors_data_at(const tb_safetensors_t *file, size_t index) {
    if (!file || index >= file->count)
        return NULL;
    return file->data_section + file->tensors[index].info.data_offset;
}

tb_status tb_safetensors_get_at(const tb_safetensors_t *file, size_t index, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    tb_safetensors_info info;
    TB_TRY(tb_safetensors_info_at(file, index, &info));
    tb_dtype dtype;
    if (tb_safetensors_dtype_to_tb(info.dtype, &dtype) != TB_OK)
        return tb_error_prefix(TB_ERR_DTYPE, "%s: tensor '%.*s'", file->source, NAME_IN_MESSAGE, info.name);
    const unsigned char *data = file->data_section + info.data_offset;
    tb_storage *storage = NULL;
    if ((uintptr_t)data % tb_dtype_size(dtype) == 0) {
        TB_TRY(tb_storage_wrap((void *)data, (size_t)info.nbytes, true, tb_mapping_storage_release, file->mapping,
                               &storage));
        tb_mapping_retain(file->mapping);
    } else {
        /* a misaligned tensor cannot be viewed as typed elements; copy it (bounded by the file size) */
        TB_TRY(tb_storage_new((size_t)info.nbytes, 0, &storage));
        memcpy(storage->data, data, (size_t)info.nbytes);
        storage->read_only = true;
        tb_tensor_note_copy();
    }
    tb_status status = tb_tensor_from_storage(storage, dtype, info.ndim, info.shape, NULL, 0, out);
    tb_storage_release(storage); /* the tensor holds its own reference */
    if (status != TB_OK)
        return tb_error_prefix(status, "%s: tensor '%.*s'", file->source, NAME_IN_MESSAGE, info.name);
    return TB_OK;
}

tb_status tb_safetensors_get(const tb_safetensors_t *file, const char *name, tb_tensor *out) {
    memset(out, 0, sizeof *out);
    size_t index;
    TB_TRY(tb_safetensors_find(file, name, &index));
    return tb_safetensors_get_at(file, index, out);
}

size_t tb_safetensors_metadata_count(const tb_safetensors_t *file) { return file ? file->metadata_count : 0; }

tb_status tb_safetensors_metadata_at(const tb_safetensors_t *file, size_t index, const char **key,
                                     const char **value) {
    if (!file || index >= file->metadata_count)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "%s: metadata index %zu is out of range",
                            tb_safetensors_source(file), index);
    *key = file->metadata_keys[index];
    *value = file->metadata_values[index];
    return TB_OK;
}

const char *tb_safetensors_metadata_get(const tb_safetensors_t *file, const char *key) {
    if (!file || !key)
        return NULL;
    for (size_t i = 0; i < file->metadata_count; i++)
        if (strcmp(file->metadata_keys[i], key) == 0)
            return file->metadata_values[i];
    return NULL;
}
