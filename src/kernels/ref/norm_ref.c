/* Scalar reference LayerNorm, RMSNorm and rotary embedding (see kernels/elementwise.h). Statistics are
 * computed in double with two passes, and each output is rounded once. */
#include <math.h>

#include "kernels/ref/elementwise_ref.h"

void tb_ref_layer_norm(const float *x, const float *weight, const float *bias, float *y, int64_t rows, int64_t len,
                       float eps, float *mean_out, float *rstd_out) {
    for (int64_t row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        float *yr = y + row * len;
        double s = 0, s2 = 0;
        for (int64_t i = 0; i < len; i++)
            s += xr[i];
        const double mean = s / (double)len;
        for (int64_t i = 0; i < len; i++) {
            double d = xr[i] - mean;
            s2 += d * d;
        }
        const float rstd = (float)(1.0 / sqrt(s2 / (double)len + (double)eps));
        for (int64_t i = 0; i < len; i++) {
            double v = ((double)xr[i] - mean) * rstd;
            if (weight)
                v *= weight[i];
            if (bias)
                v += bias[i];
            yr[i] = (float)v;
        }
        if (mean_out)
            mean_out[row] = (float)mean;
        if (rstd_out)
            rstd_out[row] = rstd;
    }
}

void tb_ref_rms_norm(const float *x, const float *weight, float *y, int64_t rows, int64_t len, float eps) {
    for (int64_t row = 0; row < rows; row++) {
        const float *xr = x + row * len;
        float *yr = y + row * len;
        double s2 = 0;
        for (int64_t i = 0; i < len; i++)
            s2 += (double)xr[i] * xr[i];
        const float rstd = (float)(1.0 / sqrt(s2 / (double)len + (double)eps));
        for (int64_t i = 0; i < len; i++)
            yr[i] = (float)((double)xr[i] * rstd * (weight ? weight[i] : 1.0f));
    }
}

/* (a, b) -> (a cos - b sin, b cos + a sin); each output rounded once from double */
void tb_ref_rope(const float *x, const float *cos, const float *sin, float *y, int64_t half, bool interleaved) {
    for (int64_t i = 0; i < half; i++) {
        const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
        const double a = x[ia], b = x[ib], c = cos[i], s = sin[i];
        y[ia] = (float)(a * c - b * s);
        y[ib] = (float)(b * c + a * s);
    }
}
