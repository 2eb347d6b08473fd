/* libFuzzer harness for the tokenizer: arbitrary bytes are encoded with a byte-level (Qwen2-like) and a
 * Metaspace/byte-fallback (Llama-2-like) tokenizer, decoded back, streamed, and also read as raw ids
 * (including unknown and negative ones) for decoding. Nothing may crash or leak; a successful decode is
 * always valid UTF-8. Fixtures come from tests/data/tokenizer next to this source tree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchburn/tokenizer.h"

static tb_tokenizer *tokenizers[2];

static void load_fixtures(void) {
    static const char *names[2] = {"tiny_qwen2.json", "tiny_llama2.json"};
    const char *here = __FILE__; /* <root>/fuzz/fuzz_tokenizer.c */
    const char *cut = strstr(here, "fuzz/fuzz_tokenizer.c");
    int root_length = cut ? (int)(cut - here) : 0;
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%.*stests/data/tokenizer/%s", root_length, here, names[i]);
        if (tb_tokenizer_load(path, NULL, &tokenizers[i]) != TB_OK) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s\n", path);
            abort(); /* a broken harness setup, not a finding */
        }
    }
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tokenizers[0])
        load_fixtures();
    for (int t = 0; t < 2; t++) {
        const tb_tokenizer *tok = tokenizers[t];
        tb_token_ids ids = {0};
        if (tb_tokenizer_encode(tok, (const char *)data, size, (size & 1) != 0, &ids) != TB_OK)
            __builtin_trap(); /* encoding never fails on any input */
        for (size_t i = 0; i < ids.count; i++)
            if (ids.ids[i] < 0 || (size_t)ids.ids[i] >= tb_tokenizer_id_limit(tok))
                __builtin_trap();
        tb_tokenizer_string text = {0};
        if (tb_tokenizer_decode(tok, ids.ids, ids.count, (size & 2) != 0, &text) != TB_OK ||
            !valid_utf8(text.data, text.length))
            __builtin_trap();
        tb_tokenizer_string_free(&text);
        tb_decode_stream *stream = NULL;
        if (tb_decode_stream_new(tok, false, &stream) != TB_OK)
            __builtin_trap();
        for (size_t i = 0; i < ids.count && i < 256; i++) {
            const char *piece;
            size_t n;
            if (tb_decode_stream_step(stream, ids.ids[i], &piece, &n) != TB_OK || !valid_utf8(piece, n))
                __builtin_trap();
        }
        tb_decode_stream_free(stream);
        /* the raw bytes as ids */
        size_t count = size / 4;
        int32_t *raw = malloc((count ? count : 1) * sizeof *raw);
        if (raw) {
            memcpy(raw, data, count * sizeof *raw);
            if (tb_tokenizer_decode(tok, raw, count, false, &text) != TB_OK || !valid_utf8(text.data, text.length))
                __builtin_trap();
            tb_tokenizer_string_free(&text);
            free(raw);
        }
        tb_token_ids_free(&ids);
    }
    return 0;
}
