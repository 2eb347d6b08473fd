/* Decoding: ids -> token strings -> the decoder chain (ByteLevel, Metaspace, Replace, ByteFallback,
 * Fuse, Strip; each works on the whole list like HF's decode_chain) -> text, and the streaming
 * decoder with HF DecodeStream's prefix bookkeeping. */
#include <stdlib.h>

#include "tokenizer/internal.h"

/* A list of strings stored back to back in one buffer. */
typedef struct token_list {
    tb_tok_buffer text;
    size_t *offsets, *lengths;
    size_t count, capacity;
} token_list;

static void list_free(token_list *l) {
    tb_tok_buffer_free(&l->text);
    free(l->offsets);
    free(l->lengths);
    memset(l, 0, sizeof *l);
}

/* Starts a new (empty) token at the end of the list; append its bytes with list_append. */
static tb_status list_open(token_list *l) {
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? l->capacity * 2 : 32;
        size_t *offsets = realloc(l->offsets, capacity * sizeof *offsets);
        if (offsets)
            l->offsets = offsets;
        size_t *lengths = offsets ? realloc(l->lengths, capacity * sizeof *lengths) : NULL;
        if (!offsets || !lengths)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: decoding %zu tokens", capacity);
        l->lengths = lengths;
        l->capacity = capacity;
    }
    l->offsets[l->count] = l->text.length;
    l->lengths[l->count] = 0;
    l->count++;
    return TB_OK;
}

static tb_status list_append(token_list *l, const void *bytes, size_t n) {
    TB_TRY(tb_tok_buffer_append(&l->text, bytes, n));
    l->lengths[l->count - 1] += n;
    return TB_OK;
}

static tb_status list_push(token_list *l, const void *bytes, size_t n) {
    TB_TRY(list_open(l));
    return list_append(l, bytes, n);
}

static const char *item(const token_list *l, size_t i) {
    return l->text.data ? l->text.data + l->offsets[i] : "";
}

static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD};

static int byte_of_char(const tb_tokenizer *t, uint32_t cp) {
    return cp < 0x144 ? t->char_to_byte[cp] : -1;
}

/* raw: the bytes as they are, incomplete UTF-8 included (tb_tokenizer_token_bytes); else lossy UTF-8. */
static tb_status decode_byte_level(const tb_tokenizer *t, const token_list *in, token_list *out, bool raw) {
    tb_tok_buffer bytes = {0};
    tb_status st = TB_OK;
    for (size_t i = 0; i < in->count && st == TB_OK; i++) {
        const uint8_t *s = (const uint8_t *)item(in, i);
        size_t n = in->lengths[i], start = bytes.length;
        bool all = true;
        for (size_t k = 0; k < n && st == TB_OK;) {
            int b = byte_of_char(t, tb_utf8_next(s, &k));
            if (b < 0) {
                all = false;
                break;
            }
            uint8_t byte = (uint8_t)b;
            st = tb_tok_buffer_append(&bytes, &byte, 1);
        }
        if (!all && st == TB_OK) { /* a character outside the map: the token's own bytes */
            bytes.length = start;
            st = tb_tok_buffer_append(&bytes, s, n);
        }
    }
    if (st == TB_OK)
        st = list_open(out);
    if (st == TB_OK) {
        size_t before = out->text.length;
        const uint8_t *data = (const uint8_t *)(bytes.data ? bytes.data : "");
        st = raw ? tb_tok_buffer_append(&out->text, data, bytes.length)
                 : tb_utf8_append_lossy(&out->text, data, bytes.length);
        out->lengths[out->count - 1] = out->text.length - before;
    }
    tb_tok_buffer_free(&bytes);
    return st;
}

/* "<0xAB>" -> 0xAB (Rust's u8::from_str_radix also takes a '+' before a single digit). */
static int byte_fallback_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int value = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (k == 3 && c == '+')
                continue;
            return -1;
        }
        value = value * 16 + d;
    }
    return value;
}

static tb_status flush_bytes(token_list *out, tb_tok_buffer *pending, bool raw) {
    if (!pending->length)
        return TB_OK;
    tb_status st;
    if (raw || tb_utf8_valid_prefix((const uint8_t *)pending->data, pending->length) == pending->length) {
        st = list_push(out, pending->data, pending->length);
    } else {
        st = TB_OK;
        for (size_t k = 0; k < pending->length && st == TB_OK; k++) /* one U+FFFD per byte */
            st = list_push(out, REPLACEMENT, 3);
    }
    pending->length = 0;
    return st;
}

/* One decoder of the chain over the whole list. raw (tb_tokenizer_token_bytes: one token in the middle of a
 * text): no lossy UTF-8, no start-of-text rules, and no Strip of a fused text (after_fuse). */
static tb_status decode_step(const tb_tokenizer *t, const tb_decoder *d, const token_list *in, token_list *out,
                             bool raw, bool after_fuse) {
    tb_status st = TB_OK;
    uint8_t rep[4];
    switch (d->kind) {
    case TB_DECODER_BYTE_LEVEL:
        return decode_byte_level(t, in, out, raw);
    case TB_DECODER_FUSE:
        st = list_open(out);
        for (size_t i = 0; i < in->count && st == TB_OK; i++)
            st = list_append(out, item(in, i), in->lengths[i]);
        return st;
    case TB_DECODER_BYTE_FALLBACK: {
        tb_tok_buffer pending = {0};
        for (size_t i = 0; i < in->count && st == TB_OK; i++) {
            int b = byte_fallback_value(item(in, i), in->lengths[i]);
            if (b >= 0) {
                uint8_t byte = (uint8_t)b;
                st = tb_tok_buffer_append(&pending, &byte, 1);
                continue;
            }
            st = flush_bytes(out, &pending, raw);
            if (st == TB_OK)
                st = list_push(out, item(in, i), in->lengths[i]);
        }
        if (st == TB_OK)
            st = flush_bytes(out, &pending, raw);
        tb_tok_buffer_free(&pending);
        return st;
    }
    case TB_DECODER_REPLACE:
        for (size_t i = 0; i < in->count && st == TB_OK; i++) {
            const char *s = item(in, i);
            size_t n = in->lengths[i], k = 0, copied = 0;
            st = list_open(out);
            while (st == TB_OK && k + d->pattern_length <= n) {
                if (memcmp(s + k, d->pattern, d->pattern_length) == 0) {
                    st = list_append(out, s + copied, k - copied);
                    if (st == TB_OK)
                        st = list_append(out, d->content, d->content_length);
                    k += d->pattern_length;
                    copied = k;
                } else {
                    k++;
                }
            }
            if (st == TB_OK)
                st = list_append(out, s + copied, n - copied);
        }
        return st;
    case TB_DECODER_METASPACE: {
        size_t rep_length = tb_utf8_encode(d->replacement, rep);
        (void)rep_length;
        for (size_t i = 0; i < in->count && st == TB_OK; i++) {
            const uint8_t *s = (const uint8_t *)item(in, i);
            size_t n = in->lengths[i];
            st = list_open(out);
            for (size_t k = 0; k < n && st == TB_OK;) {
                size_t start = k;
                uint32_t cp = tb_utf8_next(s, &k);
                if (cp != d->replacement)
                    st = list_append(out, s + start, k - start);
                else if (!(i == 0 && !raw && d->prepend_scheme != TB_PREPEND_NEVER))
                    st = list_append(out, " ", 1);
            }
        }
        return st;
    }
    case TB_DECODER_STRIP:
        if (raw && after_fuse) { /* strips the ends of the whole text, not of one token inside it */
            for (size_t i = 0; i < in->count && st == TB_OK; i++)
                st = list_push(out, item(in, i), in->lengths[i]);
            return st;
        }
        for (size_t i = 0; i < in->count && st == TB_OK; i++) {
            const uint8_t *s = (const uint8_t *)item(in, i);
            size_t n = in->lengths[i], a = 0, b = n;
            for (size_t k = 0; k < d->strip_start && a < n; k++) {
                size_t next = a;
                if (tb_utf8_next(s, &next) != d->strip_char)
                    break;
                a = next;
            }
            for (size_t k = 0; k < d->strip_stop && b > a; k++) {
                size_t prev = tb_utf8_previous(s, b), probe = prev;
                if (tb_utf8_next(s, &probe) != d->strip_char)
                    break;
                b = prev;
            }
            st = list_push(out, s + a, b - a);
        }
        return st;
    }
    return tb_error_set(TB_ERR_INTERNAL, "tokenizer: unknown decoder kind");
}

/* Runs the decoder chain over the token list `a` (b is scratch; both are freed) and joins the result into
 * *out: "" between tokens after a decoder, " " without one (HF's tokens.join(" ")); in raw mode (one
 * token inside a text, tb_tokenizer_token_bytes) that " " also precedes the first one. */
static tb_status decode_list(const tb_tokenizer *t, token_list *a, token_list *b, tb_status st, bool raw,
                             tb_tokenizer_string *out) {
    bool fused = false;
    for (size_t k = 0; k < t->decoder_count && st == TB_OK; k++) {
        b->count = 0;
        b->text.length = 0;
        st = decode_step(t, &t->decoders[k], a, b, raw, fused);
        fused |= t->decoders[k].kind == TB_DECODER_FUSE;
        token_list swap = *a;
        *a = *b;
        *b = swap;
    }
    tb_tok_buffer text = {0};
    for (size_t i = 0; i < a->count && st == TB_OK; i++) {
        if ((i > 0 || raw) && !t->has_decoder)
            st = tb_tok_buffer_append(&text, " ", 1);
        if (st == TB_OK)
            st = tb_tok_buffer_append(&text, item(a, i), a->lengths[i]);
    }
    if (st == TB_OK && !text.data)
        st = tb_tok_buffer_append(&text, "", 0);
    list_free(a);
    list_free(b);
    if (st != TB_OK) {
        tb_tok_buffer_free(&text);
        return st;
    }
    out->data = text.data;
    out->length = text.length;
    return TB_OK;
}

tb_status tb_tokenizer_decode(const tb_tokenizer *t, const int32_t *ids, size_t count, bool skip_special_tokens,
                              tb_tokenizer_string *out) {
    if (!t || !out || (!ids && count))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer_decode: NULL argument");
    out->data = NULL;
    out->length = 0;
    token_list a = {0}, b = {0};
    tb_status st = TB_OK;
    for (size_t i = 0; i < count && st == TB_OK; i++) {
        size_t n;
        const char *token = tb_tokenizer_id_to_token(t, ids[i], &n);
        if (!token || (skip_special_tokens && tb_tokenizer_is_special(t, ids[i])))
            continue;
        st = list_push(&a, token, n);
    }
    return decode_list(t, &a, &b, st, false, out);
}

tb_status tb_tokenizer_token_bytes(const tb_tokenizer *t, int32_t id, tb_tokenizer_string *out) {
    if (!t || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer_token_bytes: NULL argument");
    out->data = NULL;
    out->length = 0;
    size_t n;
    const char *token = tb_tokenizer_id_to_token(t, id, &n);
    token_list a = {0}, b = {0};
    return decode_list(t, &a, &b, token ? list_push(&a, token, n) : TB_OK, true, out);
}

void tb_tokenizer_string_free(tb_tokenizer_string *s) {
    if (!s)
        return;
    free(s->data);
    s->data = NULL;
    s->length = 0;
}

/* ---------------- streaming ---------------- */

struct tb_decode_stream {
    const tb_tokenizer *tokenizer;
    bool skip_special_tokens;
    int32_t *ids; /* the window: ids before prefix_index only give context to the prefix */
    size_t count, capacity;
    tb_tokenizer_string prefix; /* decode of ids[0..] as of the last emitted chunk */
    size_t prefix_index;
    tb_tok_buffer piece; /* what the last step returned */
};

tb_status tb_decode_stream_new(const tb_tokenizer *t, bool skip_special_tokens, tb_decode_stream **out) {
    if (!t || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "decode_stream_new: NULL argument");
    tb_decode_stream *s = calloc(1, sizeof *s);
    if (!s)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: decode stream");
    s->tokenizer = t;
    s->skip_special_tokens = skip_special_tokens;
    *out = s;
    return TB_OK;
}

static bool ends_with_replacement(const tb_tokenizer_string *s) {
    return s->length >= 3 && memcmp(s->data + s->length - 3, REPLACEMENT, 3) == 0;
}

static tb_status set_piece(tb_decode_stream *s, const char *bytes, size_t n, const char **piece, size_t *length) {
    s->piece.length = 0;
    TB_TRY(tb_tok_buffer_append(&s->piece, bytes, n));
    *piece = s->piece.data;
    *length = s->piece.length;
    return TB_OK;
}

tb_status tb_decode_stream_step(tb_decode_stream *s, int32_t id, const char **piece, size_t *piece_length) {
    if (!s || !piece || !piece_length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "decode_stream_step: NULL argument");
    const tb_tokenizer *t = s->tokenizer;
    TB_TRY(set_piece(s, "", 0, piece, piece_length));
    if (s->prefix.length == 0 && s->count > 0) {
        tb_tokenizer_string fresh;
        TB_TRY(tb_tokenizer_decode(t, s->ids, s->count, s->skip_special_tokens, &fresh));
        if (!ends_with_replacement(&fresh)) {
            tb_tokenizer_string_free(&s->prefix);
            s->prefix = fresh;
            s->prefix_index = s->count;
        } else {
            tb_tokenizer_string_free(&fresh);
        }
    }
    if (s->count == s->capacity) {
        size_t capacity = s->capacity ? s->capacity * 2 : 16;
        int32_t *ids = realloc(s->ids, capacity * sizeof *ids);
        if (!ids)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: decode stream window");
        s->ids = ids;
        s->capacity = capacity;
    }
    s->ids[s->count++] = id;
    tb_tokenizer_string all;
    TB_TRY(tb_tokenizer_decode(t, s->ids, s->count, s->skip_special_tokens, &all));
    tb_status st = TB_OK;
    if (all.length > s->prefix.length && !ends_with_replacement(&all)) {
        if (s->prefix.length && memcmp(all.data, s->prefix.data, s->prefix.length) != 0) {
            st = tb_error_set(TB_ERR_INTERNAL, "decode_stream: the text decoded so far changed (invalid prefix)");
        } else {
            st = set_piece(s, all.data + s->prefix.length, all.length - s->prefix.length, piece, piece_length);
            if (st == TB_OK) {
                size_t new_prefix_index = s->count - s->prefix_index;
                memmove(s->ids, s->ids + s->prefix_index, new_prefix_index * sizeof *s->ids);
                s->count = new_prefix_index;
                tb_tokenizer_string_free(&s->prefix);
                st = tb_tokenizer_decode(t, s->ids, s->count, s->skip_special_tokens, &s->prefix);
                s->prefix_index = new_prefix_index;
            }
        }
    }
    tb_tokenizer_string_free(&all);
    return st;
}

tb_status tb_decode_stream_flush(tb_decode_stream *s, const char **piece, size_t *piece_length) {
    if (!s || !piece || !piece_length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "decode_stream_flush: NULL argument");
    tb_tokenizer_string all;
    TB_TRY(tb_tokenizer_decode(s->tokenizer, s->ids, s->count, s->skip_special_tokens, &all));
    tb_status st;
    if (all.length >= s->prefix.length &&
        (s->prefix.length == 0 || memcmp(all.data, s->prefix.data, s->prefix.length) == 0))
        st = set_piece(s, all.data + s->prefix.length, all.length - s->prefix.length, piece, piece_length);
    else
        st = set_piece(s, all.data, all.length, piece, piece_length);
    tb_tokenizer_string_free(&all);
    s->count = 0;
    s->prefix_index = 0;
    tb_tokenizer_string_free(&s->prefix);
    return st;
}

void tb_decode_stream_free(tb_decode_stream *s) {
    if (!s)
        return;
    free(s->ids);
    tb_tokenizer_string_free(&s->prefix);
    tb_tok_buffer_free(&s->piece);
    free(s);
}
