/* The batched decode step of continuous batching: one token of each of M sequences (each with its own
 * session and KV cache) goes through the model together, so every weight matrix is streamed once per step
 * for all M rows instead of once per sequence. Per-row work (norms, RoPE, the KV append, attention over the
 * row's own cache) is the single-sequence code of llm_forward.c; the matmuls are row-independent, so each
 * sequence gets bit for bit the numbers it would get decoding alone (the batching contract in
 * docs/serving.md). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "llm/llm_batch_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

void tb_llm_step_scratch_free(tb_llm_step_scratch *scratch) {
    tb_free(scratch->buffer);
    tb_free(scratch->act);
    memset(scratch, 0, sizeof *scratch);
}

static tb_status ensure_rows(tb_llm_step_scratch *s, const tb_llm_model *m, int64_t rows) {
    if (rows <= s->rows)
        return TB_OK;
    const int64_t c = m->hidden, qkv = m->layers[0].qkv.n, q = m->n_heads * m->head_dim;
    const int64_t per_row = 3 * c + qkv + q + 2 * m->intermediate + m->head_dim;
    float *buffer = NULL;
    TB_TRY(tb_alloc((size_t)(rows * per_row) * sizeof(float), TB_ALLOC_DEFAULT, (void **)&buffer));
    tb_free(s->buffer);
    s->buffer = buffer;
    s->rows = rows;
    s->x = buffer;
    s->xn = s->x + rows * c;
    s->proj = s->xn + rows * c;
    s->qkv = s->proj + rows * c;
    s->attn = s->qkv + rows * qkv;
    s->mlp = s->attn + rows * q;
    s->cos_table = s->mlp + rows * 2 * m->intermediate;
    s->sin_table = s->cos_table + rows * (m->head_dim / 2);
    return TB_OK;
}

/* ---- row-independent matmul ---- */

typedef struct prepare_job {
    const tb_llm_qkernels *kernels;
    tb_llm_quant format;
    const float *x;
    int64_t x_stride, k, row_bytes;
    unsigned char *act;
} prepare_job;

static void prepare_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const prepare_job *job = context;
    for (int64_t i = begin; i < end; i++)
        job->kernels->prepare(job->format, job->x + i * job->x_stride, job->k, job->act + i * job->row_bytes);
}

typedef struct batch_rows_job {
    const tb_llm_qkernels *kernels;
    tb_llm_qrun run;
} batch_rows_job;

static void batch_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const batch_rows_job *job = context;
    job->kernels->batch_rows(&job->run, begin * 4, end * 4 < job->run.w->n ? end * 4 : job->run.w->n);
}

tb_status tb_llm_matmul_rows(tb_llm_step_scratch *scratch, const tb_llm_model *model, const llm_matrix *w,
                             const float *x, int64_t x_stride, int64_t m, float *y) {
    const tb_llm_kernels *kernels = tb_llm_kernels_active();
    const tb_llm_qkernels *qkernels = model->exact_activations ? NULL : tb_llm_qkernels_active();
    if (w->format != TB_LLM_QUANT_NONE && qkernels && qkernels->batch_rows && m > 1) {
        const int64_t row_bytes = tb_llm_qact_row_bytes(w->format, w->k);
        if (m * row_bytes > scratch->act_bytes) {
            unsigned char *act = NULL;
            TB_TRY(tb_alloc((size_t)(m * row_bytes * 2), TB_ALLOC_DEFAULT, (void **)&act));
            tb_free(scratch->act);
            scratch->act = act;
            scratch->act_bytes = m * row_bytes * 2;
        }
        prepare_job prepare = {.kernels = qkernels, .format = w->format, .x = x, .x_stride = x_stride, .k = w->k,
                               .row_bytes = row_bytes, .act = scratch->act};
        tb_parallel_for(m, w->k > 0 ? (16384 + w->k - 1) / w->k : 1, prepare_rows, &prepare);
        batch_rows_job job = {.kernels = qkernels,
                              .run = {.w = &w->q, .m = m, .act = scratch->act, .act_row_bytes = row_bytes, .y = y,
                                      .y_row_stride = w->n, .bias = w->bias}};
        const int64_t work = 4 * w->q.row_bytes * (m < 16 ? m : 16);
        tb_parallel_for((w->n + 3) / 4, work > 0 ? (32768 + work - 1) / work : 1, batch_rows, &job);
        return TB_OK;
    }
    /* f32 weights (GEMV vs GEMM round differently) and CPUs without the int8-activation kernels */
    const tb_llm_qkernels *row_kernels = w->format != TB_LLM_QUANT_NONE ? qkernels : NULL;
    for (int64_t i = 0; i < m; i++)
        TB_TRY(tb_llm_matmul(kernels, row_kernels, w, x + i * x_stride, x_stride, 1, y + i * w->n));
    return TB_OK;
}

/* ---- the step ---- */

typedef struct step_rows_job {
    tb_llm_session *const *sessions;
    const tb_llm_kernels *kernels;
    const llm_layer *layer;
    int64_t layer_index;
    const int64_t *positions;
    tb_llm_step_scratch *scratch;
    int64_t heads_per_item, items_per_row;
    float scale;
    atomic_int failed;
} step_rows_job;

static void prepare_step_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    step_rows_job *job = context;
    const tb_llm_model *m = tb_llm_session_model(job->sessions[0]);
    const int64_t half = m->head_dim / 2, stride = job->layer->qkv.n;
    for (int64_t i = begin; i < end; i++)
        tb_llm_prepare_row(job->sessions[i], job->kernels, job->layer, job->layer_index, job->scratch->qkv + i * stride,
                           job->scratch->cos_table + i * half, job->scratch->sin_table + i * half, job->positions[i]);
}

static void attend_step_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    step_rows_job *job = context;
    const tb_llm_model *m = tb_llm_session_model(job->sessions[0]);
    const int64_t d = m->head_dim, stride = job->layer->qkv.n, hpi = job->heads_per_item;
    for (int64_t item = begin; item < end; item++) {
        const int64_t i = item / job->items_per_row, h0 = (item % job->items_per_row) * hpi;
        if (!tb_llm_attend_row(job->sessions[i], job->kernels, job->layer, job->layer_index,
                               job->scratch->qkv + i * stride + h0 * d, h0, hpi, job->positions[i], job->scale,
                               job->scratch->attn + i * m->n_heads * d + h0 * d)) {
            atomic_store(&job->failed, 1);
            return;
        }
    }
}

typedef struct silu_job {
    const tb_llm_kernels *kernels;
    float *mlp;
    int64_t intermediate;
} silu_job;

static void silu_rows(void *context, int64_t begin, int64_t end, int thread_index) {
    (void)thread_index;
    const silu_job *job = context;
    for (int64_t i = begin; i < end; i++) {
        float *row = job->mlp + i * 2 * job->intermediate;
        job->kernels->silu_mul(row, row + job->intermediate, row, job->intermediate);
    }
}

enum { MAX_STEP_ROWS = 1024 };

tb_status tb_llm_forward_step(tb_llm_step_scratch *scratch, tb_llm_session *const *sessions, const int32_t *tokens,
                              int64_t count, float *logits) {
    if (count < 1 || count > MAX_STEP_ROWS)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: a step runs 1 to %d sequences, got %lld",
                            MAX_STEP_ROWS, (long long)count);
    const tb_llm_model *m = tb_llm_session_model(sessions[0]);
    if (m->gpu) /* GPU models (llm_gpu.c): the sequences' steps one after another on the device */
        for (int64_t i = 0; i < count; i++)
            TB_TRY(tb_llm_forward(sessions[i], &tokens[i], 1, logits + i * m->vocab, false));
    if (m->gpu)
        return TB_OK;
    int64_t positions[MAX_STEP_ROWS];
    for (int64_t i = 0; i < count; i++) {
        if (tb_llm_session_model(sessions[i]) != m)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: the sessions of a step must share one model");
        if (tokens[i] < 0 || tokens[i] >= m->vocab)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: token id %d is outside the vocabulary [0, %lld)",
                                (int)tokens[i], (long long)m->vocab);
        positions[i] = tb_llm_session_length(sessions[i]);
        if (positions[i] + 1 > tb_llm_session_max_seq_len(sessions[i]))
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "llm batch: sequence %lld has no room left in its context",
                                (long long)i);
        TB_TRY(tb_llm_session_reserve(sessions[i], positions[i] + 1));
    }
    TB_TRY(ensure_rows(scratch, m, count));
    const tb_llm_kernels *kernels = tb_llm_kernels_active();
    const int64_t c = m->hidden, d = m->head_dim, half = d / 2, hq = m->n_heads;
    for (int64_t i = 0; i < count; i++) {
        TB_TRY(tb_llm_embed_row(m, tokens[i], scratch->x + i * c));
        tb_llm_rope_row(m, positions[i], scratch->cos_table + i * half, scratch->sin_table + i * half);
    }
    const int64_t group = hq / m->n_kv_heads;
    for (int64_t l = 0; l < m->n_layers; l++) {
        const llm_layer *layer = &m->layers[l];
        for (int64_t i = 0; i < count; i++)
            kernels->rms_norm(scratch->x + i * c, layer->attn_norm, scratch->xn + i * c, c, m->norm_eps);
        TB_TRY(tb_llm_matmul_rows(scratch, m, &layer->qkv, scratch->xn, c, count, scratch->qkv));
        step_rows_job job = {.sessions = sessions, .kernels = kernels, .layer = layer, .layer_index = l,
                             .positions = positions, .scratch = scratch};
        tb_parallel_for(count, 16, prepare_step_rows, &job);
        /* the head split a single-token decode uses (llm_forward.c), so each row's attention is the same */
        job.heads_per_item = m->n_kv_heads >= tb_num_threads() ? group : 1;
        job.items_per_row = hq / job.heads_per_item;
        job.scale = (float)(1.0 / sqrt((double)d));
        atomic_init(&job.failed, 0);
        tb_parallel_for(count * job.items_per_row, 1, attend_step_rows, &job);
        if (atomic_load(&job.failed))
            return tb_error_set(TB_ERR_OUT_OF_MEMORY, "llm batch: out of memory for attention scores");
        TB_TRY(tb_llm_matmul_rows(scratch, m, &layer->o, scratch->attn, hq * d, count, scratch->proj));
        for (int64_t j = 0; j < count * c; j++)
            scratch->x[j] += scratch->proj[j];
        for (int64_t i = 0; i < count; i++)
            kernels->rms_norm(scratch->x + i * c, layer->mlp_norm, scratch->xn + i * c, c, m->norm_eps);
        TB_TRY(tb_llm_matmul_rows(scratch, m, &layer->gate_up, scratch->xn, c, count, scratch->mlp));
        silu_job sj = {.kernels = kernels, .mlp = scratch->mlp, .intermediate = m->intermediate};
        tb_parallel_for(count, 4, silu_rows, &sj);
        TB_TRY(tb_llm_matmul_rows(scratch, m, &layer->down, scratch->mlp, 2 * m->intermediate, count, scratch->proj));
        for (int64_t j = 0; j < count * c; j++)
            scratch->x[j] += scratch->proj[j];
    }
    for (int64_t i = 0; i < count; i++)
        tb_llm_session_commit(sessions[i], &tokens[i], 1);
    for (int64_t i = 0; i < count; i++)
        kernels->rms_norm(scratch->x + i * c, m->final_norm, scratch->xn + i * c, c, m->norm_eps);
    return tb_llm_matmul_rows(scratch, m, &m->lm_head, scratch->xn, c, count, logits);
}
