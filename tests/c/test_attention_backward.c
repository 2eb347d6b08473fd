/* Tests of tb_attention_backward_f32 and of the forward's log-sum-exp (at every ISA this CPU supports)
 * against a naive double-precision reference that materialises the softmax: causal and not, Tq != Tk
 * both ways, GQA, float and bool masks broadcast through 0 strides, fully masked rows (lse 0 as torch
 * writes, zero gradients), an lse of -inf (zero gradients, not NaN), several query blocks, [B, T, H, D]
 * layouts, bad arguments, allocation failure, 1 and 2 threads; and the graph ops (attention's lse
 * output, attention_backward with unused gradients) against the kernels called directly. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/graph.h"
#include "torchburn/thread_pool.h"

typedef struct backward_case {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    bool causal;
    int float_mask; /* 0 none, 1 [Tq, Tk] broadcast with row 1 fully -inf, 2 padding [B, 1, 1, Tk] */
    int bool_mask;  /* 0 none, 1 full [B, Hq, Tq, Tk] random with row 2 of each (b, h) all false */
    bool seq_major; /* q/k/v/out/grads laid out [B, T, H, D]; lse laid out [B, T, H] (torch's layout) */
    bool minus_inf_lse; /* the backward gets lse = -inf for row 0 of every (b, h) */
    uint64_t seed;
} backward_case;

static void make_strides(const int64_t shape[4], bool seq_major, int64_t strides[4]) {
    strides[3] = 1;
    if (seq_major) {
        strides[1] = shape[3];
        strides[2] = shape[1] * shape[3];
        strides[0] = shape[2] * shape[1] * shape[3];
    } else {
        strides[2] = shape[3];
        strides[1] = shape[2] * shape[3];
        strides[0] = shape[1] * shape[2] * shape[3];
    }
}

static int64_t offset(const int64_t s[4], int64_t b, int64_t h, int64_t i, int64_t e) {
    return b * s[0] + h * s[1] + i * s[2] + e * s[3];
}

/* max |got - want| <= atol + rtol |want| over a [B, H, T, C] tensor, with the first miss reported */
static void expect_close(const char *what, const float *got, const double *want, const int64_t shape[4],
                         const int64_t strides[4], double atol, double rtol) {
    int bad = 0;
    for (int64_t b = 0; b < shape[0]; b++)
        for (int64_t h = 0; h < shape[1]; h++)
            for (int64_t i = 0; i < shape[2]; i++)
                for (int64_t e = 0; e < shape[3]; e++) {
                    int64_t dense = ((b * shape[1] + h) * shape[2] + i) * shape[3] + e;
                    double g = got[offset(strides, b, h, i, e)], w = want[dense];
                    if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
                        if (bad++ == 0)
                            fprintf(stderr, "%s[%lld, %lld, %lld, %lld]: got %.7g, want %.7g\n", what, (long long)b,
                                    (long long)h, (long long)i, (long long)e, g, w);
                    }
                }
    TB_CHECK_MSG(bad == 0, "%s: %d elements differ", what, bad);
}

static void run_case(const backward_case *t, tb_isa isa) {
    const int64_t B = t->batch, Hq = t->q_heads, Hkv = t->kv_heads, Tq = t->q_len, Tk = t->kv_len;
    const int64_t D = t->head_dim, Dv = t->value_dim, group = Hq / Hkv;
    int64_t q_shape[4] = {B, Hq, Tq, D}, k_shape[4] = {B, Hkv, Tk, D}, v_shape[4] = {B, Hkv, Tk, Dv},
            o_shape[4] = {B, Hq, Tq, Dv}, l_shape[4] = {B, Hq, Tq, 1};
    int64_t qs[4], ks[4], vs[4], os[4], ls4[4];
    make_strides(q_shape, t->seq_major, qs);
    make_strides(k_shape, t->seq_major, ks);
    make_strides(v_shape, t->seq_major, vs);
    make_strides(o_shape, t->seq_major, os);
    make_strides(l_shape, t->seq_major, ls4);
    int64_t nq = B * Hq * Tq * D, nk = B * Hkv * Tk * D, nv = B * Hkv * Tk * Dv, no = B * Hq * Tq * Dv,
            nl = B * Hq * Tq, nm = B * Hq * Tq * Tk;
    float *q = tb_test_guarded_alloc(nq), *k = tb_test_guarded_alloc(nk), *v = tb_test_guarded_alloc(nv);
    float *out = tb_test_guarded_alloc(no), *grad_out = tb_test_guarded_alloc(no), *lse = tb_test_guarded_alloc(nl);
    float *gq = tb_test_guarded_alloc(nq), *gk = tb_test_guarded_alloc(nk), *gv = tb_test_guarded_alloc(nv);
    float *fmask = tb_test_guarded_alloc(nm);
    uint8_t *bmask = malloc((size_t)nm + 1);
    float *coin = malloc(sizeof(float) * (size_t)(nm + 1));
    double *scores = malloc(sizeof(double) * (size_t)(nm + 1)); /* the softmax P, dense [B, Hq, Tq, Tk] */
    double *ref_out = calloc((size_t)no + 1, sizeof(double)), *ref_lse = calloc((size_t)nl + 1, sizeof(double));
    double *ref_gq = calloc((size_t)nq + 1, sizeof(double)), *ref_gk = calloc((size_t)nk + 1, sizeof(double));
    double *ref_gv = calloc((size_t)nv + 1, sizeof(double));
    TB_CHECK(q && k && v && out && grad_out && lse && gq && gk && gv && fmask && bmask && coin && scores && ref_out &&
             ref_lse && ref_gq && ref_gk && ref_gv);
    if (!(q && k && v && out && grad_out && lse && gq && gk && gv && fmask && bmask && coin && scores && ref_out &&
          ref_lse && ref_gq && ref_gk && ref_gv))
        return;
    tb_test_fill_uniform(q, nq, -1.5f, 1.5f, t->seed);
    tb_test_fill_uniform(k, nk, -1.5f, 1.5f, t->seed + 1);
    tb_test_fill_uniform(v, nv, -1.0f, 1.0f, t->seed + 2);
    tb_test_fill_uniform(grad_out, no, -1.0f, 1.0f, t->seed + 3);
    tb_test_fill_uniform(fmask, nm, -2.0f, 1.0f, t->seed + 4);
    tb_test_fill_uniform(coin, nm, 0.0f, 1.0f, t->seed + 5);
    tb_test_fill_uniform(gq, nq, -9.0f, 9.0f, t->seed + 6); /* garbage the kernel must overwrite */
    tb_test_fill_uniform(gk, nk, -9.0f, 9.0f, t->seed + 7);
    tb_test_fill_uniform(gv, nv, -9.0f, 9.0f, t->seed + 8);
    for (int64_t i = 0; i < nm; i++)
        bmask[i] = coin[i] < 0.75f;
    int64_t fms[4] = {0, 0, Tk, 1}; /* [Tq, Tk] broadcast */
    if (t->float_mask == 1 && Tq > 1)
        for (int64_t j = 0; j < Tk; j++)
            fmask[Tk + j] = -INFINITY;
    if (t->float_mask == 2) { /* [B, 1, 1, Tk]: the last b keys of batch entry b are padding */
        fms[0] = Tk;
        fms[1] = fms[2] = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < Tk; j++)
                fmask[b * Tk + j] = j >= Tk - b ? -INFINITY : 0.25f * (float)j;
    }
    int64_t bms[4] = {Hq * Tq * Tk, Tq * Tk, Tk, 1};
    if (t->bool_mask && Tq > 2)
        for (int64_t bh = 0; bh < B * Hq; bh++)
            memset(bmask + bh * Tq * Tk + 2 * Tk, 0, (size_t)Tk);
    const float scale = D > 0 ? 1.0f / sqrtf((float)D) : 1.0f;

    /* reference: materialised softmax in double */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                int64_t g = h / group;
                double *row = scores + ((b * Hq + h) * Tq + i) * Tk, row_max = -INFINITY;
                for (int64_t j = 0; j < Tk; j++) {
                    double s = 0.0;
                    for (int64_t e = 0; e < D; e++)
                        s += (double)q[offset(qs, b, h, i, e)] * (double)k[offset(ks, b, g, j, e)];
                    s *= scale;
                    if (t->float_mask)
                        s += fmask[b * fms[0] + h * fms[1] + i * fms[2] + j];
                    if (t->bool_mask && !bmask[b * bms[0] + h * bms[1] + i * bms[2] + j])
                        s = -INFINITY;
                    if (t->causal && j > i)
                        s = -INFINITY;
                    row[j] = s;
                    row_max = s > row_max ? s : row_max;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < Tk; j++) {
                    row[j] = row_max == -INFINITY ? 0.0 : exp(row[j] - row_max);
                    sum += row[j];
                }
                ref_lse[(b * Hq + h) * Tq + i] = sum == 0.0 ? 0.0 : row_max + log(sum);
                for (int64_t j = 0; j < Tk; j++)
                    row[j] = sum == 0.0 ? 0.0 : row[j] / sum;
                if (t->minus_inf_lse && i == 0)
                    for (int64_t j = 0; j < Tk; j++)
                        row[j] = 0.0; /* what the backward must assume for that row */
                for (int64_t c = 0; c < Dv; c++) {
                    double o = 0.0;
                    for (int64_t j = 0; j < Tk; j++)
                        o += row[j] * (double)v[offset(vs, b, g, j, c)];
                    ref_out[((b * Hq + h) * Tq + i) * Dv + c] = o;
                }
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                int64_t g = h / group;
                const double *p = scores + ((b * Hq + h) * Tq + i) * Tk;
                double dot = 0.0; /* rowsum(dO * O), with the O the kernel will be given */
                for (int64_t c = 0; c < Dv; c++)
                    dot += (double)grad_out[offset(os, b, h, i, c)] * ref_out[((b * Hq + h) * Tq + i) * Dv + c];
                for (int64_t j = 0; j < Tk; j++) {
                    double dp = 0.0;
                    for (int64_t c = 0; c < Dv; c++) {
                        double go = grad_out[offset(os, b, h, i, c)];
                        dp += go * (double)v[offset(vs, b, g, j, c)];
                        ref_gv[((b * Hkv + g) * Tk + j) * Dv + c] += p[j] * go;
                    }
                    double ds = p[j] * (dp - dot) * scale;
                    for (int64_t e = 0; e < D; e++) {
                        ref_gq[((b * Hq + h) * Tq + i) * D + e] += ds * (double)k[offset(ks, b, g, j, e)];
                        ref_gk[((b * Hkv + g) * Tk + j) * D + e] += ds * (double)q[offset(qs, b, h, i, e)];
                    }
                }
            }

    /* forward with lse */
    tb_attention_desc f = {.batch = B, .q_heads = Hq, .kv_heads = Hkv, .q_len = Tq, .kv_len = Tk, .head_dim = D,
                           .value_dim = Dv, .q = q, .k = k, .v = v, .out = out, .causal = t->causal, .scale = scale,
                           .lse = lse};
    memcpy(f.q_strides, qs, sizeof qs);
    memcpy(f.k_strides, ks, sizeof ks);
    memcpy(f.v_strides, vs, sizeof vs);
    memcpy(f.out_strides, os, sizeof os);
    memcpy(f.lse_strides, ls4, 3 * sizeof(int64_t));
    if (t->float_mask) {
        f.float_mask = fmask;
        memcpy(f.float_mask_strides, fms, sizeof fms);
    }
    if (t->bool_mask) {
        f.bool_mask = bmask;
        memcpy(f.bool_mask_strides, bms, sizeof bms);
    }
    tb_status status = tb_attention_f32_isa(&f, isa);
    TB_CHECK_MSG(status == TB_OK, "forward %s: %s", tb_isa_name(isa), tb_error_message());
    expect_close("lse", lse, ref_lse, l_shape, ls4, 1e-5, 1e-5);
    if (t->minus_inf_lse) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++) {
                lse[offset(ls4, b, h, 0, 0)] = -INFINITY;
                for (int64_t c = 0; c < Dv; c++)
                    out[offset(os, b, h, 0, c)] = 0.0f;
            }
    }
    expect_close("out", out, ref_out, o_shape, os, 1e-5, 1e-4);

    tb_attention_backward_desc d = {.batch = B, .q_heads = Hq, .kv_heads = Hkv, .q_len = Tq, .kv_len = Tk,
                                    .head_dim = D, .value_dim = Dv, .grad_out = grad_out, .q = q, .k = k, .v = v,
                                    .out = out, .lse = lse, .float_mask = f.float_mask, .bool_mask = f.bool_mask,
                                    .causal = t->causal, .scale = scale, .grad_q = gq, .grad_k = gk, .grad_v = gv};
    memcpy(d.grad_out_strides, os, sizeof os);
    memcpy(d.q_strides, qs, sizeof qs);
    memcpy(d.k_strides, ks, sizeof ks);
    memcpy(d.v_strides, vs, sizeof vs);
    memcpy(d.out_strides, os, sizeof os);
    memcpy(d.lse_strides, ls4, 3 * sizeof(int64_t));
    memcpy(d.float_mask_strides, fms, sizeof fms);
    memcpy(d.bool_mask_strides, bms, sizeof bms);
    memcpy(d.grad_q_strides, qs, sizeof qs);
    memcpy(d.grad_k_strides, ks, sizeof ks);
    memcpy(d.grad_v_strides, vs, sizeof vs);
    status = tb_attention_backward_f32(&d);
    TB_CHECK_MSG(status == TB_OK, "backward: %s", tb_error_message());
    expect_close("grad_q", gq, ref_gq, q_shape, qs, 2e-5, 2e-4);
    expect_close("grad_k", gk, ref_gk, k_shape, ks, 2e-5, 2e-4);
    expect_close("grad_v", gv, ref_gv, v_shape, vs, 2e-5, 2e-4);
    TB_CHECK(tb_test_guard_ok(q, nq) && tb_test_guard_ok(k, nk) && tb_test_guard_ok(v, nv));
    TB_CHECK(tb_test_guard_ok(out, no) && tb_test_guard_ok(lse, nl) && tb_test_guard_ok(grad_out, no));
    TB_CHECK(tb_test_guard_ok(gq, nq) && tb_test_guard_ok(gk, nk) && tb_test_guard_ok(gv, nv));

    tb_test_guarded_free(q);
    tb_test_guarded_free(k);
    tb_test_guarded_free(v);
    tb_test_guarded_free(out);
    tb_test_guarded_free(grad_out);
    tb_test_guarded_free(lse);
    tb_test_guarded_free(gq);
    tb_test_guarded_free(gk);
    tb_test_guarded_free(gv);
    tb_test_guarded_free(fmask);
    free(bmask);
    free(coin);
    free(scores);
    free(ref_out);
    free(ref_lse);
    free(ref_gq);
    free(ref_gk);
    free(ref_gv);
}

static void for_each_isa(const backward_case *t) {
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        if (tb_isa_supported((tb_isa)isa))
            run_case(t, (tb_isa)isa);
}

static backward_case shape(int64_t b, int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                           uint64_t seed) {
    backward_case t = {.batch = b, .q_heads = hq, .kv_heads = hkv, .q_len = tq, .kv_len = tk, .head_dim = d,
                       .value_dim = dv, .seed = seed};
    return t;
}

static void test_bad_arguments(void) {
    float x[4] = {0};
    tb_attention_backward_desc good = {.batch = 1, .q_heads = 2, .kv_heads = 1, .q_len = 1, .kv_len = 1,
                                       .head_dim = 1, .value_dim = 1, .grad_out = x, .q = x, .k = x, .v = x,
                                       .out = x, .lse = x, .scale = 1.0f, .grad_q = x + 1, .grad_k = x + 2,
                                       .grad_v = x + 3, .q_strides = {2, 1, 1, 1}, .grad_out_strides = {2, 1, 1, 1},
                                       .out_strides = {2, 1, 1, 1}, .grad_q_strides = {2, 1, 1, 1},
                                       .k_strides = {1, 1, 1, 1}, .v_strides = {1, 1, 1, 1},
                                       .grad_k_strides = {1, 1, 1, 1}, .grad_v_strides = {1, 1, 1, 1}};
    TB_CHECK(tb_attention_backward_f32(NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_attention_backward_desc d = good;
    d.q_heads = 3;
    d.kv_heads = 2;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "attention backward") != NULL);
    d = good;
    d.lse = NULL;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.grad_k = NULL;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.v_strides[3] = 2;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.kv_len = -1;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    /* no keys: grad_q is zeroed, grad_k/grad_v are empty */
    d = good;
    d.kv_len = 0;
    x[1] = 5.0f;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_OK);
    TB_CHECK(x[1] == 0.0f);
    /* no queries: grad_k and grad_v are zero */
    d = good;
    d.q_len = 0;
    x[2] = x[3] = 5.0f;
    TB_CHECK(tb_attention_backward_f32(&d) == TB_OK);
    TB_CHECK(x[2] == 0.0f && x[3] == 0.0f);
}

static void test_allocation_failure(void) {
    enum { N = 2 * 4 * 16 * 8 };
    static float buf[9][N];
    tb_attention_backward_desc d = {.batch = 2, .q_heads = 4, .kv_heads = 2, .q_len = 16, .kv_len = 32, .head_dim = 8,
                                    .value_dim = 8, .grad_out = buf[0], .q = buf[1], .k = buf[2], .v = buf[3],
                                    .out = buf[4], .lse = buf[5], .scale = 0.5f, .grad_q = buf[6], .grad_k = buf[7],
                                    .grad_v = buf[8]};
    int64_t q4[4] = {4 * 16 * 8, 16 * 8, 8, 1}, k4[4] = {2 * 32 * 8, 32 * 8, 8, 1}, l3[3] = {64, 16, 1};
    memcpy(d.grad_out_strides, q4, sizeof q4);
    memcpy(d.q_strides, q4, sizeof q4);
    memcpy(d.out_strides, q4, sizeof q4);
    memcpy(d.grad_q_strides, q4, sizeof q4);
    memcpy(d.k_strides, k4, sizeof k4);
    memcpy(d.v_strides, k4, sizeof k4);
    memcpy(d.grad_k_strides, k4, sizeof k4);
    memcpy(d.grad_v_strides, k4, sizeof k4);
    memcpy(d.lse_strides, l3, sizeof l3);
    (void)N;
    tb_alloc_trim();
    tb_alloc_fail_after(0);
    tb_status status = tb_attention_backward_f32(&d);
    tb_alloc_fail_after(-1);
    TB_CHECK_MSG(status == TB_ERR_OUT_OF_MEMORY, "got %s", tb_status_name(status));
    TB_CHECK(tb_attention_backward_f32(&d) == TB_OK);
}

/* attention (out, lse) -> attention_backward with a float mask, only grad_k used, against the kernels */
static void test_graph_ops(void) {
    enum { B = 1, H = 2, TQ = 5, TK = 6, D = 8 };
    int64_t q_shape[4] = {B, H, TQ, D}, k_shape[4] = {B, H, TK, D}, mask_shape[2] = {TQ, TK};
    tb_graph *g = NULL;
    TB_CHECK(tb_graph_new(&g) == TB_OK);
    int q, k, v, grad_out, mask, first, count;
    TB_CHECK(tb_graph_add_input(g, TB_F32, 4, q_shape, NULL, &q) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 4, k_shape, NULL, &k) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 4, k_shape, NULL, &v) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 4, q_shape, NULL, &grad_out) == TB_OK);
    TB_CHECK(tb_graph_add_input(g, TB_F32, 2, mask_shape, NULL, &mask) == TB_OK);
    tb_graph_params p;
    memset(&p, 0, sizeof p);
    p.attention.has_mask = 1;
    p.attention.scale = 0.3;
    int forward_inputs[4] = {q, k, v, mask};
    TB_CHECK(tb_graph_add_node(g, TB_OP_ATTENTION, &p, 4, forward_inputs, &first, &count) == TB_OK);
    TB_CHECK(count == 2);
    tb_value_info lse_info;
    TB_CHECK(tb_graph_value_info(g, first + 1, &lse_info) == TB_OK);
    TB_CHECK(lse_info.ndim == 3 && lse_info.shape[0] == B && lse_info.shape[1] == H && lse_info.shape[2] == TQ);
    int backward_inputs[7] = {grad_out, q, k, v, first, first + 1, mask}, grads;
    TB_CHECK(tb_graph_add_node(g, TB_OP_ATTENTION_BACKWARD, &p, 7, backward_inputs, &grads, &count) == TB_OK);
    TB_CHECK(count == 3);
    /* a wrong lse shape is refused when the node is added */
    int bad_inputs[7] = {grad_out, q, k, v, first, q, mask}, unused;
    TB_CHECK(tb_graph_add_node(g, TB_OP_ATTENTION_BACKWARD, &p, 7, bad_inputs, &unused, NULL) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "logsumexp") != NULL);
    /* so is a gradient of another shape than the output's */
    int bad_grad[7] = {k, q, k, v, first, first + 1, mask};
    TB_CHECK(tb_graph_add_node(g, TB_OP_ATTENTION_BACKWARD, &p, 7, bad_grad, &unused, NULL) == TB_ERR_SHAPE);
    TB_CHECK(strstr(tb_error_message(), "grad_out") != NULL);
    TB_CHECK(tb_graph_add_output(g, first) == TB_OK);
    TB_CHECK(tb_graph_add_output(g, first + 1) == TB_OK);
    TB_CHECK(tb_graph_add_output(g, grads + 1) == TB_OK);
    tb_plan *plan = NULL;
    TB_CHECK_MSG(tb_graph_compile(g, &plan, NULL) == TB_OK, "%s", tb_error_message());
    static float qd[B * H * TQ * D], kd[B * H * TK * D], vd[B * H * TK * D], god[B * H * TQ * D], md[TQ * TK];
    static float out[B * H * TQ * D], lse[B * H * TQ], gk[B * H * TK * D];
    static float want_out[B * H * TQ * D], want_lse[B * H * TQ], want_gq[B * H * TQ * D], want_gk[B * H * TK * D],
        want_gv[B * H * TK * D];
    tb_test_fill_uniform(qd, B * H * TQ * D, -1.0f, 1.0f, 51);
    tb_test_fill_uniform(kd, B * H * TK * D, -1.0f, 1.0f, 52);
    tb_test_fill_uniform(vd, B * H * TK * D, -1.0f, 1.0f, 53);
    tb_test_fill_uniform(god, B * H * TQ * D, -1.0f, 1.0f, 54);
    tb_test_fill_uniform(md, TQ * TK, -1.0f, 1.0f, 55);
    for (int j = 0; j < TK; j++)
        md[2 * TK + j] = -INFINITY; /* row 2 fully masked */
    if (plan) {
        void *inputs[5] = {qd, kd, vd, god, md}, *outputs[3] = {out, lse, gk};
        TB_CHECK_MSG(tb_plan_run(plan, inputs, outputs) == TB_OK, "%s", tb_error_message());
        tb_plan_release(plan);
    }
    tb_graph_free(g);

    int64_t qs[4] = {H * TQ * D, TQ * D, D, 1}, ks[4] = {H * TK * D, TK * D, D, 1}, ls[3] = {H * TQ, TQ, 1};
    int64_t ms[4] = {0, 0, TK, 1};
    tb_attention_desc f = {.batch = B, .q_heads = H, .kv_heads = H, .q_len = TQ, .kv_len = TK, .head_dim = D,
                           .value_dim = D, .q = qd, .k = kd, .v = vd, .out = want_out, .float_mask = md,
                           .scale = 0.3f, .lse = want_lse};
    memcpy(f.q_strides, qs, sizeof qs);
    memcpy(f.k_strides, ks, sizeof ks);
    memcpy(f.v_strides, ks, sizeof ks);
    memcpy(f.out_strides, qs, sizeof qs);
    memcpy(f.float_mask_strides, ms, sizeof ms);
    memcpy(f.lse_strides, ls, sizeof ls);
    TB_CHECK(tb_attention_f32(&f) == TB_OK);
    tb_attention_backward_desc d = {.batch = B, .q_heads = H, .kv_heads = H, .q_len = TQ, .kv_len = TK,
                                    .head_dim = D, .value_dim = D, .grad_out = god, .q = qd, .k = kd, .v = vd,
                                    .out = want_out, .lse = want_lse, .float_mask = md, .scale = 0.3f,
                                    .grad_q = want_gq, .grad_k = want_gk, .grad_v = want_gv};
    memcpy(d.grad_out_strides, qs, sizeof qs);
    memcpy(d.q_strides, qs, sizeof qs);
    memcpy(d.k_strides, ks, sizeof ks);
    memcpy(d.v_strides, ks, sizeof ks);
    memcpy(d.out_strides, qs, sizeof qs);
    memcpy(d.lse_strides, ls, sizeof ls);
    memcpy(d.float_mask_strides, ms, sizeof ms);
    memcpy(d.grad_q_strides, qs, sizeof qs);
    memcpy(d.grad_k_strides, ks, sizeof ks);
    memcpy(d.grad_v_strides, ks, sizeof ks);
    TB_CHECK(tb_attention_backward_f32(&d) == TB_OK);
    TB_CHECK(memcmp(out, want_out, sizeof out) == 0);
    TB_CHECK(memcmp(lse, want_lse, sizeof lse) == 0);
    TB_CHECK(memcmp(gk, want_gk, sizeof gk) == 0);
    TB_CHECK(lse[2] == 0.0f && lse[TQ + 2] == 0.0f); /* the fully masked rows: torch's 0 */
}

int main(void) {
    test_graph_ops();
    test_bad_arguments();
    uint64_t seed = 100;
    for (int threads = 1; threads <= 2; threads++) {
        TB_CHECK(tb_set_num_threads(threads) == TB_OK);
        backward_case t = shape(1, 1, 1, 1, 1, 1, 1, seed++);
        for_each_isa(&t);
        t = shape(2, 4, 2, 7, 7, 8, 8, seed++); /* GQA 2, square */
        for_each_isa(&t);
        t.causal = true;
        for_each_isa(&t);
        t = shape(1, 3, 1, 5, 9, 5, 3, seed++); /* GQA 3, Tq < Tk, odd sizes */
        t.causal = true;
        for_each_isa(&t);
        t = shape(2, 2, 2, 9, 5, 8, 6, seed++); /* Tq > Tk */
        t.causal = true;
        for_each_isa(&t);
        t.causal = false;
        t.float_mask = 1; /* broadcast [Tq, Tk] with a fully masked row */
        for_each_isa(&t);
        t = shape(3, 2, 1, 6, 11, 8, 8, seed++);
        t.float_mask = 2; /* padding [B, 1, 1, Tk] */
        t.causal = true;
        for_each_isa(&t);
        t.float_mask = 0;
        t.causal = false;
        t.bool_mask = 1; /* random with a fully masked row */
        for_each_isa(&t);
        t.minus_inf_lse = true;
        for_each_isa(&t);
        t = shape(1, 2, 2, 150, 130, 16, 12, seed++); /* several query blocks, key blocks */
        t.seq_major = true;
        t.causal = true;
        for_each_isa(&t);
        t.causal = false;
        t.bool_mask = 1;
        for_each_isa(&t);
    }
    test_allocation_failure();
    return tb_test_finish("test_attention_backward");
}
