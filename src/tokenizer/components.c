/* Reading the pipeline components of tokenizer.json (normalizer, pre_tokenizer, post_processor,
 * decoder; Sequence forms flattened) and applying the normalizers. Anything unknown is an error
 * naming it, never a silent approximation. */
#include <stdlib.h>

#include "tokenizer/internal.h"

tb_status tb_tok_strdup(const char *s, size_t n, char **out) {
    char *copy = malloc(n + 1);
    if (!copy)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: string of %zu bytes", n);
    if (n)
        memcpy(copy, s, n);
    copy[n] = '\0';
    *out = copy;
    return TB_OK;
}

tb_status tb_tok_json_string(const tb_json_value *object, const char *key, const char *where, const char **out,
                             size_t *length) {
    const tb_json_value *v = tb_json_object_get(object, key);
    if (!v)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: missing \"%s\"", where, key);
    if (tb_json_get_string(v, out, length) != TB_OK)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: \"%s\" must be a string, not %s", where, key,
                            tb_json_type_name(tb_json_type_of(v)));
    return TB_OK;
}

tb_status tb_tok_json_bool(const tb_json_value *object, const char *key, bool fallback, const char *where, bool *out) {
    const tb_json_value *v = tb_json_object_get(object, key);
    *out = fallback;
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    if (tb_json_get_bool(v, out) != TB_OK)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: \"%s\" must be a boolean, not %s", where, key,
                            tb_json_type_name(tb_json_type_of(v)));
    return TB_OK;
}

tb_status tb_tok_single_char(const char *s, size_t n, const char *where, uint32_t *out) {
    if (n == 0 || tb_utf8_valid_prefix((const uint8_t *)s, n) != n || tb_utf8_char_length((uint8_t)s[0]) != n)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: '%.*s' must be exactly one character", where,
                            (int)(n > 32 ? 32 : n), s);
    size_t i = 0;
    *out = tb_utf8_next((const uint8_t *)s, &i);
    return TB_OK;
}

static tb_status component_type(const tb_json_value *v, const char *what, const char **type) {
    if (tb_json_type_of(v) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s must be an object or null, not %s", what,
                            tb_json_type_name(tb_json_type_of(v)));
    size_t n;
    return tb_tok_json_string(v, "type", what, type, &n);
}

static tb_status grow(void **array, size_t *count, size_t size) {
    void *bigger = realloc(*array, (*count + 1) * size);
    if (!bigger)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: component list");
    *array = bigger;
    memset((char *)bigger + *count * size, 0, size);
    (*count)++;
    return TB_OK;
}

/* A {"String": s} or {"Regex": r} pattern object. */
static tb_status read_pattern(const tb_json_value *object, const char *where, const char **text, size_t *length,
                              bool *is_regex) {
    const tb_json_value *p = tb_json_object_get(object, "pattern");
    if (!p || tb_json_type_of(p) != TB_JSON_OBJECT || tb_json_length(p) != 1)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}",
                            where);
    const tb_json_value *s = tb_json_object_get(p, "String");
    const tb_json_value *r = tb_json_object_get(p, "Regex");
    *is_regex = r != NULL;
    if ((!s && !r) || tb_json_get_string(s ? s : r, text, length) != TB_OK)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: the pattern must be a string", where);
    return TB_OK;
}

/* ---------------- normalizers ---------------- */

tb_status tb_tokenizer_parse_normalizer(tb_tokenizer *t, const tb_json_value *v) {
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    const char *type;
    TB_TRY(component_type(v, "normalizer", &type));
    if (strcmp(type, "Sequence") == 0) {
        const tb_json_value *list = tb_json_object_get(v, "normalizers");
        if (!list || tb_json_type_of(list) != TB_JSON_ARRAY)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: normalizer Sequence needs a \"normalizers\" array");
        for (size_t i = 0; i < tb_json_length(list); i++)
            TB_TRY(tb_tokenizer_parse_normalizer(t, tb_json_array_at(list, i)));
        return TB_OK;
    }
    tb_normalizer nz = {0};
    const char *s;
    size_t n;
    if (strcmp(type, "NFC") == 0 || strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 || strcmp(type, "NFKD") == 0) {
        nz.kind = TB_NORMALIZER_UNICODE;
        nz.form = strcmp(type, "NFC") == 0 ? TB_NF_NFC : strcmp(type, "NFD") == 0 ? TB_NF_NFD
                  : strcmp(type, "NFKC") == 0 ? TB_NF_NFKC : TB_NF_NFKD;
    } else if (strcmp(type, "Prepend") == 0) {
        nz.kind = TB_NORMALIZER_PREPEND;
        TB_TRY(tb_tok_json_string(v, "prepend", "normalizer Prepend", &s, &n));
        TB_TRY(tb_tok_strdup(s, n, &nz.content));
        nz.content_length = n;
    } else if (strcmp(type, "Replace") == 0) {
        bool is_regex;
        TB_TRY(read_pattern(v, "normalizer Replace", &s, &n, &is_regex));
        if (is_regex)
            return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace with regex '%.*s' is not supported",
                                (int)(n > 80 ? 80 : n), s);
        if (n == 0)
            return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: normalizer Replace with an empty pattern");
        nz.kind = TB_NORMALIZER_REPLACE;
        TB_TRY(tb_tok_strdup(s, n, &nz.pattern));
        nz.pattern_length = n;
        tb_status st = tb_tok_json_string(v, "content", "normalizer Replace", &s, &n);
        if (st == TB_OK)
            st = tb_tok_strdup(s, n, &nz.content);
        if (st != TB_OK) {
            free(nz.pattern);
            return st;
        }
        nz.content_length = n;
    } else if (strcmp(type, "Strip") == 0) {
        nz.kind = TB_NORMALIZER_STRIP;
        TB_TRY(tb_tok_json_bool(v, "strip_left", true, "normalizer Strip", &nz.left));
        TB_TRY(tb_tok_json_bool(v, "strip_right", true, "normalizer Strip", &nz.right));
    } else {
        return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: normalizer type '%s' is not supported", type);
    }
    if (grow((void **)&t->normalizers, &t->normalizer_count, sizeof nz) != TB_OK) {
        free(nz.pattern);
        free(nz.content);
        return TB_ERR_OUT_OF_MEMORY;
    }
    t->normalizers[t->normalizer_count - 1] = nz;
    return TB_OK;
}

static tb_status apply_normalizer(const tb_normalizer *nz, const char *text, size_t n, tb_tok_buffer *out) {
    const uint8_t *s = (const uint8_t *)text;
    switch (nz->kind) {
    case TB_NORMALIZER_UNICODE:
        if (nz->form == TB_NF_NFC && tb_unicode_is_nfc_inert(s, n))
            return tb_tok_buffer_append(out, text, n);
        return tb_unicode_normalize(nz->form, s, n, out);
    case TB_NORMALIZER_PREPEND:
        if (n)
            TB_TRY(tb_tok_buffer_append(out, nz->content, nz->content_length));
        return tb_tok_buffer_append(out, text, n);
    case TB_NORMALIZER_REPLACE: {
        size_t i = 0, copied = 0;
        while (i + nz->pattern_length <= n) {
            if (memcmp(text + i, nz->pattern, nz->pattern_length) == 0) {
                TB_TRY(tb_tok_buffer_append(out, text + copied, i - copied));
                TB_TRY(tb_tok_buffer_append(out, nz->content, nz->content_length));
                i += nz->pattern_length;
                copied = i;
            } else {
                i++;
            }
        }
        return tb_tok_buffer_append(out, text + copied, n - copied);
    }
    case TB_NORMALIZER_STRIP: {
        size_t a = 0, b = n;
        while (nz->left && a < b) {
            size_t next = a;
            if (!(tb_uc_flags(tb_utf8_next(s, &next)) & TB_UC_SPACE))
                break;
            a = next;
        }
        while (nz->right && b > a) {
            size_t prev = tb_utf8_previous(s, b), k = prev;
            if (!(tb_uc_flags(tb_utf8_next(s, &k)) & TB_UC_SPACE))
                break;
            b = prev;
        }
        return tb_tok_buffer_append(out, text + a, b - a);
    }
    }
    return tb_error_set(TB_ERR_INTERNAL, "tokenizer: unknown normalizer kind");
}

tb_status tb_tokenizer_normalize(const tb_tokenizer *t, const char *text, size_t n, tb_tok_buffer *out) {
    if (t->normalizer_count == 0)
        return tb_tok_buffer_append(out, text, n);
    if (t->normalizer_count == 1)
        return apply_normalizer(&t->normalizers[0], text, n, out);
    tb_tok_buffer a = {0}, b = {0};
    tb_status st = tb_tok_buffer_append(&a, text, n);
    for (size_t k = 0; k < t->normalizer_count && st == TB_OK; k++) {
        b.length = 0;
        st = apply_normalizer(&t->normalizers[k], a.data, a.length, &b);
        tb_tok_buffer swap = a;
        a = b;
        b = swap;
    }
    if (st == TB_OK)
        st = tb_tok_buffer_append(out, a.data, a.length);
    tb_tok_buffer_free(&a);
    tb_tok_buffer_free(&b);
    return st;
}

/* ---------------- pre-tokenizers ---------------- */

static tb_status parse_behavior(const tb_json_value *v, tb_split_behavior *out) {
    const char *s;
    size_t n;
    TB_TRY(tb_tok_json_string(v, "behavior", "pre_tokenizer Split", &s, &n));
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (tb_split_behavior)i;
            return TB_OK;
        }
    }
    return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: unknown split behavior '%s'", s);
}

static tb_status parse_prepend_scheme(const tb_json_value *v, const char *where, tb_prepend_scheme *out) {
    const tb_json_value *scheme = tb_json_object_get(v, "prepend_scheme");
    if (scheme && tb_json_type_of(scheme) != TB_JSON_NULL) {
        const char *s;
        size_t n;
        TB_TRY(tb_tok_json_string(v, "prepend_scheme", where, &s, &n));
        if (strcmp(s, "always") == 0)
            *out = TB_PREPEND_ALWAYS;
        else if (strcmp(s, "first") == 0)
            *out = TB_PREPEND_FIRST;
        else if (strcmp(s, "never") == 0)
            *out = TB_PREPEND_NEVER;
        else
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: unknown prepend_scheme '%s'", where, s);
        return TB_OK;
    }
    bool add_prefix_space; /* the older form */
    TB_TRY(tb_tok_json_bool(v, "add_prefix_space", true, where, &add_prefix_space));
    *out = add_prefix_space ? TB_PREPEND_ALWAYS : TB_PREPEND_NEVER;
    return TB_OK;
}

static tb_status parse_replacement(const tb_json_value *v, const char *where, uint32_t *out) {
    const char *s;
    size_t n;
    TB_TRY(tb_tok_json_string(v, "replacement", where, &s, &n));
    return tb_tok_single_char(s, n, where, out);
}

tb_status tb_tokenizer_parse_pretokenizer(tb_tokenizer *t, const tb_json_value *v) {
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    const char *type;
    TB_TRY(component_type(v, "pre_tokenizer", &type));
    if (strcmp(type, "Sequence") == 0) {
        const tb_json_value *list = tb_json_object_get(v, "pretokenizers");
        if (!list || tb_json_type_of(list) != TB_JSON_ARRAY)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: pre_tokenizer Sequence needs a \"pretokenizers\" array");
        for (size_t i = 0; i < tb_json_length(list); i++)
            TB_TRY(tb_tokenizer_parse_pretokenizer(t, tb_json_array_at(list, i)));
        return TB_OK;
    }
    tb_pretokenizer pt = {0};
    const char *s;
    size_t n;
    if (strcmp(type, "Split") == 0) {
        bool is_regex;
        pt.kind = TB_PRETOKENIZER_SPLIT;
        TB_TRY(read_pattern(v, "pre_tokenizer Split", &s, &n, &is_regex));
        if (is_regex) {
            if (!tb_pattern_from_regex(s, n, &pt.pattern))
                return tb_error_set(TB_ERR_UNSUPPORTED,
                                    "tokenizer.json: pre_tokenizer Split regex '%.*s' is not one of the known patterns "
                                    "(GPT-2, Llama 3, Qwen2)", (int)(n > 200 ? 200 : n), s);
        } else {
            if (n == 0)
                return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Split with an empty string");
            pt.pattern = TB_PATTERN_LITERAL;
            TB_TRY(tb_tok_strdup(s, n, &pt.literal));
            pt.literal_length = n;
        }
        tb_status st = parse_behavior(v, &pt.behavior);
        if (st == TB_OK)
            st = tb_tok_json_bool(v, "invert", false, "pre_tokenizer Split", &pt.invert);
        if (st != TB_OK) {
            free(pt.literal);
            return st;
        }
    } else if (strcmp(type, "ByteLevel") == 0) {
        pt.kind = TB_PRETOKENIZER_BYTE_LEVEL;
        TB_TRY(tb_tok_json_bool(v, "add_prefix_space", true, "pre_tokenizer ByteLevel", &pt.add_prefix_space));
        TB_TRY(tb_tok_json_bool(v, "use_regex", true, "pre_tokenizer ByteLevel", &pt.use_regex));
    } else if (strcmp(type, "Digits") == 0) {
        bool individual;
        TB_TRY(tb_tok_json_bool(v, "individual_digits", false, "pre_tokenizer Digits", &individual));
        pt.kind = TB_PRETOKENIZER_SPLIT;
        pt.pattern = TB_PATTERN_NUMERIC_CHAR;
        pt.behavior = individual ? TB_SPLIT_ISOLATED : TB_SPLIT_CONTIGUOUS;
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        pt.kind = TB_PRETOKENIZER_SPLIT;
        pt.pattern = TB_PATTERN_WHITESPACE_CHAR;
        pt.behavior = TB_SPLIT_REMOVED;
    } else if (strcmp(type, "CharDelimiterSplit") == 0) {
        pt.kind = TB_PRETOKENIZER_SPLIT;
        pt.pattern = TB_PATTERN_CHAR;
        pt.behavior = TB_SPLIT_REMOVED;
        TB_TRY(tb_tok_json_string(v, "delimiter", "pre_tokenizer CharDelimiterSplit", &s, &n));
        TB_TRY(tb_tok_single_char(s, n, "pre_tokenizer CharDelimiterSplit", &pt.split_char));
    } else if (strcmp(type, "Metaspace") == 0) {
        pt.kind = TB_PRETOKENIZER_METASPACE;
        TB_TRY(parse_replacement(v, "pre_tokenizer Metaspace", &pt.replacement));
        TB_TRY(parse_prepend_scheme(v, "pre_tokenizer Metaspace", &pt.prepend_scheme));
        TB_TRY(tb_tok_json_bool(v, "split", true, "pre_tokenizer Metaspace", &pt.split));
    } else {
        return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' is not supported", type);
    }
    if (grow((void **)&t->pretokenizers, &t->pretokenizer_count, sizeof pt) != TB_OK) {
        free(pt.literal);
        return TB_ERR_OUT_OF_MEMORY;
    }
    t->pretokenizers[t->pretokenizer_count - 1] = pt;
    return TB_OK;
}

/* ---------------- post-processors ---------------- */

static tb_status add_template_item(tb_postprocessor *pp, bool is_sequence, const int32_t *ids, size_t count) {
    TB_TRY(grow((void **)&pp->items, &pp->count, sizeof *pp->items));
    tb_template_item *item = &pp->items[pp->count - 1];
    item->is_sequence = is_sequence;
    if (count) {
        item->ids = malloc(count * sizeof *ids);
        if (!item->ids)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: template ids");
        memcpy(item->ids, ids, count * sizeof *ids);
        item->count = count;
    }
    return TB_OK;
}

static tb_status read_id(const tb_json_value *v, const char *where, int32_t *out) {
    int64_t id;
    if (!v || tb_json_get_int(v, &id) != TB_OK || id < 0 || id >= TB_TOKENIZER_MAX_ID)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s: a token id must be an integer in [0, %d)", where,
                            TB_TOKENIZER_MAX_ID);
    *out = (int32_t)id;
    return TB_OK;
}

static tb_status parse_template(tb_postprocessor *pp, const tb_json_value *v) {
    const tb_json_value *single = tb_json_object_get(v, "single");
    const tb_json_value *specials = tb_json_object_get(v, "special_tokens");
    if (!single || tb_json_type_of(single) != TB_JSON_ARRAY)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: TemplateProcessing needs a \"single\" array");
    for (size_t i = 0; i < tb_json_length(single); i++) {
        const tb_json_value *piece = tb_json_array_at(single, i);
        const tb_json_value *special = tb_json_object_get(piece, "SpecialToken");
        const tb_json_value *sequence = tb_json_object_get(piece, "Sequence");
        if (sequence) {
            TB_TRY(add_template_item(pp, true, NULL, 0));
            continue;
        }
        const char *name;
        size_t n;
        if (!special)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: TemplateProcessing piece %zu is neither SpecialToken nor Sequence", i);
        TB_TRY(tb_tok_json_string(special, "id", "TemplateProcessing SpecialToken", &name, &n));
        const tb_json_value *entry = specials ? tb_json_object_get(specials, name) : NULL;
        const tb_json_value *ids = entry ? tb_json_object_get(entry, "ids") : NULL;
        if (!ids || tb_json_type_of(ids) != TB_JSON_ARRAY)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: TemplateProcessing: special token '%s' has no \"ids\" entry", name);
        size_t count = tb_json_length(ids);
        int32_t *list = malloc((count ? count : 1) * sizeof *list);
        if (!list)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: template ids");
        tb_status st = TB_OK;
        for (size_t k = 0; k < count && st == TB_OK; k++)
            st = read_id(tb_json_array_at(ids, k), "TemplateProcessing", &list[k]);
        if (st == TB_OK)
            st = add_template_item(pp, false, list, count);
        free(list);
        TB_TRY(st);
    }
    return TB_OK;
}

/* RobertaProcessing / BertProcessing: cls A sep, from ["token", id] pairs. */
static tb_status parse_cls_sep(tb_postprocessor *pp, const tb_json_value *v, const char *type) {
    const tb_json_value *cls = tb_json_object_get(v, "cls"), *sep = tb_json_object_get(v, "sep");
    int32_t cls_id, sep_id;
    if (!cls || tb_json_length(cls) != 2 || !sep || tb_json_length(sep) != 2)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: %s needs \"cls\" and \"sep\" as [token, id]", type);
    TB_TRY(read_id(tb_json_array_at(cls, 1), type, &cls_id));
    TB_TRY(read_id(tb_json_array_at(sep, 1), type, &sep_id));
    TB_TRY(add_template_item(pp, false, &cls_id, 1));
    TB_TRY(add_template_item(pp, true, NULL, 0));
    return add_template_item(pp, false, &sep_id, 1);
}

tb_status tb_tokenizer_parse_postprocessor(tb_tokenizer *t, const tb_json_value *v) {
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    const char *type;
    TB_TRY(component_type(v, "post_processor", &type));
    if (strcmp(type, "Sequence") == 0) {
        const tb_json_value *list = tb_json_object_get(v, "processors");
        if (!list || tb_json_type_of(list) != TB_JSON_ARRAY)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: post_processor Sequence needs a \"processors\" array");
        for (size_t i = 0; i < tb_json_length(list); i++)
            TB_TRY(tb_tokenizer_parse_postprocessor(t, tb_json_array_at(list, i)));
        return TB_OK;
    }
    if (strcmp(type, "ByteLevel") == 0)
        return TB_OK; /* only trims offsets; ids are untouched */
    if (strcmp(type, "TemplateProcessing") != 0 && strcmp(type, "RobertaProcessing") != 0 &&
        strcmp(type, "BertProcessing") != 0)
        return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: post_processor type '%s' is not supported", type);
    TB_TRY(grow((void **)&t->postprocessors, &t->postprocessor_count, sizeof(tb_postprocessor)));
    tb_postprocessor *pp = &t->postprocessors[t->postprocessor_count - 1];
    if (strcmp(type, "TemplateProcessing") == 0)
        return parse_template(pp, v);
    return parse_cls_sep(pp, v, type);
}

/* ---------------- decoders ---------------- */

tb_status tb_tokenizer_parse_decoder(tb_tokenizer *t, const tb_json_value *v) {
    if (!v || tb_json_type_of(v) == TB_JSON_NULL)
        return TB_OK;
    const char *type;
    TB_TRY(component_type(v, "decoder", &type));
    t->has_decoder = true;
    if (strcmp(type, "Sequence") == 0) {
        const tb_json_value *list = tb_json_object_get(v, "decoders");
        if (!list || tb_json_type_of(list) != TB_JSON_ARRAY)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: decoder Sequence needs a \"decoders\" array");
        for (size_t i = 0; i < tb_json_length(list); i++)
            TB_TRY(tb_tokenizer_parse_decoder(t, tb_json_array_at(list, i)));
        return TB_OK;
    }
    tb_decoder d = {0};
    const char *s;
    size_t n;
    if (strcmp(type, "ByteLevel") == 0) {
        d.kind = TB_DECODER_BYTE_LEVEL;
    } else if (strcmp(type, "Metaspace") == 0) {
        d.kind = TB_DECODER_METASPACE;
        TB_TRY(parse_replacement(v, "decoder Metaspace", &d.replacement));
        TB_TRY(parse_prepend_scheme(v, "decoder Metaspace", &d.prepend_scheme));
    } else if (strcmp(type, "Replace") == 0) {
        bool is_regex;
        TB_TRY(read_pattern(v, "decoder Replace", &s, &n, &is_regex));
        if (is_regex || n == 0)
            return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace needs a non-empty String pattern");
        d.kind = TB_DECODER_REPLACE;
        TB_TRY(tb_tok_strdup(s, n, &d.pattern));
        d.pattern_length = n;
        tb_status st = tb_tok_json_string(v, "content", "decoder Replace", &s, &n);
        if (st == TB_OK)
            st = tb_tok_strdup(s, n, &d.content);
        if (st != TB_OK) {
            free(d.pattern);
            return st;
        }
        d.content_length = n;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d.kind = TB_DECODER_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d.kind = TB_DECODER_FUSE;
    } else if (strcmp(type, "Strip") == 0) {
        d.kind = TB_DECODER_STRIP;
        TB_TRY(tb_tok_json_string(v, "content", "decoder Strip", &s, &n));
        TB_TRY(tb_tok_single_char(s, n, "decoder Strip", &d.strip_char));
        int64_t start, stop;
        const tb_json_value *start_v = tb_json_object_get(v, "start"), *stop_v = tb_json_object_get(v, "stop");
        if (!start_v || !stop_v || tb_json_get_int(start_v, &start) != TB_OK ||
            tb_json_get_int(stop_v, &stop) != TB_OK || start < 0 || stop < 0)
            return tb_error_set(TB_ERR_FORMAT, "tokenizer.json: decoder Strip needs non-negative \"start\" and \"stop\"");
        d.strip_start = (size_t)start;
        d.strip_stop = (size_t)stop;
    } else {
        return tb_error_set(TB_ERR_UNSUPPORTED, "tokenizer.json: decoder type '%s' is not supported", type);
    }
    if (grow((void **)&t->decoders, &t->decoder_count, sizeof d) != TB_OK) {
        free(d.pattern);
        free(d.content);
        return TB_ERR_OUT_OF_MEMORY;
    }
    t->decoders[t->decoder_count - 1] = d;
    return TB_OK;
}

void tb_tokenizer_free_components(tb_tokenizer *t) {
    for (size_t i = 0; i < t->normalizer_count; i++) {
        free(t->normalizers[i].pattern);
        free(t->normalizers[i].content);
    }
    free(t->normalizers);
    for (size_t i = 0; i < t->pretokenizer_count; i++)
        free(t->pretokenizers[i].literal);
    free(t->pretokenizers);
    for (size_t i = 0; i < t->postprocessor_count; i++) {
        for (size_t k = 0; k < t->postprocessors[i].count; k++)
            free(t->postprocessors[i].items[k].ids);
        free(t->postprocessors[i].items);
    }
    free(t->postprocessors);
    for (size_t i = 0; i < t->decoder_count; i++) {
        free(t->decoders[i].pattern);
        free(t->decoders[i].content);
    }
    free(t->decoders);
}
