/* Added tokens: registration with HF's id assignment rules, the byte tries that find them
 * (leftmost-longest, like the aho-corasick matcher HF uses), and find_matches with the
 * single_word / lstrip / rstrip options. */
#include <stdlib.h>

#include "tokenizer/internal.h"

static tb_status trie_new_node(tb_trie *trie, uint8_t byte, int32_t *out) {
    if (trie->count == trie->capacity) {
        size_t capacity = trie->capacity ? trie->capacity * 2 : 64;
        tb_trie_node *nodes = realloc(trie->nodes, capacity * sizeof *nodes);
        if (!nodes)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: added-token trie of %zu nodes", capacity);
        trie->nodes = nodes;
        trie->capacity = capacity;
    }
    trie->nodes[trie->count] = (tb_trie_node){-1, -1, -1, byte};
    *out = (int32_t)trie->count++;
    return TB_OK;
}

/* Inserts pattern -> token index; the first pattern inserted wins on duplicates (lowest pattern id,
 * as aho-corasick reports). Empty patterns are ignored. */
static tb_status trie_insert(tb_trie *trie, const char *pattern, size_t n, int32_t token) {
    if (n == 0)
        return TB_OK;
    int32_t node;
    if (trie->count == 0)
        TB_TRY(trie_new_node(trie, 0, &node));
    node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)pattern[i];
        int32_t child = trie->nodes[node].first_child;
        while (child >= 0 && trie->nodes[child].byte != b)
            child = trie->nodes[child].next_sibling;
        if (child < 0) {
            TB_TRY(trie_new_node(trie, b, &child));
            trie->nodes[child].next_sibling = trie->nodes[node].first_child;
            trie->nodes[node].first_child = child;
        }
        node = child;
    }
    if (trie->nodes[node].token < 0)
        trie->nodes[node].token = token;
    trie->first_bytes[(uint8_t)pattern[0] >> 3] |= (uint8_t)(1u << ((uint8_t)pattern[0] & 7));
    return TB_OK;
}

/* Longest pattern starting at s[p]: returns its end and sets *token, or returns p. */
static size_t trie_longest(const tb_trie *trie, const uint8_t *s, size_t n, size_t p, int32_t *token) {
    size_t best = p;
    int32_t node = 0;
    for (size_t i = p; i < n; i++) {
        int32_t child = trie->nodes[node].first_child;
        while (child >= 0 && trie->nodes[child].byte != s[i])
            child = trie->nodes[child].next_sibling;
        if (child < 0)
            break;
        node = child;
        if (trie->nodes[node].token >= 0) {
            best = i + 1;
            *token = trie->nodes[node].token;
        }
    }
    return best;
}

static tb_status segments_push(tb_segments *out, size_t start, size_t end, int32_t id) {
    if (out->count == out->capacity) {
        size_t capacity = out->capacity ? out->capacity * 2 : 16;
        tb_segment *data = realloc(out->data, capacity * sizeof *data);
        if (!data)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: %zu text segments", capacity);
        out->data = data;
        out->capacity = capacity;
    }
    out->data[out->count++] = (tb_segment){start, end, id};
    return TB_OK;
}

static unsigned flags_before(const uint8_t *s, size_t i) {
    size_t start = tb_utf8_previous(s, i);
    return tb_uc_flags(tb_utf8_next(s, &start));
}

static unsigned flags_at(const uint8_t *s, size_t i) {
    return tb_uc_flags(tb_utf8_next(s, &i));
}

tb_status tb_added_find(const tb_tokenizer *t, const tb_trie *trie, const char *text, size_t n, tb_segments *out) {
    const uint8_t *s = (const uint8_t *)text;
    size_t start_offset = 0;
    if (trie->count > 0) {
        for (size_t p = 0; p < n;) {
            if (!(trie->first_bytes[s[p] >> 3] & (1u << (s[p] & 7)))) {
                p++;
                continue;
            }
            int32_t token = -1;
            size_t match_end = trie_longest(trie, s, n, p, &token);
            if (match_end == p) {
                p++;
                continue;
            }
            /* options come from the token that owns the id last (HF's added_tokens_map_r) */
            const tb_added_token *at = &t->added[t->added_by_id[t->added[token].id]];
            size_t start = p, stop = match_end;
            p = match_end; /* the search resumes after the raw match, kept or not */
            if (at->single_word) {
                bool start_space = start == 0 || !(flags_before(s, start) & TB_UC_WORD);
                bool stop_space = stop == n || !(flags_at(s, stop) & TB_UC_WORD);
                if (!start_space || !stop_space)
                    continue;
            }
            if (at->lstrip) {
                size_t new_start = start;
                while (new_start > 0 && (flags_before(s, new_start) & TB_UC_SPACE))
                    new_start = tb_utf8_previous(s, new_start);
                start = new_start > start_offset ? new_start : start_offset;
            }
            if (at->rstrip) {
                while (stop < n) {
                    size_t next = stop;
                    if (!(tb_uc_flags(tb_utf8_next(s, &next)) & TB_UC_SPACE))
                        break;
                    stop = next;
                }
            }
            if (start_offset < start)
                TB_TRY(segments_push(out, start_offset, start, -1));
            TB_TRY(segments_push(out, start, stop, at->id));
            start_offset = stop;
        }
    }
    if (start_offset != n)
        TB_TRY(segments_push(out, start_offset, n, -1));
    return TB_OK;
}

/* AddedVocabulary::add_tokens for one token: the id is the model's when the content is in its
 * vocabulary (or already added), else the next free id after the model's vocabulary. */
static tb_status add_one(tb_tokenizer *t, const tb_added_token *token) {
    if (token->length == 0)
        return TB_OK;
    /* identity = content and every flag: a byte of flags after the content */
    char *identity = malloc(token->length + 1);
    if (!identity)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: added tokens");
    memcpy(identity, token->content, token->length);
    identity[token->length] = (char)(token->single_word | token->lstrip << 1 | token->rstrip << 2 |
                                     token->normalized << 3 | token->special << 4);
    int32_t seen;
    const bool repeat = tb_str_map_get(&t->added_identity, identity, token->length + 1, &seen);
    tb_status st = repeat ? TB_OK : tb_str_map_put(&t->added_identity, identity, token->length + 1, 1, NULL);
    free(identity);
    if (repeat || st != TB_OK)
        return st; /* an identical token is ignored */
    int32_t id;
    if (!tb_str_map_get(&t->added_map, token->content, token->length, &id) &&
        !tb_str_map_get(&t->model.vocab, token->content, token->length, &id)) {
        const int64_t model_size = (int64_t)t->model.vocab.count, max = t->added_max_id;
        int64_t new_id = max < 0 ? model_size : (max >= model_size || model_size == 0) ? max + 1 : model_size;
        if (new_id >= TB_TOKENIZER_MAX_ID)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: added token ids exceed %d", TB_TOKENIZER_MAX_ID);
        id = (int32_t)new_id;
    }
    TB_TRY(tb_str_map_put(&t->added_map, token->content, token->length, id, NULL));
    if (id > t->added_max_id)
        t->added_max_id = id;
    if (t->added_count == t->added_capacity) {
        const size_t capacity = t->added_capacity ? 2 * t->added_capacity : 64;
        tb_added_token *grown = realloc(t->added, capacity * sizeof *grown);
        if (!grown)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: added tokens");
        t->added = grown;
        t->added_capacity = capacity;
    }
    tb_added_token *a = &t->added[t->added_count];
    *a = *token;
    a->id = id;
    a->order = (uint32_t)t->added_count;
    a->match = NULL;
    TB_TRY(tb_tok_strdup(token->content, token->length, &a->content));
    t->added_count++;
    return TB_OK;
}

tb_status tb_tokenizer_add_token_json(tb_tokenizer *t, const tb_json_value *v, const char *where) {
    if (tb_json_type_of(v) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "%s: an added token must be an object", where);
    tb_added_token token = {0};
    const char *content;
    TB_TRY(tb_tok_json_string(v, "content", where, &content, &token.length));
    token.content = (char *)content;
    TB_TRY(tb_tok_json_bool(v, "special", false, where, &token.special));
    TB_TRY(tb_tok_json_bool(v, "single_word", false, where, &token.single_word));
    TB_TRY(tb_tok_json_bool(v, "lstrip", false, where, &token.lstrip));
    TB_TRY(tb_tok_json_bool(v, "rstrip", false, where, &token.rstrip));
    TB_TRY(tb_tok_json_bool(v, "normalized", !token.special, where, &token.normalized));
    return add_one(t, &token);
}

tb_status tb_tokenizer_add_tokens(tb_tokenizer *t, const tb_json_value *list) {
    if (!list || tb_json_type_of(list) == TB_JSON_NULL)
        return TB_OK;
    if (tb_json_type_of(list) != TB_JSON_ARRAY)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: \"added_tokens\" must be an array");
    for (size_t i = 0; i < tb_json_length(list); i++)
        TB_TRY(tb_tokenizer_add_token_json(t, tb_json_array_at(list, i), "tokenizer.json: added_tokens"));
    return TB_OK;
}

/* Orders tokens like refresh_added_tokens (specials, then the others, each in insertion order),
 * builds both tries and the id-indexed tables. */
tb_status tb_tokenizer_finish_added(tb_tokenizer *t) {
    /* stable partition: specials first */
    tb_added_token *ordered = malloc((t->added_count ? t->added_count : 1) * sizeof *ordered);
    if (!ordered)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: added tokens");
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < t->added_count; i++)
            if (t->added[i].special == (pass == 0))
                ordered[k++] = t->added[i];
    free(t->added);
    t->added = ordered;
    t->added_capacity = t->added_count ? t->added_count : 1;

    size_t limit = t->model.id_limit;
    for (size_t i = 0; i < t->added_count; i++)
        if ((size_t)t->added[i].id + 1 > limit)
            limit = (size_t)t->added[i].id + 1;
    t->id_limit = limit;
    t->added_by_id = malloc((limit ? limit : 1) * sizeof *t->added_by_id);
    t->special_by_id = calloc(limit ? limit : 1, 1);
    if (!t->added_by_id || !t->special_by_id)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: id tables of %zu entries", limit);
    for (size_t i = 0; i < limit; i++)
        t->added_by_id[i] = -1;
    for (size_t i = 0; i < t->added_count; i++) {
        int32_t *slot = &t->added_by_id[t->added[i].id];
        if (*slot < 0 || t->added[*slot].order < t->added[i].order)
            *slot = (int32_t)i;
    }

    /* tries; normalized tokens are searched (and read back) in their normalized form */
    tb_status st = TB_OK;
    for (size_t i = 0; i < t->added_count; i++) {
        tb_added_token *a = &t->added[i];
        if (!a->normalized) {
            a->match_length = a->length;
            TB_TRY(trie_insert(&t->trie_raw, a->content, a->length, (int32_t)i));
            continue;
        }
        tb_tok_buffer normalized = {0};
        st = tb_tokenizer_normalize(t, a->content, a->length, &normalized);
        if (st == TB_OK)
            st = trie_insert(&t->trie_normalized, normalized.data ? normalized.data : "", normalized.length, (int32_t)i);
        a->match = normalized.data;
        a->match_length = normalized.length;
        TB_TRY(st);
    }
    tb_str_map specials = {0};
    for (size_t i = 0; i < t->added_count && st == TB_OK; i++)
        if (t->added[i].special)
            st = tb_str_map_put(&specials, t->added[i].content, t->added[i].length, 1, NULL);
    for (size_t id = 0; id < limit && st == TB_OK; id++) {
        size_t length;
        const char *token = tb_tokenizer_id_to_token(t, (int32_t)id, &length);
        int32_t dummy;
        t->special_by_id[id] = token && tb_str_map_get(&specials, token, length, &dummy);
    }
    tb_str_map_free(&specials);
    TB_TRY(st);

    /* vocab size: distinct strings of the model vocabulary and the added tokens */
    t->vocab_size = t->model.vocab.count;
    for (size_t e = 0; e < t->added_map.count; e++) {
        size_t length;
        const char *key = tb_str_map_key(&t->added_map, e, &length);
        if (tb_str_map_find(&t->model.vocab, key, length) < 0)
            t->vocab_size++;
    }

    return TB_OK;
}
