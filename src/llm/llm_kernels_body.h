/* SIMD bodies of the LLM kernels (contracts in llm_internal.h), written against the float-vector API
 * of the including ISA file (kernels/x86_avx2/simd_api_avx2.h or kernels/x86_avx512/simd_api_avx512.h,
 * plus kernels/simd/vec_math.h). Everything is static: each ISA translation unit compiles its own copy
 * and exports only its table, TB_LLM_KERNELS_TABLE named by the includer. */
#ifndef TB_LLM_KERNELS_BODY_H
#define TB_LLM_KERNELS_BODY_H

#include <stdbool.h>
#include <stdint.h>

#include "llm/llm_internal.h"

/* Loads lanes [i, i + n) of a row of keys/values in f32 or half (n <= VF_LANES; n < VF_LANES reads zeros
 * past the end without touching memory there). */
static inline vf llm_load_kv(const void *base, bool f16, int64_t i, int64_t n) {
    if (f16)
        return n == VF_LANES ? vf_load_f16((const uint16_t *)base + i) : vf_load_f16_part((const uint16_t *)base + i, n);
    return n == VF_LANES ? vf_load((const float *)base + i) : vf_load_part((const float *)base + i, n);
}

static void llm_gemv_f32(const float *w, int64_t k, const float *x, float *y, int64_t n) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *w0 = w + j * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        int64_t p = 0;
        for (; p + VF_LANES <= k; p += VF_LANES) {
            vf xv = vf_load(x + p);
            a0 = vf_fmadd(vf_load(w0 + p), xv, a0);
            a1 = vf_fmadd(vf_load(w1 + p), xv, a1);
            a2 = vf_fmadd(vf_load(w2 + p), xv, a2);
            a3 = vf_fmadd(vf_load(w3 + p), xv, a3);
        }
        if (p < k) {
            int64_t r = k - p;
            vf xv = vf_load_part(x + p, r);
            a0 = vf_fmadd(vf_load_part(w0 + p, r), xv, a0);
            a1 = vf_fmadd(vf_load_part(w1 + p, r), xv, a1);
            a2 = vf_fmadd(vf_load_part(w2 + p, r), xv, a2);
            a3 = vf_fmadd(vf_load_part(w3 + p, r), xv, a3);
        }
        y[j] = vf_hsum(a0);
        y[j + 1] = vf_hsum(a1);
        y[j + 2] = vf_hsum(a2);
        y[j + 3] = vf_hsum(a3);
    }
    for (; j < n; j++) {
        const float *row = w + j * k;
        vf a = vf_zero();
        int64_t p = 0;
        for (; p + VF_LANES <= k; p += VF_LANES)
            a = vf_fmadd(vf_load(row + p), vf_load(x + p), a);
        if (p < k)
            a = vf_fmadd(vf_load_part(row + p, k - p), vf_load_part(x + p, k - p), a);
        y[j] = vf_hsum(a);
    }
}

/* GN (1..4, a constant after inlining) query heads x one 16-key block per step: each key vector load feeds
 * GN heads, each q element is broadcast once per block; no horizontal sums. */
#define LLM_KEY_VECTORS (TB_LLM_KEY_BLOCK / VF_LANES)
static inline __attribute__((always_inline)) void llm_scores_heads(const float *q, const int gn, int64_t d,
                                                                    const void *key_blocks, bool keys_f16,
                                                                    int64_t blocks, vf vscale, float *scores,
                                                                    int64_t score_stride) {
    const int64_t elem = keys_f16 ? 2 : 4;
    for (int64_t b = 0; b < blocks; b++) {
        const char *block = (const char *)key_blocks + b * d * TB_LLM_KEY_BLOCK * elem;
        vf acc[4][LLM_KEY_VECTORS];
        for (int g = 0; g < gn; g++)
            for (int v = 0; v < LLM_KEY_VECTORS; v++)
                acc[g][v] = vf_zero();
        for (int64_t i = 0; i < d; i++) {
            vf kv[LLM_KEY_VECTORS];
            for (int v = 0; v < LLM_KEY_VECTORS; v++)
                kv[v] = llm_load_kv(block, keys_f16, i * TB_LLM_KEY_BLOCK + v * VF_LANES, VF_LANES);
            for (int g = 0; g < gn; g++) {
                const vf qv = vf_set1(q[g * d + i]);
                for (int v = 0; v < LLM_KEY_VECTORS; v++)
                    acc[g][v] = vf_fmadd(qv, kv[v], acc[g][v]);
            }
        }
        for (int g = 0; g < gn; g++)
            for (int v = 0; v < LLM_KEY_VECTORS; v++)
                vf_store(scores + g * score_stride + b * TB_LLM_KEY_BLOCK + v * VF_LANES, vf_mul(acc[g][v], vscale));
    }
}

static void llm_attn_scores(const float *q, int64_t groups, int64_t d, const void *key_blocks, bool keys_f16,
                            int64_t blocks, float scale, float *scores, int64_t score_stride) {
    const vf vscale = vf_set1(scale);
    for (int64_t g0 = 0; g0 < groups; g0 += 4) {
        const float *qg = q + g0 * d;
        float *sg = scores + g0 * score_stride;
        switch (groups - g0 < 4 ? groups - g0 : 4) {
        case 1: llm_scores_heads(qg, 1, d, key_blocks, keys_f16, blocks, vscale, sg, score_stride); break;
        case 2: llm_scores_heads(qg, 2, d, key_blocks, keys_f16, blocks, vscale, sg, score_stride); break;
        case 3: llm_scores_heads(qg, 3, d, key_blocks, keys_f16, blocks, vscale, sg, score_stride); break;
        default: llm_scores_heads(qg, 4, d, key_blocks, keys_f16, blocks, vscale, sg, score_stride); break;
        }
    }
}

/* Blocks of up to 4 heads x LLM_VALUE_VECTORS vectors of output in registers (a whole 64-wide head with
 * AVX-512); each value row is read once per block of heads and output chunk. */
#define LLM_VALUE_VECTORS (VF_LANES >= 16 ? 4 : 2)
static inline __attribute__((always_inline)) void llm_values_heads(const float *p, const int gn, int64_t p_stride,
                                                                    const void *values, bool values_f16, int64_t len,
                                                                    int64_t d, float *out) {
    const int64_t elem = values_f16 ? 2 : 4;
    for (int64_t i = 0; i < d; i += LLM_VALUE_VECTORS * VF_LANES) {
        int64_t lanes[LLM_VALUE_VECTORS];
        for (int v = 0; v < LLM_VALUE_VECTORS; v++) {
            const int64_t rest = d - i - v * VF_LANES;
            lanes[v] = rest <= 0 ? 0 : rest < VF_LANES ? rest : VF_LANES;
        }
        vf acc[4][LLM_VALUE_VECTORS];
        for (int g = 0; g < gn; g++)
            for (int v = 0; v < LLM_VALUE_VECTORS; v++)
                acc[g][v] = vf_zero();
        for (int64_t j = 0; j < len; j++) {
            const void *row = (const char *)values + j * d * elem;
            vf value[LLM_VALUE_VECTORS];
            for (int v = 0; v < LLM_VALUE_VECTORS; v++)
                value[v] = lanes[v] > 0 ? llm_load_kv(row, values_f16, i + v * VF_LANES, lanes[v]) : vf_zero();
            for (int g = 0; g < gn; g++) {
                const vf pj = vf_set1(p[g * p_stride + j]);
                for (int v = 0; v < LLM_VALUE_VECTORS; v++)
                    acc[g][v] = vf_fmadd(pj, value[v], acc[g][v]);
            }
        }
        for (int g = 0; g < gn; g++)
            for (int v = 0; v < LLM_VALUE_VECTORS; v++) {
                float *o = out + g * d + i + v * VF_LANES;
                if (lanes[v] == VF_LANES)
                    vf_store(o, acc[g][v]);
                else if (lanes[v] > 0)
                    vf_store_part(o, acc[g][v], lanes[v]);
            }
    }
}

static void llm_attn_values(const float *p, int64_t groups, int64_t p_stride, const void *values, bool values_f16,
                            int64_t len, int64_t d, float *out) {
    for (int64_t g0 = 0; g0 < groups; g0 += 4) {
        const float *pg = p + g0 * p_stride;
        float *og = out + g0 * d;
        switch (groups - g0 < 4 ? groups - g0 : 4) {
        case 1: llm_values_heads(pg, 1, p_stride, values, values_f16, len, d, og); break;
        case 2: llm_values_heads(pg, 2, p_stride, values, values_f16, len, d, og); break;
        case 3: llm_values_heads(pg, 3, p_stride, values, values_f16, len, d, og); break;
        default: llm_values_heads(pg, 4, p_stride, values, values_f16, len, d, og); break;
        }
    }
}

static void llm_softmax(float *x, int64_t n) {
    vf vmax = vf_set1(-INFINITY);
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vmax = vf_max(vmax, vf_load(x + i));
    float max = vf_hmax(vmax);
    for (; i < n; i++)
        max = x[i] > max ? x[i] : max;
    const vf shift = vf_set1(max);
    vf vsum = vf_zero();
    for (i = 0; i + VF_LANES <= n; i += VF_LANES) {
        vf e = vmath_exp(vf_sub(vf_load(x + i), shift));
        vf_store(x + i, e);
        vsum = vf_add(vsum, e);
    }
    float tail_sum = 0.0f;
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        tail_sum += x[i];
    }
    const float inverse = 1.0f / (vf_hsum(vsum) + tail_sum);
    const vf vinv = vf_set1(inverse);
    for (i = 0; i + VF_LANES <= n; i += VF_LANES)
        vf_store(x + i, vf_mul(vf_load(x + i), vinv));
    for (; i < n; i++)
        x[i] *= inverse;
}

static void llm_silu_mul(const float *gate, const float *up, float *out, int64_t n) {
    const vf one = vf_set1(1.0f);
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES) {
        vf g = vf_load(gate + i);
        vf s = vf_div(g, vf_add(one, vmath_exp(vf_neg(g))));
        vf_store(out + i, vf_mul(s, vf_load(up + i)));
    }
    if (i < n) {
        vf g = vf_load_part(gate + i, n - i);
        vf s = vf_div(g, vf_add(one, vmath_exp(vf_neg(g))));
        vf_store_part(out + i, vf_mul(s, vf_load_part(up + i, n - i)), n - i);
    }
}

static void llm_rms_norm(const float *x, const float *weight, float *y, int64_t n, float eps) {
    vd acc = vd_zero();
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES) {
        vf v = vf_load(x + i);
        acc = vd_add_vf(acc, vf_mul(v, v));
    }
    if (i < n) {
        vf v = vf_load_part(x + i, n - i);
        acc = vd_add_vf(acc, vf_mul(v, v));
    }
    const float rstd = 1.0f / sqrtf((float)(vd_hsum(acc) / (double)n) + eps);
    const vf r = vf_set1(rstd);
    for (i = 0; i + VF_LANES <= n; i += VF_LANES)
        vf_store(y + i, vf_mul(vf_load(weight + i), vf_mul(vf_load(x + i), r)));
    if (i < n)
        vf_store_part(y + i, vf_mul(vf_load_part(weight + i, n - i), vf_mul(vf_load_part(x + i, n - i), r)), n - i);
}

static void llm_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES)
        vf_store_f16(y + i, vf_load(x + i));
    if (i < n)
        vf_store_f16_part(y + i, vf_load_part(x + i, n - i), n - i);
}

/* The maximum by vector max (NaN lanes dropped as the scalar `>` drops them), then the first index holding
 * it. Two passes over x, both at load speed. */
static int64_t llm_argmax(const float *x, int64_t n) {
    if (x[0] != x[0]) /* the scalar loop never moves off a NaN at index 0 */
        return 0;
    vf vmax = vf_set1(-INFINITY);
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES) {
        const vf v = vf_load(x + i);
        vmax = vf_select(vf_gt(v, vmax), v, vmax);
    }
    float best = vf_hmax(vmax);
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    if (!(best > -INFINITY)) /* all -inf or NaN: the scalar loop keeps index 0 */
        return 0;
    const vf target = vf_set1(best);
    for (i = 0; i + VF_LANES <= n; i += VF_LANES) {
        const unsigned bits = vm_bits(vf_eq(vf_load(x + i), target));
        if (bits)
            return i + __builtin_ctz(bits);
    }
    for (; i < n; i++)
        if (x[i] == best)
            return i;
    return 0;
}

const tb_llm_kernels TB_LLM_KERNELS_TABLE = {
    .name = VF_ISA_SUFFIX,
    .gemv_f32 = llm_gemv_f32,
    .attn_scores = llm_attn_scores,
    .attn_values = llm_attn_values,
    .softmax = llm_softmax,
    .silu_mul = llm_silu_mul,
    .rms_norm = llm_rms_norm,
    .to_f16 = llm_to_f16,
    .argmax = llm_argmax,
};

#endif
