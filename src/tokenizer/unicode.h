/* Unicode support for the tokenizer: character-class lookups from the generated tables, UTF-8
 * decoding/encoding (strict and lossy), and the four normalization forms. Internal header. */
#ifndef TB_TOKENIZER_UNICODE_H
#define TB_TOKENIZER_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

/* Class flags (tools/gen_unicode_tables.py defines them identically). */
enum {
    TB_UC_LETTER = 1,    /* \p{L} */
    TB_UC_NUMBER = 2,    /* \p{N} (also Rust char::is_numeric) */
    TB_UC_SPACE = 4,     /* \s of Oniguruma / Rust regex == Unicode White_Space */
    TB_UC_WORD = 8,      /* Rust regex \w (approximated, see the generator) */
    TB_UC_DIGIT = 16,    /* Nd */
    TB_UC_NFC_INERT = 32 /* NFC never changes this code point nor what surrounds it */
};

typedef struct tb_uc_decomposition {
    uint16_t canonical_offset, canonical_length; /* full canonical decomposition; length 0: none */
    uint16_t compat_offset, compat_length;       /* full compatibility decomposition */
} tb_uc_decomposition;

extern const char tb_unicode_category_version[];
extern const char tb_unicode_normalization_version[];
extern const uint16_t tb_uc_flags_stage1[8704];
extern const uint8_t tb_uc_flags_stage2[];
extern const uint16_t tb_uc_ccc_stage1[8704];
extern const uint8_t tb_uc_ccc_stage2[];
extern const uint16_t tb_uc_decomp_index_stage1[8704];
extern const uint16_t tb_uc_decomp_index_stage2[];
extern const tb_uc_decomposition tb_uc_decompositions[];
extern const uint32_t tb_uc_decomp_pool[];
extern const size_t tb_uc_composition_count;
extern const uint64_t tb_uc_composition_keys[];
extern const uint32_t tb_uc_composition_values[];

static inline unsigned tb_uc_flags(uint32_t cp) {
    if (cp >= 0x110000)
        return 0;
    return tb_uc_flags_stage2[(size_t)tb_uc_flags_stage1[cp >> 7] * 128 + (cp & 127)];
}

static inline unsigned tb_uc_ccc(uint32_t cp) {
    if (cp >= 0x110000)
        return 0;
    return tb_uc_ccc_stage2[(size_t)tb_uc_ccc_stage1[cp >> 7] * 128 + (cp & 127)];
}

/* Decodes one code point of VALID UTF-8 at s[*i] and advances *i. */
static inline uint32_t tb_utf8_next(const uint8_t *s, size_t *i) {
    uint32_t c = s[*i];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c < 0xE0) {
        c = ((c & 0x1F) << 6) | (s[*i + 1] & 0x3F);
        *i += 2;
        return c;
    }
    if (c < 0xF0) {
        c = ((c & 0x0F) << 12) | ((uint32_t)(s[*i + 1] & 0x3F) << 6) | (s[*i + 2] & 0x3F);
        *i += 3;
        return c;
    }
    c = ((c & 0x07) << 18) | ((uint32_t)(s[*i + 1] & 0x3F) << 12) | ((uint32_t)(s[*i + 2] & 0x3F) << 6) |
        (s[*i + 3] & 0x3F);
    *i += 4;
    return c;
}

/* Byte length of the valid UTF-8 character starting with byte b. */
static inline size_t tb_utf8_char_length(uint8_t b) {
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

/* Start of the valid UTF-8 character that ends just before s[i] (i > 0). */
static inline size_t tb_utf8_previous(const uint8_t *s, size_t i) {
    do {
        i--;
    } while (i > 0 && (s[i] & 0xC0) == 0x80);
    return i;
}

/* Writes cp (must be a Unicode scalar value) as UTF-8 into out; returns the byte count (1-4). */
size_t tb_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Length of the longest valid UTF-8 prefix of s (== n when all of s is valid). */
size_t tb_utf8_valid_prefix(const uint8_t *s, size_t n);

/* A growable byte buffer used throughout the tokenizer. data is NUL-terminated when non-NULL. */
typedef struct tb_tok_buffer {
    char *data;
    size_t length;
    size_t capacity;
} tb_tok_buffer;

tb_status tb_tok_buffer_reserve(tb_tok_buffer *buffer, size_t extra);
tb_status tb_tok_buffer_append(tb_tok_buffer *buffer, const void *bytes, size_t n);
void tb_tok_buffer_free(tb_tok_buffer *buffer);

/* Appends s to out with every maximal invalid subsequence replaced by U+FFFD, exactly like Rust's
 * String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace"). */
tb_status tb_utf8_append_lossy(tb_tok_buffer *out, const uint8_t *s, size_t n);

typedef enum tb_normal_form { TB_NF_NFC, TB_NF_NFD, TB_NF_NFKC, TB_NF_NFKD } tb_normal_form;

/* Appends the normalization of VALID UTF-8 `s` to out. */
tb_status tb_unicode_normalize(tb_normal_form form, const uint8_t *s, size_t n, tb_tok_buffer *out);

/* True when NFC(s) == s can be decided without work (every code point is NFC-inert). */
bool tb_unicode_is_nfc_inert(const uint8_t *s, size_t n);

#endif
