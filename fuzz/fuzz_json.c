/* libFuzzer harness for the JSON reader: parses arbitrary bytes (with the default limits and with a
 * tight depth limit chosen by the first byte) and walks every accepted tree through the typed getters. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "torchburn/json.h"

static size_t walk(const tb_json_value *value, int depth) {
    size_t visited = 1;
    const char *s;
    size_t length;
    int64_t i;
    double d;
    bool b;
    (void)tb_json_get_string(value, &s, &length);
    (void)tb_json_get_int(value, &i);
    (void)tb_json_get_double(value, &d);
    (void)tb_json_get_bool(value, &b);
    (void)tb_json_type_name(tb_json_type_of(value));
    if (tb_json_type_of(value) == TB_JSON_STRING && s[length] != '\0')
        __builtin_trap(); /* strings are NUL-terminated */
    size_t n = tb_json_length(value);
    for (size_t k = 0; k < n; k++) {
        if (tb_json_type_of(value) == TB_JSON_ARRAY) {
            visited += walk(tb_json_array_at(value, k), depth + 1);
        } else {
            const char *key;
            size_t key_length;
            const tb_json_value *member;
            if (tb_json_object_entry(value, k, &key, &key_length, &member) != TB_OK)
                __builtin_trap();
            /* lookup by key finds this very member unless the key holds a NUL (then C strings are ambiguous) */
            if (!memchr(key, 0, key_length) && tb_json_object_get(value, key) != member)
                __builtin_trap();
            visited += walk(member, depth + 1);
        }
    }
    return visited;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tb_json_document *doc = NULL;
    if (tb_json_parse((const char *)data, size, NULL, "fuzz.json", &doc) == TB_OK) {
        walk(tb_json_root(doc), 0);
        tb_json_free(doc);
    }
    if (size > 0) {
        tb_json_limits tight = {.max_bytes = size, .max_depth = 1 + data[0] % 8};
        doc = NULL;
        if (tb_json_parse((const char *)data + 1, size - 1, &tight, NULL, &doc) == TB_OK)
            walk(tb_json_root(doc), 0);
        tb_json_free(doc);
    }
    return 0;
}
