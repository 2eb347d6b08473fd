/* The public entry points of the continuous-batching engine (contract in torchburn/llm_batch.h): option
 * and request validation, creation and teardown of the engine thread, its slots and KV pool, and the
 * caller side of the queue and event exchange (submit, cancel, poll, wait, stats). The engine thread itself
 * is llm_batch.c; the state both share is llm_batch_engine.h. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llm/llm_batch_engine.h"
#include "torchburn/alloc.h"

static tb_status check_options(const tb_llm_model *model, const tb_llm_batch_options *o) {
    if (!model || !o)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: NULL model or options");
    if (o->slots < 1 || o->slots > 256)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: slots must be in [1, 256], got %lld",
                            (long long)o->slots);
    if (o->ctx_size < 1 || o->ctx_size > ((int64_t)1 << 24))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: ctx_size must be in [1, 16777216], got %lld",
                            (long long)o->ctx_size);
    if (o->prefill_chunk != 0 && (o->prefill_chunk < 16 || o->prefill_chunk > 1024 || o->prefill_chunk % 16 != 0))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "llm batch: prefill_chunk must be a multiple of 16 in [16, 1024] (or 0), got %lld",
                            (long long)o->prefill_chunk);
    if (o->kv_blocks < 0 || o->kv_blocks > ((int64_t)1 << 28))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: kv_blocks must be 0 or in [1, 268435456], got %lld",
                            (long long)o->kv_blocks);
    const int64_t chunk = o->prefill_chunk ? o->prefill_chunk : 64;
    if (o->batch_tokens != 0 && (o->batch_tokens < chunk || o->batch_tokens > 65536))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "llm batch: batch_tokens must be 0 or in [prefill_chunk = %lld, 65536], got %lld",
                            (long long)chunk, (long long)o->batch_tokens);
    return TB_OK;
}

tb_status tb_llm_batch_new(const tb_llm_model *model, const tb_llm_batch_options *options, tb_llm_batch **out) {
    *out = NULL;
    TB_TRY(check_options(model, options));
    tb_llm_batch *b = calloc(1, sizeof *b);
    if (!b)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory");
    b->model = model;
    b->options = *options;
    if (b->options.prefill_chunk == 0)
        b->options.prefill_chunk = 64;
    b->pipe_fds[0] = b->pipe_fds[1] = -1;
    b->next_id = 1;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
    pthread_cond_init(&b->events_ready, NULL);
    const int64_t n = b->options.slots;
    b->slots = calloc((size_t)n, sizeof *b->slots);
    b->step_sessions = calloc((size_t)n, sizeof *b->step_sessions);
    b->step_tokens = calloc((size_t)n, sizeof *b->step_tokens);
    b->step_slots = calloc((size_t)n, sizeof *b->step_slots);
    const int64_t ctx_blocks = (b->options.ctx_size + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK;
    if (b->options.kv_blocks == 0)
        b->options.kv_blocks = n * ctx_blocks;
    b->found = malloc((size_t)ctx_blocks * sizeof *b->found);
    tb_status status = b->slots && b->step_sessions && b->step_tokens && b->step_slots && b->found
                           ? TB_OK
                           : tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory");
    if (status == TB_OK && !model->gpu)
        status = tb_llm_kv_pool_new(model, b->options.kv_f16, b->options.kv_blocks, 0, &b->pool);
    for (int64_t i = 0; status == TB_OK && i < n; i++)
        status = b->pool ? tb_llm_session_new_pooled(model, b->options.ctx_size, b->pool, &b->slots[i].session)
                         : tb_llm_session_new(model, b->options.ctx_size, b->options.kv_f16, &b->slots[i].session);
    if (status == TB_OK)
        status = tb_alloc((size_t)(n * model->vocab) * sizeof(float), TB_ALLOC_DEFAULT, (void **)&b->logits);
    if (status == TB_OK && options->tokenizer)
        status = tb_llm_token_table_init(&b->tokens, options->tokenizer, model->vocab);
    b->options.tokenizer = NULL; /* read only here */
    if (status == TB_OK && pipe(b->pipe_fds) != 0)
        status = tb_error_set(TB_ERR_IO, "llm batch: pipe() failed: %s", strerror(errno));
    for (int i = 0; status == TB_OK && i < 2; i++)
        if (fcntl(b->pipe_fds[i], F_SETFL, fcntl(b->pipe_fds[i], F_GETFL) | O_NONBLOCK) != 0 ||
            fcntl(b->pipe_fds[i], F_SETFD, FD_CLOEXEC) != 0)
            status = tb_error_set(TB_ERR_IO, "llm batch: fcntl() failed: %s", strerror(errno));
    b->stats.slots = n;
    b->stats.ctx_size = b->options.ctx_size;
    b->stats.prefill_chunk = b->options.prefill_chunk;
    b->stats.batch_tokens = b->options.batch_tokens;
    b->stats.kv_positions_capacity = b->pool ? b->options.kv_blocks * TB_LLM_KEY_BLOCK : n * b->options.ctx_size;
    b->stats.kv_blocks = b->pool ? b->options.kv_blocks : 0;
    if (status == TB_OK) {
        const int error = pthread_create(&b->thread, NULL, tb_llm_batch_engine_main, b);
        if (error != 0)
            status = tb_error_set(TB_ERR_IO, "llm batch: cannot start the engine thread: %s", strerror(error));
        b->thread_started = error == 0;
    }
    if (status != TB_OK) {
        tb_llm_batch_free(b);
        return status;
    }
    *out = b;
    return TB_OK;
}

void tb_llm_batch_free(tb_llm_batch *b) {
    if (!b)
        return;
    if (b->thread_started) {
        pthread_mutex_lock(&b->lock);
        b->stop = true;
        pthread_cond_signal(&b->wake);
        pthread_mutex_unlock(&b->lock);
        pthread_join(b->thread, NULL);
    }
    for (int64_t i = 0; b->slots && i < b->options.slots; i++) {
        tb_llm_session_free(b->slots[i].session);
        tb_llm_sampler_free(b->slots[i].sampler);
        tb_llm_batch_request_free(b->slots[i].req);
        free(b->slots[i].counts);
    }
    while (b->queue_head) {
        request *next = b->queue_head->next;
        tb_llm_batch_request_free(b->queue_head);
        b->queue_head = next;
    }
    for (int i = 0; i < 2; i++)
        if (b->pipe_fds[i] >= 0)
            close(b->pipe_fds[i]);
    tb_llm_kv_pool_free(b->pool); /* after the sessions, which release their blocks into it */
    free(b->found);
    tb_llm_step_scratch_free(&b->scratch);
    tb_llm_token_table_free(&b->tokens);
    tb_free(b->logits);
    free(b->slots);
    free(b->step_sessions);
    free(b->step_tokens);
    free(b->step_slots);
    free(b->events);
    free(b->local);
    pthread_cond_destroy(&b->events_ready);
    pthread_cond_destroy(&b->wake);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static tb_status check_request(const tb_llm_batch *b, const tb_llm_batch_request *r) {
    const int64_t vocab = b->model->vocab;
    if (!r || !r->prompt || r->prompt_count < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: the prompt is empty (it needs at least one token)");
    if (r->prompt_count > b->options.ctx_size)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: the prompt has %lld tokens but a slot holds %lld "
                            "(ctx_size)", (long long)r->prompt_count, (long long)b->options.ctx_size);
    for (int64_t i = 0; i < r->prompt_count; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= vocab)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: prompt token %d at position %lld is outside the "
                                "vocabulary [0, %lld)", (int)r->prompt[i], (long long)i, (long long)vocab);
    if (!b->model->gpu && tb_llm_batch_blocks_for(r->prompt_count + 1) > b->options.kv_blocks)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: the prompt has %lld tokens, which with the first "
                            "generated one need %lld KV blocks of %d positions, but the pool holds %lld (kv_blocks)",
                            (long long)r->prompt_count, (long long)tb_llm_batch_blocks_for(r->prompt_count + 1), TB_LLM_KEY_BLOCK,
                            (long long)b->options.kv_blocks);
    if (r->max_tokens < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: max_tokens must be >= 1, got %lld",
                            (long long)r->max_tokens);
    TB_TRY(tb_llm_sampling_check(&r->sampling));
    if (!(r->presence_penalty >= -2.0f && r->presence_penalty <= 2.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: presence_penalty must be in [-2, 2], got %g",
                            (double)r->presence_penalty);
    if (!(r->frequency_penalty >= -2.0f && r->frequency_penalty <= 2.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: frequency_penalty must be in [-2, 2], got %g",
                            (double)r->frequency_penalty);
    if (r->stop_count < 0 || (r->stop_count > 0 && !r->stop_ids))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: bad stop token list");
    for (int64_t i = 0; i < r->stop_count; i++)
        if (r->stop_ids[i] < 0 || r->stop_ids[i] >= vocab)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: stop token %d is outside the vocabulary [0, %lld)",
                                (int)r->stop_ids[i], (long long)vocab);
    if (r->logprobs < -1 || r->logprobs > TB_LLM_BATCH_TOP_LOGPROBS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: logprobs must be in [-1, %d], got %d",
                            TB_LLM_BATCH_TOP_LOGPROBS, (int)r->logprobs);
    if (r->constraint != TB_LLM_CONSTRAINT_NONE && r->constraint != TB_LLM_CONSTRAINT_JSON_OBJECT)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: unknown constraint %d", (int)r->constraint);
    if (r->constraint != TB_LLM_CONSTRAINT_NONE && !b->tokens.offsets)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "llm batch: a JSON constraint needs the engine to be created with the tokenizer");
    return TB_OK;
}

tb_status tb_llm_batch_submit(tb_llm_batch *b, const tb_llm_batch_request *desc, uint64_t *id) {
    *id = 0;
    TB_TRY(check_request(b, desc));
    request *r = calloc(1, sizeof *r);
    if (r) {
        r->prompt = malloc((size_t)desc->prompt_count * sizeof *r->prompt);
        r->stop_ids = malloc((size_t)(desc->stop_count > 0 ? desc->stop_count : 1) * sizeof *r->stop_ids);
    }
    if (!r || !r->prompt || !r->stop_ids) {
        tb_llm_batch_request_free(r);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory");
    }
    memcpy(r->prompt, desc->prompt, (size_t)desc->prompt_count * sizeof *r->prompt);
    if (desc->stop_count > 0)
        memcpy(r->stop_ids, desc->stop_ids, (size_t)desc->stop_count * sizeof *r->stop_ids);
    r->prompt_count = desc->prompt_count;
    r->stop_count = desc->stop_count;
    r->max_tokens = desc->max_tokens;
    r->sampling = desc->sampling;
    r->presence_penalty = desc->presence_penalty;
    r->frequency_penalty = desc->frequency_penalty;
    r->logprobs = desc->logprobs;
    r->constraint = desc->constraint;
    pthread_mutex_lock(&b->lock);
    r->id = b->next_id++;
    if (b->queue_tail)
        b->queue_tail->next = r;
    else
        b->queue_head = r;
    b->queue_tail = r;
    b->stats.queued++;
    b->stats.requests_submitted++;
    *id = r->id;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    return TB_OK;
}

void tb_llm_batch_cancel(tb_llm_batch *b, uint64_t id) {
    pthread_mutex_lock(&b->lock);
    for (request *r = b->queue_head; r; r = r->next)
        if (r->id == id)
            r->cancelled = true;
    for (int64_t i = 0; i < b->options.slots; i++)
        if (b->slots[i].req && b->slots[i].req->id == id)
            b->slots[i].req->cancelled = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
}

int64_t tb_llm_batch_poll(tb_llm_batch *b, tb_llm_batch_event *events, int64_t capacity) {
    pthread_mutex_lock(&b->lock);
    int64_t n = b->event_count - b->event_head;
    n = n < capacity ? n : capacity;
    if (n > 0)
        memcpy(events, b->events + b->event_head, (size_t)n * sizeof *events);
    b->event_head += n;
    if (b->event_head == b->event_count) { /* drained: the fd stops being readable */
        char bytes[64];
        while (read(b->pipe_fds[0], bytes, sizeof bytes) > 0) {
        }
        b->event_head = b->event_count = 0;
    }
    pthread_mutex_unlock(&b->lock);
    return n;
}

bool tb_llm_batch_wait(tb_llm_batch *b, double timeout_seconds) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    const double whole = floor(timeout_seconds > 0 ? timeout_seconds : 0);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((timeout_seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->lock);
    while (b->event_head == b->event_count)
        if (pthread_cond_timedwait(&b->events_ready, &b->lock, &deadline) != 0)
            break;
    const bool pending = b->event_head < b->event_count;
    pthread_mutex_unlock(&b->lock);
    return pending;
}

int tb_llm_batch_notify_fd(const tb_llm_batch *b) { return b->pipe_fds[0]; }

void tb_llm_batch_get_stats(tb_llm_batch *b, tb_llm_batch_stats *out) {
    pthread_mutex_lock(&b->lock);
    *out = b->stats;
    pthread_mutex_unlock(&b->lock);
}
