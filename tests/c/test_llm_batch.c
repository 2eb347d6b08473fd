/* Tests of continuous batching (torchburn/llm_batch.h): the batched decode kernel against the single-row
 * decode kernel bit for bit, then the engine on a tiny random Qwen2 folder written here: concurrent requests
 * (greedy and seeded sampling, int4/int8/f32) give exactly the tokens each gives alone, the alone result equals
 * tb_llm_generate when the prompt fits one chunk, prefix reuse is counted and changes nothing, cancellation
 * frees the slot, bad requests are refused with a message. The KV block pool (llm/llm_kv_pool.h): pooled
 * sessions equal contiguous ones bit for bit, a shared prefix survives its first owner, appending into a
 * shared block copies it first, cached blocks are evicted least recently released first (leaves before
 * parents), exhaustion and a failed chunk allocation are errors, and in the engine a request that runs
 * out of blocks fails alone while its neighbour finishes with its own tokens. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "llm/llm_batch_internal.h"
#include "llm/llm_kv_pool.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/cpu.h"
#include "torchburn/llm_batch.h"
#include "torchburn/safetensors.h"
#include "torchburn/thread_pool.h"

enum { VOCAB = 200, HIDDEN = 128, INTER = 256, LAYERS = 2, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 32 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* ---- the batched rows kernel equals the single-row one bit for bit ---- */

static void test_batch_rows(void) {
    const tb_llm_qkernels *kernels[3] = {tb_llm_qkernels_active(), NULL, NULL};
    int count = kernels[0] && kernels[0]->batch_rows ? 1 : 0;
    if (count == 0)
        printf("llm_batch: no int8-activation kernels here; the batch kernel is not used\n");
#ifdef TB_HAVE_X86
    if (tb_isa_supported(TB_ISA_AVX2) && kernels[0] != &tb_llm_qkernels_avx2)
        kernels[count++] = &tb_llm_qkernels_avx2; /* checked on AVX-512 machines too */
#endif
    for (int which = 0; which < count; which++) {
        const tb_llm_qkernels *q = kernels[which];
        const int64_t ks[] = {64, 96, 128, 256, 320, 896};
        const int64_t groups[] = {32, 64, 128};
        for (int format = 0; format < 2; format++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (size_t gi = 0; gi < (format == 0 ? 3u : 1u); gi++) {
                    const int64_t n = 37, k = ks[ki], group = groups[gi];
                    if (format == 0 && k % group != 0)
                        continue;
                    const tb_llm_quant quant = format == 0 ? TB_LLM_QUANT_INT4 : TB_LLM_QUANT_INT8;
                    float *w = malloc(sizeof(float) * (size_t)(n * k)), *bias = malloc(sizeof(float) * (size_t)n);
                    for (int64_t i = 0; i < n * k; i++)
                        w[i] = uniform() * 0.5f;
                    for (int64_t i = 0; i < n; i++)
                        bias[i] = uniform();
                    void *data = malloc((size_t)(quant == TB_LLM_QUANT_INT8 ? n * k : n * k / 2) + 64);
                    float *scales = malloc(sizeof(float) * (size_t)(quant == TB_LLM_QUANT_INT8 ? n : n * k / group));
                    llm_matrix m = {.n = n, .k = k, .format = quant, .has_bias = true, .bias = bias};
                    TB_CHECK((quant == TB_LLM_QUANT_INT8 ? tb_quantize_int8(w, n, k, data, scales)
                                                         : tb_llm_quantize_int4(w, n, k, group, data, scales)) == TB_OK);
                    TB_CHECK(tb_llm_matrix_bind(&m, data, scales, group) == TB_OK);
                    for (int64_t rows = 1; rows <= 9; rows += 2) {
                        float *x = malloc(sizeof(float) * (size_t)(rows * k));
                        float *batched = malloc(sizeof(float) * (size_t)(rows * n));
                        float *single = malloc(sizeof(float) * (size_t)(rows * n));
                        for (int64_t i = 0; i < rows * k; i++)
                            x[i] = uniform() * (i % 7 == 0 ? 8.0f : 1.0f);
                        const int64_t row_bytes = tb_llm_qact_row_bytes(quant, k);
                        unsigned char *act = NULL;
                        TB_CHECK(tb_alloc((size_t)(rows * row_bytes), TB_ALLOC_DEFAULT, (void **)&act) == TB_OK);
                        for (int64_t r = 0; r < rows; r++) {
                            q->prepare(quant, x + r * k, k, act + r * row_bytes);
                            TB_CHECK(tb_llm_qmatmul(q, &m, x + r * k, k, 1, single + r * n) == TB_OK);
                        }
                        tb_llm_qrun run = {.w = &m.q, .m = rows, .act = act, .act_row_bytes = row_bytes, .y = batched,
                                           .y_row_stride = n, .bias = bias};
                        for (int64_t begin = 0; begin < n; begin += 8) /* ranges as the step splits them */
                            q->batch_rows(&run, begin, begin + 8 < n ? begin + 8 : n);
                        TB_CHECK_MSG(memcmp(batched, single, sizeof(float) * (size_t)(rows * n)) == 0,
                                     "%s %s k=%lld group=%lld rows=%lld: batched rows differ from single rows", q->name,
                                     format == 0 ? "int4" : "int8", (long long)k, (long long)group, (long long)rows);
                        tb_free(act);
                        free(x);
                        free(batched);
                        free(single);
                    }
                    free(w);
                    free(bias);
                    free(data);
                    free(scales);
                }
    }
}

/* ---- a tiny model folder ---- */

static void write_model(const char *dir) {
    char path[700], config[1024];
    mkdir(dir, 0755);
    snprintf(config, sizeof config,
             "{\"model_type\": \"qwen2\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": true, \"eos_token_id\": 2, \"hidden_act\": \"silu\"}",
             VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    TB_CHECK(f != NULL);
    if (!f)
        return;
    fputs(config, f);
    fclose(f);
    enum { MAX_TENSORS = 40 };
    tb_safetensors_entry entries[MAX_TENSORS];
    char names[MAX_TENSORS][96];
    float *buffers[MAX_TENSORS];
    int count = 0;
    struct { const char *name; int64_t rows, cols; float scale, offset; } specs[] = {
        {"input_layernorm.weight", HIDDEN, 0, 0.1f, 1.0f},
        {"post_attention_layernorm.weight", HIDDEN, 0, 0.1f, 1.0f},
        {"self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN, 0.3f, 0.0f},
        {"self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN, 0.3f, 0.0f},
        {"self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN, 0.3f, 0.0f},
        {"self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM, 0.3f, 0.0f},
        {"mlp.gate_proj.weight", INTER, HIDDEN, 0.3f, 0.0f},
        {"mlp.up_proj.weight", INTER, HIDDEN, 0.3f, 0.0f},
        {"mlp.down_proj.weight", HIDDEN, INTER, 0.3f, 0.0f},
        {"self_attn.q_proj.bias", HEADS * HEAD_DIM, 0, 0.3f, 0.0f},
        {"self_attn.k_proj.bias", KV_HEADS * HEAD_DIM, 0, 0.3f, 0.0f},
        {"self_attn.v_proj.bias", KV_HEADS * HEAD_DIM, 0, 0.3f, 0.0f},
    };
    for (int l = -1; l < LAYERS; l++) {
        const int n = l < 0 ? 2 : (int)(sizeof specs / sizeof specs[0]);
        for (int i = 0; i < n; i++) {
            const char *name = l < 0 ? (i == 0 ? "model.embed_tokens.weight" : "model.norm.weight") : specs[i].name;
            const int64_t rows = l < 0 ? (i == 0 ? VOCAB : HIDDEN) : specs[i].rows;
            const int64_t cols = l < 0 ? (i == 0 ? HIDDEN : 0) : specs[i].cols;
            const float scale = l < 0 ? (i == 0 ? 1.0f : 0.1f) : specs[i].scale;
            const float offset = l < 0 ? (i == 0 ? 0.0f : 1.0f) : specs[i].offset;
            if (l < 0)
                snprintf(names[count], sizeof names[count], "%s", name);
            else
                snprintf(names[count], sizeof names[count], "model.layers.%d.%s", l, name);
            const int64_t numel = rows * (cols > 0 ? cols : 1);
            buffers[count] = malloc(sizeof(float) * (size_t)numel);
            for (int64_t j = 0; j < numel; j++)
                buffers[count][j] = uniform() * scale + offset;
            entries[count] = (tb_safetensors_entry){.name = names[count], .dtype = TB_SAFETENSORS_F32,
                                                    .ndim = cols > 0 ? 2 : 1, .shape = {rows, cols},
                                                    .data = buffers[count]};
            count++;
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    TB_CHECK(tb_safetensors_write(path, entries, (size_t)count, NULL, NULL, 0) == TB_OK);
    for (int i = 0; i < count; i++)
        free(buffers[i]);
}

/* ---- engine helpers ---- */

enum { MAX_REQUESTS = 12, MAX_OUT = 160 };

typedef struct outcome {
    uint64_t id;
    int32_t tokens[MAX_OUT];
    float logprobs[MAX_OUT]; /* of each token: bit-exact equality of these shows the logits were equal */
    int64_t count, reused;
    tb_llm_finish finish;
    bool failed;
    tb_status status; /* of a failed request, with its message */
    char error[160];
} outcome;

/* Waits for the final events of requests out[0..n) (ids set), collecting their tokens. */
static void collect(tb_llm_batch *b, outcome *out, int n) {
    int done = 0;
    tb_llm_batch_event events[32];
    for (int spins = 0; done < n && spins < 20000; spins++) {
        if (!tb_llm_batch_wait(b, 0.05))
            continue;
        const int64_t got = tb_llm_batch_poll(b, events, 32);
        for (int64_t e = 0; e < got; e++)
            for (int i = 0; i < n; i++) {
                if (out[i].id != events[e].id)
                    continue;
                if (events[e].token >= 0 && out[i].count < MAX_OUT) {
                    out[i].logprobs[out[i].count] = events[e].logprob;
                    out[i].tokens[out[i].count++] = events[e].token;
                }
                if (events[e].finish != TB_LLM_FINISH_NONE) {
                    out[i].finish = events[e].finish;
                    out[i].failed = events[e].failed;
                    out[i].reused = events[e].reused_tokens;
                    out[i].status = events[e].status;
                    snprintf(out[i].error, sizeof out[i].error, "%s", events[e].error);
                    done++;
                }
            }
    }
    TB_CHECK_MSG(done == n, "only %d of %d requests finished", done, n);
}

typedef struct prompt_set {
    int32_t ids[MAX_REQUESTS][120];
    int64_t lengths[MAX_REQUESTS];
    int n;
} prompt_set;

static tb_llm_batch_request make_request(const prompt_set *p, int i, int64_t max_tokens) {
    tb_llm_batch_request r = {.prompt = p->ids[i], .prompt_count = p->lengths[i], .max_tokens = max_tokens,
                              .logprobs = i % 2 ? 3 : 0};
    tb_llm_sampling_default(&r.sampling);
    if (i % 3 == 1) { /* some requests sample (seeded), the rest are greedy */
        r.sampling.temperature = 0.9f;
        r.sampling.seed = 1000 + (uint64_t)i;
    }
    if (i % 4 == 3) {
        r.presence_penalty = 0.5f;
        r.frequency_penalty = 0.3f;
    }
    return r;
}

static tb_llm_batch *new_engine_budget(const tb_llm_model *model, int64_t slots, int64_t chunk, int64_t budget) {
    tb_llm_batch_options options = {.slots = slots, .ctx_size = 200, .prefill_chunk = chunk, .batch_tokens = budget};
    tb_llm_batch *b = NULL;
    TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_OK);
    return b;
}

static tb_llm_batch *new_engine(const tb_llm_model *model, int64_t slots, int64_t chunk) {
    return new_engine_budget(model, slots, chunk, 0);
}

/* The batched step's logits equal each session's own single-token forward bit for bit. */
static void test_step_logits(const tb_llm_model *model, const char *what) {
    enum { M = 5, STEPS = 3 };
    tb_llm_session *batched[M], *single[M];
    tb_llm_step_scratch scratch;
    memset(&scratch, 0, sizeof scratch);
    float *logits = malloc(sizeof(float) * M * VOCAB), *expected = malloc(sizeof(float) * VOCAB);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = (i * 31 + 7) % VOCAB;
    for (int i = 0; i < M; i++) {
        TB_CHECK(tb_llm_session_new(model, 64, i == 2, &batched[i]) == TB_OK && tb_llm_session_new(model, 64, i == 2,
                                                                                                 &single[i]) == TB_OK);
        TB_CHECK(tb_llm_forward(batched[i], prompt + i, 5 + 7 * i, NULL, false) == TB_OK);
        TB_CHECK(tb_llm_forward(single[i], prompt + i, 5 + 7 * i, NULL, false) == TB_OK);
    }
    bool same = true;
    for (int step = 0; step < STEPS; step++) {
        int32_t tokens[M];
        for (int i = 0; i < M; i++)
            tokens[i] = (int32_t)((step * 17 + i * 3) % VOCAB);
        TB_CHECK(tb_llm_forward_step(&scratch, batched, tokens, M, logits) == TB_OK);
        for (int i = 0; i < M; i++) {
            TB_CHECK(tb_llm_forward(single[i], &tokens[i], 1, expected, false) == TB_OK);
            same &= memcmp(expected, logits + i * VOCAB, sizeof(float) * VOCAB) == 0;
            same &= tb_llm_session_length(batched[i]) == tb_llm_session_length(single[i]);
        }
    }
    TB_CHECK_MSG(same, "%s: batched step logits differ from single-sequence decode", what);
    for (int i = 0; i < M; i++) {
        tb_llm_session_free(batched[i]);
        tb_llm_session_free(single[i]);
    }
    tb_llm_step_scratch_free(&scratch);
    free(logits);
    free(expected);
}

/* ---- the KV block pool ---- */

/* Logits after running tokens[0..count) on `session` (one forward call), into out[V]. */
static void run_tokens(tb_llm_session *session, const int32_t *tokens, int64_t count, float *out) {
    TB_CHECK(tb_llm_forward(session, tokens, count, out, false) == TB_OK);
}

static void fill_tokens(int32_t *tokens, int64_t count, uint32_t seed) {
    for (int64_t t = 0; t < count; t++)
        tokens[t] = (int32_t)((seed * 2654435761u + (uint32_t)t * 40503u) % VOCAB);
}

/* Publishes the whole blocks of `session`'s first `count` positions as a chain (as the engine does). */
static void publish_prefix(tb_llm_kv_pool *pool, tb_llm_session *session, int64_t count) {
    int64_t held;
    int32_t *table = tb_llm_session_table(session, &held);
    int32_t parent = -1;
    for (int64_t j = 0; j < count / TB_LLM_KEY_BLOCK; j++) {
        TB_CHECK(tb_llm_kv_pool_publish(pool, table[j], parent, tb_llm_session_tokens(session) + j * 16) == table[j]);
        parent = table[j];
    }
}

static void test_pool_sharing(const tb_llm_model *model, const char *what) {
    const int64_t V = model->vocab;
    float *pooled = malloc(sizeof(float) * (size_t)V), *plain = malloc(sizeof(float) * (size_t)V);
    int32_t prompt[48], other[8], next = 7;
    fill_tokens(prompt, 48, 11);
    fill_tokens(other, 8, 12);
    tb_llm_kv_pool *pool = NULL;
    TB_CHECK(tb_llm_kv_pool_new(model, false, 16, 2, &pool) == TB_OK);
    tb_llm_session *first = NULL, *second = NULL, *reference = NULL;
    TB_CHECK(tb_llm_session_new_pooled(model, 200, pool, &first) == TB_OK);
    TB_CHECK(tb_llm_session_new_pooled(model, 200, pool, &second) == TB_OK);
    TB_CHECK(tb_llm_session_new(model, 200, false, &reference) == TB_OK);
    if (!pool || !first || !second || !reference)
        return;
    /* a pooled session computes what a contiguous one does, bit for bit (prefill, then a decode token) */
    run_tokens(first, prompt, 40, pooled);
    run_tokens(reference, prompt, 40, plain);
    TB_CHECK_MSG(memcmp(pooled, plain, sizeof(float) * (size_t)V) == 0, "%s: pooled prefill logits differ", what);
    run_tokens(first, &next, 1, pooled);
    run_tokens(reference, &next, 1, plain);
    TB_CHECK_MSG(memcmp(pooled, plain, sizeof(float) * (size_t)V) == 0, "%s: pooled decode logits differ", what);
    /* refcount: the second session maps the first two (published) blocks; they outlive the first owner */
    publish_prefix(pool, first, 32);
    int64_t held;
    const int32_t *table = tb_llm_session_table(first, &held);
    const int32_t b0 = table[0], b1 = table[1];
    TB_CHECK(held == 3 && tb_llm_kv_pool_find(pool, -1, prompt) == b0 && tb_llm_kv_pool_find(pool, b0, prompt + 16) == b1);
    TB_CHECK(tb_llm_session_share(second, table, 2, prompt) == TB_OK);
    TB_CHECK(tb_llm_kv_pool_refcount(pool, b0) == 2 && tb_llm_kv_pool_refcount(pool, b1) == 2);
    tb_llm_kv_pool_stats stats;
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK_MSG(stats.in_use == 3 && stats.shared == 2 && stats.cached == 0, "in use %lld shared %lld cached %lld",
                 (long long)stats.in_use, (long long)stats.shared, (long long)stats.cached);
    tb_llm_session_free(first);
    TB_CHECK(tb_llm_kv_pool_refcount(pool, b0) == 1 && tb_llm_kv_pool_refcount(pool, b1) == 1);
    tb_llm_session *again = NULL; /* the reference replayed: prompt[0..40) then 8 tokens after position 32 */
    TB_CHECK(tb_llm_session_new(model, 200, false, &again) == TB_OK);
    run_tokens(again, prompt, 40, plain);
    TB_CHECK(tb_llm_session_truncate(again, 32) == TB_OK);
    run_tokens(second, prompt + 32, 8, pooled);
    run_tokens(again, prompt + 32, 8, plain);
    TB_CHECK_MSG(memcmp(pooled, plain, sizeof(float) * (size_t)V) == 0,
                 "%s: a session continuing shared blocks differs from one that computed them", what);
    /* copy-on-write: appending inside shared block 1 (after truncating into it) copies it first */
    tb_llm_session *third = NULL;
    TB_CHECK(tb_llm_session_new_pooled(model, 200, pool, &third) == TB_OK);
    TB_CHECK(tb_llm_session_share(third, (const int32_t[]){b0, b1}, 2, prompt) == TB_OK);
    TB_CHECK(tb_llm_session_truncate(third, 24) == TB_OK);
    TB_CHECK(tb_llm_kv_pool_refcount(pool, b1) == 2); /* second and third */
    run_tokens(third, other, 8, pooled);
    table = tb_llm_session_table(third, &held);
    TB_CHECK_MSG(table[0] == b0 && table[1] != b1 && tb_llm_kv_pool_refcount(pool, b1) == 1,
                 "%s: the shared block was written in place (table %d %d, refcount %d)", what, (int)table[0],
                 (int)table[1], (int)tb_llm_kv_pool_refcount(pool, b1));
    TB_CHECK(tb_llm_session_truncate(again, 24) == TB_OK);
    run_tokens(again, other, 8, plain);
    TB_CHECK_MSG(memcmp(pooled, plain, sizeof(float) * (size_t)V) == 0, "%s: the copied block lost positions", what);
    tb_llm_session *fourth = NULL; /* the original block 1 is intact: a fresh mapping continues as before */
    TB_CHECK(tb_llm_session_new_pooled(model, 200, pool, &fourth) == TB_OK);
    TB_CHECK(tb_llm_session_share(fourth, (const int32_t[]){b0, b1}, 2, prompt) == TB_OK);
    TB_CHECK(tb_llm_session_truncate(again, 0) == TB_OK);
    run_tokens(again, prompt, 40, plain);
    TB_CHECK(tb_llm_session_truncate(again, 32) == TB_OK);
    run_tokens(fourth, prompt + 32, 8, pooled);
    run_tokens(again, prompt + 32, 8, plain);
    TB_CHECK_MSG(memcmp(pooled, plain, sizeof(float) * (size_t)V) == 0, "%s: copy-on-write changed the shared block",
                 what);
    /* with every holder gone the published blocks stay cached and findable; the private ones are free */
    tb_llm_session_free(second);
    tb_llm_session_free(third);
    tb_llm_session_free(fourth);
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK_MSG(stats.in_use == 0 && stats.cached == 2 && tb_llm_kv_pool_find(pool, b0, prompt + 16) == b1,
                 "in use %lld cached %lld", (long long)stats.in_use, (long long)stats.cached);
    tb_llm_session_free(again);
    tb_llm_session_free(reference);
    tb_llm_kv_pool_free(pool);
    free(pooled);
    free(plain);
}

/* Eviction order (least recently released first; a chain's leaf before its parent), exhaustion, and a
 * failed chunk allocation (injected) that leaves the pool usable. */
static void test_pool_eviction(const tb_llm_model *model) {
    tb_llm_kv_pool *pool = NULL;
    TB_CHECK(tb_llm_kv_pool_new(model, true, 4, 1, &pool) == TB_OK);
    if (!pool)
        return;
    int32_t tokens[4][16], blocks[4];
    for (int i = 0; i < 4; i++) {
        fill_tokens(tokens[i], 16, 100 + (uint32_t)i);
        TB_CHECK(tb_llm_kv_pool_take(pool, &blocks[i]) == TB_OK);
    }
    /* chains x = (0, 1) and y = (2, 3), released x first, each leaf first as a session releases */
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[0], -1, tokens[0]) == blocks[0]);
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[1], blocks[0], tokens[1]) == blocks[1]);
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[2], -1, tokens[2]) == blocks[2]);
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[3], blocks[2], tokens[3]) == blocks[3]);
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[3], blocks[2], tokens[3]) == blocks[3]); /* idempotent */
    const int order[4] = {1, 0, 3, 2};
    for (int i = 0; i < 4; i++)
        tb_llm_kv_pool_release(pool, blocks[order[i]]);
    tb_llm_kv_pool_stats stats;
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK(stats.cached == 4 && stats.in_use == 0 && stats.allocated == 4);
    /* a cached block brought back into use is no longer evictable */
    tb_llm_kv_pool_ref(pool, blocks[2]);
    const int expected[3] = {1, 0, 3};
    for (int i = 0; i < 3; i++) {
        int32_t got = -1;
        TB_CHECK(tb_llm_kv_pool_take(pool, &got) == TB_OK);
        TB_CHECK_MSG(got == blocks[expected[i]], "eviction %d took block %d, expected %d", i, (int)got,
                     (int)blocks[expected[i]]);
    }
    TB_CHECK(tb_llm_kv_pool_find(pool, -1, tokens[0]) == -1 && tb_llm_kv_pool_find(pool, blocks[0], tokens[1]) == -1);
    TB_CHECK(tb_llm_kv_pool_find(pool, -1, tokens[2]) == blocks[2]);
    /* block 0's index now holds other content: a child published under its old content is not found */
    TB_CHECK(tb_llm_kv_pool_publish(pool, blocks[0], -1, tokens[0]) == blocks[0]);
    TB_CHECK(tb_llm_kv_pool_find(pool, blocks[0], tokens[1]) == -1);
    int32_t none = 7;
    TB_CHECK(tb_llm_kv_pool_take(pool, &none) == TB_ERR_OUT_OF_MEMORY && none == -1 &&
             strstr(tb_error_message(), "KV cache is full"));
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK(stats.evictions == 3 && stats.in_use == 4 && stats.cached == 0);
    tb_llm_kv_pool_free(pool);
    /* fault injection: the next chunk's allocation fails; the pool stays consistent and recovers */
    TB_CHECK(tb_llm_kv_pool_new(model, false, 8, 2, &pool) == TB_OK);
    if (!pool)
        return;
    int32_t a, b, c;
    TB_CHECK(tb_llm_kv_pool_take(pool, &a) == TB_OK && tb_llm_kv_pool_take(pool, &b) == TB_OK);
    tb_alloc_fail_after(0);
    const tb_status failed = tb_llm_kv_pool_take(pool, &c);
    tb_alloc_fail_after(-1);
    TB_CHECK_MSG(failed == TB_ERR_OUT_OF_MEMORY && strstr(tb_error_message(), "llm kv pool"), "%s",
                 tb_error_message());
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK(stats.allocated == 2 && stats.in_use == 2);
    TB_CHECK(tb_llm_kv_pool_take(pool, &c) == TB_OK && c == 2);
    tb_llm_kv_pool_get_stats(pool, &stats);
    TB_CHECK(stats.allocated == 4 && stats.in_use == 3 && stats.bytes > 0);
    tb_llm_kv_pool_free(pool);
    TB_CHECK(tb_llm_kv_pool_new(model, false, 0, 0, &pool) == TB_ERR_INVALID_ARGUMENT && !pool);
}

/* Out of blocks in the engine: two requests that do not both fit in kv_blocks (each alone does) both finish
 * with exactly their tokens and logprobs alone. 60 + 30 positions in 6 blocks: the second prompt does not
 * fit beside the first, so it waits in the queue for blocks (admission by blocks, no preemption). 16 + 150 in
 * 16 blocks: both are admitted and run out together in lockstep decode; the more recent one (sampled, with
 * penalties) is preempted and resumed, replaying its generated tokens, so its sampler goes on where it
 * was. A request that does not fit even alone (16 + 150 in 6 blocks) fails with the KV-full status, and a
 * prompt larger than the pool is refused at submission. */
static void test_engine_exhaustion(const tb_llm_model *model, const char *what, int64_t prompt, int64_t tokens,
                                   int64_t kv_blocks, bool expect_preemption) {
    static int32_t prompts[2][64];
    fill_tokens(prompts[0], prompt, 21);
    fill_tokens(prompts[1], prompt, 22);
    outcome alone[2], together[2];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    tb_llm_batch_request r[2];
    for (int i = 0; i < 2; i++) {
        r[i] = (tb_llm_batch_request){.prompt = prompts[i], .prompt_count = prompt, .max_tokens = tokens, .logprobs = 2};
        tb_llm_sampling_default(&r[i].sampling);
    }
    r[1].sampling.temperature = 0.8f;
    r[1].sampling.seed = 77;
    r[1].presence_penalty = 0.4f;
    r[1].frequency_penalty = 0.2f;
    /* fresh engines (no cached prefix) */
    tb_llm_batch_options options = {.slots = 2, .ctx_size = 200, .prefill_chunk = 16, .kv_blocks = kv_blocks};
    tb_llm_batch *b = NULL;
    for (int i = 0; i < 2; i++) {
        TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_OK);
        if (!b)
            return;
        TB_CHECK(tb_llm_batch_submit(b, &r[i], &alone[i].id) == TB_OK);
        collect(b, &alone[i], 1);
        TB_CHECK(alone[i].finish == TB_LLM_FINISH_LENGTH && !alone[i].failed && alone[i].count == tokens);
        tb_llm_batch_free(b);
    }
    TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_OK);
    if (!b)
        return;
    for (int i = 0; i < 2; i++)
        TB_CHECK(tb_llm_batch_submit(b, &r[i], &together[i].id) == TB_OK);
    collect(b, together, 2);
    tb_llm_batch_stats stats;
    tb_llm_batch_get_stats(b, &stats);
    for (int i = 0; i < 2; i++)
        TB_CHECK_MSG(!together[i].failed && together[i].finish == TB_LLM_FINISH_LENGTH &&
                         together[i].count == alone[i].count &&
                         memcmp(together[i].tokens, alone[i].tokens, sizeof(int32_t) * (size_t)alone[i].count) == 0 &&
                         memcmp(together[i].logprobs, alone[i].logprobs, sizeof(float) * (size_t)alone[i].count) == 0,
                     "%s (%lld + %lld in %lld blocks): request %d %s (%s); %lld preemptions", what, (long long)prompt,
                     (long long)tokens, (long long)kv_blocks, i,
                     together[i].failed ? "failed" : "did not finish as alone", together[i].error,
                     (long long)stats.preemptions);
    TB_CHECK_MSG(expect_preemption ? stats.preemptions >= 1 /* (and the preempted one waits for blocks) */
                                   : stats.preemptions == 0 && stats.admission_waits == 1,
                 "%s (%lld + %lld in %lld blocks): %lld preemptions, %lld admission waits", what, (long long)prompt,
                 (long long)tokens, (long long)kv_blocks, (long long)stats.preemptions,
                 (long long)stats.admission_waits);
    TB_CHECK(stats.requests_finished == 2 && stats.generated_tokens == 2 * tokens && stats.prompt_tokens == 2 * prompt);
    TB_CHECK(stats.kv_blocks == kv_blocks && stats.kv_blocks_in_use == 0 && stats.active == 0 && stats.queued == 0);
    tb_llm_batch_free(b);
    if (!expect_preemption) { /* one slot: the second waits for the slot, which is not a wait for blocks */
        options.slots = 1;
        TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_OK);
        memset(together, 0, sizeof together);
        for (int i = 0; b && i < 2; i++)
            TB_CHECK(tb_llm_batch_submit(b, &r[i], &together[i].id) == TB_OK);
        if (b)
            collect(b, together, 2);
        tb_llm_batch_get_stats(b, &stats);
        TB_CHECK_MSG(stats.admission_waits == 0 && stats.preemptions == 0 && !together[1].failed &&
                         memcmp(together[1].tokens, alone[1].tokens, sizeof(int32_t) * (size_t)alone[1].count) == 0,
                     "one slot: %lld admission waits, %lld preemptions", (long long)stats.admission_waits,
                     (long long)stats.preemptions);
        tb_llm_batch_free(b);
    }
    options.kv_blocks = -1;
    TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "kv_blocks"));
}

/* A request that cannot fit alone: its generation outgrows the pool (the KV-full failure once its 96
 * positions are full, the last sampled token not yet in them; then the engine serves on), or its prompt is
 * larger than the pool (refused at submission). */
static void test_engine_too_big_for_pool(const tb_llm_model *model) {
    static int32_t prompt[120];
    fill_tokens(prompt, 120, 31);
    tb_llm_batch_options options = {.slots = 2, .ctx_size = 200, .prefill_chunk = 16, .kv_blocks = 6};
    tb_llm_batch *b = NULL;
    TB_CHECK(tb_llm_batch_new(model, &options, &b) == TB_OK);
    if (!b)
        return;
    tb_llm_batch_request r = {.prompt = prompt, .prompt_count = 16, .max_tokens = 150, .logprobs = -1};
    tb_llm_sampling_default(&r.sampling);
    outcome out;
    memset(&out, 0, sizeof out);
    TB_CHECK(tb_llm_batch_submit(b, &r, &out.id) == TB_OK);
    collect(b, &out, 1);
    TB_CHECK_MSG(out.failed && out.finish == TB_LLM_FINISH_ABORTED && out.status == TB_ERR_OUT_OF_MEMORY &&
                     strstr(out.error, "KV cache is full") && out.count == 6 * 16 - 16 + 1,
                 "a request outgrowing the pool alone: failed %d, %lld tokens, '%s'", (int)out.failed,
                 (long long)out.count, out.error);
    r.prompt_count = 96; /* 97 positions: 7 blocks */
    uint64_t id = 0;
    TB_CHECK(tb_llm_batch_submit(b, &r, &id) == TB_ERR_INVALID_ARGUMENT && id == 0 &&
             strstr(tb_error_message(), "kv_blocks"));
    r.prompt_count = 95;
    r.max_tokens = 1;
    memset(&out, 0, sizeof out);
    TB_CHECK(tb_llm_batch_submit(b, &r, &out.id) == TB_OK);
    collect(b, &out, 1);
    TB_CHECK(!out.failed && out.count == 1);
    tb_llm_batch_free(b);
}

static void test_engine(const char *dir, tb_llm_quant quant) {
    tb_llm_load_options load = {.quant = quant, .group_size = 32};
    tb_llm_model *model = NULL;
    TB_CHECK(tb_llm_model_load(dir, &load, &model) == TB_OK);
    if (!model)
        return;
    test_step_logits(model, tb_llm_quant_name(quant));
    test_pool_sharing(model, tb_llm_quant_name(quant));
    test_pool_eviction(model);
    test_engine_exhaustion(model, tb_llm_quant_name(quant), 60, 30, 6, false);
    test_engine_exhaustion(model, tb_llm_quant_name(quant), 16, 150, 16, true);
    test_engine_too_big_for_pool(model);
    prompt_set p = {.n = MAX_REQUESTS};
    for (int i = 0; i < p.n; i++) { /* lengths 3..113; requests 4.. share a 40-token prefix with request 3 */
        p.lengths[i] = 3 + (i * 37) % 111;
        for (int64_t t = 0; t < p.lengths[i]; t++)
            p.ids[i][t] = (i >= 3 && t < 40) ? (int32_t)((t * 13 + 5) % VOCAB) : (int32_t)((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % VOCAB;
        if (i >= 3 && p.lengths[i] < 45)
            p.lengths[i] = 45 + i;
    }
    const int64_t max_tokens = 24;
    /* alone: a fresh one-slot engine per request (no reuse, nothing beside it) */
    outcome alone[MAX_REQUESTS];
    memset(alone, 0, sizeof alone);
    for (int i = 0; i < p.n; i++) {
        tb_llm_batch *b = new_engine(model, 1, 16);
        if (!b)
            break;
        tb_llm_batch_request r = make_request(&p, i, max_tokens);
        TB_CHECK(tb_llm_batch_submit(b, &r, &alone[i].id) == TB_OK);
        collect(b, &alone[i], 1);
        TB_CHECK(alone[i].finish == TB_LLM_FINISH_LENGTH && alone[i].count == max_tokens && !alone[i].failed);
        tb_llm_batch_free(b);
    }
    /* oracle: with one chunk covering the prompt, the engine equals tb_llm_generate on a fresh session */
    for (int i = 0; i < p.n; i += 5) {
        tb_llm_batch *b = new_engine(model, 1, 256 > p.lengths[i] ? 128 : 256);
        outcome one;
        memset(&one, 0, sizeof one);
        tb_llm_batch_request r = make_request(&p, i, max_tokens);
        r.presence_penalty = r.frequency_penalty = 0.0f;
        TB_CHECK(tb_llm_batch_submit(b, &r, &one.id) == TB_OK);
        collect(b, &one, 1);
        tb_llm_batch_free(b);
        tb_llm_session *session = NULL;
        TB_CHECK(tb_llm_session_new(model, 200, false, &session) == TB_OK);
        tb_llm_generate_desc desc = {.prompt = r.prompt, .prompt_count = r.prompt_count, .max_tokens = max_tokens,
                                     .sampling = r.sampling};
        int32_t tokens[MAX_OUT];
        tb_llm_stats stats;
        TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, tokens, MAX_OUT, &stats) == TB_OK);
        TB_CHECK_MSG(stats.generated_tokens == one.count && memcmp(tokens, one.tokens, sizeof(int32_t) *
                                                                   (size_t)one.count) == 0,
                     "%s request %d: the engine differs from tb_llm_generate", tb_llm_quant_name(quant), i);
        tb_llm_session_free(session);
    }
    /* together: all requests at once into 5 slots with 16-token chunks (queueing, joining, leaving, reuse) */
    tb_llm_batch *b = new_engine(model, 5, 16);
    if (b) {
        outcome together[MAX_REQUESTS];
        memset(together, 0, sizeof together);
        for (int i = 0; i < p.n; i++) {
            tb_llm_batch_request r = make_request(&p, i, max_tokens);
            TB_CHECK(tb_llm_batch_submit(b, &r, &together[i].id) == TB_OK);
        }
        collect(b, together, p.n);
        for (int i = 0; i < p.n; i++)
            TB_CHECK_MSG(together[i].count == alone[i].count &&
                             memcmp(together[i].tokens, alone[i].tokens, sizeof(int32_t) * (size_t)alone[i].count) == 0 &&
                             memcmp(together[i].logprobs, alone[i].logprobs, sizeof(float) * (size_t)alone[i].count) == 0,
                         "%s request %d: batched tokens differ from the request run alone", tb_llm_quant_name(quant), i);
        tb_llm_batch_stats stats;
        tb_llm_batch_get_stats(b, &stats);
        TB_CHECK(stats.decode_rows > stats.decode_steps); /* steps did batch several sequences */
        TB_CHECK(stats.requests_finished == p.n && stats.queued == 0);
        /* the default pool holds every slot's context: requests waited for slots, never for blocks */
        TB_CHECK(stats.preemptions == 0 && stats.admission_waits == 0);
        TB_CHECK(stats.prefill_chunks == stats.prefill_steps); /* no budget: one chunk per step */
        /* sequential prefix reuse: request 4 again after request 3 finished reuses whole 16-token chunks */
        outcome again[2];
        memset(again, 0, sizeof again);
        for (int j = 0; j < 2; j++) {
            tb_llm_batch_request r = make_request(&p, 3 + j, max_tokens);
            TB_CHECK(tb_llm_batch_submit(b, &r, &again[j].id) == TB_OK);
            collect(b, &again[j], 1);
            TB_CHECK(again[j].count == alone[3 + j].count &&
                     memcmp(again[j].tokens, alone[3 + j].tokens, sizeof(int32_t) * (size_t)alone[3 + j].count) == 0 &&
                     memcmp(again[j].logprobs, alone[3 + j].logprobs, sizeof(float) * (size_t)alone[3 + j].count) == 0);
        }
        TB_CHECK_MSG(again[1].reused >= 32 && again[1].reused % 16 == 0, "reused %lld", (long long)again[1].reused);
        tb_llm_batch_get_stats(b, &stats);
        TB_CHECK(stats.prefix_hits >= 2 && stats.reused_tokens >= 32);
        /* cancellation: the final event says aborted and the slots come free */
        outcome cancelled[5];
        memset(cancelled, 0, sizeof cancelled);
        for (int j = 0; j < 5; j++) {
            tb_llm_batch_request r = make_request(&p, j, 150);
            TB_CHECK(tb_llm_batch_submit(b, &r, &cancelled[j].id) == TB_OK);
            tb_llm_batch_cancel(b, cancelled[j].id);
        }
        collect(b, cancelled, 5);
        for (int j = 0; j < 5; j++)
            TB_CHECK(cancelled[j].finish == TB_LLM_FINISH_ABORTED && cancelled[j].count < 150);
        tb_llm_batch_get_stats(b, &stats);
        TB_CHECK(stats.active == 0 && stats.queued == 0 && stats.requests_cancelled == 5);
        /* bad requests */
        tb_llm_batch_request bad = make_request(&p, 0, max_tokens);
        uint64_t id = 0;
        bad.max_tokens = 0;
        TB_CHECK(tb_llm_batch_submit(b, &bad, &id) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "max_tokens"));
        bad = make_request(&p, 0, max_tokens);
        int32_t outside[2] = {1, VOCAB};
        bad.prompt = outside;
        bad.prompt_count = 2;
        TB_CHECK(tb_llm_batch_submit(b, &bad, &id) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "vocabulary"));
        bad = make_request(&p, 0, max_tokens);
        bad.prompt_count = 201;
        TB_CHECK(tb_llm_batch_submit(b, &bad, &id) == TB_ERR_INVALID_ARGUMENT && strstr(tb_error_message(), "ctx_size"));
        bad = make_request(&p, 0, max_tokens);
        bad.sampling.temperature = NAN;
        TB_CHECK(tb_llm_batch_submit(b, &bad, &id) == TB_ERR_INVALID_ARGUMENT);
        bad = make_request(&p, 0, max_tokens);
        bad.presence_penalty = 3.0f;
        TB_CHECK(tb_llm_batch_submit(b, &bad, &id) == TB_ERR_INVALID_ARGUMENT);
        tb_llm_batch_free(b);
    }
    /* a per-step token budget packs several prompt chunks (of one or more requests) into a step: same bits */
    b = new_engine_budget(model, 5, 16, 48);
    if (b) {
        outcome budgeted[MAX_REQUESTS];
        memset(budgeted, 0, sizeof budgeted);
        for (int i = 0; i < p.n; i++) {
            tb_llm_batch_request r = make_request(&p, i, max_tokens);
            TB_CHECK(tb_llm_batch_submit(b, &r, &budgeted[i].id) == TB_OK);
        }
        collect(b, budgeted, p.n);
        for (int i = 0; i < p.n; i++)
            TB_CHECK_MSG(budgeted[i].count == alone[i].count &&
                             memcmp(budgeted[i].tokens, alone[i].tokens, sizeof(int32_t) * (size_t)alone[i].count) == 0 &&
                             memcmp(budgeted[i].logprobs, alone[i].logprobs, sizeof(float) * (size_t)alone[i].count) == 0,
                         "%s request %d: tokens with a token budget differ from the request run alone",
                         tb_llm_quant_name(quant), i);
        tb_llm_batch_stats stats;
        tb_llm_batch_get_stats(b, &stats);
        TB_CHECK_MSG(stats.prefill_chunks > stats.prefill_steps, "%lld chunks in %lld steps",
                     (long long)stats.prefill_chunks, (long long)stats.prefill_steps);
        tb_llm_batch_free(b);
    }
    tb_llm_batch_options wrong = {.slots = 0, .ctx_size = 10};
    tb_llm_batch *none = NULL;
    TB_CHECK(tb_llm_batch_new(model, &wrong, &none) == TB_ERR_INVALID_ARGUMENT && none == NULL);
    wrong = (tb_llm_batch_options){.slots = 2, .ctx_size = 10, .prefill_chunk = 20};
    TB_CHECK(tb_llm_batch_new(model, &wrong, &none) == TB_ERR_INVALID_ARGUMENT);
    wrong = (tb_llm_batch_options){.slots = 2, .ctx_size = 10, .prefill_chunk = 32, .batch_tokens = 16};
    TB_CHECK(tb_llm_batch_new(model, &wrong, &none) == TB_ERR_INVALID_ARGUMENT &&
             strstr(tb_error_message(), "batch_tokens"));
    tb_llm_model_free(model);
}

int main(void) {
    test_batch_rows();
    char root[] = "/tmp/tb_test_llm_batch_XXXXXX";
    if (!mkdtemp(root)) {
        TB_CHECK(!"mkdtemp failed");
        return tb_test_finish("llm_batch");
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/qwen", root);
    write_model(dir);
    for (int threads = 1; threads <= 2; threads++) {
        TB_CHECK(tb_set_num_threads(threads) == TB_OK);
        test_engine(dir, TB_LLM_QUANT_INT4);
        test_engine(dir, TB_LLM_QUANT_INT8);
        if (threads == 2)
            test_engine(dir, TB_LLM_QUANT_NONE);
    }
    char command[700];
    snprintf(command, sizeof command, "rm -rf '%s'", root);
    TB_CHECK(system(command) == 0);
    return tb_test_finish("llm_batch");
}
