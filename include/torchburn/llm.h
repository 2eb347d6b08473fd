/* The LLM layer: llama-family decoder models (Qwen2/2.5/3, Llama 2/3, Mistral) loaded from a HuggingFace
 * folder (config.json + safetensors), their weights kept in one run format (f32, int8 per row or int4
 * grouped), a forward pass with a KV cache, a sampler and a generation loop with a token callback.
 *
 * Objects: a tb_llm_model holds the config and the weights and is immutable after loading (any number of
 * sessions and threads may share it); a tb_llm_session holds one sequence's KV cache, its token history
 * and scratch, and is used by one thread at a time. Shape letters: T tokens, C hidden size, D head dim,
 * Hq / Hkv query / key-value heads, I intermediate size, V vocabulary. */
#ifndef TORCHBURN_LLM_H
#define TORCHBURN_LLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchburn/hf_config.h"
#include "torchburn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run format of the linear layers (every projection, the LM head, and the embedding table). */
typedef enum tb_llm_quant {
    TB_LLM_QUANT_NONE = 0, /* f32 (f16/bf16 checkpoints are converted once at load) */
    TB_LLM_QUANT_INT8,     /* int8 per output row, f32 scales (torchburn/quant.h) */
    TB_LLM_QUANT_INT4,     /* int4 grouped along K, f32 scales */
    TB_LLM_QUANT_COUNT
} tb_llm_quant;

/* "none", "int8", "int4"; and the reverse (TB_ERR_INVALID_ARGUMENT naming the value). */
TB_API const char *tb_llm_quant_name(tb_llm_quant quant);
TB_API TB_NODISCARD tb_status tb_llm_quant_from_name(const char *name, tb_llm_quant *out);

/* Progress of loading: `done` out of `total` weight elements converted or quantized so far. Called on
 * the loading thread. */
typedef void (*tb_llm_progress_fn)(void *context, int64_t done, int64_t total);

typedef struct tb_llm_load_options {
    tb_llm_quant quant;
    int64_t group_size; /* int4 group along K: 32, 64, 128 or 256; 0 means 64 */
    /* Quantized-weight cache (int8/int4 only; NULL = none): a safetensors file. When it exists, its
     * metadata matches (format version, cache_key, quant, group size, shapes) and every tensor matches its
     * BLAKE3 digest, its tensors are copied into the model; otherwise the weights are quantized from the
     * checkpoint and the file is (re)written. Damage and a failed write are not errors: see
     * tb_llm_model_info.cache_state and cache_message. */
    const char *cache_path;
    const char *cache_key; /* any string identifying the source files and settings; NULL = "" */
    /* int4/int8 weights multiply activations quantized to int8 in blocks of 32 along K (scale max|x|/127
     * per block, as llama.cpp's Q8_0) where the CPU has integer dot-product kernels (AVX-512 VNNI), and f32
     * activations elsewhere. true forces f32 activations everywhere (slower, exact W4A32/W8A32). */
    bool exact_activations;
    tb_llm_progress_fn progress;
    void *progress_context;
} tb_llm_load_options;

typedef struct tb_llm_model tb_llm_model;
typedef struct tb_llm_session tb_llm_session;

/* Loads `model_dir` (config.json, generation_config.json when present, model.safetensors or a sharded
 * model.safetensors.index.json). Every tensor's shape is checked against config.json.
 * Errors: TB_ERR_IO (missing/unreadable files), TB_ERR_FORMAT (malformed files, unsupported model_type),
 * TB_ERR_SHAPE (a tensor disagrees with config.json: the message names it and both shapes),
 * TB_ERR_INVALID_ARGUMENT (bad options), TB_ERR_OUT_OF_MEMORY. */
TB_API TB_NODISCARD tb_status tb_llm_model_load(const char *model_dir, const tb_llm_load_options *options,
                                                tb_llm_model **out);
TB_API void tb_llm_model_free(tb_llm_model *model);

TB_API const tb_hf_config *tb_llm_model_config(const tb_llm_model *model);

typedef enum tb_llm_cache_state {
    TB_LLM_CACHE_UNUSED = 0, /* no cache path, or quant none */
    TB_LLM_CACHE_HIT,        /* weights mapped from the cache file */
    TB_LLM_CACHE_WRITTEN,    /* quantized from the checkpoint and saved */
    TB_LLM_CACHE_WRITE_FAILED, /* quantized, but saving failed (cache_message says why) */
    TB_LLM_CACHE_REBUILT       /* the file was damaged (cache_message says how): quantized again and saved */
} tb_llm_cache_state;

typedef struct tb_llm_model_info {
    tb_llm_quant quant;
    int64_t group_size;         /* int4 only, else 0 */
    int64_t parameters;         /* elements of every weight (embedding counted once when tied) */
    int64_t weight_bytes;       /* bytes of the weights in their run format (plus scales, norms, biases) */
    int64_t decode_bytes_per_token; /* weight bytes one decode step reads: every projection, the LM head,
                                       norms and one embedding row (the KV cache is not included) */
    tb_llm_cache_state cache_state;
    char cache_message[256];
} tb_llm_model_info;

TB_API void tb_llm_model_get_info(const tb_llm_model *model, tb_llm_model_info *out);

/* Uploads every weight once to a GPU engine ("vulkan"; idempotent) so that sessions created afterwards
 * run their forward there (src/llm/llm_gpu.c). Create no sessions before calling it. Errors: an
 * unknown or CPU engine (TB_ERR_INVALID_ARGUMENT), no device (TB_ERR_UNSUPPORTED), a tensor larger
 * than the device's buffer limit, out of device memory. */
TB_API TB_NODISCARD tb_status tb_llm_model_to_engine(tb_llm_model *model, const char *engine_name);
TB_API bool tb_llm_model_on_gpu(const tb_llm_model *model);

/* ---- sessions: KV cache and forward pass ---- */

/* A session holding up to `max_seq_len` positions (1 <= max_seq_len <= max_position_embeddings is not
 * required; the cache grows on demand up to max_seq_len). kv_f16 stores the cache in IEEE half. */
TB_API TB_NODISCARD tb_status tb_llm_session_new(const tb_llm_model *model, int64_t max_seq_len, bool kv_f16,
                                                 tb_llm_session **out);
TB_API void tb_llm_session_free(tb_llm_session *session);

/* Positions held in the KV cache and their token ids (valid until the next call on the session). */
TB_API int64_t tb_llm_session_length(const tb_llm_session *session);
TB_API const int32_t *tb_llm_session_tokens(const tb_llm_session *session);
TB_API int64_t tb_llm_session_max_seq_len(const tb_llm_session *session);
/* Keeps the first `length` cached positions (0 empties the cache). */
TB_API TB_NODISCARD tb_status tb_llm_session_truncate(tb_llm_session *session, int64_t length);

/* Runs tokens[0..count) at the next positions, appending their keys/values to the cache. When `logits`
 * is not NULL it receives the logits of every input position (all_logits, f32[count, V]) or of the last
 * one only (f32[V]). Errors: a token outside [0, V), more positions than max_seq_len (nothing is changed
 * then), count < 1. Long inputs are processed in chunks (bounded scratch). */
TB_API TB_NODISCARD tb_status tb_llm_forward(tb_llm_session *session, const int32_t *tokens, int64_t count,
                                             float *logits, bool all_logits);

/* ---- sampling ---- */

/* Applied in transformers' order: repetition penalty, temperature, top-k, top-p, min-p; then one token
 * is drawn. temperature 0 (or top_k 1) is greedy: the first maximal logit after the penalty. */
typedef struct tb_llm_sampling {
    float temperature;        /* >= 0; 0 = greedy */
    int64_t top_k;            /* 0 = off */
    float top_p;              /* in (0, 1]; 1 = off */
    float min_p;              /* in [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off; applied to every id of the history (prompt included) */
    uint64_t seed;            /* seeds the sampler's own PRNG: same seed and logits, same tokens */
} tb_llm_sampling;

/* Greedy defaults plus the checks every entry point makes (NaN/inf, ranges) with a message naming the
 * parameter. */
TB_API void tb_llm_sampling_default(tb_llm_sampling *out);
TB_API TB_NODISCARD tb_status tb_llm_sampling_check(const tb_llm_sampling *sampling);

typedef struct tb_llm_sampler tb_llm_sampler;

TB_API TB_NODISCARD tb_status tb_llm_sampler_new(int64_t vocab_size, const tb_llm_sampling *sampling,
                                                 tb_llm_sampler **out);
TB_API void tb_llm_sampler_free(tb_llm_sampler *sampler);
/* Picks the next token from logits[V]; `history` (ids, may repeat) feeds the repetition penalty. */
TB_API TB_NODISCARD tb_status tb_llm_sampler_sample(tb_llm_sampler *sampler, const float *logits,
                                                    const int32_t *history, int64_t history_count, int32_t *token);
/* Whether a candidate token may be produced (a constraint such as a JSON grammar); `context` is the
 * caller's. Called a few times per draw, on the whole vocabulary only when those fail. */
typedef bool (*tb_llm_token_allowed)(void *context, int32_t token);
/* tb_llm_sampler_sample restricted to the tokens `allowed` accepts, drawn exactly: a draw from the sampler's
 * kept candidates (after top-k/top-p/min-p) that is rejected is removed and the draw repeats over the rest;
 * after a few rejections the allowed kept candidates are found by one pass over them; when none of them is
 * allowed, the draw is over every allowed token by its (penalized, tempered) logit. Greedy: the largest
 * logit among allowed tokens. The first draw equals tb_llm_sampler_sample's. Errors: as that function,
 * and TB_ERR_INVALID_ARGUMENT when no token of the vocabulary is allowed. */
TB_API TB_NODISCARD tb_status tb_llm_sampler_sample_allowed(tb_llm_sampler *sampler, const float *logits,
                                                            const int32_t *history, int64_t history_count,
                                                            tb_llm_token_allowed allowed, void *context,
                                                            int32_t *token);
/* The probability with which each token would be drawn (probs[V], zeros outside the kept set; greedy
 * gives a one-hot vector). For tests against transformers' logits processors. */
TB_API TB_NODISCARD tb_status tb_llm_sampler_probs(tb_llm_sampler *sampler, const float *logits,
                                                   const int32_t *history, int64_t history_count, float *probs);

/* ---- generation ---- */

typedef enum tb_llm_finish {
    TB_LLM_FINISH_NONE = 0, /* still running */
    TB_LLM_FINISH_STOP,     /* a stop token was produced (it is the last token reported) */
    TB_LLM_FINISH_LENGTH,   /* max_tokens reached, or the context is full */
    TB_LLM_FINISH_ABORTED   /* the callback asked to stop */
} tb_llm_finish;

/* "running", "stop", "length", "aborted". */
TB_API const char *tb_llm_finish_name(tb_llm_finish finish);

typedef struct tb_llm_stats {
    int64_t prompt_tokens;    /* tokens of the prompt */
    int64_t reused_tokens;    /* prompt tokens whose keys/values were already cached (shared prefix) */
    int64_t generated_tokens; /* tokens produced (a final stop token included) */
    double prefill_seconds;   /* the prompt's forward pass */
    double ttft_seconds;      /* call start to first token */
    double decode_seconds;    /* first token to last token */
    tb_llm_finish finish;
} tb_llm_stats;

/* Called with each produced token (a stop token too, with finish already decided); returns nonzero to
 * stop generating. */
typedef int (*tb_llm_token_fn)(void *context, int32_t token);

typedef struct tb_llm_generate_desc {
    const int32_t *prompt; /* the whole sequence so far (count >= 1); a cached prefix is reused */
    int64_t prompt_count;
    int64_t max_tokens;    /* >= 1 */
    tb_llm_sampling sampling;
    const int32_t *stop_ids;
    int64_t stop_count;
    /* true: the tokens (and logits) do not depend on what the session ran before. SIMD prefill (GEMM) and
     * decode (GEMV) kernels round differently, so only whole prefill chunks (256 positions from position 0)
     * computed as a fresh session would compute them are reused; the rest of the prompt runs again. false:
     * the longest cached prefix is reused (faster for chat; results may differ in the last bits). */
    bool reproducible;
} tb_llm_generate_desc;

/* Step-wise generation (one object per call; the session must not be used otherwise meanwhile). begin
 * runs the prompt (reusing the longest cached prefix) and next() produces one token per call, running
 * the previous token through the model first. */
typedef struct tb_llm_generation tb_llm_generation;

TB_API TB_NODISCARD tb_status tb_llm_generation_begin(tb_llm_session *session, const tb_llm_generate_desc *desc,
                                                      tb_llm_generation **out);
/* *token receives the next token and *finish the state after it (TB_LLM_FINISH_NONE while more may
 * come). After a finish it returns TB_ERR_INVALID_ARGUMENT. */
TB_API TB_NODISCARD tb_status tb_llm_generation_next(tb_llm_generation *generation, int32_t *token,
                                                     tb_llm_finish *finish);
/* Logits [V] of the next position (what next() samples from); valid until next() or free. */
TB_API const float *tb_llm_generation_logits(const tb_llm_generation *generation);
/* Stats so far (prompt counts and timings). */
TB_API void tb_llm_generation_stats(const tb_llm_generation *generation, tb_llm_stats *out);
TB_API void tb_llm_generation_free(tb_llm_generation *generation);

/* The whole loop: begin, then next() until a finish, calling `callback` (may be NULL) with each token
 * and storing up to `tokens_capacity` of them in `tokens` (may be NULL). */
TB_API TB_NODISCARD tb_status tb_llm_generate(tb_llm_session *session, const tb_llm_generate_desc *desc,
                                              tb_llm_token_fn callback, void *callback_context, int32_t *tokens,
                                              int64_t tokens_capacity, tb_llm_stats *stats);

/* Memory read bandwidth in GB/s (1e9 B/s) seen by `tb_num_threads()` threads sweeping `nbytes` with the
 * widest loads of the active ISA, best of `repeats` (for the benchmark's roofline). */
TB_API TB_NODISCARD tb_status tb_llm_read_bandwidth(size_t nbytes, int repeats, double *gbps);

#ifdef __cplusplus
}
#endif
#endif
