/* Tests of constrained generation's pieces: the JSON prefix recognizer (src/llm/llm_json.h) on valid
 * objects, valid unfinished prefixes and invalid streams (each rejected at the exact byte, whole or split
 * at every point), the raw bytes of tokens (tb_tokenizer_token_bytes) for byte-level and byte-fallback
 * tokenizers, and tb_llm_sampler_sample_allowed: greedy takes the best allowed token, sampling draws from
 * the masked distribution (frequencies against the renormalized softmax), with top-p that keeps no allowed
 * token it falls back to every allowed one, and allowing everything gives tb_llm_sampler_sample's draws. */
#include <math.h>
#include <string.h>

#include "llm/llm_json.h"
#include "tb_test.h"
#include "torchburn/llm.h"
#include "torchburn/tokenizer.h"

/* Bytes accepted before the first rejection (n when all are accepted). */
static size_t accepted_prefix(const char *text, size_t n, tb_json_recognizer *out) {
    tb_json_recognizer r;
    tb_json_recognizer_init(&r);
    for (size_t i = 0; i < n; i++) {
        tb_json_recognizer probe = r;
        if (!tb_json_recognizer_feed(&probe, (const uint8_t *)text + i, 1))
            return i;
        r = probe;
    }
    if (out)
        *out = r;
    return n;
}

/* text is accepted whole and in two pieces split anywhere; complete says whether it is a whole object. */
static void check_valid(const char *text, bool complete) {
    const size_t n = strlen(text);
    tb_json_recognizer r;
    TB_CHECK_MSG(accepted_prefix(text, n, &r) == n, "%s: rejected at byte %zu", text, accepted_prefix(text, n, NULL));
    TB_CHECK_MSG(tb_json_recognizer_is_complete(&r) == complete, "%s: complete should be %d", text, (int)complete);
    for (size_t cut = 0; cut <= n; cut++) {
        tb_json_recognizer_init(&r);
        const bool ok = tb_json_recognizer_feed(&r, (const uint8_t *)text, cut) &&
                        tb_json_recognizer_feed(&r, (const uint8_t *)text + cut, n - cut);
        TB_CHECK_MSG(ok && tb_json_recognizer_is_complete(&r) == complete, "%s split at %zu", text, cut);
    }
}

/* text is rejected exactly at byte `at`. */
static void check_invalid(const char *text, size_t at) {
    const size_t n = strlen(text), got = accepted_prefix(text, n, NULL);
    TB_CHECK_MSG(got == at, "%s: rejected at byte %zu, expected %zu", text, got, at);
    tb_json_recognizer r;
    tb_json_recognizer_init(&r);
    TB_CHECK_MSG(!tb_json_recognizer_feed(&r, (const uint8_t *)text, n), "%s: accepted whole", text);
}

static void test_recognizer(void) {
    check_valid("{}", true);
    check_valid("{ \n\t\r}", true);
    check_invalid(" {}", 0);  /* the object starts the text */
    check_invalid("{ } ", 3); /* nothing may follow it, not even a space */
    check_valid("{\"a\":1}", true);
    check_valid("{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\",\"d\":-0.5e+10,"
                "\"e\":true,\"f\":false,\"g\":[],\"h\":{},\"i\":0,\"j\":1E5,\"k\":12.25e-3,\"l\":-0}",
                true);
    check_valid("{ \"a\" : [ 1 , 2 ] , \"b\" : { } }", true);
    check_valid("{\"\xC3\xA9\":\"\xE2\x82\xAC\xF0\x9F\x98\x80\xED\x9F\xBF\xEF\xBF\xBF\xF4\x8F\xBF\xBF\"}", true);
    check_valid("{\"a\":\"\\uD7FF\\uE000\\uffff\"}", true);
    check_valid("{", false);
    check_valid("{\"a\"", false);
    check_valid("{\"a\":1", false);
    check_valid("{\"a\":tr", false);
    check_valid("{\"a\":\"\xE2\x82", false);
    check_valid("{\"a\":[[[", false);
    check_valid("{\"a\":-", false);
    check_valid("{\"a\":1.5e", false);

    check_invalid("[]", 0);
    check_invalid("1", 0);
    check_invalid("\"x\"", 0);
    check_invalid("{a:1}", 1);
    check_invalid("{\"a\":01}", 6);
    check_invalid("{\"a\":1.}", 7);
    check_invalid("{\"a\":.5}", 5);
    check_invalid("{\"a\":-}", 6);
    check_invalid("{\"a\":1e}", 7);
    check_invalid("{\"a\":+1}", 5);
    check_invalid("{\"a\":tru e}", 8);
    check_invalid("{\"a\":nul}", 8);
    check_invalid("{\"a\":True}", 5);
    check_invalid("{\"a\":1,}", 7);
    check_invalid("{,}", 1);
    check_invalid("{\"a\" 1}", 5);
    check_invalid("{\"a\":1]", 6);
    check_invalid("{\"a\":[1}", 7);
    check_invalid("{\"a\":[1,]}", 8);
    check_invalid("{\"a\"::1}", 5);
    check_invalid("{\"a\":1 2}", 7);
    check_invalid("{}}", 2);
    check_invalid("{}x", 2);
    check_invalid("{\"a\":\"\x01\"}", 6);
    check_invalid("{\"a\":\"\x1f\"}", 6);
    check_invalid("{\"a\":\"\\q\"}", 7);
    check_invalid("{\"a\":\"\\u12G4\"}", 10);
    check_invalid("{\"a\":\"\\ud800\"}", 9); /* surrogate escapes are refused */
    check_invalid("{\"a\":\"\\uDFFF\"}", 9);
    check_invalid("{\"a\":\"\xC0\xAF\"}", 6);        /* overlong lead byte */
    check_invalid("{\"a\":\"\xE0\x80\xAF\"}", 7);    /* overlong three-byte form */
    check_invalid("{\"a\":\"\xED\xA0\x80\"}", 7);    /* encoded surrogate */
    check_invalid("{\"a\":\"\xF4\x90\x80\x80\"}", 7); /* above U+10FFFF */
    check_invalid("{\"a\":\"\xF5\x80\x80\x80\"}", 6);
    check_invalid("{\"a\":\"\x80\"}", 6);            /* stray continuation byte */
    check_invalid("{\"a\":\"\xC3\"}", 7);            /* character cut by the quote */
    check_invalid("{\"a\":\"\xE2\x82\x41\"}", 8);

    /* depth: 128 open containers are fine, the 129th is refused */
    char deep[300];
    size_t n = 0;
    deep[n++] = '{';
    deep[n++] = '"';
    deep[n++] = 'a';
    deep[n++] = '"';
    deep[n++] = ':';
    for (int i = 1; i < TB_JSON_MAX_DEPTH; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    check_valid(deep, false);
    for (int i = 1; i < TB_JSON_MAX_DEPTH; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    deep[n] = '\0';
    check_valid(deep, true);
    n = 5 + TB_JSON_MAX_DEPTH - 1;
    deep[n++] = '[';
    deep[n] = '\0';
    check_invalid(deep, n - 1);

    /* whitespace runs are capped */
    char spaces[100] = "{";
    memset(spaces + 1, ' ', TB_JSON_MAX_WHITESPACE);
    strcpy(spaces + 1 + TB_JSON_MAX_WHITESPACE, "}");
    check_valid(spaces, true);
    spaces[1 + TB_JSON_MAX_WHITESPACE] = ' ';
    strcpy(spaces + 2 + TB_JSON_MAX_WHITESPACE, "}");
    check_invalid(spaces, 1 + TB_JSON_MAX_WHITESPACE);
}

/* ---- token bytes ---- */

static tb_tokenizer *load(const char *json) {
    tb_tokenizer *tok = NULL;
    const tb_status status = tb_tokenizer_load_from_memory(json, strlen(json), NULL, 0, &tok);
    TB_CHECK_MSG(status == TB_OK, "tokenizer: %s", tb_error_message());
    return tok;
}

static void check_token_bytes(const tb_tokenizer *tok, const char *token, const char *want, size_t want_length) {
    const int32_t id = tb_tokenizer_token_to_id(tok, token, strlen(token));
    tb_tokenizer_string s = {0};
    TB_CHECK(id >= 0 && tb_tokenizer_token_bytes(tok, id, &s) == TB_OK);
    TB_CHECK_MSG(s.length == want_length && memcmp(s.data, want, want_length) == 0, "token %s: %zu bytes", token,
                 s.length);
    tb_tokenizer_string_free(&s);
}

static void test_token_bytes(void) {
    /* byte level: "Ġ" is the space byte, "âĤ" the first two bytes of the euro sign (kept raw) */
    tb_tokenizer *tok = load("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xC4\xA0\":0,\"{\":1,\"\xC4\xA0{\":2,"
                             "\"\xC3\xA2\":3,\"\xC4\xA4\":4,\"\xC3\xA2\xC4\xA4\":5},\"merges\":[\"\xC4\xA0 {\","
                             "\"\xC3\xA2 \xC4\xA4\"]},\"decoder\":{\"type\":\"ByteLevel\"}}");
    if (tok) {
        check_token_bytes(tok, "\xC4\xA0{", " {", 2);
        check_token_bytes(tok, "\xC3\xA2\xC4\xA4", "\xE2\x82", 2);
        tb_tokenizer_string s = {0};
        TB_CHECK(tb_tokenizer_token_bytes(tok, 77, &s) == TB_OK && s.length == 0); /* no such id */
        tb_tokenizer_string_free(&s);
        tb_tokenizer_free(tok);
    }
    /* Llama-style: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0); inside a text the space stays */
    tok = load("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"\xE2\x96\x81\":0,\"a\":1,"
               "\"\xE2\x96\x81\x61\":2,\"<0x7B>\":3,\"<0xE2>\":4},\"merges\":[\"\xE2\x96\x81 a\"]},"
               "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
               "\"\xE2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
               "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}}");
    if (tok) {
        check_token_bytes(tok, "\xE2\x96\x81\x61", " a", 2);
        check_token_bytes(tok, "<0x7B>", "{", 1);
        check_token_bytes(tok, "<0xE2>", "\xE2", 1);
        tb_tokenizer_free(tok);
    }
}

/* ---- sampling restricted to allowed tokens ---- */

enum { V = 8 };

static bool allow_even(void *context, int32_t token) {
    (void)context;
    return token % 2 == 0;
}
static bool allow_all(void *context, int32_t token) {
    (void)context;
    (void)token;
    return true;
}
static bool allow_none(void *context, int32_t token) {
    (void)context;
    (void)token;
    return false;
}
static bool allow_one(void *context, int32_t token) { return token == *(const int32_t *)context; }

static tb_llm_sampler *sampler(float temperature, float top_p, uint64_t seed) {
    tb_llm_sampling p;
    tb_llm_sampling_default(&p);
    p.temperature = temperature;
    p.top_p = top_p;
    p.seed = seed;
    tb_llm_sampler *s = NULL;
    TB_CHECK(tb_llm_sampler_new(V, &p, &s) == TB_OK);
    return s;
}

/* 200,000 draws allowing even ids only have the frequencies of softmax(logits / temperature) restricted to
 * even ids and renormalized (within 5 standard deviations). */
static void check_even_frequencies(const float *logits, float temperature, float top_p, const char *label) {
    enum { DRAWS = 200000 };
    tb_llm_sampler *s = sampler(temperature, top_p, 42);
    double want[V] = {0}, total = 0.0;
    for (int i = 0; i < V; i += 2)
        total += want[i] = exp((double)logits[i] / temperature);
    int counts[V] = {0};
    int32_t token = -1;
    for (int d = 0; d < DRAWS; d++) {
        TB_CHECK(tb_llm_sampler_sample_allowed(s, logits, NULL, 0, allow_even, NULL, &token) == TB_OK);
        counts[token]++;
    }
    for (int i = 0; i < V; i++) {
        const double p = want[i] / total, got = (double)counts[i] / DRAWS, sigma = sqrt(p * (1 - p) / DRAWS);
        TB_CHECK_MSG(fabs(got - p) <= 5 * sigma + 1e-12, "%s, token %d: frequency %.4f, expected %.4f", label, i,
                     got, p);
    }
    tb_llm_sampler_free(s);
}

static void test_sampling(void) {
    const float logits[V] = {0.5f, 3.0f, 1.0f, 2.5f, -1.0f, 0.0f, 1.5f, 2.0f};
    int32_t token = -1;
    /* greedy: the best allowed token (odd ids 1, 3, 7 outrank it) */
    tb_llm_sampler *s = sampler(0.0f, 1.0f, 1);
    TB_CHECK(tb_llm_sampler_sample_allowed(s, logits, NULL, 0, allow_even, NULL, &token) == TB_OK && token == 6);
    const int32_t only = 4; /* the lowest logit: found after rejecting every other token */
    TB_CHECK(tb_llm_sampler_sample_allowed(s, logits, NULL, 0, allow_one, (void *)&only, &token) == TB_OK &&
             token == 4);
    TB_CHECK(tb_llm_sampler_sample_allowed(s, logits, NULL, 0, allow_none, NULL, &token) == TB_ERR_INVALID_ARGUMENT);
    tb_llm_sampler_free(s);

    /* sampling: frequencies of the masked, renormalized softmax at temperature 0.8 */
    check_even_frequencies(logits, 0.8f, 1.0f, "temperature 0.8");
    /* top-p 0.5 keeps ids 1 and 3 only, none allowed: the draw is over every allowed token */
    check_even_frequencies(logits, 1.0f, 0.5f, "top-p fallback");

    /* allowing everything changes nothing: the same draws as the plain sampler with the same seed */
    tb_llm_sampler *a = sampler(1.0f, 1.0f, 99), *b = sampler(1.0f, 1.0f, 99);
    bool same = true;
    for (int d = 0; d < 2000; d++) {
        int32_t x = -1, y = -2;
        same &= tb_llm_sampler_sample(a, logits, NULL, 0, &x) == TB_OK &&
                tb_llm_sampler_sample_allowed(b, logits, NULL, 0, allow_all, NULL, &y) == TB_OK && x == y;
    }
    TB_CHECK(same);
    tb_llm_sampler_free(a);
    tb_llm_sampler_free(b);
}

int main(void) {
    test_recognizer();
    test_token_bytes();
    test_sampling();
    return tb_test_finish("llm_json");
}
