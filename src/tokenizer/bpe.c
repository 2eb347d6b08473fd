/* The BPE model of tokenizer.json: vocabulary and merges loading, the merge loop (a min-heap of
 * (rank, position) exactly like HF's Word::merge_all), byte fallback, unk/fuse_unk, ignore_merges,
 * and a bounded word -> ids cache shared by all callers behind a try-lock. */
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer/internal.h"

static const char METASPACE[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */

/* ---------------- string map ---------------- */

static tb_status str_map_grow_slots(tb_str_map *map) {
    size_t capacity = map->slot_mask ? (map->slot_mask + 1) * 2 : 1024;
    uint32_t *slots = calloc(capacity, sizeof *slots);
    if (!slots)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: hash table of %zu slots", capacity);
    for (size_t e = 0; e < map->count; e++) {
        size_t s = map->entries[e].hash & (capacity - 1);
        while (slots[s])
            s = (s + 1) & (capacity - 1);
        slots[s] = (uint32_t)(e + 1);
    }
    free(map->slots);
    map->slots = slots;
    map->slot_mask = capacity - 1;
    return TB_OK;
}

long tb_str_map_find(const tb_str_map *map, const char *key, size_t length) {
    if (!map->slots)
        return -1;
    uint64_t hash = tb_tok_hash(key, length);
    size_t s = hash & map->slot_mask;
    for (;;) {
        uint32_t slot = map->slots[s];
        if (!slot)
            return -1;
        const tb_str_map_entry *e = &map->entries[slot - 1];
        if (e->hash == hash && e->key_length == length && memcmp(map->keys.data + e->key_offset, key, length) == 0)
            return (long)(slot - 1);
        s = (s + 1) & map->slot_mask;
    }
}

tb_status tb_str_map_put(tb_str_map *map, const char *key, size_t length, int32_t value, size_t *entry_out) {
    if (length > UINT32_MAX)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer: a token of %zu bytes is too long", length);
    long existing = tb_str_map_find(map, key, length);
    if (existing >= 0) {
        map->entries[existing].value = value;
        if (entry_out)
            *entry_out = (size_t)existing;
        return TB_OK;
    }
    if (map->count + 1 > (map->slot_mask + 1) / 2)
        TB_TRY(str_map_grow_slots(map));
    if (map->count == map->entry_capacity) {
        size_t capacity = map->entry_capacity ? map->entry_capacity * 2 : 256;
        tb_str_map_entry *entries = realloc(map->entries, capacity * sizeof *entries);
        if (!entries)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: hash table of %zu entries", capacity);
        map->entries = entries;
        map->entry_capacity = capacity;
    }
    size_t offset = map->keys.length;
    TB_TRY(tb_tok_buffer_append(&map->keys, key, length));
    TB_TRY(tb_tok_buffer_append(&map->keys, "", 1)); /* keep every key NUL-terminated */
    uint64_t hash = tb_tok_hash(key, length);
    tb_str_map_entry *e = &map->entries[map->count];
    e->hash = hash;
    e->key_offset = offset;
    e->key_length = (uint32_t)length;
    e->value = value;
    size_t s = hash & map->slot_mask;
    while (map->slots[s])
        s = (s + 1) & map->slot_mask;
    map->slots[s] = (uint32_t)(map->count + 1);
    if (entry_out)
        *entry_out = map->count;
    map->count++;
    return TB_OK;
}

void tb_str_map_free(tb_str_map *map) {
    free(map->slots);
    free(map->entries);
    tb_tok_buffer_free(&map->keys);
    memset(map, 0, sizeof *map);
}

/* ---------------- pair map ---------------- */

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static inline size_t pair_slot(uint64_t key, size_t mask) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & mask;
}

static tb_status pair_map_init(tb_pair_map *m, size_t expected) {
    size_t capacity = 1024;
    while (capacity < expected * 2 + 2)
        capacity *= 2;
    m->keys = calloc(capacity, sizeof *m->keys);
    m->ranks = malloc(capacity * sizeof *m->ranks);
    m->new_ids = malloc(capacity * sizeof *m->new_ids);
    if (!m->keys || !m->ranks || !m->new_ids)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: merge table of %zu slots", capacity);
    m->mask = capacity - 1;
    return TB_OK;
}

/* Later duplicates overwrite earlier ones, like collecting into a HashMap. */
static void pair_map_put(tb_pair_map *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    uint64_t key = pair_key(a, b);
    size_t s = pair_slot(key, m->mask);
    while (m->keys[s] && m->keys[s] != key)
        s = (s + 1) & m->mask;
    if (!m->keys[s])
        m->count++;
    m->keys[s] = key;
    m->ranks[s] = rank;
    m->new_ids[s] = new_id;
}

static inline bool pair_map_get(const tb_pair_map *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t key = pair_key(a, b);
    size_t s = pair_slot(key, m->mask);
    for (;;) {
        uint64_t k = m->keys[s];
        if (k == key) {
            *rank = m->ranks[s];
            *new_id = m->new_ids[s];
            return true;
        }
        if (!k)
            return false;
        s = (s + 1) & m->mask;
    }
}

/* ---------------- word cache ---------------- */

enum {
    CACHE_SLOTS = 1 << 16,
    CACHE_MAX_ENTRIES = 1 << 15,
    CACHE_KEY_BYTES = 1 << 21,
    CACHE_IDS = 1 << 18,
    CACHE_MAX_WORD = 256, /* HF's MAX_LENGTH: longer words are not cached */
};

typedef struct cache_entry {
    uint64_t hash;
    uint32_t key_offset, key_length, ids_offset, ids_count;
} cache_entry;

struct tb_word_cache {
    pthread_mutex_t lock;
    uint32_t *slots;
    cache_entry *entries;
    size_t count;
    char *keys;
    size_t keys_used;
    int32_t *ids;
    size_t ids_used;
};

static tb_status cache_new(tb_word_cache **out) {
    tb_word_cache *c = calloc(1, sizeof *c);
    if (!c)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: word cache");
    c->slots = calloc(CACHE_SLOTS, sizeof *c->slots);
    c->entries = malloc(CACHE_MAX_ENTRIES * sizeof *c->entries);
    c->keys = malloc(CACHE_KEY_BYTES);
    c->ids = malloc(CACHE_IDS * sizeof *c->ids);
    if (!c->slots || !c->entries || !c->keys || !c->ids || pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c->slots);
        free(c->entries);
        free(c->keys);
        free(c->ids);
        free(c);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: word cache");
    }
    *out = c;
    return TB_OK;
}

static void cache_free(tb_word_cache *c) {
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    free(c->entries);
    free(c->keys);
    free(c->ids);
    free(c);
}

/* Appends the cached ids of word to out and returns 1, 0 on a miss, -1 on allocation failure. */
static int cache_lookup(tb_word_cache *c, const char *word, size_t n, uint64_t hash, tb_token_ids *out) {
    if (pthread_mutex_trylock(&c->lock) != 0)
        return 0;
    int found = 0;
    size_t s = hash & (CACHE_SLOTS - 1);
    for (;;) {
        uint32_t slot = c->slots[s];
        if (!slot)
            break;
        const cache_entry *e = &c->entries[slot - 1];
        if (e->hash == hash && e->key_length == n && memcmp(c->keys + e->key_offset, word, n) == 0) {
            found = 1;
            if (out->count + e->ids_count > out->capacity) {
                size_t capacity = out->capacity ? out->capacity : 64;
                while (capacity < out->count + e->ids_count)
                    capacity *= 2;
                int32_t *ids = realloc(out->ids, capacity * sizeof *ids);
                if (!ids) {
                    found = -1;
                    break;
                }
                out->ids = ids;
                out->capacity = capacity;
            }
            if (e->ids_count)
                memcpy(out->ids + out->count, c->ids + e->ids_offset, e->ids_count * sizeof(int32_t));
            out->count += e->ids_count;
            break;
        }
        s = (s + 1) & (CACHE_SLOTS - 1);
    }
    pthread_mutex_unlock(&c->lock);
    return found;
}

static void cache_store(tb_word_cache *c, const char *word, size_t n, uint64_t hash, const int32_t *ids,
                        size_t count) {
    if (n >= CACHE_MAX_WORD || count > CACHE_MAX_WORD)
        return;
    if (pthread_mutex_trylock(&c->lock) != 0)
        return;
    if (c->count >= CACHE_MAX_ENTRIES || c->keys_used + n > CACHE_KEY_BYTES || c->ids_used + count > CACHE_IDS) {
        memset(c->slots, 0, CACHE_SLOTS * sizeof *c->slots);
        c->count = c->keys_used = c->ids_used = 0;
    }
    size_t s = hash & (CACHE_SLOTS - 1);
    while (c->slots[s]) {
        const cache_entry *e = &c->entries[c->slots[s] - 1];
        if (e->hash == hash && e->key_length == n && memcmp(c->keys + e->key_offset, word, n) == 0) {
            pthread_mutex_unlock(&c->lock);
            return; /* another thread stored it meanwhile */
        }
        s = (s + 1) & (CACHE_SLOTS - 1);
    }
    cache_entry *e = &c->entries[c->count];
    e->hash = hash;
    e->key_offset = (uint32_t)c->keys_used;
    e->key_length = (uint32_t)n;
    e->ids_offset = (uint32_t)c->ids_used;
    e->ids_count = (uint32_t)count;
    memcpy(c->keys + c->keys_used, word, n);
    c->keys_used += n;
    if (count)
        memcpy(c->ids + c->ids_used, ids, count * sizeof *ids);
    c->ids_used += count;
    c->slots[s] = (uint32_t)(++c->count);
    pthread_mutex_unlock(&c->lock);
}

/* ---------------- loading ---------------- */

static tb_status optional_string(const tb_json_value *model, const char *key, char **out, size_t *length) {
    const tb_json_value *v = tb_json_object_get(model, key);
    *out = NULL;
    if (length)
        *length = 0;
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    const char *s;
    size_t n;
    if (tb_json_get_string(v, &s, &n) != TB_OK)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: model.%s must be a string or null, not %s", key,
                            tb_json_type_name(tb_json_type_of(v)));
    if (length)
        *length = n;
    return tb_tok_strdup(s, n, out);
}

/* Looks up a merge part in the vocabulary. */
static tb_status merge_part_id(const tb_bpe *bpe, const char *s, size_t n, size_t index, int32_t *id) {
    if (!tb_str_map_get(&bpe->vocab, s, n, id))
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: merge %zu refers to '%.*s', which is not in the vocabulary",
                            index, (int)(n > 64 ? 64 : n), s);
    return TB_OK;
}

static tb_status load_merges(tb_bpe *bpe, const tb_json_value *merges) {
    size_t count = tb_json_length(merges);
    TB_TRY(pair_map_init(&bpe->merges, count));
    tb_tok_buffer joined = {0};
    tb_status st = TB_OK;
    for (size_t i = 0; i < count && st == TB_OK; i++) {
        const tb_json_value *m = tb_json_array_at(merges, i);
        const char *a, *b;
        size_t an, bn;
        if (tb_json_type_of(m) == TB_JSON_STRING) {
            const char *s;
            size_t n;
            st = tb_json_get_string(m, &s, &n);
            if (st != TB_OK)
                break;
            const char *space = memchr(s, ' ', n);
            if (!space || memchr(space + 1, ' ', n - (size_t)(space + 1 - s))) {
                st = tb_error_set(TB_ERR_FORMAT, "tokenizer.json: merge %zu ('%.*s') is not two tokens separated by one space",
                                  i, (int)(n > 64 ? 64 : n), s);
                break;
            }
            a = s;
            an = (size_t)(space - s);
            b = space + 1;
            bn = n - an - 1;
        } else if (tb_json_type_of(m) == TB_JSON_ARRAY && tb_json_length(m) == 2 &&
                   tb_json_get_string(tb_json_array_at(m, 0), &a, &an) == TB_OK &&
                   tb_json_get_string(tb_json_array_at(m, 1), &b, &bn) == TB_OK) {
            /* pair form */
        } else {
            st = tb_error_set(TB_ERR_FORMAT, "tokenizer.json: merge %zu must be \"a b\" or [\"a\", \"b\"]", i);
            break;
        }
        int32_t a_id = -1, b_id = -1, new_id = -1;
        if ((st = merge_part_id(bpe, a, an, i, &a_id)) != TB_OK || (st = merge_part_id(bpe, b, bn, i, &b_id)) != TB_OK)
            break;
        if (bpe->prefix) {
            if (bn < bpe->prefix_length || memcmp(b, bpe->prefix, bpe->prefix_length) != 0) {
                st = tb_error_set(TB_ERR_FORMAT, "tokenizer.json: merge %zu: '%.*s' lacks the continuing_subword_prefix",
                                  i, (int)(bn > 64 ? 64 : bn), b);
                break;
            }
            b += bpe->prefix_length;
            bn -= bpe->prefix_length;
        }
        joined.length = 0;
        if ((st = tb_tok_buffer_append(&joined, a, an)) != TB_OK || (st = tb_tok_buffer_append(&joined, b, bn)) != TB_OK)
            break;
        if ((st = merge_part_id(bpe, joined.data, joined.length, i, &new_id)) != TB_OK)
            break;
        pair_map_put(&bpe->merges, a_id, b_id, (uint32_t)i, new_id);
    }
    tb_tok_buffer_free(&joined);
    return st;
}

tb_status tb_bpe_load(tb_bpe *bpe, const tb_json_value *model) {
    memset(bpe, 0, sizeof *bpe);
    bpe->unk_id = -1;
    if (!model || tb_json_type_of(model) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: \"model\" is missing or not an object");
    const tb_json_value *type = tb_json_object_get(model, "type");
    if (type) {
        const char *s;
        size_t n;
        if (tb_json_get_string(type, &s, &n) != TB_OK)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: model.type must be a string");
        if (strcmp(s, "BPE") != 0)
            return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: model type '%s' is not supported (only BPE)", s);
    }
    const tb_json_value *vocab = tb_json_object_get(model, "vocab");
    const tb_json_value *merges = tb_json_object_get(model, "merges");
    if (!vocab || tb_json_type_of(vocab) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: model.vocab is missing or not an object");
    if (merges && tb_json_type_of(merges) != TB_JSON_ARRAY && tb_json_type_of(merges) != TB_JSON_NULL)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: model.merges must be an array");
    const tb_json_value *dropout = tb_json_object_get(model, "dropout");
    if (dropout && tb_json_type_of(dropout) != TB_JSON_NULL) {
        double p;
        if (tb_json_get_double(dropout, &p) != TB_OK)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: model.dropout must be a number or null");
        if (p != 0.0)
            return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: BPE dropout %g is random; only null/0 is supported", p);
    }
    TB_TRY(tb_tok_json_bool(model, "fuse_unk", false, "model", &bpe->fuse_unk));
    TB_TRY(tb_tok_json_bool(model, "byte_fallback", false, "model", &bpe->byte_fallback));
    TB_TRY(tb_tok_json_bool(model, "ignore_merges", false, "model", &bpe->ignore_merges));
    TB_TRY(optional_string(model, "unk_token", &bpe->unk_token, NULL));
    TB_TRY(optional_string(model, "continuing_subword_prefix", &bpe->prefix, &bpe->prefix_length));
    TB_TRY(optional_string(model, "end_of_word_suffix", &bpe->suffix, &bpe->suffix_length));

    size_t count = tb_json_length(vocab);
    int64_t max_id = -1;
    for (size_t i = 0; i < count; i++) {
        const char *key;
        size_t key_length;
        const tb_json_value *v;
        TB_TRY(tb_json_object_entry(vocab, i, &key, &key_length, &v));
        int64_t id;
        if (tb_json_type_of(v) != TB_JSON_INT || tb_json_get_int(v, &id) != TB_OK || id < 0 ||
            id >= TB_TOKENIZER_MAX_ID)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: vocab entry '%.*s' has an id that is not an integer in [0, %d)",
                                (int)(key_length > 64 ? 64 : key_length), key, TB_TOKENIZER_MAX_ID);
        TB_TRY(tb_str_map_put(&bpe->vocab, key, key_length, (int32_t)id, NULL));
        if (id > max_id)
            max_id = id;
    }
    bpe->id_limit = (size_t)(max_id + 1);
    bpe->id_entry = malloc((bpe->id_limit ? bpe->id_limit : 1) * sizeof *bpe->id_entry);
    if (!bpe->id_entry)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: id table of %zu entries", bpe->id_limit);
    for (size_t i = 0; i < bpe->id_limit; i++)
        bpe->id_entry[i] = -1;
    /* vocab_r: when two strings share an id, the last one wins (HF's choice is unspecified). */
    for (size_t e = 0; e < bpe->vocab.count; e++)
        bpe->id_entry[bpe->vocab.entries[e].value] = (int32_t)e;

    if (merges && tb_json_type_of(merges) == TB_JSON_ARRAY)
        TB_TRY(load_merges(bpe, merges));
    else
        TB_TRY(pair_map_init(&bpe->merges, 0));

    if (bpe->unk_token) {
        bpe->unk_configured = true;
        if (!tb_str_map_get(&bpe->vocab, bpe->unk_token, strlen(bpe->unk_token), &bpe->unk_id))
            bpe->unk_id = -1;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if (!tb_str_map_get(&bpe->vocab, name, 6, &bpe->byte_ids[b]))
            bpe->byte_ids[b] = -1;
    }
    for (uint32_t cp = 0; cp < 2048; cp++) {
        uint8_t utf8[4];
        size_t n = tb_utf8_encode(cp, utf8);
        if (!tb_str_map_get(&bpe->vocab, (const char *)utf8, n, &bpe->char_ids[cp]))
            bpe->char_ids[cp] = -1;
    }
    /* "▁" must be a token itself, else an unknown "▁" could fuse with the unk before it */
    bpe->split_before_metaspace = !bpe->prefix && !bpe->suffix && tb_str_map_find(&bpe->vocab, METASPACE, 3) >= 0;
    for (size_t e = 0; e < bpe->vocab.count && bpe->split_before_metaspace; e++) {
        size_t n;
        const char *key = tb_str_map_key(&bpe->vocab, e, &n);
        for (size_t i = 1; i + 3 <= n; i++) {
            if (memcmp(key + i, METASPACE, 3) == 0 && !(i >= 3 && memcmp(key + i - 3, METASPACE, 3) == 0)) {
                bpe->split_before_metaspace = false;
                break;
            }
        }
    }
    return cache_new(&bpe->cache);
}

void tb_bpe_free(tb_bpe *bpe) {
    tb_str_map_free(&bpe->vocab);
    free(bpe->id_entry);
    free(bpe->merges.keys);
    free(bpe->merges.ranks);
    free(bpe->merges.new_ids);
    free(bpe->unk_token);
    free(bpe->prefix);
    free(bpe->suffix);
    cache_free(bpe->cache);
    memset(bpe, 0, sizeof *bpe);
}

void tb_bpe_scratch_free(tb_bpe_scratch *scratch) {
    free(scratch->symbols);
    free(scratch->heap);
    tb_tok_buffer_free(&scratch->text);
    memset(scratch, 0, sizeof *scratch);
}

tb_status tb_token_ids_push(tb_token_ids *out, int32_t id) {
    if (out->count == out->capacity) {
        size_t capacity = out->capacity ? out->capacity * 2 : 64;
        int32_t *ids = realloc(out->ids, capacity * sizeof *ids);
        if (!ids)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: id list of %zu entries", capacity);
        out->ids = ids;
        out->capacity = capacity;
    }
    out->ids[out->count++] = id;
    return TB_OK;
}

/* ---------------- tokenizing one word ---------------- */

static tb_status add_symbol(tb_bpe_scratch *w, size_t *count, int32_t id, uint32_t length) {
    if (*count == w->symbol_capacity) {
        size_t capacity = w->symbol_capacity ? w->symbol_capacity * 2 : 64;
        tb_bpe_symbol *symbols = realloc(w->symbols, capacity * sizeof *symbols);
        if (!symbols)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: %zu BPE symbols", capacity);
        w->symbols = symbols;
        w->symbol_capacity = capacity;
    }
    size_t i = (*count)++;
    w->symbols[i].id = id;
    w->symbols[i].length = length;
    w->symbols[i].prev = (int32_t)i - 1;
    w->symbols[i].next = -1;
    if (i > 0)
        w->symbols[i - 1].next = (int32_t)i;
    return TB_OK;
}

static inline bool merge_less(const tb_bpe_merge *a, const tb_bpe_merge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->position < b->position;
}

static tb_status heap_push(tb_bpe_scratch *w, size_t *size, tb_bpe_merge m) {
    if (*size == w->heap_capacity) {
        size_t capacity = w->heap_capacity ? w->heap_capacity * 2 : 64;
        tb_bpe_merge *heap = realloc(w->heap, capacity * sizeof *heap);
        if (!heap)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: BPE merge queue of %zu", capacity);
        w->heap = heap;
        w->heap_capacity = capacity;
    }
    size_t i = (*size)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!merge_less(&m, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = m;
    return TB_OK;
}

static tb_bpe_merge heap_pop(tb_bpe_scratch *w, size_t *size) {
    tb_bpe_merge top = w->heap[0];
    tb_bpe_merge last = w->heap[--*size];
    size_t i = 0, n = *size;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && merge_less(&w->heap[child + 1], &w->heap[child]))
            child++;
        if (!merge_less(&w->heap[child], &last))
            break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static tb_status unk_id_or_error(const tb_bpe *bpe, int32_t *id) {
    if (bpe->unk_id < 0)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer: unk_token '%s' is not in the vocabulary", bpe->unk_token);
    *id = bpe->unk_id;
    return TB_OK;
}

/* The character -> initial symbols step of HF's BPE::merge_word. */
static tb_status split_into_symbols(const tb_bpe *bpe, const char *word, size_t n, tb_bpe_scratch *w,
                                    size_t *count) {
    const uint8_t *s = (const uint8_t *)word;
    bool pending_unk = false;
    int32_t unk = -1;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = tb_utf8_next(s, &i);
        bool first = start == 0, last = i == n;
        const char *piece = word + start;
        size_t piece_length = i - start;
        int32_t id = -1;
        bool found;
        if ((!first && bpe->prefix) || (last && bpe->suffix)) {
            w->text.length = 0;
            if (!first && bpe->prefix)
                TB_TRY(tb_tok_buffer_append(&w->text, bpe->prefix, bpe->prefix_length));
            TB_TRY(tb_tok_buffer_append(&w->text, piece, piece_length));
            if (last && bpe->suffix)
                TB_TRY(tb_tok_buffer_append(&w->text, bpe->suffix, bpe->suffix_length));
            piece = w->text.data;
            piece_length = w->text.length;
            found = tb_str_map_get(&bpe->vocab, piece, piece_length, &id);
        } else if (cp < 2048) {
            id = bpe->char_ids[cp];
            found = id >= 0;
        } else {
            found = tb_str_map_get(&bpe->vocab, piece, piece_length, &id);
        }
        if (found) {
            if (pending_unk) {
                TB_TRY(add_symbol(w, count, unk, 1));
                pending_unk = false;
            }
            TB_TRY(add_symbol(w, count, id, (uint32_t)piece_length));
            continue;
        }
        if (bpe->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < piece_length; k++)
                all = all && bpe->byte_ids[(uint8_t)piece[k]] >= 0;
            if (all) {
                /* the piece may live in w->text, which add_symbol does not touch */
                for (size_t k = 0; k < piece_length; k++)
                    TB_TRY(add_symbol(w, count, bpe->byte_ids[(uint8_t)piece[k]], 1));
                continue;
            }
        }
        if (bpe->unk_configured) {
            if (pending_unk && bpe->fuse_unk)
                continue; /* fused into the pending unk */
            if (pending_unk)
                TB_TRY(add_symbol(w, count, unk, 1));
            TB_TRY(unk_id_or_error(bpe, &unk));
            pending_unk = true;
        }
        /* no unk token: the character is dropped, as HF does */
    }
    if (pending_unk)
        TB_TRY(add_symbol(w, count, unk, 1));
    return TB_OK;
}

static tb_status merge_all(const tb_bpe *bpe, tb_bpe_scratch *w, size_t count) {
    size_t heap_size = 0;
    tb_bpe_symbol *sym;
    for (size_t i = 0; i + 1 < count; i++) {
        uint32_t rank;
        int32_t new_id;
        if (pair_map_get(&bpe->merges, w->symbols[i].id, w->symbols[i + 1].id, &rank, &new_id))
            TB_TRY(heap_push(w, &heap_size, (tb_bpe_merge){rank, (uint32_t)i, new_id}));
    }
    while (heap_size) {
        tb_bpe_merge top = heap_pop(w, &heap_size);
        sym = w->symbols;
        tb_bpe_symbol *cur = &sym[top.position];
        if (cur->length == 0 || cur->next < 0)
            continue;
        size_t next_pos = (size_t)cur->next;
        tb_bpe_symbol right = sym[next_pos];
        uint32_t rank;
        int32_t new_id;
        if (!pair_map_get(&bpe->merges, cur->id, right.id, &rank, &new_id) || new_id != top.new_id)
            continue; /* an expired queue entry */
        cur->id = top.new_id;
        cur->length += right.length;
        cur->next = right.next;
        sym[next_pos].length = 0;
        if (right.next >= 0 && (size_t)right.next < count)
            sym[right.next].prev = (int32_t)top.position;
        if (cur->prev >= 0) {
            if (pair_map_get(&bpe->merges, sym[cur->prev].id, cur->id, &rank, &new_id))
                TB_TRY(heap_push(w, &heap_size, (tb_bpe_merge){rank, (uint32_t)cur->prev, new_id}));
            cur = &w->symbols[top.position];
        }
        if (cur->next >= 0 && (size_t)cur->next < count) {
            if (pair_map_get(&bpe->merges, cur->id, w->symbols[cur->next].id, &rank, &new_id))
                TB_TRY(heap_push(w, &heap_size, (tb_bpe_merge){rank, top.position, new_id}));
        }
    }
    return TB_OK;
}

/* BPE of one word through the cache (no ignore_merges check). */
static tb_status tokenize_cached(const tb_bpe *bpe, const char *word, size_t n, tb_bpe_scratch *w, tb_token_ids *out) {
    uint64_t hash = 0;
    if (n < CACHE_MAX_WORD) {
        hash = tb_tok_hash(word, n);
        int hit = cache_lookup(bpe->cache, word, n, hash, out);
        if (hit < 0)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: id list");
        if (hit)
            return TB_OK;
    }
    size_t count = 0;
    TB_TRY(split_into_symbols(bpe, word, n, w, &count));
    TB_TRY(merge_all(bpe, w, count));
    size_t first = out->count;
    for (size_t i = 0; i < count; i++)
        if (w->symbols[i].length)
            TB_TRY(tb_token_ids_push(out, w->symbols[i].id));
    if (n < CACHE_MAX_WORD)
        cache_store(bpe->cache, word, n, hash, out->ids + first, out->count - first);
    return TB_OK;
}

tb_status tb_bpe_tokenize(const tb_bpe *bpe, const char *word, size_t n, tb_bpe_scratch *w, tb_token_ids *out) {
    if (n == 0)
        return TB_OK;
    if (bpe->ignore_merges) {
        int32_t id;
        if (tb_str_map_get(&bpe->vocab, word, n, &id))
            return tb_token_ids_push(out, id);
    }
    if (!bpe->split_before_metaspace || n < 8)
        return tokenize_cached(bpe, word, n, w, out);
    size_t start = 0;
    for (size_t i = 3; i + 3 <= n; i++) {
        if (word[i] == METASPACE[0] && memcmp(word + i, METASPACE, 3) == 0 &&
            memcmp(word + i - 3, METASPACE, 3) != 0 && i > start) {
            TB_TRY(tokenize_cached(bpe, word + start, i - start, w, out));
            start = i;
        }
    }
    return tokenize_cached(bpe, word + start, n - start, w, out);
}
