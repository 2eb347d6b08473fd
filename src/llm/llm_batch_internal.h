/* Internal pieces of the continuous-batching engine (llm_batch.c): the batched decode step, which runs one
 * token for each of several sessions through the model together, and its row-independent matmul. Shape
 * letters as in torchburn/llm.h; M is the number of sequences in the step. */
#ifndef TORCHBURN_LLM_BATCH_INTERNAL_H
#define TORCHBURN_LLM_BATCH_INTERNAL_H

#include "llm/llm_internal.h"

/* Scratch of a decode step for up to `rows` sequences (owned by the engine thread; reused across steps). */
typedef struct tb_llm_step_scratch {
    int64_t rows;
    float *buffer;
    float *x, *xn, *qkv, *attn, *proj, *mlp, *cos_table, *sin_table; /* [M, ...] as in llm_forward.c */
    unsigned char *act; /* prepared int8 activation rows */
    int64_t act_bytes;
} tb_llm_step_scratch;

void tb_llm_step_scratch_free(tb_llm_step_scratch *scratch);

/* y[M, N] = x[M, K] @ W.T + bias where row i of y has exactly the bits a single-row (M = 1) decode
 * matmul gives for row i of x: the active qkernels' batch_rows where the int8-activation kernels run, else
 * one M = 1 matmul per row (same numbers, weights read M times). */
tb_status tb_llm_matmul_rows(tb_llm_step_scratch *scratch, const tb_llm_model *model, const llm_matrix *w,
                             const float *x, int64_t x_stride, int64_t m, float *y);

/* One decode step: token[i] runs at the next position of sessions[i] (distinct sessions of one model, each
 * with room for one more position), appending its key/value; logits[i * V] receives its logits. Every
 * session's numbers equal those of tb_llm_forward(sessions[i], &tokens[i], 1, ...) alone. */
tb_status tb_llm_forward_step(tb_llm_step_scratch *scratch, tb_llm_session *const *sessions, const int32_t *tokens,
                              int64_t m, float *logits);

#endif
