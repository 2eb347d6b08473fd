/* Internal layout of the JSON tree shared by the parser (json.c) and the accessors (json_value.c). */
#ifndef TB_FILES_JSON_INTERNAL_H
#define TB_FILES_JSON_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "torchburn/json.h"

enum { TB_JSON_SMALL_OBJECT = 8 }; /* objects up to this many members are searched linearly */

/* A node. Objects keep 2*length items (key, value, key, value, ...) followed, when length >
 * TB_JSON_SMALL_OBJECT, by the uint64 hash seed and a uint32 open-addressing table of
 * tb_json_index_slots(length) slots holding member + 1. */
struct tb_json_value {
    uint32_t type;
    uint32_t reserved;
    size_t length; /* string bytes, array elements, object members */
    union {
        int64_t integer;
        double number;
        bool boolean;
        const char *string;
        const tb_json_value *items;
    } as;
};

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} arena_chunk;

struct tb_json_document {
    arena_chunk *chunks;
    char *strings; /* every decoded string, NUL-terminated, back to back (fits in input length + 1) */
    uint64_t hash_seed;
    tb_json_value root;
};

/* Object keys: a seeded hash, the index table size for a member count, and key equality. */
static inline uint64_t tb_json_hash_key(uint64_t seed, const char *key, size_t length) {
    uint64_t h = seed ^ (length * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < length; i++)
        h = (h ^ (unsigned char)key[i]) * 0x100000001B3ull;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h;
}

static inline size_t tb_json_index_slots(size_t members) {
    size_t slots = 16;
    while (slots < 2 * members)
        slots *= 2;
    return slots;
}

static inline bool tb_json_same_key(const tb_json_value *a, const char *key, size_t length) {
    return a->length == length && memcmp(a->as.string, key, length) == 0;
}

#endif
