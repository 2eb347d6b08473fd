/* Encoding (HF's encode_single_sequence: added tokens on the raw text, normalization, added tokens
 * on the normalized text, pre-tokenization, BPE per pre-token, then the post-processor) and the
 * small public accessors. */
#include <stdlib.h>

#include "tokenizer/internal.h"

typedef struct encode_context {
    tb_tok_buffer lossy; /* the input with invalid UTF-8 replaced, when needed */
    tb_tok_buffer arena; /* normalized text and every transformed pre-token */
    tb_segments raw, normalized;
    tb_pieces pieces, spare;
    tb_bpe_scratch scratch;
} encode_context;

static void context_free(encode_context *c) {
    tb_tok_buffer_free(&c->lossy);
    tb_tok_buffer_free(&c->arena);
    free(c->raw.data);
    free(c->normalized.data);
    free(c->pieces.data);
    free(c->spare.data);
    tb_bpe_scratch_free(&c->scratch);
}

static tb_status encode_segment(const tb_tokenizer *t, const char *text, size_t n, bool at_origin, encode_context *c,
                                 tb_token_ids *out) {
    c->arena.length = 0;
    TB_TRY(tb_tokenizer_normalize(t, text, n, &c->arena));
    c->normalized.count = 0;
    TB_TRY(tb_added_find(t, &t->trie_normalized, c->arena.data ? c->arena.data : "", c->arena.length, &c->normalized));
    for (size_t k = 0; k < c->normalized.count; k++) {
        tb_segment sub = c->normalized.data[k];
        if (sub.id >= 0) {
            TB_TRY(tb_token_ids_push(out, sub.id));
            continue;
        }
        if (sub.end == sub.start)
            continue;
        c->pieces.count = 0;
        TB_TRY(tb_pieces_push(&c->pieces, sub.start, sub.end - sub.start, at_origin && sub.start == 0));
        TB_TRY(tb_pretokenize(t, &c->arena, &c->pieces, &c->spare));
        for (size_t i = 0; i < c->pieces.count; i++) {
            const tb_piece *p = &c->pieces.data[i];
            TB_TRY(tb_bpe_tokenize(&t->model, c->arena.data + p->offset, p->length, &c->scratch, out));
        }
    }
    return TB_OK;
}

/* Applies the post-processors to out->ids[base..]. */
static tb_status post_process(const tb_tokenizer *t, size_t base, tb_token_ids *out) {
    for (size_t k = 0; k < t->postprocessor_count; k++) {
        const tb_postprocessor *pp = &t->postprocessors[k];
        size_t count = out->count - base;
        int32_t *sequence = malloc((count ? count : 1) * sizeof *sequence);
        if (!sequence)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: post-processing %zu ids", count);
        if (count)
            memcpy(sequence, out->ids + base, count * sizeof *sequence);
        out->count = base;
        tb_status st = TB_OK;
        for (size_t i = 0; i < pp->count && st == TB_OK; i++) {
            const tb_template_item *item = &pp->items[i];
            const int32_t *ids = item->is_sequence ? sequence : item->ids;
            size_t n = item->is_sequence ? count : item->count;
            for (size_t j = 0; j < n && st == TB_OK; j++)
                st = tb_token_ids_push(out, ids[j]);
        }
        free(sequence);
        TB_TRY(st);
    }
    return TB_OK;
}

tb_status tb_tokenizer_encode(const tb_tokenizer *t, const char *text, size_t n, bool add_special_tokens,
                              tb_token_ids *out) {
    if (!t || !out || (!text && n))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer_encode: NULL argument");
    encode_context c = {0};
    tb_status st = TB_OK;
    size_t base = out->count;
    if (n && tb_utf8_valid_prefix((const uint8_t *)text, n) != n) {
        st = tb_utf8_append_lossy(&c.lossy, (const uint8_t *)text, n);
        text = c.lossy.data;
        n = c.lossy.length;
    }
    if (st == TB_OK && n)
        st = tb_added_find(t, &t->trie_raw, text, n, &c.raw);
    for (size_t k = 0; k < c.raw.count && st == TB_OK; k++) {
        tb_segment seg = c.raw.data[k];
        if (seg.id >= 0)
            st = tb_token_ids_push(out, seg.id);
        else if (seg.end > seg.start)
            st = encode_segment(t, text + seg.start, seg.end - seg.start, seg.start == 0, &c, out);
    }
    if (st == TB_OK && add_special_tokens)
        st = post_process(t, base, out);
    if (st != TB_OK)
        out->count = base;
    context_free(&c);
    return st;
}

void tb_token_ids_free(tb_token_ids *ids) {
    if (!ids)
        return;
    free(ids->ids);
    ids->ids = NULL;
    ids->count = ids->capacity = 0;
}

size_t tb_tokenizer_vocab_size(const tb_tokenizer *t) {
    return t->vocab_size;
}

size_t tb_tokenizer_id_limit(const tb_tokenizer *t) {
    return t->id_limit;
}

int32_t tb_tokenizer_token_to_id(const tb_tokenizer *t, const char *token, size_t length) {
    int32_t id;
    if (tb_str_map_get(&t->added_map, token, length, &id))
        return id;
    if (tb_str_map_get(&t->model.vocab, token, length, &id))
        return id;
    return -1;
}

const char *tb_tokenizer_id_to_token(const tb_tokenizer *t, int32_t id, size_t *length) {
    size_t dummy;
    if (!length)
        length = &dummy;
    if (id < 0)
        return NULL;
    if (t->added_by_id && (size_t)id < t->id_limit && t->added_by_id[id] >= 0) {
        /* normalized added tokens read back in their normalized form (HF's normalized_cache) */
        const tb_added_token *a = &t->added[t->added_by_id[id]];
        if (a->normalized && a->match) {
            *length = a->match_length;
            return a->match;
        }
        *length = a->length;
        return a->content;
    }
    if ((size_t)id < t->model.id_limit && t->model.id_entry[id] >= 0)
        return tb_str_map_key(&t->model.vocab, (size_t)t->model.id_entry[id], length);
    return NULL;
}

bool tb_tokenizer_is_special(const tb_tokenizer *t, int32_t id) {
    return id >= 0 && (size_t)id < t->id_limit && t->special_by_id[id];
}

int32_t tb_tokenizer_bos_id(const tb_tokenizer *t) {
    return t->bos_id;
}

int32_t tb_tokenizer_eos_id(const tb_tokenizer *t) {
    return t->eos_id;
}

const char *tb_tokenizer_chat_template(const tb_tokenizer *t) {
    return t->chat_template;
}

const char *tb_tokenizer_unicode_version(void) {
    return tb_unicode_category_version;
}
