/* The generation loop: reuse the longest cached prefix of the prompt, run the rest, then alternate sampling
 * and one-token forward passes until a stop token, max_tokens, a full context, or the caller says stop.
 * The step-wise object lets Python drive a generator; tb_llm_generate wraps it with a token callback. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llm/llm_internal.h"
#include "torchburn/alloc.h"

struct tb_llm_generation {
    tb_llm_session *session;
    tb_llm_sampler *sampler;
    int64_t max_tokens;
    int32_t *stop_ids;
    int64_t stop_count;
    float *logits;     /* [V] logits of the next position */
    int32_t pending;   /* last token produced, not yet run through the model */
    int64_t produced;
    double start, first_token;
    tb_llm_stats stats;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *tb_llm_finish_name(tb_llm_finish finish) {
    switch (finish) {
    case TB_LLM_FINISH_NONE: return "running";
    case TB_LLM_FINISH_STOP: return "stop";
    case TB_LLM_FINISH_LENGTH: return "length";
    case TB_LLM_FINISH_ABORTED: return "aborted";
    default: return "invalid";
    }
}

void tb_llm_generation_free(tb_llm_generation *g) {
    if (!g)
        return;
    tb_llm_sampler_free(g->sampler);
    free(g->stop_ids);
    tb_free(g->logits);
    free(g);
}

tb_status tb_llm_generation_begin(tb_llm_session *session, const tb_llm_generate_desc *desc, tb_llm_generation **out) {
    *out = NULL;
    if (!session || !desc)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "generate: NULL argument");
    const tb_llm_model *m = tb_llm_session_model(session);
    if (desc->prompt_count < 1 || !desc->prompt)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "generate: the prompt is empty (it needs at least one token)");
    if (desc->max_tokens < 1)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "generate: max_tokens must be >= 1, got %lld",
                            (long long)desc->max_tokens);
    const int64_t max_seq_len = tb_llm_session_max_seq_len(session);
    if (desc->prompt_count > max_seq_len)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "generate: the prompt has %lld tokens but the context holds %lld (max_seq_len)",
                            (long long)desc->prompt_count, (long long)max_seq_len);
    if (desc->stop_count < 0 || (desc->stop_count > 0 && !desc->stop_ids))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "generate: bad stop token list");
    const double start = now_seconds();
    tb_llm_generation *g = calloc(1, sizeof *g);
    if (!g)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "generate: out of memory");
    g->session = session;
    g->max_tokens = desc->max_tokens;
    g->start = start;
    g->stats.prompt_tokens = desc->prompt_count;
    g->pending = -1;
    tb_status status = tb_llm_sampler_new(m->vocab, &desc->sampling, &g->sampler);
    if (status == TB_OK)
        status = tb_alloc((size_t)m->vocab * sizeof(float), TB_ALLOC_DEFAULT, (void **)&g->logits);
    if (status == TB_OK && desc->stop_count > 0) {
        g->stop_ids = malloc((size_t)desc->stop_count * sizeof *g->stop_ids);
        if (!g->stop_ids)
            status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "generate: out of memory");
        else
            memcpy(g->stop_ids, desc->stop_ids, (size_t)desc->stop_count * sizeof *g->stop_ids);
        g->stop_count = desc->stop_count;
    }
    for (int64_t i = 0; status == TB_OK && i < desc->prompt_count; i++)
        if (desc->prompt[i] < 0 || desc->prompt[i] >= m->vocab)
            status = tb_error_set(TB_ERR_INVALID_ARGUMENT,
                                  "generate: prompt token %d at position %lld is outside the vocabulary [0, %lld)",
                                  (int)desc->prompt[i], (long long)i, (long long)m->vocab);
    if (status == TB_OK) {
        /* shared prefix with the cache; at least the last prompt token is run again for its logits */
        const int32_t *cached = tb_llm_session_tokens(session);
        int64_t reuse = 0, limit = tb_llm_session_length(session);
        limit = limit < desc->prompt_count - 1 ? limit : desc->prompt_count - 1;
        while (reuse < limit && cached[reuse] == desc->prompt[reuse])
            reuse++;
        if (desc->reproducible) { /* only what a fresh session would have computed the same way */
            const int64_t canonical = tb_llm_session_canonical_length(session);
            reuse = reuse < canonical ? reuse : canonical;
            reuse -= reuse % TB_LLM_PREFILL_CHUNK;
        }
        status = tb_llm_session_truncate(session, reuse);
        if (status == TB_OK)
            status = tb_llm_forward(session, desc->prompt + reuse, desc->prompt_count - reuse, g->logits, false);
        g->stats.reused_tokens = reuse;
        g->stats.prefill_seconds = now_seconds() - start;
    }
    if (status != TB_OK) {
        tb_llm_generation_free(g);
        return status;
    }
    *out = g;
    return TB_OK;
}

static bool is_stop(const tb_llm_generation *g, int32_t token) {
    for (int64_t i = 0; i < g->stop_count; i++)
        if (g->stop_ids[i] == token)
            return true;
    return false;
}

tb_status tb_llm_generation_next(tb_llm_generation *g, int32_t *token, tb_llm_finish *finish) {
    *token = -1;
    *finish = g->stats.finish;
    if (g->stats.finish != TB_LLM_FINISH_NONE)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "generate: generation already finished (%s)",
                            tb_llm_finish_name(g->stats.finish));
    tb_llm_session *s = g->session;
    if (g->pending >= 0) {
        TB_TRY(tb_llm_forward(s, &g->pending, 1, g->logits, false));
        g->pending = -1;
    }
    int32_t next;
    TB_TRY(tb_llm_sampler_sample(g->sampler, g->logits, tb_llm_session_tokens(s), tb_llm_session_length(s), &next));
    const double now = now_seconds();
    if (g->produced == 0) {
        g->first_token = now;
        g->stats.ttft_seconds = now - g->start;
    }
    g->stats.decode_seconds = now - g->first_token;
    g->produced++;
    g->stats.generated_tokens = g->produced;
    g->pending = next;
    if (is_stop(g, next))
        g->stats.finish = TB_LLM_FINISH_STOP;
    else if (g->produced >= g->max_tokens || tb_llm_session_length(s) >= tb_llm_session_max_seq_len(s))
        g->stats.finish = TB_LLM_FINISH_LENGTH;
    *token = next;
    *finish = g->stats.finish;
    return TB_OK;
}

void tb_llm_generation_stats(const tb_llm_generation *g, tb_llm_stats *out) { *out = g->stats; }

const float *tb_llm_generation_logits(const tb_llm_generation *g) { return g->logits; }

tb_status tb_llm_generate(tb_llm_session *session, const tb_llm_generate_desc *desc, tb_llm_token_fn callback,
                          void *callback_context, int32_t *tokens, int64_t tokens_capacity, tb_llm_stats *stats) {
    tb_llm_generation *g = NULL;
    if (stats)
        memset(stats, 0, sizeof *stats);
    TB_TRY(tb_llm_generation_begin(session, desc, &g));
    tb_status status = TB_OK;
    tb_llm_finish finish = TB_LLM_FINISH_NONE;
    while (finish == TB_LLM_FINISH_NONE) {
        int32_t token;
        status = tb_llm_generation_next(g, &token, &finish);
        if (status != TB_OK)
            break;
        if (tokens && g->produced <= tokens_capacity)
            tokens[g->produced - 1] = token;
        if (callback && callback(callback_context, token) != 0 && finish == TB_LLM_FINISH_NONE) {
            g->stats.finish = finish = TB_LLM_FINISH_ABORTED;
        }
    }
    if (stats)
        tb_llm_generation_stats(g, stats);
    tb_llm_generation_free(g);
    return status;
}
