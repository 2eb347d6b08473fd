/* The tokenizer layer: loads a HuggingFace `tokenizer.json` (BPE, byte-level or Metaspace/byte-fallback
 * flavour, with its normalizer, pre-tokenizer, added tokens, post-processor and decoder) and encodes and
 * decodes exactly like the `tokenizers` package does. No Python needed at run time.
 *
 * Thread safety: a loaded tb_tokenizer is immutable except for an internal word cache guarded by a
 * lock, so encode/decode may be called from many threads at once. A tb_decode_stream belongs to one
 * thread at a time. */
#ifndef TORCHBURN_TOKENIZER_H
#define TORCHBURN_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tb_tokenizer tb_tokenizer;         /* opaque, immutable after loading */
typedef struct tb_decode_stream tb_decode_stream; /* opaque incremental decoder */

/* A growable array of token ids filled by tb_tokenizer_encode. Zero-initialise it
 * (`tb_token_ids ids = {0};`), reuse it across calls, release it with tb_token_ids_free. */
typedef struct tb_token_ids {
    int32_t *ids;
    size_t count;
    size_t capacity;
} tb_token_ids;

/* A NUL-terminated UTF-8 string owned by the caller (release with tb_tokenizer_string_free). */
typedef struct tb_tokenizer_string {
    char *data;
    size_t length; /* bytes, without the terminating NUL */
} tb_tokenizer_string;

/* Loads `tokenizer_json_path` and, when `tokenizer_config_path` is not NULL and the file exists,
 * tokenizer_config.json (bos/eos tokens, add_bos_token/add_eos_token, extra added tokens, chat
 * template). Errors: TB_ERR_IO (unreadable file), TB_ERR_FORMAT (malformed JSON, missing model,
 * merges naming unknown tokens, wrong types), TB_ERR_UNSUPPORTED (a component or regex pattern this
 * implementation does not know; the message names it). */
TB_API TB_NODISCARD tb_status tb_tokenizer_load(const char *tokenizer_json_path, const char *tokenizer_config_path,
                                                tb_tokenizer **out);

/* Loads `directory`/tokenizer.json plus tokenizer_config.json and chat_template.jinja when present
 * (like transformers' from_pretrained on a local folder). */
TB_API TB_NODISCARD tb_status tb_tokenizer_load_directory(const char *directory, tb_tokenizer **out);

/* Same as tb_tokenizer_load from in-memory JSON texts; `config_json` may be NULL. */
TB_API TB_NODISCARD tb_status tb_tokenizer_load_from_memory(const char *tokenizer_json, size_t tokenizer_json_length,
                                                            const char *config_json, size_t config_json_length,
                                                            tb_tokenizer **out);

TB_API void tb_tokenizer_free(tb_tokenizer *tokenizer);

/* Encodes `length` bytes of `text` and APPENDS the ids to `out` (set out->count = 0 first to reuse
 * it). Text that is not valid UTF-8 is first decoded with U+FFFD for each maximal invalid subsequence
 * (Python's errors="replace"), so any byte string is accepted. `add_special_tokens` applies the
 * post-processor (e.g. a leading BOS). */
TB_API TB_NODISCARD tb_status tb_tokenizer_encode(const tb_tokenizer *tokenizer, const char *text, size_t length,
                                                  bool add_special_tokens, tb_token_ids *out);

TB_API void tb_token_ids_free(tb_token_ids *ids);

/* Decodes ids to UTF-8 text through the tokenizer's decoder. Unknown ids are skipped, as HF does;
 * `skip_special_tokens` drops added tokens marked special. The result is always valid UTF-8 (byte
 * sequences that do not form characters become U+FFFD). */
TB_API TB_NODISCARD tb_status tb_tokenizer_decode(const tb_tokenizer *tokenizer, const int32_t *ids, size_t count,
                                                  bool skip_special_tokens, tb_tokenizer_string *out);

/* The bytes token `id` adds to a decoded text in the middle of it: the decoder chain applied to that token
 * alone, without start-of-text rules (Metaspace's dropped first space, Strip of the fused text) and with
 * incomplete UTF-8 kept as raw bytes (a byte-level token holding half a character gives that half), e.g.
 * "Ġ{" -> " {", "<0x7B>" -> "{". Empty for an id with no token. Used to constrain generation (JSON). */
TB_API TB_NODISCARD tb_status tb_tokenizer_token_bytes(const tb_tokenizer *tokenizer, int32_t id,
                                                       tb_tokenizer_string *out);
TB_API void tb_tokenizer_string_free(tb_tokenizer_string *string);

/* Incremental decoding for generation: feed one id at a time and get the new text, if any. A step
 * never returns a partial UTF-8 character: bytes of an unfinished character (e.g. the first of three
 * byte-fallback tokens) are held back (the step returns an empty piece) and come out together with
 * the step that completes them. Same results as tokenizers' DecodeStream. */
TB_API TB_NODISCARD tb_status tb_decode_stream_new(const tb_tokenizer *tokenizer, bool skip_special_tokens,
                                                   tb_decode_stream **out);
/* `*piece` points to `*piece_length` bytes (NUL-terminated) valid until the next call on `stream`;
 * length 0 means nothing new to show yet. */
TB_API TB_NODISCARD tb_status tb_decode_stream_step(tb_decode_stream *stream, int32_t id, const char **piece,
                                                    size_t *piece_length);
/* Returns text still held back at the end of a stream (incomplete characters as U+FFFD) and resets
 * the stream. */
TB_API TB_NODISCARD tb_status tb_decode_stream_flush(tb_decode_stream *stream, const char **piece,
                                                     size_t *piece_length);
TB_API void tb_decode_stream_free(tb_decode_stream *stream);

/* Number of distinct token strings, added tokens included (tokenizers' get_vocab_size(True)). */
TB_API size_t tb_tokenizer_vocab_size(const tb_tokenizer *tokenizer);
/* One past the largest id in use (the embedding table needs at least this many rows). */
TB_API size_t tb_tokenizer_id_limit(const tb_tokenizer *tokenizer);

/* The id of a token string (added tokens first, then the model vocabulary), or -1. */
TB_API int32_t tb_tokenizer_token_to_id(const tb_tokenizer *tokenizer, const char *token, size_t length);
/* The string of an id, or NULL when no token has it. The pointer lives as long as the tokenizer. */
TB_API const char *tb_tokenizer_id_to_token(const tb_tokenizer *tokenizer, int32_t id, size_t *length);
/* Whether `id` is an added token marked special (skipped by skip_special_tokens). */
TB_API bool tb_tokenizer_is_special(const tb_tokenizer *tokenizer, int32_t id);

/* bos/eos ids from tokenizer_config.json (bos_token / eos_token), -1 when absent or unknown. */
TB_API int32_t tb_tokenizer_bos_id(const tb_tokenizer *tokenizer);
TB_API int32_t tb_tokenizer_eos_id(const tb_tokenizer *tokenizer);
/* The chat template (Jinja source) from chat_template.jinja or tokenizer_config.json, or NULL. */
TB_API const char *tb_tokenizer_chat_template(const tb_tokenizer *tokenizer);

/* The Unicode versions of the generated tables: character classes and normalization data. */
TB_API const char *tb_tokenizer_unicode_version(void);

#ifdef __cplusplus
}
#endif
#endif
