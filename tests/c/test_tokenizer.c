/* Tests of the tokenizer layer against committed fixtures whose expected ids and texts come from the HF
 * `tokenizers` package (tests/data/tokenizer/make_fixtures.py --write-c-fixture): encode/decode parity,
 * invalid UTF-8, streaming decode of byte-fallback sequences, malformed files, concurrent encoding.
 * Run from the repository root (ctest sets the working directory). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "torchburn/json.h"
#include "torchburn/tokenizer.h"

static char *read_all(const char *path, size_t *length) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    if (data) {
        data[n] = '\0';
        *length = (size_t)n;
    }
    return data;
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
}

/* Every case of <name>.cases.json: encode(text) == ids and decode(ids) == decoded. */
static void check_cases(const tb_tokenizer *tok, const char *cases_path) {
    size_t length;
    char *text = read_all(cases_path, &length);
    TB_CHECK_MSG(text != NULL, "cannot read %s", cases_path);
    if (!text)
        return;
    tb_json_document *doc = NULL;
    TB_CHECK(tb_json_parse(text, length, NULL, cases_path, &doc) == TB_OK);
    const tb_json_value *cases = tb_json_root(doc);
    tb_token_ids ids = {0};
    for (size_t i = 0; cases && i < tb_json_length(cases); i++) {
        const tb_json_value *c = tb_json_array_at(cases, i);
        const char *input, *decoded;
        size_t input_length, decoded_length;
        if (tb_json_get_string(tb_json_object_get(c, "text"), &input, &input_length) != TB_OK ||
            tb_json_get_string(tb_json_object_get(c, "decoded"), &decoded, &decoded_length) != TB_OK) {
            TB_CHECK_MSG(0, "malformed case %zu", i);
            continue;
        }
        const tb_json_value *expected = tb_json_object_get(c, "ids");
        ids.count = 0;
        TB_CHECK(tb_tokenizer_encode(tok, input, input_length, true, &ids) == TB_OK);
        bool same = ids.count == tb_json_length(expected);
        for (size_t k = 0; same && k < ids.count; k++) {
            int64_t want;
            same = tb_json_get_int(tb_json_array_at(expected, k), &want) == TB_OK && want == ids.ids[k];
        }
        if (!same) {
            fprintf(stderr, "%s: ids differ for input \"", cases_path);
            print_escaped(input, input_length);
            fprintf(stderr, "\" (got %zu ids, want %zu)\n", ids.count, tb_json_length(expected));
        }
        TB_CHECK(same);
        tb_tokenizer_string out = {0};
        TB_CHECK(tb_tokenizer_decode(tok, ids.ids, ids.count, false, &out) == TB_OK);
        bool same_text = out.length == decoded_length && memcmp(out.data, decoded, decoded_length) == 0;
        if (!same_text) {
            fprintf(stderr, "%s: decode differs for input \"", cases_path);
            print_escaped(input, input_length);
            fprintf(stderr, "\": got \"");
            print_escaped(out.data, out.length);
            fprintf(stderr, "\"\n");
        }
        TB_CHECK(same_text);
        tb_tokenizer_string_free(&out);
    }
    tb_token_ids_free(&ids);
    tb_json_free(doc);
    free(text);
}

static bool same_ids(const tb_tokenizer *tok, const char *a, size_t an, const char *b, size_t bn) {
    tb_token_ids x = {0}, y = {0};
    bool ok = tb_tokenizer_encode(tok, a, an, false, &x) == TB_OK && tb_tokenizer_encode(tok, b, bn, false, &y) == TB_OK;
    ok = ok && x.count == y.count && memcmp(x.ids, y.ids, x.count * sizeof *x.ids) == 0;
    tb_token_ids_free(&x);
    tb_token_ids_free(&y);
    return ok;
}

/* Invalid UTF-8 is encoded as its U+FFFD replacement (maximal subparts, like Python's "replace"). */
static void check_invalid_utf8(const tb_tokenizer *tok) {
    static const struct {
        const char *raw, *replaced;
    } cases[] = {
        {"a\xff" "b", "a\xEF\xBF\xBD" "b"},
        {"\xE2\x82", "\xEF\xBF\xBD"},                          /* truncated 3-byte sequence: one U+FFFD */
        {"\xE2\x82x", "\xEF\xBF\xBDx"},
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate: three */
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xF4\x90\x80\x80 z", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        TB_CHECK_MSG(same_ids(tok, cases[i].raw, strlen(cases[i].raw), cases[i].replaced, strlen(cases[i].replaced)),
                     "invalid UTF-8 case %zu", i);
    /* every single byte value, alone and between letters: never an error */
    tb_token_ids ids = {0};
    for (int b = 0; b < 256; b++) {
        char s[3] = {'a', (char)b, 'z'};
        TB_CHECK(tb_tokenizer_encode(tok, s, 3, true, &ids) == TB_OK);
        TB_CHECK(tb_tokenizer_encode(tok, s + 1, 1, true, &ids) == TB_OK);
    }
    tb_token_ids_free(&ids);
}

/* "€" as three byte-fallback tokens: the stream holds back until the character is complete. */
static void check_stream_byte_fallback(const tb_tokenizer *tok) {
    int32_t e2 = tb_tokenizer_token_to_id(tok, "<0xE2>", 6), x82 = tb_tokenizer_token_to_id(tok, "<0x82>", 6),
            xac = tb_tokenizer_token_to_id(tok, "<0xAC>", 6), a = tb_tokenizer_token_to_id(tok, "\xE2\x96\x81" "a", 4);
    TB_CHECK(e2 >= 0 && x82 >= 0 && xac >= 0 && a >= 0);
    tb_decode_stream *stream = NULL;
    TB_CHECK(tb_decode_stream_new(tok, false, &stream) == TB_OK);
    if (!stream)
        return;
    const char *piece;
    size_t n;
    TB_CHECK(tb_decode_stream_step(stream, a, &piece, &n) == TB_OK && n == 1 && memcmp(piece, "a", 1) == 0);
    TB_CHECK(tb_decode_stream_step(stream, e2, &piece, &n) == TB_OK && n == 0);
    TB_CHECK(tb_decode_stream_step(stream, x82, &piece, &n) == TB_OK && n == 0);
    TB_CHECK(tb_decode_stream_step(stream, xac, &piece, &n) == TB_OK && n == 3 && memcmp(piece, "\xE2\x82\xAC", 3) == 0);
    TB_CHECK(tb_decode_stream_step(stream, a, &piece, &n) == TB_OK && n == 2 && memcmp(piece, " a", 2) == 0);
    /* an unfinished character comes out of flush as U+FFFD */
    TB_CHECK(tb_decode_stream_step(stream, e2, &piece, &n) == TB_OK && n == 0);
    TB_CHECK(tb_decode_stream_flush(stream, &piece, &n) == TB_OK && n == 3 && memcmp(piece, "\xEF\xBF\xBD", 3) == 0);
    tb_decode_stream_free(stream);
}

static void check_load_error(const char *json, tb_status want, const char *needle) {
    tb_tokenizer *tok = NULL;
    tb_status st = tb_tokenizer_load_from_memory(json, strlen(json), NULL, 0, &tok);
    TB_CHECK_MSG(st == want, "%s: got %s (%s)", json, tb_status_name(st), tb_error_message());
    TB_CHECK_MSG(strstr(tb_error_message(), needle) != NULL, "message '%s' lacks '%s'", tb_error_message(), needle);
    TB_CHECK(tok == NULL);
    tb_tokenizer_free(tok);
}

static void check_malformed(void) {
#define MODEL(vocab, merges) "\"model\":{\"type\":\"BPE\",\"vocab\":" vocab ",\"merges\":" merges "}"
    check_load_error("{", TB_ERR_FORMAT, "tokenizer.json");
    check_load_error("[]", TB_ERR_FORMAT, "top level");
    check_load_error("{\"version\":\"1.0\"}", TB_ERR_FORMAT, "model");
    check_load_error("{" MODEL("{\"a\":0,\"b\":1}", "[\"a c\"]") "}", TB_ERR_FORMAT, "'c'");
    check_load_error("{" MODEL("{\"a\":0,\"b\":1}", "[\"a b\"]") "}", TB_ERR_FORMAT, "'ab'");
    check_load_error("{" MODEL("{\"a\":\"0\"}", "[]") "}", TB_ERR_FORMAT, "'a'");
    check_load_error("{" MODEL("{\"a\":-1}", "[]") "}", TB_ERR_FORMAT, "'a'");
    check_load_error("{" MODEL("{\"a\":0}", "[[\"a\"]]") "}", TB_ERR_FORMAT, "merge 0");
    check_load_error("{" MODEL("[]", "[]") "}", TB_ERR_FORMAT, "vocab");
    check_load_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", TB_ERR_UNSUPPORTED, "Unigram");
    check_load_error("{" MODEL("{}", "[]") ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},"
                     "\"behavior\":\"Isolated\",\"invert\":false}}",
                     TB_ERR_UNSUPPORTED, "\\w+");
    check_load_error("{" MODEL("{}", "[]") ",\"normalizer\":{\"type\":\"Lowercase\"}}", TB_ERR_UNSUPPORTED, "Lowercase");
    check_load_error("{" MODEL("{}", "[]") ",\"decoder\":{\"type\":\"WordPiece\"}}", TB_ERR_UNSUPPORTED, "WordPiece");
    check_load_error("{" MODEL("{}", "[]") ",\"normalizer\":[]}", TB_ERR_FORMAT, "normalizer");
    check_load_error("{" MODEL("{}", "[]") ",\"added_tokens\":[{\"id\":0}]}", TB_ERR_FORMAT, "content");
    check_load_error("{" MODEL("{}", "[]") ",\"version\":\"2.0\"}", TB_ERR_FORMAT, "version");
#undef MODEL
    tb_tokenizer *tok = NULL;
    TB_CHECK(tb_tokenizer_load("/nonexistent/tokenizer.json", NULL, &tok) == TB_ERR_IO && tok == NULL);
    TB_CHECK(tb_tokenizer_load_directory("/nonexistent", &tok) == TB_ERR_IO && tok == NULL);

    /* a minimal valid file: unknown characters without unk_token are dropped, as HF does */
    const char *json = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}";
    TB_CHECK(tb_tokenizer_load_from_memory(json, strlen(json), NULL, 0, &tok) == TB_OK);
    if (tok) {
        tb_token_ids ids = {0};
        TB_CHECK(tb_tokenizer_encode(tok, "abxab", 5, true, &ids) == TB_OK);
        TB_CHECK(ids.count == 2 && ids.ids[0] == 2 && ids.ids[1] == 2);
        TB_CHECK(tb_tokenizer_vocab_size(tok) == 3 && tb_tokenizer_id_limit(tok) == 3);
        TB_CHECK(tb_tokenizer_bos_id(tok) == -1 && tb_tokenizer_chat_template(tok) == NULL);
        tb_tokenizer_string s = {0};
        int32_t unknown[] = {2, 99, -5, 0};
        TB_CHECK(tb_tokenizer_decode(tok, unknown, 4, false, &s) == TB_OK && strcmp(s.data, "ab a") == 0);
        tb_tokenizer_string_free(&s);
        tb_token_ids_free(&ids);
        tb_tokenizer_free(tok);
    }
}

typedef struct thread_job {
    const tb_tokenizer *tok;
    const char *text;
    size_t length;
    tb_token_ids result;
    tb_status status;
} thread_job;

static void *encode_thread(void *arg) {
    thread_job *job = arg;
    for (int r = 0; r < 20 && job->status == TB_OK; r++) {
        job->result.count = 0;
        job->status = tb_tokenizer_encode(job->tok, job->text, job->length, true, &job->result);
    }
    return NULL;
}

/* Several threads share one tokenizer (and its word cache) and must get the single-thread ids. */
static void check_threads(const tb_tokenizer *tok) {
    static const char text[] = "The quick brown fox jumps over the lazy dog; naïve café 1234 😀 <|im_start|>x<|im_end|> "
                               "Sphinx of black quartz, judge my vow. Pack my box with five dozen liquor jugs.";
    tb_token_ids reference = {0};
    TB_CHECK(tb_tokenizer_encode(tok, text, sizeof text - 1, true, &reference) == TB_OK);
    thread_job jobs[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){tok, text, sizeof text - 1, {0}, TB_OK};
        pthread_create(&threads[i], NULL, encode_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        TB_CHECK(jobs[i].status == TB_OK && jobs[i].result.count == reference.count &&
                 memcmp(jobs[i].result.ids, reference.ids, reference.count * sizeof(int32_t)) == 0);
        tb_token_ids_free(&jobs[i].result);
    }
    tb_token_ids_free(&reference);
}

int main(void) {
    tb_tokenizer *qwen = NULL, *llama = NULL;
    TB_CHECK(tb_tokenizer_load("tests/data/tokenizer/tiny_qwen2.json", NULL, &qwen) == TB_OK);
    TB_CHECK(tb_tokenizer_load("tests/data/tokenizer/tiny_llama2.json", NULL, &llama) == TB_OK);
    if (!qwen || !llama) {
        fprintf(stderr, "cannot load the fixtures: %s\n", tb_error_message());
        return tb_test_finish("tokenizer");
    }
    check_cases(qwen, "tests/data/tokenizer/tiny_qwen2.cases.json");
    check_cases(llama, "tests/data/tokenizer/tiny_llama2.cases.json");
    check_invalid_utf8(qwen);
    check_invalid_utf8(llama);
    check_stream_byte_fallback(llama);
    check_malformed();
    check_threads(qwen);
    check_threads(llama);
    TB_CHECK(strcmp(tb_tokenizer_unicode_version(), "16.0.0") == 0);
    tb_tokenizer_free(qwen);
    tb_tokenizer_free(llama);
    return tb_test_finish("tokenizer");
}
