/* Read access to a parsed JSON tree: types, lengths, array elements, object members (hash-indexed when
 * large) and typed getters that report a wrong type as TB_ERR_FORMAT instead of crashing. */
#include <math.h>

#include "files/json_internal.h"

const tb_json_value *tb_json_root(const tb_json_document *document) { return document ? &document->root : NULL; }

tb_json_type tb_json_type_of(const tb_json_value *value) { return value ? (tb_json_type)value->type : TB_JSON_NULL; }

const char *tb_json_type_name(tb_json_type type) {
    switch (type) {
    case TB_JSON_NULL: return "null";
    case TB_JSON_BOOL: return "bool";
    case TB_JSON_INT: return "integer";
    case TB_JSON_DOUBLE: return "number";
    case TB_JSON_STRING: return "string";
    case TB_JSON_ARRAY: return "array";
    case TB_JSON_OBJECT: return "object";
    }
    return "invalid";
}

size_t tb_json_length(const tb_json_value *value) {
    if (!value || (value->type != TB_JSON_ARRAY && value->type != TB_JSON_OBJECT))
        return 0;
    return value->length;
}

const tb_json_value *tb_json_array_at(const tb_json_value *array, size_t index) {
    if (!array || array->type != TB_JSON_ARRAY || index >= array->length)
        return NULL;
    return &array->as.items[index];
}

/* Finds `key` among an object's members: by the hash index when the object has one (the seed that
 * built it is stored in front of the table, since a value does not know its document), else linearly. */
static const tb_json_value *object_lookup(const tb_json_value *object, const char *key, size_t length) {
    const tb_json_value *items = object->as.items;
    size_t members = object->length;
    if (members > TB_JSON_SMALL_OBJECT) {
        const unsigned char *index = (const unsigned char *)(items + 2 * members);
        uint64_t seed;
        memcpy(&seed, index, sizeof seed);
        const uint32_t *table = (const uint32_t *)(index + sizeof seed);
        size_t slots = tb_json_index_slots(members);
        size_t slot = tb_json_hash_key(seed, key, length) & (slots - 1);
        while (table[slot]) {
            const tb_json_value *candidate = &items[2 * (table[slot] - 1)];
            if (tb_json_same_key(candidate, key, length))
                return candidate + 1;
            slot = (slot + 1) & (slots - 1);
        }
        return NULL;
    }
    for (size_t m = 0; m < members; m++)
        if (tb_json_same_key(&items[2 * m], key, length))
            return &items[2 * m + 1];
    return NULL;
}

const tb_json_value *tb_json_object_get(const tb_json_value *object, const char *key) {
    if (!object || object->type != TB_JSON_OBJECT || !key)
        return NULL;
    return object_lookup(object, key, strlen(key));
}

tb_status tb_json_object_entry(const tb_json_value *object, size_t index, const char **key, size_t *key_length,
                               const tb_json_value **value) {
    if (!object || object->type != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "expected an object, got %s",
                            object ? tb_json_type_name((tb_json_type)object->type) : "nothing");
    if (index >= object->length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "object member %zu is out of range (object has %zu)", index,
                            object->length);
    const tb_json_value *k = &object->as.items[2 * index];
    if (key)
        *key = k->as.string;
    if (key_length)
        *key_length = k->length;
    if (value)
        *value = &object->as.items[2 * index + 1];
    return TB_OK;
}

static tb_status type_error(const tb_json_value *value, const char *expected) {
    if (!value)
        return tb_error_set(TB_ERR_FORMAT, "expected %s, but the value is missing", expected);
    return tb_error_set(TB_ERR_FORMAT, "expected %s, got %s", expected, tb_json_type_name((tb_json_type)value->type));
}

tb_status tb_json_get_string(const tb_json_value *value, const char **out, size_t *length) {
    if (!value || value->type != TB_JSON_STRING)
        return type_error(value, "a string");
    *out = value->as.string;
    if (length)
        *length = value->length;
    return TB_OK;
}

tb_status tb_json_get_int(const tb_json_value *value, int64_t *out) {
    if (value && value->type == TB_JSON_INT) {
        *out = value->as.integer;
        return TB_OK;
    }
    if (value && value->type == TB_JSON_DOUBLE) {
        double d = value->as.number;
        /* [-2^63, 2^63) is exactly the range of doubles that convert to int64 */
        if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0) {
            *out = (int64_t)d;
            return TB_OK;
        }
        return tb_error_set(TB_ERR_FORMAT, "expected an integer, got %.17g", d);
    }
    return type_error(value, "an integer");
}

tb_status tb_json_get_double(const tb_json_value *value, double *out) {
    if (value && value->type == TB_JSON_DOUBLE) {
        *out = value->as.number;
        return TB_OK;
    }
    if (value && value->type == TB_JSON_INT) {
        *out = (double)value->as.integer;
        return TB_OK;
    }
    return type_error(value, "a number");
}

tb_status tb_json_get_bool(const tb_json_value *value, bool *out) {
    if (!value || value->type != TB_JSON_BOOL)
        return type_error(value, "a bool");
    *out = value->as.boolean;
    return TB_OK;
}
