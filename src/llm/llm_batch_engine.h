/* The continuous-batching engine's state, shared by its two files: llm_batch.c (the engine thread:
 * admission, prefix reuse, preemption, prompt chunks, decode steps, sampling, events) and
 * llm_batch_api.c (the public entry points of torchburn/llm_batch.h: create, free, submit, cancel, poll,
 * wait, stats). Include only from those two. */
#ifndef TORCHBURN_LLM_BATCH_ENGINE_H
#define TORCHBURN_LLM_BATCH_ENGINE_H

#include <pthread.h>

#include "llm/llm_batch_internal.h"
#include "llm/llm_json.h"
#include "llm/llm_kv_pool.h"
#include "torchburn/llm_batch.h"

typedef struct request {
    uint64_t id;
    int32_t *prompt;
    int64_t prompt_count, max_tokens;
    tb_llm_sampling sampling;
    float presence_penalty, frequency_penalty;
    int32_t *stop_ids;
    int64_t stop_count;
    int32_t logprobs;
    tb_llm_constraint constraint;
    bool cancelled;
    /* Set when the request was preempted (its slot and blocks taken back for the others): the tokens it
     * had sampled (all already sent), and the per-request state its resumption continues from. */
    int32_t *generated;
    int64_t generated_count;
    tb_llm_sampler *sampler;
    tb_llm_json_constraint json;
    int64_t preemptions;
    struct request *next;
} request;

/* PREEMPTED: the slot's blocks were released to make room; the engine moves its request back to the queue. */
typedef enum slot_state { SLOT_FREE, SLOT_ADMITTED, SLOT_PREFILL, SLOT_DECODE, SLOT_DONE, SLOT_PREEMPTED } slot_state;

typedef struct slot {
    tb_llm_session *session;
    slot_state state;
    request *req;
    tb_llm_sampler *sampler;
    int64_t canonical; /* leading cached positions computed by whole aligned prefill chunks */
    int64_t prefilled; /* prompt positions in the cache */
    int64_t produced, reused;
    int32_t pending;   /* last sampled token, not yet run through the model */
    int64_t replay;    /* resumed request: generated[0, replay) were fed back; sampling resumes at generated_count */
    int32_t *counts;   /* [V] scratch for the OpenAI penalties, zero between uses */
    tb_llm_json_constraint json; /* the request's constraint state (constraint JSON_OBJECT) */
    uint64_t last_used, admitted;
} slot;

struct tb_llm_batch {
    const tb_llm_model *model;
    tb_llm_batch_options options;
    slot *slots;
    pthread_t thread;
    bool thread_started, stop;
    pthread_mutex_t lock;
    pthread_cond_t wake, events_ready;
    request *queue_head, *queue_tail;
    tb_llm_batch_event *events; /* [event_head, event_count) are pending */
    int64_t event_head, event_count, event_capacity;
    tb_llm_batch_event *local; /* events of the current iteration (engine thread only) */
    int64_t local_count, local_capacity;
    int pipe_fds[2];
    uint64_t next_id, clock;
    tb_llm_batch_stats stats;
    double prefill_seconds, decode_seconds; /* engine-side counters, published under the lock */
    int64_t prefill_chunks, prefill_steps;
    int64_t decode_steps, decode_rows;
    int64_t reused_tokens, prefix_hits, prefill_tokens_run;
    int64_t preemptions, admission_waits;
    uint64_t waiting_id; /* the request that last waited for blocks (counted once) */
    tb_llm_kv_pool *pool; /* NULL for GPU models */
    int32_t *found;       /* [ceil(ctx_size / 16)] prefix lookup scratch */
    tb_llm_step_scratch scratch;
    tb_llm_token_table tokens; /* bytes per token id (empty without options.tokenizer) */
    float *logits; /* [slots, V] */
    tb_llm_session **step_sessions;
    int32_t *step_tokens;
    int64_t *step_slots;
    char error[256];
};

/* Frees a request and what it owns (NULL: nothing). */
void tb_llm_batch_request_free(request *r);

/* KV blocks that hold `positions` positions. */
static inline int64_t tb_llm_batch_blocks_for(int64_t positions) {
    return (positions + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK;
}

/* The engine thread's loop (pthread start routine; context is the tb_llm_batch). */
void *tb_llm_batch_engine_main(void *context);

#endif
