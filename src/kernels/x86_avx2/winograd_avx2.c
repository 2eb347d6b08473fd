/* The Winograd F(2x2, 3x3) transforms (kernels/simd/winograd_body.h) compiled for AVX2 (this folder's flags). */
#include "kernels/simd/winograd_body.h"

void tb_winograd_input_avx2(const tb_winograd_geometry *geo, const float *x, int64_t t0, int64_t t1, int64_t channels,
                           int nr, float *v, int64_t v_xi_stride, float *work) {
    winograd_input(geo, x, t0, t1, channels, nr, v, v_xi_stride, work);
}

bool tb_winograd_output_avx2(const tb_winograd_geometry *geo, const float *m, int64_t m_xi_stride, int64_t ldm,
                            int rows, int64_t t0, int64_t t1, const float *bias, tb_activation activation,
                            const float *residual, float *y, tb_gemm_epilogue_fn epilogue, float *work) {
    return winograd_output(geo, m, m_xi_stride, ldm, rows, t0, t1, bias, activation, residual, y, epilogue, work);
}

void tb_winograd_filters_avx2(const float *g, int64_t count, const float *scale, float *u, int64_t u_stride) {
    winograd_filters(g, count, scale, u, u_stride);
}
