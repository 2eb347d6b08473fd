/* The strict RFC 8259 JSON reader behind include/torchburn/json.h: one iterative pass (no recursion, so
 * hostile nesting cannot overflow the C stack), UTF-8 validated, values collected on a stack and moved
 * into an arena when their container closes, objects of more than a few members indexed by a hash. */
#include "torchburn/json.h"

#include <locale.h>
#include <stdarg.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files/json_internal.h"
#include "torchburn/alloc.h"

enum {
    DEFAULT_MAX_DEPTH = 128,
    ARENA_CHUNK = 64 * 1024,   /* minimum arena chunk */
    NUMBER_BUFFER = 64,        /* numbers longer than this take a heap copy for strtod */
};
static const size_t DEFAULT_MAX_BYTES = (size_t)64 << 20;

typedef struct frame {
    size_t first;    /* index in the value stack of the container's first item */
    size_t open_pos; /* input offset of '[' or '{' (for messages) */
    bool is_object;
} frame;

typedef struct parser {
    const unsigned char *begin, *p, *end;
    const char *source_name;
    int max_depth;
    tb_json_document *doc;
    size_t strings_used;
    tb_json_value *stack;
    size_t stack_length, stack_capacity;
    frame *frames;
    int depth, frames_capacity;
} parser;

/* ---- errors ---- */

static void line_column(const parser *ps, size_t offset, size_t *line, size_t *column) {
    size_t l = 1, last_newline = 0;
    bool seen = false;
    for (size_t i = 0; i < offset; i++) {
        if (ps->begin[i] == '\n') {
            l++;
            last_newline = i;
            seen = true;
        }
    }
    *line = l;
    *column = seen ? offset - last_newline : offset + 1;
}

static tb_status TB_PRINTF(3, 4) fail_at(const parser *ps, const unsigned char *where, const char *format, ...) {
    char what[512];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    size_t line, column;
    line_column(ps, (size_t)(where - ps->begin), &line, &column);
    return tb_error_set(TB_ERR_FORMAT, "%s: line %zu, column %zu: %s", ps->source_name, line, column, what);
}

/* A printable rendering of the byte at p for messages. */
static const char *describe_byte(const parser *ps, const unsigned char *p, char buf[16]) {
    if (p >= ps->end)
        return "end of input";
    if (*p >= 0x21 && *p < 0x7f)
        snprintf(buf, 16, "'%c'", *p);
    else
        snprintf(buf, 16, "byte 0x%02x", *p);
    return buf;
}

/* ---- memory ---- */

static void *arena_alloc(tb_json_document *doc, size_t size) {
    size = (size + 15) & ~(size_t)15;
    arena_chunk *chunk = doc->chunks;
    if (!chunk || chunk->size - chunk->used < size) {
        size_t chunk_size = size > ARENA_CHUNK ? size : ARENA_CHUNK;
        if (chunk_size > SIZE_MAX - sizeof(arena_chunk))
            return NULL;
        chunk = malloc(sizeof(arena_chunk) + chunk_size);
        if (!chunk)
            return NULL;
        chunk->size = chunk_size;
        chunk->used = 0;
        /* a big private chunk goes behind the current one so the current one keeps filling */
        if (doc->chunks && size > ARENA_CHUNK) {
            chunk->next = doc->chunks->next;
            doc->chunks->next = chunk;
        } else {
            chunk->next = doc->chunks;
            doc->chunks = chunk;
        }
    }
    void *result = chunk->data + chunk->used;
    chunk->used += size;
    return result;
}

static tb_status push_value(parser *ps, const tb_json_value *value) {
    if (ps->stack_length == ps->stack_capacity) {
        size_t capacity = ps->stack_capacity ? ps->stack_capacity * 2 : 256;
        tb_json_value *grown = realloc(ps->stack, capacity * sizeof *grown);
        if (!grown)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu JSON values", ps->source_name,
                                capacity);
        ps->stack = grown;
        ps->stack_capacity = capacity;
    }
    ps->stack[ps->stack_length++] = *value;
    return TB_OK;
}

/* ---- tokens ---- */

static inline const unsigned char *skip_space(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static bool read_hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4)
        return false;
    unsigned value = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(p[i]);
        if (digit < 0)
            return false;
        value = value * 16 + (unsigned)digit;
    }
    *out = value;
    return true;
}

/* Length of the valid UTF-8 sequence at p (2..4), or 0 when it is malformed (overlong, surrogate,
 * above U+10FFFF, truncated, bad continuation). p[0] >= 0x80. */
static size_t utf8_sequence(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    size_t avail = (size_t)(end - p);
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* U+D800..DFFF are not scalar values */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (avail < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

static char *put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) {
        *d++ = (char)cp;
    } else if (cp < 0x800) {
        *d++ = (char)(0xC0 | (cp >> 6));
        *d++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *d++ = (char)(0xE0 | (cp >> 12));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *d++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *d++ = (char)(0xF0 | (cp >> 18));
        *d++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *d++ = (char)(0x80 | (cp & 0x3F));
    }
    return d;
}

/* Eight bytes at once: true when none is '"', '\\', a control character or >= 0x80. */
static inline bool word_is_plain(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t quote = w ^ (ones * '"');
    uint64_t backslash = w ^ (ones * '\\');
    uint64_t special = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | (w - ones * 0x20) | w;
    return (special & highs) == 0;
}

/* Parses the string starting at ps->p (on the opening quote) into the strings buffer. */
static tb_status parse_string(parser *ps, tb_json_value *out) {
    const unsigned char *p = ps->p + 1, *end = ps->end;
    char *start = ps->doc->strings + ps->strings_used;
    char *d = start;
    for (;;) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (!word_is_plain(w))
                break;
            memcpy(d, &w, 8);
            p += 8;
            d += 8;
        }
        if (p >= end)
            return fail_at(ps, ps->p, "unterminated string");
        unsigned char c = *p;
        if (c == '"') {
            p++;
            break;
        }
        if (c >= 0x20 && c < 0x80 && c != '\\') {
            *d++ = (char)c;
            p++;
        } else if (c < 0x20) {
            return fail_at(ps, p, "control character 0x%02x in a string must be escaped", c);
        } else if (c >= 0x80) {
            size_t n = utf8_sequence(p, end);
            if (n == 0)
                return fail_at(ps, p, "invalid UTF-8 byte 0x%02x in a string", c);
            memcpy(d, p, n);
            d += n;
            p += n;
        } else { /* backslash */
            if (end - p < 2)
                return fail_at(ps, ps->p, "unterminated string");
            unsigned char e = p[1];
            p += 2;
            switch (e) {
            case '"': *d++ = '"'; break;
            case '\\': *d++ = '\\'; break;
            case '/': *d++ = '/'; break;
            case 'b': *d++ = '\b'; break;
            case 'f': *d++ = '\f'; break;
            case 'n': *d++ = '\n'; break;
            case 'r': *d++ = '\r'; break;
            case 't': *d++ = '\t'; break;
            case 'u': {
                unsigned cp;
                if (!read_hex4(p, end, &cp))
                    return fail_at(ps, p - 2, "\\u must be followed by 4 hex digits");
                p += 4;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return fail_at(ps, p - 6, "lone low surrogate \\u%04X", cp);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    unsigned low;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !read_hex4(p + 2, end, &low) ||
                        low < 0xDC00 || low > 0xDFFF)
                        return fail_at(ps, p - 6, "high surrogate \\u%04X is not followed by a low surrogate", cp);
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                d = put_utf8(d, cp);
                break;
            }
            default: {
                char buf[16];
                return fail_at(ps, p - 2, "invalid escape \\%s", e >= 0x21 && e < 0x7f
                                                                     ? (snprintf(buf, sizeof buf, "%c", e), buf)
                                                                     : (snprintf(buf, sizeof buf, "x%02x", e), buf));
            }
            }
        }
    }
    *d = '\0';
    out->type = TB_JSON_STRING;
    out->reserved = 0;
    out->length = (size_t)(d - start);
    out->as.string = start;
    ps->strings_used += out->length + 1;
    ps->p = p;
    return TB_OK;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

/* Correctly rounded conversion of the number text [s, e) (already validated) to double. */
static bool text_to_double(const unsigned char *s, const unsigned char *e, double *out) {
    char small[NUMBER_BUFFER];
    size_t n = (size_t)(e - s);
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    pthread_once(&c_locale_once, make_c_locale);
    *out = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
    if (buf != small)
        free(buf);
    return true;
}

static const double powers_of_ten[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                         1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static tb_status parse_number(parser *ps, tb_json_value *out) {
    const unsigned char *s = ps->p, *p = s, *end = ps->end;
    bool negative = false;
    if (*p == '-') {
        negative = true;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9')
        return fail_at(ps, s, "invalid number: a digit must follow '-'");
    uint64_t mantissa = 0;
    int significant = 0; /* digits accumulated into mantissa (leading zeros excluded) */
    bool mantissa_exact = true;
    int64_t exponent10 = 0; /* from fraction digits and the explicit exponent */
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9')
            return fail_at(ps, s, "invalid number: leading zeros are not allowed");
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (significant < 19) {
                mantissa = mantissa * 10 + (uint64_t)(*p - '0');
                significant++;
            } else {
                mantissa_exact = false;
                exponent10++;
            }
        }
    }
    bool integral = true;
    if (p < end && *p == '.') {
        integral = false;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return fail_at(ps, s, "invalid number: a digit must follow '.'");
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (mantissa == 0 && *p == '0') {
                exponent10--;
            } else if (significant < 19) {
                mantissa = mantissa * 10 + (uint64_t)(*p - '0');
                significant++;
                exponent10--;
            } else if (*p != '0') {
                mantissa_exact = false;
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        bool exponent_negative = false;
        if (p < end && (*p == '+' || *p == '-')) {
            exponent_negative = *p == '-';
            p++;
        }
        if (p >= end || *p < '0' || *p > '9')
            return fail_at(ps, s, "invalid number: a digit must follow the exponent");
        int64_t explicit_exponent = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (explicit_exponent < 1000000)
                explicit_exponent = explicit_exponent * 10 + (*p - '0');
        exponent10 += exponent_negative ? -explicit_exponent : explicit_exponent;
    }
    ps->p = p;
    out->reserved = 0;
    out->length = 0;
    if (integral && mantissa_exact && significant <= 19) {
        if (!negative && mantissa <= (uint64_t)INT64_MAX) {
            out->type = TB_JSON_INT;
            out->as.integer = (int64_t)mantissa;
            return TB_OK;
        }
        if (negative && mantissa <= (uint64_t)INT64_MAX + 1) {
            out->type = TB_JSON_INT;
            out->as.integer = mantissa == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mantissa;
            return TB_OK;
        }
    }
    out->type = TB_JSON_DOUBLE;
    double value;
    if (mantissa == 0 && mantissa_exact) {
        value = 0.0;
    } else if (mantissa_exact && mantissa < (1ull << 53) && exponent10 >= -22 && exponent10 <= 22) {
        /* both operands exact, so the single rounding of IEEE arithmetic is the correct one */
        value = (double)mantissa;
        value = exponent10 >= 0 ? value * powers_of_ten[exponent10] : value / powers_of_ten[-exponent10];
    } else if (!text_to_double(s, p, &value)) {
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for a number", ps->source_name);
    }
    if (isinf(value))
        return fail_at(ps, s, "number %.*s is out of the range of a double", (int)((p - s) > 40 ? 40 : (p - s)), s);
    out->as.number = negative ? -fabs(value) : fabs(value);
    return TB_OK;
}

static tb_status parse_literal(parser *ps, const char *word, size_t length, tb_json_value *out) {
    if ((size_t)(ps->end - ps->p) < length || memcmp(ps->p, word, length) != 0) {
        char buf[16];
        return fail_at(ps, ps->p, "unexpected %s", describe_byte(ps, ps->p, buf));
    }
    ps->p += length;
    out->reserved = 0;
    out->length = 0;
    if (word[0] == 'n') {
        out->type = TB_JSON_NULL;
        out->as.integer = 0;
    } else {
        out->type = TB_JSON_BOOL;
        out->as.boolean = word[0] == 't';
    }
    return TB_OK;
}

/* ---- containers ---- */

/* Moves the items of the innermost container from the value stack into the arena, checks object keys
 * for duplicates (building the hash index), and leaves the container as one value on the stack. */
static tb_status close_container(parser *ps) {
    frame *f = &ps->frames[ps->depth - 1];
    size_t count = ps->stack_length - f->first;
    size_t members = f->is_object ? count / 2 : count;
    if (members >= UINT32_MAX)
        return fail_at(ps, ps->begin + f->open_pos, "container has more than 2^32 - 2 members");
    size_t item_bytes = count * sizeof(tb_json_value);
    size_t slots = f->is_object && members > TB_JSON_SMALL_OBJECT ? tb_json_index_slots(members) : 0;
    tb_json_value container = {.type = f->is_object ? TB_JSON_OBJECT : TB_JSON_ARRAY, .length = members};
    container.as.items = NULL;
    if (count > 0) {
        size_t index_bytes = slots ? sizeof(uint64_t) + slots * sizeof(uint32_t) : 0;
        tb_json_value *items = arena_alloc(ps->doc, item_bytes + index_bytes);
        if (!items)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for a container of %zu members",
                                ps->source_name, members);
        memcpy(items, ps->stack + f->first, item_bytes);
        container.as.items = items;
        if (slots) {
            unsigned char *index = (unsigned char *)(items + count);
            memcpy(index, &ps->doc->hash_seed, sizeof ps->doc->hash_seed);
            uint32_t *table = (uint32_t *)(index + sizeof ps->doc->hash_seed);
            memset(table, 0, slots * sizeof *table);
            for (size_t m = 0; m < members; m++) {
                const tb_json_value *key = &items[2 * m];
                size_t slot = tb_json_hash_key(ps->doc->hash_seed, key->as.string, key->length) & (slots - 1);
                while (table[slot]) {
                    if (tb_json_same_key(&items[2 * (table[slot] - 1)], key->as.string, key->length))
                        goto duplicate;
                    slot = (slot + 1) & (slots - 1);
                }
                table[slot] = (uint32_t)(m + 1);
                continue;
            duplicate:
                return fail_at(ps, ps->begin + f->open_pos, "duplicate key \"%.*s\" in this object",
                               (int)(key->length > 200 ? 200 : key->length), key->as.string);
            }
        } else if (f->is_object) {
            for (size_t m = 1; m < members; m++)
                for (size_t k = 0; k < m; k++)
                    if (tb_json_same_key(&items[2 * k], items[2 * m].as.string, items[2 * m].length))
                        return fail_at(ps, ps->begin + f->open_pos, "duplicate key \"%.*s\" in this object",
                                       (int)(items[2 * m].length > 200 ? 200 : items[2 * m].length),
                                       items[2 * m].as.string);
        }
    }
    ps->stack_length = f->first;
    ps->depth--;
    return push_value(ps, &container);
}

static tb_status open_container(parser *ps, bool is_object) {
    if (ps->depth >= ps->max_depth)
        return fail_at(ps, ps->p, "nesting deeper than %d levels", ps->max_depth);
    if (ps->depth == ps->frames_capacity) {
        int capacity = ps->frames_capacity ? ps->frames_capacity * 2 : 32;
        frame *grown = realloc(ps->frames, (size_t)capacity * sizeof *grown);
        if (!grown)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory for nesting", ps->source_name);
        ps->frames = grown;
        ps->frames_capacity = capacity;
    }
    frame *f = &ps->frames[ps->depth++];
    f->first = ps->stack_length;
    f->open_pos = (size_t)(ps->p - ps->begin);
    f->is_object = is_object;
    ps->p++;
    return TB_OK;
}

/* Expects `"key" :` at the current position (after whitespace) and pushes the key. */
static tb_status parse_member_key(parser *ps) {
    ps->p = skip_space(ps->p, ps->end);
    if (ps->p >= ps->end || *ps->p != '"') {
        char buf[16];
        return fail_at(ps, ps->p, "expected a string key, found %s", describe_byte(ps, ps->p, buf));
    }
    tb_json_value key;
    TB_TRY(parse_string(ps, &key));
    TB_TRY(push_value(ps, &key));
    ps->p = skip_space(ps->p, ps->end);
    if (ps->p >= ps->end || *ps->p != ':') {
        char buf[16];
        return fail_at(ps, ps->p, "expected ':' after an object key, found %s", describe_byte(ps, ps->p, buf));
    }
    ps->p++;
    return TB_OK;
}

static tb_status parse_document(parser *ps) {
    for (;;) {
        /* a value is expected here */
        ps->p = skip_space(ps->p, ps->end);
        if (ps->p >= ps->end)
            return fail_at(ps, ps->p, ps->depth ? "unexpected end of input" : "empty input: expected a value");
        unsigned char c = *ps->p;
        tb_json_value scalar;
        if (c == '{' || c == '[') {
            TB_TRY(open_container(ps, c == '{'));
            ps->p = skip_space(ps->p, ps->end);
            if (ps->p < ps->end && *ps->p == (c == '{' ? '}' : ']')) {
                ps->p++;
                TB_TRY(close_container(ps));
            } else {
                if (c == '{')
                    TB_TRY(parse_member_key(ps));
                continue;
            }
        } else {
            if (c == '"')
                TB_TRY(parse_string(ps, &scalar));
            else if (c == '-' || (c >= '0' && c <= '9'))
                TB_TRY(parse_number(ps, &scalar));
            else if (c == 't')
                TB_TRY(parse_literal(ps, "true", 4, &scalar));
            else if (c == 'f')
                TB_TRY(parse_literal(ps, "false", 5, &scalar));
            else if (c == 'n')
                TB_TRY(parse_literal(ps, "null", 4, &scalar));
            else {
                char buf[16];
                return fail_at(ps, ps->p, "unexpected %s, expected a value", describe_byte(ps, ps->p, buf));
            }
            TB_TRY(push_value(ps, &scalar));
        }
        /* after a value: a separator, a closing bracket, or the end of the document */
        for (;;) {
            if (ps->depth == 0) {
                ps->p = skip_space(ps->p, ps->end);
                if (ps->p < ps->end) {
                    char buf[16];
                    return fail_at(ps, ps->p, "unexpected %s after the document", describe_byte(ps, ps->p, buf));
                }
                return TB_OK;
            }
            ps->p = skip_space(ps->p, ps->end);
            bool is_object = ps->frames[ps->depth - 1].is_object;
            char closing = is_object ? '}' : ']';
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                if (is_object)
                    TB_TRY(parse_member_key(ps));
                break;
            }
            if (ps->p < ps->end && *ps->p == closing) {
                ps->p++;
                TB_TRY(close_container(ps));
                continue;
            }
            char buf[16];
            return fail_at(ps, ps->p, "expected ',' or '%c', found %s", closing, describe_byte(ps, ps->p, buf));
        }
    }
}

/* ---- public API ---- */

tb_status tb_json_parse(const char *text, size_t length, const tb_json_limits *limits, const char *source_name,
                        tb_json_document **out) {
    if (!out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_json_parse: out is NULL");
    *out = NULL;
    if (!text && length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "tb_json_parse: text is NULL");
    if (!source_name)
        source_name = "JSON";
    size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes : DEFAULT_MAX_BYTES;
    int max_depth = limits && limits->max_depth > 0 ? limits->max_depth : DEFAULT_MAX_DEPTH;
    if (length > max_bytes)
        return tb_error_set(TB_ERR_FORMAT, "%s: %zu bytes is more than the limit of %zu bytes", source_name, length,
                            max_bytes);
    if (length >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return tb_error_set(TB_ERR_FORMAT, "%s: line 1, column 1: a byte order mark is not allowed", source_name);

    tb_json_document *doc = calloc(1, sizeof *doc);
    if (!doc)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "%s: out of memory", source_name);
    doc->hash_seed = (uint64_t)(uintptr_t)doc * 0x9E3779B97F4A7C15ull;
    tb_status status = tb_alloc(length + 1, TB_ALLOC_DEFAULT, (void **)&doc->strings);
    if (status != TB_OK) {
        free(doc);
        return tb_error_prefix(status, "%s", source_name);
    }
    parser ps = {.begin = (const unsigned char *)text, .p = (const unsigned char *)text,
                 .end = (const unsigned char *)text + length, .source_name = source_name,
                 .max_depth = max_depth, .doc = doc};
    status = parse_document(&ps);
    if (status == TB_OK)
        doc->root = ps.stack[0];
    free(ps.stack);
    free(ps.frames);
    if (status != TB_OK) {
        tb_json_free(doc);
        return status;
    }
    *out = doc;
    return TB_OK;
}

void tb_json_free(tb_json_document *document) {
    if (!document)
        return;
    arena_chunk *chunk = document->chunks;
    while (chunk) {
        arena_chunk *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    tb_free(document->strings);
    free(document);
}
