/* The continuous-batching engine (contract in torchburn/llm_batch.h): a queue of requests, N slots each
 * owning a session whose KV cache is a block table into the engine's pool (llm_kv_pool.h), and one engine
 * thread that loops: under the lock, hand out events, honour cancels, release finished slots (their
 * published prefix blocks stay cached in the pool) and admit queued requests into free ones; then,
 * unlocked, map each new request's cached prefix, run aligned prompt chunks (one, or as many as the per-step
 * token budget batch_tokens leaves beside the decoding rows, longest-waiting request first) and one
 * batched decode step of every decoding slot, sample, and record events. Out of blocks, the most recently admitted running request is
 * preempted and later resumed by replay (see "preemption" below); admission waits for blocks.
 *
 * Determinism: a slot's "canonical" length counts its leading positions that were computed by whole
 * prefill chunks [k P, (k + 1) P) (P = prefill_chunk) from a canonical prefix; only those are reused, and
 * only in multiples of P, so a reused prefix holds exactly the bits a fresh prefill would compute. Decode
 * rows are row-independent (llm_batch_forward.c). The whole blocks of canonical chunks are published in
 * the pool under (parent block, 16 token ids); a request maps the chain of published blocks matching its
 * prompt, rounded down to whole chunks, before each of its chunks (so a prefix another slot has just
 * computed is picked up too). GPU models (no pool) reuse only their own slot's cached prefix. Hence the
 * tokens of a request never depend on its neighbours, on the order of arrival, or on which slot served an
 * earlier request.
 *
 * This file is the engine thread; the public entry points are llm_batch_api.c, the shared state
 * llm_batch_engine.h. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llm/llm_batch_engine.h"
#include "torchburn/alloc.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tb_llm_batch_request_free(request *r) {
    if (!r)
        return;
    free(r->prompt);
    free(r->stop_ids);
    free(r->generated);
    tb_llm_sampler_free(r->sampler);
    free(r);
}

/* ---- events ---- */

static bool push_local(tb_llm_batch *b, const tb_llm_batch_event *event) {
    if (b->local_count == b->local_capacity) {
        const int64_t capacity = b->local_capacity ? 2 * b->local_capacity : 64;
        tb_llm_batch_event *grown = realloc(b->local, (size_t)capacity * sizeof *grown);
        if (!grown)
            return false;
        b->local = grown;
        b->local_capacity = capacity;
    }
    b->local[b->local_count++] = *event;
    return true;
}

/* Under the lock: appends events and wakes readers. Returns false when out of memory (events dropped). */
static bool publish(tb_llm_batch *b, const tb_llm_batch_event *events, int64_t count) {
    if (count == 0)
        return true;
    if (b->event_head > 0 && b->event_head == b->event_count)
        b->event_head = b->event_count = 0;
    if (b->event_count + count > b->event_capacity) {
        if (b->event_head > 0) {
            memmove(b->events, b->events + b->event_head, (size_t)(b->event_count - b->event_head) * sizeof *b->events);
            b->event_count -= b->event_head;
            b->event_head = 0;
        }
        int64_t capacity = b->event_capacity ? b->event_capacity : 256;
        while (capacity < b->event_count + count)
            capacity *= 2;
        if (capacity > b->event_capacity) {
            tb_llm_batch_event *grown = realloc(b->events, (size_t)capacity * sizeof *grown);
            if (!grown)
                return false;
            b->events = grown;
            b->event_capacity = capacity;
        }
    }
    const bool was_empty = b->event_head == b->event_count;
    memcpy(b->events + b->event_count, events, (size_t)count * sizeof *events);
    b->event_count += count;
    if (was_empty) {
        const char byte = 1;
        ssize_t written = write(b->pipe_fds[1], &byte, 1); /* non-blocking; a full pipe is readable anyway */
        (void)written;
    }
    pthread_cond_broadcast(&b->events_ready);
    return true;
}

static void final_event(const tb_llm_batch *b, const slot *s, const request *r, int32_t token, tb_llm_finish finish,
                        tb_llm_batch_event *e) {
    (void)b;
    memset(e, 0, sizeof *e);
    e->id = r->id;
    e->token = token;
    e->finish = finish;
    e->prompt_tokens = r->prompt_count;
    e->reused_tokens = s ? s->reused : 0;
    e->generated_tokens = s ? s->produced : r->generated_count;
}

/* ---- slots ---- */

static int64_t common_prefix(const int32_t *a, int64_t a_count, const int32_t *b, int64_t b_count) {
    int64_t n = 0;
    while (n < a_count && n < b_count && a[n] == b[n])
        n++;
    return n;
}

/* Positions of `s`'s cache that request r may reuse: whole chunks of its canonical prefix, leaving at least
 * the last prompt token to run (its logits start the generation). */
static int64_t reusable(const tb_llm_batch *b, const slot *s, const request *r) {
    const int64_t p = b->options.prefill_chunk;
    int64_t n = common_prefix(tb_llm_session_tokens(s->session), s->canonical, r->prompt, r->prompt_count - 1);
    return n / p * p;
}

/* Engine thread, pooled: while everything slot s holds is canonical and chunk-aligned, maps the published
 * blocks that continue its prompt (whole chunks of them, leaving the last prompt token to run) into its
 * table. Called before each of its chunks, so a prefix computed meanwhile by another slot is used too. */
static tb_status extend_prefix(tb_llm_batch *b, slot *s) {
    const request *r = s->req;
    const int64_t p = b->options.prefill_chunk, per_chunk = p / TB_LLM_KEY_BLOCK;
    if (!b->pool || s->prefilled != s->canonical || s->prefilled % p != 0)
        return TB_OK;
    int64_t held;
    const int32_t *table = tb_llm_session_table(s->session, &held);
    int32_t parent = held > 0 ? table[held - 1] : -1;
    int64_t n = 0;
    for (int64_t j = held; j < (r->prompt_count - 1) / TB_LLM_KEY_BLOCK; j++) {
        const int32_t block = tb_llm_kv_pool_find(b->pool, parent, r->prompt + j * TB_LLM_KEY_BLOCK);
        if (block < 0)
            break;
        b->found[n++] = parent = block;
    }
    n = n / per_chunk * per_chunk;
    if (n == 0)
        return TB_OK;
    TB_TRY(tb_llm_session_share(s->session, b->found, n, r->prompt + held * TB_LLM_KEY_BLOCK));
    const int64_t positions = n * TB_LLM_KEY_BLOCK;
    b->prefix_hits += s->reused == 0;
    b->reused_tokens += positions;
    b->prefill_tokens_run -= positions;
    s->prefilled += positions;
    s->canonical = s->prefilled;
    s->reused += positions;
    return TB_OK;
}

/* Engine thread, pooled: publishes the whole blocks of s's canonical chunk [begin, end); where an equal
 * block was published first (another slot computed the same prefix meanwhile) the table takes that one. */
static void publish_chunk(tb_llm_batch *b, slot *s, int64_t begin, int64_t end) {
    int64_t held;
    int32_t *table = tb_llm_session_table(s->session, &held);
    int32_t parent = begin > 0 ? table[begin / TB_LLM_KEY_BLOCK - 1] : -1;
    for (int64_t j = begin / TB_LLM_KEY_BLOCK; j < end / TB_LLM_KEY_BLOCK; j++) {
        const int32_t published = tb_llm_kv_pool_publish(b->pool, table[j], parent, s->req->prompt + j * TB_LLM_KEY_BLOCK);
        if (published != table[j]) { /* the same bits: hold the published one, free ours */
            tb_llm_kv_pool_ref(b->pool, published);
            tb_llm_kv_pool_release(b->pool, table[j]);
            table[j] = published;
        }
        parent = table[j];
    }
}

/* Engine thread: picks the cached prefix of a newly admitted slot (pooled: published blocks; GPU: its own
 * cache's). */
static tb_status start_slot(tb_llm_batch *b, slot *s) {
    request *r = s->req;
    const int64_t own = b->pool ? 0 : reusable(b, s, r);
    TB_TRY(tb_llm_session_truncate(s->session, own));
    s->canonical = own;
    s->prefilled = own;
    s->reused = own;
    b->prefix_hits += own > 0;
    b->reused_tokens += own;
    b->prefill_tokens_run += r->prompt_count - own;
    TB_TRY(extend_prefix(b, s));
    s->pending = -1;
    s->replay = 0;
    tb_llm_sampler_free(s->sampler);
    s->sampler = NULL;
    if ((r->presence_penalty != 0.0f || r->frequency_penalty != 0.0f) && !s->counts) {
        s->counts = calloc((size_t)b->model->vocab, sizeof *s->counts);
        if (!s->counts)
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory for penalty counts");
    }
    s->produced = r->generated_count;
    if (r->sampler) { /* resumed: the sampler (its random state) and the JSON state continue where they were */
        s->sampler = r->sampler;
        r->sampler = NULL;
        s->json = r->json;
    } else {
        TB_TRY(tb_llm_sampler_new(b->model->vocab, &r->sampling, &s->sampler));
        tb_llm_json_constraint_init(&s->json, &b->tokens, r->stop_ids, r->stop_count);
    }
    s->state = SLOT_PREFILL;
    return TB_OK;
}

/* ---- preemption and admission by blocks (pooled engines) ----
 *
 * When a slot cannot get the block its next chunk or token needs, the most recently admitted running
 * request gives its blocks back (its published prefix blocks stay cached, so most of its prompt is found
 * again) and returns to the queue in arrival order. Resuming it runs its prompt in the same aligned chunks
 * and then feeds its already generated tokens back as decode rows without sampling: both are exactly the
 * computations of its first run (chunks are deterministic, decode rows are row-independent), so it goes on
 * with the same cache bits, sampler state and JSON state, and its tokens are those of an uninterrupted run.
 * A request alone in the engine that still does not fit fails with the KV-full status. */

static void fail_slot(tb_llm_batch *b, slot *s, tb_status status);

/* Positions a request needs to take its next step: its prompt and the tokens it generated, plus one. */
static int64_t request_positions(const request *r) { return r->prompt_count + r->generated_count + 1; }

/* Engine thread: releases slot s's blocks and parks its request (exchange() requeues it). */
static void preempt(tb_llm_batch *b, slot *s) {
    request *r = s->req;
    if (s->state == SLOT_DECODE && s->replay >= r->generated_count) {
        /* past any replay: the generated tokens are the session's history after the prompt, and `pending` */
        const int64_t length = tb_llm_session_length(s->session), count = length - r->prompt_count + 1;
        int32_t *generated = realloc(r->generated, (size_t)count * sizeof *generated);
        if (!generated) { /* cannot keep what it needs to resume: it fails instead */
            tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory preempting a request");
            fail_slot(b, s, TB_ERR_OUT_OF_MEMORY);
            return;
        }
        memcpy(generated, tb_llm_session_tokens(s->session) + r->prompt_count,
               (size_t)(count - 1) * sizeof *generated);
        generated[count - 1] = s->pending;
        r->generated = generated;
        r->generated_count = count;
    } /* else: still prefilling or replaying, and r->generated already holds what it had produced */
    r->sampler = s->sampler;
    s->sampler = NULL;
    r->json = s->json;
    r->preemptions++;
    b->preemptions++;
    if (tb_llm_session_truncate(s->session, 0) != TB_OK) /* cannot fail: 0 is always a valid length */
        tb_error_clear();
    s->canonical = s->prefilled = 0;
    s->state = SLOT_PREEMPTED;
}

/* Engine thread: a running slot could not get a block (`status`). Preempts the most recently admitted
 * running request (possibly that one) and returns true, or returns false when it runs alone (then nothing
 * can make room) or the failure was not for memory. */
static bool make_room(tb_llm_batch *b, tb_status status) {
    if (!b->pool || status != TB_ERR_OUT_OF_MEMORY)
        return false;
    slot *victim = NULL;
    int64_t running = 0;
    for (int64_t i = 0; i < b->options.slots; i++) {
        slot *t = &b->slots[i];
        if (t->state != SLOT_PREFILL && t->state != SLOT_DECODE)
            continue;
        running++;
        if (!victim || t->admitted > victim->admitted)
            victim = t;
    }
    if (running < 2)
        return false;
    tb_error_clear();
    preempt(b, victim);
    return true;
}

/* Engine thread: reserves `positions` in slot s, preempting others (or s) while the pool is out of blocks.
 * Returns TB_OK with s still running, TB_OK with s preempted (state SLOT_PREEMPTED), or the error. */
static tb_status reserve_or_preempt(tb_llm_batch *b, slot *s, int64_t positions) {
    const slot_state state = s->state;
    for (;;) {
        const tb_status status = tb_llm_session_reserve(s->session, positions);
        if (status == TB_OK || !make_room(b, status))
            return status;
        if (s->state != state)
            return TB_OK;
    }
}

/* Under the lock, engine thread: whether request r may be admitted beside the running ones. Blocks it would
 * take (its positions, less leading prompt blocks other requests already hold and would share) must fit in
 * the blocks no request holds (free or cached, which are evictable) less those the running requests still
 * need for their prompts. Decode growth is not reserved: preemption covers it. */
static bool fits(const tb_llm_batch *b, const request *r) {
    tb_llm_kv_pool_stats pool;
    tb_llm_kv_pool_get_stats(b->pool, &pool);
    int64_t committed = 0;
    for (int64_t i = 0; i < b->options.slots; i++) {
        const slot *s = &b->slots[i];
        if (s->state != SLOT_ADMITTED && s->state != SLOT_PREFILL && s->state != SLOT_DECODE)
            continue;
        const int64_t target = s->state == SLOT_DECODE ? tb_llm_session_length(s->session) + 1 : request_positions(s->req);
        int64_t held;
        (void)tb_llm_session_table(s->session, &held);
        committed += tb_llm_batch_blocks_for(target) > held ? tb_llm_batch_blocks_for(target) - held : 0;
    }
    int64_t need = tb_llm_batch_blocks_for(request_positions(r));
    for (int32_t j = 0, parent = -1; j < (r->prompt_count - 1) / TB_LLM_KEY_BLOCK; j++) {
        parent = tb_llm_kv_pool_find(b->pool, parent, r->prompt + (int64_t)j * TB_LLM_KEY_BLOCK);
        if (parent < 0 || tb_llm_kv_pool_refcount(b->pool, parent) == 0)
            break;
        need--;
    }
    return need <= pool.blocks - pool.in_use - committed;
}

/* Engine thread: ends slot s's request with the error `status` (its message is the thread's). */
static void fail_slot(tb_llm_batch *b, slot *s, tb_status status) {
    snprintf(b->error, sizeof b->error, "%s", tb_error_message());
    tb_llm_batch_event e;
    final_event(b, s, s->req, -1, TB_LLM_FINISH_ABORTED, &e);
    e.failed = true;
    e.status = status != TB_OK ? status : TB_ERR_INTERNAL;
    snprintf(e.error, sizeof e.error, "%s", tb_error_message());
    tb_error_clear();
    push_local(b, &e);
    if (tb_llm_session_truncate(s->session, 0) != TB_OK) /* cannot fail: 0 is always a valid length */
        tb_error_clear();
    s->canonical = 0;
    s->state = SLOT_DONE;
}

/* log of the softmax normalizer of logits[V], and the `top` largest entries as log probabilities. */
static double fill_top_logprobs(const float *logits, int64_t vocab, int32_t top, tb_llm_batch_event *e) {
    float max = -INFINITY;
    for (int64_t v = 0; v < vocab; v++)
        max = logits[v] > max ? logits[v] : max;
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; v++)
        sum += exp((double)logits[v] - (double)max);
    const double log_z = (double)max + log(sum);
    e->top_count = 0;
    for (int64_t v = 0; v < vocab && top > 0; v++) { /* insertion into the (short) sorted top list */
        const float x = logits[v];
        int32_t at = e->top_count;
        while (at > 0 && x > e->top_logprobs[at - 1])
            at--;
        if (at >= top)
            continue;
        const int32_t last = e->top_count < top ? e->top_count : top - 1;
        for (int32_t j = last; j > at; j--) {
            e->top_ids[j] = e->top_ids[j - 1];
            e->top_logprobs[j] = e->top_logprobs[j - 1];
        }
        e->top_ids[at] = (int32_t)v;
        e->top_logprobs[at] = x;
        if (e->top_count < top)
            e->top_count++;
    }
    for (int32_t j = 0; j < e->top_count; j++)
        e->top_logprobs[j] = (float)((double)e->top_logprobs[j] - log_z);
    return log_z;
}

/* Engine thread: samples the next token of slot `s` from its logits row (modified by the penalties) and
 * records the event; the slot then decodes on or is done. */
static tb_status take_token(tb_llm_batch *b, slot *s, float *logits) {
    const request *r = s->req;
    const int64_t vocab = b->model->vocab;
    const int32_t *history = tb_llm_session_tokens(s->session);
    const int64_t length = tb_llm_session_length(s->session);
    tb_llm_batch_event e;
    memset(&e, 0, sizeof e);
    /* logprobs are those of the model's distribution (before penalties), as OpenAI reports them */
    const double log_z = r->logprobs >= 0 ? fill_top_logprobs(logits, vocab, r->logprobs, &e) : 0.0;
    if (s->counts) { /* the tokens generated so far are history[prompt_count, length) */
        for (int64_t i = r->prompt_count; i < length; i++)
            s->counts[history[i]]++;
        for (int64_t i = r->prompt_count; i < length; i++) {
            const int32_t t = history[i];
            if (s->counts[t] > 0) {
                logits[t] -= r->frequency_penalty * (float)s->counts[t] + r->presence_penalty;
                s->counts[t] = -s->counts[t]; /* applied once per distinct token */
            }
        }
    }
    int32_t token = -1;
    const bool constrained = r->constraint == TB_LLM_CONSTRAINT_JSON_OBJECT;
    tb_status status = constrained ? tb_llm_sampler_sample_allowed(s->sampler, logits, history, length,
                                                                   tb_llm_json_constraint_allows, &s->json, &token)
                                   : tb_llm_sampler_sample(s->sampler, logits, history, length, &token);
    float raw = status == TB_OK ? logits[token] : 0.0f;
    if (s->counts) {
        if (status == TB_OK && s->counts[token] < 0)
            raw += r->frequency_penalty * (float)-s->counts[token] + r->presence_penalty;
        for (int64_t i = r->prompt_count; i < length; i++)
            s->counts[history[i]] = 0;
    }
    TB_TRY(status);
    const int32_t top_count = e.top_count;
    int32_t top_ids[TB_LLM_BATCH_TOP_LOGPROBS];
    float top_logprobs[TB_LLM_BATCH_TOP_LOGPROBS];
    memcpy(top_ids, e.top_ids, sizeof top_ids);
    memcpy(top_logprobs, e.top_logprobs, sizeof top_logprobs);
    s->produced++;
    tb_llm_finish finish = TB_LLM_FINISH_NONE;
    for (int64_t i = 0; i < r->stop_count; i++)
        if (r->stop_ids[i] == token)
            finish = TB_LLM_FINISH_STOP;
    if (constrained) {
        tb_llm_json_constraint_take(&s->json, token);
        if (r->stop_count == 0 && tb_json_recognizer_is_complete(&s->json.state))
            finish = TB_LLM_FINISH_STOP; /* nothing may follow the object and no stop token ends it */
    }
    if (finish == TB_LLM_FINISH_NONE &&
        (s->produced >= r->max_tokens || length >= tb_llm_session_max_seq_len(s->session)))
        finish = TB_LLM_FINISH_LENGTH;
    final_event(b, s, r, token, finish, &e);
    if (r->logprobs >= 0) {
        e.logprob = (float)((double)raw - log_z);
        e.top_count = top_count;
        memcpy(e.top_ids, top_ids, sizeof top_ids);
        memcpy(e.top_logprobs, top_logprobs, sizeof top_logprobs);
    }
    if (!push_local(b, &e))
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory for events");
    s->pending = token;
    s->state = finish == TB_LLM_FINISH_NONE ? SLOT_DECODE : SLOT_DONE;
    return TB_OK;
}

/* The end of the next aligned prompt chunk of prefilling slot s. */
static int64_t chunk_end(const tb_llm_batch *b, const slot *s) {
    const int64_t p = b->options.prefill_chunk, next = (s->prefilled / p + 1) * p;
    return next < s->req->prompt_count ? next : s->req->prompt_count;
}

/* Engine thread: one aligned prompt chunk of slot s. */
static void run_chunk(tb_llm_batch *b, slot *s) {
    const request *r = s->req;
    const int64_t p = b->options.prefill_chunk, begin = s->prefilled, end = chunk_end(b, s);
    const bool last = end == r->prompt_count;
    const double start = now_seconds();
    tb_status status = tb_llm_forward(s->session, r->prompt + begin, end - begin, last ? b->logits : NULL, false);
    b->prefill_seconds += now_seconds() - start;
    b->prefill_chunks++;
    if (status != TB_OK) {
        fail_slot(b, s, status);
        return;
    }
    s->prefilled = end;
    if (end % p == 0 && s->canonical == begin) {
        s->canonical = end;
        if (b->pool)
            publish_chunk(b, s, begin, end);
    }
    if (last && r->generated_count > 0) { /* resumed: its first token is known; feed the generated ones back */
        s->pending = r->generated[0];
        s->replay = 1;
        s->state = SLOT_DECODE;
    } else if (last && (status = take_token(b, s, b->logits)) != TB_OK) {
        fail_slot(b, s, status);
    }
}

/* Engine thread: the prompt chunks of this step, oldest admitted request first. Without a token budget one
 * chunk; with one, chunks while they fit in what the decoding rows leave (always at least one). Chunks stay
 * aligned whatever the budget, so the numbers do not depend on it. */
static void prefill_step(tb_llm_batch *b) {
    int64_t budget = b->options.batch_tokens;
    for (int64_t i = 0; i < b->options.slots; i++)
        budget -= b->slots[i].state == SLOT_DECODE;
    for (bool first = true;; first = false) {
        slot *s = NULL;
        for (int64_t i = 0; i < b->options.slots; i++)
            if (b->slots[i].state == SLOT_PREFILL && (!s || b->slots[i].admitted < s->admitted))
                s = &b->slots[i];
        if (!s)
            return;
        const tb_status status = extend_prefix(b, s); /* a prefix published since the last chunk */
        if (status != TB_OK) {
            fail_slot(b, s, status);
            continue;
        }
        const int64_t tokens = chunk_end(b, s) - s->prefilled;
        if (!first && tokens > budget)
            return;
        const tb_status room = reserve_or_preempt(b, s, chunk_end(b, s));
        if (room != TB_OK) {
            fail_slot(b, s, room);
            continue;
        }
        if (s->state != SLOT_PREFILL) /* preempted (it was the most recent): the next one */
            continue;
        budget -= tokens;
        b->prefill_steps += first;
        run_chunk(b, s);
        if (b->options.batch_tokens == 0)
            return;
    }
}

/* Engine thread: one token of every decoding slot, together. */
static void decode_step(tb_llm_batch *b) {
    for (int64_t i = 0; i < b->options.slots; i++) {
        /* the next position's block, per slot, before any row is chosen (preemption may take any slot) */
        slot *s = &b->slots[i];
        if (s->state != SLOT_DECODE)
            continue;
        const tb_status status = reserve_or_preempt(b, s, tb_llm_session_length(s->session) + 1);
        if (status != TB_OK)
            fail_slot(b, s, status);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < b->options.slots; i++)
        if (b->slots[i].state == SLOT_DECODE) {
            b->step_slots[m] = i;
            b->step_sessions[m] = b->slots[i].session;
            b->step_tokens[m++] = b->slots[i].pending;
        }
    if (m == 0)
        return;
    const double start = now_seconds();
    tb_status status = tb_llm_forward_step(&b->scratch, b->step_sessions, b->step_tokens, m, b->logits);
    b->decode_seconds += now_seconds() - start;
    b->decode_steps++;
    b->decode_rows += m;
    const char *step_error = status != TB_OK ? tb_error_message() : NULL;
    char message[256];
    if (step_error)
        snprintf(message, sizeof message, "%s", step_error);
    for (int64_t j = 0; j < m; j++) {
        slot *s = &b->slots[b->step_slots[j]];
        tb_status row = status;
        if (row != TB_OK)
            tb_error_set(row, "%s", message);
        else if (s->replay < s->req->generated_count) /* resuming: the next token is the one it had sampled */
            s->pending = s->req->generated[s->replay++];
        else
            row = take_token(b, s, b->logits + j * b->model->vocab);
        if (row != TB_OK)
            fail_slot(b, s, row);
    }
}

/* Under the lock: publish this iteration's events, honour cancels, release finished slots, admit queued
 * requests. Returns whether there is work for the engine. */
static bool exchange(tb_llm_batch *b) {
    for (int64_t i = 0; i < b->local_count; i++) {
        const tb_llm_batch_event *e = &b->local[i];
        if (e->token >= 0)
            b->stats.generated_tokens++;
        if (e->finish != TB_LLM_FINISH_NONE)
            b->stats.requests_finished++;
    }
    if (!publish(b, b->local, b->local_count))
        snprintf(b->error, sizeof b->error, "llm batch: out of memory for events (some were dropped)");
    b->local_count = 0;
    for (int64_t i = 0; i < b->options.slots; i++) {
        slot *s = &b->slots[i];
        if ((s->state == SLOT_PREFILL || s->state == SLOT_DECODE || s->state == SLOT_ADMITTED) && s->req->cancelled) {
            tb_llm_batch_event e;
            final_event(b, s, s->req, -1, TB_LLM_FINISH_ABORTED, &e);
            publish(b, &e, 1);
            b->stats.requests_finished++;
            b->stats.requests_cancelled++;
            s->state = SLOT_DONE;
        }
        if (s->state == SLOT_PREEMPTED) { /* back to the queue, in arrival order (ids grow with it) */
            request *r = s->req, **link = &b->queue_head;
            while (*link && (*link)->id < r->id)
                link = &(*link)->next;
            r->next = *link;
            *link = r;
            b->stats.queued++;
            s->req = NULL;
            s->state = SLOT_FREE;
        }
        if (s->state == SLOT_DONE) {
            tb_llm_batch_request_free(s->req);
            s->req = NULL;
            s->state = SLOT_FREE;
            /* pooled: the blocks go back (published prefix blocks stay cached); cannot fail for 0 */
            if (b->pool && tb_llm_session_truncate(s->session, 0) != TB_OK)
                tb_error_clear();
            if (b->pool)
                s->canonical = 0;
        }
    }
    for (request **link = &b->queue_head; *link;) {
        request *r = *link;
        if (!r->cancelled) {
            link = &r->next;
            continue;
        }
        *link = r->next;
        tb_llm_batch_event e;
        final_event(b, NULL, r, -1, TB_LLM_FINISH_ABORTED, &e);
        publish(b, &e, 1);
        b->stats.requests_finished++;
        b->stats.requests_cancelled++;
        b->stats.queued--;
        tb_llm_batch_request_free(r);
    }
    b->queue_tail = NULL;
    for (request *r = b->queue_head; r; r = r->next)
        b->queue_tail = r;
    int64_t running = 0;
    for (int64_t i = 0; i < b->options.slots; i++)
        running += b->slots[i].state != SLOT_FREE;
    while (b->queue_head) { /* the free slot whose own cache serves the request best, else the least recent */
        slot *best = NULL;
        int64_t best_reuse = -1;
        for (int64_t i = 0; i < b->options.slots; i++) {
            slot *s = &b->slots[i];
            if (s->state != SLOT_FREE)
                continue;
            const int64_t n = reusable(b, s, b->queue_head);
            if (n > best_reuse || (n == best_reuse && s->last_used < best->last_used)) {
                best = s;
                best_reuse = n;
            }
        }
        if (!best)
            break;
        if (b->pool && running > 0 && !fits(b, b->queue_head)) { /* it waits (in order) for blocks */
            b->admission_waits += b->queue_head->id != b->waiting_id;
            b->waiting_id = b->queue_head->id;
            break;
        }
        request *r = b->queue_head;
        b->queue_head = r->next;
        if (!b->queue_head)
            b->queue_tail = NULL;
        b->stats.queued--;
        best->req = r;
        best->state = SLOT_ADMITTED;
        best->reused = best->produced = 0;
        best->admitted = best->last_used = ++b->clock;
        running++;
    }
    b->stats.prefill_seconds = b->prefill_seconds;
    b->stats.prefill_chunks = b->prefill_chunks;
    b->stats.prefill_steps = b->prefill_steps;
    b->stats.decode_steps = b->decode_steps;
    b->stats.decode_rows = b->decode_rows;
    b->stats.decode_seconds = b->decode_seconds;
    int64_t active = 0, used = 0;
    for (int64_t i = 0; i < b->options.slots; i++) {
        active += b->slots[i].state != SLOT_FREE;
        used += tb_llm_session_length(b->slots[i].session);
    }
    const tb_llm_model *m = b->model;
    b->stats.active = active;
    b->stats.kv_positions_used = used;
    b->stats.reused_tokens = b->reused_tokens;
    b->stats.prefix_hits = b->prefix_hits;
    b->stats.prefill_tokens_run = b->prefill_tokens_run;
    b->stats.preemptions = b->preemptions;
    b->stats.admission_waits = b->admission_waits;
    if (b->pool) {
        tb_llm_kv_pool_stats pool;
        tb_llm_kv_pool_get_stats(b->pool, &pool);
        b->stats.kv_bytes = pool.bytes;
        b->stats.kv_blocks_allocated = pool.allocated;
        b->stats.kv_blocks_in_use = pool.in_use;
        b->stats.kv_blocks_shared = pool.shared;
        b->stats.kv_blocks_cached = pool.cached;
        b->stats.kv_blocks_evicted = pool.evictions;
    } else {
        b->stats.kv_bytes = used * 2 * m->n_layers * m->n_kv_heads * m->head_dim * (b->options.kv_f16 ? 2 : 4);
    }
    memcpy(b->stats.last_error, b->error, sizeof b->error);
    return active > 0;
}

void *tb_llm_batch_engine_main(void *context) {
    tb_llm_batch *b = context;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        const bool work = exchange(b);
        if (b->stop)
            break;
        if (!work) {
            pthread_cond_wait(&b->wake, &b->lock);
            continue;
        }
        pthread_mutex_unlock(&b->lock);
        for (int64_t i = 0; i < b->options.slots; i++) {
            slot *s = &b->slots[i];
            if (s->state != SLOT_ADMITTED)
                continue;
            pthread_mutex_lock(&b->lock);
            b->stats.prompt_tokens += s->req->preemptions == 0 ? s->req->prompt_count : 0;
            pthread_mutex_unlock(&b->lock);
            const tb_status status = start_slot(b, s);
            if (status != TB_OK)
                fail_slot(b, s, status);
        }
        prefill_step(b);
        decode_step(b);
        pthread_mutex_lock(&b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}
