/* Internal structures of the tokenizer layer: hash maps, the BPE model, the pipeline components
 * (normalizers, pre-tokenizers, post-processors, decoders), added tokens and the tokenizer itself.
 * Semantics follow HF `tokenizers`; each component's comment names the behaviour it mirrors. */
#ifndef TB_TOKENIZER_INTERNAL_H
#define TB_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer/unicode.h"
#include "torchburn/json.h"
#include "torchburn/tokenizer.h"

/* Ids at or above this are refused at load time (real vocabularies stay under 300k; the cap keeps a
 * hostile file from making us allocate id-indexed tables of gigabytes). */
#define TB_TOKENIZER_MAX_ID (1 << 24)

static inline uint64_t tb_tok_hash(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 32;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return h;
}

/* ---- string -> int32 map (open addressing; keys copied into a pool) ---- */
typedef struct tb_str_map_entry {
    uint64_t hash;
    size_t key_offset;
    uint32_t key_length;
    int32_t value;
} tb_str_map_entry;

typedef struct tb_str_map {
    uint32_t *slots; /* 0 = empty, else entry index + 1 */
    size_t slot_mask;
    tb_str_map_entry *entries;
    size_t count, entry_capacity;
    tb_tok_buffer keys;
} tb_str_map;

/* Inserts key -> value; when the key exists its value is replaced. *entry_out (may be NULL) gets the
 * entry index. */
tb_status tb_str_map_put(tb_str_map *map, const char *key, size_t length, int32_t value, size_t *entry_out);
/* Entry index of key, or -1. */
long tb_str_map_find(const tb_str_map *map, const char *key, size_t length);
static inline bool tb_str_map_get(const tb_str_map *map, const char *key, size_t length, int32_t *value) {
    long e = tb_str_map_find(map, key, length);
    if (e < 0)
        return false;
    *value = map->entries[e].value;
    return true;
}
static inline const char *tb_str_map_key(const tb_str_map *map, size_t entry, size_t *length) {
    *length = map->entries[entry].key_length;
    return map->keys.data + map->entries[entry].key_offset;
}
void tb_str_map_free(tb_str_map *map);

/* ---- BPE model ---- */
typedef struct tb_pair_map {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *ranks;
    int32_t *new_ids;
    size_t mask, count;
} tb_pair_map;

typedef struct tb_word_cache tb_word_cache;

typedef struct tb_bpe {
    tb_str_map vocab;        /* token string -> id */
    int32_t *id_entry;       /* id -> vocab entry index, -1 when unused; id_limit entries */
    size_t id_limit;         /* one past the largest vocab id */
    tb_pair_map merges;      /* (left id, right id) -> (rank, merged id) */
    int32_t unk_id;          /* -1: no unk_token configured */
    bool unk_configured;     /* unk_token set (even if not in vocab: an error when needed, like HF) */
    char *unk_token;
    bool fuse_unk, byte_fallback, ignore_merges;
    char *prefix, *suffix; /* continuing_subword_prefix / end_of_word_suffix, NULL when unset */
    size_t prefix_length, suffix_length;
    int32_t byte_ids[256];  /* id of "<0xXX>", -1 when absent */
    int32_t char_ids[2048]; /* id of the single-character token for code points < 2048, -1 absent */
    /* No vocabulary token has a U+2581 right after another character, so no merge can cross the
     * point before a "▁" that follows a non-"▁": long words are tokenized piecewise there (same ids,
     * and the pieces hit the cache). Matters for the SentencePiece-style files without pre-tokenizer. */
    bool split_before_metaspace;
    tb_word_cache *cache;
} tb_bpe;

/* Scratch for tokenizing one word (reused across words of one encode call). */
typedef struct tb_bpe_symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t length; /* 0 = merged away */
} tb_bpe_symbol;

typedef struct tb_bpe_merge {
    uint32_t rank;
    uint32_t position;
    int32_t new_id;
} tb_bpe_merge;

typedef struct tb_bpe_scratch {
    tb_bpe_symbol *symbols;
    size_t symbol_capacity;
    tb_bpe_merge *heap;
    size_t heap_capacity;
    tb_tok_buffer text;
} tb_bpe_scratch;

tb_status tb_bpe_load(tb_bpe *bpe, const tb_json_value *model);
void tb_bpe_free(tb_bpe *bpe);
/* Tokenizes one pre-token (valid UTF-8, non-empty) and appends its ids to out. */
tb_status tb_bpe_tokenize(const tb_bpe *bpe, const char *word, size_t length, tb_bpe_scratch *scratch,
                          tb_token_ids *out);
void tb_bpe_scratch_free(tb_bpe_scratch *scratch);
tb_status tb_token_ids_push(tb_token_ids *out, int32_t id);

/* ---- normalizers ---- */
typedef enum tb_normalizer_kind {
    TB_NORMALIZER_UNICODE, /* NFC / NFD / NFKC / NFKD */
    TB_NORMALIZER_PREPEND, /* prepend a string to non-empty text */
    TB_NORMALIZER_REPLACE, /* replace every occurrence of a literal string */
    TB_NORMALIZER_STRIP,   /* strip Unicode White_Space left and/or right */
} tb_normalizer_kind;

typedef struct tb_normalizer {
    tb_normalizer_kind kind;
    tb_normal_form form;
    char *pattern, *content; /* Prepend: content; Replace: pattern -> content */
    size_t pattern_length, content_length;
    bool left, right; /* Strip */
} tb_normalizer;

/* ---- pre-tokenizers ---- */
typedef enum tb_split_pattern {
    TB_PATTERN_GPT2,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TB_PATTERN_LLAMA3, /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|... */
    TB_PATTERN_QWEN2,  /* the Llama 3 pattern with \p{N} instead of \p{N}{1,3} */
    TB_PATTERN_LITERAL,
    TB_PATTERN_WHITESPACE_CHAR, /* char::is_whitespace, one char per match */
    TB_PATTERN_NUMERIC_CHAR,    /* char::is_numeric, one char per match */
    TB_PATTERN_CHAR,            /* one given code point per match */
} tb_split_pattern;

typedef enum tb_split_behavior {
    TB_SPLIT_REMOVED,
    TB_SPLIT_ISOLATED,
    TB_SPLIT_MERGED_WITH_PREVIOUS,
    TB_SPLIT_MERGED_WITH_NEXT,
    TB_SPLIT_CONTIGUOUS,
} tb_split_behavior;

typedef enum tb_pretokenizer_kind {
    TB_PRETOKENIZER_SPLIT,      /* Split, Digits, WhitespaceSplit, CharDelimiterSplit */
    TB_PRETOKENIZER_BYTE_LEVEL, /* optional prefix space, optional GPT-2 split, then byte->char map */
    TB_PRETOKENIZER_METASPACE,  /* ' ' -> replacement, prepend scheme, optional split */
} tb_pretokenizer_kind;

typedef enum tb_prepend_scheme { TB_PREPEND_ALWAYS, TB_PREPEND_FIRST, TB_PREPEND_NEVER } tb_prepend_scheme;

typedef struct tb_pretokenizer {
    tb_pretokenizer_kind kind;
    tb_split_pattern pattern;
    tb_split_behavior behavior;
    bool invert;
    char *literal; /* TB_PATTERN_LITERAL */
    size_t literal_length;
    uint32_t split_char; /* TB_PATTERN_CHAR */
    bool add_prefix_space, use_regex;     /* ByteLevel */
    uint32_t replacement;                 /* Metaspace */
    tb_prepend_scheme prepend_scheme;     /* Metaspace */
    bool split;                           /* Metaspace */
} tb_pretokenizer;

/* A pre-token: bytes [offset, offset + length) of an arena buffer. at_origin: it starts at offset 0
 * of the original input (HF's `offsets_original().0 == 0`, used by Metaspace prepend_scheme=first). */
typedef struct tb_piece {
    size_t offset, length;
    bool at_origin;
} tb_piece;

typedef struct tb_pieces {
    tb_piece *data;
    size_t count, capacity;
} tb_pieces;

tb_status tb_pieces_push(tb_pieces *pieces, size_t offset, size_t length, bool at_origin);

/* Runs every pre-tokenizer over `pieces` (texts in `arena`, which may grow); `spare` is scratch. On
 * return `pieces` holds the final pre-tokens. */
tb_status tb_pretokenize(const tb_tokenizer *t, tb_tok_buffer *arena, tb_pieces *pieces, tb_pieces *spare);

/* Finds the first match of a regex-like pattern in text[from..n): returns false when none. */
bool tb_pattern_find(const tb_pretokenizer *p, const uint8_t *text, size_t n, size_t from, size_t *start,
                     size_t *end);
/* Recognises a Split regex by exact comparison; false when unknown. */
bool tb_pattern_from_regex(const char *regex, size_t length, tb_split_pattern *out);

/* ---- post-processors (the part that touches ids) ---- */
typedef struct tb_template_item {
    bool is_sequence; /* the encoded text ($A); else special ids */
    int32_t *ids;
    size_t count;
} tb_template_item;

typedef struct tb_postprocessor {
    tb_template_item *items;
    size_t count;
} tb_postprocessor;

/* ---- decoders ---- */
typedef enum tb_decoder_kind {
    TB_DECODER_BYTE_LEVEL,
    TB_DECODER_METASPACE,
    TB_DECODER_REPLACE,
    TB_DECODER_BYTE_FALLBACK,
    TB_DECODER_FUSE,
    TB_DECODER_STRIP,
} tb_decoder_kind;

typedef struct tb_decoder {
    tb_decoder_kind kind;
    char *pattern, *content; /* Replace */
    size_t pattern_length, content_length;
    uint32_t replacement;             /* Metaspace */
    tb_prepend_scheme prepend_scheme; /* Metaspace */
    uint32_t strip_char;              /* Strip */
    size_t strip_start, strip_stop;
} tb_decoder;

/* ---- added tokens ---- */
typedef struct tb_added_token {
    char *content;
    size_t length;
    char *match; /* what is searched for: content, or its normalized form when normalized */
    size_t match_length;
    int32_t id;
    uint32_t order; /* insertion order */
    bool single_word, lstrip, rstrip, normalized, special;
} tb_added_token;

typedef struct tb_trie_node {
    int32_t first_child, next_sibling;
    int32_t token; /* index into added tokens ending here, -1 */
    uint8_t byte;
} tb_trie_node;

typedef struct tb_trie {
    tb_trie_node *nodes;
    size_t count, capacity;
    uint8_t first_bytes[32]; /* bitmap of bytes that start some pattern */
} tb_trie;

struct tb_tokenizer {
    tb_bpe model;
    tb_normalizer *normalizers;
    size_t normalizer_count;
    tb_pretokenizer *pretokenizers;
    size_t pretokenizer_count;
    tb_postprocessor *postprocessors;
    size_t postprocessor_count;
    tb_decoder *decoders;
    size_t decoder_count;
    bool has_decoder;

    tb_added_token *added; /* in the order HF keeps them: specials first, then the others */
    size_t added_count, added_capacity;
    tb_str_map added_map;    /* content -> id */
    tb_str_map added_identity; /* content + flag byte -> 1: identical repeats are ignored in O(1) */
    int64_t added_max_id;      /* largest id in added_map, -1 when empty */
    int32_t *added_by_id;    /* id -> index into added (the last token given that id), -1 */
    size_t id_limit;         /* one past the largest id (model or added) */
    uint8_t *special_by_id;  /* id -> 1 when its string is a special token's content */
    tb_trie trie_raw;        /* added tokens with normalized == false */
    tb_trie trie_normalized; /* added tokens with normalized == true (contents normalized) */
    size_t vocab_size;       /* distinct token strings */

    uint8_t byte_to_char[256][2]; /* GPT-2 byte -> UTF-8 of its printable code point */
    uint8_t byte_to_char_length[256];
    int16_t char_to_byte[0x144]; /* inverse map for code points below U+0144, -1 elsewhere */

    int32_t bos_id, eos_id;
    char *chat_template;
};

/* ---- cross-file helpers ---- */
tb_status tb_tokenizer_parse_normalizer(tb_tokenizer *t, const tb_json_value *v);
tb_status tb_tokenizer_parse_pretokenizer(tb_tokenizer *t, const tb_json_value *v);
tb_status tb_tokenizer_parse_postprocessor(tb_tokenizer *t, const tb_json_value *v);
tb_status tb_tokenizer_parse_decoder(tb_tokenizer *t, const tb_json_value *v);
tb_status tb_tokenizer_add_tokens(tb_tokenizer *t, const tb_json_value *added_tokens);
/* Adds one {"content": ..., "special": ..., ...} object (HF AddedToken fields). */
tb_status tb_tokenizer_add_token_json(tb_tokenizer *t, const tb_json_value *token, const char *where);
tb_status tb_tokenizer_finish_added(tb_tokenizer *t);
void tb_tokenizer_free_components(tb_tokenizer *t);

/* Applies every normalizer to VALID UTF-8 text, appending the result to out. */
tb_status tb_tokenizer_normalize(const tb_tokenizer *t, const char *text, size_t n, tb_tok_buffer *out);

/* A split of text: [start, end) and the added token id covering it, or -1 for plain text. */
typedef struct tb_segment {
    size_t start, end;
    int32_t id;
} tb_segment;
typedef struct tb_segments {
    tb_segment *data;
    size_t count, capacity;
} tb_segments;
/* HF AddedVocabulary::find_matches over `text` with one trie; appends the covering splits. */
tb_status tb_added_find(const tb_tokenizer *t, const tb_trie *trie, const char *text, size_t n, tb_segments *out);

/* JSON helpers that produce "tokenizer.json: <where>: <what>" errors. */
tb_status tb_tok_json_string(const tb_json_value *object, const char *key, const char *where, const char **out,
                             size_t *length);
tb_status tb_tok_json_bool(const tb_json_value *object, const char *key, bool fallback, const char *where, bool *out);
tb_status tb_tok_strdup(const char *s, size_t n, char **out);
/* The single code point of a one-character string, or an error. */
tb_status tb_tok_single_char(const char *s, size_t n, const char *where, uint32_t *out);

#endif
