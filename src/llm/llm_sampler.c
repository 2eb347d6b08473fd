/* The sampler: repetition penalty, temperature, top-k, top-p, min-p in transformers' order and with its
 * rules (ties at the k-th logit are kept; top-p keeps the most probable tokens until the mass before a
 * token reaches top_p; min-p drops tokens below min_p times the top probability), then one draw from the
 * sampler's own PRNG (xoshiro256** seeded through splitmix64), so a seed fixes the tokens.
 *
 * Cost per token is O(V): one copy of the logits, a quickselect for top-k, and a sort of the survivors
 * only (top-p without top-k sorts a growing prefix, rarely the whole vocabulary). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"
#include "llm/llm_internal.h"
#include "torchburn/alloc.h"

struct tb_llm_sampler {
    int64_t vocab;
    tb_llm_sampling params;
    uint64_t state[4];
    float *work;       /* [V] processed logits */
    int32_t *ids;      /* [V] candidate ids */
    unsigned char *seen; /* [V] repetition-penalty marks (all zero between calls) */
    double *weights;   /* [V] exp(logit - max) of the kept candidates */
};

/* ---- PRNG: xoshiro256** (core/random.h) ---- */

/* ---- parameters ---- */

void tb_llm_sampling_default(tb_llm_sampling *out) {
    *out = (tb_llm_sampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f};
}

tb_status tb_llm_sampling_check(const tb_llm_sampling *p) {
    if (!p)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: parameters are NULL");
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: temperature must be a finite number >= 0, got %g",
                            (double)p->temperature);
    if (p->top_k < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: top_k must be >= 0 (0 disables it), got %lld",
                            (long long)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: repetition_penalty must be a finite number > 0, got %g",
                            (double)p->repetition_penalty);
    return TB_OK;
}

tb_status tb_llm_sampler_new(int64_t vocab_size, const tb_llm_sampling *sampling, tb_llm_sampler **out) {
    *out = NULL;
    TB_TRY(tb_llm_sampling_check(sampling));
    if (vocab_size < 1 || vocab_size > INT32_MAX)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: vocabulary size %lld is out of range", (long long)vocab_size);
    tb_llm_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "sampling: out of memory");
    s->vocab = vocab_size;
    s->params = *sampling;
    tb_xoshiro256ss_seed(s->state, sampling->seed);
    const size_t v = (size_t)vocab_size;
    tb_status status = tb_alloc(v * sizeof(float), TB_ALLOC_DEFAULT, (void **)&s->work);
    if (status == TB_OK)
        status = tb_alloc(v * sizeof(int32_t), TB_ALLOC_DEFAULT, (void **)&s->ids);
    if (status == TB_OK)
        status = tb_alloc(v, TB_ALLOC_ZERO, (void **)&s->seen);
    if (status == TB_OK)
        status = tb_alloc(v * sizeof(double), TB_ALLOC_DEFAULT, (void **)&s->weights);
    if (status != TB_OK) {
        tb_llm_sampler_free(s);
        return status;
    }
    *out = s;
    return TB_OK;
}

void tb_llm_sampler_free(tb_llm_sampler *s) {
    if (!s)
        return;
    tb_free(s->work);
    tb_free(s->ids);
    tb_free(s->seen);
    tb_free(s->weights);
    free(s);
}

/* ---- selection helpers over ids[] ordered by work[id] descending (ties: smaller id first) ---- */

static bool before(const float *work, int32_t a, int32_t b) { return work[a] > work[b] || (work[a] == work[b] && a < b); }

/* Rearranges ids[0..n) so that ids[0..k) hold the k first ones in `before` order (unsorted). */
static void select_first(const float *work, int32_t *ids, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t pivot = ids[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (before(work, ids[i], pivot))
                i++;
            while (before(work, pivot, ids[j]))
                j--;
            if (i <= j) {
                int32_t t = ids[i];
                ids[i++] = ids[j];
                ids[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

/* Sorts ids[0..k) (after selecting them from ids[0..n)). qsort has no context argument; the sampler is
 * used by one thread at a time, and the comparison reads the pointer through a thread-local copy. */
static _Thread_local const float *thread_sort_work;
static int compare_ids_tl(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return before(thread_sort_work, x, y) ? -1 : before(thread_sort_work, y, x) ? 1 : 0;
}

static void sort_first(const float *work, int32_t *ids, int64_t n, int64_t k) {
    if (k < n)
        select_first(work, ids, n, k);
    thread_sort_work = work;
    qsort(ids, (size_t)k, sizeof *ids, compare_ids_tl);
}

/* ---- the pipeline ---- */

/* True when every logit is finite. Greedy decoding checks this explicitly: an argmax over NaN picks an
 * arbitrary token, where sampling finds the non-finite total mass. O(V), next to an O(V * C) LM head. */
static bool all_finite(const float *logits, int64_t v) {
    bool finite = true;
    for (int64_t i = 0; i < v; i++)
        finite &= fabsf(logits[i]) <= 3.4028235e38f; /* false for inf and NaN */
    return finite;
}

static tb_status not_finite(void) {
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: the logits are not finite (NaN or inf)");
}

/* Applies the penalty and temperature into work[], then leaves the kept candidates in ids[0..*count);
 * for greedy sampling (*is_greedy) it returns the first maximal logit in *greedy instead. */
static tb_status filter(tb_llm_sampler *s, const float *logits, const int32_t *history, int64_t history_count,
                        int64_t *count, bool *is_greedy, int32_t *greedy) {
    const tb_llm_sampling *p = &s->params;
    const int64_t v = s->vocab;
    *is_greedy = p->temperature == 0.0f || p->top_k == 1;
    if (*is_greedy && !all_finite(logits, v))
        return not_finite();
    if (*is_greedy && p->repetition_penalty == 1.0f) { /* plain argmax: no copy of the logits */
        *greedy = (int32_t)tb_llm_kernels_active()->argmax(logits, v);
        return TB_OK;
    }
    float *work = s->work;
    memcpy(work, logits, (size_t)v * sizeof(float));
    if (p->repetition_penalty != 1.0f && history) {
        for (int64_t i = 0; i < history_count; i++) {
            const int32_t id = history[i];
            if (id < 0 || id >= v || s->seen[id])
                continue;
            s->seen[id] = 1;
            work[id] = work[id] < 0.0f ? work[id] * p->repetition_penalty : work[id] / p->repetition_penalty;
        }
        for (int64_t i = 0; i < history_count; i++)
            if (history[i] >= 0 && history[i] < v)
                s->seen[history[i]] = 0;
    }
    if (*is_greedy) {
        *greedy = (int32_t)tb_llm_kernels_active()->argmax(work, v);
        return TB_OK;
    }
    if (p->temperature != 1.0f)
        for (int64_t i = 0; i < v; i++)
            work[i] /= p->temperature;
    int32_t *ids = s->ids;
    for (int64_t i = 0; i < v; i++)
        ids[i] = (int32_t)i;
    int64_t n = v;
    if (p->top_k > 0 && p->top_k < v) {
        select_first(work, ids, v, p->top_k);
        float threshold = work[ids[0]];
        for (int64_t i = 1; i < p->top_k; i++)
            threshold = work[ids[i]] < threshold ? work[ids[i]] : threshold;
        n = p->top_k;
        for (int64_t i = n; i < v; i++) /* keep every logit equal to the k-th one (transformers does) */
            if (work[ids[i]] >= threshold) {
                int32_t t = ids[n];
                ids[n++] = ids[i];
                ids[i] = t;
            }
    }
    if (p->top_p < 1.0f) {
        /* normalizer over the current candidates, then the sorted prefix until the mass before a token
         * reaches top_p; grow the sorted prefix when it is not enough */
        float max = work[ids[0]];
        for (int64_t i = 1; i < n; i++)
            max = work[ids[i]] > max ? work[ids[i]] : max;
        double total = 0.0;
        for (int64_t i = 0; i < n; i++)
            total += exp((double)work[ids[i]] - (double)max);
        int64_t prefix = n < 256 ? n : 256;
        int64_t kept = 0;
        for (;;) {
            sort_first(work, ids, n, prefix);
            double mass = 0.0;
            kept = 0;
            while (kept < prefix && (kept == 0 || mass < (double)p->top_p * total)) {
                mass += exp((double)work[ids[kept]] - (double)max);
                kept++;
            }
            if (kept < prefix || prefix == n)
                break;
            prefix = prefix * 8 < n ? prefix * 8 : n;
        }
        n = kept;
    }
    if (p->min_p > 0.0f) {
        float max = work[ids[0]];
        for (int64_t i = 1; i < n; i++)
            max = work[ids[i]] > max ? work[ids[i]] : max;
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) { /* order-preserving compaction; the top token always stays */
            const int32_t id = ids[i];
            if (work[id] == max || exp((double)work[id] - (double)max) >= (double)p->min_p)
                ids[kept++] = id;
        }
        n = kept;
    }
    *count = n;
    return TB_OK;
}

/* Weights exp(l - max) of ids[0..n) into s->weights; returns their sum. */
static double candidate_weights(tb_llm_sampler *s, int64_t n) {
    float max = s->work[s->ids[0]];
    for (int64_t i = 1; i < n; i++)
        max = s->work[s->ids[i]] > max ? s->work[s->ids[i]] : max;
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->weights[i] = exp((double)s->work[s->ids[i]] - (double)max);
        total += s->weights[i];
    }
    return total;
}

static tb_status check_call(const tb_llm_sampler *s, const float *logits, const void *out) {
    if (!s || !logits || !out)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: NULL argument");
    return TB_OK;
}

tb_status tb_llm_sampler_sample(tb_llm_sampler *s, const float *logits, const int32_t *history, int64_t history_count,
                                int32_t *token) {
    TB_TRY(check_call(s, logits, token));
    int64_t n = 0;
    bool is_greedy;
    int32_t greedy = 0;
    TB_TRY(filter(s, logits, history, history_count, &n, &is_greedy, &greedy));
    if (is_greedy) {
        *token = greedy;
        return TB_OK;
    }
    const double total = candidate_weights(s, n);
    if (!(total > 0.0) || isinf(total))
        return not_finite();
    const double target = tb_xoshiro256ss_unit(s->state) * total;
    double cumulative = 0.0;
    for (int64_t i = 0; i < n; i++) {
        cumulative += s->weights[i];
        if (target < cumulative) {
            *token = s->ids[i];
            return TB_OK;
        }
    }
    *token = s->ids[n - 1]; /* rounding left the target at the very end */
    return TB_OK;
}

/* ---- sampling restricted to allowed tokens ---- */

/* Draws of rejected tokens before the candidates are checked all at once. */
enum { REJECTION_LIMIT = 8 };

static tb_status none_allowed(void) {
    return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: no token of the vocabulary is allowed by the constraint");
}

/* The largest logit among allowed tokens, `first` (the unconstrained argmax) tried first. work[] holds the
 * processed logits when work_ready, else it is filled from logits. */
static tb_status greedy_allowed(tb_llm_sampler *s, const float *logits, bool work_ready, int32_t first,
                                tb_llm_token_allowed allowed, void *context, int32_t *token) {
    if (allowed(context, first)) {
        *token = first;
        return TB_OK;
    }
    const int64_t v = s->vocab;
    float *work = s->work;
    if (!work_ready)
        memcpy(work, logits, (size_t)v * sizeof(float));
    int32_t best = first;
    for (int attempt = 0; attempt < REJECTION_LIMIT; attempt++) {
        work[best] = -INFINITY;
        best = (int32_t)tb_llm_kernels_active()->argmax(work, v);
        if (work[best] == -INFINITY)
            return none_allowed();
        if (allowed(context, best)) {
            *token = best;
            return TB_OK;
        }
    }
    work[best] = -INFINITY;
    for (int64_t i = 0; i < v; i++)
        if (work[i] != -INFINITY && !allowed(context, (int32_t)i))
            work[i] = -INFINITY;
    best = (int32_t)tb_llm_kernels_active()->argmax(work, v);
    if (work[best] == -INFINITY)
        return none_allowed();
    *token = best;
    return TB_OK;
}

/* One draw over weights[0..n) (summing to total); the index, or -1 when every weight is zero. */
static int64_t draw_index(tb_llm_sampler *s, int64_t n, double total) {
    const double target = tb_xoshiro256ss_unit(s->state) * total;
    double cumulative = 0.0;
    int64_t last = -1;
    for (int64_t i = 0; i < n; i++) {
        if (s->weights[i] <= 0.0)
            continue;
        cumulative += s->weights[i];
        last = i;
        if (target < cumulative)
            return i;
    }
    return last; /* rounding left the target at the very end */
}

static double weight_total(const double *weights, int64_t n) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += weights[i];
    return total;
}

tb_status tb_llm_sampler_sample_allowed(tb_llm_sampler *s, const float *logits, const int32_t *history,
                                        int64_t history_count, tb_llm_token_allowed allowed, void *context,
                                        int32_t *token) {
    TB_TRY(check_call(s, logits, token));
    if (!allowed)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "sampling: NULL token predicate");
    int64_t n = 0;
    bool is_greedy;
    int32_t greedy = 0;
    TB_TRY(filter(s, logits, history, history_count, &n, &is_greedy, &greedy));
    if (is_greedy)
        return greedy_allowed(s, logits, s->params.repetition_penalty != 1.0f, greedy, allowed, context, token);
    double total = candidate_weights(s, n);
    if (!(total > 0.0) || isinf(total))
        return not_finite();
    /* rejection: each draw is from the kept candidates not yet rejected, so an accepted token has exactly
     * the masked distribution */
    for (int attempt = 0; attempt < REJECTION_LIMIT && total > 0.0; attempt++) {
        const int64_t i = draw_index(s, n, total);
        if (i < 0)
            break;
        if (allowed(context, s->ids[i])) {
            *token = s->ids[i];
            return TB_OK;
        }
        s->weights[i] = 0.0;
        total = weight_total(s->weights, n);
    }
    for (int64_t i = 0; i < n; i++)
        if (s->weights[i] > 0.0 && !allowed(context, s->ids[i]))
            s->weights[i] = 0.0;
    total = weight_total(s->weights, n);
    if (!(total > 0.0)) { /* no kept candidate is allowed: every allowed token of the vocabulary */
        n = 0;
        for (int64_t id = 0; id < s->vocab; id++)
            if (allowed(context, (int32_t)id))
                s->ids[n++] = (int32_t)id;
        if (n == 0)
            return none_allowed();
        total = candidate_weights(s, n);
    }
    const int64_t i = draw_index(s, n, total);
    if (i < 0)
        return none_allowed();
    *token = s->ids[i];
    return TB_OK;
}

tb_status tb_llm_sampler_probs(tb_llm_sampler *s, const float *logits, const int32_t *history, int64_t history_count,
                               float *probs) {
    TB_TRY(check_call(s, logits, probs));
    int64_t n = 0;
    bool is_greedy;
    int32_t greedy = 0;
    TB_TRY(filter(s, logits, history, history_count, &n, &is_greedy, &greedy));
    memset(probs, 0, (size_t)s->vocab * sizeof(float));
    if (is_greedy) {
        probs[greedy] = 1.0f;
        return TB_OK;
    }
    const double total = candidate_weights(s, n);
    for (int64_t i = 0; i < n; i++)
        probs[s->ids[i]] = (float)(s->weights[i] / total);
    return TB_OK;
}
