/* Reductions (sum, max, min, logsumexp, argmax/argmin, var) and softmax over [outer, len, inner],
 * written once against the float-vector API of the including ISA (see vec_math.h); all static.
 * inner == 1 reduces contiguous rows. inner > 1: sum, max, min, logsumexp and softmax stream whole rows
 * into stack accumulators for up to SIMD_COL_CHUNK columns; argmax/argmin and var walk strips of
 * VF_LANES neighbouring columns down the reduced dimension. Sums keep float lanes short (at most 16
 * values per lane per block) and carry block totals in double lanes, so even a 1M-element sum is
 * accurate to a few ulp of the sum of magnitudes; sums that feed a logarithm add every term in double
 * and the logarithm is taken in double. */
#ifndef TB_SIMD_REDUCE_BODY_H
#define TB_SIMD_REDUCE_BODY_H

#include <float.h>
#include <math.h>

#include "kernels/simd/elementwise_body.h"

#define SIMD_ROW_BLOCK (64 * VF_LANES) /* row elements per float block: 16 per lane in 4 accumulators */
#define SIMD_BLOCK_ROWS 16             /* column rows per float block */
/* softmax rows at least this long (256 KiB) use the online-max variant: two sweeps over x and one
 * over y instead of three over a row that no longer stays in cache; shorter rows use max, exp+sum,
 * scale sweeps with one exp per element. */
#define SIMD_SOFTMAX_ONLINE_MIN 65536

/* ---- row helpers (contiguous x[0..n)) */

/* Sum as a double. */
static double simd_row_sum(const float *x, int64_t n) {
    vd total = vd_zero();
    int64_t i = 0;
    while (i < n) {
        const int64_t end = n - i > SIMD_ROW_BLOCK ? i + SIMD_ROW_BLOCK : n;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        for (; i + 4 * VF_LANES <= end; i += 4 * VF_LANES) {
            a0 = vf_add(a0, vf_load(x + i));
            a1 = vf_add(a1, vf_load(x + i + VF_LANES));
            a2 = vf_add(a2, vf_load(x + i + 2 * VF_LANES));
            a3 = vf_add(a3, vf_load(x + i + 3 * VF_LANES));
        }
        for (; i + VF_LANES <= end; i += VF_LANES)
            a0 = vf_add(a0, vf_load(x + i));
        if (i < end) {
            a1 = vf_add(a1, vf_load_part(x + i, end - i));
            i = end;
        }
        total = vd_add_vf(total, vf_add(vf_add(a0, a1), vf_add(a2, a3)));
    }
    return vd_hsum(total);
}

/* Sum of d and of d^2 for d = x - shift, as doubles (the two-pass variance's second pass). */
static void simd_row_deviation_sums(const float *x, int64_t n, float shift, double *sum_d, double *sum_d2) {
    vd total = vd_zero(), total2 = vd_zero();
    const vf c = vf_set1(shift);
    int64_t i = 0;
    while (i < n) {
        const int64_t end = n - i > SIMD_ROW_BLOCK ? i + SIMD_ROW_BLOCK : n;
        /* four chains of each sum: the FMA latency, not the loads, would bound a single chain */
        vf s0 = vf_zero(), s1 = vf_zero(), s2 = vf_zero(), s3 = vf_zero();
        vf q0 = vf_zero(), q1 = vf_zero(), q2 = vf_zero(), q3 = vf_zero();
        for (; i + 4 * VF_LANES <= end; i += 4 * VF_LANES) {
            vf d0 = vf_sub(vf_load(x + i), c), d1 = vf_sub(vf_load(x + i + VF_LANES), c);
            vf d2 = vf_sub(vf_load(x + i + 2 * VF_LANES), c), d3 = vf_sub(vf_load(x + i + 3 * VF_LANES), c);
            s0 = vf_add(s0, d0);
            s1 = vf_add(s1, d1);
            s2 = vf_add(s2, d2);
            s3 = vf_add(s3, d3);
            q0 = vf_fmadd(d0, d0, q0);
            q1 = vf_fmadd(d1, d1, q1);
            q2 = vf_fmadd(d2, d2, q2);
            q3 = vf_fmadd(d3, d3, q3);
        }
        for (; i < end; i += VF_LANES) { /* up to three vectors, the last maybe partial */
            const int64_t rest = end - i < VF_LANES ? end - i : VF_LANES;
            vf d = vf_select(vm_first(rest), vf_sub(vf_load_part(x + i, rest), c), vf_zero());
            s0 = vf_add(s0, d);
            q0 = vf_fmadd(d, d, q0);
        }
        s0 = vf_add(vf_add(s0, s1), vf_add(s2, s3));
        q0 = vf_add(vf_add(q0, q1), vf_add(q2, q3));
        total = vd_add_vf(total, s0);
        total2 = vd_add_vf(total2, q0);
    }
    *sum_d = vd_hsum(total);
    *sum_d2 = vd_hsum(total2);
}

/* Max (or min) of n >= 1 values; NaN when any is NaN. The tail re-reads the last full vector (for
 * n >= VF_LANES) or fills missing lanes with x[0], neither of which can change the result. */
SIMD_INLINE float simd_row_extreme(const float *x, int64_t n, bool is_min) {
    vf first = vf_set1(x[0]);
    vf a0 = first, a1 = first;
    vm nan = vm_none();
    int64_t i = 0;
    for (; i + 2 * VF_LANES <= n; i += 2 * VF_LANES) {
        vf v0 = vf_load(x + i), v1 = vf_load(x + i + VF_LANES);
        nan = vm_or(nan, vm_or(vf_isnan(v0), vf_isnan(v1)));
        a0 = is_min ? vf_min(a0, v0) : vf_max(a0, v0);
        a1 = is_min ? vf_min(a1, v1) : vf_max(a1, v1);
    }
    if (i < n) {
        vf v;
        if (n >= VF_LANES) {
            v = vf_load(x + n - VF_LANES);
            if (n - i > VF_LANES) {
                vf w = vf_load(x + i);
                nan = vm_or(nan, vf_isnan(w));
                a1 = is_min ? vf_min(a1, w) : vf_max(a1, w);
            }
        } else {
            v = vf_select(vm_first(n), vf_load_part(x, n), first);
        }
        nan = vm_or(nan, vf_isnan(v));
        a0 = is_min ? vf_min(a0, v) : vf_max(a0, v);
    }
    if (vm_any(nan) || isnan(x[0]))
        return NAN;
    return is_min ? vf_hmin(vf_min(a0, a1)) : vf_hmax(vf_max(a0, a1));
}

/* Index of the first element equal to target (or the first NaN when target is NaN); -1 if none. */
static int64_t simd_row_find(const float *x, int64_t n, float target) {
    const bool want_nan = isnan(target);
    const vf t = vf_set1(target);
    int64_t i = 0;
    for (; i < n; i += VF_LANES) {
        const int64_t rest = n - i < VF_LANES ? n - i : VF_LANES;
        vf v = rest == VF_LANES ? vf_load(x + i) : vf_load_part(x + i, rest);
        unsigned bits = vm_bits(vm_and(want_nan ? vf_isnan(v) : vf_eq(v, t), vm_first(rest)));
        if (bits)
            return i + __builtin_ctz(bits);
    }
    return -1;
}

/* Sum of exp(x - m) as a double. With store (softmax), y = exp(x - m) is written too (y may equal x) and
 * float lanes sum 16 terms per block: the quotient y / sum only needs the sum to an ulp or two.
 * Without store (log_softmax, logsumexp) every term goes straight into double lanes: log(sum) near 0
 * (one dominant term) would magnify a float lane's rounding of 1 + small. */
SIMD_INLINE double simd_row_exp_sum(const float *x, float *y, int64_t n, float m, bool store) {
    const vf mv = vf_set1(m);
    vd total = vd_zero();
    int64_t i = 0;
    while (i < n) {
        const int64_t end = n - i > SIMD_ROW_BLOCK ? i + SIMD_ROW_BLOCK : n;
        vf a0 = vf_zero(), a1 = vf_zero();
        for (; i + 2 * VF_LANES <= end; i += 2 * VF_LANES) {
            vf e0 = vmath_exp(vf_sub(vf_load(x + i), mv));
            vf e1 = vmath_exp(vf_sub(vf_load(x + i + VF_LANES), mv));
            if (store) {
                vf_store(y + i, e0);
                vf_store(y + i + VF_LANES, e1);
                a0 = vf_add(a0, e0);
                a1 = vf_add(a1, e1);
            } else {
                total = vd_add_vf(vd_add_vf(total, e0), e1);
            }
        }
        for (; i < end; i += VF_LANES) { /* the last one or two vectors, the last maybe partial */
            const int64_t rest = end - i < VF_LANES ? end - i : VF_LANES;
            vf e = vf_select(vm_first(rest), vmath_exp(vf_sub(vf_load_part(x + i, rest), mv)), vf_zero());
            if (store) {
                vf_store_part(y + i, e, rest);
                a0 = vf_add(a0, e);
            } else {
                total = vd_add_vf(total, e);
            }
        }
        if (store)
            total = vd_add_vf(total, vf_add(a0, a1));
    }
    return vd_hsum(total);
}

/* ---- column helpers: a strip of `cols` (<= VF_LANES) columns starting at x, rows `stride` apart */

static inline vf simd_col_load(const float *p, int64_t cols) {
    return cols == VF_LANES ? vf_load(p) : vf_load_part(p, cols);
}
static inline void simd_col_store(float *p, vf v, int64_t cols) {
    if (cols == VF_LANES)
        vf_store(p, v);
    else
        vf_store_part(p, v, cols);
}

static vf simd_col_sum(const float *x, int64_t len, int64_t stride, int64_t cols) {
    vd total = vd_zero();
    for (int64_t r = 0; r < len;) {
        const int64_t end = len - r > SIMD_BLOCK_ROWS ? r + SIMD_BLOCK_ROWS : len;
        vf acc = vf_zero();
        for (; r < end; r++)
            acc = vf_add(acc, simd_col_load(x + r * stride, cols));
        total = vd_add_vf(total, acc);
    }
    return vd_to_vf(total);
}

/* ---- column reductions that stream whole rows: accumulators for up to SIMD_COL_CHUNK neighbouring
 * columns live on the stack and every row segment is read contiguously (walking one strip of columns
 * down the rows instead would touch one cache line per row and leave the prefetchers little to do). */
#define SIMD_COL_CHUNK (64 * VF_LANES)

/* out[i] = sum_r x[r * inner + i] for i < cols (<= SIMD_COL_CHUNK); x points at the chunk's first column */
static void simd_cols_sum(const float *x, int64_t len, int64_t inner, int64_t cols, float *out) {
    float acc[SIMD_COL_CHUNK];
    double total[SIMD_COL_CHUNK];
    for (int64_t j = 0; j < cols; j++)
        total[j] = 0;
    for (int64_t r = 0; r < len;) {
        const int64_t end = len - r > SIMD_BLOCK_ROWS ? r + SIMD_BLOCK_ROWS : len;
        memcpy(acc, x + r * inner, (size_t)cols * sizeof(float));
        for (r++; r < end; r++) {
            const float *row = x + r * inner;
            int64_t j = 0;
            for (; j + VF_LANES <= cols; j += VF_LANES)
                vf_store(acc + j, vf_add(vf_load(acc + j), vf_load(row + j)));
            if (j < cols)
                vf_store_part(acc + j, vf_add(vf_load_part(acc + j, cols - j), vf_load_part(row + j, cols - j)), cols - j);
        }
        for (int64_t j = 0; j < cols; j++)
            total[j] += acc[j];
    }
    for (int64_t j = 0; j < cols; j++)
        out[j] = (float)total[j];
}

/* out[i] = max (min) over r of x[r * inner + i], NaN when any is NaN (kept sticky by the select) */
SIMD_INLINE void simd_cols_extreme(const float *x, int64_t len, int64_t inner, int64_t cols, float *out, bool is_min) {
    memcpy(out, x, (size_t)cols * sizeof(float));
    for (int64_t r = 1; r < len; r++) {
        const float *row = x + r * inner;
        for (int64_t j = 0; j < cols; j += VF_LANES) {
            const int64_t n = cols - j < VF_LANES ? cols - j : VF_LANES;
            vf acc = simd_col_load(out + j, n), v = simd_col_load(row + j, n);
            vf m = is_min ? vf_min(acc, v) : vf_max(acc, v); /* v when either is NaN */
            simd_col_store(out + j, vf_select(vf_isnan(acc), acc, m), n);
        }
    }
}

/* total[j] = sum over rows of exp(x[r * inner + j] - m[j]) for j < cols, each term added in double
 * (see simd_row_exp_sum); with store, y (same layout as x) = exp(x - m). total has room for cols
 * rounded up to VF_LANES; the padding is zeroed and ignored. */
static void simd_cols_exp_sum(const float *x, float *y, int64_t len, int64_t inner, int64_t cols, const float *m,
                              bool store, double *total) {
    const int64_t padded = (cols + VF_LANES - 1) / VF_LANES * VF_LANES;
    for (int64_t j = 0; j < padded; j++)
        total[j] = 0;
    for (int64_t r = 0; r < len; r++) {
        const float *row = x + r * inner;
        for (int64_t j = 0; j < cols; j += VF_LANES) {
            const int64_t n = cols - j < VF_LANES ? cols - j : VF_LANES;
            vf e = vmath_exp(vf_sub(simd_col_load(row + j, n), simd_col_load(m + j, n)));
            if (store)
                simd_col_store(y + r * inner + j, e, n);
            vd_store(total + j, vd_add_vf(vd_load(total + j), e));
        }
    }
}

/* softmax / log_softmax down the rows of a chunk of cols (<= SIMD_COL_CHUNK) columns, streaming rows:
 * max sweep, exp(x - m) sweep (stored for softmax) with double sums, then a scale (or shift) sweep */
static void simd_cols_softmax(const float *x, float *y, int64_t len, int64_t inner, int64_t cols, bool take_log) {
    float m[SIMD_COL_CHUNK], factor[SIMD_COL_CHUNK];
    double total[SIMD_COL_CHUNK];
    simd_cols_extreme(x, len, inner, cols, m, false);
    simd_cols_exp_sum(x, y, len, inner, cols, m, !take_log, total);
    for (int64_t j = 0; j < cols; j++)
        factor[j] = (float)(take_log ? log(total[j]) : 1.0 / total[j]);
    for (int64_t r = 0; r < len; r++) {
        const float *row = x + r * inner;
        float *out = y + r * inner;
        for (int64_t j = 0; j < cols; j += VF_LANES) {
            const int64_t n = cols - j < VF_LANES ? cols - j : VF_LANES;
            vf f = simd_col_load(factor + j, n);
            vf v = take_log ? vf_sub(vf_sub(simd_col_load(row + j, n), simd_col_load(m + j, n)), f)
                            : vf_mul(simd_col_load(out + j, n), f);
            simd_col_store(out + j, v, n);
        }
    }
}

/* ---- reduce kernels */

static void simd_reduce_sum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        if (inner == 1) {
            out[o] = (float)simd_row_sum(xo, len);
            continue;
        }
        for (int64_t i = 0; i < inner; i += SIMD_COL_CHUNK) {
            const int64_t cols = inner - i < SIMD_COL_CHUNK ? inner - i : SIMD_COL_CHUNK;
            simd_cols_sum(xo + i, len, inner, cols, out + o * inner + i);
        }
    }
}

SIMD_INLINE void simd_reduce_extreme(const float *x, int64_t outer, int64_t len, int64_t inner, float *out, bool is_min) {
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        if (inner == 1) {
            out[o] = simd_row_extreme(xo, len, is_min);
            continue;
        }
        for (int64_t i = 0; i < inner; i += SIMD_COL_CHUNK) {
            const int64_t cols = inner - i < SIMD_COL_CHUNK ? inner - i : SIMD_COL_CHUNK;
            simd_cols_extreme(xo + i, len, inner, cols, out + o * inner + i, is_min);
        }
    }
}
static void simd_reduce_max(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) { simd_reduce_extreme(x, outer, len, inner, out, false); }
static void simd_reduce_min(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) { simd_reduce_extreme(x, outer, len, inner, out, true); }

/* logsumexp = m + log(sum exp(x - m)), m the max; NaN -> NaN, m = +-inf -> m (all -inf gives -inf,
 * any +inf gives +inf). */
static void simd_reduce_logsumexp(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        if (inner == 1) {
            float m = simd_row_extreme(xo, len, false);
            out[o] = (isnan(m) || isinf(m)) ? m : (float)(m + log(simd_row_exp_sum(xo, NULL, len, m, false)));
            continue;
        }
        for (int64_t i = 0; i < inner; i += SIMD_COL_CHUNK) {
            const int64_t cols = inner - i < SIMD_COL_CHUNK ? inner - i : SIMD_COL_CHUNK;
            float m[SIMD_COL_CHUNK], m_safe[SIMD_COL_CHUNK];
            double total[SIMD_COL_CHUNK];
            simd_cols_extreme(xo + i, len, inner, cols, m, false);
            for (int64_t j = 0; j < cols; j++) /* a finite stand-in for NaN / inf maxima, patched below */
                m_safe[j] = (isnan(m[j]) || isinf(m[j])) ? 0.0f : m[j];
            simd_cols_exp_sum(xo + i, NULL, len, inner, cols, m_safe, false, total);
            for (int64_t j = 0; j < cols; j++)
                out[o * inner + i + j] = (isnan(m[j]) || isinf(m[j])) ? m[j] : (float)(m[j] + log(total[j]));
        }
    }
}

/* first index of the max (min); the first NaN wins */
SIMD_INLINE void simd_arg_extreme(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out, bool is_min) {
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        if (inner == 1) {
            int64_t index = simd_row_find(xo, len, simd_row_extreme(xo, len, is_min));
            out[o] = index < 0 ? 0 : index;
            continue;
        }
        if (len > INT32_MAX) { /* lane indices are int32; such a column is scanned one by one */
            for (int64_t i = 0; i < inner; i++) {
                int64_t best = 0;
                for (int64_t r = 1; r < len && !isnan(xo[best * inner + i]); r++) {
                    float v = xo[r * inner + i], b = xo[best * inner + i];
                    if (isnan(v) || (is_min ? v < b : v > b))
                        best = r;
                }
                out[o * inner + i] = best;
            }
            continue;
        }
        for (int64_t i = 0; i < inner; i += VF_LANES) {
            const int64_t cols = inner - i < VF_LANES ? inner - i : VF_LANES;
            vf best = simd_col_load(xo + i, cols);
            vi index = vi_set1(0);
            for (int64_t r = 1; r < len; r++) {
                vf v = simd_col_load(xo + r * inner + i, cols);
                vm better = is_min ? vf_lt(v, best) : vf_gt(v, best);
                better = vm_or(better, vm_andnot(vf_isnan(best), vf_isnan(v)));
                best = vf_select(better, v, best);
                index = vi_select(better, vi_set1((int32_t)r), index);
            }
            int32_t lanes[VF_LANES];
            vi_store(lanes, index);
            for (int64_t c = 0; c < cols; c++)
                out[o * inner + i + c] = lanes[c];
        }
    }
}
static void simd_argmax(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out) { simd_arg_extreme(x, outer, len, inner, out, false); }
static void simd_argmin(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out) { simd_arg_extreme(x, outer, len, inner, out, true); }

/* Two-pass variance with the mean's rounding corrected: mean0 = fl(sum/len), then with d = x - mean0,
 * var = (sum d^2 - (sum d)^2 / len) / (len - correction) and mean = mean0 + sum d / len. */
static void simd_var(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t correction, float *mean_out,
                     float *var_out) {
    const double dof = (double)(len - correction);
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        if (inner == 1) {
            float mean0 = (float)(simd_row_sum(xo, len) / (double)len);
            double sum_d, sum_d2;
            simd_row_deviation_sums(xo, len, mean0, &sum_d, &sum_d2);
            double var = (sum_d2 - sum_d * sum_d / (double)len) / dof;
            var_out[o] = dof > 0 ? (float)(var < 0 ? 0 : var) : NAN;
            if (mean_out) /* an infinite mean0 makes sum_d NaN: keep the infinity */
                mean_out[o] = isfinite(mean0) ? (float)(mean0 + sum_d / (double)len) : mean0;
            continue;
        }
        for (int64_t i = 0; i < inner; i += VF_LANES) {
            const int64_t cols = inner - i < VF_LANES ? inner - i : VF_LANES;
            vf mean0 = vf_div(simd_col_sum(xo + i, len, inner, cols), vf_set1((float)len));
            vd sd = vd_zero(), sd2 = vd_zero();
            for (int64_t r = 0; r < len;) {
                const int64_t end = len - r > SIMD_BLOCK_ROWS ? r + SIMD_BLOCK_ROWS : len;
                vf s = vf_zero(), q = vf_zero();
                for (; r < end; r++) {
                    vf d = vf_sub(simd_col_load(xo + r * inner + i, cols), mean0);
                    s = vf_add(s, d);
                    q = vf_fmadd(d, d, q);
                }
                sd = vd_add_vf(sd, s);
                sd2 = vd_add_vf(sd2, q);
            }
            /* finish in double per lane through small arrays: cheap next to the len-long passes */
            float m0[VF_LANES], s_f[VF_LANES];
            double s_lanes[VF_LANES], q_lanes[VF_LANES];
            vf_store(m0, mean0);
            memcpy(s_lanes, &sd, sizeof s_lanes);
            memcpy(q_lanes, &sd2, sizeof q_lanes);
            for (int64_t c = 0; c < cols; c++) {
                double var = (q_lanes[c] - s_lanes[c] * s_lanes[c] / (double)len) / dof;
                var_out[o * inner + i + c] = dof > 0 ? (float)(var < 0 ? 0 : var) : NAN;
                s_f[c] = isfinite(m0[c]) ? (float)(m0[c] + s_lanes[c] / (double)len) : m0[c];
            }
            if (mean_out)
                memcpy(mean_out + o * inner + i, s_f, (size_t)cols * sizeof(float));
        }
    }
}

/* ---- softmax */

/* Rows that stay in cache: max sweep, exp(x - m) sweep (stored for softmax) with the sum, scale sweep. */
static void simd_softmax_row(const float *x, float *y, int64_t n, bool take_log) {
    const float m = simd_row_extreme(x, n, false);
    const vf mv = vf_set1(m);
    if (!take_log) {
        const vf inv = vf_set1((float)(1.0 / simd_row_exp_sum(x, y, n, m, true)));
        int64_t i = 0;
        for (; i + VF_LANES <= n; i += VF_LANES)
            vf_store(y + i, vf_mul(vf_load(y + i), inv));
        if (i < n)
            vf_store_part(y + i, vf_mul(vf_load_part(y + i, n - i), inv), n - i);
    } else {
        const vf ls = vf_set1((float)log(simd_row_exp_sum(x, NULL, n, m, false)));
        int64_t i = 0;
        for (; i + VF_LANES <= n; i += VF_LANES)
            vf_store(y + i, vf_sub(vf_sub(vf_load(x + i), mv), ls));
        if (i < n)
            vf_store_part(y + i, vf_sub(vf_sub(vf_load_part(x + i, n - i), mv), ls), n - i);
    }
}

/* Long rows: one sweep keeps a per-lane running max m and a double per-lane sum s rescaled by
 * exp(m_old - m_new) once per 4-vector group; a second sweep writes. A NaN anywhere makes s NaN and so
 * every output NaN; a lane that has seen only -inf keeps s = 0 (its terms use a finite stand-in max). */
static void simd_softmax_row_online(const float *x, float *y, int64_t n, bool take_log) {
    const vf minus_inf = vf_set1(-INFINITY);
    vf m = minus_inf;
    vd s = vd_zero();
    int64_t i = 0;
    while (i < n) {
        vf v[4];
        int64_t step = 4 * VF_LANES;
        if (i + 4 * VF_LANES <= n) {
            for (int k = 0; k < 4; k++)
                v[k] = vf_load(x + i + k * VF_LANES);
        } else {
            const int64_t rest = n - i < VF_LANES ? n - i : VF_LANES;
            v[0] = vf_select(vm_first(rest), vf_load_part(x + i, rest), minus_inf);
            v[1] = v[2] = v[3] = minus_inf;
            step = rest;
        }
        vf block_max = vf_max(vf_max(v[0], v[1]), vf_max(v[2], v[3]));
        vf m_new = vf_max(m, block_max);
        vf scale = vf_select(vf_eq(m, m_new), vf_set1(1.0f), vmath_exp(vf_sub(m, m_new)));
        vf m_safe = vf_select(vf_eq(m_new, minus_inf), vf_zero(), m_new);
        s = vd_fmadd_vf(s, scale, vmath_exp(vf_sub(v[0], m_safe)));
        s = vd_add_vf(s, vmath_exp(vf_sub(v[1], m_safe)));
        s = vd_add_vf(s, vmath_exp(vf_sub(v[2], m_safe)));
        s = vd_add_vf(s, vmath_exp(vf_sub(v[3], m_safe)));
        m = m_new;
        i += step;
    }
    /* combine lanes: S = sum_l s_l exp(m_l - M) */
    float m_lanes[VF_LANES];
    double s_lanes[VF_LANES];
    vf_store(m_lanes, m);
    memcpy(s_lanes, &s, sizeof s_lanes);
    float big = -INFINITY;
    for (int l = 0; l < VF_LANES; l++)
        big = m_lanes[l] > big ? m_lanes[l] : big;
    double total = 0;
    for (int l = 0; l < VF_LANES; l++)
        total += m_lanes[l] == -INFINITY ? 0.0 : s_lanes[l] * exp((double)m_lanes[l] - (double)big);
    if (big == -INFINITY)
        total = NAN; /* all -inf: NaN, as PyTorch */
    const vf mv = vf_set1(big);
    const vf factor = vf_set1((float)(take_log ? log(total) : 1.0 / total));
    for (i = 0; i < n; i += VF_LANES) {
        const int64_t rest = n - i < VF_LANES ? n - i : VF_LANES;
        vf d = vf_sub(simd_col_load(x + i, rest), mv);
        simd_col_store(y + i, take_log ? vf_sub(d, factor) : vf_mul(vmath_exp(d), factor), rest);
    }
}

static void simd_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool take_log) {
    for (int64_t o = 0; o < outer; o++) {
        const float *xo = x + o * len * inner;
        float *yo = y + o * len * inner;
        if (inner == 1) {
            if (len >= SIMD_SOFTMAX_ONLINE_MIN)
                simd_softmax_row_online(xo, yo, len, take_log);
            else
                simd_softmax_row(xo, yo, len, take_log);
            continue;
        }
        for (int64_t i = 0; i < inner; i += SIMD_COL_CHUNK) {
            const int64_t cols = inner - i < SIMD_COL_CHUNK ? inner - i : SIMD_COL_CHUNK;
            simd_cols_softmax(xo + i, yo + i, len, inner, cols, take_log);
        }
    }
}

#endif
