/* Tests of the strict JSON reader: accept (y_), reject (n_) and implementation-defined (i_) cases in the
 * style of JSONTestSuite, typed getters, hash-indexed lookup, numbers against strtod, limits, random
 * mutations (no crash), and the parse speed of a 10 MB tokenizer-like document (printed). */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tb_test.h"
#include "torchburn/json.h"

typedef struct json_case {
    const char *name;
    const char *text;
    size_t length;  /* 0: strlen(text) */
    bool accept;
    const char *error; /* expected message substring when rejected */
} json_case;

#define ACCEPT(name, text) {name, text, 0, true, NULL}
#define REJECT(name, text, error) {name, text, 0, false, error}
#define REJECT_N(name, text, error) {name, text, sizeof(text) - 1, false, error}

static const json_case cases[] = {
    ACCEPT("y_array_empty", "[]"),
    ACCEPT("y_array_nested", "[[[]],[{}]]"),
    ACCEPT("y_object_empty", "{}"),
    ACCEPT("y_object_basic", "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}"),
    ACCEPT("y_object_same_key_different_case", "{\"a\":1,\"A\":2}"),
    ACCEPT("y_structure_whitespace", " \t\n\r[ 1 ,\n2 ]\r\n "),
    ACCEPT("y_scalar_true", "true"),
    ACCEPT("y_scalar_null", "null"),
    ACCEPT("y_scalar_string", "\"x\""),
    ACCEPT("y_scalar_number", " 42 "),
    ACCEPT("y_string_escapes", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\""),
    ACCEPT("y_string_unicode_escape", "\"\\u00e9\\u20AC\""),
    ACCEPT("y_string_surrogate_pair", "\"\\ud83d\\ude00\""),
    ACCEPT("y_string_utf8", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\""),
    ACCEPT("y_string_escaped_nul", "\"a\\u0000b\""),
    ACCEPT("y_string_del", "\"\x7f\""),
    ACCEPT("y_string_long", "\"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ\""),
    ACCEPT("y_number_zero", "0"),
    ACCEPT("y_number_negative_zero", "-0"),
    ACCEPT("y_number_fraction", "0.5"),
    ACCEPT("y_number_exponent", "[1e10,1E+2,1e-2,-1.5E-3,0e0]"),
    ACCEPT("y_number_int64_min", "-9223372036854775808"),
    ACCEPT("y_number_int64_max", "9223372036854775807"),
    ACCEPT("y_number_2_pow_63", "9223372036854775808"),
    ACCEPT("y_number_max_double", "1.7976931348623157e308"),
    ACCEPT("y_number_min_subnormal", "5e-324"),
    ACCEPT("i_number_underflow", "1e-400"),
    ACCEPT("i_number_very_big_integer", "123456789012345678901234567890"),
    ACCEPT("i_object_key_with_nul", "{\"a\\u0000\":1}"),
    ACCEPT("i_string_noncharacter", "\"\xef\xbf\xbf\""),
    REJECT("n_empty", "", "empty input"),
    REJECT("n_whitespace_only", "  \n", "empty input"),
    REJECT("n_array_trailing_comma", "[1,]", "line 1, column 4"),
    REJECT("n_array_leading_comma", "[,1]", "expected a value"),
    REJECT("n_array_double_comma", "[1,,2]", "expected a value"),
    REJECT("n_array_unclosed", "[1", "expected ',' or ']'"),
    REJECT("n_array_colon", "[1:2]", "expected ',' or ']'"),
    REJECT("n_object_trailing_comma", "{\"a\":1,}", "expected a string key"),
    REJECT("n_object_missing_colon", "{\"a\" 1}", "expected ':'"),
    REJECT("n_object_non_string_key", "{1:1}", "expected a string key"),
    REJECT("n_object_single_quote", "{'a':1}", "expected a string key"),
    REJECT("n_object_unclosed", "{\"a\":1", "expected ',' or '}'"),
    REJECT("n_object_colon_only", "{:}", "expected a string key"),
    REJECT("n_object_missing_value", "{\"a\":}", "expected a value"),
    REJECT("n_object_duplicate_key", "{\"a\":1,\"a\":2}", "duplicate key \"a\""),
    REJECT("n_object_duplicate_key_indexed",
           "{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k3\":10}",
           "duplicate key \"k3\""),
    REJECT("n_object_duplicate_nested", "[{\"x\":{\"a\":1,\"b\":2,\"a\":3}}]", "line 1, column 7: duplicate key"),
    REJECT("n_number_leading_zero", "01", "leading zeros"),
    REJECT("n_number_negative_leading_zero", "-012", "leading zeros"),
    REJECT("n_number_plus", "+1", "unexpected '+'"),
    REJECT("n_number_leading_dot", ".5", "unexpected '.'"),
    REJECT("n_number_trailing_dot", "1.", "a digit must follow '.'"),
    REJECT("n_number_dot_exponent", "1.e3", "a digit must follow '.'"),
    REJECT("n_number_exponent_empty", "1e", "exponent"),
    REJECT("n_number_exponent_sign_only", "1e+", "exponent"),
    REJECT("n_number_minus_only", "-", "a digit must follow '-'"),
    REJECT("n_number_minus_letter", "-a", "a digit must follow '-'"),
    REJECT("n_number_hex", "0x1", "unexpected 'x'"),
    REJECT("n_number_nan", "NaN", "unexpected 'N'"),
    REJECT("n_number_infinity", "-Infinity", "a digit must follow '-'"),
    REJECT("i_number_huge_exponent", "1e400", "out of the range of a double"),
    REJECT("i_number_huge_negative", "-1e99999999999999999999", "out of the range of a double"),
    REJECT("n_string_unescaped_newline", "\"a\nb\"", "control character 0x0a"),
    REJECT("n_string_unescaped_tab", "\"a\tb\"", "control character 0x09"),
    REJECT("n_string_bad_escape", "\"\\x41\"", "invalid escape \\x"),
    REJECT("n_string_escaped_apostrophe", "\"\\'\"", "invalid escape"),
    REJECT("n_string_unterminated", "\"abc", "unterminated string"),
    REJECT("n_string_backslash_at_end", "\"abc\\", "unterminated string"),
    REJECT("n_string_short_unicode", "\"\\u12\"", "4 hex digits"),
    REJECT("n_string_bad_unicode_hex", "\"\\u12G4\"", "4 hex digits"),
    REJECT("i_string_lone_high_surrogate", "\"\\ud800\"", "not followed by a low surrogate"),
    REJECT("i_string_high_then_high", "\"\\ud800\\ud800\"", "not followed by a low surrogate"),
    REJECT("i_string_lone_low_surrogate", "\"\\udc00\"", "lone low surrogate"),
    REJECT("n_string_invalid_utf8_ff", "\"\xff\"", "invalid UTF-8 byte 0xff"),
    REJECT("n_string_overlong_slash", "\"\xc0\xaf\"", "invalid UTF-8"),
    REJECT("n_string_overlong_3byte", "\"\xe0\x80\xaf\"", "invalid UTF-8"),
    REJECT("n_string_utf8_surrogate", "\"\xed\xa0\x80\"", "invalid UTF-8"),
    REJECT("n_string_above_10ffff", "\"\xf4\x90\x80\x80\"", "invalid UTF-8"),
    REJECT("n_string_truncated_utf8", "\"\xe2\x82\"", "invalid UTF-8"),
    REJECT("n_string_lone_continuation", "\"\x80\"", "invalid UTF-8"),
    REJECT("n_string_single_quotes", "'a'", "unexpected"),
    REJECT("i_structure_bom", "\xef\xbb\xbf{}", "byte order mark"),
    REJECT("n_structure_trailing_garbage", "[] x", "after the document"),
    REJECT("n_structure_two_values", "1 2", "after the document"),
    REJECT("n_structure_comment", "[1]//c", "after the document"),
    REJECT("n_structure_open_array_in_object", "{\"a\":[}", "expected a value"),
    REJECT("n_structure_close_mismatch", "[1}", "expected ',' or ']'"),
    REJECT("n_literal_truncated", "tru", "unexpected 't'"),
    REJECT("n_literal_capital", "True", "unexpected 'T'"),
    REJECT("n_literal_nul", "nul", "unexpected 'n'"),
    REJECT("n_structure_non_ascii_outside_string", "[\xc3\xa9]", "byte 0xc3"),
    REJECT_N("n_structure_nul_after_value", "[1]\0", "byte 0x00 after the document"),
    REJECT_N("n_string_raw_nul", "\"a\0b\"", "control character 0x00"),
    REJECT("n_error_position_line_2", "[1,\n x]", "line 2, column 2"),
};

static void test_cases(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const json_case *c = &cases[i];
        size_t length = c->length ? c->length : strlen(c->text);
        tb_json_document *doc = NULL;
        tb_status status = tb_json_parse(c->text, length, NULL, "case.json", &doc);
        if (c->accept) {
            TB_CHECK_MSG(status == TB_OK && doc, "%s: rejected: %s", c->name, tb_error_message());
        } else {
            TB_CHECK_MSG(status == TB_ERR_FORMAT && !doc, "%s: accepted", c->name);
            TB_CHECK_MSG(strstr(tb_error_message(), c->error) != NULL, "%s: message '%s' lacks '%s'", c->name,
                         tb_error_message(), c->error);
            TB_CHECK_MSG(strncmp(tb_error_message(), "case.json: ", 11) == 0, "%s: message '%s' lacks the source",
                         c->name, tb_error_message());
        }
        tb_json_free(doc);
    }
}

static const tb_json_value *parse_ok(const char *text, tb_json_document **doc) {
    tb_status status = tb_json_parse(text, strlen(text), NULL, NULL, doc);
    TB_CHECK_MSG(status == TB_OK, "parse of %s failed: %s", text, tb_error_message());
    return status == TB_OK ? tb_json_root(*doc) : NULL;
}

static void test_values(void) {
    tb_json_document *doc;
    const tb_json_value *root = parse_ok(
        "{\"i\":-7,\"d\":1.5,\"f\":2.0,\"s\":\"h\\u00e9\\u0000x\",\"b\":true,\"n\":null,\"a\":[1,\"two\",3.25],"
        "\"o\":{\"k\":\"v\"},\"big\":9223372036854775808,\"min\":-9223372036854775808,\"e\":-1e-2}",
        &doc);
    if (!root)
        return;
    TB_CHECK(tb_json_type_of(root) == TB_JSON_OBJECT);
    TB_CHECK(tb_json_length(root) == 11);
    int64_t i;
    double d;
    bool b;
    const char *s;
    size_t n;
    TB_CHECK(tb_json_get_int(tb_json_object_get(root, "i"), &i) == TB_OK && i == -7);
    TB_CHECK(tb_json_type_of(tb_json_object_get(root, "i")) == TB_JSON_INT);
    TB_CHECK(tb_json_get_double(tb_json_object_get(root, "i"), &d) == TB_OK && d == -7.0);
    TB_CHECK(tb_json_type_of(tb_json_object_get(root, "d")) == TB_JSON_DOUBLE);
    TB_CHECK(tb_json_get_double(tb_json_object_get(root, "d"), &d) == TB_OK && d == 1.5);
    TB_CHECK(tb_json_get_int(tb_json_object_get(root, "d"), &i) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "expected an integer") != NULL);
    TB_CHECK(tb_json_get_int(tb_json_object_get(root, "f"), &i) == TB_OK && i == 2);
    TB_CHECK(tb_json_get_string(tb_json_object_get(root, "s"), &s, &n) == TB_OK && n == 5 &&
             memcmp(s, "h\xc3\xa9\0x", 5) == 0 && s[5] == '\0');
    TB_CHECK(tb_json_get_int(tb_json_object_get(root, "s"), &i) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "expected an integer, got string") != NULL);
    TB_CHECK(tb_json_get_bool(tb_json_object_get(root, "b"), &b) == TB_OK && b);
    TB_CHECK(tb_json_get_bool(tb_json_object_get(root, "n"), &b) == TB_ERR_FORMAT);
    TB_CHECK(tb_json_type_of(tb_json_object_get(root, "n")) == TB_JSON_NULL);
    TB_CHECK(tb_json_get_string(tb_json_object_get(root, "missing"), &s, &n) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "missing") != NULL);
    const tb_json_value *a = tb_json_object_get(root, "a");
    TB_CHECK(tb_json_type_of(a) == TB_JSON_ARRAY && tb_json_length(a) == 3);
    TB_CHECK(tb_json_get_string(tb_json_array_at(a, 1), &s, &n) == TB_OK && strcmp(s, "two") == 0);
    TB_CHECK(tb_json_array_at(a, 3) == NULL);
    TB_CHECK(tb_json_array_at(root, 0) == NULL);
    TB_CHECK(tb_json_object_get(a, "x") == NULL);
    TB_CHECK(tb_json_length(tb_json_object_get(root, "i")) == 0);
    const tb_json_value *big = tb_json_object_get(root, "big");
    TB_CHECK(tb_json_type_of(big) == TB_JSON_DOUBLE);
    TB_CHECK(tb_json_get_int(big, &i) == TB_ERR_FORMAT); /* 2^63 does not fit */
    TB_CHECK(tb_json_get_int(tb_json_object_get(root, "min"), &i) == TB_OK && i == INT64_MIN);
    TB_CHECK(tb_json_get_double(tb_json_object_get(root, "e"), &d) == TB_OK && d == -0.01);
    const char *key;
    size_t key_length;
    const tb_json_value *value;
    TB_CHECK(tb_json_object_entry(root, 3, &key, &key_length, &value) == TB_OK && strcmp(key, "s") == 0 &&
             key_length == 1 && tb_json_type_of(value) == TB_JSON_STRING);
    TB_CHECK(tb_json_object_entry(root, 11, &key, &key_length, &value) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_json_object_entry(a, 0, &key, &key_length, &value) == TB_ERR_FORMAT);
    tb_json_free(doc);

    root = parse_ok("-0.0", &doc);
    TB_CHECK(root && tb_json_get_double(root, &d) == TB_OK && d == 0.0 && signbit(d));
    tb_json_free(doc);
    tb_json_free(NULL);
}

/* Objects beyond the linear-search size are hash indexed: every key must be found, order preserved. */
static void test_large_object(void) {
    enum { KEYS = 5000 };
    size_t capacity = KEYS * 32;
    char *text = malloc(capacity);
    size_t length = 0;
    text[length++] = '{';
    for (int k = 0; k < KEYS; k++)
        length += (size_t)snprintf(text + length, capacity - length, "%s\"key%d\":%d", k ? "," : "", k * 7, k);
    text[length++] = '}';
    tb_json_document *doc = NULL;
    TB_CHECK(tb_json_parse(text, length, NULL, NULL, &doc) == TB_OK);
    const tb_json_value *root = tb_json_root(doc);
    int found = 0, ordered = 0;
    for (int k = 0; k < KEYS; k++) {
        char key[32];
        snprintf(key, sizeof key, "key%d", k * 7);
        int64_t v;
        found += tb_json_get_int(tb_json_object_get(root, key), &v) == TB_OK && v == k;
        const char *entry_key;
        ordered += tb_json_object_entry(root, (size_t)k, &entry_key, NULL, NULL) == TB_OK && strcmp(entry_key, key) == 0;
    }
    TB_CHECK(found == KEYS && ordered == KEYS);
    TB_CHECK(tb_json_object_get(root, "key1") == NULL && tb_json_object_get(root, "") == NULL);
    tb_json_free(doc);
    /* a duplicate at the end of a big object is found */
    length--;
    length += (size_t)snprintf(text + length, capacity - length, ",\"key700\":1}");
    TB_CHECK(tb_json_parse(text, length, NULL, "big.json", &doc) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "duplicate key \"key700\"") != NULL);
    free(text);
}

/* Numbers must round exactly like strtod (the C library's correctly rounded conversion). */
static void test_numbers_against_strtod(void) {
    static const char *const fixed[] = {"0.1", "0.3", "1.7976931348623157e308", "2.2250738585072014e-308",
                                        "2.2250738585072011e-308", "4.9406564584124654e-324", "9007199254740993",
                                        "123456789012345678901234567890e-10", "0.000000000000000000000000001",
                                        "1.00000000000000011102230246251565404236316680908203125",
                                        "7.0420557077594588669468784357561207962098443483187940792729600000e-310",
                                        "3.14159265358979323846264338327950288", "1e23", "8.589973e9", "-1e-7"};
    uint64_t state = 12345;
    int mismatches = 0, total = 0;
    for (int k = 0; k < 20000 + (int)(sizeof fixed / sizeof fixed[0]); k++) {
        char text[64];
        if (k < (int)(sizeof fixed / sizeof fixed[0])) {
            snprintf(text, sizeof text, "%s", fixed[k]);
        } else {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            double value;
            uint64_t bits = state & 0x7fefffffffffffffull;
            memcpy(&value, &bits, sizeof value);
            int digits = 1 + (int)((state >> 56) % 17);
            snprintf(text, sizeof text, k % 3 ? "%.*e" : "%.*g", digits, value);
        }
        tb_json_document *doc = NULL;
        double parsed;
        if (tb_json_parse(text, strlen(text), NULL, NULL, &doc) != TB_OK ||
            tb_json_get_double(tb_json_root(doc), &parsed) != TB_OK) {
            mismatches++;
            fprintf(stderr, "failed to parse %s: %s\n", text, tb_error_message());
        } else {
            double expected = strtod(text, NULL);
            if (memcmp(&expected, &parsed, sizeof expected) != 0 && !(isinf(expected))) {
                if (mismatches++ < 5)
                    fprintf(stderr, "%s: got %.17g, strtod %.17g\n", text, parsed, expected);
            }
        }
        total++;
        tb_json_free(doc);
    }
    TB_CHECK_MSG(mismatches == 0, "%d of %d numbers differ from strtod", mismatches, total);
}

static void test_limits(void) {
    tb_json_document *doc = NULL;
    tb_json_limits small = {.max_bytes = 8, .max_depth = 0};
    TB_CHECK(tb_json_parse("[1,2,3,4,5]", 11, &small, "x.json", &doc) == TB_ERR_FORMAT);
    TB_CHECK(strstr(tb_error_message(), "more than the limit of 8 bytes") != NULL);
    char deep[400];
    for (int depth = 127; depth <= 130; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        tb_status status = tb_json_parse(deep, 2 * (size_t)depth, NULL, NULL, &doc);
        TB_CHECK_MSG((status == TB_OK) == (depth <= 128), "depth %d: %s", depth, tb_error_message());
        if (status != TB_OK)
            TB_CHECK(strstr(tb_error_message(), "nesting deeper than 128 levels") != NULL);
        tb_json_free(doc);
        doc = NULL;
    }
    tb_json_limits shallow = {.max_bytes = 0, .max_depth = 2};
    TB_CHECK(tb_json_parse("[[1]]", 5, &shallow, NULL, &doc) == TB_OK);
    tb_json_free(doc);
    TB_CHECK(tb_json_parse("[{\"a\":[]}]", 10, &shallow, NULL, &doc) == TB_ERR_FORMAT);
    /* hostile nesting far beyond the limit must fail cleanly, not recurse */
    size_t huge = 1 << 20;
    char *brackets = malloc(huge);
    memset(brackets, '[', huge);
    TB_CHECK(tb_json_parse(brackets, huge, NULL, NULL, &doc) == TB_ERR_FORMAT);
    free(brackets);
    TB_CHECK(tb_json_parse(NULL, 0, NULL, NULL, &doc) == TB_ERR_FORMAT);
    TB_CHECK(tb_json_parse("1", 1, NULL, NULL, NULL) == TB_ERR_INVALID_ARGUMENT);
}

/* Random byte mutations of valid documents: whatever the outcome, no crash or leak (run under ASan). */
static void test_mutations(void) {
    static const char *const seeds[] = {
        "{\"a\":[1,2.5e3,-0,\"x\\u00e9\\ud83d\\ude00\"],\"b\":{\"c\":null,\"d\":true,\"e\":false}}",
        "[\"\xc3\xa9\",{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9}]",
    };
    uint64_t state = 99;
    int accepted = 0;
    for (int round = 0; round < 20000; round++) {
        const char *seed = seeds[round % 2];
        size_t length = strlen(seed);
        char buf[256];
        memcpy(buf, seed, length);
        int edits = 1 + round % 4;
        for (int e = 0; e < edits; e++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            size_t at = (size_t)(state % length);
            switch ((state >> 32) % 3) {
            case 0: buf[at] = (char)(state >> 40); break;
            case 1: length = at; break;
            default: buf[at] = "[]{}\",:\\0e-u"[(state >> 40) % 12];
            }
            if (length == 0)
                break;
        }
        tb_json_document *doc = NULL;
        if (tb_json_parse(buf, length, NULL, NULL, &doc) == TB_OK)
            accepted++;
        tb_json_free(doc);
    }
    TB_CHECK(accepted > 0);
}

/* A tokenizer.json-like document of about 10 MB: vocab object and merges array. */
static char *make_tokenizer_json(size_t *length_out) {
    enum { VOCAB = 210000 };
    size_t capacity = 16u << 20, length = 0;
    char *text = malloc(capacity);
    if (!text)
        return NULL;
    length += (size_t)snprintf(text, capacity, "{\"version\":\"1.0\",\"added_tokens\":[],\"model\":{\"type\":\"BPE\","
                                               "\"vocab\":{");
    for (int k = 0; k < VOCAB; k++)
        length += (size_t)snprintf(text + length, capacity - length, "%s\"\\u0120tok%d\xc3\xa9n\":%d", k ? "," : "", k,
                                   k);
    length += (size_t)snprintf(text + length, capacity - length, "},\"merges\":[");
    for (int k = 0; k < VOCAB; k++)
        length += (size_t)snprintf(text + length, capacity - length, "%s\"\\u0120to k%dxyz\"", k ? "," : "", k);
    length += (size_t)snprintf(text + length, capacity - length, "]}}");
    *length_out = length;
    return text;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_speed(void) {
    size_t length;
    char *text = make_tokenizer_json(&length);
    TB_CHECK(text != NULL);
    if (!text)
        return;
    double best = 1e9;
    for (int run = 0; run < 3; run++) {
        tb_json_document *doc = NULL;
        double start = seconds_now();
        tb_status status = tb_json_parse(text, length, NULL, "tokenizer.json", &doc);
        double elapsed = seconds_now() - start;
        TB_CHECK_MSG(status == TB_OK, "%s", tb_error_message());
        if (elapsed < best)
            best = elapsed;
        if (run == 0 && status == TB_OK) {
            const tb_json_value *vocab = tb_json_object_get(tb_json_object_get(tb_json_root(doc), "model"), "vocab");
            int64_t id;
            TB_CHECK(tb_json_get_int(tb_json_object_get(vocab, "\xc4\xa0tok123456\xc3\xa9n"), &id) == TB_OK &&
                     id == 123456);
        }
        tb_json_free(doc);
    }
    printf("json: parsed a %.1f MB tokenizer-like document in %.1f ms (%.0f MB/s, best of 3)\n", length / 1e6,
           best * 1e3, length / 1e6 / best);
    free(text);
}

int main(void) {
    setlocale(LC_ALL, "C");
    test_cases();
    test_values();
    test_large_object();
    test_numbers_against_strtod();
    test_limits();
    test_mutations();
    test_speed();
    return tb_test_finish("json");
}
