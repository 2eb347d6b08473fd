/* Gradients of scaled dot-product attention (contract in gemm.h): the softmax is rebuilt a block of
 * query rows at a time from the forward's log-sum-exp, so memory is O(block x Tk) per task, never
 * O(Tq x Tk). Each product is one call of the packed GEMM (strided operands, no copies).
 *
 * Work unit (one tb_parallel_for item): batch entry b and KV head g. The unit zeroes and then owns
 * grad_k[b, g] and grad_v[b, g], walking every query head of g's group (GQA) and every query block,
 * so no two units write the same gradient element. With fewer units than threads the units run one
 * after another and the GEMMs inside spread over the pool instead (nested regions run inline). */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/gemm_internal.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

enum { QUERY_BLOCK = 64 }; /* query rows whose scores are held at once */

static tb_status validate(const tb_attention_backward_desc *d) {
    if (!d)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention backward: descriptor is NULL");
    if (d->batch < 0 || d->q_heads < 0 || d->kv_heads < 0 || d->q_len < 0 || d->kv_len < 0 || d->head_dim < 0 ||
        d->value_dim < 0)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention backward: negative size");
    if (d->q_heads > 0 && (d->kv_heads == 0 || d->q_heads % d->kv_heads != 0))
        return tb_error_set(TB_ERR_SHAPE, "attention backward: q_heads %lld is not a multiple of kv_heads %lld",
                            (long long)d->q_heads, (long long)d->kv_heads);
    if (d->batch == 0 || d->kv_heads == 0)
        return TB_OK;
    struct {
        const void *ptr;
        const int64_t *strides;
        int64_t rows, cols;
        const char *name;
    } operands[] = {
        {d->q, d->q_strides, d->q_len, d->head_dim, "q"},
        {d->grad_q, d->grad_q_strides, d->q_len, d->head_dim, "grad_q"},
        {d->grad_out, d->grad_out_strides, d->q_len, d->value_dim, "grad_out"},
        {d->out, d->out_strides, d->q_len, d->value_dim, "out"},
        {d->k, d->k_strides, d->kv_len, d->head_dim, "k"},
        {d->grad_k, d->grad_k_strides, d->kv_len, d->head_dim, "grad_k"},
        {d->v, d->v_strides, d->kv_len, d->value_dim, "v"},
        {d->grad_v, d->grad_v_strides, d->kv_len, d->value_dim, "grad_v"},
    };
    for (size_t i = 0; i < sizeof operands / sizeof operands[0]; i++) {
        if (operands[i].rows == 0 || operands[i].cols == 0 || (d->q_heads == 0 && i < 4))
            continue;
        if (!operands[i].ptr || operands[i].strides[3] != 1)
            return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention backward: %s is %s", operands[i].name,
                                !operands[i].ptr ? "NULL" : "not unit-stride in its last dim");
    }
    if (d->q_heads > 0 && d->q_len > 0 && d->kv_len > 0 && !d->lse)
        return tb_error_set(TB_ERR_INVALID_ARGUMENT, "attention backward: lse is NULL");
    return TB_OK;
}

typedef struct backward_job {
    const tb_attention_backward_desc *d;
    const tb_attention_kernels *ak; /* the active ISA's softmax row helpers */
    int64_t group; /* query heads per KV head */
} backward_job;

/* Row i of head h, batch entry b of a [B, H, T, *] operand. */
static int64_t at(const int64_t *strides, int64_t b, int64_t h, int64_t i) {
    return b * strides[0] + h * strides[1] + i * strides[2];
}

static tb_status gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row, int64_t a_col, const float *bm,
                      int64_t b_row, int64_t b_col, float *c, int64_t c_row, float alpha, float beta) {
    if (m == 0 || n == 0)
        return TB_OK;
    tb_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.a_row_stride = a_row;
    g.a_col_stride = a_col;
    g.b = bm;
    g.b_row_stride = b_row;
    g.b_col_stride = b_col;
    g.c = c;
    g.c_row_stride = c_row;
    g.alpha = alpha;
    g.beta = beta;
    g.batch = 1;
    return tb_gemm_f32(&g);
}

static void zero_rows(float *base, int64_t row_stride, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        memset(base + r * row_stride, 0, sizeof(float) * (size_t)cols);
}

/* One block of query rows [i0, i0 + rows) of head h (KV head g) against keys [0, kv).
 * p and ds are [rows x kv] scratch (row stride kv). */
static tb_status query_block(const tb_attention_backward_desc *d, const tb_attention_kernels *ak, int64_t b,
                             int64_t h, int64_t g, int64_t i0, int64_t rows, int64_t kv, float *p, float *ds) {
    const int64_t D = d->head_dim, Dv = d->value_dim;
    const float *q = D > 0 ? d->q + at(d->q_strides, b, h, i0) : NULL;
    const float *go = Dv > 0 ? d->grad_out + at(d->grad_out_strides, b, h, i0) : NULL;
    const float *o = Dv > 0 ? d->out + at(d->out_strides, b, h, i0) : NULL;
    const float *k = D > 0 ? d->k + at(d->k_strides, b, g, 0) : NULL;
    const float *v = Dv > 0 ? d->v + at(d->v_strides, b, g, 0) : NULL;
    float *gq = D > 0 ? d->grad_q + at(d->grad_q_strides, b, h, i0) : NULL;
    float *gk = D > 0 ? d->grad_k + at(d->grad_k_strides, b, g, 0) : NULL;
    float *gv = Dv > 0 ? d->grad_v + at(d->grad_v_strides, b, g, 0) : NULL;
    const int64_t qs = d->q_strides[2], gos = d->grad_out_strides[2], os = d->out_strides[2], ks = d->k_strides[2],
                  vs = d->v_strides[2];
    if (kv == 0) { /* no keys: the output is 0 whatever q is */
        if (D > 0)
            zero_rows(gq, d->grad_q_strides[2], rows, D);
        return TB_OK;
    }
    /* P = exp(scale * Q K^T + mask - lse) */
    if (D > 0)
        TB_TRY(gemm(rows, kv, D, q, qs, 1, k, 1, ks, p, kv, d->scale, 0.0f));
    else
        memset(p, 0, sizeof(float) * (size_t)(rows * kv));
    for (int64_t r = 0; r < rows; r++) {
        float *prow = p + r * kv;
        tb_attention_apply_masks(ak, d->float_mask, d->float_mask_strides, d->bool_mask, d->bool_mask_strides, d->causal,
                                 b, h, i0 + r, 0, kv, prow);
        float lse = d->lse[b * d->lse_strides[0] + h * d->lse_strides[1] + (i0 + r) * d->lse_strides[2]];
        if (lse == -INFINITY) { /* fully masked: no gradient flows through this row */
            memset(prow, 0, sizeof(float) * (size_t)kv);
            continue;
        }
        ak->exp_sum(prow, kv, lse); /* prow = exp(prow - lse); the sum is not needed */
    }
    /* grad_v += P^T dO */
    if (Dv > 0)
        TB_TRY(gemm(kv, Dv, rows, p, 1, kv, go, gos, 1, gv, d->grad_v_strides[2], 1.0f, 1.0f));
    /* dS = P * (dO V^T - rowsum(dO * O)) */
    if (Dv > 0)
        TB_TRY(gemm(rows, kv, Dv, go, gos, 1, v, 1, vs, ds, kv, 1.0f, 0.0f));
    else
        memset(ds, 0, sizeof(float) * (size_t)(rows * kv));
    for (int64_t r = 0; r < rows; r++) {
        float dot = 0.0f;
        for (int64_t c = 0; c < Dv; c++)
            dot += go[r * gos + c] * o[r * os + c];
        float *prow = p + r * kv, *dsrow = ds + r * kv;
        for (int64_t j = 0; j < kv; j++)
            dsrow[j] = prow[j] * (dsrow[j] - dot);
    }
    if (D == 0)
        return TB_OK;
    /* grad_q = scale * dS K;  grad_k += scale * dS^T Q */
    TB_TRY(gemm(rows, D, kv, ds, kv, 1, k, ks, 1, gq, d->grad_q_strides[2], d->scale, 0.0f));
    return gemm(kv, D, rows, ds, 1, kv, q, qs, 1, gk, d->grad_k_strides[2], d->scale, 1.0f);
}

static tb_status run_unit(void *context, int64_t unit, size_t *failed_bytes) {
    const backward_job *job = context;
    const tb_attention_backward_desc *d = job->d;
    int64_t g = unit % d->kv_heads, b = unit / d->kv_heads;
    if (d->head_dim > 0 && d->kv_len > 0)
        zero_rows(d->grad_k + at(d->grad_k_strides, b, g, 0), d->grad_k_strides[2], d->kv_len, d->head_dim);
    if (d->value_dim > 0 && d->kv_len > 0)
        zero_rows(d->grad_v + at(d->grad_v_strides, b, g, 0), d->grad_v_strides[2], d->kv_len, d->value_dim);
    if (d->q_len == 0 || job->group == 0)
        return TB_OK;
    int64_t block = d->q_len < QUERY_BLOCK ? d->q_len : QUERY_BLOCK;
    size_t bytes = 2 * sizeof(float) * (size_t)(block * (d->kv_len > 0 ? d->kv_len : 1));
    float *scratch = NULL;
    if (tb_alloc(bytes, 0, (void **)&scratch) != TB_OK) {
        *failed_bytes = bytes;
        return TB_ERR_OUT_OF_MEMORY;
    }
    float *p = scratch, *ds = scratch + block * (d->kv_len > 0 ? d->kv_len : 1);
    tb_status status = TB_OK;
    for (int64_t h = g * job->group; h < (g + 1) * job->group && status == TB_OK; h++)
        for (int64_t i0 = 0; i0 < d->q_len && status == TB_OK; i0 += block) {
            int64_t rows = d->q_len - i0 < block ? d->q_len - i0 : block;
            /* keys any row of the block may see */
            int64_t kv = d->causal && i0 + rows < d->kv_len ? i0 + rows : d->kv_len;
            status = query_block(d, job->ak, b, h, g, i0, rows, kv, p, ds);
        }
    tb_free(scratch);
    return status;
}

tb_status tb_attention_backward_f32(const tb_attention_backward_desc *desc) {
    TB_TRY(validate(desc));
    const tb_attention_backward_desc *d = desc;
    if (d->batch == 0 || d->kv_heads == 0)
        return TB_OK;
    backward_job job;
    memset(&job, 0, sizeof job);
    job.d = d;
    job.ak = tb_attention_kernels_for(tb_isa_active());
    job.group = d->q_heads / d->kv_heads;
    int64_t units = d->batch * d->kv_heads;
    size_t failed_bytes;
    tb_status status = tb_run_units(run_unit, &job, units, units >= tb_num_threads() && !tb_in_parallel_region(),
                                    &failed_bytes);
    if (status != TB_OK && failed_bytes > 0)
        return tb_error_set(status, "attention backward: could not allocate %zu bytes of scratch", failed_bytes);
    if (status != TB_OK) /* the GEMM's message was set on the worker's thread */
        return tb_error_set(status, "attention backward: a GEMM failed (%s)", tb_status_name(status));
    return TB_OK;
}
