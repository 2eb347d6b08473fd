/* Tests of tb_attention_f32 at every ISA this CPU supports against a naive double-precision softmax
 * reference written here: causal, float and bool masks with broadcast strides, GQA, Tq != Tk, odd
 * head sizes, several key blocks (online-softmax rescaling), strided q/k/v/out, fully masked rows
 * (0, as torch 2.13 gives), NaN inputs, empty sizes, bad arguments, 1 and 2 threads. */
#include <math.h>
#include <string.h>

#include "kernels/gemm.h"
#include "tb_test.h"
#include "torchburn/alloc.h"
#include "torchburn/thread_pool.h"

typedef struct attention_case {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, value_dim;
    bool causal;
    int float_mask;  /* 0 none, 1 full [B,Hq,Tq,Tk], 2 broadcast [Tq,Tk], 3 padding [B,1,1,Tk] */
    int bool_mask;   /* 0 none, 1 full random, 2 full random with some rows entirely false */
    bool seq_major;  /* q/k/v/out laid out [B, T, H, D] (the usual projection output) instead of [B, H, T, D] */
    float q_gain;    /* scales q to make large scores */
    float scale;     /* 0: 1/sqrt(D) */
    bool nan_query;  /* one q element is NaN */
    uint64_t seed;
} attention_case;

static int64_t count4(const int64_t shape[4]) { return shape[0] * shape[1] * shape[2] * shape[3]; }

/* Strides for [B, H, T, D] either dense or laid out as [B, T, H, D] with `pad` extra elements per row. */
static void make_strides(const int64_t shape[4], bool seq_major, int64_t pad, int64_t strides[4]) {
    int64_t row = shape[3] + pad;
    if (seq_major) {
        strides[3] = 1;
        strides[1] = row;
        strides[2] = shape[1] * row;
        strides[0] = shape[2] * shape[1] * row;
    } else {
        strides[3] = 1;
        strides[2] = row;
        strides[1] = shape[2] * row;
        strides[0] = shape[1] * shape[2] * row;
    }
}

static int failures_reported;

static void run_case(const attention_case *t, tb_isa isa) {
    int64_t B = t->batch, Hq = t->q_heads, Hkv = t->kv_heads, Tq = t->q_len, Tk = t->kv_len;
    int64_t D = t->head_dim, Dv = t->value_dim;
    int64_t q_shape[4] = {B, Hq, Tq, D}, k_shape[4] = {B, Hkv, Tk, D}, v_shape[4] = {B, Hkv, Tk, Dv},
            o_shape[4] = {B, Hq, Tq, Dv};
    int64_t qs[4], ks[4], vs[4], os[4];
    make_strides(q_shape, t->seq_major, 1, qs);
    make_strides(k_shape, t->seq_major, 2, ks);
    make_strides(v_shape, t->seq_major, 0, vs);
    make_strides(o_shape, t->seq_major, 3, os);
    int64_t q_n = B * qs[0] + 1, k_n = B * ks[0] + 1, v_n = B * vs[0] + 1, o_n = B * os[0] + 1;
    float *q = tb_test_guarded_alloc(q_n), *k = tb_test_guarded_alloc(k_n), *v = tb_test_guarded_alloc(v_n);
    float *out = tb_test_guarded_alloc(o_n);
    int64_t mask_shape[4] = {B, Hq, Tq, Tk};
    int64_t mask_n = count4(mask_shape) + 1;
    float *fmask = tb_test_guarded_alloc(mask_n);
    uint8_t *bmask = malloc((size_t)mask_n);
    float *out_before = malloc(sizeof(float) * (size_t)o_n);
    TB_CHECK(q && k && v && out && fmask && bmask && out_before);
    if (!q || !k || !v || !out || !fmask || !bmask || !out_before)
        return;
    tb_test_fill_uniform(q, q_n, -t->q_gain, t->q_gain, t->seed);
    tb_test_fill_uniform(k, k_n, -1.0f, 1.0f, t->seed + 1);
    tb_test_fill_uniform(v, v_n, -1.0f, 1.0f, t->seed + 2);
    tb_test_fill_uniform(out, o_n, -9.0f, 9.0f, t->seed + 3);
    tb_test_fill_uniform(fmask, mask_n, -3.0f, 1.0f, t->seed + 4);
    float *coin = malloc(sizeof(float) * (size_t)mask_n);
    tb_test_fill_uniform(coin, mask_n, 0.0f, 1.0f, t->seed + 5);
    for (int64_t i = 0; i < mask_n; i++)
        bmask[i] = coin[i] < 0.7f;
    free(coin);
    if (t->nan_query && B * Hq * Tq * D > 0)
        q[0] = NAN;

    int64_t fms[4] = {Hq * Tq * Tk, Tq * Tk, Tk, 1};
    if (t->float_mask == 2) { /* [Tq, Tk] broadcast over batch and heads */
        fms[0] = fms[1] = 0;
    } else if (t->float_mask == 3) { /* padding mask [B, 1, 1, Tk] with -inf at the end of each sequence */
        fms[0] = Tk;
        fms[1] = fms[2] = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = Tk - b; j < Tk; j++)
                if (j >= 0)
                    fmask[b * Tk + j] = -INFINITY;
    } else if (t->float_mask == 1 && Tq > 1) { /* row 1 of every (b, h) fully -inf */
        for (int64_t bh = 0; bh < B * Hq; bh++)
            for (int64_t j = 0; j < Tk; j++)
                fmask[bh * Tq * Tk + Tk + j] = -INFINITY;
    }
    int64_t bms[4] = {Hq * Tq * Tk, Tq * Tk, Tk, 1};
    if (t->bool_mask == 2 && Tq > 2)
        for (int64_t bh = 0; bh < B * Hq; bh++)
            memset(bmask + bh * Tq * Tk + 2 * Tk, 0, (size_t)Tk);
    memcpy(out_before, out, sizeof(float) * (size_t)o_n);

    tb_attention_desc d = {.batch = B, .q_heads = Hq, .kv_heads = Hkv, .q_len = Tq, .kv_len = Tk, .head_dim = D,
                           .value_dim = Dv, .q = q, .k = k, .v = v, .out = out, .causal = t->causal};
    memcpy(d.q_strides, qs, sizeof qs);
    memcpy(d.k_strides, ks, sizeof ks);
    memcpy(d.v_strides, vs, sizeof vs);
    memcpy(d.out_strides, os, sizeof os);
    if (t->float_mask) {
        d.float_mask = fmask;
        memcpy(d.float_mask_strides, fms, sizeof fms);
    }
    if (t->bool_mask) {
        d.bool_mask = bmask;
        memcpy(d.bool_mask_strides, bms, sizeof bms);
    }
    d.scale = t->scale != 0.0f ? t->scale : (D > 0 ? 1.0f / sqrtf((float)D) : 1.0f);
    tb_status status = tb_attention_f32_isa(&d, isa);
    TB_CHECK_MSG(status == TB_OK, "%s: %s", tb_isa_name(isa), tb_error_message());

    const double eps = 1.0 / (1 << 23);
    double *scores = malloc(sizeof(double) * (size_t)(Tk + 1));
    int bad = 0;
    for (int64_t b = 0; b < B && status == TB_OK; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t g = h / (Hq / Hkv);
            for (int64_t i = 0; i < Tq; i++) {
                double row_max = -INFINITY, magnitude = 0.0;
                bool row_nan = false;
                for (int64_t j = 0; j < Tk; j++) {
                    double dot = 0.0, dot_abs = 0.0;
                    for (int64_t e = 0; e < D; e++) {
                        double x = (double)q[b * qs[0] + h * qs[1] + i * qs[2] + e] *
                                   (double)k[b * ks[0] + g * ks[1] + j * ks[2] + e];
                        dot += x;
                        dot_abs += fabs(x);
                    }
                    double s = d.scale * dot;
                    magnitude = fmax(magnitude, fabs(d.scale) * dot_abs);
                    if (d.float_mask)
                        s += fmask[b * fms[0] + h * fms[1] + i * fms[2] + j * fms[3]];
                    if (d.bool_mask && !bmask[b * bms[0] + h * bms[1] + i * bms[2] + j * bms[3]])
                        s = -INFINITY;
                    if (t->causal && j > i)
                        s = -INFINITY;
                    scores[j] = s;
                    row_nan |= isnan(s);
                    if (s > row_max)
                        row_max = s;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < Tk; j++) {
                    scores[j] = row_max == -INFINITY ? 0.0 : exp(scores[j] - row_max);
                    sum += scores[j];
                }
                double tolerance = 2e-6 + 16.0 * eps * (1.0 + sqrt((double)D)) * magnitude;
                for (int64_t e = 0; e < Dv; e++) {
                    double expected = 0.0;
                    for (int64_t j = 0; j < Tk; j++)
                        expected += scores[j] * (double)v[b * vs[0] + g * vs[1] + j * vs[2] + e];
                    expected = sum > 0.0 ? expected / sum : 0.0; /* fully masked row: 0 */
                    double got = out[b * os[0] + h * os[1] + i * os[2] + e];
                    bool ok = row_nan ? isnan(got) : fabs(got - expected) <= tolerance;
                    if (!ok) {
                        bad++;
                        if (failures_reported < 10) {
                            failures_reported++;
                            fprintf(stderr,
                                    "  %s B=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld D=%lld Dv=%lld causal=%d fm=%d "
                                    "bm=%d: "
                                    "out[%lld,%lld,%lld,%lld] = %.9g, expected %.9g (tol %.3g)\n",
                                    tb_isa_name(isa), (long long)B, (long long)Hq, (long long)Hkv, (long long)Tq,
                                    (long long)Tk, (long long)D, (long long)Dv, t->causal, t->float_mask, t->bool_mask,
                                    (long long)b, (long long)h, (long long)i, (long long)e, got, expected, tolerance);
                        }
                    }
                }
                /* row padding of out is never written */
                for (int64_t e = Dv; e < (t->seq_major ? os[1] : os[2]); e++) {
                    int64_t at = b * os[0] + h * os[1] + i * os[2] + e;
                    if (at < o_n && memcmp(&out[at], &out_before[at], sizeof(float)) != 0 &&
                        !(t->seq_major && e >= Dv + 3))
                        bad++;
                }
            }
        }
    TB_CHECK_MSG(bad == 0, "%s: %d wrong outputs", tb_isa_name(isa), bad);
    TB_CHECK(tb_test_guard_ok(out, o_n));
    free(scores);
    free(bmask);
    free(out_before);
    tb_test_guarded_free(q);
    tb_test_guarded_free(k);
    tb_test_guarded_free(v);
    tb_test_guarded_free(out);
    tb_test_guarded_free(fmask);
}

static void for_each_isa(const attention_case *t) {
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        if (tb_isa_supported((tb_isa)isa))
            run_case(t, (tb_isa)isa);
}

static attention_case shape(int64_t B, int64_t Hq, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv,
                            uint64_t seed) {
    attention_case t = {.batch = B, .q_heads = Hq, .kv_heads = Hkv, .q_len = Tq, .kv_len = Tk, .head_dim = D,
                        .value_dim = Dv, .q_gain = 1.0f, .seed = seed};
    return t;
}

static void test_bad_arguments(void) {
    float q[16] = {0}, k[16] = {0}, v[16] = {0}, out[16];
    tb_attention_desc good = {.batch = 1, .q_heads = 2, .kv_heads = 1, .q_len = 2, .kv_len = 2, .head_dim = 2,
                              .value_dim = 2, .q = q, .k = k, .v = v, .out = out, .scale = 1.0f,
                              .q_strides = {8, 4, 2, 1}, .k_strides = {4, 4, 2, 1}, .v_strides = {4, 4, 2, 1},
                              .out_strides = {8, 4, 2, 1}};
    TB_CHECK(tb_attention_f32(&good) == TB_OK);
    TB_CHECK(out[0] == 0.0f); /* v is zero */
    TB_CHECK(tb_attention_f32(NULL) == TB_ERR_INVALID_ARGUMENT);
    tb_attention_desc d = good;
    d.kv_heads = 3;
    TB_CHECK(tb_attention_f32(&d) == TB_ERR_SHAPE);
    d = good;
    d.q_len = -1;
    TB_CHECK(tb_attention_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.k_strides[3] = 2;
    TB_CHECK(tb_attention_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.v = NULL;
    TB_CHECK(tb_attention_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    d = good;
    d.out = NULL;
    TB_CHECK(tb_attention_f32(&d) == TB_ERR_INVALID_ARGUMENT);
    for (int isa = 0; isa < TB_ISA_COUNT; isa++)
        if (!tb_isa_supported((tb_isa)isa))
            TB_CHECK(tb_attention_f32_isa(&good, (tb_isa)isa) == TB_ERR_UNSUPPORTED);
    tb_attention_desc empty = {.batch = 1, .q_heads = 1, .kv_heads = 1, .q_len = 0, .kv_len = 5, .head_dim = 4,
                               .value_dim = 4};
    TB_CHECK(tb_attention_f32(&empty) == TB_OK);
}

/* The first attention call of the process has no scratch yet: allocation failure is a status. */
static void test_allocation_failure(void) {
    static float q[2 * 4 * 8], k[2 * 4 * 8], v[2 * 4 * 8], out[2 * 4 * 8];
    tb_attention_desc d = {.batch = 1, .q_heads = 2, .kv_heads = 2, .q_len = 4, .kv_len = 4, .head_dim = 8,
                           .value_dim = 8, .q = q, .k = k, .v = v, .out = out, .scale = 0.5f,
                           .q_strides = {64, 32, 8, 1}, .k_strides = {64, 32, 8, 1}, .v_strides = {64, 32, 8, 1},
                           .out_strides = {64, 32, 8, 1}};
    tb_alloc_fail_after(0);
    tb_status status = tb_attention_f32(&d);
    tb_alloc_fail_after(-1);
    TB_CHECK_MSG(status == TB_ERR_OUT_OF_MEMORY, "got %s", tb_status_name(status));
    TB_CHECK(strstr(tb_error_message(), "attention") != NULL);
    TB_CHECK(tb_attention_f32(&d) == TB_OK);
}

int main(void) {
    test_allocation_failure();
    test_bad_arguments();
    uint64_t seed = 1;
    for (int threads = 1; threads <= 2; threads++) {
        TB_CHECK(tb_set_num_threads(threads) == TB_OK);
        attention_case t = shape(1, 1, 1, 1, 1, 1, 1, seed++);
        for_each_isa(&t);
        t = shape(2, 4, 2, 7, 13, 16, 16, seed++); /* GQA 2 */
        for_each_isa(&t);
        t.causal = true;
        for_each_isa(&t);
        t = shape(1, 3, 1, 33, 17, 31, 33, seed++); /* GQA 3, Tq > Tk, odd dims */
        t.causal = true;
        t.seq_major = true;
        for_each_isa(&t);
        t = shape(2, 2, 2, 17, 40, 3, 5, seed++); /* Tq < Tk causal (top-left) */
        t.causal = true;
        for_each_isa(&t);
        t = shape(2, 2, 2, 129, 129, 64, 64, seed++);
        t.causal = true;
        for_each_isa(&t);
        t = shape(1, 2, 1, 45, 300, 128, 96, seed++); /* three key blocks: online rescaling */
        t.q_gain = 6.0f;
        for_each_isa(&t);
        t.causal = true;
        t.seq_major = true;
        for_each_isa(&t);
        for (int fm = 1; fm <= 3; fm++) {
            t = shape(3, 2, 1, 19, 150, 24, 20, seed++);
            t.float_mask = fm;
            for_each_isa(&t);
            t.causal = true;
            t.bool_mask = fm == 2 ? 2 : 0;
            for_each_isa(&t);
        }
        for (int bm = 1; bm <= 2; bm++) {
            t = shape(2, 4, 4, 23, 37, 16, 8, seed++);
            t.bool_mask = bm;
            t.scale = 0.3f;
            for_each_isa(&t);
        }
        t = shape(1, 2, 2, 9, 9, 8, 8, seed++);
        t.nan_query = true;
        for_each_isa(&t);
        t = shape(2, 2, 1, 5, 0, 8, 8, seed++); /* no keys: zeros */
        for_each_isa(&t);
        t = shape(2, 2, 1, 5, 7, 0, 8, seed++); /* D = 0: uniform weights */
        for_each_isa(&t);
        /* decoding shapes (few query rows per KV head: K/V read in place), GQA groups up to 12 */
        t = shape(2, 8, 2, 1, 300, 64, 64, seed++);
        t.float_mask = 3;
        for_each_isa(&t);
        t = shape(1, 12, 1, 1, 77, 32, 48, seed++);
        t.bool_mask = 1;
        t.seq_major = true;
        for_each_isa(&t);
        t = shape(2, 4, 2, 3, 140, 16, 24, seed++);
        t.causal = true;
        for_each_isa(&t);
        t = shape(1, 1, 1, 1, 1000, 128, 128, seed++);
        t.q_gain = 4.0f;
        for_each_isa(&t);
        t = shape(4, 8, 8, 128, 128, 64, 64, seed++); /* the benchmark shape */
        t.causal = true;
        for_each_isa(&t);
    }
    TB_CHECK(tb_set_num_threads(tb_physical_cores()) == TB_OK);
    return tb_test_finish("test_attention");
}
