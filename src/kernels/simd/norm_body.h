/* LayerNorm, RMSNorm and rotary embedding written once against the float-vector API of the including
 * ISA (see vec_math.h); all static. Norm rows are processed in cache-resident sweeps: LayerNorm reads a
 * row three times (sum, then deviations, then write) so that a large mean costs no accuracy; RMSNorm
 * twice (sum of squares, then write). */
#ifndef TB_SIMD_NORM_BODY_H
#define TB_SIMD_NORM_BODY_H

#include "kernels/simd/reduce_body.h"

/* y = ((x - mean_hi) - mean_lo) * scale + shift over one row, where scale/shift are rstd*weight and
 * bias (or rstd and 0 when absent: read from `ones`/`zeros` with a pointer increment of 0). */
static void simd_layer_norm_write(const float *x, const float *weight, const float *bias, float *y, int64_t n,
                                  float mean_hi, float mean_lo, float rstd) {
    float ones[VF_LANES], zeros[VF_LANES];
    vf_store(ones, vf_set1(1.0f));
    vf_store(zeros, vf_zero());
    const int64_t w_inc = weight ? VF_LANES : 0, b_inc = bias ? VF_LANES : 0;
    const float *w = weight ? weight : ones, *b = bias ? bias : zeros;
    const vf mh = vf_set1(mean_hi), ml = vf_set1(mean_lo), r = vf_set1(rstd);
    int64_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES, w += w_inc, b += b_inc) {
        vf d = vf_sub(vf_sub(vf_load(x + i), mh), ml);
        vf_store(y + i, vf_fmadd(d, vf_mul(r, vf_load(w)), vf_load(b)));
    }
    if (i < n) {
        const int64_t rest = n - i;
        vf d = vf_sub(vf_sub(vf_load_part(x + i, rest), mh), ml);
        vf_store_part(y + i, vf_fmadd(d, vf_mul(r, vf_load_part(w, rest)), vf_load_part(b, rest)), rest);
    }
}

/* mean0 = fl(sum/len); with d = x - mean0: mean = mean0 + sum(d)/len (kept as mean0 + mean_lo so that
 * x - mean is exact to an ulp even when |mean| >> std), var = sum(d^2)/len - (sum(d)/len)^2 (biased). */
static void simd_layer_norm(const float *x, const float *weight, const float *bias, float *y, int64_t rows, int64_t len,
                            float eps, float *mean_out, float *rstd_out) {
    for (int64_t row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        const float mean0 = (float)(simd_row_sum(xr, len) / (double)len);
        double sum_d, sum_d2;
        simd_row_deviation_sums(xr, len, mean0, &sum_d, &sum_d2);
        const double shift = sum_d / (double)len;
        double var = sum_d2 / (double)len - shift * shift;
        if (var < 0)
            var = 0;
        const float rstd = (float)(1.0 / sqrt(var + (double)eps));
        simd_layer_norm_write(xr, weight, bias, y + row * len, len, mean0, (float)shift, rstd);
        if (mean_out) /* an infinite mean0 makes shift NaN: keep the infinity */
            mean_out[row] = isfinite(mean0) ? (float)(mean0 + shift) : mean0;
        if (rstd_out)
            rstd_out[row] = rstd;
    }
}

/* sum of x^2 over a row as a double (float lanes per block, like simd_row_sum) */
static double simd_row_sum_squares(const float *x, int64_t n) {
    vd total = vd_zero();
    int64_t i = 0;
    while (i < n) {
        const int64_t end = n - i > SIMD_ROW_BLOCK ? i + SIMD_ROW_BLOCK : n;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        for (; i + 4 * VF_LANES <= end; i += 4 * VF_LANES) {
            vf v0 = vf_load(x + i), v1 = vf_load(x + i + VF_LANES);
            vf v2 = vf_load(x + i + 2 * VF_LANES), v3 = vf_load(x + i + 3 * VF_LANES);
            a0 = vf_fmadd(v0, v0, a0);
            a1 = vf_fmadd(v1, v1, a1);
            a2 = vf_fmadd(v2, v2, a2);
            a3 = vf_fmadd(v3, v3, a3);
        }
        for (; i < end; i += VF_LANES) {
            const int64_t rest = end - i < VF_LANES ? end - i : VF_LANES;
            vf v = vf_load_part(x + i, rest);
            a0 = vf_fmadd(v, v, a0);
        }
        total = vd_add_vf(total, vf_add(vf_add(a0, a1), vf_add(a2, a3)));
    }
    return vd_hsum(total);
}

/* y = (x * rstd) * weight, rstd = 1/sqrt(mean(x^2) + eps) */
static void simd_rms_norm(const float *x, const float *weight, float *y, int64_t rows, int64_t len, float eps) {
    for (int64_t row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        float *yr = y + row * len;
        const vf r = vf_set1((float)(1.0 / sqrt(simd_row_sum_squares(xr, len) / (double)len + (double)eps)));
        int64_t i = 0;
        if (weight) {
            for (; i + VF_LANES <= len; i += VF_LANES)
                vf_store(yr + i, vf_mul(vf_mul(vf_load(xr + i), r), vf_load(weight + i)));
            if (i < len)
                vf_store_part(yr + i, vf_mul(vf_mul(vf_load_part(xr + i, len - i), r), vf_load_part(weight + i, len - i)), len - i);
        } else {
            for (; i + VF_LANES <= len; i += VF_LANES)
                vf_store(yr + i, vf_mul(vf_load(xr + i), r));
            if (i < len)
                vf_store_part(yr + i, vf_mul(vf_load_part(xr + i, len - i), r), len - i);
        }
    }
}

/* (a, b) -> (a cos - b sin, b cos + a sin) for the pairs of one row (see elementwise.h) */
static void simd_rope(const float *x, const float *cos, const float *sin, float *y, int64_t half, bool interleaved) {
    int64_t i = 0;
    if (!interleaved) {
        for (; i < half; i += VF_LANES) {
            const int64_t rest = half - i < VF_LANES ? half - i : VF_LANES;
            vf a = simd_col_load(x + i, rest), b = simd_col_load(x + half + i, rest);
            vf c = simd_col_load(cos + i, rest), s = simd_col_load(sin + i, rest);
            vf y0 = vf_fmsub(a, c, vf_mul(b, s));
            vf y1 = vf_fmadd(b, c, vf_mul(a, s));
            simd_col_store(y + i, y0, rest);
            simd_col_store(y + half + i, y1, rest);
        }
        return;
    }
    /* interleaved: VF_LANES/2 pairs per vector; even lanes a*c - b*s, odd lanes b*c + a*s */
    const int64_t pairs_per_vec = VF_LANES / 2;
    for (; i + pairs_per_vec <= half; i += pairs_per_vec) {
        vf v = vf_load(x + 2 * i);
        vf c = vf_load_dup_pairs(cos + i), s = vf_load_dup_pairs(sin + i);
        vf_store(y + 2 * i, vf_fmaddsub(v, c, vf_mul(vf_swap_pairs(v), s)));
    }
    if (i < half) {
        const int64_t rest = half - i;
        vf v = vf_load_part(x + 2 * i, 2 * rest);
        vf c = vf_load_dup_pairs_part(cos + i, rest), s = vf_load_dup_pairs_part(sin + i, rest);
        vf_store_part(y + 2 * i, vf_fmaddsub(v, c, vf_mul(vf_swap_pairs(v), s)), 2 * rest);
    }
}

#endif
