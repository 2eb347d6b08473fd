/* A strict RFC 8259 JSON reader: UTF-8 validated, escapes and surrogate pairs decoded, numbers kept as
 * exact int64 when they are integers that fit (else double), duplicate keys rejected, depth and size
 * limits. The result is an immutable tree owned by a document; typed getters return errors instead of
 * crashing on a wrong type. */
#ifndef TORCHBURN_JSON_H
#define TORCHBURN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_json_type {
    TB_JSON_NULL,
    TB_JSON_BOOL,
    TB_JSON_INT,    /* an integer literal (no fraction/exponent) that fits int64 */
    TB_JSON_DOUBLE, /* any other number */
    TB_JSON_STRING,
    TB_JSON_ARRAY,
    TB_JSON_OBJECT,
} tb_json_type;

typedef struct tb_json_value tb_json_value;       /* a node; lives as long as its document */
typedef struct tb_json_document tb_json_document; /* owns every node and string */

typedef struct tb_json_limits {
    size_t max_bytes; /* input longer than this is refused (default 64 MiB) */
    int max_depth;    /* nesting of arrays/objects (default 128) */
} tb_json_limits;

/* Parses `length` bytes of `text` (need not be NUL-terminated). `limits` NULL means the defaults.
 * `source_name` (may be NULL) prefixes error messages, e.g. "config.json: line 3, column 7: ...". */
TB_API TB_NODISCARD tb_status tb_json_parse(const char *text, size_t length, const tb_json_limits *limits,
                                            const char *source_name, tb_json_document **out);
TB_API void tb_json_free(tb_json_document *document);
TB_API const tb_json_value *tb_json_root(const tb_json_document *document);

TB_API tb_json_type tb_json_type_of(const tb_json_value *value);
TB_API const char *tb_json_type_name(tb_json_type type);
/* Number of elements of an array or members of an object; 0 for scalars. */
TB_API size_t tb_json_length(const tb_json_value *value);
/* Array element i, or NULL when out of range or not an array. */
TB_API const tb_json_value *tb_json_array_at(const tb_json_value *array, size_t index);
/* Object member by key (NUL-terminated), or NULL when absent or not an object. Keys are unique. */
TB_API const tb_json_value *tb_json_object_get(const tb_json_value *object, const char *key);
/* Object member i in document order. */
TB_API TB_NODISCARD tb_status tb_json_object_entry(const tb_json_value *object, size_t index, const char **key,
                                                   size_t *key_length, const tb_json_value **value);

/* Typed getters: TB_ERR_FORMAT with a message naming the expected and actual type on mismatch.
 * Strings are UTF-8, NUL-terminated, and may contain NUL (use the length). get_double accepts ints;
 * get_int accepts a double only if it is integral and fits. */
TB_API TB_NODISCARD tb_status tb_json_get_string(const tb_json_value *value, const char **out, size_t *length);
TB_API TB_NODISCARD tb_status tb_json_get_int(const tb_json_value *value, int64_t *out);
TB_API TB_NODISCARD tb_status tb_json_get_double(const tb_json_value *value, double *out);
TB_API TB_NODISCARD tb_status tb_json_get_bool(const tb_json_value *value, bool *out);

#ifdef __cplusplus
}
#endif
#endif
