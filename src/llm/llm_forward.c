/* Sessions and the forward pass: embeddings, per layer RMSNorm -> fused q/k/v projection -> (q/k norm)
 * -> RoPE -> KV cache append -> causal (optionally sliding-window) GQA attention over the cache -> o
 * projection + residual -> RMSNorm -> fused gate/up -> SiLU * up -> down + residual, then the final norm
 * and the LM head. The same code runs a prompt (T tokens per chunk, matmuls as GEMMs) and a decode step
 * (T = 1, matmuls as GEMVs on the quantized weights).
 *
 * KV cache layout per layer (f32 or IEEE half): values[Hkv][capacity][D]; keys[Hkv][capacity / 16][D][16],
 * i.e. blocks of 16 positions stored d-major so that attention scores come out 16 at a time without
 * horizontal sums (TB_LLM_KEY_BLOCK). The capacity is a multiple of 16 and grows by doubling up to
 * max_seq_len (rounded up to 16).
 *
 * Pooled sessions (the batching engine's, llm_kv_pool.h) hold instead a block table into a shared pool:
 * block j holds positions [16 j, 16 j + 16) with the same key-block and value-row layouts, so attention
 * scores each block with the same kernel (scores are per block already) and the values of [lo, pos] are
 * gathered in position order into one contiguous run for the same value kernel: identical numbers. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "llm/llm_internal.h"
#include "llm/llm_kv_pool.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

enum { PREFILL_CHUNK = TB_LLM_PREFILL_CHUNK, KV_MIN_CAPACITY = 256 };

struct tb_llm_session {
    const tb_llm_model *model;
    int64_t max_seq_len, capacity, length;
    /* positions [0, canonical) were computed in whole PREFILL_CHUNK chunks starting at multiples of it, as
     * a fresh session prefilling the same tokens computes them (bit for bit): what reproducible calls reuse */
    int64_t canonical;
    bool kv_f16;
    void **keys, **values; /* [layers] -> [Hkv][capacity][D] */
    int32_t *tokens;       /* [capacity] */
    /* scratch for up to scratch_rows tokens, one block: */
    int64_t scratch_rows;
    float *scratch;
    float *x;    /* [T, C] residual stream */
    float *xn;   /* [T, C] normalized */
    float *qkv;  /* [T, (Hq + 2 Hkv) D] */
    float *attn; /* [T, Hq D] */
    float *proj; /* [T, C] */
    float *mlp;  /* [T, 2 I] */
    float *cos_table, *sin_table; /* [T, D / 2] */
    tb_llm_gpu_session *gpu; /* the model's weights are on a GPU engine: the forward runs there (llm_gpu.c) */
    tb_llm_kv_pool *pool;    /* pooled: keys/values live in table[0..blocks) of this pool */
    int32_t *table;          /* [ceil(max_seq_len / 16)] */
    int64_t blocks;
};

static int64_t kv_elem(const tb_llm_session *s) { return s->kv_f16 ? 2 : 4; }

tb_status tb_llm_session_new(const tb_llm_model *model, int64_t max_seq_len, bool kv_f16, tb_llm_session **out) {
    *out = NULL;
    if (!model)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: session needs a model");
    if (max_seq_len < 1 || max_seq_len > ((int64_t)1 << 24))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: max_seq_len must be in [1, 16777216], got %lld",
                            (long long)max_seq_len);
    tb_llm_session *s = calloc(1, sizeof *s);
    if (!s)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    s->model = model;
    s->max_seq_len = max_seq_len;
    s->kv_f16 = kv_f16;
    s->keys = calloc((size_t)model->n_layers, sizeof *s->keys);
    s->values = calloc((size_t)model->n_layers, sizeof *s->values);
    if (!s->keys || !s->values) {
        tb_llm_session_free(s);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    }
    if (model->gpu) {
        tb_status status = tb_llm_gpu_session_new(model, kv_f16, &s->gpu);
        if (status != TB_OK) {
            tb_llm_session_free(s);
            return status;
        }
    }
    *out = s;
    return TB_OK;
}

static tb_status grow_storage(tb_llm_session *s, int64_t needed);

/* Pooled: drops the table's blocks from index `keep` on (last first, so a chain's deeper blocks are the
 * older cached ones and get evicted before their parents). */
static void release_blocks(tb_llm_session *s, int64_t keep) {
    for (; s->blocks > keep; s->blocks--)
        tb_llm_kv_pool_release(s->pool, s->table[s->blocks - 1]);
}

tb_status tb_llm_session_new_pooled(const tb_llm_model *model, int64_t max_seq_len, tb_llm_kv_pool *pool,
                                    tb_llm_session **out) {
    *out = NULL;
    if (!pool || (model && model->gpu))
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: a pooled session needs a pool and a CPU model");
    TB_TRY(tb_llm_session_new(model, max_seq_len, tb_llm_kv_pool_kv_f16(pool), out));
    tb_llm_session *s = *out;
    s->pool = pool;
    s->table = malloc((size_t)((max_seq_len + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK) * sizeof *s->table);
    if (!s->table) {
        tb_llm_session_free(s);
        *out = NULL;
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    }
    return TB_OK;
}

tb_status tb_llm_session_share(tb_llm_session *s, const int32_t *blocks, int64_t count, const int32_t *tokens) {
    if (!s->pool || s->length != s->blocks * TB_LLM_KEY_BLOCK || count < 0 ||
        s->length + count * TB_LLM_KEY_BLOCK > s->max_seq_len)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: cannot map %lld shared blocks after %lld positions",
                            (long long)count, (long long)s->length);
    if (count == 0)
        return TB_OK;
    TB_TRY(grow_storage(s, s->length + count * TB_LLM_KEY_BLOCK));
    for (int64_t j = 0; j < count; j++) {
        tb_llm_kv_pool_ref(s->pool, blocks[j]);
        s->table[s->blocks++] = blocks[j];
    }
    memcpy(s->tokens + s->length, tokens, (size_t)(count * TB_LLM_KEY_BLOCK) * sizeof *tokens);
    s->length += count * TB_LLM_KEY_BLOCK;
    return TB_OK;
}

int32_t *tb_llm_session_table(tb_llm_session *s, int64_t *count) {
    *count = s->blocks;
    return s->table;
}

void tb_llm_session_free(tb_llm_session *s) {
    if (!s)
        return;
    if (s->pool)
        release_blocks(s, 0);
    free(s->table);
    for (int64_t l = 0; s->keys && s->values && l < s->model->n_layers; l++) {
        tb_free(s->keys[l]);
        tb_free(s->values[l]);
    }
    free(s->keys);
    free(s->values);
    tb_free(s->tokens);
    tb_free(s->scratch);
    tb_llm_gpu_session_free(s->gpu);
    free(s);
}

const tb_llm_model *tb_llm_session_model(const tb_llm_session *s) { return s->model; }
int64_t tb_llm_session_length(const tb_llm_session *s) { return s->length; }
const int32_t *tb_llm_session_tokens(const tb_llm_session *s) { return s->tokens; }
int64_t tb_llm_session_max_seq_len(const tb_llm_session *s) { return s->max_seq_len; }

tb_status tb_llm_session_truncate(tb_llm_session *s, int64_t length) {
    if (length < 0 || length > s->length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: cannot truncate a session of %lld positions to %lld",
                            (long long)s->length, (long long)length);
    s->length = length;
    if (s->canonical > length)
        s->canonical = length / PREFILL_CHUNK * PREFILL_CHUNK;
    if (s->pool)
        release_blocks(s, (length + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK);
    return TB_OK;
}

int64_t tb_llm_session_canonical_length(const tb_llm_session *s) { return s->canonical; }

void tb_llm_session_commit(tb_llm_session *s, const int32_t *tokens, int64_t count) {
    memcpy(s->tokens + s->length, tokens, (size_t)count * sizeof *tokens);
    s->length += count;
}

/* Pooled: makes the blocks of positions [length, needed) present and private to this session, taking new
 * ones and copying (copy-on-write) a shared or published block about to be written into. On failure the
 * blocks already taken stay in the table (released by truncate or free). */
static tb_status reserve_blocks(tb_llm_session *s, int64_t needed) {
    const int64_t last = (needed + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK;
    for (int64_t j = s->length / TB_LLM_KEY_BLOCK; j < last; j++) {
        if (j < s->blocks) {
            if (tb_llm_kv_pool_writable(s->pool, s->table[j]))
                continue;
            int32_t copy;
            TB_TRY(tb_llm_kv_pool_copy(s->pool, s->table[j], &copy));
            tb_llm_kv_pool_release(s->pool, s->table[j]);
            s->table[j] = copy;
            continue;
        }
        TB_TRY(tb_llm_kv_pool_take(s->pool, &s->table[j]));
        s->blocks = j + 1;
    }
    return TB_OK;
}

/* Grows the KV cache (all layers or none; pooled: its blocks) to hold `needed` positions. */
tb_status tb_llm_session_reserve(tb_llm_session *s, int64_t needed) {
    if (s->pool && needed > s->length)
        TB_TRY(reserve_blocks(s, needed));
    return grow_storage(s, needed);
}

/* The contiguous cache (GPU and pooled sessions: the token array only) grown to `needed` positions. */
static tb_status grow_storage(tb_llm_session *s, int64_t needed) {
    if (needed <= s->capacity)
        return TB_OK;
    const tb_llm_model *m = s->model;
    int64_t capacity = s->capacity * 2 > KV_MIN_CAPACITY ? s->capacity * 2 : KV_MIN_CAPACITY;
    capacity = capacity > needed ? capacity : needed;
    capacity = capacity < s->max_seq_len ? capacity : s->max_seq_len;
    capacity = (capacity + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK * TB_LLM_KEY_BLOCK;
    /* GPU and pooled sessions: the token array only */
    const int64_t layers = s->gpu || s->pool ? 0 : m->n_layers, row_bytes = m->head_dim * kv_elem(s);
    const size_t layer_bytes = (size_t)(m->n_kv_heads * capacity * row_bytes);
    void **fresh = calloc((size_t)(2 * layers), sizeof *fresh);
    int32_t *tokens = NULL;
    tb_status status = fresh ? TB_OK : tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory");
    for (int64_t i = 0; status == TB_OK && i < 2 * layers; i++) /* zeroed: unused lanes of a key block are read */
        status = tb_alloc(layer_bytes, TB_ALLOC_ZERO, &fresh[i]);
    if (status == TB_OK)
        status = tb_alloc((size_t)capacity * sizeof *tokens, TB_ALLOC_DEFAULT, (void **)&tokens);
    if (status != TB_OK) {
        for (int64_t i = 0; fresh && i < 2 * layers; i++)
            tb_free(fresh[i]);
        free(fresh);
        return tb_error_prefix(status, "llm: growing the KV cache to %lld positions", (long long)capacity);
    }
    for (int64_t l = 0; l < layers; l++) {
        const int64_t key_bytes = (s->length + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK * TB_LLM_KEY_BLOCK * row_bytes;
        for (int64_t h = 0; h < m->n_kv_heads && s->length > 0; h++) {
            memcpy((char *)fresh[2 * l] + h * capacity * row_bytes, (char *)s->keys[l] + h * s->capacity * row_bytes,
                   (size_t)key_bytes);
            memcpy((char *)fresh[2 * l + 1] + h * capacity * row_bytes,
                   (char *)s->values[l] + h * s->capacity * row_bytes, (size_t)(s->length * row_bytes));
        }
        tb_free(s->keys[l]);
        tb_free(s->values[l]);
        s->keys[l] = fresh[2 * l];
        s->values[l] = fresh[2 * l + 1];
    }
    free(fresh);
    if (s->length > 0)
        memcpy(tokens, s->tokens, (size_t)s->length * sizeof *tokens);
    tb_free(s->tokens);
    s->tokens = tokens;
    s->capacity = capacity;
    return TB_OK;
}

static tb_status ensure_scratch(tb_llm_session *s, int64_t rows) {
    if (rows <= s->scratch_rows)
        return TB_OK;
    const tb_llm_model *m = s->model;
    const int64_t c = m->hidden, qkv = m->layers[0].qkv.n, q = m->n_heads * m->head_dim;
    const int64_t per_row = 3 * c + qkv + q + 2 * m->intermediate + m->head_dim;
    float *scratch = NULL;
    TB_TRY(tb_alloc((size_t)(rows * per_row) * sizeof(float), TB_ALLOC_DEFAULT, (void **)&scratch));
    tb_free(s->scratch);
    s->scratch = scratch;
    s->scratch_rows = rows;
    s->x = scratch;
    s->xn = s->x + rows * c;
    s->proj = s->xn + rows * c;
    s->qkv = s->proj + rows * c;
    s->attn = s->qkv + rows * qkv;
    s->mlp = s->attn + rows * q;
    s->cos_table = s->mlp + rows * 2 * m->intermediate;
    s->sin_table = s->cos_table + rows * (m->head_dim / 2);
    return TB_OK;
}

/* ---- per-row preparation of q and k: q/k RMSNorm, RoPE, cache append ---- */

typedef struct rows_job {
    tb_llm_session *s;
    const tb_llm_kernels *kernels;
    const llm_layer *layer;
    int64_t layer_index, pos0;
} rows_job;

static void rope_in_place(float *x, const float *cos_row, const float *sin_row, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cos_row[i] - b * sin_row[i];
        x[i + half] = b * cos_row[i] + a * sin_row[i];
    }
}

void tb_llm_prepare_row(tb_llm_session *s, const tb_llm_kernels *kernels, const llm_layer *layer,
                        int64_t layer_index, float *q, const float *cos_row, const float *sin_row, int64_t pos) {
    const tb_llm_model *m = s->model;
    const int64_t d = m->head_dim, half = d / 2, hq = m->n_heads, hkv = m->n_kv_heads;
    const float eps = m->norm_eps;
    float *k = q + hq * d, *v = k + hkv * d;
    for (int64_t h = 0; h < hq; h++) {
        if (layer->q_norm)
            kernels->rms_norm(q + h * d, layer->q_norm, q + h * d, d, eps);
        rope_in_place(q + h * d, cos_row, sin_row, half);
    }
    for (int64_t g = 0; g < hkv; g++) {
        if (layer->k_norm)
            kernels->rms_norm(k + g * d, layer->k_norm, k + g * d, d, eps);
        rope_in_place(k + g * d, cos_row, sin_row, half);
        /* key element i of position pos: block pos / 16, row i, lane pos % 16 */
        int64_t offset = (g * s->capacity + pos) * d;
        int64_t key_base = ((g * s->capacity + pos / TB_LLM_KEY_BLOCK * TB_LLM_KEY_BLOCK) * d) + pos % TB_LLM_KEY_BLOCK;
        void *key_memory = s->pool ? NULL : s->keys[layer_index], *value_memory = s->pool ? NULL : s->values[layer_index];
        if (s->pool) {
            const int32_t block = s->table[pos / TB_LLM_KEY_BLOCK];
            key_memory = tb_llm_kv_pool_keys(s->pool, block, layer_index, g);
            value_memory = tb_llm_kv_pool_values(s->pool, block, layer_index, g);
            key_base = pos % TB_LLM_KEY_BLOCK;
            offset = pos % TB_LLM_KEY_BLOCK * d;
        }
        const float *key = k + g * d;
        if (s->kv_f16) {
            uint16_t *keys = (uint16_t *)key_memory + key_base;
            for (int64_t i = 0; i < d; i++)
                keys[i * TB_LLM_KEY_BLOCK] = tb_f32_to_f16(key[i]);
            kernels->to_f16(v + g * d, (uint16_t *)value_memory + offset, d);
        } else {
            float *keys = (float *)key_memory + key_base;
            for (int64_t i = 0; i < d; i++)
                keys[i * TB_LLM_KEY_BLOCK] = key[i];
            memcpy((float *)value_memory + offset, v + g * d, (size_t)d * sizeof(float));
        }
    }
}

static void prepare_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const rows_job *job = context;
    tb_llm_session *s = job->s;
    const int64_t half = s->model->head_dim / 2, stride = job->layer->qkv.n;
    for (int64_t t = begin; t < end; t++)
        tb_llm_prepare_row(s, job->kernels, job->layer, job->layer_index, s->qkv + t * stride,
                           s->cos_table + t * half, s->sin_table + t * half, job->pos0 + t);
}

/* ---- attention ---- */

typedef struct attention_job {
    tb_llm_session *s;
    const tb_llm_kernels *kernels;
    const llm_layer *layer;
    int64_t layer_index, pos0;
    int64_t heads_per_item, items_per_row;
    float scale;
    atomic_int failed;
} attention_job;

static _Thread_local float *attention_scores;
static _Thread_local int64_t attention_scores_capacity;
static _Thread_local char *attention_values; /* pooled sessions: values of [lo, pos] gathered in order */
static _Thread_local int64_t attention_values_capacity;

/* Grows a thread-local scratch buffer to hold `bytes`; false when out of memory. */
static bool ensure_thread_buffer(char **buffer, int64_t *capacity, int64_t bytes) {
    if (bytes <= *capacity)
        return true;
    char *grown = NULL;
    if (tb_alloc((size_t)(bytes * 2), TB_ALLOC_DEFAULT, (void **)&grown) != TB_OK)
        return false;
    tb_free(*buffer);
    *buffer = grown;
    *capacity = bytes * 2;
    tb_llm_thread_scratch_track((void **)buffer);
    return true;
}

/* Pooled attention of heads [h0, h0 + heads) (kv head g) at `pos` over [lo, pos]: the contiguous path's
 * kernel calls on the same data, block by block for the scores and on the gathered values. */
static bool attend_pooled(tb_llm_session *s, const tb_llm_kernels *kernels, int64_t layer_index, int64_t g,
                          const float *q, int64_t heads, int64_t lo, int64_t pos, float scale, float *out) {
    const int64_t d = s->model->head_dim, elem = kv_elem(s), len = pos - lo + 1;
    const int64_t first_block = lo / TB_LLM_KEY_BLOCK, blocks = pos / TB_LLM_KEY_BLOCK - first_block + 1;
    const int64_t stride = blocks * TB_LLM_KEY_BLOCK, skip = lo - first_block * TB_LLM_KEY_BLOCK;
    if (!ensure_thread_buffer(&attention_values, &attention_values_capacity, len * d * elem))
        return false;
    for (int64_t j = 0; j < blocks; j++) {
        const int32_t block = s->table[first_block + j];
        kernels->attn_scores(q, heads, d, tb_llm_kv_pool_keys(s->pool, block, layer_index, g), s->kv_f16, 1, scale,
                             attention_scores + j * TB_LLM_KEY_BLOCK, stride);
        const int64_t from = j == 0 ? skip : 0, to = j == blocks - 1 ? pos % TB_LLM_KEY_BLOCK + 1 : TB_LLM_KEY_BLOCK;
        memcpy(attention_values + (j * TB_LLM_KEY_BLOCK + from - skip) * d * elem,
               (const char *)tb_llm_kv_pool_values(s->pool, block, layer_index, g) + from * d * elem,
               (size_t)((to - from) * d * elem));
    }
    for (int64_t h = 0; h < heads; h++)
        kernels->softmax(attention_scores + h * stride + skip, len);
    kernels->attn_values(attention_scores + skip, heads, stride, attention_values, s->kv_f16, len, d, out);
    return true;
}

bool tb_llm_attend_row(tb_llm_session *s, const tb_llm_kernels *kernels, const llm_layer *layer,
                       int64_t layer_index, const float *q, int64_t h0, int64_t heads, int64_t pos, float scale,
                       float *out) {
    const tb_llm_model *m = s->model;
    const int64_t d = m->head_dim, g = h0 / (m->n_heads / m->n_kv_heads), elem = kv_elem(s);
    const int64_t lo = layer->window > 0 && pos - layer->window + 1 > 0 ? pos - layer->window + 1 : 0;
    const int64_t len = pos - lo + 1;
    const int64_t first_block = lo / TB_LLM_KEY_BLOCK, blocks = pos / TB_LLM_KEY_BLOCK - first_block + 1;
    const int64_t stride = blocks * TB_LLM_KEY_BLOCK, skip = lo - first_block * TB_LLM_KEY_BLOCK;
    int64_t score_bytes = attention_scores_capacity * (int64_t)sizeof(float);
    if (!ensure_thread_buffer((char **)&attention_scores, &score_bytes, heads * stride * (int64_t)sizeof(float)))
        return false;
    attention_scores_capacity = score_bytes / (int64_t)sizeof(float);
    if (s->pool)
        return attend_pooled(s, kernels, layer_index, g, q, heads, lo, pos, scale, out);
    const char *keys = (const char *)s->keys[layer_index] + (g * s->capacity + first_block * TB_LLM_KEY_BLOCK) * d * elem;
    const char *values = (const char *)s->values[layer_index] + (g * s->capacity + lo) * d * elem;
    /* scores of whole key blocks; the row of position lo starts `skip` lanes in */
    kernels->attn_scores(q, heads, d, keys, s->kv_f16, blocks, scale, attention_scores, stride);
    for (int64_t h = 0; h < heads; h++)
        kernels->softmax(attention_scores + h * stride + skip, len);
    kernels->attn_values(attention_scores + skip, heads, stride, values, s->kv_f16, len, d, out);
    return true;
}

static void attention_items(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    attention_job *job = context;
    tb_llm_session *s = job->s;
    const tb_llm_model *m = s->model;
    const int64_t d = m->head_dim, qkv_stride = job->layer->qkv.n, hpi = job->heads_per_item;
    for (int64_t item = begin; item < end; item++) {
        const int64_t t = item / job->items_per_row, h0 = (item % job->items_per_row) * hpi;
        if (!tb_llm_attend_row(s, job->kernels, job->layer, job->layer_index, s->qkv + t * qkv_stride + h0 * d, h0,
                               hpi, job->pos0 + t, job->scale, s->attn + t * m->n_heads * d + h0 * d)) {
            atomic_store(&job->failed, 1);
            return;
        }
    }
}

/* ---- row-parallel SiLU * up ---- */

typedef struct mlp_job {
    const tb_llm_kernels *kernels;
    float *mlp;
    int64_t intermediate;
} mlp_job;

static void mlp_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const mlp_job *job = context;
    for (int64_t t = begin; t < end; t++) {
        float *row = job->mlp + t * 2 * job->intermediate;
        job->kernels->silu_mul(row, row + job->intermediate, row, job->intermediate);
    }
}

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

void tb_llm_rope_row(const tb_llm_model *m, int64_t pos, float *cos_row, float *sin_row) {
    const float position = (float)pos;
    for (int64_t i = 0; i < m->head_dim / 2; i++) {
        const float angle = position * m->inv_freq[i];
        cos_row[i] = cosf(angle) * m->rope_attention_factor;
        sin_row[i] = sinf(angle) * m->rope_attention_factor;
    }
}

/* One chunk of T <= scratch_rows tokens at positions [length, length + T). */
static tb_status forward_chunk(tb_llm_session *s, const tb_llm_kernels *kernels, const tb_llm_qkernels *qkernels,
                               const int32_t *tokens, int64_t count, float *logits, bool all_logits) {
    const tb_llm_model *m = s->model;
    const int64_t c = m->hidden, d = m->head_dim, half = d / 2, pos0 = s->length, hq = m->n_heads;
    for (int64_t t = 0; t < count; t++)
        TB_TRY(tb_llm_embed_row(m, tokens[t], s->x + t * c));
    for (int64_t t = 0; t < count; t++)
        tb_llm_rope_row(m, pos0 + t, s->cos_table + t * half, s->sin_table + t * half);
    const int64_t group = hq / m->n_kv_heads;
    for (int64_t l = 0; l < m->n_layers; l++) {
        /* cancel point: the cache keeps its length (and positions past it are rewritten by the next call) */
        TB_TRY(tb_interrupt_check("llm: forward"));
        const llm_layer *layer = &m->layers[l];
        for (int64_t t = 0; t < count; t++)
            kernels->rms_norm(s->x + t * c, layer->attn_norm, s->xn + t * c, c, m->norm_eps);
        TB_TRY(tb_llm_matmul(kernels, qkernels, &layer->qkv, s->xn, c, count, s->qkv));
        rows_job rows = {.s = s, .kernels = kernels, .layer = layer, .layer_index = l, .pos0 = pos0};
        tb_parallel_for(count, 16, prepare_rows, &rows);
        /* one item per (token, kv group), so each key block feeds every head of its group; per (token, head)
         * when that would leave threads idle (a single token and few kv heads) */
        attention_job job = {.s = s, .kernels = kernels, .layer = layer, .layer_index = l, .pos0 = pos0};
        job.heads_per_item = count * m->n_kv_heads >= tb_num_threads() ? group : 1;
        job.items_per_row = hq / job.heads_per_item;
        job.scale = (float)(1.0 / sqrt((double)d));
        atomic_init(&job.failed, 0);
        tb_parallel_for(count * job.items_per_row, 1, attention_items, &job);
        if (atomic_load(&job.failed))
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm: out of memory for attention scores");
        TB_TRY(tb_llm_matmul(kernels, qkernels, &layer->o, s->attn, hq * d, count, s->proj));
        add_rows(s->x, s->proj, count * c);
        for (int64_t t = 0; t < count; t++)
            kernels->rms_norm(s->x + t * c, layer->mlp_norm, s->xn + t * c, c, m->norm_eps);
        TB_TRY(tb_llm_matmul(kernels, qkernels, &layer->gate_up, s->xn, c, count, s->mlp));
        mlp_job mj = {.kernels = kernels, .mlp = s->mlp, .intermediate = m->intermediate};
        tb_parallel_for(count, 4, mlp_rows, &mj);
        TB_TRY(tb_llm_matmul(kernels, qkernels, &layer->down, s->mlp, 2 * m->intermediate, count, s->proj));
        add_rows(s->x, s->proj, count * c);
    }
    memcpy(s->tokens + pos0, tokens, (size_t)count * sizeof *tokens);
    s->length = pos0 + count;
    if (!logits)
        return TB_OK;
    const int64_t first = all_logits ? 0 : count - 1;
    for (int64_t t = first; t < count; t++)
        kernels->rms_norm(s->x + t * c, m->final_norm, s->xn + (t - first) * c, c, m->norm_eps);
    return tb_llm_matmul(kernels, qkernels, &m->lm_head, s->xn, c, count - first, logits);
}

tb_status tb_llm_forward(tb_llm_session *s, const int32_t *tokens, int64_t count, float *logits, bool all_logits) {
    const tb_llm_model *m = s->model;
    if (count < 1 || !tokens)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: forward needs at least one token");
    for (int64_t t = 0; t < count; t++)
        if (tokens[t] < 0 || tokens[t] >= m->vocab)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm: token id %d at position %lld is outside the vocabulary "
                                "[0, %lld)", (int)tokens[t], (long long)t, (long long)m->vocab);
    if (count > s->max_seq_len - s->length)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT,
                            "llm: %lld cached + %lld new positions exceed the context of %lld (max_seq_len)",
                            (long long)s->length, (long long)count, (long long)s->max_seq_len);
    TB_TRY(tb_llm_session_reserve(s, s->length + count));
    if (s->gpu) { /* device dispatch: the cache lives on the GPU */
        TB_TRY(tb_llm_gpu_forward(s->gpu, s->length, s->max_seq_len, tokens, count, logits, all_logits));
        tb_llm_session_commit(s, tokens, count);
        return TB_OK;
    }
    TB_TRY(ensure_scratch(s, count < PREFILL_CHUNK ? count : PREFILL_CHUNK));
    const tb_llm_kernels *kernels = tb_llm_kernels_active();
    const tb_llm_qkernels *qkernels = m->exact_activations ? NULL : tb_llm_qkernels_active();
    /* chunks of PREFILL_CHUNK rows from the call's first position (scratch holds at least that many) */
    for (int64_t done = 0; done < count;) {
        const int64_t n = count - done < PREFILL_CHUNK ? count - done : PREFILL_CHUNK;
        const bool last = done + n == count;
        const int64_t chunk_start = s->length;
        float *out = NULL;
        if (logits && all_logits)
            out = logits + done * m->vocab;
        else if (logits && last)
            out = logits;
        TB_TRY(forward_chunk(s, kernels, qkernels, tokens + done, n, out, all_logits));
        if (n == PREFILL_CHUNK && chunk_start == s->canonical && chunk_start % PREFILL_CHUNK == 0)
            s->canonical += PREFILL_CHUNK;
        done += n;
    }
    return TB_OK;
}
