/* Tests of the llm layer in C: every SIMD kernel table against the scalar reference; the int8-activation
 * matmul (bit-identical preparation, VNNI rows vs the reference, AVX2 rows equal to the reference bit for bit,
 * no kernel reading past the weights or writing past its columns, the reference vs the math it stands for);
 * the least-squares int4 quantizer against the plain one; the sampler; and a whole tiny model written
 * here as config.json + model.safetensors: incremental decoding equals one prompt pass, prefix reuse,
 * sliding windows, the f16 KV cache, the quantized cache, generation finish reasons and bad inputs.
 * Transformers parity is tested in tests/python/test_llm.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/gemm.h"
#include "llm/llm_internal.h"
#include "tb_test.h"
#include "torchburn/cpu.h"
#include "torchburn/quant.h"
#include "torchburn/safetensors.h"
#include "torchburn/thread_pool.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uniform(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}
static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = uniform() * scale;
}

static bool close_rel(float a, float b, float tol) { return fabsf(a - b) <= tol * (1.0f + fabsf(b)); }

/* ---- the small kernels ---- */

static void test_kernel_tables(void) {
    const tb_llm_kernels *ref = &tb_llm_kernels_ref;
    const tb_isa isas[] = {TB_ISA_AVX2, TB_ISA_AVX512};
    for (size_t which = 0; which < sizeof isas / sizeof isas[0]; which++) {
        if (!tb_isa_supported(isas[which]))
            continue;
        const tb_llm_kernels *k = tb_llm_kernels_for(isas[which]);
        enum { D = 80, G = 7, L = 48, K = 131, N = 19 }; /* L: 3 key blocks */
        float q[G * D], keys[L * D], values[L * D], s_ref[G * L], s_simd[G * L], o_ref[G * D], o_simd[G * D];
        uint16_t keys16[L * D], values16[L * D];
        fill(q, G * D, 1.0f);
        fill(keys, L * D, 1.0f);
        fill(values, L * D, 1.0f);
        ref->to_f16(keys, keys16, L * D);
        ref->to_f16(values, values16, L * D);
        uint16_t check16[L * D];
        k->to_f16(keys, check16, L * D);
        TB_CHECK_MSG(memcmp(check16, keys16, sizeof check16) == 0, "%s to_f16", k->name);
        for (int f16 = 0; f16 < 2; f16++)
            for (int groups = 1; groups <= G; groups += 2)
                for (int d = 8; d <= D; d += 24)
                    for (int len = 1; len <= L; len += 12) {
                        const void *kk = f16 ? (const void *)keys16 : keys, *vv = f16 ? (const void *)values16 : values;
                        const int blocks = (len + TB_LLM_KEY_BLOCK - 1) / TB_LLM_KEY_BLOCK;
                        ref->attn_scores(q, groups, d, kk, f16, blocks, 0.125f, s_ref, L);
                        k->attn_scores(q, groups, d, kk, f16, blocks, 0.125f, s_simd, L);
                        ref->attn_values(s_ref, groups, L, vv, f16, len, d, o_ref);
                        k->attn_values(s_ref, groups, L, vv, f16, len, d, o_simd);
                        bool ok = true;
                        for (int g = 0; g < groups; g++)
                            for (int j = 0; j < blocks * TB_LLM_KEY_BLOCK; j++)
                                ok &= close_rel(s_simd[g * L + j], s_ref[g * L + j], 1e-5f);
                        for (int i = 0; i < groups * d; i++)
                            ok &= close_rel(o_simd[i], o_ref[i], 1e-5f);
                        TB_CHECK_MSG(ok, "%s attention f16=%d groups=%d d=%d len=%d", k->name, f16, groups, d, len);
                    }
        float w[N * K], x[K], y_ref[N], y_simd[N];
        fill(w, N * K, 1.0f);
        fill(x, K, 1.0f);
        for (int n = 1; n <= N; n += 3)
            for (int kk = 1; kk <= K; kk += 13) {
                ref->gemv_f32(w, kk, x, y_ref, n);
                k->gemv_f32(w, kk, x, y_simd, n);
                bool ok = true;
                for (int j = 0; j < n; j++)
                    ok &= close_rel(y_simd[j], y_ref[j], 1e-5f);
                TB_CHECK_MSG(ok, "%s gemv n=%d k=%d", k->name, n, kk);
            }
        for (int n = 1; n <= K; n += 10) {
            float a[K], b[K], c[K], e[K], weight[K];
            fill(a, n, 30.0f);
            fill(weight, n, 2.0f);
            memcpy(b, a, sizeof(float) * (size_t)n);
            ref->softmax(a, n);
            k->softmax(b, n);
            bool ok = true;
            for (int i = 0; i < n; i++)
                ok &= close_rel(b[i], a[i], 1e-5f);
            TB_CHECK_MSG(ok, "%s softmax n=%d", k->name, n);
            fill(a, n, 12.0f);
            fill(b, n, 3.0f);
            ref->silu_mul(a, b, c, n);
            k->silu_mul(a, b, e, n);
            ok = true;
            for (int i = 0; i < n; i++)
                ok &= close_rel(e[i], c[i], 1e-5f);
            TB_CHECK_MSG(ok, "%s silu_mul n=%d", k->name, n);
            ref->rms_norm(a, weight, c, n, 1e-6f);
            k->rms_norm(a, weight, e, n, 1e-6f);
            ok = true;
            for (int i = 0; i < n; i++)
                ok &= close_rel(e[i], c[i], 1e-5f);
            TB_CHECK_MSG(ok, "%s rms_norm n=%d", k->name, n);
            a[n / 2] = 1e30f;
            a[n - 1] = 1e30f; /* ties: the first one wins */
            if (n > 3)
                a[1] = NAN;
            TB_CHECK_MSG(k->argmax(a, n) == ref->argmax(a, n), "%s argmax n=%d", k->name, n);
        }
    }
}

/* ---- int8-activation matmul ---- */

typedef struct qmatrix {
    llm_matrix m;
    void *data;
    float *scales, *bias;
} qmatrix;

static void make_qmatrix(tb_llm_quant format, int64_t n, int64_t k, int64_t group, bool bias, qmatrix *out) {
    memset(out, 0, sizeof *out);
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    fill(w, n * k, 0.5f);
    out->data = malloc((size_t)(format == TB_LLM_QUANT_INT8 ? n * k : n * k / 2) + 64);
    out->scales = malloc(sizeof(float) * (size_t)(format == TB_LLM_QUANT_INT8 ? n : n * k / group));
    out->m = (llm_matrix){.n = n, .k = k, .format = format, .has_bias = bias};
    tb_status status = format == TB_LLM_QUANT_INT8 ? tb_quantize_int8(w, n, k, out->data, out->scales)
                                                   : tb_llm_quantize_int4(w, n, k, group, out->data, out->scales);
    TB_CHECK(status == TB_OK);
    TB_CHECK(tb_llm_matrix_bind(&out->m, out->data, out->scales, group) == TB_OK);
    if (bias) {
        out->bias = malloc(sizeof(float) * (size_t)n);
        fill(out->bias, n, 1.0f);
        out->m.bias = out->bias;
    }
    free(w);
}

static void free_qmatrix(qmatrix *q) {
    free(q->data);
    free(q->scales);
    free(q->bias);
}

/* What the prepared layout stands for: y = bias + sum_k dequant(w)[k] * xq[k] * d[block(k)], in double. */
static double qmath(const qmatrix *q, const float *x, int64_t n) {
    const llm_matrix *m = &q->m;
    double sum = 0.0;
    for (int64_t b = 0; b * 32 < m->k; b++) {
        float amax = 0.0f;
        for (int64_t i = 32 * b; i < 32 * b + 32 && i < m->k; i++)
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
        for (int64_t i = 32 * b; i < 32 * b + 32 && i < m->k; i++) {
            const float xq = rintf(x[i] * inverse);
            float wv;
            if (m->format == TB_LLM_QUANT_INT8) {
                wv = (float)((const int8_t *)m->q.data)[n * m->k + i] * m->q.scales[n];
            } else {
                const uint8_t byte = ((const uint8_t *)m->q.data)[n * m->k / 2 + i / 2];
                wv = (float)(((i & 1) ? byte >> 4 : byte & 15) - 8) * m->q.scales[n * m->q.scales_per_row + i / m->q.group_size];
            }
            sum += (double)wv * (double)xq * (double)d;
        }
    }
    return sum + (m->bias ? m->bias[n] : 0.0);
}

/* `fast` against the scalar reference (and the reference against the math); `exact`: bit for bit. */
static void test_qmatmul_with(const tb_llm_qkernels *fast, bool exact) {
    const int64_t ks[] = {32, 96, 128, 200, 224, 896};
    for (int format = 0; format < 2; format++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t k = ks[ki], n = 9;
            const int64_t groups[] = {32, 64, 128};
            for (size_t gi = 0; gi < (format ? 3u : 1u); gi++) {
                const int64_t group = groups[gi];
                if (format && k % group != 0)
                    continue;
                qmatrix q;
                make_qmatrix(format ? TB_LLM_QUANT_INT4 : TB_LLM_QUANT_INT8, n, k, group, gi == 0, &q);
                enum { M = 6 };
                float x[M * 896], y_ref[M * 9], y_fast[M * 9];
                fill(x, M * k, 3.0f);
                x[5] = 0.0f;
                for (int i = 32; i < 64 && i < k; i++) /* an all-zero block */
                    x[i] = 0.0f;
                x[k - 1] = 400.0f; /* an outlier confined to its block */
                const int64_t row_bytes = tb_llm_qact_row_bytes(q.m.format, k);
                unsigned char *a_ref = malloc((size_t)(M * row_bytes)), *a_fast = malloc((size_t)(M * row_bytes));
                for (int i = 0; i < M; i++) {
                    tb_llm_qkernels_ref.prepare(q.m.format, x + i * k, k, a_ref + i * row_bytes);
                    if (fast)
                        fast->prepare(q.m.format, x + i * k, k, a_fast + i * row_bytes);
                }
                if (fast)
                    TB_CHECK_MSG(memcmp(a_ref, a_fast, (size_t)(M * row_bytes)) == 0, "prepare %s k=%lld",
                                 format ? "int4" : "int8", (long long)k);
                for (int64_t mm = 1; mm <= M; mm++) {
                    tb_llm_qrun run = {.w = &q.m.q, .m = mm, .act = a_ref, .act_row_bytes = row_bytes, .y = y_ref,
                                       .y_row_stride = n, .bias = q.m.bias};
                    tb_llm_qkernels_ref.rows(&run, 0, n);
                    bool ok = true;
                    for (int64_t i = 0; i < mm; i++)
                        for (int64_t j = 0; j < n; j++)
                            ok &= fabs(y_ref[i * n + j] - qmath(&q, x + i * k, j)) <= 1e-4 * (1.0 + fabs(y_ref[i * n + j]));
                    TB_CHECK_MSG(ok, "reference vs math %s k=%lld g=%lld m=%lld", format ? "int4" : "int8",
                                 (long long)k, (long long)group, (long long)mm);
                    if (!fast)
                        continue;
                    run.y = y_fast;
                    for (int64_t begin = 0; begin < n; begin += 5) /* split ranges like the driver does */
                        fast->rows(&run, begin, begin + 5 < n ? begin + 5 : n);
                    ok = true;
                    for (int64_t i = 0; i < mm * n; i++)
                        ok &= exact ? memcmp(&y_fast[i], &y_ref[i], sizeof(float)) == 0
                                    : close_rel(y_fast[i], y_ref[i], 2e-5f);
                    TB_CHECK_MSG(ok, "%s vs reference %s k=%lld g=%lld m=%lld", fast->name, format ? "int4" : "int8",
                                 (long long)k, (long long)group, (long long)mm);
                }
                /* the prompt GEMM (transposed activations, 4 x 48 tiles) agrees with the reference rows */
                if (fast && fast->gemm_rows) {
                    enum { MG = 37 };
                    float *xg = malloc(sizeof(float) * MG * 896), *yg = malloc(sizeof(float) * MG * 9),
                          *yr = malloc(sizeof(float) * MG * 9);
                    fill(xg, MG * k, 2.0f);
                    unsigned char *xt = malloc((size_t)fast->gemm_xt_bytes(MG, k));
                    unsigned char *rows = malloc((size_t)(MG * row_bytes));
                    fast->gemm_prepare(xg, k, MG, k, 0, 1, xt);
                    fast->gemm_prepare(xg, k, MG, k, 1, 3, xt); /* rows past M are padding */
                    TB_CHECK(fast->gemm_rows(&q.m.q, xt, MG, yg, n, q.m.bias, 0, 5));
                    TB_CHECK(fast->gemm_rows(&q.m.q, xt, MG, yg, n, q.m.bias, 5, n));
                    for (int i = 0; i < MG; i++)
                        tb_llm_qkernels_ref.prepare(q.m.format, xg + i * k, k, rows + i * row_bytes);
                    tb_llm_qrun run = {.w = &q.m.q, .m = MG, .act = rows, .act_row_bytes = row_bytes, .y = yr,
                                       .y_row_stride = n, .bias = q.m.bias};
                    tb_llm_qkernels_ref.rows(&run, 0, n);
                    bool ok = true;
                    for (int i = 0; i < MG * n; i++)
                        ok &= close_rel(yg[i], yr[i], 2e-5f);
                    TB_CHECK_MSG(ok, "%s gemm vs reference %s k=%lld g=%lld", fast->name, format ? "int4" : "int8",
                                 (long long)k, (long long)group);
                    free(xg);
                    free(yg);
                    free(yr);
                    free(xt);
                    free(rows);
                }
                /* a non-finite activation poisons its rows (NaN), never a crash */
                x[1] = INFINITY;
                tb_llm_qkernels_ref.prepare(q.m.format, x, k, a_ref);
                tb_llm_qrun run = {.w = &q.m.q, .m = 1, .act = a_ref, .act_row_bytes = row_bytes, .y = y_ref,
                                   .y_row_stride = n};
                tb_llm_qkernels_ref.rows(&run, 0, n);
                TB_CHECK(isnan(y_ref[0]));
                if (fast) {
                    run.y = y_fast;
                    fast->rows(&run, 0, n);
                    TB_CHECK_MSG(isnan(y_fast[0]), "%s: a non-finite activation gives NaN", fast->name);
                }
                free(a_ref);
                free(a_fast);
                free_qmatrix(&q);
            }
        }
}

/* Weights and prepared activation rows that each end at a page followed by an inaccessible one, outputs in
 * guarded buffers: the kernels never read past the matrix (K tails included) or past the last activation
 * row (every tile height 1..5), nor write outside their columns. */
static void test_qmatmul_bounds(const tb_llm_qkernels *fast) {
    const long page = sysconf(_SC_PAGESIZE);
    const int64_t ks[] = {32, 96, 160, 200, 896};
    for (int format = 0; format < 2; format++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t k = ks[ki], n = 7, group = 32, m = 5;
            if (format && k % group != 0)
                continue;
            qmatrix q;
            make_qmatrix(format ? TB_LLM_QUANT_INT4 : TB_LLM_QUANT_INT8, n, k, group, true, &q);
            const size_t bytes = (size_t)(n * q.m.q.row_bytes), span = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
            unsigned char *map = mmap(NULL, span + (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            TB_CHECK(map != MAP_FAILED);
            TB_CHECK(mprotect(map + span, (size_t)page, PROT_NONE) == 0);
            unsigned char *data = map + span - bytes; /* the last weight byte is the page's last */
            memcpy(data, q.data, bytes);
            tb_quant_weight w = q.m.q;
            w.data = data;
            const int64_t row_bytes = tb_llm_qact_row_bytes(q.m.format, k);
            float *x = tb_test_guarded_alloc(m * k);
            fill(x, m * k, 1.0f);
            const size_t act_bytes = (size_t)(m * row_bytes);
            const size_t act_span = (act_bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
            unsigned char *act_map = mmap(NULL, act_span + (size_t)page, PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            TB_CHECK(act_map != MAP_FAILED);
            TB_CHECK(mprotect(act_map + act_span, (size_t)page, PROT_NONE) == 0);
            unsigned char *act = act_map + act_span - act_bytes; /* the last row ends the page */
            float *y = tb_test_guarded_alloc(m * n), *y_ref = malloc(sizeof(float) * (size_t)(m * n));
            for (int64_t i = 0; i < m; i++)
                fast->prepare(q.m.format, x + i * k, k, act + i * row_bytes);
            for (int64_t mm = 1; mm <= m; mm++) {
                /* the last mm rows, so that a read past the tile's last row meets the inaccessible page */
                tb_llm_qrun run = {.w = &w, .m = mm, .act = act + (m - mm) * row_bytes, .act_row_bytes = row_bytes,
                                   .y = y_ref, .y_row_stride = n, .bias = q.m.bias};
                tb_llm_qkernels_ref.rows(&run, 0, n);
                run.y = y;
                fast->rows(&run, 0, n);
                if (fast->batch_rows)
                    fast->batch_rows(&run, n - 1, n); /* a single last row */
                bool ok = true;
                for (int64_t i = 0; i < mm * n; i++)
                    ok &= close_rel(y[i], y_ref[i], 2e-5f);
                TB_CHECK_MSG(ok, "%s bounds %s k=%lld m=%lld", fast->name, format ? "int4" : "int8", (long long)k,
                             (long long)mm);
            }
            TB_CHECK(tb_test_guard_ok(x, m * k) && tb_test_guard_ok(y, m * n));
            tb_test_guarded_free(x);
            munmap(act_map, act_span + (size_t)page);
            tb_test_guarded_free(y);
            free(y_ref);
            munmap(map, span + (size_t)page);
            free_qmatrix(&q);
        }
}

#ifdef TB_HAVE_X86
/* The prompt GEMM cases: 16-row tails, chunks of rows (k large enough that an AMX chunk is smaller than M),
 * partial panels, int8 and int4 with three group sizes; group 0 = int8. */
static const struct {
    int64_t m, n, k, group;
    tb_llm_quant format;
} gemm_cases[] = {
    {16, 7, 96, 32, TB_LLM_QUANT_INT4},    {37, 45, 224, 32, TB_LLM_QUANT_INT4},
    {70, 33, 896, 64, TB_LLM_QUANT_INT4},  {48, 64, 200, 0, TB_LLM_QUANT_INT8},
    {1100, 40, 1024, 128, TB_LLM_QUANT_INT4}, {80, 19, 4864, 32, TB_LLM_QUANT_INT4},
};
enum { GEMM_CASES = sizeof gemm_cases / sizeof gemm_cases[0] };

/* What every prompt GEMM computes, in scalar C: per (row, column) acc = fma(dot_b, ws_b * xs_b, acc) over
 * the 32-blocks b in order (dot_b the exact int32 dot of the quantized block), then acc + bias. */
static float gemm_model(const qmatrix *q, const float *x, int64_t col) {
    const tb_quant_weight *w = &q->m.q;
    const bool int4 = w->type == TB_QUANT_INT4;
    const uint8_t *row = (const uint8_t *)w->data + col * w->row_bytes;
    const float *scales = w->scales + col * w->scales_per_row;
    float acc = 0.0f;
    for (int64_t b = 0; b * 32 < w->k; b++) {
        int8_t xq[32];
        float xs;
        tb_llm_quantize_blocks32(x + 32 * b, w->k - 32 * b < 32 ? w->k - 32 * b : 32, xq, &xs);
        int32_t dot = 0;
        for (int64_t e = 0; e < 32 && 32 * b + e < w->k; e++) {
            const int64_t i = 32 * b + e;
            const int value = int4 ? ((i & 1) ? row[i / 2] >> 4 : row[i / 2] & 15) - 8 : (int8_t)row[i];
            dot += value * xq[e];
        }
        const float ws = int4 ? scales[32 * b / w->group_size] : scales[0];
        acc = fmaf((float)dot, ws * xs, acc);
    }
    return acc + (q->m.bias ? q->m.bias[col] : 0.0f);
}

/* `fast`'s prompt GEMM gives `base`'s bits (base NULL: gemm_model's), over gemm_cases with column ranges
 * that start off a panel boundary, and a NaN activation poisons only its row. */
static void check_gemm_bits(const tb_llm_qkernels *fast, const tb_llm_qkernels *base) {
    for (size_t c = 0; c < GEMM_CASES; c++) {
        const int64_t m = gemm_cases[c].m, n = gemm_cases[c].n, k = gemm_cases[c].k;
        qmatrix q;
        make_qmatrix(gemm_cases[c].format, n, k, gemm_cases[c].group ? gemm_cases[c].group : 32, c % 2 == 0, &q);
        float *x = malloc(sizeof(float) * (size_t)(m * k)), *y_fast = malloc(sizeof(float) * (size_t)(m * n));
        float *y_base = malloc(sizeof(float) * (size_t)(m * n));
        fill(x, m * k, 2.0f);
        x[3 * k + 5] = NAN;
        unsigned char *xt_fast = malloc((size_t)fast->gemm_xt_bytes(m, k));
        unsigned char *xt_base = base ? malloc((size_t)base->gemm_xt_bytes(m, k)) : NULL;
        const int64_t groups = (m + 15) / 16;
        fast->gemm_prepare(x, k, m, k, 0, groups / 2, xt_fast);
        fast->gemm_prepare(x, k, m, k, groups / 2, groups, xt_fast);
        if (base)
            base->gemm_prepare(x, k, m, k, 0, groups, xt_base);
        TB_CHECK(fast->gemm_rows(&q.m.q, xt_fast, m, y_fast, n, q.m.bias, 0, 4));
        TB_CHECK(fast->gemm_rows(&q.m.q, xt_fast, m, y_fast, n, q.m.bias, 4, n));
        if (base)
            TB_CHECK(base->gemm_rows(&q.m.q, xt_base, m, y_base, n, q.m.bias, 0, n));
        else
            for (int64_t i = 0; i < m * n; i++)
                y_base[i] = gemm_model(&q, x + i / n * k, i % n);
        int64_t differ = 0, nan_rows_ok = 0;
        for (int64_t i = 0; i < m * n; i++)
            if (i / n == 3)
                nan_rows_ok += isnan(y_fast[i]);
            else
                differ += memcmp(&y_fast[i], &y_base[i], sizeof(float)) != 0;
        TB_CHECK_MSG(differ == 0, "%s gemm differs from %s at %lld of %lld outputs (m=%lld n=%lld k=%lld)",
                     fast->name, base ? base->name : "the scalar model", (long long)differ, (long long)(m * n), (long long)m, (long long)n, (long long)k);
        TB_CHECK_MSG(nan_rows_ok == n, "%s gemm: a NaN activation makes its row NaN (%lld of %lld)",
                     fast->name, (long long)nan_rows_ok, (long long)n);
        free(x);
        free(y_fast);
        free(y_base);
        free(xt_fast);
        free(xt_base);
        free_qmatrix(&q);
    }
}

/* The AVX2 prompt GEMM's prepared activations hold exactly the shared quantization (int8 values, block
 * scales, 8 x block sums) in its transposed layout, padding rows zero; and where the CPU has AVX-512
 * VNNI, the AVX2 GEMM gives the VNNI GEMM's bits. */
static void test_avx2_gemm(void) {
    if (!tb_isa_supported(TB_ISA_AVX2)) {
        fprintf(stderr, "test_llm: AVX2 GEMM not tested: this CPU has no AVX2\n");
        return;
    }
    const tb_llm_qkernels *avx2 = &tb_llm_qkernels_avx2;
    const int64_t ks[] = {32, 40, 200, 896};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int64_t k = ks[ki], m = 21, mp = 32, kb = (k + 31) / 32;
        float *x = malloc(sizeof(float) * (size_t)(m * k));
        fill(x, m * k, 3.0f);
        for (int64_t i = 0; i < 32 && i < k; i++)
            x[2 * k + i] = 0.0f; /* an all-zero block */
        x[4 * k + k - 1] = INFINITY;
        x[5 * k] = NAN;
        x[6 * k + 1] = 1e30f;
        for (int64_t i = 0; i < k; i++) /* ties of the rounding: amax 127 makes x * 127 / amax = x */
            x[7 * k + i] = i == 0 ? 127.0f : 0.5f * (float)(i % 9) - 2.0f;
        unsigned char *xt = malloc((size_t)avx2->gemm_xt_bytes(m, k));
        TB_CHECK(avx2->gemm_xt_bytes(m, k) == kb * 32 * mp + kb * mp * 8);
        avx2->gemm_prepare(x, k, m, k, 1, 2, xt);
        avx2->gemm_prepare(x, k, m, k, 0, 1, xt);
        const int32_t *sums = (const int32_t *)(xt + kb * 32 * mp);
        const float *scales = (const float *)(sums + kb * mp);
        int64_t bad = 0;
        for (int64_t row = 0; row < mp; row++)
            for (int64_t b = 0; b < kb; b++) {
                int8_t xq[32] = {0};
                float scale = 0.0f;
                if (row < m)
                    tb_llm_quantize_blocks32(x + row * k + 32 * b, k - 32 * b < 32 ? k - 32 * b : 32, xq, &scale);
                int32_t sum = 0;
                for (int e = 0; e < 32; e++) {
                    sum += xq[e];
                    bad += (int8_t)xt[((b * 8 + e / 4) * mp + row) * 4 + e % 4] != xq[e];
                }
                bad += sums[b * mp + row] != 8 * sum;
                bad += memcmp(&scales[b * mp + row], &scale, sizeof scale) != 0 && !(isnan(scale) && isnan(scales[b * mp + row]));
            }
        TB_CHECK_MSG(bad == 0, "avx2 gemm prepare differs from the shared quantization in %lld values (k=%lld)",
                     (long long)bad, (long long)k);
        free(x);
        free(xt);
    }
    check_gemm_bits(avx2, NULL);
    const tb_cpu_features *f = tb_cpu_get_features();
    if (tb_isa_active() != TB_ISA_AVX512 || !f->avx512vnni) {
        fprintf(stderr, "test_llm: AVX2 GEMM not compared with the VNNI GEMM: %s\n",
                tb_isa_active() != TB_ISA_AVX512 ? "no AVX-512 level active" : "this CPU has no AVX-512 VNNI");
        return;
    }
    check_gemm_bits(avx2, &tb_llm_qkernels_avx512vnni);
}

/* The AMX-INT8 prompt GEMM has the VNNI GEMM's bits: both from the float rows, over sizes with 16-row
 * tails, chunks of rows (k large enough that a chunk is smaller than M), partial 32-column panels and
 * column ranges that start off a panel boundary; a NaN activation poisons only its row. */
static void test_amx_gemm(void) {
    const tb_cpu_features *f = tb_cpu_get_features();
    const bool usable = f->amx_int8 && f->avx512vnni && tb_isa_active() == TB_ISA_AVX512 && tb_cpu_amx_request();
    TB_CHECK_MSG(!usable || tb_llm_qkernels_active() == &tb_llm_qkernels_amx,
                 "prompt GEMMs run on %s although AMX-INT8 is usable",
                 tb_llm_qkernels_active() ? tb_llm_qkernels_active()->name : "none");
    if (!usable) {
        fprintf(stderr, "test_llm: AMX-INT8 GEMM not tested: %s\n",
                !f->amx_int8 ? "this CPU has no AMX-INT8"
                : !f->amx_os ? "the OS does not enable the AMX tile state (XCR0)"
                             : "no AVX-512 VNNI level or the OS refused the AMX permission (arch_prctl)");
        return;
    }
    tb_gemm_set_amx_allowed(false);
    TB_CHECK_MSG(tb_llm_qkernels_active() == &tb_llm_qkernels_avx512vnni, "TORCHBURN_AMX=0 leaves the VNNI GEMM");
    tb_gemm_set_amx_allowed(true);
    const tb_llm_qkernels *amx = &tb_llm_qkernels_amx, *vnni = &tb_llm_qkernels_avx512vnni;
    check_gemm_bits(amx, vnni);
    test_qmatmul_with(amx, false);
}
#endif

static void test_qmatmul(void) {
    const tb_llm_qkernels *active = tb_llm_qkernels_active();
#ifdef TB_HAVE_X86
    /* the AVX2 kernels also run (and are checked) on AVX-512 machines, bit for bit against the reference */
    const tb_llm_qkernels *avx2 = tb_isa_supported(TB_ISA_AVX2) ? &tb_llm_qkernels_avx2 : NULL;
    if (tb_isa_active() == TB_ISA_AVX2)
        TB_CHECK_MSG(active == avx2, "AVX2 CPUs run the AVX2 int8-activation kernels");
#else
    const tb_llm_qkernels *avx2 = NULL;
#endif
    test_qmatmul_with(active, active && active == avx2);
    if (avx2 && active != avx2)
        test_qmatmul_with(avx2, true);
    if (avx2)
        test_qmatmul_bounds(avx2);
    if (active && active != avx2)
        test_qmatmul_bounds(active);
    test_qmatmul_bounds(&tb_llm_qkernels_ref);
}

static void test_int4_quantizer(void) {
    enum { N = 64, K = 256 };
    float *w = malloc(sizeof(float) * N * K), *back = malloc(sizeof(float) * N * K);
    for (int i = 0; i < N * K; i++) { /* roughly Gaussian */
        float s = 0.0f;
        for (int j = 0; j < 4; j++)
            s += uniform();
        w[i] = s;
    }
    uint8_t packed[N * K / 2];
    float scales[N * K / 32];
    const int64_t groups[] = {32, 64, 128, 256};
    for (int gi = 0; gi < 4; gi++) {
        const int64_t g = groups[gi];
        double ours = 0.0, plain = 0.0;
        TB_CHECK(tb_llm_quantize_int4(w, N, K, g, packed, scales) == TB_OK);
        TB_CHECK(tb_dequantize_int4_grouped(packed, scales, N, K, g, back) == TB_OK);
        for (int i = 0; i < N * K; i++)
            ours += (double)(w[i] - back[i]) * (w[i] - back[i]);
        TB_CHECK(tb_quantize_int4_grouped(w, N, K, g, packed, scales) == TB_OK);
        TB_CHECK(tb_dequantize_int4_grouped(packed, scales, N, K, g, back) == TB_OK);
        for (int i = 0; i < N * K; i++)
            plain += (double)(w[i] - back[i]) * (w[i] - back[i]);
        TB_CHECK_MSG(ours < 0.85 * plain, "group %lld: squared error %g vs plain %g", (long long)g, ours, plain);
    }
    w[100] = NAN;
    TB_CHECK(tb_llm_quantize_int4(w, N, K, 32, packed, scales) == TB_OK);
    TB_CHECK(isnan(scales[100 / 32]) && scales[0] == scales[0]);
    w[100] = INFINITY;
    TB_CHECK(tb_llm_quantize_int4(w, N, K, 32, packed, scales) == TB_ERR_INVALID_ARGUMENT);
    TB_CHECK(tb_llm_quantize_int4(w, N, K, 48, packed, scales) == TB_ERR_INVALID_ARGUMENT);
    free(w);
    free(back);
}

/* ---- sampler ---- */

static void test_sampler(void) {
    float logits[10] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f, -3.0f, 1.5f, 0.25f, 1.9f};
    tb_llm_sampling p;
    tb_llm_sampling_default(&p);
    tb_llm_sampler *s = NULL;
    int32_t token = -1;
    TB_CHECK(tb_llm_sampler_new(10, &p, &s) == TB_OK);
    TB_CHECK(tb_llm_sampler_sample(s, logits, NULL, 0, &token) == TB_OK && token == 1); /* first maximum */
    const int32_t history[3] = {1, 3, 1};
    p.repetition_penalty = 2.0f;
    tb_llm_sampler_free(s);
    TB_CHECK(tb_llm_sampler_new(10, &p, &s) == TB_OK);
    TB_CHECK(tb_llm_sampler_sample(s, logits, history, 3, &token) == TB_OK && token == 9);
    tb_llm_sampler_free(s);
    p = (tb_llm_sampling){.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = 7};
    TB_CHECK(tb_llm_sampler_new(10, &p, &s) == TB_OK);
    float probs[10];
    TB_CHECK(tb_llm_sampler_probs(s, logits, NULL, 0, probs) == TB_OK);
    float total = 0.0f;
    int kept = 0;
    for (int i = 0; i < 10; i++) {
        total += probs[i];
        kept += probs[i] > 0.0f;
    }
    TB_CHECK(kept == 3 && fabsf(total - 1.0f) < 1e-6f && probs[6] == 0.0f);
    int32_t first[32], second[32];
    for (int i = 0; i < 32; i++)
        TB_CHECK(tb_llm_sampler_sample(s, logits, NULL, 0, &first[i]) == TB_OK && (first[i] == 1 || first[i] == 3 || first[i] == 9));
    tb_llm_sampler_free(s);
    TB_CHECK(tb_llm_sampler_new(10, &p, &s) == TB_OK);
    for (int i = 0; i < 32; i++)
        TB_CHECK(tb_llm_sampler_sample(s, logits, NULL, 0, &second[i]) == TB_OK);
    TB_CHECK(memcmp(first, second, sizeof first) == 0);
    tb_llm_sampler_free(s);
    const tb_llm_sampling bad[] = {
        {.temperature = NAN, .top_p = 1.0f, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_p = 0.0f, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 0.0f},
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 1.5f, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_k = -1, .top_p = 1.0f, .repetition_penalty = 1.0f},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        TB_CHECK(tb_llm_sampler_new(10, &bad[i], &s) == TB_ERR_INVALID_ARGUMENT && s == NULL);
    }
    /* one NaN or inf logit is an error in greedy mode too (argmax would pick an arbitrary token) */
    const float specials[2] = {NAN, INFINITY};
    const float penalties[2] = {1.0f, 1.3f};
    for (int v = 0; v < 2; v++)
        for (int r = 0; r < 2; r++) {
            tb_llm_sampling_default(&p);
            p.repetition_penalty = penalties[r];
            TB_CHECK(tb_llm_sampler_new(10, &p, &s) == TB_OK);
            logits[7] = specials[v];
            TB_CHECK(tb_llm_sampler_sample(s, logits, history, 3, &token) == TB_ERR_INVALID_ARGUMENT);
            TB_CHECK(strstr(tb_error_message(), "not finite") != NULL);
            TB_CHECK(tb_llm_sampler_probs(s, logits, history, 3, probs) == TB_ERR_INVALID_ARGUMENT);
            logits[7] = 1.5f;
            tb_llm_sampler_free(s);
        }
}

/* ---- a whole tiny model on disk ---- */

enum { VOCAB = 61, HIDDEN = 32, INTER = 64, LAYERS = 2, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 8 };

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    TB_CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Writes a model folder; `window` > 0 makes it a Mistral with that sliding window, else a tied Qwen2. */
static void write_model(const char *dir, int window, int drop_tensor) {
    char path[512], config[1024];
    mkdir(dir, 0755);
    if (window > 0)
        snprintf(config, sizeof config,
                 "{\"model_type\": \"mistral\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
                 "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
                 "\"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
                 "\"sliding_window\": %d, \"tie_word_embeddings\": false, \"eos_token_id\": 2, \"hidden_act\": \"silu\"}",
                 VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, window);
    else
        snprintf(config, sizeof config,
                 "{\"model_type\": \"qwen2\", \"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
                 "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
                 "\"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, "
                 "\"tie_word_embeddings\": true, \"eos_token_id\": [2, 3], \"hidden_act\": \"silu\"}",
                 VOCAB, HIDDEN, INTER, LAYERS, HEADS, KV_HEADS);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, config);
    enum { MAX_TENSORS = 64 };
    tb_safetensors_entry entries[MAX_TENSORS];
    char names[MAX_TENSORS][96];
    float *buffers[MAX_TENSORS];
    int count = 0;
#define ADD(name_fmt, layer, rows, cols, scale, one)                                                    \
    do {                                                                                                \
        snprintf(names[count], sizeof names[count], name_fmt, layer);                                   \
        const int64_t numel = (int64_t)(rows) * ((cols) > 0 ? (cols) : 1);                              \
        buffers[count] = malloc(sizeof(float) * (size_t)numel);                                         \
        fill(buffers[count], numel, scale);                                                             \
        if (one)                                                                                        \
            for (int64_t i_ = 0; i_ < numel; i_++)                                                      \
                buffers[count][i_] += 1.0f;                                                             \
        entries[count] = (tb_safetensors_entry){.name = names[count], .dtype = TB_SAFETENSORS_F32,      \
                                                .ndim = (cols) > 0 ? 2 : 1, .shape = {rows, cols},       \
                                                .data = buffers[count]};                                \
        count++;                                                                                        \
    } while (0)
    ADD("model.embed_tokens.weight%.0d", 0, VOCAB, HIDDEN, 1.0f, 0);
    ADD("model.norm.weight%.0d", 0, HIDDEN, 0, 0.1f, 1);
    if (window > 0)
        ADD("lm_head.weight%.0d", 0, VOCAB, HIDDEN, 0.3f, 0);
    for (int l = 0; l < LAYERS; l++) {
        ADD("model.layers.%d.input_layernorm.weight", l, HIDDEN, 0, 0.1f, 1);
        ADD("model.layers.%d.post_attention_layernorm.weight", l, HIDDEN, 0, 0.1f, 1);
        ADD("model.layers.%d.self_attn.q_proj.weight", l, HEADS * HEAD_DIM, HIDDEN, 0.3f, 0);
        ADD("model.layers.%d.self_attn.k_proj.weight", l, KV_HEADS * HEAD_DIM, HIDDEN, 0.3f, 0);
        ADD("model.layers.%d.self_attn.v_proj.weight", l, KV_HEADS * HEAD_DIM, HIDDEN, 0.3f, 0);
        ADD("model.layers.%d.self_attn.o_proj.weight", l, HIDDEN, HEADS * HEAD_DIM, 0.3f, 0);
        ADD("model.layers.%d.mlp.gate_proj.weight", l, INTER, HIDDEN, 0.3f, 0);
        ADD("model.layers.%d.mlp.up_proj.weight", l, INTER, HIDDEN, 0.3f, 0);
        ADD("model.layers.%d.mlp.down_proj.weight", l, HIDDEN, INTER, 0.3f, 0);
        if (window == 0) {
            ADD("model.layers.%d.self_attn.q_proj.bias", l, HEADS * HEAD_DIM, 0, 0.3f, 0);
            ADD("model.layers.%d.self_attn.k_proj.bias", l, KV_HEADS * HEAD_DIM, 0, 0.3f, 0);
            ADD("model.layers.%d.self_attn.v_proj.bias", l, KV_HEADS * HEAD_DIM, 0, 0.3f, 0);
        }
    }
#undef ADD
    if (drop_tensor >= 0 && drop_tensor < count) {
        free(buffers[drop_tensor]);
        buffers[drop_tensor] = buffers[count - 1];
        entries[drop_tensor] = entries[count - 1];
        count--;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    TB_CHECK(tb_safetensors_write(path, entries, (size_t)count, NULL, NULL, 0) == TB_OK);
    for (int i = 0; i < count; i++)
        free(buffers[i]);
}

static float max_diff(const float *a, const float *b, int64_t n) {
    float worst = 0.0f;
    for (int64_t i = 0; i < n; i++)
        worst = fabsf(a[i] - b[i]) > worst ? fabsf(a[i] - b[i]) : worst;
    return worst;
}

/* Logits of every position from one pass vs prefill of `split` tokens then one token at a time. */
static void check_incremental(const tb_llm_model *model, bool kv_f16, const char *what) {
    enum { T = 40 };
    int32_t tokens[T];
    for (int i = 0; i < T; i++)
        tokens[i] = (int32_t)((i * 7 + 3) % VOCAB);
    float *all = malloc(sizeof(float) * T * VOCAB), *step = malloc(sizeof(float) * VOCAB);
    tb_llm_session *a = NULL, *b = NULL;
    TB_CHECK(tb_llm_session_new(model, 64, kv_f16, &a) == TB_OK && tb_llm_session_new(model, 64, kv_f16, &b) == TB_OK);
    TB_CHECK(tb_llm_forward(a, tokens, T, all, true) == TB_OK);
    float worst = 0.0f;
    const int split = 17;
    TB_CHECK(tb_llm_forward(b, tokens, split, step, false) == TB_OK);
    worst = fmaxf(worst, max_diff(step, all + (split - 1) * VOCAB, VOCAB));
    for (int t = split; t < T; t++) {
        TB_CHECK(tb_llm_forward(b, tokens + t, 1, step, false) == TB_OK);
        worst = fmaxf(worst, max_diff(step, all + t * VOCAB, VOCAB));
    }
    float scale = 0.0f;
    for (int i = 0; i < T * VOCAB; i++)
        scale = fmaxf(scale, fabsf(all[i]));
    /* half-precision keys turn 1-ulp f32 differences between the GEMM and GEMV paths into f16 ulps */
    const float tolerance = (kv_f16 ? 1e-4f : 1e-5f) * scale;
    TB_CHECK_MSG(worst < tolerance, "%s: incremental logits differ by %g (largest logit %g)", what, (double)worst,
                 (double)scale);
    /* prefix reuse: keep 25 positions, rerun the rest */
    TB_CHECK(tb_llm_session_truncate(b, 25) == TB_OK && tb_llm_session_length(b) == 25);
    TB_CHECK(tb_llm_forward(b, tokens + 25, T - 25, step, false) == TB_OK);
    TB_CHECK_MSG(max_diff(step, all + (T - 1) * VOCAB, VOCAB) < tolerance, "%s: reuse", what);
    TB_CHECK(tb_llm_forward(b, tokens, 64 - T + 1, step, false) == TB_ERR_INVALID_ARGUMENT); /* past max_seq_len */
    TB_CHECK(tb_llm_session_length(b) == T);
    tb_llm_session_free(a);
    tb_llm_session_free(b);
    free(all);
    free(step);
}


/* Greedy, reproducible generation: begin() on a session that ran other calls gives logits bit-identical to
 * a fresh session's, for the same prompt, for a prompt extending an earlier answer, and past one prefill
 * chunk (256 positions, the unit of reuse). */
static void begin_logits(tb_llm_session *s, const int32_t *prompt, int64_t count, float *logits, int32_t *answer,
                         int answer_count, int64_t *reused) {
    tb_llm_generate_desc desc = {.prompt = prompt, .prompt_count = count, .max_tokens = answer_count,
                                 .reproducible = true};
    tb_llm_sampling_default(&desc.sampling);
    tb_llm_generation *g = NULL;
    TB_CHECK(tb_llm_generation_begin(s, &desc, &g) == TB_OK);
    if (!g)
        return;
    memcpy(logits, tb_llm_generation_logits(g), sizeof(float) * VOCAB);
    tb_llm_finish finish = TB_LLM_FINISH_NONE;
    for (int i = 0; i < answer_count; i++)
        TB_CHECK(tb_llm_generation_next(g, &answer[i], &finish) == TB_OK);
    tb_llm_stats stats;
    tb_llm_generation_stats(g, &stats);
    *reused = stats.reused_tokens;
    tb_llm_generation_free(g);
}

static void check_reproducible(const tb_llm_model *model, const char *what) {
    enum { T = 300, ANSWER = 8 };
    int32_t tokens[T + ANSWER];
    for (int i = 0; i < T; i++)
        tokens[i] = (int32_t)((i * 13 + 5) % VOCAB);
    float *mine = malloc(sizeof(float) * VOCAB), *fresh = malloc(sizeof(float) * VOCAB);
    int32_t answer[ANSWER], fresh_answer[ANSWER];
    tb_llm_session *s = NULL;
    TB_CHECK(tb_llm_session_new(model, 400, false, &s) == TB_OK);
    const int64_t lengths[4] = {18, 18, 270, 290};
    for (int round = 0; round < 4 && s; round++) {
        int64_t count = lengths[round], reused = 0, fresh_reused = 0;
        if (round == 1) { /* the first answer becomes part of the prompt */
            memcpy(tokens + count, answer, 3 * sizeof(int32_t));
            count += 3;
        }
        begin_logits(s, tokens, count, mine, answer, ANSWER, &reused);
        tb_llm_session *f = NULL;
        TB_CHECK(tb_llm_session_new(model, 400, false, &f) == TB_OK);
        if (f)
            begin_logits(f, tokens, count, fresh, fresh_answer, ANSWER, &fresh_reused);
        tb_llm_session_free(f);
        TB_CHECK_MSG(memcmp(mine, fresh, sizeof(float) * VOCAB) == 0 &&
                     memcmp(answer, fresh_answer, sizeof answer) == 0,
                     "%s: %lld-token prompt after other calls (%lld reused) differs from a fresh session", what,
                     (long long)count, (long long)reused);
        if (round == 3)
            TB_CHECK_MSG(reused == 256, "%s: reused %lld positions, expected one whole chunk", what, (long long)reused);
    }
    tb_llm_session_free(s);
    free(mine);
    free(fresh);
}

/* Cancel points: a hook that says stop at its n-th poll (polling at every cancel point). */
typedef struct stop_at {
    int polls, stop_at;
} stop_at;

static int stop_hook(void *context) {
    stop_at *s = context;
    return ++s->polls >= s->stop_at;
}

static void test_interrupts(const char *dir) {
    stop_at counter = {0, 3};
    tb_interrupt_poll_period_set(0);
    void *previous_context = NULL;
    TB_CHECK(tb_interrupt_hook_set(stop_hook, &counter, &previous_context) == NULL);
    /* the load stops at a chunk boundary and frees what it built (ASan checks the leak) */
    tb_llm_load_options options = {.quant = TB_LLM_QUANT_INT8};
    tb_llm_model *model = NULL;
    TB_CHECK(tb_llm_model_load(dir, &options, &model) == TB_ERR_INTERRUPTED && model == NULL);
    TB_CHECK(strstr(tb_error_message(), "interrupted") != NULL && counter.polls == 3);
    tb_interrupt_hook_set(NULL, NULL, NULL);
    options.quant = TB_LLM_QUANT_NONE;
    TB_CHECK(tb_llm_model_load(dir, &options, &model) == TB_OK);
    if (!model)
        return;
    /* a forward stops between layers; the cache keeps its length and the next forward is exact */
    tb_llm_session *session = NULL, *fresh = NULL;
    TB_CHECK(tb_llm_session_new(model, 16, false, &session) == TB_OK);
    TB_CHECK(tb_llm_session_new(model, 16, false, &fresh) == TB_OK);
    const int32_t ids[6] = {3, 1, 4, 1, 5, 9};
    float logits[VOCAB], expected[VOCAB];
    TB_CHECK(tb_llm_forward(session, ids, 2, logits, false) == TB_OK);
    counter = (stop_at){0, 2};
    tb_interrupt_hook_set(stop_hook, &counter, NULL);
    TB_CHECK(tb_llm_forward(session, ids + 2, 4, logits, false) == TB_ERR_INTERRUPTED);
    TB_CHECK(tb_llm_session_length(session) == 2 && counter.polls == 2);
    tb_interrupt_hook_set(NULL, NULL, NULL);
    tb_interrupt_poll_period_set(-1);
    TB_CHECK(tb_llm_forward(session, ids + 2, 4, logits, false) == TB_OK);
    TB_CHECK(tb_llm_forward(fresh, ids, 2, expected, false) == TB_OK);
    TB_CHECK(tb_llm_forward(fresh, ids + 2, 4, expected, false) == TB_OK);
    TB_CHECK(memcmp(logits, expected, sizeof logits) == 0);
    tb_llm_session_free(session);
    tb_llm_session_free(fresh);
    tb_llm_model_free(model);
}

static void test_model(const char *root) {
    rng = 0x2545f4914f6cdd1dull; /* the same model whatever ran before */
    char dir[512], mistral[512], cache[512], broken[512];
    snprintf(dir, sizeof dir, "%s/qwen", root);
    snprintf(mistral, sizeof mistral, "%s/mistral", root);
    snprintf(cache, sizeof cache, "%s/cache.safetensors", root);
    snprintf(broken, sizeof broken, "%s/broken", root);
    write_model(dir, 0, -1);
    write_model(mistral, 5, -1);
    write_model(broken, 0, 7);

    tb_llm_load_options options = {.quant = TB_LLM_QUANT_NONE};
    tb_llm_model *model = NULL;
    TB_CHECK(tb_llm_model_load(dir, &options, &model) == TB_OK);
    if (!model)
        return;
    tb_llm_model_info info;
    tb_llm_model_get_info(model, &info);
    TB_CHECK(info.parameters == VOCAB * HIDDEN + HIDDEN +
                                    LAYERS * (2 * HIDDEN + (HEADS + 2 * KV_HEADS) * HEAD_DIM * (HIDDEN + 1) +
                                              HIDDEN * HEADS * HEAD_DIM + 3 * HIDDEN * INTER));
    check_incremental(model, false, "qwen f32");
    check_incremental(model, true, "qwen f32, f16 cache"); /* f16 keys vs f16 keys: same rounding both ways */
    check_reproducible(model, "qwen f32");
    test_interrupts(dir);

    /* generation: greedy equals argmax of the logits; finish reasons */
    tb_llm_session *session = NULL;
    TB_CHECK(tb_llm_session_new(model, 20, false, &session) == TB_OK);
    const int32_t prompt[4] = {5, 9, 11, 4};
    tb_llm_generate_desc desc = {.prompt = prompt, .prompt_count = 4, .max_tokens = 6};
    tb_llm_sampling_default(&desc.sampling);
    int32_t out[32];
    tb_llm_stats stats;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, out, 32, &stats) == TB_OK);
    TB_CHECK(stats.generated_tokens == 6 && stats.finish == TB_LLM_FINISH_LENGTH && stats.prompt_tokens == 4);
    float logits[VOCAB];
    tb_llm_session *check = NULL;
    TB_CHECK(tb_llm_session_new(model, 20, false, &check) == TB_OK);
    TB_CHECK(tb_llm_forward(check, prompt, 4, logits, false) == TB_OK);
    int best = 0;
    for (int i = 1; i < VOCAB; i++)
        best = logits[i] > logits[best] ? i : best;
    TB_CHECK(out[0] == best);
    tb_llm_session_free(check);
    /* same prompt again: the cached prefix is reused, the tokens are the same */
    int32_t again[32];
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, again, 32, &stats) == TB_OK);
    TB_CHECK(memcmp(out, again, 6 * sizeof(int32_t)) == 0 && stats.reused_tokens == 3);
    /* stop token */
    const int32_t stop = out[2];
    desc.stop_ids = &stop;
    desc.stop_count = 1;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, again, 32, &stats) == TB_OK);
    int expected = 0;
    while (out[expected] != stop)
        expected++;
    TB_CHECK(stats.finish == TB_LLM_FINISH_STOP && stats.generated_tokens == expected + 1);
    /* context full: 4 prompt + 16 generated fill 20 positions */
    desc.stop_count = 0;
    desc.max_tokens = 100;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, NULL, 0, &stats) == TB_OK);
    TB_CHECK(stats.finish == TB_LLM_FINISH_LENGTH && stats.generated_tokens == 17);
    /* bad inputs */
    const int32_t bad_token = VOCAB;
    desc.prompt = &bad_token;
    desc.prompt_count = 1;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, NULL, 0, &stats) == TB_ERR_INVALID_ARGUMENT);
    desc.prompt = prompt;
    desc.max_tokens = 0;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, NULL, 0, &stats) == TB_ERR_INVALID_ARGUMENT);
    desc.max_tokens = 4;
    desc.prompt_count = 0;
    TB_CHECK(tb_llm_generate(session, &desc, NULL, NULL, NULL, 0, &stats) == TB_ERR_INVALID_ARGUMENT);
    tb_llm_session_free(session);

    /* quantized: first load writes the cache, the second maps it, logits identical */
    float *first = malloc(sizeof(float) * VOCAB), *second = malloc(sizeof(float) * VOCAB), *exact = malloc(sizeof(float) * VOCAB);
    const int32_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    TB_CHECK(tb_llm_session_new(model, 16, false, &session) == TB_OK);
    TB_CHECK(tb_llm_forward(session, ids, 8, exact, false) == TB_OK);
    tb_llm_session_free(session);
    for (int q = 0; q < 2; q++) {
        unlink(cache);
        tb_llm_load_options quantized = {.quant = q ? TB_LLM_QUANT_INT4 : TB_LLM_QUANT_INT8, .group_size = 32,
                                         .cache_path = cache, .cache_key = "k1"};
        float *targets[2] = {first, second};
        for (int load = 0; load < 2; load++) {
            tb_llm_model *qm = NULL;
            TB_CHECK(tb_llm_model_load(dir, &quantized, &qm) == TB_OK);
            if (!qm)
                continue;
            tb_llm_model_get_info(qm, &info);
            TB_CHECK(info.cache_state == (load ? TB_LLM_CACHE_HIT : TB_LLM_CACHE_WRITTEN));
            TB_CHECK(info.decode_bytes_per_token < info.weight_bytes + 1);
            check_incremental(qm, false, q ? "int4" : "int8");
            check_reproducible(qm, q ? "int4" : "int8");
            TB_CHECK(tb_llm_session_new(qm, 16, false, &session) == TB_OK);
            TB_CHECK(tb_llm_forward(session, ids, 8, targets[load], false) == TB_OK);
            tb_llm_session_free(session);
            tb_llm_model_free(qm);
        }
        TB_CHECK(memcmp(first, second, sizeof(float) * VOCAB) == 0);
        float dot = 0.0f, na = 0.0f, nb = 0.0f;
        for (int i = 0; i < VOCAB; i++) {
            dot += first[i] * exact[i];
            na += first[i] * first[i];
            nb += exact[i] * exact[i];
        }
        /* a loose sanity bound on this 32-wide uniform-weight model; test_llm.py checks the real thresholds */
        TB_CHECK_MSG(dot / sqrtf(na * nb) > (q ? 0.95f : 0.999f), "quant %d cosine %g", q, (double)(dot / sqrtf(na * nb)));
        quantized.cache_key = "k2"; /* a different key: stale, rebuilt */
        tb_llm_model *qm = NULL;
        TB_CHECK(tb_llm_model_load(dir, &quantized, &qm) == TB_OK);
        if (qm) {
            tb_llm_model_get_info(qm, &info);
            TB_CHECK(info.cache_state == TB_LLM_CACHE_WRITTEN);
        }
        tb_llm_model_free(qm);
    }
    free(first);
    free(second);
    free(exact);
    tb_llm_model_free(model);

    /* sliding window (5 < 40 tokens), untied head */
    TB_CHECK(tb_llm_model_load(mistral, &options, &model) == TB_OK);
    if (model) {
        check_incremental(model, false, "mistral window 5");
        tb_llm_model_free(model);
    }
    /* errors */
    model = NULL;
    TB_CHECK(tb_llm_model_load(broken, &options, &model) == TB_ERR_FORMAT && model == NULL);
    TB_CHECK(strstr(tb_error_message(), "has no tensor") != NULL);
    snprintf(dir, sizeof dir, "%s/missing", root);
    TB_CHECK(tb_llm_model_load(dir, &options, &model) == TB_ERR_IO);
    options.quant = TB_LLM_QUANT_INT4;
    options.group_size = 48;
    snprintf(dir, sizeof dir, "%s/qwen", root);
    TB_CHECK(tb_llm_model_load(dir, &options, &model) == TB_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_kernel_tables();
    test_qmatmul();
#ifdef TB_HAVE_X86
    test_avx2_gemm();
    test_amx_gemm();
#endif
    test_int4_quantizer();
    test_sampler();
    char root[] = "/tmp/tb_test_llm_XXXXXX";
    if (mkdtemp(root)) {
        for (int threads = 1; threads <= 2; threads++) {
            TB_CHECK(tb_set_num_threads(threads) == TB_OK);
            test_model(root);
        }
        char command[600];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        TB_CHECK(system(command) == 0);
    } else {
        TB_CHECK(!"mkdtemp failed");
    }
    return tb_test_finish("llm");
}
