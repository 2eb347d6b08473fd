/* The safetensors writer: the same bytes as the reference `safetensors` package (tensors sorted by dtype
 * then name, compact JSON escaped like serde_json, header padded with spaces to a multiple of 8), written
 * to a temporary file that is renamed into place only once complete. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchburn/safetensors.h"

typedef struct text_buffer {
    char *data;
    size_t length, capacity;
    bool failed;
} text_buffer;

static void put_bytes(text_buffer *b, const char *s, size_t n) {
    if (b->failed)
        return;
    if (b->capacity - b->length < n + 1) {
        size_t capacity = b->capacity ? b->capacity : 256;
        while (capacity - b->length < n + 1) {
            if (capacity > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            capacity *= 2;
        }
        char *grown = realloc(b->data, capacity);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->capacity = capacity;
    }
    memcpy(b->data + b->length, s, n);
    b->length += n;
    b->data[b->length] = '\0';
}

static void put_text(text_buffer *b, const char *s) { put_bytes(b, s, strlen(s)); }

static void put_uint(text_buffer *b, uint64_t v) {
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    put_bytes(b, digits, (size_t)n);
}

/* A JSON string escaped as serde_json does: \" \\ \b \f \n \r \t, other control characters as \u00xx
 * (lowercase hex), everything else (including DEL and non-ASCII) as is. */
static void put_json_string(text_buffer *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    put_bytes(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put_bytes(b, run, (size_t)(p - run));
        run = p + 1;
        char escape[7] = {'\\', 0};
        size_t n = 2;
        switch (c) {
        case '"': escape[1] = '"'; break;
        case '\\': escape[1] = '\\'; break;
        case '\b': escape[1] = 'b'; break;
        case '\f': escape[1] = 'f'; break;
        case '\n': escape[1] = 'n'; break;
        case '\r': escape[1] = 'r'; break;
        case '\t': escape[1] = 't'; break;
        default:
            memcpy(escape + 1, "u00", 3);
            escape[4] = hex[c >> 4];
            escape[5] = hex[c & 15];
            n = 6;
        }
        put_bytes(b, escape, n);
    }
    put_bytes(b, run, strlen(run));
    put_bytes(b, "\"", 1);
}

/* True when s is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF). */
static bool valid_utf8(const char *text) {
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            n = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return false;
        if (s[1] < lo || s[1] > hi)
            return false;
        for (size_t i = 2; i < n; i++)
            if ((s[i] & 0xC0) != 0x80)
                return false;
        s += n;
    }
    return true;
}

static int compare_for_layout(const void *a, const void *b) {
    const tb_safetensors_entry *x = *(const tb_safetensors_entry *const *)a;
    const tb_safetensors_entry *y = *(const tb_safetensors_entry *const *)b;
    if (x->dtype != y->dtype)
        return x->dtype > y->dtype ? -1 : 1; /* larger (more aligned) types first */
    return strcmp(x->name, y->name);
}

static tb_status entry_nbytes(const tb_safetensors_entry *e, uint64_t *out) {
    if ((unsigned)e->dtype >= TB_SAFETENSORS_DTYPE_COUNT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s': invalid dtype %d", e->name, (int)e->dtype);
    if (e->ndim < 0 || e->ndim > TB_MAX_DIMS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s': %d dims (0 to %d allowed)", e->name, e->ndim,
                            TB_MAX_DIMS);
    uint64_t nbytes = tb_safetensors_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s': dim %d is negative", e->name, d);
        if (e->shape[d] == 0)
            nbytes = 0;
    }
    for (int d = 0; d < e->ndim && nbytes; d++)
        if (__builtin_mul_overflow(nbytes, (uint64_t)e->shape[d], &nbytes) || nbytes > (uint64_t)INT64_MAX)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s': byte size overflows", e->name);
    if (nbytes && !e->data)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s': data is NULL", e->name);
    *out = nbytes;
    return TB_OK;
}

static int compare_name_pointers(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Tensor names must be unique. */
static tb_status check_unique_names(const tb_safetensors_entry *entries, size_t count) {
    if (count < 2)
        return TB_OK;
    const char **names = malloc(count * sizeof *names);
    if (!names)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "safetensors write: out of memory");
    for (size_t i = 0; i < count; i++)
        names[i] = entries[i].name;
    qsort(names, count, sizeof *names, compare_name_pointers);
    for (size_t i = 1; i < count; i++) {
        if (strcmp(names[i], names[i - 1]) == 0) {
            tb_status status = tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                            "safetensors write: duplicate tensor name '%.100s'", names[i]);
            free(names);
            return status;
        }
    }
    free(names);
    return TB_OK;
}

/* Validates the arguments and returns the entries in file order (a malloc'd array of pointers). */
static tb_status layout(const tb_safetensors_entry *entries, size_t count, const char *const *metadata_keys,
                        const char *const *metadata_values, size_t metadata_count,
                        const tb_safetensors_entry ***order_out) {
    *order_out = NULL;
    if (count && !entries)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: entries is NULL");
    if (metadata_count && (!metadata_keys || !metadata_values))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: metadata arrays are NULL");
    for (size_t i = 0; i < metadata_count; i++) {
        if (!metadata_keys[i] || !metadata_values[i])
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: metadata entry %zu is NULL", i);
        if (!valid_utf8(metadata_keys[i]) || !valid_utf8(metadata_values[i]))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: metadata entry %zu is not valid UTF-8", i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(metadata_keys[k], metadata_keys[i]) == 0)
                return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: duplicate metadata key '%.100s'",
                                    metadata_keys[i]);
    }
    const tb_safetensors_entry **order = malloc((count ? count : 1) * sizeof *order);
    if (!order)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "safetensors write: out of memory");
    for (size_t i = 0; i < count; i++) {
        const tb_safetensors_entry *e = &entries[i];
        tb_status status = TB_OK;
        uint64_t nbytes;
        if (!e->name)
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: tensor %zu has no name", i);
        else if (!valid_utf8(e->name))
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: tensor name %zu is not valid UTF-8", i);
        else if (strcmp(e->name, "__metadata__") == 0)
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: '__metadata__' is reserved");
        else
            status = entry_nbytes(e, &nbytes);
        if (status != TB_OK) {
            free(order);
            return status;
        }
        order[i] = e;
    }
    tb_status status = check_unique_names(entries, count);
    if (status != TB_OK) {
        free(order);
        return status;
    }
    qsort(order, count, sizeof *order, compare_for_layout);
    *order_out = order;
    return TB_OK;
}

static tb_status build_header(const tb_safetensors_entry *const *order, size_t count,
                              const char *const *metadata_keys, const char *const *metadata_values,
                              size_t metadata_count, char **header_out, size_t *header_size_out,
                              uint64_t *data_size_out) {
    text_buffer b = {0};
    put_bytes(&b, "\0\0\0\0\0\0\0\0{", 9);
    bool first = true;
    if (metadata_keys) {
        put_text(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < metadata_count; i++) {
            if (i)
                put_bytes(&b, ",", 1);
            put_json_string(&b, metadata_keys[i]);
            put_bytes(&b, ":", 1);
            put_json_string(&b, metadata_values[i]);
        }
        put_bytes(&b, "}", 1);
        first = false;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        const tb_safetensors_entry *e = order[i];
        uint64_t nbytes = 0;
        TB_TRY(entry_nbytes(e, &nbytes));
        if (!first)
            put_bytes(&b, ",", 1);
        first = false;
        put_json_string(&b, e->name);
        put_text(&b, ":{\"dtype\":\"");
        put_text(&b, tb_safetensors_dtype_name(e->dtype));
        put_text(&b, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d)
                put_bytes(&b, ",", 1);
            put_uint(&b, (uint64_t)e->shape[d]);
        }
        put_text(&b, "],\"data_offsets\":[");
        put_uint(&b, offset);
        put_bytes(&b, ",", 1);
        if (__builtin_add_overflow(offset, nbytes, &offset)) {
            free(b.data);
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "safetensors write: total size overflows");
        }
        put_uint(&b, offset);
        put_text(&b, "]}");
    }
    put_bytes(&b, "}", 1);
    while ((b.length - 8) % 8 != 0)
        put_bytes(&b, " ", 1);
    if (b.failed) {
        free(b.data);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "safetensors write: out of memory for the header");
    }
    uint64_t header_length = b.length - 8;
    for (int i = 0; i < 8; i++)
        b.data[i] = (char)(header_length >> (8 * i));
    *header_out = b.data;
    *header_size_out = b.length;
    *data_size_out = offset;
    return TB_OK;
}

tb_status tb_safetensors_serialize_header(const tb_safetensors_entry *entries, size_t count,
                                          const char *const *metadata_keys, const char *const *metadata_values,
                                          size_t metadata_count, char **header_out, size_t *header_size_out,
                                          uint64_t *data_size_out) {
    *header_out = NULL;
    const tb_safetensors_entry **order;
    TB_TRY(layout(entries, count, metadata_keys, metadata_values, metadata_count, &order));
    tb_status status = build_header(order, count, metadata_keys, metadata_values, metadata_count, header_out,
                                    header_size_out, data_size_out);
    free(order);
    return status;
}

tb_status tb_safetensors_entry_from_tensor(const char *name, const tb_tensor *tensor, tb_safetensors_entry *out) {
    memset(out, 0, sizeof *out);
    if (!tensor || !tensor->storage)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s' is empty (no storage)", name ? name : "");
    if (!tb_tensor_is_contiguous(tensor))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tensor '%s' is not contiguous", name ? name : "");
    out->name = name;
    out->dtype = tb_safetensors_dtype_from_tb(tensor->dtype);
    if (out->dtype == TB_SAFETENSORS_DTYPE_COUNT)
        return tb_error_set(TB_ERR_DTYPE, "tensor '%s' has dtype %s with no safetensors equivalent", name ? name : "",
                            tb_dtype_name(tensor->dtype));
    out->ndim = tensor->ndim;
    memcpy(out->shape, tensor->shape, sizeof out->shape);
    out->data = tb_tensor_data(tensor);
    return TB_OK;
}

static bool write_all(int fd, const void *data, uint64_t size) {
    const char *p = data;
    while (size > 0) {
        size_t chunk = size > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)size;
        ssize_t written = write(fd, p, chunk);
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0)
            return false;
        p += written;
        size -= (uint64_t)written;
    }
    return true;
}

static atomic_uint temp_counter;

tb_status tb_safetensors_write(const char *path, const tb_safetensors_entry *entries, size_t count,
                               const char *const *metadata_keys, const char *const *metadata_values,
                               size_t metadata_count) {
    if (!path)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_safetensors_write: path is NULL");
    const tb_safetensors_entry **order;
    TB_TRY(layout(entries, count, metadata_keys, metadata_values, metadata_count, &order));
    char *header = NULL;
    size_t header_size = 0;
    uint64_t data_size = 0;
    tb_status status = build_header(order, count, metadata_keys, metadata_values, metadata_count, &header,
                                    &header_size, &data_size);
    if (status != TB_OK) {
        free(order);
        return tb_error_prefix(status, "%s", path);
    }
    size_t path_length = strlen(path);
    char *temp_path = malloc(path_length + 64);
    if (!temp_path) {
        free(order);
        free(header);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    snprintf(temp_path, path_length + 64, "%s.tmp-%ld-%u", path, (long)getpid(),
             atomic_fetch_add(&temp_counter, 1));
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        status = tb_error_set(TB_ERR_IO, "%s: cannot create %s: %s", path, temp_path, strerror(errno));
    } else {
        bool ok = write_all(fd, header, header_size);
        for (size_t i = 0; ok && i < count; i++) {
            uint64_t nbytes = 0;
            (void)entry_nbytes(order[i], &nbytes); /* validated by layout() */
            ok = write_all(fd, order[i]->data, nbytes);
        }
        int err = ok ? 0 : errno;
        if (ok && fsync(fd) != 0) {
            ok = false;
            err = errno;
        }
        if (close(fd) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (ok && rename(temp_path, path) != 0) {
            ok = false;
            err = errno;
        }
        if (!ok) {
            unlink(temp_path);
            status = tb_error_set(TB_ERR_IO, "%s: write failed: %s", path, err ? strerror(err) : "short write");
        }
    }
    free(temp_path);
    free(order);
    free(header);
    return status;
}
