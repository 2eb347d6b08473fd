/* Scalar reference reductions (sum, max, min, logsumexp, argmax/argmin, var) and softmax over
 * [outer, len, inner] (see kernels/elementwise.h). Sums, exponentials and statistics are carried in
 * double and rounded once, so these are the accuracy yardstick for the SIMD versions. */
#include <math.h>

#include "kernels/ref/elementwise_ref.h"

/* x[(o * len + r) * inner + i] */
static inline float at(const float *x, int64_t o, int64_t r, int64_t i, int64_t len, int64_t inner) {
    return x[(o * len + r) * inner + i];
}

void tb_ref_reduce_sum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s0 = 0, s1 = 0; /* two chains keep the loop from being latency bound */
            int64_t r = 0;
            for (; r + 1 < len; r += 2) {
                s0 += at(x, o, r, i, len, inner);
                s1 += at(x, o, r + 1, i, len, inner);
            }
            if (r < len)
                s0 += at(x, o, r, i, len, inner);
            out[o * inner + i] = (float)(s0 + s1);
        }
}

/* NaN if any element is NaN */
static float extreme(const float *x, int64_t o, int64_t i, int64_t len, int64_t inner, bool is_min) {
    float best = at(x, o, 0, i, len, inner);
    for (int64_t r = 0; r < len; r++) {
        float v = at(x, o, r, i, len, inner);
        if (isnan(v))
            return v;
        if (is_min ? v < best : v > best)
            best = v;
    }
    return best;
}

void tb_ref_reduce_max(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            out[o * inner + i] = extreme(x, o, i, len, inner, false);
}

void tb_ref_reduce_min(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            out[o * inner + i] = extreme(x, o, i, len, inner, true);
}

/* sum over the column of exp(x - m), in double */
static double exp_sum(const float *x, int64_t o, int64_t i, int64_t len, int64_t inner, double m) {
    double s = 0;
    for (int64_t r = 0; r < len; r++)
        s += exp((double)at(x, o, r, i, len, inner) - m);
    return s;
}

void tb_ref_reduce_logsumexp(const float *x, int64_t outer, int64_t len, int64_t inner, float *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float m = extreme(x, o, i, len, inner, false);
            /* NaN stays NaN; all -inf gives -inf; any +inf gives +inf */
            out[o * inner + i] = (isnan(m) || isinf(m)) ? m : (float)(m + log(exp_sum(x, o, i, len, inner, m)));
        }
}

/* first index of the extreme; the first NaN wins */
static int64_t arg_extreme(const float *x, int64_t o, int64_t i, int64_t len, int64_t inner, bool is_min) {
    int64_t best = 0;
    float best_value = at(x, o, 0, i, len, inner);
    if (isnan(best_value))
        return 0;
    for (int64_t r = 1; r < len; r++) {
        float v = at(x, o, r, i, len, inner);
        if (isnan(v))
            return r;
        if (is_min ? v < best_value : v > best_value) {
            best = r;
            best_value = v;
        }
    }
    return best;
}

void tb_ref_argmax(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            out[o * inner + i] = arg_extreme(x, o, i, len, inner, false);
}

void tb_ref_argmin(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            out[o * inner + i] = arg_extreme(x, o, i, len, inner, true);
}

/* two passes in double: mean, then sum of squared deviations */
void tb_ref_var(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t correction, float *mean_out,
                float *var_out) {
    const double dof = (double)(len - correction);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0, s2 = 0;
            for (int64_t r = 0; r < len; r++)
                s += at(x, o, r, i, len, inner);
            const double mean = s / (double)len;
            for (int64_t r = 0; r < len; r++) {
                double d = at(x, o, r, i, len, inner) - mean;
                s2 += d * d;
            }
            var_out[o * inner + i] = dof > 0 ? (float)(s2 / dof) : NAN;
            if (mean_out)
                mean_out[o * inner + i] = (float)mean;
        }
}

/* softmax y = exp(x - m) / sum, log_softmax y = (x - m) - log(sum), m the max, in double. A NaN, a +inf
 * or a row of all -inf makes the whole row NaN (x - m is NaN somewhere), as in PyTorch. y may equal x:
 * every x of the column is read before the first write. */
void tb_ref_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool log_softmax) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float m = extreme(x, o, i, len, inner, false);
            const double s = exp_sum(x, o, i, len, inner, m);
            const double ls = log(s);
            for (int64_t r = 0; r < len; r++) {
                const int64_t k = (o * len + r) * inner + i;
                const double d = (double)x[k] - (double)m;
                y[k] = (float)(log_softmax ? d - ls : exp(d) / s);
            }
        }
}
