/* Pre-tokenizers: hand-written matchers for the exact Split regexes of GPT-2, Llama 3 and Qwen2
 * (leftmost-first alternation with backtracking, as Oniguruma runs them), literal and per-character
 * patterns, the five split behaviours, ByteLevel and Metaspace. */
#include <stdlib.h>

#include "tokenizer/internal.h"

/* The regexes, byte for byte as they appear in tokenizer.json (after JSON unescaping). */
static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool tb_pattern_from_regex(const char *regex, size_t length, tb_split_pattern *out) {
    static const struct {
        const char *text;
        size_t length;
        tb_split_pattern pattern;
    } known[] = {
        {GPT2_REGEX, sizeof GPT2_REGEX - 1, TB_PATTERN_GPT2},
        {LLAMA3_REGEX, sizeof LLAMA3_REGEX - 1, TB_PATTERN_LLAMA3},
        {QWEN2_REGEX, sizeof QWEN2_REGEX - 1, TB_PATTERN_QWEN2},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (known[i].length == length && memcmp(known[i].text, regex, length) == 0) {
            *out = known[i].pattern;
            return true;
        }
    }
    return false;
}

/* Class of the code point at s[i]: flags (letter/number/space) and the index after it. */
enum { CLS_L = TB_UC_LETTER, CLS_N = TB_UC_NUMBER, CLS_S = TB_UC_SPACE };

static inline unsigned class_at(const uint8_t *s, size_t i, size_t *next, uint32_t *cp_out) {
    static const uint8_t ascii[128] = {
        ['\t'] = CLS_S, ['\n'] = CLS_S, ['\v'] = CLS_S, ['\f'] = CLS_S, ['\r'] = CLS_S, [' '] = CLS_S,
        ['0'] = CLS_N, ['1'] = CLS_N, ['2'] = CLS_N, ['3'] = CLS_N, ['4'] = CLS_N, ['5'] = CLS_N,
        ['6'] = CLS_N, ['7'] = CLS_N, ['8'] = CLS_N, ['9'] = CLS_N,
        ['A'] = CLS_L, ['B'] = CLS_L, ['C'] = CLS_L, ['D'] = CLS_L, ['E'] = CLS_L, ['F'] = CLS_L, ['G'] = CLS_L,
        ['H'] = CLS_L, ['I'] = CLS_L, ['J'] = CLS_L, ['K'] = CLS_L, ['L'] = CLS_L, ['M'] = CLS_L, ['N'] = CLS_L,
        ['O'] = CLS_L, ['P'] = CLS_L, ['Q'] = CLS_L, ['R'] = CLS_L, ['S'] = CLS_L, ['T'] = CLS_L, ['U'] = CLS_L,
        ['V'] = CLS_L, ['W'] = CLS_L, ['X'] = CLS_L, ['Y'] = CLS_L, ['Z'] = CLS_L,
        ['a'] = CLS_L, ['b'] = CLS_L, ['c'] = CLS_L, ['d'] = CLS_L, ['e'] = CLS_L, ['f'] = CLS_L, ['g'] = CLS_L,
        ['h'] = CLS_L, ['i'] = CLS_L, ['j'] = CLS_L, ['k'] = CLS_L, ['l'] = CLS_L, ['m'] = CLS_L, ['n'] = CLS_L,
        ['o'] = CLS_L, ['p'] = CLS_L, ['q'] = CLS_L, ['r'] = CLS_L, ['s'] = CLS_L, ['t'] = CLS_L, ['u'] = CLS_L,
        ['v'] = CLS_L, ['w'] = CLS_L, ['x'] = CLS_L, ['y'] = CLS_L, ['z'] = CLS_L,
    };
    if (s[i] < 0x80) {
        *next = i + 1;
        if (cp_out)
            *cp_out = s[i];
        return ascii[s[i]];
    }
    size_t j = i;
    uint32_t cp = tb_utf8_next(s, &j);
    *next = j;
    if (cp_out)
        *cp_out = cp;
    return tb_uc_flags(cp) & (CLS_L | CLS_N | CLS_S);
}

/* End of the run of code points starting at i whose class satisfies (cls & want) == want_value. */
static inline size_t run_of(const uint8_t *s, size_t n, size_t i, unsigned mask, unsigned value) {
    while (i < n) {
        size_t next;
        if ((class_at(s, i, &next, NULL) & mask) != value)
            break;
        i = next;
    }
    return i;
}

#define OTHER_MASK (CLS_L | CLS_N | CLS_S) /* [^\s\p{L}\p{N}]: none of the three */

/* \s+(?!\S) | \s+ at p (p starts a white-space run). */
static size_t match_spaces(const uint8_t *s, size_t n, size_t p) {
    size_t q = run_of(s, n, p, CLS_S, CLS_S);
    if (q == n)
        return q;
    size_t last = tb_utf8_previous(s, q); /* give back one char so that (?!\S) holds */
    return last > p ? last : q;
}

/* End of the match of the GPT-2 pattern at p, or p when nothing matches there. */
static size_t match_gpt2(const uint8_t *s, size_t n, size_t p) {
    size_t p1;
    unsigned c0 = class_at(s, p, &p1, NULL);
    if (s[p] == '\'' && p1 < n) {
        uint8_t a = s[p1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return p1 + 1;
        if (p1 + 1 < n) {
            uint8_t b = s[p1 + 1];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return p1 + 2;
        }
    }
    if (s[p] == ' ' && p1 < n) {
        size_t p2;
        unsigned c1 = class_at(s, p1, &p2, NULL);
        if (c1 & CLS_L)
            return run_of(s, n, p2, CLS_L, CLS_L);
        if (c1 & CLS_N)
            return run_of(s, n, p2, CLS_N, CLS_N);
        if (!(c1 & OTHER_MASK))
            return run_of(s, n, p2, OTHER_MASK, 0);
    }
    if (c0 & CLS_L)
        return run_of(s, n, p1, CLS_L, CLS_L);
    if (c0 & CLS_N)
        return run_of(s, n, p1, CLS_N, CLS_N);
    if (!(c0 & OTHER_MASK))
        return run_of(s, n, p1, OTHER_MASK, 0);
    return match_spaces(s, n, p);
}

/* [\r\n]* after i */
static inline size_t skip_newlines(const uint8_t *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/* The Llama 3 pattern (max_digits 3) and Qwen2's (max_digits 1). */
static size_t match_llama3(const uint8_t *s, size_t n, size_t p, int max_digits) {
    size_t p1;
    uint32_t cp0;
    unsigned c0 = class_at(s, p, &p1, &cp0);
    if (cp0 == '\'' && p1 < n) {
        /* (?i:'s|'t|'re|'ve|'m|'ll|'d): case folding also maps U+017F (long s) to s */
        size_t p2;
        uint32_t a;
        class_at(s, p1, &p2, &a);
        if (a == 's' || a == 'S' || a == 0x17F || a == 't' || a == 'T' || a == 'm' || a == 'M' || a == 'd' ||
            a == 'D')
            return p2;
        if (p2 < n) {
            uint8_t b = s[p2];
            if (((a == 'r' || a == 'R' || a == 'v' || a == 'V') && (b == 'e' || b == 'E')) ||
                ((a == 'l' || a == 'L') && (b == 'l' || b == 'L')))
                return p2 + 1;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 & CLS_L)
        return run_of(s, n, p1, CLS_L, CLS_L);
    if (cp0 != '\r' && cp0 != '\n' && !(c0 & CLS_N) && p1 < n) {
        size_t p2;
        if (class_at(s, p1, &p2, NULL) & CLS_L)
            return run_of(s, n, p2, CLS_L, CLS_L);
    }
    /* \p{N}{1,max} */
    if (c0 & CLS_N) {
        size_t end = p1;
        for (int k = 1; k < max_digits && end < n; k++) {
            size_t next;
            if (!(class_at(s, end, &next, NULL) & CLS_N))
                break;
            end = next;
        }
        return end;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    if (cp0 == ' ' && p1 < n) {
        size_t p2;
        if (!(class_at(s, p1, &p2, NULL) & OTHER_MASK))
            return skip_newlines(s, n, run_of(s, n, p2, OTHER_MASK, 0));
    }
    if (!(c0 & OTHER_MASK))
        return skip_newlines(s, n, run_of(s, n, p1, OTHER_MASK, 0));
    /* here the code point is white space: \s*[\r\n]+ ends after the run's last \r or \n */
    size_t q = run_of(s, n, p, CLS_S, CLS_S);
    for (size_t k = q; k > p; k--) {
        if (s[k - 1] == '\r' || s[k - 1] == '\n')
            return k;
    }
    return match_spaces(s, n, p);
}

static bool char_matches(const tb_pretokenizer *pt, uint32_t cp) {
    switch (pt->pattern) {
    case TB_PATTERN_WHITESPACE_CHAR:
        return (tb_uc_flags(cp) & TB_UC_SPACE) != 0;
    case TB_PATTERN_NUMERIC_CHAR:
        return (tb_uc_flags(cp) & TB_UC_NUMBER) != 0;
    case TB_PATTERN_CHAR:
        return cp == pt->split_char;
    default:
        return false;
    }
}

bool tb_pattern_find(const tb_pretokenizer *pt, const uint8_t *s, size_t n, size_t from, size_t *start,
                     size_t *end) {
    switch (pt->pattern) {
    case TB_PATTERN_GPT2:
    case TB_PATTERN_LLAMA3:
    case TB_PATTERN_QWEN2:
        /* every code point starts some alternative, so the match is always at `from` */
        for (size_t p = from; p < n;) {
            size_t e = pt->pattern == TB_PATTERN_GPT2     ? match_gpt2(s, n, p)
                       : pt->pattern == TB_PATTERN_LLAMA3 ? match_llama3(s, n, p, 3)
                                                          : match_llama3(s, n, p, 1);
            if (e > p) {
                *start = p;
                *end = e;
                return true;
            }
            p += tb_utf8_char_length(s[p]);
        }
        return false;
    case TB_PATTERN_LITERAL:
        if (pt->literal_length == 0 || n < pt->literal_length)
            return false;
        for (size_t p = from; p + pt->literal_length <= n; p++) {
            if (s[p] == (uint8_t)pt->literal[0] && memcmp(s + p, pt->literal, pt->literal_length) == 0) {
                *start = p;
                *end = p + pt->literal_length;
                return true;
            }
        }
        return false;
    default:
        for (size_t p = from; p < n;) {
            size_t next = p;
            uint32_t cp = tb_utf8_next(s, &next);
            if (char_matches(pt, cp)) {
                *start = p;
                *end = next;
                return true;
            }
            p = next;
        }
        return false;
    }
}

tb_status tb_pieces_push(tb_pieces *pieces, size_t offset, size_t length, bool at_origin) {
    if (pieces->count == pieces->capacity) {
        size_t capacity = pieces->capacity ? pieces->capacity * 2 : 64;
        tb_piece *data = realloc(pieces->data, capacity * sizeof *data);
        if (!data)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "tokenizer: %zu pre-tokens", capacity);
        pieces->data = data;
        pieces->capacity = capacity;
    }
    pieces->data[pieces->count++] = (tb_piece){offset, length, at_origin};
    return TB_OK;
}

/* Emits one output split [a, b) of piece `in` (empty splits are dropped, as PreTokenizedString
 * does). */
static tb_status emit(tb_pieces *out, const tb_piece *in, size_t a, size_t b) {
    if (b <= a)
        return TB_OK;
    return tb_pieces_push(out, in->offset + a, b - a, in->at_origin && a == 0);
}

/* NormalizedString::split: the pattern's matches and the gaps between them are combined according
 * to the behaviour. A pending split [pa, pb) is kept so that merges can extend it. */
static tb_status split_piece(const tb_pretokenizer *pt, const uint8_t *s, const tb_piece *in, tb_pieces *out) {
    size_t n = in->length;
    size_t cursor = 0;
    bool have_pending = false, pending_is_match = false;
    size_t pa = 0, pb = 0;
    tb_split_behavior behavior = pt->behavior;
    while (cursor < n) {
        size_t ms, me;
        bool found = tb_pattern_find(pt, s, n, cursor, &ms, &me);
        if (!found)
            ms = me = n;
        /* up to two spans: the gap [cursor, ms) and the match [ms, me) */
        for (int k = 0; k < 2; k++) {
            size_t a = k == 0 ? cursor : ms, b = k == 0 ? ms : me;
            if (b <= a)
                continue;
            bool is_match = (k == 1) != pt->invert;
            switch (behavior) {
            case TB_SPLIT_REMOVED:
                if (!is_match)
                    TB_TRY(emit(out, in, a, b));
                break;
            case TB_SPLIT_ISOLATED:
                TB_TRY(emit(out, in, a, b));
                break;
            case TB_SPLIT_CONTIGUOUS:
                if (have_pending && pending_is_match == is_match) {
                    pb = b;
                } else {
                    if (have_pending)
                        TB_TRY(emit(out, in, pa, pb));
                    pa = a;
                    pb = b;
                    have_pending = true;
                }
                pending_is_match = is_match;
                break;
            case TB_SPLIT_MERGED_WITH_PREVIOUS:
                if (is_match && have_pending && !pending_is_match) {
                    pb = b;
                } else {
                    if (have_pending)
                        TB_TRY(emit(out, in, pa, pb));
                    pa = a;
                    pb = b;
                    have_pending = true;
                }
                pending_is_match = is_match;
                break;
            case TB_SPLIT_MERGED_WITH_NEXT:
                /* a match joins the span that follows it, unless that span is a match too */
                if (have_pending && pending_is_match && !is_match) {
                    pb = b;
                    pending_is_match = false;
                    TB_TRY(emit(out, in, pa, pb));
                    have_pending = false;
                } else {
                    if (have_pending)
                        TB_TRY(emit(out, in, pa, pb));
                    pa = a;
                    pb = b;
                    have_pending = true;
                    pending_is_match = is_match;
                }
                break;
            }
        }
        cursor = me;
    }
    if (have_pending)
        TB_TRY(emit(out, in, pa, pb));
    return TB_OK;
}

static bool starts_with_char(const uint8_t *s, size_t n, uint32_t cp) {
    if (n == 0)
        return false;
    size_t i = 0;
    return tb_utf8_next(s, &i) == cp;
}

/* Appends the Metaspace transform of one piece to the arena. */
static tb_status metaspace_piece(const tb_pretokenizer *pt, tb_tok_buffer *arena, const tb_piece *in,
                                 tb_pieces *out) {
    uint8_t rep[4];
    size_t rep_length = tb_utf8_encode(pt->replacement, rep);
    bool prepend = false;
    const uint8_t *s = (const uint8_t *)arena->data + in->offset;
    if (!starts_with_char(s, in->length, pt->replacement) && in->length > 0) {
        /* a leading ' ' becomes the replacement, so it counts as starting with it */
        bool leading_space = s[0] == ' ';
        if (!leading_space)
            prepend = pt->prepend_scheme == TB_PREPEND_ALWAYS ||
                      (pt->prepend_scheme == TB_PREPEND_FIRST && in->at_origin);
    }
    size_t spaces = 0;
    for (size_t i = 0; i < in->length; i++)
        spaces += s[i] == ' ';
    TB_TRY(tb_tok_buffer_reserve(arena, in->length + spaces * rep_length + (prepend ? rep_length : 0)));
    s = (const uint8_t *)arena->data + in->offset; /* the arena may have moved */
    size_t start = arena->length;
    uint8_t *dst = (uint8_t *)arena->data + start;
    size_t k = 0;
    if (prepend) {
        memcpy(dst, rep, rep_length);
        k = rep_length;
    }
    for (size_t i = 0; i < in->length; i++) {
        if (s[i] == ' ') {
            memcpy(dst + k, rep, rep_length);
            k += rep_length;
        } else {
            dst[k++] = s[i];
        }
    }
    arena->length += k;
    arena->data[arena->length] = '\0';
    tb_piece mapped = {start, k, in->at_origin};
    if (!pt->split)
        return tb_pieces_push(out, mapped.offset, mapped.length, mapped.at_origin);
    tb_pretokenizer by_char = {.pattern = TB_PATTERN_CHAR, .split_char = pt->replacement,
                               .behavior = TB_SPLIT_MERGED_WITH_NEXT};
    return split_piece(&by_char, (const uint8_t *)arena->data + start, &mapped, out);
}

/* ByteLevel: optional prefix space, optional GPT-2 split, then every byte becomes its code point. */
static tb_status byte_level_piece(const tb_tokenizer *t, const tb_pretokenizer *pt, tb_tok_buffer *arena,
                                  const tb_piece *in, tb_pieces *out) {
    tb_piece base = *in;
    if (pt->add_prefix_space && (in->length == 0 || arena->data[in->offset] != ' ')) {
        size_t start = arena->length;
        TB_TRY(tb_tok_buffer_reserve(arena, in->length + 1));
        arena->data[arena->length++] = ' ';
        memcpy(arena->data + arena->length, arena->data + in->offset, in->length);
        arena->length += in->length;
        arena->data[arena->length] = '\0';
        base = (tb_piece){start, in->length + 1, in->at_origin};
    }
    size_t first = out->count;
    if (pt->use_regex) {
        tb_pretokenizer gpt2 = {.pattern = TB_PATTERN_GPT2, .behavior = TB_SPLIT_ISOLATED};
        TB_TRY(split_piece(&gpt2, (const uint8_t *)arena->data + base.offset, &base, out));
    } else {
        TB_TRY(tb_pieces_push(out, base.offset, base.length, base.at_origin));
    }
    for (size_t k = first; k < out->count; k++) {
        tb_piece *p = &out->data[k];
        TB_TRY(tb_tok_buffer_reserve(arena, p->length * 2));
        const uint8_t *src = (const uint8_t *)arena->data + p->offset;
        size_t start = arena->length;
        uint8_t *dst = (uint8_t *)arena->data + start;
        size_t m = 0;
        for (size_t i = 0; i < p->length; i++) {
            uint8_t b = src[i];
            dst[m] = t->byte_to_char[b][0];
            dst[m + 1] = t->byte_to_char[b][1];
            m += t->byte_to_char_length[b];
        }
        arena->length += m;
        arena->data[arena->length] = '\0';
        p->offset = start;
        p->length = m;
    }
    return TB_OK;
}

tb_status tb_pretokenize(const tb_tokenizer *t, tb_tok_buffer *arena, tb_pieces *pieces, tb_pieces *spare) {
    for (size_t k = 0; k < t->pretokenizer_count; k++) {
        const tb_pretokenizer *pt = &t->pretokenizers[k];
        spare->count = 0;
        for (size_t i = 0; i < pieces->count; i++) {
            tb_piece in = pieces->data[i];
            switch (pt->kind) {
            case TB_PRETOKENIZER_SPLIT:
                TB_TRY(split_piece(pt, (const uint8_t *)arena->data + in.offset, &in, spare));
                break;
            case TB_PRETOKENIZER_BYTE_LEVEL:
                TB_TRY(byte_level_piece(t, pt, arena, &in, spare));
                break;
            case TB_PRETOKENIZER_METASPACE:
                TB_TRY(metaspace_piece(pt, arena, &in, spare));
                break;
            }
        }
        tb_pieces swap = *pieces;
        *pieces = *spare;
        *spare = swap;
    }
    return TB_OK;
}
