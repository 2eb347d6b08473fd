/* Continuous batching: one engine thread serves many generation requests on one model. N slots each hold a
 * sequence (a tb_llm_session whose KV cache is a block table into one pool shared by all slots); every step runs prompt chunks of prefilling requests (one, or as
 * many as a per-step token budget allows) and one token of every decoding request together (the matmuls take M = decoding sequences, so weights are read
 * once per step for all of them); requests join between steps and leave when finished or cancelled. A new
 * request maps the longest cached prompt prefix (whole blocks published by earlier prompts, kept after their
 * request left until the pool needs the room) into its table without copying. A request is admitted when
 * the pool has the blocks for its prompt beside the running ones; when a running request cannot get a
 * block, the most recently admitted one is preempted (blocks given back) and later resumed by replaying its
 * tokens, with the same tokens as an uninterrupted run. Only a request alone in the engine fails for blocks.
 *
 * Contract (docs/serving.md): a request's tokens depend only on its own prompt, sampling settings and seed,
 * never on what else runs in the engine: batched decode rows round exactly like a single-sequence decode,
 * prompts are prefilled in chunks aligned to multiples of prefill_chunk positions, and a cached prefix is
 * reused only in whole chunks that were computed as such. With prefill_chunk >= the prompt length and no
 * reuse, the tokens equal tb_llm_generate's on a fresh session.
 *
 * Threads: any thread may submit, cancel, poll and read stats (a mutex guards the queues; no call blocks on
 * model work). Tokens come back as events; tb_llm_batch_notify_fd is readable while events are pending. */
#ifndef TORCHBURN_LLM_BATCH_H
#define TORCHBURN_LLM_BATCH_H

#include "torchburn/llm.h"
#include "torchburn/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TB_LLM_BATCH_TOP_LOGPROBS = 20 };

typedef struct tb_llm_batch_options {
    int64_t slots;         /* sequences held at once, in [1, 256] */
    int64_t ctx_size;      /* positions per slot (prompt + generated), >= 1 */
    int64_t prefill_chunk; /* prompt tokens per step: a multiple of 16 in [16, 1024]; 0 means 64 */
    bool kv_f16;           /* KV cache in IEEE half */
    /* tokens per step: decoding rows count one each, prompt chunks (oldest request first, possibly several
     * chunks and requests) fill the rest, at least one chunk per step while any prompt waits; 0 means one
     * chunk per step. 0 or in [prefill_chunk, 65536]. */
    int64_t batch_tokens;
    /* the model's tokenizer, read once at creation for the bytes of every token id
     * (tb_tokenizer_token_bytes); needed by constrained requests only, may be NULL */
    const tb_tokenizer *tokenizer;
    /* KV pool bound in blocks of 16 positions (keys and values of every layer and KV head), allocated as
     * used; 0 means slots x ceil(ctx_size / 16) (every slot full). In [1, 2^28]. A request that needs a
     * block while all are held by running requests fails alone (TB_ERR_OUT_OF_MEMORY, "the KV cache is
     * full"). GPU models keep per-slot caches on the device and ignore it. */
    int64_t kv_blocks;
} tb_llm_batch_options;

/* What the generated text must be. JSON_OBJECT: one JSON object (src/llm/llm_json.h: it starts with '{'
 * and ends with its closing brace); a stop id ends generation only once the object is complete (with no stop ids, the request
 * finishes STOP as it completes), special tokens are never produced, and max_tokens still ends it (LENGTH)
 * with the object unfinished. */
typedef enum tb_llm_constraint { TB_LLM_CONSTRAINT_NONE = 0, TB_LLM_CONSTRAINT_JSON_OBJECT } tb_llm_constraint;

typedef struct tb_llm_batch_request {
    const int32_t *prompt; /* prompt_count >= 1 ids in [0, V); copied */
    int64_t prompt_count;  /* <= ctx_size */
    int64_t max_tokens;    /* >= 1; generation also stops when the slot's context is full */
    tb_llm_sampling sampling;
    /* OpenAI's penalties over the tokens generated so far: logit -= presence (if the token occurred) +
     * frequency * occurrences; each in [-2, 2], 0 = off */
    float presence_penalty, frequency_penalty;
    const int32_t *stop_ids; /* copied */
    int64_t stop_count;
    int32_t logprobs;        /* -1: none; 0..TB_LLM_BATCH_TOP_LOGPROBS: the chosen token's and that many top ones */
    tb_llm_constraint constraint; /* needs options.tokenizer */
} tb_llm_batch_request;

typedef struct tb_llm_batch_event {
    uint64_t id;
    int32_t token;        /* the produced token, or -1 (a final event without a token: cancelled or failed) */
    tb_llm_finish finish; /* NONE while more tokens follow; STOP, LENGTH or ABORTED (cancel, failure) last */
    bool failed;          /* the engine hit an error on this request: status and error say which */
    tb_status status;     /* TB_OK, or the failure (TB_ERR_OUT_OF_MEMORY: the KV cache is full or memory ran out) */
    char error[160];      /* the failure's message (final event of a failed request) */
    float logprob;        /* log softmax of the model's logits at `token` (when logprobs >= 0) */
    int32_t top_count;
    int32_t top_ids[TB_LLM_BATCH_TOP_LOGPROBS];
    float top_logprobs[TB_LLM_BATCH_TOP_LOGPROBS];
    /* in the final event: */
    int64_t prompt_tokens, reused_tokens, generated_tokens;
} tb_llm_batch_event;

typedef struct tb_llm_batch_stats {
    int64_t slots, ctx_size, prefill_chunk, batch_tokens;
    int64_t prefill_chunks, prefill_steps;  /* prompt chunks run / steps that ran at least one */
    int64_t queued, active;                 /* waiting for a slot / holding one */
    int64_t requests_submitted, requests_finished, requests_cancelled;
    int64_t prompt_tokens, reused_tokens, prefix_hits, generated_tokens;
    int64_t prefill_tokens_run;             /* prompt tokens actually run (prompt_tokens - reused) */
    int64_t decode_steps, decode_rows;      /* steps and sequences summed over them */
    double prefill_seconds, decode_seconds; /* engine time in prompt chunks / batched decode steps */
    int64_t kv_positions_used, kv_positions_capacity; /* positions held by slots / kv_blocks x 16 */
    int64_t kv_bytes;                       /* KV bytes allocated now */
    /* the pool: its bound, blocks with memory, held by a request (refcount > 0), held by more than one,
     * cached (no holder, a published prefix kept for reuse), evicted so far; all 0 on GPU models */
    int64_t kv_blocks, kv_blocks_allocated, kv_blocks_in_use, kv_blocks_shared, kv_blocks_cached,
        kv_blocks_evicted;
    /* pooled engines: requests preempted (blocks given back, resumed later with the same tokens) and
     * requests that waited in the queue for blocks although a slot was free (each counted once) */
    int64_t preemptions, admission_waits;
    char last_error[256];
} tb_llm_batch_stats;

typedef struct tb_llm_batch tb_llm_batch;

/* Creates the engine and starts its thread. `model` must outlive it. Errors: TB_ERR_INVALID_ARGUMENT naming
 * a bad option, TB_ERR_OUT_OF_MEMORY, TB_ERR_IO (no thread or pipe). */
TB_API TB_NODISCARD tb_status tb_llm_batch_new(const tb_llm_model *model, const tb_llm_batch_options *options,
                                               tb_llm_batch **out);
/* Stops the thread (requests still running get no more events) and frees everything. */
TB_API void tb_llm_batch_free(tb_llm_batch *batch);

/* Queues a request and returns its id (> 0). Errors (nothing queued): TB_ERR_INVALID_ARGUMENT naming the
 * problem (empty prompt, id outside the vocabulary, prompt longer than ctx_size or than the KV pool,
 * max_tokens < 1, bad sampling or penalties, logprobs out of range, a constraint without options.tokenizer). */
TB_API TB_NODISCARD tb_status tb_llm_batch_submit(tb_llm_batch *batch, const tb_llm_batch_request *request,
                                                  uint64_t *id);
/* Asks the engine to drop request `id` before its next step; its final event has finish ABORTED. An id that
 * is unknown or already finished is ignored. */
TB_API void tb_llm_batch_cancel(tb_llm_batch *batch, uint64_t id);

/* Moves up to `capacity` pending events (oldest first) into `events` and returns how many; never blocks. */
TB_API int64_t tb_llm_batch_poll(tb_llm_batch *batch, tb_llm_batch_event *events, int64_t capacity);
/* Blocks until an event is pending or `timeout_seconds` pass; returns whether one is pending. */
TB_API bool tb_llm_batch_wait(tb_llm_batch *batch, double timeout_seconds);
/* A file descriptor that is readable while events are pending (for select/poll/asyncio); owned by the engine. */
TB_API int tb_llm_batch_notify_fd(const tb_llm_batch *batch);

TB_API void tb_llm_batch_get_stats(tb_llm_batch *batch, tb_llm_batch_stats *out);

#ifdef __cplusplus
}
#endif
#endif
