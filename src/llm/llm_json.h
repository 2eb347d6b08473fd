/* A JSON prefix recognizer for constrained generation (response_format json_object): a pushdown automaton
 * fed the bytes of generated tokens, which rejects the first byte after which no completion to one valid
 * JSON object (RFC 8259, top level an object, UTF-8 checked in strings) exists, and says when the text is
 * one complete object. The state is a small value type, so a candidate token is checked on a copy.
 *
 * Limits beyond RFC 8259, each keeping the output valid JSON: the text starts with '{' and ends with its
 * closing brace (no whitespace around it), nesting depth <= TB_JSON_MAX_DEPTH, runs of whitespace <=
 * TB_JSON_MAX_WHITESPACE bytes (a model cannot stall on newlines and tabs: pretty-printing up to depth 15
 * with two-space indents still fits), no \u escape of a UTF-16 surrogate (characters beyond U+FFFF appear
 * as UTF-8). */
#ifndef TORCHBURN_LLM_JSON_H
#define TORCHBURN_LLM_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

enum { TB_JSON_MAX_DEPTH = 128, TB_JSON_MAX_WHITESPACE = 32 };

typedef struct tb_json_recognizer {
    uint8_t mode;     /* what the next byte may be (llm_json.c) */
    uint8_t sub;      /* progress inside a literal, number, escape or UTF-8 character */
    uint8_t pending;  /* string: continuation bytes still due; literal: which literal */
    uint8_t in_key;   /* the open string is an object key */
    uint8_t low, high; /* string: range of the next UTF-8 continuation byte; low also marks \uD... */
    uint16_t whitespace; /* length of the current whitespace run */
    uint16_t depth;   /* open containers */
    uint64_t objects[TB_JSON_MAX_DEPTH / 64]; /* bit d: container at depth d is an object (else array) */
} tb_json_recognizer;

/* The state before any byte. */
void tb_json_recognizer_init(tb_json_recognizer *r);
/* Feeds n bytes; false when a byte cannot continue any valid JSON object (then *r is unspecified: feed a
 * copy to test a candidate). */
bool tb_json_recognizer_feed(tb_json_recognizer *r, const uint8_t *bytes, size_t n);
/* Whether the bytes fed so far are exactly one complete JSON object. */
bool tb_json_recognizer_is_complete(const tb_json_recognizer *r);

/* ---- the constraint of one generation request (llm_constraint.c) ---- */

/* The bytes each token id adds to the text: bytes[offsets[id], offsets[id + 1]), empty for special tokens
 * and ids without a token (never produced under a constraint). */
typedef struct tb_llm_token_table {
    int64_t count;
    uint8_t *bytes;
    int64_t *offsets; /* [count + 1] */
} tb_llm_token_table;

struct tb_tokenizer;
/* The table of ids [0, vocab) from the tokenizer (tb_tokenizer_token_bytes). Errors: out of memory. */
tb_status tb_llm_token_table_init(tb_llm_token_table *table, const struct tb_tokenizer *tokenizer, int64_t vocab);
void tb_llm_token_table_free(tb_llm_token_table *table);

/* A request's JSON-object constraint: its stop ids are allowed only once the object is complete. */
typedef struct tb_llm_json_constraint {
    const tb_llm_token_table *table;
    const int32_t *stop_ids;
    int64_t stop_count;
    tb_json_recognizer state;
} tb_llm_json_constraint;

void tb_llm_json_constraint_init(tb_llm_json_constraint *c, const tb_llm_token_table *table, const int32_t *stop_ids,
                                 int64_t stop_count);
/* A tb_llm_token_allowed predicate (context: the constraint): whether `token` keeps the text a prefix of a
 * JSON object (a stop id: whether the object is complete). */
bool tb_llm_json_constraint_allows(void *context, int32_t token);
/* Advances the state past `token` (which the predicate allowed; a stop id changes nothing). */
void tb_llm_json_constraint_take(tb_llm_json_constraint *c, int32_t token);

#endif
