/* The JSON prefix recognizer (contract in llm_json.h): one switch per byte over the mode, a bit stack of
 * open containers, and small counters for strings (escapes, \u digits, UTF-8 continuation bytes with the
 * ranges that exclude overlong forms and surrogates), numbers and the literals true/false/null. */
#include <string.h>

#include "llm/llm_json.h"

enum mode {
    MODE_START,        /* before the top-level object: '{' */
    MODE_OBJECT_FIRST, /* after '{': a key or '}' */
    MODE_OBJECT_KEY,   /* after ',' in an object: a key */
    MODE_COLON,        /* after a key */
    MODE_VALUE,        /* after ':' or ',' in an array */
    MODE_ARRAY_FIRST,  /* after '[': a value or ']' */
    MODE_AFTER_VALUE,  /* ',' or the closing bracket of the innermost container */
    MODE_STRING,
    MODE_NUMBER,
    MODE_LITERAL,
    MODE_DONE, /* the top-level object is closed: no more bytes */
};

enum string_sub { STRING_PLAIN, STRING_ESCAPE, STRING_HEX, STRING_UTF8 };

/* Number grammar -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? as states after each part. */
enum number_sub { NUMBER_MINUS, NUMBER_ZERO, NUMBER_INT, NUMBER_DOT, NUMBER_FRACTION, NUMBER_E, NUMBER_E_SIGN,
                  NUMBER_EXPONENT };

static const char *const LITERALS[3] = {"true", "false", "null"};

void tb_json_recognizer_init(tb_json_recognizer *r) {
    memset(r, 0, sizeof *r);
    r->mode = MODE_START;
}

bool tb_json_recognizer_is_complete(const tb_json_recognizer *r) { return r->mode == MODE_DONE; }

static bool is_whitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool top_is_object(const tb_json_recognizer *r) {
    const unsigned d = r->depth - 1u;
    return (r->objects[d / 64] >> (d % 64)) & 1u;
}

static bool push(tb_json_recognizer *r, bool object) {
    if (r->depth >= TB_JSON_MAX_DEPTH)
        return false;
    const unsigned d = r->depth++;
    const uint64_t bit = (uint64_t)1 << (d % 64);
    r->objects[d / 64] = object ? r->objects[d / 64] | bit : r->objects[d / 64] & ~bit;
    r->mode = object ? MODE_OBJECT_FIRST : MODE_ARRAY_FIRST;
    return true;
}

static bool pop(tb_json_recognizer *r, bool object) {
    if (r->depth == 0 || top_is_object(r) != object)
        return false;
    r->depth--;
    r->mode = r->depth == 0 ? MODE_DONE : MODE_AFTER_VALUE;
    return true;
}

static void open_string(tb_json_recognizer *r, bool key) {
    r->mode = MODE_STRING;
    r->sub = STRING_PLAIN;
    r->in_key = key;
}

/* The first byte of a value (not whitespace). */
static bool start_value(tb_json_recognizer *r, uint8_t c) {
    switch (c) {
    case '{':
        return push(r, true);
    case '[':
        return push(r, false);
    case '"':
        open_string(r, false);
        return true;
    case '-':
        r->mode = MODE_NUMBER;
        r->sub = NUMBER_MINUS;
        return true;
    case 't':
    case 'f':
    case 'n':
        r->mode = MODE_LITERAL;
        r->pending = c == 't' ? 0 : c == 'f' ? 1 : 2;
        r->sub = 1;
        return true;
    default:
        if (!is_digit(c))
            return false;
        r->mode = MODE_NUMBER;
        r->sub = c == '0' ? NUMBER_ZERO : NUMBER_INT;
        return true;
    }
}

/* UTF-8 lead byte: how many continuation bytes follow and the range of the first (RFC 3629's table). */
static bool start_utf8(tb_json_recognizer *r, uint8_t c) {
    uint8_t count, low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        count = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        count = 2;
        low = c == 0xE0 ? 0xA0 : 0x80; /* no overlong forms */
        high = c == 0xED ? 0x9F : 0xBF; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        count = 3;
        low = c == 0xF0 ? 0x90 : 0x80;
        high = c == 0xF4 ? 0x8F : 0xBF; /* nothing above U+10FFFF */
    } else
        return false;
    r->sub = STRING_UTF8;
    r->pending = count;
    r->low = low;
    r->high = high;
    return true;
}

static bool string_byte(tb_json_recognizer *r, uint8_t c) {
    switch (r->sub) {
    case STRING_PLAIN:
        if (c == '"') {
            r->mode = r->in_key ? MODE_COLON : MODE_AFTER_VALUE;
            return true;
        }
        if (c == '\\') {
            r->sub = STRING_ESCAPE;
            return true;
        }
        if (c < 0x20)
            return false;
        return c < 0x80 || start_utf8(r, c);
    case STRING_ESCAPE:
        if (c == 'u') {
            r->sub = STRING_HEX;
            r->pending = 0; /* hex digits seen */
            r->low = 0;     /* the first digit was d/D: the second must be 0-7 (no surrogates) */
            return true;
        }
        r->sub = STRING_PLAIN;
        return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
    case STRING_HEX:
        if (!is_hex(c))
            return false;
        if (r->pending == 0)
            r->low = c == 'd' || c == 'D';
        else if (r->pending == 1 && r->low && !(c >= '0' && c <= '7'))
            return false;
        if (++r->pending == 4)
            r->sub = STRING_PLAIN;
        return true;
    default: /* STRING_UTF8 */
        if (c < r->low || c > r->high)
            return false;
        r->low = 0x80;
        r->high = 0xBF;
        if (--r->pending == 0)
            r->sub = STRING_PLAIN;
        return true;
    }
}

/* A number byte; *ended when c is not part of the number (which was complete) and must be read next. */
static bool number_byte(tb_json_recognizer *r, uint8_t c, bool *ended) {
    *ended = false;
    switch (r->sub) {
    case NUMBER_MINUS:
        if (!is_digit(c))
            return false;
        r->sub = c == '0' ? NUMBER_ZERO : NUMBER_INT;
        return true;
    case NUMBER_ZERO:
    case NUMBER_INT:
        if (is_digit(c) && r->sub == NUMBER_INT)
            return true;
        if (c == '.') {
            r->sub = NUMBER_DOT;
            return true;
        }
        if (c == 'e' || c == 'E') {
            r->sub = NUMBER_E;
            return true;
        }
        *ended = true;
        return true;
    case NUMBER_DOT:
        if (!is_digit(c))
            return false;
        r->sub = NUMBER_FRACTION;
        return true;
    case NUMBER_FRACTION:
        if (is_digit(c))
            return true;
        if (c == 'e' || c == 'E') {
            r->sub = NUMBER_E;
            return true;
        }
        *ended = true;
        return true;
    case NUMBER_E:
        if (c == '+' || c == '-') {
            r->sub = NUMBER_E_SIGN;
            return true;
        }
        if (!is_digit(c))
            return false;
        r->sub = NUMBER_EXPONENT;
        return true;
    case NUMBER_E_SIGN:
        if (!is_digit(c))
            return false;
        r->sub = NUMBER_EXPONENT;
        return true;
    default: /* NUMBER_EXPONENT */
        if (is_digit(c))
            return true;
        *ended = true;
        return true;
    }
}

/* A byte between tokens (every mode but string, number and literal). */
static bool structural_byte(tb_json_recognizer *r, uint8_t c) {
    if (is_whitespace(c))
        return r->mode != MODE_START && r->mode != MODE_DONE && ++r->whitespace <= TB_JSON_MAX_WHITESPACE;
    r->whitespace = 0;
    switch (r->mode) {
    case MODE_START:
        return c == '{' && push(r, true);
    case MODE_OBJECT_FIRST:
        if (c == '}')
            return pop(r, true);
        if (c != '"')
            return false;
        open_string(r, true);
        return true;
    case MODE_OBJECT_KEY:
        if (c != '"')
            return false;
        open_string(r, true);
        return true;
    case MODE_COLON:
        if (c != ':')
            return false;
        r->mode = MODE_VALUE;
        return true;
    case MODE_ARRAY_FIRST:
        if (c == ']')
            return pop(r, false);
        return start_value(r, c);
    case MODE_VALUE:
        return start_value(r, c);
    case MODE_AFTER_VALUE:
        if (c == ',') {
            r->mode = top_is_object(r) ? MODE_OBJECT_KEY : MODE_VALUE;
            return true;
        }
        if (c == '}' || c == ']')
            return pop(r, c == '}');
        return false;
    default: /* MODE_DONE */
        return false;
    }
}

static bool feed_byte(tb_json_recognizer *r, uint8_t c) {
    switch (r->mode) {
    case MODE_STRING:
        return string_byte(r, c);
    case MODE_LITERAL: {
        const char *word = LITERALS[r->pending];
        if (c != (uint8_t)word[r->sub])
            return false;
        if (word[++r->sub] == '\0')
            r->mode = MODE_AFTER_VALUE;
        return true;
    }
    case MODE_NUMBER: {
        bool ended;
        if (!number_byte(r, c, &ended))
            return false;
        if (!ended)
            return true;
        r->mode = MODE_AFTER_VALUE;
        return structural_byte(r, c);
    }
    default:
        return structural_byte(r, c);
    }
}

bool tb_json_recognizer_feed(tb_json_recognizer *r, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(r, bytes[i]))
            return false;
    return true;
}
