/* Loading a tokenizer: tokenizer.json (through the project's JSON reader), tokenizer_config.json
 * (bos/eos, extra added tokens, chat template) and chat_template.jinja; freeing it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "files/file_io.h"
#include "tokenizer/internal.h"

/* GPT-2's byte <-> printable code point table: printable Latin-1 bytes map to themselves, the rest
 * to U+0100 upwards in byte order. */
static void init_byte_map(tb_tokenizer *t) {
    uint32_t next = 256;
    for (int i = 0; i < 0x144; i++)
        t->char_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : next++;
        uint8_t utf8[4];
        size_t n = tb_utf8_encode(cp, utf8);
        t->byte_to_char[b][0] = utf8[0];
        t->byte_to_char[b][1] = n > 1 ? utf8[1] : 0;
        t->byte_to_char_length[b] = (uint8_t)n;
        t->char_to_byte[cp] = (int16_t)b;
    }
}

enum { MAX_FILE_BYTES = 1 << 30 }; /* tokenizer.json of the largest vocabularies is ~20 MB */

/* A whole file (a FIFO or other non-regular file is refused without blocking, see file_io.h). */
static tb_status read_file(const char *path, char **data, size_t *length) {
    tb_status st = tb_files_read_all(path, MAX_FILE_BYTES, data, length);
    return st == TB_OK ? TB_OK : tb_error_prefix(st, "tokenizer");
}

static const tb_json_limits JSON_LIMITS = {.max_bytes = (size_t)1 << 30, .max_depth = 128};

/* A token given in tokenizer_config.json as "text" or {"content": "text", ...}; NULL when absent. */
static const char *config_token(const tb_json_value *config, const char *key, size_t *length) {
    const tb_json_value *v = tb_json_object_get(config, key);
    if (v && tb_json_type_of(v) == TB_JSON_OBJECT)
        v = tb_json_object_get(v, "content");
    const char *s;
    if (!v || tb_json_get_string(v, &s, length) != TB_OK)
        return NULL;
    return s;
}

/* Tokens of "added_tokens_decoder" ({"id": {"content": ..., flags}}) whose id is not already an
 * added token are added, as transformers does when it loads a fast tokenizer. */
static tb_status config_added_tokens(tb_tokenizer *t, const tb_json_value *config) {
    const tb_json_value *decoder = tb_json_object_get(config, "added_tokens_decoder");
    if (!decoder || tb_json_type_of(decoder) != TB_JSON_OBJECT)
        return TB_OK;
    /* ids of the tokens added so far, as a bitmap (O(1) per key instead of a scan of every added token) */
    uint8_t *known_ids = calloc(TB_TOKENIZER_MAX_ID / 8, 1);
    if (!known_ids)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer_config.json: added_tokens_decoder");
    for (size_t k = 0; k < t->added_count; k++)
        known_ids[t->added[k].id >> 3] |= (uint8_t)(1u << (t->added[k].id & 7));
    tb_status st = TB_OK;
    for (size_t i = 0; i < tb_json_length(decoder) && st == TB_OK; i++) {
        const char *key;
        size_t key_length;
        const tb_json_value *v;
        st = tb_json_object_entry(decoder, i, &key, &key_length, &v);
        if (st != TB_OK)
            break;
        char *end;
        long id = strtol(key, &end, 10);
        if (end == key || *end || id < 0 || id >= TB_TOKENIZER_MAX_ID) {
            st = tb_error_set(TB_ERR_FORMAT, "tokenizer_config.json: added_tokens_decoder key '%s' is not an id", key);
            break;
        }
        if (known_ids[id >> 3] & (1u << (id & 7)))
            continue;
        const size_t before = t->added_count;
        st = tb_tokenizer_add_token_json(t, v, "tokenizer_config.json: added_tokens_decoder");
        if (st == TB_OK && t->added_count > before) {
            const int32_t added_id = t->added[before].id;
            known_ids[added_id >> 3] |= (uint8_t)(1u << (added_id & 7));
        }
    }
    free(known_ids);
    return st;
}

static tb_status load_config(tb_tokenizer *t, const tb_json_value *config, const char **bos, size_t *bos_length,
                             const char **eos, size_t *eos_length) {
    if (tb_json_type_of(config) != TB_JSON_OBJECT)
        return tb_error_set(TB_ERR_FORMAT, "tokenizer_config.json: the top level must be an object");
    TB_TRY(config_added_tokens(t, config));
    *bos = config_token(config, "bos_token", bos_length);
    *eos = config_token(config, "eos_token", eos_length);
    const tb_json_value *chat = tb_json_object_get(config, "chat_template");
    if (chat && !t->chat_template) {
        const char *s = NULL;
        size_t n = 0;
        if (tb_json_type_of(chat) == TB_JSON_STRING) {
            TB_TRY(tb_json_get_string(chat, &s, &n));
        } else if (tb_json_type_of(chat) == TB_JSON_ARRAY) {
            /* [{"name": ..., "template": ...}]: the one named "default", else the first */
            for (size_t i = 0; i < tb_json_length(chat); i++) {
                const tb_json_value *entry = tb_json_array_at(chat, i);
                const tb_json_value *name = tb_json_object_get(entry, "name");
                const tb_json_value *tmpl = tb_json_object_get(entry, "template");
                const char *name_s, *tmpl_s;
                size_t name_n, tmpl_n;
                if (!tmpl || tb_json_get_string(tmpl, &tmpl_s, &tmpl_n) != TB_OK)
                    continue;
                bool is_default = name && tb_json_get_string(name, &name_s, &name_n) == TB_OK &&
                                  strcmp(name_s, "default") == 0;
                if (!s || is_default) {
                    s = tmpl_s;
                    n = tmpl_n;
                }
            }
        }
        if (s)
            TB_TRY(tb_tok_strdup(s, n, &t->chat_template));
    }
    return TB_OK;
}

static tb_status load(tb_tokenizer *t, const char *json, size_t json_length, const char *config_json,
                      size_t config_length) {
    init_byte_map(t);
    t->bos_id = t->eos_id = -1;
    tb_json_document *doc = NULL, *config_doc = NULL;
    tb_status st = tb_json_parse(json, json_length, &JSON_LIMITS, "tokenizer.json", &doc);
    if (st != TB_OK)
        return st;
    const tb_json_value *root = tb_json_root(doc);
    const char *bos = NULL, *eos = NULL;
    size_t bos_length = 0, eos_length = 0;
    if (tb_json_type_of(root) != TB_JSON_OBJECT) {
        st = tb_error_set(TB_ERR_FORMAT, "tokenizer.json: the top level must be an object");
        goto done;
    }
    const tb_json_value *version = tb_json_object_get(root, "version");
    const char *version_s;
    size_t version_n;
    if (version && (tb_json_get_string(version, &version_s, &version_n) != TB_OK || strcmp(version_s, "1.0") != 0)) {
        st = tb_error_set(TB_ERR_FORMAT, "tokenizer.json: unknown tokenizer version (expected \"1.0\")");
        goto done;
    }
    if ((st = tb_bpe_load(&t->model, tb_json_object_get(root, "model"))) != TB_OK ||
        (st = tb_tokenizer_parse_normalizer(t, tb_json_object_get(root, "normalizer"))) != TB_OK ||
        (st = tb_tokenizer_parse_pretokenizer(t, tb_json_object_get(root, "pre_tokenizer"))) != TB_OK ||
        (st = tb_tokenizer_parse_postprocessor(t, tb_json_object_get(root, "post_processor"))) != TB_OK ||
        (st = tb_tokenizer_parse_decoder(t, tb_json_object_get(root, "decoder"))) != TB_OK ||
        (st = tb_tokenizer_add_tokens(t, tb_json_object_get(root, "added_tokens"))) != TB_OK)
        goto done;
    if (config_json) {
        st = tb_json_parse(config_json, config_length, &JSON_LIMITS, "tokenizer_config.json", &config_doc);
        if (st == TB_OK)
            st = load_config(t, tb_json_root(config_doc), &bos, &bos_length, &eos, &eos_length);
        if (st != TB_OK)
            goto done;
    }
    if ((st = tb_tokenizer_finish_added(t)) != TB_OK)
        goto done;
    if (bos)
        t->bos_id = tb_tokenizer_token_to_id(t, bos, bos_length);
    if (eos)
        t->eos_id = tb_tokenizer_token_to_id(t, eos, eos_length);
done:
    tb_json_free(config_doc);
    tb_json_free(doc);
    return st;
}

tb_status tb_tokenizer_load_from_memory(const char *json, size_t json_length, const char *config_json,
                                        size_t config_length, tb_tokenizer **out) {
    *out = NULL;
    if (!json)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer: no tokenizer.json text");
    tb_tokenizer *t = calloc(1, sizeof *t);
    if (t)
        t->added_max_id = -1;
    if (!t)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: allocating the tokenizer");
    tb_status st = load(t, json, json_length, config_json, config_length);
    if (st != TB_OK) {
        tb_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TB_OK;
}

static tb_status load_paths(const char *json_path, const char *config_path, const char *template_path,
                            tb_tokenizer **out) {
    *out = NULL;
    char *json = NULL, *config = NULL, *chat = NULL;
    size_t json_length = 0, config_length = 0, chat_length = 0;
    tb_status st = read_file(json_path, &json, &json_length);
    if (st == TB_OK && config_path) {
        if (tb_path_exists(config_path)) /* optional, but present and unreadable is an error */
            st = read_file(config_path, &config, &config_length);
    }
    if (st == TB_OK && template_path) {
        if (tb_path_exists(template_path))
            st = read_file(template_path, &chat, &chat_length);
    }
    if (st == TB_OK)
        st = tb_tokenizer_load_from_memory(json, json_length, config, config_length, out);
    if (st == TB_OK && chat) {
        /* chat_template.jinja takes precedence over the config's template, as in transformers */
        free((*out)->chat_template);
        (*out)->chat_template = chat;
        chat = NULL;
    }
    free(json);
    free(config);
    free(chat);
    return st;
}

tb_status tb_tokenizer_load(const char *tokenizer_json_path, const char *tokenizer_config_path, tb_tokenizer **out) {
    if (!tokenizer_json_path || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer_load: NULL argument");
    return load_paths(tokenizer_json_path, tokenizer_config_path, NULL, out);
}

tb_status tb_tokenizer_load_directory(const char *directory, tb_tokenizer **out) {
    if (!directory || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tokenizer_load_directory: NULL argument");
    size_t n = strlen(directory);
    char *paths = malloc(3 * (n + 32));
    if (!paths)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: paths");
    char *json = paths, *config = paths + n + 32, *chat = paths + 2 * (n + 32);
    snprintf(json, n + 32, "%s/tokenizer.json", directory);
    snprintf(config, n + 32, "%s/tokenizer_config.json", directory);
    snprintf(chat, n + 32, "%s/chat_template.jinja", directory);
    tb_status st = load_paths(json, config, chat, out);
    free(paths);
    return st;
}

void tb_tokenizer_free(tb_tokenizer *t) {
    if (!t)
        return;
    tb_bpe_free(&t->model);
    tb_tokenizer_free_components(t);
    for (size_t i = 0; i < t->added_count; i++) {
        free(t->added[i].content);
        free(t->added[i].match);
    }
    free(t->added);
    tb_str_map_free(&t->added_map);
    tb_str_map_free(&t->added_identity);
    free(t->added_by_id);
    free(t->special_by_id);
    free(t->trie_raw.nodes);
    free(t->trie_normalized.nodes);
    free(t->chat_template);
    free(t);
}
