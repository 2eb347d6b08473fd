/* Internal: the scalar reference kernels of kernels/elementwise.h, split over elementwise_ref.c,
 * reduce_ref.c and norm_ref.c, gathered into tb_elementwise_kernels_ref by elementwise_ref.c.
 * The reference favours accuracy over speed: transcendental results are computed in double and rounded
 * once, sums and statistics accumulate in double. */
#ifndef TB_KERNELS_REF_ELEMENTWISE_REF_H
#define TB_KERNELS_REF_ELEMENTWISE_REF_H

#include "kernels/elementwise.h"

void tb_ref_reduce_sum(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
void tb_ref_reduce_max(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
void tb_ref_reduce_min(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
void tb_ref_reduce_logsumexp(const float *x, int64_t outer, int64_t len, int64_t inner, float *out);
void tb_ref_argmax(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out);
void tb_ref_argmin(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t *out);
void tb_ref_var(const float *x, int64_t outer, int64_t len, int64_t inner, int64_t correction, float *mean_out,
                float *var_out);
void tb_ref_softmax(const float *x, float *y, int64_t outer, int64_t len, int64_t inner, bool log);

void tb_ref_layer_norm(const float *x, const float *weight, const float *bias, float *y, int64_t rows, int64_t len,
                       float eps, float *mean_out, float *rstd_out);
void tb_ref_rms_norm(const float *x, const float *weight, float *y, int64_t rows, int64_t len, float eps);
void tb_ref_rope(const float *x, const float *cos, const float *sin, float *y, int64_t half, bool interleaved);

#endif
