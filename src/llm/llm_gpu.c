/* The LLM forward on a GPU engine (vulkan): tb_llm_model_to_gpu uploads every weight once into engine
 * buffers that stay resident (f32 matrices as they are, or as bf16/f16 words when every value is one
 * exactly and the device has 16-bit storage; int8/int4 ones in the CPU's quantized layout, read by
 * shaders/qmatmul.comp), and sessions of such a model keep their KV cache in engine buffers
 * ([Hkv][capacity][D] f32 per layer, grown by doubling). A chunk of T tokens is one engine run (one
 * command-buffer submit): per layer RMSNorm, qkv projection, q/k norm + RoPE + cache append,
 * attention, o projection + residual, RMSNorm, gate/up, SwiGLU, down + residual; then the final norm
 * and the LM head; the chunk's uploads and the logits download ride in that submit (run_download). The CPU does what is cheap: the embedding rows (uploaded), the RoPE table (the
 * same cos/sin values the CPU path uses), and sampling on the downloaded logits. A prompt whose last
 * logits only are wanted copies its last hidden row (a copy op) and runs the final norm and LM head
 * on that row alone, in the same run.
 *
 * Device limits: a matrix larger than maxStorageBufferRange is split by rows (output columns) into
 * parts of at most that size, each its own buffers, and its product runs as one op per part writing its
 * columns of the output (y_stride / y_col0); chunks of a prompt are cut so every activation buffer (the
 * logits rows above all) fits the limit; the KV cache of a layer must fit one buffer (the error names
 * the positions that fit). The KV cache is f32 (kv_f16 is refused); sessions on the GPU cannot copy
 * prefixes between each other (the batch server's prefix reuse). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/elementwise.h"
#include "llm/llm_internal.h"
#include "torchburn/dtype.h"
#include "torchburn/engine.h"

enum { GPU_CHUNK = TB_LLM_PREFILL_CHUNK, GPU_MIN_CAPACITY = 256 };

/* Rows [row0, row0 + rows) of a matrix, in buffers of their own. */
typedef struct gpu_part {
    int64_t row0, rows;
    tb_engine_buffer *weights, *scales, *bias; /* scales: quantized formats only; bias: when the matrix has one */
} gpu_part;

typedef struct gpu_matrix {
    tb_llm_quant format;
    tb_engine_weight_format words; /* format none: f32, or the 16-bit words that hold every value exactly */
    int64_t n, k, group;
    int parts; /* 1 unless the matrix exceeds maxStorageBufferRange */
    gpu_part *part;
} gpu_matrix;

typedef struct gpu_layer {
    tb_engine_buffer *attn_norm, *mlp_norm, *qk_norm; /* qk_norm: [q_norm D | k_norm D] or NULL */
    gpu_matrix qkv, o, gate_up, down;
    int64_t window;
} gpu_layer;

struct tb_llm_gpu_model {
    const tb_engine *engine;
    gpu_layer *layers;
    int64_t n_layers;
    gpu_matrix lm_head;
    tb_engine_buffer *final_norm;
    int64_t max_rows; /* rows per chunk such that every activation buffer fits maxStorageBufferRange */
    uint64_t buffer_range; /* the device's maxStorageBufferRange */
};

struct tb_llm_gpu_session {
    const tb_llm_model *model;
    int64_t capacity;
    tb_engine_buffer **keys, **values; /* [layers] */
    int64_t rows; /* scratch rows below */
    tb_engine_buffer *x, *xn, *qkv, *attn, *proj, *mlp, *act, *table, *logits, *last;
    float *host_rows; /* [rows, max(C, D)] staging for embeddings and the RoPE table */
    tb_engine_op *ops;
    int op_capacity;
};

static tb_status upload_new(const tb_engine *engine, const void *data, size_t bytes, const char *what,
                            tb_engine_buffer **out) {
    *out = NULL;
    tb_engine_device_info info;
    engine->device_info(&info);
    if (info.max_storage_buffer_range && bytes > info.max_storage_buffer_range)
        return tb_error_set(TB_ERR_UNSUPPORTED, "llm gpu: %s takes %zu bytes, more than the device's maxStorageBufferRange "
                            "(%llu bytes)", what, bytes, (unsigned long long)info.max_storage_buffer_range);
    tb_status status = engine->buffer_alloc(bytes, out);
    if (status == TB_OK)
        status = engine->buffer_upload(*out, 0, data, bytes);
    if (status != TB_OK) {
        engine->buffer_free(*out);
        *out = NULL;
        return tb_error_prefix(status, "llm gpu: uploading %s (%zu bytes)", what, bytes);
    }
    return TB_OK;
}

/* The 16-bit format that holds every value of an f32 matrix exactly, so that storing it halves the bytes
 * and changes no product: bf16 when the low half of every value is zero (what the loader makes of a bf16
 * checkpoint), f16 when every value round-trips through IEEE half (an f16 checkpoint), else f32. */
static tb_engine_weight_format exact_16bit_format(const float *w, size_t count) {
    bool bf16 = true, f16 = true;
    for (size_t i = 0; i < count && (bf16 || f16); i++) {
        const uint32_t bits = tb_f32_to_bits(w[i]);
        bf16 = bf16 && (bits & 0xffffu) == 0;
        f16 = f16 && tb_f32_to_bits(tb_f16_to_f32(tb_f32_to_f16(w[i]))) == bits;
    }
    return bf16 ? TB_ENGINE_WEIGHT_BF16 : f16 ? TB_ENGINE_WEIGHT_F16 : TB_ENGINE_WEIGHT_F32;
}

/* rows x k f32 values as the 16-bit words of `format` (exact: checked by exact_16bit_format). */
static uint16_t *narrow_rows(const float *w, size_t count, tb_engine_weight_format format) {
    uint16_t *words = malloc((count ? count : 1) * sizeof *words);
    for (size_t i = 0; words && i < count; i++)
        words[i] = format == TB_ENGINE_WEIGHT_BF16 ? (uint16_t)(tb_f32_to_bits(w[i]) >> 16) : tb_f32_to_f16(w[i]);
    return words;
}

/* Uploads w as ceil(rows / rows_per_part) parts, rows_per_part = the rows whose weights fit the device's
 * maxStorageBufferRange (`range`; all rows in one part when they fit). */
static tb_status upload_matrix(const tb_engine *engine, uint64_t range, bool storage_16bit, const llm_matrix *w,
                               const char *what, gpu_matrix *out) {
    const bool quantized = w->format != TB_LLM_QUANT_NONE;
    out->words = !quantized && storage_16bit ? exact_16bit_format(w->f32, (size_t)(w->n * w->k)) : TB_ENGINE_WEIGHT_F32;
    const size_t element = out->words == TB_ENGINE_WEIGHT_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t row_bytes = quantized ? (size_t)w->q.row_bytes : (size_t)w->k * element;
    const size_t scale_row = quantized ? (size_t)w->q.scales_per_row * sizeof(float) : 0;
    const size_t widest = row_bytes > scale_row ? row_bytes : scale_row;
    int64_t rows_per_part = range ? (int64_t)(range / widest) : w->n;
    if (rows_per_part < 1)
        return tb_error_set(TB_ERR_UNSUPPORTED, "llm gpu: one row of %s takes %zu bytes, more than the device's "
                            "maxStorageBufferRange (%llu bytes)", what, widest, (unsigned long long)range);
    rows_per_part = rows_per_part < w->n ? rows_per_part : w->n;
    out->format = w->format;
    out->n = w->n;
    out->k = w->k;
    out->group = quantized ? w->q.group_size : 0;
    const int64_t parts = (w->n + rows_per_part - 1) / rows_per_part;
    out->part = calloc((size_t)parts, sizeof *out->part);
    if (!out->part)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    out->parts = (int)parts;
    for (int64_t i = 0; i < parts; i++) {
        gpu_part *part = &out->part[i];
        part->row0 = i * rows_per_part;
        part->rows = w->n - part->row0 < rows_per_part ? w->n - part->row0 : rows_per_part;
        const size_t rows = (size_t)part->rows, row0 = (size_t)part->row0;
        if (quantized) {
            TB_TRY(upload_new(engine, (const unsigned char *)w->q.data + row0 * row_bytes, rows * row_bytes, what, &part->weights));
            TB_TRY(upload_new(engine, w->q.scales + row0 * (size_t)w->q.scales_per_row, rows * scale_row, what,
                              &part->scales));
        } else if (out->words != TB_ENGINE_WEIGHT_F32) {
            uint16_t *words = narrow_rows(w->f32 + row0 * (size_t)w->k, rows * (size_t)w->k, out->words);
            if (!words)
                return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
            tb_status status = upload_new(engine, words, rows * row_bytes, what, &part->weights);
            free(words);
            TB_TRY(status);
        } else {
            TB_TRY(upload_new(engine, w->f32 + row0 * (size_t)w->k, rows * row_bytes, what, &part->weights));
        }
        if (w->bias)
            TB_TRY(upload_new(engine, w->bias + row0, rows * sizeof(float), what, &part->bias));
    }
    return TB_OK;
}

static void free_matrix(const tb_engine *engine, gpu_matrix *w) {
    for (int i = 0; w->part && i < w->parts; i++) {
        engine->buffer_free(w->part[i].weights);
        engine->buffer_free(w->part[i].scales);
        engine->buffer_free(w->part[i].bias);
    }
    free(w->part);
    w->part = NULL;
}

void tb_llm_gpu_model_free(tb_llm_gpu_model *g) {
    if (!g)
        return;
    const tb_engine *e = g->engine;
    for (int64_t l = 0; g->layers && l < g->n_layers; l++) {
        gpu_layer *layer = &g->layers[l];
        e->buffer_free(layer->attn_norm);
        e->buffer_free(layer->mlp_norm);
        e->buffer_free(layer->qk_norm);
        free_matrix(e, &layer->qkv);
        free_matrix(e, &layer->o);
        free_matrix(e, &layer->gate_up);
        free_matrix(e, &layer->down);
    }
    free(g->layers);
    free_matrix(e, &g->lm_head);
    e->buffer_free(g->final_norm);
    free(g);
}

tb_status tb_llm_gpu_model_new(const tb_llm_model *m, const tb_engine *engine, tb_llm_gpu_model **out) {
    *out = NULL;
    TB_TRY(engine->init());
    tb_llm_gpu_model *g = calloc(1, sizeof *g);
    if (g)
        g->layers = calloc((size_t)m->n_layers, sizeof *g->layers);
    if (!g || !g->layers) {
        free(g);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    }
    g->engine = engine;
    g->n_layers = m->n_layers;
    const int64_t c = m->hidden, d = m->head_dim;
    tb_engine_device_info info;
    engine->device_info(&info);
    g->buffer_range = info.max_storage_buffer_range;
    /* the widest activation row: logits (vocab), qkv, gate/up (2 I), hidden, attention output */
    int64_t widest = m->vocab > m->layers[0].qkv.n ? m->vocab : m->layers[0].qkv.n;
    widest = widest > 2 * m->intermediate ? widest : 2 * m->intermediate;
    widest = widest > c ? widest : c;
    widest = widest > m->n_heads * d ? widest : m->n_heads * d;
    g->max_rows = g->buffer_range ? (int64_t)(g->buffer_range / ((uint64_t)widest * sizeof(float))) : GPU_CHUNK;
    g->max_rows = g->max_rows < GPU_CHUNK ? g->max_rows : GPU_CHUNK;
    tb_status status = TB_OK;
    if (g->max_rows < 1)
        status = tb_error_set(TB_ERR_UNSUPPORTED, "llm gpu: one row of activations (%lld floats, the logits or the "
                              "widest projection) exceeds the device's maxStorageBufferRange (%llu bytes)",
                              (long long)widest, (unsigned long long)g->buffer_range);
    float *qk = malloc((size_t)(2 * d) * sizeof *qk);
    if (!qk)
        status = tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    for (int64_t l = 0; status == TB_OK && l < m->n_layers; l++) {
        const llm_layer *src = &m->layers[l];
        gpu_layer *dst = &g->layers[l];
        char what[64];
        snprintf(what, sizeof what, "layers.%lld (norms, qkv, o, gate_up or down)", (long long)l);
        dst->window = src->window;
        status = upload_new(engine, src->attn_norm, (size_t)c * sizeof(float), what, &dst->attn_norm);
        if (status == TB_OK)
            status = upload_new(engine, src->mlp_norm, (size_t)c * sizeof(float), what, &dst->mlp_norm);
        if (status == TB_OK && src->q_norm && src->k_norm) {
            memcpy(qk, src->q_norm, (size_t)d * sizeof *qk);
            memcpy(qk + d, src->k_norm, (size_t)d * sizeof *qk);
            status = upload_new(engine, qk, (size_t)(2 * d) * sizeof *qk, what, &dst->qk_norm);
        }
        if (status == TB_OK)
            status = upload_matrix(engine, g->buffer_range, info.storage_16bit, &src->qkv, what, &dst->qkv);
        if (status == TB_OK)
            status = upload_matrix(engine, g->buffer_range, info.storage_16bit, &src->o, what, &dst->o);
        if (status == TB_OK)
            status = upload_matrix(engine, g->buffer_range, info.storage_16bit, &src->gate_up, what, &dst->gate_up);
        if (status == TB_OK)
            status = upload_matrix(engine, g->buffer_range, info.storage_16bit, &src->down, what, &dst->down);
    }
    free(qk);
    if (status == TB_OK)
        status = upload_new(engine, m->final_norm, (size_t)c * sizeof(float), "final_norm", &g->final_norm);
    if (status == TB_OK)
        status = upload_matrix(engine, g->buffer_range, info.storage_16bit, &m->lm_head, "lm_head", &g->lm_head);
    if (status != TB_OK) {
        tb_llm_gpu_model_free(g);
        return status;
    }
    *out = g;
    return TB_OK;
}

/* ---- sessions ---- */

static void free_scratch(tb_llm_gpu_session *s, const tb_engine *e) {
    tb_engine_buffer **all[] = {&s->x, &s->xn, &s->qkv, &s->attn, &s->proj, &s->mlp, &s->act, &s->table, &s->logits,
                                &s->last};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        e->buffer_free(*all[i]);
        *all[i] = NULL;
    }
    free(s->host_rows);
    s->host_rows = NULL;
    s->rows = 0;
}

void tb_llm_gpu_session_free(tb_llm_gpu_session *s) {
    if (!s)
        return;
    const tb_engine *e = s->model->gpu->engine;
    for (int64_t l = 0; s->keys && s->values && l < s->model->n_layers; l++) {
        e->buffer_free(s->keys[l]);
        e->buffer_free(s->values[l]);
    }
    free(s->keys);
    free(s->values);
    free_scratch(s, e);
    free(s->ops);
    free(s);
}

tb_status tb_llm_gpu_session_new(const tb_llm_model *m, bool kv_f16, tb_llm_gpu_session **out) {
    *out = NULL;
    if (kv_f16)
        return tb_error_set(TB_ERR_UNSUPPORTED, "llm gpu: the KV cache on the GPU is float32 only "
                            "(kv_cache_dtype='float16' runs on the CPU)");
    tb_llm_gpu_session *s = calloc(1, sizeof *s);
    if (s) {
        s->model = m;
        s->keys = calloc((size_t)m->n_layers, sizeof *s->keys);
        s->values = calloc((size_t)m->n_layers, sizeof *s->values);
        const tb_llm_gpu_model *g = m->gpu;
        int64_t capacity = 3 + g->lm_head.parts; /* the last-row copy, the final norm and the LM head */
        for (int64_t l = 0; l < m->n_layers; l++) {
            const gpu_layer *layer = &g->layers[l];
            capacity += 7 + layer->qkv.parts + layer->o.parts + layer->gate_up.parts + layer->down.parts;
        }
        s->op_capacity = (int)capacity;
        s->ops = calloc((size_t)s->op_capacity, sizeof *s->ops);
    }
    if (!s || !s->keys || !s->values || !s->ops) {
        if (s) {
            free(s->keys);
            free(s->values);
            free(s->ops);
            free(s);
        }
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    }
    *out = s;
    return TB_OK;
}

/* Grows every layer's cache to hold `needed` positions, keeping the first `keep`. */
static tb_status reserve(tb_llm_gpu_session *s, int64_t needed, int64_t keep, int64_t max_seq_len) {
    if (needed <= s->capacity)
        return TB_OK;
    const tb_llm_model *m = s->model;
    const tb_engine *e = m->gpu->engine;
    int64_t capacity = s->capacity * 2 > GPU_MIN_CAPACITY ? s->capacity * 2 : GPU_MIN_CAPACITY;
    capacity = capacity > needed ? capacity : needed;
    capacity = capacity < max_seq_len ? capacity : max_seq_len;
    const int64_t d = m->head_dim, hkv = m->n_kv_heads;
    const size_t row = (size_t)d * sizeof(float);
    const uint64_t range = m->gpu->buffer_range;
    if (range && (uint64_t)(hkv * capacity) * row > range) { /* one buffer per layer's keys (and values) */
        const int64_t fits = (int64_t)(range / ((uint64_t)hkv * row));
        if (fits < needed)
            return tb_error_set(TB_ERR_UNSUPPORTED, "llm gpu: a KV cache of %lld positions needs %llu bytes per layer, "
                                "more than the device's maxStorageBufferRange (%llu bytes: %lld positions fit)",
                                (long long)needed, (unsigned long long)((uint64_t)(hkv * needed) * row),
                                (unsigned long long)range, (long long)fits);
        capacity = fits;
    }
    const size_t bytes = (size_t)(hkv * capacity) * row;
    float *staging = keep > 0 ? malloc((size_t)keep * row) : NULL;
    if (keep > 0 && !staging)
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    tb_status status = TB_OK;
    for (int64_t l = 0; status == TB_OK && l < m->n_layers; l++) {
        tb_engine_buffer **caches[2] = {&s->keys[l], &s->values[l]};
        for (int which = 0; which < 2 && status == TB_OK; which++) {
            tb_engine_buffer *fresh = NULL;
            status = e->buffer_alloc(bytes, &fresh);
            for (int64_t g = 0; status == TB_OK && g < hkv && keep > 0; g++) {
                status = e->buffer_download(*caches[which], (size_t)(g * s->capacity) * row, staging, (size_t)keep * row);
                if (status == TB_OK)
                    status = e->buffer_upload(fresh, (size_t)(g * capacity) * row, staging, (size_t)keep * row);
            }
            if (status != TB_OK) {
                e->buffer_free(fresh);
                break;
            }
            e->buffer_free(*caches[which]);
            *caches[which] = fresh;
        }
    }
    free(staging);
    if (status != TB_OK) /* layers already grown keep their larger buffers; capacity stays the smallest */
        return tb_error_prefix(status, "llm gpu: growing the KV cache to %lld positions", (long long)capacity);
    s->capacity = capacity;
    return TB_OK;
}

static tb_status ensure_scratch(tb_llm_gpu_session *s, int64_t rows) {
    if (rows <= s->rows)
        return TB_OK;
    const tb_llm_model *m = s->model;
    const tb_engine *e = m->gpu->engine;
    free_scratch(s, e);
    const size_t f = sizeof(float);
    const int64_t c = m->hidden, qkv = m->layers[0].qkv.n, q = m->n_heads * m->head_dim, i = m->intermediate;
    struct {
        tb_engine_buffer **slot;
        int64_t floats;
    } plan[] = {{&s->x, rows * c},         {&s->xn, rows * c},         {&s->qkv, rows * qkv},
                {&s->attn, rows * q},      {&s->proj, rows * c},       {&s->mlp, rows * 2 * i},
                {&s->act, rows * i},       {&s->table, rows * m->head_dim}, {&s->logits, rows * m->vocab},
                {&s->last, c}};
    for (size_t k = 0; k < sizeof plan / sizeof plan[0]; k++) {
        tb_status status = e->buffer_alloc((size_t)plan[k].floats * f, plan[k].slot);
        if (status != TB_OK) {
            free_scratch(s, e);
            return tb_error_prefix(status, "llm gpu: scratch for %lld rows", (long long)rows);
        }
    }
    const int64_t width = c > m->head_dim ? c : m->head_dim;
    s->host_rows = malloc((size_t)(rows * width) * f);
    if (!s->host_rows) {
        free_scratch(s, e);
        return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm gpu: out of memory");
    }
    s->rows = rows;
    return TB_OK;
}

/* ---- the op sequence ---- */

/* y[m, N] = x[m, K] @ W.T + bias as one op per part of W (each into its columns of y); returns the count. */
static int linear(const gpu_matrix *w, tb_engine_buffer *x, int64_t m, tb_engine_buffer *y, tb_engine_op *ops) {
    for (int i = 0; i < w->parts; i++) {
        const gpu_part *part = &w->part[i];
        tb_engine_op op = {.m = m, .n = part->rows, .k = w->k, .a = x, .b = part->weights, .c = part->bias, .y = y,
                           .y_stride = w->n, .y_col0 = part->row0};
        if (w->format == TB_LLM_QUANT_NONE) {
            op.kind = TB_ENGINE_OP_MATMUL;
            op.trans_b = true;
            op.b_format = w->words;
        } else {
            op.kind = TB_ENGINE_OP_QMATMUL;
            op.code = w->format == TB_LLM_QUANT_INT8 ? 8 : 4;
            op.llm.group = w->group;
            op.d = part->scales;
        }
        ops[i] = op;
    }
    return w->parts;
}

static tb_engine_op rms_norm(tb_engine_buffer *x, tb_engine_buffer *weight, int64_t rows, int64_t len, float eps,
                             tb_engine_buffer *y) {
    return (tb_engine_op){.kind = TB_ENGINE_OP_RMS_NORM, .rows = rows, .len = len, .eps = eps, .a = x, .b = weight,
                          .y = y};
}

static tb_engine_op add_into(tb_engine_buffer *x, tb_engine_buffer *y, int64_t n) {
    return (tb_engine_op){.kind = TB_ENGINE_OP_BINARY, .code = TB_BINARY_ADD, .n = n, .b_len = n, .a = x, .b = y, .y = x};
}

/* One chunk of T <= rows tokens at positions [pos0, pos0 + T): one run; logits of the last row (or of
 * every row when all_logits) into `logits` when it is not NULL. */
static tb_status forward_chunk(tb_llm_gpu_session *s, const int32_t *tokens, int64_t count, int64_t pos0,
                               float *logits, bool all_logits) {
    const tb_llm_model *m = s->model;
    const tb_llm_gpu_model *g = m->gpu;
    const tb_engine *e = g->engine;
    const int64_t c = m->hidden, d = m->head_dim, hq = m->n_heads, hkv = m->n_kv_heads, inter = m->intermediate;
    const size_t f = sizeof(float);
    for (int64_t t = 0; t < count; t++)
        TB_TRY(tb_llm_embed_row(m, tokens[t], s->host_rows + t * c));
    TB_TRY(e->buffer_upload(s->x, 0, s->host_rows, (size_t)(count * c) * f));
    for (int64_t t = 0; t < count; t++)
        tb_llm_rope_row(m, pos0 + t, s->host_rows + t * d, s->host_rows + t * d + d / 2);
    TB_TRY(e->buffer_upload(s->table, 0, s->host_rows, (size_t)(count * d) * f));
    tb_engine_op *ops = s->ops;
    int n = 0;
    for (int64_t l = 0; l < m->n_layers; l++) {
        const gpu_layer *layer = &g->layers[l];
        ops[n++] = rms_norm(s->x, layer->attn_norm, count, c, m->norm_eps, s->xn);
        n += linear(&layer->qkv, s->xn, count, s->qkv, ops + n);
        tb_engine_op rope = {.kind = TB_ENGINE_OP_LLM_ROPE, .eps = m->norm_eps, .a = s->table, .b = s->keys[l],
                             .c = s->values[l], .d = layer->qk_norm, .y = s->qkv};
        rope.llm.heads = hq;
        rope.llm.kv_heads = hkv;
        rope.llm.head_dim = d;
        rope.llm.tokens = count;
        rope.llm.pos0 = pos0;
        rope.llm.capacity = s->capacity;
        rope.llm.window = layer->window;
        rope.llm.stride = layer->qkv.n;
        ops[n++] = rope;
        tb_engine_op attention = rope;
        attention.kind = TB_ENGINE_OP_LLM_ATTENTION;
        attention.a = s->qkv;
        attention.d = NULL;
        attention.y = s->attn;
        ops[n++] = attention;
        n += linear(&layer->o, s->attn, count, s->proj, ops + n);
        ops[n++] = add_into(s->x, s->proj, count * c);
        ops[n++] = rms_norm(s->x, layer->mlp_norm, count, c, m->norm_eps, s->xn);
        n += linear(&layer->gate_up, s->xn, count, s->mlp, ops + n);
        ops[n++] = (tb_engine_op){.kind = TB_ENGINE_OP_SILU_MUL, .rows = count, .len = inter, .a = s->mlp, .y = s->act};
        n += linear(&layer->down, s->act, count, s->proj, ops + n);
        ops[n++] = add_into(s->x, s->proj, count * c);
    }
    const bool every_row = logits && (all_logits || count == 1);
    if (every_row) {
        ops[n++] = rms_norm(s->x, g->final_norm, count, c, m->norm_eps, s->xn);
        n += linear(&g->lm_head, s->xn, count, s->logits, ops + n);
    } else if (logits) { /* only the last row: copied to a one-row buffer (no offsets in ops), then its head */
        ops[n++] = (tb_engine_op){.kind = TB_ENGINE_OP_COPY, .n = c, .a_offset = (count - 1) * c, .a = s->x, .y = s->last};
        ops[n++] = rms_norm(s->last, g->final_norm, 1, c, m->norm_eps, s->xn);
        n += linear(&g->lm_head, s->xn, 1, s->logits, ops + n);
    }
    /* the uploads above, the ops and the wanted logits back: one submit */
    if (!logits)
        return e->run(ops, n);
    tb_engine_download down = {.buffer = s->logits, .dst = logits,
                               .bytes = (size_t)((all_logits ? count : 1) * m->vocab) * f};
    return tb_engine_run_download(e, ops, n, &down, 1);
}

tb_status tb_llm_gpu_forward(tb_llm_gpu_session *s, int64_t length, int64_t max_seq_len, const int32_t *tokens,
                             int64_t count, float *logits, bool all_logits) {
    const tb_llm_model *m = s->model;
    TB_TRY(reserve(s, length + count, length, max_seq_len));
    const int64_t chunk = m->gpu->max_rows; /* every activation buffer fits maxStorageBufferRange */
    TB_TRY(ensure_scratch(s, count < chunk ? count : chunk));
    for (int64_t done = 0; done < count;) {
        TB_TRY(tb_interrupt_check("llm: forward"));
        const int64_t n = count - done < s->rows ? count - done : s->rows;
        const bool last = done + n == count;
        float *out = NULL;
        if (logits && all_logits)
            out = logits + done * m->vocab;
        else if (logits && last)
            out = logits;
        TB_TRY(forward_chunk(s, tokens + done, n, length + done, out, all_logits));
        done += n;
    }
    return TB_OK;
}
