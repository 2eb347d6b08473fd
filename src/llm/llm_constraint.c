/* Constrained generation glue (llm_json.h): the bytes of every token id, computed once per engine from the
 * tokenizer, and a request's JSON-object constraint as a predicate for tb_llm_sampler_sample_allowed. */
#include <stdlib.h>
#include <string.h>

#include "llm/llm_json.h"
#include "torchburn/tokenizer.h"

void tb_llm_token_table_free(tb_llm_token_table *table) {
    free(table->bytes);
    free(table->offsets);
    memset(table, 0, sizeof *table);
}

tb_status tb_llm_token_table_init(tb_llm_token_table *table, const tb_tokenizer *tokenizer, int64_t vocab) {
    memset(table, 0, sizeof *table);
    table->offsets = calloc((size_t)vocab + 1, sizeof *table->offsets);
    if (!table->offsets)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm constraint: out of memory for the token table");
    table->count = vocab;
    size_t capacity = 0, length = 0;
    for (int64_t id = 0; id < vocab; id++) {
        table->offsets[id] = (int64_t)length;
        if (tb_tokenizer_is_special(tokenizer, (int32_t)id))
            continue;
        tb_tokenizer_string piece;
        tb_status status = tb_tokenizer_token_bytes(tokenizer, (int32_t)id, &piece);
        if (status != TB_OK) {
            tb_llm_token_table_free(table);
            return status;
        }
        if (length + piece.length > capacity) {
            size_t grown = capacity ? capacity * 2 : 4096;
            while (grown < length + piece.length)
                grown *= 2;
            uint8_t *bytes = realloc(table->bytes, grown);
            if (!bytes) {
                tb_tokenizer_string_free(&piece);
                tb_llm_token_table_free(table);
                return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm constraint: out of memory for the token table");
            }
            table->bytes = bytes;
            capacity = grown;
        }
        if (piece.length)
            memcpy(table->bytes + length, piece.data, piece.length);
        length += piece.length;
        tb_tokenizer_string_free(&piece);
    }
    table->offsets[vocab] = (int64_t)length;
    return TB_OK;
}

void tb_llm_json_constraint_init(tb_llm_json_constraint *c, const tb_llm_token_table *table, const int32_t *stop_ids,
                                 int64_t stop_count) {
    c->table = table;
    c->stop_ids = stop_ids;
    c->stop_count = stop_count;
    tb_json_recognizer_init(&c->state);
}

static bool is_stop(const tb_llm_json_constraint *c, int32_t token) {
    for (int64_t i = 0; i < c->stop_count; i++)
        if (c->stop_ids[i] == token)
            return true;
    return false;
}

bool tb_llm_json_constraint_allows(void *context, int32_t token) {
    const tb_llm_json_constraint *c = context;
    if (is_stop(c, token))
        return tb_json_recognizer_is_complete(&c->state);
    if (token < 0 || token >= c->table->count)
        return false;
    const int64_t begin = c->table->offsets[token], end = c->table->offsets[token + 1];
    if (begin == end) /* special tokens and ids without a token add nothing: never produced */
        return false;
    tb_json_recognizer probe = c->state;
    return tb_json_recognizer_feed(&probe, c->table->bytes + begin, (size_t)(end - begin));
}

void tb_llm_json_constraint_take(tb_llm_json_constraint *c, int32_t token) {
    if (is_stop(c, token) || token < 0 || token >= c->table->count)
        return;
    const int64_t begin = c->table->offsets[token], end = c->table->offsets[token + 1];
    (void)tb_json_recognizer_feed(&c->state, c->table->bytes + begin, (size_t)(end - begin));
}
